//! `vramprobe train --plan plan.csv`: the companion trainer's command line.
use anyhow::{anyhow, bail, Context, Result};

use crate::commands::cli::TrainArgs;
use crate::error::UsageError;
use crate::measure::child::data::Dataset;
use crate::measure::child::meter::MemoryMeter;
use crate::measure::child::workload::Workload;
use crate::measure::device;
use crate::record::device::Device;
use crate::record::workload::{Mode, WorkloadConfig};
use crate::report::plan_file;
use crate::train::checkpoint::{self, RunState};
use crate::train::{self, Length, TrainConfig};
use crate::units::format_input;

/// Samples in an epoch of SYNTHETIC data (CIFAR-10's training set size).
const SYNTHETIC_SIZE: usize = 50_000;

pub fn run(args: TrainArgs) -> Result<i32> {
    let entries = plan_file::read(&args.plan).map_err(|e| UsageError::new(e.to_string()))?;
    let entry = plan_file::select(&args.plan, entries, args.row.map(|r| r as usize), args.model.as_deref())
        .map_err(|e| UsageError::new(e.to_string()))?;
    let Some(w) = entry.row.workload(args.lr) else {
        return Err(UsageError::new(format!(
            "{}: the row is your own command ({}): run it at the plan's batch with vramprobe exec --plan {} -- COMMAND",
            args.plan.display(),
            entry.row.model,
            args.plan.display()
        ))
        .into());
    };
    if w.mode == Mode::Eval {
        return Err(UsageError::new(format!(
            "{}:{}: this row is an eval (inference) plan; train needs a row measured with --mode train",
            args.plan.display(),
            entry.line
        ))
        .into());
    }

    let data = training_data(&args, &w, entry.line)?;
    let request = args.device.unwrap_or(entry.row.device);

    let (device, note) = device::resolve(request)?;
    if let Some(note) = note {
        eprintln!("note: {note}");
    }
    if let Some(capacity) = args.capacity {
        match device {
            Device::Cpu => crate::measure::child::shim::cpu_limit_install(capacity).map_err(|e| anyhow!("{e}"))?,
            Device::Cuda(_) => bail!(UsageError::new("train --capacity is implemented on the CPU only for now")),
        }
    }
    let (meter, notes) = MemoryMeter::open(device).context("starting memory tracking")?;
    for note in notes {
        eprintln!("note: {note}");
    }
    let mut workload = build_workload(&w, device, args.seed)?;
    let resume = args.resume.as_deref().map(|path| resume_from(path, &w, &mut workload)).transpose()?;

    let effective_batch = args.target_batch.unwrap_or(entry.row.recommended_batch);
    let length = match (args.steps, args.epochs) {
        (Some(s), _) => Length::Steps(s),
        (None, Some(e)) => Length::Epochs(e),
        (None, None) => Length::Epochs(1),
    };
    let cfg = TrainConfig {
        model: w.model.clone(),
        input: w.input.clone(),
        classes: w.classes,
        optimizer: w.optimizer,
        device,
        micro_batch: entry.row.recommended_batch,
        effective_batch,
        length,
        log_every: args.log_every,
        log_path: args.log.clone(),
        checkpoint: args.checkpoint.clone(),
        checkpoint_every: args.checkpoint_every,
        reprobe_after: args.reprobe_after,
        seed: args.seed,
        quiet: args.quiet,
    };
    train::run(&cfg, &mut workload, &meter, &data, resume)?;
    if let Some(log) = &args.log {
        println!("Wrote {}", log.display());
    }
    Ok(0)
}

/// The data to train on: CIFAR-10 from --data, else synthetic samples of
/// the row's input; refused when it is not what the row was measured for.
fn training_data(args: &TrainArgs, w: &WorkloadConfig, line: u64) -> Result<Dataset> {
    let data = match &args.data {
        Some(dir) => Dataset::cifar(dir).map_err(|e| UsageError::new(e.to_string()))?,
        None => Dataset::Synthetic { input: w.input.clone(), classes: w.classes, size: SYNTHETIC_SIZE },
    };
    if data.input() != w.input || data.classes() != w.classes {
        return Err(UsageError::new(format!(
            "{}:{}: the plan was measured for {} inputs and {} classes, the data is {} with {} classes; the recommended batch holds only for what was measured: sweep again with --input {} --classes {}",
            args.plan.display(),
            line,
            format_input(&w.input),
            w.classes,
            format_input(&data.input()),
            data.classes(),
            format_input(&data.input()),
            data.classes()
        ))
        .into());
    }

    Ok(data)
}

/// The row's model, built on `device` from the seed (the initial weights
/// come from it too, so two runs are the same run), its input checked.
fn build_workload(w: &WorkloadConfig, device: Device, seed: u64) -> Result<Workload> {
    let config = WorkloadConfig { mode: Mode::Train, ..w.clone() };
    tch::manual_seed((seed & i64::MAX as u64) as i64);
    let workload = Workload::new(config, device).map_err(|e| anyhow!("building {}: {e}", w.model))?;
    workload.check_input().map_err(|e| {
        // Name the input the model was designed for, so the user knows what to sweep instead.
        let designed_for = crate::measure::model::find(&w.model)
            .map(|spec| format!("; it is built for {} inputs", format_input(spec.default_input)))
            .unwrap_or_default();
        UsageError::new(format!(
            "{} cannot take {} inputs ({}){designed_for}",
            w.model,
            format_input(&w.input),
            e.message,
        ))
    })?;
    Ok(workload)
}

/// The checkpoint to resume from, restored into `workload`: refused when
/// it is another model, input or number of classes than the row's.
fn resume_from(path: &std::path::Path, w: &WorkloadConfig, workload: &mut Workload) -> Result<RunState> {
    let (progress, named) = checkpoint::read(path)?;
    if progress.model != w.model || progress.input != w.input || progress.classes != w.classes {
        bail!(
            "{}: the checkpoint is for {} {} x{} classes, the plan row is for {} {} x{}",
            path.display(),
            progress.model,
            format_input(&progress.input),
            progress.classes,
            w.model,
            format_input(&w.input),
            w.classes
        );
    }
    checkpoint::restore(path, workload, &named)?;
    eprintln!("resuming {} at step {} (epoch {})", path.display(), progress.step, progress.epoch);
    Ok(progress)
}
