//! One function per subcommand: validate, call the library, print.
mod bench;
mod list;
mod sweep;
mod train;
mod trial;

use anyhow::Result;

use crate::cli::{Cli, Command, WorkloadArgs};
use crate::model;
use crate::workload::WorkloadConfig;

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Sweep(args) => sweep::run(args),
        Command::Models(args) => list::models(args),
        Command::Devices(args) => list::devices(args),
        Command::Trial(args) => trial::run(args),
        Command::Train(args) => train::run(args),
        Command::BenchSearch(args) => bench::run(args),
    }
}

/// Resolves the model name and fills in its defaults.
fn workload_config(args: &WorkloadArgs) -> Result<WorkloadConfig> {
    let spec = model::find(&args.model)?;
    Ok(WorkloadConfig {
        model: spec.name.to_string(),
        input: args.input.clone().map_or_else(|| spec.default_input.to_vec(), |i| i.0),
        classes: args.classes.unwrap_or(spec.default_classes),
        optimizer: args.optimizer,
        lr: args.lr,
    })
}
