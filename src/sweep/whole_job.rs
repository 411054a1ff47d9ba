//! A rehearsal of the whole job at one batch (`check`, and the sweep's
//! max): the job run through all its phases with each DataLoader pass cut
//! short, then again with each loader whose held memory grew from batch to
//! batch run longer, so analyze::whole_job can project it to the loaders'
//! full lengths.
use anyhow::Result;

use crate::analyze::whole_job;
use crate::measure::runner::TrialRunner;
use crate::record::rehearsal::{LongerLoader, RehearsalRecord, RehearsalSpec};
use crate::record::trial::{Outcome, TrialResult};

/// The batches a rehearsal takes from each pass over a DataLoader: the
/// fourth shows whether held memory grows steadily (the first may make the
/// optimizer's state once).
pub const BATCHES_PER_LOADER: u32 = 4;

/// At most this many loaders get a longer rehearsal (train, eval, test).
const MAX_LONGER: usize = 3;

/// A rehearsal's trial, and the records of the longer ones beside it.
#[derive(Debug)]
pub struct Rehearsed {
    /// The base rehearsal; or, when a longer one did not fit or failed, that one.
    pub trial: TrialResult,
    pub longer: Vec<RehearsalRecord>,
    /// How many trials ran.
    pub trials: u32,
}

impl Rehearsed {
    /// The job's highest peak, measured or projected (analyze::whole_job),
    /// when the base rehearsal sent its record.
    pub fn worst(&self, budget_bytes: u64) -> Option<whole_job::Worst> {
        let longer: Vec<&RehearsalRecord> = self.longer.iter().collect();
        whole_job::worst(self.trial.rehearsal.as_deref()?, &longer, budget_bytes)
    }
}

/// Rehearses the job at `batch` as trials `first`, `first + 1`, ...;
/// `None` where the subject has no whole job (a built-in model).
pub fn rehearse(runner: &mut dyn TrialRunner, first: u32, batch: u64, seconds: f64) -> Result<Option<Rehearsed>> {
    let spec = RehearsalSpec { batches_per_loader: BATCHES_PER_LOADER, seconds, longer: None };
    let Some(trial) = runner.rehearse(first, batch, spec)? else { return Ok(None) };
    let growing = match (&trial.outcome, trial.rehearsal.as_deref()) {
        (Outcome::Fits, Some(r)) => whole_job::growing_loaders(r),
        _ => Vec::new(),
    };
    let mut longer = Vec::new();
    let mut trials = 1;
    for loader in growing.into_iter().take(MAX_LONGER) {
        let batches = 2 * BATCHES_PER_LOADER;
        let spec = RehearsalSpec { longer: Some(LongerLoader { loader, batches }), ..spec };
        let Some(mut again) = runner.rehearse(first + trials, batch, spec)? else { break };
        trials += 1;
        match (again.outcome, again.rehearsal) {
            (Outcome::Fits, Some(r)) => longer.push(*r),
            (Outcome::Fits, None) => {}
            (_, rehearsal) => {
                again.rehearsal = rehearsal;
                again.message = Some(format!(
                    "with data loader {loader} run for {batches} batches a pass, still short of its full length: {}",
                    again.message.as_deref().unwrap_or("")
                ));
                return Ok(Some(Rehearsed { trial: again, longer: Vec::new(), trials }));
            }
        }
    }
    Ok(Some(Rehearsed { trial, longer, trials }))
}
