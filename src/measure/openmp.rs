//! OpenMP's threads in CPU trials side by side (`--parallel`). torch's CPU
//! kernels run on OpenMP threads, one per core, which spin while they wait
//! for work: trials side by side on the same cores then burn the time each
//! other needs. Waiting passively changes no computation and no allocation
//! (the same peaks to the byte) and halved the wall time of two CPU sweeps
//! side by side (39.5 s -> 20.9 s, AMD EPYC, 2 cores).
use std::ffi::OsStr;

/// The variable libgomp (torch's OpenMP on Linux) reads as it loads.
pub const WAIT_POLICY: &str = "OMP_WAIT_POLICY";

/// What the report says when vramprobe set it.
pub const NOTE: &str = "the trials ran side by side on the CPU with OpenMP's threads waiting passively \
     (OMP_WAIT_POLICY=PASSIVE, as you had not set it): the same peaks, without each trial's spinning threads \
     taking the cores the others need";

/// Whether vramprobe asks OpenMP's threads to wait passively: CPU trials
/// run side by side and the user chose no policy of their own.
pub fn waits_passively(cpu_trials_side_by_side: bool, user_policy: Option<&OsStr>) -> bool {
    cpu_trials_side_by_side && user_policy.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cpu_trials_side_by_side_and_never_over_the_users_choice() {
        assert!(waits_passively(true, None));
        assert!(!waits_passively(false, None));
        assert!(!waits_passively(true, Some(OsStr::new("ACTIVE"))));
        assert!(!waits_passively(true, Some(OsStr::new(""))));
    }
}
