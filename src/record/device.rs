//! Which device a trial runs on, what the user asked for, how a
//! `--capacity` is enforced there, and one NVML reading: plain values that
//! the trial protocol, the analysis and the reports share.
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::UsageError;

/// What the user asked for with `--device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceRequest {
    #[default]
    Auto,
    Cpu,
    Cuda(usize),
    /// Every visible CUDA device (sweep only).
    All,
}

impl From<Device> for DeviceRequest {
    fn from(device: Device) -> DeviceRequest {
        match device {
            Device::Cpu => DeviceRequest::Cpu,
            Device::Cuda(i) => DeviceRequest::Cuda(i),
        }
    }
}

impl std::fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceRequest::Auto => f.write_str("auto"),
            DeviceRequest::All => f.write_str("all"),
            DeviceRequest::Cpu => f.write_str("cpu"),
            DeviceRequest::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for DeviceRequest {
    type Err = UsageError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "auto" => Ok(DeviceRequest::Auto),
            "all" => Ok(DeviceRequest::All),
            "cpu" => Ok(DeviceRequest::Cpu),
            "cuda" => Ok(DeviceRequest::Cuda(0)),
            other => {
                other.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()).map(DeviceRequest::Cuda).ok_or_else(
                    || UsageError::new(format!("invalid --device '{text}': expected auto, cpu, cuda, cuda:N or all")),
                )
            }
        }
    }
}

/// How a `--capacity` is enforced inside a trial, as a GPU's memory would
/// be: on the CPU a real limit in libtorch's allocator (an OOM inside
/// libtorch past it), on CUDA the caching allocator's memory fraction.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CapacityLimit {
    pub cpu_bytes: Option<u64>,
    /// `per_process_memory_fraction`, set in the trial child's environment.
    pub cuda_fraction: Option<f64>,
}

/// A concrete device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Device {
    Cpu,
    Cuda(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl From<Device> for String {
    fn from(d: Device) -> String {
        d.to_string()
    }
}

impl TryFrom<String> for Device {
    type Error = UsageError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        match s.parse::<DeviceRequest>()? {
            DeviceRequest::Cpu => Ok(Device::Cpu),
            DeviceRequest::Cuda(i) => Ok(Device::Cuda(i)),
            DeviceRequest::Auto | DeviceRequest::All => Err(UsageError::new(format!("'{s}' is not a concrete device"))),
        }
    }
}

impl Device {
    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

/// One NVML sample of a device. Every field is optional: some GPUs (and MIG
/// slices) do not report all of them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NvmlReading {
    pub used_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub total_bytes: Option<u64>,
    pub gpu_util_percent: Option<u32>,
    pub mem_util_percent: Option<u32>,
    pub temperature_c: Option<u32>,
    pub power_watts: Option<f64>,
    pub sm_clock_mhz: Option<u32>,
    /// GPU memory NVML attributes to this process (context included).
    pub process_used_bytes: Option<u64>,
}
