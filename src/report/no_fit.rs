//! How a sweep that found no batch says so: a setting this build or device
//! does not support, or the numbers of a model that does not fit even at
//! its smallest batch.
use crate::analyze::analysis::Analysis;
use crate::analyze::fit::Budget;
use crate::analyze::note::Note;
use crate::analyze::run::RunRecord;
use crate::record::trial::Outcome;
use crate::units::human_bytes;

/// Why a variant has no result, when its trials failed with an error rather than an OOM.
pub fn unsupported(r: &RunRecord, a: &Analysis) -> Option<String> {
    if a.max_batch > 0 {
        return None;
    }
    let first = r.trials.iter().find(|t| t.outcome == Outcome::Error)?;
    Some(format!(
        "not supported here ({} on {}): {}",
        r.subject.workload().map_or("your command", |w| w.precision.name()),
        r.device,
        first.message.as_deref().unwrap_or("no message")
    ))
}

/// Why a model does not fit even at the smallest batch, with
/// the numbers; or for a command whose batch never reached its memory.
pub fn does_not_fit(report: &RunRecord, budget: Budget) -> String {
    if let Some(ignored) = report.notes.iter().find(|n| matches!(n, Note::BatchIgnored { .. })) {
        return ignored.to_string();
    }
    // The search's max held its first steps, but not the whole job.
    if let Some(note) = report.notes.iter().find(|n| matches!(n, Note::NoBatchFitsWholeJob { .. })) {
        return format!("{}: {note}", report.subject.name());
    }
    let (model, trials) = (report.subject.name(), &report.trials);
    let budget_text = format!(
        "capacity {}, budget {}",
        human_bytes(budget.capacity_bytes as f64),
        human_bytes(budget.budget_bytes as f64)
    );
    let Some(first) = trials.iter().min_by_key(|t| t.batch) else {
        return "no trial ran".into();
    };
    let why = match first.outcome {
        Outcome::Oom => format!("out of memory ({})", first.message.as_deref().unwrap_or("")),
        Outcome::Fits => format!(
            "its peak is {}, over the budget",
            first.peak_allocated_bytes().map_or("?".into(), |b| human_bytes(b as f64))
        ),
        _ => {
            return format!(
                "the trial at batch {} failed: {}",
                first.batch,
                first.message.as_deref().unwrap_or("no message")
            )
        }
    };
    let capacity = report.notes.iter().find(|n| matches!(n, Note::FitsOnlyInMargin { .. }));
    let capacity = capacity.map_or(String::new(), |n| format!("; {n}"));
    format!("{model} does not fit even at batch {} on {}: {why}; {budget_text}{capacity}", first.batch, report.device)
}
