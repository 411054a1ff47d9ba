//! `vramprobe sweep`: validate, run the sweep, print the summary.
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::cli::SweepArgs;
use crate::device;
use crate::environment;
use crate::error::UsageError;
use crate::output;
use crate::record::{Outcome, StepRecord};
use crate::report::table;
use crate::sweep::{self, runner::TrialResult, Plan, Progress, SweepConfig};
use crate::units::human_bytes;

/// One line per trial on stderr; stdout is kept for the summary.
struct Lines {
    quiet: bool,
}

impl Progress for Lines {
    fn trial_started(&mut self, trial: u32, batch: u64) {
        if !self.quiet {
            eprint!("trial {trial:>2}  batch {batch:>5}  ");
        }
    }

    fn step_done(&mut self, _step: &StepRecord) {
        if !self.quiet {
            eprint!(".");
        }
    }

    fn trial_done(&mut self, r: &TrialResult) {
        if self.quiet {
            return;
        }
        match r.outcome {
            Outcome::Fits => eprintln!(
                " fits  peak {}  {:.3} s/step  ({:.1}s)",
                r.peak_allocated_bytes().map_or("-".into(), |b| human_bytes(b as f64)),
                r.mean_step_seconds().unwrap_or(0.0),
                r.wall_seconds
            ),
            other => eprintln!(" {other}: {}", r.message.as_deref().unwrap_or("")),
        }
    }
}

pub fn run(args: SweepArgs) -> Result<i32> {
    let workload = super::workload_config(&args.workload)?;
    if let (Some(b), Some(m)) = (&args.batches, args.max_batch) {
        if b.0.iter().any(|&x| x > m) {
            return Err(UsageError::new("--batches lists a batch above --max-batch").into());
        }
    }
    let (device, device_note) = device::resolve(args.device)?;
    let (_, stamp) = environment::utc_now();
    let out_dir = output::prepare_out_dir(args.out.as_deref(), &workload.model, &stamp)?;
    if let Some(note) = &device_note {
        eprintln!("note: {note}");
    }
    let cfg = SweepConfig {
        workload,
        device,
        plan: match args.batches {
            Some(b) => Plan::Batches(b.0),
            None => Plan::Search(args.strategy),
        },
        max_batch: args.max_batch,
        steps: args.verify_steps,
        tolerance: args.tolerance,
        trial_timeout: Duration::from_secs(args.trial_timeout),
        capacity: args.capacity,
        margin_fraction: args.margin,
        multiple_of: args.multiple_of,
        out_dir: out_dir.clone(),
        command_line: std::env::args().collect(),
        exe: std::env::current_exe().context("locating the vramprobe binary to run trials")?,
        notes: device_note.into_iter().collect(),
    };
    let report = sweep::run(&cfg, &mut Lines { quiet: args.quiet })?;
    print!("{}", table::summary(&report));
    println!("Wrote {}: steps.csv, sweep.csv, plan.csv, report.json", out_dir.display());

    let analysis = report.analysis.as_ref().ok_or_else(|| anyhow!("the sweep produced no analysis"))?;
    if analysis.max_batch == 0 {
        return Err(does_not_fit(&report.workload.model, &cfg, &report.trials, analysis.budget));
    }
    Ok(0)
}

/// The error for a model that does not fit even at the smallest batch, with the numbers.
fn does_not_fit(model: &str, cfg: &SweepConfig, trials: &[TrialResult], budget: crate::fit::Budget) -> anyhow::Error {
    let budget_text = format!(
        "capacity {}, budget {}",
        human_bytes(budget.capacity_bytes as f64),
        human_bytes(budget.budget_bytes as f64)
    );
    let Some(first) = trials.iter().min_by_key(|t| t.batch) else {
        return anyhow!("no trial ran");
    };
    let why = match first.outcome {
        Outcome::Oom => format!("out of memory ({})", first.message.as_deref().unwrap_or("")),
        Outcome::Fits => format!(
            "its peak is {}, over the budget",
            first.peak_allocated_bytes().map_or("?".into(), |b| human_bytes(b as f64))
        ),
        _ => {
            return anyhow!(
                "the trial at batch {} failed: {}",
                first.batch,
                first.message.as_deref().unwrap_or("no message")
            )
        }
    };
    anyhow!("{model} does not fit even at batch {} on {}: {why}; {budget_text}", first.batch, cfg.device)
}
