//! Pure: planning for a GPU you do not have. A run's reserved lines plus
//! a GPU profile's capacity and overheads give a predicted max batch, and
//! the device memory at it part by part ([`crate::analyze::device_memory`]).
use serde::Serialize;

use crate::analyze::device_memory::{less_model_allowance, DeviceMemory, Overheads, Reserved};
use crate::analyze::fit::{round_down, Budget, LinearFit};
use crate::analyze::profile::GpuProfile;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuPrediction {
    pub gpu: GpuProfile,
    /// What reserved bytes are predicted from.
    pub reserved: Reserved,
    /// The straight piece of it at the recommended batch (batch 1 when
    /// nothing fits).
    pub fit: LinearFit,
    pub overheads: Overheads,
    /// Kept free for the model's own error when predicting from a CPU run
    /// (0 from a GPU run): see [`less_model_allowance`].
    pub model_allowance_bytes: u64,
    /// Capacity less the margin, the overheads and the model allowance:
    /// what the line must stay under.
    pub budget: Budget,
    /// Predicted, never measured on this GPU.
    pub max_batch: u64,
    pub recommended_batch: u64,
    /// The reserved line's bytes at the recommended batch.
    pub predicted_peak_bytes: Option<f64>,
    /// The device memory at the recommended batch, part by part.
    pub device_memory: Option<DeviceMemory>,
}

/// The max and recommended batch `reserved` predicts on `gpu`: its memory
/// minus the margin minus its CUDA context (and, for lines from a CPU run,
/// the cuBLAS workspace a GPU run's reserved bytes would hold and the model
/// allowance) is the budget.
pub fn predict_for(
    reserved: &Reserved,
    from_gpu: bool,
    gpu: &GpuProfile,
    margin_fraction: f64,
    multiple_of: u64,
) -> GpuPrediction {
    let overheads = Overheads {
        context_bytes: gpu.context_overhead_bytes,
        cublas_workspace_bytes: if from_gpu { 0 } else { gpu.cublas_workspace_reserved_bytes() },
    };
    let (budget, model_allowance_bytes) =
        less_model_allowance(Budget::new(gpu.memory_bytes, margin_fraction, overheads.total()), from_gpu);
    let max_batch = reserved.max_batch_within(budget.budget_bytes).unwrap_or(0);
    let recommended_batch = round_down(max_batch, multiple_of);
    let device_memory = (recommended_batch > 0).then(|| DeviceMemory::at(reserved, overheads, recommended_batch));
    GpuPrediction {
        gpu: gpu.clone(),
        reserved: reserved.clone(),
        fit: reserved.line_at(recommended_batch.max(1)),
        overheads,
        model_allowance_bytes,
        budget,
        max_batch,
        recommended_batch,
        predicted_peak_bytes: device_memory.map(|m| m.reserved_bytes),
        device_memory,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(gib: u64, overhead_mib: u64) -> GpuProfile {
        GpuProfile {
            id: "g".into(),
            name: "G".into(),
            memory_bytes: gib << 30,
            context_overhead_bytes: overhead_mib << 20,
            overhead_source: "test".into(),
            cublas_workspace_bytes: 8 << 20,
            bf16: false,
        }
    }

    #[test]
    fn the_budget_is_memory_less_margin_less_overheads() {
        // 1 GiB fixed, 100 MiB per sample, measured on a GPU (its reserved
        // bytes hold the cuBLAS workspace).
        let lines = Reserved::Line(LinearFit {
            fixed_bytes: (1u64 << 30) as f64,
            per_sample_bytes: (100u64 << 20) as f64,
            r2: 1.0,
            points: 4,
        });
        // 8 GiB: 8192 - 819.2 - 512 - 1024 = 5836.8 MiB -> 58 samples.
        let p = predict_for(&lines, true, &gpu(8, 512), 0.10, 1);
        assert_eq!((p.max_batch, p.recommended_batch), (58, 58));
        assert_eq!(p.budget.budget_bytes, (8u64 << 30) - ((8u64 << 30) as f64 * 0.1).ceil() as u64 - (512 << 20));
        assert_eq!(predict_for(&lines, true, &gpu(8, 512), 0.10, 8).recommended_batch, 56);
        // 80 GiB: 81920 - 8192 - 512 - 1024 = 72192 MiB -> 721.
        assert_eq!(predict_for(&lines, true, &gpu(80, 512), 0.10, 1).max_batch, 721);
        // Too small for the fixed part.
        assert_eq!(predict_for(&lines, true, &gpu(1, 512), 0.10, 1).max_batch, 0);
        assert_eq!(p.model_allowance_bytes, 0);
        // From a CPU run the cuBLAS workspace and the model allowance come
        // off the budget too: 7% of the 7372.8 MiB left after the margin is
        // 516.1 MiB; 6860.8 - 20 - 516.1 = 6324.7 MiB -> 53 samples.
        let cpu = predict_for(&lines, false, &gpu(8, 512), 0.10, 1);
        let usable = (8u64 << 30) - ((8u64 << 30) as f64 * 0.1).ceil() as u64;
        assert_eq!(cpu.model_allowance_bytes, (usable as f64 * 0.07).ceil() as u64);
        assert_eq!(cpu.budget.budget_bytes, p.budget.budget_bytes - (20 << 20) - cpu.model_allowance_bytes);
        assert_eq!(cpu.max_batch, 53);
        // The device total is the prediction itself: the allowance is kept
        // free, not added to it.
        let m = cpu.device_memory.unwrap();
        assert_eq!(m.total_bytes(), ((1024 + 53 * 100 + 512 + 20) as f64) * (1u64 << 20) as f64);
    }
}
