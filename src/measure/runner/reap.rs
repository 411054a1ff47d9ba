//! Every process a trial started, found and killed however it was started.
//! A process group is not enough: torchrun starts each worker in a session
//! of its own. Each trial's environment carries a token; every descendant
//! inherits it (a launcher copies its environment to its workers), so the
//! token in `/proc/PID/environ` finds them all.

/// The environment variable that marks a trial's processes.
pub const TOKEN_VAR: &str = "VRAMPROBE_TRIAL_TOKEN";

/// A token no other trial on this machine has.
pub fn token(trial: u32) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}-{trial}-{nanos}", std::process::id())
}

/// The live processes whose environment has `TOKEN_VAR=token` (a zombie's
/// environment reads empty: it holds no memory and needs no kill). A process
/// in the middle of `execve` also reads empty for a moment: the kernel swaps
/// in its new memory before it writes the new environment there.
pub fn processes_with(token: &str) -> Vec<i32> {
    let needle = format!("{TOKEN_VAR}={token}\0").into_bytes();
    let own = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != own)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

/// Kills every process of the trial, again until none is left: one may be
/// forking while the others die, or be mid-`execve` and unseen, so it stops
/// only after two empty scans in a row.
pub fn kill_all(token: &str) {
    let mut empty_scans = 0;
    for _ in 0..20 {
        let pids = processes_with(token);
        if pids.is_empty() {
            empty_scans += 1;
            if empty_scans == 2 {
                return;
            }
        } else {
            empty_scans = 0;
        }
        for pid in pids {
            // SAFETY: kill(2) on a process that carries this trial's token.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_in_a_session_of_its_own_is_found_and_killed() {
        use std::os::unix::process::CommandExt;
        let token = token(7);
        let mut child =
            std::process::Command::new("sleep").arg("30").env(TOKEN_VAR, &token).process_group(0).spawn().unwrap();
        let pid = child.id() as i32;
        // The child may still be inside execve, its environment not yet readable.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while processes_with(&token).is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(processes_with(&token), vec![pid]);
        kill_all(&token);
        assert!(child.wait().unwrap().code().is_none(), "killed by a signal");
        assert!(processes_with(&token).is_empty());
    }
}
