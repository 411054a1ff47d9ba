//! Pure: a training step's trace at a batch that was not run, from the
//! traces of two that were. A step makes the same allocations in the same
//! order at every batch (the same ops run); only their sizes change, each
//! linearly with the batch (activations grow, weights and optimizer state
//! do not). So the two traces are aligned event by event, by the op that
//! made each and whether it allocates or frees, and every size is carried
//! along its own line to the target batch. An event only one trace has (a
//! kernel's scratch at one size) keeps the larger batch's size.
use crate::record::trial::StepTrace;

/// How far ahead the alignment looks for the next matching event after a
/// mismatch (an event only one trace has).
const RESYNC_WINDOW: usize = 16;

/// For each event of `larger`, the index of its counterpart in `smaller`,
/// or `None` where it has none. Events match on (op, allocates).
pub fn align(smaller: &StepTrace, larger: &StepTrace) -> Vec<Option<usize>> {
    let key = |e: &(u64, i64, i32)| (e.2, e.1 >= 0);
    let (a, b) = (&smaller.events, &larger.events);
    let mut pairs = vec![None; b.len()];
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if key(&a[i]) == key(&b[j]) {
            pairs[j] = Some(i);
            i += 1;
            j += 1;
            continue;
        }
        // The nearest resync: skip `da` events of `smaller` and `db` of `larger`.
        let resync = (1..=RESYNC_WINDOW)
            .flat_map(|total| (0..=total).map(move |da| (da, total - da)))
            .find(|&(da, db)| i + da < a.len() && j + db < b.len() && key(&a[i + da]) == key(&b[j + db]));
        match resync {
            Some((da, db)) => {
                i += da;
                j += db;
            }
            None => {
                i += 1;
                j += 1;
            }
        }
    }
    pairs
}

/// The share of `larger`'s events that found a counterpart: below
/// [`MIN_MATCHED`] the traces are not the same step and are not scaled.
pub fn matched_share(pairs: &[Option<usize>]) -> f64 {
    if pairs.is_empty() {
        return 0.0;
    }
    pairs.iter().filter(|p| p.is_some()).count() as f64 / pairs.len() as f64
}

pub const MIN_MATCHED: f64 = 0.95;

/// `bytes` at `target`, on the line through (`b1`, `s1`) and (`b2`, `s2`),
/// never below 0.
fn along(s1: u64, b1: u64, s2: u64, b2: u64, target: u64) -> u64 {
    let slope = (s2 as f64 - s1 as f64) / (b2 as f64 - b1 as f64);
    (s2 as f64 + slope * (target as f64 - b2 as f64)).round().max(0.0) as u64
}

/// Two traces of the same step, aligned, ready to give the step at any batch.
pub struct Scaling<'a> {
    smaller: &'a StepTrace,
    b1: u64,
    larger: &'a StepTrace,
    b2: u64,
    pairs: Vec<Option<usize>>,
    /// `(address, bytes at b1, bytes at b2)` of what was live when the step
    /// began, paired by size order (weights and state: the same set); the
    /// larger trace's alone where the sets differ.
    live: Vec<(u64, u64, u64)>,
}

impl<'a> Scaling<'a> {
    /// `smaller` at batch `b1`, `larger` at `b2 > b1`. `None` when the
    /// traces do not align (see [`MIN_MATCHED`]).
    pub fn new(smaller: &'a StepTrace, b1: u64, larger: &'a StepTrace, b2: u64) -> Option<Scaling<'a>> {
        let pairs = align(smaller, larger);
        if b2 <= b1 || matched_share(&pairs) < MIN_MATCHED {
            return None;
        }
        let mut live_a: Vec<u64> = smaller.live.iter().map(|l| l.1).collect();
        let mut live_b = larger.live.clone();
        live_a.sort_unstable();
        live_b.sort_unstable_by_key(|l| l.1);
        let live = if live_a.len() == live_b.len() {
            live_b.iter().zip(&live_a).map(|(&(id, s2), &s1)| (id, s1, s2)).collect()
        } else {
            live_b.iter().map(|&(id, s2)| (id, s2, s2)).collect()
        };
        Some(Scaling { smaller, b1, larger, b2, pairs, live })
    }

    /// The step at batch `target`, with the larger trace's addresses.
    pub fn at(&self, target: u64) -> StepTrace {
        let (b1, b2) = (self.b1, self.b2);
        let live = self.live.iter().map(|&(id, s1, s2)| (id, along(s1, b1, s2, b2, target))).collect();
        let mut sizes = std::collections::HashMap::new();
        let events = self
            .larger
            .events
            .iter()
            .zip(&self.pairs)
            .map(|(&(id, size, op), pair)| {
                if size >= 0 {
                    let s = match pair.map(|i| self.smaller.events[i].1) {
                        Some(s1) if s1 >= 0 => along(s1 as u64, b1, size as u64, b2, target),
                        _ => size as u64,
                    };
                    sizes.insert(id, s);
                    (id, s as i64, op)
                } else {
                    (id, -(sizes.get(&id).copied().unwrap_or(size.unsigned_abs()) as i64), op)
                }
            })
            .collect();
        StepTrace { live, events }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(live: &[u64], events: &[(u64, i64, i32)]) -> StepTrace {
        StepTrace {
            live: live.iter().enumerate().map(|(i, s)| (1000 + i as u64, *s)).collect(),
            events: events.to_vec(),
        }
    }

    #[test]
    fn each_size_is_carried_along_its_own_line_and_weights_stay() {
        // A weight of 100 at both batches; an activation of 10 per sample; a
        // gradient-sized temporary of 50 at both.
        let b4 = trace(&[100], &[(1, 40, 0), (2, 50, 1), (2, -50, 1), (1, -40, 2)]);
        let b8 = trace(&[100], &[(7, 80, 0), (8, 50, 1), (8, -50, 1), (7, -80, 2)]);
        let at32 = Scaling::new(&b4, 4, &b8, 8).unwrap().at(32);
        assert_eq!(at32.live, vec![(1000, 100)]);
        assert_eq!(at32.events, vec![(7, 320, 0), (8, 50, 1), (8, -50, 1), (7, -320, 2)]);
    }

    #[test]
    fn an_event_only_one_trace_has_is_skipped_and_keeps_its_size() {
        let b4 = trace(&[], &[(1, 40, 0), (1, -40, 0), (2, 4, 1), (2, -4, 1)]);
        // At batch 8 op 5 adds a scratch allocation between the two.
        let b8 = trace(&[], &[(1, 80, 0), (1, -80, 0), (9, 3, 5), (9, -3, 5), (2, 8, 1), (2, -8, 1)]);
        assert_eq!(align(&b4, &b8), vec![Some(0), Some(1), None, None, Some(2), Some(3)]);
        // Too few events matched in so short a trace; in a long one, scaled.
        assert!(Scaling::new(&b4, 4, &b8, 8).is_none());
        let long = |t: &StepTrace| {
            let mut events: Vec<_> = (100..140).flat_map(|id| [(id, 1, 2), (id, -1, 2)]).collect();
            events.extend(&t.events);
            StepTrace { live: vec![], events }
        };
        let at16 = Scaling::new(&long(&b4), 4, &long(&b8), 8).unwrap().at(16);
        assert_eq!(at16.events[80..], [(1, 160, 0), (1, -160, 0), (9, 3, 5), (9, -3, 5), (2, 16, 1), (2, -16, 1)]);
    }

    #[test]
    fn traces_of_different_steps_are_not_scaled() {
        let a = trace(&[], &[(1, 40, 0), (1, -40, 0)]);
        let b = trace(&[], &[(1, 40, 3), (1, -40, 3)]);
        assert!(Scaling::new(&a, 4, &b, 8).is_none());
        assert!(Scaling::new(&a, 8, &a, 8).is_none());
    }
}
