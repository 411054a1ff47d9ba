//! Reporting: formatters that take measured data and return bytes (table,
//! csv, json, plot, html: no file system there), and the few parts that
//! meet the outside world on the reporting side: atomic writes and the run
//! folder ([`output`]), reading plan.csv back ([`plan_file`]), `plan
//! --explain`'s parts of device memory ([`device_memory`]), check's words
//! for a rehearsal of the whole job ([`rehearsal`]), the [`sink`] a sweep
//! reports to as it goes (progress on stderr, the run folder's files), `exec`'s words after
//! the job it watched ([`watch`]), `check`'s verdict ([`verdict`]), a sweep's words when no batch fits
//! ([`no_fit`]), the
//! trainer's log and its plot ([`train_log`]), terminal progress
//! ([`progress`]), `sweep --timings`' table of where the time went ([`timings`]). Nothing here runs a trial.
//!
//! Layer 3: may import `analyze`, `measure`, `record`, `units`, `interrupt`, `error`;
//! never `sweep`, `train`, `bench` or `commands`.
pub mod csv;
pub mod device_memory;
pub mod gpu_plan;
pub mod grid;
pub mod html;
pub mod json;
pub mod no_fit;
pub mod outlet;
pub mod output;
pub mod plan_file;
pub mod plot;
pub mod progress;
pub mod rehearsal;
pub mod sink;
pub mod table;
pub mod timeline;
pub mod timings;
pub mod train_log;
pub mod verdict;
pub mod watch;
pub mod why;
pub mod world_plan;

use crate::analyze::analysis::SeqSummary;
use crate::analyze::run::{Layout, RunIndex, RunRecord};
use crate::analyze::worldfit::{WorldPrediction, WorldSummary};

/// A file of a run folder: its name and its bytes.
pub type RunFile = (&'static str, Vec<u8>);

/// The names of the files [`run_files`] writes for `report`, for saying so.
pub fn run_file_names(report: &RunRecord) -> String {
    let mut names = vec!["steps.csv", "sweep.csv", "breakdown.csv"];
    if report.analysis.is_some() {
        names.push("plan.csv");
    }
    names.extend(["report.json", "memory.svg", "throughput.svg"]);
    if timeline::timeline_trial(report).is_some() {
        names.push("timeline.svg");
    }
    names.push("index.html");
    names.join(", ")
}

/// Every file of one run's folder, rendered from the report: what `sweep`
/// writes after each trial and `vramprobe report` writes again. plan.csv
/// only once the analysis exists (a plan needs a finished search).
pub fn run_files(report: &RunRecord) -> anyhow::Result<Vec<RunFile>> {
    let memory = plot::memory_svg(report)?;
    let throughput = plot::throughput_svg(report)?;
    let mut files =
        vec![("steps.csv", csv::steps_csv(&report.trials)?), ("sweep.csv", csv::sweep_csv(&report.trials)?)];
    files.push(("breakdown.csv", csv::breakdown_csv(&report.trials)?));
    if report.analysis.is_some() {
        files.push(("plan.csv", csv::plan_csv(report)?));
    }
    let timeline = timeline::timeline_svg(report).transpose()?;
    files.push(("index.html", html::run_page(report, &memory, &throughput, timeline.as_deref()).into_bytes()));
    files.push(("memory.svg", memory.into_bytes()));
    files.push(("throughput.svg", throughput.into_bytes()));
    if let Some(t) = timeline {
        files.push(("timeline.svg", t.into_bytes()));
    }
    // Last: report.json is what `report` reads, so it is never newer than the rest.
    files.push(("report.json", json::report_json(report)?));
    Ok(files)
}

/// The files at the top of a sweep over several variants (each variant has
/// its own folder): the combined plan, the page, and for `--seq-lens` the
/// fit across lengths and its heat map.
pub fn variant_files(runs: &[(String, &RunRecord)], seq: Option<&SeqSummary>) -> anyhow::Result<Vec<RunFile>> {
    let reports: Vec<&RunRecord> = runs.iter().map(|(_, r)| *r).collect();
    let mut files = vec![("plan.csv", csv::plan_csv_many(&reports)?)];
    let mut pages = Vec::new();
    for (label, r) in runs {
        pages.push((label.clone(), *r, plot::memory_svg(r)?, plot::throughput_svg(r)?));
    }
    let heatmap = match seq {
        Some(s) => {
            let svg = plot::seq_heatmap_svg(s, &reports)?;
            files.push(("seq-lens.json", json::to_pretty(s)?));
            Some((table::seq_lengths(s), svg))
        }
        None => None,
    };
    let html = html::variants_page(&pages, heatmap.as_ref().map(|(t, svg)| (t.as_str(), svg.as_str())));
    files.push(("index.html", html.into_bytes()));
    if let Some((_, svg)) = heatmap {
        files.push(("seq-heatmap.svg", svg.into_bytes()));
    }
    Ok(files)
}

/// Every file of a sweep's top folder, from its index and its runs (in
/// the index's order): what `sweep` writes and `vramprobe report` writes again.
pub fn top_files(index: &RunIndex, runs: &[(String, &RunRecord)]) -> anyhow::Result<Vec<RunFile>> {
    let mut files = Vec::new();
    if index.layout == Layout::Variants {
        files.extend(variant_files(runs, index.seq_lens.as_ref())?);
        if let Some(summary) = &index.world_sizes {
            let reports: Vec<&RunRecord> = runs.iter().map(|(_, r)| *r).collect();
            files.extend(world_files(&reports, summary)?);
        }
    }
    files.push(("run.json", json::to_pretty(index)?));
    Ok(files)
}

/// plan.csv rows for world sizes not run, each from the largest measured
/// world size's run (its subject, device and budget).
pub fn world_plan_rows(reports: &[&RunRecord], predictions: &[WorldPrediction]) -> Vec<csv::PlanRow> {
    let largest =
        reports.iter().filter_map(|r| Some((r.world_size()?, *r, r.analysis.as_ref()?))).max_by_key(|(w, _, _)| *w);
    match largest {
        Some((_, r, a)) => predictions.iter().map(|p| csv::world_plan_row(r, a, p)).collect(),
        None => Vec::new(),
    }
}

/// The files of a `--world-sizes` sweep's fit: `world-sizes.json` and
/// `plan-world-sizes.csv` (one predicted row per world size not run, from
/// the largest measured world size's run).
pub fn world_files(reports: &[&RunRecord], summary: &WorldSummary) -> anyhow::Result<Vec<RunFile>> {
    let rows = world_plan_rows(reports, &summary.predictions);
    Ok(vec![
        ("world-sizes.json", json::to_pretty(summary)?),
        ("plan-world-sizes.csv", csv::to_bytes::<csv::PlanRow>(rows)?),
    ])
}
