//! Terminal progress: a live indicatif bar on stderr when stderr is a
//! terminal, plain log lines when it is not (a pipe, a file, CI), nothing
//! with `--quiet`. Log lines go through the bar so they never garble it;
//! `NO_COLOR` turns its colours off.
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where progress goes for one command.
pub struct Status {
    bar: Option<ProgressBar>,
    quiet: bool,
}

/// Colours unless the user asked for none (https://no-color.org).
fn colours() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

impl Status {
    /// A spinner (`len` None) or a bar of `len` steps. `template` uses
    /// indicatif's keys; `{bar}` gets a colour unless NO_COLOR is set.
    pub fn new(quiet: bool, len: Option<u64>, template: &str) -> Status {
        let live = !quiet && std::io::stderr().is_terminal();
        let bar = live.then(|| {
            let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
            let template = if colours() {
                template.replace("{bar}", "{bar:30.cyan/blue}")
            } else {
                template.replace("{bar}", "{bar:30}")
            };
            if let Ok(style) = ProgressStyle::with_template(&template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Status { bar, quiet }
    }

    /// Whether a live bar is shown (else updates are dropped, lines printed plainly).
    pub fn is_live(&self) -> bool {
        self.bar.is_some()
    }

    /// Replaces the live status text; nothing without a bar.
    pub fn update(&self, message: String) {
        if let Some(bar) = &self.bar {
            bar.set_message(message);
        }
    }

    pub fn set_position(&self, position: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(position);
        }
    }

    /// A log line: above the bar when there is one, plain on stderr otherwise.
    pub fn line(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None if !self.quiet => eprintln!("{text}"),
            None => {}
        }
    }

    /// Removes the bar, leaving the log lines.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        self.finish();
    }
}
