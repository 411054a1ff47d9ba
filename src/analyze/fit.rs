//! Pure arithmetic: the least-squares line `peak = fixed + per_sample x batch`
//! and the budget it is compared against. No I/O, no libtorch.
use serde::{Deserialize, Serialize};

/// `batch` rounded down to a multiple of `multiple_of` (`--multiple-of`).
pub fn round_down(batch: u64, multiple_of: u64) -> u64 {
    batch / multiple_of.max(1) * multiple_of.max(1)
}

/// A fitted memory line over measured (batch, bytes) points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LinearFit {
    /// Bytes that do not grow with the batch (weights, gradients, optimizer state, runtime).
    pub fixed_bytes: f64,
    /// Bytes added by each sample in the batch (activations and their gradients).
    pub per_sample_bytes: f64,
    /// Coefficient of determination, 1.0 for a perfect line.
    pub r2: f64,
    /// Number of points the line was fitted on.
    pub points: usize,
}

/// r² from which a run of points counts as a straight line.
pub const LINEAR_R2: f64 = 0.9999;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    #[error("a fit needs at least two different batch sizes, got {0}")]
    TooFewBatches(usize),
}

impl LinearFit {
    /// Ordinary least squares over `(batch, bytes)`.
    pub fn fit(points: &[(u64, u64)]) -> Result<LinearFit, FitError> {
        let mut batches: Vec<u64> = points.iter().map(|p| p.0).collect();
        batches.sort_unstable();
        batches.dedup();
        if batches.len() < 2 {
            return Err(FitError::TooFewBatches(batches.len()));
        }
        let n = points.len() as f64;
        let mean_x = points.iter().map(|p| p.0 as f64).sum::<f64>() / n;
        let mean_y = points.iter().map(|p| p.1 as f64).sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for &(x, y) in points {
            let dx = x as f64 - mean_x;
            sxy += dx * (y as f64 - mean_y);
            sxx += dx * dx;
        }
        let per_sample = sxy / sxx;
        let fixed = mean_y - per_sample * mean_x;
        let (mut ss_res, mut ss_tot) = (0.0, 0.0);
        for &(x, y) in points {
            let predicted = fixed + per_sample * x as f64;
            ss_res += (y as f64 - predicted).powi(2);
            ss_tot += (y as f64 - mean_y).powi(2);
        }
        // A flat, exact line explains everything there is to explain.
        let r2 = if ss_tot == 0.0 { 1.0 } else { 1.0 - ss_res / ss_tot };
        Ok(LinearFit { fixed_bytes: fixed, per_sample_bytes: per_sample, r2, points: points.len() })
    }

    /// Fits the regime that matters for the limit: the longest run of the
    /// largest batches that lies on a line (r² >= [`LINEAR_R2`]). Small batches
    /// can peak elsewhere in the step (for example in the optimizer step,
    /// before activations dominate), which bends the curve near the origin.
    /// Falls back to the three largest batches when no run is that straight.
    pub fn fit_upper_regime(points: &[(u64, u64)]) -> Result<LinearFit, FitError> {
        let mut sorted = points.to_vec();
        sorted.sort_unstable();
        let n = sorted.len();
        if n <= 3 {
            return LinearFit::fit(&sorted);
        }
        for start in 0..=n - 3 {
            let fit = LinearFit::fit(&sorted[start..])?;
            if fit.r2 >= LINEAR_R2 {
                return Ok(fit);
            }
        }
        LinearFit::fit(&sorted[n - 3..])
    }

    /// A line robust to one bad reading (Theil-Sen): the median of the slopes
    /// between every pair of points, and the median intercept under it. With
    /// two points it is the line through them; on exact data, the exact line.
    pub fn robust(points: &[(u64, u64)]) -> Result<LinearFit, FitError> {
        let ordinary = LinearFit::fit(points)?;
        let mut slopes = Vec::new();
        for (i, a) in points.iter().enumerate() {
            for b in &points[i + 1..] {
                if a.0 != b.0 {
                    slopes.push((b.1 as f64 - a.1 as f64) / (b.0 as f64 - a.0 as f64));
                }
            }
        }
        let slope = median(&mut slopes);
        let mut intercepts: Vec<f64> = points.iter().map(|&(x, y)| y as f64 - slope * x as f64).collect();
        let fixed = median(&mut intercepts);
        let mean_y = points.iter().map(|p| p.1 as f64).sum::<f64>() / points.len() as f64;
        let (mut ss_res, mut ss_tot) = (0.0, 0.0);
        for &(x, y) in points {
            ss_res += (y as f64 - fixed - slope * x as f64).powi(2);
            ss_tot += (y as f64 - mean_y).powi(2);
        }
        let r2 = if ss_tot == 0.0 { ordinary.r2 } else { 1.0 - ss_res / ss_tot };
        Ok(LinearFit { fixed_bytes: fixed, per_sample_bytes: slope, r2, points: points.len() })
    }

    /// Predicted peak bytes at `batch`.
    pub fn predict(&self, batch: u64) -> f64 {
        self.fixed_bytes + self.per_sample_bytes * batch as f64
    }

    /// The largest batch whose predicted peak stays within `budget_bytes`:
    /// `None` when the memory does not grow with the batch (no limit to find),
    /// `Some(0)` when not even batch 1 fits.
    pub fn max_batch_within(&self, budget_bytes: u64) -> Option<u64> {
        if self.per_sample_bytes <= 0.0 {
            return None;
        }
        let room = budget_bytes as f64 - self.fixed_bytes;
        if room < self.per_sample_bytes {
            return Some(0);
        }
        Some((room / self.per_sample_bytes).floor() as u64)
    }

    /// A capacity under which this line's largest batch is `target` with the
    /// given margin: the budget sits half a sample past `target`'s predicted
    /// peak, so a measured curve slightly off the line still lands there.
    /// Tests and the benchmark choose their capacities this way, from a
    /// measurement on the machine at hand, never from a constant.
    pub fn capacity_for_max(&self, target: u64, margin_fraction: f64) -> u64 {
        let budget = self.predict(target) + 0.5 * self.per_sample_bytes.max(0.0);
        Budget::capacity_for(budget.max(0.0).ceil() as u64, margin_fraction)
    }
}

/// The bytes `margin_fraction` of `capacity_bytes` keeps free, rounded up.
fn margin_bytes(capacity_bytes: u64, margin_fraction: f64) -> u64 {
    (capacity_bytes as f64 * margin_fraction).ceil() as u64
}

/// What the peak must stay under: capacity minus the safety margin minus
/// memory the framework does not account for (the CUDA context, or on the CPU
/// the process's memory outside libtorch's allocator).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    pub capacity_bytes: u64,
    /// Fraction of the capacity kept free, e.g. 0.10.
    pub margin_fraction: f64,
    pub non_pytorch_bytes: u64,
    pub budget_bytes: u64,
}

impl Budget {
    pub fn new(capacity_bytes: u64, margin_fraction: f64, non_pytorch_bytes: u64) -> Budget {
        let margin = margin_bytes(capacity_bytes, margin_fraction);
        Budget {
            capacity_bytes,
            margin_fraction,
            non_pytorch_bytes,
            budget_bytes: capacity_bytes.saturating_sub(margin).saturating_sub(non_pytorch_bytes),
        }
    }

    /// The smallest capacity whose budget (nothing outside PyTorch) is at
    /// least `budget_bytes`: the inverse of [`Budget::new`].
    pub fn capacity_for(budget_bytes: u64, margin_fraction: f64) -> u64 {
        let mut capacity = (budget_bytes as f64 / (1.0 - margin_fraction)).floor() as u64;
        // Float rounding of the margin can leave the first guess a byte short.
        while Budget::new(capacity, margin_fraction, 0).budget_bytes < budget_bytes {
            capacity += 1;
        }
        capacity
    }

    /// The capacity less the margin.
    pub fn usable_bytes(&self) -> u64 {
        self.capacity_bytes.saturating_sub(margin_bytes(self.capacity_bytes, self.margin_fraction))
    }

    /// Bytes left free on the device when the peak is `peak_bytes`.
    pub fn headroom(&self, peak_bytes: f64) -> f64 {
        self.capacity_bytes as f64 - self.non_pytorch_bytes as f64 - peak_bytes
    }

    /// Where a peak falls: the one rule for "fits", the sweep's and check's.
    pub fn fit(&self, peak_bytes: u64) -> Fit {
        if peak_bytes <= self.budget_bytes {
            Fit::Fits
        } else if self.headroom(peak_bytes as f64) >= 0.0 {
            Fit::OverMargin
        } else {
            Fit::OverCapacity
        }
    }

    /// The largest margin, in whole tenths of a percent, that still admits
    /// `peak_bytes` (rounded down, so [`Budget::new`] with it admits the peak);
    /// `None` when the peak is over the capacity.
    pub fn margin_admitting(&self, peak_bytes: u64) -> Option<f64> {
        let free = self.headroom(peak_bytes as f64);
        if free < 0.0 || self.capacity_bytes == 0 {
            return None;
        }
        let mut tenths = (free / self.capacity_bytes as f64 * 1000.0).floor();
        while tenths > 0.0
            && Budget::new(self.capacity_bytes, tenths / 1000.0, self.non_pytorch_bytes).fit(peak_bytes) != Fit::Fits
        {
            tenths -= 1.0;
        }
        Some(tenths / 1000.0)
    }

    /// The same capacity and memory outside PyTorch with no margin kept.
    pub fn without_margin(&self) -> Budget {
        Budget::new(self.capacity_bytes, 0.0, self.non_pytorch_bytes)
    }
}

/// A peak against a [`Budget`]: within the budget (fits), inside the safety
/// margin (the capacity holds it, the margin does not), or over the capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
    Fits,
    OverMargin,
    OverCapacity,
}

impl Fit {
    /// In the user's words, as a trial line says it.
    pub fn words(self) -> &'static str {
        match self {
            Fit::Fits => "fits",
            Fit::OverMargin => "over the margin",
            Fit::OverCapacity => "over capacity",
        }
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_fits_within_the_budget_is_over_the_margin_inside_the_capacity_and_over_capacity_past_it() {
        // capacity 1000, margin 10% (100), 50 outside PyTorch: budget 850.
        let b = Budget::new(1000, 0.10, 50);
        assert_eq!(b.budget_bytes, 850);
        assert_eq!(
            [849, 850, 851, 950, 951].map(|p| b.fit(p)),
            [Fit::Fits, Fit::Fits, Fit::OverMargin, Fit::OverMargin, Fit::OverCapacity]
        );
        // 851 leaves 99 free (9.9%): a 9.9% margin admits it, 10% does not.
        assert_eq!(b.margin_admitting(851), Some(0.099));
        assert_eq!(Budget::new(1000, 0.099, 50).fit(851), Fit::Fits);
        assert_eq!(b.margin_admitting(950), Some(0.0));
        assert_eq!(b.margin_admitting(951), None);
        assert_eq!(b.without_margin().fit(950), Fit::Fits);
        // A margin that rounds up a byte is stepped down until it admits the peak.
        let odd = Budget::new(1001, 0.10, 0);
        let m = odd.margin_admitting(900).unwrap();
        assert_eq!(Budget::new(1001, m, 0).fit(900), Fit::Fits);
    }

    #[test]
    fn exact_line_is_recovered_with_r2_of_one() {
        let points: Vec<(u64, u64)> = [1u64, 2, 4, 8].iter().map(|&b| (b, 1000 + 250 * b)).collect();
        let fit = LinearFit::fit(&points).unwrap();
        assert!((fit.fixed_bytes - 1000.0).abs() < 1e-6);
        assert!((fit.per_sample_bytes - 250.0).abs() < 1e-9);
        assert_eq!(fit.r2, 1.0);
        assert_eq!(fit.points, 4);
        assert_eq!(fit.predict(16), 5000.0);
    }

    #[test]
    fn noisy_points_give_r2_below_one() {
        let fit = LinearFit::fit(&[(1, 100), (2, 260), (3, 290), (4, 420)]).unwrap();
        assert!(fit.r2 < 1.0 && fit.r2 > 0.9, "r2 = {}", fit.r2);
    }

    #[test]
    fn a_bend_at_small_batches_is_left_out_of_the_fit() {
        // Synthetic: peak = max(5000, 1000 + 1000 b), flat until batch 4.
        let points: Vec<(u64, u64)> = [1u64, 2, 4, 8, 16, 32].iter().map(|&b| (b, 5000.max(1000 + 1000 * b))).collect();
        assert!(LinearFit::fit(&points).unwrap().r2 < LINEAR_R2);
        let fit = LinearFit::fit_upper_regime(&points).unwrap();
        assert_eq!(fit.points, 4);
        assert!((fit.per_sample_bytes - 1000.0).abs() < 1e-9);
        assert!((fit.fixed_bytes - 1000.0).abs() < 1e-6);
    }

    #[test]
    fn a_curve_with_no_straight_run_uses_the_three_largest_batches() {
        let points: Vec<(u64, u64)> = [1u64, 2, 3, 4, 5].iter().map(|&b| (b, b * b * 100)).collect();
        let fit = LinearFit::fit_upper_regime(&points).unwrap();
        assert_eq!(fit.points, 3);
        assert!((fit.per_sample_bytes - 800.0).abs() < 1e-9);
    }

    #[test]
    fn the_robust_line_ignores_one_bad_reading() {
        let mut points: Vec<(u64, u64)> = [2u64, 8, 300].iter().map(|&b| (b, 1000 + 100 * b)).collect();
        points[1].1 += 50_000;
        let fit = LinearFit::robust(&points).unwrap();
        assert!((fit.per_sample_bytes - 100.0).abs() < 1e-9, "{fit:?}");
        assert!((fit.fixed_bytes - 1000.0).abs() < 1e-6, "{fit:?}");
        let exact = LinearFit::robust(&[(2, 1200), (8, 1800)]).unwrap();
        assert_eq!((exact.fixed_bytes, exact.per_sample_bytes, exact.r2), (1000.0, 100.0, 1.0));
    }

    #[test]
    fn one_batch_size_cannot_be_fitted() {
        assert_eq!(LinearFit::fit(&[(4, 10), (4, 12)]), Err(FitError::TooFewBatches(1)));
        assert_eq!(LinearFit::fit(&[]), Err(FitError::TooFewBatches(0)));
    }

    #[test]
    fn max_batch_is_the_floor_of_the_room_per_sample() {
        let fit = LinearFit::fit(&[(1, 1250), (2, 1500)]).unwrap();
        assert_eq!(fit.max_batch_within(3499), Some(9));
        assert_eq!(fit.max_batch_within(3500), Some(10));
        assert_eq!(fit.max_batch_within(1100), Some(0));
        assert_eq!(fit.max_batch_within(0), Some(0));
    }

    #[test]
    fn flat_memory_has_no_batch_limit() {
        let fit = LinearFit::fit(&[(1, 500), (8, 500)]).unwrap();
        assert_eq!(fit.r2, 1.0);
        assert_eq!(fit.max_batch_within(10_000), None);
    }

    #[test]
    fn a_capacity_chosen_from_a_line_gives_that_max_on_any_machine() {
        // The same step measured on two CPU families differs in both terms
        // (here: resnet18 3x32x32 SGD lines from an Intel and an AMD machine,
        // and both scaled far off); the derived capacity follows the line.
        let lines = [(134_327_936.0, 241_712.0), (182_000_000.0, 1_191_568.0), (1.0e6, 3000.0), (5.0e9, 9.9e7)];
        for (fixed, per_sample) in lines {
            for scale in [0.5, 1.0, 1.7] {
                let fit =
                    LinearFit { fixed_bytes: fixed * scale, per_sample_bytes: per_sample * scale, r2: 1.0, points: 2 };
                for (target, margin) in [(1, 0.0), (50, 0.10), (300, 0.25)] {
                    let capacity = fit.capacity_for_max(target, margin);
                    let budget = Budget::new(capacity, margin, 0).budget_bytes;
                    assert_eq!(fit.max_batch_within(budget), Some(target), "{fit:?} {target} {margin}");
                    // A measured peak a quarter sample off the line still lands on the target.
                    for off in [-0.25, 0.25] {
                        let shifted = LinearFit { fixed_bytes: fit.fixed_bytes + off * fit.per_sample_bytes, ..fit };
                        assert_eq!(shifted.max_batch_within(budget), Some(target), "{shifted:?} {target}");
                    }
                }
            }
        }
    }

    #[test]
    fn capacity_for_is_the_inverse_of_the_budget() {
        for (budget, margin) in [(0, 0.1), (850, 0.10), (123_456_789, 0.15), (7, 0.99)] {
            let capacity = Budget::capacity_for(budget, margin);
            assert!(Budget::new(capacity, margin, 0).budget_bytes >= budget);
            assert!(capacity == 0 || Budget::new(capacity - 1, margin, 0).budget_bytes < budget);
        }
    }

    #[test]
    fn budget_subtracts_margin_and_foreign_usage() {
        let b = Budget::new(1000, 0.10, 50);
        assert_eq!(b.budget_bytes, 850);
        assert_eq!(b.headroom(800.0), 150.0);
        assert_eq!(Budget::new(100, 0.5, 500).budget_bytes, 0);
    }
}
