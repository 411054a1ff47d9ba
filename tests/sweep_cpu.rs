//! Real CPU sweeps through the binary: exact, linear, predictive, and with
//! output files that parse back with stable headers.
#![cfg(feature = "builtin")]
use std::path::Path;

use common::{capacity_for_max, trial, vramprobe, DEFAULT_MARGIN};
use vramprobe::record::trial::{Message, Outcome, StepRecord};
use vramprobe::report::csv::{PlanRow, SweepRow};

use crate::common;

fn read_csv<T: serde::de::DeserializeOwned>(path: &Path) -> (Vec<String>, Vec<T>) {
    let mut r = csv::Reader::from_path(path).unwrap();
    let header = r.headers().unwrap().iter().map(str::to_string).collect();
    let rows = r.deserialize().collect::<Result<Vec<T>, _>>().unwrap();
    (header, rows)
}

#[test]
fn a_small_cpu_sweep_is_linear_and_predicts_a_held_out_batch() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // SGD at 64x64: activations outgrow the optimizer's temporaries from
    // batch 1 on (with Adam at this size the peak sits in the optimizer step
    // and stays flat up to batch 8).
    let base =
        ["--model", "resnet18", "--input", "3x64x64", "--classes", "10", "--optimizer", "sgd", "--device", "cpu"];
    let mut args = vec!["sweep"];
    args.extend(base);
    args.extend(["--batches", "1,2,4,8,16,32", "--out", out.to_str().unwrap(), "--quiet"]);
    let run = vramprobe().args(&args).output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("recommended batch") && stdout.contains("per sample"), "{stdout}");

    // sweep.csv: every trial fits and peaks strictly increase with the batch.
    let (_, trials) = read_csv::<SweepRow>(&out.join("sweep.csv"));
    assert_eq!(trials.iter().map(|t| t.batch).collect::<Vec<_>>(), vec![1, 2, 4, 8, 16, 32]);
    assert!(trials.iter().all(|t| t.outcome == Outcome::Fits && t.steps_completed == 3));
    let peaks: Vec<u64> = trials.iter().map(|t| t.peak_allocated_bytes.unwrap()).collect();
    assert!(peaks.windows(2).all(|w| w[0] < w[1]), "{peaks:?}");

    // steps.csv holds every step, consistent with sweep.csv.
    let (_, steps) = read_csv::<StepRecord>(&out.join("steps.csv"));
    assert_eq!(steps.len(), 18);
    for t in &trials {
        let max = steps.iter().filter(|s| s.trial == t.trial).map(|s| s.peak_allocated_bytes).max();
        assert_eq!(max, t.peak_allocated_bytes);
    }

    // plan.csv: a straight line.
    let (_, plan) = read_csv::<PlanRow>(&out.join("plan.csv"));
    assert_eq!(plan.len(), 1);
    let p = &plan[0];
    assert_eq!(
        (p.model.as_str(), p.input.as_slice(), p.device.to_string().as_str(), p.fit_basis.unwrap().name()),
        ("resnet18", &[3, 64, 64][..], "cpu", "peak_allocated")
    );
    assert!(p.r2.unwrap() >= 0.999, "r2 {:?}", p.r2);
    // The largest listed batch is the verified max; the fit predicts beyond it.
    assert_eq!(
        (p.max_batch, p.recommended_batch, p.exact, p.strategy.unwrap().to_string().as_str()),
        (32, 32, false, "listed-batches")
    );
    assert!(p.recommended_verified && p.predicted_max_batch.unwrap() > 32);

    // A batch the fit never saw: the prediction is within 1% of the measured peak.
    let mut held_out = base.to_vec();
    held_out.extend(["--batch", "24"]);
    let measured = trial(&held_out)
        .iter()
        .filter_map(|m| match m {
            Message::Step(s) => Some(s.peak_allocated_bytes),
            _ => None,
        })
        .max()
        .unwrap() as f64;
    let predicted = p.fixed_bytes.unwrap() as f64 + 24.0 * p.per_sample_bytes.unwrap() as f64;
    let error = (predicted - measured).abs() / measured;
    assert!(error < 0.01, "predicted {predicted}, measured {measured}: {:.3}% off", error * 100.0);

    // report.json has the environment and the command line.
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["status"], "complete");
    // The torch the binary was built against (2.13 here, 2.11 in the GPU kit).
    let torch = report["environment"]["torch_version"].as_str().unwrap();
    assert!(torch.split('.').count() == 3 && torch.starts_with("2."), "{torch}");
    assert!(report["command_line"].as_array().unwrap().iter().any(|a| a == "--batches"));
}

#[test]
fn csv_headers_are_stable() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = vramprobe()
        .args([
            "sweep",
            "--model",
            "squeezenet1_1",
            "--input",
            "3x32x32",
            "--device",
            "cpu",
            "--batches",
            "1,2",
            "--out",
        ])
        .arg(&out)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let header = |name: &str| std::fs::read_to_string(out.join(name)).unwrap().lines().next().unwrap().to_string();
    assert_eq!(
        header("plan.csv"),
        "schema_version,model,input,classes,device,device_name,mode,precision,optimizer,capacity_bytes,margin_fraction,non_pytorch_bytes,budget_bytes,fit_basis,fixed_bytes,per_sample_bytes,r2,fit_points,strategy,trials,max_batch,exact,predicted_max_batch,recommended_batch,recommended_verified,recommended_peak_bytes,headroom_bytes,fastest_batch,fastest_samples_per_second,world_size,global_batch,subject"
    );
    assert_eq!(
        header("sweep.csv"),
        "trial,batch,outcome,steps_completed,peak_allocated_bytes,peak_reserved_bytes,nvml_used_bytes,host_peak_rss_bytes,non_pytorch_bytes,mean_step_seconds,samples_per_second,wall_seconds,failed_step,message,world_size,peak_rank,rank_spread_bytes,forward_backward_peak_bytes,optimizer_peak_bytes"
    );
    assert_eq!(
        header("steps.csv"),
        "trial,rank,node,world_size,step,batch,step_seconds,data_seconds,forward_seconds,backward_seconds,optimizer_seconds,samples_per_second,allocated_bytes,peak_allocated_bytes,reserved_bytes,peak_reserved_bytes,active_bytes,peak_active_bytes,inactive_split_bytes,requested_bytes,peak_requested_bytes,alloc_retries,ooms,nvml_used_bytes,nvml_free_bytes,nvml_total_bytes,nvml_gpu_util_percent,nvml_mem_util_percent,nvml_temperature_c,nvml_power_watts,nvml_sm_clock_mhz,nvml_process_used_bytes,host_peak_rss_bytes,forward_backward_peak_bytes,optimizer_peak_bytes,predicted_cuda_peak_reserved_bytes"
    );
    // CPU rows leave the CUDA columns empty rather than writing zeros.
    let (_, steps) = read_csv::<StepRecord>(&out.join("steps.csv"));
    assert!(steps
        .iter()
        .all(|s| s.reserved_bytes.is_none() && s.nvml_used_bytes.is_none() && s.host_peak_rss_bytes.is_some()));
    // What a GPU would reserve for the same steps (the caching allocator's
    // model): whole segments, each a multiple of 2 MiB, holding at least the peak.
    for s in &steps {
        let reserved = s.predicted_cuda_peak_reserved_bytes.unwrap();
        assert!(reserved % (2 << 20) == 0 && reserved >= s.peak_allocated_bytes, "{s:?}");
    }
    // The plan parses back into the trainer's type with its schema version.
    let (_, plan) = read_csv::<PlanRow>(&out.join("plan.csv"));
    assert_eq!(plan[0].schema_version, vramprobe::report::csv::PLAN_SCHEMA_VERSION);
}

#[test]
fn a_real_allocator_failure_is_classified_oom() {
    // A trillion 3x224x224 f32 images are 6 x 10^17 bytes, more than any
    // x86-64 address space holds (2^57 with 5-level paging): libtorch's CPU
    // allocator refuses on every host, overcommitting or not.
    let messages = trial(&["--model", "resnet18", "--device", "cpu", "--batch", "1000000000000"]);
    let Some(Message::End { outcome, message, failed_step }) = messages.last() else {
        panic!("no end record: {messages:?}");
    };
    assert_eq!(*outcome, Outcome::Oom);
    assert_eq!(*failed_step, Some(1));
    let message = message.as_deref().unwrap();
    assert!(
        message.contains("out of memory in data creation") && message.contains("can't allocate memory"),
        "{message}"
    );
    assert!(!message.contains('\n'), "one line: {message}");
}

#[test]
fn a_sweep_stops_at_the_first_oom_and_keeps_what_it_measured() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let workload = ["--model", "squeezenet1_1", "--input", "3x32x32", "--device", "cpu"];
    // Batch 4 is the most that fits here; 640 runs out of the capacity itself
    // (a real OOM inside libtorch, not only over the budget).
    let capacity = capacity_for_max(&workload, (2, 4), 4, DEFAULT_MARGIN).to_string();
    let run = vramprobe()
        .arg("sweep")
        .args(workload)
        .args(["--capacity", &capacity, "--batches", "1,2,640,1280", "--out"])
        .arg(&out)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let (_, trials) = read_csv::<SweepRow>(&out.join("sweep.csv"));
    let outcomes: Vec<&str> = trials.iter().map(|t| t.outcome.name()).collect();
    assert_eq!(outcomes, ["fits", "fits", "oom"], "{trials:?}");
    let (_, plan) = read_csv::<PlanRow>(&out.join("plan.csv"));
    assert_eq!(plan[0].max_batch, 2);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let notes = report["analysis"]["notes"].to_string();
    assert!(notes.contains("batches [1280] were not run"), "the batch after the OOM is named as not run: {notes}");
}

/// Runs a sweep and returns its plan row.
fn sweep_plan(out: &Path, args: &[&str]) -> PlanRow {
    let run = vramprobe().arg("sweep").args(args).arg("--out").arg(out).arg("--quiet").output().unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    read_csv::<PlanRow>(&out.join("plan.csv")).1.remove(0)
}

/// The exhaustive scan against the search under a capacity that puts the
/// max at `target` on this machine, derived from the line through `anchor`.
fn search_equals_an_exhaustive_scan(dir: &Path, anchor: (u64, u64), target: u64, from: u64) {
    let base =
        ["--model", "resnet18", "--input", "3x32x32", "--classes", "10", "--optimizer", "sgd", "--device", "cpu"];
    let capacity = capacity_for_max(&base, anchor, target, DEFAULT_MARGIN).to_string();
    let workload = [&base[..], &["--capacity", &capacity]].concat();
    // Exhaustive: every batch from `from` up, until the first that does not fit.
    let every: Vec<String> = (from..=3 * target).map(|b| b.to_string()).collect();
    let every = every.join(",");
    let scan_args = [&workload[..], &["--batches", &every]].concat();
    let scan = sweep_plan(&dir.join(format!("scan-{target}")), &scan_args);
    assert!(scan.exact, "the scan ran past the max");
    // Peaks are only piecewise linear at this size (the per-sample step
    // grows with the batch), so the line predicts the max within a factor.
    assert!(
        (target / 2..=2 * target).contains(&scan.max_batch) && scan.max_batch >= from,
        "capacity {capacity} derived for a max of {target} gives {}",
        scan.max_batch
    );

    // --multiple-of 8: the recommended batch is the max rounded down, and itself run.
    let search_args = [&workload[..], &["--multiple-of", "8"]].concat();
    let search = sweep_plan(&dir.join(format!("search-{target}")), &search_args);
    assert_eq!(
        (search.strategy.unwrap().to_string().as_str(), search.max_batch, search.exact),
        ("vramprobe", scan.max_batch, true)
    );
    assert_eq!(search.recommended_batch, scan.max_batch / 8 * 8);
    assert!(search.recommended_verified);
    // At most 7 for the search, and one for the rounded batch.
    assert!(search.trials <= 8, "{} trials", search.trials);
}

#[test]
fn the_search_finds_exactly_the_max_an_exhaustive_scan_finds() {
    // Two capacities from two different measurements (a line through small
    // batches and one through larger ones): the property holds wherever the
    // measured peaks fall, not at one machine's numbers. The second scan
    // starts at batch 15, the least its max may be: the first has covered
    // the smallest batches.
    let dir = tempfile::tempdir().unwrap();
    search_equals_an_exhaustive_scan(dir.path(), (2, 4), 12, 1);
    search_equals_an_exhaustive_scan(dir.path(), (16, 32), 30, 15);
}

#[test]
fn a_budget_tighter_than_batch_one_still_finds_what_the_capacity_holds() {
    let workload =
        ["--model", "resnet18", "--input", "3x32x32", "--classes", "10", "--optimizer", "sgd", "--device", "cpu"];
    // A capacity with batch 1's peak (measured here) inside its 10% margin.
    let capacity = (common::trial_peak_at(&workload, 1) as f64 / 0.95) as u64;
    let capacity_arg = capacity.to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = vramprobe()
        .arg("sweep")
        .args(workload)
        .args(["--capacity", &capacity_arg, "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    // Nothing fits as asked: a failure, with the answer in it.
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no batch fits within the 10% margin; batch "), "{stderr}");
    let said = stderr.split("; batch ").nth(1).unwrap();
    let batch: u64 = said.split(' ').next().unwrap().parse().unwrap();
    let margin = said.split("--margin ").nth(1).unwrap().split_whitespace().next().unwrap();
    // The trial lines say where each peak fell, never "fits".
    assert!(stderr.contains(" over the margin  peak ") && !stderr.contains(" fits  peak "), "{stderr}");

    // The capacity's max, exact: that batch ran within the capacity, the next did not.
    let (_, trials) = read_csv::<SweepRow>(&out.join("sweep.csv"));
    let at = |b: u64| trials.iter().find(|t| t.batch == b);
    let held = at(batch).unwrap();
    assert!(held.outcome == Outcome::Fits && held.peak_allocated_bytes.unwrap() <= capacity, "{held:?}");
    let next = at(batch + 1).unwrap_or_else(|| panic!("batch {} was not run: {trials:?}", batch + 1));
    assert!(next.outcome == Outcome::Oom || next.peak_allocated_bytes.unwrap() > capacity, "{next:?}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let notes = report["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n["kind"] == "fits_only_in_margin" && n["batch"] == batch), "{notes:?}");

    // check judges by the same rule: over the margin at the default, fits at the margin named.
    let check = |extra: &[&str]| {
        vramprobe()
            .arg("check")
            .args(workload)
            .args(["--batch", &batch.to_string(), "--capacity", &capacity_arg])
            .args(extra)
            .output()
            .unwrap()
    };
    assert_eq!(check(&[]).status.code(), Some(3));
    let admitted = check(&["--margin", margin]);
    assert_eq!(admitted.status.code(), Some(0), "--margin {margin}: {}", String::from_utf8_lossy(&admitted.stdout));
}
