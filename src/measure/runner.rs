//! The parent side of a trial: spawn `vramprobe trial`, read its records as
//! they come, enforce the timeout on its whole process group, and classify
//! how it ended without ever confusing an OOM, an error, a signal or a hang.
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::measure::record::{Message, Outcome, StepRecord, TrialResult};
use crate::measure::trial::TrialSpec;
use crate::units::format_input;

/// The command line of the child for `spec`.
pub fn child_args(spec: &TrialSpec) -> Vec<String> {
    let w = &spec.workload;
    let mut args: Vec<String> = vec![
        "trial".into(),
        "--json".into(),
        "--model".into(),
        w.model.clone(),
        "--input".into(),
        format_input(&w.input),
        "--classes".into(),
        w.classes.to_string(),
        "--optimizer".into(),
        w.optimizer.name().into(),
        "--lr".into(),
        w.lr.to_string(),
        "--precision".into(),
        w.precision.name().into(),
        "--mode".into(),
        w.mode.name().into(),
        "--device".into(),
        spec.device.to_string(),
        "--batch".into(),
        spec.batch.to_string(),
        "--steps".into(),
        spec.steps.to_string(),
    ];
    if let Some(limit) = spec.limit.cpu_bytes {
        args.extend(["--cpu-limit".into(), limit.to_string()]);
    }
    args
}

/// Runs one trial in a child process. `on_step` sees each step as it arrives.
pub fn run_trial(
    exe: &Path,
    trial: u32,
    spec: &TrialSpec,
    timeout: Duration,
    mut on_step: impl FnMut(&StepRecord),
) -> TrialResult {
    let started = Instant::now();
    let mut result = TrialResult {
        trial,
        batch: spec.batch,
        outcome: Outcome::Error,
        message: None,
        failed_step: None,
        parameters: None,
        parameter_bytes: None,
        baseline_bytes: None,
        device_name: None,
        device_total_bytes: None,
        wall_seconds: 0.0,
        steps: Vec::new(),
    };
    let mut command = Command::new(exe);
    command
        .args(child_args(spec))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout kills everything it started.
        .process_group(0);
    if let Some(fraction) = spec.limit.cuda_fraction {
        let existing = std::env::var("PYTORCH_CUDA_ALLOC_CONF").ok();
        command.env(
            "PYTORCH_CUDA_ALLOC_CONF",
            crate::measure::device::cuda::alloc_conf_with_fraction(existing.as_deref(), fraction),
        );
    }
    // SAFETY: prctl is async-signal-safe. Outside the terminal's process
    // group the child would not see Ctrl-C; it dies with its parent instead.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let spawned = command.spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            result.message = Some(format!("could not start the trial process {}: {e}", exe.display()));
            return result;
        }
    };

    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        if let Some(stdout) = stdout {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        }
    });
    let stderr = child.stderr.take();
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut s) = stderr {
            let _ = s.read_to_string(&mut text);
        }
        text
    });

    let deadline = started + timeout;
    let mut ended: Option<(Outcome, Option<String>, Option<u32>)> = None;
    let mut timed_out = false;
    let mut interrupted = None;
    let kill_group = || {
        // SAFETY: kill(2) on the child's own process group.
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    };
    loop {
        if let Some(signal) = crate::interrupt::received() {
            interrupted = Some(signal);
            kill_group();
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        // Wake up often enough to notice Ctrl-C or SIGTERM.
        match rx.recv_timeout(left.min(Duration::from_millis(100))) {
            Ok(line) => match serde_json::from_str::<Message>(&line) {
                Ok(Message::Start { parameters, parameter_bytes, baseline_bytes, device_name, device_total_bytes }) => {
                    result.parameters = Some(parameters);
                    result.parameter_bytes = Some(parameter_bytes);
                    result.baseline_bytes = Some(baseline_bytes);
                    result.device_name = Some(device_name);
                    result.device_total_bytes = device_total_bytes;
                }
                Ok(Message::Step(mut rec)) => {
                    rec.trial = trial;
                    on_step(&rec);
                    result.steps.push(*rec);
                }
                Ok(Message::End { outcome, message, failed_step }) => ended = Some((outcome, message, failed_step)),
                // Anything else on stdout (a library printing) is not ours.
                Err(_) => {}
            },
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                kill_group();
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait();
    let _ = reader.join();
    let stderr_text = stderr_reader.join().unwrap_or_default();
    result.wall_seconds = started.elapsed().as_secs_f64();

    let stderr_tail = || {
        let lines: Vec<&str> = stderr_text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    };
    if let Some(signal) = interrupted {
        result.outcome = Outcome::Killed;
        result.message =
            Some(format!("interrupted by {}: the trial's process group was killed", crate::error::signal_name(signal)));
        result.failed_step = Some(result.steps.len() as u32 + 1);
    } else if timed_out {
        result.outcome = Outcome::Timeout;
        result.message = Some(format!(
            "no result within the {}s trial timeout; the trial's process group was killed",
            timeout.as_secs()
        ));
    } else if let Some((outcome, message, failed_step)) = ended {
        result.outcome = outcome;
        result.message = message;
        result.failed_step = failed_step;
    } else {
        match status {
            Ok(s) if s.signal().is_some() => {
                let sig = s.signal().unwrap_or(0);
                result.outcome = Outcome::Killed;
                let hint = if sig == libc::SIGKILL { " (on the CPU, often the kernel's OOM killer)" } else { "" };
                result.message =
                    Some(format!("the trial process was killed by {} ({sig}){hint}", crate::error::signal_name(sig)));
            }
            Ok(s) => {
                result.outcome = Outcome::Error;
                let tail = stderr_tail();
                result.message = Some(format!(
                    "the trial process exited with {} before reporting a result{}",
                    s.code().map_or_else(|| "no code".into(), |c| format!("code {c}")),
                    if tail.is_empty() { String::new() } else { format!(": {tail}") }
                ));
            }
            Err(e) => result.message = Some(format!("waiting for the trial process failed: {e}")),
        }
        result.failed_step = Some(result.steps.len() as u32 + 1);
    }
    result
}
