//! The sweep orchestrator: chooses batch sizes, runs each as a trial in a
//! child process, writes partial results after every trial, and finishes
//! with the analysis and the plan.
pub mod runner;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;

use crate::analysis::{self, AnalysisInput};
use crate::device::Device;
use crate::environment;
use crate::output::write_atomic;
use crate::record::{Outcome, StepRecord};
use crate::report::{self, Report, REPORT_SCHEMA_VERSION};
use crate::trial::TrialSpec;
use crate::workload::WorkloadConfig;
use runner::TrialResult;

/// Without a GPU, training steps are slow; the CPU sweep stops doubling here
/// unless `--max-batch` says otherwise, and the fit predicts beyond it.
pub const CPU_DEFAULT_MAX_BATCH: u64 = 64;

#[derive(Debug, Clone)]
pub struct SweepConfig {
    pub workload: WorkloadConfig,
    pub device: Device,
    /// Explicit batch sizes (ascending); `None` doubles from 1.
    pub batches: Option<Vec<u64>>,
    pub max_batch: Option<u64>,
    pub steps: u32,
    pub trial_timeout: Duration,
    pub capacity: Option<u64>,
    pub margin_fraction: f64,
    pub multiple_of: u64,
    pub out_dir: PathBuf,
    pub command_line: Vec<String>,
    /// The vramprobe binary that runs each trial.
    pub exe: PathBuf,
    pub notes: Vec<String>,
}

impl SweepConfig {
    fn analysis_input(&self) -> AnalysisInput {
        AnalysisInput {
            device: self.device,
            capacity_override: self.capacity,
            margin_fraction: self.margin_fraction,
            multiple_of: self.multiple_of,
        }
    }

    fn effective_max_batch(&self) -> u64 {
        match (self.max_batch, self.device) {
            (Some(m), _) => m,
            (None, Device::Cpu) => CPU_DEFAULT_MAX_BATCH,
            (None, Device::Cuda(_)) => u64::MAX / 2,
        }
    }
}

/// What the sweep reports as it goes.
pub trait Progress {
    fn trial_started(&mut self, trial: u32, batch: u64);
    fn step_done(&mut self, step: &StepRecord);
    fn trial_done(&mut self, result: &TrialResult);
}

/// The next batch to try after `done`, or `None` to stop.
fn next_batch(cfg: &SweepConfig, done: &[TrialResult]) -> Option<u64> {
    let last = done.last();
    if let Some(t) = last {
        if t.outcome != Outcome::Fits {
            return None;
        }
        // A measured peak over budget ends the sweep: larger batches only grow.
        if analysis::analyze(done, cfg.analysis_input())
            .smallest_failing_batch
            .is_some()
        {
            return None;
        }
    }
    match &cfg.batches {
        Some(list) => list.get(done.len()).copied(),
        None => {
            let max = cfg.effective_max_batch();
            let next = last.map_or(1, |t| t.batch.saturating_mul(2));
            match last {
                _ if next <= max => Some(next),
                // Try the cap itself once when doubling would jump past it.
                Some(t) if t.batch < max && cfg.max_batch.is_some() => Some(max),
                _ => None,
            }
        }
    }
}

fn write_outputs(dir: &Path, report: &Report, with_plan: bool) -> Result<()> {
    write_atomic(
        &dir.join("steps.csv"),
        &report::csv::steps_csv(&report.trials)?,
    )?;
    write_atomic(
        &dir.join("sweep.csv"),
        &report::csv::sweep_csv(&report.trials)?,
    )?;
    if with_plan {
        write_atomic(&dir.join("plan.csv"), &report::csv::plan_csv(report)?)?;
    }
    write_atomic(
        &dir.join("report.json"),
        &report::json::report_json(report)?,
    )
}

/// Runs the sweep. Outputs are rewritten after every trial, so whatever was
/// measured survives a failure later on.
pub fn run(cfg: &SweepConfig, progress: &mut dyn Progress) -> Result<Report> {
    let (started_at, _) = environment::utc_now();
    let mut report = Report {
        schema_version: REPORT_SCHEMA_VERSION,
        status: "running".into(),
        command_line: cfg.command_line.clone(),
        started_at,
        environment: environment::capture(),
        workload: cfg.workload.clone(),
        device: cfg.device.to_string(),
        device_name: None,
        steps_per_trial: cfg.steps,
        margin_fraction: cfg.margin_fraction,
        multiple_of: cfg.multiple_of,
        trials: Vec::new(),
        analysis: None,
        notes: cfg.notes.clone(),
    };
    write_outputs(&cfg.out_dir, &report, false)?;

    while let Some(batch) = next_batch(cfg, &report.trials) {
        let trial = report.trials.len() as u32 + 1;
        progress.trial_started(trial, batch);
        let spec = TrialSpec {
            workload: cfg.workload.clone(),
            device: cfg.device,
            batch,
            steps: cfg.steps,
        };
        let result = runner::run_trial(&cfg.exe, trial, &spec, cfg.trial_timeout, |s| {
            progress.step_done(s)
        });
        progress.trial_done(&result);
        if report.device_name.is_none() {
            report.device_name = result.device_name.clone();
        }
        report.trials.push(result);
        write_outputs(&cfg.out_dir, &report, false)?;
    }

    if let (Some(list), n) = (&cfg.batches, report.trials.len()) {
        if n < list.len() {
            report.notes.push(format!(
                "batches {:?} were not run: a smaller batch already failed or exceeded the budget",
                &list[n..]
            ));
        }
    }
    let analysis = analysis::analyze(&report.trials, cfg.analysis_input());
    report.status = if analysis.max_batch > 0 {
        "complete"
    } else {
        "failed"
    }
    .into();
    report.analysis = Some(analysis);
    write_outputs(&cfg.out_dir, &report, true)?;
    Ok(report)
}
