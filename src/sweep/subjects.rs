//! What a run measures, decided once from the options as the user gave
//! them: a built-in model (its input checked against the registry), a
//! TorchScript file (its classes read from it), or the user's command (its
//! placeholders checked against the options that fill them). The sweep,
//! check and trial ask here, so each gets the same checks and messages.
use std::path::PathBuf;

use anyhow::Result;

use crate::error::UsageError;
use crate::measure::model::{self, InputKind, ModelSpec, NO_BUILTIN};
use crate::measure::{launch, linked};
use crate::record::subject::{CommandSubject, Nodes, Placeholders, Subject, UserCommand};
use crate::record::workload::{Mode, OptimizerKind, Precision, WorkloadConfig};
use crate::sweep::preset::{self, WorkloadProfile};

pub const DEFAULT_LR: f64 = 1e-3;

/// A built-in or TorchScript model's options, as given; a sweep takes lists.
#[derive(Debug, Clone, Default)]
pub struct WorkloadOptions {
    pub model: Option<String>,
    pub input: Option<Vec<i64>>,
    pub seq_len: Option<i64>,
    pub classes: Option<i64>,
    pub optimizers: Vec<OptimizerKind>,
    pub lr: Option<f64>,
    pub precisions: Vec<Precision>,
    pub modes: Vec<Mode>,
}

/// What a sweep measures, as asked: a model's options (over a `--profile`
/// preset), or a command, with the lengths and world sizes its
/// placeholders take.
#[derive(Debug, Clone, Default)]
pub struct SubjectOptions {
    pub workload: WorkloadOptions,
    pub profile: Option<PathBuf>,
    pub command: Vec<String>,
    pub seq_lens: Option<Vec<i64>>,
    pub world_sizes: Option<Vec<u32>>,
    /// `--nodes`: a torchrun command's job across nodes.
    pub nodes: Option<Nodes>,
}

/// The sweep's subjects: one per (optimizer, precision, mode, sequence
/// length) of a model, or per (world size, sequence length) of a command.
pub fn sweep_subjects(options: &SubjectOptions) -> Result<Vec<Subject>> {
    if options.command.is_empty() {
        if options.nodes.is_some() {
            return Err(UsageError::new("--nodes is for your torchrun command, after --").into());
        }
        return Ok(sweep_workloads(options)?.into_iter().map(Subject::of_workload).collect());
    }
    refuse_model_options(&options.workload)?;
    let command = UserCommand::new(options.command.clone())?;
    let lengths: Vec<i64> = match (&options.seq_lens, options.workload.seq_len) {
        (Some(l), _) => l.clone(),
        (None, Some(t)) => vec![t],
        (None, None) => Vec::new(),
    };
    check_placeholders(&command, !lengths.is_empty(), options.world_sizes.is_some())?;
    let world_sizes: Vec<Option<u32>> = match &options.world_sizes {
        Some(sizes) => sizes.iter().copied().map(Some).collect(),
        None => vec![None],
    };
    let seq_lens: Vec<Option<i64>> =
        if lengths.is_empty() { vec![None] } else { lengths.into_iter().map(Some).collect() };
    let mut subjects = Vec::new();
    for &nproc in &world_sizes {
        for &seq_len in &seq_lens {
            let subject = Subject::Command(CommandSubject::new(command.clone(), Placeholders { seq_len, nproc }));
            subjects.push(across_nodes(subject, options.nodes.clone())?);
        }
    }
    Ok(subjects)
}

/// A command subject as a job across `nodes` (when given): a torchrun
/// command, without the rendezvous options vramprobe sets.
pub fn across_nodes(subject: Subject, nodes: Option<Nodes>) -> Result<Subject, UsageError> {
    match (subject, nodes) {
        (subject, None) => Ok(subject),
        (Subject::Command(mut c), Some(nodes)) => {
            if let Some(why) = launch::refuse(&c.command.argv) {
                return Err(UsageError::new(why));
            }
            c.nodes = Some(nodes);
            Ok(Subject::Command(c))
        }
        (_, Some(_)) => Err(UsageError::new("--nodes is for your torchrun command, not a built-in model")),
    }
}

/// One command at one length (`--seq-len`) and world size, on one node or several (check).
pub fn one_command(
    argv: &[String],
    options: &WorkloadOptions,
    world_size: Option<u32>,
    nodes: Option<Nodes>,
) -> Result<Subject> {
    refuse_model_options(options)?;
    let command = UserCommand::new(argv.to_vec())?;
    let seq_len = options.seq_len;
    check_placeholders(&command, seq_len.is_some(), world_size.is_some())?;
    let subject = Subject::Command(CommandSubject::new(command, Placeholders { seq_len, nproc: world_size }));
    Ok(across_nodes(subject, nodes)?)
}

/// One model workload (check, trial): at most one precision, mode and optimizer.
pub fn one_workload(options: &WorkloadOptions) -> Result<WorkloadConfig> {
    let precision = single(&options.precisions, "--precision")?;
    let mode = single(&options.modes, "--mode")?;
    single(&options.optimizers, "--optimizer")?;
    resolve(&base(options, None)?, precision.unwrap_or_default(), mode.unwrap_or_default())
}

/// The one check of a command's placeholders against the options that
/// fill them, with the one set of messages.
fn check_placeholders(command: &UserCommand, lengths: bool, world_sizes: bool) -> Result<(), UsageError> {
    let why = match (command.has_seq_len(), lengths, command.has_nproc(), world_sizes) {
        (true, false, _, _) => "the command has {seq_len}: give --seq-len T (a sweep also takes --seq-lens T1,T2,...)",
        (false, true, _, _) => "--seq-len(s) needs {seq_len} in the command, where the sequence length goes",
        (_, _, true, false) => {
            "the command has {nproc}: give the ranks to run it with, --world-size N (a sweep takes --world-sizes \
             N1,N2,...)"
        }
        (_, _, false, true) => {
            "--world-size(s) needs {nproc} in the command, where the number of ranks goes (e.g. torchrun \
             --nproc-per-node {nproc})"
        }
        _ => return Ok(()),
    };
    Err(UsageError::new(why))
}

/// With the user's own command, the command decides these.
fn refuse_model_options(w: &WorkloadOptions) -> Result<(), UsageError> {
    let built_in_only = [
        ("--input", w.input.is_some()),
        ("--precision", !w.precisions.is_empty()),
        ("--mode", !w.modes.is_empty()),
        ("--classes", w.classes.is_some()),
        ("--optimizer", !w.optimizers.is_empty()),
        ("--lr", w.lr.is_some()),
    ];
    match built_in_only.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(UsageError::new(format!(
            "{flag} is for built-in models; with your own command, the command decides it"
        ))),
        None => Ok(()),
    }
}

/// The workload given by the options (and a `--profile` preset's values,
/// which the options override), before precision, mode and length are chosen.
#[derive(Clone)]
struct Base {
    model: String,
    input: Option<Vec<i64>>,
    classes: Option<i64>,
    optimizer: OptimizerKind,
    lr: f64,
}

fn base(w: &WorkloadOptions, preset: Option<WorkloadProfile>) -> Result<Base> {
    if !linked::LINKED && (w.model.is_some() || preset.is_some()) {
        return Err(UsageError::new(NO_BUILTIN).into());
    }
    let model = match (&w.model, &preset) {
        (Some(m), _) => m.clone(),
        (None, Some(p)) => p.model.clone(),
        (None, None) => return Err(UsageError::new("--model is required").into()),
    };
    let input = w.input.clone().or_else(|| w.seq_len.map(|t| vec![t]));
    let mut base = Base {
        input: input.or_else(|| preset.as_ref().map(|p| p.input.clone())),
        classes: w.classes.or(preset.as_ref().map(|p| p.classes)),
        optimizer: w
            .optimizers
            .first()
            .copied()
            .or(preset.as_ref().map(|p| p.optimizer))
            .unwrap_or(OptimizerKind::Adam),
        lr: w.lr.or(preset.as_ref().map(|p| p.lr)).unwrap_or(DEFAULT_LR),
        model,
    };
    // A TorchScript model's classes are read from it once, for every variant.
    if let (model::Source::TorchScript(_), None, Some(input)) = (model::source(&base.model)?, base.classes, &base.input)
    {
        if input.len() == 3 {
            base.classes = Some(crate::measure::child::torchscript_classes(&base.model, input)?);
        }
    }
    Ok(base)
}

/// Checks the input against the model's kind and fills in the model's
/// defaults; a TorchScript file's classes come from its output.
fn resolve(base: &Base, precision: Precision, mode: Mode) -> Result<WorkloadConfig> {
    let (input, classes) = match model::source(&base.model)? {
        model::Source::BuiltIn(spec) => {
            (built_in_input(spec, base.input.clone())?, base.classes.unwrap_or(spec.default_classes))
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
                None => crate::measure::child::torchscript_classes(&base.model, &input)?,
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

/// A built-in model's input: the one given, if it is of the model's kind
/// (and no longer than its context), else the model's own.
fn built_in_input(spec: &ModelSpec, given: Option<Vec<i64>>) -> Result<Vec<i64>, UsageError> {
    let input = given.unwrap_or_else(|| spec.default_input.to_vec());
    match (spec.input_kind, input.len()) {
        (InputKind::Image, 3) => Ok(input),
        (InputKind::Tokens, 1) if input[0] > spec.default_input[0] => Err(UsageError::new(format!(
            "--seq-len {} is longer than {}'s context of {} tokens",
            input[0], spec.name, spec.default_input[0]
        ))),
        (InputKind::Tokens, 1) => Ok(input),
        (InputKind::Image, _) => Err(UsageError::new(format!(
            "{} is an image model: give --input as CxHxW, e.g. 3x224x224 (--seq-len is for token models)",
            spec.name
        ))),
        (InputKind::Tokens, _) => Err(UsageError::new(format!(
            "{} is a token model: give --seq-len (tokens per sequence), not an image shape",
            spec.name
        ))),
    }
}

fn single<T: Copy>(values: &[T], option: &str) -> Result<Option<T>, UsageError> {
    match values {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        _ => Err(UsageError::new(format!("{option} takes one value here (a list is for sweep)"))),
    }
}

/// The sweep's workloads, one per (optimizer, precision, mode, sequence
/// length): a `--profile` preset, with any option given taking precedence.
fn sweep_workloads(options: &SubjectOptions) -> Result<Vec<WorkloadConfig>> {
    let preset = match &options.profile {
        Some(path) => Some(preset::load_workload(path).map_err(|e| UsageError::new(e.to_string()))?),
        None => None,
    };
    let w = &options.workload;
    let precisions = or_preset(&w.precisions, preset.as_ref().map(|p| p.precision), Precision::Fp32);
    let modes = or_preset(&w.modes, preset.as_ref().map(|p| p.mode), Mode::Train);
    let base = base(w, preset)?;
    let optimizers = or_preset(&w.optimizers, Some(base.optimizer), base.optimizer);
    let lengths: Vec<Option<i64>> = match &options.seq_lens {
        Some(l) => l.iter().map(|&t| Some(t)).collect(),
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

/// The values listed (once each, in order), else the preset's, else the default.
fn or_preset<T: Copy + PartialEq>(listed: &[T], preset: Option<T>, default: T) -> Vec<T> {
    if listed.is_empty() {
        return vec![preset.unwrap_or(default)];
    }
    let mut out: Vec<T> = Vec::new();
    for &v in listed {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}
