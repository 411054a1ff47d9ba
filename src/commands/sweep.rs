//! `vramprobe sweep`: validate, run the sweep, print the summary.
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::analyze::note::Note;
use crate::analyze::run::{RunIndex, RunRecord};
use crate::commands::cli::SweepArgs;
use crate::error::{Interrupted, UsageError};
use crate::measure::runner::TrialRunner;
use crate::measure::{device, environment};
use crate::record::device::{Device, DeviceRequest};
use crate::record::subject::{CommandSubject, Placeholders, Subject, UserCommand};
use crate::report::sink::{Lines, Prefixed, Sink};
use crate::report::{self, no_fit, output, table};
use crate::sweep::variants::{Across, DeviceRun};
use crate::sweep::{self, BatchChoice, SweepConfig};

/// The trial runner of a run whose folder is `dir` (trials in `dir/trials`).
fn trial_runner(
    args: &SweepArgs,
    subject: &Subject,
    device: Device,
    dir: &Path,
) -> Result<Box<dyn TrialRunner + Send>> {
    let limit = device::capacity_limit(device, args.capacity)?;
    let timeout = Duration::from_secs(args.trial_timeout);
    let how =
        super::TrialSettings { device, steps: args.verify_steps, limit, timeout, fresh_process: args.fresh_process };
    super::trial_runner(subject, how, dir.join("trials"))
}

fn sweep_config(args: &SweepArgs, subject: &Subject, device: Device, note: Option<String>) -> SweepConfig {
    let mut notes: Vec<Note> = note.into_iter().map(|text| Note::Device { text }).collect();
    if let (Subject::Command(_), Device::Cpu, Some(_)) = (subject, device, args.capacity) {
        notes.push(Note::CapacityNotEnforced);
    }
    SweepConfig {
        subject: subject.clone(),
        device,
        batches: match &args.batches {
            Some(b) => BatchChoice::Listed(b.0.clone()),
            None => BatchChoice::Search(args.strategy),
        },
        max_batch: args.max_batch,
        steps: args.verify_steps,
        tolerance: args.tolerance,
        capacity: args.capacity,
        margin_fraction: args.margin,
        multiple_of: args.multiple_of,
        command_line: std::env::args().collect(),
        notes,
        breakdown: !args.no_breakdown && args.breakdown.breakdown_on(),
        rehearsal_seconds: args.rehearsal_time as f64,
    }
}

/// Command mode: one subject per sequence length and world size (what
/// `{seq_len}` and `{nproc}` become); the command itself decides model,
/// data, precision and optimizer.
fn command_subjects(args: &SweepArgs) -> Result<Option<Vec<Subject>>> {
    if args.command.is_empty() {
        return Ok(None);
    }
    let w = &args.workload;
    let built_in_only = [
        ("--input", w.input.is_some()),
        ("--precision", !w.precision.is_empty()),
        ("--mode", !w.mode.is_empty()),
        ("--classes", w.classes.is_some()),
        ("--optimizer", !w.optimizer.is_empty()),
        ("--lr", w.lr.is_some()),
    ];
    if let Some((flag, _)) = built_in_only.iter().find(|(_, given)| *given) {
        return Err(UsageError::new(format!(
            "{flag} is for built-in models; with your own command, the command decides it"
        ))
        .into());
    }
    let command = UserCommand::new(args.command.clone())?;
    let lengths: Vec<i64> = match (&args.seq_lens, w.seq_len) {
        (Some(l), _) => l.0.clone(),
        (None, Some(t)) => vec![t],
        (None, None) => Vec::new(),
    };
    if lengths.is_empty() == command.has_seq_len() {
        let why = if lengths.is_empty() {
            "the command has {seq_len}: give --seq-len T or --seq-lens T1,T2,..."
        } else {
            "--seq-len(s) needs {seq_len} in the command, where the sequence length goes"
        };
        return Err(UsageError::new(why).into());
    }
    let world_sizes: Vec<Option<u32>> = match &args.world_sizes {
        Some(sizes) => sizes.0.iter().copied().map(Some).collect(),
        None => vec![None],
    };
    if args.world_sizes.is_some() != command.has_nproc() {
        let why = if command.has_nproc() {
            "the command has {nproc}: give --world-sizes N1,N2,... (the ranks to run it with)"
        } else {
            "--world-sizes needs {nproc} in the command, where the number of ranks goes \
             (e.g. torchrun --nproc-per-node {nproc})"
        };
        return Err(UsageError::new(why).into());
    }
    let seq_lens: Vec<Option<i64>> =
        if lengths.is_empty() { vec![None] } else { lengths.into_iter().map(Some).collect() };
    let mut subjects = Vec::new();
    for &nproc in &world_sizes {
        for &seq_len in &seq_lens {
            subjects.push(Subject::Command(CommandSubject::new(command.clone(), Placeholders { seq_len, nproc })));
        }
    }
    Ok(Some(subjects))
}

/// The sweep's side of the outside world: child processes for trials, the
/// run folders' files, and the terminal.
struct Outside<'a> {
    args: &'a SweepArgs,
    device: Device,
    out_dir: &'a Path,
}

impl sweep::variants::Outlet for Outside<'_> {
    fn runner(&mut self, subject: &Subject, dir: &Path) -> Result<Box<dyn TrialRunner + Send>> {
        trial_runner(self.args, subject, self.device, dir)
    }

    fn sink(&mut self, label: &str, subject: &Subject, dir: &Path) -> Box<dyn Sink + Send> {
        if !self.args.quiet {
            match subject.workload() {
                None => eprintln!("== {label} =="),
                Some(w) => eprintln!("== {label}: {} {} {} ==", w.optimizer.name(), w.precision.name(), w.mode.name()),
            }
        }
        Box::new(Lines::new(self.args.quiet, self.args.verify_steps, dir))
    }

    fn finished(&mut self, label: &str, result: &Result<RunRecord>) {
        match result {
            Ok(report) if !self.args.quiet => eprint!("{}", table::summary(report)),
            Ok(_) => {}
            Err(e) if e.is::<Interrupted>() => partial_note(e, self.out_dir),
            Err(e) => eprintln!("{label}: {e:#}"),
        }
    }

    fn top(&mut self, index: &RunIndex, runs: &[(String, &RunRecord)]) -> Result<()> {
        output::write_files(self.out_dir, &report::top_files(index, runs)?)
    }
}

pub fn run(args: SweepArgs) -> Result<i32> {
    let subjects = match command_subjects(&args)? {
        Some(subjects) => subjects,
        None => super::sweep_workloads(&args)?.into_iter().map(Subject::of_workload).collect(),
    };
    if let (Some(b), Some(m)) = (&args.batches, args.max_batch) {
        if b.0.iter().any(|&x| x > m) {
            return Err(UsageError::new("--batches lists a batch above --max-batch").into());
        }
    }
    let devices: Vec<(Device, Option<String>)> = match args.device {
        DeviceRequest::All => device::all_cuda()?.into_iter().map(|d| (d, None)).collect(),
        request => vec![device::resolve(request)?],
    };
    if devices.len() > 1 && subjects.len() > 1 {
        return Err(UsageError::new(
            "--device all sweeps one precision, mode and length at a time; give a single value of each",
        )
        .into());
    }
    let (_, stamp) = environment::utc_now();
    let out_dir = output::prepare_out_dir(args.out.as_deref(), &subjects[0].label(), &stamp, args.force)?;
    for note in devices.iter().filter_map(|(_, n)| n.as_ref()) {
        eprintln!("note: {note}");
    }
    if subjects.len() > 1 {
        let (device, note) = devices.into_iter().next().ok_or_else(|| anyhow!("no device"))?;
        return run_variants(&args, &subjects, device, note, &out_dir);
    }
    let subject = &subjects[0];
    if devices.len() > 1 {
        return run_devices(&args, subject, &devices, &out_dir);
    }
    let (device, note) = devices.into_iter().next().ok_or_else(|| anyhow!("no device"))?;
    let cfg = sweep_config(&args, subject, device, note);
    let mut runner = trial_runner(&args, subject, device, &out_dir)?;
    let mut sink = Lines::new(args.quiet, args.verify_steps, &out_dir);
    let report = sweep::run(&cfg, runner.as_mut(), &mut sink).inspect_err(|e| partial_note(e, &out_dir))?;
    print!("{}", table::summary(&report));
    println!("Wrote {}: {}", out_dir.display(), report::run_file_names(&report));
    let analysis = report.analysis.as_ref().ok_or_else(|| anyhow!("the sweep produced no analysis"))?;
    if analysis.max_batch == 0 {
        return Err(anyhow!(no_fit::does_not_fit(&report, analysis.budget)));
    }
    Ok(0)
}

/// Every GPU at once, each in its folder: a data-parallel job on this node
/// can use the smallest recommendation.
fn run_devices(
    args: &SweepArgs,
    subject: &Subject,
    devices: &[(Device, Option<String>)],
    out_dir: &Path,
) -> Result<i32> {
    let mut runs = Vec::new();
    for (device, note) in devices.iter().cloned() {
        let label = device.to_string().replace(':', "-");
        let dir = out_dir.join(&label);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let runner = trial_runner(args, subject, device, &dir)?;
        let sink: Box<dyn Sink + Send> = Box::new(Prefixed { device, quiet: args.quiet, dir });
        runs.push(DeviceRun { label, config: sweep_config(args, subject, device, note), runner, sink });
    }
    let results = sweep::variants::run_devices(runs);
    let mut recommended = Vec::new();
    for (label, result) in &results {
        match result {
            Ok(r) => {
                print!("{}", table::summary(r));
                recommended.push(r.analysis.as_ref().map_or(0, |a| a.recommended_batch));
            }
            Err(e) => {
                eprintln!("{label}: {e:#}");
                recommended.push(0);
            }
        }
    }
    let done: Vec<(String, &RunRecord)> =
        results.iter().filter_map(|(label, r)| Some((label.clone(), r.as_ref().ok()?))).collect();
    output::write_files(out_dir, &report::top_files(&sweep::variants::devices_index(&done), &done)?)?;
    crate::interrupt::check()?;
    let min = recommended.iter().copied().min().unwrap_or(0);
    println!(
        "Per device recommended batch: {recommended:?}; for data-parallel training on this node: {min} per device"
    );
    println!("Wrote {} (one folder per device)", out_dir.display());
    if min == 0 {
        return Err(anyhow!("at least one device has no batch that fits"));
    }
    Ok(0)
}

/// Several variants on one device, one after the other, each in its own
/// folder (sweep::variants), then the tables across them.
fn run_variants(
    args: &SweepArgs,
    subjects: &[Subject],
    device: Device,
    note: Option<String>,
    out_dir: &Path,
) -> Result<i32> {
    let configs: Vec<(String, SweepConfig)> = sweep::variants::labels(subjects)
        .into_iter()
        .zip(subjects)
        .map(|(label, subject)| (label, sweep_config(args, subject, device, note.clone())))
        .collect();
    let across = Across {
        seq_lens: args.seq_lens.is_some(),
        world_sizes: args.world_sizes.as_ref().is_some_and(|w| w.0.len() > 1),
    };
    let run = sweep::variants::run(configs, out_dir, across, &mut Outside { args, device, out_dir })?;
    let runs = run.runs();
    print!("{}", table::variants(&runs));
    if let Some(summary) = &run.index.seq_lens {
        print!("{}", table::seq_lengths(summary));
    }
    match (&run.index.world_sizes, across.world_sizes, across.seq_lens) {
        (Some(summary), _, _) => {
            print!("{}", table::world_sizes(summary));
            println!("Wrote {}: world-sizes.json, plan-world-sizes.csv (predicted rows)", out_dir.display());
        }
        (None, true, true) => println!(
            "note: the fit across world sizes is made for one sequence length at a time: sweep each length on its own"
        ),
        (None, true, false) => println!("note: no world size has a memory line: nothing to fit across world sizes"),
        (None, false, _) => {}
    }
    println!("Wrote {}: plan.csv (one row per variant), index.html and one folder per variant", out_dir.display());
    for (label, r) in &run.reports {
        if let Some(m) = r.analysis.as_ref().and_then(|a| no_fit::unsupported(r, a)) {
            println!("note: {label}: {m}");
        }
    }
    if !run.failed.is_empty() {
        let labels: Vec<&str> = run.failed.iter().map(|(label, _)| label.as_str()).collect();
        return Err(anyhow!("the sweep failed for: {}", labels.join(", ")));
    }
    if run.reports.iter().all(|(_, r)| r.analysis.as_ref().is_none_or(|a| a.max_batch == 0)) {
        return Err(anyhow!("no variant has a batch that fits"));
    }
    Ok(0)
}

/// Where an interrupted sweep left what it measured.
fn partial_note(e: &anyhow::Error, out_dir: &Path) {
    if e.is::<Interrupted>() {
        eprintln!(
            "{e}: what was measured is in {} (report.json status \"interrupted\"; `vramprobe report {}` redraws it)",
            out_dir.display(),
            out_dir.display()
        );
    }
}
