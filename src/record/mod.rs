//! What a run records, as plain values every layer above shares: the trial
//! protocol and a trial's result ([`trial`]), the peak's [`breakdown`], the
//! [`device`], a whole job's [`rehearsal`], the sweep's [`timings`], `exec`'s [`watch`] of the real job, the [`workload`] vramprobe trains and the [`subject`] a run
//! measures (a built-in model, a TorchScript file or the user's command),
//! and the pure model of CUDA's [`caching_allocator`] that both the child
//! (a step's predicted reserved bytes) and the analysis (a GPU's curve)
//! replay traces through. No libtorch, no processes, no files: `analyze` (pure) and `measure` (the
//! trials) both build on it without knowing each other.
//!
//! May import only `units` and `error`.
pub mod breakdown;
pub mod caching_allocator;
pub mod device;
pub mod environment;
pub mod rehearsal;
pub mod subject;
pub mod timings;
pub mod trial;
pub mod watch;
pub mod workload;
