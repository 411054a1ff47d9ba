//! The GPU validation kit's script, dry-run on the CPU (every step but the
//! GPU-only parity), so that it works the day a GPU is lent.
#![cfg(feature = "builtin")]
use std::path::PathBuf;
use std::process::Command;

use crate::common;

#[test]
fn the_gpu_check_script_dry_runs_on_the_cpu() {
    let Ok(libtorch) = std::env::var("LIBTORCH") else {
        common::skip("the_gpu_check_script_dry_runs_on_the_cpu", "LIBTORCH is not set (run through ./scripts/test)");
        return;
    };
    let python = PathBuf::from(libtorch).join("../../../../bin/python");
    let out = tempfile::tempdir().unwrap();
    let run = Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gpu-check"))
        .env("DRY_RUN", "1")
        .env("VRAMPROBE_BIN", env!("CARGO_BIN_EXE_vramprobe"))
        .env("VRAMPROBE_CHECK_PYTHON", &python)
        .env("OUT", out.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    for step in [
        "| devices | 0 | ok",
        "| sweep-whole | 0 | ok",
        "| sweep-8gib | 0 | ok",
        "| check-recommended | 0 | ok",
        "| check-twice | 3 | ok",
        "| train-backoff | 0 | ok",
        "| sweep-command | 0 | ok",
        "| phase-peaks | 0 | ok",
        "| oom-retry | 3 | ok",
        "| predict-cpu | 0 | ok",
        "| predict-plan | 0 | ok",
    ] {
        assert!(summary.contains(step), "missing '{step}' in:\n{summary}");
    }
    assert!(summary.contains("unexpected results: 0"), "{summary}");
    assert!(out.path().join("sweep-whole/report.json").exists());
    // The prediction step: a row per batch sweep-whole fitted, predicted from the CPU run.
    let predicted = std::fs::read_to_string(out.path().join("gpu-predict.csv")).unwrap();
    assert!(
        predicted.starts_with("batch,measured_peak_reserved_bytes,") && predicted.lines().count() >= 2,
        "{predicted}"
    );
    assert!(summary.contains("batches predicted"), "{summary}");
}
