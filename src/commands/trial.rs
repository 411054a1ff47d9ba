//! `vramprobe trial` (hidden): the child process of one sweep trial.
use anyhow::Result;

use crate::commands::cli::TrialArgs;
use crate::error::UsageError;
use crate::measure::device::{self, CapacityLimit, DeviceRequest};
use crate::measure::trial::{self, TrialSpec};

pub fn run(args: TrialArgs) -> Result<i32> {
    if matches!(args.device, DeviceRequest::Auto | DeviceRequest::All) {
        return Err(UsageError::new("trial needs a concrete --device (cpu or cuda:N)").into());
    }
    let (device, _) = device::resolve(args.device)?;
    let spec = TrialSpec {
        workload: super::workload_config(&args.workload)?,
        device,
        batch: args.batch,
        steps: args.steps,
        limit: CapacityLimit { cpu_bytes: args.cpu_limit, cuda_fraction: None },
    };
    trial::run(&spec, &mut std::io::stdout().lock())?;
    Ok(0)
}
