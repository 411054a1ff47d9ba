//! Command mode: the user's own, unmodified training command as a trial
//! kind. Each trial runs the command with `{batch}` substituted, in its own
//! process group, with vramprobe's Python hook first on `PYTHONPATH` (as
//! `sitecustomize`, chaining to any existing one). The hook writes the same
//! trial records as the built-in trial, into the trial's folder: one file
//! for a plain process, one per rank for a distributed job (torchrun). The
//! command's own stdout and stderr go to a log beside them.
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::measure::preimport::{python_path, TrialStart, Zygote};
use crate::measure::private;
use crate::measure::runner::TrialKind;
use crate::measure::spread::{Spread, Via};
use crate::record::device::{CapacityLimit, Device};
use crate::record::rehearsal::RehearsalSpec;
use crate::record::subject::{Launcher, Nodes, Placeholders, UserCommand};
use crate::record::trial::{StepRecord, TrialResult, TrialSpec};

/// The hook, embedded in the binary and written to the cache on first use.
const HOOK_FILES: [(&str, &str); 14] = [
    ("sitecustomize.py", include_str!("hook/sitecustomize.py")),
    ("vramprobe_hook.py", include_str!("hook/vramprobe_hook.py")),
    ("vramprobe_trial.py", include_str!("hook/vramprobe_trial.py")),
    ("vramprobe_claim.py", include_str!("hook/vramprobe_claim.py")),
    ("vramprobe_steps.py", include_str!("hook/vramprobe_steps.py")),
    ("vramprobe_memory.py", include_str!("hook/vramprobe_memory.py")),
    ("vramprobe_failures.py", include_str!("hook/vramprobe_failures.py")),
    ("vramprobe_watch.py", include_str!("hook/vramprobe_watch.py")),
    ("vramprobe_breakdown.py", include_str!("hook/vramprobe_breakdown.py")),
    ("vramprobe_cuda_ops.py", include_str!("hook/vramprobe_cuda_ops.py")),
    ("vramprobe_zygote.py", include_str!("hook/vramprobe_zygote.py")),
    ("vramprobe_fork.py", include_str!("hook/vramprobe_fork.py")),
    ("vramprobe_rehearsal.py", include_str!("hook/vramprobe_rehearsal.py")),
    ("vramprobe_worst_batches.py", include_str!("hook/vramprobe_worst_batches.py")),
];

/// How long an earlier version's hook stays in the cache.
const OLD_HOOK: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Writes the hook into `cache` (once per version of its text) and returns
/// the folder to put first on `PYTHONPATH`. The job's Python imports it
/// first, so the cache and the hook's folder must be the user's own: one
/// that another account owns or can write to is refused.
pub fn install_hook(cache: &Path) -> std::io::Result<PathBuf> {
    let digest = HOOK_FILES.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, (_, text)| {
        text.bytes().fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
    });
    private::trusted_dir(cache, "vramprobe's cache")?;
    let dir = cache.join(format!("hook-{digest:016x}"));
    private::trusted_dir(&dir, "vramprobe's hook folder")?;
    for (name, text) in HOOK_FILES {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text) {
            let mut tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).tempfile_in(&dir)?;
            std::io::Write::write_all(&mut tmp, text.as_bytes())?;
            tmp.persist(&path).map_err(|e| e.error)?;
        }
    }
    // Earlier versions of the hook go once a week has passed: another
    // vramprobe (the one before an upgrade) may still be running trials from one.
    for entry in std::fs::read_dir(cache).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let stale =
            entry.metadata().and_then(|m| m.modified()).is_ok_and(|t| t.elapsed().unwrap_or_default() > OLD_HOOK);
        if name.to_string_lossy().starts_with("hook-") && entry.path() != dir && stale {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    Ok(dir)
}

/// Where a sweep's or check's command trials run: the command, the folder
/// their trial folders go in, and the installed hook.
#[derive(Debug, Clone)]
pub struct CommandRuns {
    pub command: UserCommand,
    /// What `{seq_len}` and `{nproc}` become in this run.
    pub at: Placeholders,
    pub trials_dir: PathBuf,
    pub hook_dir: PathBuf,
    /// A trial run beside another on a GPU of its own: the one GPU its
    /// command sees (CUDA_VISIBLE_DEVICES), whatever device it names.
    pub only_gpu: Option<usize>,
    /// A torchrun job across nodes: each trial starts its agents through `vramprobe launch`.
    pub nodes: Option<Nodes>,
}

impl CommandRuns {
    /// Installs the hook and claims `trials_dir` (private, as each trial's folder in it).
    pub fn new(command: UserCommand, at: Placeholders, trials_dir: PathBuf) -> std::io::Result<CommandRuns> {
        private::own_dir(&trials_dir)?;
        let hook_dir = install_hook(&private::cache_dir()?)?;
        Ok(CommandRuns { command, at, trials_dir, hook_dir, only_gpu: None, nodes: None })
    }

    /// Trial `n` of `spec`, in its own folder `NNN-batch-B`, forked from
    /// `zygote` when there is one.
    pub fn trial<'a>(
        &'a self,
        n: u32,
        spec: TrialSpec,
        zygote: Option<&'a Zygote>,
    ) -> std::io::Result<CommandTrial<'a>> {
        let dir = crate::measure::runner::trial_dir(&self.trials_dir, n, spec.batch);
        private::own_dir(&dir)?;
        let across = match &self.nodes {
            Some(nodes) => Some(Across {
                nodes,
                exe: std::env::current_exe()?,
                endpoint: crate::measure::launch::endpoint(nodes)?,
                id: format!("vramprobe-{}-{n}", std::process::id()),
            }),
            None => None,
        };
        let (command, at, hook_dir, only_gpu) = (&self.command, self.at, &self.hook_dir, self.only_gpu);
        Ok(CommandTrial { command, spec, at, dir, hook_dir, zygote, only_gpu, across })
    }
}

/// The command's trials of one run, as the sweep and check run them.
#[derive(Debug)]
pub struct CommandRunner {
    pub runs: CommandRuns,
    pub device: Device,
    pub steps: u32,
    pub limit: CapacityLimit,
    pub timeout: std::time::Duration,
    /// A fresh process per trial, or forks of one pre-imported interpreter.
    pub start: TrialStart,
    /// Where each trial starts: here, as a Slurm job step, or as a Ray task.
    pub via: Via,
}

impl CommandRunner {
    /// Trial `trial` of `spec`, in its folder, forked where it can be.
    fn run_spec(
        &mut self,
        trial: u32,
        spec: TrialSpec,
        on_step: &mut dyn FnMut(&StepRecord),
    ) -> anyhow::Result<TrialResult> {
        let python = self.runs.command.for_batch(spec.batch).first().cloned().unwrap_or_default();
        let log = self.runs.trials_dir.join("preimport.log");
        let zygote = self.start.zygote(&python, &self.runs.hook_dir, &log);
        let kind = self.runs.trial(trial, spec, zygote).map_err(|e| {
            anyhow::anyhow!("creating the folder of trial {trial} in {}: {e}", self.runs.trials_dir.display())
        })?;
        let spread = Spread { kind: &kind, via: self.via, gpu: self.device.is_cuda() };
        Ok(crate::measure::runner::run(&spread, trial, self.timeout, on_step))
    }

    fn spec(&self, batch: u64) -> TrialSpec {
        TrialSpec {
            wrap_up_signal: Some(crate::measure::runner::wrap_up_signal()),
            trace: true,
            ..TrialSpec::new(batch, self.steps, self.device, self.limit)
        }
    }
}

impl crate::measure::runner::TrialRunner for CommandRunner {
    fn run(
        &mut self,
        trial: u32,
        batch: u64,
        breakdown: bool,
        on_step: &mut dyn FnMut(&StepRecord),
    ) -> anyhow::Result<TrialResult> {
        let spec = TrialSpec { breakdown, ..self.spec(batch) };
        self.run_spec(trial, spec, on_step)
    }

    fn explain(&mut self, trial: u32, batch: u64, on_step: &mut dyn FnMut(&StepRecord)) -> anyhow::Result<TrialResult> {
        let spec = TrialSpec { breakdown: true, steps: 1, ..self.spec(batch) };
        self.run_spec(trial, spec, on_step)
    }

    fn rehearse(&mut self, trial: u32, batch: u64, rehearsal: RehearsalSpec) -> anyhow::Result<Option<TrialResult>> {
        let spec = TrialSpec { rehearsal: Some(rehearsal), ..self.spec(batch) };
        self.run_spec(trial, spec, &mut |_| {}).map(Some)
    }

    fn how_trials_start(&self) -> Option<String> {
        self.start.describe()
    }

    fn imports(&self) -> Option<(std::time::Instant, f64)> {
        self.start.imports()
    }

    fn beside(&self, device: Device) -> Option<Box<dyn crate::measure::runner::TrialRunner + Send>> {
        // Its own pre-imported interpreter (or none, as this one), its own GPU.
        let fresh = matches!(self.start, TrialStart::Fresh(_));
        let start = TrialStart::new(&self.runs.command.for_batch(1), fresh);
        // Here, its own GPU is the one it sees; a scheduler gives a step or task its GPU itself.
        let (device, only_gpu) = match (device, self.via) {
            (Device::Cuda(i), Via::Here) => (Device::Cuda(0), Some(i)),
            (device, _) => (device, None),
        };
        let runs = CommandRuns { only_gpu, ..self.runs.clone() };
        Some(Box::new(CommandRunner { runs, device, start, ..*self }))
    }
}

/// One trial of the user's command.
pub struct CommandTrial<'a> {
    pub command: &'a UserCommand,
    /// The batch, steps, device and limit: the hook reads them from the folder.
    pub spec: TrialSpec,
    pub at: Placeholders,
    /// The trial's folder: spec.json, the records files and output.log.
    pub dir: PathBuf,
    /// The installed hook (see [`install_hook`]).
    pub hook_dir: &'a Path,
    /// The pre-imported interpreter to fork the trial from, if any.
    pub zygote: Option<&'a Zygote>,
    /// The one GPU the command sees, when it runs beside others.
    pub only_gpu: Option<usize>,
    /// A job across nodes: how this trial's agents meet.
    pub across: Option<Across<'a>>,
}

/// A trial of a job across nodes: its nodes and launcher, the vramprobe
/// binary that launches the agents, and the trial's own rendezvous.
pub struct Across<'a> {
    pub nodes: &'a Nodes,
    pub exe: PathBuf,
    pub endpoint: String,
    pub id: String,
}

impl TrialKind for CommandTrial<'_> {
    fn spec(&self) -> &TrialSpec {
        &self.spec
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn command(&self) -> Command {
        let batch = self.spec.batch;
        let argv = self.command.for_trial(batch, &self.at);
        let mut command = match (&self.across, self.zygote) {
            (Some(a), _) => crate::measure::launch::trial_command(&a.exe, a.nodes, &argv, &a.endpoint, &a.id),
            (None, Some(z)) => z.relay(self.hook_dir, &argv),
            (None, None) => {
                let mut command = Command::new(&argv[0]);
                command.args(&argv[1..]);
                command
            }
        };
        command
            .env("PYTHONPATH", python_path(self.hook_dir))
            // The hook's one channel: it reads spec.json there and writes its records there.
            .env("VRAMPROBE_RECORDS_DIR", &self.dir)
            // For the user's script, which may want its batch without parsing flags.
            .env("VRAMPROBE_BATCH", batch.to_string())
            // A vramprobe run inside a measured program measures afresh.
            .env_remove("VRAMPROBE_HOOK_CLAIM");
        // The CPU profiler's own chatter stays out of the user's log: kineto's
        // levels run VERBOSE 0 .. USDT 5 (its profiler_start/stop lines), so 6 is none.
        if std::env::var_os("KINETO_LOG_LEVEL").is_none() {
            command.env("KINETO_LOG_LEVEL", "6");
        }
        if let Some(fraction) = self.spec.limit.cuda_fraction {
            crate::measure::device::cuda::limit_child(&mut command, fraction);
        }
        if let Some(gpu) = self.only_gpu {
            command.env("CUDA_VISIBLE_DEVICES", gpu.to_string());
        }
        command
    }

    fn log_file(&self) -> Option<PathBuf> {
        Some(self.dir.join("output.log"))
    }

    fn when_ranks_are_missing(&self) -> Option<String> {
        let across = self.across.as_ref().filter(|a| a.nodes.launcher != Launcher::Local)?;
        Some(format!(
            " (a job across {} nodes: every rank writes its records into {}, which must be on a file system every \
             node shares, at the same path)",
            across.nodes.count,
            self.dir.display()
        ))
    }

    fn nvml_device(&self) -> Option<usize> {
        if self.only_gpu.is_some() {
            return self.only_gpu;
        }
        match self.spec.device {
            Device::Cuda(i) => Some(i),
            Device::Cpu => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_missing_from_a_job_across_nodes_point_at_the_shared_folder() {
        let command = UserCommand::new(vec!["torchrun".into(), "t.py".into(), "{batch}".into()]).unwrap();
        let spec = TrialSpec::new(4, 3, Device::Cpu, CapacityLimit::default());
        let trial = |launcher| {
            let nodes = Nodes { count: 2, launcher };
            let across = Across { nodes: &nodes, exe: "vramprobe".into(), endpoint: "h:1".into(), id: "t".into() };
            let t = CommandTrial {
                command: &command,
                spec: spec.clone(),
                at: Placeholders::default(),
                dir: "/shared/run/trials/001-batch-4".into(),
                hook_dir: Path::new("/hook"),
                zygote: None,
                only_gpu: None,
                across: Some(across),
            };
            t.when_ranks_are_missing()
        };
        let said = trial(Launcher::Slurm).unwrap();
        assert!(said.contains("/shared/run/trials/001-batch-4") && said.contains("every node shares"), "{said}");
        // On one host the folder is shared by construction: nothing to add.
        assert_eq!(trial(Launcher::Local), None);
    }

    #[test]
    fn a_command_needs_the_batch_placeholder() {
        let err = UserCommand::new(vec!["python".into(), "train.py".into()]).unwrap_err().to_string();
        assert!(err.contains("has no {batch}") && err.contains("python train.py --batch-size {batch}"), "{err}");
        assert!(UserCommand::new(vec![]).is_err());
        let c = UserCommand::new(vec!["python".into(), "train.py".into(), "--batch-size={batch}".into()]).unwrap();
        assert_eq!(c.for_batch(64), ["python", "train.py", "--batch-size=64"]);
    }

    #[test]
    fn the_line_reads_back_in_a_shell() {
        let c = UserCommand::new(vec!["python".into(), "my train.py".into(), "--bs".into(), "{batch}".into()]).unwrap();
        assert_eq!(c.line(), "python 'my train.py' --bs {batch}");
        assert_eq!(UserCommand::from_line(&c.line()).unwrap(), c);
        let odd = UserCommand::new(vec!["sh".into(), "-c".into(), "echo 'a b' {batch}".into(), "".into()]).unwrap();
        assert_eq!(UserCommand::from_line(&odd.line()).unwrap(), odd);
        assert!(UserCommand::from_line("python 'train.py {batch}").is_err());
    }

    #[test]
    fn the_hook_is_written_once_per_version() {
        let dir = tempfile::tempdir().unwrap();
        let hook = install_hook(dir.path()).unwrap();
        assert!(hook.join("sitecustomize.py").is_file() && hook.join("vramprobe_hook.py").is_file());
        assert_eq!(install_hook(dir.path()).unwrap(), hook);
        // Another version's hook: kept while it may be in use, gone after a week.
        let recent = dir.path().join("hook-0000000000000001");
        let old = dir.path().join("hook-0000000000000002");
        for d in [&recent, &old] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("vramprobe_hook.py"), "").unwrap();
        }
        let week_ago = std::time::SystemTime::now() - OLD_HOOK - std::time::Duration::from_secs(60);
        std::fs::File::open(&old).unwrap().set_modified(week_ago).unwrap();
        install_hook(dir.path()).unwrap();
        assert!(recent.is_dir() && !old.exists() && hook.is_dir());
    }
}
