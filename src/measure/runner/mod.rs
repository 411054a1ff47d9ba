//! The parent side of a trial: start the child a [`TrialKind`] describes,
//! read its records as they come, enforce the timeout on its whole process
//! group, and classify how it ended without ever confusing an OOM, an
//! error, a signal or a hang.
mod ranks;
pub mod reap;
mod tail;

use std::fs::File;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::signal_name;
use crate::measure::device::nvml::Nvml;
use crate::record::device::Device;
use crate::record::timings::TrialTimes;
use crate::record::trial::{
    Message, Outcome, StartRecord, StepRecord, TrialResult, TrialSpec, PROTOCOL_VERSION, SPEC_FILE,
};
use ranks::{Ended, Ranks, Source};

/// A kind of trial: the child process that runs one batch. Every kind
/// speaks the one protocol ([`crate::record::trial`]): the runner writes
/// the kind's spec into the trial's folder, the child appends its records
/// there.
pub trait TrialKind {
    /// What the trial runs: written to the folder as `spec.json`.
    fn spec(&self) -> &TrialSpec;
    /// The trial's folder: spec.json, the records files, and for a command its output.log.
    fn dir(&self) -> &Path;
    /// The child's command (program, arguments, environment); the runner
    /// adds the pipes and the process group.
    fn command(&self) -> Command;
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
    /// What to add when some ranks never reported: for a job across nodes,
    /// that the trial's folder must be one every node shares.
    fn when_ranks_are_missing(&self) -> Option<String> {
        None
    }
}

/// A trial's folder in `trials_dir`: `NNN-batch-B`.
pub fn trial_dir(trials_dir: &Path, trial: u32, batch: u64) -> PathBuf {
    trials_dir.join(format!("{trial:03}-batch-{batch}"))
}

/// A built-in workload (or a TorchScript file): `vramprobe trial --spec DIR/spec.json`.
pub struct BuiltIn<'a> {
    /// The vramprobe binary.
    pub exe: &'a Path,
    pub dir: PathBuf,
    pub spec: &'a TrialSpec,
}

impl TrialKind for BuiltIn<'_> {
    fn spec(&self) -> &TrialSpec {
        self.spec
    }

    fn dir(&self) -> &Path {
        &self.dir
    }

    fn command(&self) -> Command {
        let mut command = Command::new(self.exe);
        command.arg("trial").arg("--spec").arg(self.dir.join(SPEC_FILE));
        if let Some(fraction) = self.spec.limit.cuda_fraction {
            crate::measure::device::cuda::limit_child(&mut command, fraction);
        }
        command
    }
}

/// Measures one batch: the only way the sweep and check run a trial, so
/// their own logic can be tested with a scripted runner. The real ones run
/// a child process: [`BuiltInRunner`] and [`crate::measure::command::CommandRunner`].
pub trait TrialRunner {
    /// Runs trial number `trial` at `batch`, its peak broken down by
    /// category when `breakdown` (the explain trial); `on_step` sees each
    /// step as it arrives. An error here is vramprobe's own (a folder it
    /// cannot create), never the trial's: a trial that fails is a result.
    fn run(
        &mut self,
        trial: u32,
        batch: u64,
        breakdown: bool,
        on_step: &mut dyn FnMut(&StepRecord),
    ) -> anyhow::Result<TrialResult>;

    /// The sweep's explain trial: `batch` again, its peak broken down. A
    /// command's runs one profiled step after its warm-up: the search has
    /// measured every step of this batch already, and torch's analysis of
    /// the profile costs seconds a step.
    fn explain(&mut self, trial: u32, batch: u64, on_step: &mut dyn FnMut(&StepRecord)) -> anyhow::Result<TrialResult> {
        self.run(trial, batch, true, on_step)
    }

    /// How the trials started, for the report (a command's: fresh, or
    /// forked from a pre-imported interpreter); `None`: nothing to say.
    fn how_trials_start(&self) -> Option<String> {
        None
    }

    /// When the imports the trials start from began, and how long they
    /// took (a command's pre-imported interpreter); `None`: none.
    fn imports(&self) -> Option<(Instant, f64)> {
        None
    }

    /// Another runner of the same trials, to run while this one does
    /// (`--parallel`): its trials in processes of their own, on `device`
    /// (on CUDA, another GPU of the same kind). `None`: one at a time.
    fn beside(&self, _device: Device) -> Option<Box<dyn TrialRunner + Send>> {
        None
    }

    /// Runs trial number `trial` at `batch` as a rehearsal of the whole
    /// job (`spec`); `None`: the subject has no job beyond its training
    /// steps to rehearse (a built-in model).
    fn rehearse(
        &mut self,
        _trial: u32,
        _batch: u64,
        _spec: crate::record::rehearsal::RehearsalSpec,
    ) -> anyhow::Result<Option<TrialResult>> {
        Ok(None)
    }
}

/// Runs a built-in trial of `spec` in a child of `exe`, its folder `dir`.
pub fn run_trial(
    exe: &Path,
    dir: PathBuf,
    trial: u32,
    spec: &TrialSpec,
    timeout: Duration,
    on_step: impl FnMut(&StepRecord),
) -> TrialResult {
    run(&BuiltIn { exe, dir, spec }, trial, timeout, on_step)
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

/// How long the measuring processes get to send what they measured after a
/// timeout or Ctrl-C, before the kill.
const WRAP_UP: Duration = Duration::from_secs(5);

/// The signal that asks a measuring process to wrap up: a real-time signal,
/// which no training script or trainer library handles for itself (unlike
/// SIGTERM and SIGUSR1, which Lightning takes for its own).
pub fn wrap_up_signal() -> i32 {
    libc::SIGRTMIN() + 3
}

/// Runs one trial of any kind. `on_step` sees each step as it arrives.
pub fn run(kind: &dyn TrialKind, trial: u32, timeout: Duration, mut on_step: impl FnMut(&StepRecord)) -> TrialResult {
    let started = Instant::now();
    let mut result = TrialResult::started(trial, kind.spec().batch, kind.log_file());
    let mut command = kind.command();
    let token = reap::token(trial);
    command.env(reap::TOKEN_VAR, &token);
    let program = command.get_program().to_string_lossy().into_owned();
    let dir = kind.dir();
    let log = kind.log_file();
    let mut child = match prepare(&mut command, kind.spec(), dir, log.as_deref()).and_then(|()| spawn(&mut command)) {
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
    let mut reading =
        Reading { result: &mut result, ranks: Ranks::default(), nvml, measured: child.id(), steps_seen: 0 };
    let mut clock = StepClock::default();
    let ending = reading.read(&mut child, dir, &token, started + timeout, |s: &StepRecord| {
        clock.saw(s, started);
        on_step(s)
    });
    let steps_seen = reading.steps_seen;
    result.times = clock.times();
    let status = child.wait();
    let mut stderr_text = stderr_reader.join().unwrap_or_default();
    if let Some(log) = &log {
        stderr_text = std::fs::read_to_string(log).unwrap_or_default();
    }
    result.wall_seconds = started.elapsed().as_secs_f64();
    result.keep_peak_timeline();
    classify(&mut result, ending, status, &stderr_text, (timeout, kind.when_ranks_are_missing()));
    if let (Some(log), Outcome::Error | Outcome::Killed | Outcome::Timeout) = (&log, result.outcome) {
        if result.outcome == Outcome::Timeout && steps_seen == 0 {
            let note = "no training step was seen: does the command call optimizer.step() (or vramprobe_hook.step())?";
            result.message = result.message.map(|m| format!("{m}; {note}"));
        }
        // The user's own output says why: point at it.
        result.message = result.message.map(|m| format!("{m} (its output: {})", log.display()));
    }
    result
}

/// When a trial's steps began and ended, from the first arrival of each
/// step's record (on the CPU its progress; the records that follow at
/// the end repeat the steps and are not timed again).
#[derive(Default)]
struct StepClock {
    highest: u32,
    first_began: Option<f64>,
    last_ended: f64,
}

impl StepClock {
    fn saw(&mut self, step: &StepRecord, started: Instant) {
        if step.step <= self.highest {
            return;
        }
        self.highest = step.step;
        let now = started.elapsed().as_secs_f64();
        self.first_began.get_or_insert((now - step.step_seconds).max(0.0));
        self.last_ended = now;
    }

    fn times(&self) -> Option<TrialTimes> {
        let began = self.first_began?;
        Some(TrialTimes { setup_seconds: began, steps_seconds: (self.last_ended - began).max(0.0) })
    }
}

/// Starts the trial's folder with its spec and without records, and sends
/// the child's output to its log file where the kind has one.
fn prepare(command: &mut Command, spec: &TrialSpec, dir: &Path, log: Option<&Path>) -> std::io::Result<()> {
    // Only this user can enter it: its records are what the verdict is read from.
    crate::measure::private::own_dir(dir)?;
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_name().to_str().and_then(Source::of_file).is_some() {
            std::fs::remove_file(entry.path())?;
        }
    }
    std::fs::write(dir.join(SPEC_FILE), serde_json::to_vec_pretty(spec)?)?;
    match log {
        Some(log) => {
            let out = File::create(log)?;
            command.stdout(out.try_clone()?).stderr(out);
        }
        None => {
            // The records travel in the folder: stdout is nobody's channel.
            command.stdout(Stdio::null()).stderr(Stdio::piped());
        }
    }
    Ok(())
}

/// Starts the child with piped output in its own process group (so a
/// timeout kills everything it started), dying with its parent.
fn spawn(command: &mut Command) -> std::io::Result<Child> {
    own_group_dying_with_vramprobe(command.stdin(Stdio::null())).spawn()
}

/// Puts the child in a process group of its own, killed with vramprobe.
pub fn own_group_dying_with_vramprobe(command: &mut Command) -> &mut Command {
    command.process_group(0);
    // SAFETY: prctl is async-signal-safe. Outside the terminal's process
    // group the child would not see Ctrl-C; it dies with its parent instead.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    command
}

/// A trial's records as they arrive, from every process that sends them.
struct Reading<'a> {
    result: &'a mut TrialResult,
    ranks: Ranks,
    nvml: Option<(Nvml, usize)>,
    /// Whose GPU memory NVML reports when a source names no process: the child.
    measured: u32,
    /// The most steps any source has run (a CPU command's records of them
    /// come at its end; its progress says each as it runs).
    steps_seen: u32,
}

impl Reading<'_> {
    /// Reads the child's records until the trial is decided, its output
    /// closes, the deadline passes or a signal arrives; then stops every
    /// process the trial started and reads what they left.
    fn read(
        &mut self,
        child: &mut Child,
        dir: &Path,
        token: &str,
        deadline: Instant,
        mut on_step: impl FnMut(&StepRecord),
    ) -> Ending {
        let (tx, rx) = mpsc::channel::<(Source, String)>();
        let exited = Arc::new(AtomicBool::new(false));
        let reader = {
            let (dir, exited) = (dir.to_path_buf(), Arc::clone(&exited));
            std::thread::spawn(move || tail::follow(&dir, &exited, &tx))
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
                    if matches!(child.try_wait(), Ok(Some(_))) {
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
        match ending {
            Ending::Reported(_) => {
                let until = Instant::now() + GRACE;
                while Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Ending::TimedOut | Ending::Interrupted(_) => self.wrap_up(&rx, &mut on_step),
            Ending::Closed { .. } => {}
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

    /// Asks every measuring process still running to send what it measured
    /// and end (the hook's handler of [`wrap_up_signal`]), and reads its
    /// records for up to [`WRAP_UP`]: a killed trial keeps its steps.
    fn wrap_up(&mut self, rx: &mpsc::Receiver<(Source, String)>, on_step: &mut impl FnMut(&StepRecord)) {
        for pid in self.ranks.unfinished_pids() {
            // SAFETY: kill(2) on a process of this trial that said its pid.
            unsafe { libc::kill(pid as i32, wrap_up_signal()) };
        }
        let until = Instant::now() + WRAP_UP;
        while !self.ranks.unfinished_pids().is_empty() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match rx.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok((source, line)) => self.take(source, &line, on_step),
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
    }

    /// One line from `source`: a record, or a protocol error that fails the trial.
    fn take(&mut self, source: Source, line: &str, on_step: &mut impl FnMut(&StepRecord)) {
        let message = match parse_record(line) {
            Ok(message) => message,
            Err(why) => {
                let shown: String = line.chars().take(300).collect();
                let message = Some(format!("trial protocol error in {}: {why}: {shown}", source.file_name()));
                self.ranks.end(source, Ended { outcome: Outcome::Error, message, failed_step: None });
                return;
            }
        };
        match message {
            Message::Start(start) => self.started(source, *start),
            Message::Progress { step, step_seconds } => {
                if self.ranks.counts(source) {
                    self.steps_seen = self.steps_seen.max(step);
                    let batch = self.result.batch;
                    on_step(&StepRecord {
                        trial: self.result.trial,
                        step,
                        batch,
                        step_seconds,
                        ..StepRecord::default()
                    });
                }
            }
            Message::Step(rec) => self.stepped(source, *rec, on_step),
            Message::Breakdown { step, breakdown } => {
                let rank = match source {
                    Source::Rank(r) => Some(r),
                    Source::Main => None,
                };
                if let Some(rec) = self.result.steps.iter_mut().rev().find(|s| s.step == step && s.rank == rank) {
                    rec.breakdown = Some(breakdown);
                }
            }
            Message::Rehearsal(record) => {
                let higher = self.result.rehearsal.as_ref().is_none_or(|r| record.peak_bytes() > r.peak_bytes());
                if self.ranks.counts(source) && higher {
                    self.result.rehearsal = Some(record);
                }
            }
            Message::End { outcome, message, failed_step } => {
                self.ranks.end(source, Ended { outcome, message, failed_step })
            }
        }
    }

    /// A process started: the trial's device and parameters are the lowest rank's.
    fn started(&mut self, source: Source, start: StartRecord) {
        let lowest = match source {
            Source::Main => !self.ranks.distributed(),
            Source::Rank(r) => (0..r).all(|q| self.ranks.start_of(Source::Rank(q)).is_none()),
        };
        if lowest {
            let r = &mut *self.result;
            r.parameters = Some(start.parameters);
            r.parameter_bytes = Some(start.parameter_bytes);
            r.layers = start.layers;
            r.baseline_bytes = start.baseline_bytes;
            r.device_name = Some(start.device_name.clone());
            r.device_total_bytes = start.device_total_bytes;
            r.step_mark = start.step_mark.or(r.step_mark);
        }
        self.ranks.start(source, start);
    }

    /// A step's record: its rank, and NVML's reading of the process's device.
    fn stepped(&mut self, source: Source, mut rec: StepRecord, on_step: &mut impl FnMut(&StepRecord)) {
        if !self.ranks.counts(source) {
            return;
        }
        self.steps_seen = self.steps_seen.max(rec.step);
        let start = self.ranks.start_of(source);
        rec.trial = self.result.trial;
        if let Source::Rank(r) = source {
            rec.rank = Some(r);
            rec.node = start.and_then(|s| s.node);
            rec.world_size = start.and_then(|s| s.world_size);
        }
        if let Some((nvml, index)) = &self.nvml {
            let pid = start.and_then(|s| s.pid).unwrap_or(self.measured);
            let index = start.and_then(|s| s.device_index).unwrap_or(*index);
            rec.set_nvml(nvml.read_for(index, pid));
        }
        on_step(&rec);
        self.result.steps.push(rec);
    }
}

/// One line as a record of this protocol, or why it is not one.
fn parse_record(line: &str) -> Result<Message, String> {
    match serde_json::from_str::<Message>(line) {
        Ok(Message::Start(start)) if start.schema_version != PROTOCOL_VERSION => Err(format!(
            "the child speaks trial protocol version {}, this vramprobe version {PROTOCOL_VERSION}",
            start.schema_version
        )),
        Ok(message) => Ok(message),
        Err(e) => Err(format!("not a trial record ({e})")),
    }
}

/// Sets the outcome and message from how the trial ended.
fn classify(
    result: &mut TrialResult,
    ending: Ending,
    status: std::io::Result<ExitStatus>,
    stderr: &str,
    (timeout, missing_hint): (Duration, Option<String>),
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
                "no result within the {}s trial timeout; the trial's process group was killed after {} measured \
                 step(s)",
                timeout.as_secs(),
                result.steps_completed()
            ));
        }
        Ending::Reported(Ended { outcome, message, failed_step }) => {
            result.outcome = outcome;
            result.message = message;
            result.failed_step = failed_step;
            // The hook reports a command that ends by itself from atexit,
            // before its exit code exists: a job that then exits non-zero
            // failed, whatever it measured, and never fits.
            let code = status.as_ref().ok().and_then(ExitStatus::code).filter(|&c| c != 0);
            if let (Outcome::Fits, Some(code)) = (outcome, code) {
                result.outcome = Outcome::Error;
                result.message = Some(format!(
                    "the command exited with code {code} after {} training step(s): a job that fails does not fit{}",
                    result.steps_completed(),
                    output_tail(stderr, 1).first().map_or(String::new(), |l| format!(" ({l})"))
                ));
                result.failed_step = next_step;
            }
        }
        Ending::Closed { missing } => {
            (result.outcome, result.message) = unreported(status, stderr);
            if !missing.is_empty() {
                let ranks: Vec<String> = missing.iter().map(u32::to_string).collect();
                let hint = missing_hint.unwrap_or_default();
                result.message =
                    result.message.take().map(|m| format!("no result from rank {}: {m}{hint}", ranks.join(", ")));
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
