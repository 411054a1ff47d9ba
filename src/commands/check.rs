//! `vramprobe check`: the pre-flight check. Runs a few real training steps
//! at exactly one configuration, in a child process, and answers with an
//! exit code a job script can test: 0 fits, 3 won't fit, 1 runtime error,
//! 2 usage error.
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::analyze::analysis::{budget_for, FitBasis};
use crate::analyze::fit::{Budget, LinearFit};
use crate::analyze::whole_job::Worst;
use crate::commands::cli::CheckArgs;
use crate::error::UsageError;
use crate::measure::trials::{self, TrialSettings};
use crate::measure::{device, private};
use crate::record::device::{Device, DeviceRequest};
use crate::record::subject::Subject;
use crate::record::trial::Outcome;
use crate::report::verdict::{describe, details, judge, Judgement, ProjectionJson, VerdictJson};
use crate::report::{plan_file, rehearsal};
use crate::sweep::{subjects, whole_job};
use crate::units::format_input;

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
            let mut subject = row.subject(args.workload.lr.unwrap_or(subjects::DEFAULT_LR)).ok_or_else(|| {
                UsageError::new(format!("{}:{}: the row does not say what to run", path.display(), entry.line))
            })?;
            // --world-size overrides the row's ranks.
            if let (Subject::Command(c), Some(w)) = (&mut subject, args.world_size) {
                c.world_size = Some(w);
            }
            let subject = subjects::across_nodes(subject, args.nodes.nodes()?)?;
            Ok(Target { subject, batch: row.recommended_batch, plan_device: Some(row.device), fit })
        }
        (None, None, Some(batch)) if !args.command.is_empty() => {
            let nodes = args.nodes.nodes()?;
            let subject = subjects::one_command(&args.command, &args.workload.options(), args.world_size, nodes)?;
            Ok(Target { subject, batch, plan_device: None, fit: None })
        }
        (None, Some(_), Some(batch)) => Ok(Target {
            subject: subjects::across_nodes(
                Subject::of_workload(subjects::one_workload(&args.workload.options())?),
                args.nodes.nodes()?,
            )?,
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
            Some(Worst::Projected(p)) if Some(p.peak_bytes) == peak => Some(ProjectionJson::of(&p)),
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
    let how = TrialSettings {
        device,
        steps: args.steps.unwrap_or(3),
        limit: device::capacity_limit(device, args.capacity)?,
        timeout: Duration::from_secs(args.trial_timeout),
        fresh_process: true,
        via: args.nodes.via()?,
    };
    // The trials' folders (spec, records, a command's output), kept only for this check.
    // A fresh private folder, never a guessable name someone else made first.
    let scratch = private::scratch("vramprobe-check-", None).context("creating the check's scratch folder")?;
    let mut runner = trials::runner(subject, how, scratch.path().into())?;
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
