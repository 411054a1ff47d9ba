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

/// The exit code for an error that reached `main`.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    if let Some(i) = err.chain().find_map(|e| e.downcast_ref::<crate::interrupt::Interrupted>()) {
        i.exit_code()
    } else if err.chain().any(|e| e.is::<UsageError>()) {
        2
    } else {
        1
    }
}
