//! The Linux sandbox: what this machine supports, and the pieces every command's set-up uses.
//!
//! The `landlock` mechanism gives each command a view of its own, built by the sandbox helper
//! ([`super::helper`]) from the mounts [`super::view`] lists: user, mount, pid, IPC, UTS and
//! (for `off` and `allowlist`) network namespaces, a fresh root with only the system and
//! toolchain directories and the worktree bound, resource limits, an empty capability
//! bounding set, `no_new_privs`, a Landlock domain over the view (read what is bound, write
//! only the worktree, `$HOME`, `/tmp` and a few device files; no signals to or `ptrace` of
//! processes outside) and a seccomp filter (no raw, packet or netlink sockets unless the
//! network is on, no `io_uring`, no keyrings). What runs between `fork` and `exec` in the
//! agent ([`ChildSetup`]) only joins a cgroup, marks inherited descriptors close-on-exec and
//! execs the helper.
//!
//! The `bwrap` mechanism runs the command under bubblewrap with the host's root read-only
//! (plus pid, IPC and UTS namespaces); it has no Landlock or seccomp layer and cannot do
//! `allowlist`.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

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
    /// Namespaces each command gets (`user`, `mount`, `pid`, `ipc`, `uts`, `network`).
    pub namespaces: Vec<String>,
    /// What a command sees of the file system, one line per mount (the worktree's `.git`
    /// directories, bound read-only per command, are not listed). Empty without a view.
    pub view: Vec<String>,
    /// Toolchain directories found on the agent's `PATH` (and toolchain variables) and bound.
    pub toolchains: Vec<PathBuf>,
    /// Resource limits of each command.
    pub limits: Limits,
    /// What bounds a command's memory: a memory cgroup, or `RLIMIT_DATA` per process.
    pub memory: super::cgroup::MemoryMechanism,
    /// Fallbacks taken and protections missing, each with its cause; empty when everything
    /// asked for is in force.
    pub fallbacks: Vec<String>,
}

impl SandboxReport {
    /// One line for the report's verification section and the audit log, e.g. `landlock:
    /// view (12 mounts), namespaces user+mount+pid+ipc+uts+network, landlock ABI 7, seccomp,
    /// memory 8192 MiB, network off; fallbacks: none`.
    pub fn summary(&self) -> String {
        let mechanism = match self.mechanism {
            Mechanism::Landlock => "landlock",
            Mechanism::Bwrap => "bwrap",
            Mechanism::None => "none",
        };
        let mut parts = Vec::new();
        if self.opted_out {
            parts.push("sandbox turned off by the user".to_string());
        }
        if !self.view.is_empty() {
            parts.push(format!("view ({} mounts)", self.view.len()));
        }
        if !self.namespaces.is_empty() {
            parts.push(format!("namespaces {}", self.namespaces.join("+")));
        }
        if self.mechanism == Mechanism::Landlock {
            parts.push(format!("landlock ABI {}, seccomp", self.landlock_abi));
        }
        let mib = |b: u64| b >> 20;
        parts.push(format!(
            "memory {} MiB ({}), /tmp {} MiB, $HOME {} MiB, worktree growth {} MiB, {} processes",
            mib(self.limits.memory_bytes),
            self.memory,
            mib(self.limits.tmp_bytes),
            mib(self.limits.home_bytes),
            mib(self.limits.worktree_growth_bytes),
            self.limits.max_processes
        ));
        parts.push(format!("network {}", network_name(self.network)));
        let fallbacks = if self.fallbacks.is_empty() {
            "none".to_string()
        } else {
            self.fallbacks.join("; ")
        };
        format!("{mechanism}: {}; fallbacks: {fallbacks}", parts.join(", "))
    }
}

fn network_name(n: NetworkMode) -> &'static str {
    match n {
        NetworkMode::Off => "off",
        NetworkMode::Allowlist => "allowlist",
        NetworkMode::On => "on",
    }
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
        // The command's network namespace is the boundary: it has its own loopback (a test
        // suite may serve and connect on 127.0.0.1) and, for `allowlist`, the proxy; still no
        // raw, packet or netlink sockets.
        NetworkMode::Off | NetworkMode::Allowlist => Some(SeccompRule::new(vec![
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
    // TCP rules only for `allowlist` (connect to the proxy's port and nothing else); with the
    // network off the namespace has no route out, and its own loopback is the command's.
    if network == NetworkMode::Allowlist && abi >= 4 {
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

/// What the forked child does before `exec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChildMode {
    /// Exec the sandbox helper, which does the rest in a fresh process image.
    Helper,
    /// Only limits and `no_new_privs` (bubblewrap, or no sandbox).
    LimitsOnly,
}

/// Everything the forked child needs, prepared before the fork.
pub(crate) struct ChildSetup {
    mode: ChildMode,
    /// Child end of the socket pair the proxy listener is passed back on.
    proxy_sock: Option<OwnedFd>,
    rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    /// Write end of the step-report pipe (close-on-exec until the child clears it).
    err_pipe: OwnedFd,
    /// `cgroup.procs` of the command's pids cgroup, joined first.
    cgroup_procs: Option<CString>,
    /// `cgroup.procs` of its memory cgroup, when that is a directory of its own (v1).
    memory_procs: Option<CString>,
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

/// The resource limits of a command; `RLIMIT_DATA` only when no memory cgroup bounds it
/// (`data`), so that a command past its cgroup's limit is OOM-killed and reported as such
/// rather than failing a large allocation first.
pub(crate) fn rlimits(limits: &Limits, data: bool) -> Vec<(libc::__rlimit_resource_t, u64)> {
    let mut v = vec![
        (libc::RLIMIT_CPU, limits.cpu_seconds),
        // No single file past the worktree's growth bound: a `fallocate` of any size is
        // refused at once, before any poll could see it.
        (
            libc::RLIMIT_FSIZE,
            limits.file_size_bytes.min(limits.worktree_growth_bytes),
        ),
        (libc::RLIMIT_NPROC, limits.max_processes),
        (libc::RLIMIT_CORE, 0),
    ];
    if data {
        // The executor watches the command's memory and stops it at the limit, reported out of
        // memory (`exec/memory.rs`); this only refuses one allocation too large for a watch.
        v.push((
            libc::RLIMIT_DATA,
            limits.memory_bytes.saturating_mul(super::memory::BACKSTOP),
        ));
    }
    v
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

impl ChildSetup {
    /// The set-up for a command run through the sandbox helper: the child only joins its
    /// cgroup, marks every inherited descriptor close-on-exec but the step pipe and the
    /// proxy socket, and execs the helper.
    pub(crate) fn helper(network: NetworkMode) -> Result<(Self, ParentSide)> {
        let (proxy_parent, proxy_child) = if network == NetworkMode::Allowlist {
            let (a, b) = socketpair()?;
            (Some(a), Some(b))
        } else {
            (None, None)
        };
        let (err_read, err_write) = pipe()?;
        Ok((
            Self {
                mode: ChildMode::Helper,
                proxy_sock: proxy_child,
                rlimits: Vec::new(),
                err_pipe: err_write,
                cgroup_procs: None,
                memory_procs: None,
            },
            ParentSide {
                err_pipe: err_read,
                proxy_sock: proxy_parent,
                cgroup: None,
            },
        ))
    }

    /// Only limits and `no_new_privs`, for the bubblewrap process itself or no sandbox.
    pub(crate) fn limits_only(limits: &Limits, data: bool) -> Result<(Self, ParentSide)> {
        let (err_read, err_write) = pipe()?;
        Ok((
            Self {
                mode: ChildMode::LimitsOnly,
                proxy_sock: None,
                rlimits: rlimits(limits, data),
                err_pipe: err_write,
                cgroup_procs: None,
                memory_procs: None,
            },
            ParentSide {
                err_pipe: err_read,
                proxy_sock: None,
                cgroup: None,
            },
        ))
    }

    /// Write end of the step-report pipe.
    pub(crate) fn err_fd(&self) -> RawFd {
        self.err_pipe.as_raw_fd()
    }

    /// Child end of the proxy socket pair, in `allowlist` mode.
    pub(crate) fn proxy_fd(&self) -> Option<RawFd> {
        self.proxy_sock.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// Join this pids cgroup (and this memory cgroup) first thing in the child.
    pub(crate) fn join_cgroup(&mut self, procs: CString, memory_procs: Option<CString>) {
        self.cgroup_procs = Some(procs);
        self.memory_procs = memory_procs;
    }

    /// Runs in the forked child, before `exec`. Only async-signal-safe system calls: no
    /// allocation, no locks.
    ///
    /// # Safety
    /// Must be called only in the child between `fork` and `exec`.
    pub(crate) unsafe fn apply(&self) -> std::io::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.apply_with(self.err_fd(), self.proxy_fd()) }
    }

    /// [`apply`](Self::apply) with the step-report descriptor and the proxy socket given
    /// separately (the spawner passes its own copies).
    ///
    /// # Safety
    /// As [`apply`](Self::apply).
    pub(crate) unsafe fn apply_with(
        &self,
        err_fd: RawFd,
        proxy_fd: Option<RawFd>,
    ) -> std::io::Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            apply_parts(
                self.mode,
                &self.rlimits,
                self.cgroup_procs.as_deref(),
                self.memory_procs.as_deref(),
                err_fd,
                proxy_fd,
            )
        }
    }

    /// The constant part of this set-up, as the spawner is given it once.
    pub(crate) fn template(&self) -> Template {
        Template {
            helper: self.mode == ChildMode::Helper,
            rlimits: self.rlimits.clone(),
        }
    }
}

/// The constant part of a command's set-up (what to exec, its rlimits), as the exec'd
/// spawner receives it once ([`super::spawner`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub(crate) struct Template {
    /// Exec the sandbox helper (else only limits and `no_new_privs`).
    pub helper: bool,
    /// `(resource, limit)` pairs.
    pub rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
}

impl Template {
    /// What [`ChildSetup::apply`] does, in the spawner's child before `exec`, with these
    /// descriptors (the spawner has joined the cgroups already).
    ///
    /// # Safety
    /// Only in a forked child before `exec`.
    pub(crate) unsafe fn apply(
        &self,
        err_fd: RawFd,
        proxy_fd: Option<RawFd>,
    ) -> std::io::Result<()> {
        let mode = if self.helper {
            ChildMode::Helper
        } else {
            ChildMode::LimitsOnly
        };
        // SAFETY: forwarded from the caller.
        unsafe { apply_parts(mode, &self.rlimits, None, None, err_fd, proxy_fd) }
    }
}

/// The body of [`ChildSetup::apply`]: join the cgroups, mark every inherited descriptor
/// close-on-exec (but the step pipe and proxy socket for the helper), set the rlimits and
/// the parent-death signal, and `no_new_privs` where no helper follows. Only
/// async-signal-safe system calls on memory prepared before the fork.
///
/// # Safety
/// Only in a forked child before `exec`.
unsafe fn apply_parts(
    mode: ChildMode,
    rlimits: &[(libc::__rlimit_resource_t, u64)],
    cgroup_procs: Option<&std::ffi::CStr>,
    memory_procs: Option<&std::ffi::CStr>,
    err_fd: RawFd,
    proxy_fd: Option<RawFd>,
) -> std::io::Result<()> {
    // SAFETY: (whole body) plain system calls on memory prepared before the fork.
    unsafe {
        let check = |r: libc::c_int| -> std::io::Result<()> {
            if r == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        if let Some(procs) = cgroup_procs {
            check(write_file(procs, b"0"))?;
        }
        if let Some(procs) = memory_procs {
            check(write_file(procs, b"0"))?;
        }
        // Nothing the agent holds open reaches the command: every descriptor above the
        // standard streams closes at exec (close-on-exec rather than closed, so the
        // spawning code's own exec-error pipe keeps working until then).
        if libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if mode == ChildMode::Helper {
            for fd in std::iter::once(err_fd).chain(proxy_fd) {
                check(libc::fcntl(fd, libc::F_SETFD, 0).min(0))?;
            }
        }
        for &(res, v) in rlimits {
            let lim = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            check(libc::setrlimit(res, &lim))?;
        }
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        if mode == ChildMode::LimitsOnly {
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        }
        Ok(())
    }
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
pub(crate) unsafe fn loopback_up() -> std::result::Result<(), ()> {
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
pub(crate) unsafe fn proxy_listener(sock: RawFd) -> std::result::Result<(), ()> {
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
            && super::fdpass::send(sock, &[0], &[l]).is_ok();
        libc::close(l);
        if ok { Ok(()) } else { Err(()) }
    }
}

/// Receive the proxy listener the child sent (it was sent before `exec`, so it is already
/// queued when `spawn` returns).
pub(crate) fn recv_fd(sock: &OwnedFd) -> std::io::Result<OwnedFd> {
    use super::fdpass::{self, Received};
    let mut out = [-1; fdpass::MAX_FDS];
    let mut byte = [0u8; 1];
    // SAFETY: the descriptors received are ours: the first is owned below, the rest closed.
    match unsafe { fdpass::recv(sock.as_raw_fd(), libc::MSG_DONTWAIT, &mut byte, &mut out) } {
        Err(errno) => Err(std::io::Error::from_raw_os_error(errno)),
        Ok(Received::Message { fds: n, .. }) if n >= 1 => {
            for &fd in &out[1..n] {
                // SAFETY: an extra descriptor we received and own.
                unsafe { libc::close(fd) };
            }
            // SAFETY: a fresh descriptor we received and own from here on.
            Ok(unsafe { OwnedFd::from_raw_fd(out[0]) })
        }
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "no descriptor in the proxy message",
        )),
    }
}

/// The bubblewrap command line that builds the same view (`mounts`, parents first) and wraps
/// the command that follows it.
pub(crate) fn bwrap_args(
    worktree: &Path,
    mounts: &[super::view::Mount],
    network: NetworkMode,
) -> Vec<std::ffi::OsString> {
    use super::view::Mount;
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
    ] {
        a.push(f.into());
    }
    if network != NetworkMode::On {
        a.push("--unshare-net".into());
    }
    let mut push = |items: &[&std::ffi::OsStr]| a.extend(items.iter().map(|s| s.to_os_string()));
    for m in mounts {
        match m {
            Mount::Bind { src, dest, rw } => {
                let flag = if *rw { "--bind" } else { "--ro-bind" };
                push(&[flag.as_ref(), src.as_os_str(), dest.as_os_str()]);
            }
            // bubblewrap binds by path: the executor checked there is no link on it when it
            // was made, and nothing but the agent writes a set-up entry once it is done.
            Mount::NoLinks { src, dest } => {
                push(&["--ro-bind".as_ref(), src.as_os_str(), dest.as_os_str()]);
            }
            Mount::Tmpfs { dest, size, .. } => {
                let size = size.to_string();
                push(&[
                    "--size".as_ref(),
                    size.as_ref(),
                    "--tmpfs".as_ref(),
                    dest.as_os_str(),
                ]);
            }
            Mount::Symlink { target, dest } => {
                push(&["--symlink".as_ref(), target.as_os_str(), dest.as_os_str()]);
            }
            Mount::Hide { dest } => match std::fs::symlink_metadata(dest) {
                Ok(meta) if meta.is_dir() => push(&[
                    "--tmpfs".as_ref(),
                    dest.as_os_str(),
                    "--remount-ro".as_ref(),
                    dest.as_os_str(),
                ]),
                Ok(meta) if meta.is_file() => {
                    push(&["--ro-bind".as_ref(), "/dev/null".as_ref(), dest.as_os_str()]);
                }
                _ => {}
            },
            Mount::Proc { dest } => push(&["--proc".as_ref(), dest.as_os_str()]),
            Mount::Dev { dest, .. } => push(&["--dev".as_ref(), dest.as_os_str()]),
        }
    }
    // The root itself (bubblewrap's tmpfs holding the mount points) is read-only, as under
    // the helper.
    a.push("--remount-ro".into());
    a.push("/".into());
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
            off.len() > on.len() && allow.len() == off.len(),
            "{} {} {}",
            off.len(),
            allow.len(),
            on.len()
        );
    }

    #[test]
    fn bwrap_args_bind_git_read_only_after_the_worktree() {
        use crate::exec::view::Mount;
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join(".git")).unwrap();
        let mut mounts = vec![
            Mount::Bind {
                src: d.path().join(".git"),
                dest: d.path().join(".git"),
                rw: false,
            },
            Mount::Bind {
                src: d.path().to_path_buf(),
                dest: d.path().to_path_buf(),
                rw: true,
            },
        ];
        crate::exec::view::sort(&mut mounts);
        let args: Vec<String> = bwrap_args(d.path(), &mounts, NetworkMode::Off)
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
        let on = bwrap_args(d.path(), &mounts, NetworkMode::On);
        assert!(!on.iter().any(|a| a == "--unshare-net"));
    }
}
