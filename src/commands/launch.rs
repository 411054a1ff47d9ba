//! `vramprobe launch` (hidden): the child of a trial of a torchrun job
//! across nodes (measure/launch.rs). Starts the agents here or over ssh and
//! exits with the job's code; as one task of `srun` (`--agent`), becomes
//! its node's agent.
use anyhow::{anyhow, Result};

use crate::commands::cli::LaunchArgs;
use crate::measure::launch;

pub fn run(args: LaunchArgs) -> Result<i32> {
    if args.agent {
        let err = launch::exec_agent(&args.command, args.nodes, &args.endpoint, &args.id);
        return Err(anyhow!("could not start this node's agent ({}): {err}", args.command[0]));
    }
    let hosts = (!args.hosts.is_empty()).then_some(args.hosts.as_slice());
    Ok(launch::run_agents(&args.command, args.nodes, &args.endpoint, &args.id, hosts))
}
