//! The integration tests, one module a file beside this one, built as one
//! test binary: a binary a file linked the release lib and tch 26 times
//! (98 s -> 61 s for the test build after a change to the lib, 2 cores).
//! nextest still runs each test in its own process; a module's tests are
//! `module::test`, which .config/nextest.toml's groups match.
//! host_tracking.rs stays a binary of its own (see Cargo.toml).
mod common;

mod bad_input;
mod bench;
mod breakdown;
mod check_plan;
mod cli_errors;
mod command_mode;
mod distributed;
mod exec_watch;
mod faults;
mod fuzz_parsers;
mod gpu_check;
mod install;
mod layers;
mod models;
mod parity;
mod portability;
mod rerender;
mod runner;
mod security;
mod side_by_side;
mod sweep_cpu;
mod train;
mod visual;
mod whole_job;
mod workloads;
