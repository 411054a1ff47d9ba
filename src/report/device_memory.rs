//! `plan --explain`: the device memory predicted on each GPU, part by part,
//! as a table (with where each part comes from) and as
//! `plan-gpus-memory.csv` rows. Formatters only: they return text and bytes.
use serde::{Deserialize, Serialize};

use super::grid::{self, Rows};

use crate::analyze::device_memory::{DeviceMemory, CPU_UNDER_PREDICTION};
use crate::analyze::whatif::GpuPrediction;
use crate::units::human_bytes;

/// One row of `plan-gpus-memory.csv`: a GPU at a batch.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MemoryRow {
    pub gpu: String,
    pub gpu_name: String,
    pub batch: u64,
    /// Whether it is the plan's recommended batch for this GPU.
    pub recommended: bool,
    pub reserved_bytes: i64,
    /// The straight piece reserved bytes are on at this batch (a measured
    /// line, or the curve's segment): bytes at batch 0 and per sample.
    pub reserved_fixed_bytes: i64,
    pub reserved_per_sample_bytes: i64,
    pub cublas_workspace_bytes: u64,
    pub context_bytes: u64,
    /// What NVML would show used by the job (reserved + workspace + context).
    pub device_bytes: i64,
    pub capacity_bytes: u64,
}

/// The memory at each GPU's recommended batch, then at each of `at`.
pub fn memory_at(predictions: &[GpuPrediction], at: &[u64]) -> Vec<(usize, DeviceMemory, bool)> {
    let mut out = Vec::new();
    for (i, p) in predictions.iter().enumerate() {
        if let Some(m) = p.device_memory {
            out.push((i, m, true));
        }
        for &batch in at.iter().filter(|b| **b != p.recommended_batch || p.device_memory.is_none()) {
            out.push((i, DeviceMemory::at(&p.reserved, p.overheads, batch), false));
        }
    }
    out
}

pub fn rows(predictions: &[GpuPrediction], at: &[u64]) -> Vec<MemoryRow> {
    memory_at(predictions, at)
        .into_iter()
        .map(|(i, m, recommended)| {
            let p = &predictions[i];
            let piece = p.reserved.line_at(m.batch);
            MemoryRow {
                gpu: p.gpu.id.clone(),
                gpu_name: p.gpu.name.clone(),
                batch: m.batch,
                recommended,
                reserved_bytes: m.reserved_bytes.round() as i64,
                reserved_fixed_bytes: piece.fixed_bytes.round() as i64,
                reserved_per_sample_bytes: piece.per_sample_bytes.round() as i64,
                cublas_workspace_bytes: m.overheads.cublas_workspace_bytes,
                context_bytes: m.overheads.context_bytes,
                device_bytes: m.total_bytes().round() as i64,
                capacity_bytes: p.gpu.memory_bytes,
            }
        })
        .collect()
}

/// The table `plan --explain` prints, then what each part is and where it
/// comes from. `modelled`: the reserved lines are a CPU trace through the
/// caching allocator's model (else a measured line).
pub fn explain(predictions: &[GpuPrediction], at: &[u64], modelled: bool) -> String {
    let header =
        ["GPU", "batch", "reserved", "on the piece", "cuBLAS workspace", "CUDA context", "device total", "of capacity"];
    let rows = memory_at(predictions, at)
        .into_iter()
        .map(|(i, m, recommended)| {
            let p = &predictions[i];
            let line = p.reserved.line_at(m.batch);
            let batch = if recommended { format!("{} (recommended)", m.batch) } else { m.batch.to_string() };
            vec![
                p.gpu.id.clone(),
                batch,
                human_bytes(m.reserved_bytes),
                format!("{} + {} per sample", human_bytes(line.fixed_bytes), human_bytes(line.per_sample_bytes)),
                human_bytes(m.overheads.cublas_workspace_bytes as f64),
                human_bytes(m.overheads.context_bytes as f64),
                human_bytes(m.total_bytes()),
                format!("{:.1}%", 100.0 * m.total_bytes() / p.gpu.memory_bytes as f64),
            ]
        })
        .collect();
    let table = grid::render(&Rows { header: header.map(String::from).to_vec(), rows }, 2);
    let mut out = format!("Device memory predicted, part by part:\n{table}");
    out.push_str(&footnotes(predictions, modelled));
    out
}

/// The lines under `plan --explain`'s table: what each column is, where each
/// GPU's context figure comes from, and what is left out.
fn footnotes(predictions: &[GpuPrediction], modelled: bool) -> String {
    let mut out = String::new();
    let reserved = if modelled {
        "reserved: what PyTorch's caching allocator would hold at the step's peak, by vramprobe's model of it \
         (512 B rounding, 2 MiB and 20 MiB segments, best-fit reuse, the cache kept between steps) replaying \
         the CPU step's allocations and frees in order. Past the batches run, the last step of the two largest \
         is scaled event by event (each allocation along its own line through the two batches) and replayed \
         (3 steps), so the optimizer step's peak, the activations' growth and the fragmentation between them \
         are all in it; the curve is straight between the batches it was replayed at, or over its larger \
         half, where higher, that half's least-squares line raised to its points within half to twice the batch \
         (the model's fragmentation at one batch can be kinder than a GPU's). For your own command, \
         attention the CPU ran on its math path (dropout, some masks) counts as CUDA's fused kernels run it \
         (inputs, output and log-sum-exp kept for the backward, no L x L weights), and layer_norm and \
         group_norm under autocast as CUDA's autocast runs them (the input copied to fp32 and the copy saved), \
         and dropout's saved noise as at most CUDA's bool mask (half the CPU's noise). Otherwise the CPU's op \
         semantics stand: kernels may save other tensors than their CPU versions."
    } else {
        "reserved: the run's measured line (its limiting series)."
    };
    out.push_str(&format!("- {reserved}\n"));
    out.push_str(
        "- cuBLAS workspace: one per thread that runs matmuls (the forward's and the autograd engine's), allocated \
         through the caching allocator and kept (CUBLAS_WORKSPACE_CONFIG's default: 8 MiB + 128 KiB, two in one \
         20 MiB segment; 32 MiB each on Hopper and later); a GPU run's reserved bytes hold them already, so 0 there.\n",
    );
    let mut sources: Vec<(&str, &str)> =
        predictions.iter().map(|p| (p.gpu.id.as_str(), p.gpu.overhead_source.as_str())).collect();
    sources.dedup_by_key(|(_, s)| *s);
    for (id, source) in sources {
        out.push_str(&format!("- CUDA context ({id}): {source}\n"));
    }
    if let Some(p) = predictions.iter().find(|p| p.model_allowance_bytes > 0) {
        out.push_str(&format!(
            "- model allowance (not in the device total; kept free besides the margin): {:.0}% of what the margin \
             leaves ({} on {}), the worst under-prediction of a GPU's reading by a CPU run over the public readings \
             vramprobe reproduces (docs/benchmarks.md), so that the max batch stays under what the GPU holds.\n",
            CPU_UNDER_PREDICTION * 100.0,
            human_bytes(p.model_allowance_bytes as f64),
            p.gpu.id
        ));
    }
    // The range: nothing (the fallback) up to all that is free at the batch.
    let free = predictions.iter().find_map(|p| {
        let m = p.device_memory?;
        Some(format!(
            " (on {} at batch {}: up to {})",
            p.gpu.id,
            m.batch,
            human_bytes((p.gpu.memory_bytes as f64 - m.total_bytes()).max(0.0))
        ))
    });
    out.push_str(&format!(
        "- cuDNN convolution workspaces: not added. Each is taken from the caching allocator for one call and \
         returned, from 0 B (when none can be allocated PyTorch tries the next algorithm: its cuDNN v8 path catches \
         the out-of-memory error) up to all that is free{}, the worst case with torch.backends.cudnn.benchmark = \
         True, which considers workspaces up to what is free. NVML's reading rises with them toward the capacity \
         without the job failing; with nothing free at all, cuDNN can fail (\"unable to find an engine\"), which \
         the margin and the model allowance leave room against.\n",
        free.unwrap_or_default()
    ));
    out
}
