//! The Linux sandbox: what this machine supports, and the per-command setup.
//!
//! The `landlock` mechanism confines a command with, in this order, inside the forked child
//! before `exec`: a user namespace mapping the caller's own uid (so `RLIMIT_NPROC` binds
//! even for root, and mounts are possible without privilege), a mount namespace in which the
//! worktree's `.git` and every nested `.git` are bind-mounted read-only and the host's name
//! resolution sockets are hidden, a network namespace (for `off` and `allowlist`) whose only
//! listener is the egress proxy's socket, resource limits, an empty capability bounding set,
//! `no_new_privs`, a Landlock domain (read everywhere, write only the worktree, the private
//! temp dir and a few device files; no signals to or `ptrace` of processes outside, which
//! also keeps `/proc/<parent>/environ` unreadable), and a seccomp filter (no sockets but
//! `AF_UNIX` when the network is off, no `io_uring`, no keyrings).
//!
//! Everything the child needs is allocated before `fork`; the child only makes system calls.
//!
//! The `bwrap` mechanism gets the same file-system view and namespaces from bubblewrap
//! (plus a pid namespace); it has no Landlock or seccomp layer and cannot do `allowlist`.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};
use serde::Serialize;

use super::Limits;
use super::error::{Error, Result};
use crate::config::{NetworkMode, SandboxMode};

/// The newest Landlock ABI whose rights this code was written and tested against; newer
/// kernels are used at this level (best effort below it).
const TARGET_ABI: ABI = ABI::V6;

/// Port of the egress proxy inside the command's own network namespace.
pub(crate) const PROXY_PORT: u16 = 3128;

/// Directories hidden (covered by an empty read-only tmpfs) when the network is not `on`:
/// they hold the sockets of host resolvers and buses that would resolve names, or carry
/// data, on the command's behalf.
const HIDDEN_WITHOUT_NETWORK: &[&str] = &[
    "/run/systemd/resolve",
    "/run/nscd",
    "/var/run/nscd",
    "/run/dbus",
    "/var/run/dbus",
];

/// Device files a sandboxed command may open for writing.
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/random",
    "/dev/urandom",
];

/// The mechanism that confines commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// User, mount and network namespaces, Landlock, seccomp, `no_new_privs`.
    Landlock,
    /// bubblewrap (namespaces and bind mounts).
    Bwrap,
    /// Nothing: the user opted out.
    None,
}

/// What the executor applies to every command; the caller writes it to the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxReport {
    /// The mode the configuration asked for.
    pub requested: SandboxMode,
    /// The mechanism in force.
    pub mechanism: Mechanism,
    /// True when the user explicitly turned the sandbox off: this must be in the audit log.
    pub opted_out: bool,
    /// Network mode in force (`on` when the sandbox is off, whatever was asked).
    pub network: NetworkMode,
    /// Network mode the configuration asked for.
    pub network_requested: NetworkMode,
    /// The kernel's Landlock ABI version (0 when unsupported).
    pub landlock_abi: i32,
    /// One line per protection in force, for the report.
    pub protections: Vec<String>,
}

/// Which sandbox mechanisms this machine offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxSupport {
    /// Landlock ABI version, 0 when unsupported or disabled.
    pub landlock_abi: i32,
    /// Landlock can restrict TCP connect/bind (ABI 4 or later).
    pub landlock_tcp: bool,
    /// Landlock can scope signals and abstract Unix sockets (ABI 6 or later).
    pub landlock_scopes: bool,
    /// seccomp filters are available.
    pub seccomp: bool,
    /// Whether this process can create a user namespace with a mount namespace in it
    /// (tried in a forked child).
    pub user_namespaces: bool,
    /// bubblewrap on `PATH`, if installed.
    pub bwrap: Option<PathBuf>,
    /// The kernel release.
    pub kernel: String,
}

/// What this machine supports (forks once to try a user namespace).
pub fn probe() -> SandboxSupport {
    let abi = landlock_abi();
    SandboxSupport {
        landlock_abi: abi,
        landlock_tcp: abi >= 4,
        landlock_scopes: abi >= 6,
        // SAFETY: PR_GET_SECCOMP takes no pointer arguments.
        seccomp: unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } >= 0,
        user_namespaces: try_user_namespace(),
        bwrap: find_in_path("bwrap"),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
    }
}

/// The kernel's Landlock ABI version, 0 when unsupported.
pub(crate) fn landlock_abi() -> i32 {
    // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute only returns the version.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    if v < 0 { 0 } else { v as i32 }
}

fn try_user_namespace() -> bool {
    let mut cmd = std::process::Command::new("/bin/true");
    // SAFETY: the closure makes one system call.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(crate) fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The existing directories of [`HIDDEN_WITHOUT_NETWORK`], symlinks resolved, each once.
fn hidden_dirs() -> Vec<PathBuf> {
    let mut seen = Vec::new();
    for h in HIDDEN_WITHOUT_NETWORK {
        if let Ok(c) = std::fs::canonicalize(h)
            && c.is_dir()
            && !seen.contains(&c)
        {
            seen.push(c);
        }
    }
    seen
}

/// The worktree's `.git` and every nested `.git` outside ignored directories.
pub(crate) fn git_dirs(worktree: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let walker = ignore::WalkBuilder::new(worktree)
        .hidden(false)
        .git_global(false)
        .parents(false)
        .filter_entry(|e| e.file_name() != ".git")
        .build();
    for entry in walker.flatten() {
        if entry.file_type().is_some_and(|t| t.is_dir()) {
            let g = entry.path().join(".git");
            if std::fs::symlink_metadata(&g).is_ok() {
                out.push(g);
            }
        }
    }
    out
}

/// The seccomp program for a network mode.
pub(crate) fn seccomp_program(network: NetworkMode) -> Result<Vec<seccompiler::sock_filter>> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let err = |e: seccompiler::BackendError| Error::Seccomp(e.to_string());
    let cond =
        |op, v: i32| SeccompCondition::new(0, SeccompCmpArgLen::Dword, op, v as u64).map_err(err);
    let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> = [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
    ]
    .into_iter()
    .map(|s| (s, Vec::new()))
    .collect();
    let socket_rule = match network {
        NetworkMode::Off => Some(SeccompRule::new(vec![cond(
            SeccompCmpOp::Ne,
            libc::AF_UNIX,
        )?])),
        // The command's network namespace has nothing but loopback and the proxy; still no
        // raw, packet or netlink sockets.
        NetworkMode::Allowlist => Some(SeccompRule::new(vec![
            cond(SeccompCmpOp::Ne, libc::AF_UNIX)?,
            cond(SeccompCmpOp::Ne, libc::AF_INET)?,
            cond(SeccompCmpOp::Ne, libc::AF_INET6)?,
        ])),
        NetworkMode::On => None,
    };
    if let Some(rule) = socket_rule {
        rules.insert(libc::SYS_socket, vec![rule.map_err(err)?]);
    }
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(err)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(err)?;
    seccompiler::BpfProgram::try_from(filter).map_err(err)
}

/// A Landlock ruleset for one command, as the file descriptor `landlock_restrict_self` takes.
pub(crate) fn landlock_ruleset(writable: &[PathBuf], network: NetworkMode) -> Result<OwnedFd> {
    let ll = |path: &str| {
        let path = path.to_string();
        move |e: landlock::RulesetError| Error::Landlock {
            path: path.clone(),
            message: e.to_string(),
        }
    };
    let abi = landlock_abi();
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))
        .map_err(ll("ruleset"))?;
    if network != NetworkMode::On && abi >= 4 {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(ll("ruleset"))?;
    }
    if abi >= 6 {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(ll("ruleset"))?;
    }
    let mut created = ruleset.create().map_err(ll("ruleset"))?;
    let fd = |p: &Path| {
        PathFd::new(p).map_err(|e| Error::Landlock {
            path: p.display().to_string(),
            message: e.to_string(),
        })
    };
    created = created
        .add_rule(PathBeneath::new(
            fd(Path::new("/"))?,
            AccessFs::from_read(TARGET_ABI),
        ))
        .map_err(ll("/"))?;
    for w in writable {
        created = created
            .add_rule(PathBeneath::new(fd(w)?, AccessFs::from_all(TARGET_ABI)))
            .map_err(ll(&w.display().to_string()))?;
    }
    for d in WRITABLE_DEVICES {
        if let Ok(f) = PathFd::new(d) {
            let rights = AccessFs::from_file(TARGET_ABI) & !AccessFs::Execute;
            created = created
                .add_rule(PathBeneath::new(f, rights))
                .map_err(ll(d))?;
        }
    }
    if network == NetworkMode::Allowlist && abi >= 4 {
        created = created
            .add_rule(NetPort::new(PROXY_PORT, AccessNet::ConnectTcp))
            .map_err(ll("proxy port"))?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| Error::SandboxUnavailable {
        mode: "landlock".into(),
        reason: "the kernel does not support Landlock (or it is disabled at boot)".into(),
    })
}

/// Steps of the child's setup, reported through the error pipe when one fails.
const STEPS: &[&str] = &[
    "unshare user/mount/network namespaces",
    "write uid/gid maps",
    "make mounts private",
    "bind .git read-only",
    "hide resolver sockets",
    "bring up loopback",
    "open the proxy socket",
    "set resource limits",
    "drop capabilities",
    "set no_new_privs",
    "enter the landlock domain",
    "install the seccomp filter",
    "set the parent-death signal",
    "join the pids cgroup",
];

/// Name of a setup step from the byte the child wrote.
pub(crate) fn step_name(b: u8) -> &'static str {
    STEPS
        .get(usize::from(b))
        .copied()
        .unwrap_or("sandbox setup")
}

/// A read-only bind mount to make in the child.
struct RoBind {
    path: CString,
    /// `MS_*` flags the existing mount has and a remount must keep (locked in a user ns).
    keep: libc::c_ulong,
}

/// Everything the forked child needs, prepared before the fork.
pub(crate) struct ChildSetup {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    ro_binds: Vec<RoBind>,
    hidden: Vec<CString>,
    unshare_net: bool,
    /// Child end of the socket pair the proxy listener is passed back on.
    proxy_sock: Option<OwnedFd>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    ruleset: Option<Arc<OwnedFd>>,
    seccomp: Option<Arc<Vec<seccompiler::sock_filter>>>,
    /// Write end of the step-report pipe (close-on-exec).
    err_pipe: OwnedFd,
    /// Only namespaces and limits (used under bubblewrap, which does the rest).
    limits_only: bool,
    /// `cgroup.procs` of the command's pids cgroup, joined first.
    cgroup_procs: Option<CString>,
}

/// Parent-side handles of one prepared spawn.
pub(crate) struct ParentSide {
    /// Read end of the step-report pipe.
    pub err_pipe: OwnedFd,
    /// Parent end of the proxy socket pair.
    pub proxy_sock: Option<OwnedFd>,
    /// The command's pids cgroup, when the process limit needs one.
    pub cgroup: Option<super::cgroup::Cgroup>,
}

pub(crate) fn rlimits(limits: &Limits) -> Vec<(libc::__rlimit_resource_t, u64)> {
    vec![
        (libc::RLIMIT_CPU, limits.cpu_seconds),
        (libc::RLIMIT_FSIZE, limits.file_size_bytes),
        (libc::RLIMIT_NPROC, limits.max_processes),
        (libc::RLIMIT_CORE, 0),
    ]
}

fn cstring(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|e| Error::SandboxSetup {
        what: p.display().to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    })
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(Error::SandboxSetup {
            what: "step pipe".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: pipe2 returned two fresh descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn socketpair() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(Error::SandboxSetup {
            what: "proxy socket pair".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: socketpair returned two fresh descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Inputs of one landlock-mechanism spawn.
pub(crate) struct LandlockSpawn<'a> {
    pub worktree: &'a Path,
    pub network: NetworkMode,
    pub limits: &'a Limits,
    pub seccomp: Arc<Vec<seccompiler::sock_filter>>,
    /// The executor's Landlock ruleset (worktree, private dir and extra writable paths), made
    /// once: the paths are fixed for the executor's life and the rules hold their inodes.
    pub ruleset: Arc<OwnedFd>,
}

impl ChildSetup {
    /// Prepare the full landlock-mechanism setup for one command.
    pub(crate) fn landlock(s: LandlockSpawn<'_>) -> Result<(Self, ParentSide)> {
        let mut ro_binds = Vec::new();
        for g in git_dirs(s.worktree) {
            ro_binds.push(RoBind {
                keep: mount_flags(&g)?,
                path: cstring(&g)?,
            });
        }
        let (hidden, unshare_net) = if s.network == NetworkMode::On {
            (Vec::new(), false)
        } else {
            (
                hidden_dirs()
                    .iter()
                    .map(|p| cstring(p))
                    .collect::<Result<Vec<_>>>()?,
                true,
            )
        };
        let (proxy_parent, proxy_child) = if s.network == NetworkMode::Allowlist {
            let (a, b) = socketpair()?;
            (Some(a), Some(b))
        } else {
            (None, None)
        };
        let (err_read, err_write) = pipe()?;
        // SAFETY: geteuid/getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Ok((
            Self {
                uid_map: format!("{uid} {uid} 1\n").into_bytes(),
                gid_map: format!("{gid} {gid} 1\n").into_bytes(),
                ro_binds,
                hidden,
                unshare_net,
                proxy_sock: proxy_child,
                rlimits: rlimits(s.limits),
                ruleset: Some(s.ruleset),
                seccomp: Some(s.seccomp),
                err_pipe: err_write,
                limits_only: false,
                cgroup_procs: None,
            },
            ParentSide {
                err_pipe: err_read,
                proxy_sock: proxy_parent,
                cgroup: None,
            },
        ))
    }

    /// Only limits and `no_new_privs`, for the bubblewrap process itself.
    pub(crate) fn limits_only(limits: &Limits) -> Result<(Self, ParentSide)> {
        let (err_read, err_write) = pipe()?;
        Ok((
            Self {
                uid_map: Vec::new(),
                gid_map: Vec::new(),
                ro_binds: Vec::new(),
                hidden: Vec::new(),
                unshare_net: false,
                proxy_sock: None,
                rlimits: rlimits(limits),
                ruleset: None,
                seccomp: None,
                err_pipe: err_write,
                limits_only: true,
                cgroup_procs: None,
            },
            ParentSide {
                err_pipe: err_read,
                proxy_sock: None,
                cgroup: None,
            },
        ))
    }

    /// The read-only binds of this command (path, mount flags to keep), for the spawner.
    pub(crate) fn binds(&self) -> impl Iterator<Item = (&std::ffi::CStr, libc::c_ulong)> {
        self.ro_binds.iter().map(|b| (b.path.as_c_str(), b.keep))
    }

    /// Write end of the step-report pipe.
    pub(crate) fn err_fd(&self) -> RawFd {
        self.err_pipe.as_raw_fd()
    }

    /// Child end of the proxy socket pair, in `allowlist` mode.
    pub(crate) fn proxy_fd(&self) -> Option<RawFd> {
        self.proxy_sock.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Descriptors the setup itself needs open in the child (the Landlock ruleset).
    pub(crate) fn kept_fds(&self) -> Vec<RawFd> {
        self.ruleset.iter().map(|r| r.as_raw_fd()).collect()
    }

    /// Join this pids cgroup first thing in the child.
    pub(crate) fn join_cgroup(&mut self, procs: CString) {
        self.cgroup_procs = Some(procs);
    }

    /// Runs in the forked child, before `exec`. Only async-signal-safe system calls: no
    /// allocation, no locks.
    ///
    /// # Safety
    /// Must be called only in the child between `fork` and `exec`.
    pub(crate) unsafe fn apply(&self) -> std::io::Result<()> {
        // SAFETY: forwarded from the caller; the iterator only borrows prepared CStrings.
        unsafe { self.apply_with(self.binds(), self.err_fd(), self.proxy_fd()) }
    }

    /// [`apply`](Self::apply) with the per-command parts given separately: the read-only
    /// binds (path, flags to keep), the step-report descriptor and the proxy socket. The
    /// executor's spawner keeps one `ChildSetup` as a template and passes these per command.
    ///
    /// # Safety
    /// As [`apply`](Self::apply); `binds` must not allocate.
    pub(crate) unsafe fn apply_with<'b>(
        &self,
        binds: impl Iterator<Item = (&'b std::ffi::CStr, libc::c_ulong)>,
        err_fd: RawFd,
        proxy_fd: Option<RawFd>,
    ) -> std::io::Result<()> {
        // SAFETY (whole body): plain system calls on memory prepared before the fork.
        unsafe {
            let fail = |step: u8| -> std::io::Error {
                let e = std::io::Error::last_os_error();
                libc::write(err_fd, (&step as *const u8).cast(), 1);
                e
            };
            let check = |r: libc::c_int, step: u8| -> std::io::Result<()> {
                if r == 0 { Ok(()) } else { Err(fail(step)) }
            };
            if let Some(procs) = &self.cgroup_procs {
                check(write_file(procs, b"0"), 13)?;
            }
            if !self.limits_only {
                let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
                if self.unshare_net {
                    flags |= libc::CLONE_NEWNET;
                }
                check(libc::unshare(flags), 0)?;
                check(write_file(c"/proc/self/setgroups", b"deny"), 1)?;
                check(write_file(c"/proc/self/uid_map", &self.uid_map), 1)?;
                check(write_file(c"/proc/self/gid_map", &self.gid_map), 1)?;
                check(
                    libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ),
                    2,
                )?;
                for (path, keep) in binds {
                    check(
                        libc::mount(
                            path.as_ptr(),
                            path.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        ),
                        3,
                    )?;
                    check(
                        libc::mount(
                            std::ptr::null(),
                            path.as_ptr(),
                            std::ptr::null(),
                            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | keep,
                            std::ptr::null(),
                        ),
                        3,
                    )?;
                }
                for h in &self.hidden {
                    check(
                        libc::mount(
                            c"tmpfs".as_ptr(),
                            h.as_ptr(),
                            c"tmpfs".as_ptr(),
                            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                            c"size=4k,mode=755".as_ptr().cast(),
                        ),
                        4,
                    )?;
                }
                if self.unshare_net {
                    loopback_up().map_err(|_| fail(5))?;
                }
                if let Some(sock) = proxy_fd {
                    proxy_listener(sock).map_err(|_| fail(6))?;
                }
            }
            for &(res, v) in &self.rlimits {
                let lim = libc::rlimit {
                    rlim_cur: v,
                    rlim_max: v,
                };
                check(libc::setrlimit(res, &lim), 7)?;
            }
            if !self.limits_only {
                // An empty bounding set: exec as (namespaced) root grants no capabilities.
                for cap in 0..64 {
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                        && *libc::__errno_location() != libc::EINVAL
                    {
                        return Err(fail(8));
                    }
                }
                check(
                    libc::prctl(
                        libc::PR_CAP_AMBIENT,
                        libc::PR_CAP_AMBIENT_CLEAR_ALL,
                        0,
                        0,
                        0,
                    ),
                    8,
                )?;
            }
            check(
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0),
                12,
            )?;
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 9)?;
            if let Some(rs) = &self.ruleset {
                let r = libc::syscall(libc::SYS_landlock_restrict_self, rs.as_raw_fd(), 0u32);
                check(if r == 0 { 0 } else { -1 }, 10)?;
            }
            if let Some(prog) = &self.seccomp {
                let fprog = libc::sock_fprog {
                    len: prog.len() as libc::c_ushort,
                    filter: prog.as_ptr() as *mut libc::sock_filter,
                };
                check(
                    libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER,
                        &fprog as *const libc::sock_fprog,
                        0,
                        0,
                    ),
                    11,
                )?;
            }
            Ok(())
        }
    }
}

/// The mount flags of `path`'s mount that a read-only remount in a user namespace must keep.
fn mount_flags(path: &Path) -> Result<libc::c_ulong> {
    let c = cstring(path)?;
    // SAFETY: statvfs writes into a zeroed struct we own.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(Error::SandboxSetup {
            what: path.display().to_string(),
            source: std::io::Error::last_os_error(),
        });
    }
    let mut keep = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            keep |= ms_flag;
        }
    }
    Ok(keep)
}

/// open/write/close; async-signal-safe.
pub(crate) unsafe fn write_file(path: &std::ffi::CStr, data: &[u8]) -> libc::c_int {
    // SAFETY: plain system calls on valid buffers.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return -1;
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        if n == data.len() as isize { 0 } else { -1 }
    }
}

/// `ip link set lo up` in the child's new network namespace.
unsafe fn loopback_up() -> std::result::Result<(), ()> {
    // SAFETY: plain system calls on a zeroed ifreq we own.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            ifr.ifr_name[i] = *b as libc::c_char;
        }
        ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as i16;
        let r = libc::ioctl(s, libc::SIOCSIFFLAGS, &ifr);
        libc::close(s);
        if r == 0 { Ok(()) } else { Err(()) }
    }
}

/// Listen on 127.0.0.1:PROXY_PORT inside the child's network namespace and pass the
/// listening socket to the parent over `sock`.
unsafe fn proxy_listener(sock: RawFd) -> std::result::Result<(), ()> {
    // SAFETY: plain system calls on zeroed structs and stack buffers we own.
    unsafe {
        let l = libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        );
        if l < 0 {
            return Err(());
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = PROXY_PORT.to_be();
        addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        let ok = libc::bind(
            l,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) == 0
            && libc::listen(l, 128) == 0
            && send_fd(sock, l) == 0;
        libc::close(l);
        if ok { Ok(()) } else { Err(()) }
    }
}

unsafe fn send_fd(sock: RawFd, fd: RawFd) -> libc::c_int {
    // SAFETY: the control buffer is 8-byte aligned and large enough for one descriptor.
    unsafe {
        let mut control = [0u64; 8];
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return -1;
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        if libc::sendmsg(sock, &msg, 0) == 1 {
            0
        } else {
            -1
        }
    }
}

/// Receive the proxy listener the child sent (it was sent before `exec`, so it is already
/// queued when `spawn` returns).
pub(crate) fn recv_fd(sock: &OwnedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: as in send_fd; the received descriptor is owned by us from here on.
    unsafe {
        let mut control = [0u64; 8];
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        if libc::recvmsg(
            sock.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        ) < 0
        {
            return Err(std::io::Error::last_os_error());
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "no descriptor in the proxy message",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// The bubblewrap command line that wraps `argv`.
pub(crate) fn bwrap_args(
    worktree: &Path,
    private: &Path,
    writable: &[PathBuf],
    network: NetworkMode,
) -> Vec<std::ffi::OsString> {
    let mut a: Vec<std::ffi::OsString> = Vec::new();
    for f in [
        "--die-with-parent",
        "--unshare-user",
        // No nested user namespaces: nothing inside regains capabilities over a mount tree.
        "--disable-userns",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ] {
        a.push(f.into());
    }
    if network != NetworkMode::On {
        a.push("--unshare-net".into());
        for h in hidden_dirs() {
            a.push("--tmpfs".into());
            a.push(h.into());
        }
    }
    let mut bind = |flag: &str, p: &Path| {
        a.push(flag.into());
        a.push(p.into());
        a.push(p.into());
    };
    bind("--bind", private);
    bind("--bind", worktree);
    for w in writable {
        bind("--bind", w);
    }
    for g in git_dirs(worktree) {
        bind("--ro-bind", &g);
    }
    a.push("--chdir".into());
    a.push(worktree.into());
    a.push("--".into());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_dirs_finds_the_worktree_git_and_nested_ones_outside_ignored_dirs() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("a/b/.git")).unwrap();
        std::fs::write(root.join("c.git"), "not a repo").unwrap();
        std::fs::create_dir_all(root.join("linked")).unwrap();
        std::fs::write(root.join("linked/.git"), "gitdir: /elsewhere").unwrap();
        std::fs::create_dir_all(root.join("ignored/x/.git")).unwrap();
        std::fs::write(root.join(".gitignore"), "ignored/\n").unwrap();
        let mut found: Vec<String> = git_dirs(root)
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect();
        found.sort();
        assert_eq!(found, vec![".git", "a/b/.git", "linked/.git"]);
    }

    #[test]
    fn seccomp_programs_build_for_every_network_mode() {
        let off = seccomp_program(NetworkMode::Off).unwrap();
        let allow = seccomp_program(NetworkMode::Allowlist).unwrap();
        let on = seccomp_program(NetworkMode::On).unwrap();
        // The socket rules add instructions; `on` has none for socket().
        assert!(
            off.len() > on.len() && allow.len() > off.len(),
            "{} {} {}",
            off.len(),
            allow.len(),
            on.len()
        );
    }

    #[test]
    fn bwrap_args_bind_git_read_only_after_the_worktree() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".git")).unwrap();
        let args: Vec<String> = bwrap_args(d.path(), Path::new("/p"), &[], NetworkMode::Off)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let wt = args
            .iter()
            .position(|a| a == &d.path().display().to_string())
            .unwrap();
        let git = args.iter().position(|a| a.ends_with("/.git")).unwrap();
        assert!(git > wt && args[git - 1] == "--ro-bind", "{args:?}");
        assert!(args.contains(&"--unshare-net".to_string()));
        assert_eq!(args.last().map(String::as_str), Some("--"));
        let on = bwrap_args(d.path(), Path::new("/p"), &[], NetworkMode::On);
        assert!(!on.iter().any(|a| a == "--unshare-net"));
    }
}
