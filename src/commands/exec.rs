//! `vramprobe exec --plan plan.csv -- COMMAND`: the user's full job at the
//! plan's batch, unmeasured. `{batch}` becomes the recommended batch (the
//! micro-batch), `{accumulation}` the micro-batches per optimizer step that
//! keep `--target-batch`, `{target_batch}` that target.
use std::os::unix::process::CommandExt;

use anyhow::{anyhow, Result};

use crate::commands::cli::ExecArgs;
use crate::error::UsageError;
use crate::record::subject::{Placeholders, UserCommand};
use crate::report::plan_file;

const ACCUMULATION: &str = "{accumulation}";

/// The command's argv for a micro-batch, its accumulation and the target.
fn substitute(command: &UserCommand, at: &Placeholders, micro: u64, accumulation: u64, target: u64) -> Vec<String> {
    command
        .for_trial(micro, at)
        .into_iter()
        .map(|a| a.replace(ACCUMULATION, &accumulation.to_string()).replace("{target_batch}", &target.to_string()))
        .collect()
}

pub fn run(args: ExecArgs) -> Result<i32> {
    let entries = plan_file::read(&args.plan).map_err(|e| UsageError::new(e.to_string()))?;
    let entry = plan_file::select(&args.plan, entries, args.row.map(|r| r as usize), None)
        .map_err(|e| UsageError::new(e.to_string()))?;
    let row = entry.row;
    let command = match (&args.command[..], row.command()) {
        ([], Some(own)) => own.command,
        ([], None) => {
            return Err(UsageError::new(format!(
                "the plan row is the built-in model {}: give the command to run after --",
                row.model
            ))
            .into())
        }
        (given, _) => UserCommand::new(given.to_vec())?,
    };
    let target = args.target_batch.unwrap_or(row.recommended_batch);
    let micro = row.recommended_batch.min(target);
    let accumulation = target.div_ceil(micro);
    if accumulation > 1 && !command.argv.iter().any(|a| a.contains(ACCUMULATION)) {
        eprintln!("note: the command has no {{accumulation}}: it trains with {micro} samples per step, not {target}");
    }
    // The row's sequence length and world size, where the command takes them.
    let at = Placeholders { seq_len: row.input.first().copied(), nproc: row.world_size };
    let argv = substitute(&command, &at, micro, accumulation, target);
    eprintln!(
        "vramprobe exec: micro-batch {micro} x {accumulation} accumulation = {} per step: {}",
        micro * accumulation,
        UserCommand { argv: argv.clone() }.line()
    );
    // Replaces this process: the job's exit code and signals are its own.
    let err = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    Err(anyhow!("could not run {}: {err}", argv[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_the_plans_numbers() {
        let argv =
            ["train.py", "--bs", "{batch}", "--accum={accumulation}", "--global", "{target_batch}"].map(String::from);
        let command = UserCommand::new(argv.into()).unwrap();
        assert_eq!(
            substitute(&command, &Placeholders::default(), 32, 8, 256),
            ["train.py", "--bs", "32", "--accum=8", "--global", "256"]
        );
        let ranks =
            UserCommand::new(["torchrun", "--nproc-per-node", "{nproc}", "t.py", "{batch}"].map(String::from).into())
                .unwrap();
        let at = Placeholders { seq_len: None, nproc: Some(4) };
        assert_eq!(substitute(&ranks, &at, 8, 1, 8), ["torchrun", "--nproc-per-node", "4", "t.py", "8"]);
    }
}
