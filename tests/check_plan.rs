//! The pre-flight check's exit codes on real CPU runs, `plan` for GPUs you do
//! not have, the profiles in profiles/, and `--device all` without a GPU.
#![cfg(feature = "builtin")]
use std::path::Path;

use common::{capacity_for_max, vramprobe};
use vramprobe::report::csv::PlanRow;
use vramprobe::report::device_memory::MemoryRow;

use crate::common;

const WORKLOAD: [&str; 10] =
    ["--model", "resnet18", "--input", "3x32x32", "--classes", "10", "--optimizer", "sgd", "--device", "cpu"];

#[test]
fn check_exits_0_when_it_fits_and_3_when_it_does_not() {
    // A capacity half a sample above batch 16's peak as measured here: 16
    // fits with no margin to spare, 400 (24 times the activations) cannot.
    let capacity = capacity_for_max(&WORKLOAD, (8, 16), 16, 0.0);
    let capacity_arg = capacity.to_string();
    let check = |batch: &str, extra: &[&str]| {
        vramprobe()
            .arg("check")
            .args(WORKLOAD)
            .args(["--batch", batch, "--capacity", &capacity_arg])
            .args(extra)
            .output()
            .unwrap()
    };
    let fits = check("16", &["--margin", "0"]);
    assert_eq!(
        fits.status.code(),
        Some(0),
        "batch 16 under {capacity} bytes: {}",
        String::from_utf8_lossy(&fits.stderr)
    );
    let out = String::from_utf8_lossy(&fits.stdout);
    assert!(out.starts_with("FITS: resnet18 3x32x32 at batch 16 on cpu: peak ") && out.contains("headroom"), "{out}");
    // The breakdown only when asked: one more line, the peak's make-up.
    assert!(!out.contains("peak made of"), "{out}");
    let explained = check("16", &["--margin", "0", "--breakdown"]);
    let out = String::from_utf8_lossy(&explained.stdout);
    assert_eq!(explained.status.code(), Some(0), "{out}");
    assert!(out.contains("\npeak made of: parameters ") && out.contains("; reached in "), "{out}");

    // The sweep's rule: with the default 10% margin, batch 16 (half a sample
    // under the capacity) does not fit, although the capacity holds it; the
    // message names the margin that admits it, and that margin does.
    let in_margin = check("16", &[]);
    let out = String::from_utf8_lossy(&in_margin.stdout);
    assert_eq!(in_margin.status.code(), Some(3), "{out}");
    assert!(out.starts_with("WON'T FIT: ") && out.contains("less than the 10% margin stays free"), "{out}");
    let admits = out.split("--margin ").nth(1).and_then(|t| t.split(' ').next()).expect("a margin that admits it");
    let admitted = check("16", &["--margin", admits]);
    assert_eq!(admitted.status.code(), Some(0), "--margin {admits}: {}", String::from_utf8_lossy(&admitted.stdout));

    let too_big = check("400", &["--json"]);
    assert_eq!(
        too_big.status.code(),
        Some(3),
        "batch 400 under {capacity} bytes: {}",
        String::from_utf8_lossy(&too_big.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&too_big.stdout).unwrap();
    assert_eq!(
        (v["verdict"].as_str(), v["exit_code"].as_i64(), v["capacity_bytes"].as_u64()),
        (Some("wont_fit"), Some(3), Some(capacity))
    );
    assert!(v["message"].as_str().unwrap().contains("out of memory"), "{v}");

    let quiet = check("400", &["--quiet"]);
    assert_eq!(quiet.status.code(), Some(3));
    assert!(quiet.stdout.is_empty());

    let usage = vramprobe().args(["check", "--capacity", "1GiB"]).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
}

#[test]
fn plan_predicts_gpus_and_its_rows_are_accepted_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let sweep = vramprobe()
        .arg("sweep")
        .args(WORKLOAD)
        .args(["--batches", "16,32,48", "--quiet", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert!(sweep.status.success(), "{}", String::from_utf8_lossy(&sweep.stderr));

    let plan = vramprobe().args(["plan", "--gpu", "all", "--from"]).arg(run.join("report.json")).output().unwrap();
    assert!(plan.status.success(), "{}", String::from_utf8_lossy(&plan.stderr));
    let stdout = String::from_utf8_lossy(&plan.stdout);
    assert!(stdout.contains("NVIDIA GeForce RTX 3070 (rtx3070)") && stdout.contains("predicted"), "{stdout}");
    let rows: Vec<PlanRow> =
        csv::Reader::from_path(run.join("plan-gpus.csv")).unwrap().deserialize().collect::<Result<_, _>>().unwrap();
    assert_eq!(rows.len(), 15);
    // From a CPU run of a built-in model, what GPUs would reserve: the two
    // largest batches' traces scaled to larger batches and replayed through
    // the caching allocator's model.
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(run.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["analysis"]["cuda_reserved_curve_from"], serde_json::json!([32, 48]));
    let curve = report["analysis"]["cuda_reserved_curve"].as_array().unwrap();
    assert!(curve.len() > 5 && curve[0]["batch"] == 16, "{curve:?}");
    assert!(curve.windows(2).all(|w| w[0]["batch"].as_u64() < w[1]["batch"].as_u64()));
    assert!(!String::from_utf8_lossy(&std::fs::read(run.join("report.json")).unwrap()).contains("\"trace\""));
    // The arithmetic: budget = memory - margin - the overheads; the max is
    // the last batch whose predicted reserved bytes stay within it.
    for r in &rows {
        assert_eq!(r.fit_basis.unwrap().name(), "predicted_cuda_reserved");
        let at = |b: u64| r.fixed_bytes.unwrap() as f64 + r.per_sample_bytes.unwrap() as f64 * b as f64;
        assert!(r.recommended_peak_bytes.unwrap() as f64 <= r.budget_bytes as f64, "{r:?}");
        // The piece's bytes are rounded to whole bytes: at most half a byte per sample.
        assert!((at(r.max_batch) - r.recommended_peak_bytes.unwrap() as f64).abs() <= r.max_batch as f64, "{r:?}");
        assert!(!r.recommended_verified && !r.exact && r.strategy.unwrap().to_string() == "predicted-from-cpu");
    }
    let max_of = |name: &str| rows.iter().find(|r| r.device_name.contains(name)).unwrap().max_batch;
    assert!(max_of("A100 80GB") > max_of("RTX 3070"), "an 80 GB A100 holds more than an 8 GB RTX 3070");

    // check takes a plan row: the RTX 3070 prediction, on this CPU limited to
    // a capacity where that row's own line allows batch 16 at most. The row's
    // batch (sized for 8 GiB) runs out of memory here, and the verdict quotes
    // the line's max.
    let row = &rows[2];
    assert!(row.device_name.contains("RTX 3070"));
    let line = vramprobe::analyze::fit::LinearFit {
        fixed_bytes: row.fixed_bytes.unwrap() as f64,
        per_sample_bytes: row.per_sample_bytes.unwrap() as f64,
        r2: 1.0,
        points: 2,
    };
    assert!(row.recommended_batch > 16, "an 8 GB card holds more than batch 16: {row:?}");
    let capacity = line.capacity_for_max(16, common::DEFAULT_MARGIN).to_string();
    let check = vramprobe()
        .args(["check", "--row", "3", "--device", "cpu", "--json", "--capacity", &capacity, "--plan"])
        .arg(run.join("plan-gpus.csv"))
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(3), "{}", String::from_utf8_lossy(&check.stderr));
    let v: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!((v["batch"].as_u64(), v["max_batch_from_fit"].as_u64()), (Some(row.recommended_batch), Some(16)), "{v}");
    assert!(v["message"].as_str().unwrap().contains("allows batch 16 at most"), "{v}");

    // --explain: the device memory part by part, at the recommended batch and at --at.
    let explained = dir.path().join("h100.csv");
    let explain = vramprobe()
        .args(["plan", "--gpu", "h100-80gb", "--explain", "--at", "64", "--from"])
        .arg(run.join("report.json"))
        .arg("--out")
        .arg(&explained)
        .output()
        .unwrap();
    assert!(explain.status.success(), "{}", String::from_utf8_lossy(&explain.stderr));
    let stdout = String::from_utf8_lossy(&explain.stdout);
    for part in ["reserved", "cuBLAS workspace", "CUDA context", "cuDNN convolution workspaces: not added"] {
        assert!(stdout.contains(part), "{part}: {stdout}");
    }
    let parts: Vec<MemoryRow> = csv::Reader::from_path(dir.path().join("h100-memory.csv"))
        .unwrap()
        .deserialize()
        .collect::<Result<_, _>>()
        .unwrap();
    let h100: Vec<PlanRow> =
        csv::Reader::from_path(&explained).unwrap().deserialize().collect::<Result<_, _>>().unwrap();
    let [recommended, at64] = &parts[..] else { panic!("{parts:?}") };
    assert_eq!((recommended.batch, recommended.recommended), (h100[0].recommended_batch, true));
    assert_eq!((at64.batch, at64.recommended), (64, false));
    for r in &parts {
        // Two 32 MiB workspaces on Hopper, the profile's 512 MiB context.
        assert_eq!((r.cublas_workspace_bytes, r.context_bytes), (64 << 20, 512 << 20));
        let total = r.reserved_bytes + (r.cublas_workspace_bytes + r.context_bytes) as i64;
        assert!(r.device_bytes.abs_diff(total) <= 1, "{r:?}");
    }
    assert!(recommended.device_bytes as u64 <= h100[0].capacity_bytes);
    assert!(at64.reserved_bytes < recommended.reserved_bytes);

    let bad = vramprobe().args(["plan", "--gpu", "rtx9999", "--from"]).arg(run.join("report.json")).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no such GPU profile"));
}

fn toml_files(dir: &str) -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_profile_file_parses_and_every_gpu_is_built_in() {
    let gpus = toml_files("profiles/gpus");
    assert!(gpus.len() >= 14);
    let built_in = vramprobe::analyze::profile::built_in_gpus().unwrap();
    for path in &gpus {
        let g = vramprobe::analyze::profile::parse_gpu(path, &std::fs::read_to_string(path).unwrap()).unwrap();
        assert!(built_in.iter().any(|b| b.id == g.id && b == &g), "{} is not compiled in", path.display());
    }
    for path in toml_files("profiles/models") {
        vramprobe::sweep::preset::load_workload(&path).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn a_sweep_reads_a_workload_profile_and_reports_a_malformed_one() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "model = \"resnet18\"\ninput = \"3x32x32\"\nclasses = 10\nmode = \"infer\"\nprecision = \"fp32\"\noptimizer = \"sgd\"\nlr = 0.1\n").unwrap();
    let out = vramprobe().args(["sweep", "--profile"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad.toml:4: field mode: 'infer' is not one of train, eval"), "{stderr}");

    let profile = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/models/resnet18-cifar10.toml");
    let run = dir.path().join("run");
    let ok = vramprobe()
        .args(["sweep", "--device", "cpu", "--batches", "2,4", "--quiet", "--profile"])
        .arg(&profile)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let plan = std::fs::read_to_string(run.join("plan.csv")).unwrap();
    assert!(
        plan.lines()
            .nth(1)
            .unwrap()
            .starts_with(&format!("{},resnet18,3x32x32,10,cpu,", vramprobe::report::csv::PLAN_SCHEMA_VERSION)),
        "{plan}"
    );
}

#[test]
fn device_all_without_a_gpu_says_so() {
    if vramprobe::measure::device::cuda::device_count() > 0 {
        eprintln!("skipped: this machine has a CUDA device");
        return;
    }
    let out = vramprobe().args(["sweep", "--model", "resnet18", "--device", "all"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--device all: no CUDA device found"));
}
