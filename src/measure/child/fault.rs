//! TEST-ONLY fault injection for the fault-matrix tests (tests/faults.rs).
//! The trial child reads `VRAMPROBE_TEST_FAULT`; nothing else does, and an
//! ordinary run never sets it. No measurement is faked: an injected OOM
//! lowers the CPU allocator's limit to one byte just before the chosen
//! phase, so the phase's first real allocation fails inside libtorch, as a
//! full device would make it fail.
//!
//! `VRAMPROBE_TEST_FAULT=KIND[@BATCH]`, at step 2 of each trial at BATCH (or
//! of every trial), KIND one of:
//! `oom-data`, `oom-forward`, `oom-backward`, `oom-optimizer` (a real OOM
//! in that phase, CPU only), `error` (a real non-OOM libtorch error in the
//! forward pass), `kill` (the child sends itself SIGKILL), `hang` (the
//! child starts `sleep 3171` and never finishes).
use std::sync::atomic::{AtomicU8, Ordering};

use crate::measure::failure::Phase;

/// The step of a trial at which a fault fires (after the optimizer state exists).
pub const FAULT_STEP: u32 = 2;

/// The environment variable the trial child reads.
pub const ENV: &str = "VRAMPROBE_TEST_FAULT";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    Oom(Phase),
    Error,
    Kill,
    Hang,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    /// Only trials at this batch (all when None).
    pub batch: Option<u64>,
}

pub fn parse(text: &str) -> Result<Fault, String> {
    let (kind, batch) = match text.split_once('@') {
        Some((k, b)) => (k, Some(b.parse::<u64>().map_err(|_| format!("{ENV}: '{b}' is not a batch"))?)),
        None => (text, None),
    };
    let kind = match kind {
        "oom-data" => FaultKind::Oom(Phase::Data),
        "oom-forward" => FaultKind::Oom(Phase::Forward),
        "oom-backward" => FaultKind::Oom(Phase::Backward),
        "oom-optimizer" => FaultKind::Oom(Phase::Optimizer),
        "error" => FaultKind::Error,
        "kill" => FaultKind::Kill,
        "hang" => FaultKind::Hang,
        other => return Err(format!("{ENV}: unknown fault '{other}'")),
    };
    Ok(Fault { kind, batch })
}

/// The fault the environment asks for, if any.
pub fn from_env() -> Result<Option<Fault>, String> {
    match std::env::var(ENV) {
        Ok(text) if !text.is_empty() => parse(&text).map(Some),
        _ => Ok(None),
    }
}

const NONE: u8 = 0;
const ERROR: u8 = 1;

fn code(phase: Phase) -> u8 {
    match phase {
        Phase::Build => 10,
        Phase::Data => 11,
        Phase::ZeroGrad => 15,
        Phase::Forward => 12,
        Phase::Backward => 13,
        Phase::Optimizer => 14,
    }
}

/// What [`before`] does next: NONE, ERROR (in the forward pass) or an OOM phase's code.
static ARMED: AtomicU8 = AtomicU8::new(NONE);

/// Called by the trial child before each step: fires kill and hang at once,
/// arms OOM and error faults for the step's phases.
pub fn at_step(fault: Option<Fault>, batch: u64, step: u32) {
    let Some(f) = fault.filter(|f| step == FAULT_STEP && f.batch.is_none_or(|b| b == batch)) else {
        return;
    };
    match f.kind {
        FaultKind::Oom(phase) => ARMED.store(code(phase), Ordering::SeqCst),
        FaultKind::Error => ARMED.store(ERROR, Ordering::SeqCst),
        FaultKind::Kill => {
            // SAFETY: raise(3) on our own process.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        FaultKind::Hang => {
            // A grandchild in the same process group: the timeout must kill it too.
            let _ = std::process::Command::new("sleep").arg("3171").spawn();
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
            }
        }
    }
}

/// Called by the workload at the start of each phase.
pub fn before(phase: Phase) -> Result<(), tch::TchError> {
    let armed = ARMED.load(Ordering::SeqCst);
    if armed == NONE {
        return Ok(());
    }
    if armed == code(phase) {
        ARMED.store(NONE, Ordering::SeqCst);
        // The next allocation in this phase fails inside libtorch.
        crate::measure::child::shim::cpu_limit_install(1).map_err(|e| tch::TchError::Torch(e.to_string()))?;
    } else if armed == ERROR && phase == Phase::Forward {
        ARMED.store(NONE, Ordering::SeqCst);
        // A real libtorch error that is not an OOM: incompatible shapes.
        let a = tch::Tensor::zeros([2, 3], (tch::Kind::Float, tch::Device::Cpu));
        let b = tch::Tensor::zeros([4, 5], (tch::Kind::Float, tch::Device::Cpu));
        drop(a.f_matmul(&b)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_with_an_optional_batch() {
        assert_eq!(parse("oom-backward@4").unwrap(), Fault { kind: FaultKind::Oom(Phase::Backward), batch: Some(4) });
        assert_eq!(parse("kill").unwrap(), Fault { kind: FaultKind::Kill, batch: None });
        assert!(parse("oom-everywhere").is_err() && parse("kill@x").is_err());
    }
}
