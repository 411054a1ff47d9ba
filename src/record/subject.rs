//! What a run measures: a built-in model, a TorchScript file, or the user's
//! own command. Each kind carries only what is true of it, end to end
//! (report.json, plan.csv, the table, check, exec, train): a command's
//! model, data, precision and optimizer are the command's own business, so
//! its subject has none of them.
use serde::{Deserialize, Serialize};

use std::path::Path;

use crate::error::UsageError;
use crate::record::workload::WorkloadConfig;

/// The thing a run measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Subject {
    /// A model from vramprobe's registry, trained by vramprobe.
    BuiltIn(WorkloadConfig),
    /// A TorchScript file (`model` is its path), trained by vramprobe.
    #[serde(rename = "torchscript")]
    TorchScript(WorkloadConfig),
    /// The user's own training command.
    Command(CommandSubject),
}

/// The user's command, with what its placeholders became for this run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandSubject {
    #[serde(flatten)]
    pub command: UserCommand,
    /// What `{seq_len}` became (`--seq-len(s)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq_len: Option<i64>,
    /// What `{nproc}` became: the ranks of a distributed job (`--world-sizes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub world_size: Option<u32>,
    /// A torchrun job across several nodes (`--nodes`), and how its agents start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Nodes>,
}

/// A torchrun job spanning `count` nodes: one torchrun agent per node,
/// joined by a c10d rendezvous, started by `launcher`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nodes {
    pub count: u32,
    pub launcher: Launcher,
}

/// What starts a multi-node trial's agents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Launcher {
    /// Every agent on this host: how a laptop or CI rehearses a multi-node job.
    Local,
    /// `srun`, one task per node, inside a Slurm allocation.
    Slurm,
    /// `ssh`, one agent per host, the first host holding the rendezvous.
    Ssh { hosts: Vec<String> },
}

impl Launcher {
    pub fn name(&self) -> &'static str {
        match self {
            Launcher::Local => "local",
            Launcher::Slurm => "slurm",
            Launcher::Ssh { .. } => "ssh",
        }
    }
}

impl CommandSubject {
    pub fn new(command: UserCommand, at: Placeholders) -> CommandSubject {
        CommandSubject { command, seq_len: at.seq_len, world_size: at.nproc, nodes: None }
    }

    pub fn placeholders(&self) -> Placeholders {
        Placeholders { seq_len: self.seq_len, nproc: self.world_size }
    }
}

/// The three kinds, as plan.csv's `subject` column names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SubjectKind {
    #[default]
    BuiltIn,
    #[serde(rename = "torchscript")]
    TorchScript,
    Command,
}

impl Subject {
    /// A workload vramprobe trains itself: built-in or TorchScript, by its model name.
    pub fn of_workload(workload: WorkloadConfig) -> Subject {
        if is_path(&workload.model) {
            Subject::TorchScript(workload)
        } else {
            Subject::BuiltIn(workload)
        }
    }

    pub fn kind(&self) -> SubjectKind {
        match self {
            Subject::BuiltIn(_) => SubjectKind::BuiltIn,
            Subject::TorchScript(_) => SubjectKind::TorchScript,
            Subject::Command(_) => SubjectKind::Command,
        }
    }

    /// The workload vramprobe trains; `None` for a command.
    pub fn workload(&self) -> Option<&WorkloadConfig> {
        match self {
            Subject::BuiltIn(w) | Subject::TorchScript(w) => Some(w),
            Subject::Command(_) => None,
        }
    }

    pub fn command(&self) -> Option<&CommandSubject> {
        match self {
            Subject::Command(c) => Some(c),
            _ => None,
        }
    }

    /// The model's name or path, or the command line: what tables and titles show.
    pub fn name(&self) -> String {
        match self {
            Subject::BuiltIn(w) | Subject::TorchScript(w) => w.model.clone(),
            Subject::Command(c) => c.command.line(),
        }
    }

    /// The input of one sample as far as it is known: the workload's shape,
    /// or a command's sequence length; empty when the command decides it.
    pub fn input(&self) -> Vec<i64> {
        match self {
            Subject::BuiltIn(w) | Subject::TorchScript(w) => w.input.clone(),
            Subject::Command(c) => c.seq_len.into_iter().collect(),
        }
    }

    /// The sequence length of a token model or of a command with `{seq_len}`.
    pub fn seq_len(&self) -> Option<i64> {
        match self {
            Subject::BuiltIn(w) | Subject::TorchScript(w) => (w.input.len() == 1).then(|| w.input[0]),
            Subject::Command(c) => c.seq_len,
        }
    }

    /// A folder name: the model's, or the command's script's ("command" without one).
    pub fn label(&self) -> String {
        match self {
            Subject::BuiltIn(w) | Subject::TorchScript(w) => label(&w.model),
            Subject::Command(c) => c
                .command
                .argv
                .iter()
                .find(|a| a.ends_with(".py") || a.ends_with(".sh"))
                .map_or_else(|| "command".to_string(), |script| label(script)),
        }
    }
}

/// The placeholder a command must contain.
pub const BATCH: &str = "{batch}";
/// Where a command takes its sequence length, for `--seq-len(s)`.
pub const SEQ_LEN: &str = "{seq_len}";
/// Where a distributed command takes its number of ranks, for `--world-sizes`.
pub const NPROC: &str = "{nproc}";

/// The user's command, as given after `--`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserCommand {
    pub argv: Vec<String>,
}

impl UserCommand {
    /// Accepts a command that says where the batch size goes.
    pub fn new(argv: Vec<String>) -> Result<UserCommand, UsageError> {
        if argv.is_empty() {
            return Err(UsageError::new("give the training command after --"));
        }
        if !argv.iter().any(|a| a.contains(BATCH)) {
            return Err(UsageError::new(format!(
                "the command has no {BATCH}: put it where the batch size goes, e.g. \
                 vramprobe sweep -- {} --batch-size {BATCH}",
                argv.join(" ")
            )));
        }
        Ok(UserCommand { argv })
    }

    /// The command as one line, for tables and reports.
    pub fn line(&self) -> String {
        crate::units::shell_line(&self.argv)
    }

    /// Reads a command back from its [`line`](UserCommand::line) (plain
    /// words and single-quoted ones, as `line` writes them).
    pub fn from_line(line: &str) -> Result<UserCommand, UsageError> {
        let mut argv = Vec::new();
        let (mut word, mut in_word, mut quoted, mut escaped) = (String::new(), false, false, false);
        for c in line.chars() {
            match c {
                c if escaped => (word, in_word, escaped) = (word + &c.to_string(), true, false),
                '\\' if !quoted => escaped = true,
                '\'' => (quoted, in_word) = (!quoted, true),
                c if c.is_whitespace() && !quoted => {
                    if in_word {
                        argv.push(std::mem::take(&mut word));
                    }
                    in_word = false;
                }
                c => (word, in_word) = (word + &c.to_string(), true),
            }
        }
        if quoted {
            return Err(UsageError::new(format!("unbalanced quote in the command '{line}'")));
        }
        if in_word {
            argv.push(word);
        }
        UserCommand::new(argv)
    }

    /// The argv for one batch.
    pub fn for_batch(&self, batch: u64) -> Vec<String> {
        self.for_trial(batch, &Placeholders::default())
    }

    /// The argv for one batch at one sequence length and world size.
    pub fn for_trial(&self, batch: u64, at: &Placeholders) -> Vec<String> {
        let fill = |a: String, placeholder: &str, value: Option<String>| match value {
            Some(v) => a.replace(placeholder, &v),
            None => a,
        };
        self.argv
            .iter()
            .map(|a| {
                let a = a.replace(BATCH, &batch.to_string());
                let a = fill(a, SEQ_LEN, at.seq_len.map(|t| t.to_string()));
                fill(a, NPROC, at.nproc.map(|n| n.to_string()))
            })
            .collect()
    }

    /// Whether the command takes a sequence length.
    pub fn has_seq_len(&self) -> bool {
        self.argv.iter().any(|a| a.contains(SEQ_LEN))
    }

    /// Whether the command takes its number of ranks.
    pub fn has_nproc(&self) -> bool {
        self.argv.iter().any(|a| a.contains(NPROC))
    }
}

/// What a run substitutes besides the batch: `{seq_len}` and `{nproc}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placeholders {
    pub seq_len: Option<i64>,
    pub nproc: Option<u32>,
}

/// True when `--model` names a file rather than a built-in model.
pub fn is_path(name: &str) -> bool {
    name.contains(['/', '\\']) || [".pt", ".pth", ".ts", ".jit"].iter().any(|ext| name.ends_with(ext))
}

/// A model's name for folder names: a built-in name, or a file's stem.
pub fn label(name: &str) -> String {
    if !is_path(name) {
        return name.to_string();
    }
    let stem = Path::new(name).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let clean: String =
        stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if clean.is_empty() {
        "model".into()
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::workload::OptimizerKind;

    fn resnet() -> WorkloadConfig {
        WorkloadConfig {
            model: "resnet18".into(),
            input: vec![3, 32, 32],
            classes: 10,
            optimizer: OptimizerKind::Adam,
            lr: 1e-3,
            precision: Default::default(),
            mode: Default::default(),
        }
    }

    #[test]
    fn a_command_serialises_only_what_is_true_of_it() {
        let command = UserCommand::new(vec!["python".into(), "train.py".into(), "{batch}".into()]).unwrap();
        let s = Subject::Command(CommandSubject::new(command, Placeholders { seq_len: None, nproc: Some(2) }));
        let json = serde_json::to_value(&s).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["argv", "kind", "world_size"]);
        assert_eq!(json["kind"], "command");
        assert_eq!(serde_json::from_value::<Subject>(json).unwrap(), s);
        assert_eq!(s.label(), "train.py");
    }

    #[test]
    fn workloads_are_built_in_or_torchscript_by_name() {
        let b = Subject::of_workload(resnet());
        assert_eq!(b.kind(), SubjectKind::BuiltIn);
        assert_eq!(serde_json::to_value(&b).unwrap()["kind"], "built-in");
        let t = Subject::of_workload(WorkloadConfig { model: "models/net.pt".into(), ..resnet() });
        assert_eq!((t.kind(), t.label().as_str()), (SubjectKind::TorchScript, "net"));
        let back: Subject = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }
}
