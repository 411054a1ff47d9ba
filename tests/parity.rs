//! Memory parity with PyTorch, run by ./scripts/parity on small inputs:
//! vramprobe's peak per training step is PyTorch's within 1% for a ResNet,
//! a MobileNet, a GPT and a torchvision ResNet exported to TorchScript.
//! Needs the cached torch (LIBTORCH) and torchvision next to it, both of
//! which ./scripts/test installs; where either is missing the test is
//! counted as skipped in the suite's summary.
#![cfg(feature = "builtin")]
use std::path::PathBuf;
use std::process::Command;

use crate::common;

/// Runs ./scripts/parity with `args`; None (and a recorded skip) when a
/// prerequisite is missing.
fn parity(test: &str, args: &[&str]) -> Option<String> {
    let Ok(libtorch) = std::env::var("LIBTORCH") else {
        common::skip(test, "LIBTORCH is not set (run through ./scripts/test, which sets it)");
        return None;
    };
    let python = PathBuf::from(libtorch).join("../../../../bin/python");
    if !Command::new(&python).args(["-c", "import torchvision"]).status().is_ok_and(|s| s.success()) {
        common::skip(test, "torchvision is not installed next to the cached torch (./scripts/test installs it)");
        return None;
    }
    let run = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/parity"))
        .args(args)
        .args(["--max-deviation", "0.01"])
        .env("VRAMPROBE_BIN", env!("CARGO_BIN_EXE_vramprobe"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(run.status.success(), "parity beyond 1%:\n{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    Some(stdout)
}

fn rows(table: &str) -> usize {
    table.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| model")).count()
}

#[test]
fn resnet_mobilenet_and_gpt_match_pytorch_within_one_percent() {
    let test = "resnet_mobilenet_and_gpt_match_pytorch_within_one_percent";
    let cnn = ["--models", "resnet18 mobilenet_v2", "--input", "3x64x64", "--batches", "4 16", "--optimizer", "adam"];
    let Some(out) = parity(test, &cnn) else { return };
    assert_eq!(rows(&out), 4, "{out}");
    let gpt = ["--models", "gpt-micro", "--seq-len", "64", "--batches", "4 16", "--optimizer", "adamw"];
    let Some(out) = parity(test, &gpt) else { return };
    assert_eq!(rows(&out), 2, "{out}");
}

#[test]
fn an_exported_torchvision_resnet_matches_pytorch_within_one_percent() {
    let args = ["--models", "resnet18", "--input", "3x64x64", "--batches", "8", "--torchscript"];
    let Some(out) = parity("an_exported_torchvision_resnet_matches_pytorch_within_one_percent", &args) else {
        return;
    };
    assert!(out.contains("resnet18 (TorchScript)"), "{out}");
}

#[test]
fn bf16_and_mixed_precision_training_match_pytorch_within_one_percent() {
    for precision in ["bf16", "bf16-amp"] {
        let args = ["--models", "resnet18", "--input", "3x64x64", "--batches", "16", "--optimizer", "sgd"];
        let args = [&args[..], &["--precision", precision]].concat();
        let Some(out) = parity("bf16_and_mixed_precision_training_match_pytorch_within_one_percent", &args) else {
            return;
        };
        assert_eq!(rows(&out), 1, "{out}");
    }
}
