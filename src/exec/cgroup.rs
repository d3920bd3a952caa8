//! A pids cgroup per command: the process limit that binds for root; and its memory limit.
//!
//! `RLIMIT_NPROC` is not enforced for a process whose kernel uid is 0, even inside a user
//! namespace that maps it, so when the agent runs as root a fork bomb would only stop at the
//! machine's pid limit. Each command then runs in a cgroup with `pids.max`: normally the
//! cgroup of the executor's spawner (see `spawner`), which forks it there, or else a cgroup of
//! its own joined by the child before anything else. The cgroup also names every process the
//! command left behind (including ones that called `setsid`), so cleanup kills exactly those,
//! sparing the spawner.
//!
//! Where a writable memory controller is found (cgroup v2 with `memory` enabled in the
//! parent's `cgroup.subtree_control`, or the v1 `memory` hierarchy under the agent's own
//! memory cgroup), the same command also gets a memory cgroup whose limit (`memory.max`,
//! v1 `memory.limit_in_bytes`) binds its processes together; a command past it is killed by
//! the kernel's OOM killer inside that cgroup, which `oom_kills` counts. Without one the
//! executor falls back to `RLIMIT_DATA` per process (see [`MemoryMechanism`]).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where per-command cgroups are made.
#[derive(Debug, Clone)]
pub(crate) struct CgroupBase {
    dir: PathBuf,
    v2: bool,
    counter: std::sync::Arc<AtomicU64>,
    /// Where memory cgroups are made, when a writable memory controller was found.
    memory: Option<MemoryBase>,
    /// Why there is no memory cgroup, when there is none.
    memory_missing: Option<String>,
}

/// The directory memory cgroups are made in.
#[derive(Debug, Clone)]
struct MemoryBase {
    dir: PathBuf,
    v2: bool,
    /// v2 with `memory` enabled in the pids directory itself: one cgroup holds both.
    shared: bool,
}

/// How a command's memory is bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryMechanism {
    /// A memory cgroup per command (v2 `memory.max`): all its processes together.
    CgroupV2,
    /// A memory cgroup per command (v1 `memory.limit_in_bytes`): all its processes together.
    CgroupV1,
    /// No writable memory cgroup: the executor watches the memory of the command's processes
    /// together and stops it at the limit (`exec/memory.rs`), with `RLIMIT_DATA` per process
    /// as a backstop. (The name is the one records hold.)
    RlimitData,
    /// Nothing (the bubblewrap path and sandbox off have no memory cgroup either, but keep
    /// `RLIMIT_DATA`; this is for a report made before any mechanism was chosen).
    None,
}

impl std::fmt::Display for MemoryMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemoryMechanism::CgroupV2 => "cgroup v2 memory.max",
            MemoryMechanism::CgroupV1 => "cgroup v1 memory.limit_in_bytes",
            MemoryMechanism::RlimitData => "watched per command, RLIMIT_DATA backstop",
            MemoryMechanism::None => "none",
        })
    }
}

/// A command's memory cgroup (possibly the same directory as its pids cgroup).
#[derive(Debug)]
pub(crate) struct MemoryCgroup {
    dir: PathBuf,
    v2: bool,
    /// `cgroup.procs` to join, when it is a directory of its own (v1).
    pub(crate) procs: Option<CString>,
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
    /// Its memory cgroup, when there is a memory controller.
    pub(crate) memory: Option<MemoryCgroup>,
}

impl CgroupBase {
    /// A writable hierarchy with the pids controller, if this process can use one (as root:
    /// the cgroup v2 root, or the v1 `pids` hierarchy).
    pub(crate) fn find() -> Option<Self> {
        let mut base = Self::find_pids()?;
        match find_memory(&base) {
            Ok(m) => base.memory = Some(m),
            Err(why) => base.memory_missing = Some(why),
        }
        Some(base)
    }

    /// How commands' memory is bounded with this base.
    pub(crate) fn memory_mechanism(&self) -> MemoryMechanism {
        match &self.memory {
            Some(m) if m.v2 => MemoryMechanism::CgroupV2,
            Some(_) => MemoryMechanism::CgroupV1,
            None => MemoryMechanism::RlimitData,
        }
    }

    /// Why there is no memory cgroup (when there is none).
    pub(crate) fn memory_missing(&self) -> Option<&str> {
        self.memory_missing.as_deref()
    }

    fn find_pids() -> Option<Self> {
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
        prepare_dir(&dir, v2, "pids")?;
        Some(Self {
            dir,
            v2,
            counter: std::sync::Arc::default(),
            memory: None,
            memory_missing: None,
        })
    }

    /// A fresh cgroup limited to `max_pids` processes and threads and, where there is a
    /// memory controller, to `memory_bytes` of memory for all of them together.
    pub(crate) fn create(&self, max_pids: u64, memory_bytes: u64) -> std::io::Result<Cgroup> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        // Several executors may share a process: the random part keeps their names apart.
        let name = format!("cmd-{}-{n}-{:016x}", std::process::id(), fastrand::u64(..));
        let dir = self.dir.join(&name);
        std::fs::create_dir(&dir)?;
        let mut cg = Cgroup {
            procs: CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                .map_err(std::io::Error::other)?,
            dir,
            v2: self.v2,
            spare: None,
            memory: None,
        };
        std::fs::write(cg.dir.join("pids.max"), max_pids.to_string())?;
        if let Some(m) = &self.memory {
            let (dir, procs) = if m.shared {
                (cg.dir.clone(), None)
            } else {
                let dir = m.dir.join(&name);
                std::fs::create_dir(&dir)?;
                let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
                    .map_err(std::io::Error::other)?;
                (dir, Some(procs))
            };
            // Set before anything joins; dropped with `cg` on error.
            cg.memory = Some(MemoryCgroup {
                dir,
                v2: m.v2,
                procs,
            });
            if let Some(mc) = &cg.memory {
                mc.limit(memory_bytes)?;
            }
        }
        Ok(cg)
    }
}

impl MemoryCgroup {
    /// Bound the cgroup's memory (and swap: none beyond it).
    fn limit(&self, bytes: u64) -> std::io::Result<()> {
        if self.v2 {
            std::fs::write(self.dir.join("memory.max"), bytes.to_string())?;
            // Absent without swap accounting; nothing to bound then.
            let _ = std::fs::write(self.dir.join("memory.swap.max"), "0");
        } else {
            std::fs::write(self.dir.join("memory.limit_in_bytes"), bytes.to_string())?;
            // Memory plus swap no more than memory alone (absent without swap accounting).
            let _ = std::fs::write(
                self.dir.join("memory.memsw.limit_in_bytes"),
                bytes.to_string(),
            );
        }
        Ok(())
    }

    /// How many processes the kernel's OOM killer has killed in this cgroup so far.
    pub(crate) fn oom_kills(&self) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|v| v.trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }
}

/// Make `dir` (or sweep the leftovers in it) and enable `controller` for its children on v2.
fn prepare_dir(dir: &Path, v2: bool, controller: &str) -> Option<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Leftovers of agents that are gone: remove the empty ones (a busy one
            // refuses and stays). A cgroup of a live agent is never touched, even when
            // empty: its command may be between the cgroup's creation and joining it.
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if is_orphan(&e.file_name().to_string_lossy()) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
        }
        Err(_) => return None,
    }
    if v2 && !enable(dir, controller) {
        return None;
    }
    Some(())
}

/// Whether `controller` is (or could be made) enabled for the children of the v2 cgroup `dir`.
fn enable(dir: &Path, controller: &str) -> bool {
    let sub = dir.join("cgroup.subtree_control");
    std::fs::read_to_string(&sub).is_ok_and(|s| s.split_whitespace().any(|c| c == controller))
        || std::fs::write(&sub, format!("+{controller}")).is_ok()
}

/// Where commands' memory cgroups can be made, next to the pids `base`: on v2, the same
/// directory with `memory` enabled (from the root down); else the v1 `memory` hierarchy,
/// under the agent's own memory cgroup (so whatever bounds the agent bounds its commands too).
/// `Err` says why there is none.
fn find_memory(base: &CgroupBase) -> Result<MemoryBase, String> {
    let mut why = Vec::new();
    if base.v2 {
        let root = base.dir.parent().unwrap_or(&base.dir);
        let has = std::fs::read_to_string(root.join("cgroup.controllers"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"));
        if !has {
            why.push("cgroup v2 has no memory controller".to_string());
        } else if enable(root, "memory") && enable(&base.dir, "memory") {
            return Ok(MemoryBase {
                dir: base.dir.clone(),
                v2: true,
                shared: true,
            });
        } else {
            why.push("cannot enable +memory in cgroup.subtree_control".to_string());
        }
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").map_err(|e| e.to_string())?;
    let mut v1 = None;
    let mut v2_root = None;
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mut l = left.split(' ');
        let mount_root = l.nth(3).unwrap_or("/");
        let mountpoint = l.next().unwrap_or_default();
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or_default();
        let opts = r.nth(1).unwrap_or_default();
        if fstype == "cgroup" && opts.split(',').any(|o| o == "memory") && v1.is_none() {
            v1 = Some((PathBuf::from(mountpoint), mount_root.to_string()));
        } else if fstype == "cgroup2" && v2_root.is_none() {
            v2_root = Some(PathBuf::from(mountpoint));
        }
    }
    if !base.v2
        && let Some(root) = v2_root
    {
        // pids on v1 but memory on v2 (a hybrid set-up): a directory of its own there.
        let has = std::fs::read_to_string(root.join("cgroup.controllers"))
            .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"));
        if has && enable(&root, "memory") {
            let dir = root.join("git-agent-memory");
            if prepare_dir(&dir, true, "memory").is_some() {
                return Ok(MemoryBase {
                    dir,
                    v2: true,
                    shared: false,
                });
            }
        }
    }
    let Some((mountpoint, mount_root)) = v1 else {
        why.push("no cgroup v1 memory hierarchy is mounted".into());
        return Err(why.join("; "));
    };
    // Our own memory cgroup, as /proc/self/cgroup names it relative to the hierarchy's root.
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let mut f = l.splitn(3, ':');
                let _id = f.next();
                let controllers = f.next()?;
                let path = f.next()?;
                controllers
                    .split(',')
                    .any(|c| c == "memory")
                    .then(|| path.to_string())
            })
        })
        .unwrap_or_else(|| "/".into());
    let rel = Path::new(&own)
        .strip_prefix(&mount_root)
        .unwrap_or(Path::new(""))
        .to_path_buf();
    let parent = Some(mountpoint.join(&rel))
        .filter(|p| p.is_dir())
        .unwrap_or(mountpoint);
    let dir = parent.join("git-agent");
    if prepare_dir(&dir, false, "memory").is_none() {
        why.push(format!(
            "cannot make {} in the cgroup v1 memory hierarchy",
            dir.display()
        ));
        return Err(why.join("; "));
    }
    Ok(MemoryBase {
        dir,
        v2: false,
        shared: false,
    })
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
        // The pids directory first: once it is empty, so is a separate memory one.
        let mut dirs = vec![self.dir.clone()];
        if let Some(m) = self.memory.as_ref().filter(|m| m.procs.is_some()) {
            dirs.push(m.dir.clone());
        }
        let remove = move || {
            dirs.iter()
                .all(|d| std::fs::remove_dir(d).is_ok() || !d.exists())
        };
        if remove() {
            return;
        }
        // Killed processes not yet reaped by their (re)parent keep it busy for a while.
        let dir = self.dir.clone();
        let spawned = std::thread::Builder::new()
            .name("cgroup-cleanup".into())
            .spawn(move || {
                for _ in 0..300 {
                    std::thread::sleep(Duration::from_millis(100));
                    if remove() {
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
        let fresh = base.create(16, 64 << 20).unwrap();
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
