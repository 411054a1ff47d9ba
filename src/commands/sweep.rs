//! `vramprobe sweep`: validate, run the sweep, print the summary.
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::cli::SweepArgs;
use crate::device::{self, Device, DeviceRequest};

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

/// One trial line per device when several run at once.
struct Prefixed {
    device: Device,
    quiet: bool,
}

impl Progress for Prefixed {
    fn trial_started(&mut self, _trial: u32, _batch: u64) {}
    fn step_done(&mut self, _step: &StepRecord) {}
    fn trial_done(&mut self, r: &TrialResult) {
        if !self.quiet {
            eprintln!("{}: trial {} batch {}: {}", self.device, r.trial, r.batch, r.outcome);
        }
    }
}

pub fn run(args: SweepArgs) -> Result<i32> {
    let workload = super::sweep_workload(&args)?;
    if let (Some(b), Some(m)) = (&args.batches, args.max_batch) {
        if b.0.iter().any(|&x| x > m) {
            return Err(UsageError::new("--batches lists a batch above --max-batch").into());
        }
    }
    let devices: Vec<(Device, Option<String>)> = match args.device {
        DeviceRequest::All => device::all_cuda()?.into_iter().map(|d| (d, None)).collect(),
        request => vec![device::resolve(request)?],
    };
    let (_, stamp) = environment::utc_now();
    let out_dir = output::prepare_out_dir(args.out.as_deref(), &workload.model, &stamp)?;
    let mut configs = Vec::new();
    for (device, note) in devices.iter().cloned() {
        if let Some(note) = &note {
            eprintln!("note: {note}");
        }
        let dir = if devices.len() > 1 { out_dir.join(device.to_string().replace(':', "-")) } else { out_dir.clone() };
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        configs.push(SweepConfig {
            workload: workload.clone(),
            device,
            plan: match &args.batches {
                Some(b) => Plan::Batches(b.0.clone()),
                None => Plan::Search(args.strategy),
            },
            max_batch: args.max_batch,
            steps: args.verify_steps,
            tolerance: args.tolerance,
            trial_timeout: Duration::from_secs(args.trial_timeout),
            capacity: args.capacity,
            cuda_memory_fraction: match (device, args.capacity) {
                (Device::Cuda(i), Some(c)) => Some(device::cuda::emulation_fraction(i, c).map_err(UsageError::new)?),
                _ => None,
            },
            margin_fraction: args.margin,
            multiple_of: args.multiple_of,
            out_dir: dir,
            command_line: std::env::args().collect(),
            exe: std::env::current_exe().context("locating the vramprobe binary to run trials")?,
            notes: note.into_iter().collect(),
        });
    }
    if configs.len() == 1 {
        let cfg = &configs[0];
        let report = sweep::run(cfg, &mut Lines { quiet: args.quiet })?;
        print!("{}", table::summary(&report));
        println!("Wrote {}: steps.csv, sweep.csv, plan.csv, report.json", out_dir.display());
        let analysis = report.analysis.as_ref().ok_or_else(|| anyhow!("the sweep produced no analysis"))?;
        if analysis.max_batch == 0 {
            return Err(does_not_fit(&report.workload.model, cfg, &report.trials, analysis.budget));
        }
        return Ok(0);
    }
    // Every GPU at once, one child per device: a data-parallel job on this
    // node can use the smallest recommendation.
    let reports: Vec<Result<crate::report::Report>> = std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .iter()
            .map(|cfg| scope.spawn(move || sweep::run(cfg, &mut Prefixed { device: cfg.device, quiet: args.quiet })))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(anyhow!("a device's sweep panicked")))).collect()
    });
    let mut recommended = Vec::new();
    for (cfg, report) in configs.iter().zip(&reports) {
        match report {
            Ok(r) => {
                print!("{}", table::summary(r));
                recommended.push(r.analysis.as_ref().map_or(0, |a| a.recommended_batch));
            }
            Err(e) => {
                eprintln!("{}: {e:#}", cfg.device);
                recommended.push(0);
            }
        }
    }
    let min = recommended.iter().copied().min().unwrap_or(0);
    println!(
        "Per device recommended batch: {recommended:?}; for data-parallel training on this node: {min} per device"
    );
    println!("Wrote {} (one folder per device)", out_dir.display());
    if min == 0 {
        return Err(anyhow!("at least one device has no batch that fits"));
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
