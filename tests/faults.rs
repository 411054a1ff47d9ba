//! Needs the TEST-ONLY `fault-injection` feature (./scripts/test enables it).
#![cfg(feature = "builtin")]
#![cfg(feature = "fault-injection")]
//! The fault matrix: every fault a sweep or a training run can meet, each
//! real (a real OOM inside libtorch, a real signal, a real hang, a real
//! libtorch error), and what must survive it. Faults inside a trial are
//! injected through the TEST-ONLY `VRAMPROBE_TEST_FAULT` (src/fault.rs).
use std::path::Path;
use std::process::{Child, Command as Process, Stdio};
use std::time::{Duration, Instant};
use vramprobe::record::trial::Outcome;

use assert_cmd::Command;
use vramprobe::report::csv::{PlanRow, SweepRow};

fn vramprobe() -> Command {
    Command::cargo_bin("vramprobe").unwrap()
}

/// squeezenet at 32x32 with Adam: each trial takes well under a second.
const SMALL: [&str; 10] =
    ["--model", "squeezenet1_1", "--input", "3x32x32", "--classes", "10", "--device", "cpu", "--optimizer", "adam"];

fn sweep_with_fault(out: &Path, fault: &str, extra: &[&str]) -> std::process::Output {
    vramprobe()
        .env("VRAMPROBE_TEST_FAULT", fault)
        .arg("sweep")
        .args(SMALL)
        .args(["--batches", "2,4", "--quiet", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn plan_row(out: &Path) -> PlanRow {
    let mut r = csv::Reader::from_path(out.join("plan.csv")).unwrap();
    r.deserialize().next().unwrap().unwrap()
}

fn rows(out: &Path) -> Vec<SweepRow> {
    let mut r = csv::Reader::from_path(out.join("sweep.csv")).unwrap();
    r.deserialize().collect::<Result<_, _>>().unwrap()
}

fn report(out: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}

fn assert_clean(stderr: &[u8]) {
    let text = String::from_utf8_lossy(stderr);
    assert!(
        !text.contains("panicked") && !text.contains("stack backtrace") && !text.contains("RUST_BACKTRACE"),
        "{text}"
    );
}

/// No temporary file of an atomic write is left behind.
fn assert_no_temporaries(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".tmp-"), "left {name} in {}", dir.display());
    }
}

/// The tests that count hang grandchildren run one at a time.
static HANGS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Processes whose command line is `sleep 3171` (the hang fault's grandchild).
fn hang_grandchildren() -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .filter(|c| c == b"sleep\x003171\x00")
        .count()
}

#[test]
fn an_oom_in_each_phase_is_an_oom_and_keeps_what_fit() {
    let dir = tempfile::tempdir().unwrap();
    for (fault, phase) in [
        ("oom-data@4", "data creation"),
        ("oom-forward@4", "forward"),
        ("oom-backward@4", "backward"),
        ("oom-optimizer@4", "optimizer step"),
    ] {
        let out = dir.path().join(fault);
        let run = sweep_with_fault(&out, fault, &[]);
        assert_clean(&run.stderr);
        let rows = rows(&out);
        assert_eq!((rows[0].batch, rows[0].outcome.name(), rows[0].steps_completed), (2, "fits", 3), "{fault}");
        assert_eq!((rows[1].batch, rows[1].outcome.name(), rows[1].failed_step), (4, "oom", Some(2)), "{fault}");
        assert!(rows[1].message.starts_with(&format!("out of memory in {phase}:")), "{fault}: {}", rows[1].message);
        // The first step of the failed trial was measured and is kept.
        assert_eq!(rows[1].steps_completed, 1);
        let plan = plan_row(&out);
        assert_eq!(
            (plan.strategy.unwrap().to_string().as_str(), plan.trials, plan.max_batch),
            ("listed-batches", 2, 2),
            "{fault}"
        );
        assert_no_temporaries(&out);
    }
}

#[test]
fn a_libtorch_error_that_is_not_an_oom_is_an_error_never_fits() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = sweep_with_fault(&out, "error@4", &[]);
    assert_clean(&run.stderr);
    let rows = rows(&out);
    assert_eq!((rows[1].outcome.name(), rows[1].failed_step), ("error", Some(2)));
    assert!(rows[1].message.starts_with("error in forward:") && rows[1].message.contains("mat"), "{}", rows[1].message);
    let r = report(&out);
    assert_eq!(r["analysis"]["max_batch"], 2, "an error is not a fit");
}

#[test]
fn a_child_killed_by_a_signal_is_reported_and_the_rest_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = sweep_with_fault(&out, "kill@4", &[]);
    assert_clean(&run.stderr);
    let rows = rows(&out);
    assert_eq!(rows[0].outcome, Outcome::Fits);
    assert_eq!((rows[1].outcome.name(), rows[1].steps_completed), ("killed", 1));
    assert!(rows[1].message.contains("SIGKILL"), "{}", rows[1].message);
    assert_eq!(report(&out)["analysis"]["max_batch"], 2);
}

#[test]
fn a_hanging_child_is_killed_with_its_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let _serial = HANGS.lock().unwrap_or_else(|e| e.into_inner());
    let before = hang_grandchildren();
    // The timeout leaves a healthy trial (about 1.5 s alone) room on a
    // loaded machine: with 4 s, batch 2 itself timed out under the suite.
    let run = sweep_with_fault(&out, "hang@4", &["--trial-timeout", "10"]);
    assert_clean(&run.stderr);
    let rows = rows(&out);
    assert_eq!(rows.iter().map(|r| r.outcome.name()).collect::<Vec<_>>(), ["fits", "timeout"], "{rows:?}");
    assert!(rows[1].message.contains("process group was killed"));
    // The grandchild the hung trial started is gone too.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(hang_grandchildren(), before, "a grandchild of the hung trial survived");
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on a child we started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

#[test]
fn sigint_or_sigterm_mid_sweep_kills_the_trial_and_keeps_what_was_measured() {
    let _serial = HANGS.lock().unwrap_or_else(|e| e.into_inner());
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        let before = hang_grandchildren();
        // Batch 8 hangs, so the signal arrives while a trial is running.
        let child = Process::new(env!("CARGO_BIN_EXE_vramprobe"))
            .env("VRAMPROBE_TEST_FAULT", "hang@8")
            .arg("sweep")
            .args(SMALL)
            .args(["--batches", "2,4,8,16", "--quiet", "--out"])
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for("two finished trials", Duration::from_secs(120), || {
            std::fs::read_to_string(out.join("sweep.csv")).is_ok_and(|t| t.lines().count() == 3)
        });
        wait_for("the hanging trial", Duration::from_secs(60), || hang_grandchildren() > before);
        signal(&child, sig);
        let done = child.wait_with_output().unwrap();
        assert_eq!(done.status.code(), Some(code), "{}", String::from_utf8_lossy(&done.stderr));
        assert_clean(&done.stderr);
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert!(stderr.contains("interrupted by SIG") && stderr.contains("what was measured is in"), "{stderr}");

        let r = report(&out);
        assert_eq!(r["status"], "interrupted");
        let rows = rows(&out);
        assert_eq!(
            rows.iter().map(|r| (r.batch, r.outcome.name())).collect::<Vec<_>>(),
            [(2, "fits"), (4, "fits"), (8, "killed")]
        );
        assert!(rows[2].message.starts_with("interrupted by SIG"), "{}", rows[2].message);
        // The trial's process group went with it, and every file is whole.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(hang_grandchildren(), before, "the trial's grandchild survived");
        assert_no_temporaries(&out);
        assert!(out.join("index.html").exists() && out.join("memory.svg").exists());
        // A saved interrupted run can be redrawn.
        assert!(vramprobe().arg("report").arg(&out).arg("--quiet").output().unwrap().status.success());
    }
}

#[test]
fn sigterm_mid_training_saves_a_checkpoint_that_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.csv");
    std::fs::write(
        &plan,
        "schema_version,model,input,classes,device,optimizer,recommended_batch\n2,squeezenet1_1,3x32x32,10,cpu,adam,4\n",
    )
    .unwrap();
    let (log, ckpt) = (dir.path().join("train.csv"), dir.path().join("run.ckpt"));
    let child = Process::new(env!("CARGO_BIN_EXE_vramprobe"))
        .args(["train", "--steps", "100000", "--log-every", "1", "--plan"])
        .arg(&plan)
        .arg("--log")
        .arg(&log)
        .arg("--checkpoint")
        .arg(&ckpt)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("training steps", Duration::from_secs(120), || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.lines().filter(|l| l.contains(",step,")).count() >= 3)
    });
    signal(&child, libc::SIGTERM);
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(143), "{}", String::from_utf8_lossy(&done.stderr));
    assert_clean(&done.stderr);
    let text = std::fs::read_to_string(&log).unwrap();
    let last = text.lines().last().unwrap();
    assert!(last.contains(",interrupted,"), "{last}");
    let step: u64 = last.split(',').next().unwrap().parse().unwrap();
    assert!(step >= 3);
    // The checkpoint continues where it stopped.
    let resumed = vramprobe()
        .args(["train", "--plan"])
        .arg(&plan)
        .arg("--resume")
        .arg(&ckpt)
        .args(["--steps", &(step + 1).to_string()])
        .output()
        .unwrap();
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(String::from_utf8_lossy(&resumed.stderr).contains(&format!("at step {step}")));
}

#[test]
fn a_full_output_location_is_a_clear_error_and_no_file_is_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("small");
    std::fs::create_dir(&mount).unwrap();
    let mounted = Process::new("mount")
        .args(["-t", "tmpfs", "-o", "size=48k", "tmpfs"])
        .arg(&mount)
        .output()
        .is_ok_and(|o| o.status.success());
    if !mounted {
        eprintln!("skipped: cannot mount a small tmpfs here (needs root and mount permission) to fill a disk");
        return;
    }
    let out = mount.join("run");
    let run =
        vramprobe().arg("sweep").args(SMALL).args(["--batches", "2,4", "--quiet", "--out"]).arg(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    let files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&out)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let _ = Process::new("umount").arg(&mount).status();
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert_clean(stderr.as_bytes());
    assert!(stderr.contains("Error: writing ") && stderr.contains("No space left on device"), "{stderr}");
    // Whatever was written is whole: no temporary, and every report.json parses.
    for (name, bytes) in &files {
        assert!(!name.contains(".tmp-"), "left {name}");
        if name == "report.json" {
            serde_json::from_slice::<serde_json::Value>(bytes).expect("a whole report.json");
        }
    }
}

#[test]
fn an_existing_out_folder_is_never_clobbered_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let first =
        vramprobe().arg("sweep").args(SMALL).args(["--batches", "2", "--quiet", "--out"]).arg(&out).output().unwrap();
    assert!(first.status.success());
    let plan = std::fs::read(out.join("plan.csv")).unwrap();
    let again =
        vramprobe().arg("sweep").args(SMALL).args(["--batches", "4", "--quiet", "--out"]).arg(&out).output().unwrap();
    assert_eq!(again.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(stderr.contains("already exists and holds files") && stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read(out.join("plan.csv")).unwrap(), plan, "the first run's plan is untouched");
    let forced = vramprobe()
        .arg("sweep")
        .args(SMALL)
        .args(["--batches", "4", "--quiet", "--force", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(forced.status.success());

    // Default folders: two runs in the same second get two folders.
    let cwd = dir.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let runs: Vec<Child> = (0..2)
        .map(|_| {
            Process::new(env!("CARGO_BIN_EXE_vramprobe"))
                .current_dir(&cwd)
                .arg("sweep")
                .args(SMALL)
                .args(["--batches", "2", "--quiet"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut r in runs {
        assert!(r.wait().unwrap().success());
    }
    let folders: Vec<_> = std::fs::read_dir(cwd.join("runs")).unwrap().collect();
    assert_eq!(folders.len(), 2);
}
