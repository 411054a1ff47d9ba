//! On a shared server no other account can drive a trial or forge what a
//! verdict is read from (docs/security.md): the pre-imported interpreter
//! serves only this sweep, scratch folders are fresh and private, and the
//! hook's cache is the user's own. tests/fixtures/probe_trust.py tries the
//! attacks from inside a real trial and writes down what happened.
#![cfg(feature = "builtin")]
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use common::vramprobe;

use crate::common;

const PROBE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/probe_trust.py");

/// A folder for the probe's findings, with the script the unsigned request names.
fn probe_out(base: &Path) -> PathBuf {
    let out = base.join("probe");
    fs::create_dir(&out).unwrap();
    let marker = out.join("marker-ran");
    fs::write(out.join("marker.py"), format!("open({:?}, 'w').close()\n", marker.to_str().unwrap())).unwrap();
    out
}

fn findings(out: &Path, batch: u64) -> serde_json::Value {
    let path = out.join(format!("findings-{batch}.json"));
    serde_json::from_slice(&fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

fn mkdir_mode(path: &Path, mode: u32) -> PathBuf {
    fs::create_dir_all(path).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    path.to_path_buf()
}

#[test]
fn the_interpreter_serves_only_this_sweep_and_leaves_no_socket() {
    let Some(python) = common::torch_python("the_interpreter_serves_only_this_sweep_and_leaves_no_socket") else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let runtime = mkdir_mode(&base.path().join("runtime"), 0o700);
    let tmp = mkdir_mode(&base.path().join("tmp"), 0o700);
    let probe = probe_out(base.path());
    let run = vramprobe()
        .args(["sweep", "--device", "cpu", "--quiet", "--batches", "4,8", "--breakdown", "off", "--out"])
        .arg(base.path().join("run"))
        .args(["--", &python, PROBE, "{batch}"])
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("TMPDIR", &tmp)
        .env("PROBE_OUT", &probe)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let report = fs::read_to_string(base.path().join("run/report.json")).unwrap();
    assert!(report.contains("forked from one pre-imported Python interpreter"), "{report}");
    for batch in [4, 8] {
        let seen = findings(&probe, batch);
        // The socket was in a fresh folder of its own under XDG_RUNTIME_DIR, mode 0700.
        let socket = PathBuf::from(seen["socket"].as_str().expect("the probe found the socket"));
        assert_eq!(socket.parent().unwrap().parent().unwrap(), runtime, "{seen}");
        assert_eq!(seen["socket_folder_mode"], 0o700, "{seen}");
        assert_eq!(seen["unsigned_request"], "sent", "{seen}");
        assert_eq!(seen["secret_in_env"], false, "the job never sees the secret: {seen}");
    }
    // Each request without the secret was read, refused, and ran nothing.
    assert!(!probe.join("marker-ran").exists(), "a request without the secret ran its script");
    let log = fs::read_to_string(base.path().join("run/trials/preimport.log")).unwrap();
    assert!(log.contains("refused a request without this sweep's secret"), "{log}");
    // The socket and its folder are gone with the sweep.
    assert_eq!(fs::read_dir(&runtime).unwrap().count(), 0, "left in XDG_RUNTIME_DIR");
    // The trial folders, where the records are read from, are the user's alone.
    let trials = base.path().join("run/trials");
    assert_eq!(fs::metadata(&trials).unwrap().mode() & 0o777, 0o700);
    assert_eq!(fs::metadata(trials.join("001-batch-4")).unwrap().mode() & 0o777, 0o700);
}

#[test]
fn check_ignores_a_scratch_folder_someone_made_first() {
    let base = tempfile::tempdir().unwrap();
    let tmp = mkdir_mode(&base.path().join("tmp"), 0o1777);
    let victim = base.path().join("victim");
    fs::create_dir(&victim).unwrap();
    // The name check used to take, made first: `$$` is the pid `exec` keeps.
    let pid_named = "ln -s \"$VICTIM\" \"$TMPDIR/vramprobe-check-$$\" && mkdir \"$TMPDIR/vramprobe-check-$$-x\" && exec \"$0\" \"$@\"";
    let exe = assert_cmd::cargo::cargo_bin("vramprobe");
    let run = std::process::Command::new("sh")
        .args(["-c", pid_named])
        .arg(exe)
        .args(["check", "--model", "resnet18", "--input", "3x32x32", "--classes", "10", "--batch", "2"])
        .args(["--device", "cpu", "--steps", "2"])
        .env("TMPDIR", &tmp)
        .env("VICTIM", &victim)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.starts_with("FITS: "), "{stdout}");
    assert_eq!(fs::read_dir(&victim).unwrap().count(), 0, "check wrote into a folder it did not make");
    // Its own scratch folder is gone after a verdict; the planted names stay untouched.
    let left: Vec<String> =
        fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left.iter().all(|n| n.starts_with("vramprobe-check-")), "{left:?}");
}

#[test]
fn a_group_writable_hook_cache_is_refused_with_its_reason() {
    let base = tempfile::tempdir().unwrap();
    let cache = mkdir_mode(&base.path().join("cache"), 0o775);
    let out = base.path().join("run");
    let run = vramprobe()
        .args(["sweep", "--device", "cpu", "--quiet", "--batches", "2", "--out"])
        .arg(&out)
        .args(["--", "python3", PROBE, "{batch}"])
        .env("VRAMPROBE_CACHE", &cache)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("Error: "), "{stderr}");
    assert!(
        stderr.contains(&format!("vramprobe's cache {} is writable by other accounts (mode 775)", cache.display())),
        "{stderr}"
    );
    // Nothing was installed into it, and no trial ran.
    assert_eq!(fs::read_dir(&cache).unwrap().count(), 0);
    assert!(!out.join("trials/001-batch-2").exists());
    // Without HOME or VRAMPROBE_CACHE there is no shared folder to fall back to.
    let run = vramprobe()
        .args(["sweep", "--device", "cpu", "--quiet", "--batches", "2", "--out"])
        .arg(base.path().join("run2"))
        .args(["--", "python3", PROBE, "{batch}"])
        .env_remove("HOME")
        .env_remove("VRAMPROBE_CACHE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && stderr.contains("HOME is not set: set VRAMPROBE_CACHE"), "{stderr}");
}

/// A second account for the test, made with useradd where it is missing;
/// None where this is not root or no account can be made.
fn second_account(test: &str) -> Option<u32> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip(test, "a second account can be made and used only as root (CI runs as root)");
        return None;
    }
    let name = "vramprobe-other";
    let id = |n: &str| std::process::Command::new("id").args(["-u", n]).output().ok().filter(|o| o.status.success());
    if id(name).is_none() {
        let _ = std::process::Command::new("useradd")
            .args(["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
            .output();
    }
    match id(name) {
        Some(out) => String::from_utf8_lossy(&out.stdout).trim().parse().ok(),
        None => {
            common::skip(test, "useradd could not make a second account");
            None
        }
    }
}

#[test]
fn a_second_account_reaches_neither_the_interpreter_nor_a_trials_records() {
    let test = "a_second_account_reaches_neither_the_interpreter_nor_a_trials_records";
    let Some(python) = common::torch_python(test) else { return };
    let Some(other) = second_account(test) else { return };
    // A shared server: a temp folder anyone can write to, folders anyone can
    // enter, and the user's umask 002 with the other account in its group.
    let base = tempfile::tempdir().unwrap();
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let tmp = mkdir_mode(&base.path().join("tmp"), 0o1777);
    let probe = probe_out(base.path());
    let exe = assert_cmd::cargo::cargo_bin("vramprobe");
    let with_umask = |args: &[&str]| {
        std::process::Command::new("sh")
            .args(["-c", "umask 002 && exec \"$0\" \"$@\""])
            .arg(&exe)
            .args(args)
            .args(["--", &python, PROBE, "{batch}"])
            .env("TMPDIR", &tmp)
            .env_remove("XDG_RUNTIME_DIR")
            .env("PROBE_OUT", &probe)
            .env("PROBE_OTHER_UID", other.to_string())
            .output()
            .unwrap()
    };
    let out = base.path().join("run");
    let sweep = with_umask(&[
        "sweep",
        "--device",
        "cpu",
        "--quiet",
        "--batches",
        "4,8",
        "--breakdown",
        "off",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(sweep.status.success(), "{}", String::from_utf8_lossy(&sweep.stderr));
    let check = with_umask(&["check", "--device", "cpu", "--batch", "6"]);
    assert_eq!(check.status.code(), Some(0), "{}", String::from_utf8_lossy(&check.stderr));
    // Batches 4 and 8 ran in the sweep (forked from the interpreter), 6 in check (its scratch folder).
    for (batch, socket) in [(4, true), (8, true), (6, false)] {
        let seen = findings(&probe, batch);
        let mut tried = vec!["other_writes_records", "other_writes_trial_folder", "other_writes_above"];
        if socket {
            tried.push("other_connects");
        }
        for attempt in tried {
            let what = seen[attempt].as_str().unwrap_or_else(|| panic!("batch {batch}: {attempt} not tried: {seen}"));
            assert!(what.starts_with("refused"), "batch {batch}: {attempt}: {what} ({seen})");
        }
    }
    assert!(!probe.join("marker-ran").exists());
}

const AUTH_UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/test_zygote_auth.py");

#[test]
fn the_interpreter_serves_only_requests_with_the_secret() {
    // Plain Python, no torch: the machine's python3.
    let unit = std::process::Command::new("python3").arg(AUTH_UNIT).env_remove("OTHER_UID").output().unwrap();
    let stderr = String::from_utf8_lossy(&unit.stderr);
    assert!(unit.status.success(), "{stderr}");
    assert!(stderr.contains("Ran 4 tests") && stderr.contains("OK (skipped=1)"), "{stderr}");
}

#[test]
fn the_interpreter_refuses_another_uid_that_knows_the_secret() {
    let test = "the_interpreter_refuses_another_uid_that_knows_the_secret";
    let Some(other) = second_account(test) else { return };
    let unit = std::process::Command::new("python3")
        .args([AUTH_UNIT, "Authorized.test_another_uid_is_refused_even_with_the_secret"])
        .env("OTHER_UID", other.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&unit.stderr);
    assert!(unit.status.success(), "{stderr}");
    assert!(stderr.contains("Ran 1 test") && stderr.trim_end().ends_with("OK"), "{stderr}");
}
