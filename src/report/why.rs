//! The "why" block: what the peak is made of at the recommended and the
//! max batch, when it happens, and what would change the max batch (the
//! terminal summary and index.html show the same rows).
use crate::analyze::why::{self, Why};
use crate::record::breakdown::{Breakdown, Category};
use crate::units::human_bytes;

use super::grid::{self, Rows};
use crate::analyze::run::RunRecord;

/// "in backward at OP (file:line), 12.3 ms into the step".
pub fn moment(b: &Breakdown) -> String {
    let mut out = format!("in {}", b.phase.map_or("an unknown phase", |p| p.name()));
    if let Some(op) = &b.op {
        out.push_str(&format!(" at {op}"));
    }
    if let Some(source) = &b.source {
        out.push_str(&format!(" ({source})"));
    }
    out.push_str(&format!(", {:.1} ms into the step", b.peak_ms));
    out
}

/// One line: the peak's categories (those that hold bytes) and its moment,
/// for `check --breakdown`.
pub fn one_line(b: &Breakdown) -> String {
    let parts: Vec<String> = Category::ALL
        .iter()
        .filter(|&&c| b.bytes.get(c) > 0)
        .map(|&c| format!("{} {}", c.label(), human_bytes(b.bytes.get(c) as f64)))
        .collect();
    format!("peak made of: {}; reached {}", parts.join(", "), moment(b))
}

fn share(bytes: u64, of: u64) -> String {
    format!("{:.1}%", 100.0 * bytes as f64 / of.max(1) as f64)
}

/// The breakdown table: one row per category, bytes and share at each batch, bytes per sample.
pub fn breakdown_rows(w: &Why) -> (String, Rows) {
    let mut header = vec!["category".to_string()];
    for at in &w.at {
        header.push(format!("at {} ({})", at.batch, at.role));
        header.push("share".into());
    }
    header.push("per sample".into());
    let mut rows: Vec<Vec<String>> = Category::ALL
        .iter()
        .map(|&c| {
            let mut row = vec![c.label().to_string()];
            for at in &w.at {
                let b = &at.breakdown;
                row.push(human_bytes(b.bytes.get(c) as f64));
                row.push(share(b.bytes.get(c), b.peak_bytes));
            }
            // From one trial, bytes / batch bounds a growing category's slope from above.
            let per = w.per_sample_bytes[c.index()];
            let shown = human_bytes(per.max(0.0));
            row.push(if w.per_sample_from_one_trial && per > 0.0 { format!("<= {shown}") } else { shown });
            row
        })
        .collect();
    let mut total = vec!["peak".to_string()];
    for at in &w.at {
        total.push(human_bytes(at.breakdown.peak_bytes as f64));
        total.push("100%".into());
    }
    total.push(String::new());
    rows.push(total);
    let label = match w.at.last() {
        Some(max) => {
            // A search that stopped short of the memory limit says so.
            let why = match &w.stopped_by {
                Some(by) => format!("The batch stops at {} short of the memory limit ({by});", max.batch),
                None => format!("Why the batch stops at {}:", max.batch),
            };
            let per_sample = match w.per_sample_split_from_fit {
                true => {
                    " (per sample: the slope of the peak's phase line over every trial, shared among the \
                     categories that grow with the batch by their bytes at the peak)"
                }
                false => "",
            };
            format!(
                "{why} the peak is reached {}; by {}{per_sample}:",
                moment(&max.breakdown),
                match max.breakdown.method {
                    crate::record::breakdown::Method::Ledger => "vramprobe's own tensors",
                    crate::record::breakdown::Method::TorchMemoryProfile => "torch's memory profile of your step",
                }
            )
        }
        None => String::new(),
    };
    (label, Rows { header, rows })
}

/// What would change the max batch, within the same budget.
pub fn change_rows(w: &Why) -> (String, Rows) {
    let header = ["change", "how", "basis", "max batch"].map(String::from).to_vec();
    let rows = w
        .changes
        .iter()
        .map(|c| {
            vec![
                c.change.clone(),
                c.detail.clone(),
                c.basis.label().to_string(),
                c.max_batch.map_or("none fits".into(), |b| b.to_string()),
            ]
        })
        .collect();
    ("What would change the max batch, within the same budget (predicted, not run):".to_string(), Rows { header, rows })
}

/// Where the trials' peaks fall, when not all in one phase: "optimizer at 4-32, backward at 64".
pub fn phase_note(w: &Why) -> Option<String> {
    let mut runs: Vec<(crate::record::breakdown::PeakPhase, u64, u64)> = Vec::new();
    let mut sorted = w.phases.clone();
    sorted.sort();
    for (batch, phase) in sorted {
        match runs.last_mut() {
            Some((p, _, hi)) if *p == phase => *hi = batch,
            _ => runs.push((phase, batch, batch)),
        }
    }
    (runs.len() > 1).then(|| {
        let parts: Vec<String> = runs
            .iter()
            .map(
                |(p, lo, hi)| if lo == hi { format!("{p} at batch {lo}") } else { format!("{p} at batches {lo}-{hi}") },
            )
            .collect();
        format!("the peak moves with the batch: {} (the memory line bends where it moves)", parts.join(", "))
    })
}

/// The block for the terminal summary.
pub fn block(report: &RunRecord) -> String {
    let Some(w) = &report.why else { return String::new() };
    let mut out = String::new();
    let (label, rows) = breakdown_rows(w);
    out.push_str(&format!("{label}\n"));
    out.push_str(&grid::render(&rows, 1));
    if let Some(note) = phase_note(w) {
        out.push_str(&format!("note: {note}\n"));
    }
    if !w.changes.is_empty() {
        let (label, rows) = change_rows(w);
        out.push_str(&format!("{label}\n"));
        out.push_str(&grid::render_within(&rows, 3, 140));
    }
    out
}

/// A sweep over optimizers or precisions: the first variant's predicted
/// change beside each other variant's measured max batch.
pub fn measured_rows(runs: &[(String, &RunRecord)]) -> Option<(String, Rows)> {
    let ((base_label, base), others) = runs.split_first()?;
    let base_workload = base.subject.workload()?;
    let w = base.why.as_ref()?;
    let rows: Vec<Vec<String>> = others
        .iter()
        .filter_map(|(label, r)| {
            let change = why::predicted_for(w, base_workload, r.subject.workload()?)?;
            let a = r.analysis.as_ref()?;
            let measured = if a.capped { format!("{} (--max-batch)", a.max_batch) } else { a.max_batch.to_string() };
            let off = change
                .max_batch
                .filter(|_| a.max_batch > 0)
                .map_or("-".into(), |p| format!("{:+.1}%", 100.0 * (p as f64 / a.max_batch as f64 - 1.0)));
            let predicted = change.max_batch.map_or("none fits".into(), |b| b.to_string());
            Some(vec![label.clone(), change.change.clone(), change.basis.label().into(), predicted, measured, off])
        })
        .collect();
    if rows.is_empty() {
        return None;
    }
    let header =
        ["variant", "as the change", "basis", "predicted max", "measured max", "prediction off by"].map(String::from);
    Some((
        format!("Predicted from {base_label}'s breakdown against measured (each variant's own run):"),
        Rows { header: header.to_vec(), rows },
    ))
}
