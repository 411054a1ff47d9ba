//! CUDA devices: the caching allocator's counters (through the shim) and the
//! device list. Nothing here creates a CUDA context until a trial runs.
use super::{nvml, Device, DeviceInfo};

/// The CUDA context and library handles assumed outside the allocator when
/// emulating a smaller GPU, before a trial has measured them.
pub const CONTEXT_ESTIMATE_BYTES: u64 = 512 << 20;

/// `PYTORCH_CUDA_ALLOC_CONF`'s `per_process_memory_fraction` that makes a
/// `total_bytes` GPU behave like a `capacity_bytes` one: the caching
/// allocator may reserve the capacity less the context, which lives outside it.
pub fn memory_fraction(capacity_bytes: u64, context_bytes: u64, total_bytes: u64) -> Result<f64, String> {
    if capacity_bytes > total_bytes {
        return Err(format!("--capacity {capacity_bytes} bytes is more than the GPU's {total_bytes} bytes: it can only emulate a smaller GPU"));
    }
    let usable = capacity_bytes.saturating_sub(context_bytes);
    if usable == 0 {
        return Err(format!(
            "--capacity {capacity_bytes} bytes leaves nothing after the CUDA context ({context_bytes} bytes)"
        ));
    }
    Ok(usable as f64 / total_bytes as f64)
}

/// Tells a child's CUDA caching allocator to hold at most `fraction` of the
/// device (`PYTORCH_CUDA_ALLOC_CONF`, keeping any settings already there).
pub fn limit_child(command: &mut std::process::Command, fraction: f64) {
    let existing = std::env::var("PYTORCH_CUDA_ALLOC_CONF").ok();
    command.env("PYTORCH_CUDA_ALLOC_CONF", alloc_conf_with_fraction(existing.as_deref(), fraction));
}

/// The environment value for a child process, keeping any settings already there.
pub fn alloc_conf_with_fraction(existing: Option<&str>, fraction: f64) -> String {
    let setting = format!("per_process_memory_fraction:{fraction:.6}");
    match existing.map(str::trim).filter(|e| !e.is_empty()) {
        Some(e) => format!("{e},{setting}"),
        None => setting,
    }
}

/// How many CUDA devices there are: as the linked libtorch sees them, else
/// as the driver (NVML) lists them; 0 without a driver or GPU.
pub fn device_count() -> usize {
    crate::measure::linked::cuda_device_count().unwrap_or_else(|| nvml::Nvml::open().map_or(0, |n| n.device_count()))
}

/// The device's total memory as NVML reports it (no CUDA context is made).
pub fn total_bytes(index: usize) -> Option<u64> {
    nvml::Nvml::open().ok()?.name_and_total(index).ok().map(|(_, total)| total)
}

/// The allocator fraction that makes CUDA device `index` behave like a GPU
/// of `capacity_bytes` (see [`memory_fraction`]).
pub fn emulation_fraction(index: usize, capacity_bytes: u64) -> Result<f64, String> {
    let total = total_bytes(index).ok_or("--capacity on CUDA needs NVML to read the GPU's total memory")?;
    memory_fraction(capacity_bytes, CONTEXT_ESTIMATE_BYTES, total)
}

pub fn list() -> Vec<DeviceInfo> {
    let count = device_count();
    if count == 0 {
        return Vec::new();
    }
    let nvml = nvml::Nvml::open().ok();
    let versions = nvml.as_ref().map(nvml::Nvml::versions).unwrap_or_default();
    (0..count)
        .map(|i| {
            let (name, total) = nvml
                .as_ref()
                .and_then(|n| n.name_and_total(i).ok())
                .map(|(n, t)| (n, Some(t)))
                .unwrap_or_else(|| ("CUDA device (NVML unavailable)".into(), None));
            let linked = crate::measure::linked::torch_version().map_or(String::new(), |torch| {
                let cuda = crate::measure::linked::cuda_runtime_version();
                format!("; torch {torch} built for CUDA {}", cuda.as_deref().unwrap_or("?"))
            });
            DeviceInfo {
                device: Device::Cuda(i),
                name,
                total_bytes: total,
                detail: format!(
                    "driver {}; CUDA driver {}{linked}",
                    versions.driver.as_deref().unwrap_or("?"),
                    versions.cuda_driver.as_deref().unwrap_or("?"),
                ),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_smaller_gpu_is_a_fraction_of_the_allocator_net_of_the_context() {
        let f = memory_fraction(8 << 30, 512 << 20, 80 << 30).unwrap();
        assert!((f - 7.5 / 80.0).abs() < 1e-12);
        assert!(memory_fraction(100 << 30, 0, 80 << 30).is_err());
        assert!(memory_fraction(256 << 20, 512 << 20, 80 << 30).is_err());
        assert_eq!(alloc_conf_with_fraction(None, 0.5), "per_process_memory_fraction:0.500000");
        assert_eq!(
            alloc_conf_with_fraction(Some("expandable_segments:True"), 0.25),
            "expandable_segments:True,per_process_memory_fraction:0.250000"
        );
    }
}
