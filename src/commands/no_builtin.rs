//! The stand-in for commands/builtin/ in a build without the `builtin`
//! feature (cargo install, the Python wheel): each command that needs
//! libtorch says so in one line.
use anyhow::Result;

use crate::commands::cli::{TrainArgs, TrialArgs};
use crate::error::UsageError;
use crate::measure::model::NO_BUILTIN;

pub fn trial(_args: TrialArgs) -> Result<i32> {
    Err(UsageError::new(NO_BUILTIN).into())
}

pub fn train(_args: TrainArgs) -> Result<i32> {
    Err(UsageError::new(NO_BUILTIN).into())
}
