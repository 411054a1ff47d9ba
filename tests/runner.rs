//! The parent classifies every way a trial child can end, with real child
//! processes: stand-in scripts that behave like a child that reports an OOM,
//! dies from a signal, hangs, exits with an error, or breaks the protocol.
//! A stand-in is run as `child.sh trial --spec DIR/spec.json` and writes its
//! records to `DIR/records.jsonl`, as the real child does.
#![cfg(feature = "builtin")]
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use vramprobe::record::device::Device;
use vramprobe::record::trial::{Outcome, TrialResult, TrialSpec, PROTOCOL_VERSION};
use vramprobe::record::workload::{OptimizerKind, WorkloadConfig};

/// The stand-in's records file: beside the spec the runner names in `$3`.
const RECORDS: &str = r#""$(dirname "$3")/records.jsonl""#;

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
        workload: Some(WorkloadConfig {
            model: "resnet18".into(),
            input: vec![3, 32, 32],
            classes: 10,
            optimizer: OptimizerKind::Adam,
            lr: 1e-3,
            precision: Default::default(),
            mode: Default::default(),
        }),
        ..TrialSpec::new(8, 3, Device::Cpu, Default::default())
    }
}

/// Runs `exe` as trial `trial`, its folder in `dir`.
fn run_trial(
    exe: &std::path::Path,
    dir: &tempfile::TempDir,
    trial: u32,
    spec: &TrialSpec,
    timeout: Duration,
    on_step: impl FnMut(&vramprobe::record::trial::StepRecord),
) -> TrialResult {
    vramprobe::measure::runner::run_trial(exe, dir.path().join("trial"), trial, spec, timeout, on_step)
}

fn start() -> String {
    format!(
        r#"{{"kind":"start","schema_version":{PROTOCOL_VERSION},"parameters":1,"parameter_bytes":4,"device_name":"CPU","device_total_bytes":null}}"#
    )
}

#[test]
fn a_reported_oom_is_an_oom_with_its_steps_kept() {
    let dir = tempfile::tempdir().unwrap();
    let exe = script(
        &dir,
        &format!(
            r#"echo '{}' >> {RECORDS}
echo '{{"kind":"step","step":1,"batch":8,"step_seconds":0.5,"samples_per_second":16,"allocated_bytes":10,"peak_allocated_bytes":20}}' >> {RECORDS}
echo 'some library chatter on stdout, which is no channel of the protocol'
echo '{{"kind":"end","outcome":"oom","message":"out of memory in backward: CUDA out of memory. Tried to allocate 2.00 GiB","failed_step":2}}' >> {RECORDS}"#,
            start()
        ),
    );
    let r = run_trial(&exe, &dir, 4, &spec(), Duration::from_secs(30), |_| {});
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
    let r = run_trial(&exe, &dir, 1, &spec(), Duration::from_secs(30), |_| {});
    assert_eq!(r.outcome, Outcome::Killed);
    assert!(r.message.unwrap().contains("SIGKILL"));
}

#[test]
fn a_hanging_child_and_its_children_are_killed_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("grandchild-survived");
    let exe = script(&dir, &format!("(sleep 3; touch {}) &\nsleep 60", marker.display()));
    let started = Instant::now();
    let r = run_trial(&exe, &dir, 1, &spec(), Duration::from_secs(1), |_| {});
    assert_eq!(r.outcome, Outcome::Timeout);
    assert!(started.elapsed() < Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(3));
    assert!(!marker.exists(), "the whole process group is killed");
}

#[test]
fn a_child_that_exits_without_a_result_is_an_error_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let exe = script(&dir, "echo 'libtorch_cpu.so: cannot open shared object file' >&2; exit 127");
    let r = run_trial(&exe, &dir, 1, &spec(), Duration::from_secs(30), |_| {});
    assert_eq!(r.outcome, Outcome::Error);
    let msg = r.message.unwrap();
    assert!(msg.contains("code 127") && msg.contains("cannot open shared object"), "{msg}");
}

#[test]
fn a_missing_binary_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let r = run_trial(std::path::Path::new("/nonexistent/vramprobe"), &dir, 1, &spec(), Duration::from_secs(5), |_| {});
    assert_eq!(r.outcome, Outcome::Error);
    assert!(r.message.unwrap().contains("could not start"));
}

#[test]
fn the_runner_writes_the_spec_the_child_reads() {
    let dir = tempfile::tempdir().unwrap();
    let exe = script(&dir, &format!("cp \"$3\" {}/seen.json", dir.path().display()));
    run_trial(&exe, &dir, 1, &spec(), Duration::from_secs(30), |_| {});
    let seen: TrialSpec = serde_json::from_slice(&std::fs::read(dir.path().join("seen.json")).unwrap()).unwrap();
    assert_eq!(seen, spec());
}

/// A line that is not a record, or a record with a field the protocol does
/// not have, fails the trial with the line shown: never dropped, never a fit.
#[test]
fn a_record_that_breaks_the_protocol_fails_the_trial_with_the_line() {
    let step = r#"{"kind":"step","step":1,"batch":8,"step_seconds":0.5,"samples_per_second":16,"allocated_bytes":10,"peak_allocated_bytes":20}"#;
    let fits = r#"{"kind":"end","outcome":"fits","message":null,"failed_step":null}"#;
    let cases = [
        ("half a record {\"kind\":", "not a trial record"),
        (
            r#"{"kind":"step","step":1,"batch":8,"step_seconds":0.5,"samples_per_second":16,"allocated_bytes":10,"peak_allocated_bytes":20,"surprise":1}"#,
            "unknown field `surprise`",
        ),
        (r#"{"kind":"teatime"}"#, "unknown variant `teatime`"),
    ];
    for (bad, why) in cases {
        let dir = tempfile::tempdir().unwrap();
        let body = format!(
            "echo '{}' >> {RECORDS}\necho '{step}' >> {RECORDS}\necho '{bad}' >> {RECORDS}\necho '{fits}' >> {RECORDS}",
            start()
        );
        let r = run_trial(&script(&dir, &body), &dir, 1, &spec(), Duration::from_secs(30), |_| {});
        assert_eq!(r.outcome, Outcome::Error, "{bad}");
        let message = r.message.unwrap();
        assert!(message.contains("trial protocol error in records.jsonl") && message.contains(why), "{message}");
        assert!(message.contains(&bad.chars().take(20).collect::<String>()), "the line is shown: {message}");
    }
}

#[test]
fn a_child_of_another_protocol_version_fails_the_trial() {
    let dir = tempfile::tempdir().unwrap();
    let other = start().replace(&format!(r#""schema_version":{PROTOCOL_VERSION}"#), r#""schema_version":99"#);
    let fits = r#"{"kind":"end","outcome":"fits","message":null,"failed_step":null}"#;
    let exe = script(&dir, &format!("echo '{other}' >> {RECORDS}\necho '{fits}' >> {RECORDS}"));
    let r = run_trial(&exe, &dir, 1, &spec(), Duration::from_secs(30), |_| {});
    assert_eq!(r.outcome, Outcome::Error);
    assert!(r.message.unwrap().contains("protocol version 99"));
}
