//! The shim's host tracker counts exactly. One test function on purpose: the
//! tracker's counters are process-wide, so checks must not run in parallel.
#![cfg(feature = "builtin")]
use tch::{Device, Kind, Tensor};
use vramprobe::measure::child::meter::MemoryMeter;
use vramprobe::measure::child::shim;
use vramprobe::measure::child::workload::Workload;
use vramprobe::record::workload::{OptimizerKind, WorkloadConfig};

/// Sizes from the data types and the architecture, the same on every machine.
const MATRIX_BYTES: u64 = 1024 * 1024 * 4;
const SMALL_DOUBLE_BYTES: u64 = 3 * 5 * 8;
/// torchvision's resnet18 parameter count, in f32.
const RESNET18_PARAMETERS: i64 = 11_689_512;
const RESNET18_PARAMETER_BYTES: u64 = RESNET18_PARAMETERS as u64 * 4;
/// Its batch norms' running mean and variance over 4,800 channels, in f32.
const RESNET18_BUFFER_BYTES: u64 = 2 * 4_800 * 4;

#[test]
fn host_tracking_counts_exact_bytes() {
    let (meter, _) = MemoryMeter::open(vramprobe::record::device::Device::Cpu).unwrap();
    let baseline = shim::host_stats().current;

    // A 1024 x 1024 f32 tensor is exactly 4 MiB.
    shim::host_reset_peak();
    let t = Tensor::zeros([1024, 1024], (Kind::Float, Device::Cpu));
    assert_eq!(shim::host_stats().current - baseline, MATRIX_BYTES);
    let u = Tensor::zeros([3, 5], (Kind::Double, Device::Cpu));
    assert_eq!(shim::host_stats().current - baseline, MATRIX_BYTES + SMALL_DOUBLE_BYTES);
    drop(t);
    drop(u);
    let after = shim::host_stats();
    assert_eq!(after.current, baseline, "current returns to the baseline when tensors are dropped");
    assert_eq!(after.peak - baseline, MATRIX_BYTES + SMALL_DOUBLE_BYTES);

    // resnet18's parameters plus its batch norms' running statistics.
    let config = WorkloadConfig {
        model: "resnet18".into(),
        input: vec![3, 32, 32],
        classes: 1000,
        optimizer: OptimizerKind::Adam,
        lr: 1e-3,
        precision: Default::default(),
        mode: Default::default(),
    };
    let before = meter.current_bytes();
    let mut workload = Workload::new(config, vramprobe::record::device::Device::Cpu).unwrap();
    assert_eq!(workload.parameters() as i64, RESNET18_PARAMETERS);
    assert_eq!(workload.parameter_bytes() as u64, RESNET18_PARAMETER_BYTES);
    assert_eq!(meter.current_bytes() - before, RESNET18_PARAMETER_BYTES + RESNET18_BUFFER_BYTES);

    // After a step, gradients and Adam's two moments stay: 3 more copies of the parameters.
    workload.step(2).unwrap();
    assert_eq!(
        meter.current_bytes() - before,
        RESNET18_PARAMETER_BYTES + RESNET18_BUFFER_BYTES + 3 * RESNET18_PARAMETER_BYTES
    );
}
