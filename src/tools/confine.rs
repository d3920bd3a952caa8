//! Path confinement: every path a tool touches is resolved beneath the worktree root by the
//! kernel (`openat2` with `RESOLVE_BENEATH`), never by string checks alone.
//!
//! A path is refused when it is absolute, climbs out with `..`, passes through a symlink that
//! leaves the root, or names anything inside a `.git` directory or file (the worktree's own or a
//! nested repository's). Symlinks inside the tree may be read through, but a write never
//! follows a symlink at the last component, so an edit cannot be redirected by a link the model
//! planted. After every open the real path of the descriptor is checked again, so a symlink to
//! `.git` inside the tree is caught too.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use crate::fsutil::openat2;

/// Largest file a tool reads into memory.
pub const MAX_READ_BYTES: u64 = 16 * 1024 * 1024;

/// A refusal the model can act on, or an I/O fault of the harness.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The path is not allowed; the message says why and what to do instead.
    #[error("{0}")]
    Refused(String),
    /// The path does not exist (or a parent is missing).
    #[error("{0} does not exist")]
    NotFound(String),
    /// Any other I/O failure on an allowed path.
    #[error("{path}: {source}")]
    Io {
        /// The path as the model gave it.
        path: String,
        /// The underlying error.
        source: io::Error,
    },
}

/// The worktree root, held open so every resolution starts from the same directory.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    path: PathBuf,
}

/// A checked, worktree-relative path (no `..`, no `.git`, not absolute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelPath(PathBuf);

impl RelPath {
    /// The path relative to the worktree root, `/`-separated.
    pub fn as_str(&self) -> String {
        self.0.to_string_lossy().into_owned()
    }

    /// The path as a `Path`.
    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// Whether this is the root itself.
    pub fn is_root(&self) -> bool {
        self.0.as_os_str().is_empty()
    }
}

fn is_git_name(name: &OsStr) -> bool {
    name.as_bytes().eq_ignore_ascii_case(b".git")
}

/// Check a model-supplied path lexically (see [`crate::policy::lexical_relative`]) and return
/// it normalized.
pub fn check_relative(path: &str) -> Result<RelPath, ConfineError> {
    crate::policy::lexical_relative(path)
        .map(RelPath)
        .map_err(|r| ConfineError::Refused(r.message(path)))
}

fn git_refusal(path: &str) -> ConfineError {
    ConfineError::Refused(crate::policy::PathRefusal::InGit.message(path))
}

fn io_err(path: &str, e: io::Error) -> ConfineError {
    match e.raw_os_error() {
        Some(libc::ENOENT) => ConfineError::NotFound(path.to_string()),
        Some(libc::EXDEV) => ConfineError::Refused(format!(
            "{path}: resolves outside the repository (through `..` or a symbolic link); only files inside the repository can be used"
        )),
        Some(libc::ELOOP) => ConfineError::Refused(format!(
            "{path}: is (or passes through) a symbolic link that cannot be followed here; edit the link's target path instead"
        )),
        Some(libc::ENOTDIR) => {
            ConfineError::Refused(format!("{path}: a parent is not a directory"))
        }
        Some(libc::EISDIR) => ConfineError::Refused(format!(
            "{path}: is a directory; give a file path (use list_files to see directories)"
        )),
        _ => ConfineError::Io {
            path: path.to_string(),
            source: e,
        },
    }
}

impl Root {
    /// Open the worktree root.
    pub fn open(path: &Path) -> io::Result<Self> {
        let f = File::open(path)?;
        if !f.metadata()?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", path.display()),
            ));
        }
        let path = std::fs::canonicalize(path)?;
        Ok(Self {
            dir: OwnedFd::from(f),
            path,
        })
    }

    /// The root's canonical path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the descriptor really is, relative to the root; refused if inside `.git` or
    /// (defensively) not beneath the root at all.
    fn verify(&self, fd: &OwnedFd, shown: &str) -> Result<RelPath, ConfineError> {
        let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| io_err(shown, e))?;
        let Ok(rel) = real.strip_prefix(&self.path) else {
            return Err(io_err(shown, io::Error::from_raw_os_error(libc::EXDEV)));
        };
        if rel.components().any(|c| is_git_name(c.as_os_str())) {
            return Err(git_refusal(shown));
        }
        Ok(RelPath(rel.to_path_buf()))
    }

    /// Resolve an existing path (file or directory) beneath the root, following in-tree
    /// symlinks; returns its real worktree-relative path and absolute path.
    pub fn resolve_existing(&self, path: &str) -> Result<(RelPath, PathBuf), ConfineError> {
        let rel = check_relative(path)?;
        let fd =
            openat2(&self.dir, rel.as_path(), libc::O_PATH, 0, 0).map_err(|e| io_err(path, e))?;
        let real = self.verify(&fd, path)?;
        let abs = self.path.join(real.as_path());
        Ok((real, abs))
    }

    /// Read a file beneath the root.
    pub fn read(&self, path: &str) -> Result<(RelPath, Vec<u8>), ConfineError> {
        let rel = check_relative(path)?;
        // O_NONBLOCK: opening a FIFO the model planted must not hang the run.
        let fd = openat2(
            &self.dir,
            rel.as_path(),
            libc::O_RDONLY | libc::O_NONBLOCK,
            0,
            0,
        )
        .map_err(|e| io_err(path, e))?;
        let real = self.verify(&fd, path)?;
        let mut f = File::from(fd);
        let meta = f.metadata().map_err(|e| io_err(path, e))?;
        if meta.is_dir() {
            return Err(io_err(path, io::Error::from_raw_os_error(libc::EISDIR)));
        }
        if !meta.is_file() {
            return Err(ConfineError::Refused(format!(
                "{path}: is not a regular file (a device, FIFO or socket); only files can be read"
            )));
        }
        if meta.len() > MAX_READ_BYTES {
            return Err(ConfineError::Refused(format!(
                "{path}: is {} bytes, larger than the {} bytes a tool reads; use search to find the lines you need",
                meta.len(),
                MAX_READ_BYTES
            )));
        }
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).map_err(|e| io_err(path, e))?;
        Ok((real, buf))
    }

    /// Open (creating missing directories beneath the root) the parent directory of `path`,
    /// returning it with the final component's name.
    fn parent(
        &self,
        path: &str,
        create: bool,
    ) -> Result<(OwnedFd, CString, RelPath), ConfineError> {
        let rel = check_relative(path)?;
        let Some(name) = rel.as_path().file_name() else {
            return Err(ConfineError::Refused(format!(
                "{path}: names the repository root; give a file path"
            )));
        };
        let parent = rel.as_path().parent().unwrap_or(Path::new(""));
        let mut dir = openat2(
            &self.dir,
            Path::new(""),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
            0,
        )
        .map_err(|e| io_err(path, e))?;
        for comp in parent.components() {
            let c = Path::new(comp.as_os_str());
            match openat2(&dir, c, libc::O_PATH | libc::O_DIRECTORY, 0, 0) {
                Ok(next) => dir = next,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create => {
                    let cname = CString::new(comp.as_os_str().as_bytes())
                        .map_err(|_| ConfineError::Refused(format!("{path}: invalid name")))?;
                    // SAFETY: `dir` is an open directory descriptor and `cname` a valid C string.
                    let rc = unsafe { libc::mkdirat(dir.as_raw_fd(), cname.as_ptr(), 0o755) };
                    if rc != 0 {
                        let e = io::Error::last_os_error();
                        if e.raw_os_error() != Some(libc::EEXIST) {
                            return Err(io_err(path, e));
                        }
                    }
                    dir = openat2(&dir, c, libc::O_PATH | libc::O_DIRECTORY, 0, 0)
                        .map_err(|e| io_err(path, e))?;
                }
                Err(e) => return Err(io_err(path, e)),
            }
        }
        let dir_rel = self.verify(&dir, path)?;
        let cname = CString::new(name.as_bytes())
            .map_err(|_| ConfineError::Refused(format!("{path}: invalid name")))?;
        Ok((dir, cname, RelPath(dir_rel.0.join(name))))
    }

    /// Write `content` to `path` (created with its parents if missing), never following a
    /// symlink at the last component. Returns the real relative path and whether it existed.
    /// `guard` is asked about the real path (after in-tree symlinks in the parents are
    /// resolved) before anything is written.
    pub fn write(
        &self,
        path: &str,
        content: &[u8],
        guard: &dyn Fn(&RelPath) -> Result<(), ConfineError>,
    ) -> Result<(RelPath, bool), ConfineError> {
        let (dir, name, real) = self.parent(path, true)?;
        guard(&real)?;
        let existed = self.leaf_kind(&dir, &name, path)?.is_some();
        let tmp_name = CString::new(
            format!(
                ".{}.{:016x}.git-agent-tmp",
                std::process::id(),
                fastrand::u64(..)
            )
            .into_bytes(),
        )
        .map_err(|_| ConfineError::Refused(format!("{path}: invalid name")))?;
        // Keep the existing file's permission bits.
        let mode = self.leaf_mode(&dir, &name).unwrap_or(0o644);
        // Write a temporary file beside the target, then rename over it: a reader never sees a
        // half-written file, and the rename replaces a symlink rather than writing through it.
        // SAFETY: valid directory descriptor and C string; the result is checked.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                tmp_name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode,
            )
        };
        if fd < 0 {
            return Err(io_err(path, io::Error::last_os_error()));
        }
        // SAFETY: `fd` was just returned by openat and is owned by nobody else.
        let mut f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        let written = f.write_all(content).and_then(|()| f.sync_all());
        drop(f);
        if let Err(e) = written {
            // SAFETY: as above.
            unsafe { libc::unlinkat(dir.as_raw_fd(), tmp_name.as_ptr(), 0) };
            return Err(io_err(path, e));
        }
        // SAFETY: both names are relative to the same valid directory descriptor.
        let rc = unsafe {
            libc::renameat(
                dir.as_raw_fd(),
                tmp_name.as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
            )
        };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: as above.
            unsafe { libc::unlinkat(dir.as_raw_fd(), tmp_name.as_ptr(), 0) };
            return Err(io_err(path, e));
        }
        Ok((real, existed))
    }

    /// Read a file for editing: like [`Root::read`] but refuses a symlink at the last component,
    /// so the edit lands on the file that was read.
    pub fn read_for_edit(&self, path: &str) -> Result<(RelPath, Vec<u8>), ConfineError> {
        let (dir, name, real) = self.parent(path, false)?;
        match self.leaf_kind(&dir, &name, path)? {
            None => return Err(ConfineError::NotFound(path.to_string())),
            Some(Leaf::Symlink) => {
                return Err(io_err(path, io::Error::from_raw_os_error(libc::ELOOP)));
            }
            Some(Leaf::Dir) => {
                return Err(io_err(path, io::Error::from_raw_os_error(libc::EISDIR)));
            }
            Some(Leaf::File) => {}
        }
        let fd = openat2(
            &dir,
            Path::new(OsStr::from_bytes(name.as_bytes())),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
            0,
        )
        .map_err(|e| io_err(path, e))?;
        let mut f = File::from(fd);
        let meta = f.metadata().map_err(|e| io_err(path, e))?;
        if !meta.is_file() {
            return Err(ConfineError::Refused(format!(
                "{path}: is not a regular file; only files can be edited"
            )));
        }
        if meta.len() > MAX_READ_BYTES {
            return Err(ConfineError::Refused(format!(
                "{path}: is {} bytes, too large to edit with edit_file",
                meta.len()
            )));
        }
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).map_err(|e| io_err(path, e))?;
        Ok((real, buf))
    }

    /// Delete a file (or a symlink itself, never its target). Directories are refused.
    /// `guard` is asked about the real path first, as for [`Root::write`].
    pub fn delete(
        &self,
        path: &str,
        guard: &dyn Fn(&RelPath) -> Result<(), ConfineError>,
    ) -> Result<RelPath, ConfineError> {
        let (dir, name, real) = self.parent(path, false)?;
        guard(&real)?;
        match self.leaf_kind(&dir, &name, path)? {
            None => Err(ConfineError::NotFound(path.to_string())),
            Some(Leaf::Dir) => Err(ConfineError::Refused(format!(
                "{path}: is a directory; delete_file removes files only"
            ))),
            Some(_) => {
                // SAFETY: valid directory descriptor and C string.
                let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) };
                if rc != 0 {
                    return Err(io_err(path, io::Error::last_os_error()));
                }
                Ok(real)
            }
        }
    }

    fn leaf_stat(&self, dir: &OwnedFd, name: &CString) -> io::Result<libc::stat> {
        // SAFETY: zeroed `stat` is a valid out-parameter; descriptor and name are valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc = unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st)
    }

    fn leaf_kind(
        &self,
        dir: &OwnedFd,
        name: &CString,
        path: &str,
    ) -> Result<Option<Leaf>, ConfineError> {
        match self.leaf_stat(dir, name) {
            Ok(st) => Ok(Some(match st.st_mode & libc::S_IFMT {
                libc::S_IFLNK => Leaf::Symlink,
                libc::S_IFDIR => Leaf::Dir,
                _ => Leaf::File,
            })),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(io_err(path, e)),
        }
    }

    fn leaf_mode(&self, dir: &OwnedFd, name: &CString) -> Option<u32> {
        let st = self.leaf_stat(dir, name).ok()?;
        ((st.st_mode & libc::S_IFMT) == libc::S_IFREG).then_some(st.st_mode & 0o7777)
    }
}

enum Leaf {
    File,
    Dir,
    Symlink,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_checks() {
        assert!(check_relative("src/main.rs").is_ok());
        assert_eq!(check_relative("a/./b/../c").unwrap().as_str(), "a/c");
        for bad in [
            "../../etc/passwd",
            "/etc/passwd",
            "a/../../x",
            ".git/config",
            "sub/.git/HEAD",
            ".GIT/config",
        ] {
            assert!(
                matches!(check_relative(bad), Err(ConfineError::Refused(_))),
                "{bad}"
            );
        }
    }
}
