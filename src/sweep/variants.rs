//! What a sweep of several runs shares: a folder name per variant (from
//! what differs between them) and the fits across them (memory against
//! sequence length, the per-rank line against the world size), computed
//! once when the last run has finished (sweep/execute.rs).
use crate::analyze::analysis::{self, SeqSummary};
use crate::analyze::run::{Layout, RunIndex, RunRecord};
use crate::analyze::worldfit::{self, WorldPoint, WorldSummary};
use crate::record::subject::Subject;
use crate::record::trial::TrialResult;
use crate::units::format_input;

/// Which fits across the variants to make.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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

/// The index of a finished sweep's top folder, with the fits `across` asks
/// for; across world sizes one length at a time.
pub fn fits_across(layout: Layout, runs: &[(String, &RunRecord)], across: Across) -> RunIndex {
    let finished: Vec<&RunRecord> = runs.iter().map(|(_, r)| *r).collect();
    let seq_lens = across.seq_lens.then(|| seq_summary(&finished));
    let world_sizes = (across.world_sizes && !across.seq_lens).then(|| world_summary(&finished)).flatten();
    let folders = runs.iter().map(|(label, _)| label.clone()).collect();
    RunIndex { seq_lens, world_sizes, ..RunIndex::new(layout, folders) }
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
