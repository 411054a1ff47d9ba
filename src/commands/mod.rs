//! The commands: one file per subcommand (validate, call the library,
//! print) and the clap definitions ([`cli`]). The only place that knows
//! about the command line and the terminal's stdout.
//!
//! Layer 1, the top: may import every layer below; nothing imports it
//! (but `main.rs`).
mod bench;
// What needs libtorch (trial, train, a built-in model's trials, loading a
// TorchScript file), or a stand-in that says this build has none.
#[cfg(feature = "builtin")]
mod builtin;
#[cfg(not(feature = "builtin"))]
#[path = "no_builtin.rs"]
mod builtin;
mod check;
pub mod cli;
mod exec;
mod list;
mod plan;
pub mod preset;
mod report;
mod sweep;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::commands::cli::{Cli, Command, SweepArgs, WorkloadArgs};
use crate::error::UsageError;
use crate::measure::command::{CommandRunner, CommandRuns};
use crate::measure::model;
use crate::measure::preimport::TrialStart;
use crate::measure::runner::TrialRunner;
use crate::record::device::{CapacityLimit, Device};
use crate::record::subject::Subject;
use crate::record::workload::{Mode, OptimizerKind, Precision, WorkloadConfig};

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    // The commands that run trials or train stop cleanly on Ctrl-C or SIGTERM;
    // a trial child has no handler: its parent kills its process group.
    if matches!(cli.command, Command::Sweep(_) | Command::Train(_) | Command::Check(_)) {
        crate::interrupt::install();
    }
    match cli.command {
        Command::Sweep(args) => sweep::run(args),
        Command::Models(args) => list::models(args),
        Command::Devices(args) => list::devices(args),
        Command::Trial(args) => builtin::trial(args),
        Command::Train(args) => builtin::train(args),
        Command::Plan(args) => plan::run(args),
        Command::Check(args) => check::run(args),
        Command::Exec(args) => exec::run(args),
        Command::BenchSearch(args) => bench::run(args),
        Command::Report(args) => report::run(args),
        Command::Completions(args) => report::completions(args),
    }
}

/// How each trial runs, as the sweep or check asks.
struct TrialSettings {
    device: Device,
    steps: u32,
    limit: CapacityLimit,
    timeout: Duration,
    /// A command: start each trial afresh, not forked from a pre-imported interpreter.
    fresh_process: bool,
}

/// What runs the trials of `subject`: a `vramprobe trial` child per batch
/// for a built-in or TorchScript model, the user's command for a command;
/// each trial's folder (spec, records, a command's output) in `trials_dir`.
/// The sweep's and check's one way to measure.
fn trial_runner(subject: &Subject, how: TrialSettings, trials_dir: PathBuf) -> Result<Box<dyn TrialRunner + Send>> {
    let TrialSettings { device, steps, limit, timeout, fresh_process } = how;
    Ok(match subject {
        Subject::BuiltIn(w) | Subject::TorchScript(w) => {
            builtin::runner(w, TrialSettings { device, steps, limit, timeout, fresh_process }, trials_dir)?
        }
        Subject::Command(c) => {
            let runs = CommandRuns::new(c.command.clone(), c.placeholders(), trials_dir.clone())
                .with_context(|| format!("preparing {} and vramprobe's Python hook", trials_dir.display()))?;
            let start = TrialStart::new(&c.command.for_batch(1), fresh_process);
            Box::new(CommandRunner { runs, device, steps, limit, timeout, start })
        }
    })
}

/// The workload given by `args` (and a `--profile` preset's values, which
/// the options override), before precision, mode and length are chosen.
#[derive(Clone)]
struct Base {
    model: String,
    input: Option<Vec<i64>>,
    classes: Option<i64>,
    optimizer: OptimizerKind,
    lr: f64,
}

fn base(args: &WorkloadArgs, preset: Option<preset::WorkloadProfile>) -> Result<Base> {
    if !cfg!(feature = "builtin") && (args.model.is_some() || preset.is_some()) {
        return Err(UsageError::new(crate::measure::linked::NO_BUILTIN).into());
    }
    let model = match (&args.model, &preset) {
        (Some(m), _) => m.clone(),
        (None, Some(p)) => p.model.clone(),
        (None, None) => return Err(UsageError::new("--model is required").into()),
    };
    let input = args.input.clone().map(|i| i.0).or_else(|| args.seq_len.map(|t| vec![t]));
    let mut base = Base {
        input: input.or_else(|| preset.as_ref().map(|p| p.input.clone())),
        classes: args.classes.or(preset.as_ref().map(|p| p.classes)),
        optimizer: args
            .optimizer
            .first()
            .copied()
            .or(preset.as_ref().map(|p| p.optimizer))
            .unwrap_or(OptimizerKind::Adam),
        lr: args.lr.or(preset.as_ref().map(|p| p.lr)).unwrap_or(DEFAULT_LR),
        model,
    };
    // A TorchScript model's classes are read from it once, for every variant.
    if let (model::Source::TorchScript(_), None, Some(input)) = (model::source(&base.model)?, base.classes, &base.input)
    {
        if input.len() == 3 {
            base.classes = Some(builtin::torchscript_classes(&base.model, input)?);
        }
    }
    Ok(base)
}

/// Checks the input against the model's kind and fills in the model's
/// defaults; a TorchScript file's classes come from its output.
fn resolve(base: &Base, precision: Precision, mode: Mode) -> Result<WorkloadConfig> {
    let source = model::source(&base.model)?;
    let (input, classes) = match source {
        model::Source::BuiltIn(spec) => {
            let input = base.input.clone().unwrap_or_else(|| spec.default_input.to_vec());
            match (spec.input_kind, input.len()) {
                (model::InputKind::Image, 3) | (model::InputKind::Tokens, 1) => {}
                (model::InputKind::Image, _) => {
                    return Err(UsageError::new(format!(
                        "{} is an image model: give --input as CxHxW, e.g. 3x224x224 (--seq-len is for token models)",
                        spec.name
                    ))
                    .into())
                }
                (model::InputKind::Tokens, _) => {
                    return Err(UsageError::new(format!(
                        "{} is a token model: give --seq-len (tokens per sequence), not an image shape",
                        spec.name
                    ))
                    .into())
                }
            }
            if spec.input_kind == model::InputKind::Tokens && input[0] > spec.default_input[0] {
                return Err(UsageError::new(format!(
                    "--seq-len {} is longer than {}'s context of {} tokens",
                    input[0], spec.name, spec.default_input[0]
                ))
                .into());
            }
            (input, base.classes.unwrap_or(spec.default_classes))
        }
        model::Source::TorchScript(path) => {
            let input = base.input.clone().filter(|i| i.len() == 3).ok_or_else(|| {
                UsageError::new(format!(
                    "--input CxHxW is required for a TorchScript model ({}): the file does not say its input shape",
                    path.display()
                ))
            })?;
            let classes = match base.classes {
                Some(c) => c,
                None => builtin::torchscript_classes(&base.model, &input)?,
            };
            (input, classes)
        }
    };
    Ok(WorkloadConfig {
        model: base.model.clone(),
        input,
        classes,
        optimizer: base.optimizer,
        lr: base.lr,
        precision,
        mode,
    })
}

/// One workload (check, trial): at most one precision and mode.
fn workload_config(args: &WorkloadArgs) -> Result<WorkloadConfig> {
    let (precision, mode) = (single(&args.precision, "--precision")?, single(&args.mode, "--mode")?);
    single(&args.optimizer, "--optimizer")?;
    resolve(&base(args, None)?, precision.unwrap_or_default(), mode.unwrap_or_default())
}

fn single<T: Copy>(values: &[T], option: &str) -> Result<Option<T>, UsageError> {
    match values {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        _ => Err(UsageError::new(format!("{option} takes one value here (a list is for sweep)"))),
    }
}

pub(crate) const DEFAULT_LR: f64 = 1e-3;

/// The sweep's workloads, one per (optimizer, precision, mode, sequence length): a
/// `--profile` preset, with any option given on the command line taking
/// precedence.
fn sweep_workloads(args: &SweepArgs) -> Result<Vec<WorkloadConfig>> {
    let preset = match &args.profile {
        Some(path) => Some(preset::load_workload(path).map_err(|e| UsageError::new(e.to_string()))?),
        None => None,
    };
    let precisions = match (&args.workload.precision[..], &preset) {
        ([], Some(p)) => vec![p.precision],
        ([], None) => vec![Precision::Fp32],
        (list, _) => dedup(list),
    };
    let modes = match (&args.workload.mode[..], &preset) {
        ([], Some(p)) => vec![p.mode],
        ([], None) => vec![Mode::Train],
        (list, _) => dedup(list),
    };
    let base = base(&args.workload, preset)?;
    let optimizers = match &args.workload.optimizer[..] {
        [] => vec![base.optimizer],
        list => dedup(list),
    };
    let lengths: Vec<Option<i64>> = match &args.seq_lens {
        Some(l) => l.0.iter().map(|&t| Some(t)).collect(),
        None => vec![None],
    };
    let mut out = Vec::new();
    for &optimizer in &optimizers {
        for &precision in &precisions {
            for &mode in &modes {
                for &length in &lengths {
                    let input = length.map(|t| vec![t]).or(base.input.clone());
                    out.push(resolve(&Base { input, optimizer, ..base.clone() }, precision, mode)?);
                }
            }
        }
    }
    Ok(out)
}

fn dedup<T: Copy + PartialEq>(values: &[T]) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    for &v in values {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}
