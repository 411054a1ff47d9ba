//! Measurement: everything that runs inside a trial child or talks to a
//! device. The parent side that starts a trial child and reads its records
//! ([`runner`], speaking the protocol of [`crate::record::trial`]), the
//! built-in child itself ([`trial`]: one [`workload`] step after another),
//! the user's command as a trial ([`command`], with its Python hook, and
//! the [`preimport`]ed interpreter its trials fork from), and
//! what a step is made of: [`model`], [`optim`], [`data`], [`device`] (cpu,
//! cuda, nvml), the [`meter`] that reads them around a step, the C++
//! [`shim`], the ledger's classification of the peak ([`breakdown`]), the
//! [`environment`], the [`private`] folders and secrets trials use, and TEST-ONLY [`fault`] injection (only with the
//! `fault-injection` feature).
//!
//! Everything that links libtorch (the built-in child, its models, the
//! shim, the ledger's breakdown) is built with the `builtin` feature only;
//! the rest (the runner, command mode, devices through NVML) needs none.
//!
//! Layer 4, beside `analyze` (neither imports the other): may import
//! `record`, `units`, `interrupt` and `error`; nothing here knows about
//! analysis, reports or the command line.
#[cfg(feature = "builtin")]
pub mod breakdown;
pub mod command;
#[cfg(feature = "builtin")]
pub mod data;
pub mod device;
pub mod environment;
pub mod failure;
// TEST-ONLY fault injection, in builds with the `fault-injection` feature
// (./scripts/test's); every other build has the no-op stand-in.
#[cfg(feature = "fault-injection")]
pub mod fault;
#[cfg(all(feature = "builtin", not(feature = "fault-injection")))]
#[path = "no_fault.rs"]
pub mod fault;
pub mod linked;
#[cfg(feature = "builtin")]
pub mod meter;
pub mod model;
#[cfg(feature = "builtin")]
pub mod optim;
pub mod preimport;
pub mod private;
pub mod runner;
#[cfg(feature = "builtin")]
pub mod shim;
#[cfg(feature = "builtin")]
pub mod trial;
pub mod watched;
#[cfg(feature = "builtin")]
pub mod workload;
