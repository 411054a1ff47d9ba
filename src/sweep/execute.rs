//! Runs a resolved [`SweepPlan`], whatever its shape, through one
//! [`Outlet`]: a single run in the output folder, variants one after
//! another in their folders (the top folder rewritten after each), or
//! devices side by side (one thread each). Interrupts are handled here,
//! once: what finished is kept, then [`Interrupted`] comes back.
use std::path::Path;

use anyhow::{anyhow, Result};

use crate::analyze::run::{Layout, RunIndex, RunRecord};
use crate::error::Interrupted;
use crate::measure::runner::TrialRunner;
use crate::measure::trials;
use crate::report::sink::{Outlet, Sink};
use crate::sweep::layout::{PlannedRun, Shape, SweepPlan};
use crate::sweep::variants::{self, Across};

/// What makes each run's trial runner: child processes for a user's sweep
/// ([`Children`]), a script in the tests.
pub trait Trials {
    /// The trial runner of `run`, whose folder is `dir`.
    fn runner(&mut self, run: &PlannedRun, dir: &Path) -> Result<Box<dyn TrialRunner + Send>>;
}

/// Each trial a child process, its folder in the run's `trials/`.
pub struct Children;

impl Trials for Children {
    fn runner(&mut self, run: &PlannedRun, dir: &Path) -> Result<Box<dyn TrialRunner + Send>> {
        trials::runner(&run.config.subject, run.trials, dir.join("trials"))
    }
}

/// A finished sweep.
pub struct Run {
    /// The top folder's index (its folders and the fits across them); none for a single run.
    pub index: Option<RunIndex>,
    /// The runs that finished, in the plan's order, by folder.
    pub reports: Vec<(String, RunRecord)>,
    /// The runs that failed, by folder, with why.
    pub failed: Vec<(String, String)>,
}

impl Run {
    pub fn runs(&self) -> Vec<(String, &RunRecord)> {
        self.reports.iter().map(|(label, r)| (label.clone(), r)).collect()
    }
}

/// Runs every run of `plan` under `out_dir`. A single run's error is the
/// sweep's; a variant's or device's is kept in [`Run::failed`].
pub fn execute(plan: &SweepPlan, out_dir: &Path, trials: &mut dyn Trials, outlet: &mut dyn Outlet) -> Result<Run> {
    match plan.shape {
        Shape::Single => single(plan, out_dir, trials, outlet),
        Shape::Variants(across) => one_after_another(plan, out_dir, across, trials, outlet),
        Shape::Devices => side_by_side(plan, out_dir, trials, outlet),
    }
}

fn single(plan: &SweepPlan, out_dir: &Path, trials: &mut dyn Trials, outlet: &mut dyn Outlet) -> Result<Run> {
    let run = plan.runs.first().ok_or_else(|| anyhow!("the sweep has no run"))?;
    let mut runner = trials.runner(run, out_dir)?;
    let mut sink = outlet.sink(&run.label, &run.config.subject, run.config.device, out_dir);
    let result = super::run(&run.config, runner.as_mut(), sink.as_mut());
    outlet.finished(&run.label, &result);
    Ok(Run { index: None, reports: vec![(run.label.clone(), result?)], failed: Vec::new() })
}

/// A run's folder, made.
fn folder(out_dir: &Path, label: &str) -> Result<std::path::PathBuf> {
    let dir = out_dir.join(label);
    std::fs::create_dir_all(&dir).map_err(|e| anyhow!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

/// The variants one after the other; the top folder is rewritten after
/// each, so finished ones survive a later failure or Ctrl-C.
fn one_after_another(
    plan: &SweepPlan,
    out_dir: &Path,
    across: Across,
    trials: &mut dyn Trials,
    outlet: &mut dyn Outlet,
) -> Result<Run> {
    let mut run = Run { index: None, reports: Vec::new(), failed: Vec::new() };
    for planned in &plan.runs {
        let dir = folder(out_dir, &planned.label)?;
        let mut runner = trials.runner(planned, &dir)?;
        let mut sink = outlet.sink(&planned.label, &planned.config.subject, planned.config.device, &dir);
        let result = super::run(&planned.config, runner.as_mut(), sink.as_mut());
        outlet.finished(&planned.label, &result);
        let interrupted = keep(&mut run, planned.label.clone(), result);
        outlet.top(&RunIndex::new(Layout::Variants, labels(&run)), &run.runs())?;
        if let Some(e) = interrupted {
            return Err(e);
        }
    }
    let index = variants::fits_across(Layout::Variants, &run.runs(), across);
    outlet.top(&index, &run.runs())?;
    run.index = Some(index);
    Ok(run)
}

/// Files a run's result; an interrupt comes back to stop the sweep.
fn keep(run: &mut Run, label: String, result: Result<RunRecord>) -> Option<anyhow::Error> {
    match result {
        Ok(report) => run.reports.push((label, report)),
        Err(e) if e.is::<Interrupted>() => return Some(e),
        Err(e) => run.failed.push((label, format!("{e:#}"))),
    }
    None
}

fn labels(run: &Run) -> Vec<String> {
    run.reports.iter().map(|(label, _)| label.clone()).collect()
}

/// A device's run, its runner and sink made, before its thread starts.
type Started<'a> = (&'a PlannedRun, Box<dyn TrialRunner + Send>, Box<dyn Sink + Send>);

/// One run per device, all at once (one thread each): a data-parallel job
/// on this node can use the smallest recommendation.
fn side_by_side(plan: &SweepPlan, out_dir: &Path, trials: &mut dyn Trials, outlet: &mut dyn Outlet) -> Result<Run> {
    let mut started: Vec<Started> = Vec::new();
    for planned in &plan.runs {
        let dir = folder(out_dir, &planned.label)?;
        let runner = trials.runner(planned, &dir)?;
        let sink = outlet.sink(&planned.label, &planned.config.subject, planned.config.device, &dir);
        started.push((planned, runner, sink));
    }
    let results: Vec<(&PlannedRun, Result<RunRecord>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = started
            .into_iter()
            .map(|(planned, mut runner, mut sink)| {
                (planned, scope.spawn(move || super::run(&planned.config, runner.as_mut(), sink.as_mut())))
            })
            .collect();
        let joined = |h: std::thread::ScopedJoinHandle<'_, Result<RunRecord>>| {
            h.join().unwrap_or_else(|_| Err(anyhow!("a device's sweep panicked")))
        };
        handles.into_iter().map(|(planned, h)| (planned, joined(h))).collect()
    });
    let mut run = Run { index: None, reports: Vec::new(), failed: Vec::new() };
    for (planned, result) in results {
        outlet.finished(&planned.label, &result);
        // Every device has stopped by now: an interrupt is checked once, below.
        let _ = keep(&mut run, planned.label.clone(), result);
    }
    let index = RunIndex::new(Layout::Devices, labels(&run));
    outlet.top(&index, &run.runs())?;
    run.index = Some(index);
    crate::interrupt::check()?;
    Ok(run)
}
