//! The parent side of a trial: start the child a [`TrialKind`] describes,
//! read its records as they come, enforce the timeout on its whole process
//! group, and classify how it ended without ever confusing an OOM, an
//! error, a signal or a hang.
mod ranks;
pub mod reap;
mod tail;

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::signal_name;
use crate::measure::device::nvml::Nvml;
use crate::measure::record::{Message, Outcome, StepRecord, TrialResult};
use crate::measure::trial::TrialSpec;
use crate::units::format_input;
use ranks::{Ended, Ranks, Source};

/// A kind of trial: the child process that runs one batch and streams the
/// trial records on stdout. Today the built-in workload ([`BuiltIn`]); the
/// runner needs nothing else from a kind.
pub trait TrialKind {
    /// The batch this trial runs.
    fn batch(&self) -> u64;
    /// The child's command (program, arguments, environment); the runner
    /// adds the pipes and the process group.
    fn command(&self) -> Command;
    /// Where the child writes its records: `None` for its stdout (the
    /// built-in trial); a folder for a program whose stdout is the user's,
    /// with one file per measured process (see [`tail`]).
    fn records_dir(&self) -> Option<PathBuf> {
        None
    }
    /// Where the child's own stdout and stderr go; `None` keeps stderr for
    /// the message of a trial that ends without a result.
    fn log_file(&self) -> Option<PathBuf> {
        None
    }
    /// The CUDA device whose NVML readings the parent adds to each step
    /// record (a child that cannot read NVML itself); `None`: the child does.
    fn nvml_device(&self) -> Option<usize> {
        None
    }
}

/// A built-in workload (or a TorchScript file): `vramprobe trial ...`.
pub struct BuiltIn<'a> {
    /// The vramprobe binary.
    pub exe: &'a Path,
    pub spec: &'a TrialSpec,
}

impl TrialKind for BuiltIn<'_> {
    fn batch(&self) -> u64 {
        self.spec.batch
    }

    fn command(&self) -> Command {
        let mut command = Command::new(self.exe);
        command.args(child_args(self.spec));
        if let Some(fraction) = self.spec.limit.cuda_fraction {
            crate::measure::device::cuda::limit_child(&mut command, fraction);
        }
        command
    }
}

/// The command line of the hidden `vramprobe trial` for `spec` (the CUDA
/// fraction travels in the environment). commands/cli.rs tests that clap
/// parses it back into the same spec, so a renamed flag fails a test.
pub fn child_args(spec: &TrialSpec) -> Vec<String> {
    let w = &spec.workload;
    let mut args: Vec<String> = [
        ("--model", w.model.clone()),
        ("--input", format_input(&w.input)),
        ("--classes", w.classes.to_string()),
        ("--optimizer", w.optimizer.name().into()),
        ("--lr", w.lr.to_string()),
        ("--precision", w.precision.name().into()),
        ("--mode", w.mode.name().into()),
        ("--device", spec.device.to_string()),
        ("--batch", spec.batch.to_string()),
        ("--steps", spec.steps.to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_string(), value])
    .collect();
    args.splice(0..0, ["trial".to_string(), "--json".to_string()]);
    if let Some(limit) = spec.limit.cpu_bytes {
        args.extend(["--cpu-limit".into(), limit.to_string()]);
    }
    args
}

/// Measures one batch: the only way the sweep and check run a trial, so
/// their own logic can be tested with a scripted runner. The real ones run
/// a child process: [`BuiltInRunner`] and [`crate::measure::command::CommandRunner`].
pub trait TrialRunner {
    /// Runs trial number `trial` at `batch`; `on_step` sees each step as it
    /// arrives. An error here is vramprobe's own (a folder it cannot
    /// create), never the trial's: a trial that fails is a result.
    fn run(&mut self, trial: u32, batch: u64, on_step: &mut dyn FnMut(&StepRecord)) -> anyhow::Result<TrialResult>;
}

/// A built-in workload's (or a TorchScript file's) trials, each a
/// `vramprobe trial` child of `exe`.
#[derive(Debug, Clone)]
pub struct BuiltInRunner {
    pub exe: PathBuf,
    pub workload: crate::measure::workload::WorkloadConfig,
    pub device: crate::measure::device::Device,
    pub steps: u32,
    pub limit: crate::measure::device::CapacityLimit,
    pub timeout: Duration,
}

impl TrialRunner for BuiltInRunner {
    fn run(&mut self, trial: u32, batch: u64, on_step: &mut dyn FnMut(&StepRecord)) -> anyhow::Result<TrialResult> {
        let spec = TrialSpec {
            workload: self.workload.clone(),
            device: self.device,
            batch,
            steps: self.steps,
            limit: self.limit,
        };
        Ok(run_trial(&self.exe, trial, &spec, self.timeout, on_step))
    }
}

/// Runs a built-in trial in a child process. `on_step` sees each step as it arrives.
pub fn run_trial(
    exe: &Path,
    trial: u32,
    spec: &TrialSpec,
    timeout: Duration,
    on_step: impl FnMut(&StepRecord),
) -> TrialResult {
    run(&BuiltIn { exe, spec }, trial, timeout, on_step)
}

/// How reading a child's records stopped.
enum Ending {
    /// Every measured process (every rank) reported its end, or one
    /// reported a failure.
    Reported(Ended),
    TimedOut,
    /// SIGINT or SIGTERM reached vramprobe: the trial was killed.
    Interrupted(i32),
    /// The child exited (or closed its stdout) without a verdict; the ranks
    /// that had not reported, for a distributed job.
    Closed {
        missing: Vec<u32>,
    },
}

/// How long a child may take to exit by itself once its verdict is in (a
/// failing rank's traceback reaches the log, torchrun notices its workers)
/// before the rest of the trial is killed.
const GRACE: Duration = Duration::from_secs(3);

/// Runs one trial of any kind. `on_step` sees each step as it arrives.
pub fn run(kind: &dyn TrialKind, trial: u32, timeout: Duration, on_step: impl FnMut(&StepRecord)) -> TrialResult {
    let started = Instant::now();
    let mut result = TrialResult::started(trial, kind.batch(), kind.log_file());
    let mut command = kind.command();
    let token = reap::token(trial);
    command.env(reap::TOKEN_VAR, &token);
    let program = command.get_program().to_string_lossy().into_owned();
    let records = kind.records_dir();
    let log = kind.log_file();
    let mut child = match prepare(&mut command, records.as_deref(), log.as_deref()).and_then(|()| spawn(&mut command)) {
        Ok(c) => c,
        Err(e) => {
            result.message = Some(format!("could not start the trial process {program}: {e}"));
            return result;
        }
    };
    let stderr = child.stderr.take();
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut s) = stderr {
            let _ = s.read_to_string(&mut text);
        }
        text
    });
    let nvml = kind.nvml_device().and_then(|i| Nvml::open().ok().map(|n| (n, i)));
    let mut reading = Reading { result: &mut result, ranks: Ranks::default(), nvml, measured: child.id() };
    let ending = reading.read(&mut child, records.as_deref(), &token, started + timeout, on_step);
    let status = child.wait();
    let mut stderr_text = stderr_reader.join().unwrap_or_default();
    if let Some(log) = &log {
        stderr_text = std::fs::read_to_string(log).unwrap_or_default();
    }
    result.wall_seconds = started.elapsed().as_secs_f64();
    result.keep_peak_timeline();
    classify(&mut result, ending, status, &stderr_text, timeout);
    if let (Some(log), Outcome::Error | Outcome::Killed | Outcome::Timeout) = (&log, result.outcome) {
        if result.outcome == Outcome::Timeout && result.steps.is_empty() {
            let note = "no training step was seen: does the command call optimizer.step() (or vramprobe_hook.step())?";
            result.message = result.message.map(|m| format!("{m}; {note}"));
        }
        // The user's own output says why: point at it.
        result.message = result.message.map(|m| format!("{m} (its output: {})", log.display()));
    }
    result
}

/// Sends the child's output to its log file and starts its records folder
/// without records, where the kind has them.
fn prepare(command: &mut Command, records: Option<&Path>, log: Option<&Path>) -> std::io::Result<()> {
    if let Some(records) = records {
        std::fs::create_dir_all(records)?;
        for entry in std::fs::read_dir(records)?.flatten() {
            if entry.file_name().to_str().and_then(Source::of_file).is_some() {
                std::fs::remove_file(entry.path())?;
            }
        }
    }
    match log {
        Some(log) => {
            let out = File::create(log)?;
            command.stdout(out.try_clone()?).stderr(out);
        }
        None => {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
    }
    Ok(())
}

/// Starts the child with piped output in its own process group (so a
/// timeout kills everything it started), dying with its parent.
fn spawn(command: &mut Command) -> std::io::Result<Child> {
    command.stdin(Stdio::null()).process_group(0);
    // SAFETY: prctl is async-signal-safe. Outside the terminal's process
    // group the child would not see Ctrl-C; it dies with its parent instead.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command.spawn()
}

/// A trial's records as they arrive, from every process that sends them.
struct Reading<'a> {
    result: &'a mut TrialResult,
    ranks: Ranks,
    nvml: Option<(Nvml, usize)>,
    /// Whose GPU memory NVML reports when a source names no process: the child.
    measured: u32,
}

impl Reading<'_> {
    /// Reads the child's records until the trial is decided, its output
    /// closes, the deadline passes or a signal arrives; then stops every
    /// process the trial started and reads what they left.
    fn read(
        &mut self,
        child: &mut Child,
        records: Option<&Path>,
        token: &str,
        deadline: Instant,
        mut on_step: impl FnMut(&StepRecord),
    ) -> Ending {
        let (tx, rx) = mpsc::channel::<(Source, String)>();
        let exited = Arc::new(AtomicBool::new(false));
        let reader = match records {
            None => {
                let stdout = child.stdout.take();
                std::thread::spawn(move || {
                    if let Some(stdout) = stdout {
                        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                            if tx.send((Source::Main, line)).is_err() {
                                break;
                            }
                        }
                    }
                })
            }
            Some(dir) => {
                let (dir, exited) = (dir.to_path_buf(), Arc::clone(&exited));
                std::thread::spawn(move || tail::follow(&dir, &exited, &tx))
            }
        };
        let group = child.id() as i32;
        let ending = loop {
            if let Some(signal) = crate::interrupt::received() {
                break Ending::Interrupted(signal);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            // Wake up often enough to notice Ctrl-C or SIGTERM.
            match rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok((source, line)) => {
                    self.take(source, &line, &mut on_step);
                    if let Some(verdict) = self.ranks.verdict() {
                        break Ending::Reported(verdict);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    // A records file has no end of its own: the child's exit is.
                    if records.is_some() && matches!(child.try_wait(), Ok(Some(_))) {
                        exited.store(true, Ordering::SeqCst);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => break Ending::TimedOut,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break self
                        .ranks
                        .verdict()
                        .map_or_else(|| Ending::Closed { missing: self.ranks.missing() }, Ending::Reported)
                }
            }
        };
        if let Ending::Reported(_) = ending {
            let until = Instant::now() + GRACE;
            while Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Nothing the trial started outlives it: its process group, and any
        // process in a session of its own (torchrun's workers).
        // SAFETY: kill(2) on the child's own process group.
        unsafe { libc::kill(-group, libc::SIGKILL) };
        reap::kill_all(token);
        exited.store(true, Ordering::SeqCst);
        // What the others wrote before they stopped still counts.
        while let Ok((source, line)) = rx.recv() {
            self.take(source, &line, &mut on_step);
        }
        let _ = reader.join();
        if self.ranks.distributed() {
            self.result.steps.retain(|s| s.rank.is_some());
            self.result.world_size = self.ranks.world_size();
        }
        ending
    }

    /// One line from `source`.
    fn take(&mut self, source: Source, line: &str, on_step: &mut impl FnMut(&StepRecord)) {
        // Anything else (a library printing on stdout) is not ours.
        let Ok(message) = serde_json::from_str::<Message>(line) else { return };
        match message {
            Message::Start(start) => {
                // The trial's device and parameters: the lowest rank's.
                let lowest = match source {
                    Source::Main => !self.ranks.distributed(),
                    Source::Rank(r) => (0..r).all(|q| self.ranks.start_of(Source::Rank(q)).is_none()),
                };
                if lowest {
                    let r = &mut *self.result;
                    r.parameters = Some(start.parameters);
                    r.parameter_bytes = Some(start.parameter_bytes);
                    r.layers = start.layers;
                    r.baseline_bytes = Some(start.baseline_bytes);
                    r.device_name = Some(start.device_name.clone());
                    r.device_total_bytes = start.device_total_bytes;
                }
                self.ranks.start(source, *start);
            }
            Message::Step(mut rec) => {
                if !self.ranks.counts(source) {
                    return;
                }
                let start = self.ranks.start_of(source);
                rec.trial = self.result.trial;
                if let Source::Rank(r) = source {
                    rec.rank = Some(r);
                    rec.world_size = start.and_then(|s| s.world_size);
                }
                if let Some((nvml, index)) = &self.nvml {
                    let pid = start.and_then(|s| s.pid).unwrap_or(self.measured);
                    let index = start.and_then(|s| s.device_index).unwrap_or(*index);
                    rec.set_nvml(nvml.read_for(index, pid));
                }
                on_step(&rec);
                self.result.steps.push(*rec);
            }
            Message::Breakdown { step, breakdown } => {
                let rank = match source {
                    Source::Rank(r) => Some(r),
                    Source::Main => None,
                };
                if let Some(rec) = self.result.steps.iter_mut().rev().find(|s| s.step == step && s.rank == rank) {
                    rec.breakdown = Some(breakdown);
                }
            }
            Message::End { outcome, message, failed_step } => {
                self.ranks.end(source, Ended { outcome, message, failed_step })
            }
        }
    }
}

/// Sets the outcome and message from how the trial ended.
fn classify(
    result: &mut TrialResult,
    ending: Ending,
    status: std::io::Result<ExitStatus>,
    stderr: &str,
    timeout: Duration,
) {
    let next_step = Some(result.steps.len() as u32 + 1);
    match ending {
        Ending::Interrupted(signal) => {
            result.outcome = Outcome::Killed;
            result.message =
                Some(format!("interrupted by {}: the trial's process group was killed", signal_name(signal)));
            result.failed_step = next_step;
        }
        Ending::TimedOut => {
            result.outcome = Outcome::Timeout;
            result.message = Some(format!(
                "no result within the {}s trial timeout; the trial's process group was killed",
                timeout.as_secs()
            ));
        }
        Ending::Reported(Ended { outcome, message, failed_step }) => {
            result.outcome = outcome;
            result.message = message;
            result.failed_step = failed_step;
        }
        Ending::Closed { missing } => {
            (result.outcome, result.message) = unreported(status, stderr);
            if !missing.is_empty() {
                let ranks: Vec<String> = missing.iter().map(u32::to_string).collect();
                result.message =
                    result.message.take().map(|m| format!("no result from rank {}: {m}", ranks.join(", ")));
            }
            result.failed_step = next_step;
        }
    }
}

/// The last `n` non-empty lines of a child's output, without the lines the
/// CPU profiler (kineto) prints by itself whatever its log level.
pub fn output_tail(text: &str, n: usize) -> Vec<&str> {
    let noise =
        |l: &str| ["USDT:", "STAGE:"].iter().any(|p| l.starts_with(p)) || l.contains("gpuGetDeviceCount failed");
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty() && !noise(l)).collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// A child that ended without its end record: killed, or exited early.
fn unreported(status: std::io::Result<ExitStatus>, stderr: &str) -> (Outcome, Option<String>) {
    match status {
        Ok(s) if s.signal().is_some() => {
            let sig = s.signal().unwrap_or(0);
            let hint = if sig == libc::SIGKILL { " (on the CPU, often the kernel's OOM killer)" } else { "" };
            (Outcome::Killed, Some(format!("the trial process was killed by {} ({sig}){hint}", signal_name(sig))))
        }
        Ok(s) => {
            let tail = output_tail(stderr, 3).join(" | ");
            let message = format!(
                "the trial process exited with {} before reporting a result{}",
                s.code().map_or_else(|| "no code".into(), |c| format!("code {c}")),
                if tail.is_empty() { String::new() } else { format!(": {tail}") }
            );
            (Outcome::Error, Some(message))
        }
        Err(e) => (Outcome::Error, Some(format!("waiting for the trial process failed: {e}"))),
    }
}
