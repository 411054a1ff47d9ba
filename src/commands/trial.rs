//! `vramprobe trial` (hidden): the child process of one sweep trial.
use anyhow::Result;

use crate::commands::cli::TrialArgs;
use crate::error::UsageError;
use crate::measure::device::{self, CapacityLimit, DeviceRequest};
use crate::measure::trial::{self, TrialSpec};

/// The trial the parent asked for on the command line.
fn spec_of(args: &TrialArgs) -> Result<TrialSpec> {
    if matches!(args.device, DeviceRequest::Auto | DeviceRequest::All) {
        return Err(UsageError::new("trial needs a concrete --device (cpu or cuda:N)").into());
    }
    let (device, _) = device::resolve(args.device)?;
    Ok(TrialSpec {
        workload: super::workload_config(&args.workload)?,
        device,
        batch: args.batch,
        steps: args.steps,
        limit: CapacityLimit { cpu_bytes: args.cpu_limit, cuda_fraction: None },
    })
}

pub fn run(args: TrialArgs) -> Result<i32> {
    trial::run(&spec_of(&args)?, &mut std::io::stdout().lock())?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::commands::cli::{Cli, Command};
    use crate::measure::device::Device;
    use crate::measure::optim::OptimizerKind;
    use crate::measure::precision::{Mode, Precision};
    use crate::measure::runner::child_args;
    use crate::measure::workload::WorkloadConfig;

    fn parsed(spec: &TrialSpec) -> TrialArgs {
        let argv = std::iter::once("vramprobe".to_string()).chain(child_args(spec));
        match Cli::try_parse_from(argv) {
            Ok(Cli { command: Command::Trial(args), .. }) => args,
            Ok(_) => panic!("not the trial command"),
            Err(e) => panic!("the parent's command line does not parse: {e}"),
        }
    }

    /// The parent writes the hidden command's flags by hand; clap must read
    /// every one of them back into the same trial, so a renamed or retyped
    /// flag fails here rather than at run time.
    #[test]
    fn the_parents_command_line_parses_back_into_the_same_trial() {
        let workload = |model: &str, input: Vec<i64>| WorkloadConfig {
            model: model.into(),
            input,
            classes: 17,
            optimizer: OptimizerKind::Adamw,
            lr: 0.0125,
            precision: Precision::Bf16Amp,
            mode: Mode::Eval,
        };
        let specs = [
            TrialSpec {
                workload: workload("resnet18", vec![3, 64, 48]),
                device: Device::Cpu,
                batch: 96,
                steps: 5,
                limit: CapacityLimit { cpu_bytes: Some(123_456_789), cuda_fraction: None },
            },
            TrialSpec {
                workload: workload("gpt-nano", vec![128]),
                device: Device::Cpu,
                batch: 1,
                steps: 2,
                limit: CapacityLimit::default(),
            },
        ];
        for spec in specs {
            let back = spec_of(&parsed(&spec)).unwrap();
            assert_eq!(back.workload, spec.workload);
            assert_eq!(
                (back.device, back.batch, back.steps, back.limit),
                (spec.device, spec.batch, spec.steps, spec.limit)
            );
        }
        // A CUDA device travels as cuda:N (resolved only on a machine that has it).
        let on_gpu = TrialSpec { device: Device::Cuda(1), limit: CapacityLimit::default(), ..specs_first() };
        assert_eq!(parsed(&on_gpu).device, DeviceRequest::Cuda(1));
    }

    fn specs_first() -> TrialSpec {
        TrialSpec {
            workload: WorkloadConfig {
                model: "squeezenet1_1".into(),
                input: vec![3, 32, 32],
                classes: 10,
                optimizer: OptimizerKind::Sgd,
                lr: 0.1,
                precision: Precision::Fp32,
                mode: Mode::Train,
            },
            device: Device::Cpu,
            batch: 2,
            steps: 3,
            limit: CapacityLimit::default(),
        }
    }
}
