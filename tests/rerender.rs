//! `vramprobe report` re-renders a sweep's folder byte for byte: every view
//! is a pure function of report.json (and, for a folder per variant, of
//! run.json), and nothing is recomputed or left out on the way.
#![cfg(feature = "builtin")]
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::vramprobe;

use crate::common;

/// Every file under `dir` but the command trials' own folders (the
/// command's output and records, which no view renders), by relative path.
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if path.file_name().unwrap() != "trials" {
                    stack.push(path);
                }
            } else {
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Sweeps, deletes every output but report.json and run.json, re-renders,
/// and compares every file with what the sweep wrote.
fn sweep_then_rerender(sweep: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // The options first: in command mode everything after `--` is the command.
    let run = vramprobe().args(["sweep", "--quiet", "--out"]).arg(&out).args(sweep).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let written = files(&out);
    for path in written.keys() {
        let name = path.file_name().unwrap();
        if name != "report.json" && name != "run.json" {
            std::fs::remove_file(out.join(path)).unwrap();
        }
    }
    let again = vramprobe().arg("report").arg(&out).arg("--quiet").output().unwrap();
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    let rewritten = files(&out);
    assert_eq!(
        rewritten.keys().collect::<Vec<_>>(),
        written.keys().collect::<Vec<_>>(),
        "report writes exactly the files the sweep wrote"
    );
    for (path, bytes) in &written {
        assert!(rewritten[path] == *bytes, "{} differs after re-rendering", path.display());
    }
}

#[test]
fn a_single_run_rerenders_byte_identically() {
    sweep_then_rerender(&[
        "--model",
        "resnet18",
        "--input",
        "3x64x64",
        "--classes",
        "10",
        "--optimizer",
        "sgd",
        "--device",
        "cpu",
        "--batches",
        "1,2,4",
    ]);
}

#[test]
fn a_sweep_over_lengths_and_precisions_rerenders_byte_identically() {
    // A folder per variant, the fit across lengths and its heat map.
    sweep_then_rerender(&["--model", "gpt-micro", "--seq-lens", "16,32", "--device", "cpu", "--batches", "1,2,4"]);
    sweep_then_rerender(&[
        "--model",
        "gpt-micro",
        "--seq-len",
        "16",
        "--precision",
        "fp32,bf16",
        "--device",
        "cpu",
        "--batches",
        "1,2",
    ]);
}

#[test]
fn a_command_run_rerenders_byte_identically() {
    let Some(python) = common::torch_python("a_command_run_rerenders_byte_identically") else { return };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train_resnet18.py");
    sweep_then_rerender(&["--device", "cpu", "--batches", "2,4", "--", &python, script, "--batch-size", "{batch}"]);
}
