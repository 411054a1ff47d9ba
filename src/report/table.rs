//! The terminal summary: trials, the fit, the recommendation and, where
//! they apply, predictions for common GPU sizes.
use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

use super::Report;
use crate::analysis::SeqSummary;
use crate::units::{format_input, human_bytes};

fn opt_bytes(v: Option<u64>) -> String {
    v.map(|b| human_bytes(b as f64)).unwrap_or_else(|| "-".into())
}

fn new_table(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(header);
    t
}

fn right_align(t: &mut Table, from: usize) {
    let n = t.column_count();
    for i in from..n {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

pub fn summary(report: &Report) -> String {
    let cuda = report.device.starts_with("cuda");
    let mut out = format!(
        "{} {} x{} classes, {} on {} ({}), {} steps per trial\n",
        report.workload.model,
        format_input(&report.workload.input),
        report.workload.classes,
        report.workload.optimizer.name(),
        report.device,
        report.device_name.as_deref().unwrap_or("?"),
        report.steps_per_trial,
    );

    let mut header = vec!["batch", "outcome", "peak allocated"];
    if cuda {
        header.extend(["peak reserved", "NVML used"]);
    }
    header.extend(["step (s)", "samples/s"]);
    let mut trials = new_table(header);
    for t in &report.trials {
        let mut row = vec![t.batch.to_string(), t.outcome.to_string(), opt_bytes(t.peak_allocated_bytes())];
        if cuda {
            row.extend([opt_bytes(t.peak_reserved_bytes()), opt_bytes(t.nvml_used_bytes())]);
        }
        row.push(t.mean_step_seconds().map_or("-".into(), |s| format!("{s:.3}")));
        row.push(t.samples_per_second().map_or("-".into(), |s| format!("{s:.1}")));
        trials.add_row(row);
    }
    right_align(&mut trials, 2);
    out.push_str(&trials.to_string());
    out.push('\n');

    let Some(a) = &report.analysis else {
        return out;
    };
    let mut rec = new_table(vec!["", "value", "from"]);
    let basis = a.fit_basis.name().replace('_', " ");
    if let Some(f) = a.fit {
        rec.add_row(vec!["fixed".into(), human_bytes(f.fixed_bytes), format!("fit of {basis}")]);
        rec.add_row(vec!["per sample".into(), human_bytes(f.per_sample_bytes), format!("fit of {basis}")]);
        rec.add_row(vec!["r²".into(), format!("{:.6}", f.r2), format!("{} largest batches", f.points)]);
    }
    let b = &a.budget;
    rec.add_row(vec!["capacity".into(), human_bytes(b.capacity_bytes as f64), a.capacity_source.clone()]);
    rec.add_row(vec![
        "budget".into(),
        human_bytes(b.budget_bytes as f64),
        format!(
            "capacity - {:.0}% margin - {} outside PyTorch",
            b.margin_fraction * 100.0,
            human_bytes(b.non_pytorch_bytes as f64)
        ),
    ]);
    let how = if a.max_batch == 0 {
        "nothing fits".to_string()
    } else if a.capped {
        format!(
            "verified by {} ({} trials); capped by --max-batch, the limit lies beyond",
            a.strategy,
            report.trials.len()
        )
    } else if a.exact {
        format!("verified by {} ({} trials): fits, and the next batch does not", a.strategy, report.trials.len())
    } else {
        format!("verified by {} ({} trials); not proven exact", a.strategy, report.trials.len())
    };
    rec.add_row(vec!["max batch".into(), a.max_batch.to_string(), how]);
    if let Some(p) = a.predicted_max_batch {
        rec.add_row(vec!["predicted max".into(), p.to_string(), "fit, within the budget (not run)".to_string()]);
    }
    rec.add_row(vec![
        "recommended batch".into(),
        a.recommended_batch.to_string(),
        if a.recommended_verified {
            format!("ran {} steps within budget", report.steps_per_trial)
        } else {
            "not run".to_string()
        },
    ]);
    if let (Some(h), Some(p)) = (a.headroom_bytes, a.recommended_peak_bytes) {
        let pct = if b.capacity_bytes > 0 { h / b.capacity_bytes as f64 * 100.0 } else { 0.0 };
        rec.add_row(vec![
            "headroom".into(),
            format!("{} ({pct:.1}%)", human_bytes(h)),
            format!("free at a peak of {}", human_bytes(p)),
        ]);
    }
    right_align(&mut rec, 1);
    out.push_str(&rec.to_string());
    out.push('\n');

    if !a.gpu_predictions.is_empty() {
        let label = if cuda {
            "Predicted for other GPU sizes (fit + this GPU's measured CUDA context):"
        } else {
            "Predicted for GPUs from host (CPU) measurements; the CUDA context and cuDNN workspaces are not included:"
        };
        out.push_str(label);
        out.push('\n');
        let mut gpus = new_table(vec!["GPU memory", "budget", "max batch", "recommended"]);
        for g in &a.gpu_predictions {
            gpus.add_row(vec![
                human_bytes(g.capacity_bytes as f64),
                human_bytes(g.budget_bytes as f64),
                g.max_batch.to_string(),
                g.recommended_batch.to_string(),
            ]);
        }
        right_align(&mut gpus, 0);
        out.push_str(&gpus.to_string());
        out.push('\n');
    }
    for note in a.notes.iter().chain(&report.notes) {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// One row per variant (precision, mode, length) of a sweep that ran several.
pub fn variants(runs: &[(String, &Report)]) -> String {
    let mut t = new_table(vec![
        "variant",
        "precision",
        "mode",
        "input",
        "fixed",
        "per sample",
        "max batch",
        "recommended",
        "headroom",
    ]);
    for (label, r) in runs {
        let a = r.analysis.as_ref();
        let fit = a.and_then(|a| a.fit);
        t.add_row(vec![
            label.clone(),
            r.workload.precision.name().to_string(),
            r.workload.mode.name().to_string(),
            format_input(&r.workload.input),
            fit.map_or("-".into(), |f| human_bytes(f.fixed_bytes)),
            fit.map_or("-".into(), |f| human_bytes(f.per_sample_bytes)),
            a.map_or("-".into(), |a| a.max_batch.to_string()),
            a.map_or("-".into(), |a| a.recommended_batch.to_string()),
            a.and_then(|a| a.headroom_bytes).map_or("-".into(), human_bytes),
        ]);
    }
    right_align(&mut t, 4);
    format!("{t}\n")
}

/// The lengths of a `--seq-lens` sweep and the fit across them.
pub fn seq_lengths(s: &SeqSummary) -> String {
    let mut out = String::new();
    match &s.fit {
        Some(f) => out.push_str(&format!(
            "Memory against batch and length: {} + {} x tokens + {} x tokens x length (r² {:.6}, {} points)\n",
            human_bytes(f.fixed_bytes),
            human_bytes(f.per_token_bytes),
            human_bytes(f.per_token_length_bytes),
            f.r2,
            f.points
        )),
        None => out.push_str("Memory against batch and length: not enough fitting points for a fit\n"),
    }
    let mut t = new_table(vec!["length", "max batch", "recommended", "fit allows", "tokens per batch"]);
    for r in &s.lengths {
        t.add_row(vec![
            r.length.to_string(),
            r.max_batch.to_string(),
            r.recommended_batch.to_string(),
            r.fit_max_batch.map_or("-".into(), |b| b.to_string()),
            r.tokens.to_string(),
        ]);
    }
    right_align(&mut t, 0);
    out.push_str(&format!("{t}\n"));
    out.push_str(&format!(
        "Max tokens per batch: {} (at length {}). For variable-length data use the longest length's batch: {} at {} tokens.\n",
        s.max_tokens, s.max_tokens_length, s.longest_recommended_batch, s.longest_length
    ));
    out
}
