//! The runner of a subject's trials: a `vramprobe trial` child per batch
//! for a built-in or TorchScript model, the user's command for a command.
//! The sweep's and check's one way to measure.
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::error::UsageError;
use crate::measure::command::{CommandRunner, CommandRuns};
use crate::measure::linked::LINKED;
use crate::measure::model::NO_BUILTIN;
use crate::measure::preimport::TrialStart;
use crate::measure::runner::{run, trial_dir, BuiltIn, TrialRunner};
use crate::measure::spread::{Spread, Via};
use crate::record::device::{CapacityLimit, Device};
use crate::record::subject::Subject;
use crate::record::trial::{StepRecord, TrialResult, TrialSpec};
use crate::record::workload::WorkloadConfig;

/// How each trial runs, as the sweep or check asks.
#[derive(Debug, Clone, Copy)]
pub struct TrialSettings {
    pub device: Device,
    pub steps: u32,
    pub limit: CapacityLimit,
    pub timeout: Duration,
    /// A command: start each trial afresh, not forked from a pre-imported interpreter.
    pub fresh_process: bool,
    /// Where each trial starts: here, as a Slurm job step, or as a Ray task.
    pub via: Via,
}

/// The runner of `subject`'s trials, each trial's folder (spec, records, a
/// command's output) in `trials_dir`.
pub fn runner(subject: &Subject, how: TrialSettings, trials_dir: PathBuf) -> Result<Box<dyn TrialRunner + Send>> {
    let TrialSettings { device, steps, limit, timeout, fresh_process, via } = how;
    Ok(match subject {
        Subject::BuiltIn(_) | Subject::TorchScript(_) if !LINKED => return Err(UsageError::new(NO_BUILTIN).into()),
        Subject::BuiltIn(w) | Subject::TorchScript(w) => Box::new(BuiltInRunner {
            exe: std::env::current_exe().context("locating the vramprobe binary to run trials")?,
            trials_dir,
            workload: w.clone(),
            device,
            steps,
            limit,
            timeout,
            via,
        }),
        Subject::Command(c) => {
            let runs = CommandRuns::new(c.command.clone(), c.placeholders(), trials_dir.clone())
                .with_context(|| format!("preparing {} and vramprobe's Python hook", trials_dir.display()))?;
            let runs = CommandRuns { nodes: c.nodes.clone(), ..runs };
            let start = match (&c.nodes, via) {
                (Some(n), _) => TrialStart::Fresh(format!("a job across {} nodes starts its agents afresh", n.count)),
                (None, Via::SlurmStep | Via::RayTask) => {
                    TrialStart::Fresh("each trial is a job of the scheduler, started where it puts it".into())
                }
                (None, Via::Here) => TrialStart::new(&c.command.for_batch(1), fresh_process),
            };
            Box::new(CommandRunner { runs, device, steps, limit, timeout, start, via })
        }
    })
}

/// A built-in workload's (or a TorchScript file's) trials, each a
/// `vramprobe trial` child of `exe` with its folder in `trials_dir`.
#[derive(Debug, Clone)]
pub struct BuiltInRunner {
    pub exe: PathBuf,
    pub trials_dir: PathBuf,
    pub workload: WorkloadConfig,
    pub device: Device,
    pub steps: u32,
    pub limit: CapacityLimit,
    pub timeout: Duration,
    pub via: Via,
}

impl TrialRunner for BuiltInRunner {
    fn run(
        &mut self,
        trial: u32,
        batch: u64,
        breakdown: bool,
        on_step: &mut dyn FnMut(&StepRecord),
    ) -> anyhow::Result<TrialResult> {
        let spec = TrialSpec {
            workload: Some(self.workload.clone()),
            breakdown,
            trace: true,
            ..TrialSpec::new(batch, self.steps, self.device, self.limit)
        };
        // The run's trial folders, private (a trial's own folder is made so too).
        crate::measure::private::own_dir(&self.trials_dir)
            .map_err(|e| anyhow::anyhow!("preparing {}: {e}", self.trials_dir.display()))?;
        let dir = trial_dir(&self.trials_dir, trial, batch);
        let kind = BuiltIn { exe: &self.exe, dir, spec: &spec };
        let spread = Spread { kind: &kind, via: self.via, gpu: self.device.is_cuda() };
        Ok(run(&spread, trial, self.timeout, on_step))
    }

    fn beside(&self, device: Device) -> Option<Box<dyn TrialRunner + Send>> {
        Some(Box::new(BuiltInRunner { device, ..self.clone() }))
    }
}
