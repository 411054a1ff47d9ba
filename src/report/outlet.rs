//! [`Folders`]: the [`Outlet`] a user's sweep writes through. Each run's
//! folder is kept by its sink ([`Lines`], or [`Prefixed`] when devices run
//! side by side), each run's end is said on stderr, and the top folder of a
//! sweep with a folder per run is rewritten as it stands.
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::analyze::run::{Layout, RunIndex, RunRecord};
use crate::error::Interrupted;
use crate::record::device::Device;
use crate::record::subject::Subject;
use crate::report::sink::{Lines, Outlet, Prefixed, Sink};
use crate::report::{output, table, top_files};

pub struct Folders {
    /// The sweep's output folder.
    pub out_dir: PathBuf,
    /// How the runs are laid out under it; `None`: one run, in it.
    pub layout: Option<Layout>,
    pub quiet: bool,
    /// Training steps per trial, for the progress lines.
    pub steps: u32,
}

impl Outlet for Folders {
    fn sink(&mut self, label: &str, subject: &Subject, device: Device, dir: &Path) -> Box<dyn Sink + Send> {
        match self.layout {
            Some(Layout::Devices) => Box::new(Prefixed { device, quiet: self.quiet, dir: dir.to_path_buf() }),
            Some(Layout::Variants) if !self.quiet => {
                match subject.workload() {
                    None => eprintln!("== {label} =="),
                    Some(w) => {
                        eprintln!("== {label}: {} {} {} ==", w.optimizer.name(), w.precision.name(), w.mode.name())
                    }
                }
                Box::new(Lines::new(self.quiet, self.steps, dir))
            }
            _ => Box::new(Lines::new(self.quiet, self.steps, dir)),
        }
    }

    fn finished(&mut self, label: &str, result: &Result<RunRecord>) {
        match (self.layout, result) {
            // One run: the command prints its summary, or its error.
            (None, _) => {}
            (Some(Layout::Variants), Ok(report)) if !self.quiet => eprint!("{}", table::summary(report)),
            (_, Ok(_)) => {}
            (_, Err(e)) if e.is::<Interrupted>() && self.layout == Some(Layout::Variants) => {}
            (_, Err(e)) => eprintln!("{label}: {e:#}"),
        }
    }

    fn top(&mut self, index: &RunIndex, runs: &[(String, &RunRecord)]) -> Result<()> {
        output::write_files(&self.out_dir, &top_files(index, runs)?)
    }
}

/// Where an interrupted sweep left what it measured.
pub fn partial_note(e: &anyhow::Error, out_dir: &Path) -> Option<String> {
    e.is::<Interrupted>().then(|| {
        format!(
            "{e}: what was measured is in {} (report.json status \"interrupted\"; `vramprobe report {}` redraws it)",
            out_dir.display(),
            out_dir.display()
        )
    })
}
