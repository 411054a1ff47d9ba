//! The driver's view of a GPU through NVML. NVML is optional: without a
//! driver every reading is absent and the caller notes it, never fails.
use crate::record::device::NvmlReading;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;

#[derive(Debug, Clone, Default)]
pub struct Versions {
    pub driver: Option<String>,
    pub cuda_driver: Option<String>,
}

pub struct Nvml(nvml_wrapper::Nvml);

impl Nvml {
    /// Opens NVML (libnvidia-ml.so.1, loaded at run time).
    pub fn open() -> Result<Nvml, String> {
        nvml_wrapper::Nvml::init().map(Nvml).map_err(|e| format!("NVML unavailable: {e}"))
    }

    pub fn versions(&self) -> Versions {
        Versions {
            driver: self.0.sys_driver_version().ok(),
            cuda_driver: self.0.sys_cuda_driver_version().ok().map(|v| {
                format!("{}.{}", nvml_wrapper::cuda_driver_version_major(v), nvml_wrapper::cuda_driver_version_minor(v))
            }),
        }
    }

    /// How many GPUs the driver lists.
    pub fn device_count(&self) -> usize {
        self.0.device_count().map_or(0, |n| n as usize)
    }

    pub fn name_and_total(&self, index: usize) -> Result<(String, u64), String> {
        let device = self.0.device_by_index(index as u32).map_err(|e| e.to_string())?;
        let name = device.name().map_err(|e| e.to_string())?;
        let total = device.memory_info().map_err(|e| e.to_string())?.total;
        Ok((name, total))
    }

    /// Whether any process computes on device `index` (unknown: busy).
    pub fn busy(&self, index: usize) -> bool {
        let Ok(device) = self.0.device_by_index(index as u32) else { return true };
        device.running_compute_processes().map_or(true, |procs| !procs.is_empty())
    }

    /// Samples device `index`. The CUDA index is taken as the NVML index,
    /// which holds unless CUDA_VISIBLE_DEVICES reorders devices.
    /// The device's readings, with this process's own memory.
    pub fn read(&self, index: usize) -> NvmlReading {
        self.read_for(index, std::process::id())
    }

    /// The device's readings, with the memory of process `pid` on it.
    pub fn read_for(&self, index: usize, pid: u32) -> NvmlReading {
        let Ok(device) = self.0.device_by_index(index as u32) else {
            return NvmlReading::default();
        };
        let memory = device.memory_info().ok();
        let utilization = device.utilization_rates().ok();
        let process_used_bytes = device.running_compute_processes().ok().and_then(|procs| {
            procs.iter().find(|p| p.pid == pid).and_then(|p| match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => Some(bytes),
                UsedGpuMemory::Unavailable => None,
            })
        });
        NvmlReading {
            used_bytes: memory.as_ref().map(|m| m.used),
            free_bytes: memory.as_ref().map(|m| m.free),
            total_bytes: memory.as_ref().map(|m| m.total),
            gpu_util_percent: utilization.as_ref().map(|u| u.gpu),
            mem_util_percent: utilization.as_ref().map(|u| u.memory),
            temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
            power_watts: device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
            sm_clock_mhz: device.clock_info(Clock::SM).ok(),
            process_used_bytes,
        }
    }
}
