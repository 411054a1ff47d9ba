//! The companion trainer: accumulation math, a real OOM back-off under a CPU
//! capacity, plan errors, and exact resume from a checkpoint.
#![cfg(feature = "builtin")]
use std::path::Path;

use common::{capacity_for_max, vramprobe};
use vramprobe::measure::child::data::Dataset;
use vramprobe::measure::child::workload::Workload;
use vramprobe::record::device::Device;
use vramprobe::record::workload::{OptimizerKind, WorkloadConfig};
use vramprobe::report::train_log::{TrainEvent, TrainRow};
use vramprobe::train::accumulate;

/// mobilenet_v2's 3,504,872 parameters (torchvision's count) in f32, plus half again.
const MOBILENET_V2_PARAMETER_BYTES: u64 = 3_504_872 * 4 * 3 / 2;

const HEADER: &str = "schema_version,model,input,classes,device,optimizer,recommended_batch";

use crate::common;

fn write_plan(dir: &Path, row: &str) -> std::path::PathBuf {
    let path = dir.join("plan.csv");
    std::fs::write(&path, format!("{HEADER}\n{row}\n")).unwrap();
    path
}

fn read_log(path: &Path) -> Vec<TrainRow> {
    csv::Reader::from_path(path).unwrap().deserialize().collect::<Result<_, _>>().unwrap()
}

fn workload(seed: i64) -> Workload {
    tch::manual_seed(seed);
    let config = WorkloadConfig {
        model: "resnet18".into(),
        input: vec![3, 32, 32],
        classes: 10,
        optimizer: OptimizerKind::Sgd,
        lr: 0.1,
        precision: Default::default(),
        mode: Default::default(),
    };
    let mut w = Workload::new(config, Device::Cpu).unwrap();
    // Eval mode: batch statistics would differ between a batch and its parts.
    w.set_train(false);
    w
}

#[test]
fn accumulated_micro_batches_give_the_gradient_of_the_whole_batch() {
    let data = Dataset::Synthetic { input: vec![3, 32, 32], classes: 10, size: 64 };
    let indices: Vec<usize> = (0..8).collect();
    let mut whole = workload(7);
    let loss_whole = accumulate(&mut whole, &data, &indices, 8, 1).unwrap();
    for micro in [4, 3] {
        let mut parts = workload(7);
        let loss_parts = accumulate(&mut parts, &data, &indices, micro, 1).unwrap();
        assert!((loss_whole - loss_parts).abs() < 1e-5, "micro {micro}: loss {loss_whole} vs {loss_parts}");
        let (a, b) = (whole.var_store().trainable_variables(), parts.var_store().trainable_variables());
        for (x, y) in a.iter().zip(&b) {
            let (gx, gy) = (x.grad(), y.grad());
            let scale = gx.abs().max().double_value(&[]).max(1e-6);
            let diff = (&gx - &gy).abs().max().double_value(&[]);
            assert!(diff / scale < 1e-4, "micro {micro}: gradients differ by {diff} (scale {scale})");
        }
    }
}

#[test]
fn a_real_oom_under_a_cpu_capacity_backs_off_and_keeps_the_effective_batch() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), "1,mobilenet_v2,3x32x32,10,cpu,sgd,32");
    let log = dir.path().join("train.csv");
    // A capacity where batch 12 is the most that fits here: 32 runs out, 8 fits.
    let workload = ["--model", "mobilenet_v2", "--input", "3x32x32", "--classes", "10", "--optimizer", "sgd"];
    let capacity = capacity_for_max(&[&workload[..], &["--device", "cpu"]].concat(), (2, 4), 12, 0.0);
    let out = vramprobe()
        .args(["train", "--plan"])
        .arg(&plan)
        .args(["--steps", "3", "--log-every", "1", "--capacity", &capacity.to_string(), "--log"])
        .arg(&log)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("back-off:") && stderr.contains("effective batch 32 unchanged"), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("Exception raised"), "{stderr}");
    let rows = read_log(&log);
    let backoff = rows.iter().find(|r| r.event == TrainEvent::Backoff).expect("a back-off row");
    assert!(backoff.message.contains("out of memory"), "{}", backoff.message);
    assert_eq!((backoff.micro_batch * backoff.accumulation, backoff.effective_batch), (32, 32));
    let steps: Vec<&TrainRow> = rows.iter().filter(|r| r.event == TrainEvent::Step).collect();
    assert_eq!(steps.len(), 3);
    assert!(steps.iter().all(|r| r.effective_batch == 32 && r.micro_batch < 32 && r.loss.unwrap().is_finite()));
    assert!(steps.iter().all(|r| r.peak_allocated_bytes.unwrap() <= capacity));
}

#[test]
fn out_of_memory_at_batch_one_saves_a_checkpoint_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write_plan(dir.path(), "1,mobilenet_v2,3x32x32,10,cpu,sgd,4");
    let ckpt = dir.path().join("run.ckpt");
    let out = vramprobe()
        .args(["train", "--plan"])
        .arg(&plan)
        // From the data types, on any machine: the f32 parameters fit, their
        // gradients (as many bytes again) do not.
        .args(["--steps", "2", "--capacity", &MOBILENET_V2_PARAMETER_BYTES.to_string(), "--checkpoint"])
        .arg(&ckpt)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("out of memory at micro-batch 1") && stderr.contains("saved a checkpoint of step 0"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(ckpt.exists());
}

#[test]
fn plan_errors_name_the_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.csv");
    std::fs::write(&plan, "schema_version,model,input,classes,device,optimizer\n1,resnet18,3x32x32,10,cpu,sgd\n")
        .unwrap();
    let out = vramprobe().args(["train", "--plan"]).arg(&plan).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("plan.csv:1: column recommended_batch: missing column"), "{stderr}");

    let plan = write_plan(dir.path(), "1,resnet18,3x32x32,10,cpu,sgd,lots");
    let out = vramprobe().args(["train", "--plan"]).arg(&plan).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("plan.csv:2: column recommended_batch: 'lots'"));

    // A version from a newer vramprobe.
    let newer = vramprobe::report::csv::PLAN_SCHEMA_VERSION + 1;
    let plan = write_plan(dir.path(), &format!("{newer},resnet18,3x32x32,10,cpu,sgd,4"));
    let out = vramprobe().args(["train", "--plan"]).arg(&plan).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("column schema_version: unknown schema version {newer}")), "{stderr}");
}

#[test]
fn a_resumed_run_continues_with_the_identical_next_loss() {
    let dir = tempfile::tempdir().unwrap();
    // A tiny CIFAR-format data set, written here.
    let data_dir = dir.path().join("cifar");
    std::fs::create_dir(&data_dir).unwrap();
    let records: Vec<(u8, Vec<u8>)> =
        (0..48u32).map(|i| ((i % 10) as u8, (0..3072u32).map(|p| ((p * 7 + i * 13) % 256) as u8).collect())).collect();
    vramprobe::measure::child::data::write_cifar(&data_dir.join("data_batch_1.bin"), &records).unwrap();
    let plan = write_plan(dir.path(), "1,resnet18,3x32x32,10,cpu,adam,8");
    let train = |extra: &[&str], log: &Path| {
        let out = vramprobe()
            .env("OMP_NUM_THREADS", "1")
            .args(["train", "--plan"])
            .arg(&plan)
            .arg("--data")
            .arg(&data_dir)
            .args(["--target-batch", "16", "--log-every", "1", "--log"])
            .arg(log)
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        read_log(log)
            .into_iter()
            .filter(|r| r.event == TrainEvent::Step)
            .map(|r| (r.step, r.loss.unwrap()))
            .collect::<Vec<_>>()
    };
    let ckpt = dir.path().join("run.ckpt");
    let ckpt_s = ckpt.to_str().unwrap();
    let whole = train(&["--steps", "4"], &dir.path().join("whole.csv"));
    let first = train(&["--steps", "2", "--checkpoint", ckpt_s], &dir.path().join("first.csv"));
    let resumed = train(&["--steps", "4", "--resume", ckpt_s], &dir.path().join("resumed.csv"));
    assert_eq!(first, whole[..2]);
    // 48 samples make 3 steps of 16 an epoch: step 4 starts epoch 1, shuffled again.
    assert_eq!(resumed, whole[2..], "whole {whole:?}");
}

#[test]
fn a_model_that_cannot_take_the_input_says_which_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    // AlexNet needs at least 63x63 (torchvision's min_size): 32x32 pools down to nothing.
    let plan = write_plan(dir.path(), "1,alexnet,3x32x32,10,cpu,sgd,4");
    let out = vramprobe().args(["train", "--plan"]).arg(&plan).args(["--steps", "1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("alexnet cannot take 3x32x32 inputs") && stderr.contains("3x224x224"), "{stderr}");
}
