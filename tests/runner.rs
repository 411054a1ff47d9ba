//! The parent classifies every way a trial child can end, with real child
//! processes: stand-in scripts that behave like a child that reports an OOM,
//! dies from a signal, hangs, or exits with an error.
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use vramprobe::measure::device::Device;
use vramprobe::measure::optim::OptimizerKind;
use vramprobe::measure::record::Outcome;
use vramprobe::measure::runner::run_trial;
use vramprobe::measure::trial::TrialSpec;
use vramprobe::measure::workload::WorkloadConfig;

fn script(dir: &tempfile::TempDir, body: &str) -> PathBuf {
    let path = dir.path().join("child.sh");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(f, "#!/bin/sh\n{body}").unwrap();
    drop(f);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn spec() -> TrialSpec {
    TrialSpec {
        workload: WorkloadConfig {
            model: "resnet18".into(),
            input: vec![3, 32, 32],
            classes: 10,
            optimizer: OptimizerKind::Adam,
            lr: 1e-3,
            precision: Default::default(),
            mode: Default::default(),
        },
        device: Device::Cpu,
        batch: 8,
        steps: 3,
        limit: Default::default(),
    }
}

#[test]
fn a_reported_oom_is_an_oom_with_its_steps_kept() {
    let dir = tempfile::tempdir().unwrap();
    let exe = script(
        &dir,
        r#"echo '{"kind":"step","step":1,"batch":8,"step_seconds":0.5,"data_seconds":0,"forward_seconds":0,"backward_seconds":0,"optimizer_seconds":0,"samples_per_second":16,"allocated_bytes":10,"peak_allocated_bytes":20}'
echo 'some library chatter'
echo '{"kind":"end","outcome":"oom","message":"out of memory in backward: CUDA out of memory. Tried to allocate 2.00 GiB","failed_step":2}'"#,
    );
    let r = run_trial(&exe, 4, &spec(), Duration::from_secs(30), |_| {});
    assert_eq!(r.outcome, Outcome::Oom);
    assert_eq!(r.failed_step, Some(2));
    assert_eq!(r.steps.len(), 1);
    assert_eq!(r.steps[0].trial, 4);
    assert_eq!(r.peak_allocated_bytes(), Some(20));
}

#[test]
fn a_child_killed_by_a_signal_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = script(&dir, "kill -9 $$");
    let r = run_trial(&exe, 1, &spec(), Duration::from_secs(30), |_| {});
    assert_eq!(r.outcome, Outcome::Killed);
    assert!(r.message.unwrap().contains("SIGKILL"));
}

#[test]
fn a_hanging_child_and_its_children_are_killed_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("grandchild-survived");
    let exe = script(&dir, &format!("(sleep 3; touch {}) &\nsleep 60", marker.display()));
    let started = Instant::now();
    let r = run_trial(&exe, 1, &spec(), Duration::from_secs(1), |_| {});
    assert_eq!(r.outcome, Outcome::Timeout);
    assert!(started.elapsed() < Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(3));
    assert!(!marker.exists(), "the whole process group is killed");
}

#[test]
fn a_child_that_exits_without_a_result_is_an_error_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let exe = script(&dir, "echo 'libtorch_cpu.so: cannot open shared object file' >&2; exit 127");
    let r = run_trial(&exe, 1, &spec(), Duration::from_secs(30), |_| {});
    assert_eq!(r.outcome, Outcome::Error);
    let msg = r.message.unwrap();
    assert!(msg.contains("code 127") && msg.contains("cannot open shared object"), "{msg}");
}

#[test]
fn a_missing_binary_is_an_error_not_a_panic() {
    let r = run_trial(std::path::Path::new("/nonexistent/vramprobe"), 1, &spec(), Duration::from_secs(5), |_| {});
    assert_eq!(r.outcome, Outcome::Error);
    assert!(r.message.unwrap().contains("could not start"));
}
