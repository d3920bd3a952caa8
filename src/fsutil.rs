//! Files the agent writes and paths it resolves: writes that a crash leaves old or new,
//! never torn; and resolution by the kernel (`openat2`) beneath a directory, so a symbolic
//! link someone else planted cannot redirect what the agent opens or binds.

use std::ffi::CString;
use std::io::{self, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// How far a write must get before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// Atomic for any reader and against `kill -9`; durable against power loss only once a
    /// later sync has run. For the many saves inside one step.
    Replace,
    /// Also fsynced, file and directory: the new content survives a power loss.
    Durable,
}

/// Write `bytes` to `path` through a temporary file in the same directory and a rename,
/// creating the directory if needed.
pub(crate) fn write_atomic(
    path: &Path,
    bytes: &[u8],
    durability: Durability,
) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    if durability == Durability::Durable {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    if durability == Durability::Durable
        && let Ok(d) = std::fs::File::open(dir)
    {
        let _ = d.sync_all();
    }
    Ok(())
}

/// `openat2(dir, rel, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | resolve)`: `rel` is
/// resolved by the kernel and never leaves `dir`, through `..` or a link.
#[allow(unsafe_code)]
pub(crate) fn openat2(
    dir: &OwnedFd,
    rel: &Path,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let c = CString::new(if rel.as_os_str().is_empty() {
        b".".to_vec()
    } else {
        rel.as_os_str().as_bytes().to_vec()
    })
    .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: `open_how` is plain integers; all-zero is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & libc::O_CREAT != 0 {
        mode as u64
    } else {
        0
    };
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS | resolve;
    loop {
        // SAFETY: `c` is a valid NUL-terminated string and `how` a valid `open_how` of the size
        // passed; the kernel returns a new descriptor we take ownership of, or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                c.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: the syscall succeeded, so `fd` is an open descriptor nobody else owns.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EAGAIN) || e.raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return Err(e);
    }
}

/// The directory `rel` beneath `base`, reached without following any symbolic link on the
/// way or at the end (`base` itself is the caller's and may be reached through links): the
/// source of a bind that something other than the agent made. A link anywhere in `rel` is
/// `ELOOP`, a file `ENOTDIR`, a `..` or an absolute `rel` `EXDEV`.
pub(crate) fn dir_without_links(base: &Path, rel: &Path) -> io::Result<OwnedFd> {
    let root = OwnedFd::from(std::fs::File::open(base)?);
    openat2(
        &root,
        rel,
        // No O_NOFOLLOW: it would open a final link itself (and fail as "not a directory");
        // RESOLVE_NO_SYMLINKS refuses a link at every component, the last included.
        libc::O_PATH | libc::O_DIRECTORY,
        0,
        libc::RESOLVE_NO_SYMLINKS,
    )
}

/// What [`dir_without_links`] refused, in words for a person.
pub(crate) fn link_refusal(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "it is (or passes through) a symbolic link".into(),
        Some(libc::ENOTDIR) => "it is not a directory".into(),
        Some(libc::EXDEV) => "it leads out of its directory".into(),
        Some(libc::ENOENT) => "it does not exist".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/file.json");
        write_atomic(&p, b"one", Durability::Durable).unwrap();
        write_atomic(&p, b"two", Durability::Replace).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("file.json")]);
    }

    #[test]
    fn a_link_anywhere_on_the_way_is_refused_and_a_plain_directory_is_not() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path();
        std::fs::create_dir_all(base.join("outputs/node_modules/x")).unwrap();
        std::os::unix::fs::symlink("/", base.join("outputs/root")).unwrap();
        std::os::unix::fs::symlink("node_modules", base.join("outputs/nm")).unwrap();
        std::fs::write(base.join("outputs/file"), "").unwrap();
        assert!(dir_without_links(base, Path::new("outputs/node_modules")).is_ok());
        assert!(dir_without_links(base, Path::new("outputs/node_modules/x")).is_ok());
        for (rel, errno) in [
            ("outputs/root", libc::ELOOP),
            ("outputs/nm", libc::ELOOP),
            ("outputs/nm/x", libc::ELOOP),
            ("outputs/file", libc::ENOTDIR),
            ("outputs/../..", libc::EXDEV),
            ("/etc", libc::EXDEV),
        ] {
            let e = dir_without_links(base, Path::new(rel)).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(errno), "{rel}: {e}");
            assert!(!link_refusal(&e).is_empty());
        }
    }
}
