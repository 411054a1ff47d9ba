//! vramprobe: measures how large a training batch a device can hold.
//!
//! The folders are the layers, top to bottom; a module imports only from the
//! layers below it (`tests/layers.rs` checks this on every run):
//!
//! - [`commands`]: one file per subcommand and the clap definitions; the
//!   only place that knows about the command line and the terminal.
//! - [`sweep`], [`train`], [`bench`](mod@bench): the orchestrator, the companion
//!   trainer and the search benchmark, side by side (none imports another).
//! - [`report`]: formatters that return bytes (table, CSV, JSON, SVG, HTML),
//!   the plan.csv reader, the trainer's log, atomic output and progress.
//! - [`analyze`] and [`measure`], side by side (neither imports the other):
//!   pure functions over measurements (fits, search strategies, the
//!   analysis, GPU profiles and predictions; no I/O), and everything that
//!   runs a trial or talks to a device (the trial runner, the built-in
//!   child, the command hook, models, optimizers, data, devices, the C++ shim).
//! - [`record`]: the values both share: the trial protocol and results, the
//!   peak's breakdown, devices, workloads and the subject a run measures.
//! - [`units`], [`interrupt`], then [`error`] at the bottom.
pub mod analyze;
pub mod bench;
pub mod commands;
pub mod error;
pub mod interrupt;
pub mod measure;
pub mod record;
pub mod report;
pub mod sweep;
#[cfg(feature = "builtin")]
pub mod train;
pub mod units;
