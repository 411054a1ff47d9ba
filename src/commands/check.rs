//! `vramprobe check`: the pre-flight check. Runs a few real training steps
//! at exactly one configuration, in a child process, and answers with an
//! exit code a job script can test: 0 fits, 3 won't fit, 1 runtime error,
//! 2 usage error.
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde::Serialize;

use crate::analyze::analysis::{budget_for, FitBasis};
use crate::analyze::fit::{Budget, Fit, LinearFit};
use crate::analyze::note::Note;
use crate::analyze::whole_job::Worst;
use crate::commands::cli::CheckArgs;
use crate::error::UsageError;
use crate::measure::{device, private};
use crate::record::device::{Device, DeviceRequest};
use crate::record::rehearsal::Phase;
use crate::record::subject::{CommandSubject, Placeholders, Subject, UserCommand};
use crate::record::trial::{Outcome, StepMark, TrialResult};
use crate::report::{plan_file, rehearsal};
use crate::sweep::whole_job;
use crate::units::{format_input, human_bytes};

pub const EXIT_WONT_FIT: i32 = 3;

/// What `check` answers, and its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Verdict {
    Fits,
    WontFit,
}

impl Verdict {
    fn exit_code(self) -> i32 {
        match self {
            Verdict::Fits => 0,
            Verdict::WontFit => EXIT_WONT_FIT,
        }
    }
}

/// A trial judged: the verdict, the headroom where the peak is known, and
/// the message for the user.
struct Judgement {
    verdict: Verdict,
    headroom_bytes: Option<i64>,
    message: String,
}

/// `check --json`'s one line.
#[derive(Serialize)]
struct VerdictJson {
    verdict: Verdict,
    exit_code: i32,
    model: String,
    input: String,
    batch: u64,
    /// A distributed command's ranks; the batch is per rank.
    world_size: Option<u32>,
    device: String,
    steps: usize,
    peak_bytes: Option<u64>,
    capacity_bytes: u64,
    non_pytorch_bytes: u64,
    headroom_bytes: Option<i64>,
    headroom_fraction: Option<f64>,
    /// The largest batch the plan's memory line allows on this capacity.
    max_batch_from_fit: Option<u64>,
    /// What the check ran: whole_job, until_time_budget, every_phase_twice,
    /// first_N_steps (--steps) or training_steps (a built-in model).
    covered: String,
    /// A rehearsal's peak by phase (train, eval, save, other).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    phases: Vec<rehearsal::PhaseJson>,
    /// Where memory held grows: the judged peak at the loop's end.
    #[serde(skip_serializing_if = "Option::is_none")]
    projection: Option<ProjectionJson>,
    message: String,
}

/// A growing loop's projection in `--json`.
#[derive(Serialize)]
struct ProjectionJson {
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

/// What to check: a subject at one batch, and the memory line of the plan
/// row it came from, if any.
struct Target {
    subject: Subject,
    batch: u64,
    plan_device: Option<DeviceRequest>,
    fit: Option<LinearFit>,
}

/// The subject and batch from `--plan` (a row) or `--model` with `--batch`.
fn target(args: &CheckArgs) -> Result<Target> {
    match (&args.plan, &args.workload.model, args.batch) {
        (Some(path), _, _) => {
            let entries = plan_file::read(path).map_err(|e| UsageError::new(e.to_string()))?;
            let entry = plan_file::select(path, entries, args.row.map(|r| r as usize), None)
                .map_err(|e| UsageError::new(e.to_string()))?;
            let row = entry.row;
            let fit = row.fixed_bytes.zip(row.per_sample_bytes).map(|(f, p)| LinearFit {
                fixed_bytes: f as f64,
                per_sample_bytes: p as f64,
                r2: 1.0,
                points: 0,
            });
            let mut subject = row.subject(args.workload.lr.unwrap_or(1e-3)).ok_or_else(|| {
                UsageError::new(format!("{}:{}: the row does not say what to run", path.display(), entry.line))
            })?;
            // --world-size overrides the row's ranks.
            if let (Subject::Command(c), Some(w)) = (&mut subject, args.world_size) {
                c.world_size = Some(w);
            }
            Ok(Target { subject, batch: row.recommended_batch, plan_device: Some(row.device), fit })
        }
        (None, None, Some(batch)) if !args.command.is_empty() => {
            let command = UserCommand::new(args.command.clone())?;
            if command.has_seq_len() != args.workload.seq_len.is_some() {
                return Err(UsageError::new(
                    "a command with {seq_len} needs --seq-len T, and --seq-len needs {seq_len}",
                )
                .into());
            }
            if command.has_nproc() != args.world_size.is_some() {
                return Err(UsageError::new(
                    "a command with {nproc} needs --world-size N, and --world-size needs {nproc}",
                )
                .into());
            }
            let at = Placeholders { seq_len: args.workload.seq_len, nproc: args.world_size };
            let subject = Subject::Command(CommandSubject::new(command, at));
            Ok(Target { subject, batch, plan_device: None, fit: None })
        }
        (None, Some(_), Some(batch)) => Ok(Target {
            subject: Subject::of_workload(super::workload_config(&args.workload)?),
            batch,
            plan_device: None,
            fit: None,
        }),
        _ => Err(UsageError::new(
            "check needs --plan FILE, --model M with --batch B, or --batch B -- your training command",
        )
        .into()),
    }
}

/// The verdict on a trial that fitted or ran out of memory.
fn judge(
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

pub fn run(args: CheckArgs) -> Result<i32> {
    let Target { subject, batch, plan_device, fit } = target(&args)?;
    let request = args.device.or(plan_device).unwrap_or(DeviceRequest::Auto);
    let (device, note) = device::resolve(request)?;
    if let (Some(n), false) = (&note, args.quiet || args.json) {
        eprintln!("note: {n}");
    }
    let rehearsed = measure(&args, &subject, device, batch)?;
    let trial = &rehearsed.trial;
    let capacity = args
        .capacity
        .or(trial.device_total_bytes)
        .ok_or_else(|| anyhow!("the device's memory is unknown: pass --capacity"))?;
    // The sweep's rule; a trial that ran out before its first step has not
    // measured the memory outside PyTorch: none is counted then.
    let budget =
        budget_for(device, args.capacity, args.margin, trial).unwrap_or_else(|| Budget::new(capacity, args.margin, 0));
    let step_peak = FitBasis::for_device(device).peak(trial);
    // A rehearsal's phases and projections count when they top the steps'.
    let worst = rehearsed.worst(budget.budget_bytes);
    let (peak, source) = match &worst {
        Some(w) if Some(w.bytes()) >= step_peak => (Some(w.bytes()), rehearsal::peak_source(w)),
        _ => (step_peak, String::new()),
    };
    let max_batch_from_fit = fit.and_then(|f| f.max_batch_within(budget.budget_bytes));
    let what = describe(&subject, trial, batch, device);
    let Judgement { verdict, headroom_bytes: headroom, message } =
        judge(trial, &what, &budget, (peak, &source), max_batch_from_fit);
    let first_steps = args.steps.filter(|_| matches!(subject, Subject::Command(_)));
    let message = message + &details(trial, (rehearsed.longer.len(), args.breakdown.breakdown_on()), first_steps);
    let exit_code = verdict.exit_code();
    if args.json {
        let projection = match worst {
            Some(Worst::Projected(p)) if Some(p.peak_bytes) == peak => Some(ProjectionJson {
                phase: p.phase,
                loader: p.loader,
                growth_bytes_per_batch: p.growth_bytes_per_batch,
                batches_run: p.batches_run,
                length: p.length,
                at_batch: p.at_batch,
                peak_bytes: p.peak_bytes,
                after_loop: p.after_loop,
            }),
            _ => None,
        };
        let v = VerdictJson {
            verdict,
            exit_code,
            model: subject.name(),
            input: format_input(&subject.input()),
            batch,
            world_size: trial.world_size,
            device: device.to_string(),
            steps: trial.steps_completed() as usize,
            peak_bytes: peak,
            capacity_bytes: capacity,
            non_pytorch_bytes: budget.non_pytorch_bytes,
            headroom_bytes: headroom,
            headroom_fraction: headroom.map(|h| h as f64 / capacity as f64),
            max_batch_from_fit,
            covered: rehearsal::covered(trial.rehearsal.as_deref(), args.steps),
            phases: trial.rehearsal.as_deref().map(rehearsal::phases_json).unwrap_or_default(),
            projection,
            message: message.lines().next().unwrap_or("").to_string(),
        };
        println!("{}", serde_json::to_string(&v)?);
    } else if !args.quiet {
        println!("{message}");
    }
    Ok(exit_code)
}

/// Runs the check's trial: a command's whole job rehearsed (unless
/// `--steps` asks for its first steps only; sweep::whole_job), a built-in
/// model's steps (then with no longer rehearsals beside it).
fn measure(args: &CheckArgs, subject: &Subject, device: Device, batch: u64) -> Result<whole_job::Rehearsed> {
    let how = super::TrialSettings {
        device,
        steps: args.steps.unwrap_or(3),
        limit: device::capacity_limit(device, args.capacity)?,
        timeout: Duration::from_secs(args.trial_timeout),
        fresh_process: true,
    };
    // The trials' folders (spec, records, a command's output), kept only for this check.
    // A fresh private folder, never a guessable name someone else made first.
    let scratch = private::scratch("vramprobe-check-", None).context("creating the check's scratch folder")?;
    let mut runner = super::trial_runner(subject, how, scratch.path().into())?;
    let rehearsed = match args.steps {
        None => whole_job::rehearse(runner.as_mut(), 1, batch, args.rehearsal_time as f64)?,
        Some(_) => None,
    };
    let rehearsed = match rehearsed {
        Some(r) => r,
        None => {
            let trial = runner.run(1, batch, args.breakdown.breakdown_on(), &mut |_| {})?;
            whole_job::Rehearsed { trial, longer: Vec::new(), trials: 1 }
        }
    };
    drop(runner);
    let trial = &rehearsed.trial;
    // Ctrl-C or SIGTERM killed the check's trial: no verdict, exit 130/143.
    crate::interrupt::check()?;
    if !matches!(trial.outcome, Outcome::Fits | Outcome::Oom) {
        // A failed trial's folder (a command's output) stays for the user to read.
        let _ = scratch.keep();
        let message = trial.message.as_deref().unwrap_or("no message");
        return Err(anyhow!("the check could not run ({}): {message}", trial.outcome));
    }
    Ok(rehearsed)
}

/// "`python train.py ...` at batch 64 on cpu", as the verdict names it.
fn describe(subject: &Subject, trial: &TrialResult, batch: u64, device: Device) -> String {
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
fn details(trial: &TrialResult, (longer, breakdown): (usize, bool), first_steps_of_command: Option<u32>) -> String {
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
