//! A rehearsal of the whole job (what `vramprobe check` runs for a
//! command): the spec's ask ([`RehearsalSpec`]) and the hook's answer
//! ([`RehearsalRecord`]), part of the trial protocol. The hook
//! (src/measure/hook/vramprobe_rehearsal.py) runs the job through all its
//! phases with every DataLoader cut to a few batches, and reports each
//! stretch of the job (an interval: one batch of a pass over a loader, a
//! save, the work between passes) with its phase, its peak and the bytes
//! held at its end. A second rehearsal that runs one loader longer shows
//! what grows with that loader's batches, which analyze::whole_job projects
//! to the loader's full length.
use serde::{Deserialize, Serialize};

/// How long and how far a rehearsal goes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RehearsalSpec {
    /// Batches taken from each pass over a DataLoader before it is cut.
    pub batches_per_loader: u32,
    /// Past this, the rehearsal stops at the next batch or training step.
    pub seconds: f64,
    /// One loader (by the order the job first iterates its loaders) run
    /// for more batches a pass than the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longer: Option<LongerLoader>,
}

/// The loader a second rehearsal runs longer, and for how many batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LongerLoader {
    pub loader: u32,
    pub batches: u32,
}

/// What a stretch of the job was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// A backward pass or an optimizer step ran.
    Train,
    /// A loader's batch with no backward pass: evaluation, prediction.
    Eval,
    /// torch.save: a checkpoint.
    Save,
    /// Anything else: setup, the work between passes (epoch-end metrics).
    Other,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Train => "train",
            Phase::Eval => "eval",
            Phase::Save => "save",
            Phase::Other => "other",
        }
    }
}

/// Why a rehearsal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RehearsalStop {
    /// The job ran to its end: every phase it has was seen.
    ScriptEnd,
    /// The time budget ran out (checked at each batch and training step).
    TimeBudget,
    /// Training and every other phase seen so far had run twice.
    SeenTwice,
    /// The job iterates no DataLoader: its loop cannot be cut short, so
    /// the rehearsal ended after as many steps as two passes run.
    NoLoader,
}

/// One pass over a DataLoader (one `for batch in loader`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoaderPass {
    /// Which loader: 0 for the first the job iterates, 1 for the next new one...
    pub loader: u32,
    /// Train when any of its batches ran a backward pass, else eval.
    pub phase: Phase,
    /// The loader's len(), its batches in a whole pass (None for an iterable without one).
    pub length: Option<u64>,
    /// Batches the rehearsal ran.
    pub batches: u32,
    /// The rehearsal stopped the pass before the loader ran out.
    pub cut: bool,
    /// Batches collated to find its largest, which the pass ran first
    /// (None: the loader was not scanned: an iterable, or a pass run whole).
    pub scanned: Option<u64>,
}

/// One stretch of the job: a batch of a pass, a save, or the work between.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Interval {
    pub phase: Phase,
    /// The pass (an index into the record's passes) whose batch this is,
    /// and which batch of it (1-based; a save inside a batch splits it).
    pub pass: Option<u32>,
    pub batch: Option<u32>,
    pub peak_allocated_bytes: u64,
    /// Bytes held when it ended.
    pub held_bytes: u64,
    /// CUDA: the caching allocator's reserved peak.
    pub peak_reserved_bytes: Option<u64>,
}

impl Interval {
    /// The peak the budget judges: reserved where the device has it.
    pub fn judged_bytes(&self) -> u64 {
        self.peak_reserved_bytes.unwrap_or(self.peak_allocated_bytes)
    }
}

/// The hook's account of a rehearsal, sent once before its `end`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RehearsalRecord {
    pub stopped_by: RehearsalStop,
    pub seconds: f64,
    pub batches_per_loader: u32,
    /// The loader this rehearsal ran longer, if any.
    pub longer: Option<LongerLoader>,
    pub passes: Vec<LoaderPass>,
    pub intervals: Vec<Interval>,
}

impl RehearsalRecord {
    /// The highest peak the rehearsal measured.
    pub fn peak_bytes(&self) -> u64 {
        self.intervals.iter().map(Interval::judged_bytes).max().unwrap_or(0)
    }

    /// Each phase's highest peak, in the order train, eval, save, other.
    pub fn phase_peaks(&self) -> Vec<(Phase, u64)> {
        let mut peaks = std::collections::BTreeMap::new();
        for i in &self.intervals {
            let p = peaks.entry(i.phase).or_insert(0);
            *p = (*p).max(i.judged_bytes());
        }
        peaks.into_iter().collect()
    }

    /// The bytes held after each batch of pass `pass`, in order.
    pub fn held_in_pass(&self, pass: u32) -> Vec<u64> {
        let mut held: Vec<(u32, u64)> = Vec::new();
        for i in self.intervals.iter().filter(|i| i.pass == Some(pass) && i.phase != Phase::Save) {
            let batch = i.batch.unwrap_or(0);
            match held.last_mut() {
                Some(last) if last.0 == batch => last.1 = i.held_bytes,
                _ => held.push((batch, i.held_bytes)),
            }
        }
        held.into_iter().map(|(_, h)| h).collect()
    }
}
