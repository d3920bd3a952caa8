//! How much one command may add to the file system its worktree lives on (issue 41 point 3).
//!
//! Three bounds, each closing what the others leave open:
//! - a single file is at most the growth bound (`RLIMIT_FSIZE`, set with the other rlimits):
//!   a `fallocate -l 20G` is refused by the kernel, however fast;
//! - the file system's used space is polled every [`POLL`] (`statvfs`, about a microsecond);
//!   once it has grown past the bound, the files *this command* wrote are summed (those under
//!   the worktree and the writable paths whose inode changed since it started: `ctime`,
//!   which no command can set back) and the command is stopped only if they pass the bound —
//!   another run writing to the same file system does not count against it;
//! - whatever the attribution, the command is stopped before the disk fills: once the file
//!   system has less than [`reserve`] of what was free at the start, it stops (this also
//!   catches writes to files already unlinked, which no walk can see).
//!
//! The worst overshoot is what the command's writers add in one poll plus the time to kill
//! them: at 2 GB/s, about 20 MB plus the kill (`docs/ARCHITECTURE.md` states the measured
//! figure; the sandbox test asserts ≤ 256 MiB with many writers at full speed).
//!
//! It must not decide what a command may write (that is the sandbox's view) nor kill it (the
//! executor does, with everything else it stops a command for).

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How often the file system's used space is read.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// How far behind the real clock the kernel's inode times may be.
const CLOCK_SLACK: Duration = Duration::from_millis(20);

/// Why a command was stopped for what it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Overgrown {
    /// The files it wrote passed the bound: `grew` bytes.
    Bound { grew: u64, bound: u64 },
    /// The file system came within its reserve of full: `free` bytes left.
    DiskFull { free: u64, reserve: u64 },
}

impl Overgrown {
    /// The line the tool result and the report show.
    pub(crate) fn message(&self) -> String {
        match self {
            Overgrown::Bound { grew, bound } => format!(
                "stopped: the worktree grew by {} MiB, past the bound of {} MiB per command",
                grew >> 20,
                bound >> 20
            ),
            Overgrown::DiskFull { free, reserve } => format!(
                "stopped: the file system holding the worktree was nearly full ({} MiB free, \
                 below the {} MiB kept free for the machine)",
                free >> 20,
                reserve >> 20
            ),
        }
    }
}

/// Space of the file system holding a path: used and available to unprivileged users, bytes.
#[derive(Debug, Clone, Copy)]
struct Space {
    used: u64,
    avail: u64,
}

fn space(p: &Path) -> Option<Space> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data; all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs writes into a struct we own.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(Space {
        used: st.f_blocks.saturating_sub(st.f_bfree) * st.f_frsize,
        avail: st.f_bavail * st.f_frsize,
    })
}

/// What is kept free for the machine, from what was free when the command started: a
/// quarter of it, at most 256 MiB.
pub(crate) fn reserve(avail_at_start: u64) -> u64 {
    (avail_at_start / 4).min(256 << 20)
}

/// Resolves once the command started now has written more than `bound` bytes under `roots`
/// (the worktree and the writable paths), or the file system holding `roots[0]` came within
/// its reserve of full; never when the file system cannot be read.
pub(crate) async fn watch(roots: Vec<PathBuf>, bound: u64) -> Overgrown {
    let started = SystemTime::now();
    let Some(first) = roots.first().and_then(|r| space(r)) else {
        return std::future::pending().await;
    };
    let reserve = reserve(first.avail);
    // Growth of the file system not ours (another run's), learned at each walk.
    let mut others = 0u64;
    loop {
        tokio::time::sleep(POLL).await;
        let Some(now) = space(&roots[0]) else {
            continue;
        };
        if let Some(full) = nearly_full(now, first, reserve) {
            return full;
        }
        let grown = now.used.saturating_sub(first.used);
        if grown.saturating_sub(others) <= bound {
            continue;
        }
        let walk_roots = roots.clone();
        let walk = tokio::task::spawn_blocking(move || written_since(&walk_roots, started));
        tokio::pin!(walk);
        // A command may have made the walk slow (a million small files): the disk is still
        // watched while it runs.
        let ours = loop {
            tokio::select! {
                r = &mut walk => break r.unwrap_or(u64::MAX),
                () = tokio::time::sleep(POLL) => {
                    if let Some(full) = space(&roots[0]).and_then(|n| nearly_full(n, first, reserve)) {
                        return full;
                    }
                }
            }
        };
        if ours > bound {
            return Overgrown::Bound { grew: ours, bound };
        }
        others = grown.saturating_sub(ours);
    }
}

/// The stop for a file system within its reserve of full, once the command has added to it.
fn nearly_full(now: Space, first: Space, reserve: u64) -> Option<Overgrown> {
    (now.avail < reserve && now.used > first.used).then_some(Overgrown::DiskFull {
        free: now.avail,
        reserve,
    })
}

/// Bytes allocated to the regular files under `roots` whose inode changed at or after
/// `since`, each inode once, without following links or leaving a root's file system.
pub(crate) fn written_since(roots: &[PathBuf], since: SystemTime) -> u64 {
    // The kernel stamps inodes from a coarse clock, up to a tick behind the real one: a
    // file written just after `since` may carry a time just before it.
    let since = since
        .checked_sub(CLOCK_SLACK)
        .unwrap_or(since)
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or((0, 0), |d| {
            (d.as_secs() as i64, i64::from(d.subsec_nanos()))
        });
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut total = 0u64;
    for root in roots {
        let Ok(meta) = std::fs::symlink_metadata(root) else {
            continue;
        };
        let dev = meta.dev();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(m) = e.metadata() else { continue };
                if m.dev() != dev {
                    continue;
                }
                if m.is_dir() {
                    stack.push(e.path());
                } else if m.is_file()
                    && (m.ctime(), m.ctime_nsec()) >= since
                    && seen.insert((m.dev(), m.ino()))
                {
                    total = total.saturating_add(m.blocks() * 512);
                }
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_changed_since_the_start_counts_each_inode_once() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().to_path_buf();
        std::fs::write(root.join("old"), vec![1u8; 1 << 20]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let start = SystemTime::now();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/new"), vec![1u8; 2 << 20]).unwrap();
        std::fs::hard_link(root.join("sub/new"), root.join("link")).unwrap();
        let n = written_since(std::slice::from_ref(&root), start);
        assert!((2 << 20..3 << 20).contains(&n), "{n}");
    }

    #[test]
    fn the_reserve_is_a_quarter_of_what_was_free_at_most_256_mib() {
        assert_eq!(reserve(100 << 20), 25 << 20);
        assert_eq!(reserve(100 << 30), 256 << 20);
    }
}
