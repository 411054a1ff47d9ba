//! After an out-of-memory error in the real job (`vramprobe exec`'s
//! watch): the batch at which the phase that failed would have fit, or why
//! no smaller batch would help.

/// What a smaller batch would have done for a job that ran out of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Smaller {
    /// This batch (smaller than the one that failed) would have fit.
    Fits(u64),
    /// No batch fits: even batch 1, scaled down, would need more than the budget.
    NoBatch,
    /// No batch fits: the plan's fixed part alone fills the budget.
    FixedFills,
    /// Most of what was held had been kept across the batches of a pass
    /// (outputs or logits gathered): it grows with the data, not the batch.
    KeptByPass,
    /// The memory needed is no more than the plan's fixed part.
    NotTheBatch,
}

/// Why the job failed, weighed: `kept_by_pass`, the bytes held that the
/// last pass over a loader kept from batch to batch, decides first when it
/// is at least half of what was needed; else [`fitting_batch`].
pub fn smaller_batch(batch: u64, needed: u64, kept_by_pass: Option<u64>, fixed: u64, budget: u64) -> Smaller {
    if kept_by_pass.is_some_and(|kept| kept.saturating_mul(2) >= needed) {
        return Smaller::KeptByPass;
    }
    match fitting_batch(batch, needed, fixed, budget) {
        Some(0) => Smaller::NoBatch,
        Some(b) => Smaller::Fits(b),
        None if budget <= fixed => Smaller::FixedFills,
        None => Smaller::NotTheBatch,
    }
}

/// The largest batch at which a phase that needed `needed` bytes at
/// `batch` (what it held when the allocation failed, plus what it asked
/// for) stays within `budget`, taking the part above the plan's `fixed`
/// bytes to grow in proportion to the batch, as the plan's line does.
/// None when the batch is not what made it fail (the need does not rise
/// above the fixed part) or when the fixed part alone passes the budget;
/// Some(0) when no batch fits.
pub fn fitting_batch(batch: u64, needed: u64, fixed: u64, budget: u64) -> Option<u64> {
    if batch == 0 || needed <= fixed || budget <= fixed {
        return None;
    }
    let scaled = u128::from(batch) * u128::from(budget - fixed) / u128::from(needed - fixed);
    Some(u64::try_from(scaled).unwrap_or(u64::MAX).min(batch.saturating_sub(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_part_above_the_fixed_bytes_scales_with_the_batch() {
        // 64 samples needed 100 + 64 * 10 = 740 bytes; 420 allows 32.
        assert_eq!(fitting_batch(64, 740, 100, 420), Some(32));
        // Never the batch that failed, even when the budget is just enough.
        assert_eq!(fitting_batch(64, 740, 100, 740), Some(63));
        assert_eq!(fitting_batch(64, 740, 100, 105), Some(0));
        assert_eq!(fitting_batch(64, 90, 100, 420), None);
        assert_eq!(fitting_batch(64, 740, 500, 400), None);
        assert_eq!(fitting_batch(0, 740, 100, 420), None);
    }

    #[test]
    fn what_a_pass_kept_is_not_the_batchs() {
        assert_eq!(smaller_batch(64, 740, Some(400), 100, 420), Smaller::KeptByPass);
        assert_eq!(smaller_batch(64, 740, Some(300), 100, 420), Smaller::Fits(32));
        assert_eq!(smaller_batch(64, 740, None, 100, 105), Smaller::NoBatch);
        assert_eq!(smaller_batch(64, 740, None, 500, 400), Smaller::FixedFills);
        assert_eq!(smaller_batch(64, 90, None, 100, 420), Smaller::NotTheBatch);
    }
}
