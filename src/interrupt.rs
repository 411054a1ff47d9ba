//! SIGINT and SIGTERM: the first one asks the running sweep or training to
//! stop cleanly (kill the trial's process group, flush what was measured,
//! save a checkpoint) and exit with 128 + the signal (130, 143); a second
//! one exits at once.
use std::sync::atomic::{AtomicI32, Ordering};

use crate::error::Interrupted;

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

/// Stops with [`Interrupted`] once a signal has arrived.
pub fn check() -> Result<(), Interrupted> {
    match received() {
        Some(s) => Err(Interrupted(s)),
        None => Ok(()),
    }
}
