//! Measurement, by side. The parent that runs trials: the [`runner`]
//! (starting a trial child and reading its records, in the protocol of
//! [`crate::record::trial`]), the user's command as a trial ([`command`],
//! with its Python hook, and the [`preimport`]ed interpreter its trials
//! fork from), `exec`'s [`watched`] job, the [`private`] folders and
//! secrets trials use; what both sides share: the [`model`] registry, the
//! [`device`]s (cpu, cuda, nvml), how a step fails ([`failure`]), the
//! [`environment`], and whether libtorch is [`linked`]; the runner of a
//! subject's [`trials`]. The built-in child that measures, everything that
//! links libtorch, is [`child`]. The `builtin` feature gates these two
//! modules only: a build without it has their stand-ins (child_absent.rs,
//! linked_absent.rs), which say there is no libtorch.
//!
//! Layer 4, beside `analyze` (neither imports the other): may import
//! `record`, `units`, `interrupt` and `error`; nothing here knows about
//! analysis, reports or the command line.
#[cfg_attr(not(feature = "builtin"), path = "child_absent.rs")]
pub mod child;
pub mod command;
pub mod device;
pub mod environment;
pub mod failure;
pub mod launch;
#[cfg_attr(not(feature = "builtin"), path = "linked_absent.rs")]
pub mod linked;
pub mod model;
pub mod openmp;
pub mod preimport;
pub mod private;
pub mod runner;
pub mod spread;
pub mod trials;
pub mod watched;
