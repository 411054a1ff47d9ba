//! A sweep with a folder per run: one run per variant (optimizer,
//! precision, mode, sequence length, world size), one after the other, or
//! one per device at once (`--device all`). The fits across the variants are
//! computed here, once, and everything comes back as one finished [`Run`];
//! the [`Outlet`] (commands/sweep.rs: child processes and files; tests: a
//! script) makes each run's trial runner and sink and keeps the top folder.
use std::path::Path;

use anyhow::Result;

use crate::analyze::analysis::{self, SeqSummary};
use crate::analyze::run::{Layout, RunIndex, RunRecord};
use crate::analyze::worldfit::{self, WorldPoint, WorldSummary};
use crate::error::Interrupted;
use crate::measure::runner::TrialRunner;
use crate::record::subject::Subject;
use crate::record::trial::TrialResult;
use crate::units::format_input;

use super::{Sink, SweepConfig};

/// What a sweep needs from the outside for each run.
pub trait Outlet {
    /// The trial runner of a run whose folder is `dir`.
    fn runner(&mut self, subject: &Subject, dir: &Path) -> Result<Box<dyn TrialRunner + Send>>;
    /// Where a run reports as it goes (progress, its folder's files).
    fn sink(&mut self, label: &str, subject: &Subject, dir: &Path) -> Box<dyn Sink + Send>;
    /// A run ended: its report, or why it has none.
    fn finished(&mut self, label: &str, result: &Result<RunRecord>);
    /// The top folder as it stands: after every run, and at the end.
    fn top(&mut self, index: &RunIndex, runs: &[(String, &RunRecord)]) -> Result<()>;
}

/// A finished sweep with a folder per run.
pub struct Run {
    /// The top folder's index: its folders and the fits across them.
    pub index: RunIndex,
    /// The runs that finished, in the order they ran, by folder.
    pub reports: Vec<(String, RunRecord)>,
    /// The runs that failed, by folder, with why.
    pub failed: Vec<(String, String)>,
}

impl Run {
    pub fn runs(&self) -> Vec<(String, &RunRecord)> {
        self.reports.iter().map(|(label, r)| (label.clone(), r)).collect()
    }
}

/// Which fits across the variants to make.
#[derive(Debug, Clone, Copy, Default)]
pub struct Across {
    /// `--seq-lens`: memory against batch and sequence length.
    pub seq_lens: bool,
    /// `--world-sizes` with two or more: the per-rank line against the world size.
    pub world_sizes: bool,
}

/// A folder name per variant, from what differs between them, e.g.
/// `bf16-amp-eval`, `seq-512` or `world-2-seq-512`.
pub fn labels(subjects: &[Subject]) -> Vec<String> {
    type Part = fn(&Subject) -> Option<String>;
    let parts: [(&str, Part); 5] = [
        ("world-", |s| s.command().and_then(|c| c.world_size).map(|n| n.to_string())),
        ("", |s| s.workload().map(|w| w.optimizer.name().to_string())),
        ("", |s| s.workload().map(|w| w.precision.name().to_string())),
        ("", |s| s.workload().map(|w| w.mode.name().to_string())),
        ("seq-", |s| Some(format_input(&s.input()))),
    ];
    let Some(first) = subjects.first() else { return Vec::new() };
    let varying: Vec<&(&str, Part)> = parts.iter().filter(|(_, f)| subjects.iter().any(|s| f(s) != f(first))).collect();
    subjects
        .iter()
        .map(|s| {
            varying.iter().filter_map(|(prefix, f)| Some(format!("{prefix}{}", f(s)?))).collect::<Vec<_>>().join("-")
        })
        .collect()
}

/// The index of these runs' folders.
fn index(layout: Layout, runs: &[(String, &RunRecord)]) -> RunIndex {
    RunIndex::new(layout, runs.iter().map(|(label, _)| label.clone()).collect())
}

/// Runs the variants one after the other, each in `out_dir/LABEL`; the top
/// folder is rewritten after each, so finished ones survive a later failure.
/// Ctrl-C or SIGTERM stops it with [`Interrupted`] once the top is written.
pub fn run(
    configs: Vec<(String, SweepConfig)>,
    out_dir: &Path,
    across: Across,
    outlet: &mut dyn Outlet,
) -> Result<Run> {
    let mut reports: Vec<(String, RunRecord)> = Vec::new();
    let mut failed = Vec::new();
    for (label, cfg) in configs {
        let dir = out_dir.join(&label);
        std::fs::create_dir_all(&dir).map_err(|e| anyhow::anyhow!("creating {}: {e}", dir.display()))?;
        let mut runner = outlet.runner(&cfg.subject, &dir)?;
        let mut sink = outlet.sink(&label, &cfg.subject, &dir);
        let result = super::run(&cfg, runner.as_mut(), sink.as_mut());
        outlet.finished(&label, &result);
        let interrupted = match result {
            Ok(report) => {
                reports.push((label, report));
                None
            }
            Err(e) if e.is::<Interrupted>() => Some(e),
            Err(e) => {
                failed.push((label, format!("{e:#}")));
                None
            }
        };
        let runs: Vec<(String, &RunRecord)> = reports.iter().map(|(l, r)| (l.clone(), r)).collect();
        outlet.top(&index(Layout::Variants, &runs), &runs)?;
        if let Some(e) = interrupted {
            return Err(e);
        }
    }
    let runs: Vec<(String, &RunRecord)> = reports.iter().map(|(l, r)| (l.clone(), r)).collect();
    let finished: Vec<&RunRecord> = runs.iter().map(|(_, r)| *r).collect();
    // The fits across the variants, once; across world sizes one length at a time.
    let seq = across.seq_lens.then(|| seq_summary(&finished));
    let world = (across.world_sizes && !across.seq_lens).then(|| world_summary(&finished)).flatten();
    let index = RunIndex { seq_lens: seq, world_sizes: world, ..index(Layout::Variants, &runs) };
    outlet.top(&index, &runs)?;
    Ok(Run { index, reports, failed })
}

/// One device's run of a `--device all` sweep.
pub struct DeviceRun {
    /// Its folder's name, e.g. `cuda-1`.
    pub label: String,
    pub config: SweepConfig,
    pub runner: Box<dyn TrialRunner + Send>,
    pub sink: Box<dyn Sink + Send>,
}

/// One run per device, all at once (one thread each): a data-parallel job
/// on this node can use the smallest recommendation. Each run's result, in
/// the order given.
pub fn run_devices(runs: Vec<DeviceRun>) -> Vec<(String, Result<RunRecord>)> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .into_iter()
            .map(|DeviceRun { label, config, mut runner, mut sink }| {
                let handle = scope.spawn(move || super::run(&config, runner.as_mut(), sink.as_mut()));
                (label, handle)
            })
            .collect();
        handles
            .into_iter()
            .map(|(label, h)| (label, h.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a device's sweep panicked")))))
            .collect()
    })
}

/// The index of a `--device all` sweep's top folder.
pub fn devices_index(runs: &[(String, &RunRecord)]) -> RunIndex {
    index(Layout::Devices, runs)
}

/// The fit across lengths of a `--seq-lens` sweep, from its variants' reports.
pub fn seq_summary(reports: &[&RunRecord]) -> SeqSummary {
    let mut lengths: Vec<(u64, &[TrialResult], &analysis::Analysis)> = reports
        .iter()
        .filter_map(|r| Some((r.subject.seq_len()? as u64, r.trials.as_slice(), r.analysis.as_ref()?)))
        .collect();
    // Shortest first, however the variants were listed or their folders sort.
    lengths.sort_by_key(|(length, _, _)| *length);
    analysis::seq_summary(&lengths)
}

/// The fit across world sizes of a `--world-sizes` sweep, from its
/// variants' reports (each rank's line and the max at each world size).
pub fn world_summary(reports: &[&RunRecord]) -> Option<WorldSummary> {
    let mut budget = None;
    let mut multiple_of = 1;
    let points: Vec<WorldPoint> = reports
        .iter()
        .filter_map(|r| {
            let a = r.analysis.as_ref()?;
            let fit = a.fit?;
            budget.get_or_insert(a.budget.budget_bytes);
            multiple_of = r.multiple_of;
            Some(WorldPoint {
                world_size: r.world_size()?,
                fixed_bytes: fit.fixed_bytes,
                per_sample_bytes: fit.per_sample_bytes,
                max_batch: a.max_batch,
            })
        })
        .collect();
    Some(worldfit::summarize(points, budget?, multiple_of))
}
