//! Every bad input gets one clear line and the documented exit code (2 for
//! usage errors, 1 for runtime failures), never a panic or a backtrace.
#![cfg(feature = "builtin")]
use assert_cmd::Command;

fn vramprobe() -> Command {
    let mut cmd = Command::cargo_bin("vramprobe").unwrap();
    // Even with backtraces requested, none may appear.
    cmd.env("RUST_BACKTRACE", "1");
    cmd
}

fn assert_clean(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr).into_owned();
    assert!(!text.contains("panicked"), "panic in stderr: {text}");
    assert!(!text.contains("stack backtrace"), "backtrace in stderr: {text}");
    text
}

/// Runs `args`, expects `code`, and returns stderr.
fn fails(args: &[&str], code: i32) -> String {
    let out = vramprobe().args(args).output().unwrap();
    assert_eq!(out.status.code(), Some(code), "args {args:?}: stderr {}", String::from_utf8_lossy(&out.stderr));
    assert_clean(&out.stderr)
}

#[test]
fn unknown_model_lists_the_known_ones() {
    let err = fails(&["sweep", "--model", "resnet19"], 2);
    assert!(err.contains("unknown model 'resnet19'") && err.contains("resnet18, resnet34"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn malformed_options_are_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["--input", "3x224"], "--input"),
        (&["--input", "3xax224"], "--input"),
        (&["--input", "3x0x224"], "--input"),
        (&["--capacity", "6XB"], "invalid size"),
        (&["--capacity", "-6GiB"], "invalid size"),
        (&["--batches", "1,two"], "--batches"),
        (&["--batches", "0,2"], "at least 1"),
        (&["--batches", "-4"], "--batches"),
        (&["--max-batch", "0"], "at least 1"),
        (&["--max-batch", "-3"], "max-batch"),
        (&["--margin", "120%"], "invalid margin"),
        (&["--device", "gpu"], "invalid --device"),
        (&["--optimizer", "lion"], "lion"),
        (&["--lr", "-1"], "learning rate"),
        (&["--steps", "1"], "--verify-steps"),
        (&["--verify-steps", "0"], "--verify-steps"),
        (&["--tolerance", "-1"], "--tolerance"),
        (&["--strategy", "guess"], "guess"),
        (&["--batches", "1,2", "--strategy", "accelerate"], "cannot be used with"),
        (&["--classes", "0"], "--classes"),
        (&["--classes", "-2"], "--classes"),
        (&["--steps", "-1"], "--verify-steps"),
        (&["--multiple-of", "0"], "--multiple-of"),
        (&["--trial-timeout", "0"], "--trial-timeout"),
    ];
    for (extra, expected) in cases {
        let mut args = vec!["sweep", "--model", "resnet18"];
        args.extend_from_slice(extra);
        let err = fails(&args, 2);
        assert!(err.contains(expected), "{extra:?}: expected '{expected}' in: {err}");
    }
}

#[test]
fn an_unwritable_out_folder_is_refused_before_measuring() {
    let err = fails(&["sweep", "--model", "resnet18", "--device", "cpu", "--out", "/proc/vramprobe/out"], 2);
    assert!(err.contains("cannot write to the output folder /proc/vramprobe/out"), "{err}");
}

#[test]
fn cuda_without_a_gpu_is_a_usage_error() {
    if vramprobe::measure::device::cuda::device_count() > 0 {
        eprintln!("skipped: this machine has a CUDA device");
        return;
    }
    let err = fails(&["sweep", "--model", "resnet18", "--device", "cuda"], 2);
    assert!(err.contains("no CUDA device is available"), "{err}");
}

#[test]
fn a_model_that_does_not_fit_at_batch_1_says_so_with_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // From the data types, on any machine: resnet18's 11,689,512 f32
    // parameters with their gradients and Adam's two moments need 4 x 46.8 MB
    // before any activation; the capacity holds 3 x.
    let capacity = (11_689_512u64 * 4 * 3).to_string();
    let err = fails(
        &[
            "sweep",
            "--model",
            "resnet18",
            "--input",
            "3x32x32",
            "--device",
            "cpu",
            "--capacity",
            &capacity,
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ],
        1,
    );
    assert!(err.contains("resnet18 does not fit even at batch 1 on cpu"), "{err}");
    // On the CPU --capacity is a real limit: batch 1 runs out of memory inside libtorch.
    let shown = format!("capacity {}", vramprobe::units::human_bytes(11_689_512.0 * 4.0 * 3.0));
    assert!(err.contains("out of memory") && err.contains(&shown), "{err}");
    // What was measured is still written.
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["status"], "failed");
    let batches: Vec<u64> = report["trials"].as_array().unwrap().iter().map(|t| t["batch"].as_u64().unwrap()).collect();
    assert_eq!(batches, vec![4, 2, 1], "the search halves down to batch 1");
}

#[test]
fn a_trial_past_its_timeout_is_reported_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let err = fails(
        &[
            "sweep",
            "--model",
            "vgg16",
            "--device",
            "cpu",
            "--trial-timeout",
            "1",
            "--out",
            out.to_str().unwrap(),
            "--quiet",
        ],
        1,
    );
    assert!(err.contains("the trial at batch 4 failed: no result within the 1s trial timeout"), "{err}");
    let sweep = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert!(sweep.lines().nth(1).unwrap().contains(",timeout,"), "{sweep}");
}

#[test]
fn help_lists_commands_but_not_the_internal_trial() {
    let out = vramprobe().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sweep") && text.contains("models") && text.contains("devices"));
    assert!(!text.contains("trial "), "{text}");
}
