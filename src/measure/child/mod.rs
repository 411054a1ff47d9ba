//! The built-in child: the process `vramprobe trial` runs for a built-in
//! model or a TorchScript file, and `vramprobe train`'s steps. One
//! [`workload`] step after another ([`trial`]), each made of a model's
//! network ([`networks`]), an [`optim`]izer and [`data`]; the [`meter`] that reads the
//! device's memory around a step; the C++ [`shim`] (the capacity limit, the
//! ledger); the ledger's classification of the peak ([`breakdown`]); and
//! TEST-ONLY [`fault`] injection (with the `fault-injection` feature; every
//! other build has the no-op stand-in).
//!
//! Everything here links libtorch: the one place the `builtin` feature gates
//! (measure/child_absent.rs stands in for the [`inspect`]ion the parent asks of it).
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::measure::failure::{first_line, is_oom_message, payload_text, Phase, StepError, GUARDED};
use crate::record::device::Device;

pub mod breakdown;
pub mod data;
#[cfg(feature = "fault-injection")]
pub mod fault;
#[cfg(not(feature = "fault-injection"))]
#[path = "no_fault.rs"]
pub mod fault;
mod inspect;
pub mod meter;
pub mod networks;
pub mod optim;
pub mod shim;
pub mod trial;
pub mod workload;

pub use inspect::{parameter_count, torchscript_classes};

/// libtorch's name for a device.
pub fn tch_device(device: Device) -> tch::Device {
    match device {
        Device::Cpu => tch::Device::Cpu,
        Device::Cuda(i) => tch::Device::Cuda(i),
    }
}

/// Runs `f`, converting both `Err` and a panic into a classified error.
pub fn guarded<T>(phase: Phase, f: impl FnOnce() -> Result<T, tch::TchError>) -> Result<T, StepError> {
    shim::ledger_set_phase(phase.ledger_id());
    let was = GUARDED.with(|g| g.replace(true));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(was));
    let message = match outcome {
        Ok(Ok(value)) => return Ok(value),
        Ok(Err(e)) => e.to_string(),
        Err(payload) => payload_text(payload.as_ref()),
    };
    Err(StepError { oom: is_oom_message(&message), phase, message: first_line(&message) })
}
