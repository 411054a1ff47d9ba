//! Memory parity with PyTorch, run by ./scripts/parity on small inputs:
//! vramprobe's peak per training step is PyTorch's within 1% for a ResNet,
//! a MobileNet, a GPT and a torchvision ResNet exported to TorchScript.
//! Needs the cached torch (LIBTORCH, set by ./scripts/test) and torchvision,
//! which the script installs next to it; without them the test says why it
//! is skipped.
use std::path::PathBuf;
use std::process::Command;

fn parity(args: &[&str]) -> Option<String> {
    let Ok(libtorch) = std::env::var("LIBTORCH") else {
        eprintln!("skipped: LIBTORCH is not set (run through ./scripts/test, which sets it)");
        return None;
    };
    let python = PathBuf::from(libtorch).join("../../../../bin/python");
    let has_torchvision = Command::new(&python).args(["-c", "import torchvision"]).status().is_ok_and(|s| s.success());
    let can_install = Command::new(&python).args(["-m", "pip", "--version"]).status().is_ok_and(|s| s.success());
    if !has_torchvision && !can_install {
        eprintln!("skipped: torchvision is not installed next to the cached torch and pip cannot install it");
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
    let stderr = String::from_utf8_lossy(&run.stderr);
    if !has_torchvision && stderr.contains("ERROR") && !run.status.success() && !stdout.contains("| ") {
        eprintln!("skipped: torchvision could not be installed (no package index?): {stderr}");
        return None;
    }
    assert!(run.status.success(), "parity beyond 1%:\n{stdout}\n{stderr}");
    Some(stdout)
}

fn rows(table: &str) -> usize {
    table.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| model")).count()
}

#[test]
fn resnet_mobilenet_and_gpt_match_pytorch_within_one_percent() {
    let Some(out) = parity(&[
        "--models",
        "resnet18 mobilenet_v2",
        "--input",
        "3x64x64",
        "--batches",
        "4 16",
        "--optimizer",
        "adam",
    ]) else {
        return;
    };
    assert_eq!(rows(&out), 4, "{out}");
    let Some(out) = parity(&["--models", "gpt-micro", "--seq-len", "64", "--batches", "4 16", "--optimizer", "adamw"])
    else {
        return;
    };
    assert_eq!(rows(&out), 2, "{out}");
}

#[test]
fn an_exported_torchvision_resnet_matches_pytorch_within_one_percent() {
    let Some(out) = parity(&["--models", "resnet18", "--input", "3x64x64", "--batches", "8", "--torchscript"]) else {
        return;
    };
    assert!(out.contains("resnet18 (TorchScript)"), "{out}");
}

#[test]
fn bf16_and_mixed_precision_training_match_pytorch_within_one_percent() {
    for precision in ["bf16", "bf16-amp"] {
        let args = ["--models", "resnet18", "--input", "3x64x64", "--batches", "16", "--optimizer", "sgd"];
        let Some(out) = parity(&[&args[..], &["--precision", precision]].concat()) else {
            return;
        };
        assert_eq!(rows(&out), 1, "{out}");
    }
}
