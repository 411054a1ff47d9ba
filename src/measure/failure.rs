//! How a step fails: the phase it failed in, the failure classified as an
//! out-of-memory or another error, and libtorch's panics (tch panics on some
//! errors) caught and turned into such errors, with their messages cut to
//! one line.
/// Where in the step a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Build,
    Data,
    /// Clearing the gradients before the step (`optimizer.zero_grad()`).
    ZeroGrad,
    Forward,
    Backward,
    Optimizer,
}

impl Phase {
    /// The phase's id in the allocation ledger's log (see `measure::child::breakdown`).
    pub fn ledger_id(self) -> i32 {
        self as i32
    }

    pub fn name(self) -> &'static str {
        match self {
            Phase::Build => "model build",
            Phase::Data => "data creation",
            Phase::ZeroGrad => "zero_grad",
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer step",
        }
    }
}

/// A failed step, classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} in {}: {message}", if *.oom { "out of memory" } else { "error" }, .phase.name())]
pub struct StepError {
    pub oom: bool,
    pub phase: Phase,
    pub message: String,
}

/// True when libtorch's message is an allocation failure on any device.
pub fn is_oom_message(message: &str) -> bool {
    const MARKERS: [&str; 5] = [
        "CUDA out of memory",
        "CUDA error: out of memory",
        "can't allocate memory",
        "OutOfMemoryError",
        "out of memory",
    ];
    MARKERS.iter().any(|m| message.contains(m))
}

thread_local! {
    /// Set while libtorch runs inside `child::guarded`, whose panics are expected.
    pub(crate) static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Installs the process's panic hook: silent for the panics tch raises on
/// libtorch errors inside `child::guarded` (they become classified errors), and
/// one line, without a backtrace, for anything else (a bug).
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        if !GUARDED.with(|g| g.get()) {
            let msg = payload_text(info.payload());
            eprintln!("Error: internal error: {}", first_line(&msg));
        }
    }));
}

pub(crate) fn payload_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "libtorch panicked".into())
}

/// The first line of a libtorch message, without the C++ backtrace libtorch
/// appends, the Debug quoting tch's panics add, or the "Internal torch
/// error" prefix.
pub fn first_line(message: &str) -> String {
    // The TorchScript interpreter puts the real error after a traceback.
    if message.contains("failed in the TorchScript interpreter") {
        let lines = message.split("\\n").flat_map(str::lines);
        if let Some(cause) = lines.filter_map(|l| l.trim().strip_prefix("RuntimeError: ")).last() {
            return format!("TorchScript: {}", first_line(cause));
        }
    }
    let mut text = message.trim();
    text = text.strip_prefix("called `Result::unwrap()` on an `Err` value: ").unwrap_or(text);
    if let Some(inner) = text.strip_prefix("Torch(\"") {
        text = inner;
    }
    let text = text.split("\\n").next().unwrap_or(text);
    let text = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let text = text.strip_prefix("Internal torch error: ").unwrap_or(text);
    text.trim_end_matches(['"', ')']).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtorch_messages_are_cut_to_their_first_line() {
        let panic = r#"called `Result::unwrap()` on an `Err` value: Torch("CPU out of memory (vramprobe capacity limit): tried to allocate 294912 bytes\nException raised from allocate at csrc/vramprobe_shim.cpp:100 (most recent call first):\nframe #0: c10::Error")"#;
        assert_eq!(first_line(panic), "CPU out of memory (vramprobe capacity limit): tried to allocate 294912 bytes");
        let err = "Internal torch error: DefaultCPUAllocator: can't allocate memory\nException raised from";
        assert_eq!(first_line(err), "DefaultCPUAllocator: can't allocate memory");
    }

    #[test]
    fn oom_messages_of_every_allocator_are_recognised() {
        assert!(is_oom_message("CUDA out of memory. Tried to allocate 2.00 GiB"));
        assert!(is_oom_message("CUDA error: out of memory"));
        assert!(is_oom_message("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"));
        assert!(!is_oom_message("Expected 4-dimensional input for 4-dimensional weight"));
    }
}
