//! What a run has to tell beside its numbers, typed (as hyperfine keeps its
//! warnings): each kind is made once, where it is found, and says itself in
//! words through `Display`; report.json keeps the kind and its values.
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::units::human_bytes;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Note {
    /// The search's own account: a fallback, a cap, a batch that did not
    /// fit although a larger one did.
    Search { text: String },
    /// Command mode: the max batch rehearsed over the whole job, and what that showed.
    WholeJob { text: String },
    /// Command mode: no batch fits the whole job (its peak does not come down with the batch).
    NoBatchFitsWholeJob { text: String },
    /// Where the run measured when the device asked for is not there.
    Device { text: String },
    /// A command measured on the CPU with `--capacity`: judged, not enforced.
    CapacityNotEnforced,
    /// Memory held at the end of a step grew from step 2 to the last.
    MemoryGrew { bytes: u64, last_step: u32, rank: Option<u32>, batch: u64 },
    /// No trial reported the device's memory.
    BudgetUnknown,
    /// Peak memory did not grow with the batch over the measured range.
    FlatLine,
    /// The memory line fits poorly.
    PoorFit { r2: f64 },
    /// The strategy reported a recommended batch it did not run.
    RecommendedNotRun { batch: u64, strategy: String },
    /// SIGINT or SIGTERM stopped the sweep.
    Interrupted { signal: String },
    /// How the trials started (a command's: fresh processes, or forks of
    /// one pre-imported interpreter).
    TrialStart { text: String },
    /// The explain trial: the max batch run again, its peak broken down.
    Explained { trial: u32, batch: u64 },
    /// `--parallel`: the search ran up to `width` trials at once, in
    /// `rounds` rounds of `trials` in all, `seconds` of wall time.
    SideBySide { width: u32, rounds: u32, trials: u32, seconds: f64 },
    /// The explain trial at the max batch did not fit when run again.
    ExplainFailed { trial: u32, batch: u64, outcome: String },
    /// No batch fits within the margin, but `batch` fits the capacity; a
    /// margin of `admitting` (a fraction) would admit it.
    FitsOnlyInMargin { batch: u64, peak_bytes: u64, margin_fraction: f64, admitting: f64 },
    /// The command's peak did not move between two batches `small` and
    /// `large`, several times apart: `{batch}` does not reach its batch size.
    BatchIgnored { small: u64, large: u64, peak_bytes: u64 },
    /// The command makes no optimizer: its backward passes were its steps.
    BackwardSteps,
    /// At the max batch the CUDA caching allocator freed its cache to
    /// satisfy a request (`num_alloc_retries`): it runs at the edge.
    AllocRetries { batch: u64, retries: u64 },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Search { text }
            | Note::Device { text }
            | Note::TrialStart { text }
            | Note::WholeJob { text }
            | Note::NoBatchFitsWholeJob { text } => f.write_str(text),
            Note::CapacityNotEnforced => f.write_str(
                "on the CPU, --capacity is judged against each trial's exact tensor peak (the profiler's): \
                 it is not enforced inside your command",
            ),
            Note::MemoryGrew { bytes, last_step, rank, batch } => {
                let who = rank.map_or(String::new(), |r| format!(" on rank {r}"));
                write!(
                    f,
                    "memory held at the end of a step grew by {} between step 2 and step {last_step}{who} at batch \
                     {batch}: the script keeps tensors from step to step (a leak: a longer job peaks higher than \
                     these trials)",
                    human_bytes(*bytes as f64)
                )
            }
            Note::BudgetUnknown => {
                f.write_str("no trial reported the device's memory: the budget is unknown (pass --capacity)")
            }
            Note::FlatLine => f.write_str(
                "peak memory did not grow with the batch over the measured range: the limit lies beyond it; \
                 run larger batches (--max-batch or --batches)",
            ),
            Note::PoorFit { r2 } => {
                write!(f, "the memory line fits poorly (r² = {r2:.4}): treat predictions with care")
            }
            Note::RecommendedNotRun { batch, strategy } => {
                write!(f, "the recommended batch {batch} was not run: {strategy} reported it without verifying it")
            }
            Note::Interrupted { signal } => {
                write!(f, "{signal}: the sweep stopped; the trials above are what it measured")
            }
            Note::SideBySide { .. }
            | Note::Explained { .. }
            | Note::FitsOnlyInMargin { .. }
            | Note::BatchIgnored { .. }
            | Note::AllocRetries { .. }
            | Note::BackwardSteps
            | Note::ExplainFailed { .. } => self.fmt_trials(f),
        }
    }
}

impl Note {
    /// The words of the notes about how trials ran (`fmt` says the rest).
    fn fmt_trials(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::SideBySide { width, rounds, trials, seconds } => write!(
                f,
                "the search ran up to {width} trials at once (--parallel): {trials} trials in {rounds} rounds, \
                 {seconds:.1} s; each trial in its own process, so its peak is what it would be alone, and the \
                 search decided as one trial at a time would"
            ),
            Note::Explained { trial, batch } => write!(
                f,
                "trial {trial} ran the max batch {batch} again under torch's full memory profile to break its peak \
                 down (the search's trials measure the peaks only; --breakdown off skips this trial)"
            ),
            Note::FitsOnlyInMargin { batch, peak_bytes, margin_fraction, admitting } => write!(
                f,
                "no batch fits within the {:.0}% margin; batch {batch} is the largest that fits the capacity (peak \
                 {}, {:.1}% of the capacity left free): --margin {:.1}% admits it",
                margin_fraction * 100.0,
                human_bytes(*peak_bytes as f64),
                admitting * 100.0,
                admitting * 100.0
            ),
            Note::BatchIgnored { small, large, peak_bytes } => write!(
                f,
                "the peak is the same at batch {small} and batch {large} ({}): {{batch}} seems not to change the \
                 job's memory (a flag the script does not read, or a config file that sets the batch size); the \
                 sweep stopped",
                human_bytes(*peak_bytes as f64)
            ),
            Note::AllocRetries { batch, retries } => write!(
                f,
                "at the max batch {batch} the CUDA caching allocator freed its cache {retries} time(s) to satisfy a \
                 request (num_alloc_retries): the job fits at the edge of memory and each retry stalls the GPU; a \
                 batch or two lower avoids it"
            ),
            Note::BackwardSteps => f.write_str(
                "your command makes no torch.optim optimizer: each backward pass, with the update after it, was \
                 counted as a training step (call vramprobe_hook.step() at the end of each step to mark them \
                 yourself)",
            ),
            Note::ExplainFailed { trial, batch, outcome } => write!(
                f,
                "trial {trial} ran the max batch {batch} again to break its peak down and it did not fit ({outcome}): \
                 the job is not repeatable at this batch; treat the max as unproven"
            ),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_keeps_its_kind_and_values_in_json() {
        let n = Note::MemoryGrew { bytes: 3 << 20, last_step: 3, rank: Some(1), batch: 8 };
        let json = serde_json::to_value(&n).unwrap();
        assert_eq!(json["kind"], "memory_grew");
        assert_eq!(serde_json::from_value::<Note>(json).unwrap(), n);
        assert!(n.to_string().contains("grew by 3.00 MiB between step 2 and step 3 on rank 1 at batch 8"), "{n}");
    }
}
