//! The pre-imported interpreter: for a sweep of `python script.py ...` (or
//! `python -m module ...`), one Python process imports torch and the
//! script's top-level imports once and forks a fresh process per trial
//! (hook/vramprobe_zygote.py), as multiprocessing's forkserver does. A
//! trial's start then costs a fork, not Python's start and the imports again
//! (1.7 s for torch alone, 4 s and more with a trainer library).
//!
//! The measurement is unchanged: each trial is still its own process with a
//! fresh allocator, in the process group of the relay vramprobe starts
//! (hook/vramprobe_fork.py), so the runner's timeouts, kills and exit
//! statuses work as for a fresh process. Anything else (launchers such as
//! torchrun, shell scripts, `conda run`, interpreter flags, a script whose
//! imports initialise CUDA) starts each trial fresh, and the report says so.
//!
//! The interpreter runs whatever a request names, so only this sweep may
//! ask: its socket lives in a fresh folder only the user can enter, and it
//! serves a request only from the user's own uid (`SO_PEERCRED`) carrying
//! the secret vramprobe handed it on its stdin (docs/security.md).
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What the pre-imported interpreter runs as `__main__`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonTarget {
    Script(String),
    Module(String),
}

/// Interpreter flags the forked child can honour.
const FLAGS: [&str; 2] = ["-u", "-B"];

/// How long the imports may take before the sweep gives up on them.
const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// The script or module `argv` runs, when it is a plain Python command;
/// otherwise why each trial must start a fresh process.
pub fn python_target(argv: &[String]) -> Result<PythonTarget, String> {
    let program = argv.first().map(String::as_str).unwrap_or_default();
    let name = Path::new(program).file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let version = name.strip_prefix("python").unwrap_or("x");
    if !version.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!("`{name}` is not a Python interpreter (a launcher or a script runs it)"));
    }
    let mut rest = argv[1..].iter().skip_while(|a| FLAGS.contains(&a.as_str()));
    match rest.next().map(String::as_str) {
        Some("-m") => match rest.next() {
            Some(module) if !module.starts_with('-') => Ok(PythonTarget::Module(module.clone())),
            _ => Err("`python -m` names no module".into()),
        },
        Some(flag) if flag.starts_with('-') => Err(format!("the interpreter flag {flag}")),
        Some(script) => Ok(PythonTarget::Script(script.to_string())),
        None => Err("the command names no script".into()),
    }
}

/// The relay's environment variable with the secret (the relay takes it out
/// of the environment it hands the trial).
pub const SECRET_VAR: &str = "VRAMPROBE_ZYGOTE_SECRET";

/// A running pre-imported interpreter, serving trials on its socket.
#[derive(Debug)]
pub struct Zygote {
    child: Child,
    socket: PathBuf,
    /// What every request must carry.
    secret: String,
    /// The socket's private folder, removed with the interpreter.
    _folder: tempfile::TempDir,
    python: String,
    /// When it started, and how long its imports took.
    pub started: Instant,
    pub import_seconds: f64,
}

impl Zygote {
    /// Starts the interpreter for `target` and waits until its imports are
    /// done; `Err` says why it cannot serve (then trials start fresh).
    pub fn start(python: &str, target: &PythonTarget, hook_dir: &Path, log: &Path) -> Result<Zygote, String> {
        let folder = crate::measure::private::scratch("vramprobe-", runtime_dir().as_deref())
            .map_err(|e| format!("could not make a private folder for its socket: {e}"))?;
        let socket = folder.path().join("interpreter.sock");
        let secret = crate::measure::private::secret().map_err(|e| format!("no random secret: {e}"))?;
        let log_file = std::fs::File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let mut command = Command::new(python);
        command.arg(hook_dir.join("vramprobe_zygote.py")).arg(&socket);
        match target {
            PythonTarget::Script(s) => command.arg(s),
            PythonTarget::Module(m) => command.args(["-m", m]),
        };
        command
            .env("PYTHONPATH", python_path(hook_dir))
            // The server itself is not measured: only the trials it forks arm the hook.
            .env_remove("VRAMPROBE_RECORDS_DIR")
            .env_remove("VRAMPROBE_HOOK_CLAIM")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file);
        crate::measure::runner::own_group_dying_with_vramprobe(&mut command);
        let started = Instant::now();
        let mut child = command.spawn().map_err(|e| format!("could not start {python}: {e}"))?;
        // The secret goes over a pipe: no other process sees it there.
        let handed = child.stdin.take().map(|mut stdin| stdin.write_all(format!("{secret}\n").as_bytes()));
        if !matches!(handed, Some(Ok(()))) {
            let _ = child.kill();
            return Err("could not hand the interpreter its secret".into());
        }
        let Some(stdout) = child.stdout.take() else { return Err("no pipe to the interpreter".into()) };
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(READY_TIMEOUT).unwrap_or_default();
        let zygote = Zygote {
            child,
            socket,
            secret,
            _folder: folder,
            python: python.to_string(),
            started,
            import_seconds: started.elapsed().as_secs_f64(),
        };
        match line.trim() {
            "ready" => Ok(zygote),
            failed => {
                let why = failed.strip_prefix("failed: ").unwrap_or("its imports did not finish");
                let tail = std::fs::read_to_string(log).unwrap_or_default();
                let last = tail.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
                Err(if last.is_empty() { why.to_string() } else { format!("{why} ({last})") })
            }
        }
    }

    /// Whether it still serves (it exits only when killed).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The relay that runs `argv` as one trial: a Python that starts in
    /// milliseconds (no site, no PYTHONPATH) and hands the trial over.
    pub fn relay(&self, hook_dir: &Path, argv: &[String]) -> Command {
        let mut command = Command::new(&self.python);
        command.args(["-E", "-s", "-S"]).arg(hook_dir.join("vramprobe_fork.py")).arg(&self.socket).arg("--");
        command.args(argv).env(SECRET_VAR, &self.secret);
        command
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Then the socket's folder goes with `_folder`.
    }
}

/// `$XDG_RUNTIME_DIR` when it is set and the user's own (then the socket's
/// folder is made there, as systemd intends), else None: the temp folder.
fn runtime_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty())?);
    crate::measure::private::untrusted(&dir, "XDG_RUNTIME_DIR").is_none().then_some(dir)
}

/// `hook_dir` first on the inherited PYTHONPATH.
pub fn python_path(hook_dir: &Path) -> std::ffi::OsString {
    match std::env::var_os("PYTHONPATH") {
        Some(old) if !old.is_empty() => {
            let mut joined = hook_dir.as_os_str().to_owned();
            joined.push(":");
            joined.push(old);
            joined
        }
        _ => hook_dir.as_os_str().to_owned(),
    }
}

/// How a sweep's trials start: decided before the first, settled at it.
#[derive(Debug)]
pub enum TrialStart {
    /// A fresh process per trial, and why.
    Fresh(String),
    /// The pre-imported interpreter, started at the first trial.
    Pending(PythonTarget),
    Forked(Zygote),
}

impl TrialStart {
    /// `--fresh-process`, or a command the interpreter cannot serve: fresh.
    pub fn new(argv: &[String], fresh_process: bool) -> TrialStart {
        match python_target(argv) {
            _ if fresh_process => TrialStart::Fresh("--fresh-process".into()),
            Ok(target) => TrialStart::Pending(target),
            Err(why) => TrialStart::Fresh(why),
        }
    }

    /// The interpreter to fork this trial from, starting it on first use;
    /// `None`: start the trial fresh.
    pub fn zygote(&mut self, python: &str, hook_dir: &Path, log: &Path) -> Option<&Zygote> {
        if let TrialStart::Pending(target) = self {
            *self = match Zygote::start(python, target, hook_dir, log) {
                Ok(z) => TrialStart::Forked(z),
                Err(why) => TrialStart::Fresh(format!("the pre-imported interpreter could not start: {why}")),
            };
        }
        if let TrialStart::Forked(z) = self {
            if !z.alive() {
                *self = TrialStart::Fresh("the pre-imported interpreter exited during the sweep".into());
            }
        }
        match self {
            TrialStart::Forked(z) => Some(z),
            _ => None,
        }
    }

    /// When the pre-imported interpreter started and how long its imports took.
    pub fn imports(&self) -> Option<(Instant, f64)> {
        match self {
            TrialStart::Forked(z) => Some((z.started, z.import_seconds)),
            _ => None,
        }
    }

    /// For the report: how the trials started.
    pub fn describe(&self) -> Option<String> {
        match self {
            TrialStart::Fresh(why) => Some(format!("each trial started a fresh Python process ({why})")),
            TrialStart::Pending(_) => None,
            TrialStart::Forked(z) => Some(format!(
                "each trial was forked from one pre-imported Python interpreter (torch and the script's \
                 top-level imports loaded once, in {:.1} s; every trial still a fresh process with a fresh \
                 allocator); --fresh-process starts each from scratch",
                z.import_seconds
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn plain_python_scripts_and_modules_are_served() {
        for (line, want) in [
            ("python train.py --bs {batch}", PythonTarget::Script("train.py".into())),
            ("/opt/venv/bin/python3.11 -u train.py", PythonTarget::Script("train.py".into())),
            ("python3 -m pkg.train --bs {batch}", PythonTarget::Module("pkg.train".into())),
        ] {
            assert_eq!(python_target(&argv(line)), Ok(want), "{line}");
        }
    }

    #[test]
    fn launchers_flags_and_shells_start_fresh() {
        for line in [
            "torchrun --nproc-per-node 2 train.py",
            "bash run.sh {batch}",
            "conda run python train.py",
            "python -X dev train.py",
            "python -m",
            "python",
        ] {
            assert!(python_target(&argv(line)).is_err(), "{line}");
        }
        let fresh = TrialStart::new(&argv("python train.py"), true);
        assert!(fresh.describe().unwrap().contains("--fresh-process"));
    }
}
