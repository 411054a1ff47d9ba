//! Pure: how a distributed job's per-rank memory line changes with its world
//! size, from sweeps at a few world sizes (`--world-sizes`), and what it
//! predicts at larger ones.
//!
//! The model: each part of the line is `replicated + sharded / W`. FSDP
//! shards parameters, gradients and optimizer state (a large `sharded`);
//! DDP keeps a full replica and adds gradient buckets once there is a peer
//! (`sharded` comes out negative: the fixed part grows from W=1 and levels
//! off). Two world sizes determine the model exactly; more are fitted by
//! least squares in 1/W. A prediction is a prediction: never run.
use serde::{Deserialize, Serialize};

use crate::analyze::fit::{round_down, LinearFit};

/// One world size's measured per-rank line and verified max.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorldPoint {
    pub world_size: u32,
    pub fixed_bytes: f64,
    pub per_sample_bytes: f64,
    pub max_batch: u64,
}

/// `value(W) = replicated + sharded / W`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sharding {
    pub replicated_bytes: f64,
    pub sharded_bytes: f64,
}

impl Sharding {
    /// Least squares of `y = a + b x` with `x = 1/W`.
    fn fit(points: &[(u32, f64)]) -> Sharding {
        let n = points.len() as f64;
        let xs: Vec<f64> = points.iter().map(|(w, _)| 1.0 / f64::from(*w)).collect();
        let mean_x = xs.iter().sum::<f64>() / n;
        let mean_y = points.iter().map(|(_, y)| y).sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for (x, (_, y)) in xs.iter().zip(points) {
            sxy += (x - mean_x) * (y - mean_y);
            sxx += (x - mean_x).powi(2);
        }
        let sharded = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        Sharding { replicated_bytes: mean_y - sharded * mean_x, sharded_bytes: sharded }
    }

    pub fn at(&self, world_size: u32) -> f64 {
        self.replicated_bytes + self.sharded_bytes / f64::from(world_size)
    }
}

/// The per-rank line as a function of the world size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorldFit {
    pub fixed: Sharding,
    pub per_sample: Sharding,
    /// World sizes it was fitted on.
    pub points: usize,
}

impl WorldFit {
    /// Needs two different world sizes.
    pub fn fit(points: &[WorldPoint]) -> Option<WorldFit> {
        let mut sizes: Vec<u32> = points.iter().map(|p| p.world_size).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.len() < 2 {
            return None;
        }
        let fixed: Vec<(u32, f64)> = points.iter().map(|p| (p.world_size, p.fixed_bytes)).collect();
        let per_sample: Vec<(u32, f64)> = points.iter().map(|p| (p.world_size, p.per_sample_bytes)).collect();
        Some(WorldFit { fixed: Sharding::fit(&fixed), per_sample: Sharding::fit(&per_sample), points: points.len() })
    }

    /// The predicted per-rank line at `world_size`.
    pub fn line_at(&self, world_size: u32) -> LinearFit {
        LinearFit {
            fixed_bytes: self.fixed.at(world_size),
            per_sample_bytes: self.per_sample.at(world_size),
            r2: f64::NAN,
            points: 0,
        }
    }
}

/// The per-rank max batch at a world size that was not run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorldPrediction {
    pub world_size: u32,
    pub fixed_bytes: f64,
    pub per_sample_bytes: f64,
    /// Predicted, never run.
    pub max_batch: u64,
    pub recommended_batch: u64,
    /// recommended x world size.
    pub global_batch: u64,
}

/// What `--world-sizes` concludes: the measured points, the fit, and the
/// predictions for the doublings above the largest measured world size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorldSummary {
    pub measured: Vec<WorldPoint>,
    pub fit: Option<WorldFit>,
    /// The per-rank budget the predictions are judged against (the measured runs').
    pub budget_bytes: u64,
    pub predictions: Vec<WorldPrediction>,
}

/// How far above the largest measured world size the predictions go.
pub const PREDICT_UP_TO: u32 = 64;

/// The per-rank max batch the fit predicts at `world_size` (never run).
pub fn predict(fit: &WorldFit, world_size: u32, budget_bytes: u64, multiple_of: u64) -> WorldPrediction {
    let line = fit.line_at(world_size);
    let max_batch = line.max_batch_within(budget_bytes).unwrap_or(0);
    let recommended_batch = round_down(max_batch, multiple_of);
    WorldPrediction {
        world_size,
        fixed_bytes: line.fixed_bytes,
        per_sample_bytes: line.per_sample_bytes,
        max_batch,
        recommended_batch,
        global_batch: recommended_batch * u64::from(world_size),
    }
}

pub fn summarize(mut measured: Vec<WorldPoint>, budget_bytes: u64, multiple_of: u64) -> WorldSummary {
    measured.sort_by_key(|p| p.world_size);
    let fit = WorldFit::fit(&measured);
    let largest = measured.iter().map(|p| p.world_size).max().unwrap_or(1);
    let predictions = fit
        .map(|f| {
            let first = if largest.is_power_of_two() { largest * 2 } else { largest.next_power_of_two() };
            std::iter::successors(Some(first), |w| Some(w * 2))
                .take_while(|&w| w <= PREDICT_UP_TO.max(largest * 2))
                .map(|w| predict(&f, w, budget_bytes, multiple_of))
                .collect()
        })
        .unwrap_or_default();
    WorldSummary { measured, fit, budget_bytes, predictions }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(world_size: u32, fixed: f64, per_sample: f64) -> WorldPoint {
        WorldPoint { world_size, fixed_bytes: fixed, per_sample_bytes: per_sample, max_batch: 0 }
    }

    #[test]
    fn two_world_sizes_determine_what_is_sharded() {
        // FSDP-like: 100 replicated + 800 sharded; activations do not shard.
        let fit = WorldFit::fit(&[point(1, 900.0, 10.0), point(2, 500.0, 10.0)]).unwrap();
        assert!((fit.fixed.replicated_bytes - 100.0).abs() < 1e-9 && (fit.fixed.sharded_bytes - 800.0).abs() < 1e-9);
        assert!((fit.line_at(8).fixed_bytes - 200.0).abs() < 1e-9);
        assert!((fit.line_at(8).per_sample_bytes - 10.0).abs() < 1e-9);
    }

    #[test]
    fn ddp_buckets_grow_the_fixed_part_and_level_off() {
        // 1000 at W=1, 1400 at W=2: the model levels off at 1800.
        let fit = WorldFit::fit(&[point(1, 1000.0, 10.0), point(2, 1400.0, 10.0)]).unwrap();
        assert!(fit.fixed.sharded_bytes < 0.0);
        assert!(fit.line_at(4).fixed_bytes > 1400.0 && fit.line_at(64).fixed_bytes < 1800.0);
    }

    #[test]
    fn three_world_sizes_are_fitted_and_one_predicts_nothing() {
        let exact: Vec<WorldPoint> = [1, 2, 4].map(|w| point(w, 100.0 + 800.0 / f64::from(w), 10.0)).to_vec();
        let fit = WorldFit::fit(&exact).unwrap();
        assert!((fit.fixed.sharded_bytes - 800.0).abs() < 1e-6);
        assert_eq!(WorldFit::fit(&[point(2, 1.0, 1.0), point(2, 2.0, 1.0)]), None);
        assert!(summarize(vec![point(2, 1.0, 1.0)], 1000, 1).predictions.is_empty());
    }

    #[test]
    fn predictions_double_up_from_the_largest_measured() {
        let s = summarize(vec![point(2, 500.0, 10.0), point(1, 900.0, 10.0)], 1_000, 4);
        let sizes: Vec<u32> = s.predictions.iter().map(|p| p.world_size).collect();
        assert_eq!(sizes, [4, 8, 16, 32, 64]);
        // W=4: fixed 100 + 200 = 300, (1000 - 300) / 10 = 70 -> 68 at a multiple of 4.
        let four = s.predictions[0];
        assert_eq!((four.max_batch, four.recommended_batch, four.global_batch), (70, 68, 272));
        assert_eq!(s.measured[0].world_size, 1, "sorted");
    }
}
