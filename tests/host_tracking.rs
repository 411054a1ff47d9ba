//! The shim's host tracker counts exactly. One test function on purpose: the
//! tracker's counters are process-wide, so checks must not run in parallel.
use tch::{Device, Kind, Tensor};
use vramprobe::device::probe::Probe;
use vramprobe::shim;
use vramprobe::workload::{OptimizerKind, Workload, WorkloadConfig};

#[test]
fn host_tracking_counts_exact_bytes() {
    let (probe, _) = Probe::open(vramprobe::device::Device::Cpu).unwrap();
    let baseline = shim::host_stats().current;

    // A 1024 x 1024 f32 tensor is exactly 4 MiB.
    shim::host_reset_peak();
    let t = Tensor::zeros([1024, 1024], (Kind::Float, Device::Cpu));
    assert_eq!(shim::host_stats().current - baseline, 4_194_304);
    let u = Tensor::zeros([3, 5], (Kind::Double, Device::Cpu));
    assert_eq!(shim::host_stats().current - baseline, 4_194_304 + 120);
    drop(t);
    drop(u);
    let after = shim::host_stats();
    assert_eq!(after.current, baseline, "current returns to the baseline when tensors are dropped");
    assert_eq!(after.peak - baseline, 4_194_304 + 120);

    // resnet18: 11,689,512 parameters (46,758,048 bytes) plus batch-norm
    // running mean and variance over 4,800 channels (38,400 bytes).
    let config = WorkloadConfig {
        model: "resnet18".into(),
        input: vec![3, 32, 32],
        classes: 1000,
        optimizer: OptimizerKind::Adam,
        lr: 1e-3,
        precision: Default::default(),
        mode: Default::default(),
    };
    let before = probe.current_bytes();
    let mut workload = Workload::new(config, vramprobe::device::Device::Cpu).unwrap();
    assert_eq!(workload.parameters(), 11_689_512);
    assert_eq!(workload.parameter_bytes(), 46_758_048);
    assert_eq!(probe.current_bytes() - before, 46_796_448);

    // After a step, gradients and Adam's two moments stay: 3 more copies of the parameters.
    workload.step(2).unwrap();
    assert_eq!(probe.current_bytes() - before, 46_796_448 + 3 * 46_758_048);
}
