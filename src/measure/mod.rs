//! Measurement, by side. The parent that runs trials: the [`runner`]
//! (starting a trial child and reading its records, in the protocol of
//! [`crate::record::trial`]), the user's command as a trial ([`command`],
//! with its Python hook, and the [`preimport`]ed interpreter its trials
//! fork from), `exec`'s [`watched`] job, the [`private`] folders and
//! secrets trials use; what both sides share: the [`model`] registry, the
//! [`device`]s (cpu, cuda, nvml), how a step fails ([`failure`]), the
//! [`environment`], and whether libtorch is [`linked`]. The built-in child
//! that measures, everything that links libtorch, is [`child`]: the one
//! module the `builtin` feature gates (with the model's networks).
//!
//! Layer 4, beside `analyze` (neither imports the other): may import
//! `record`, `units`, `interrupt` and `error`; nothing here knows about
//! analysis, reports or the command line.
#[cfg(feature = "builtin")]
pub mod child;
pub mod command;
pub mod device;
pub mod environment;
pub mod failure;
pub mod linked;
pub mod model;
pub mod preimport;
pub mod private;
pub mod runner;
pub mod watched;
