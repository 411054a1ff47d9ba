//! Helpers the integration tests share: the real binary, one real trial, and
//! capacities chosen from a measurement on the machine at hand.
//!
//! The exact peak of the same step differs between CPU families (oneDNN picks
//! other kernels and workspaces on Intel and AMD), so no test states a
//! capacity in bytes: it measures the workload's line here first and derives
//! the capacity that gives the property it checks.
#![allow(dead_code)]

use assert_cmd::Command;
use vramprobe::analyze::fit::LinearFit;
use vramprobe::record::trial::Message;

/// The sweep's and `check`'s default margin (`--margin 10%`).
pub const DEFAULT_MARGIN: f64 = 0.10;

pub fn vramprobe() -> Command {
    Command::cargo_bin("vramprobe").unwrap()
}

/// Runs one trial child directly (no capacity) and returns its messages.
pub fn trial(args: &[&str]) -> Vec<Message> {
    let out = vramprobe().arg("trial").arg("--json").args(args).output().unwrap();
    assert!(out.status.success(), "trial {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The largest per-step peak of one trial of `workload` at `batch`.
pub fn trial_peak_at(workload: &[&str], batch: u64) -> u64 {
    let batch = batch.to_string();
    let args = [workload, &["--batch", &batch]].concat();
    trial_peak(&args)
}

/// The largest per-step peak of one trial run with `args`.
pub fn trial_peak(args: &[&str]) -> u64 {
    trial(args)
        .iter()
        .filter_map(|m| match m {
            Message::Step(s) => Some(s.peak_allocated_bytes),
            _ => None,
        })
        .max()
        .unwrap_or_else(|| panic!("trial {args:?} measured no step"))
}

/// The workload's memory line on this machine, through two measured batches.
pub fn measured_line(workload: &[&str], low: u64, high: u64) -> LinearFit {
    let points = [(low, trial_peak_at(workload, low)), (high, trial_peak_at(workload, high))];
    LinearFit::fit(&points).unwrap()
}

/// A `--capacity` (plain bytes) under which `workload`'s largest batch is
/// `target` with `margin` on this machine, from its line through `low` and
/// `high` measured here.
pub fn capacity_for_max(workload: &[&str], (low, high): (u64, u64), target: u64, margin: f64) -> u64 {
    measured_line(workload, low, high).capacity_for_max(target, margin)
}

/// `--rehearsal off` unless `options` say `--rehearsal` themselves: a
/// command's sweep that tests neither the whole job's rehearsal
/// (tests/whole_job.rs does) nor its trial count would only wait for it.
pub fn rehearsal_unless_asked(options: &[&str]) -> &'static [&'static str] {
    if options.contains(&"--rehearsal") {
        &[]
    } else {
        &["--rehearsal", "off"]
    }
}

/// Records that `test` could not run for want of a prerequisite: said on
/// stderr and counted as skipped, not passed, in ./scripts/test's summary.
pub fn skip(test: &str, why: &str) {
    use std::io::Write;
    eprintln!("skipped: {why}");
    if let Ok(path) = std::env::var("VRAMPROBE_TEST_SKIPS") {
        let mut file = std::fs::OpenOptions::new().append(true).create(true).open(path).unwrap();
        writeln!(file, "{test}: {why}").unwrap();
    }
}

/// PyTorch's own peak bytes per training step on this machine
/// (scripts/torch_peak.py under the cached torch: the profiler's memory
/// events), or None with a recorded skip when that torch is not at hand.
pub fn pytorch_peak(test: &str, args: &[&str]) -> Option<u64> {
    let Ok(libtorch) = std::env::var("LIBTORCH") else {
        skip(test, "LIBTORCH is not set (run through ./scripts/test, which sets it)");
        return None;
    };
    let python = std::path::Path::new(&libtorch).join("../../../../bin/python");
    let out = std::process::Command::new(python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/torch_peak.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "torch_peak.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.lines().last().unwrap_or("")).unwrap();
    Some(v["peak_bytes"].as_u64().unwrap())
}

/// The cached torch's python, where it has torchvision; None (a recorded
/// skip) otherwise.
pub fn torch_python(test: &str) -> Option<String> {
    let Ok(libtorch) = std::env::var("LIBTORCH") else {
        skip(test, "LIBTORCH is not set (run through ./scripts/test, which sets it)");
        return None;
    };
    let python = std::path::PathBuf::from(libtorch).join("../../../../bin/python");
    let ok = std::process::Command::new(&python).args(["-c", "import torchvision"]).status();
    if !ok.is_ok_and(|s| s.success()) {
        skip(test, "torchvision is not installed next to the cached torch (./scripts/test installs it)");
        return None;
    }
    Some(python.to_string_lossy().into_owned())
}

/// The one-host Slurm of two nodes that ./scripts/test starts
/// (scripts/slurm-local), or a recorded skip.
pub fn slurm_conf(test: &str) -> Option<String> {
    let conf = std::env::var("VRAMPROBE_TEST_SLURM_CONF").ok().filter(|c| std::path::Path::new(c).is_file());
    if conf.is_none() {
        skip(test, "no local Slurm (./scripts/test starts one with scripts/slurm-local)");
    }
    conf
}

/// The folder of the real sshd on 127.0.0.1:22022 that ./scripts/test
/// starts (scripts/sshd-local: its bin/ssh uses that sshd's client
/// config), or a recorded skip.
pub fn sshd_dir(test: &str) -> Option<String> {
    let dir =
        std::env::var("VRAMPROBE_TEST_SSHD_DIR").ok().filter(|d| std::path::Path::new(d).join("bin/ssh").is_file());
    if dir.is_none() {
        skip(test, "no local sshd (./scripts/test starts one with scripts/sshd-local)");
    }
    dir
}
