//! Folders and secrets no other account can reach. On a shared server a
//! trial's spec, its records (what a verdict is read from), the hook the
//! job's Python imports and the pre-imported interpreter's socket must stay
//! the user's own: each lives in a folder only this user can enter, made
//! fresh (never a guessable name that someone else may have made first), or
//! an existing folder of the user's own that nobody else can write to.
//! docs/security.md says what crosses a trust boundary and how it is held.
use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Mode bits that let another account write: group and others.
const WRITABLE_BY_OTHERS: u32 = 0o022;

/// The effective user this process runs as.
pub fn own_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A new folder with a random name under the system's temp folder (or
/// `base`), mode 0700; removed when the value is dropped.
pub fn scratch(prefix: &str, base: Option<&Path>) -> io::Result<tempfile::TempDir> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix).permissions(fs::Permissions::from_mode(0o700));
    match base {
        Some(dir) => builder.tempdir_in(dir),
        None => builder.tempdir(),
    }
}

/// Why `path` (which exists) is not private enough to trust, if it is not:
/// owned by another account, or writable by the group or by others.
pub fn untrusted(path: &Path, what: &str) -> Option<String> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return Some(format!("{what} {} cannot be read: {e}", path.display())),
    };
    if meta.file_type().is_symlink() {
        return Some(format!("{what} {} is a symbolic link", path.display()));
    }
    if meta.uid() != own_uid() {
        return Some(format!(
            "{what} {} is owned by uid {}, not by you (uid {})",
            path.display(),
            meta.uid(),
            own_uid()
        ));
    }
    let mode = meta.mode() & 0o777;
    (mode & WRITABLE_BY_OTHERS != 0).then(|| {
        format!("{what} {} is writable by other accounts (mode {mode:03o}); run `chmod go-w` on it", path.display())
    })
}

/// Makes `dir` a folder of this user's that nobody else can enter: created
/// with mode 0700 when missing (its parents as the umask says), or, when it
/// exists, refused unless it is this user's own, then narrowed to 0700.
pub fn own_dir(dir: &Path) -> io::Result<()> {
    if create_0700(dir)? {
        return Ok(());
    }
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != own_uid() {
        return Err(io::Error::other(format!(
            "{} exists and is not a folder of your own: refusing to run a trial in it",
            dir.display()
        )));
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Creates `dir` with mode 0700 (its parents as the umask says): true when
/// made now, false when it was there already.
fn create_0700(dir: &Path) -> io::Result<bool> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)?;
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// vramprobe's cache (the hook the job's Python imports first):
/// `VRAMPROBE_CACHE`, else `~/.cache/vramprobe`; never a shared folder
/// ([`trusted_dir`] checks it before anything is run from it).
pub fn cache_dir() -> io::Result<PathBuf> {
    match (std::env::var_os("VRAMPROBE_CACHE"), std::env::var_os("HOME")) {
        (Some(dir), _) if !dir.is_empty() => Ok(PathBuf::from(dir)),
        (_, Some(home)) if !home.is_empty() => Ok(PathBuf::from(home).join(".cache/vramprobe")),
        _ => {
            Err(io::Error::other("HOME is not set: set VRAMPROBE_CACHE to a folder of your own for vramprobe's cache"))
        }
    }
}

/// Creates `dir` with mode 0700 when missing; an existing one must pass
/// [`untrusted`]. The error is one line with the reason.
pub fn trusted_dir(dir: &Path, what: &str) -> io::Result<()> {
    create_0700(dir).map_err(|e| io::Error::other(format!("cannot create {what} {}: {e}", dir.display())))?;
    match untrusted(dir, what) {
        Some(why) => Err(io::Error::other(format!("{why}; vramprobe will not run code from it"))),
        None => Ok(()),
    }
}

/// A secret of 32 random bytes, as hex: what the pre-imported interpreter
/// asks of every request.
pub fn secret() -> io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_folders_are_fresh_and_private() {
        let base = tempfile::tempdir().unwrap();
        let a = scratch("vramprobe-check-", Some(base.path())).unwrap();
        let b = scratch("vramprobe-check-", Some(base.path())).unwrap();
        assert_ne!(a.path(), b.path());
        assert_eq!(fs::metadata(a.path()).unwrap().mode() & 0o777, 0o700);
        let path = a.path().to_path_buf();
        drop(a);
        assert!(!path.exists());
    }

    #[test]
    fn a_group_writable_cache_is_refused_with_its_reason() {
        let base = tempfile::tempdir().unwrap();
        let cache = base.path().join("cache");
        trusted_dir(&cache, "vramprobe's cache").unwrap();
        assert_eq!(fs::metadata(&cache).unwrap().mode() & 0o777, 0o700);
        fs::set_permissions(&cache, fs::Permissions::from_mode(0o775)).unwrap();
        let err = trusted_dir(&cache, "vramprobe's cache").unwrap_err().to_string();
        assert!(err.contains("writable by other accounts") && err.contains("775"), "{err}");
        assert_eq!(err.lines().count(), 1);
        // Readable by others is fine: nobody else can change what runs.
        fs::set_permissions(&cache, fs::Permissions::from_mode(0o755)).unwrap();
        trusted_dir(&cache, "vramprobe's cache").unwrap();
    }

    #[test]
    fn a_link_or_a_folder_of_another_account_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let target = base.path().join("target");
        fs::create_dir(&target).unwrap();
        let link = base.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(untrusted(&link, "x").unwrap().contains("symbolic link"));
        assert!(own_dir(&link).is_err());
        if own_uid() == 0 {
            std::os::unix::fs::chown(&target, Some(65534), None).unwrap();
            assert!(untrusted(&target, "x").unwrap().contains("owned by uid 65534"));
            assert!(own_dir(&target).is_err());
        }
    }

    #[test]
    fn an_existing_trial_folder_of_ours_is_narrowed_to_0700() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("runs/001-batch-8");
        own_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        own_dir(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn secrets_differ() {
        let (a, b) = (secret().unwrap(), secret().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }
}
