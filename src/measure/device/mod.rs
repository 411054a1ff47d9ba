//! Where a trial runs and how its memory is read: the CPU through exact host
//! tracking, CUDA through the caching allocator's counters plus NVML (the
//! allocator's model, to predict a GPU's reserved bytes from a trace, is
//! record/caching_allocator.rs).
pub mod cpu;
pub mod cuda;
pub mod nvml;

use serde::Serialize;

use crate::error::UsageError;
use crate::record::device::{CapacityLimit, Device, DeviceRequest};

/// The limit for `capacity` on `device`; none without a capacity. A CUDA
/// capacity above the device's memory is the user's mistake.
pub fn capacity_limit(device: Device, capacity: Option<u64>) -> Result<CapacityLimit, UsageError> {
    Ok(match (device, capacity) {
        (_, None) => CapacityLimit::default(),
        (Device::Cpu, Some(bytes)) => CapacityLimit { cpu_bytes: Some(bytes), cuda_fraction: None },
        (Device::Cuda(i), Some(bytes)) => CapacityLimit {
            cpu_bytes: None,
            cuda_fraction: Some(cuda::emulation_fraction(i, bytes).map_err(UsageError::new)?),
        },
    })
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
/// The devices a sweep on `device` runs trials on beside its own, up to
/// `wanted` more (`None`: every one there is): on the CPU, more processes;
/// on CUDA, the other GPUs of the same kind (name and memory) that no
/// process is using. The second value says what fell short.
pub fn beside(device: Device, wanted: Option<u32>) -> (Vec<Device>, Option<String>) {
    match device {
        Device::Cpu => (vec![Device::Cpu; wanted.unwrap_or(1).saturating_sub(1) as usize], None),
        Device::Cuda(own) => {
            let gpus: Vec<GpuSeen> = match nvml::Nvml::open() {
                Ok(n) => (0..n.device_count())
                    .map(|i| GpuSeen { index: i, kind: n.name_and_total(i).ok(), busy: n.busy(i) })
                    .collect(),
                Err(_) => Vec::new(),
            };
            idle_twins(own, &gpus, wanted)
        }
    }
}

/// What NVML shows of one GPU, for choosing where trials may run.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSeen {
    pub index: usize,
    /// Name and total memory.
    pub kind: Option<(String, u64)>,
    pub busy: bool,
}

/// The GPUs of `own`'s kind that nobody uses, `own` left out, up to
/// `wanted - 1` of them; and a note when fewer than asked are free.
pub fn idle_twins(own: usize, gpus: &[GpuSeen], wanted: Option<u32>) -> (Vec<Device>, Option<String>) {
    let kind = gpus.iter().find(|g| g.index == own).and_then(|g| g.kind.clone());
    let twins: Vec<Device> = gpus
        .iter()
        .filter(|g| g.index != own && !g.busy && kind.is_some() && g.kind == kind)
        .map(|g| Device::Cuda(g.index))
        .collect();
    let more = wanted.map_or(twins.len(), |w| w.saturating_sub(1) as usize);
    let note = (twins.len() < more).then(|| {
        format!(
            "--parallel {}: only {} other idle GPU(s) of cuda:{own}'s kind: {} trials at a time",
            more + 1,
            twins.len(),
            twins.len() + 1
        )
    });
    (twins.into_iter().take(more).collect(), note)
}

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

    #[test]
    fn trials_go_beside_only_on_idle_gpus_of_the_same_kind() {
        let h100 = Some(("H100".to_string(), 80u64 << 30));
        let gpu = |index, kind: &Option<(String, u64)>, busy| GpuSeen { index, kind: kind.clone(), busy };
        let gpus = [
            gpu(0, &h100, false),
            gpu(1, &h100, true),
            gpu(2, &Some(("A10".to_string(), 24 << 30)), false),
            gpu(3, &h100, false),
            gpu(4, &None, false),
        ];
        // Every idle twin by default; never a busy one, another kind, or one NVML cannot name.
        assert_eq!(idle_twins(0, &gpus, None), (vec![Device::Cuda(3)], None));
        assert_eq!(idle_twins(3, &gpus, Some(2)), (vec![Device::Cuda(0)], None));
        let (twins, note) = idle_twins(0, &gpus, Some(4));
        assert_eq!(twins, vec![Device::Cuda(3)]);
        assert!(note.unwrap().contains("only 1 other idle GPU"));
        assert_eq!(idle_twins(0, &gpus, Some(1)), (vec![], None));
        assert_eq!(beside(Device::Cpu, Some(3)).0, vec![Device::Cpu, Device::Cpu]);
        assert_eq!(beside(Device::Cpu, None).0, vec![]);
    }
}
