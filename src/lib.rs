//! vramprobe: measures how large a training batch a device can hold.
//!
//! Data flows one way: [`cli`] -> [`commands`] -> [`sweep`] (which runs each
//! [`trial`] in a child process: [`model`] + [`workload`] measured through
//! [`device`]) -> [`analysis`] ([`fit`]) -> [`report`] formatters -> [`output`].
pub mod analysis;
pub mod bench;
pub mod cli;
pub mod commands;
pub mod data;
pub mod device;
pub mod environment;
pub mod error;
pub mod fastest;
pub mod fault;
pub mod fit;
pub mod interrupt;
pub mod model;
pub mod optim;
pub mod output;
pub mod plan;
pub mod precision;
pub mod profile;
pub mod progress;
pub mod record;
pub mod report;
pub mod search;
pub mod seqfit;
pub mod shim;
pub mod sweep;
pub mod train;
pub mod trial;
pub mod units;
pub mod whatif;
pub mod workload;

/// The tch release this build uses (tch pins its libtorch version); the GPU
/// kit builds with 0.24 for torch 2.11 (scripts/build-gpu-kit).
pub const TCH_VERSION: &str = env!("VRAMPROBE_TCH_VERSION");
