//! `vramprobe check`: the pre-flight check. Runs a few real training steps
//! at exactly one configuration, in a child process, and answers with an
//! exit code a job script can test: 0 fits, 3 won't fit, 1 runtime error,
//! 2 usage error.
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use serde::Serialize;

use crate::analyze::analysis::FitBasis;
use crate::analyze::fit::{Budget, LinearFit};
use crate::commands::cli::CheckArgs;
use crate::error::UsageError;
use crate::measure::device::{self, Device, DeviceRequest};
use crate::measure::record::Outcome;
use crate::measure::runner;
use crate::measure::trial::TrialSpec;
use crate::measure::workload::WorkloadConfig;
use crate::report::plan_file;
use crate::units::{format_input, human_bytes};

pub const EXIT_WONT_FIT: i32 = 3;

#[derive(Serialize)]
struct Verdict {
    verdict: &'static str,
    exit_code: i32,
    model: String,
    input: String,
    batch: u64,
    device: String,
    steps: usize,
    peak_bytes: Option<u64>,
    capacity_bytes: u64,
    non_pytorch_bytes: u64,
    headroom_bytes: Option<i64>,
    headroom_fraction: Option<f64>,
    /// The largest batch the plan's memory line allows on this capacity.
    max_batch_from_fit: Option<u64>,
    message: String,
}

pub fn run(args: CheckArgs) -> Result<i32> {
    let (config, batch, plan_device, fit) = match (&args.plan, &args.workload.model, args.batch) {
        (Some(path), _, _) => {
            let entries = plan_file::read(path).map_err(|e| UsageError::new(e.to_string()))?;
            let entry = plan_file::select(path, entries, args.row.map(|r| r as usize), None)
                .map_err(|e| UsageError::new(e.to_string()))?;
            let fit = entry.fixed_bytes.zip(entry.per_sample_bytes).map(|(f, p)| LinearFit {
                fixed_bytes: f as f64,
                per_sample_bytes: p as f64,
                r2: 1.0,
                points: 0,
            });
            let config = WorkloadConfig {
                model: entry.model,
                input: entry.input,
                classes: entry.classes,
                optimizer: entry.optimizer,
                lr: args.workload.lr.unwrap_or(1e-3),
                precision: entry.precision,
                mode: entry.mode,
            };
            (config, entry.recommended_batch, Some(entry.device), fit)
        }
        (None, Some(_), Some(batch)) => (super::workload_config(&args.workload)?, batch, None, None),
        _ => return Err(UsageError::new("check needs --plan FILE, or --model M with --batch B").into()),
    };
    let request = args.device.or(plan_device).unwrap_or(DeviceRequest::Auto);
    let (device, note) = device::resolve(request)?;
    if let (Some(n), false) = (&note, args.quiet || args.json) {
        eprintln!("note: {n}");
    }
    let cuda_memory_fraction = match (device, args.capacity) {
        (Device::Cuda(i), Some(c)) => Some(device::cuda::emulation_fraction(i, c).map_err(UsageError::new)?),
        _ => None,
    };
    let spec = TrialSpec {
        workload: config.clone(),
        device,
        batch,
        steps: args.steps,
        cpu_limit: if device == Device::Cpu { args.capacity } else { None },
        cuda_memory_fraction,
    };
    let exe = std::env::current_exe().context("locating the vramprobe binary to run the check")?;
    let trial = runner::run_trial(&exe, 1, &spec, Duration::from_secs(args.trial_timeout), |_| {});
    // Ctrl-C or SIGTERM killed the check's trial: no verdict, exit 130/143.
    crate::interrupt::check()?;

    let capacity = args
        .capacity
        .or(trial.device_total_bytes)
        .ok_or_else(|| anyhow!("the device's memory is unknown: pass --capacity"))?;
    let non_pytorch = match (device, args.capacity) {
        (Device::Cpu, Some(_)) => 0,
        _ => trial.non_pytorch_bytes().unwrap_or(0),
    };
    let peak = FitBasis::for_device(device).peak(&trial);
    let max_batch_from_fit =
        fit.and_then(|f| f.max_batch_within(Budget::new(capacity, args.margin, non_pytorch).budget_bytes));
    let what = format!("{} {} at batch {batch} on {device}", config.model, format_input(&config.input));
    let (verdict, exit_code, headroom, message) = match trial.outcome {
        Outcome::Fits => {
            let peak = peak.unwrap_or(0);
            let headroom = capacity as i64 - non_pytorch as i64 - peak as i64;
            let pct = headroom as f64 / capacity as f64 * 100.0;
            if headroom < 0 {
                let msg = format!(
                    "WON'T FIT: {what}: peak {} plus {} outside PyTorch exceeds the capacity {}",
                    human_bytes(peak as f64),
                    human_bytes(non_pytorch as f64),
                    human_bytes(capacity as f64)
                );
                ("wont_fit", EXIT_WONT_FIT, Some(headroom), msg)
            } else {
                let mut msg = format!(
                    "FITS: {what}: peak {}, headroom {} ({pct:.1}%) of {} ({} steps)",
                    human_bytes(peak as f64),
                    human_bytes(headroom as f64),
                    human_bytes(capacity as f64),
                    trial.steps.len()
                );
                if pct < args.margin * 100.0 {
                    msg.push_str(&format!("\nwarning: less than the {:.0}% margin stays free", args.margin * 100.0));
                }
                ("fits", 0, Some(headroom), msg)
            }
        }
        Outcome::Oom => {
            let step = trial.failed_step.map_or(String::new(), |s| format!(" at step {s}"));
            let largest = match max_batch_from_fit {
                Some(m) => format!("; the plan's memory line allows batch {m} at most"),
                None => "; run `vramprobe sweep` to find the largest batch".into(),
            };
            let msg = format!(
                "WON'T FIT: {what}: out of memory{step} ({}); capacity {}{largest}",
                trial.message.as_deref().unwrap_or(""),
                human_bytes(capacity as f64)
            );
            ("wont_fit", EXIT_WONT_FIT, None, msg)
        }
        other => {
            return Err(anyhow!(
                "the check could not run ({other}): {}",
                trial.message.as_deref().unwrap_or("no message")
            ));
        }
    };
    if args.json {
        let v = Verdict {
            verdict,
            exit_code,
            model: config.model.clone(),
            input: format_input(&config.input),
            batch,
            device: device.to_string(),
            steps: trial.steps.len(),
            peak_bytes: peak,
            capacity_bytes: capacity,
            non_pytorch_bytes: non_pytorch,
            headroom_bytes: headroom,
            headroom_fraction: headroom.map(|h| h as f64 / capacity as f64),
            max_batch_from_fit,
            message: message.lines().next().unwrap_or("").to_string(),
        };
        println!("{}", serde_json::to_string(&v)?);
    } else if !args.quiet {
        println!("{message}");
    }
    Ok(exit_code)
}
