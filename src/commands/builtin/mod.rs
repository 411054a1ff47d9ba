//! The commands that need libtorch: `trial` (the built-in child), `train`
//! (the companion trainer), the trials of a built-in model or TorchScript
//! file, and loading a TorchScript file for its class count. A build
//! without the `builtin` feature has commands/no_builtin.rs instead.
mod train;
mod trial;

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::commands::cli::{TrainArgs, TrialArgs};
use crate::commands::{TrialSettings, DEFAULT_LR};
use crate::error::UsageError;
use crate::measure::runner::{BuiltInRunner, TrialRunner};
use crate::record::workload::{Mode, OptimizerKind, Precision, WorkloadConfig};

pub fn trial(args: TrialArgs) -> Result<i32> {
    trial::run(args)
}

pub fn train(args: TrainArgs) -> Result<i32> {
    train::run(args)
}

/// A `vramprobe trial` child per batch for a built-in or TorchScript model.
pub fn runner(
    workload: &WorkloadConfig,
    how: TrialSettings,
    trials_dir: PathBuf,
) -> Result<Box<dyn TrialRunner + Send>> {
    let TrialSettings { device, steps, limit, timeout, .. } = how;
    Ok(Box::new(BuiltInRunner {
        exe: std::env::current_exe().context("locating the vramprobe binary to run trials")?,
        trials_dir,
        workload: workload.clone(),
        device,
        steps,
        limit,
        timeout,
    }))
}

/// A TorchScript model's class count: the last dimension of its output for
/// one sample, run here on the CPU (which also proves the file loads).
pub fn torchscript_classes(model: &str, input: &[i64]) -> Result<i64> {
    let config = WorkloadConfig {
        model: model.to_string(),
        input: input.to_vec(),
        classes: 1,
        optimizer: OptimizerKind::Sgd,
        lr: DEFAULT_LR,
        precision: Precision::Fp32,
        mode: Mode::Eval,
    };
    let not_a_model = |e: crate::measure::failure::StepError| {
        UsageError::new(format!("--model {model}: not a usable TorchScript model ({})", e.message))
    };
    let workload = crate::measure::child::workload::Workload::new(config, crate::record::device::Device::Cpu)
        .map_err(not_a_model)?;
    let shape = workload.output_shape().map_err(not_a_model)?;
    match shape.as_slice() {
        [1, classes] if *classes >= 1 => Ok(*classes),
        other => Err(UsageError::new(format!(
            "--model {model}: its output for one sample has shape {other:?}, not [1, classes]; give --classes"
        ))
        .into()),
    }
}
