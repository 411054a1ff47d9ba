//! How `check` words a rehearsal of the whole job: what the judged peak
//! was, each phase's peak, and what the rehearsal covered and did not.
use serde::Serialize;

use crate::analyze::whole_job::{Projection, Worst};
use crate::record::rehearsal::{Phase, RehearsalRecord, RehearsalStop};
use crate::units::human_bytes;

/// What reached the judged peak, for the verdict's line.
pub fn peak_source(worst: &Worst) -> String {
    match worst {
        Worst::Measured(phase, _) => format!(" (in its {} phase)", phase_words(*phase)),
        Worst::Projected(p) => format!(" (projected: {})", projection_words(p)),
    }
}

/// "each batch of loader 0 adds 1.0 MiB to the training peak (4 of its
/// batches a pass ran); at batch 1000 of 1000 the peak would be 1.2 GiB".
pub fn projection_words(p: &Projection) -> String {
    let at = match p.length {
        Some(n) => format!("at batch {} of {n}", p.at_batch),
        None => format!("by batch {} (the loader has no length, so its end is unknown)", p.at_batch),
    };
    let which = if p.after_loop {
        format!("the {} work after a loop", phase_words(p.phase))
    } else {
        format!("the {} loop", phase_words(p.phase))
    };
    format!(
        "memory grows with the job's data: each batch a pass over data loader {} runs adds {} to the peak of {which} \
         (the rehearsal ran {} batches a pass); {at} that peak would be {}",
        p.loader,
        human_bytes(p.growth_bytes_per_batch as f64),
        p.batches_run,
        human_bytes(p.peak_bytes as f64)
    )
}

fn phase_words(phase: Phase) -> &'static str {
    match phase {
        Phase::Train => "training",
        Phase::Eval => "evaluation",
        Phase::Save => "checkpoint-saving",
        Phase::Other => "other (setup, epoch-end)",
    }
}

/// "phases: train 27.1 MiB, eval 30.0 MiB, save 41.2 MiB, other 20.0 MiB".
pub fn phases_line(record: &RehearsalRecord) -> String {
    let each: Vec<String> = record
        .phase_peaks()
        .into_iter()
        .map(|(phase, bytes)| format!("{} {}", phase.name(), human_bytes(bytes as f64)))
        .collect();
    format!("phases: {}", each.join(", "))
}

/// What the rehearsal covered, and what it did not; `longer`: how many
/// loaders were rehearsed again, run longer.
pub fn coverage_line(record: &RehearsalRecord, longer: usize) -> String {
    let loaders = record.passes.iter().map(|p| p.loader).max().map_or(0, |l| l + 1);
    let cut = record.passes.iter().filter(|p| p.cut).count();
    let passes = match (record.passes.len(), longer) {
        (0, _) => "no DataLoader was iterated".to_string(),
        (n, 0) => format!(
            "{n} pass(es) over {loaders} data loader(s), {cut} of them cut to {} batches; nothing held grew from batch to batch",
            record.batches_per_loader
        ),
        (n, m) => format!(
            "{n} pass(es) over {loaders} data loader(s), {cut} of them cut to {} batches; memory that grew with \
             {m} loader(s)' batches rehearsed again with them run longer and projected to their full length",
            record.batches_per_loader
        ),
    };
    let how = match record.stopped_by {
        RehearsalStop::ScriptEnd => format!("the whole job, to its end, in {:.0} s", record.seconds),
        RehearsalStop::TimeBudget => format!(
            "{:.0} s of the job, then the time budget (--rehearsal-time) stopped it: what it runs later was not rehearsed",
            record.seconds
        ),
        RehearsalStop::SeenTwice => "the job until training and every other phase had run twice: what it runs only \
             at its end (a final test, a last save) was not rehearsed"
            .to_string(),
        RehearsalStop::NoLoader => format!(
            "its first {} training steps: it iterates no DataLoader, so vramprobe cannot cut its loop short; its \
             later steps, evaluation and checkpoints were not rehearsed",
            2 * record.batches_per_loader
        ),
    };
    format!("covered: {how}; {passes}; {}", scan_words(record))
}

/// Which batches the cut passes ran: each loader's largest, found by
/// collating its batches first, or its first ones.
fn scan_words(record: &RehearsalRecord) -> String {
    let mut scanned = std::collections::BTreeMap::new();
    let mut unscanned = 0;
    for p in record.passes.iter().filter(|p| p.cut) {
        match (p.scanned, p.length) {
            (Some(n), length) => {
                scanned.insert(p.loader, (n, length));
            }
            (None, _) => unscanned += 1,
        }
    }
    let mut parts = Vec::new();
    for (loader, (n, length)) in scanned {
        parts.push(match length {
            Some(l) if n >= l => format!("loader {loader}'s largest batches ran first (all {l} collated to find them)"),
            Some(l) => format!(
                "loader {loader}'s largest of {n} of its {l} batches ({:.0}%) ran first: the rest were not seen",
                n as f64 / l as f64 * 100.0
            ),
            None => format!("loader {loader}'s largest of its first {n} batches ran first"),
        });
    }
    if unscanned > 0 {
        parts.push(format!(
            "{unscanned} pass(es) over a loader that cannot be replayed (an iterable dataset) ran its first batches: \
             a larger batch later in it is not covered"
        ));
    }
    if parts.is_empty() {
        return "every pass ran whole".into();
    }
    parts.join("; ")
}

/// What the rehearsal covered, for `--json`.
pub fn covered(record: Option<&RehearsalRecord>, first_steps: Option<u32>) -> String {
    match (record.map(|r| r.stopped_by), first_steps) {
        (Some(RehearsalStop::ScriptEnd), _) => "whole_job".into(),
        (Some(RehearsalStop::TimeBudget), _) => "until_time_budget".into(),
        (Some(RehearsalStop::SeenTwice), _) => "every_phase_twice".into(),
        (Some(RehearsalStop::NoLoader), _) => "first_steps_no_loader".into(),
        (None, Some(n)) => format!("first_{n}_steps"),
        (None, None) => "training_steps".into(),
    }
}

/// One phase's peak in `--json`.
#[derive(Debug, Serialize)]
pub struct PhaseJson {
    pub phase: Phase,
    pub peak_bytes: u64,
}

pub fn phases_json(record: &RehearsalRecord) -> Vec<PhaseJson> {
    record.phase_peaks().into_iter().map(|(phase, peak_bytes)| PhaseJson { phase, peak_bytes }).collect()
}
