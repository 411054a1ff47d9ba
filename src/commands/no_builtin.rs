//! The stand-in for commands/builtin/ in a build without the `builtin`
//! feature (cargo install, the Python wheel): each command that needs
//! libtorch says so in one line.
use std::path::PathBuf;

use anyhow::Result;

use crate::commands::cli::{TrainArgs, TrialArgs};
use crate::commands::TrialSettings;
use crate::error::UsageError;
use crate::measure::linked::NO_BUILTIN;
use crate::measure::runner::TrialRunner;
use crate::record::workload::WorkloadConfig;

pub fn trial(_args: TrialArgs) -> Result<i32> {
    Err(UsageError::new(NO_BUILTIN).into())
}

pub fn train(_args: TrainArgs) -> Result<i32> {
    Err(UsageError::new(NO_BUILTIN).into())
}

pub fn runner(
    _workload: &WorkloadConfig,
    _how: TrialSettings,
    _trials_dir: PathBuf,
) -> Result<Box<dyn TrialRunner + Send>> {
    Err(UsageError::new(NO_BUILTIN).into())
}

pub fn torchscript_classes(_model: &str, _input: &[i64]) -> Result<i64> {
    Err(UsageError::new(NO_BUILTIN).into())
}
