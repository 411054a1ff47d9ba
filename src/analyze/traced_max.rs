//! Pure: the largest batch within the budget, read off the trials' own
//! step traces. A line through two trials' peaks misses where the moment of
//! the peak moves with the batch (at small batches the weights, gradients
//! and optimizer state peak together; at large ones the activations do), so
//! the curve bends between the first probes and the max. Each op's bytes in
//! the trace grow along their own line instead: replaying the scaled step
//! gives its peak at any batch, wherever the peak falls, so the search can
//! aim its next trial at the max itself.
use crate::record::trial::StepTrace;

/// A trial's last step as the search reads it: its batch, its trace and the
/// peak the trial measured (over all its steps, in the budget's units).
pub struct TracedTrial<'a> {
    pub batch: u64,
    pub trace: &'a StepTrace,
    pub peak_bytes: u64,
}

/// The step's peak on the CPU: what was live when it began plus the most
/// its allocations and frees add to it.
pub fn replayed_peak(trace: &StepTrace) -> u64 {
    OpRuns::of(trace).peak()
}

/// The two trials whose traces are scaled: those nearest the budget's
/// crossing (the largest within it and the smallest past it), else the two
/// largest within it. Sorted by batch.
fn nearest_pair<'t, 'a>(trials: &'t [TracedTrial<'a>], budget: u64) -> Option<[&'t TracedTrial<'a>; 2]> {
    let mut sorted: Vec<&TracedTrial> = trials.iter().collect();
    sorted.sort_by_key(|t| t.batch);
    sorted.dedup_by_key(|t| t.batch);
    let within: Vec<&TracedTrial> = sorted.iter().copied().filter(|t| t.peak_bytes <= budget).collect();
    let past =
        sorted.iter().copied().find(|t| t.peak_bytes > budget && within.last().is_some_and(|w| w.batch < t.batch));
    match (within.as_slice(), past) {
        ([.., w], Some(p)) => Some([w, p]),
        ([.., a, b], None) => Some([a, b]),
        _ => None,
    }
}

/// A step as the ops that ran it: for each run of consecutive events by
/// one op, the bytes it leaves allocated (net) and the most it holds above
/// where it began (its own peak, a temporary's included). How a kernel
/// splits its work into allocations can change with the batch (more,
/// smaller pieces at large ones), so events do not align one to one across
/// batches; the ops that run, in order, do.
#[derive(Debug, PartialEq)]
struct OpRuns {
    /// What was live when the step began.
    start: i64,
    /// `(op, net bytes, highest bytes above the run's start)`.
    runs: Vec<(i32, i64, i64)>,
}

impl OpRuns {
    fn of(trace: &StepTrace) -> OpRuns {
        let mut runs: Vec<(i32, i64, i64)> = Vec::new();
        for &(_, bytes, op) in &trace.events {
            match runs.last_mut() {
                Some(run) if run.0 == op => {
                    run.1 += bytes;
                    run.2 = run.2.max(run.1);
                }
                _ => runs.push((op, bytes, bytes.max(0))),
            }
        }
        OpRuns { start: trace.live.iter().map(|l| l.1 as i64).sum(), runs }
    }

    /// The replayed peak: each run's own high on top of what the runs
    /// before it left (a run's high is never below its start).
    fn peak(&self) -> u64 {
        let (mut held, mut peak) = (self.start, self.start);
        for &(_, net, high) in &self.runs {
            peak = peak.max(held + high);
            held += net;
        }
        peak.max(0) as u64
    }

    fn same_ops(&self, other: &OpRuns) -> bool {
        self.runs.len() == other.runs.len() && self.runs.iter().zip(&other.runs).all(|(a, b)| a.0 == b.0)
    }
}

/// Fewer op runs than this: the step ran inside one op (a trainer's
/// `optimizer.step(closure)` wraps forward and backward), whose one run
/// hides where in it the peak falls, and so when that moves with the
/// batch. The lines through the trials' phase peaks place probes instead.
const MIN_OPS: usize = 16;

/// One side of the scaling: a trial's batch, its step's ops, and by how
/// much its measured peak exceeds its traced step's.
struct Side {
    batch: u64,
    ops: OpRuns,
    correction: f64,
}

impl Side {
    fn of(t: &TracedTrial) -> Side {
        let ops = OpRuns::of(t.trace);
        let correction = t.peak_bytes as f64 - ops.peak() as f64;
        Side { batch: t.batch, ops, correction }
    }
}

/// `y` at `batch` on the line through (`a`'s batch, `ya`) and (`b`'s, `yb`).
fn along(a: &Side, b: &Side, ya: f64, yb: f64, batch: u64) -> f64 {
    yb + (yb - ya) / (b.batch as f64 - a.batch as f64) * (batch as f64 - b.batch as f64)
}

/// The step's peak at `batch`, each op's bytes and the correction carried
/// along its own line.
fn peak_at(a: &Side, b: &Side, batch: u64) -> f64 {
    let line = |ya: i64, yb: i64| along(a, b, ya as f64, yb as f64, batch);
    let mut held = line(a.ops.start, b.ops.start);
    let mut peak = held;
    for (x, y) in a.ops.runs.iter().zip(&b.ops.runs) {
        peak = peak.max(held + line(x.2, y.2));
        held += line(x.1, y.1);
    }
    peak + along(a, b, a.correction, b.correction, batch)
}

/// The largest batch up to `cap` whose step, scaled op by op from the
/// traces of the trials nearest the crossing, stays within `budget` (0:
/// none). Each trial's measured peak corrects its replay (a trial's peak
/// may fall in an earlier step than the traced one). `None` when fewer
/// than two trials have traces, or theirs are not the same ops.
pub fn traced_max(trials: &[TracedTrial], budget: u64, cap: u64) -> Option<u64> {
    let [a, b] = nearest_pair(trials, budget)?;
    let (a, b) = (Side::of(a), Side::of(b));
    if !a.ops.same_ops(&b.ops) || a.ops.runs.len() < MIN_OPS {
        return None;
    }
    Some(last_within(|batch| peak_at(&a, &b, batch) <= budget as f64, a.batch, cap))
}

/// The largest batch in `1..=cap` for which `fits` holds (0: none), taking
/// memory to grow with the batch: galloping up from `from`, then bisecting.
fn last_within(fits: impl Fn(u64) -> bool, from: u64, cap: u64) -> u64 {
    let from = from.clamp(1, cap.max(1));
    let (mut lo, mut hi) = if fits(from) { (from, None) } else { (0, Some(from)) };
    while hi.is_none() {
        if lo >= cap {
            return cap;
        }
        let next = lo.saturating_mul(2).min(cap);
        if fits(next) {
            lo = next;
        } else {
            hi = Some(next);
        }
    }
    let mut hi = hi.unwrap_or(cap);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A synthetic step (test data, not a measurement): weights of `weights`
    /// bytes live throughout; an activation of `per_sample` bytes a sample
    /// freed before a flat temporary of `flat` bytes (the optimizer's), so
    /// the peak is the flat one at small batches and the activation's at
    /// large ones.
    fn step(batch: u64, weights: u64, per_sample: u64, flat: u64) -> StepTrace {
        let act = (per_sample * batch) as i64;
        StepTrace {
            live: vec![(1, weights)],
            events: vec![(2, act, 0), (2, -act, 1), (3, flat as i64, 2), (3, -(flat as i64), 2)],
        }
    }

    fn long(t: StepTrace) -> StepTrace {
        // Enough ops for the traces to be scaled at all (see MIN_OPS).
        let mut events: Vec<_> = (100..140).flat_map(|id| [(id, 1, id as i32), (id, -1, id as i32)]).collect();
        events.extend(t.events);
        StepTrace { live: t.live, events }
    }

    #[test]
    fn the_replayed_peak_is_what_was_live_plus_the_running_high() {
        assert_eq!(replayed_peak(&step(4, 100, 10, 30)), 140);
        assert_eq!(replayed_peak(&step(2, 100, 10, 30)), 130);
    }

    #[test]
    fn the_max_follows_the_moment_the_peak_moves_to() {
        // Flat 1000 on top up to batch 100; past it, 10 bytes a sample.
        let (t4, t32) = (long(step(4, 500, 10, 1000)), long(step(32, 500, 10, 1000)));
        let trials = [
            TracedTrial { batch: 4, peak_bytes: replayed_peak(&t4), trace: &t4 },
            TracedTrial { batch: 32, peak_bytes: replayed_peak(&t32), trace: &t32 },
        ];
        // A line through the two peaks is flat: it would never cross. The
        // traces find the activation's crossing: 500 + 10 b <= 3000.
        assert_eq!(trials[0].peak_bytes, trials[1].peak_bytes);
        assert_eq!(traced_max(&trials, 3000, 10_000), Some(250));
        assert_eq!(traced_max(&trials, 3000, 200), Some(200));
        // Neither trial within the budget: nothing to scale from.
        assert_eq!(traced_max(&trials, 1400, 10_000), None);
    }

    #[test]
    fn the_measured_peaks_correct_the_replay_and_the_nearest_traces_are_used() {
        let traces: Vec<(u64, StepTrace)> = [4, 32, 300].iter().map(|&b| (b, long(step(b, 500, 10, 0)))).collect();
        // Every trial measured 40 bytes more than its traced step (an
        // earlier step's peak): the max comes down by 4 batches.
        let trials: Vec<TracedTrial> = traces
            .iter()
            .map(|(b, t)| TracedTrial { batch: *b, trace: t, peak_bytes: replayed_peak(t) + 40 })
            .collect();
        assert_eq!(traced_max(&trials, 3000, 10_000), Some(246));
        // 300 is past the budget: 32 and 300 bracket it and are the pair.
        assert_eq!(nearest_pair(&trials, 3000).map(|[a, b]| (a.batch, b.batch)), Some((32, 300)));
        assert!(traced_max(&trials[..1], 3000, 10_000).is_none());
    }

    #[test]
    fn a_step_inside_one_op_or_of_other_ops_is_not_scaled() {
        let (t4, t32) = (step(4, 500, 10, 1000), long(step(32, 500, 10, 1000)));
        let trials = [
            TracedTrial { batch: 4, peak_bytes: replayed_peak(&t4), trace: &t4 },
            TracedTrial { batch: 32, peak_bytes: replayed_peak(&t32), trace: &t32 },
        ];
        assert!(traced_max(&trials, 3000, 10_000).is_none());
        let (t4, t32) = (step(4, 500, 10, 1000), step(32, 500, 10, 1000));
        let trials = [
            TracedTrial { batch: 4, peak_bytes: replayed_peak(&t4), trace: &t4 },
            TracedTrial { batch: 32, peak_bytes: replayed_peak(&t32), trace: &t32 },
        ];
        assert!(traced_max(&trials, 3000, 10_000).is_none());
    }

    #[test]
    fn last_within_finds_the_boundary_from_either_side() {
        assert_eq!(last_within(|b| b <= 37, 4, 1000), 37);
        assert_eq!(last_within(|b| b <= 37, 64, 1000), 37);
        assert_eq!(last_within(|b| b <= 37, 4, 20), 20);
        assert_eq!(last_within(|_| false, 4, 1000), 0);
    }
}
