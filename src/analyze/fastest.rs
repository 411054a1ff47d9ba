//! Pure: the "fastest" batch, where throughput stops improving. Larger
//! batches past it cost memory without buying speed, so a user who wants
//! throughput rather than the largest batch takes this one.
use serde::{Deserialize, Serialize};

/// A batch counts as fast when its samples/s is within this share of the best.
pub const WITHIN_OF_BEST: f64 = 0.05;

/// The fastest batch and what it was judged against.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fastest {
    /// The smallest measured batch within [`WITHIN_OF_BEST`] of the best samples/s.
    pub batch: u64,
    pub samples_per_second: f64,
    /// The best samples/s measured, and at which batch.
    pub best_batch: u64,
    pub best_samples_per_second: f64,
}

/// The smallest batch whose throughput is within `within` (a fraction) of
/// the best measured one; None without a positive throughput.
pub fn fastest_batch(points: &[(u64, f64)], within: f64) -> Option<Fastest> {
    let valid = || points.iter().copied().filter(|(_, sps)| sps.is_finite() && *sps > 0.0);
    let (best_batch, best) = valid().max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))?;
    let threshold = best * (1.0 - within);
    let (batch, sps) = valid().filter(|(_, sps)| *sps >= threshold).min_by_key(|(b, _)| *b)?;
    Some(Fastest { batch, samples_per_second: sps, best_batch, best_samples_per_second: best })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saturating_curve_gives_the_knee_not_the_largest() {
        // Throughput rises steeply, then flattens past batch 64.
        let curve = [(8, 400.0), (16, 700.0), (32, 900.0), (64, 980.0), (128, 1000.0), (256, 1005.0)];
        let f = fastest_batch(&curve, WITHIN_OF_BEST).unwrap();
        assert_eq!((f.batch, f.best_batch), (64, 256));
        assert!(f.samples_per_second >= 0.95 * f.best_samples_per_second);
    }

    #[test]
    fn a_peak_in_the_middle_is_found_when_larger_batches_slow_down() {
        // Cache effects: larger batches get slower again.
        let curve = [(4, 10.5), (32, 12.1), (64, 10.3)];
        let f = fastest_batch(&curve, WITHIN_OF_BEST).unwrap();
        assert_eq!((f.batch, f.best_batch), (32, 32));
    }

    #[test]
    fn a_linear_curve_gives_the_largest() {
        let curve: Vec<(u64, f64)> = (1..=10).map(|b| (b, b as f64 * 100.0)).collect();
        assert_eq!(fastest_batch(&curve, WITHIN_OF_BEST).unwrap().batch, 10);
    }

    #[test]
    fn the_threshold_is_inclusive_and_order_does_not_matter() {
        let curve = [(128, 100.0), (16, 95.0), (8, 94.9)];
        assert_eq!(fastest_batch(&curve, 0.05).unwrap().batch, 16);
    }

    #[test]
    fn no_positive_throughput_gives_none() {
        assert_eq!(fastest_batch(&[], WITHIN_OF_BEST), None);
        assert_eq!(fastest_batch(&[(4, 0.0), (8, f64::NAN)], WITHIN_OF_BEST), None);
    }
}
