//! SIGINT and SIGTERM: the first one asks the running sweep or training to
//! stop cleanly (kill the trial's process group, flush what was measured,
//! save a checkpoint) and exit with 128 + the signal (130, 143); a second
//! one exits at once.
use std::sync::atomic::{AtomicI32, Ordering};

static RECEIVED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(signal: libc::c_int) {
    // Only async-signal-safe work here: an atomic swap, and _exit.
    if RECEIVED.swap(signal, Ordering::SeqCst) != 0 {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + signal) };
    }
}

/// Installs the handlers; call once, early in `main`.
pub fn install() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a plain handler that only touches an atomic (see above).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            // Restart interrupted reads and waits; the loops poll `received`.
            action.sa_flags = libc::SA_RESTART;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The signal received so far, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The error a command returns when it stopped for a signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("interrupted by {}", signal_name(*.0))]
pub struct Interrupted(pub i32);

impl Interrupted {
    /// 128 + the signal, as a shell reports it.
    pub fn exit_code(self) -> i32 {
        128 + self.0
    }
}

pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        _ => "a signal",
    }
}

/// Stops with [`Interrupted`] once a signal has arrived.
pub fn check() -> Result<(), Interrupted> {
    match received() {
        Some(s) => Err(Interrupted(s)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_what_a_shell_reports() {
        assert_eq!(Interrupted(libc::SIGINT).exit_code(), 130);
        assert_eq!(Interrupted(libc::SIGTERM).exit_code(), 143);
        assert_eq!(Interrupted(libc::SIGTERM).to_string(), "interrupted by SIGTERM");
    }
}
