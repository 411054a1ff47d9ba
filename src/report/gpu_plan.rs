//! `vramprobe plan`'s words: where the memory line came from, the table
//! of GPUs with their predicted max and recommended batch, and what the
//! prediction leaves out.
use std::fmt::Write;

use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};

use crate::analyze::analysis::Analysis;
use crate::analyze::device_memory::Reserved;
use crate::analyze::run::RunRecord;
use crate::analyze::whatif::GpuPrediction;
use crate::units::{format_input, human_bytes};

/// What the model allowance column is, in one clause.
const ALLOWANCE_NOTE: &str = "the model allowance is kept free for the prediction's own error";

/// The lines `plan` prints before writing its rows.
pub fn summary(
    report: &RunRecord,
    analysis: &Analysis,
    reserved: &Reserved,
    predictions: &[GpuPrediction],
    modelled: bool,
) -> String {
    let from_gpu = report.device.is_cuda();
    let mut out = String::new();
    let source = source(from_gpu, modelled, analysis.cuda_reserved_curve_from);
    let what = match report.subject.workload() {
        Some(w) => format!("{} {} x{} classes, {}", w.model, format_input(&w.input), w.classes, w.optimizer.name()),
        None => format!("your command `{}`", report.subject.name()),
    };
    let _ = match reserved {
        Reserved::Line(fit) => writeln!(
            out,
            "{what}: memory line measured on {} ({source}), fixed {}, per sample {}, r² {:.6}",
            report.device,
            human_bytes(fit.fixed_bytes),
            human_bytes(fit.per_sample_bytes),
            fit.r2
        ),
        Reserved::Curve { points, .. } => writeln!(
            out,
            "{what}: reserved bytes predicted from {source}, up to batch {}",
            points.last().map_or(0, |p| p.batch)
        ),
    };
    let _ = writeln!(
        out,
        "measured: max batch {} on {} (verified by {})",
        analysis.max_batch, report.device, analysis.strategy
    );
    let _ = writeln!(out, "{}", table(predictions));
    out.push_str(&notes(predictions, from_gpu, modelled));
    out
}

fn source(from_gpu: bool, modelled: bool, curve_from: Option<[u64; 2]>) -> String {
    match (from_gpu, modelled, curve_from) {
        (true, _, _) => "a GPU".to_string(),
        (false, true, Some([b1, b2])) => format!(
            "the CPU: the steps of batches {b1} and {b2} scaled to larger batches and replayed through a model of \
             CUDA's caching allocator (reserved bytes)"
        ),
        (false, true, None) => {
            "the CPU, its trace replayed through a model of CUDA's caching allocator (reserved bytes)".to_string()
        }
        (false, false, _) => "the CPU (host tracking)".to_string(),
    }
}

fn table(predictions: &[GpuPrediction]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "GPU (predicted)",
        "memory",
        "overheads",
        "model allowance",
        "budget",
        "max batch",
        "recommended",
    ]);
    for p in predictions {
        t.add_row(vec![
            format!("{} ({})", p.gpu.name, p.gpu.id),
            human_bytes(p.gpu.memory_bytes as f64),
            human_bytes(p.overheads.total() as f64),
            human_bytes(p.model_allowance_bytes as f64),
            human_bytes(p.budget.budget_bytes as f64),
            p.max_batch.to_string(),
            p.recommended_batch.to_string(),
        ]);
    }
    t
}

fn notes(predictions: &[GpuPrediction], from_gpu: bool, modelled: bool) -> String {
    let mut out = String::new();
    if modelled {
        let _ = writeln!(
            out,
            "note: predicted from host measurements: the CUDA allocator's rounding and cache are modelled, and \
             attention, autocast's norms and dropout as CUDA runs them; the overheads are the CUDA context and \
             the cuBLAS workspace; cuDNN's choices are not modelled; {ALLOWANCE_NOTE} (--explain shows the parts)"
        );
    } else if !from_gpu {
        let _ = writeln!(
            out,
            "note: predicted from host measurements: the CUDA allocator's rounding is not in them; {ALLOWANCE_NOTE} \
             (--explain shows the parts)"
        );
    }
    let unmeasured =
        |p: &GpuPrediction| ["estimate", "calibrated"].iter().any(|w| p.gpu.overhead_source.starts_with(w));
    if predictions.iter().any(unmeasured) {
        let _ = writeln!(
            out,
            "note: profile overheads marked 'estimate' or 'calibrated' were not measured on that GPU (see each profile's overhead_source)"
        );
    }
    out
}
