//! The bad-input matrix: malformed plans, profiles, TorchScript files and
//! options of every command. Each gives one line naming the file, line and
//! field where there is one, and a non-zero exit code; none a panic or a
//! backtrace. A plan a spreadsheet saved back still loads when its content
//! is valid.
#![cfg(feature = "builtin")]
use std::path::Path;

use assert_cmd::Command;

fn vramprobe() -> Command {
    let mut cmd = Command::cargo_bin("vramprobe").unwrap();
    // Even with backtraces requested, none may appear.
    cmd.env("RUST_BACKTRACE", "1");
    cmd
}

fn assert_clean(stderr: &str) {
    assert!(!stderr.contains("panicked") && !stderr.contains("stack backtrace"), "{stderr}");
}

const HEADER: &str = "schema_version,model,input,classes,device,optimizer,recommended_batch";

/// `check --plan` on a plan with this text: (exit code, stderr).
fn check_plan(dir: &Path, text: &[u8]) -> (Option<i32>, String) {
    let plan = dir.join("plan.csv");
    std::fs::write(&plan, text).unwrap();
    let out = vramprobe().args(["check", "--quiet", "--plan"]).arg(&plan).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_clean(&stderr);
    (out.status.code(), stderr)
}

#[test]
fn malformed_plans_name_the_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let row = "2,squeezenet1_1,3x32x32,10,cpu,sgd,2";
    let cases: Vec<(String, &str)> = vec![
        (String::new(), "plan.csv:1: the file is empty"),
        (format!("{HEADER}\n"), "plan.csv:1: no plan rows below the header"),
        (
            "schema_version,model,input,classes,device,optimizer\n2,squeezenet1_1,3x32x32,10,cpu,sgd\n".into(),
            "plan.csv:1: column recommended_batch: missing column",
        ),
        (
            format!("{HEADER}\n2,squeezenet1_1,3x32x32,10,cpu,sgd,two\n"),
            "plan.csv:2: column recommended_batch: 'two' is not a batch size",
        ),
        (format!("{HEADER}\n2,squeezenet1_1,3x32x32,10,cpu,sgd,0\n"), "plan.csv:2: column recommended_batch"),
        (format!("{HEADER}\n2,squeezenet1_1,3x32x32,10,cpu,sgd,-4\n"), "plan.csv:2: column recommended_batch"),
        (format!("{HEADER}\n2,squeezenet1_1,3x32x32,0,cpu,sgd,2\n"), "plan.csv:2: column classes"),
        (format!("{HEADER}\n2,squeezenet1_1,3x32x32,-10,cpu,sgd,2\n"), "plan.csv:2: column classes"),
        (format!("{HEADER}\n2,squeezenet1_1,3x32,10,cpu,sgd,2\n"), "plan.csv:2: column input"),
        (format!("{HEADER}\n2,resnet19,3x32x32,10,cpu,sgd,2\n"), "plan.csv:2: column model: unknown model 'resnet19'"),
        (format!("{HEADER}\n2,squeezenet1_1,3x32x32,10,tpu,sgd,2\n"), "plan.csv:2: column device"),
        (format!("{HEADER}\n2,squeezenet1_1,3x32x32,10,cpu,lion,2\n"), "plan.csv:2: column optimizer"),
        (
            format!("{HEADER}\n9,squeezenet1_1,3x32x32,10,cpu,sgd,2\n"),
            "plan.csv:2: column schema_version: unknown schema version 9",
        ),
        (format!("{HEADER}\nv2,squeezenet1_1,3x32x32,10,cpu,sgd,2\n"), "plan.csv:2: column schema_version"),
        (format!("{HEADER}\n{row}\n2,squeezenet1_1,3x32x32,10,cpu,sgd\n"), "plan.csv:3:"),
        (format!("{HEADER}\n{row}\n{row}\n"), "2 rows"),
    ];
    for (text, expected) in &cases {
        let (code, stderr) = check_plan(dir.path(), text.as_bytes());
        assert_eq!(code, Some(2), "{text:?}: {stderr}");
        assert!(stderr.contains(expected), "{text:?}: expected '{expected}' in {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
}

#[test]
fn a_plan_saved_back_by_a_spreadsheet_still_loads() {
    let dir = tempfile::tempdir().unwrap();
    let valid: Vec<(&str, Vec<u8>)> = vec![
        ("a UTF-8 BOM", format!("\u{FEFF}{HEADER}\n2,squeezenet1_1,3x32x32,10,cpu,sgd,2\n").into_bytes()),
        ("CRLF line endings", format!("{HEADER}\r\n2,squeezenet1_1,3x32x32,10,cpu,sgd,2\r\n").into_bytes()),
        (
            "quoted fields",
            b"\"schema_version\",\"model\",\"input\",\"classes\",\"device\",\"optimizer\",\"recommended_batch\"\n\"2\",\"squeezenet1_1\",\"3x32x32\",\"10\",\"cpu\",\"sgd\",\"2\"\n".to_vec(),
        ),
        ("an extra column", format!("{HEADER},notes\n2,squeezenet1_1,3x32x32,10,cpu,sgd,2,\"mine, really\"\n").into_bytes()),
        ("reordered columns", b"recommended_batch,optimizer,device,classes,input,model,schema_version\n2,sgd,cpu,10,3x32x32,squeezenet1_1,2\n".to_vec()),
        ("schema version 1", format!("{HEADER}\n1,squeezenet1_1,3x32x32,10,cpu,sgd,2\n").into_bytes()),
        ("spaces around cells", format!("{HEADER}\n2, squeezenet1_1 ,3x32x32, 10,cpu,sgd, 2\n").into_bytes()),
    ];
    for (what, text) in valid {
        let (code, stderr) = check_plan(dir.path(), &text);
        assert_eq!(code, Some(0), "{what}: {stderr}");
    }
}

#[test]
fn malformed_workload_profiles_name_the_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let good = "model = \"squeezenet1_1\"\ninput = \"3x32x32\"\nclasses = 10\nmode = \"train\"\nprecision = \"fp32\"\noptimizer = \"sgd\"\nlr = 0.1\n";
    let cases: Vec<(String, &str)> = vec![
        (good.replace("classes = 10", "classes = 0"), "bad.toml:3: field classes"),
        (good.replace("classes = 10", "classes = \"ten\""), "bad.toml:3:"),
        (good.replace("\"3x32x32\"", "\"3x32\""), "bad.toml:2: field input"),
        (good.replace("\"train\"", "\"infer\""), "bad.toml:4: field mode"),
        (good.replace("\"fp32\"", "\"fp8\""), "bad.toml:5: field precision"),
        (good.replace("\"sgd\"", "\"lion\""), "bad.toml:6: field optimizer"),
        (good.replace("lr = 0.1", "lr = -1.0"), "bad.toml:7: field lr"),
        (good.replace("model = \"squeezenet1_1\"\n", ""), "bad.toml:1:"),
        ("model = \"squeezenet1_1\n".into(), "bad.toml:1:"),
        (String::new(), "bad.toml:1:"),
        (good.replace("lr = 0.1", "lr = 0.1\nwings = 2"), "bad.toml:8:"),
    ];
    let bad = dir.path().join("bad.toml");
    for (text, expected) in &cases {
        std::fs::write(&bad, text).unwrap();
        let out = vramprobe().args(["sweep", "--device", "cpu", "--profile"]).arg(&bad).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_clean(&stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {stderr}");
        assert!(stderr.contains(expected), "{text:?}: expected '{expected}' in {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
    let missing = vramprobe().args(["sweep", "--profile", "/no/such/profile.toml"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/no/such/profile.toml"));
}

#[test]
fn a_truncated_torchscript_file_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny_cnn.pt")).unwrap();
    let truncated = dir.path().join("truncated.pt");
    std::fs::write(&truncated, &fixture[..fixture.len() / 2]).unwrap();
    let empty = dir.path().join("empty.pt");
    std::fs::write(&empty, b"").unwrap();
    for file in [&truncated, &empty] {
        let out =
            vramprobe().args(["sweep", "--device", "cpu", "--input", "3x32x32", "--model"]).arg(file).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_clean(&stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&file.display().to_string()), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
}

#[test]
fn malformed_options_of_every_command_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.csv");
    std::fs::write(&plan, format!("{HEADER}\n2,squeezenet1_1,3x32x32,10,cpu,sgd,2\n")).unwrap();
    let p = plan.to_str().unwrap();
    // Each case names what is wrong, so that it cannot pass for another reason.
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["train", "--plan", p, "--target-batch", "0"], "invalid batch size 0"),
        (vec!["train", "--plan", p, "--target-batch", "lots"], "invalid batch size 'lots'"),
        (vec!["train", "--plan", p, "--steps", "-1"], "invalid value '-1' for '--steps"),
        (
            vec!["train", "--plan", p, "--steps", "1", "--epochs", "1"],
            "'--steps <STEPS>' cannot be used with '--epochs",
        ),
        (vec!["train", "--plan", p, "--row", "0"], "invalid value '0' for '--row"),
        (vec!["train", "--plan", p, "--row", "5"], "--row 5: the plan has 1 row(s)"),
        (vec!["train", "--plan", p, "--log-every", "0"], "invalid value '0' for '--log-every"),
        (vec!["train", "--plan", p, "--capacity", "lots"], "invalid size 'lots'"),
        (vec!["train", "--plan", p, "--lr", "fast"], "invalid learning rate 'fast'"),
        (vec!["train", "--plan", p, "--device", "gpu"], "invalid --device 'gpu'"),
        (vec!["train", "--plan", p, "--checkpoint-every", "5"], "--checkpoint <CHECKPOINT>"),
        (vec!["train", "--plan", p, "--resume", "/no/such.ckpt"], "/no/such.ckpt: not a readable vramprobe checkpoint"),
        (vec!["train", "--plan", p, "--data", "/no/such/cifar"], "reading /no/such/cifar"),
        (vec!["train", "--plan", "/no/such/plan.csv"], "/no/such/plan.csv: cannot read the plan"),
        (vec!["check", "--plan", p, "--batch", "0"], "invalid batch size 0"),
        (
            vec!["check", "--model", "resnet18"],
            "check needs --plan FILE, --model M with --batch B, or --batch B -- your training command",
        ),
        (vec!["check", "--plan", p, "--row", "9"], "--row 9: the plan has 1 row(s)"),
        (vec!["plan", "--from", "/no/such/report.json", "--gpu", "rtx3070"], "/no/such/report.json: cannot read"),
        (vec!["plan", "--from", p, "--gpu", "rtx3070"], "plan.csv:1: not a vramprobe report ("),
        // The GPU is looked up first, whatever the file: the lookup is what fails.
        (vec!["plan", "--from", p, "--gpu", "rtx9999"], "no such GPU profile"),
        (vec!["report", "/no/such/run"], "/no/such/run"),
        (vec!["completions", "powershell7"], "invalid value 'powershell7'"),
        (vec!["sweep", "--model", "resnet18", "--seq-len", "128"], "resnet18 is an image model"),
        (vec!["sweep", "--model", "gpt-nano", "--seq-lens", "64,x"], "invalid sequence length 'x'"),
        (vec!["sweep", "--model", "gpt-nano", "--precision", "fp8"], "invalid value 'fp8' for '--precision"),
        (vec!["sweep", "--model", "gpt-nano", "--mode", "infer"], "invalid value 'infer' for '--mode"),
    ];
    for (args, expected) in cases {
        let out = vramprobe().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_clean(&stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error:") || stderr.starts_with("Error:"), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: expected '{expected}' in {stderr}");
    }
}

#[test]
fn a_report_of_another_version_or_damaged_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    for (text, expected) in [
        (r#"{"schema_version": 1, "workload": {}}"#, "report schema version 1, this vramprobe reads version"),
        (r#"{"schema_version": 2, "status": "complete"}"#, "not a vramprobe report (missing field"),
        ("{\"schema_version\": 2,", "not a vramprobe report ("),
        ("[]", "no schema_version"),
    ] {
        std::fs::write(&report, text).unwrap();
        for args in [
            vec!["report".to_string(), dir.path().display().to_string()],
            vec![
                "plan".to_string(),
                "--from".to_string(),
                report.display().to_string(),
                "--gpu".to_string(),
                "t4".to_string(),
            ],
        ] {
            let out = vramprobe().args(&args).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?} {text}: {stderr}");
            assert!(stderr.contains(expected), "{args:?} {text}: {stderr}");
            assert_clean(&stderr);
        }
    }
}
