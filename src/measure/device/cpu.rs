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

/// The first `model name` in /proc/cpuinfo's text.
fn model_name_from(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.trim_start().strip_prefix(':').map(|m| m.trim().to_string()))
        .filter(|m| !m.is_empty())
}

/// This machine's CPU model name ("CPU" where /proc/cpuinfo has none).
pub fn model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| model_name_from(&text))
        .unwrap_or_else(|| "CPU".into())
}

pub fn info() -> DeviceInfo {
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    DeviceInfo {
        device: Device::Cpu,
        name: model_name(),
        total_bytes: total_memory_bytes(),
        detail: match crate::measure::linked::torch_version() {
            Some(torch) => format!("{threads} threads; torch {torch}"),
            None => format!("{threads} threads"),
        },
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

    #[test]
    fn the_cpu_model_is_read_from_cpuinfo() {
        let intel = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\nflags\t: fpu\n";
        assert_eq!(model_name_from(intel).as_deref(), Some("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"));
        assert_eq!(model_name_from("model name\t: AMD EPYC\n").as_deref(), Some("AMD EPYC"));
        assert_eq!(model_name_from("processor\t: 0\n"), None);
        assert_eq!(model_name_from("model name\t: \n"), None);
    }
}
