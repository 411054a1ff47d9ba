//! `vramprobe exec`'s words after the job: each phase's peak against the
//! plan's budget, the growth it warned of, and the post-mortem of an
//! out-of-memory error with the batch that would have fit.
use std::fmt::Write;
use std::path::Path;

use serde::Serialize;

use crate::analyze::postmortem::{smaller_batch, Smaller};
use crate::record::rehearsal::Phase;
use crate::record::watch::{Forecast, Postmortem, ProcessWatch};
use crate::units::human_bytes;

/// What the job ran at and against.
#[derive(Debug, Clone, Serialize)]
pub struct WatchContext {
    /// The micro-batch the job ran at.
    pub batch: u64,
    /// None for a plan with no budget (one written by hand).
    pub budget_bytes: Option<u64>,
    /// The plan's fixed bytes (its line's intercept), if it has a line.
    pub fixed_bytes: Option<u64>,
    /// How the job ended: "exited 0", "was killed by SIGKILL".
    pub ended: String,
}

/// watch.json: the context and what each process's watch saw.
#[derive(Debug, Serialize)]
pub struct WatchFile<'a> {
    pub context: &'a WatchContext,
    pub processes: &'a [ProcessWatch],
}

/// The summary printed on stderr after the job.
pub fn summary(watches: &[ProcessWatch], ctx: &WatchContext, folder: &Path) -> String {
    let mut out = format!("vramprobe exec: the job {} at batch {}", ctx.ended, ctx.batch);
    if let Some(end) = watches.iter().find_map(|w| w.end.as_ref()) {
        let _ =
            write!(out, " after {:.1} s ({} steps, {} passes over data loaders)", end.seconds, end.steps, end.passes);
    }
    out.push('\n');
    if watches.iter().all(|w| w.device.is_empty()) {
        out.push_str("  the watch saw nothing: the job never imported torch in a process it could watch\n");
    }
    for watch in watches {
        let who = watch.rank.map(|r| format!("rank {r}: ")).unwrap_or_default();
        if !watch.phases.is_empty() {
            let _ = writeln!(out, "  {who}peaks {}", phase_peaks(watch));
            if let Some(budget) = ctx.budget_bytes {
                let _ = writeln!(out, "  {who}{}", against_budget(watch, budget));
            }
        }
        for f in &watch.forecasts {
            let _ = writeln!(out, "  {who}{}", forecast_words(f));
        }
        for p in &watch.postmortems {
            out.push_str(&postmortem(&who, p, ctx, folder));
        }
    }
    let _ = writeln!(out, "  records: {}", folder.display());
    out
}

/// "warned at batch 41: memory held in train grew by 136.8 KiB a batch; at
/// batch 184 of 512 the peak would pass the budget".
fn forecast_words(f: &Forecast) -> String {
    let of = f.length.map(|n| format!(" of {n}")).unwrap_or_default();
    let when = if f.crossing <= f.at {
        format!("its peak ({}) was already above the budget", human_bytes(f.peak_now_bytes as f64))
    } else {
        format!("at {} {}{of} the peak would pass the budget", f.unit, f.crossing)
    };
    format!(
        "warned at {} {}: memory held in {} grew by {} a {}; {when}",
        f.unit,
        f.at,
        f.phase.name(),
        human_bytes(f.growth_bytes as f64),
        f.unit
    )
}

/// "train 27.1 MiB (pass 1, batch 3), eval 30.0 MiB (pass 2, batch 1)".
fn phase_peaks(watch: &ProcessWatch) -> String {
    let basis = if watch.device == "cuda" { "allocated, exact" } else { "heap in use at batch ends, sampled" };
    let each: Vec<String> = watch
        .phases
        .values()
        .map(|p| {
            let at = match (p.pass, p.batch) {
                (Some(pass), Some(batch)) => format!(" (pass {pass}, batch {batch})"),
                _ => format!(" (after step {})", p.step),
            };
            format!("{} {}{at}", p.phase.name(), human_bytes(p.peak_allocated_bytes as f64))
        })
        .collect();
    format!("({basis}): {}", each.join(", "))
}

fn against_budget(watch: &ProcessWatch, budget: u64) -> String {
    let Some(top) = watch.highest() else { return String::new() };
    let peak = top.peak_allocated_bytes;
    if peak > budget {
        format!(
            "the {} phase passed the plan's budget of {} by {}",
            top.phase.name(),
            human_bytes(budget as f64),
            human_bytes((peak - budget) as f64)
        )
    } else {
        format!(
            "highest: {} at {:.0}% of the plan's budget of {}",
            top.phase.name(),
            100.0 * peak as f64 / budget.max(1) as f64,
            human_bytes(budget as f64)
        )
    }
}

fn postmortem(who: &str, p: &Postmortem, ctx: &WatchContext, folder: &Path) -> String {
    let mut out = String::new();
    let at = match (p.pass, p.batch) {
        (Some(pass), Some(batch)) => format!("pass {pass}, batch {batch}, after step {}", p.step),
        _ => format!("after step {}", p.step),
    };
    let _ = writeln!(out, "  {who}out of memory in {} ({at}): {}", p.phase.name(), p.message);
    if let Some(line) = &p.line {
        let _ = writeln!(out, "    at {line}");
    }
    if let Some(op) = &p.op {
        let _ = writeln!(out, "    in torch: {op}");
    }
    if let Some(asked) = p.requested_bytes {
        let needed = p.held_bytes.saturating_add(asked);
        let _ =
            write!(out, "    asked for {} with {} held", human_bytes(asked as f64), human_bytes(p.held_bytes as f64));
        out.push_str(&match (ctx.fixed_bytes, ctx.budget_bytes) {
            (Some(fixed), Some(budget)) => {
                smaller_words(smaller_batch(ctx.batch, needed, p.kept_by_pass_bytes, fixed, budget), p)
            }
            _ => "\n".into(),
        });
    }
    if let Some(snapshot) = &p.snapshot {
        let _ = writeln!(
            out,
            "    memory snapshot: {} (open it at https://pytorch.org/memory_viz)",
            folder.join(snapshot).display()
        );
    }
    out
}

fn smaller_words(smaller: Smaller, p: &Postmortem) -> String {
    match smaller {
        Smaller::Fits(b) => format!(
            "; at batch {b} it would have fit the plan's budget (its need above the plan's fixed part grows with the batch)\n"
        ),
        Smaller::NoBatch => "; no batch would have fit: even at batch 1 it would need more than the plan's budget\n".into(),
        Smaller::FixedFills => "; no batch would have fit: the plan's fixed part alone fills its budget\n".into(),
        Smaller::KeptByPass => format!(
            "; {} of it was kept from batch to batch by the last {} pass (outputs or logits gathered over the data): \
             a smaller batch would not shrink it; keep less per batch, or move it off the device \
             (for a Hugging Face Trainer, eval_accumulation_steps)\n",
            human_bytes(p.kept_by_pass_bytes.unwrap_or(0) as f64),
            p.pass_phase.map_or("", Phase::name)
        ),
        Smaller::NotTheBatch => "; it needed no more than the plan's fixed part: the batch is not what made it fail\n".into(),
    }
}
