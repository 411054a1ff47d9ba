//! `--parallel`: trials side by side, each in its own process, give the
//! same peaks, byte for byte, and the same max as one at a time, on a
//! built-in model, on a Python command and on a torchrun job (CPU here;
//! scripts/gpu-check runs it on GPUs when one is lent).
#![cfg(feature = "builtin")]
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{capacity_for_max, vramprobe, DEFAULT_MARGIN};
use vramprobe::analyze::fit::LinearFit;
use vramprobe::analyze::note::Note;
use vramprobe::analyze::run::RunRecord;
use vramprobe::record::trial::TrialResult;

use crate::common;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train_resnet18.py");
const DDP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ddp_train.py");

/// A sweep into `out`, `--parallel` as given; its report. A command's
/// whole job is not rehearsed (tests/whole_job.rs tests that).
fn sweep(out: &Path, parallel: &str, options: &[&str], command: &[String]) -> RunRecord {
    let mut c = vramprobe();
    c.args(["sweep", "--device", "cpu", "--quiet", "--parallel", parallel, "--out"]).arg(out).args(options);
    if !command.is_empty() {
        c.args(common::rehearsal_unless_asked(options)).arg("--").args(command);
    }
    let run = c.output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}

/// Each batch's peaks in a run: every step's, by rank and step (ranks
/// report in whatever order they finish).
fn peaks(report: &RunRecord) -> BTreeMap<u64, Vec<(Option<u32>, u32, u64)>> {
    let steps = |t: &TrialResult| {
        let mut steps: Vec<_> = t.steps.iter().map(|s| (s.rank, s.step, s.peak_allocated_bytes)).collect();
        steps.sort();
        steps
    };
    report.trials.iter().filter(|t| t.rehearsal.is_none()).map(|t| (t.batch, steps(t))).collect()
}

/// The same max, recommendation and peaks from `--parallel 2` as from 1,
/// and the side-by-side run said how its rounds went.
fn same_answer(one: &RunRecord, two: &RunRecord) {
    let (a, b) = (one.analysis.as_ref().unwrap(), two.analysis.as_ref().unwrap());
    assert_eq!((a.max_batch, a.exact, a.recommended_batch), (b.max_batch, b.exact, b.recommended_batch));
    assert!(a.max_batch > 0);
    let (p1, p2) = (peaks(one), peaks(two));
    let common: Vec<&u64> = p1.keys().filter(|b| p2.contains_key(b)).collect();
    assert!(common.len() >= 2, "{p1:?} {p2:?}");
    for batch in common {
        assert_eq!(p1[batch], p2[batch], "batch {batch}: each step's peak, alone and side by side");
    }
    let rounds = two.notes.iter().find_map(|n| match n {
        Note::SideBySide { width, rounds, trials, .. } => Some((*width, *rounds, *trials)),
        _ => None,
    });
    let (width, rounds, trials) = rounds.unwrap_or_else(|| panic!("{:?}", two.notes));
    assert_eq!(width, 2);
    assert!(rounds < trials, "{rounds} rounds of {trials} trials");
    assert!(!one.notes.iter().any(|n| matches!(n, Note::SideBySide { .. })));
}

#[test]
fn a_built_in_models_trials_side_by_side_measure_as_one_at_a_time() {
    let workload = ["--model", "resnet18", "--input", "3x32x32", "--classes", "10", "--optimizer", "sgd"];
    let cpu = [&workload[..], &["--device", "cpu"]].concat();
    let capacity = capacity_for_max(&cpu, (4, 16), 24, DEFAULT_MARGIN).to_string();
    let dir = tempfile::tempdir().unwrap();
    let options = [&workload[..], &["--capacity", &capacity]].concat();
    let one = sweep(&dir.path().join("one"), "1", &options, &[]);
    let two = sweep(&dir.path().join("two"), "2", &options, &[]);
    same_answer(&one, &two);
}

/// The example command's line through batches 4 and 8, and a capacity whose max is 12.
fn command_capacity(dir: &Path, command: &[String]) -> String {
    let line = sweep(&dir.join("line"), "1", &["--batches", "4,8", "--breakdown", "off"], command);
    let points: Vec<(u64, u64)> = line.trials.iter().map(|t| (t.batch, t.peak_allocated_bytes().unwrap())).collect();
    LinearFit::fit(&points).unwrap().capacity_for_max(12, DEFAULT_MARGIN).to_string()
}

#[test]
fn a_commands_trials_side_by_side_measure_as_one_at_a_time() {
    let Some(python) = common::torch_python("a_commands_trials_side_by_side_measure_as_one_at_a_time") else { return };
    let command: Vec<String> =
        [python.as_str(), EXAMPLE, "--batch-size", "{batch}", "--image-size", "64"].map(String::from).into();
    let dir = tempfile::tempdir().unwrap();
    let capacity = command_capacity(dir.path(), &command);
    let options = ["--capacity", capacity.as_str(), "--breakdown", "off"];
    let one = sweep(&dir.path().join("one"), "1", &options, &command);
    let two = sweep(&dir.path().join("two"), "2", &options, &command);
    same_answer(&one, &two);
}

/// The cached torch's torchrun, where torchvision is beside it.
fn torchrun(test: &str) -> Option<String> {
    let python = common::torch_python(test)?;
    Some(PathBuf::from(python).with_file_name("torchrun").to_string_lossy().into_owned())
}

#[test]
fn a_torchrun_jobs_trials_side_by_side_measure_as_one_at_a_time() {
    let Some(torchrun) = torchrun("a_torchrun_jobs_trials_side_by_side_measure_as_one_at_a_time") else { return };
    let command: Vec<String> =
        [torchrun.as_str(), "--standalone", "--nproc-per-node", "2", DDP, "--batch-size", "{batch}"]
            .map(String::from)
            .into();
    let dir = tempfile::tempdir().unwrap();
    // Listed batches: the next is the guess beside each (2 rounds for 3 trials).
    let options = ["--batches", "2,4,8", "--breakdown", "off"];
    let one = sweep(&dir.path().join("one"), "1", &options, &command);
    let two = sweep(&dir.path().join("two"), "2", &options, &command);
    same_answer(&one, &two);
    // Every rank of every trial measured, side by side too.
    assert!(two.trials.iter().all(|t| t.world_size == Some(2)), "{:?}", two.trials);
}

/// `sweep --fresh-process` here, and the same sweep with its trials placed
/// by a scheduler (`--launcher slurm|ray --parallel 2`): the same answer
/// and the same peaks, each trial a fresh process either way.
fn scheduled_as_here(
    test: &str,
    python: &str,
    launcher: &str,
    wrap: impl FnOnce(std::process::Command) -> std::process::Command,
) {
    let command: Vec<String> =
        [python, EXAMPLE, "--batch-size", "{batch}", "--image-size", "64"].map(String::from).into();
    let dir = tempfile::tempdir().unwrap();
    let options = ["--batches", "2,4,8", "--breakdown", "off", "--rehearsal", "off", "--fresh-process"];
    let one = sweep(&dir.path().join("here"), "1", &options, &command);
    let out = dir.path().join(launcher);
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_vramprobe"));
    c.args(["sweep", "--device", "cpu", "--quiet", "--parallel", "2", "--launcher", launcher, "--out"])
        .arg(&out)
        .args(options)
        .arg("--")
        .args(&command);
    let done = wrap(c).output().unwrap();
    assert!(done.status.success(), "{test}: {}", String::from_utf8_lossy(&done.stderr));
    let two: RunRecord = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    same_answer(&one, &two);
    assert!(two.notes.iter().any(|n| n.to_string().contains("a job of the scheduler")), "{:?}", two.notes);
}

#[test]
fn trials_as_slurm_job_steps_measure_as_here() {
    let test = "trials_as_slurm_job_steps_measure_as_here";
    let (Some(python), Some(conf)) = (common::torch_python(test), common::slurm_conf(test)) else { return };
    scheduled_as_here(test, &python, "slurm", |c| {
        // salloc's own command: vramprobe, inside a two-node allocation.
        let mut salloc = std::process::Command::new("salloc");
        salloc.env("SLURM_CONF", &conf).args(["--nodes", "2", "--quiet"]).arg(c.get_program()).args(c.get_args());
        salloc
    });
}

#[test]
fn trials_as_ray_tasks_measure_as_here() {
    let test = "trials_as_ray_tasks_measure_as_here";
    let Some(python) = common::torch_python(test) else { return };
    let ray = PathBuf::from(&python).with_file_name("ray");
    if !ray.is_file() {
        return common::skip(test, "Ray is not installed next to the cached torch (./scripts/test installs it)");
    }
    // A real Ray head on this host, for this test alone.
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let temp = dir.path().join("ray");
    let head = std::process::Command::new(&ray)
        .args([
            "start",
            "--head",
            "--num-cpus",
            "2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--port",
            &port,
        ])
        .arg(format!("--temp-dir={}", temp.display()))
        .output()
        .unwrap();
    let _stop = RayHead(ray);
    assert!(head.status.success(), "{}", String::from_utf8_lossy(&head.stderr));
    let address = format!("127.0.0.1:{port}");
    scheduled_as_here(test, &python, "ray", |mut c| {
        c.env("RAY_ADDRESS", &address);
        c
    });
}

/// Stops the test's Ray head however the test ends.
struct RayHead(PathBuf);

impl Drop for RayHead {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.0).args(["stop", "--force"]).output();
    }
}

/// CPU trials side by side: every trial's process sees OpenMP's threads
/// told to wait passively, and the report says so, unless the user chose a
/// policy of their own, which every trial keeps.
#[test]
fn cpu_trials_side_by_side_wait_passively_unless_the_user_chose() {
    let Some(python) = common::torch_python("cpu_trials_side_by_side_wait_passively_unless_the_user_chose") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Each trial writes the policy it sees, then runs the example.
    let script = r#"printf %s "${OMP_WAIT_POLICY-unset}" > "$0/$1"; exec "$2" "$3" --batch-size "$1" --image-size 32"#;
    for (user, seen, said) in [(None, "PASSIVE", true), (Some("ACTIVE"), "ACTIVE", false)] {
        let (out, policies) = (dir.path().join(seen), dir.path().join(format!("{seen}-seen")));
        std::fs::create_dir(&policies).unwrap();
        let mut c = vramprobe();
        c.args(["sweep", "--device", "cpu", "--quiet", "--parallel", "2", "--batches", "2,4", "--breakdown", "off"])
            .args(["--rehearsal", "off", "--out"])
            .arg(&out)
            .args(["--", "sh", "-c", script])
            .arg(&policies)
            .args(["{batch}", &python, EXAMPLE]);
        match user {
            None => c.env_remove("OMP_WAIT_POLICY"),
            Some(policy) => c.env("OMP_WAIT_POLICY", policy),
        };
        let run = c.output().unwrap();
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        for batch in ["2", "4"] {
            assert_eq!(std::fs::read_to_string(policies.join(batch)).unwrap(), seen, "batch {batch}");
        }
        let report = std::fs::read_to_string(out.join("report.json")).unwrap();
        assert_eq!(report.contains("OMP_WAIT_POLICY=PASSIVE"), said, "{report}");
    }
}
