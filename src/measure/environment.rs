//! The environment a run was measured in, recorded in report.json.
use crate::measure::device::nvml::Nvml;
use crate::record::environment::Environment;

fn uname() -> (String, String) {
    // SAFETY: uname fills the struct we hand it; fields are NUL-terminated.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return ("unknown".into(), "unknown".into());
    }
    let field = |f: &[libc::c_char]| unsafe { std::ffi::CStr::from_ptr(f.as_ptr()) }.to_string_lossy().into_owned();
    (format!("{} {} {}", field(&u.sysname), field(&u.release), field(&u.machine)), field(&u.nodename))
}

/// This host's name, as the kernel knows it.
pub fn hostname() -> String {
    uname().1
}

/// The tch release this build uses (tch pins its libtorch version); the GPU
/// kit builds with 0.24 for torch 2.11 (scripts/build-gpu-kit).
pub const TCH_VERSION: &str = env!("VRAMPROBE_TCH_VERSION");

pub fn capture() -> Environment {
    let (os, hostname) = uname();
    let versions = Nvml::open().map(|n| n.versions()).unwrap_or_default();
    Environment {
        vramprobe_version: env!("CARGO_PKG_VERSION").into(),
        // A build without the built-in models links no libtorch: a command runs its own torch.
        torch_version: crate::measure::linked::torch_version().unwrap_or_else(|| "not linked".into()),
        tch_version: if crate::measure::linked::LINKED { TCH_VERSION.into() } else { "not linked".into() },
        torch_cuda_version: crate::measure::linked::cuda_runtime_version(),
        nvidia_driver_version: versions.driver,
        cuda_driver_version: versions.cuda_driver,
        os,
        hostname,
        cpu_model: crate::measure::device::cpu::model_name(),
        cpu_threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    }
}

/// Now as `2026-12-02T16:35:21Z`, and a folder-friendly `20261202-163521`.
pub fn utc_now() -> (String, String) {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (y, mo, d, h, mi, s) = civil_from_unix(secs);
    (format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"), format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}"))
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_unix(secs: u64) -> (i64, u32, u32, u32, u32, u32) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, (rem / 3600) as u32, (rem % 3600 / 60) as u32, (rem % 60) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_time_converts_to_the_calendar() {
        assert_eq!(civil_from_unix(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(civil_from_unix(1_796_229_321), (2026, 12, 2, 16, 35, 21));
        assert_eq!(civil_from_unix(951_782_400), (2000, 2, 29, 0, 0, 0));
    }
}
