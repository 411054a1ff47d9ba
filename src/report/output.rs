//! The run folder and atomic file writes: a file is written to a temporary
//! name in the same folder, synced, then renamed over the target, so a reader
//! (or a crash) never sees a half-written file.
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::error::UsageError;

/// Writes `bytes` to `path` atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    replace_atomically(path, |tmp| Ok(fs::File::create(tmp)?.write_all(bytes)?))
}

/// Replaces `path` atomically with what `write` puts at the temporary path
/// it is given (in the same folder): synced, then renamed over `path`; on
/// any failure the temporary file is removed and `path` is untouched.
pub fn replace_atomically(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // A fresh name made with O_EXCL (never one guessable in advance, which
    // someone else could have made first), with the umask's usual mode.
    let result = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(anyhow::Error::from)
        .and_then(|tmp| {
            write(tmp.path())?;
            fs::File::open(tmp.path())?.sync_all()?;
            tmp.persist(path).map_err(|e| e.error)?;
            Ok(())
        });
    result.with_context(|| format!("writing {}", path.display()))
}

/// Writes each (name, bytes) into `dir`, each file atomically.
pub fn write_files(dir: &Path, files: &[(&str, Vec<u8>)]) -> Result<()> {
    for (name, bytes) in files {
        write_atomic(&dir.join(name), bytes)?;
    }
    Ok(())
}

/// Creates a new folder `name` in `parent` (then `name-2`, `name-3`...):
/// claimed with an atomic mkdir, so two runs never share one.
pub fn claim_new_dir(parent: &Path, name: &str) -> Result<PathBuf> {
    let unusable = |dir: &Path, e: &dyn std::fmt::Display| {
        UsageError::new(format!("cannot write to the output folder {}: {e}", dir.display()))
    };
    fs::create_dir_all(parent).map_err(|e| unusable(&parent.join(name), &e))?;
    let mut n = 1;
    loop {
        let dir = if n == 1 { parent.join(name) } else { parent.join(format!("{name}-{n}")) };
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(unusable(&dir, &e).into()),
        }
    }
}

/// Creates the output folder: `--out DIR` as given, or a new timestamped
/// folder under `runs/`. Two runs never share a folder: a new folder is
/// claimed with an atomic mkdir, and an existing `--out` that holds files is
/// refused unless `force`. Checks it is writable before any trial runs.
pub fn prepare_out_dir(out: Option<&Path>, model: &str, stamp: &str, force: bool) -> Result<PathBuf> {
    let unusable = |dir: &Path, e: &dyn std::fmt::Display| {
        UsageError::new(format!("cannot write to the output folder {}: {e}", dir.display()))
    };
    let dir = match out {
        Some(dir) => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent).map_err(|e| unusable(dir, &e))?;
            }
            match fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holds_files = fs::read_dir(dir).map(|mut d| d.next().is_some()).unwrap_or(true);
                    if holds_files && !force {
                        return Err(UsageError::new(format!(
                            "the output folder {} already exists and holds files: choose another --out, or pass --force to write into it",
                            dir.display()
                        ))
                        .into());
                    }
                }
                Err(e) => return Err(unusable(dir, &e).into()),
            }
            dir.to_path_buf()
        }
        None => claim_new_dir(Path::new("runs"), &format!("{stamp}-{model}"))?,
    };
    // Removed when dropped.
    tempfile::Builder::new().prefix(".write-test-").tempfile_in(&dir).map_err(|e| unusable(&dir, &e))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.csv");
        write_atomic(&path, b"old").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn atomic_writes_keep_the_umasks_mode() {
        use std::os::unix::fs::MetadataExt;
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let umask = status.lines().find_map(|l| l.strip_prefix("Umask:")).unwrap().trim();
        let umask = u32::from_str_radix(umask, 8).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sweep.csv");
        write_atomic(&path, b"x").unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o666 & !umask);
    }

    #[test]
    fn a_missing_folder_is_an_error_not_a_partial_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/plan.csv");
        assert!(write_atomic(&path, b"x").is_err());
        assert!(!path.exists());
    }

    #[test]
    fn an_out_dir_with_files_is_refused_without_force() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("run");
        assert_eq!(prepare_out_dir(Some(&out), "m", "s", false).unwrap(), out);
        // An empty folder (just made, or made by the user) is fine.
        assert!(prepare_out_dir(Some(&out), "m", "s", false).is_ok());
        fs::write(out.join("plan.csv"), b"x").unwrap();
        let err = prepare_out_dir(Some(&out), "m", "s", false).unwrap_err();
        assert!(err.is::<UsageError>() && err.to_string().contains("--force"), "{err}");
        assert!(prepare_out_dir(Some(&out), "m", "s", true).is_ok());
    }

    #[test]
    fn an_unwritable_out_dir_is_a_usage_error() {
        let err = prepare_out_dir(Some(Path::new("/proc/vramprobe-out")), "m", "s", false).unwrap_err();
        assert!(err.is::<UsageError>(), "{err}");
    }
}
