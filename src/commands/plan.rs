//! `vramprobe plan --from runs/X/report.json --gpu rtx3070|all|FILE`:
//! predicts the max batch on GPUs from a measured memory line.
use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};

use crate::analyze::analysis::FitBasis;
use crate::analyze::profile;
use crate::analyze::whatif::{predict_for, GpuPrediction};
use crate::commands::cli::PlanArgs;
use crate::error::UsageError;
use crate::report::csv::{self, gpu_plan_row, PlanRow};
use crate::report::output::write_atomic;
use crate::units::{format_input, human_bytes};

pub fn run(args: PlanArgs) -> Result<i32> {
    // The GPU names are checked before the file is read: a typo costs nothing.
    let gpus = profile::resolve_gpus(&args.gpu).map_err(|e| UsageError::new(e.to_string()))?;
    let report = crate::report::json::read_report(&args.from)?;
    let analysis = report.analysis.as_ref().ok_or_else(|| {
        UsageError::new(format!("{}: the run has no analysis (it did not finish)", args.from.display()))
    })?;
    // A CPU run of a built-in model: what a GPU would reserve (the caching
    // allocator's model of its trace); else the measured line.
    let modelled = analysis.cuda_reserved_fit.filter(|f| f.per_sample_bytes > 0.0);
    let basis = if modelled.is_some() { FitBasis::PredictedCudaReserved } else { analysis.fit_basis };
    let fit = modelled.or(analysis.fit).filter(|f| f.per_sample_bytes > 0.0).ok_or_else(|| {
        UsageError::new(format!(
            "{}: the run has no memory line to plan from (fewer than two batch sizes fit)",
            args.from.display()
        ))
    })?;
    let margin = args.margin.unwrap_or(analysis.budget.margin_fraction);
    let predictions: Vec<GpuPrediction> = gpus.iter().map(|g| predict_for(&fit, g, margin, args.multiple_of)).collect();

    let source = match (report.device.is_cuda(), modelled.is_some()) {
        (true, _) => "a GPU",
        (false, true) => "the CPU, its trace replayed through a model of CUDA's caching allocator (reserved bytes)",
        (false, false) => "the CPU (host tracking)",
    };
    let what = match report.subject.workload() {
        Some(w) => format!("{} {} x{} classes, {}", w.model, format_input(&w.input), w.classes, w.optimizer.name()),
        None => format!("your command `{}`", report.subject.name()),
    };
    println!(
        "{what}: memory line measured on {} ({}), fixed {}, per sample {}, r² {:.6}",
        report.device,
        source,
        human_bytes(fit.fixed_bytes),
        human_bytes(fit.per_sample_bytes),
        fit.r2
    );
    println!("measured: max batch {} on {} (verified by {})", analysis.max_batch, report.device, analysis.strategy);
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "GPU (predicted)",
        "memory",
        "overhead",
        "budget",
        "max batch",
        "recommended",
    ]);
    for p in &predictions {
        t.add_row(vec![
            format!("{} ({})", p.gpu.name, p.gpu.id),
            human_bytes(p.gpu.memory_bytes as f64),
            human_bytes(p.gpu.context_overhead_bytes as f64),
            human_bytes(p.budget.budget_bytes as f64),
            p.max_batch.to_string(),
            p.recommended_batch.to_string(),
        ]);
    }
    println!("{t}");
    if modelled.is_some() {
        println!(
            "note: predicted from host measurements: the CUDA allocator's rounding and cache are modelled; cuDNN/cuBLAS \
             workspaces and CUDA's own op choices (autocast casts other ops there) are not"
        );
    } else if !report.device.is_cuda() {
        println!("note: predicted from host measurements: cuDNN/cuBLAS workspaces and the CUDA allocator's rounding are not in them");
    }
    if predictions.iter().any(|p| p.gpu.overhead_source.starts_with("estimate")) {
        println!("note: profile overheads marked 'estimate' are not measured (see each profile's overhead_source)");
    }

    let rows: Vec<PlanRow> = predictions.iter().map(|p| gpu_plan_row(&report, analysis, p, basis, margin)).collect();
    let out = args.out.clone().unwrap_or_else(|| args.from.with_file_name("plan-gpus.csv"));
    write_atomic(&out, &csv::to_bytes::<PlanRow>(&rows)?).context("writing the GPU plan")?;
    println!(
        "Wrote {} ({} rows; check and train accept them: vramprobe check --plan {} --row N)",
        out.display(),
        rows.len(),
        out.display()
    );
    Ok(0)
}
