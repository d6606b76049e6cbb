//! One server per data directory: `DIR/ternflow.lock`, held with an OS file lock (`flock`) for
//! the life of the process, released by the kernel however it ends (kill -9 included). Two
//! servers on one database would each keep their own fence and sequence counters over it.

use std::fs::File;
use std::path::Path;

/// Takes `DIR/ternflow.lock` (creating `DIR`), writing this process's id into it, or says which
/// process holds it. Keep the returned file open as long as the directory is in use.
///
/// # Errors
/// The directory is in use by another process, or the lock file cannot be opened.
pub fn lock_data_dir(dir: &Path) -> Result<File, String> {
    use std::io::{Read as _, Seek as _, Write as _};
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("ternflow.lock");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    match try_lock(&f) {
        Ok(true) => {
            let _ = f.set_len(0);
            let _ = f.rewind();
            let _ = writeln!(f, "{}", std::process::id());
            Ok(f)
        }
        Ok(false) => {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            Err(format!(
                "{} is in use by another ternflow serve (pid {}): one server per --data-dir \
                 (several servers share a queue through --store redis://…)",
                dir.display(),
                pid.trim()
            ))
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// An exclusive, non-blocking lock on `f`: `Ok(false)` when another holds it.
#[cfg(unix)]
fn try_lock(f: &File) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: flock on a file descriptor this File owns; it touches nothing else.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Elsewhere no lock is taken (the embedded store's one-server rule is then the operator's).
#[cfg(not(unix))]
fn try_lock(_f: &File) -> std::io::Result<bool> {
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_is_gone() {
        let d = tempfile::tempdir().unwrap();
        let first = lock_data_dir(d.path()).unwrap();
        let e = lock_data_dir(d.path()).unwrap_err();
        assert!(e.contains("in use by another ternflow serve"), "{e}");
        assert!(
            e.contains(&std::process::id().to_string()),
            "names the holder: {e}"
        );
        drop(first);
        lock_data_dir(d.path()).unwrap();
    }
}
