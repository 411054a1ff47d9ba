//! `plan --world-size`'s words: the per-rank batch at world sizes not run,
//! from a `--world-sizes` sweep's fit, with the part of the memory that
//! shrinks as ranks are added and the part that does not shown apart.
use crate::analyze::worldfit::{WorldFit, WorldPrediction, WorldSummary};
use crate::report::grid::{new_table, right_align};
use crate::report::table::signed_bytes;
use crate::units::human_bytes;

pub fn summary(summary: &WorldSummary, fit: &WorldFit, predictions: &[WorldPrediction]) -> String {
    let measured: Vec<String> = summary.measured.iter().map(|p| p.world_size.to_string()).collect();
    let mut out = format!(
        "From the sweep at world sizes {} (per rank: fixed {} + {} / W, per sample {} + {} / W):\n",
        measured.join(", "),
        signed_bytes(fit.fixed.replicated_bytes),
        signed_bytes(fit.fixed.sharded_bytes),
        signed_bytes(fit.per_sample.replicated_bytes),
        signed_bytes(fit.per_sample.sharded_bytes),
    );
    let mut t = new_table(vec![
        "world size",
        "fixed, does not shrink",
        "fixed, sharded / W",
        "per sample",
        "max batch per rank",
        "recommended",
        "global batch",
    ]);
    for p in predictions {
        let w = f64::from(p.world_size);
        t.add_row(vec![
            p.world_size.to_string(),
            signed_bytes(fit.fixed.replicated_bytes),
            signed_bytes(fit.fixed.sharded_bytes / w),
            signed_bytes(p.per_sample_bytes),
            p.max_batch.to_string(),
            p.recommended_batch.to_string(),
            p.global_batch.to_string(),
        ]);
    }
    right_align(&mut t, 0);
    out.push_str(&format!("{t}\n"));
    out.push_str(&format!(
        "Predicted, never run, against the measured per-rank budget ({}). What does not shrink with more ranks: \
         each rank's activations (the per-sample part: every rank holds its own batch), the replicated fixed part, \
         and memory outside PyTorch's allocator that its profiler cannot see: NCCL's communication buffers, which \
         grow with the ranks a node talks to (on a GPU NVML counts them; `vramprobe check --world-size N` on the \
         real job measures them).\n",
        human_bytes(summary.budget_bytes as f64)
    ));
    out
}
