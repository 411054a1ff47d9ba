//! The CSV files: `steps.csv` (every step), `sweep.csv` (one row per trial)
//! and `plan.csv` (the recommendation, read by the trainer and spreadsheets).
//! Plain numbers, units in the column names, empty cells for "not measured".
use serde::{Deserialize, Serialize};

use crate::analyze::analysis::{Analysis, FitBasis};
use crate::analyze::whatif::GpuPrediction;
use crate::analyze::worldfit::WorldPrediction;
use crate::record::breakdown::{Category, PeakPhase};
use crate::record::trial::{Outcome, StepRecord, TrialResult};

use crate::analyze::run::RunRecord;

pub use super::plan_file::{PlanRow, PlanStrategy, PLAN_SCHEMA_VERSION};

/// Rows of `T` as CSV bytes, with `T`'s header even when there are no rows:
/// the one CSV writer (steps, sweep, plan, GPU plans, the trainer's log, the
/// benchmark).
pub fn to_bytes<T: Serialize + Default>(rows: impl IntoIterator<Item = impl Serialize>) -> anyhow::Result<Vec<u8>> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    let mut any = false;
    for row in rows {
        w.serialize(row)?;
        any = true;
    }
    if !any {
        w.write_record(header_of::<T>())?;
    }
    w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))
}

/// Column names of a struct, for the header of an empty file.
fn header_of<T: Serialize + Default>() -> Vec<String> {
    let mut w = ::csv::Writer::from_writer(Vec::new());
    let _ = w.serialize(T::default());
    let bytes = w.into_inner().unwrap_or_default();
    String::from_utf8_lossy(&bytes).lines().next().unwrap_or("").split(',').map(str::to_string).collect()
}

pub fn steps_csv(trials: &[TrialResult]) -> anyhow::Result<Vec<u8>> {
    // The breakdown has its own file (breakdown.csv).
    let steps =
        trials.iter().flat_map(|t| t.steps.iter()).map(|s| StepRecord { breakdown: None, trace: None, ..s.clone() });
    to_bytes::<StepRecord>(steps)
}

/// One row of `breakdown.csv`: one category of one trial's peak.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BreakdownRow {
    pub trial: u32,
    pub batch: u64,
    /// The step broken down (the trial's peak step) and, for a distributed job, its rank.
    pub step: u32,
    pub rank: Option<u32>,
    pub category: String,
    pub bytes: u64,
    /// bytes / peak_bytes.
    pub share: f64,
    pub peak_bytes: u64,
    pub peak_phase: Option<PeakPhase>,
    pub peak_op: Option<String>,
    pub peak_source: Option<String>,
    /// ledger (vramprobe's own tensors) or torch-memory-profile (command mode).
    pub method: String,
}

/// Every trial's peak, by category: seven rows per trial that has a breakdown.
pub fn breakdown_csv(trials: &[TrialResult]) -> anyhow::Result<Vec<u8>> {
    let mut rows = Vec::new();
    for t in trials {
        let Some((step, b)) = t.peak_breakdown_step() else { continue };
        for c in Category::ALL {
            rows.push(BreakdownRow {
                trial: t.trial,
                batch: t.batch,
                step: step.step,
                rank: step.rank,
                category: c.id().to_string(),
                bytes: b.bytes.get(c),
                share: b.bytes.get(c) as f64 / b.peak_bytes.max(1) as f64,
                peak_bytes: b.peak_bytes,
                peak_phase: b.phase,
                peak_op: b.op.clone(),
                peak_source: b.source.clone(),
                method: b.method.id().to_string(),
            });
        }
    }
    to_bytes::<BreakdownRow>(rows)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SweepRow {
    pub trial: u32,
    pub batch: u64,
    pub outcome: Outcome,
    pub steps_completed: u32,
    pub peak_allocated_bytes: Option<u64>,
    pub peak_reserved_bytes: Option<u64>,
    pub nvml_used_bytes: Option<u64>,
    pub host_peak_rss_bytes: Option<u64>,
    pub non_pytorch_bytes: Option<u64>,
    pub mean_step_seconds: Option<f64>,
    pub samples_per_second: Option<f64>,
    pub wall_seconds: f64,
    pub failed_step: Option<u32>,
    pub message: String,
    /// A distributed command: its ranks, the rank with the trial's peak,
    /// and how much more that rank holds than the emptiest.
    pub world_size: Option<u32>,
    pub peak_rank: Option<u32>,
    pub rank_spread_bytes: Option<u64>,
    /// The peak before the optimizer step (data, forward, backward) and
    /// during it: the two lines the search fits.
    pub forward_backward_peak_bytes: Option<u64>,
    pub optimizer_peak_bytes: Option<u64>,
}

pub fn sweep_rows(trials: &[TrialResult]) -> Vec<SweepRow> {
    trials
        .iter()
        .map(|t| (t, t.phase_peaks()))
        .map(|(t, phases)| SweepRow {
            trial: t.trial,
            batch: t.batch,
            outcome: t.outcome,
            steps_completed: t.steps_completed(),
            peak_allocated_bytes: t.peak_allocated_bytes(),
            peak_reserved_bytes: t.peak_reserved_bytes(),
            nvml_used_bytes: t.nvml_used_bytes(),
            host_peak_rss_bytes: t.host_peak_rss_bytes(),
            non_pytorch_bytes: t.non_pytorch_bytes(),
            mean_step_seconds: t.mean_step_seconds(),
            samples_per_second: t.samples_per_second(),
            wall_seconds: t.wall_seconds,
            failed_step: t.failed_step,
            message: t.message.clone().unwrap_or_default(),
            world_size: t.world_size,
            peak_rank: t.peak_rank(),
            rank_spread_bytes: t.rank_spread_bytes(),
            forward_backward_peak_bytes: phases.map(|p| p.forward_backward_bytes),
            optimizer_peak_bytes: phases.map(|p| p.optimizer_bytes),
        })
        .collect()
}

pub fn sweep_csv(trials: &[TrialResult]) -> anyhow::Result<Vec<u8>> {
    to_bytes::<SweepRow>(sweep_rows(trials))
}

/// The columns every plan row takes from the run: the subject, the budget
/// and the memory line. A command's row leaves what the command decides
/// (classes, mode, precision, optimizer) empty.
fn run_columns(report: &RunRecord, a: &Analysis) -> PlanRow {
    let w = report.subject.workload();
    PlanRow {
        schema_version: PLAN_SCHEMA_VERSION,
        model: report.subject.name(),
        input: report.subject.input(),
        classes: w.map(|w| w.classes),
        device: report.device.into(),
        device_name: report.device_name.clone().unwrap_or_default(),
        mode: w.map(|w| w.mode),
        precision: w.map(|w| w.precision),
        optimizer: w.map(|w| w.optimizer),
        capacity_bytes: a.budget.capacity_bytes,
        margin_fraction: a.budget.margin_fraction,
        non_pytorch_bytes: a.budget.non_pytorch_bytes,
        budget_bytes: a.budget.budget_bytes,
        fit_basis: Some(a.fit_basis),
        fixed_bytes: a.fit.map(|f| f.fixed_bytes.round() as i64),
        per_sample_bytes: a.fit.map(|f| f.per_sample_bytes.round() as i64),
        r2: a.fit.map(|f| f.r2),
        fit_points: a.fit.map_or(0, |f| f.points),
        world_size: report.world_size(),
        subject: report.subject.kind(),
        ..PlanRow::default()
    }
}

/// The run's recommendation, as measured.
pub fn plan_row(report: &RunRecord) -> Option<PlanRow> {
    let a = report.analysis.as_ref()?;
    Some(PlanRow {
        strategy: Some(PlanStrategy::Measured(a.strategy)),
        trials: report.trials.len(),
        max_batch: a.max_batch,
        exact: a.exact,
        predicted_max_batch: a.predicted_max_batch,
        recommended_batch: a.recommended_batch,
        recommended_verified: a.recommended_verified,
        recommended_peak_bytes: a.recommended_peak_bytes.map(|p| p.round() as i64),
        headroom_bytes: a.headroom_bytes.map(|h| h.round() as i64),
        fastest_batch: a.fastest.map(|f| f.batch),
        fastest_samples_per_second: a.fastest.map(|f| f.samples_per_second),
        global_batch: report.world_size().map(|w| a.recommended_batch * u64::from(w)),
        ..run_columns(report, a)
    })
}

/// What the run's memory line predicts on a GPU it was not measured on
/// (`vramprobe plan`): memory only, never speed, and never verified.
pub fn gpu_plan_row(
    report: &RunRecord,
    a: &Analysis,
    prediction: &GpuPrediction,
    basis: FitBasis,
    margin_fraction: f64,
) -> PlanRow {
    PlanRow {
        device: crate::record::device::DeviceRequest::Cuda(0),
        device_name: prediction.gpu.name.clone(),
        capacity_bytes: prediction.gpu.memory_bytes,
        margin_fraction,
        non_pytorch_bytes: prediction.budget.non_pytorch_bytes,
        budget_bytes: prediction.budget.budget_bytes,
        strategy: Some(PlanStrategy::PredictedFrom(report.device)),
        max_batch: prediction.max_batch,
        predicted_max_batch: Some(prediction.max_batch),
        recommended_batch: prediction.recommended_batch,
        recommended_peak_bytes: prediction.predicted_peak_bytes.map(|b| b.round() as i64),
        headroom_bytes: prediction.predicted_peak_bytes.map(|b| prediction.budget.headroom(b).round() as i64),
        fit_basis: Some(basis),
        fixed_bytes: Some(prediction.fit.fixed_bytes.round() as i64),
        per_sample_bytes: Some(prediction.fit.per_sample_bytes.round() as i64),
        r2: Some(prediction.fit.r2),
        fit_points: prediction.fit.points,
        ..run_columns(report, a)
    }
}

/// What the fit across world sizes predicts at a world size that was not
/// run (`--world-sizes`): per-rank memory only, never verified.
pub fn world_plan_row(report: &RunRecord, a: &Analysis, p: &WorldPrediction) -> PlanRow {
    PlanRow {
        strategy: Some(PlanStrategy::PredictedForWorldSize),
        fixed_bytes: Some(p.fixed_bytes.round() as i64),
        per_sample_bytes: Some(p.per_sample_bytes.round() as i64),
        r2: None,
        fit_points: 0,
        max_batch: p.max_batch,
        predicted_max_batch: Some(p.max_batch),
        recommended_batch: p.recommended_batch,
        world_size: Some(p.world_size),
        global_batch: Some(p.global_batch),
        ..run_columns(report, a)
    }
}

/// The run's plan: one row, also when nothing fits (max_batch 0: the
/// reader reads it, and check, exec and train refuse it with that reason).
pub fn plan_csv(report: &RunRecord) -> anyhow::Result<Vec<u8>> {
    to_bytes::<PlanRow>(plan_row(report))
}

/// The plan rows of a sweep over precisions, modes or lengths, in order:
/// one per variant that has a batch to recommend (a row without one would
/// give the trainer nothing to run).
pub fn plan_csv_many(reports: &[&RunRecord]) -> anyhow::Result<Vec<u8>> {
    to_bytes::<PlanRow>(reports.iter().filter_map(|r| plan_row(r)).filter(|row| row.recommended_batch > 0))
}
