//! The memory meter: reads a device's memory around each step into a
//! [`StepRecord`]: the host tracker on the CPU, the caching allocator and
//! NVML on CUDA.
use crate::measure::child::shim;
use crate::measure::device::{cpu, nvml::Nvml};
use crate::record::device::Device;
use crate::record::trial::StepRecord;

pub struct MemoryMeter {
    device: Device,
    nvml: Option<Nvml>,
}

impl MemoryMeter {
    /// Opens the meter. This starts exact host tracking and the allocation
    /// ledger (for the peak's breakdown), so it must run before the model is built. Returns notes for the user (NVML missing).
    pub fn open(device: Device) -> Result<(MemoryMeter, Vec<String>), shim::ShimError> {
        let mut notes = Vec::new();
        // The host tracker carries the memory reports the ledger reads, on CUDA too.
        shim::host_tracking_start()?;
        shim::ledger_start(match device {
            Device::Cpu => None,
            Device::Cuda(i) => Some(i),
        })?;
        let nvml = match device {
            Device::Cpu => None,
            Device::Cuda(_) => match Nvml::open() {
                Ok(n) => Some(n),
                Err(e) => {
                    notes.push(format!("{e}: NVML columns are left empty"));
                    None
                }
            },
        };
        Ok((MemoryMeter { device, nvml }, notes))
    }

    /// Bytes currently held: host tracker, or allocated on the CUDA device.
    pub fn current_bytes(&self) -> u64 {
        match self.device {
            Device::Cpu => shim::host_stats().current,
            Device::Cuda(i) => shim::cuda_stats(i).map(|s| s.allocated.current).unwrap_or(0),
        }
    }

    /// The device's name and total memory.
    pub fn describe(&self) -> (String, Option<u64>) {
        match self.device {
            Device::Cpu => {
                let info = cpu::info();
                (info.name, info.total_bytes)
            }
            Device::Cuda(i) => {
                let from_nvml = self.nvml.as_ref().and_then(|n| n.name_and_total(i).ok());
                let total = from_nvml.as_ref().map(|t| t.1).or_else(|| shim::cuda_mem_info(i).ok().map(|m| m.1));
                let name = from_nvml.map(|t| t.0).unwrap_or_else(|| format!("CUDA device {i}"));
                (name, total)
            }
        }
    }

    /// Starts a new measurement interval.
    pub fn reset_peak(&self) {
        match self.device {
            Device::Cpu => shim::host_reset_peak(),
            // Before the first CUDA allocation the allocator is not initialized
            // yet and has no peak to reset; that is not an error.
            Device::Cuda(i) => {
                let _ = shim::cuda_reset_peak(i);
            }
        }
    }

    /// Fills the memory fields of `rec` for the interval since `reset_peak`.
    pub fn read_into(&self, rec: &mut StepRecord) {
        match self.device {
            Device::Cpu => {
                let host = shim::host_stats();
                rec.allocated_bytes = host.current;
                rec.peak_allocated_bytes = host.peak;
                rec.host_peak_rss_bytes = cpu::peak_rss_bytes();
            }
            Device::Cuda(i) => {
                if let Ok(s) = shim::cuda_stats(i) {
                    rec.allocated_bytes = s.allocated.current;
                    rec.peak_allocated_bytes = s.allocated.peak;
                    rec.reserved_bytes = Some(s.reserved.current);
                    rec.peak_reserved_bytes = Some(s.reserved.peak);
                    rec.active_bytes = Some(s.active.current);
                    rec.peak_active_bytes = Some(s.active.peak);
                    rec.inactive_split_bytes = Some(s.inactive_split.current);
                    rec.requested_bytes = Some(s.requested.current);
                    rec.peak_requested_bytes = Some(s.requested.peak);
                    rec.alloc_retries = Some(s.alloc_retries);
                    rec.ooms = Some(s.ooms);
                }
                if let Some(nvml) = &self.nvml {
                    rec.set_nvml(nvml.read(i));
                }
            }
        }
    }
}
