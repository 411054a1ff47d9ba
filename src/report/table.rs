//! The terminal summary: trials, the fit, the recommendation and, where
//! they apply, predictions for common GPU sizes.

use crate::analyze::analysis::SeqSummary;
use crate::analyze::device_memory::CPU_UNDER_PREDICTION;
use crate::analyze::worldfit::WorldSummary;
use crate::units::{format_input, human_bytes};

use super::grid::{new_table, render, right_align, Rows};
use crate::analyze::run::{Layout, RunIndex, RunRecord};

fn opt_bytes(v: Option<u64>) -> String {
    v.map(|b| human_bytes(b as f64)).unwrap_or_else(|| "-".into())
}

/// The first line of a summary: what was measured, where.
pub fn headline(report: &RunRecord) -> String {
    let Some(w) = report.subject.workload() else {
        let length = match report.subject.seq_len() {
            Some(t) => format!(" at sequence length {t}"),
            None => String::new(),
        };
        let ranks = match report.world_size() {
            Some(w) => format!(", {w} ranks (batches are per rank)"),
            None => String::new(),
        };
        return format!(
            "your command `{}`{length}{ranks} on {} ({}), {} steps per trial",
            report.subject.name(),
            report.device,
            report.device_name.as_deref().unwrap_or("?"),
            report.steps_per_trial
        );
    };
    format!(
        "{} {} x{} classes, {} {} {} on {} ({}), {} steps per trial",
        w.model,
        format_input(&w.input),
        w.classes,
        w.precision.name(),
        w.mode.name(),
        w.optimizer.name(),
        report.device,
        report.device_name.as_deref().unwrap_or("?"),
        report.steps_per_trial,
    )
}

/// One row per trial, with the measured peaks and speed.
pub fn trial_rows(report: &RunRecord) -> Rows {
    let cuda = report.device.is_cuda();
    let mut header = vec!["batch", "outcome", "peak allocated"];
    if cuda {
        header.extend(["peak reserved", "NVML used"]);
    }
    header.extend(["step (s)", "samples/s"]);
    let rows = report
        .trials
        .iter()
        .map(|t| {
            let mut row = vec![t.batch.to_string(), t.outcome.to_string(), opt_bytes(t.peak_allocated_bytes())];
            if cuda {
                row.extend([opt_bytes(t.peak_reserved_bytes()), opt_bytes(t.nvml_used_bytes())]);
            }
            row.push(t.mean_step_seconds().map_or("-".into(), |s| format!("{s:.3}")));
            row.push(t.samples_per_second().map_or("-".into(), |s| format!("{s:.1}")));
            row
        })
        .collect();
    Rows { header: header.into_iter().map(String::from).collect(), rows }
}

/// The fit, the budget and the recommendation: (what, value, where it comes from).
pub fn recommendation_rows(report: &RunRecord) -> Option<Rows> {
    let a = report.analysis.as_ref()?;
    let mut rows: Vec<Vec<String>> = Vec::new();
    let basis = a.fit_basis.name().replace('_', " ");
    if let Some(f) = a.fit {
        rows.push(vec!["fixed".into(), human_bytes(f.fixed_bytes), format!("fit of {basis}")]);
        rows.push(vec!["per sample".into(), human_bytes(f.per_sample_bytes), format!("fit of {basis}")]);
        rows.push(vec!["r²".into(), format!("{:.6}", f.r2), format!("{} largest batches", f.points)]);
    }
    let b = &a.budget;
    rows.push(vec!["capacity".into(), human_bytes(b.capacity_bytes as f64), a.capacity_source.to_string()]);
    rows.push(vec![
        "budget".into(),
        human_bytes(b.budget_bytes as f64),
        format!(
            "capacity - {:.0}% margin - {} outside PyTorch",
            b.margin_fraction * 100.0,
            human_bytes(b.non_pytorch_bytes as f64)
        ),
    ]);
    let trials = report.trials.len();
    let how = if a.max_batch == 0 {
        "nothing fits".to_string()
    } else if a.capped {
        format!("verified by {} ({trials} trials); capped by --max-batch, the limit lies beyond", a.strategy)
    } else if a.exact {
        format!("verified by {} ({trials} trials): fits, and the next batch does not", a.strategy)
    } else {
        format!("verified by {} ({trials} trials); not proven exact", a.strategy)
    };
    rows.push(vec!["max batch".into(), a.max_batch.to_string(), how]);
    if let Some(p) = a.predicted_max_batch {
        rows.push(vec!["predicted max".into(), p.to_string(), "fit, within the budget (not run)".to_string()]);
    }
    rows.push(vec![
        "recommended batch".into(),
        a.recommended_batch.to_string(),
        if a.recommended_verified {
            format!("ran {} steps within budget", report.steps_per_trial)
        } else {
            "not run".to_string()
        },
    ]);
    if let Some(w) = report.world_size() {
        rows.push(vec![
            "global batch".into(),
            (a.recommended_batch * u64::from(w)).to_string(),
            format!("the recommended batch on each of {w} ranks"),
        ]);
    }
    if let (Some(h), Some(p)) = (a.headroom_bytes, a.recommended_peak_bytes) {
        let pct = if b.capacity_bytes > 0 { h / b.capacity_bytes as f64 * 100.0 } else { 0.0 };
        rows.push(vec![
            "headroom".into(),
            format!("{} ({pct:.1}%)", human_bytes(h)),
            format!("free at a peak of {}", human_bytes(p)),
        ]);
    }
    if let Some(f) = a.fastest {
        rows.push(vec![
            "fastest batch".into(),
            f.batch.to_string(),
            format!(
                "measured {:.1} samples/s, within 5% of the best ({:.1} at batch {})",
                f.samples_per_second, f.best_samples_per_second, f.best_batch
            ),
        ]);
    }
    Some(Rows { header: vec![String::new(), "value".into(), "from".into()], rows })
}

/// At most this many ranks side by side; a larger job shows its extremes.
const RANK_COLUMNS: usize = 8;

/// A distributed command's peaks per rank, side by side, with the spread
/// between the fullest and the emptiest rank.
pub fn rank_rows(report: &RunRecord) -> Option<(String, Rows)> {
    let world = report.world_size()?;
    let basis = if report.device.is_cuda() { "reserved" } else { "allocated" };
    let shown = (world as usize).min(RANK_COLUMNS);
    let mut header = vec!["batch".to_string(), "global batch".to_string()];
    header.extend((0..shown).map(|r| format!("rank {r}")));
    header.extend(["spread".to_string(), "peak on".to_string()]);
    let rows = report
        .trials
        .iter()
        .filter(|t| !t.rank_peaks().is_empty())
        .map(|t| {
            let peaks = t.rank_peaks();
            let mut row = vec![t.batch.to_string(), t.global_batch().to_string()];
            row.extend(
                (0..shown as u32).map(|r| opt_bytes(peaks.iter().find(|p| p.rank == r).map(|p| p.judged_bytes()))),
            );
            row.push(opt_bytes(t.rank_spread_bytes()));
            row.push(t.peak_rank().map_or("-".into(), |r| format!("rank {r}")));
            row
        })
        .collect();
    let more = if world as usize > shown { format!(" (ranks {shown} and up: in steps.csv)") } else { String::new() };
    let label = format!(
        "Peak {basis} per rank, {world} ranks{more}: a trial fits only if every rank does; the global batch is the batch x {world}:"
    );
    Some((label, Rows { header, rows }))
}

/// Predictions for common GPU sizes, with the line that says what they are from.
pub fn gpu_rows(report: &RunRecord) -> Option<(String, Rows)> {
    let a = report.analysis.as_ref().filter(|a| !a.gpu_predictions.is_empty())?;
    let allowance = format!("the budget keeps {:.0}% free for the model's error", CPU_UNDER_PREDICTION * 100.0);
    let label = match (report.device.is_cuda(), a.cuda_reserved_fit.is_some()) {
        (true, _) => "Predicted for other GPU sizes (fit + this GPU's measured CUDA context):".to_string(),
        (false, true) => format!(
            "Predicted for GPUs from host (CPU) measurements, reserved bytes by a model of CUDA's caching allocator; \
             {allowance}; the CUDA context and cuDNN workspaces are not included:"
        ),
        (false, false) => format!(
            "Predicted for GPUs from host (CPU) measurements; {allowance}; the CUDA context and cuDNN workspaces \
             are not included:"
        ),
    };
    let rows = a
        .gpu_predictions
        .iter()
        .map(|g| {
            vec![
                human_bytes(g.capacity_bytes as f64),
                human_bytes(g.budget_bytes as f64),
                g.max_batch.to_string(),
                g.recommended_batch.to_string(),
            ]
        })
        .collect();
    let header = ["GPU memory", "budget", "max batch", "recommended"].map(String::from).to_vec();
    Some((label, Rows { header, rows }))
}

/// Every note of the run: the analysis' and the sweep's.
pub fn notes(report: &RunRecord) -> Vec<String> {
    report.analysis.iter().flat_map(|a| a.notes.iter()).chain(&report.notes).map(ToString::to_string).collect()
}

pub fn summary(report: &RunRecord) -> String {
    let mut out = format!("{}\n", headline(report));
    out.push_str(&render(&trial_rows(report), 2));
    if report.analysis.is_none() {
        return out;
    }
    if let Some((label, ranks)) = rank_rows(report) {
        out.push_str(&format!("{label}\n"));
        out.push_str(&render(&ranks, 0));
    }
    if let Some(rec) = recommendation_rows(report) {
        out.push_str(&render(&rec, 1));
    }
    out.push_str(&super::why::block(report));
    if let Some((label, gpus)) = gpu_rows(report) {
        out.push_str(&label);
        out.push('\n');
        out.push_str(&render(&gpus, 0));
    }
    for note in notes(report) {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// One row per variant (precision, mode, length) of a sweep that ran several.
/// The tables of a sweep with a folder per run, as the sweep and `vramprobe
/// report` print them: the variants' table and the fits across them, or
/// each device's summary.
pub fn top(index: &RunIndex, runs: &[(String, &RunRecord)]) -> String {
    match index.layout {
        Layout::Devices => runs.iter().map(|(_, r)| summary(r)).collect(),
        Layout::Variants => {
            let mut out = variants(runs);
            out.extend(index.seq_lens.as_ref().map(seq_lengths));
            out.extend(index.world_sizes.as_ref().map(world_sizes));
            out
        }
    }
}

pub fn variants(runs: &[(String, &RunRecord)]) -> String {
    let mut t = new_table(vec![
        "variant",
        "optimizer",
        "precision",
        "mode",
        "input",
        "fixed",
        "per sample",
        "max batch",
        "recommended",
        "fastest",
        "headroom",
    ]);
    for (label, r) in runs {
        let a = r.analysis.as_ref();
        let fit = a.and_then(|a| a.fit);
        let w = r.subject.workload();
        t.add_row(vec![
            label.clone(),
            // A command decides its own optimizer, precision and mode.
            w.map_or("-".into(), |w| w.optimizer.name().to_string()),
            w.map_or("-".into(), |w| w.precision.name().to_string()),
            w.map_or("-".into(), |w| w.mode.name().to_string()),
            format_input(&r.subject.input()),
            fit.map_or("-".into(), |f| human_bytes(f.fixed_bytes)),
            fit.map_or("-".into(), |f| human_bytes(f.per_sample_bytes)),
            a.map_or("-".into(), |a| a.max_batch.to_string()),
            a.map_or("-".into(), |a| a.recommended_batch.to_string()),
            a.and_then(|a| a.fastest).map_or("-".into(), |f| f.batch.to_string()),
            a.and_then(|a| a.headroom_bytes).map_or("-".into(), human_bytes),
        ]);
    }
    right_align(&mut t, 5);
    let mut out = format!("{t}\n");
    if let Some((label, rows)) = super::why::measured_rows(runs) {
        out.push_str(&format!("{label}\n"));
        out.push_str(&render(&rows, 3));
    }
    out
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

/// Signed bytes, for a part that may shrink with the world size.
pub fn signed_bytes(b: f64) -> String {
    if b < 0.0 {
        format!("-{}", human_bytes(-b))
    } else {
        human_bytes(b)
    }
}

/// The world sizes of a `--world-sizes` sweep, measured and predicted.
pub fn world_sizes(s: &WorldSummary) -> String {
    let mut out = String::new();
    match &s.fit {
        Some(f) => out.push_str(&format!(
            "Per-rank memory against the world size W: fixed {} + {} / W, per sample {} + {} / W ({} world sizes)\n",
            signed_bytes(f.fixed.replicated_bytes),
            signed_bytes(f.fixed.sharded_bytes),
            signed_bytes(f.per_sample.replicated_bytes),
            signed_bytes(f.per_sample.sharded_bytes),
            f.points
        )),
        None => out.push_str("Per-rank memory against the world size: needs two world sizes that fit\n"),
    }
    let mut t =
        new_table(vec!["world size", "fixed per rank", "per sample", "max batch per rank", "global batch", "from"]);
    let measured =
        s.measured.iter().map(|p| (p.world_size, p.fixed_bytes, p.per_sample_bytes, p.max_batch, "measured"));
    let predicted = s
        .predictions
        .iter()
        .map(|p| (p.world_size, p.fixed_bytes, p.per_sample_bytes, p.max_batch, "predicted (not run)"));
    for (world, fixed, per_sample, max_batch, from) in measured.chain(predicted) {
        t.add_row(vec![
            world.to_string(),
            signed_bytes(fixed),
            signed_bytes(per_sample),
            max_batch.to_string(),
            (max_batch * u64::from(world)).to_string(),
            from.into(),
        ]);
    }
    right_align(&mut t, 0);
    out.push_str(&format!("{t}\n"));
    if !s.predictions.is_empty() {
        out.push_str(&format!(
            "Predictions are judged against the measured per-rank budget ({}); run `vramprobe check --world-size N` before a job at a predicted size.\n",
            human_bytes(s.budget_bytes as f64)
        ));
    }
    out
}
