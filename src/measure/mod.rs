//! Measurement: everything that runs inside a trial child or talks to a
//! device. The trial protocol ([`record`]: the child's JSON records and the
//! parent's [`record::TrialResult`]), the parent side that starts a trial
//! child and reads it ([`runner`]), the child itself ([`trial`]: one
//! [`workload`] step after another), and what a step is made of: [`model`],
//! [`optim`], [`precision`], [`data`], [`device`] (cpu, cuda, nvml), the [`meter`] that reads them around a step,
//! the C++ [`shim`], the peak's [`breakdown`], the [`environment`], and TEST-ONLY [`fault`] injection (only with the `fault-injection` feature).
//!
//! May import only `units`, `interrupt` and `error`: nothing here knows
//! about analysis, reports or the command line.
pub mod breakdown;
pub mod command;
pub mod data;
pub mod device;
pub mod environment;
pub mod failure;
// TEST-ONLY fault injection, in builds with the `fault-injection` feature
// (./scripts/test's); every other build has the no-op stand-in.
#[cfg(feature = "fault-injection")]
pub mod fault;
#[cfg(not(feature = "fault-injection"))]
#[path = "no_fault.rs"]
pub mod fault;
pub mod meter;
pub mod model;
pub mod optim;
pub mod precision;
pub mod record;
pub mod runner;
pub mod shim;
pub mod subject;
pub mod trial;
pub mod workload;
