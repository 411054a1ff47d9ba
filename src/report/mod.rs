//! Reporting: formatters that take measured data and return bytes (table,
//! csv, json, plot, html: no file system there), and the few parts that
//! meet the outside world on the reporting side: atomic writes and the run
//! folder ([`output`]), reading plan.csv back ([`plan_file`]), the
//! trainer's log and its plot ([`train_log`]), terminal progress
//! ([`progress`]). Nothing here runs a trial.
//!
//! Layer 3: may import `analyze`, `measure`, `record`, `units`, `interrupt`, `error`;
//! never `sweep`, `train`, `bench` or `commands`.
pub mod csv;
pub mod grid;
pub mod html;
pub mod json;
pub mod output;
pub mod plan_file;
pub mod plot;
pub mod progress;
pub mod table;
pub mod timeline;
pub mod train_log;
pub mod why;

use serde::{Deserialize, Serialize};

use crate::analyze::analysis::{Analysis, SeqSummary};
use crate::analyze::note::Note;
use crate::analyze::why::Why;
use crate::analyze::worldfit::WorldSummary;
use crate::measure::environment::Environment;
use crate::record::device::Device;
use crate::record::subject::Subject;
use crate::record::trial::TrialResult;

/// How far a run got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Trials are still going on.
    Running,
    /// Finished with a batch to recommend.
    Complete,
    /// Finished, and nothing fits.
    Failed,
    /// Stopped by SIGINT or SIGTERM: the trials are what was measured.
    Interrupted,
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RunStatus::Running => "running",
            RunStatus::Complete => "complete",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        })
    }
}

/// Everything a sweep knows, as written to `report.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub status: RunStatus,
    pub command_line: Vec<String>,
    pub started_at: String,
    pub environment: Environment,
    /// What was measured: a built-in model, a TorchScript file or a command.
    pub subject: Subject,
    pub device: Device,
    pub device_name: Option<String>,
    pub steps_per_trial: u32,
    pub margin_fraction: f64,
    pub multiple_of: u64,
    pub trials: Vec<TrialResult>,
    pub analysis: Option<Analysis>,
    /// Why the batch stops where it does: computed once by the sweep, when
    /// the max batch was broken down; every view shows this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<Why>,
    pub notes: Vec<Note>,
}

impl Report {
    /// A distributed command's ranks, as its trials measured them.
    pub fn world_size(&self) -> Option<u32> {
        self.trials.iter().find_map(|t| t.world_size)
    }
}

/// 2: `subject` (built-in, torchscript or command) replaced `workload` and `command`.
pub const REPORT_SCHEMA_VERSION: u32 = 2;

/// A file of a run folder: its name and its bytes.
pub type RunFile = (&'static str, Vec<u8>);

/// The names of the files [`run_files`] writes for `report`, for saying so.
pub fn run_file_names(report: &Report) -> String {
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
pub fn run_files(report: &Report) -> anyhow::Result<Vec<RunFile>> {
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
pub fn variant_files(runs: &[(String, &Report)], seq: Option<&SeqSummary>) -> anyhow::Result<Vec<RunFile>> {
    let reports: Vec<&Report> = runs.iter().map(|(_, r)| *r).collect();
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

/// How a sweep's top folder is laid out when it has one folder per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// One folder per variant (optimizer, precision, mode, length, world size).
    Variants,
    /// One folder per device (`--device all`).
    Devices,
}

/// The top folder of a sweep with one folder per run (`run.json`): the
/// folders in the order they ran, and the fits across them, computed once
/// by the sweep. Each folder has its own report.json; `vramprobe report`
/// re-renders the top folder from this and those, never recomputing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunIndex {
    pub schema_version: u32,
    pub layout: Layout,
    pub folders: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_lens: Option<SeqSummary>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_sizes: Option<WorldSummary>,
}

/// Every file of a sweep's top folder, from its index and its runs (in
/// the index's order): what `sweep` writes and `vramprobe report` writes again.
pub fn top_files(index: &RunIndex, runs: &[(String, &Report)]) -> anyhow::Result<Vec<RunFile>> {
    let mut files = Vec::new();
    if index.layout == Layout::Variants {
        files.extend(variant_files(runs, index.seq_lens.as_ref())?);
        if let Some(summary) = &index.world_sizes {
            let reports: Vec<&Report> = runs.iter().map(|(_, r)| *r).collect();
            files.extend(world_files(&reports, summary)?);
        }
    }
    files.push(("run.json", json::to_pretty(index)?));
    Ok(files)
}

/// The files of a `--world-sizes` sweep's fit: `world-sizes.json` and
/// `plan-world-sizes.csv` (one predicted row per world size not run, from
/// the largest measured world size's run).
pub fn world_files(reports: &[&Report], summary: &WorldSummary) -> anyhow::Result<Vec<RunFile>> {
    let largest =
        reports.iter().filter_map(|r| Some((r.world_size()?, *r, r.analysis.as_ref()?))).max_by_key(|(w, _, _)| *w);
    let rows: Vec<csv::PlanRow> = match largest {
        Some((_, r, a)) => summary.predictions.iter().map(|p| csv::world_plan_row(r, a, p)).collect(),
        None => Vec::new(),
    };
    Ok(vec![
        ("world-sizes.json", json::to_pretty(summary)?),
        ("plan-world-sizes.csv", csv::to_bytes::<csv::PlanRow>(rows)?),
    ])
}
