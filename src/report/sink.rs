//! Where a sweep reports as it goes: the [`Sink`] a run's trials and
//! report are handed to, and the two that write a run folder and print
//! progress: [`Lines`] (one line per trial on stderr, a live status line
//! on a terminal) and [`Prefixed`] (one line per trial per device when
//! several run at once). The sweep calls them; what they write is here,
//! with the formats.
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::analyze::fit::Fit;
use crate::analyze::run::{RunIndex, RunRecord};
use crate::measure::runner;
use crate::record::device::Device;
use crate::record::subject::Subject;
use crate::record::trial::{Outcome, StepRecord, TrialResult};
use crate::report::progress::Status;
use crate::report::{output, run_files};
use crate::units::human_bytes;

/// Where the sweep reports as it goes, ripgrep-style: the sweep measures and
/// decides; the sink shows progress and keeps the run's files.
pub trait Sink {
    fn trial_started(&mut self, trial: u32, batch: u64);
    /// The whole job is about to be rehearsed at `batch` (command mode's max).
    fn rehearsing(&mut self, _batch: u64) {}
    fn step_done(&mut self, step: &StepRecord);
    /// A finished trial, with where its peak fell against the budget (when
    /// it ran its steps and the budget is known).
    fn trial_done(&mut self, result: &TrialResult, fit: Option<Fit>);
    /// Keeps the run as it now stands: at the start, after every trial and at
    /// the end, so whatever was measured survives a later failure. An error
    /// here stops the sweep.
    fn keep(&mut self, run: &RunRecord) -> Result<()>;
}

/// Where a sweep of any shape puts its runs (sweep::execute): a sink for
/// each run, word of each run's end, and the top folder of a sweep with a
/// folder per run. [`Folders`](crate::report::outlet::Folders) writes them.
pub trait Outlet {
    /// Where the run labelled `label` (its folder `dir`) reports as it goes.
    fn sink(&mut self, label: &str, subject: &Subject, device: Device, dir: &Path) -> Box<dyn Sink + Send>;
    /// A run ended: its record, or why it has none.
    fn finished(&mut self, label: &str, result: &Result<RunRecord>);
    /// The top folder as it stands: after every variant, and at the end.
    fn top(&mut self, index: &RunIndex, runs: &[(String, &RunRecord)]) -> Result<()>;
}

/// One line per trial on stderr (stdout is kept for the summary), and on a
/// terminal a live status line: trial, batch, phase, last peak, elapsed.
pub struct Lines {
    /// The run's folder, rewritten after every trial.
    dir: PathBuf,
    status: Status,
    steps: u32,
    trial: u32,
    batch: u64,
    last_peak: Option<u64>,
}

impl Lines {
    pub fn new(quiet: bool, steps: u32, dir: &Path) -> Lines {
        Lines {
            dir: dir.to_path_buf(),
            status: Status::new(quiet, None, "{spinner} [{elapsed_precise}] {msg}"),
            steps,
            trial: 0,
            batch: 0,
            last_peak: None,
        }
    }

    fn show(&self, phase: &str) {
        let peak = self.last_peak.map_or("-".into(), |b| human_bytes(b as f64));
        self.status.update(format!("trial {}  batch {}  {phase}  last peak {peak}", self.trial, self.batch));
    }
}

impl Sink for Lines {
    fn trial_started(&mut self, trial: u32, batch: u64) {
        (self.trial, self.batch) = (trial, batch);
        self.show("starting the child");
    }

    fn rehearsing(&mut self, batch: u64) {
        self.batch = batch;
        self.status.line(&format!(
            "rehearsing the whole job at batch {batch}: every phase, each data loader cut short (`vramprobe check`'s rule)"
        ));
        self.show("rehearsing the whole job");
    }

    fn step_done(&mut self, step: &StepRecord) {
        // A CPU command's step is seen as it runs; its peak comes at the trial's end.
        if step.peak_allocated_bytes > 0 {
            self.last_peak = Some(step.peak_allocated_bytes);
        }
        self.show(&format!("step {} of {} done", step.step, self.steps));
    }

    fn trial_done(&mut self, r: &TrialResult, fit: Option<Fit>) {
        let head = format!("trial {:>2}  batch {:>5}  ", r.trial, r.batch);
        let line = match r.outcome {
            // A command on the CPU runs unbounded: its capacity is judged here, after the run.
            Outcome::Fits => format!(
                "{head}{}  peak {}  {:.3} s/step  ({:.1}s)",
                fit.unwrap_or(Fit::Fits).words(),
                r.peak_allocated_bytes().map_or("-".into(), |b| human_bytes(b as f64)),
                r.mean_step_seconds().unwrap_or(0.0),
                r.wall_seconds
            ),
            other => format!("{head}{other}: {}", r.message.as_deref().unwrap_or("")),
        };
        self.status.line(&line);
        // A command that failed for its own reasons: the end of its output says why.
        if let (Some(log), Outcome::Error | Outcome::Killed | Outcome::Timeout) = (&r.log_file, r.outcome) {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            for tail in runner::output_tail(&text, 5) {
                self.status.line(&format!("    | {tail}"));
            }
        }
        self.show("choosing the next batch");
    }

    fn keep(&mut self, run: &RunRecord) -> Result<()> {
        write_run(&self.dir, run)
    }
}

/// A run's files (steps, sweep, plan, report, plots, page) into its folder.
pub fn write_run(dir: &Path, report: &RunRecord) -> Result<()> {
    output::write_files(dir, &run_files(report)?)
}

/// One trial line per device when several run at once.
pub struct Prefixed {
    pub device: Device,
    pub quiet: bool,
    pub dir: PathBuf,
}

impl Sink for Prefixed {
    fn trial_started(&mut self, _trial: u32, _batch: u64) {}
    fn step_done(&mut self, _step: &StepRecord) {}
    fn trial_done(&mut self, r: &TrialResult, fit: Option<Fit>) {
        if !self.quiet {
            let outcome = fit.map_or_else(|| r.outcome.to_string(), |f| f.words().to_string());
            eprintln!("{}: trial {} batch {}: {outcome}", self.device, r.trial, r.batch);
        }
    }

    fn keep(&mut self, run: &RunRecord) -> Result<()> {
        write_run(&self.dir, run)
    }
}
