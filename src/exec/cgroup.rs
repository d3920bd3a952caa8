//! A pids cgroup per command: the process limit that binds for root.
//!
//! `RLIMIT_NPROC` is not enforced for a process whose kernel uid is 0, even inside a user
//! namespace that maps it, so when the agent runs as root a fork bomb would only stop at the
//! machine's pid limit. Each command then runs in a cgroup with `pids.max`: normally the
//! cgroup of the executor's spawner (see `spawner`), which forks it there, or else a cgroup of
//! its own joined by the child before anything else. The cgroup also names every process the
//! command left behind (including ones that called `setsid`), so cleanup kills exactly those,
//! sparing the spawner.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where per-command cgroups are made.
#[derive(Debug, Clone)]
pub(crate) struct CgroupBase {
    dir: PathBuf,
    v2: bool,
    counter: std::sync::Arc<AtomicU64>,
}

/// One command's cgroup; removed on drop once empty.
#[derive(Debug)]
pub(crate) struct Cgroup {
    dir: PathBuf,
    v2: bool,
    /// `cgroup.procs`, as the child writes it.
    pub(crate) procs: CString,
    /// A process that belongs in the cgroup and is not the command's: the executor's
    /// spawner, which forks commands from inside it. Never counted or killed here.
    spare: Option<i32>,
}

impl CgroupBase {
    /// A writable hierarchy with the pids controller, if this process can use one (as root:
    /// the cgroup v2 root, or the v1 `pids` hierarchy).
    pub(crate) fn find() -> Option<Self> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let mut v1 = None;
        let mut v2 = None;
        for line in mountinfo.lines() {
            let (left, right) = line.split_once(" - ")?;
            let mountpoint = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let fstype = r.next()?;
            let _source = r.next();
            let opts = r.next().unwrap_or_default();
            if fstype == "cgroup2" && v2.is_none() {
                v2 = Some(PathBuf::from(mountpoint));
            } else if fstype == "cgroup" && opts.split(',').any(|o| o == "pids") {
                v1 = Some(PathBuf::from(mountpoint));
            }
        }
        if let Some(root) = v2 {
            let controllers =
                std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "pids") {
                let sub = root.join("cgroup.subtree_control");
                let enabled = std::fs::read_to_string(&sub)
                    .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"))
                    || std::fs::write(&sub, "+pids").is_ok();
                if enabled && let Some(b) = Self::make(root.join("git-agent"), true) {
                    return Some(b);
                }
            }
        }
        Self::make(v1?.join("git-agent"), false)
    }

    fn make(dir: PathBuf, v2: bool) -> Option<Self> {
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                // Leftovers of agents that are gone: remove the empty ones (a busy one
                // refuses and stays). A cgroup of a live agent is never touched, even when
                // empty: its command may be between the cgroup's creation and joining it.
                for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                    if is_orphan(&e.file_name().to_string_lossy()) {
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
            }
            Err(_) => return None,
        }
        if v2 {
            // Children of our directory need the controller enabled here too.
            let sub = dir.join("cgroup.subtree_control");
            let ok = std::fs::read_to_string(&sub)
                .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"))
                || std::fs::write(&sub, "+pids").is_ok();
            if !ok {
                return None;
            }
        }
        Some(Self {
            dir,
            v2,
            counter: std::sync::Arc::default(),
        })
    }

    /// A fresh cgroup limited to `max_pids` processes and threads.
    pub(crate) fn create(&self, max_pids: u64) -> std::io::Result<Cgroup> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        // Several executors may share a process: the random part keeps their names apart.
        let dir = self.dir.join(format!(
            "cmd-{}-{n}-{:016x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir(&dir)?;
        let cg = Cgroup {
            procs: CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                .map_err(std::io::Error::other)?,
            dir,
            v2: self.v2,
            spare: None,
        };
        std::fs::write(cg.dir.join("pids.max"), max_pids.to_string())?;
        Ok(cg)
    }
}

impl Cgroup {
    /// Leave `pid` (the spawner living in this cgroup) out of every count and kill.
    pub(crate) fn spare(&mut self, pid: i32) {
        self.spare = Some(pid);
    }

    /// Processes still in the cgroup, the spared one excepted.
    fn members(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .filter(|p| Some(*p) != self.spare)
            .collect()
    }

    /// SIGKILL everything in the cgroup (the spared process excepted), waiting at most
    /// about 100 ms; for drop paths that cannot await.
    pub(crate) fn kill_all_now(&self) {
        for _ in 0..100 {
            let members = self.members();
            if members.is_empty() {
                return;
            }
            for pid in members {
                // SAFETY: plain signal to a pid.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Whether no process is left in the cgroup (zombies already count as gone).
    pub(crate) fn is_empty(&self) -> bool {
        self.members().is_empty()
    }

    /// SIGKILL everything in the cgroup until it is empty (bounded).
    pub(crate) async fn kill_all(&self) {
        if self.v2 && self.spare.is_none() {
            let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        }
        for _ in 0..400 {
            let members = self.members();
            if members.is_empty() {
                return;
            }
            for pid in members {
                // SAFETY: plain signal to a pid.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tracing::warn!(cgroup = %self.dir.display(), "cgroup still has processes after SIGKILL");
    }

    /// Wait briefly until the killed processes are reaped, so the cgroup can be removed now;
    /// zombies left to a slow init are cleaned up in the background on drop.
    pub(crate) async fn drained(&self) {
        let rest = u64::from(self.spare.is_some());
        for _ in 0..5 {
            let current = std::fs::read_to_string(self.dir.join("pids.current"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok());
            if current.is_none_or(|c| c <= rest) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if std::fs::remove_dir(&self.dir).is_ok() {
            return;
        }
        // Killed processes not yet reaped by their (re)parent keep it busy for a while.
        let dir = self.dir.clone();
        let spawned = std::thread::Builder::new()
            .name("cgroup-cleanup".into())
            .spawn(move || {
                for _ in 0..300 {
                    std::thread::sleep(Duration::from_millis(100));
                    if std::fs::remove_dir(&dir).is_ok() {
                        return;
                    }
                }
                tracing::warn!(cgroup = %dir.display(), "cgroup left behind (still busy)");
            });
        if spawned.is_err() {
            tracing::warn!(cgroup = %self.dir.display(), "cgroup left behind");
        }
    }
}

/// Whether `name` is a command cgroup (`cmd-<pid>-…`) of a process that no longer exists.
fn is_orphan(name: &str) -> bool {
    let Some(pid) = name
        .strip_prefix("cmd-")
        .and_then(|r| r.split('-').next())
        .and_then(|p| p.parse::<i32>().ok())
        .filter(|p| *p > 0)
    else {
        return false;
    };
    // SAFETY: signal 0 only checks that the pid exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    !alive
}

/// Whether this process runs with kernel uid 0 (where `RLIMIT_NPROC` is not enforced).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cgroups_of_gone_processes_are_orphans() {
        let me = std::process::id();
        assert!(!is_orphan(&format!("cmd-{me}-0-00000000000000ff")));
        assert!(!is_orphan(&format!("cmd-{}-3-abc", 1)));
        // A pid above the kernel's maximum (2^22) cannot be alive.
        assert!(is_orphan("cmd-4194305-0-00000000000000ff"));
        for name in ["cmd-", "cmd-x-1", "other-1-2", "cmd--1-2", "cmd-0-1"] {
            assert!(!is_orphan(name), "{name}");
        }
    }

    /// Guards the race a second executor's start used to cause: its sweep removed a fresh,
    /// still empty cgroup of another, whose child then failed to join it.
    #[test]
    fn a_new_base_leaves_a_live_agents_fresh_cgroup_alone() {
        let base = CgroupBase::find()
            .expect("a writable pids cgroup hierarchy (the exec suite needs one too; run as root)");
        let fresh = base.create(16).unwrap();
        assert!(fresh.dir.is_dir());
        let dead = base.dir.join("cmd-4194305-0-00000000000000ff");
        std::fs::create_dir(&dead).unwrap();
        let again = CgroupBase::find().unwrap();
        assert_eq!(again.dir, base.dir);
        assert!(fresh.dir.is_dir(), "a live agent's empty cgroup was swept");
        assert!(!dead.exists(), "a gone agent's empty cgroup stayed");
        let path = fresh.dir.clone();
        drop(fresh);
        assert!(!path.exists());
    }
}
