//! Pure: planning for a GPU you do not have. A measured memory line plus a
//! GPU profile's capacity and overhead give a predicted max batch.
use serde::Serialize;

use crate::analyze::analysis::round_down;
use crate::analyze::fit::{Budget, LinearFit};
use crate::analyze::profile::GpuProfile;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuPrediction {
    pub gpu: GpuProfile,
    /// The line it is predicted from.
    pub fit: LinearFit,
    pub budget: Budget,
    /// Predicted, never measured on this GPU.
    pub max_batch: u64,
    pub recommended_batch: u64,
    /// The fit's peak at the recommended batch.
    pub predicted_peak_bytes: Option<f64>,
}

/// The max and recommended batch the fit predicts on `gpu`: its memory minus
/// the margin minus its CUDA context overhead is the budget.
pub fn predict_for(fit: &LinearFit, gpu: &GpuProfile, margin_fraction: f64, multiple_of: u64) -> GpuPrediction {
    let budget = Budget::new(gpu.memory_bytes, margin_fraction, gpu.context_overhead_bytes);
    let max_batch = fit.max_batch_within(budget.budget_bytes).unwrap_or(0);
    let recommended_batch = round_down(max_batch, multiple_of);
    GpuPrediction {
        gpu: gpu.clone(),
        fit: *fit,
        budget,
        max_batch,
        recommended_batch,
        predicted_peak_bytes: (recommended_batch > 0).then(|| fit.predict(recommended_batch)),
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
            bf16: false,
        }
    }

    #[test]
    fn the_budget_is_memory_less_margin_less_overhead() {
        // 1 GiB fixed, 100 MiB per sample.
        let fit =
            LinearFit { fixed_bytes: (1u64 << 30) as f64, per_sample_bytes: (100u64 << 20) as f64, r2: 1.0, points: 4 };
        // 8 GiB: 8192 - 819.2 - 512 - 1024 = 5836.8 MiB -> 58 samples.
        let p = predict_for(&fit, &gpu(8, 512), 0.10, 1);
        assert_eq!((p.max_batch, p.recommended_batch), (58, 58));
        assert_eq!(p.budget.budget_bytes, (8u64 << 30) - ((8u64 << 30) as f64 * 0.1).ceil() as u64 - (512 << 20));
        assert_eq!(predict_for(&fit, &gpu(8, 512), 0.10, 8).recommended_batch, 56);
        // 80 GiB: 81920 - 8192 - 512 - 1024 = 72192 MiB -> 721.
        assert_eq!(predict_for(&fit, &gpu(80, 512), 0.10, 1).max_batch, 721);
        // Too small for the fixed part.
        assert_eq!(predict_for(&fit, &gpu(1, 512), 0.10, 1).max_batch, 0);
    }
}
