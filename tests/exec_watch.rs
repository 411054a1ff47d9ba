//! `vramprobe exec` watches the real job to its end: each phase's peak, a
//! warning when memory held grows toward the plan's budget, and a
//! post-mortem of an out-of-memory error. Every budget here is derived from
//! a first watched run of the same job (never a byte count written down),
//! and the out-of-memory error is a real one: the CPU allocator refusing an
//! allocation under an address-space limit set just above what importing
//! torch takes on this machine.
#![cfg(feature = "builtin")]
use std::path::Path;

use common::vramprobe;
use serde_json::Value;

use crate::common;

const JOBS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/jobs");

/// A command-mode plan row at batch 32 with the given budget and fixed bytes (0: none).
fn plan(dir: &Path, budget: u64, fixed: u64) -> std::path::PathBuf {
    let path = dir.join(format!("plan-{budget}.csv"));
    let text = format!(
        "schema_version,model,input,classes,device,optimizer,recommended_batch,budget_bytes,fixed_bytes\n\
         2,python train.py {{batch}},,0,cpu,,32,{budget},{fixed}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs `exec` into `out`; its exit code, stderr and watch.json.
fn exec(plan: &Path, out: &Path, command: &[String]) -> (Option<i32>, String, Value) {
    let run =
        vramprobe().args(["exec", "--plan"]).arg(plan).arg("--out").arg(out).arg("--").args(command).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let watch = std::fs::read(out.join("watch.json")).unwrap_or_else(|e| panic!("no watch.json ({e}): {stderr}"));
    (run.status.code(), stderr, serde_json::from_slice(&watch).unwrap())
}

fn job(python: &str, name: &str, extra: &[&str]) -> Vec<String> {
    let script = format!("{JOBS}/{name}.py");
    [&[python, &script, "--batch-size", "{batch}"][..], extra].concat().into_iter().map(String::from).collect()
}

fn phase_peak(watch: &Value, phase: &str) -> u64 {
    watch["processes"][0]["phases"][phase]["peak_allocated_bytes"].as_u64().unwrap_or_else(|| panic!("{watch}"))
}

fn forecasts(watch: &Value) -> usize {
    watch["processes"][0]["forecasts"].as_array().map_or(0, Vec::len)
}

/// The train phase's first reading: its first batch.
fn first_train_reading(out: &Path) -> u64 {
    let records = std::fs::read_to_string(out.join("records/records.jsonl")).unwrap();
    records
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|r| r["kind"] == "watch_peak" && r["phase"] == "train")
        .and_then(|r| r["peak_allocated_bytes"].as_u64())
        .unwrap()
}

#[test]
fn memory_held_that_grows_is_warned_of_before_it_passes_the_budget() {
    let Some(python) = common::torch_python("memory_held_that_grows_is_warned_of_before_it_passes_the_budget") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let command = job(&python, "keep_outputs", &["--samples", "16384", "--epochs", "1"]);
    // A plan with no budget: the phases' peaks only.
    let (code, stderr, first) = exec(&plan(dir.path(), 0, 0), &dir.path().join("a"), &command);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(forecasts(&first), 0, "{first}");
    let whole = phase_peak(&first, "train");
    let early = first_train_reading(&dir.path().join("a"));
    assert!(early * 2 < whole, "{early} {whole}");
    // A budget above the whole run's peak: no alarm.
    let (_, stderr, roomy) = exec(&plan(dir.path(), whole * 2, 0), &dir.path().join("b"), &command);
    assert_eq!(forecasts(&roomy), 0, "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
    // Between the first batch's and the whole run's: warned while the job runs, with the batch.
    let between = (early + whole) / 2;
    let (code, stderr, tight) = exec(&plan(dir.path(), between, 0), &dir.path().join("c"), &command);
    assert_eq!(code, Some(0), "the job is the job's: {stderr}");
    let forecast = &tight["processes"][0]["forecasts"][0];
    assert_eq!(forecast["phase"], "train", "{tight}");
    assert_eq!(forecast["length"], 512, "{tight}");
    let (at, crossing) = (forecast["at"].as_u64().unwrap(), forecast["crossing"].as_u64().unwrap());
    assert!(at < crossing && crossing <= 512, "{forecast}");
    assert!(stderr.contains(&format!("at batch {crossing} of 512 its peak would pass")), "{stderr}");
    assert!(stderr.contains("the train phase passed the plan's budget"), "{stderr}");
}

#[test]
fn a_fixed_shape_job_is_watched_without_a_false_alarm() {
    let Some(python) = common::torch_python("a_fixed_shape_job_is_watched_without_a_false_alarm") else { return };
    let dir = tempfile::tempdir().unwrap();
    let command = job(&python, "fixed_shape", &[]);
    let (code, stderr, first) = exec(&plan(dir.path(), 0, 0), &dir.path().join("a"), &command);
    assert_eq!(code, Some(0), "{stderr}");
    for phase in ["train", "eval", "save"] {
        assert!(phase_peak(&first, phase) > 0, "{phase}: {first}");
    }
    let highest = ["train", "eval", "save", "other"]
        .iter()
        .filter_map(|p| first["processes"][0]["phases"][p]["peak_allocated_bytes"].as_u64())
        .max()
        .unwrap();
    let (code, stderr, again) = exec(&plan(dir.path(), highest * 3 / 2, 0), &dir.path().join("b"), &command);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(forecasts(&again), 0, "{stderr}");
    assert!(stderr.contains("highest:") && !stderr.contains("warning"), "{stderr}");
}

/// The address space importing torch takes on this machine, in KiB.
fn torch_address_space(python: &str) -> u64 {
    let probe = "import torch; print(open('/proc/self/status').read().split('VmSize:')[1].split()[0])";
    let out = std::process::Command::new(python).args(["-c", probe]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn an_out_of_memory_error_gets_a_post_mortem_naming_the_phase_and_the_line() {
    let test = "an_out_of_memory_error_gets_a_post_mortem_naming_the_phase_and_the_line";
    let Some(python) = common::torch_python(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    // 400 MB of address space past torch's import; the evaluation keeps
    // 40000 x 2000 float logits (320 MB), then concatenates them.
    let limit = torch_address_space(&python) + 400_000;
    let script = format!("{JOBS}/eval_logits.py");
    let line =
        format!("ulimit -v {limit}; exec \"$0\" {script} --batch-size {{batch}} --samples 512 --eval-samples 40000");
    let command = ["sh", "-c", &line, &python].map(String::from);
    let (code, stderr, watch) = exec(&plan(dir.path(), 64 << 20, 1 << 20), &dir.path().join("oom"), &command);
    assert_eq!(code, Some(1), "the job's own exit code: {stderr}");
    let postmortem = &watch["processes"][0]["postmortems"][0];
    assert!(postmortem["message"].as_str().unwrap().contains("can't allocate memory"), "{watch}");
    assert!(postmortem["line"].as_str().unwrap().contains("eval_logits.py"), "{watch}");
    assert_eq!(postmortem["pass_phase"], "eval", "{watch}");
    // What the evaluation kept from batch to batch is most of what it held: no smaller batch helps.
    let held = postmortem["held_bytes"].as_u64().unwrap();
    assert!(postmortem["kept_by_pass_bytes"].as_u64().unwrap() * 2 >= held, "{watch}");
    assert!(stderr.contains("kept from batch to batch by the last eval pass"), "{stderr}");
    assert!(stderr.contains("out of memory in "), "{stderr}");
}

#[test]
fn exec_without_the_watch_runs_the_job_bare() {
    let dir = tempfile::tempdir().unwrap();
    let plan = plan(dir.path(), 0, 0);
    let run = vramprobe()
        .args(["exec", "--watch", "off", "--plan"])
        .arg(&plan)
        .args(["--", "echo", "{batch}"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&run.stdout), "32\n");
    let folders = std::fs::read_dir(dir.path()).unwrap().flatten().filter(|e| e.path().is_dir()).count();
    assert_eq!(folders, 0, "no run folder without the watch");
}

#[test]
fn the_watchs_bookkeeping_holds_on_a_stand_in_reading() {
    // Plain Python, no torch: the machine's python3.
    let unit = std::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/test_watch.py"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&unit.stderr);
    assert!(unit.status.success() && stderr.contains("Ran 5 tests"), "{stderr}");
}
