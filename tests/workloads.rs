//! The workloads users train beyond fp32 image classifiers: several
//! precisions and modes in one sweep, their own TorchScript model, and a
//! GPT with a sequence-length axis (real CPU trials through the binary).
#![cfg(feature = "builtin")]
use std::path::Path;

use common::{trial_peak, vramprobe};
use vramprobe::analyze::seqfit::SeqFit;
use vramprobe::report::csv::PlanRow;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny_cnn.pt");

use crate::common;

fn plan_rows(path: &Path) -> Vec<PlanRow> {
    csv::Reader::from_path(path).unwrap().deserialize().collect::<Result<Vec<_>, _>>().unwrap()
}

#[test]
fn one_sweep_covers_precisions_and_modes_with_a_row_each() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = vramprobe()
        .args(["sweep", "--model", FIXTURE, "--input", "3x32x32", "--device", "cpu", "--optimizer", "sgd"])
        .args(["--precision", "fp32,bf16,bf16-amp,fp16-amp", "--mode", "train,eval", "--batches", "4,16,32"])
        .args(["--quiet", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let rows = plan_rows(&out.join("plan.csv"));
    assert_eq!(rows.len(), 8);
    let row = |p: &str, m: &str| {
        rows.iter().find(|r| r.precision.map(|x| x.name()) == Some(p) && r.mode.map(|x| x.name()) == Some(m)).unwrap()
    };
    for p in ["fp32", "bf16", "bf16-amp", "fp16-amp"] {
        assert!(out.join(format!("{p}-train/report.json")).exists());
        let (train, eval) = (row(p, "train"), row(p, "eval"));
        // The TorchScript classes come from the model's output.
        assert_eq!(train.classes, Some(10));
        // Memory grows with the batch, and inference holds less per sample than training.
        assert!(train.per_sample_bytes.unwrap() > 0, "{p}");
        assert!(eval.per_sample_bytes.unwrap() < train.per_sample_bytes.unwrap(), "{p}");
        assert_eq!(train.max_batch, 32);
    }
    // A bfloat16 model holds each activation in 2 bytes instead of 4: never
    // more per sample than fp32. How much less depends on the CPU's kernels,
    // so the ratio is checked against PyTorch's own on this machine.
    let ratio =
        row("bf16", "train").per_sample_bytes.unwrap() as f64 / row("fp32", "train").per_sample_bytes.unwrap() as f64;
    assert!(ratio < 1.0, "bf16 / fp32 per sample: {ratio}");
    let test = "one_sweep_covers_precisions_and_modes_with_a_row_each";
    let torch_per_sample = |precision: &str| -> Option<f64> {
        let peak = |batch: &str| {
            let args = ["--model", "tiny_cnn", "--torchscript", FIXTURE, "--input", "3x32x32", "--classes", "10"];
            common::pytorch_peak(
                test,
                &[&args[..], &["--optimizer", "sgd", "--precision", precision, "--batch", batch]].concat(),
            )
        };
        Some((peak("32")? as f64 - peak("4")? as f64) / 28.0)
    };
    if let (Some(fp32), Some(bf16)) = (torch_per_sample("fp32"), torch_per_sample("bf16")) {
        let torch_ratio = bf16 / fp32;
        assert!(
            (ratio / torch_ratio - 1.0).abs() < 0.01,
            "bf16 / fp32 per sample: vramprobe {ratio}, PyTorch {torch_ratio}"
        );
    }
    for variant in ["fp32-train", "bf16-amp-eval"] {
        assert!(stdout.contains(variant), "{stdout}");
    }
}

#[test]
fn a_torchscript_model_trains_and_its_memory_grows_with_the_batch() {
    let small = trial_peak(&["--model", FIXTURE, "--input", "3x32x32", "--batch", "2", "--device", "cpu"]);
    let large = trial_peak(&["--model", FIXTURE, "--input", "3x32x32", "--batch", "16", "--device", "cpu"]);
    assert!(large > small + 8 * 16 * 32 * 32 * 4, "{small} -> {large}");
}

#[test]
fn a_file_that_is_not_a_torchscript_model_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.pt");
    std::fs::write(&text, "not a model").unwrap();
    let truncated = dir.path().join("truncated.pt");
    std::fs::write(&truncated, &std::fs::read(FIXTURE).unwrap()[..4000]).unwrap();
    let missing = dir.path().join("missing.pt");
    for (file, expected) in [
        (&text, "not a usable TorchScript model"),
        (&truncated, "not a usable TorchScript model"),
        (&missing, "no such file"),
    ] {
        let run = vramprobe()
            .args(["sweep", "--model", file.to_str().unwrap(), "--input", "3x32x32", "--device", "cpu"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let no_input = vramprobe().args(["sweep", "--model", FIXTURE, "--device", "cpu"]).output().unwrap();
    assert_eq!(no_input.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&no_input.stderr).contains("--input CxHxW is required"));
}

#[test]
fn the_two_dimensional_fit_predicts_a_held_out_batch_and_length() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let common = ["--model", "gpt-micro", "--classes", "2000", "--device", "cpu", "--optimizer", "sgd"];
    let run = vramprobe()
        .arg("sweep")
        .args(common)
        .args(["--seq-lens", "32,64,128", "--batches", "2,4,8,16"])
        .args(["--quiet", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("Max tokens per batch"), "{stdout}");
    let rows = plan_rows(&out.join("plan.csv"));
    assert_eq!(rows.iter().map(|r| r.input.clone()).collect::<Vec<_>>(), [vec![32], vec![64], vec![128]]);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("seq-lens.json")).unwrap()).unwrap();
    let fit: SeqFit = serde_json::from_value(summary["fit"].clone()).unwrap();
    assert!(fit.r2 > 0.999, "{fit:?}");
    // A batch and a length that were not measured.
    let mut args = common.to_vec();
    args.extend(["--seq-len", "96", "--batch", "12"]);
    let measured = trial_peak(&args) as f64;
    let predicted = fit.predict(12, 96);
    assert!((predicted / measured - 1.0).abs() < 0.02, "predicted {predicted}, measured {measured}");

    // The heat map marks each length's verified max; `report` redraws it identically.
    let heatmap = std::fs::read_to_string(out.join("seq-heatmap.svg")).unwrap();
    assert_eq!(heatmap.matches("(measured)").count(), 3, "one max per length");
    assert!(std::fs::read_to_string(out.join("index.html")).unwrap().contains("Batch and sequence length"));
    std::fs::remove_file(out.join("seq-heatmap.svg")).unwrap();
    let again = vramprobe().arg("report").arg(&out).arg("--quiet").output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(std::fs::read_to_string(out.join("seq-heatmap.svg")).unwrap(), heatmap);
}

#[test]
fn token_and_image_inputs_are_checked_against_the_model() {
    for (args, expected) in [
        (vec!["--model", "gpt-nano", "--input", "3x32x32"], "is a token model"),
        (vec!["--model", "resnet18", "--seq-len", "128"], "is an image model"),
        (vec!["--model", "gpt-nano", "--seq-len", "4096"], "longer than gpt-nano's context of 1024"),
        (vec!["--model", "gpt-nano", "--seq-lens", "64"], "give at least two lengths"),
        (vec!["--model", "resnet18", "--precision", "fp8"], "invalid value 'fp8'"),
    ] {
        let run = vramprobe().arg("sweep").args(&args).args(["--device", "cpu"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let check = vramprobe()
        .args(["check", "--model", "resnet18", "--batch", "2", "--precision", "fp32,bf16", "--device", "cpu"])
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&check.stderr).contains("--precision takes one value here"));
}
