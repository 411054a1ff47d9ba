//! The sweep orchestrator. A request is resolved once ([`layout`], with
//! the subjects from [`subjects`] and `--profile` [`preset`]s) into a plan
//! of labelled runs, which [`execute`] runs whatever its shape. Each run
//! ([`run`]) runs the search with itself as the oracle (each batch a trial
//! in a child process, judged against the budget), verifies the
//! recommended batch, and finishes with the analysis. It reports through a
//! [`Sink`] after every trial, so what was measured survives a later
//! failure; the sink, not the sweep, shows progress and writes files.
//!
//! Layer 2: may import `report` (the sinks and outlet it writes through),
//! `analyze` (the run's [`RunRecord`] is built here), `measure`, `record`,
//! `units`, `interrupt`, `error`; never `train`, `bench` or `commands`.
mod beside;
pub mod execute;
pub mod layout;
pub mod preset;
pub mod subjects;
#[cfg(test)]
mod tests;
pub mod variants;
pub mod whole_job;

use std::time::Instant;

use anyhow::Result;

use crate::analyze::analysis::{self, budget_for, observe, AnalysisInput, CapacitySource, FitBasis, StrategyName};
use crate::analyze::device_curve;
use crate::analyze::fit::{round_down, Budget, Fit};
use crate::analyze::note::Note;
use crate::analyze::run::{RunRecord, RunStatus, REPORT_SCHEMA_VERSION};
use crate::analyze::search::{
    self, list::ListedBatches, Observation, SearchLimits, SearchResult, Strategy, StrategyKind,
};
use crate::analyze::traced_max::{self, TracedTrial};
use crate::analyze::whole_job::Worst;
use crate::analyze::why::{self, Why};
use crate::measure::environment;
use crate::measure::runner::TrialRunner;
use crate::record::device::Device;
use crate::record::subject::Subject;
use crate::record::timings::{Span, SpanKind};
use crate::record::trial::{Outcome, StepMark, StepTrace, TrialResult};
pub use crate::report::sink::Sink;
use crate::units::human_bytes;

/// Without a GPU, training steps are slow; the CPU sweep goes no further
/// unless `--max-batch` says otherwise, and the fit predicts beyond it.
pub const CPU_DEFAULT_MAX_BATCH: u64 = 64;

/// How the sweep chooses batch sizes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchChoice {
    Search(StrategyKind),
    /// `--batches`: exactly these, ascending, until one does not fit.
    Listed(Vec<u64>),
}

/// What the user asked of every run of a sweep.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub batches: BatchChoice,
    pub max_batch: Option<u64>,
    /// Training steps per trial; every batch reported as fitting ran this many.
    pub steps: u32,
    pub tolerance: u64,
    pub capacity: Option<u64>,
    pub margin_fraction: f64,
    pub multiple_of: u64,
    /// `--parallel`: trials at once (`None`: one on the CPU, every idle GPU of the kind on CUDA).
    pub parallel: Option<u32>,
    pub command_line: Vec<String>,
    /// Break the max batch's peak down by category (`--breakdown`).
    pub breakdown: bool,
    /// How long a command's rehearsal of the whole job at the max may take
    /// (`--rehearsal-time`); `None`: not rehearsed (`--rehearsal off`).
    pub rehearsal_seconds: Option<f64>,
}

/// One run: a subject on a device, with the sweep's options.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    /// What the runner's trials measure, as the report names it.
    pub subject: Subject,
    pub device: Device,
    /// Where trials run beside the run's own (`--parallel`): more CPU
    /// processes, or idle GPUs of the device's kind.
    pub beside: Vec<Device>,
    pub notes: Vec<Note>,
    pub options: RunOptions,
}

impl SweepConfig {
    fn effective_max_batch(&self) -> u64 {
        match (self.options.max_batch, self.device, self.options.capacity) {
            (Some(m), _, _) => m,
            // Planning for the machine's own RAM: steps would take minutes.
            (None, Device::Cpu, None) => CPU_DEFAULT_MAX_BATCH,
            _ => u64::MAX / 4,
        }
    }

    fn strategy(&self) -> Box<dyn Strategy> {
        match &self.options.batches {
            BatchChoice::Search(kind) => search::build(*kind),
            BatchChoice::Listed(list) => Box::new(ListedBatches(list.clone())),
        }
    }

    fn strategy_name(&self) -> StrategyName {
        match &self.options.batches {
            BatchChoice::Search(kind) => StrategyName::Search(*kind),
            BatchChoice::Listed(_) => StrategyName::ListedBatches,
        }
    }
}

struct Sweep<'a> {
    cfg: &'a SweepConfig,
    runner: &'a mut dyn TrialRunner,
    sink: &'a mut dyn Sink,
    report: RunRecord,
    budget: Option<Budget>,
    /// Searching for the largest batch the capacity holds, the margin set
    /// aside (after no batch fitted within it).
    margin_off: bool,
    /// The last step's trace of each batch that fitted (built-in models on
    /// the CPU), for the GPU curve; kept here, never in the report.
    traces: Vec<(u64, StepTrace)>,
    /// Runners of trials beside the sweep's own (`--parallel`).
    beside: Vec<Box<dyn TrialRunner + Send>>,
    /// When the sweep began: the timings' zero.
    began: Instant,
}

impl Sweep<'_> {
    /// After SIGINT or SIGTERM: the report says so, everything measured is
    /// written, and the sweep stops with [`Interrupted`].
    fn stop_if_interrupted(&mut self) -> Result<()> {
        if let Err(interrupted) = crate::interrupt::check() {
            self.report.status = RunStatus::Interrupted;
            self.report.notes.push(Note::Interrupted { signal: interrupted.to_string() });
            self.sink.keep(&self.report)?;
            return Err(interrupted.into());
        }
        Ok(())
    }

    /// Whether every trial can break its peak down at no cost: a built-in's
    /// ledger logs every allocation anyway. A command's breakdown needs
    /// torch's full profile, which would multiply each trial's time: only
    /// the explain trial runs it.
    fn breakdown_is_free(&self) -> bool {
        self.cfg.options.breakdown && !matches!(self.cfg.subject, Subject::Command(_))
    }

    /// Seconds since the sweep began.
    fn seconds(&self) -> f64 {
        self.began.elapsed().as_secs_f64()
    }

    fn run_trial(&mut self, batch: u64, breakdown: bool) -> Result<&TrialResult> {
        self.stop_if_interrupted()?;
        let trial = self.report.trials.len() as u32 + 1;
        self.sink.trial_started(trial, batch);
        // A breakdown that is not free: the explain trial.
        let explain = breakdown && !self.breakdown_is_free();
        let sink = &mut *self.sink;
        let result = if explain {
            self.runner.explain(trial, batch, &mut |s| sink.step_done(s))?
        } else {
            self.runner.run(trial, batch, breakdown, &mut |s| sink.step_done(s))?
        };
        let kind = if explain { SpanKind::Explain } else { SpanKind::Trial };
        self.report.timings.push(trial_span(kind, &result, self.seconds()));
        self.keep_trial(result)?;
        self.stop_if_interrupted()?;
        Ok(self.report.trials.last().expect("just pushed"))
    }

    /// Takes a finished trial into the run: its trace, the budget (from the
    /// first trial that reports it), the sink's line, notes, the run's files.
    fn keep_trial(&mut self, mut result: TrialResult) -> Result<()> {
        let batch = result.batch;
        let trace = result.steps.iter_mut().filter_map(|s| s.trace.take()).last();
        if let Some(trace) = trace.filter(|_| result.outcome == Outcome::Fits) {
            self.traces.push((batch, *trace));
        }
        if self.report.device_name.is_none() {
            self.report.device_name = result.device_name.clone();
        }
        if self.budget.is_none() {
            // Fixed from the first trial that reports it, so every trial is
            // judged against the same number.
            self.budget =
                budget_for(self.cfg.device, self.cfg.options.capacity, self.cfg.options.margin_fraction, &result);
        }
        let peak = FitBasis::for_device(self.cfg.device).peak(&result).filter(|_| result.outcome == Outcome::Fits);
        let fit = self.budget.zip(peak).map(|(b, p)| b.fit(p));
        self.sink.trial_done(&result, fit);
        self.note_growth(&result);
        if result.step_mark == Some(StepMark::Backward) && !self.report.notes.contains(&Note::BackwardSteps) {
            self.report.notes.push(Note::BackwardSteps);
        }
        self.report.trials.push(result);
        self.sink.keep(&self.report)
    }

    /// Memory that grows from step to step makes every peak an
    /// underestimate for a longer job: said once per sweep.
    fn note_growth(&mut self, trial: &TrialResult) {
        let Some((rank, bytes)) = trial.held_growth() else { return };
        let peak = trial.peak_allocated_bytes().unwrap_or(0);
        if bytes < (1 << 20).max(peak / 100) || self.report.notes.iter().any(|n| matches!(n, Note::MemoryGrew { .. })) {
            return;
        }
        self.report.notes.push(Note::MemoryGrew { bytes, last_step: self.cfg.options.steps, rank, batch: trial.batch });
    }

    /// The budget the search judges against: the run's, or with the margin
    /// set aside while searching for what the capacity alone holds.
    fn search_budget(&self) -> Option<Budget> {
        self.budget.map(|b| if self.margin_off { b.without_margin() } else { b })
    }

    fn search_limits(&self) -> SearchLimits {
        let budget = self.search_budget();
        SearchLimits {
            budget_bytes: budget.map_or(u64::MAX, |b| b.budget_bytes),
            margin_bytes: budget.map_or(0, |b| (b.capacity_bytes as f64 * b.margin_fraction) as u64),
            max_batch: self.cfg.effective_max_batch(),
            tolerance: self.cfg.options.tolerance,
            // One pass over two traces: cheap next to the trial it aims.
            traced_max: budget.and_then(|b| self.traced_max(b.budget_bytes)),
        }
    }

    /// Where the trials' traces put the max (see [`traced_max`]).
    fn traced_max(&self, budget: u64) -> Option<u64> {
        let basis = FitBasis::for_device(self.cfg.device);
        let trials: Vec<TracedTrial> = self
            .traces
            .iter()
            .filter_map(|(batch, trace)| {
                let trial = self.report.trials.iter().rev().find(|t| t.batch == *batch)?;
                Some(TracedTrial { batch: *batch, trace, peak_bytes: basis.peak(trial)? })
            })
            .collect();
        traced_max::traced_max(&trials, budget, self.cfg.effective_max_batch())
    }

    /// How a trial the search asked for went: as the budget judges it, or
    /// failed when it shows the command ignoring its batch.
    fn judged(&mut self, trial: &TrialResult) -> Observation {
        if let Some(note) = self.batch_ignored(trial) {
            let message = note.to_string();
            self.report.notes.push(note);
            return Observation::Failed { message };
        }
        self.observation(trial)
    }

    fn observation(&self, trial: &TrialResult) -> Observation {
        match &self.search_budget() {
            Some(b) => observe(trial, b, FitBasis::for_device(self.cfg.device)),
            None => Observation::Failed {
                message: trial.message.clone().unwrap_or_else(|| "the device's memory is unknown".into()),
            },
        }
    }

    /// Makes sure the batch to recommend (the max rounded down to
    /// `--multiple-of`) has itself run and fit.
    fn verify_recommended(&mut self, result: &mut SearchResult) -> Result<()> {
        let Some(budget) = self.budget else {
            return Ok(());
        };
        let basis = FitBasis::for_device(self.cfg.device);
        loop {
            let rec = round_down(result.max_batch, self.cfg.options.multiple_of);
            let ran = self.report.trials.iter().find(|t| t.batch == rec).map(|t| observe(t, &budget, basis));
            match ran {
                _ if rec == 0 => return Ok(()),
                Some(o) if o.fits() => return Ok(()),
                Some(_) => {}
                None => {
                    let trial = self.run_trial(rec, self.breakdown_is_free())?.clone();
                    if observe(&trial, &budget, basis).fits() {
                        return Ok(());
                    }
                }
            }
            result
                .notes
                .push(format!("batch {rec} did not fit although a larger one did: memory is not monotonic here"));
            result.max_batch = rec - 1;
            result.exact = false;
        }
    }

    /// When nothing fits within the margin but the smallest batch fits the
    /// capacity (a tight budget), the largest batch the capacity holds and
    /// the margin that would admit it, searched again with the margin set
    /// aside (the trials already run count again) and said in a note. The
    /// run's max stays 0: no batch fits as asked.
    fn search_capacity(&mut self, result: &SearchResult) -> Result<()> {
        let (Some(budget), 0) = (self.budget, result.max_batch) else { return Ok(()) };
        let basis = FitBasis::for_device(self.cfg.device);
        let smallest = self.report.trials.iter().min_by_key(|t| t.batch);
        let peak = smallest.filter(|t| t.outcome == Outcome::Fits).and_then(|t| basis.peak(t));
        if peak.is_none_or(|p| budget.fit(p) != Fit::OverMargin) {
            return Ok(());
        }
        self.margin_off = true;
        let mut strategy = self.cfg.strategy();
        let found = search::run(strategy.as_mut(), self);
        self.margin_off = false;
        let batch = found?.1.max_batch;
        let ran = self.report.trials.iter().find(|t| t.batch == batch && t.outcome == Outcome::Fits);
        let Some(peak) = ran.and_then(|t| basis.peak(t)) else { return Ok(()) };
        if let Some(admitting) = budget.margin_admitting(peak) {
            self.report.notes.push(Note::FitsOnlyInMargin {
                batch,
                peak_bytes: peak,
                margin_fraction: budget.margin_fraction,
                admitting,
            });
        }
        Ok(())
    }

    /// The caching allocator's retries at the max batch (Composer calls it
    /// thrashing): said once, when any step there counted one.
    fn note_alloc_retries(&mut self, max: u64) {
        let at_max = self.report.trials.iter().filter(|t| t.batch == max && t.outcome == Outcome::Fits);
        let retries = at_max.flat_map(|t| t.steps.iter().filter_map(|s| s.alloc_retries)).max().unwrap_or(0);
        if max > 0 && retries > 0 {
            self.report.notes.push(Note::AllocRetries { batch: max, retries });
        }
    }

    /// Whether this trial shows the command ignoring `{batch}`: its peak
    /// (before the optimizer step where known, where the batch's tensors
    /// live) the same as a trial's at a batch at least 4 times apart. A
    /// built-in always trains at its batch.
    fn batch_ignored(&self, trial: &TrialResult) -> Option<Note> {
        if !matches!(self.cfg.subject, Subject::Command(_)) || trial.outcome != Outcome::Fits {
            return None;
        }
        let reading = |t: &TrialResult| t.phase_peaks().map(|p| p.forward_backward_bytes).or(t.peak_allocated_bytes());
        let peak = reading(trial)?;
        self.report.trials.iter().filter(|t| t.outcome == Outcome::Fits && t.trial != trial.trial).find_map(|t| {
            let (small, large) = (t.batch.min(trial.batch), t.batch.max(trial.batch));
            let other = reading(t)?;
            // The same to within 0.01%: one more sample's input alone moves it further.
            let same = other.abs_diff(peak) as f64 <= peak.max(other) as f64 * 1e-4;
            (large >= 4 * small && same).then_some(Note::BatchIgnored { small, large, peak_bytes: peak })
        })
    }

    /// The explain trial: when the max batch's peak is not yet broken down,
    /// runs that batch once more with the breakdown on. The search needs
    /// only peaks, so this is the one trial that pays for the full profile.
    fn explain_max(&mut self, result: &mut SearchResult) -> Result<()> {
        let (Some(budget), true, max) = (self.budget, self.cfg.options.breakdown, result.max_batch) else {
            return Ok(());
        };
        let explained = |t: &TrialResult| t.batch == max && t.outcome == Outcome::Fits && t.peak_breakdown().is_some();
        if max == 0 || self.report.trials.iter().any(explained) {
            return Ok(());
        }
        let trial = self.run_trial(max, true)?.clone();
        let seen = observe(&trial, &budget, FitBasis::for_device(self.cfg.device));
        if seen.fits() {
            self.report.notes.push(Note::Explained { trial: trial.trial, batch: max });
        } else {
            let outcome = match (&seen, &trial.message) {
                // It ran to its end, higher than the search's trial of the same batch.
                (Observation::TooBig { peak_bytes: Some(peak), .. }, _) if trial.outcome == Outcome::Fits => {
                    format!(
                        "its peak {} passed the budget of {}",
                        human_bytes(*peak as f64),
                        human_bytes(budget.budget_bytes as f64)
                    )
                }
                (_, Some(m)) => format!("{}: {m}", trial.outcome),
                (_, None) => trial.outcome.to_string(),
            };
            self.report.notes.push(Note::ExplainFailed { trial: trial.trial, batch: max, outcome });
            result.exact = false;
        }
        Ok(())
    }
}

/// At most this many rehearsals bring a max down to what the whole job holds.
const MAX_REHEARSALS: usize = 3;

/// The rehearsals' trial numbers (and folders, trials/901-batch-B/...):
/// apart from the search's, which they do not join (their steps run the
/// largest batches, and every phase).
const REHEARSAL_TRIALS_FROM: u32 = 901;

impl Sweep<'_> {
    /// Command mode: the max batch rehearsed over the whole job
    /// (whole_job), as `check` does. Where the job's peak (a later phase's,
    /// or memory that grows with its data) passes the budget, the max comes
    /// down: the search's line gives the training step's peak, and what the
    /// job adds beyond it is taken to grow in proportion to the batch; the
    /// lower batch is rehearsed in turn.
    fn rehearse_max(&mut self, result: &mut SearchResult) -> Result<()> {
        let (Some(budget), false, Subject::Command(_)) = (self.budget, self.margin_off, &self.cfg.subject) else {
            return Ok(());
        };
        let mut batch = round_down(result.max_batch, self.cfg.options.multiple_of);
        let Some(seconds) = self.cfg.options.rehearsal_seconds else {
            self.not_rehearsed(batch, " (--rehearsal off)");
            return Ok(());
        };
        let basis = FitBasis::for_device(self.cfg.device);
        let mut first = REHEARSAL_TRIALS_FROM;
        let mut seen: Vec<(u64, u64)> = Vec::new();
        for _ in 0..MAX_REHEARSALS {
            self.stop_if_interrupted()?;
            if batch == 0 {
                return Ok(());
            }
            let Some(r) = self.rehearse(first, batch, seconds)? else {
                return Ok(());
            };
            first += r.trials;
            let Some((peak, what)) = self.whole_job_peak(&r, budget, basis) else {
                let why = r.trial.message.as_deref().unwrap_or("no message");
                let text =
                    format!("the whole job at batch {batch} could not be rehearsed ({}: {why})", r.trial.outcome);
                self.report.notes.push(Note::WholeJob { text });
                result.exact = false;
                return Ok(());
            };
            if budget.fit(peak) == Fit::Fits {
                let text = format!(
                    "the whole job rehearsed at batch {batch} (every phase, each data loader cut short, memory \
                     that grows projected to its end): its peak {} ({what}) fits",
                    human_bytes(peak as f64)
                );
                self.report.notes.push(Note::WholeJob { text });
                result.max_batch = batch;
                // The batch recommended has run its first steps too, as every recommendation has.
                if !self.report.trials.iter().any(|t| t.batch == batch && t.outcome == Outcome::Fits) {
                    self.run_trial(batch, self.breakdown_is_free())?;
                }
                return Ok(());
            }
            if peak != u64::MAX {
                seen.push((batch, peak));
            }
            let lower = self.whole_job_max(batch, peak, &seen, budget, basis);
            self.report.notes.push(over_budget(batch, (peak, &what), lower, &seen));
            result.max_batch = lower;
            result.exact = false;
            result.capped = false;
            batch = round_down(lower, self.cfg.options.multiple_of);
        }
        self.not_rehearsed(batch, "");
        Ok(())
    }

    /// The note that `batch`'s whole job was not rehearsed (`why`: how so).
    fn not_rehearsed(&mut self, batch: u64, why: &str) {
        if batch > 0 {
            let text =
                format!("batch {batch}'s whole job was not rehearsed{why}: `vramprobe check` it before a long run");
            self.report.notes.push(Note::WholeJob { text });
        }
    }

    /// One rehearsal of the whole job at `batch` (its trials numbered from
    /// `first`), its span in the timings.
    fn rehearse(&mut self, first: u32, batch: u64, seconds: f64) -> Result<Option<whole_job::Rehearsed>> {
        self.sink.rehearsing(batch);
        let at = self.seconds();
        let rehearsed = whole_job::rehearse(self.runner, first, batch, seconds)?;
        if let Some(r) = &rehearsed {
            // Its whole time: a rehearsal may run more than one trial.
            let end = self.seconds();
            let span = Span { start_seconds: at, seconds: end - at, ..trial_span(SpanKind::Rehearsal, &r.trial, end) };
            self.report.timings.push(span);
        }
        Ok(rehearsed)
    }

    /// A rehearsal's judged peak and what reached it; None when it could
    /// not run; out of memory reads as over any budget.
    fn whole_job_peak(&self, r: &whole_job::Rehearsed, budget: Budget, basis: FitBasis) -> Option<(u64, String)> {
        match (r.trial.outcome, r.trial.rehearsal.as_deref()) {
            (Outcome::Oom, _) => Some((u64::MAX, "out of memory".into())),
            (Outcome::Fits, Some(_)) => {
                let worst = r.worst(budget.budget_bytes)?;
                let steps = basis.peak(&r.trial).unwrap_or(0);
                let what = match &worst {
                    Worst::Measured(phase, _) => format!("in its {} phase", phase.name()),
                    Worst::Projected(p) => format!(
                        "projected: memory that grows with data loader {}'s batches, at batch {} of its {}",
                        p.loader,
                        p.at_batch,
                        p.length.map_or("unknown length".into(), |l| l.to_string())
                    ),
                };
                Some((worst.bytes().max(steps), what))
            }
            _ => None,
        }
    }

    /// The largest batch under `batch` whose whole job fits. From two
    /// rehearsals that fitted nothing (`seen`), their line; from one, the
    /// search's line of the training step plus the excess the rehearsal
    /// showed, taken to grow in proportion to the batch. 0: the job's peak
    /// does not come down enough with the batch.
    fn whole_job_max(&self, batch: u64, peak: u64, seen: &[(u64, u64)], budget: Budget, basis: FitBasis) -> u64 {
        use crate::analyze::fit::LinearFit;
        let within = |line: LinearFit| line.max_batch_within(budget.budget_bytes).unwrap_or(0);
        let lower = if seen.len() >= 2 {
            LinearFit::fit(&seen[seen.len() - 2..]).map_or(0, within)
        } else {
            let points: Vec<(u64, u64)> = self
                .report
                .trials
                .iter()
                .filter(|t| t.outcome == Outcome::Fits)
                .filter_map(|t| Some((t.batch, basis.peak(t)?)))
                .collect();
            match LinearFit::fit(&points) {
                Ok(line) if peak != u64::MAX => {
                    let step = line.fixed_bytes + line.per_sample_bytes * batch as f64;
                    let excess = (peak as f64 - step).max(0.0) / batch as f64;
                    within(LinearFit { per_sample_bytes: line.per_sample_bytes + excess, ..line })
                }
                _ => batch / 2,
            }
        };
        lower.min(batch - 1)
    }
}

/// The sweep as the search sees it: every probe is a real trial.
impl search::Oracle for Sweep<'_> {
    type Error = anyhow::Error;

    fn limits(&self) -> SearchLimits {
        self.search_limits()
    }

    fn probe(&mut self, batch: u64) -> Result<Observation> {
        let ran = |t: &&TrialResult| t.batch == batch && matches!(t.outcome, Outcome::Fits | Outcome::Oom);
        if let (true, Some(trial)) = (self.margin_off, self.report.trials.iter().find(ran)) {
            return Ok(self.observation(trial));
        }
        let trial = self.run_trial(batch, self.breakdown_is_free())?.clone();
        Ok(self.judged(&trial))
    }

    fn probe_all(&mut self, batches: &[u64]) -> Result<Vec<Observation>> {
        if batches.len() == 1 || batches.len() > self.beside.len() + 1 || self.margin_off {
            return batches.iter().map(|&b| self.probe(b)).collect();
        }
        let trials = self.run_round(batches)?;
        Ok(trials.iter().map(|t| self.judged(t)).collect())
    }
}

/// The note of a whole job whose peak at `batch` passed the budget: the
/// max comes down to `lower`, or (0) no batch fits (`seen`: the peaks so far).
fn over_budget(batch: u64, (peak, what): (u64, &str), lower: u64, seen: &[(u64, u64)]) -> Note {
    if lower > 0 {
        let text = format!(
            "the whole job at batch {batch} peaks at {} ({what}), over the budget: the max comes down to {lower}",
            human_bytes(peak as f64)
        );
        return Note::WholeJob { text };
    }
    let shown: Vec<String> = seen.iter().map(|(b, p)| format!("{} at batch {b}", human_bytes(*p as f64))).collect();
    let text = format!(
        "no batch fits the whole job: its peak ({what}) does not come down with the batch enough ({}); \
         keep less of what the job holds across a pass (move kept outputs to the CPU, compute a \
         metric as the loop goes; a Hugging Face Trainer: eval_accumulation_steps)",
        shown.join(", ")
    );
    Note::NoBatchFitsWholeJob { text }
}

/// The span of a trial of `kind` that ended `end_seconds` into the sweep
/// (its process's wall time before that: a wait for the imports it forks
/// from is the imports' span, not the trial's).
fn trial_span(kind: SpanKind, trial: &TrialResult, end_seconds: f64) -> Span {
    Span {
        kind,
        trial: Some(trial.trial),
        batch: Some(trial.batch),
        start_seconds: (end_seconds - trial.wall_seconds).max(0.0),
        seconds: trial.wall_seconds,
        times: trial.times,
    }
}

/// Runs the sweep, each trial through `runner`. Outputs are rewritten after
/// every trial, so whatever was measured survives a failure later on.
pub fn run(cfg: &SweepConfig, runner: &mut dyn TrialRunner, sink: &mut dyn Sink) -> Result<RunRecord> {
    let began = Instant::now();
    let report = new_report(cfg);
    sink.keep(&report)?;
    let beside = cfg.beside.iter().filter_map(|&device| runner.beside(device)).collect();
    let mut sweep =
        Sweep { cfg, runner, sink, report, budget: None, margin_off: false, traces: Vec::new(), beside, began };

    let mut strategy = cfg.strategy();
    let mut result = sweep.search(strategy.as_mut())?;
    let ignored = sweep.report.notes.iter().any(|n| matches!(n, Note::BatchIgnored { .. }));
    if ignored {
        // No max from a command that ignores its batch; its note says why the search stopped.
        result = SearchResult { max_batch: 0, exact: false, ..result };
        result.notes.clear();
    }
    sweep.search_capacity(&result)?;
    sweep.verify_recommended(&mut result)?;
    sweep.explain_max(&mut result)?;
    sweep.rehearse_max(&mut result)?;
    sweep.note_alloc_retries(result.max_batch);
    sweep.conclude(result, ignored)
}

/// The run's record before its first trial.
fn new_report(cfg: &SweepConfig) -> RunRecord {
    let (started_at, _) = environment::utc_now();
    RunRecord {
        schema_version: REPORT_SCHEMA_VERSION,
        status: RunStatus::Running,
        command_line: cfg.options.command_line.clone(),
        started_at,
        environment: environment::capture(),
        subject: cfg.subject.clone(),
        device: cfg.device,
        device_name: None,
        steps_per_trial: cfg.options.steps,
        margin_fraction: cfg.options.margin_fraction,
        multiple_of: cfg.options.multiple_of,
        trials: Vec::new(),
        analysis: None,
        why: None,
        notes: cfg.notes.clone(),
        timings: Vec::new(),
    }
}

impl Sweep<'_> {
    /// The analysis of every trial, the why and the timings' last spans,
    /// into the report's final files.
    fn conclude(self, result: SearchResult, ignored: bool) -> Result<RunRecord> {
        let (cfg, began, at) = (self.cfg, self.began, self.seconds());
        let mut report = self.report;
        report.notes.extend(self.runner.how_trials_start().map(|text| Note::TrialStart { text }));
        if let Some((started, seconds)) = self.runner.imports() {
            let start_seconds = started.saturating_duration_since(began).as_secs_f64();
            report.timings.insert(0, Span::of(SpanKind::Imports, start_seconds, seconds));
        }
        let budget = self.budget.unwrap_or_else(|| {
            report.notes.push(Note::BudgetUnknown);
            Budget::new(cfg.options.capacity.unwrap_or(0), cfg.options.margin_fraction, 0)
        });
        let curve = device_curve::reserved_curve(&self.traces);
        let input = AnalysisInput {
            device: cfg.device,
            budget,
            capacity_source: CapacitySource::of(cfg.options.capacity),
            strategy: cfg.strategy_name(),
            search: result,
            multiple_of: cfg.options.multiple_of,
            cuda_reserved_curve_from: curve.as_ref().map(|c| c.1),
            cuda_reserved_curve: curve.map(|c| c.0).unwrap_or_default(),
        };
        let mut analysis = analysis::analyze(&report.trials, input);
        if ignored {
            analysis.notes.retain(|n| *n != Note::FlatLine);
        }
        report.status = if analysis.max_batch > 0 { RunStatus::Complete } else { RunStatus::Failed };
        report.analysis = Some(analysis);
        report.why = explain(&report);
        report.timings.push(Span::of(SpanKind::Analysis, at, began.elapsed().as_secs_f64() - at));
        self.sink.keep(&report)?;
        Ok(report)
    }
}

/// The run's why, when its max batch was broken down.
fn explain(report: &RunRecord) -> Option<Why> {
    let a = report.analysis.as_ref()?;
    // A built-in's optimizer and precision are known; a command's are read from its breakdown.
    let w = report.subject.workload();
    why::explain(why::WhyInput {
        trials: &report.trials,
        fit: a.fit,
        budget: a.budget,
        max_batch: a.max_batch,
        recommended_batch: a.recommended_batch,
        capped: a.capped,
        training: w.is_none_or(|w| w.mode == crate::record::workload::Mode::Train),
        optimizer: w.map(|w| w.optimizer),
        precision: w.map(|w| w.precision),
    })
}
