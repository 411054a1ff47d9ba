//! `vramprobe trial` (hidden): the child process of one trial. The parent
//! runs it as `trial --spec DIR/spec.json` (the trial protocol: the spec in,
//! records appended to `DIR/records.jsonl`); by hand, flags describe the
//! trial and the records go to stdout (`--json`).
use std::path::Path;

use anyhow::{Context, Result};

use crate::commands::cli::TrialArgs;
use crate::error::UsageError;
use crate::measure::child::trial;
use crate::measure::device;
use crate::record::device::{CapacityLimit, DeviceRequest};
use crate::record::trial::{TrialSpec, PROTOCOL_VERSION, RECORDS_FILE};

/// A trial by hand: the one the flags describe.
fn spec_of(args: &TrialArgs) -> Result<TrialSpec> {
    let (Some(request), Some(batch), true) = (args.device, args.batch, args.json) else {
        return Err(UsageError::new("trial needs --spec FILE, or --json with --device and --batch").into());
    };
    if matches!(request, DeviceRequest::Auto | DeviceRequest::All) {
        return Err(UsageError::new("trial needs a concrete --device (cpu or cuda:N)").into());
    }
    let (device, _) = device::resolve(request)?;
    let limit = CapacityLimit { cpu_bytes: args.cpu_limit, cuda_fraction: None };
    Ok(TrialSpec {
        workload: Some(crate::sweep::subjects::one_workload(&args.workload.options())?),
        // By hand, the whole record: every step broken down.
        breakdown: true,
        ..TrialSpec::new(batch, args.steps, device, limit)
    })
}

/// The parent's spec, read strictly.
fn read_spec(path: &Path) -> Result<TrialSpec> {
    let bytes = std::fs::read(path).with_context(|| format!("reading the trial spec {}", path.display()))?;
    let spec: TrialSpec = serde_json::from_slice(&bytes)
        .map_err(|e| UsageError::new(format!("{}: not a vramprobe trial spec ({e})", path.display())))?;
    if spec.schema_version != PROTOCOL_VERSION {
        return Err(UsageError::new(format!(
            "{}: trial protocol version {}, this vramprobe speaks {PROTOCOL_VERSION}",
            path.display(),
            spec.schema_version
        ))
        .into());
    }
    Ok(spec)
}

pub fn run(args: TrialArgs) -> Result<i32> {
    match &args.spec {
        Some(path) => {
            let spec = read_spec(path)?;
            let records = path.with_file_name(RECORDS_FILE);
            let mut out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&records)
                .with_context(|| format!("opening {}", records.display()))?;
            trial::run(&spec, &mut out)?;
        }
        None => trial::run(&spec_of(&args)?, &mut std::io::stdout().lock())?,
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::device::Device;
    use crate::record::workload::OptimizerKind;
    use crate::record::workload::WorkloadConfig;
    use crate::record::workload::{Mode, Precision};

    /// What the parent writes, the child reads back whole.
    #[test]
    fn a_spec_reads_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spec.json");
        let workload = WorkloadConfig {
            model: "resnet18".into(),
            input: vec![3, 64, 48],
            classes: 17,
            optimizer: OptimizerKind::Adamw,
            lr: 0.0125,
            precision: Precision::Bf16Amp,
            mode: Mode::Eval,
        };
        let limit = CapacityLimit { cpu_bytes: Some(123_456_789), cuda_fraction: Some(0.25) };
        let spec = TrialSpec { workload: Some(workload), ..TrialSpec::new(96, 5, Device::Cuda(1), limit) };
        std::fs::write(&path, serde_json::to_vec(&spec).unwrap()).unwrap();
        assert_eq!(read_spec(&path).unwrap(), spec);
        // Another version, or a field this version does not know, is refused.
        let mut other = serde_json::to_value(&spec).unwrap();
        other["schema_version"] = 99.into();
        std::fs::write(&path, other.to_string()).unwrap();
        assert!(read_spec(&path).unwrap_err().to_string().contains("protocol version 99"));
        let mut extra = serde_json::to_value(&spec).unwrap();
        extra["surprise"] = 1.into();
        std::fs::write(&path, extra.to_string()).unwrap();
        assert!(read_spec(&path).unwrap_err().to_string().contains("unknown field"));
    }
}
