//! Pure batch-size search. A [`Strategy`] looks at the probes so far and
//! either asks for the next batch to run or finishes with a result. Nothing
//! here runs a model: the sweep (real trials), the tests and the benchmark
//! (synthetic curves) feed the same strategies.
pub mod fit_guided;
pub mod list;
pub mod peers;
pub mod side_by_side;
pub mod synthetic;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::record::trial::PhasePeaks;

/// What one probe at a batch size showed. `phases` splits the peak at the
/// optimizer step, when the trial measured it (in the peak's own units:
/// their larger is `peak_bytes`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Observation {
    /// Every step ran and the peak stayed within the budget.
    Fits {
        peak_bytes: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phases: Option<PhasePeaks>,
    },
    /// Out of memory, or a peak over the budget (`peak_bytes` when known).
    TooBig {
        peak_bytes: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phases: Option<PhasePeaks>,
    },
    /// Anything else: the search cannot conclude from it.
    Failed { message: String },
}

impl Observation {
    pub fn fits(&self) -> bool {
        matches!(self, Observation::Fits { .. })
    }

    pub fn peak_bytes(&self) -> Option<u64> {
        match self {
            Observation::Fits { peak_bytes, .. } => Some(*peak_bytes),
            Observation::TooBig { peak_bytes, .. } => *peak_bytes,
            Observation::Failed { .. } => None,
        }
    }

    /// The peak on either side of the optimizer step, when measured.
    pub fn phases(&self) -> Option<PhasePeaks> {
        match self {
            Observation::Fits { phases, .. } | Observation::TooBig { phases, .. } => *phases,
            Observation::Failed { .. } => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub batch: u64,
    pub observation: Observation,
}

/// How a search ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// The batch the strategy reports (0: nothing fits).
    pub max_batch: u64,
    /// The probes prove it: `max_batch` fits and `max_batch + 1` does not
    /// (or `max_batch` is the `--max-batch` cap).
    pub exact: bool,
    /// The search stopped at `--max-batch`, which fits: the real max is at or beyond it.
    pub capped: bool,
    /// The fit-guided search fell back to a safe search.
    pub fell_back: bool,
    pub notes: Vec<String>,
}

/// The strategy's next move.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Run(u64),
    Finish(SearchResult),
}

/// A batch-size search. `limits` may tighten between calls (the budget is
/// only known once the first trial has measured the memory outside PyTorch);
/// the first move never depends on it.
pub trait Strategy: Fork {
    fn next(&mut self, probes: &[Probe], limits: &SearchLimits) -> Step;
}

/// A copy of a strategy as it stands, to ask what it would do next under
/// an outcome not yet known ([`side_by_side`]).
pub trait Fork {
    fn fork(&self) -> Box<dyn Strategy>;
}

impl<T: Strategy + Clone + 'static> Fork for T {
    fn fork(&self) -> Box<dyn Strategy> {
        Box::new(self.clone())
    }
}

/// The strategies `--strategy` offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    /// Fit-guided: few small probes, fit, probe the prediction, refine, verify.
    Vramprobe,
    /// PyTorch Lightning `scale_batch_size(mode="power")`.
    LightningPower,
    /// PyTorch Lightning `scale_batch_size(mode="binsearch")`.
    LightningBinsearch,
    /// HuggingFace Accelerate `find_executable_batch_size`.
    Accelerate,
}

impl StrategyKind {
    pub const ALL: [StrategyKind; 4] = [
        StrategyKind::Vramprobe,
        StrategyKind::LightningPower,
        StrategyKind::LightningBinsearch,
        StrategyKind::Accelerate,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Vramprobe => "vramprobe",
            StrategyKind::LightningPower => "lightning-power",
            StrategyKind::LightningBinsearch => "lightning-binsearch",
            StrategyKind::Accelerate => "accelerate",
        }
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What every strategy may know before it starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchLimits {
    /// Peak bytes allowed (capacity minus margin minus non-PyTorch usage).
    pub budget_bytes: u64,
    /// Bytes by which a reading may miss its prediction before the fit is
    /// distrusted (the margin).
    pub margin_bytes: u64,
    /// Largest batch that may be run (`--max-batch`).
    pub max_batch: u64,
    /// Stop once the answer is within this many batches of the true max.
    pub tolerance: u64,
    /// The largest batch within the budget as the trials' own step traces
    /// put it ([`crate::analyze::traced_max`]), once two have them (CPU
    /// trials); `None` otherwise. It moves as trials nearer the max arrive.
    pub traced_max: Option<u64>,
}

/// A strategy ready to run.
pub fn build(kind: StrategyKind) -> Box<dyn Strategy> {
    match kind {
        StrategyKind::Vramprobe => Box::new(fit_guided::FitGuided::default()),
        StrategyKind::LightningPower => Box::new(peers::LightningPower),
        StrategyKind::LightningBinsearch => Box::new(peers::LightningBinsearch::default()),
        StrategyKind::Accelerate => Box::new(peers::Accelerate),
    }
}

/// No search runs more trials than this, whatever the strategy asks.
pub const MAX_TRIALS: usize = 64;

/// What a search runs against: the sweep's real trials, the benchmark's
/// measurements or a synthetic curve.
pub trait Oracle {
    type Error;
    /// The limits as they stand (the sweep knows its budget only once the
    /// first trial has measured the memory outside PyTorch).
    fn limits(&self) -> SearchLimits;
    /// Runs `batch` and says how it went; an error stops the search.
    fn probe(&mut self, batch: u64) -> Result<Observation, Self::Error>;
    /// Runs these batches at once (one after another unless the oracle can
    /// do better), each observation in the order asked.
    fn probe_all(&mut self, batches: &[u64]) -> Result<Vec<Observation>, Self::Error> {
        batches.iter().map(|&b| self.probe(b)).collect()
    }
}

/// Fixed limits and a probe that cannot fail: the benchmark's and the tests'.
struct Fixed<'a, F> {
    limits: &'a SearchLimits,
    probe: F,
}

impl<F: FnMut(u64) -> Observation> Oracle for Fixed<'_, F> {
    type Error = std::convert::Infallible;

    fn limits(&self) -> SearchLimits {
        *self.limits
    }

    fn probe(&mut self, batch: u64) -> Result<Observation, Self::Error> {
        Ok((self.probe)(batch))
    }
}

/// The search loop, the one the sweep and the benchmark both run: asks the
/// strategy for a batch, probes it, until the strategy finishes or
/// [`MAX_TRIALS`] probes have run (then the max is the bracket's lower end).
pub fn run<O: Oracle>(strategy: &mut dyn Strategy, oracle: &mut O) -> Result<(Vec<Probe>, SearchResult), O::Error> {
    side_by_side::run(strategy, oracle, 1).map(|(probes, result, _)| (probes, result))
}

/// How a search that stopped at [`MAX_TRIALS`] ends: the bracket's lower end.
fn stopped(probes: &[Probe]) -> SearchResult {
    let (lo, _) = bracket(probes);
    let note = format!("stopped after {MAX_TRIALS} trials without converging");
    SearchResult { max_batch: lo.unwrap_or(0), notes: vec![note], ..SearchResult::default() }
}

/// [`run`] with fixed limits and a probe that cannot fail.
pub fn drive(
    strategy: &mut dyn Strategy,
    limits: &SearchLimits,
    probe: impl FnMut(u64) -> Observation,
) -> (Vec<Probe>, SearchResult) {
    let Ok(done) = run(strategy, &mut Fixed { limits, probe });
    done
}

/// The bracket the probes establish, assuming memory grows with the batch:
/// the largest batch that fits below every failure, and the smallest failure.
pub fn bracket(probes: &[Probe]) -> (Option<u64>, Option<u64>) {
    let hi = probes.iter().filter(|p| matches!(p.observation, Observation::TooBig { .. })).map(|p| p.batch).min();
    let lo = probes.iter().filter(|p| p.observation.fits() && hi.is_none_or(|h| p.batch < h)).map(|p| p.batch).max();
    (lo, hi)
}

#[cfg(test)]
mod tests;
