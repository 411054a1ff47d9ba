//! One function per subcommand: validate, call the library, print.
mod bench;
mod check;
mod list;
mod plan;
mod sweep;
mod train;
mod trial;

use anyhow::Result;

use crate::cli::{Cli, Command, SweepArgs, WorkloadArgs};
use crate::error::UsageError;
use crate::model;
use crate::profile;
use crate::workload::{OptimizerKind, WorkloadConfig};

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Sweep(args) => sweep::run(args),
        Command::Models(args) => list::models(args),
        Command::Devices(args) => list::devices(args),
        Command::Trial(args) => trial::run(args),
        Command::Train(args) => train::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Check(args) => check::run(args),
        Command::BenchSearch(args) => bench::run(args),
    }
}

/// Resolves the model name and fills in its defaults.
fn workload_config(args: &WorkloadArgs) -> Result<WorkloadConfig> {
    let name = args.model.as_deref().ok_or_else(|| UsageError::new("--model is required"))?;
    let spec = model::find(name)?;
    Ok(WorkloadConfig {
        model: spec.name.to_string(),
        input: args.input.clone().map_or_else(|| spec.default_input.to_vec(), |i| i.0),
        classes: args.classes.unwrap_or(spec.default_classes),
        optimizer: args.optimizer.unwrap_or(OptimizerKind::Adam),
        lr: args.lr.unwrap_or(DEFAULT_LR),
    })
}

const DEFAULT_LR: f64 = 1e-3;

/// The sweep's workload: a `--profile` preset, with any option given on the
/// command line taking precedence.
fn sweep_workload(args: &SweepArgs) -> Result<WorkloadConfig> {
    let Some(path) = &args.profile else {
        return workload_config(&args.workload);
    };
    let p = profile::load_workload(path).map_err(|e| UsageError::new(e.to_string()))?;
    let w = &args.workload;
    let model = w.model.clone().unwrap_or(p.model.clone());
    let spec = model::find(&model)?;
    Ok(WorkloadConfig {
        model: spec.name.to_string(),
        input: w.input.clone().map_or(p.input, |i| i.0),
        classes: w.classes.unwrap_or(p.classes),
        optimizer: w.optimizer.unwrap_or(p.optimizer),
        lr: w.lr.unwrap_or(p.lr),
    })
}
