//! CUDA devices: the caching allocator's counters (through the shim) and the
//! device list. Nothing here creates a CUDA context until a trial runs.
use super::{nvml, Device, DeviceInfo};

/// How many CUDA devices libtorch sees (0 without a driver or GPU).
pub fn device_count() -> usize {
    tch::Cuda::device_count().max(0) as usize
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
            DeviceInfo {
                device: Device::Cuda(i),
                name,
                total_bytes: total,
                detail: format!(
                    "driver {}; CUDA driver {}; torch {} built for CUDA {}",
                    versions.driver.as_deref().unwrap_or("?"),
                    versions.cuda_driver.as_deref().unwrap_or("?"),
                    crate::shim::torch_version(),
                    crate::shim::cuda_runtime_version().unwrap_or_else(|| "?".into()),
                ),
            }
        })
        .collect()
}
