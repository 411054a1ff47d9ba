//! Pure: turns finished trials and the search's answer into the
//! recommendation: the memory lines, the batch the fit predicts for the
//! budget, the recommended batch and its headroom, and predictions for
//! common GPU capacities.
use serde::{Deserialize, Serialize};

use crate::analyze::device_memory::{CurvePoint, Reserved};
use crate::analyze::fastest::{self, Fastest};
use crate::analyze::fit::{round_down, Budget, Fit, LinearFit};
use crate::analyze::note::Note;
use crate::analyze::profile::GpuProfile;
use crate::analyze::search::{Observation, SearchResult, StrategyKind};
use crate::analyze::seqfit::{self, SeqFit};
use crate::analyze::whatif;
use crate::record::device::Device;
use crate::record::trial::{Outcome, TrialResult};

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
    /// A CPU run's trace replayed through the CUDA caching allocator's
    /// model: what a GPU would reserve (`plan`'s line for GPUs).
    PredictedCudaReserved,
}

impl FitBasis {
    pub fn for_device(device: Device) -> FitBasis {
        if device.is_cuda() {
            FitBasis::PeakReserved
        } else {
            FitBasis::PeakAllocated
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FitBasis::PeakAllocated => "peak_allocated",
            FitBasis::PeakReserved => "peak_reserved",
            FitBasis::PredictedCudaReserved => "predicted_cuda_reserved",
        }
    }

    /// The trial's peak in this series.
    pub fn peak(self, trial: &TrialResult) -> Option<u64> {
        match self {
            FitBasis::PeakAllocated => trial.peak_allocated_bytes(),
            FitBasis::PeakReserved => trial.peak_reserved_bytes(),
            FitBasis::PredictedCudaReserved => trial.predicted_cuda_peak_reserved_bytes(),
        }
    }
}

/// What a common GPU size would hold: report.json's short record of a
/// [`whatif::predict_for`] prediction (the one GPU predictor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommonGpu {
    pub capacity_bytes: u64,
    pub budget_bytes: u64,
    pub max_batch: u64,
    pub recommended_batch: u64,
}

/// The analysis of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    pub budget: Budget,
    /// Where the capacity came from.
    pub capacity_source: CapacitySource,
    pub strategy: StrategyName,
    pub fit_basis: FitBasis,
    /// The limiting fit (see [`FitBasis`]).
    pub fit: Option<LinearFit>,
    pub allocated_fit: Option<LinearFit>,
    pub reserved_fit: Option<LinearFit>,
    pub nvml_used_fit: Option<LinearFit>,
    /// A CPU run's line of what a GPU would reserve (the caching
    /// allocator's model of its trace): the line GPU predictions use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_reserved_fit: Option<LinearFit>,
    /// A CPU run's reserved bytes on a GPU at batches it did not run: its
    /// two largest batches' traces scaled to them and replayed through the
    /// caching allocator's model (what `plan` predicts from).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cuda_reserved_curve: Vec<CurvePoint>,
    /// The two batches whose traces the curve scales.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_reserved_curve_from: Option<[u64; 2]>,
    /// The largest batch the search verified (0 when nothing fits).
    pub max_batch: u64,
    /// The search proved it: it fits and the next batch does not.
    pub exact: bool,
    /// It is `--max-batch`, which fits: the real max is at or beyond it.
    pub capped: bool,
    /// The largest batch the fit predicts within the budget (not run when above `max_batch`).
    pub predicted_max_batch: Option<u64>,
    pub recommended_batch: u64,
    /// A trial ran at exactly the recommended batch and stayed within budget.
    pub recommended_verified: bool,
    /// Peak at the recommended batch (measured when verified, else the fit's).
    pub recommended_peak_bytes: Option<f64>,
    /// Device memory left free at that peak.
    pub headroom_bytes: Option<f64>,
    /// Predictions for [`COMMON_GPU_GIB`]; from host measurements on the CPU.
    pub gpu_predictions: Vec<CommonGpu>,
    /// The smallest batch within 5% of the best measured samples/s, among
    /// the batches that fit (absent in reports written before it existed).
    #[serde(default)]
    pub fastest: Option<Fastest>,
    pub notes: Vec<Note>,
}

/// What the analysis needs besides the trials.
#[derive(Debug, Clone)]
pub struct AnalysisInput {
    pub device: Device,
    pub budget: Budget,
    pub capacity_source: CapacitySource,
    pub strategy: StrategyName,
    pub search: SearchResult,
    pub multiple_of: u64,
    /// See [`Analysis::cuda_reserved_curve`] (empty where there is none).
    pub cuda_reserved_curve: Vec<CurvePoint>,
    pub cuda_reserved_curve_from: Option<[u64; 2]>,
}

/// Where the capacity the budget starts from came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CapacitySource {
    /// The device's own memory, as the trial read it.
    #[serde(rename = "device")]
    Device,
    /// The user's `--capacity`.
    #[serde(rename = "--capacity")]
    Flag,
}

impl CapacitySource {
    pub fn of(capacity: Option<u64>) -> CapacitySource {
        if capacity.is_some() {
            CapacitySource::Flag
        } else {
            CapacitySource::Device
        }
    }
}

impl std::fmt::Display for CapacitySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CapacitySource::Device => "device",
            CapacitySource::Flag => "--capacity",
        })
    }
}

/// The search that produced the trials: a strategy, or an explicit list.
/// Written as its name (`vramprobe`, `listed-batches`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum StrategyName {
    Search(StrategyKind),
    ListedBatches,
}

impl StrategyName {
    pub fn name(self) -> &'static str {
        match self {
            StrategyName::Search(k) => k.name(),
            StrategyName::ListedBatches => "listed-batches",
        }
    }
}

impl std::fmt::Display for StrategyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl From<StrategyName> for String {
    fn from(s: StrategyName) -> String {
        s.name().into()
    }
}

impl TryFrom<String> for StrategyName {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        StrategyKind::ALL
            .into_iter()
            .map(StrategyName::Search)
            .chain([StrategyName::ListedBatches])
            .find(|s| s.name() == text)
            .ok_or_else(|| format!("unknown strategy '{text}'"))
    }
}

/// What GPU predictions use, and the series it comes from: a CPU run's
/// curve of scaled traces where it has one, else its per-trial line through
/// the caching allocator's model, else the run's limiting line. `None` when
/// it does not grow with the batch.
fn gpu_reserved(
    curve: &[CurvePoint],
    modelled: Option<LinearFit>,
    (fit, basis): (Option<LinearFit>, FitBasis),
) -> Option<(Reserved, FitBasis)> {
    let reserved = match (Reserved::curve(curve), modelled) {
        (Some(c), _) => (c, FitBasis::PredictedCudaReserved),
        (None, Some(line)) => (Reserved::Line(line), FitBasis::PredictedCudaReserved),
        (None, None) => (Reserved::Line(fit?), basis),
    };
    reserved.0.grows().then_some(reserved)
}

impl Analysis {
    /// What to plan a GPU's reserved bytes from, and the series it is.
    pub fn gpu_reserved(&self) -> Option<(Reserved, FitBasis)> {
        gpu_reserved(&self.cuda_reserved_curve, self.cuda_reserved_fit, (self.fit, self.fit_basis))
    }
}

fn fit_series(trials: &[&TrialResult], value: impl Fn(&TrialResult) -> Option<u64>) -> Option<LinearFit> {
    let points: Vec<(u64, u64)> = trials.iter().filter_map(|t| value(t).map(|v| (t.batch, v))).collect();
    LinearFit::fit_upper_regime(&points).ok()
}

pub fn analyze(trials: &[TrialResult], input: AnalysisInput) -> Analysis {
    let mut notes: Vec<Note> = input.search.notes.iter().map(|text| Note::Search { text: text.clone() }).collect();
    let budget = input.budget;
    let basis = FitBasis::for_device(input.device);
    let fits: Vec<&TrialResult> = trials.iter().filter(|t| t.outcome == Outcome::Fits).collect();

    let allocated_fit = fit_series(&fits, TrialResult::peak_allocated_bytes);
    let reserved_fit = fit_series(&fits, TrialResult::peak_reserved_bytes);
    let nvml_used_fit = fit_series(&fits, TrialResult::nvml_used_bytes);
    let cuda_reserved_fit = fit_series(&fits, TrialResult::predicted_cuda_peak_reserved_bytes);
    let fit = match basis {
        FitBasis::PeakAllocated => allocated_fit,
        FitBasis::PeakReserved => reserved_fit,
        FitBasis::PredictedCudaReserved => cuda_reserved_fit,
    };
    let predicted_max_batch = fit.and_then(|f| f.max_batch_within(budget.budget_bytes));
    if let Some(f) = fit {
        if f.per_sample_bytes <= 0.0 {
            notes.push(Note::FlatLine);
        } else if f.r2 < 0.99 {
            notes.push(Note::PoorFit { r2: f.r2 });
        }
    }

    let within = |t: &TrialResult| basis.peak(t).is_some_and(|p| budget.fit(p) == Fit::Fits);
    let recommended_batch = round_down(input.search.max_batch, input.multiple_of);
    let verified = fits.iter().copied().filter(|t| within(t)).find(|t| t.batch == recommended_batch);
    let recommended_peak_bytes = match verified {
        Some(t) => basis.peak(t).map(|p| p as f64),
        None => fit.filter(|_| recommended_batch > 0).map(|f| f.predict(recommended_batch)),
    };
    let headroom_bytes = recommended_peak_bytes.map(|p| budget.headroom(p));
    if recommended_batch > 0 && verified.is_none() {
        notes.push(Note::RecommendedNotRun { batch: recommended_batch, strategy: input.strategy.name().into() });
    }

    // For GPUs: what they would reserve, where the run could model it.
    let gpu_reserved = gpu_reserved(&input.cuda_reserved_curve, cuda_reserved_fit, (fit, basis));
    let gpu_predictions = match gpu_reserved {
        Some((reserved, _)) => common_gpus(&reserved, &budget, input.device.is_cuda(), input.multiple_of),
        None => Vec::new(),
    };

    let throughput: Vec<(u64, f64)> =
        fits.iter().filter(|t| within(t)).filter_map(|t| Some((t.batch, t.samples_per_second()?))).collect();
    let fastest = fastest::fastest_batch(&throughput, fastest::WITHIN_OF_BEST);

    Analysis {
        budget,
        capacity_source: input.capacity_source,
        strategy: input.strategy,
        fit_basis: basis,
        fit,
        allocated_fit,
        reserved_fit,
        nvml_used_fit,
        cuda_reserved_fit,
        cuda_reserved_curve: input.cuda_reserved_curve,
        cuda_reserved_curve_from: input.cuda_reserved_curve_from,
        max_batch: input.search.max_batch,
        exact: input.search.exact,
        capped: input.search.capped,

        predicted_max_batch,
        recommended_batch,
        recommended_verified: verified.is_some(),
        recommended_peak_bytes,
        headroom_bytes,
        gpu_predictions,
        fastest,
        notes,
    }
}

/// What each common GPU size would hold, from what a GPU would reserve:
/// a GPU of that size whose only memory outside PyTorch is what this run
/// measured (on the CPU: none is known), through the one predictor.
fn common_gpus(reserved: &Reserved, budget: &Budget, on_cuda: bool, multiple_of: u64) -> Vec<CommonGpu> {
    COMMON_GPU_GIB
        .iter()
        .map(|&gib| {
            let gpu = GpuProfile {
                id: format!("{gib}gib"),
                name: format!("{gib} GiB"),
                memory_bytes: gib << 30,
                context_overhead_bytes: if on_cuda { budget.non_pytorch_bytes } else { 0 },
                overhead_source: "this run".into(),
                cublas_workspace_bytes: 0,
                bf16: true,
            };
            let p = whatif::predict_for(reserved, on_cuda, &gpu, budget.margin_fraction, multiple_of);
            CommonGpu {
                capacity_bytes: p.budget.capacity_bytes,
                budget_bytes: p.budget.budget_bytes,
                max_batch: p.max_batch,
                recommended_batch: p.recommended_batch,
            }
        })
        .collect()
}

/// Several sequence lengths of one token model, side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeqSummary {
    pub fit: Option<SeqFit>,
    pub lengths: Vec<SeqRow>,
    /// The most tokens (batch x length) a verified batch held, and at which length.
    pub max_tokens: u64,
    pub max_tokens_length: u64,
    /// The longest length swept, and its recommended batch: what to train
    /// with when sequence lengths vary (the longest batch decides an OOM).
    pub longest_length: u64,
    pub longest_recommended_batch: u64,
}

/// One length of a [`SeqSummary`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeqRow {
    pub length: u64,
    /// Verified by the search at this length.
    pub max_batch: u64,
    pub recommended_batch: u64,
    /// What the two-dimensional fit allows at this length within the budget.
    pub fit_max_batch: Option<u64>,
    pub tokens: u64,
}

/// The (batch, length, peak) points behind each length's own line: its
/// largest fitting batches, as many as that line used.
pub fn seq_points(runs: &[(u64, &[TrialResult], &Analysis)]) -> Vec<seqfit::Point> {
    let mut points = Vec::new();
    for &(length, trials, a) in runs {
        let Some(fit) = a.fit else { continue };
        let mut fitting: Vec<(u64, u64)> = trials
            .iter()
            .filter(|t| t.outcome == Outcome::Fits)
            .filter_map(|t| a.fit_basis.peak(t).map(|p| (t.batch, p)))
            .collect();
        fitting.sort_unstable();
        fitting.dedup_by_key(|(b, _)| *b);
        let skip = fitting.len().saturating_sub(fit.points);
        points.extend(fitting[skip..].iter().map(|&(batch, peak)| seqfit::Point {
            batch,
            length,
            peak_bytes: peak as f64,
        }));
    }
    points
}

/// Combines the sweeps of one model at several lengths.
pub fn seq_summary(runs: &[(u64, &[TrialResult], &Analysis)]) -> SeqSummary {
    let fit = seqfit::fit(&seq_points(runs));
    let lengths: Vec<SeqRow> = runs
        .iter()
        .map(|&(length, _, a)| SeqRow {
            length,
            max_batch: a.max_batch,
            recommended_batch: a.recommended_batch,
            fit_max_batch: fit.map(|f| f.max_batch_within(a.budget.budget_bytes, length)),
            tokens: a.max_batch * length,
        })
        .collect();
    let best = lengths.iter().max_by_key(|r| (r.tokens, r.length));
    let longest = lengths.iter().max_by_key(|r| r.length);
    SeqSummary {
        fit,
        max_tokens: best.map_or(0, |r| r.tokens),
        max_tokens_length: best.map_or(0, |r| r.length),
        longest_length: longest.map_or(0, |r| r.length),
        longest_recommended_batch: longest.map_or(0, |r| r.recommended_batch),
        lengths,
    }
}

/// The budget a trial is judged against: the capacity (`--capacity`, else
/// the device's memory as the trial read it) less the margin and the memory
/// outside PyTorch. `None` until a trial has reported both. With
/// `--capacity` on the CPU the user plans for another device, so the host
/// process's own overhead is not part of that plan.
pub fn budget_for(device: Device, capacity: Option<u64>, margin_fraction: f64, trial: &TrialResult) -> Option<Budget> {
    let total = capacity.or(trial.device_total_bytes)?;
    let foreign = match (device, capacity) {
        (Device::Cpu, Some(_)) => 0,
        _ => trial.non_pytorch_bytes()?,
    };
    Some(Budget::new(total, margin_fraction, foreign))
}

/// How a finished trial counts for the search.
pub fn observe(trial: &TrialResult, budget: &Budget, basis: FitBasis) -> Observation {
    match trial.outcome {
        Outcome::Fits => {
            let peak = basis.peak(trial);
            let phases = peak.and_then(|p| Some(trial.phase_peaks()?.scaled_to(p)));
            match peak {
                Some(peak) if budget.fit(peak) == Fit::Fits => Observation::Fits { peak_bytes: peak, phases },
                peak => Observation::TooBig { peak_bytes: peak, phases },
            }
        }
        Outcome::Oom => Observation::TooBig { peak_bytes: None, phases: None },
        Outcome::Error | Outcome::Killed | Outcome::Timeout => Observation::Failed {
            message: format!("{}: {}", trial.outcome, trial.message.as_deref().unwrap_or("no message")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::device::NvmlReading;
    use crate::record::trial::StepRecord;

    /// A trial on a synthetic memory curve (test data, not a measurement).
    fn synthetic(batch: u64, outcome: Outcome, peak: u64) -> TrialResult {
        TrialResult {
            outcome,
            device_total_bytes: Some(10_000),
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
            ..TrialResult::started(0, batch, None)
        }
    }

    fn input(max_batch: u64, multiple_of: u64) -> AnalysisInput {
        AnalysisInput {
            device: Device::Cpu,
            budget: Budget::new(10_000, 0.10, 0),
            capacity_source: CapacitySource::Device,
            strategy: StrategyName::Search(StrategyKind::Vramprobe),
            search: SearchResult { max_batch, exact: true, ..Default::default() },
            multiple_of,
            cuda_reserved_curve: Vec::new(),
            cuda_reserved_curve_from: None,
        }
    }

    #[test]
    fn the_fit_predicts_beyond_the_verified_max() {
        // peak = 1000 + 100 b; budget = 10000 - 1000 = 9000 -> predicted 80.
        let trials: Vec<_> = [1, 2, 4, 8].iter().map(|&b| synthetic(b, Outcome::Fits, 1000 + 100 * b)).collect();
        let a = analyze(&trials, input(8, 1));
        assert_eq!(a.budget.budget_bytes, 9000);
        assert_eq!(a.predicted_max_batch, Some(80));
        assert_eq!((a.max_batch, a.recommended_batch), (8, 8));
        assert!(a.recommended_verified);
        assert_eq!(a.recommended_peak_bytes, Some(1800.0));
        assert_eq!(a.headroom_bytes, Some(8200.0));
        assert_eq!(a.gpu_predictions.len(), COMMON_GPU_GIB.len());
    }

    #[test]
    fn rounding_to_a_multiple_is_verified_only_when_that_batch_ran() {
        let trials: Vec<_> = [2, 16, 62, 63].iter().map(|&b| synthetic(b, Outcome::Fits, 1000 + 100 * b)).collect();
        let a = analyze(&trials, input(63, 8));
        assert_eq!(a.recommended_batch, 56);
        assert!(!a.recommended_verified);
        assert!(a.notes.iter().any(|n| n.to_string().contains("56 was not run")), "{:?}", a.notes);
    }

    #[test]
    fn nothing_fits_gives_zero() {
        let trials = vec![synthetic(1, Outcome::Oom, 0)];
        let a = analyze(&trials, input(0, 1));
        assert_eq!((a.max_batch, a.recommended_batch), (0, 0));
        assert!(a.fit.is_none() && a.gpu_predictions.is_empty());
    }

    /// A CUDA trial whose NVML reads failed after its first step (SYNTHETIC
    /// numbers: this tests the judgement, not a measurement).
    fn cuda_trial_losing_nvml() -> TrialResult {
        let step = |n: u32, nvml: bool| {
            let mut s = StepRecord {
                step: n,
                batch: 8,
                peak_allocated_bytes: 900,
                reserved_bytes: Some(1000),
                peak_reserved_bytes: Some(1000),
                ..Default::default()
            };
            if nvml {
                s.set_nvml(NvmlReading { used_bytes: Some(1500), ..Default::default() });
            }
            s
        };
        TrialResult {
            outcome: Outcome::Fits,
            device_name: Some("GPU".into()),
            device_total_bytes: Some(10_000),
            wall_seconds: 1.0,
            steps: vec![step(1, true), step(2, false), step(3, false)],
            ..TrialResult::started(2, 8, None)
        }
    }

    #[test]
    fn nvml_failing_mid_trial_leaves_its_cells_empty_and_the_judgement_to_the_allocator() {
        let trial = cuda_trial_losing_nvml();
        assert_eq!(trial.steps[1].nvml_used_bytes, None);
        let budget = Budget::new(10_000, 0.1, 500);
        assert_eq!(
            observe(&trial, &budget, FitBasis::PeakReserved),
            Observation::Fits { peak_bytes: 1000, phases: None }
        );
        let tight = Budget::new(1_500, 0.1, 500);
        assert_eq!(
            observe(&trial, &tight, FitBasis::PeakReserved),
            Observation::TooBig { peak_bytes: Some(1000), phases: None }
        );
    }
}
