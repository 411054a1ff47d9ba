//! The commands: one file per subcommand (validate, call the library,
//! print) and the clap definitions ([`cli`]). The only place that knows
//! about the command line and the terminal's stdout.
//!
//! Layer 1, the top: may import every layer below; nothing imports it
//! (but `main.rs`).
mod bench;
// What needs libtorch (the trial child, the trainer), or a stand-in that
// says this build has none.
#[cfg(feature = "builtin")]
mod builtin;
#[cfg(not(feature = "builtin"))]
#[path = "no_builtin.rs"]
mod builtin;
mod check;
pub mod cli;
mod exec;
mod launch;
mod list;
mod plan;
mod report;
mod sweep;

use anyhow::Result;

use crate::commands::cli::{Cli, Command};

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    // The commands that run trials or train stop cleanly on Ctrl-C or SIGTERM;
    // a trial child has no handler: its parent kills its process group.
    if matches!(cli.command, Command::Sweep(_) | Command::Train(_) | Command::Check(_)) {
        crate::interrupt::install();
    }
    match cli.command {
        Command::Sweep(args) => sweep::run(args),
        Command::Models(args) => list::models(args),
        Command::Devices(args) => list::devices(args),
        Command::Trial(args) => builtin::trial(args),
        Command::Launch(args) => launch::run(args),
        Command::Train(args) => builtin::train(args),
        Command::Plan(args) => plan::run(args),
        Command::Check(args) => check::run(args),
        Command::Exec(args) => exec::run(args),
        Command::BenchSearch(args) => bench::run(args),
        Command::Report(args) => report::run(args),
        Command::Completions(args) => report::completions(args),
    }
}
