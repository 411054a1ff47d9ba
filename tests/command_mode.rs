//! Command mode: the user's own, unmodified training script, measured by
//! vramprobe's Python hook. Runs the example script under the cached torch
//! (with torchvision beside it, which ./scripts/test installs); where they
//! are missing the tests are counted as skipped.
#![cfg(feature = "builtin")]
use std::path::Path;
use vramprobe::record::trial::Outcome;

use common::{vramprobe, DEFAULT_MARGIN};
use vramprobe::analyze::fit::LinearFit;
use vramprobe::report::csv::{PlanRow, SweepRow};

use crate::common;

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train_resnet18.py");

fn python(test: &str) -> Option<String> {
    common::torch_python(test)
}

fn example(python: &str) -> Vec<String> {
    [python, EXAMPLE, "--batch-size", "{batch}"].map(String::from).to_vec()
}

fn read_csv<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    csv::Reader::from_path(path).unwrap().deserialize().collect::<Result<_, _>>().unwrap()
}

/// A sweep of the example command; its trials and plan row.
fn sweep(out: &Path, options: &[&str], command: &[String]) -> (Vec<SweepRow>, PlanRow) {
    let (trials, plan, _) = sweep_with_lines(out, &[options, &["--quiet"]].concat(), command);
    (trials, plan)
}

/// [`sweep`], and the trial lines it printed on stderr (unless `--quiet`).
/// The whole job is not rehearsed unless `options` say `--rehearsal`
/// (tests/whole_job.rs tests the rehearsal; here it would only add a trial).
fn sweep_with_lines(out: &Path, options: &[&str], command: &[String]) -> (Vec<SweepRow>, PlanRow, String) {
    let rehearsal = common::rehearsal_unless_asked(options);
    let run = vramprobe()
        // A user's shell: Python buffers the script's prints (the test machine sets this).
        .env_remove("PYTHONUNBUFFERED")
        .args(["sweep", "--device", "cpu", "--out"])
        .arg(out)
        .args(options)
        .args(rehearsal)
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    assert!(run.status.success(), "{stderr}");
    (read_csv(&out.join("sweep.csv")), read_csv::<PlanRow>(&out.join("plan.csv")).remove(0), stderr)
}

#[test]
fn a_plain_script_peaks_as_the_built_in_model_does() {
    let Some(python) = python("a_plain_script_peaks_as_the_built_in_model_does") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (trials, plan) = sweep(&dir.path().join("run"), &["--batches", "8,16"], &example(&python));
    assert!(trials.iter().all(|t| t.outcome == Outcome::Fits), "{trials:?}");
    // The search's trials ran every step; the explain trial (the max again) its one profiled step.
    let steps: Vec<(u64, u32)> = trials.iter().map(|t| (t.batch, t.steps_completed)).collect();
    assert_eq!(steps, [(8, 3), (16, 3), (16, 1)]);
    assert!(plan.model.contains("train_resnet18.py --batch-size {batch}"), "the plan names the command: {plan:?}");
    // --rehearsal off: no rehearsal trial, and the summary says the whole job was not rehearsed.
    let report = std::fs::read_to_string(dir.path().join("run/report.json")).unwrap();
    assert!(report.contains("batch 16's whole job was not rehearsed (--rehearsal off)"), "{report}");
    let folders: Vec<String> = std::fs::read_dir(dir.path().join("run/trials"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(folders.iter().all(|f| !f.starts_with("901")), "{folders:?}");
    // The same training step (torchvision's resnet18, SGD with momentum) as
    // vramprobe's own op-for-op resnet18, measured on this machine.
    let built_in =
        ["--model", "resnet18", "--input", "3x32x32", "--classes", "10", "--optimizer", "sgd", "--device", "cpu"];
    for t in &trials[..2] {
        let theirs = t.peak_allocated_bytes.unwrap() as f64;
        let ours = common::trial_peak_at(&built_in, t.batch) as f64;
        assert!((theirs / ours - 1.0).abs() < 0.001, "batch {}: script {theirs}, built-in {ours}", t.batch);
    }
    // Every trial kept the script's own output and the hook's records.
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("run/report.json")).unwrap()).unwrap();
    assert_eq!(report["subject"]["argv"][1], EXAMPLE);
    // Only what is true of a command: no model, input, optimizer or precision of vramprobe's invention.
    let subject: Vec<&str> = report["subject"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(subject, ["argv", "kind"]);
    assert_eq!(report["subject"]["kind"], "command");
    assert!(report.get("workload").is_none() && report.get("command").is_none());
    let plan = std::fs::read_to_string(dir.path().join("run/plan.csv")).unwrap();
    let mut lines = plan.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row = csv::ReaderBuilder::new().from_reader(plan.as_bytes()).records().next().unwrap().unwrap();
    for column in ["input", "classes", "mode", "precision", "optimizer"] {
        let i = header.iter().position(|h| *h == column).unwrap();
        assert_eq!(&row[i], "", "plan.csv's {column} is not the command's: {plan}");
    }
    assert_eq!(&row[header.iter().position(|h| *h == "subject").unwrap()], "command");
    let log = std::fs::read_to_string(dir.path().join("run/trials/001-batch-8/output.log")).unwrap();
    assert!(log.contains("step 0 loss"), "{log}");
    assert!(!log.contains("USDT:") && !log.contains("profiler_st"), "the profiler's own lines are silenced: {log}");
    hook_records_follow_the_protocol(&dir.path().join("run/trials/001-batch-8"));
    // The explain trial: the max batch again, its peak broken down.
    hook_records_follow_the_protocol(&dir.path().join("run/trials/003-batch-16"));
    // For GPUs: the last step's trace of each batch, scaled to larger ones
    // and replayed through the caching allocator's model, as for a built-in.
    assert_eq!(report["analysis"]["cuda_reserved_curve_from"], serde_json::json!([8, 16]));
    let curve = report["analysis"]["cuda_reserved_curve"].as_array().unwrap();
    assert!(
        curve.len() > 5 && curve.windows(2).all(|w| w[0]["reserved_bytes"].as_u64() <= w[1]["reserved_bytes"].as_u64())
    );
    let largest = curve.last().unwrap();
    assert!(largest["reserved_bytes"].as_u64().unwrap() > 1 << 30, "{largest}");
}

#[test]
fn the_cuda_rewrite_rules_hold_on_hand_made_profiles() {
    // Plain Python, no torch: the machine's python3.
    let unit = std::process::Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/test_cuda_ops.py"))
        .output()
        .unwrap();
    assert!(unit.status.success(), "{}", String::from_utf8_lossy(&unit.stderr));
}

#[test]
fn attention_on_the_cpus_math_path_is_predicted_as_cudas_fused_kernel() {
    let Some(python) = python("attention_on_the_cpus_math_path_is_predicted_as_cudas_fused_kernel") else { return };
    let dir = tempfile::tempdir().unwrap();
    let job = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/train_attention.py");
    let run = |dropout: &str| {
        let command = [&python, job, "--dropout", dropout, "--batch-size", "{batch}"].map(String::from);
        per_sample_and_gpu_curve(&dir.path().join(format!("dropout-{dropout}")), &command)
    };
    let (math_per_sample, math) = run("0.1");
    let (fused_per_sample, fused) = run("0.0");
    // With dropout the CPU keeps the L x L weights: several times the bytes a sample.
    assert!(math_per_sample > 4 * fused_per_sample, "{math_per_sample} vs {fused_per_sample}");
    // On a GPU both run the fused kernel: the same curve where the samples
    // weigh (from 12 times the largest batch run), but for the scratch of
    // CUDA's fused backward (an fp32 query, its length padded to 128: 4
    // heads x 256 x 16 x 4 bytes a sample), which the CPU's flash kernel
    // does not allocate.
    assert_eq!(math.iter().map(|p| p.0).collect::<Vec<_>>(), fused.iter().map(|p| p.0).collect::<Vec<_>>());
    let far: Vec<_> = math.iter().zip(&fused).filter(|(m, _)| m.0 >= 96).collect();
    assert!(far.len() >= 5, "{math:?}");
    for ((batch, math), (_, fused)) in far {
        let scratch = batch * 4 * 256 * 16 * 4;
        assert!(
            *math as f64 >= 0.97 * *fused as f64 && *math as f64 <= 1.02 * (fused + scratch) as f64,
            "batch {batch}: math path {math} vs fused {fused} (+ scratch {scratch})"
        );
    }
}

#[test]
fn a_layer_norm_under_autocast_is_predicted_in_fp32_as_cudas_autocast_runs_it() {
    let Some(python) = python("a_layer_norm_under_autocast_is_predicted_in_fp32_as_cudas_autocast_runs_it") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let job = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/train_layer_norm.py");
    let run = |extra: &[&str], name: &str| {
        let command: Vec<String> = [&[python.as_str(), job], extra, &["--batch-size", "{batch}"]]
            .concat()
            .into_iter()
            .map(String::from)
            .collect();
        per_sample_and_gpu_curve(&dir.path().join(name), &command)
    };
    // The CPU's autocast runs layer_norm in bf16; the script that copies
    // its input to fp32 itself runs what CUDA's autocast would.
    let (bf16_per_sample, bf16) = run(&[], "bf16");
    let (fp32_per_sample, fp32) = run(&["--fp32-norm"], "fp32");
    assert!(bf16_per_sample < fp32_per_sample, "{bf16_per_sample} vs {fp32_per_sample}");
    // For a GPU both are CUDA's autocast: the same curve where the samples weigh.
    assert_eq!(bf16.iter().map(|p| p.0).collect::<Vec<_>>(), fp32.iter().map(|p| p.0).collect::<Vec<_>>());
    let far: Vec<_> = bf16.iter().zip(&fp32).filter(|(b, _)| b.0 >= 96).collect();
    assert!(far.len() >= 5, "{bf16:?}");
    for ((batch, ours), (_, theirs)) in far {
        assert!((*ours as f64 / *theirs as f64 - 1.0).abs() < 0.08, "batch {batch}: {ours} vs {theirs}");
    }
}

/// A command's sweep at batches 4 and 8: its per-sample bytes on the CPU
/// and report.json's predicted GPU curve, (batch, reserved bytes).
fn per_sample_and_gpu_curve(out: &Path, command: &[String]) -> (i64, Vec<(u64, u64)>) {
    let (_, plan) = sweep(out, &["--batches", "4,8"], command);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let curve = report["analysis"]["cuda_reserved_curve"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["batch"].as_u64().unwrap(), p["reserved_bytes"].as_u64().unwrap()))
        .collect();
    (plan.per_sample_bytes.unwrap(), curve)
}

/// The hook's records from a real trial against the protocol's one Rust
/// definition, read strictly (no unknown field, every required one): a
/// start in this protocol version first, then the steps (each split at the
/// optimizer step), the breakdown of the peak when the spec asks for it
/// (the explain trial) and the end. The spec the hook read is the parent's.
fn hook_records_follow_the_protocol(trial: &Path) {
    use vramprobe::record::trial::{Message, TrialSpec, PROTOCOL_VERSION};
    let spec: TrialSpec = serde_json::from_slice(&std::fs::read(trial.join("spec.json")).unwrap()).unwrap();
    let text = std::fs::read_to_string(trial.join("records.jsonl")).unwrap();
    let messages: Vec<Message> =
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let Some(Message::Start(start)) = messages.first() else { panic!("the first record is not a start: {text}") };
    assert_eq!(start.schema_version, PROTOCOL_VERSION);
    let steps: Vec<_> = messages.iter().filter_map(|m| if let Message::Step(s) = m { Some(s) } else { None }).collect();
    assert_eq!(steps.len() as u32, spec.steps);
    assert!(steps.iter().all(|s| s.batch == spec.batch && s.data_seconds.is_none()), "a command's step is one piece");
    for s in &steps {
        let (fb, opt) = (s.forward_backward_peak_bytes.unwrap(), s.optimizer_peak_bytes.unwrap());
        assert_eq!(fb.max(opt), s.peak_allocated_bytes, "step {}: the larger side is the peak", s.step);
    }
    // The last step carries its trace: replayed in order from what was live,
    // the bytes held reach exactly the step's peak.
    let trace = steps.last().unwrap().trace.as_ref().expect("the last CPU step's trace");
    let mut held: i64 = trace.live.iter().map(|l| l.1 as i64).sum();
    let mut peak = held;
    for e in &trace.events {
        held += e.1;
        peak = peak.max(held);
    }
    assert_eq!(peak as u64, steps.last().unwrap().peak_allocated_bytes);
    assert!(steps[..steps.len() - 1].iter().all(|s| s.trace.is_none()));
    assert_eq!(messages.iter().any(|m| matches!(m, Message::Breakdown { .. })), spec.breakdown, "{text}");
    assert!(matches!(messages.last(), Some(Message::End { .. })), "{text}");
    // The hook says the same version as the Rust side.
    let hook =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/measure/hook/vramprobe_trial.py")).unwrap();
    assert!(
        hook.contains(&format!("\nPROTOCOL_VERSION = {PROTOCOL_VERSION}\n")),
        "vramprobe_trial.py's PROTOCOL_VERSION"
    );
}

#[test]
fn the_search_over_a_command_equals_an_exhaustive_scan() {
    let Some(python) = python("the_search_over_a_command_equals_an_exhaustive_scan") else { return };
    let dir = tempfile::tempdir().unwrap();
    // 64x64 images: at 32x32 torchvision's batch norm refuses batch 1 (one
    // value per channel), which is the script's own error, tested below.
    let command = [example(&python), vec!["--image-size".into(), "64".into()]].concat();
    // The command's own memory line on this machine, and a capacity from it.
    // No breakdown (tests/breakdown.rs tests it; here it would only add a trial).
    let (trials, _) = sweep(&dir.path().join("line"), &["--batches", "4,8", "--breakdown", "off"], &command);
    let points: Vec<(u64, u64)> = trials.iter().map(|t| (t.batch, t.peak_allocated_bytes.unwrap())).collect();
    let capacity = LinearFit::fit(&points).unwrap().capacity_for_max(12, DEFAULT_MARGIN).to_string();
    let every: Vec<String> = (1..=30).map(|b| b.to_string()).collect();
    let scan_options = ["--capacity", &capacity, "--batches", &every.join(","), "--breakdown", "off"];
    let (scanned, scan, lines) = sweep_with_lines(&dir.path().join("scan"), &scan_options, &command);
    assert!(scan.exact && (6..=24).contains(&scan.max_batch), "scan: {scan:?}");
    // On the CPU a command runs unbounded and its capacity is judged after
    // the run: the first batch past the max ran its steps, and its trial line
    // says where its peak fell, never "fits".
    let past = scanned.iter().find(|t| t.batch == scan.max_batch + 1).unwrap();
    let line = lines.lines().find(|l| l.contains(&format!("batch {:>5}  ", past.batch))).unwrap_or_default();
    assert!(
        past.outcome == Outcome::Fits && (line.contains("over the margin") || line.contains("over capacity")),
        "{past:?}\n{lines}"
    );
    let (_, search) = sweep(&dir.path().join("search"), &["--capacity", &capacity, "--breakdown", "off"], &command);
    assert_eq!(
        (search.max_batch, search.exact, search.strategy.unwrap().to_string().as_str()),
        (scan.max_batch, true, "vramprobe")
    );
    assert!(search.recommended_verified);
}

#[test]
fn a_commands_own_error_is_not_an_oom_and_an_oom_does_not_fit() {
    let Some(python) = python("a_commands_own_error_is_not_an_oom_and_an_oom_does_not_fit") else { return };
    let check = |code: &str| {
        vramprobe().args(["check", "--device", "cpu", "--batch", "4", "--", &python, "-c", code]).output().unwrap()
    };
    let user_error = check("import torch; raise ValueError('bad config at batch {batch}')");
    let stderr = String::from_utf8_lossy(&user_error.stderr);
    assert_eq!(user_error.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("the command failed at step 1: ValueError: bad config at batch 4"), "{stderr}");
    assert!(!stderr.contains("out of memory"), "{stderr}");

    // 10^15 floats: the CPU allocator refuses, as a GPU's would run out.
    let oom = check("import torch; x = torch.empty(10**15 + {batch})");
    let stdout = String::from_utf8_lossy(&oom.stdout);
    assert_eq!(oom.status.code(), Some(3), "{stdout}{}", String::from_utf8_lossy(&oom.stderr));
    assert!(stdout.starts_with("WON'T FIT:") && stdout.contains("out of memory in the command"), "{stdout}");

    let no_step = check("import torch; print({batch})");
    let stderr = String::from_utf8_lossy(&no_step.stderr);
    assert_eq!(no_step.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("without an optimizer step"), "{stderr}");
}

#[test]
fn a_command_without_the_batch_placeholder_is_refused() {
    let out = vramprobe().args(["sweep", "--device", "cpu", "--", "python", "train.py"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no {batch}") && stderr.contains("python train.py --batch-size {batch}"), "{stderr}");
    let both = vramprobe().args(["sweep", "--model", "resnet18", "--", "python", "t.py", "{batch}"]).output().unwrap();
    assert_eq!(both.status.code(), Some(2));
    let built_in_flag =
        vramprobe().args(["sweep", "--precision", "bf16", "--", "python", "t.py", "{batch}"]).output().unwrap();
    assert_eq!(built_in_flag.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&built_in_flag.stderr).contains("--precision is for built-in models"));
}

#[test]
fn dataloader_workers_stay_outside_the_measurement() {
    let Some(python) = python("dataloader_workers_stay_outside_the_measurement") else { return };
    let dir = tempfile::tempdir().unwrap();
    let command = [example(&python), vec!["--workers".into(), "2".into()]].concat();
    let (trials, plan) = sweep(&dir.path().join("run"), &["--batches", "4,8", "--breakdown", "off"], &command);
    // Each trial's records came from the training process alone: three
    // steps, numbered once, though two worker processes ran beside it.
    assert!(trials.iter().all(|t| t.outcome == Outcome::Fits && t.steps_completed == 3), "{trials:?}");
    let steps: Vec<vramprobe::record::trial::StepRecord> = read_csv(&dir.path().join("run/steps.csv"));
    assert_eq!(steps.iter().map(|s| s.step).collect::<Vec<_>>(), [1, 2, 3, 1, 2, 3]);
    assert!(plan.per_sample_bytes.unwrap() > 0);
}

#[test]
fn a_torch_without_the_step_hook_gets_a_clear_error() {
    let Some(python) = python("a_torch_without_the_step_hook_gets_a_clear_error") else { return };
    // A stand-in torch package, as old as 1.13: no global optimizer step hook.
    let fake = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(fake.path().join("torch/optim")).unwrap();
    std::fs::write(fake.path().join("torch/__init__.py"), "__version__ = '1.13.0'\nfrom . import optim\n").unwrap();
    std::fs::write(fake.path().join("torch/optim/__init__.py"), "").unwrap();
    std::fs::write(fake.path().join("torch/optim/optimizer.py"), "").unwrap();
    let out = vramprobe()
        .env("PYTHONPATH", fake.path())
        .args(["check", "--device", "cpu", "--batch", "4", "--", &python, "-c", "import torch; print({batch})"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("torch 1.13.0 has no optimizer step hook: vramprobe needs torch >= 2.0"), "{stderr}");
}

#[test]
fn an_autocast_loop_with_a_grad_scaler_is_measured_step_by_step() {
    let Some(python) = python("an_autocast_loop_with_a_grad_scaler_is_measured_step_by_step") else { return };
    let dir = tempfile::tempdir().unwrap();
    // GradScaler.step calls optimizer.step: the hook counts it. bf16 autocast
    // keeps activations in half the bytes, so per sample it holds less.
    let options = ["--batches", "4,8", "--breakdown", "off"];
    let (_, plain) = sweep(&dir.path().join("fp32"), &options, &example(&python));
    let command = [example(&python), vec!["--amp".into(), "bf16".into()]].concat();
    let (trials, amp) = sweep(&dir.path().join("amp"), &options, &command);
    assert!(trials.iter().all(|t| t.outcome == Outcome::Fits && t.steps_completed == 3), "{trials:?}");
    assert!(amp.per_sample_bytes.unwrap() < plain.per_sample_bytes.unwrap(), "{amp:?} {plain:?}");
}

#[test]
fn exec_runs_the_job_at_the_plans_batch_and_accumulation() {
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.csv");
    // A command-mode row names its command in the model column.
    std::fs::write(
        &plan,
        "schema_version,model,input,classes,device,optimizer,recommended_batch\n2,echo batch {batch},,0,cpu,,32\n",
    )
    .unwrap();
    let run = |extra: &[&str]| vramprobe().args(["exec", "--plan"]).arg(&plan).args(extra).output().unwrap();
    let own = run(&[]);
    assert_eq!(String::from_utf8_lossy(&own.stdout), "batch 32\n", "{}", String::from_utf8_lossy(&own.stderr));
    let accumulated =
        run(&["--target-batch", "96", "--", "echo", "{batch}", "x", "{accumulation}", "=", "{target_batch}"]);
    assert_eq!(String::from_utf8_lossy(&accumulated.stdout), "32 x 3 = 96\n");
    // The job's own exit code is exec's.
    assert_eq!(run(&["--", "sh", "-c", "exit 7 # {batch}"]).status.code(), Some(7));
    // check runs the row's command; train cannot train a command.
    let train = vramprobe().args(["train", "--plan"]).arg(&plan).output().unwrap();
    assert_eq!(train.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&train.stderr).contains("vramprobe exec --plan"));
    let built_in = dir.path().join("built-in.csv");
    std::fs::write(
        &built_in,
        "schema_version,model,input,classes,device,optimizer,recommended_batch\n2,resnet18,3x32x32,10,cpu,sgd,8\n",
    )
    .unwrap();
    let none = vramprobe().args(["exec", "--plan"]).arg(&built_in).output().unwrap();
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("give the command to run after --"));
}

#[test]
fn a_command_with_a_sequence_length_gets_the_two_dimensional_fit() {
    let Some(python) = python("a_command_with_a_sequence_length_gets_the_two_dimensional_fit") else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let gpt = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/train_gpt.py");
    let command = [python.as_str(), gpt, "--batch-size", "{batch}", "--seq-len", "{seq_len}"];
    let run = vramprobe()
        .args(["sweep", "--device", "cpu", "--quiet", "--seq-lens", "32,64,128", "--batches", "2,4,8", "--out"])
        .arg(&out)
        .arg("--")
        .args(command)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let rows: Vec<PlanRow> = read_csv(&out.join("plan.csv"));
    assert_eq!(rows.iter().map(|r| r.input.clone()).collect::<Vec<_>>(), [vec![32], vec![64], vec![128]]);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("seq-lens.json")).unwrap()).unwrap();
    assert!(summary["fit"]["r2"].as_f64().unwrap() > 0.99, "{summary}");
    // Memory grows with the length at the same batch.
    let peak = |len: &str| {
        let trials: Vec<SweepRow> = read_csv(&out.join(format!("seq-{len}/sweep.csv")));
        trials.iter().find(|t| t.batch == 8).unwrap().peak_allocated_bytes.unwrap()
    };
    assert!(peak("32") < peak("64") && peak("64") < peak("128"));
    // check runs a row's command at that row's length.
    let check = vramprobe().args(["check", "--row", "2", "--plan"]).arg(out.join("plan.csv")).output().unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&check.stderr));
    assert!(stdout.contains("length 64"), "{stdout}");
    // A length needs {seq_len}, and {seq_len} needs a length.
    for args in [
        vec!["--seq-lens", "32,64", "--", "python", "t.py", "{batch}"],
        vec!["--", "python", "t.py", "{batch}", "{seq_len}"],
    ] {
        let bad = vramprobe().arg("sweep").args(&args).output().unwrap();
        assert_eq!(bad.status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn a_command_that_ends_early_crashes_or_never_steps_gets_a_clear_verdict() {
    let Some(python) = python("a_command_that_ends_early_crashes_or_never_steps_gets_a_clear_verdict") else { return };
    let dir = tempfile::tempdir().unwrap();
    // One step where three were asked for: what it measured is used, and said.
    let early = [example(&python), vec!["--steps".into(), "1".into()]].concat();
    let (trials, _) = sweep(&dir.path().join("early"), &["--batches", "4"], &early);
    assert_eq!((trials[0].outcome.name(), trials[0].steps_completed), ("fits", 1), "{trials:?}");
    assert!(trials[0].message.contains("ended after 1 of 3 steps"), "{}", trials[0].message);

    let check = |code: &str, extra: &[&str]| {
        vramprobe()
            .args(["check", "--device", "cpu", "--batch", "32"])
            .args(extra)
            .args(["--", &python, "-c", code])
            .output()
            .unwrap()
    };
    // A job that fails after a step never fits: its exit code is the last word.
    let exits_1 = "import sys, torch\nm = torch.nn.Linear(4, 4)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n\
                   m(torch.randn({batch}, 4)).sum().backward()\nopt.step()\nsys.exit(1)";
    let failed = check(exits_1, &[]);
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}{}", String::from_utf8_lossy(&failed.stdout));
    assert!(stderr.contains("exited with code 1 after 1 training step"), "{stderr}");

    // The recipe many scripts follow: catch the out-of-memory error and
    // retry smaller. The steps then ran at another batch: it does not fit.
    let retries = "import torch\nm = torch.nn.Linear(4, 4)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n\
                   batch = {batch}\nfor _ in range(3):\n    try:\n        if batch > 8:\n            \
                   raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')\n        \
                   m(torch.randn(batch, 4)).sum().backward()\n        opt.step()\n    \
                   except torch.OutOfMemoryError:\n        batch = 8";
    let fell_back = check(retries, &[]);
    let out = String::from_utf8_lossy(&fell_back.stdout);
    assert_eq!(fell_back.status.code(), Some(3), "{out}{}", String::from_utf8_lossy(&fell_back.stderr));
    assert!(out.contains("raised and caught by the command"), "{out}");
    // The CPU allocator's own failure (a RuntimeError made in C), with the
    // smaller step retried inside the `except` block.
    let fell_back = vramprobe()
        .args(["check", "--device", "cpu", "--batch", "32", "--", &python])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/oom_retry_in_handler.py"))
        .arg("{batch}")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&fell_back.stdout);
    assert_eq!(fell_back.status.code(), Some(3), "{out}{}", String::from_utf8_lossy(&fell_back.stderr));
    assert!(out.contains("raised and caught by the command") && out.contains("can't allocate memory"), "{out}");

    let crash = check("import torch, os, signal; os.kill(os.getpid(), signal.SIGSEGV)  # {batch}", &[]);
    let stderr = String::from_utf8_lossy(&crash.stderr);
    assert_eq!(crash.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("killed by SIGSEGV") && stderr.contains("output.log"), "{stderr}");

    let stuck = check("import torch, time; time.sleep(60)  # {batch}", &["--trial-timeout", "3"]);
    let stderr = String::from_utf8_lossy(&stuck.stderr);
    assert_eq!(stuck.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no training step was seen"), "{stderr}");
}

#[test]
fn a_loop_without_torch_optim_marks_its_steps_by_hand() {
    let Some(python) = python("a_loop_without_torch_optim_marks_its_steps_by_hand") else { return };
    let dir = tempfile::tempdir().unwrap();
    // A hand-written update (no torch.optim): one vramprobe_hook.step() per
    // step. (A line in the records file that is not a record is a protocol
    // error that fails the trial: tests/runner.rs.)
    let script = "import os, torch, vramprobe_hook\n\
                  w = torch.zeros(1000, requires_grad=True)\n\
                  for _ in range(10):\n    \
                      x = torch.randn(int(os.environ['VRAMPROBE_BATCH']), 1000)\n    \
                      (x @ w).sum().backward()\n    \
                      with torch.no_grad(): w -= 0.1 * w.grad\n    \
                      w.grad = None\n    \
                      del x\n    \
                      vramprobe_hook.step()\n";
    let command = [python, "-c".into(), format!("{script}# {{batch}}")];
    let (trials, plan) = sweep(&dir.path().join("run"), &["--batches", "1000,2000", "--breakdown", "off"], &command);
    assert!(trials.iter().all(|t| t.outcome == Outcome::Fits && t.steps_completed == 3), "{trials:?}");
    // x is batch x 1000 f32 (deleted before the next one is made): 4000
    // bytes a sample, exactly.
    assert_eq!(plan.per_sample_bytes, Some(4000), "{plan:?}");
}

#[test]
fn sigint_mid_command_trial_stops_its_whole_group() {
    let Some(python) = python("sigint_mid_command_trial_stops_its_whole_group") else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // The command starts a grandchild and waits on it, as a launcher would;
    // its odd argument marks it among the machine's processes.
    let code = "import subprocess; subprocess.run(['sleep', '120.4711'])  # {batch}";
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_vramprobe"))
        .args(["sweep", "--device", "cpu", "--quiet", "--batches", "2", "--out"])
        .arg(&out)
        .args(["--", &python, "-c", code])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sleepers = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
            .filter(|c| c == b"sleep\x00120.4711\x00")
            .count()
    };
    let start = std::time::Instant::now();
    while sleepers() == 0 {
        assert!(start.elapsed().as_secs() < 60, "the command's grandchild never started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: kill(2) on the vramprobe we started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), Some(130), "{}", String::from_utf8_lossy(&done.stderr));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(sleepers(), 0, "the command's grandchild survived Ctrl-C");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["status"], "interrupted");
}

#[test]
fn a_trial_forked_from_the_pre_imported_interpreter_measures_what_a_fresh_one_does() {
    let Some(python) = python("a_trial_forked_from_the_pre_imported_interpreter_measures_what_a_fresh_one_does") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let options = ["--batches", "8,12", "--breakdown", "off"];
    let (forked, _) = sweep(&dir.path().join("forked"), &options, &example(&python));
    let (fresh, _) =
        sweep(&dir.path().join("fresh"), &[&options[..], &["--fresh-process"]].concat(), &example(&python));
    for (a, b) in forked.iter().zip(&fresh) {
        assert_eq!(a.outcome, Outcome::Fits);
        // The same step, to the byte, either way: each a fresh allocator.
        assert_eq!(
            (a.peak_allocated_bytes, a.forward_backward_peak_bytes, a.optimizer_peak_bytes),
            (b.peak_allocated_bytes, b.forward_backward_peak_bytes, b.optimizer_peak_bytes),
            "batch {}",
            a.batch
        );
    }
    let notes = |run: &str| std::fs::read_to_string(dir.path().join(run).join("report.json")).unwrap();
    assert!(notes("forked").contains("forked from one pre-imported Python interpreter"));
    assert!(notes("fresh").contains("each trial started a fresh Python process (--fresh-process)"));
    // The script's own prints reach the trial's log from the forked process.
    let log = std::fs::read_to_string(dir.path().join("forked/trials/001-batch-8/output.log")).unwrap();
    assert!(log.contains("loss"), "{log}");
}

#[test]
fn a_batch_that_never_reaches_the_job_stops_the_sweep_with_a_reason() {
    let Some(python) = python("a_batch_that_never_reaches_the_job_stops_the_sweep_with_a_reason") else { return };
    // The flag is read and then overridden (as a config file would), so every trial trains at 16.
    let script = "import sys, torch\nbatch = int(sys.argv[1])\nbatch = 16\n\
        m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))\n\
        o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)\n\
        for _ in range(5):\n    m(torch.randn(batch, 64)).sum().backward(); o.step(); o.zero_grad()\n";
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = vramprobe()
        .args(["sweep", "--device", "cpu", "--quiet", "--out"])
        .arg(&out)
        .args(["--", &python, "-c", script, "{batch}"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("{batch} seems not to change the job's memory"), "{stderr}");
    // It stopped at the second trial, and says no max.
    let trials: Vec<SweepRow> = read_csv(&out.join("sweep.csv"));
    assert_eq!(trials.len(), 2, "{trials:?}");
    let plan = read_csv::<PlanRow>(&out.join("plan.csv")).remove(0);
    assert_eq!(plan.max_batch, 0, "{plan:?}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let notes = [&report["notes"], &report["analysis"]["notes"]];
    let kinds: Vec<&str> =
        notes.iter().flat_map(|n| n.as_array().unwrap()).filter_map(|n| n["kind"].as_str()).collect();
    assert!(kinds.contains(&"batch_ignored") && !kinds.contains(&"flat_line"), "{kinds:?}");
}

#[test]
fn a_loop_without_an_optimizer_counts_its_backward_passes_as_steps() {
    let Some(python) = python("a_loop_without_an_optimizer_counts_its_backward_passes_as_steps") else { return };
    let head = [
        "import sys, torch",
        "batch = int(sys.argv[1])",
        "m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))",
    ];
    let step = ["    m.zero_grad()", "    m(torch.randn(batch, 64)).sum().backward()"];
    let update = ["    for p in m.parameters():", "        p.data.add_(p.grad, alpha=-0.1)"];
    let lines = |parts: &[&[&str]]| parts.concat().join("\n") + "\n";
    // pytorch/examples' word_language_model updates its weights by hand.
    let by_hand = lines(&[&head, &["for i in range(100):"], &step, &update, &["    print('iter', i)"]]);
    // The same, marking its steps itself.
    let marked = lines(&[
        &head,
        &["import vramprobe_hook", "for i in range(100):"],
        &step,
        &update,
        &["    print('iter', i)", "    vramprobe_hook.step()"],
    ]);
    // Gradient accumulation: two backward passes per optimizer step, which is the step.
    let accumulated = lines(&[
        &head,
        &["o = torch.optim.SGD(m.parameters(), lr=0.1)", "for i in range(100):"],
        &["    for _ in range(2):", "        m(torch.randn(batch, 64)).sum().backward()"],
        &["    print('iter', i)", "    o.step(); o.zero_grad()"],
    ]);
    let dir = tempfile::tempdir().unwrap();
    for (name, body, backward) in
        [("by-hand", by_hand, true), ("marked", marked, false), ("accumulated", accumulated, false)]
    {
        let out = dir.path().join(name);
        let command = [python.as_str(), "-c", body.as_str(), "{batch}"].map(String::from).to_vec();
        // A short timeout: a loop whose steps go unseen fails here rather than waiting 600 s.
        let options = ["--batches", "4", "--breakdown", "off", "--trial-timeout", "60"];
        let (trials, _) = sweep(&out, &options, &command);
        assert!(trials.iter().all(|t| t.outcome == Outcome::Fits && t.steps_completed == 3), "{name}: {trials:?}");
        // Three steps are three iterations of the loop, each step counted once
        // (each prints before the step ends; the trial stops at the third's end).
        let log = std::fs::read_to_string(out.join("trials/001-batch-4/output.log")).unwrap();
        let last = log.lines().rfind(|l| l.starts_with("iter "));
        assert_eq!(last, Some("iter 2"), "{name}: {log}");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        let said = report["notes"].as_array().unwrap().iter().any(|n| n["kind"] == "backward_steps");
        assert_eq!(said, backward, "{name}: {}", report["notes"]);
        assert_eq!(
            report["trials"][0]["step_mark"],
            if backward {
                "backward"
            } else if name == "marked" {
                "by_hand"
            } else {
                "optimizer"
            }
        );
    }
}

#[test]
fn a_cpu_trial_killed_at_its_timeout_keeps_the_steps_it_ran() {
    let Some(python) = python("a_cpu_trial_killed_at_its_timeout_keeps_the_steps_it_ran") else { return };
    // One step a second, and more steps than the timeout allows: on the CPU
    // the steps' records come from the profiler, which is read at the end.
    let script = [
        "import sys, time, torch",
        "batch = int(sys.argv[1])",
        "m = torch.nn.Linear(64, 64)",
        "o = torch.optim.SGD(m.parameters(), lr=0.1)",
        "for i in range(1000):",
        "    m(torch.randn(batch, 64)).sum().backward(); o.step(); o.zero_grad()",
        "    time.sleep(1)",
    ]
    .join("\n");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = vramprobe()
        .args(["sweep", "--device", "cpu", "--quiet", "--batches", "4", "--steps", "1000", "--trial-timeout", "10"])
        .arg("--out")
        .arg(&out)
        .args(["--", &python, "-c", &script, "{batch}"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    let trials: Vec<SweepRow> = read_csv(&out.join("sweep.csv"));
    let t = &trials[0];
    assert_eq!(t.outcome, Outcome::Timeout, "{t:?}");
    assert!(t.steps_completed >= 1 && t.peak_allocated_bytes.is_some_and(|p| p > 0), "{t:?}");
    let message = &t.message;
    assert!(message.contains(&format!("after {} measured step(s)", t.steps_completed)), "{message}");
    assert!(!message.contains("no training step was seen"), "{message}");
    // Each step it ran is in steps.csv, measured.
    let steps: Vec<vramprobe::record::trial::StepRecord> = read_csv(&out.join("steps.csv"));
    assert_eq!(steps.len() as u32, t.steps_completed);
    assert!(steps.iter().all(|s| s.peak_allocated_bytes > 0 && s.batch == 4), "{steps:?}");
}
