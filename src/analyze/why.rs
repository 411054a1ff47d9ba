//! Pure: why the batch stops where it does. The peak's breakdown at the
//! recommended and the max batch, each category's bytes per sample across
//! the trials, and what would change the max batch: another optimizer,
//! bf16 autocast, activation checkpointing, gradient accumulation. Every
//! change says what it rests on: the measured breakdown (the optimizer's
//! state is an exact multiple of the parameters), a stated rule of thumb
//! (bf16, checkpointing), or a measured run.
use serde::{Deserialize, Serialize};

use crate::analyze::fit::{Budget, LinearFit};
use crate::record::breakdown::{Breakdown, Category, PeakPhase};
use crate::record::trial::{Outcome, TrialResult};
use crate::record::workload::{OptimizerKind, Precision, WorkloadConfig};

/// A breakdown at one of the batches the recommendation names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WhyAt {
    /// "recommended" or "max".
    pub role: String,
    pub batch: u64,
    pub trial: u32,
    /// The breakdown without its timeline.
    pub breakdown: Breakdown,
}

/// What a prediction rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Basis {
    /// Exact arithmetic on the measured breakdown and fit.
    Breakdown,
    /// A stated rule of thumb applied to the measured breakdown.
    RuleOfThumb,
    /// Nothing to predict: memory per step does not change.
    Unchanged,
}

impl Basis {
    pub fn label(self) -> &'static str {
        match self {
            Basis::Breakdown => "predicted from the breakdown",
            Basis::RuleOfThumb => "rule of thumb",
            Basis::Unchanged => "exact (memory per step unchanged)",
        }
    }
}

/// Which change a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChangeKind {
    /// Nothing changed: the line the others move.
    Baseline,
    /// An optimizer whose state is this many copies of the parameters.
    Optimizer(u64),
    Autocast,
    Checkpointing,
    Accumulation,
}

/// One change a user can make, and the max batch it would give.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub kind: ChangeKind,
    pub change: String,
    /// Predicted max batch within the same budget (None: the fixed part alone does not fit).
    pub max_batch: Option<u64>,
    pub basis: Basis,
    /// How it was worked out, in a sentence.
    pub detail: String,
}

/// The "why" of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Why {
    pub at: Vec<WhyAt>,
    /// Each category's bytes per sample, in [`Category::ALL`]'s order: the
    /// slope of a least-squares line over the trials that fit (one trial:
    /// its bytes / batch for activations, temporaries and inputs, 0 for the rest).
    pub per_sample_bytes: Vec<f64>,
    /// The slopes come from one trial (bytes / batch): upper bounds for the
    /// categories that grow with the batch, not fits.
    #[serde(default)]
    pub per_sample_from_one_trial: bool,
    /// One trial was broken down (the explain trial) and the others
    /// measured their peaks by phase: the slope of the peak's phase line,
    /// fitted over every trial, shared among the categories that grow with
    /// the batch in the proportions the breakdown measured. A fit, not a bound.
    #[serde(default)]
    pub per_sample_split_from_fit: bool,
    pub changes: Vec<Change>,
    /// The phase of each fitting trial's peak, by batch: where the peak
    /// moves (say from the optimizer step to backward), its make-up changes.
    pub phases: Vec<(u64, PeakPhase)>,
    /// What stopped the batch when memory did not ("--max-batch stopped the search"): the
    /// breakdown is then of the largest batch run, not of a memory limit.
    #[serde(default)]
    pub stopped_by: Option<String>,
}

/// What the workload is, as far as the changes need it.
#[derive(Debug, Clone, Copy)]
pub struct WhyInput<'a> {
    pub trials: &'a [TrialResult],
    pub fit: Option<LinearFit>,
    pub budget: Budget,
    pub max_batch: u64,
    pub recommended_batch: u64,
    /// The max batch is `--max-batch`'s, not memory's.
    pub capped: bool,
    /// Training steps (an inference sweep has no optimizer to change and no
    /// gradients to accumulate).
    pub training: bool,
    /// Built-in workloads: the optimizer and precision vramprobe ran.
    pub optimizer: Option<OptimizerKind>,
    pub precision: Option<Precision>,
}

fn batch_dependent(c: Category) -> bool {
    matches!(c, Category::Activations | Category::Temporaries | Category::Inputs)
}

/// Each category's bytes per sample over the trials that fit and whose
/// peak falls in `phase` (where the peak moves to another phase, say from
/// the optimizer step to backward, its make-up changes with it), and
/// whether they rest on one batch only (then bytes / batch, not a fit).
pub fn per_sample(trials: &[TrialResult], phase: Option<PeakPhase>) -> (Vec<f64>, bool) {
    let broken: Vec<(u64, &Breakdown)> = trials
        .iter()
        .filter(|t| t.outcome == Outcome::Fits)
        .filter_map(|t| Some((t.batch, t.peak_breakdown()?)))
        .filter(|(_, b)| b.phase == phase)
        .collect();
    // The fit needs two batches; with one, bytes / batch bounds the slope.
    let batches: std::collections::BTreeSet<u64> = broken.iter().map(|(b, _)| *b).collect();
    let one = batches.len() < 2;
    let largest = broken.iter().max_by_key(|(b, _)| *b);
    let slopes = Category::ALL
        .iter()
        .map(|&c| match largest {
            Some((b, d)) if one && batch_dependent(c) && *b > 0 => d.bytes.get(c) as f64 / *b as f64,
            _ if one => 0.0,
            _ => {
                let points: Vec<(u64, u64)> = broken.iter().map(|(b, d)| (*b, d.bytes.get(c))).collect();
                LinearFit::fit(&points).map_or(0.0, |f| f.per_sample_bytes)
            }
        })
        .collect();
    (slopes, one)
}

/// The line of the peak's phase (the optimizer step's, or forward and
/// backward's) over the trials that fit and measured it.
fn phase_line(trials: &[TrialResult], phase: Option<PeakPhase>) -> Option<LinearFit> {
    let points: Vec<(u64, u64)> = trials
        .iter()
        .filter(|t| t.outcome == Outcome::Fits)
        .filter_map(|t| {
            let p = t.phase_peaks()?;
            Some((
                t.batch,
                if phase == Some(PeakPhase::Optimizer) { p.optimizer_bytes } else { p.forward_backward_bytes },
            ))
        })
        .collect();
    let batches: std::collections::BTreeSet<u64> = points.iter().map(|(b, _)| *b).collect();
    if batches.len() < 2 {
        return None;
    }
    LinearFit::fit(&points).ok()
}

/// With one breakdown: the phase line's slope, shared among the categories
/// that grow with the batch by their bytes at the peak.
fn per_sample_split(top: &Breakdown, line: LinearFit) -> Vec<f64> {
    let growing: u64 = Category::ALL.iter().filter(|&&c| batch_dependent(c)).map(|&c| top.bytes.get(c)).sum();
    Category::ALL
        .iter()
        .map(|&c| match batch_dependent(c) && growing > 0 {
            true => line.per_sample_bytes.max(0.0) * top.bytes.get(c) as f64 / growing as f64,
            false => 0.0,
        })
        .collect()
}

fn at_batch(trials: &[TrialResult], role: &str, batch: u64) -> Option<WhyAt> {
    let t = trials.iter().rev().find(|t| t.batch == batch && t.outcome == Outcome::Fits)?;
    let mut breakdown = t.peak_breakdown()?.clone();
    breakdown.timeline.clear();
    Some(WhyAt { role: role.to_string(), batch, trial: t.trial, breakdown })
}

/// The optimizers whose state is a whole number of parameter copies.
const OPTIMIZERS: [(&str, u64); 3] =
    [("SGD without momentum", 0), ("SGD with momentum", 1), ("Adam or AdamW (two moments)", 2)];

fn state_copies(kind: OptimizerKind) -> u64 {
    match kind {
        OptimizerKind::Sgd => 1,
        OptimizerKind::Adam | OptimizerKind::Adamw => 2,
    }
}

/// The why of a run: None when no trial at the max batch was broken down.
pub fn explain(input: WhyInput<'_>) -> Option<Why> {
    let mut at: Vec<WhyAt> = Vec::new();
    if input.recommended_batch > 0 && input.recommended_batch != input.max_batch {
        at.extend(at_batch(input.trials, "recommended", input.recommended_batch));
    }
    at.extend(at_batch(input.trials, "max", input.max_batch));
    let top = at.last()?.breakdown.clone();
    let (mut per_sample_bytes, mut per_sample_from_one_trial) = per_sample(input.trials, top.phase);
    let mut per_sample_split_from_fit = false;
    if per_sample_from_one_trial {
        if let Some(line) = phase_line(input.trials, top.phase) {
            per_sample_bytes = per_sample_split(&top, line);
            (per_sample_from_one_trial, per_sample_split_from_fit) = (false, true);
        }
    }
    let mut changes =
        input.fit.as_ref().map(|fit| what_changes(&input, &top, &per_sample_bytes, fit)).unwrap_or_default();
    // The baseline alone (inference in bf16, say) changes nothing: no table.
    if changes.len() == 1 {
        changes.clear();
    }
    let phases = input
        .trials
        .iter()
        .filter(|t| t.outcome == Outcome::Fits)
        .filter_map(|t| Some((t.batch, t.peak_breakdown()?.phase?)))
        .collect();
    let stopped_by = stopped_by(input.trials, input.max_batch, input.capped);
    Some(Why {
        at,
        per_sample_bytes,
        per_sample_from_one_trial,
        per_sample_split_from_fit,
        changes,
        phases,
        stopped_by,
    })
}

/// The line through the limiting fit at the max batch, sloped by the
/// categories' bytes per sample: a change moves its fixed part or slope.
struct Moved {
    fixed: f64,
    slope: f64,
    budget: u64,
}

impl Moved {
    fn max_batch(&self, d_fixed: f64, d_slope: f64) -> Option<u64> {
        LinearFit {
            fixed_bytes: self.fixed + d_fixed,
            per_sample_bytes: (self.slope + d_slope).max(1.0),
            r2: 1.0,
            points: 0,
        }
        .max_batch_within(self.budget)
    }
}

/// The table of changes: this run's line, then each change that moves it.
fn what_changes(input: &WhyInput<'_>, top: &Breakdown, per_sample_bytes: &[f64], fit: &LinearFit) -> Vec<Change> {
    let slope: f64 = per_sample_bytes.iter().sum::<f64>().max(1.0);
    let line = Moved {
        fixed: fit.predict(input.max_batch) - slope * input.max_batch as f64,
        slope,
        budget: input.budget.budget_bytes,
    };
    let mut changes = vec![Change {
        kind: ChangeKind::Baseline,
        change: "none (this run)".into(),
        max_batch: line.max_batch(0.0, 0.0),
        basis: Basis::Breakdown,
        detail: format!(
            "the line through the peak at batch {} with the categories' bytes per sample ({} per sample): the changes below move it",
            input.max_batch,
            crate::units::human_bytes(slope)
        ),
    }];
    let params = top.bytes.get(Category::Parameters) as f64;
    if params > 0.0 && input.training {
        changes.extend(optimizer_changes(input, top, &line));
    }
    let activations = per_sample_bytes[Category::Activations.index()];
    let fp32 = input.precision.is_none_or(|p| p == Precision::Fp32);
    if fp32 && activations > 0.0 {
        changes.push(Change {
            kind: ChangeKind::Autocast,
            change: "bf16 autocast".into(),
            max_batch: line.max_batch(params / 2.0, -activations / 2.0),
            basis: Basis::RuleOfThumb,
            detail: format!(
                "activations saved in bfloat16 take half ({} per sample less); autocast keeps a bfloat16 copy of the weights ({} more)",
                crate::units::human_bytes(activations / 2.0),
                crate::units::human_bytes(params / 2.0)
            ),
        });
    }
    let layers = input.trials.iter().find_map(|t| t.layers).filter(|&l| l > 1);
    if let (Some(layers), true) = (layers, activations > 0.0) {
        let kept = 1.0 / (layers as f64).sqrt();
        changes.push(Change {
            kind: ChangeKind::Checkpointing,
            change: "activation checkpointing".into(),
            max_batch: line.max_batch(0.0, -activations * (1.0 - kept)),
            basis: Basis::RuleOfThumb,
            detail: format!(
                "activations / sqrt(layers) = / sqrt({layers}) (checkpoints every sqrt(layers) layers; each step recomputes about one more forward pass)"
            ),
        });
    }
    changes.extend(input.training.then(|| Change {
        kind: ChangeKind::Accumulation,
        change: "gradient accumulation".into(),
        max_batch: line.max_batch(0.0, 0.0),
        basis: Basis::Unchanged,
        detail: format!(
            "k micro-batches of {} per optimizer step train at an effective batch of k x {} (vramprobe exec --target-batch N fills {{accumulation}})",
            input.recommended_batch, input.recommended_batch
        ),
    }));
    changes
}

/// Each other optimizer: its state's copies of the parameters instead of
/// the measured (the built-in's, else the state's multiple of the parameters).
fn optimizer_changes(input: &WhyInput<'_>, top: &Breakdown, line: &Moved) -> Vec<Change> {
    let params = top.bytes.get(Category::Parameters) as f64;
    let state = top.bytes.get(Category::OptimizerState) as f64;
    let copies_now = match input.optimizer {
        Some(kind) => state_copies(kind),
        None => (state / params).round() as u64,
    };
    OPTIMIZERS
        .into_iter()
        .filter(|&(_, copies)| copies != copies_now)
        .map(|(name, copies)| {
            let delta = copies as f64 * params - state;
            Change {
                kind: ChangeKind::Optimizer(copies),
                change: format!("optimizer: {name}"),
                max_batch: line.max_batch(delta, 0.0),
                basis: Basis::Breakdown,
                detail: format!(
                    "optimizer state {} x parameters instead of the measured {:.2} x: {} at the peak",
                    copies,
                    state / params,
                    signed(delta)
                ),
            }
        })
        .collect()
}

/// What stopped the batch at `max_batch`, when it was not memory: None when
/// a larger batch ran out of memory, went over the budget or was killed.
pub fn stopped_by(trials: &[TrialResult], max_batch: u64, capped: bool) -> Option<String> {
    if capped {
        return Some("--max-batch stopped the search".into());
    }
    let above = trials.iter().filter(|t| t.batch > max_batch).min_by_key(|t| t.batch);
    match above {
        None => Some("it is the largest batch run".into()),
        Some(t) if matches!(t.outcome, Outcome::Fits | Outcome::Oom | Outcome::Killed) => None,
        Some(t) => Some(format!("batch {} failed: {}", t.batch, t.outcome)),
    }
}

/// The row of `base`'s why that predicts a run of `other` (a built-in
/// workload that differs from `base_workload` in its optimizer or in mixed
/// precision only), for setting the prediction beside the measured max.
pub fn predicted_for<'a>(why: &'a Why, base: &WorkloadConfig, other: &WorkloadConfig) -> Option<&'a Change> {
    let same = |a: &WorkloadConfig, b: &WorkloadConfig| {
        a.model == b.model && a.input == b.input && a.classes == b.classes && a.mode == b.mode
    };
    if !same(base, other) {
        return None;
    }
    let kind = match (base.optimizer == other.optimizer, base.precision == other.precision) {
        (false, true) if state_copies(base.optimizer) == state_copies(other.optimizer) => ChangeKind::Baseline,
        (false, true) => ChangeKind::Optimizer(state_copies(other.optimizer)),
        (true, false) if base.precision == Precision::Fp32 && other.precision.autocast().is_some() => {
            ChangeKind::Autocast
        }
        _ => return None,
    };
    why.changes.iter().find(|c| c.kind == kind)
}

fn signed(bytes: f64) -> String {
    let sign = if bytes < 0.0 { "-" } else { "+" };
    format!("{sign}{}", crate::units::human_bytes(bytes.abs()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::breakdown::{CategoryBytes, Method};
    use crate::record::trial::StepRecord;

    const MIB: u64 = 1 << 20;

    /// SYNTHETIC (test data, not a measurement): a trial whose peak is
    /// 100 MiB of parameters, 100 of gradients, 200 of Adam's state and
    /// 1 MiB of activations per sample, in backward.
    fn trial(batch: u64) -> TrialResult {
        let bytes = CategoryBytes([100 * MIB, 100 * MIB, 200 * MIB, batch * MIB, 0, 0, 0]);
        let breakdown = Breakdown {
            peak_bytes: bytes.total(),
            bytes,
            unattributed_bytes: 0,
            phase: Some(crate::record::breakdown::PeakPhase::Backward),
            op: None,
            source: None,
            peak_ms: 1.0,
            method: Method::Ledger,
            timeline: Vec::new(),
        };
        TrialResult {
            outcome: Outcome::Fits,
            layers: Some(16),
            steps: vec![StepRecord {
                batch,
                peak_allocated_bytes: bytes.total(),
                breakdown: Some(Box::new(breakdown)),
                ..Default::default()
            }],
            ..TrialResult::started(0, batch, None)
        }
    }

    fn input(trials: &[TrialResult], budget_mib: u64) -> WhyInput<'_> {
        WhyInput {
            trials,
            fit: Some(LinearFit { fixed_bytes: (400 * MIB) as f64, per_sample_bytes: MIB as f64, r2: 1.0, points: 2 }),
            budget: Budget {
                capacity_bytes: 0,
                margin_fraction: 0.0,
                non_pytorch_bytes: 0,
                budget_bytes: budget_mib * MIB,
            },
            max_batch: 600,
            recommended_batch: 512,
            capped: false,
            training: true,
            optimizer: Some(OptimizerKind::Adam),
            precision: Some(Precision::Fp32),
        }
    }

    fn change(w: &Why, kind: ChangeKind) -> &Change {
        w.changes.iter().find(|c| c.kind == kind).expect("the change is listed")
    }

    #[test]
    fn the_stop_is_memory_only_when_a_larger_batch_did_not_fit() {
        let over = TrialResult { outcome: Outcome::Fits, ..trial(700) };
        let oom = TrialResult { outcome: Outcome::Oom, ..trial(700) };
        let error = TrialResult { outcome: Outcome::Error, ..trial(700) };
        assert_eq!(stopped_by(&[trial(600), over], 600, false), None, "over the budget");
        assert_eq!(stopped_by(&[trial(600), oom.clone()], 600, false), None);
        assert_eq!(stopped_by(&[trial(600), oom], 600, true).as_deref(), Some("--max-batch stopped the search"));
        assert_eq!(stopped_by(&[trial(600)], 600, false).as_deref(), Some("it is the largest batch run"));
        assert_eq!(stopped_by(&[trial(600), error], 600, false).as_deref(), Some("batch 700 failed: error"));
    }

    #[test]
    fn each_category_has_its_bytes_per_sample() {
        let trials = [trial(100), trial(512), trial(600)];
        let (per, one) = per_sample(&trials, Some(PeakPhase::Backward));
        assert!(!one, "three trials: fitted");
        assert!((per[Category::Activations.index()] - MIB as f64).abs() < 1e-6);
        assert!(per[Category::Parameters.index()].abs() < 1e-6);
        // Another phase's trials do not count.
        assert!(per_sample(&trials, Some(PeakPhase::Forward)).0.iter().all(|&b| b == 0.0));
        // One trial: bytes / batch, flagged as such.
        let (per, one) = per_sample(&trials[2..], Some(PeakPhase::Backward));
        assert!(one && (per[Category::Activations.index()] - MIB as f64).abs() < 1e-6);
    }

    #[test]
    fn an_optimizer_change_moves_the_fixed_part_by_its_state() {
        let trials = [trial(512), trial(600)];
        let w = explain(input(&trials, 1000)).unwrap();
        assert_eq!(
            w.at.iter().map(|a| (a.role.as_str(), a.batch)).collect::<Vec<_>>(),
            [("recommended", 512), ("max", 600)]
        );
        // 1000 MiB budget, 400 MiB fixed, 1 MiB per sample: 600 now.
        assert_eq!(change(&w, ChangeKind::Baseline).max_batch, Some(600));
        // SGD with momentum holds one copy, not two: 100 MiB more room.
        assert_eq!(change(&w, ChangeKind::Optimizer(1)).max_batch, Some(700));
        assert_eq!(change(&w, ChangeKind::Optimizer(0)).max_batch, Some(800));
        assert!(w.changes.iter().all(|c| c.kind != ChangeKind::Optimizer(2)), "Adam ran: not a change");
        assert_eq!(change(&w, ChangeKind::Accumulation).max_batch, Some(600));
    }

    #[test]
    fn autocast_and_checkpointing_apply_their_stated_rules() {
        let trials = [trial(512), trial(600)];
        let w = explain(input(&trials, 1000)).unwrap();
        // bf16: half a MiB per sample, 50 MiB of weight copies: (1000 - 450) / 0.5.
        assert_eq!(change(&w, ChangeKind::Autocast).max_batch, Some(1100));
        assert_eq!(change(&w, ChangeKind::Autocast).basis, Basis::RuleOfThumb);
        // 16 layers: activations / 4, so a quarter MiB per sample: 600 / 0.25.
        assert_eq!(change(&w, ChangeKind::Checkpointing).max_batch, Some(2400));
        // Already in mixed precision: no autocast row.
        let amp = WhyInput { precision: Some(Precision::Bf16Amp), ..input(&trials, 1000) };
        assert!(explain(amp).unwrap().changes.iter().all(|c| c.kind != ChangeKind::Autocast));
    }

    #[test]
    fn an_inference_sweep_has_no_optimizer_or_accumulation_to_change() {
        let trials = [trial(512), trial(600)];
        let w = explain(WhyInput { training: false, ..input(&trials, 1000) }).unwrap();
        assert!(w.changes.iter().all(|c| !matches!(c.kind, ChangeKind::Optimizer(_) | ChangeKind::Accumulation)));
        // Autocast and checkpointing remain (the activations are not empty here).
        assert_eq!(change(&w, ChangeKind::Baseline).max_batch, Some(600));
        // Nothing held for backward (so nothing to checkpoint) and already
        // in bf16: nothing is left to change, and no table is drawn.
        let inference: Vec<TrialResult> = [512, 600]
            .map(|b| {
                let mut t = trial(b);
                let b = t.steps[0].breakdown.as_mut().unwrap();
                b.bytes = CategoryBytes([100 * MIB, 0, 0, 0, t.batch * MIB, 0, 0]);
                t
            })
            .to_vec();
        let amp = WhyInput { training: false, precision: Some(Precision::Bf16Amp), ..input(&inference, 1000) };
        assert!(explain(amp).unwrap().changes.is_empty());
    }

    #[test]
    fn a_command_s_optimizer_is_read_from_its_state() {
        let trials = [trial(600)];
        let w = explain(WhyInput { optimizer: None, ..input(&trials, 1000) }).unwrap();
        // The state is 2 x the parameters: Adam-like, so SGD rows are offered.
        assert!(w.changes.iter().any(|c| c.kind == ChangeKind::Optimizer(1)));
        assert!(w.changes.iter().all(|c| c.kind != ChangeKind::Optimizer(2)));
    }

    #[test]
    fn a_variant_is_predicted_by_the_matching_change() {
        let trials = [trial(512), trial(600)];
        let w = explain(input(&trials, 1000)).unwrap();
        let base = WorkloadConfig {
            model: "m".into(),
            input: vec![3, 32, 32],
            classes: 10,
            optimizer: OptimizerKind::Adam,
            lr: 0.001,
            precision: Precision::Fp32,
            mode: crate::record::workload::Mode::Train,
        };
        let sgd = WorkloadConfig { optimizer: OptimizerKind::Sgd, ..base.clone() };
        let adamw = WorkloadConfig { optimizer: OptimizerKind::Adamw, ..base.clone() };
        let amp = WorkloadConfig { precision: Precision::Bf16Amp, ..base.clone() };
        let other_model = WorkloadConfig { model: "n".into(), ..sgd.clone() };
        assert_eq!(predicted_for(&w, &base, &sgd).map(|c| c.kind), Some(ChangeKind::Optimizer(1)));
        assert_eq!(predicted_for(&w, &base, &adamw).map(|c| c.kind), Some(ChangeKind::Baseline));
        assert_eq!(predicted_for(&w, &base, &amp).map(|c| c.kind), Some(ChangeKind::Autocast));
        assert_eq!(predicted_for(&w, &base, &other_model), None);
    }
}
