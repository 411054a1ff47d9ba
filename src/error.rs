//! Domain errors. A [`UsageError`] is the user's input being wrong (exit
//! code 2); a signal stops a command with 128 + the signal (130, 143);
//! anything else that reaches `main` is a runtime failure (exit 1).
use std::fmt;

/// Bad input from the command line: reported in one line, exit code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(String);

impl UsageError {
    pub fn new(message: impl Into<String>) -> Self {
        UsageError(message.into())
    }
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// `file:line` for an error in an input file, or the file alone for one
/// about the whole file (line 0: unreadable, empty, or no such row).
pub fn file_line(path: &std::path::Path, line: u64) -> String {
    match line {
        0 => path.display().to_string(),
        n => format!("{}:{n}", path.display()),
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

/// The exit code for an error that reached `main`.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if let Some(i) = err.chain().find_map(|e| e.downcast_ref::<Interrupted>()) {
        i.exit_code()
    } else if err.chain().any(|e| e.is::<UsageError>()) {
        2
    } else {
        1
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
