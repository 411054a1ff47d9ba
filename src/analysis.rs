//! Pure: turns finished trials into the recommendation. Fits the memory
//! line, computes the budget, the largest batch within it and the batch to
//! recommend, and predicts the same for common GPU capacities.
use serde::{Deserialize, Serialize};

use crate::device::Device;
use crate::fit::{Budget, LinearFit};
use crate::record::Outcome;
use crate::sweep::runner::TrialResult;

/// GPU memory sizes people commonly plan for, in GiB.
pub const COMMON_GPU_GIB: [u64; 7] = [6, 8, 12, 16, 24, 40, 80];

/// Which measurement the limit is computed from. On CUDA the device fills
/// when reserved memory (allocator cache included) plus the context reach its
/// capacity, so reserved is the limiting series; on the CPU it is the bytes
/// libtorch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FitBasis {
    PeakAllocated,
    PeakReserved,
}

impl FitBasis {
    pub fn name(self) -> &'static str {
        match self {
            FitBasis::PeakAllocated => "peak_allocated",
            FitBasis::PeakReserved => "peak_reserved",
        }
    }
}

/// Whether a number was measured by a trial or predicted by the fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Measured,
    Predicted,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Measured => "measured",
            Source::Predicted => "predicted",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuPrediction {
    pub capacity_bytes: u64,
    pub budget_bytes: u64,
    pub max_batch: u64,
    pub recommended_batch: u64,
}

/// The analysis of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub budget: Budget,
    /// Where the capacity came from: "device" or "--capacity".
    pub capacity_source: String,
    pub fit_basis: FitBasis,
    /// The limiting fit (see [`FitBasis`]).
    pub fit: Option<LinearFit>,
    pub allocated_fit: Option<LinearFit>,
    pub reserved_fit: Option<LinearFit>,
    pub nvml_used_fit: Option<LinearFit>,
    /// 0 when not even batch 1 fits within the budget.
    pub max_batch: u64,
    pub max_batch_source: Source,
    pub recommended_batch: u64,
    /// A trial ran at exactly the recommended batch and stayed within budget.
    pub recommended_verified: bool,
    /// Peak at the recommended batch (measured when verified, else the fit's).
    pub recommended_peak_bytes: Option<f64>,
    /// Device memory left free at that peak.
    pub headroom_bytes: Option<f64>,
    pub largest_fitting_batch: Option<u64>,
    pub smallest_failing_batch: Option<u64>,
    /// Predictions for [`COMMON_GPU_GIB`]; from host measurements on the CPU.
    pub gpu_predictions: Vec<GpuPrediction>,
    pub notes: Vec<String>,
}

/// What the analysis needs besides the trials.
#[derive(Debug, Clone, Copy)]
pub struct AnalysisInput {
    pub device: Device,
    pub capacity_override: Option<u64>,
    pub margin_fraction: f64,
    pub multiple_of: u64,
}

/// Reads one peak series off a trial.
type PeakOf = fn(&TrialResult) -> Option<u64>;

fn fit_series(
    trials: &[&TrialResult],
    value: impl Fn(&TrialResult) -> Option<u64>,
) -> Option<LinearFit> {
    let points: Vec<(u64, u64)> = trials
        .iter()
        .filter_map(|t| value(t).map(|v| (t.batch, v)))
        .collect();
    LinearFit::fit_upper_regime(&points).ok()
}

fn round_down(batch: u64, multiple_of: u64) -> u64 {
    batch / multiple_of.max(1) * multiple_of.max(1)
}

pub fn analyze(trials: &[TrialResult], input: AnalysisInput) -> Analysis {
    let mut notes = Vec::new();
    let fits: Vec<&TrialResult> = trials
        .iter()
        .filter(|t| t.outcome == Outcome::Fits)
        .collect();
    let device_total = trials.iter().find_map(|t| t.device_total_bytes);
    let (capacity, capacity_source) = match (input.capacity_override, device_total) {
        (Some(c), _) => (c, "--capacity"),
        (None, Some(t)) => (t, "device"),
        (None, None) => {
            notes.push(
                "the device's total memory is unknown: the budget is 0; pass --capacity".into(),
            );
            (0, "unknown")
        }
    };
    let non_pytorch = fits
        .iter()
        .filter_map(|t| t.non_pytorch_bytes())
        .max()
        .unwrap_or(0);
    let budget = Budget::new(capacity, input.margin_fraction, non_pytorch);

    let allocated_fit = fit_series(&fits, TrialResult::peak_allocated_bytes);
    let reserved_fit = fit_series(&fits, TrialResult::peak_reserved_bytes);
    let nvml_used_fit = fit_series(&fits, TrialResult::nvml_used_bytes);
    let (fit_basis, fit, limiting_peak): (FitBasis, Option<LinearFit>, PeakOf) =
        if input.device.is_cuda() && reserved_fit.is_some() {
            (
                FitBasis::PeakReserved,
                reserved_fit,
                TrialResult::peak_reserved_bytes,
            )
        } else {
            (
                FitBasis::PeakAllocated,
                allocated_fit,
                TrialResult::peak_allocated_bytes,
            )
        };
    if fit.is_none() && !fits.is_empty() {
        notes.push("fewer than two batch sizes fit: no line could be fitted, so the max batch is the largest measured".into());
    }

    let within = |t: &TrialResult| limiting_peak(t).is_some_and(|p| p <= budget.budget_bytes);
    let largest_fitting_batch = fits.iter().filter(|t| within(t)).map(|t| t.batch).max();
    // A measured failure (OOM, crash, or a peak over budget) caps the answer.
    let smallest_failing_batch = trials
        .iter()
        .filter(|t| t.outcome != Outcome::Fits || !within(t))
        .map(|t| t.batch)
        .min();
    let predicted = fit.and_then(|f| f.max_batch_within(budget.budget_bytes));
    let mut max_batch = predicted.or(largest_fitting_batch).unwrap_or(0);
    if let Some(fail) = smallest_failing_batch {
        max_batch = max_batch.min(fail - 1);
    }
    // A batch measured within budget is a floor, whatever the line says.
    max_batch = max_batch.max(largest_fitting_batch.unwrap_or(0));
    let measured_at = |b: u64| fits.iter().find(|t| t.batch == b && within(t)).copied();
    let max_batch_source = if measured_at(max_batch).is_some() {
        Source::Measured
    } else {
        Source::Predicted
    };

    let recommended_batch = round_down(max_batch, input.multiple_of);
    let verified = measured_at(recommended_batch);
    let recommended_peak_bytes = match verified {
        Some(t) => limiting_peak(t).map(|p| p as f64),
        None => fit
            .filter(|_| recommended_batch > 0)
            .map(|f| f.predict(recommended_batch)),
    };
    let headroom_bytes = recommended_peak_bytes.map(|p| budget.headroom(p));

    let gpu_predictions = match fit {
        Some(f) => COMMON_GPU_GIB
            .iter()
            .map(|gib| {
                // From host measurements the CUDA context is unknown (0 here).
                let foreign = if input.device.is_cuda() {
                    non_pytorch
                } else {
                    0
                };
                let b = Budget::new(gib << 30, input.margin_fraction, foreign);
                let max = f.max_batch_within(b.budget_bytes).unwrap_or(0);
                GpuPrediction {
                    capacity_bytes: b.capacity_bytes,
                    budget_bytes: b.budget_bytes,
                    max_batch: max,
                    recommended_batch: round_down(max, input.multiple_of),
                }
            })
            .collect(),
        None => Vec::new(),
    };
    if let Some(f) = fit {
        if f.per_sample_bytes <= 0.0 {
            notes.push("peak memory did not grow with the batch over the measured range: the limit lies beyond it; run larger batches (--max-batch or --batches)".into());
        } else if f.r2 < 0.99 {
            notes.push(format!(
                "the memory line fits poorly (r² = {:.4}): treat predictions with care",
                f.r2
            ));
        }
    }

    Analysis {
        budget,
        capacity_source: capacity_source.into(),
        fit_basis,
        fit,
        allocated_fit,
        reserved_fit,
        nvml_used_fit,
        max_batch,
        max_batch_source,
        recommended_batch,
        recommended_verified: verified.is_some(),
        recommended_peak_bytes,
        headroom_bytes,
        largest_fitting_batch,
        smallest_failing_batch,
        gpu_predictions,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::StepRecord;

    /// A trial on a synthetic memory curve (test data, not a measurement).
    fn synthetic(batch: u64, outcome: Outcome, peak: u64) -> TrialResult {
        TrialResult {
            trial: 0,
            batch,
            outcome,
            message: None,
            failed_step: None,
            parameters: None,
            parameter_bytes: None,
            baseline_bytes: None,
            device_name: None,
            device_total_bytes: Some(10_000),
            wall_seconds: 0.0,
            steps: if outcome == Outcome::Fits {
                vec![StepRecord {
                    batch,
                    peak_allocated_bytes: peak,
                    host_peak_rss_bytes: Some(peak),
                    ..Default::default()
                }]
            } else {
                Vec::new()
            },
        }
    }

    fn cpu(multiple_of: u64) -> AnalysisInput {
        AnalysisInput {
            device: Device::Cpu,
            capacity_override: None,
            margin_fraction: 0.10,
            multiple_of,
        }
    }

    #[test]
    fn max_batch_is_predicted_beyond_the_measured_range() {
        // peak = 1000 + 100 b; budget = 10000 - 1000 = 9000 -> max 80.
        let trials: Vec<_> = [1, 2, 4, 8]
            .iter()
            .map(|&b| synthetic(b, Outcome::Fits, 1000 + 100 * b))
            .collect();
        let a = analyze(&trials, cpu(1));
        assert_eq!(a.budget.budget_bytes, 9000);
        assert_eq!(a.max_batch, 80);
        assert_eq!(a.max_batch_source, Source::Predicted);
        assert_eq!(a.recommended_batch, 80);
        assert!(!a.recommended_verified);
        assert_eq!(a.recommended_peak_bytes, Some(9000.0));
        assert_eq!(a.gpu_predictions.len(), COMMON_GPU_GIB.len());
    }

    #[test]
    fn an_oom_caps_the_prediction_and_a_measurement_is_a_floor() {
        let mut trials: Vec<_> = [1, 2, 4, 8, 16, 32]
            .iter()
            .map(|&b| synthetic(b, Outcome::Fits, 1000 + 100 * b))
            .collect();
        trials.push(synthetic(64, Outcome::Oom, 0));
        let a = analyze(
            &trials,
            AnalysisInput {
                capacity_override: Some(100_000),
                ..cpu(1)
            },
        );
        assert_eq!(a.smallest_failing_batch, Some(64));
        assert_eq!(a.max_batch, 63);
        let a = analyze(
            &trials,
            AnalysisInput {
                capacity_override: Some(100_000),
                ..cpu(8)
            },
        );
        assert_eq!(a.recommended_batch, 56);
    }

    #[test]
    fn a_measured_peak_over_budget_counts_as_a_failure() {
        let trials: Vec<_> = [1, 2, 4]
            .iter()
            .map(|&b| synthetic(b, Outcome::Fits, 1000 + 3000 * b))
            .collect();
        let a = analyze(&trials, cpu(1));
        // Budget 9000: batch 1 (4000) and 2 (7000) fit, 4 (13000) does not.
        assert_eq!(a.smallest_failing_batch, Some(4));
        assert_eq!(a.max_batch, 2);
        assert_eq!(a.max_batch_source, Source::Measured);
        assert!(a.recommended_verified);
        assert_eq!(a.headroom_bytes, Some(3000.0));
    }

    #[test]
    fn nothing_fits_gives_zero() {
        let trials = vec![synthetic(1, Outcome::Oom, 0)];
        let a = analyze(&trials, cpu(1));
        assert_eq!(a.max_batch, 0);
        assert_eq!(a.recommended_batch, 0);
        assert!(a.fit.is_none());
    }
}
