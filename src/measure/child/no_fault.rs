//! The stand-in for TEST-ONLY fault injection ([`fault.rs`](../fault.rs))
//! in a build without the `fault-injection` feature (every build a user
//! runs): no fault can be injected and nothing is read from the environment.
use crate::measure::failure::Phase;

/// No fault: there are none in this build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {}

pub fn from_env() -> Result<Option<Fault>, String> {
    Ok(None)
}

pub fn at_step(_fault: Option<Fault>, _batch: u64, _step: u32) {}

pub fn before(_phase: Phase) -> Result<(), tch::TchError> {
    Ok(())
}
