//! The CPU as a device: exact bytes held by libtorch (through the shim's
//! host tracker), the process's peak RSS, and the machine's memory.
use super::{Device, DeviceInfo};

/// Peak resident set size of this process, in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    // SAFETY: getrusage only writes into the struct we hand it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    // Linux reports kilobytes.
    Some(usage.ru_maxrss.max(0) as u64 * 1024)
}

/// A field of /proc/meminfo, in bytes.
fn meminfo(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text, field)
}

fn parse_meminfo(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    })
}

/// Physical memory of the machine: the CPU's capacity.
pub fn total_memory_bytes() -> Option<u64> {
    meminfo("MemTotal")
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':']).to_string()))
        })
        .unwrap_or_else(|| "CPU".into())
}

pub fn info() -> DeviceInfo {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    DeviceInfo {
        device: Device::Cpu,
        name: cpu_name(),
        total_bytes: total_memory_bytes(),
        detail: format!("{threads} threads; torch {}", crate::shim::torch_version()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_are_read_in_bytes() {
        let text = "MemTotal:       24576000 kB\nMemFree:         1000 kB\n";
        assert_eq!(parse_meminfo(text, "MemTotal"), Some(24_576_000 * 1024));
        assert_eq!(parse_meminfo(text, "MemFree"), Some(1_024_000));
        assert_eq!(parse_meminfo(text, "Mem"), None);
    }
}
