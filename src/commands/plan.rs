//! `vramprobe plan --from runs/X/report.json --gpu rtx3070|all|FILE`:
//! predicts the max batch on GPUs from a measured memory line; `--explain`
//! shows the device memory part by part.
use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};

use crate::analyze::analysis::FitBasis;
use crate::analyze::device_memory::Reserved;
use crate::analyze::profile;
use crate::analyze::whatif::{predict_for, GpuPrediction};
use crate::commands::cli::PlanArgs;
use crate::error::UsageError;
use crate::report::csv::{self, gpu_plan_row, PlanRow};
use crate::report::device_memory::{self, MemoryRow};
use crate::report::output::write_atomic;
use crate::units::{format_input, human_bytes};

/// What the model allowance column is, in one clause.
const ALLOWANCE_NOTE: &str = "the model allowance is kept free for the prediction's own error";

pub fn run(args: PlanArgs) -> Result<i32> {
    // The GPU names are checked before the file is read: a typo costs nothing.
    let gpus = profile::resolve_gpus(&args.gpu).map_err(|e| UsageError::new(e.to_string()))?;
    let report = crate::report::json::read_report(&args.from)?;
    let analysis = report.analysis.as_ref().ok_or_else(|| {
        UsageError::new(format!("{}: the run has no analysis (it did not finish)", args.from.display()))
    })?;
    // A CPU run of a built-in model: what a GPU would reserve (the caching
    // allocator's model of its trace); else the measured line.
    let (reserved, basis) = analysis.gpu_reserved().ok_or_else(|| {
        UsageError::new(format!(
            "{}: the run has no memory line to plan from (fewer than two batch sizes fit)",
            args.from.display()
        ))
    })?;
    let modelled = basis == FitBasis::PredictedCudaReserved;
    let margin = args.margin.unwrap_or(analysis.budget.margin_fraction);
    let from_gpu = report.device.is_cuda();
    let predictions: Vec<GpuPrediction> =
        gpus.iter().map(|g| predict_for(&reserved, from_gpu, g, margin, args.multiple_of)).collect();

    let source = match (from_gpu, modelled, analysis.cuda_reserved_curve_from) {
        (true, _, _) => "a GPU".to_string(),
        (false, true, Some([b1, b2])) => format!(
            "the CPU: the steps of batches {b1} and {b2} scaled to larger batches and replayed through a model of \
             CUDA's caching allocator (reserved bytes)"
        ),
        (false, true, None) => {
            "the CPU, its trace replayed through a model of CUDA's caching allocator (reserved bytes)".to_string()
        }
        (false, false, _) => "the CPU (host tracking)".to_string(),
    };
    let what = match report.subject.workload() {
        Some(w) => format!("{} {} x{} classes, {}", w.model, format_input(&w.input), w.classes, w.optimizer.name()),
        None => format!("your command `{}`", report.subject.name()),
    };
    match &reserved {
        Reserved::Line(fit) => println!(
            "{what}: memory line measured on {} ({source}), fixed {}, per sample {}, r² {:.6}",
            report.device,
            human_bytes(fit.fixed_bytes),
            human_bytes(fit.per_sample_bytes),
            fit.r2
        ),
        Reserved::Curve { points, .. } => println!(
            "{what}: reserved bytes predicted from {source}, up to batch {}",
            points.last().map_or(0, |p| p.batch)
        ),
    }
    println!("measured: max batch {} on {} (verified by {})", analysis.max_batch, report.device, analysis.strategy);
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "GPU (predicted)",
        "memory",
        "overheads",
        "model allowance",
        "budget",
        "max batch",
        "recommended",
    ]);
    for p in &predictions {
        t.add_row(vec![
            format!("{} ({})", p.gpu.name, p.gpu.id),
            human_bytes(p.gpu.memory_bytes as f64),
            human_bytes(p.overheads.total() as f64),
            human_bytes(p.model_allowance_bytes as f64),
            human_bytes(p.budget.budget_bytes as f64),
            p.max_batch.to_string(),
            p.recommended_batch.to_string(),
        ]);
    }
    println!("{t}");
    if modelled {
        println!(
            "note: predicted from host measurements: the CUDA allocator's rounding and cache are modelled, and \
             attention, autocast's norms and dropout as CUDA runs them; the overheads are the CUDA context and \
             the cuBLAS workspace; cuDNN's choices are not modelled; {ALLOWANCE_NOTE} (--explain shows the parts)"
        );
    } else if !from_gpu {
        println!(
            "note: predicted from host measurements: the CUDA allocator's rounding is not in them; {ALLOWANCE_NOTE} \
             (--explain shows the parts)"
        );
    }
    let unmeasured =
        |p: &GpuPrediction| ["estimate", "calibrated"].iter().any(|w| p.gpu.overhead_source.starts_with(w));
    if predictions.iter().any(unmeasured) {
        println!(
            "note: profile overheads marked 'estimate' or 'calibrated' were not measured on that GPU (see each profile's overhead_source)"
        );
    }

    let at = args.at.as_ref().map_or(&[][..], |b| &b.0[..]);
    if args.explain {
        print!("{}", device_memory::explain(&predictions, at, modelled));
    }

    let rows: Vec<PlanRow> = predictions.iter().map(|p| gpu_plan_row(&report, analysis, p, basis, margin)).collect();
    let out = args.out.clone().unwrap_or_else(|| args.from.with_file_name("plan-gpus.csv"));
    write_atomic(&out, &csv::to_bytes::<PlanRow>(&rows)?).context("writing the GPU plan")?;
    if args.explain {
        let parts = out.with_file_name(format!(
            "{}-memory.csv",
            out.file_stem().map_or("plan-gpus".into(), |s| s.to_string_lossy().into_owned())
        ));
        let bytes = csv::to_bytes::<MemoryRow>(device_memory::rows(&predictions, at))?;
        write_atomic(&parts, &bytes).context("writing the device memory parts")?;
        println!("Wrote {} (the parts of device memory per GPU and batch)", parts.display());
    }
    println!(
        "Wrote {} ({} rows; check and train accept them: vramprobe check --plan {} --row N)",
        out.display(),
        rows.len(),
        out.display()
    );
    Ok(0)
}
