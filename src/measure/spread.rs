//! Where a trial's process starts: on this host, as a job step of the
//! Slurm allocation vramprobe runs in (`srun --ntasks 1 --exact`, with
//! `--gres gpu:1` on CUDA: Slurm gives the step its GPU), or as a Ray task
//! on an existing Ray cluster (`ray.init(address="auto")`, `num_gpus=1` on
//! CUDA). Either way the trial is the same command with the same
//! environment, and its records reach the trial's folder, which must be
//! on a file system the nodes share. The scheduler picks the node, so the
//! parent reads no NVML for the trial: the hook's own readings stand.
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::measure::runner::TrialKind;
use crate::record::trial::TrialSpec;

/// How trials start (`--launcher` for independent trials).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Via {
    #[default]
    Here,
    SlurmStep,
    RayTask,
}

/// The Ray driver a trial runs under `--launcher ray`: submits the trial
/// as one task (one CPU, and one GPU on CUDA) and exits with its code.
const RAY_DRIVER: &str = r#"
import os, subprocess, sys
import ray
gpus, argv = float(sys.argv[1]), sys.argv[3:]
ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=True)
@ray.remote(num_cpus=1, num_gpus=gpus, max_retries=0)
def trial(argv, env, cwd):
    if gpus:
        env = dict(env, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    return subprocess.run(argv, env=env, cwd=cwd).returncode
sys.exit(ray.get(trial.remote(argv, dict(os.environ), os.getcwd())))
"#;

/// A trial started `via` a scheduler: the inner kind's command under it.
pub struct Spread<'a> {
    pub kind: &'a dyn TrialKind,
    pub via: Via,
    /// The trial runs on a GPU: the step or task asks for one.
    pub gpu: bool,
}

impl TrialKind for Spread<'_> {
    fn spec(&self) -> &TrialSpec {
        self.kind.spec()
    }

    fn dir(&self) -> &Path {
        self.kind.dir()
    }

    fn command(&self) -> Command {
        let inner = self.kind.command();
        let gpu = self.gpu.then_some("--gres=gpu:1");
        let prefix: Vec<String> = match self.via {
            Via::Here => return inner,
            Via::SlurmStep => ["srun", "--ntasks=1", "--nodes=1", "--exact", "--quiet", "--kill-on-bad-exit=1"]
                .into_iter()
                .chain(gpu)
                .map(String::from)
                .collect(),
            Via::RayTask => {
                let python = python_beside(inner.get_program());
                vec![python, "-c".into(), RAY_DRIVER.into(), if self.gpu { "1" } else { "0" }.into(), "--".into()]
            }
        };
        under(prefix, inner)
    }

    fn log_file(&self) -> Option<PathBuf> {
        self.kind.log_file()
    }

    fn when_ranks_are_missing(&self) -> Option<String> {
        self.kind.when_ranks_are_missing()
    }

    fn nvml_device(&self) -> Option<usize> {
        match self.via {
            Via::Here => self.kind.nvml_device(),
            Via::SlurmStep | Via::RayTask => None,
        }
    }
}

/// `inner` run by `prefix`: its program and arguments after the prefix,
/// its environment and folder kept.
fn under(prefix: Vec<String>, inner: Command) -> Command {
    let mut command = Command::new(&prefix[0]);
    command.args(&prefix[1..]).arg(inner.get_program()).args(inner.get_args());
    for (key, value) in inner.get_envs() {
        match value {
            Some(v) => command.env(key, v),
            None => command.env_remove(key),
        };
    }
    if let Some(dir) = inner.get_current_dir() {
        command.current_dir(dir);
    }
    command
}

/// The Python that drives a Ray task: the command's own (or the one beside
/// its launcher, e.g. torchrun's), which has the job's packages; else python3.
fn python_beside(program: &OsStr) -> String {
    let path = Path::new(program);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if name.starts_with("python") {
        return path.to_string_lossy().into_owned();
    }
    match path.parent().map(|d| d.join("python")).filter(|p| p.is_file()) {
        Some(p) => p.to_string_lossy().into_owned(),
        None => "python3".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trial_under_srun_keeps_its_command_environment_and_folder() {
        let mut inner = Command::new("/venv/bin/python");
        inner
            .args(["train.py", "--batch-size", "8"])
            .env("VRAMPROBE_RECORDS_DIR", "/t/1")
            .env_remove("X")
            .current_dir("/t");
        let c = under(vec!["srun".into(), "--exact".into()], inner);
        let args: Vec<String> = c.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(c.get_program(), "srun");
        assert_eq!(args, ["--exact", "/venv/bin/python", "train.py", "--batch-size", "8"]);
        let envs: Vec<_> = c.get_envs().collect();
        assert!(envs.contains(&(OsStr::new("VRAMPROBE_RECORDS_DIR"), Some(OsStr::new("/t/1")))));
        assert!(envs.contains(&(OsStr::new("X"), None)));
        assert_eq!(c.get_current_dir(), Some(Path::new("/t")));
    }

    #[test]
    fn the_ray_driver_is_the_commands_own_python() {
        assert_eq!(python_beside(OsStr::new("/venv/bin/python3.11")), "/venv/bin/python3.11");
        assert_eq!(python_beside(OsStr::new("/nowhere/bin/torchrun")), "python3");
    }
}
