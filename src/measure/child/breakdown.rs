//! What a step's peak is made of: bytes by category (parameters, gradients,
//! optimizer state, activations, temporaries, inputs, other) at the moment
//! the peak is reached, the phase and op that reach it, and the step's
//! memory timeline by category.
//!
//! Built-in workloads: [`from_ledger`] classifies every allocation the shim's
//! ledger logged during the step by what vramprobe itself built: the
//! parameters', gradients', optimizer state's and inputs' own addresses, and
//! for the rest the phase it was made in and whether it outlived that phase.
//! Command mode: the hook sends the same record, classified by torch's own
//! memory profile (`torch.profiler._memory_profiler`). Either way the
//! categories sum to the measured peak exactly: what no rule explains is
//! "other", never a guess.
use std::collections::HashMap;

use crate::measure::child::shim::{LedgerEvent, LedgerLive};
use crate::measure::failure::Phase;
use crate::record::breakdown::{Breakdown, Category, CategoryBytes, Method, PeakPhase, TimelinePoint, TIMELINE_POINTS};
use crate::record::trial::PhasePeaks;

/// A ledger phase id's phase in the breakdown.
fn phase_label(id: i32) -> Option<PeakPhase> {
    [Phase::Data, Phase::ZeroGrad, Phase::Forward, Phase::Backward, Phase::Optimizer]
        .into_iter()
        .find(|p| p.ledger_id() == id)
        .and_then(|p| match p {
            Phase::Data => Some(PeakPhase::Data),
            Phase::ZeroGrad => Some(PeakPhase::ZeroGrad),
            Phase::Forward => Some(PeakPhase::Forward),
            Phase::Backward => Some(PeakPhase::Backward),
            Phase::Optimizer => Some(PeakPhase::Optimizer),
            Phase::Build => None,
        })
}

/// What vramprobe knows about the tensors of one step, with the log
/// positions ([`crate::measure::child::shim::ledger_events_len`]) where it looked.
#[derive(Debug, Clone, Default)]
pub struct Marks {
    /// Parameter addresses (live before the step).
    pub parameters: Vec<u64>,
    /// The previous step's gradients (live before the step, until zero_grad frees them).
    pub previous_gradients: Vec<u64>,
    /// Input and label addresses, and the log position after the data phase.
    pub inputs: Vec<u64>,
    pub data_end: usize,
    /// The log position after the forward pass (the loss included).
    pub forward_end: usize,
    /// Gradient addresses after backward, and its log position.
    pub gradients: Vec<u64>,
    pub backward_end: usize,
    /// Optimizer state addresses at the step's end, and its log position.
    pub optimizer_state: Vec<u64>,
    pub step_end: usize,
}

/// One allocation's life within the step's log: born and freed are event
/// positions (None: before the step, or still live at its end).
struct Life {
    ptr: u64,
    born: Option<usize>,
    freed: Option<usize>,
    phase: i32,
}

impl Life {
    /// Live just after the first `mark` events.
    fn live_at(&self, mark: usize) -> bool {
        self.born.is_none_or(|b| b < mark) && self.freed.is_none_or(|f| f >= mark)
    }
}

fn category_of(life: &Life, marks: &Marks) -> Category {
    let has = |set: &[u64]| set.contains(&life.ptr);
    if life.born.is_none() && has(&marks.parameters) {
        Category::Parameters
    } else if life.born.is_none() && has(&marks.previous_gradients) {
        Category::Gradients
    } else if life.live_at(marks.step_end) && has(&marks.optimizer_state) {
        Category::OptimizerState
    } else if life.live_at(marks.backward_end) && has(&marks.gradients) {
        Category::Gradients
    } else if life.live_at(marks.data_end) && has(&marks.inputs) {
        Category::Inputs
    } else if life.born.is_some() && life.phase == Phase::Forward.ledger_id() && life.live_at(marks.forward_end) {
        Category::Activations
    } else if life.born.is_none() {
        Category::Other
    } else {
        Category::Temporaries
    }
}

/// Breaks a step's peak down from the ledger's log. `measured_peak` is the
/// meter's peak for the step: what the log does not account for is other.
pub fn from_ledger(
    baseline: &[LedgerLive],
    events: &[LedgerEvent],
    marks: &Marks,
    measured_peak: u64,
    op_name: impl Fn(i32) -> Option<String>,
) -> Breakdown {
    // Each event's allocation: the lives, and which life each event touches.
    let mut lives: Vec<Life> = Vec::with_capacity(baseline.len() + events.len() / 2);
    let mut live_by_ptr: HashMap<u64, usize> = HashMap::new();
    let mut sizes: Vec<i64> = Vec::with_capacity(lives.capacity());
    for b in baseline {
        live_by_ptr.insert(b.ptr, lives.len());
        lives.push(Life { ptr: b.ptr, born: None, freed: None, phase: 0 });
        sizes.push(b.size);
    }
    let mut touched: Vec<Option<usize>> = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        if e.size > 0 {
            live_by_ptr.insert(e.ptr, lives.len());
            lives.push(Life { ptr: e.ptr, born: Some(i), freed: None, phase: e.phase });
            sizes.push(e.size);
            touched.push(Some(lives.len() - 1));
        } else {
            let life = live_by_ptr.remove(&e.ptr);
            if let Some(l) = life {
                lives[l].freed = Some(i);
            }
            touched.push(life);
        }
    }
    let categories: Vec<Category> = lives.iter().map(|l| category_of(l, marks)).collect();

    // Replay the step by category; find the (first) highest moment.
    let mut now = CategoryBytes::default();
    for (l, &size) in sizes.iter().enumerate().take(baseline.len()) {
        now.add(categories[l], size);
    }
    let mut points = vec![(0i64, now)];
    let (mut peak, mut peak_at) = (now, None::<usize>);
    for (i, e) in events.iter().enumerate() {
        // A free of something never seen (made before the ledger) moves nothing here.
        if let Some(l) = touched[i] {
            now.add(categories[l], e.size);
        }
        points.push((e.ns, now));
        if now.total() > peak.total() {
            (peak, peak_at) = (now, Some(i));
        }
    }
    // What the log cannot explain (made before it, or on a thread it does not see).
    let mut bytes = peak;
    let known = bytes.total();
    bytes.add(Category::Other, measured_peak as i64 - known as i64);
    let unattributed_bytes = measured_peak.saturating_sub(known);
    let peak_event = peak_at.map(|i| &events[i]);
    Breakdown {
        peak_bytes: measured_peak.max(known),
        bytes,
        unattributed_bytes,
        phase: peak_event.and_then(|e| phase_label(e.phase)),
        op: peak_event.filter(|e| e.op >= 0).and_then(|e| op_name(e.op)),
        source: None,
        peak_ms: peak_event.map_or(0.0, |e| e.ns as f64 / 1e6),
        method: Method::Ledger,
        timeline: downsample(&points, peak_at.map_or(0, |i| i + 1)),
    }
}

/// The step's peak on either side of the optimizer step, replayed from the
/// ledger's log: `optimizer_start` is the log position where the optimizer
/// step began ([`Marks::backward_end`]). The bytes held at that moment
/// count for both sides. Cheap (one pass, no classification): every
/// search trial reports it, where the breakdown is only asked of one.
pub fn phase_peaks(baseline: &[LedgerLive], events: &[LedgerEvent], optimizer_start: usize) -> PhasePeaks {
    let mut live: HashMap<u64, i64> = baseline.iter().map(|b| (b.ptr, b.size)).collect();
    let mut held: i64 = baseline.iter().map(|b| b.size).sum();
    let (mut before, mut during) = (held, 0i64);
    for (i, e) in events.iter().enumerate() {
        if i == optimizer_start {
            during = held;
        }
        if e.size > 0 {
            live.insert(e.ptr, e.size);
            held += e.size;
        } else if let Some(size) = live.remove(&e.ptr) {
            // A free of something never seen (made before the ledger) moves nothing.
            held -= size;
        }
        if i < optimizer_start {
            before = before.max(held);
        } else {
            during = during.max(held);
        }
    }
    if optimizer_start >= events.len() {
        during = during.max(held);
    }
    PhasePeaks { forward_backward_bytes: before.max(0) as u64, optimizer_bytes: during.max(0) as u64 }
}

/// At most [`TIMELINE_POINTS`] of `points` (nanoseconds, bytes): the first,
/// the last, the one at `peak` and each time bucket's highest.
pub fn downsample(points: &[(i64, CategoryBytes)], peak: usize) -> Vec<TimelinePoint> {
    let Some(&(last_ns, _)) = points.last() else { return Vec::new() };
    let span = last_ns.max(1) as f64;
    let buckets = TIMELINE_POINTS - 3;
    let mut best: Vec<Option<usize>> = vec![None; buckets];
    for (i, (ns, b)) in points.iter().enumerate() {
        let k = ((*ns as f64 / span) * buckets as f64).floor().clamp(0.0, (buckets - 1) as f64) as usize;
        if best[k].is_none_or(|j| points[j].1.total() < b.total()) {
            best[k] = Some(i);
        }
    }
    let mut keep: Vec<usize> = best.into_iter().flatten().collect();
    keep.extend([0, points.len() - 1, peak.min(points.len() - 1)]);
    keep.sort_unstable();
    keep.dedup();
    keep.into_iter().map(|i| TimelinePoint(points[i].0 as f64 / 1e6, points[i].1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_splits_at_the_optimizer_step() {
        let (baseline, events, marks) = step();
        let p = phase_peaks(&baseline, &events, marks.backward_end);
        let b = from_ledger(&baseline, &events, &marks, 0, |_| None);
        // The larger side is the step's peak; the optimizer's side starts
        // from what backward left held.
        assert_eq!(p.forward_backward_bytes.max(p.optimizer_bytes), b.peak_bytes);
        let held_after_backward: i64 = baseline.iter().map(|l| l.size).sum::<i64>()
            + events[..marks.backward_end].iter().map(|e| e.size).sum::<i64>();
        assert_eq!(p.optimizer_bytes as i64, held_after_backward + 7, "the optimizer's 7 B scratch on top");
    }

    fn ev(ptr: u64, size: i64, phase: Phase) -> LedgerEvent {
        LedgerEvent { ptr, size, ns: 0, op: -1, phase: phase.ledger_id() }
    }

    /// A tiny step: parameter 100 B and momentum 100 B before it; input 10;
    /// forward saves 40 and frees a 5 B scratch; backward makes the 100 B
    /// gradient and a 30 B intermediate gradient, frees the saved 40; the
    /// optimizer makes and frees a 7 B scratch; the step frees its input.
    fn step() -> (Vec<LedgerLive>, Vec<LedgerEvent>, Marks) {
        let baseline = vec![LedgerLive { ptr: 1, size: 100 }, LedgerLive { ptr: 2, size: 100 }];
        let events = vec![
            ev(10, 10, Phase::Data),       // 0 input
            ev(20, 40, Phase::Forward),    // 1 saved activation
            ev(21, 5, Phase::Forward),     // 2 scratch
            ev(21, -5, Phase::Forward),    // 3
            ev(30, 100, Phase::Backward),  // 4 gradient
            ev(31, 30, Phase::Backward),   // 5 intermediate gradient: peak 380 here
            ev(20, -40, Phase::Backward),  // 6
            ev(31, -30, Phase::Backward),  // 7
            ev(40, 7, Phase::Optimizer),   // 8
            ev(40, -7, Phase::Optimizer),  // 9
            ev(10, -10, Phase::Optimizer), // 10
        ];
        let marks = Marks {
            parameters: vec![1],
            previous_gradients: Vec::new(),
            inputs: vec![10],
            data_end: 1,
            forward_end: 4,
            gradients: vec![30],
            backward_end: 8,
            optimizer_state: vec![2],
            step_end: 11,
        };
        (baseline, events, marks)
    }

    #[test]
    fn the_peak_is_split_by_what_each_allocation_is() {
        let (baseline, events, marks) = step();
        let b = from_ledger(&baseline, &events, &marks, 380, |_| None);
        assert_eq!(b.peak_bytes, 380);
        assert_eq!(b.bytes.total(), 380);
        let get = |c| b.bytes.get(c);
        assert_eq!(get(Category::Parameters), 100);
        assert_eq!(get(Category::OptimizerState), 100);
        assert_eq!(get(Category::Inputs), 10);
        assert_eq!(get(Category::Activations), 40);
        assert_eq!(get(Category::Gradients), 100);
        assert_eq!(get(Category::Temporaries), 30);
        assert_eq!(get(Category::Other), 0);
        assert_eq!(b.phase.map(|p| p.name()), Some("backward"));
    }

    #[test]
    fn what_the_log_does_not_explain_is_other_and_the_sum_stays_the_peak() {
        let (baseline, events, marks) = step();
        let b = from_ledger(&baseline, &events, &marks, 395, |_| None);
        assert_eq!((b.bytes.get(Category::Other), b.bytes.total(), b.peak_bytes), (15, 395, 395));
        assert_eq!(b.unattributed_bytes, 15);
    }

    #[test]
    fn a_forward_scratch_live_at_a_forward_peak_is_a_temporary() {
        let (baseline, mut events, mut marks) = step();
        // A 500 B scratch in forward, freed before forward ends: the peak.
        events.insert(2, ev(50, 500, Phase::Forward));
        events.insert(3, ev(50, -500, Phase::Forward));
        marks.forward_end += 2;
        marks.backward_end += 2;
        marks.step_end += 2;
        let b = from_ledger(&baseline, &events, &marks, 750, |_| None);
        assert_eq!(b.bytes.get(Category::Temporaries), 500);
        assert_eq!(b.bytes.get(Category::Activations), 40);
        assert_eq!(b.phase.map(|p| p.name()), Some("forward"));
        assert_eq!(b.bytes.total(), 750);
    }

    #[test]
    fn the_timeline_keeps_the_peak_and_at_most_its_points() {
        let points: Vec<(i64, CategoryBytes)> = (0..10_000)
            .map(|i| {
                let mut b = CategoryBytes::default();
                b.add(Category::Activations, if i == 4321 { 1_000_000 } else { i % 97 });
                (i, b)
            })
            .collect();
        let t = downsample(&points, 4321);
        assert!(t.len() <= TIMELINE_POINTS);
        assert_eq!(t.iter().map(|p| p.1.total()).max(), Some(1_000_000));
        assert_eq!(t.first().map(|p| p.0), Some(0.0));
    }
}
