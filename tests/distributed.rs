//! Distributed commands: torchrun with DDP on the CPU (gloo), 2 ranks, every
//! rank measured by the hook. Runs the examples under the cached torch (with
//! torchvision beside it, which ./scripts/test installs); where they are
//! missing the tests are counted as skipped. FSDP's CPU run is not exact (see
//! docs/distributed.md): it is covered by scripts/gpu-check.
#![cfg(feature = "builtin")]
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{vramprobe, DEFAULT_MARGIN};
use vramprobe::analyze::fit::Budget;
use vramprobe::record::trial::StepRecord;
use vramprobe::report::csv::{PlanRow, SweepRow};

use crate::common;

const DDP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ddp_train.py");
const UNEVEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/uneven_rank.py");

/// The cached torch's torchrun, where torchvision is beside it; None (a recorded skip) otherwise.
fn torchrun(test: &str) -> Option<String> {
    let Ok(libtorch) = std::env::var("LIBTORCH") else {
        common::skip(test, "LIBTORCH is not set (run through ./scripts/test, which sets it)");
        return None;
    };
    let bin = PathBuf::from(libtorch).join("../../../../bin");
    let ok = Command::new(bin.join("python")).args(["-c", "import torchvision"]).status();
    if !ok.is_ok_and(|s| s.success()) {
        common::skip(test, "torchvision is not installed next to the cached torch (./scripts/test installs it)");
        return None;
    }
    Some(bin.join("torchrun").to_string_lossy().into_owned())
}

/// `torchrun --standalone --nproc-per-node N SCRIPT --batch-size {batch} ...`.
fn job(torchrun: &str, nproc: &str, script: &str, extra: &[&str]) -> Vec<String> {
    let mut argv: Vec<String> =
        [torchrun, "--standalone", "--nproc-per-node", nproc, script, "--batch-size", "{batch}"]
            .map(String::from)
            .into();
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv
}

/// One torchrun at a time: 3 processes on 2 cores already.
static ONE_JOB: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_job() -> std::sync::MutexGuard<'static, ()> {
    ONE_JOB.lock().unwrap_or_else(|e| e.into_inner())
}

fn read_csv<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    csv::Reader::from_path(path).unwrap().deserialize().collect::<Result<_, _>>().unwrap()
}

/// A marker in the environment of everything a run starts, to find what it left behind.
fn marker(test: &str) -> String {
    format!("{test}-{}", std::process::id())
}

/// Live processes (not zombies) whose environment carries the marker.
fn left_behind(marker: &str) -> Vec<String> {
    let needle = format!("VRAMPROBE_TEST_MARKER={marker}\0").into_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("environ")).is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle))
        })
        .map(|e| {
            String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).unwrap_or_default()).replace('\0', " ")
        })
        .collect()
}

fn run(args: &[&str], command: &[String], env: &[(&str, &str)]) -> Output {
    let mut c = vramprobe();
    c.args(args).arg("--").args(command);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// A sweep of `command`; its whole job is rehearsed only where `options`
/// say `--rehearsal` (tests/whole_job.rs tests the rehearsal).
fn sweep(out: &Path, options: &[&str], command: &[String], env: &[(&str, &str)]) -> (Vec<SweepRow>, PlanRow) {
    let out_arg = out.to_string_lossy().into_owned();
    let rehearsal = common::rehearsal_unless_asked(options);
    let args = [&["sweep", "--device", "cpu", "--quiet", "--out", &out_arg][..], options, rehearsal].concat();
    let done = run(&args, command, env);
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    (read_csv(&out.join("sweep.csv")), read_csv::<PlanRow>(&out.join("plan.csv")).remove(0))
}

#[test]
fn every_rank_is_measured_and_the_fullest_sets_the_trials_peak() {
    let test = "every_rank_is_measured_and_the_fullest_sets_the_trials_peak";
    let Some(torchrun) = torchrun(test) else { return };
    let _one = one_job();
    let dir = tempfile::tempdir().unwrap();
    let options = ["--batches", "4,8", "--breakdown", "off"];
    let (trials, plan) = sweep(&dir.path().join("even"), &options, &job(&torchrun, "2", DDP, &[]), &[]);
    let even: Vec<StepRecord> = read_csv(&dir.path().join("even/steps.csv"));
    let steps = &even;
    for t in &trials {
        assert_eq!((t.outcome.name(), t.steps_completed, t.world_size), ("fits", 3, Some(2)), "{t:?}");
        let of = |rank| steps.iter().filter(move |s| s.trial == t.trial && s.rank == Some(rank));
        assert_eq!((of(0).count(), of(1).count()), (3, 3), "3 steps on each rank");
        assert!(steps.iter().filter(|s| s.trial == t.trial).all(|s| s.world_size == Some(2)));
        let peak = |rank| of(rank).map(|s| s.peak_allocated_bytes).max().unwrap();
        assert_eq!(t.peak_allocated_bytes, Some(peak(0).max(peak(1))), "the trial's peak is the fuller rank's");
        assert_eq!(t.rank_spread_bytes, Some(peak(0).abs_diff(peak(1))));
    }
    assert_eq!((plan.world_size, plan.global_batch), (Some(2), Some(plan.recommended_batch * 2)));

    // Rank 1 holds 64 MiB more for the whole job: its peak shows it against
    // its own peak in the even job, and it is the trial's.
    let extra: u64 = 64 << 20;
    let hold = format!("1:hold:{extra}");
    let (uneven, _) = sweep(
        &dir.path().join("uneven"),
        &["--batches", "4", "--breakdown", "off"],
        &job(&torchrun, "2", UNEVEN, &[]),
        &[("UNEVEN_RANK", &hold)],
    );
    let steps: Vec<StepRecord> = read_csv(&dir.path().join("uneven/steps.csv"));
    let peak = |steps: &[StepRecord], trial| {
        steps.iter().filter(|s| s.trial == trial && s.rank == Some(1)).map(|s| s.peak_allocated_bytes).max().unwrap()
    };
    assert_eq!(uneven[0].peak_rank, Some(1));
    let more = peak(&steps, 1) as f64 - peak(&even, 1) as f64;
    assert!((more / extra as f64 - 1.0).abs() < 0.01, "rank 1 holds {more} more, not {extra}");
    let html = std::fs::read_to_string(dir.path().join("uneven/index.html")).unwrap();
    assert!(html.contains("<h2>Ranks</h2>") && html.contains("rank 1"), "per-rank peaks on the page");
}

#[test]
fn the_search_over_a_ddp_command_equals_an_exhaustive_scan() {
    let Some(torchrun) = torchrun("the_search_over_a_ddp_command_equals_an_exhaustive_scan") else { return };
    let _one = one_job();
    let dir = tempfile::tempdir().unwrap();
    let command = job(&torchrun, "2", DDP, &["--image-size", "64"]);
    // Exhaustive from batch 4 (the search's first probe) to 8, unconstrained,
    // each trial's peak the fuller rank's on this machine.
    let every: Vec<String> = (4..=8).map(|b| b.to_string()).collect();
    let scan_options = ["--batches", &every.join(","), "--breakdown", "off"];
    let (scanned, _) = sweep(&dir.path().join("scan"), &scan_options, &command, &[]);
    let peak = |b: u64| scanned.iter().find(|t| t.batch == b).and_then(|t| t.peak_allocated_bytes).unwrap();
    assert!((5..=8).all(|b| peak(b) > peak(b - 1)), "peaks grow with the batch: {scanned:?}");
    // A budget midway between batch 6's peak and 7's: the scan's max is 6.
    let capacity = Budget::capacity_for((peak(6) + peak(7)) / 2, DEFAULT_MARGIN).to_string();
    let scan_max = 6;
    // As a user runs it: the max rehearsed over the whole job, on every rank.
    let (_, search) = sweep(&dir.path().join("search"), &["--capacity", &capacity, "--rehearsal", "on"], &command, &[]);
    assert_eq!(
        (search.max_batch, search.exact, search.strategy.unwrap().to_string().as_str()),
        (scan_max, true, "vramprobe")
    );
    assert_eq!(search.global_batch, Some(search.recommended_batch * 2));
}

#[test]
fn a_rank_out_of_memory_fails_the_trial_and_leaves_no_process() {
    let test = "a_rank_out_of_memory_fails_the_trial_and_leaves_no_process";
    let Some(torchrun) = torchrun(test) else { return };
    let _one = one_job();
    let marker = marker(test);
    let env = [("UNEVEN_RANK", "1:oom"), ("VRAMPROBE_TEST_MARKER", marker.as_str())];
    let done = run(&["check", "--device", "cpu", "--batch", "4"], &job(&torchrun, "2", UNEVEN, &[]), &env);
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert_eq!(done.status.code(), Some(3), "{stdout}{}", String::from_utf8_lossy(&done.stderr));
    assert!(stdout.starts_with("WON'T FIT:") && stdout.contains("rank 1 of 2: out of memory"), "{stdout}");
    assert_eq!(left_behind(&marker), Vec::<String>::new(), "processes outlived the trial");
}

#[test]
fn a_ranks_own_error_is_reported_as_such_and_leaves_no_process() {
    let test = "a_ranks_own_error_is_reported_as_such_and_leaves_no_process";
    let Some(torchrun) = torchrun(test) else { return };
    let _one = one_job();
    let marker = marker(test);
    let env = [("UNEVEN_RANK", "1:raise"), ("VRAMPROBE_TEST_MARKER", marker.as_str())];
    let done = run(&["check", "--device", "cpu", "--batch", "4"], &job(&torchrun, "2", UNEVEN, &[]), &env);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("rank 1 of 2: the command failed at step 1: ValueError: rank 1 has a bad shard"),
        "{stderr}"
    );
    assert!(!stderr.contains("out of memory"), "{stderr}");
    assert_eq!(left_behind(&marker), Vec::<String>::new(), "processes outlived the trial");
}

#[test]
fn sigint_mid_trial_leaves_no_worker() {
    let test = "sigint_mid_trial_leaves_no_worker";
    let Some(torchrun) = torchrun(test) else { return };
    let _one = one_job();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let marker = marker(test);
    // A rank that takes no step: the trial is still running when Ctrl-C comes.
    let code = "import os, time, torch\nif os.environ['RANK'] == '1': time.sleep(120)\n";
    let script = dir.path().join("slow.py");
    std::fs::write(&script, format!("{code}import runpy, sys\nsys.argv = ['{DDP}', *sys.argv[1:]]\nrunpy.run_path('{DDP}', run_name='__main__')\n")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_vramprobe"))
        .args(["sweep", "--device", "cpu", "--quiet", "--batches", "2", "--out"])
        .arg(&out)
        .arg("--")
        .args(job(&torchrun, "2", &script.to_string_lossy(), &[]))
        .env("VRAMPROBE_TEST_MARKER", &marker)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Both ranks have started (each one's records file is there).
    let trial = out.join("trials/001-batch-2");
    let start = std::time::Instant::now();
    while !(trial.join("records-rank-0.jsonl").exists() && trial.join("records-rank-1.jsonl").exists()) {
        assert!(start.elapsed().as_secs() < 90, "the ranks never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let workers = left_behind(&marker);
    assert!(workers.iter().filter(|c| c.contains("slow.py")).count() >= 3, "torchrun and 2 ranks: {workers:?}");
    // SAFETY: kill(2) on the vramprobe we started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(130), "{}", String::from_utf8_lossy(&done.stderr));
    let left: Vec<String> = left_behind(&marker).into_iter().filter(|c| !c.contains("vramprobe")).collect();
    assert_eq!(left, Vec::<String>::new(), "workers survived Ctrl-C");
}

#[test]
fn world_sizes_fit_the_fixed_part_and_predict_larger_jobs() {
    let Some(torchrun) = torchrun("world_sizes_fit_the_fixed_part_and_predict_larger_jobs") else { return };
    let _one = one_job();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let command = job(&torchrun, "{nproc}", DDP, &[]);
    let out_arg = out.to_string_lossy().into_owned();
    let done = run(
        &[
            &["sweep", "--device", "cpu", "--quiet", "--out", &out_arg, "--batches", "4,8", "--world-sizes", "1,2"][..],
            &["--rehearsal", "off", "--breakdown", "off"],
        ]
        .concat(),
        &command,
        &[],
    );
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(done.status.success(), "{stdout}{}", String::from_utf8_lossy(&done.stderr));
    assert!(stdout.contains("predicted (not run)"), "{stdout}");
    let rows: Vec<PlanRow> = read_csv(&out.join("plan.csv"));
    assert_eq!(rows.iter().map(|r| r.world_size).collect::<Vec<_>>(), [Some(1), Some(2)]);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("world-sizes.json")).unwrap()).unwrap();
    // Two world sizes determine the model: it gives back both measured fixed parts.
    let fit = &summary["fit"]["fixed"];
    let at = |w: f64| fit["replicated_bytes"].as_f64().unwrap() + fit["sharded_bytes"].as_f64().unwrap() / w;
    for (row, w) in rows.iter().zip([1.0, 2.0]) {
        let measured = row.fixed_bytes.unwrap() as f64;
        assert!((at(w) - measured).abs() <= 1.0, "W={w}: model {} vs measured {measured}", at(w));
    }
    let predicted: Vec<PlanRow> = read_csv(&out.join("plan-world-sizes.csv"));
    assert_eq!(predicted.first().and_then(|r| r.world_size), Some(4));
    assert!(predicted
        .iter()
        .all(|r| r.strategy.unwrap().to_string() == "predicted-for-world-size" && !r.recommended_verified));
    for r in &predicted {
        let w = r.world_size.unwrap() as f64;
        assert!((r.fixed_bytes.unwrap() as f64 - at(w)).abs() <= 1.0, "{r:?}");
        assert_eq!(r.global_batch, Some(r.recommended_batch * r.world_size.unwrap() as u64));
    }
    // A world size the user names (8 nodes of 8): the same model, the parts apart.
    let plan = vramprobe().args(["plan", "--world-size", "64,128", "--from"]).arg(&out).output().unwrap();
    let said = String::from_utf8_lossy(&plan.stdout);
    assert!(plan.status.success(), "{said}{}", String::from_utf8_lossy(&plan.stderr));
    assert!(said.contains("fixed, does not shrink") && said.contains("NCCL"), "{said}");
    let named: Vec<PlanRow> = read_csv(&out.join("plan-world-size.csv"));
    assert_eq!(named.iter().map(|r| r.world_size).collect::<Vec<_>>(), [Some(64), Some(128)]);
    for r in &named {
        assert!((r.fixed_bytes.unwrap() as f64 - at(r.world_size.unwrap() as f64)).abs() <= 1.0, "{r:?}");
    }
}

/// `--nodes 2 --launcher local`: two torchrun agents on this host, joined
/// by a c10d rendezvous on localhost, one rank each.
const TWO_NODES: [&str; 4] = ["--nodes", "2", "--launcher", "local"];

#[test]
fn two_nodes_on_one_host_join_and_every_rank_of_both_is_measured() {
    let Some(torchrun) = torchrun("two_nodes_on_one_host_join_and_every_rank_of_both_is_measured") else { return };
    let _one = one_job();
    let dir = tempfile::tempdir().unwrap();
    let options = [&TWO_NODES[..], &["--batches", "2", "--breakdown", "off"]].concat();
    let (trials, plan) = sweep(&dir.path().join("nodes"), &options, &job(&torchrun, "1", DDP, &[]), &[]);
    let steps: Vec<StepRecord> = read_csv(&dir.path().join("nodes/steps.csv"));
    for t in &trials {
        assert_eq!((t.outcome.name(), t.steps_completed, t.world_size), ("fits", 3, Some(2)), "{t:?}");
        let mut seen: Vec<(Option<u32>, Option<u32>)> =
            steps.iter().filter(|s| s.trial == t.trial).map(|s| (s.rank, s.node)).collect();
        seen.sort();
        seen.dedup();
        let (ranks, nodes): (Vec<_>, Vec<_>) = seen.iter().cloned().unzip();
        assert_eq!(ranks, [Some(0), Some(1)], "{seen:?}");
        let mut nodes: Vec<_> = nodes.into_iter().flatten().collect();
        nodes.sort();
        assert_eq!(nodes, [0, 1], "one rank on each node: {seen:?}");
        assert_eq!(steps.iter().filter(|s| s.trial == t.trial).count(), 6, "3 steps on each rank");
    }
    assert_eq!(plan.world_size, Some(2));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("nodes/report.json")).unwrap()).unwrap();
    assert_eq!(report["subject"]["nodes"]["count"], 2);
    assert_eq!(report["subject"]["nodes"]["launcher"]["kind"], "local");
}

#[test]
fn a_rank_failing_on_the_second_node_stops_both_and_leaves_no_process() {
    let test = "a_rank_failing_on_the_second_node_stops_both_and_leaves_no_process";
    let Some(torchrun) = torchrun(test) else { return };
    let _one = one_job();
    let marker = marker(test);
    let env = [("UNEVEN_RANK", "1:raise"), ("VRAMPROBE_TEST_MARKER", marker.as_str())];
    let args = [&["check", "--device", "cpu", "--batch", "4"][..], &TWO_NODES].concat();
    let done = run(&args, &job(&torchrun, "1", UNEVEN, &[]), &env);
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("rank 1 of 2") && stderr.contains("rank 1 has a bad shard"), "{stderr}");
    assert_eq!(left_behind(&marker), Vec::<String>::new(), "processes outlived the trial");
}

#[test]
fn a_job_across_nodes_must_be_torchrun_without_its_own_rendezvous() {
    for (command, says) in [
        (vec!["python", "t.py", "{batch}"], "needs a torchrun command"),
        (vec!["torchrun", "--nnodes", "2", "t.py", "{batch}"], "leave --nnodes out"),
    ] {
        let done = run(
            &[&["sweep", "--device", "cpu"][..], &TWO_NODES].concat(),
            &command.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            &[],
        );
        assert_eq!(done.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&done.stderr).contains(says), "{}", String::from_utf8_lossy(&done.stderr));
    }
    let outside = vramprobe()
        .env_remove("SLURM_JOB_ID")
        .args(["sweep", "--nodes", "2", "--launcher", "slurm", "--", "torchrun", "t.py", "{batch}"])
        .output()
        .unwrap();
    assert_eq!(outside.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&outside.stderr).contains("inside a Slurm allocation"));
}

#[test]
fn two_nodes_through_srun_inside_a_slurm_allocation() {
    let test = "two_nodes_through_srun_inside_a_slurm_allocation";
    let (Some(torchrun), Some(conf)) = (torchrun(test), common::slurm_conf(test)) else { return };
    let _one = one_job();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("srun");
    // salloc's own command: vramprobe, inside a two-node allocation.
    let done = Command::new("salloc")
        .env("SLURM_CONF", &conf)
        .args(["--nodes", "2", "--quiet"])
        .arg(env!("CARGO_BIN_EXE_vramprobe"))
        .args([
            "sweep",
            "--device",
            "cpu",
            "--quiet",
            "--nodes",
            "2",
            "--launcher",
            "slurm",
            "--batches",
            "2",
            "--rehearsal",
            "off",
            "--breakdown",
            "off",
            "--out",
        ])
        .arg(&out)
        .arg("--")
        .args(job(&torchrun, "1", DDP, &[]))
        .output()
        .unwrap();
    assert!(done.status.success(), "{}", String::from_utf8_lossy(&done.stderr));
    let trials: Vec<SweepRow> = read_csv(&out.join("sweep.csv"));
    let steps: Vec<StepRecord> = read_csv(&out.join("steps.csv"));
    assert!(trials.iter().all(|t| t.outcome.name() == "fits" && t.world_size == Some(2)), "{trials:?}");
    let nodes = nodes_seen(&steps);
    assert_eq!(nodes, [0, 1], "a rank on each of Slurm's two nodes");
}

#[test]
fn two_nodes_over_ssh_join_and_every_rank_is_measured() {
    let test = "two_nodes_over_ssh_join_and_every_rank_is_measured";
    let (Some(torchrun), Some(sshd)) = (torchrun(test), common::sshd_dir(test)) else { return };
    let _one = one_job();
    let dir = tempfile::tempdir().unwrap();
    // The real ssh, with the local sshd's client config (port, key, known hosts).
    let path = format!("{sshd}/bin:{}", std::env::var("PATH").unwrap_or_default());
    let options =
        ["--nodes", "2", "--launcher", "ssh", "--hosts", "127.0.0.1,localhost", "--batches", "2", "--breakdown", "off"];
    let (trials, _) = sweep(&dir.path().join("ssh"), &options, &job(&torchrun, "1", DDP, &[]), &[("PATH", &path)]);
    assert!(trials.iter().all(|t| t.outcome.name() == "fits" && t.world_size == Some(2)), "{trials:?}");
    let steps: Vec<StepRecord> = read_csv(&dir.path().join("ssh/steps.csv"));
    let nodes = nodes_seen(&steps);
    assert_eq!(nodes, [0, 1], "a rank on each host ssh reached");
}

/// The nodes whose ranks took steps, once each, in order.
fn nodes_seen(steps: &[StepRecord]) -> Vec<u32> {
    let mut nodes: Vec<u32> = steps.iter().filter_map(|s| s.node).collect();
    nodes.sort();
    nodes.dedup();
    nodes
}
