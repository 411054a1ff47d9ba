//! `vramprobe plan --from runs/X/report.json --gpu rtx3070|all|FILE`:
//! predicts the max batch on GPUs from a measured memory line; `--explain`
//! shows the device memory part by part.
use anyhow::{Context, Result};

use crate::analyze::analysis::FitBasis;
use crate::analyze::profile;
use crate::analyze::whatif::{predict_for, GpuPrediction};
use crate::commands::cli::PlanArgs;
use crate::error::UsageError;
use crate::report::csv::{self, gpu_plan_row, PlanRow};
use crate::report::device_memory::{self, MemoryRow};
use crate::report::gpu_plan;
use crate::report::output::write_atomic;

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

    print!("{}", gpu_plan::summary(&report, analysis, &reserved, &predictions, modelled));

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
