//! A CPU run's reserved bytes on a GPU at batches it did not run: the last
//! step's trace of its two largest batches scaled to each larger batch
//! ([`crate::analyze::trace_scale`]) and replayed through the caching
//! allocator's model ([`crate::record::caching_allocator`]).
use crate::analyze::device_memory::CurvePoint;
use crate::analyze::trace_scale::Scaling;
use crate::record::caching_allocator::CachingAllocator;
use crate::record::trial::StepTrace;

/// Steps replayed per batch: the first fills an empty cache, the later
/// ones show what the cache keeps from step to step.
const REPLAYED_STEPS: usize = 3;

/// The curve stops past this many reserved bytes (beyond any GPU's memory).
const UP_TO_BYTES: u64 = 1 << 40;

/// The most batches the curve goes to past the largest run.
const MAX_POINTS: usize = 40;

/// The peak reserved bytes of `trace` replayed as steady training steps.
fn replay(trace: &StepTrace) -> u64 {
    let mut model = CachingAllocator::new();
    let events: Vec<(u64, i64)> = trace.events.iter().map(|e| (e.0, e.1)).collect();
    (0..REPLAYED_STEPS)
        .filter_map(|_| model.replay_step(trace.live.iter().copied(), events.iter().copied()).ok())
        .max()
        .unwrap_or(0)
}

/// The curve, and the two batches it scales, from each batch's trace (the
/// batches that fit). `None` with fewer than two batches or when their
/// traces are not the same step.
pub fn reserved_curve(traces: &[(u64, StepTrace)]) -> Option<(Vec<CurvePoint>, [u64; 2])> {
    let mut by_batch: Vec<&(u64, StepTrace)> = traces.iter().collect();
    by_batch.sort_by_key(|(b, _)| *b);
    by_batch.dedup_by_key(|(b, _)| *b);
    let [(b1, smaller), (b2, larger)] = by_batch.get(by_batch.len().checked_sub(2)?..)? else { return None };
    let scaling = Scaling::new(smaller, *b1, larger, *b2)?;
    let mut points: Vec<CurvePoint> =
        by_batch.iter().map(|(batch, t)| CurvePoint { batch: *batch, reserved_bytes: replay(t) }).collect();
    // 1.5x and 2x steps: 2, 3, 4, 6, 8, 12 ... times the largest batch run.
    let ladder = (1..).flat_map(|k| [2u64 << (k - 1), 3u64 << (k - 1)]).map(|m| m * b2);
    for target in ladder.take(MAX_POINTS) {
        let reserved_bytes = replay(&scaling.at(target));
        points.push(CurvePoint { batch: target, reserved_bytes });
        if reserved_bytes > UP_TO_BYTES {
            break;
        }
    }
    Some((never_kinder(points), [*b1, *b2]))
}

/// The curve never falls as the batch grows: a point below one at a
/// smaller batch takes that one's bytes. A CPU kernel's scratchpad (oneDNN
/// takes one at some shapes and not at others, and its size does not follow
/// the batch) can make one batch's trace heavier than a larger batch's; the
/// prediction keeps the heavier, never the kinder.
fn never_kinder(mut points: Vec<CurvePoint>) -> Vec<CurvePoint> {
    let mut highest = 0;
    for p in &mut points {
        highest = highest.max(p.reserved_bytes);
        p.reserved_bytes = highest;
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step with a weight of 1 GiB held throughout, one activation of
    /// 16 MiB per sample, and an optimizer temporary of 2 GiB.
    fn step(batch: u64) -> StepTrace {
        let act = (batch << 24) as i64;
        StepTrace {
            live: vec![(1, 1 << 30)],
            events: vec![(2, act, 0), (2, -act, 1), (3, 2 << 30, 2), (3, -(2 << 30), 2)],
        }
    }

    #[test]
    fn the_curve_follows_the_optimizer_s_flat_peak_then_the_activations() {
        let (points, from) = reserved_curve(&[(4, step(4)), (2, step(2)), (8, step(8))]).unwrap();
        assert_eq!(from, [4, 8]);
        let at = |b: u64| points.iter().find(|p| p.batch == b).map(|p| p.reserved_bytes);
        // Small batches: the 2 GiB temporary does not fit the activation's
        // freed block, so it gets its own segment.
        assert_eq!(at(8), Some((3 << 30) + (128 << 20)));
        // 256 samples: 4 GiB of activation; the temporary fits in its freed block.
        assert_eq!(at(256), Some(5 << 30));
        assert!(points.windows(2).all(|w| w[0].batch < w[1].batch));
    }

    #[test]
    fn a_heavier_smaller_batch_holds_the_curve_up() {
        let at = |batch, reserved_bytes| CurvePoint { batch, reserved_bytes };
        let points = never_kinder(vec![at(8, 300), at(16, 200), at(32, 250), at(64, 400)]);
        let bytes: Vec<u64> = points.iter().map(|p| p.reserved_bytes).collect();
        assert_eq!(bytes, [300, 300, 300, 400]);
    }

    #[test]
    fn no_curve_from_one_batch_or_from_different_steps() {
        assert!(reserved_curve(&[(4, step(4))]).is_none());
        let other = StepTrace { live: vec![], events: vec![(9, 1, 7), (9, -1, 7)] };
        assert!(reserved_curve(&[(4, step(4)), (8, other)]).is_none());
    }
}
