//! The sweep's own logic (the search through real `Sweep` code, verifying
//! the recommended batch, notes, the sink, variants and the fits across
//! them) with a scripted trial runner: no process is started.
use std::path::Path;

use anyhow::Result;

use super::execute::{execute, Trials};
use super::layout::{PlannedRun, Shape, SweepPlan};
use super::variants::{self, Across};
use super::{run, BatchChoice, RunOptions, Sink, SweepConfig};
use crate::analyze::fit::Fit;
use crate::analyze::note::Note;
use crate::analyze::run::{RunIndex, RunRecord, RunStatus};
use crate::analyze::search::StrategyKind;
use crate::measure::runner::TrialRunner;
use crate::measure::trials::TrialSettings;
use crate::record::device::Device;
use crate::record::subject::Subject;
use crate::record::trial::{Outcome, StepRecord, TrialResult};
use crate::record::workload::{OptimizerKind, WorkloadConfig};
use crate::report::sink::Outlet;

const MIB: u64 = 1 << 20;

/// SYNTHETIC, for testing the sweep's logic only (never a measurement): a
/// trial's peak is `fixed + per_sample x batch` at every step, and a batch
/// whose peak passes the capacity runs out of memory; `growth` is added to
/// the bytes held after each step (a leak).
struct Scripted {
    fixed: u64,
    per_sample: u64,
    capacity: u64,
    growth: u64,
    /// From this batch on, each step counts an allocator retry (CUDA's num_alloc_retries).
    retries_from: u64,
    ran: Vec<u64>,
    /// The batches whose trial was asked for a breakdown.
    explained: Vec<u64>,
}

impl Scripted {
    fn new(fixed: u64, per_sample: u64, capacity: u64) -> Scripted {
        Scripted {
            fixed,
            per_sample,
            capacity,
            growth: 0,
            retries_from: u64::MAX,
            ran: Vec::new(),
            explained: Vec::new(),
        }
    }
}

impl TrialRunner for Scripted {
    fn run(
        &mut self,
        trial: u32,
        batch: u64,
        breakdown: bool,
        on_step: &mut dyn FnMut(&StepRecord),
    ) -> Result<TrialResult> {
        self.ran.push(batch);
        self.explained.extend(breakdown.then_some(batch));
        let mut r = TrialResult::started(trial, batch, None);
        r.device_name = Some("SYNTHETIC".into());
        let peak = self.fixed + self.per_sample * batch;
        if peak > self.capacity {
            r.outcome = Outcome::Oom;
            r.message = Some("out of memory (SYNTHETIC)".into());
            r.failed_step = Some(1);
            return Ok(r);
        }
        for step in 1..=3 {
            let s = StepRecord {
                trial,
                step,
                batch,
                allocated_bytes: self.fixed + self.growth * u64::from(step),
                peak_allocated_bytes: peak,
                host_peak_rss_bytes: Some(peak),
                alloc_retries: (batch >= self.retries_from).then_some(u64::from(step)),
                ..StepRecord::default()
            };
            on_step(&s);
            r.steps.push(s);
        }
        r.outcome = Outcome::Fits;
        Ok(r)
    }
}

/// A sink that counts what it is told.
#[derive(Default)]
struct Counting {
    started: usize,
    steps: usize,
    done: usize,
    reports: usize,
}

impl Sink for Counting {
    fn trial_started(&mut self, _trial: u32, _batch: u64) {
        self.started += 1;
    }
    fn step_done(&mut self, _step: &StepRecord) {
        self.steps += 1;
    }
    fn trial_done(&mut self, _result: &TrialResult, _fit: Option<Fit>) {
        self.done += 1;
    }
    fn keep(&mut self, _run: &RunRecord) -> Result<()> {
        self.reports += 1;
        Ok(())
    }
}

fn workload(model: &str, input: Vec<i64>) -> WorkloadConfig {
    WorkloadConfig {
        model: model.into(),
        input,
        classes: 10,
        optimizer: OptimizerKind::Sgd,
        lr: 1e-3,
        precision: Default::default(),
        mode: Default::default(),
    }
}

fn config(subject: Subject, capacity: u64, multiple_of: u64) -> SweepConfig {
    SweepConfig {
        subject,
        device: Device::Cpu,
        beside: Vec::new(),
        notes: Vec::new(),
        options: options(capacity, multiple_of),
    }
}

fn options(capacity: u64, multiple_of: u64) -> RunOptions {
    RunOptions {
        batches: BatchChoice::Search(StrategyKind::Vramprobe),
        max_batch: None,
        steps: 3,
        tolerance: 0,
        capacity: Some(capacity),
        margin_fraction: 0.0,
        multiple_of,
        parallel: None,
        command_line: Vec::new(),
        breakdown: true,
        rehearsal_seconds: Some(60.0),
    }
}

#[test]
fn a_sweep_finds_the_exact_max_and_runs_the_batch_it_recommends() {
    let (fixed, per_sample) = (100 * MIB, MIB);
    let capacity = fixed + 37 * per_sample;
    let mut runner = Scripted::new(fixed, per_sample, capacity);
    let mut sink = Counting::default();
    let cfg = config(Subject::of_workload(workload("resnet18", vec![3, 32, 32])), capacity, 8);
    let report = run(&cfg, &mut runner, &mut sink).unwrap();
    let a = report.analysis.as_ref().unwrap();
    assert_eq!((a.max_batch, a.exact, a.recommended_batch), (37, true, 32));
    assert!(a.recommended_verified && runner.ran.contains(&32), "ran {:?}", runner.ran);
    assert_eq!(report.status, RunStatus::Complete);
    // The fit is the script's line, exactly.
    let fit = a.fit.unwrap();
    assert_eq!((fit.fixed_bytes.round() as u64, fit.per_sample_bytes.round() as u64), (fixed, per_sample));
    // The sink saw every trial and every step, and a report at the start, after each trial and at the end.
    let trials = report.trials.len();
    let steps: usize = report.trials.iter().map(|t| t.steps.len()).sum();
    assert_eq!((sink.started, sink.done, sink.steps, sink.reports), (trials, trials, steps, trials + 2));
}

#[test]
fn allocator_retries_at_the_max_batch_are_noted_with_their_count() {
    let (fixed, per_sample) = (100 * MIB, MIB);
    let capacity = fixed + 37 * per_sample;
    let cfg = config(Subject::of_workload(workload("resnet18", vec![3, 32, 32])), capacity, 1);
    for (retries_from, noted) in [(30, Some(Note::AllocRetries { batch: 37, retries: 3 })), (38, None)] {
        let mut runner = Scripted { retries_from, ..Scripted::new(fixed, per_sample, capacity) };
        let report = run(&cfg, &mut runner, &mut Counting::default()).unwrap();
        let said = report.notes.iter().find(|n| matches!(n, Note::AllocRetries { .. })).cloned();
        assert_eq!(said, noted, "retries from batch {retries_from}: {:?}", report.notes);
    }
}

#[test]
fn a_budget_tighter_than_batch_one_searches_what_the_capacity_holds() {
    // Synthetic: batch 1 peaks at 101 MiB, in the 10% margin of 110 MiB; the capacity holds batch 10.
    let (fixed, per_sample) = (100 * MIB, MIB);
    let capacity = fixed + 10 * per_sample;
    let mut runner = Scripted::new(fixed, per_sample, capacity);
    let mut cfg = config(Subject::of_workload(workload("resnet18", vec![3, 32, 32])), capacity, 1);
    cfg.options.margin_fraction = 0.10;
    let report = run(&cfg, &mut runner, &mut Counting::default()).unwrap();
    assert_eq!(report.analysis.as_ref().unwrap().max_batch, 0, "nothing fits as asked");
    let said = report.notes.iter().find_map(|n| match n {
        Note::FitsOnlyInMargin { batch, peak_bytes, admitting, .. } => Some((*batch, *peak_bytes, *admitting)),
        _ => None,
    });
    let (batch, peak, admitting) = said.unwrap_or_else(|| panic!("{:?}", report.notes));
    assert_eq!((batch, peak), (10, capacity));
    assert_eq!(admitting, 0.0, "the peak fills the capacity: only no margin admits it");
    // No trial ran twice: the second search reuses what the first measured.
    let mut ran = runner.ran.clone();
    ran.sort_unstable();
    ran.dedup();
    assert_eq!(ran.len(), runner.ran.len(), "{:?}", runner.ran);
}

#[test]
fn memory_that_grows_between_steps_is_noted_once() {
    let (fixed, per_sample) = (100 * MIB, MIB);
    let capacity = fixed + 20 * per_sample;
    let mut runner = Scripted { growth: 4 * MIB, ..Scripted::new(fixed, per_sample, capacity) };
    let cfg = config(Subject::of_workload(workload("resnet18", vec![3, 32, 32])), capacity, 1);
    let report = run(&cfg, &mut runner, &mut Counting::default()).unwrap();
    let grew: Vec<&Note> = report.notes.iter().filter(|n| matches!(n, Note::MemoryGrew { .. })).collect();
    assert_eq!(grew.len(), 1, "{:?}", report.notes);
    assert!(matches!(grew[0], Note::MemoryGrew { bytes, last_step: 3, .. } if *bytes == 4 * MIB));
}

#[test]
fn nothing_fits_at_batch_one_is_a_failed_run_with_no_recommendation() {
    let mut runner = Scripted::new(100 * MIB, MIB, 50 * MIB);
    let cfg = config(Subject::of_workload(workload("resnet18", vec![3, 32, 32])), 50 * MIB, 1);
    let report = run(&cfg, &mut runner, &mut Counting::default()).unwrap();
    assert_eq!(report.status, RunStatus::Failed);
    assert_eq!(report.analysis.unwrap().recommended_batch, 0);
    assert!(report.trials.iter().all(|t| t.outcome == Outcome::Oom));
}

/// Scripted runners, each length its own line.
struct ScriptedTrials {
    capacity: u64,
}

impl Trials for ScriptedTrials {
    fn runner(&mut self, run: &PlannedRun, _dir: &Path) -> Result<Box<dyn TrialRunner + Send>> {
        let length = run.config.subject.seq_len().unwrap_or(1) as u64;
        Ok(Box::new(Scripted::new(100 * MIB, length * 64 * 1024, self.capacity)))
    }
}

/// An outlet that counts the runs' ends and the top folder's rewrites.
#[derive(Default)]
struct CountingOutlet {
    tops: Vec<RunIndex>,
    finished: Vec<String>,
}

impl Outlet for CountingOutlet {
    fn sink(&mut self, _label: &str, _subject: &Subject, _device: Device, _dir: &Path) -> Box<dyn Sink + Send> {
        Box::new(Counting::default())
    }
    fn finished(&mut self, label: &str, _result: &Result<RunRecord>) {
        self.finished.push(label.to_string());
    }
    fn top(&mut self, index: &RunIndex, _runs: &[(String, &RunRecord)]) -> Result<()> {
        self.tops.push(index.clone());
        Ok(())
    }
}

/// A plan of these runs, one after another.
fn variants_plan(subjects: Vec<Subject>, capacity: u64, across: Across) -> SweepPlan {
    let runs = variants::labels(&subjects)
        .into_iter()
        .zip(subjects)
        .map(|(label, subject)| {
            let config = config(subject, capacity, 1);
            let trials = TrialSettings {
                device: config.device,
                steps: config.options.steps,
                limit: Default::default(),
                timeout: std::time::Duration::from_secs(60),
                fresh_process: false,
                via: Default::default(),
            };
            PlannedRun { label, config, trials }
        })
        .collect();
    SweepPlan { runs, shape: Shape::Variants(across), device_notes: Vec::new() }
}

#[test]
fn variants_run_in_order_each_in_its_folder_with_the_fit_across_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let subjects: Vec<Subject> =
        [64, 16, 32].iter().map(|&t| Subject::of_workload(workload("gpt-micro", vec![t]))).collect();
    let labels = variants::labels(&subjects);
    assert_eq!(labels, ["seq-64", "seq-16", "seq-32"]);
    let capacity = 200 * MIB;
    let plan = variants_plan(subjects, capacity, Across { seq_lens: true, world_sizes: false });
    let mut outlet = CountingOutlet::default();
    let run = execute(&plan, dir.path(), &mut ScriptedTrials { capacity }, &mut outlet).unwrap();
    let index = run.index.as_ref().unwrap();
    assert_eq!(outlet.finished, labels);
    assert_eq!(index.folders, labels);
    assert!(run.failed.is_empty());
    // The top is rewritten after every variant, then once more with the fits.
    assert_eq!(outlet.tops.len(), 4);
    assert!(outlet.tops[..3].iter().all(|t| t.seq_lens.is_none()));
    let seq = index.seq_lens.as_ref().unwrap();
    assert_eq!(outlet.tops[3].seq_lens.as_ref(), Some(seq));
    // Each length's max, as its own line allows: (capacity - fixed) / (length x 64 KiB).
    for (label, report) in &run.reports {
        let length = report.subject.seq_len().unwrap() as u64;
        assert_eq!(report.analysis.as_ref().unwrap().max_batch, 100 * MIB / (length * 64 * 1024), "{label}");
        assert!(dir.path().join(label).is_dir());
    }
}
