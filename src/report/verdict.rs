//! `check`'s words: the verdict (FITS or WON'T FIT, with its exit code),
//! the trial it judged as the user named it, the lines after it (the
//! breakdown, the phases, what the check covered, each rank's peak), and
//! `--json`'s one line.
use serde::Serialize;

use crate::analyze::fit::{Budget, Fit};
use crate::analyze::note::Note;
use crate::analyze::whole_job::Projection;
use crate::record::device::Device;
use crate::record::rehearsal::Phase;
use crate::record::subject::Subject;
use crate::record::trial::{Outcome, StepMark, TrialResult};
use crate::report::rehearsal;
use crate::units::{format_input, human_bytes};

pub const EXIT_WONT_FIT: i32 = 3;

/// What `check` answers, and its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Fits,
    WontFit,
}

impl Verdict {
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Fits => 0,
            Verdict::WontFit => EXIT_WONT_FIT,
        }
    }
}

/// A trial judged: the verdict, the headroom where the peak is known, and
/// the message for the user.
pub struct Judgement {
    pub verdict: Verdict,
    pub headroom_bytes: Option<i64>,
    pub message: String,
}

/// `check --json`'s one line.
#[derive(Serialize)]
pub struct VerdictJson {
    pub verdict: Verdict,
    pub exit_code: i32,
    pub model: String,
    pub input: String,
    pub batch: u64,
    /// A distributed command's ranks; the batch is per rank.
    pub world_size: Option<u32>,
    pub device: String,
    pub steps: usize,
    pub peak_bytes: Option<u64>,
    pub capacity_bytes: u64,
    pub non_pytorch_bytes: u64,
    pub headroom_bytes: Option<i64>,
    pub headroom_fraction: Option<f64>,
    /// The largest batch the plan's memory line allows on this capacity.
    pub max_batch_from_fit: Option<u64>,
    /// What the check ran: whole_job, until_time_budget, every_phase_twice,
    /// first_N_steps (--steps) or training_steps (a built-in model).
    pub covered: String,
    /// A rehearsal's peak by phase (train, eval, save, other).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<rehearsal::PhaseJson>,
    /// Where memory held grows: the judged peak at the loop's end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projection: Option<ProjectionJson>,
    pub message: String,
}

/// A growing loop's projection in `--json`.
#[derive(Serialize)]
pub struct ProjectionJson {
    phase: Phase,
    /// The data loader whose batches add the most (0: the first the job iterates).
    loader: u32,
    growth_bytes_per_batch: u64,
    batches_run: u32,
    length: Option<u64>,
    at_batch: u64,
    peak_bytes: u64,
    after_loop: bool,
}

impl ProjectionJson {
    pub fn of(p: &Projection) -> ProjectionJson {
        ProjectionJson {
            phase: p.phase,
            loader: p.loader,
            growth_bytes_per_batch: p.growth_bytes_per_batch,
            batches_run: p.batches_run,
            length: p.length,
            at_batch: p.at_batch,
            peak_bytes: p.peak_bytes,
            after_loop: p.after_loop,
        }
    }
}

/// The verdict on a trial of `what` against the budget: the peak judged
/// (and where it came from), the largest batch the plan's line allows.
pub fn judge(
    trial: &TrialResult,
    what: &str,
    budget: &Budget,
    (peak, source): (Option<u64>, &str),
    max_batch_from_fit: Option<u64>,
) -> Judgement {
    let capacity = human_bytes(budget.capacity_bytes as f64);
    let largest = match max_batch_from_fit {
        Some(m) => format!("; the plan's memory line allows batch {m} at most"),
        None => "; run `vramprobe sweep` to find the largest batch".into(),
    };
    match trial.outcome {
        Outcome::Fits => {
            let peak = peak.unwrap_or(0);
            let headroom = budget.headroom(peak as f64) as i64;
            let pct = headroom as f64 / budget.capacity_bytes as f64 * 100.0;
            let measured = format!(
                "peak {}{source}, headroom {} ({pct:.1}%) of {capacity} ({} steps)",
                human_bytes(peak as f64),
                human_bytes(headroom as f64),
                trial.steps_completed()
            );
            // The sweep's rule (Budget::fit): a batch the sweep would reject never passes here.
            let (verdict, message) = match budget.fit(peak) {
                Fit::Fits => (Verdict::Fits, format!("FITS: {what}: {measured}")),
                Fit::OverMargin => (
                    Verdict::WontFit,
                    format!(
                        "WON'T FIT: {what}: {measured}: less than the {:.0}% margin stays free{}",
                        budget.margin_fraction * 100.0,
                        budget.margin_admitting(peak).map_or(String::new(), |m| format!(
                            " (it fits the capacity: --margin {:.1}% admits it)",
                            m * 100.0
                        ))
                    ) + &largest,
                ),
                Fit::OverCapacity => (
                    Verdict::WontFit,
                    format!(
                        "WON'T FIT: {what}: peak {}{source} plus {} outside PyTorch exceeds the capacity {capacity}",
                        human_bytes(peak as f64),
                        human_bytes(budget.non_pytorch_bytes as f64),
                    ) + &largest,
                ),
            };
            Judgement { verdict, headroom_bytes: Some(headroom), message }
        }
        _ => {
            let step = trial.failed_step.map_or(String::new(), |s| format!(" at step {s}"));
            let msg = format!(
                "WON'T FIT: {what}: out of memory{step} ({}); capacity {capacity}{largest}",
                trial.message.as_deref().unwrap_or("")
            );
            Judgement { verdict: Verdict::WontFit, headroom_bytes: None, message: msg }
        }
    }
}

/// "`python train.py ...` at batch 64 on cpu", as the verdict names it.
pub fn describe(subject: &Subject, trial: &TrialResult, batch: u64, device: Device) -> String {
    let ranks = match trial.world_size {
        Some(w) => format!(" per rank x {w} ranks (global batch {})", trial.global_batch()),
        None => String::new(),
    };
    match (subject, &subject.input()[..]) {
        (Subject::Command(_), []) => format!("`{}` at batch {batch}{ranks} on {device}", subject.name()),
        (Subject::Command(_), [t]) => format!("`{}` at batch {batch}{ranks}, length {t} on {device}", subject.name()),
        (_, input) => format!("{} {} at batch {batch} on {device}", subject.name(), format_input(input)),
    }
}

/// The lines after the verdict: the breakdown, the phases and what the
/// check covered, the step mark, each rank's peak.
pub fn details(trial: &TrialResult, (longer, breakdown): (usize, bool), first_steps_of_command: Option<u32>) -> String {
    let mut lines = Vec::new();
    if let Some(b) = trial.peak_breakdown() {
        lines.push(crate::report::why::one_line(b));
    }
    if let Some(r) = trial.rehearsal.as_deref() {
        lines.push(rehearsal::phases_line(r));
        lines.push(rehearsal::coverage_line(r, longer));
        if breakdown {
            lines.push("note: --breakdown breaks down a check of the first steps: add --steps 3".into());
        }
    }
    if let Some(n) = first_steps_of_command {
        lines.push(format!(
            "covered: the first {n} training steps only (--steps): evaluation, checkpoints and memory that grows \
             over an epoch were not rehearsed (leave out --steps to rehearse the whole job)"
        ));
    }
    if trial.step_mark == Some(StepMark::Backward) {
        lines.push(format!("note: {}", Note::BackwardSteps));
    }
    let peaks = trial.rank_peaks();
    if !peaks.is_empty() {
        let each: Vec<String> =
            peaks.iter().map(|p| format!("rank {} {}", p.rank, human_bytes(p.judged_bytes() as f64))).collect();
        let top = trial.peak_rank().map_or(String::new(), |r| format!(", the peak on rank {r}"));
        lines.push(format!("per rank: {}{top}", each.join(", ")));
    }
    lines.iter().map(|l| format!("\n{l}")).collect()
}
