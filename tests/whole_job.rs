//! `check` answers for the whole job, not its first steps: the job shapes
//! in examples/jobs/, each checked at a capacity between its first steps'
//! peak and its whole run's peak, both measured here (the first by
//! `check --steps 3`, today's check; the whole run by torch's own profiler
//! over the run to its end, scripts/whole_run_peak.py, independent of
//! vramprobe's hook). Nothing is compared with a byte count written down.
#![cfg(feature = "builtin")]
use common::vramprobe;
use serde_json::Value;

use crate::common;

const JOBS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/jobs");
const WHOLE_RUN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/whole_run_peak.py");
const BATCH: &str = "32";

fn job(python: &str, name: &str, extra: &[&str]) -> Vec<String> {
    let script = format!("{JOBS}/{name}.py");
    [&[python, &script, "--batch-size", "{batch}"][..], extra].concat().into_iter().map(String::from).collect()
}

/// `check --json` of `command` at BATCH: its exit code and verdict.
fn check(command: &[String], options: &[&str]) -> (i32, Value) {
    let out = vramprobe()
        .args(["check", "--device", "cpu", "--json", "--batch", BATCH])
        .args(options)
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let verdict = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {stdout}{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), verdict)
}

/// The whole run's peak at BATCH, by torch's profiler over the run.
fn whole_run_peak(command: &[String]) -> u64 {
    let command: Vec<String> = command.iter().map(|a| a.replace("{batch}", BATCH)).collect();
    whole_run_peak_at(&command)
}

fn peak(verdict: &Value) -> u64 {
    verdict["peak_bytes"].as_u64().unwrap()
}

#[test]
fn jobs_that_peak_after_their_first_steps_do_not_fit_between_the_two() {
    let Some(python) = common::torch_python("jobs_that_peak_after_their_first_steps_do_not_fit_between_the_two") else {
        return;
    };
    // What peaks later: outputs kept each step, logits kept for evaluation, a checkpoint's export copy.
    for (name, named) in
        [("keep_outputs", "memory grows"), ("eval_logits", "memory grows"), ("checkpoint_export", "checkpoint-saving")]
    {
        let command = job(&python, name, &[]);
        let (_, first) = check(&command, &["--steps", "3"]);
        let whole = whole_run_peak(&command);
        let first = peak(&first);
        assert!(
            whole > first + first / 4,
            "{name}: the whole run ({whole}) peaks well above its first steps ({first})"
        );
        let between = ((first + whole) / 2).to_string();
        let tight = ["--capacity", &between, "--margin", "0"];
        // Today's check, of the first steps only: FITS, and says what it left out.
        let (code, today) = check(&command, &[&tight[..], &["--steps", "3"]].concat());
        assert_eq!(code, 0, "{name}: {today}");
        assert_eq!(today["covered"], "first_3_steps");
        // The whole job: WON'T FIT, naming the phase or the growth.
        let (code, verdict) = check(&command, &tight);
        assert_eq!(code, 3, "{name}: {verdict}");
        assert_eq!(verdict["covered"], "whole_job", "{name}: {verdict}");
        let message = verdict["message"].as_str().unwrap();
        assert!(message.starts_with("WON'T FIT: ") && message.contains(named), "{name}: {message}");
        // Its peak is the whole run's (a projection of the growth to the
        // loaders' lengths): no wrong FITS below it, no false alarm above it.
        let judged = peak(&verdict);
        assert!(judged.abs_diff(whole) <= whole / 100, "{name}: judged {judged}, whole run {whole}");
    }
}

#[test]
fn the_largest_batches_are_found_before_the_rehearsal_and_said() {
    let Some(python) = common::torch_python("the_largest_batches_are_found_before_the_rehearsal_and_said") else {
        return;
    };
    let out = vramprobe()
        .args(["check", "--device", "cpu", "--batch", BATCH, "--"])
        .args(job(&python, "variable_lengths", &[]))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("loader 0's largest batches ran first (all 16 collated to find them)"), "{stdout}");
}

#[test]
fn a_fixed_shape_job_keeps_its_verdict_and_names_every_phase() {
    let Some(python) = common::torch_python("a_fixed_shape_job_keeps_its_verdict_and_names_every_phase") else {
        return;
    };
    let command = job(&python, "fixed_shape", &[]);
    let (_, first) = check(&command, &["--steps", "3"]);
    let whole = whole_run_peak(&command);
    assert_eq!(peak(&first), whole, "its first steps hold its peak");
    let just = (whole + whole / 100).to_string();
    let (code, verdict) = check(&command, &["--capacity", &just, "--margin", "0"]);
    assert_eq!(code, 0, "{verdict}");
    assert_eq!(peak(&verdict), whole);
    assert!(verdict.get("projection").is_none(), "nothing grows: {verdict}");
    let phases: Vec<&str> =
        verdict["phases"].as_array().unwrap().iter().map(|p| p["phase"].as_str().unwrap()).collect();
    assert_eq!(phases, ["train", "eval", "save", "other"]);
}

#[test]
fn a_long_job_is_rehearsed_until_every_phase_ran_twice_or_the_time_budget() {
    let Some(python) = common::torch_python("a_long_job_is_rehearsed_until_every_phase_ran_twice_or_the_time_budget")
    else {
        return;
    };
    // 50 epochs of training, evaluation and a save: two of each tell.
    let (code, verdict) = check(&job(&python, "fixed_shape", &["--epochs", "50"]), &[]);
    assert_eq!(code, 0, "{verdict}");
    assert_eq!(verdict["covered"], "every_phase_twice", "{verdict}");
    // A slow job: the time budget stops it, and the check says so.
    let out = vramprobe()
        .args(["check", "--device", "cpu", "--batch", BATCH, "--rehearsal-time", "1", "--", &python])
        .args([concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train_resnet18.py"), "--batch-size", "{batch}"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("then the time budget (--rehearsal-time) stopped it"), "{stdout}");
    // A loop that iterates no DataLoader: its first steps, and it says so.
    let script = "import torch\nm = torch.nn.Linear(64, 64)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n\
        for _ in range(10**6):\n    m(torch.randn({batch}, 64)).sum().backward(); o.step(); o.zero_grad()\n";
    let (code, verdict) = check(&[python.clone(), "-c".into(), script.into()], &[]);
    assert_eq!(code, 0, "{verdict}");
    assert_eq!(verdict["covered"], "first_steps_no_loader", "{verdict}");
    assert_eq!(verdict["steps"], 8, "{verdict}");
}

/// A sweep of `command` at `capacity` (margin 0): its exit code, stderr and plan row's max.
fn sweep(command: &[String], capacity: u64, out: &std::path::Path) -> (i32, String, Option<u64>) {
    let run = vramprobe()
        .args(["sweep", "--device", "cpu", "--quiet", "--margin", "0", "--max-batch", "64", "--breakdown", "off"])
        .args(["--capacity", &capacity.to_string(), "--out"])
        .arg(out)
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    let plan = std::fs::read_to_string(out.join("plan.csv")).unwrap_or_default();
    let max = csv::Reader::from_reader(plan.as_bytes())
        .deserialize::<vramprobe::report::csv::PlanRow>()
        .next()
        .and_then(|r| r.ok())
        .map(|r| r.max_batch);
    (run.status.code().unwrap(), String::from_utf8_lossy(&run.stderr).into_owned(), max)
}

#[test]
fn the_sweeps_max_holds_over_the_whole_job_or_none_is_given() {
    let Some(python) = common::torch_python("the_sweeps_max_holds_over_the_whole_job_or_none_is_given") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The longest sequences late in the epoch: a capacity that the first
    // steps at 64 hold many times over, but not 64's whole run.
    let lengths = job(&python, "variable_lengths", &[]);
    let at = |batch: u64| {
        let command: Vec<String> = lengths.iter().map(|a| a.replace("{batch}", &batch.to_string())).collect();
        whole_run_peak_at(&command)
    };
    let capacity = at(16) + at(16) / 50;
    let (code, stderr, max) = sweep(&lengths, capacity, &dir.path().join("lengths"));
    assert_eq!(code, 0, "{stderr}");
    let max = max.unwrap();
    assert!(max >= 1 && at(max) <= capacity, "batch {max}'s whole run ({}) within {capacity}", at(max));
    // Every epoch's outputs kept for a metric: the whole job's peak does
    // not come down with the batch, and under it no batch fits.
    let keep = job(&python, "keep_outputs", &[]);
    let capacity = whole_run_peak(&keep) * 3 / 4;
    let (code, stderr, _) = sweep(&keep, capacity, &dir.path().join("keep"));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no batch fits the whole job") && stderr.contains("memory that grows"), "{stderr}");
}

/// The whole run's peak of a command with its batch filled in.
fn whole_run_peak_at(command: &[String]) -> u64 {
    let out = std::process::Command::new(&command[0]).arg(WHOLE_RUN).args(&command[1..]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(line.lines().last().unwrap()).unwrap();
    v["peak_bytes"].as_u64().unwrap()
}

#[test]
fn the_rehearsals_bookkeeping_holds_on_hand_made_loaders() {
    // Plain Python, no torch: the machine's python3.
    let unit = std::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/test_rehearsal.py"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&unit.stderr);
    assert!(unit.status.success() && stderr.contains("Ran 11 tests"), "{stderr}");
}
