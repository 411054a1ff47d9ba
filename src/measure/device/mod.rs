//! Where a trial runs and how its memory is read: the CPU through exact host
//! tracking, CUDA through the caching allocator's counters plus NVML.
pub mod cpu;
pub mod cuda;
pub mod nvml;

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

impl CapacityLimit {
    /// The limit for `capacity` on `device`; none without a capacity. A CUDA
    /// capacity above the device's memory is the user's mistake.
    pub fn new(device: Device, capacity: Option<u64>) -> Result<CapacityLimit, UsageError> {
        Ok(match (device, capacity) {
            (_, None) => CapacityLimit::default(),
            (Device::Cpu, Some(bytes)) => CapacityLimit { cpu_bytes: Some(bytes), cuda_fraction: None },
            (Device::Cuda(i), Some(bytes)) => CapacityLimit {
                cpu_bytes: None,
                cuda_fraction: Some(cuda::emulation_fraction(i, bytes).map_err(UsageError::new)?),
            },
        })
    }
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
    pub fn tch(self) -> tch::Device {
        match self {
            Device::Cpu => tch::Device::Cpu,
            Device::Cuda(i) => tch::Device::Cuda(i),
        }
    }

    pub fn is_cuda(self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

/// Resolves `--device` against what this machine has. `auto` falls back to
/// the CPU with a note; an explicit CUDA device that is missing is an error.
pub fn resolve(request: DeviceRequest) -> Result<(Device, Option<String>), UsageError> {
    let cuda_count = cuda::device_count();
    match request {
        DeviceRequest::Cpu => Ok((Device::Cpu, None)),
        DeviceRequest::Auto if cuda_count > 0 => Ok((Device::Cuda(0), None)),
        DeviceRequest::Auto => {
            Ok((Device::Cpu, Some("no CUDA device found: measuring on the CPU (exact host tracking)".into())))
        }
        DeviceRequest::Cuda(_) if cuda_count == 0 => Err(UsageError::new(
            "--device cuda was requested but no CUDA device is available (use --device cpu or auto)",
        )),
        DeviceRequest::Cuda(i) if i >= cuda_count => Err(UsageError::new(format!(
            "--device cuda:{i} does not exist: this machine has {cuda_count} CUDA device(s), cuda:0 to cuda:{}",
            cuda_count - 1
        ))),
        DeviceRequest::Cuda(i) => Ok((Device::Cuda(i), None)),
        DeviceRequest::All => Err(UsageError::new("--device all is for sweep only: choose one device here")),
    }
}

/// `--device all`: every visible CUDA device, or an error saying there is none.
pub fn all_cuda() -> Result<Vec<Device>, UsageError> {
    match cuda::device_count() {
        0 => Err(UsageError::new(
            "--device all: no CUDA device found (no GPU, or no NVIDIA driver); use --device cpu to measure on the CPU",
        )),
        n => Ok((0..n).map(Device::Cuda).collect()),
    }
}

/// One line of `vramprobe devices`.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceInfo {
    pub device: Device,
    pub name: String,
    pub total_bytes: Option<u64>,
    pub detail: String,
}

/// Every device this machine offers, CPU first.
pub fn list() -> Vec<DeviceInfo> {
    let mut out = vec![cpu::info()];
    out.extend(cuda::list());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_requests_parse() {
        assert_eq!("auto".parse::<DeviceRequest>().unwrap(), DeviceRequest::Auto);
        assert_eq!("cpu".parse::<DeviceRequest>().unwrap(), DeviceRequest::Cpu);
        assert_eq!("cuda".parse::<DeviceRequest>().unwrap(), DeviceRequest::Cuda(0));
        assert_eq!("cuda:3".parse::<DeviceRequest>().unwrap(), DeviceRequest::Cuda(3));
        for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", ""] {
            assert!(bad.parse::<DeviceRequest>().is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn devices_round_trip_through_text() {
        for d in [Device::Cpu, Device::Cuda(2)] {
            assert_eq!(Device::try_from(d.to_string()).unwrap(), d);
        }
    }
}
