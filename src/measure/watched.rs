//! `vramprobe exec`'s real job, run whole under the hook's watch
//! (src/measure/hook/vramprobe_watch.py): the job's own terminal, exit code
//! and signals, with its phase peaks, growth forecasts and out-of-memory
//! post-mortem written into a private records folder.
use std::io;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::Duration;

use crate::measure::command::install_hook;
use crate::measure::preimport::python_path;
use crate::measure::private;
use crate::record::trial::SPEC_FILE;
use crate::record::watch::{ProcessWatch, WatchSpec};

/// Runs `argv` to its end with the watch armed, its records in `records`
/// (made private here). SIGINT from a terminal reaches the job directly (it
/// shares vramprobe's process group); a SIGTERM sent to vramprobe is passed
/// on to it. Returns the job's exit status.
pub fn run(argv: &[String], records: &Path, device: &str, batch: u64, watch: WatchSpec) -> io::Result<ExitStatus> {
    private::own_dir(records)?;
    let spec = serde_json::json!({ "batch": batch, "device": device, "watch": watch });
    std::fs::write(records.join(SPEC_FILE), serde_json::to_vec_pretty(&spec)?)?;
    let hook = install_hook(&private::cache_dir()?)?;
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env("PYTHONPATH", python_path(&hook))
        .env("VRAMPROBE_RECORDS_DIR", records)
        .env("VRAMPROBE_BATCH", batch.to_string())
        .env_remove("VRAMPROBE_HOOK_CLAIM")
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("could not run {}: {e}", argv[0])))?;
    let mut passed_on = false;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if !passed_on && crate::interrupt::received() == Some(libc::SIGTERM) {
            // SAFETY: kill(2) on the child's own pid, which has not been reaped.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            passed_on = true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What the watch saw, one entry per process that wrote records: the plain
/// process's, then each rank's in rank order.
pub fn read(records: &Path) -> Vec<ProcessWatch> {
    let mut found: Vec<(Option<u32>, std::path::PathBuf)> = std::fs::read_dir(records)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rank = match name.as_str() {
                "records.jsonl" => None,
                _ => Some(name.strip_prefix("records-rank-")?.strip_suffix(".jsonl")?.parse().ok()?),
            };
            Some((rank, entry.path()))
        })
        .collect();
    found.sort();
    found
        .into_iter()
        .map(|(rank, path)| ProcessWatch::parse(rank, &std::fs::read_to_string(path).unwrap_or_default()))
        .collect()
}
