//! SYNTHETIC memory curves for testing and benchmarking search logic. These
//! are not measurements: every output that uses them labels them synthetic.
//! They model what real devices do: a straight line, CUDA allocator rounding,
//! a cuDNN/cuBLAS workspace that appears from some batch on, and noise.
use super::{Observation, PhasePeaks};

const MIB: u64 = 1 << 20;

/// A synthetic peak-memory curve.
#[derive(Debug, Clone, PartialEq)]
pub enum Curve {
    /// `fixed + per_sample x batch`.
    Linear { fixed: u64, per_sample: u64 },
    /// The line split over `tensors` activation tensors of geometrically
    /// decreasing size, each reserved as the CUDA caching allocator does
    /// (see [`cuda_reserved`]).
    Rounded { fixed: u64, per_sample: u64, tensors: u64 },
    /// The line plus `bytes` of workspace from batch `at` on.
    Jump { fixed: u64, per_sample: u64, at: u64, bytes: u64 },
    /// The line plus deterministic noise of up to `fraction` of a sample,
    /// different at every batch.
    Noisy { fixed: u64, per_sample: u64, fraction: f64, seed: u64 },
    /// A step whose peak is the larger of two lines, each (fixed,
    /// per_sample), both reported as a trial reports its peaks by phase:
    /// forward/backward (activations) and the optimizer step (parameters,
    /// gradients and state, nearly flat).
    TwoPhase { forward_backward: (u64, u64), optimizer: (u64, u64) },
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// What the CUDA caching allocator reserves for a set of live requests:
/// every request rounded to 512 B blocks; small ones (up to 1 MiB) share
/// 2 MiB segments, medium ones (up to 10 MiB) share 20 MiB segments, and
/// large ones get their own segment rounded up to 2 MiB.
pub fn cuda_reserved(requests: impl IntoIterator<Item = u64>) -> u64 {
    let (mut small, mut medium, mut large) = (0, 0, 0);
    for request in requests {
        let block = round_up(request.max(1), 512);
        if block <= MIB {
            small += block;
        } else if block <= 10 * MIB {
            medium += block;
        } else {
            large += round_up(block, 2 * MIB);
        }
    }
    round_up(small, 2 * MIB) + round_up(medium, 20 * MIB) + large
}

/// A well-mixed hash in [-1, 1] (splitmix64), so noise is reproducible.
fn unit_noise(seed: u64, batch: u64) -> f64 {
    let mut z = seed.wrapping_add(batch.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z as f64 / u64::MAX as f64) * 2.0 - 1.0
}

impl Curve {
    pub fn peak(&self, batch: u64) -> u64 {
        match *self {
            Curve::Linear { fixed, per_sample } => fixed + per_sample * batch,
            // Activations of decreasing size, as through a network's layers.
            Curve::Rounded { fixed, per_sample, tensors } => {
                let weights: Vec<f64> = (0..tensors).map(|i| 0.93f64.powi(i as i32)).collect();
                let total: f64 = weights.iter().sum();
                fixed + cuda_reserved(weights.iter().map(|w| (w / total * (per_sample * batch) as f64) as u64))
            }
            Curve::Jump { fixed, per_sample, at, bytes } => {
                fixed + per_sample * batch + if batch >= at { bytes } else { 0 }
            }
            Curve::TwoPhase { .. } => {
                let p = self.phases(batch).unwrap_or(PhasePeaks { forward_backward_bytes: 0, optimizer_bytes: 0 });
                p.forward_backward_bytes.max(p.optimizer_bytes)
            }
            Curve::Noisy { fixed, per_sample, fraction, seed } => {
                let noise = unit_noise(seed, batch) * fraction * per_sample as f64;
                (fixed as f64 + (per_sample * batch) as f64 + noise) as u64
            }
        }
    }
}

/// A SYNTHETIC search case: a curve and the budget it must stay within.
impl Curve {
    /// The peak on either side of the optimizer step, for a two-phase curve.
    pub fn phases(&self, batch: u64) -> Option<PhasePeaks> {
        match *self {
            Curve::TwoPhase { forward_backward: (f1, s1), optimizer: (f2, s2) } => {
                Some(PhasePeaks { forward_backward_bytes: f1 + s1 * batch, optimizer_bytes: f2 + s2 * batch })
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SyntheticCase {
    pub name: String,
    pub curve: Curve,
    pub budget_bytes: u64,
}

impl SyntheticCase {
    /// The largest batch such that it and every smaller batch fit, found by
    /// scanning every batch (independent of every strategy).
    pub fn true_max(&self) -> u64 {
        (1..).take_while(|&b| self.curve.peak(b) <= self.budget_bytes).last().unwrap_or(0)
    }

    /// What a probe at `batch` shows.
    pub fn observe(&self, batch: u64) -> Observation {
        let peak = self.curve.peak(batch);
        let phases = self.curve.phases(batch);
        if peak <= self.budget_bytes {
            Observation::Fits { peak_bytes: peak, phases }
        } else {
            Observation::TooBig { peak_bytes: Some(peak), phases }
        }
    }
}

/// A line whose true max under `budget` is exactly `max`.
fn line_for(max: u64, per_sample: u64, budget: u64) -> (u64, u64) {
    (budget - per_sample * max - per_sample / 2, per_sample)
}

/// The benchmark's synthetic suite: each curve shape with true maxima from
/// 10 to 5000 under a 20 GiB budget.
pub fn suite() -> Vec<SyntheticCase> {
    let budget = 20 << 30;
    let mut cases = Vec::new();
    for max in [10u64, 37, 100, 300, 1000, 5000] {
        // Per-sample memory such that the fixed part is about 1 GiB.
        let per_sample = (budget - (1 << 30)) / max;
        let (fixed, per) = line_for(max, per_sample, budget);
        cases.push(SyntheticCase {
            name: format!("linear-{max}"),
            curve: Curve::Linear { fixed, per_sample: per },
            budget_bytes: budget,
        });
        cases.push(SyntheticCase {
            name: format!("rounded-{max}"),
            curve: Curve::Rounded { fixed, per_sample: per, tensors: 60 },
            budget_bytes: budget,
        });
        // A 256 MiB workspace appearing a few batches below the line's max.
        let at = max - (max / 20).max(1);
        cases.push(SyntheticCase {
            name: format!("jump-{max}"),
            curve: Curve::Jump { fixed, per_sample: per, at, bytes: 256 * MIB },
            budget_bytes: budget,
        });
        cases.push(SyntheticCase {
            name: format!("noisy-{max}"),
            curve: Curve::Noisy { fixed, per_sample: per, fraction: 0.4, seed: max },
            budget_bytes: budget,
        });
        cases.extend(two_phase(max, per, budget));
    }
    cases
}

/// Two-phase curves whose max is `max` (the larger line crosses the budget
/// half a sample past it), where backward grows by `per` a sample.
fn two_phase(max: u64, per: u64, budget: u64) -> Vec<SyntheticCase> {
    let (fixed, _) = line_for(max, per, budget);
    let case = |name: &str, forward_backward, optimizer| SyntheticCase {
        name: format!("{name}-{max}"),
        curve: Curve::TwoPhase { forward_backward, optimizer },
        budget_bytes: budget,
    };
    // Adam on small inputs: the optimizer's flat peak (60% of the budget)
    // tops the step until backward's line passes it, well above batch 32.
    let flat_floor = budget / 10 * 6;
    let flat = case("flat-then-steep", (fixed, per), (flat_floor, per / 200));
    // Backward on top below max / 2; the optimizer's steeper line (per-sample
    // buffers in the step) overtakes it there and sets the limit.
    let overtaken = case("optimizer-overtakes", (fixed + per * max / 4, per / 2), (fixed, per));
    // The budget just above the optimizer's flat floor: backward crosses it at `max`.
    let floor = budget - per / 4 - (max + 1) * (per / 1000).max(1);
    let tight = case("floor-just-below", (fixed, per), (floor.min(budget - 1), (per / 1000).max(1)));
    vec![flat, overtaken, tight]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_the_true_max_they_were_built_for() {
        for case in suite().iter().filter(|c| c.name.starts_with("linear")) {
            let wanted: u64 = case.name.trim_start_matches("linear-").parse().unwrap();
            assert_eq!(case.true_max(), wanted, "{}", case.name);
        }
    }

    #[test]
    fn nothing_fits_above_the_true_max() {
        // Reserved memory can dip (a tensor leaving a shared 20 MiB segment
        // for its own), but never back under the budget past the true max.
        for case in suite() {
            let max = case.true_max();
            assert!((max + 1..=2 * max + 2).all(|b| !case.observe(b).fits()), "{}", case.name);
        }
    }

    #[test]
    fn cuda_rounding_follows_the_allocator() {
        assert_eq!(cuda_reserved([100]), 2 * MIB);
        assert_eq!(cuda_reserved([512 * 1024; 4]), 2 * MIB);
        assert_eq!(cuda_reserved([512 * 1024; 5]), 4 * MIB);
        assert_eq!(cuda_reserved([3 * MIB]), 20 * MIB);
        assert_eq!(cuda_reserved([3 * MIB; 7]), 40 * MIB);
        assert_eq!(cuda_reserved([11 * MIB, 11 * MIB, 100]), 26 * MIB);
    }
}
