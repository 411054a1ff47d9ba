//! `vramprobe plan --from runs/X/report.json --gpu rtx3070|all|FILE`:
//! predicts the max batch on GPUs from a measured memory line; `--explain`
//! shows the device memory part by part.
use std::path::Path;

use anyhow::{Context, Result};

use crate::analyze::analysis::FitBasis;
use crate::analyze::profile;
use crate::analyze::whatif::{predict_for, GpuPrediction};
use crate::analyze::worldfit;
use crate::commands::cli::PlanArgs;
use crate::error::UsageError;
use crate::report::csv::{self, gpu_plan_row, PlanRow};
use crate::report::device_memory::{self, MemoryRow};
use crate::report::output::write_atomic;
use crate::report::{gpu_plan, world_plan};

pub fn run(args: PlanArgs) -> Result<i32> {
    let gpu = match (&args.gpu, &args.world_size) {
        (_, Some(sizes)) => return world_sizes(&args, &sizes.0),
        (Some(gpu), None) => gpu,
        (None, None) => return Err(UsageError::new("plan needs --gpu or --world-size").into()),
    };
    // The GPU names are checked before the file is read: a typo costs nothing.
    let gpus = profile::resolve_gpus(gpu).map_err(|e| UsageError::new(e.to_string()))?;
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

/// `--world-size`: the per-rank batch at world sizes not run, from a
/// `--world-sizes` sweep's fit, with what shrinks and what does not apart.
fn world_sizes(args: &PlanArgs, sizes: &[u32]) -> Result<i32> {
    let dir = if args.from.is_dir() { args.from.clone() } else { args.from.parent().unwrap_or(Path::new(".")).into() };
    let index = crate::report::json::read_index(&dir.join("run.json"))?;
    let not_fitted = || {
        UsageError::new(format!(
            "{}: no fit across world sizes here: plan --world-size reads a `sweep --world-sizes N1,N2 -- ... {{nproc}}` \
             folder with two world sizes that fit",
            dir.display()
        ))
    };
    let summary = index.world_sizes.as_ref().ok_or_else(not_fitted)?;
    let fit = summary.fit.ok_or_else(not_fitted)?;
    let predictions: Vec<_> =
        sizes.iter().map(|&w| worldfit::predict(&fit, w, summary.budget_bytes, args.multiple_of)).collect();
    print!("{}", world_plan::summary(summary, &fit, &predictions));
    let mut reports = Vec::new();
    for folder in &index.folders {
        reports.push(crate::report::json::read_report(&dir.join(folder).join("report.json"))?);
    }
    let rows = crate::report::world_plan_rows(&reports.iter().collect::<Vec<_>>(), &predictions);
    let out = args.out.clone().unwrap_or_else(|| dir.join("plan-world-size.csv"));
    write_atomic(&out, &csv::to_bytes::<PlanRow>(rows)?).context("writing the world-size plan")?;
    println!(
        "Wrote {} (predicted rows: run `vramprobe check --plan {} --row N` on the real job first)",
        out.display(),
        out.display()
    );
    Ok(0)
}
