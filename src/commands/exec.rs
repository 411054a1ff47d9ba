//! `vramprobe exec --plan plan.csv -- COMMAND`: the user's full job at the
//! plan's batch, unmeasured. `{batch}` becomes the recommended batch (the
//! micro-batch), `{accumulation}` the micro-batches per optimizer step that
//! keep `--target-batch`, `{target_batch}` that target. The job runs whole
//! under the hook's watch (each phase's peak, a warning when memory held
//! grows toward the plan's budget, an out-of-memory post-mortem), or bare
//! with `--watch off`.
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;

use anyhow::{anyhow, Context, Result};

use crate::commands::cli::{ExecArgs, OnOff};
use crate::error::UsageError;
use crate::measure::{environment, watched};
use crate::record::subject::{Placeholders, UserCommand};
use crate::record::watch::WatchSpec;
use crate::report::watch::{self as report_watch, WatchContext, WatchFile};
use crate::report::{output, plan_file};

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
    if args.watch == OnOff::Off {
        // Replaces this process: the job's exit code and signals are its own.
        let err = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
        return Err(anyhow!("could not run {}: {err}", argv[0]));
    }
    let context = WatchContext {
        batch: micro,
        // A plan written by hand may have no budget: nothing to forecast against.
        budget_bytes: Some(row.budget_bytes).filter(|&b| b > 0),
        fixed_bytes: row.fixed_bytes.and_then(|b| u64::try_from(b).ok()),
        ended: String::new(),
    };
    watch(&args, &argv, &row.device.to_string(), context)
}

/// Runs the job under the watch, then says what it saw: watch.json in the
/// run folder, the summary on stderr. The job's exit code is vramprobe's.
fn watch(args: &ExecArgs, argv: &[String], device: &str, mut context: WatchContext) -> Result<i32> {
    // By default beside the plan: the sweep's run folder gets the job's records.
    let (_, stamp) = environment::utc_now();
    let folder = match &args.out {
        Some(out) => output::prepare_out_dir(Some(out), "exec", &stamp, args.force)?,
        None => output::claim_new_dir(args.plan.parent().unwrap_or(Path::new(".")), &format!("exec-{stamp}"))?,
    };
    let records = folder.join("records");
    let spec = WatchSpec { budget_bytes: context.budget_bytes, snapshot: device.starts_with("cuda") };
    eprintln!(
        "vramprobe exec: watching the job (phase peaks, memory growth, out-of-memory post-mortem) into {}",
        folder.display()
    );
    let status = watched::run(argv, &records, device, context.batch, spec)
        .with_context(|| format!("could not run the job under the watch ({})", records.display()))?;
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    context.ended = match status.signal() {
        Some(signal) => format!("was killed by signal {signal}"),
        None => format!("exited {code}"),
    };
    let processes = watched::read(&records);
    let file = WatchFile { context: &context, processes: &processes };
    output::write_atomic(&folder.join("watch.json"), &serde_json::to_vec_pretty(&file)?)?;
    eprint!("{}", report_watch::summary(&processes, &context, &records));
    Ok(code)
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
