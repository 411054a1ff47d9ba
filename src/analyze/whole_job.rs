//! The whole job from its rehearsals: each phase's measured peak, and
//! where memory grows with the batches a loader runs, the peak projected to
//! the loaders' real lengths.
//!
//! A rehearsal runs every pass over a DataLoader for a few batches (`k`).
//! A loop that keeps something per batch (outputs appended for an
//! epoch-end metric, logits gathered for evaluation) holds more at its last
//! batch than at its `k`-th, and so does everything after it that copies
//! or still holds what it kept (a `torch.cat` of the logits, the next
//! epoch's training while they are alive). A loader whose held bytes rise
//! after every batch ([`growing_loaders`]) gets a second rehearsal in which
//! it alone runs `2k` batches a pass. The job is cut into the same
//! segments in both (each pass's batches, each stretch between passes);
//! what a segment's peak gained per extra batch is projected linearly to
//! the loader's full length ([`project`]). Pure: unit tested on hand-made
//! records.
use crate::record::rehearsal::{Interval, Phase, RehearsalRecord};

/// A stretch of the job that both rehearsals have: one pass's batches (a
/// save inside them included), or one interval between passes.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// The pass whose batches these are, or None between passes.
    pub pass: Option<u32>,
    /// The phase of the interval at its peak.
    pub phase: Phase,
    pub peak_bytes: u64,
}

/// A segment's peak when the loaders run their full length.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    pub phase: Phase,
    /// The segment is the work between passes (after a loop), not a loop's batches.
    pub after_loop: bool,
    /// The loader that adds the most, by the order the job first iterates them.
    pub loader: u32,
    /// Bytes its each extra batch a pass adds to this segment's peak.
    pub growth_bytes_per_batch: u64,
    pub batches_run: u32,
    /// Its len(); None for an iterable without one.
    pub length: Option<u64>,
    /// The batch the projection is for: the loader's last, or (without a
    /// length) the first at which the peak passes the budget.
    pub at_batch: u64,
    pub peak_bytes: u64,
}

/// The verdict's candidates: a phase's measured peak, or a projection.
#[derive(Debug, Clone, PartialEq)]
pub enum Worst {
    Measured(Phase, u64),
    Projected(Projection),
}

impl Worst {
    pub fn bytes(&self) -> u64 {
        match self {
            Worst::Measured(_, b) => *b,
            Worst::Projected(p) => p.peak_bytes,
        }
    }
}

/// The growth per batch of a pass's held bytes, when they rise after every
/// batch from the first on (the first may make the optimizer's state once).
pub fn steady_growth(held: &[u64]) -> Option<u64> {
    if held.len() < 3 || !held.windows(2).all(|w| w[1] > w[0]) {
        return None;
    }
    Some((held[held.len() - 1] - held[0]).div_ceil(held.len() as u64 - 1))
}

/// The loaders worth a second rehearsal: a pass over them was cut short
/// and the bytes held rose after each of its batches.
pub fn growing_loaders(record: &RehearsalRecord) -> Vec<u32> {
    let mut loaders: Vec<u32> = Vec::new();
    for (index, pass) in record.passes.iter().enumerate() {
        let longer = pass.length.is_none_or(|l| l > u64::from(pass.batches));
        let grows = pass.cut && longer && steady_growth(&record.held_in_pass(index as u32)).is_some();
        if grows && !loaders.contains(&pass.loader) {
            loaders.push(pass.loader);
        }
    }
    loaders
}

/// The job cut into segments: each pass's batches (with any save between
/// two of them), and each interval between passes on its own.
pub fn segments(record: &RehearsalRecord) -> Vec<Segment> {
    let owner = |k: usize| -> Option<u32> {
        let i = &record.intervals[k];
        if i.pass.is_some() {
            return i.pass;
        }
        // A save between two batches of one pass belongs to that pass.
        let before = record.intervals[..k].iter().rev().find(|i| i.phase != Phase::Save)?.pass;
        let after = record.intervals[k + 1..].iter().find(|i| i.phase != Phase::Save)?.pass;
        (i.phase == Phase::Save && before.is_some() && before == after).then_some(before?)
    };
    let mut out: Vec<(Segment, u64)> = Vec::new();
    for (k, interval) in record.intervals.iter().enumerate() {
        let pass = owner(k);
        let bytes = interval.judged_bytes();
        match out.last_mut() {
            Some((s, top)) if pass.is_some() && s.pass == pass => {
                if bytes > *top {
                    *top = bytes;
                    s.phase = phase_of(record, interval);
                }
                s.peak_bytes = s.peak_bytes.max(bytes);
            }
            _ => out.push((Segment { pass, phase: phase_of(record, interval), peak_bytes: bytes }, bytes)),
        }
    }
    out.into_iter().map(|(s, _)| s).collect()
}

/// An interval's phase, a batch's as its pass's (train or eval).
fn phase_of(record: &RehearsalRecord, interval: &Interval) -> Phase {
    match interval.pass.and_then(|p| record.passes.get(p as usize)) {
        Some(pass) if interval.phase != Phase::Save => pass.phase,
        _ => interval.phase,
    }
}

/// Each segment's peak projected to the loaders' full lengths, from the
/// base rehearsal and one per growing loader run longer: per extra batch
/// of loader `i` a pass, a segment gains what it gained in `i`'s
/// rehearsal over its extra batches. Segments pair in order while both
/// rehearsals cut the job the same way. A loader without a length is
/// projected to the batch where the peak passes `budget_bytes`.
pub fn project(base: &RehearsalRecord, longer: &[&RehearsalRecord], budget_bytes: u64) -> Vec<Projection> {
    let ours = segments(base);
    let k = base.batches_per_loader;
    let mut out = Vec::new();
    for (j, segment) in ours.iter().enumerate() {
        let mut gains: Vec<(u32, u64, Option<u64>)> = Vec::new();
        for other in longer {
            let Some(l) = other.longer.filter(|l| l.batches > k) else { continue };
            let theirs = segments(other);
            let paired = theirs.get(j).filter(|t| t.pass == segment.pass && same_shape(&ours, &theirs, j));
            let Some(t) = paired else { continue };
            let per_batch = t.peak_bytes.saturating_sub(segment.peak_bytes).div_ceil(u64::from(l.batches - k));
            let length = base.passes.iter().filter(|p| p.loader == l.loader).map(|p| p.length).max().flatten();
            if per_batch > 0 {
                gains.push((l.loader, per_batch, length));
            }
        }
        if let Some(p) = projection(segment, k, &gains, budget_bytes) {
            out.push(p);
        }
    }
    out
}

/// Whether both rehearsals cut the job the same way up to segment `j`.
fn same_shape(ours: &[Segment], theirs: &[Segment], j: usize) -> bool {
    ours.iter().zip(theirs).take(j + 1).all(|(a, b)| a.pass == b.pass)
}

/// One segment's projection from each loader's gain per extra batch.
fn projection(segment: &Segment, k: u32, gains: &[(u32, u64, Option<u64>)], budget_bytes: u64) -> Option<Projection> {
    let top = gains.iter().max_by_key(|(_, per, _)| *per)?;
    let known: u64 = gains.iter().filter_map(|(_, per, len)| Some(per * (*len)?.saturating_sub(u64::from(k)))).sum();
    let unknown: u64 = gains.iter().filter(|(_, _, len)| len.is_none()).map(|(_, per, _)| per).sum();
    let mut peak = segment.peak_bytes + known;
    let at_batch = match (top.2, unknown) {
        (_, 0) => top.2.unwrap_or(u64::from(k)),
        _ => {
            let more = budget_bytes.saturating_sub(peak) / unknown + 1;
            peak += unknown * more;
            u64::from(k) + more
        }
    };
    Some(Projection {
        phase: segment.phase,
        after_loop: segment.pass.is_none(),
        loader: top.0,
        growth_bytes_per_batch: top.1,
        batches_run: k,
        length: top.2,
        at_batch,
        peak_bytes: peak,
    })
}

/// The highest candidate: each phase's measured peak and each projection;
/// on a tie the measured one.
pub fn worst(base: &RehearsalRecord, longer: &[&RehearsalRecord], budget_bytes: u64) -> Option<Worst> {
    let measured = base.phase_peaks().into_iter().map(|(phase, bytes)| Worst::Measured(phase, bytes));
    let projected = project(base, longer, budget_bytes).into_iter().map(Worst::Projected);
    measured.chain(projected).reduce(|a, b| if b.bytes() > a.bytes() { b } else { a })
}

#[cfg(test)]
mod tests;
