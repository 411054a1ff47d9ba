//! The peers' batch finders, reimplemented faithfully so users can compare
//! them on their own hardware (and the benchmark can, side by side).
//!
//! - PyTorch Lightning `Tuner.scale_batch_size`: `mode="power"` starts at
//!   `init_val=2`, doubles after each success, stops at the first OOM and
//!   returns half the failing size; `mode="binsearch"` doubles until the first
//!   OOM, then bisects between the last success and the failure until
//!   `high - low <= 1`; at most `max_trials=25` trials, 3 steps each.
//! - HuggingFace Accelerate `find_executable_batch_size`: starts at 128, on
//!   OOM multiplies by 0.9 (truncating), and the first success wins. It never grows.
//!
//! `--max-batch` is honoured the only way these tools could: a batch above it
//! counts as not fitting.
use super::{Observation, Probe, SearchLimits, SearchResult, Step, Strategy};

const LIGHTNING_INIT: u64 = 2;
const LIGHTNING_MAX_TRIALS: usize = 25;
const ACCELERATE_START: u64 = 128;

fn finish(max_batch: u64) -> Step {
    Step::Finish(SearchResult { max_batch, ..SearchResult::default() })
}

/// Finishing at the cap says so, as the fit-guided search does.
fn finish_at(max_batch: u64, cap: u64) -> Step {
    Step::Finish(SearchResult { max_batch, capped: max_batch >= cap, ..SearchResult::default() })
}

/// Lightning's first steps, the same in both modes: start at `init_val`,
/// and give up on a trial that failed for another reason than memory.
/// `Ok` is the last probe to decide from.
fn lightning_opening(probes: &[Probe], cap: u64) -> Result<&Probe, Step> {
    match probes.last() {
        None => Err(Step::Run(LIGHTNING_INIT.min(cap))),
        Some(Probe { observation: Observation::Failed { .. }, .. }) => Err(finish(0)),
        Some(last) => Ok(last),
    }
}

fn failed(p: &Probe) -> bool {
    !p.observation.fits()
}

/// Lightning's `_run_power_scaling`.
#[derive(Clone)]
pub struct LightningPower;

impl Strategy for LightningPower {
    fn next(&mut self, probes: &[Probe], limits: &SearchLimits) -> Step {
        let cap = limits.max_batch;
        let last = match lightning_opening(probes, cap) {
            Ok(last) => last,
            Err(step) => return step,
        };
        if failed(last) {
            // Lightning halves the failing size and stops (1 if the first trial failed: never run).
            return finish((last.batch / 2).max(1));
        }
        if probes.len() >= LIGHTNING_MAX_TRIALS || last.batch >= cap {
            return finish_at(last.batch, cap);
        }
        Step::Run((last.batch * 2).min(cap))
    }
}

/// Lightning's `_run_binary_scaling`.
#[derive(Clone)]
pub struct LightningBinsearch {
    low: u64,
    high: Option<u64>,
}

impl Default for LightningBinsearch {
    fn default() -> Self {
        LightningBinsearch { low: 1, high: None }
    }
}

impl Strategy for LightningBinsearch {
    fn next(&mut self, probes: &[Probe], limits: &SearchLimits) -> Step {
        let cap = limits.max_batch;
        let last = match lightning_opening(probes, cap) {
            Ok(last) => last,
            Err(step) => return step,
        };
        let size = last.batch;
        let next = if failed(last) {
            self.high = Some(size);
            let mid = (size + self.low) / 2;
            if size - self.low <= 1 {
                return finish(mid);
            }
            mid
        } else {
            if probes.len() >= LIGHTNING_MAX_TRIALS {
                return finish(size);
            }
            self.low = size;
            match self.high {
                Some(high) if high - self.low <= 1 => return finish_at(size, cap),
                Some(high) => (high + self.low) / 2,
                None => size * 2,
            }
        };
        // Lightning would run past a cap; here a size above it cannot fit.
        if next > cap && self.high.is_none() {
            self.high = Some(cap + 1);
            return Step::Run(cap);
        }
        Step::Run(next)
    }
}

/// Accelerate's `find_executable_batch_size`.
#[derive(Clone)]
pub struct Accelerate;

impl Strategy for Accelerate {
    fn next(&mut self, probes: &[Probe], limits: &SearchLimits) -> Step {
        let Some(last) = probes.last() else {
            return Step::Run(ACCELERATE_START.min(limits.max_batch));
        };
        match last.observation {
            Observation::Fits { .. } => finish_at(last.batch, limits.max_batch),
            Observation::Failed { .. } => finish(0),
            Observation::TooBig { .. } => {
                let next = (last.batch as f64 * 0.9) as u64;
                if next == 0 {
                    finish(0)
                } else {
                    Step::Run(next)
                }
            }
        }
    }
}
