//! The sandbox helper: the agent's own binary, exec'd fresh with a hidden first argument, that
//! builds a command's view of the machine and runs the command in it.
//!
//! Everything between `fork` and `exec` in the agent is restricted to async-signal-safe system
//! calls (the agent is multithreaded; one allocation there can deadlock). The helper is a new
//! process image instead, single-threaded, so the namespace and mount set-up is ordinary Rust.
//! It is reached through the `.init_array` hook ([`super::hook`]) when `argv[1]` is
//! [`HELPER_ARG`], or run in the spawner's forked child ([`run_in_process`]).
//!
//! What the helper does, in order:
//!
//! 1. closes every descriptor but the standard streams and the two it was given (`close_range`);
//! 2. `unshare`s a user namespace mapping its own uid and gid, then mount, pid, IPC and UTS
//!    namespaces, and a network namespace unless the network is on (run by a spawner, it
//!    enters the user namespace and the network namespace the spawner made once instead of
//!    making its own: [`Kept`]);
//! 3. starts the namespace's init (pid 1) in its own memory ([`run_sharing_memory`]), which
//!    builds the view: a fresh tmpfs as root
//!    (`pivot_root`, as bubblewrap does), read-only binds of what the [`Spec`] names, the
//!    worktree read-write with its `.git` directories read-only, bounded tmpfs `$HOME`, `/tmp`
//!    and `/dev/shm`, a new `/proc` for the pid namespace, a minimal `/dev`; the host's root
//!    is then detached, so nothing else of the machine is reachable by any path;
//! 4. init brings up `lo` (and, for `allowlist`, hands the proxy's listening socket to the
//!    agent), then starts the command the same way, which sets its resource limits, drops every capability,
//!    sets `no_new_privs`, enters a Landlock domain over the view and a seccomp filter, and
//!    `exec`s;
//! 5. init reaps everything until the command exits, then exits itself: the kernel kills every
//!    process left in the pid namespace, and init's exit completes only once they are gone;
//! 6. the helper (outside the pid namespace) ends the way the command ended (same exit code,
//!    or the same signal), so the executor sees the command's status.
//!
//! A failure before the command runs is written to the step descriptor as an errno and a
//! message, and the helper exits with [`SETUP_FAILED`].

use std::ffi::{CStr, CString, OsString, c_char, c_int};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::view::Mount;
use crate::config::NetworkMode;

/// `argv[1]` that makes a binary linking this library act as the sandbox helper.
pub(crate) const HELPER_ARG: &str = "__git-agent-sandbox";

/// Exit code of the helper when the sandbox could not be set up (the step descriptor says why).
pub(crate) const SETUP_FAILED: i32 = 125;

/// Whether `argv` starts the sandbox helper.
pub(crate) fn is_helper_call(argv: &[CString]) -> bool {
    argv.get(1)
        .is_some_and(|a| a.as_bytes() == HELPER_ARG.as_bytes())
}

/// The helper run in the calling process instead of exec'd, with `env` as its environment
/// (what `execve` would have given it). The spawner's child is a fresh, single-threaded
/// process of this same binary: exec'ing it again only reloads a large executable (about
/// 1.5 ms a command for `git-agent`).
///
/// `ns` says how the command's namespaces come: entered from what the spawner keeps and made
/// here, or already made before the request came (a standby helper).
///
/// # Safety
/// Only in a single-threaded process that ends here (the spawner's forked child).
pub(crate) unsafe fn run_in_process(argv: &[CString], env: &[CString], ns: Namespaces<'_>) -> ! {
    // SAFETY: (whole body) the environment of a single-threaded process, then its end.
    unsafe {
        libc::clearenv();
        for kv in env {
            let bytes = kv.as_bytes();
            let Some(eq) = bytes.iter().position(|&b| b == b'=') else {
                continue;
            };
            let (Ok(k), Ok(v)) = (CString::new(&bytes[..eq]), CString::new(&bytes[eq + 1..]))
            else {
                continue;
            };
            libc::setenv(k.as_ptr(), v.as_ptr(), 1);
        }
        let args: Vec<Vec<u8>> = argv.iter().map(|a| a.as_bytes().to_vec()).collect();
        libc::_exit(main(&args, ns))
    }
}

/// Namespaces a spawner makes once and every command it starts enters, instead of each
/// command making its own: a user namespace, and a network namespace with `lo` up when the
/// network is off. Making a network namespace (and, later, the kernel's tearing it down) is
/// the dearest of a command's namespaces; entering one costs next to nothing.
///
/// What the commands of one spawner share through them is nothing a command can change: they
/// run one after another, each in its own mount, pid, IPC and UTS namespaces, with every
/// capability dropped, so none can configure the shared network (`CAP_NET_ADMIN`) or outlive
/// its pid namespace to hold a socket open for the next. Commands running at once have
/// spawners, and so namespaces, of their own; the egress proxy's network (`allowlist`) is
/// still made per command, its listener being per command.
#[derive(Debug)]
pub(crate) struct Kept {
    user: std::os::fd::OwnedFd,
    net: Option<std::os::fd::OwnedFd>,
}

/// What of the command's namespaces was entered rather than made.
#[derive(Debug, Clone, Copy, Default)]
struct Entered {
    user: bool,
    net: bool,
}

impl Kept {
    /// Make them, with a network namespace when `net`, in a short-lived child of this
    /// single-threaded process: the child makes them and waits; this process opens them
    /// through `/proc` and ends the child.
    pub(crate) fn create(net: bool) -> std::io::Result<Kept> {
        let (ready_r, ready_w) = std::io::pipe()?;
        // SAFETY: this process is single-threaded; the child ends in `make_and_wait`.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            drop(ready_r);
            make_and_wait(net, ready_w.as_raw_fd());
        }
        drop(ready_w);
        let mut status = [1u8];
        let made = std::io::Read::read_exact(&mut &ready_r, &mut status).is_ok() && status[0] == 0;
        let open = |ns: &str| std::fs::File::open(format!("/proc/{pid}/ns/{ns}")).map(Into::into);
        let kept = if made {
            open("user").and_then(|user| {
                let net = if net { Some(open("net")?) } else { None };
                Ok(Kept { user, net })
            })
        } else {
            Err(std::io::Error::other("could not make the namespaces"))
        };
        // SAFETY: our own child, killed and reaped.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        kept
    }

    /// Enter them: the user namespace, and the network namespace when the command is to
    /// have one of its own and one was made.
    fn enter(&self, net: bool) -> Step<Entered> {
        // SAFETY: `setns` on descriptors we hold, in a single-threaded process.
        unsafe {
            check(
                libc::setns(self.user.as_raw_fd(), libc::CLONE_NEWUSER),
                || "enter the spawner's user namespace".into(),
            )?;
            let net = match (&self.net, net) {
                (Some(fd), true) => {
                    check(libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET), || {
                        "enter the spawner's network namespace".into()
                    })?;
                    true
                }
                _ => false,
            };
            Ok(Entered { user: true, net })
        }
    }
}

/// How a helper comes by its command's namespaces.
pub(crate) enum Namespaces<'a> {
    /// Enter what the spawner keeps (when it keeps any) and make the rest, per command.
    Make(Option<&'a Kept>),
    /// Entered and made before the request came ([`prepare`]).
    Ready(Ready),
}

/// A standby helper's namespaces: the spawner's user and network namespaces entered, and the
/// next command's mount, pid, IPC and UTS namespaces made (the pid namespace's init is not
/// started yet: it is the first child, and it builds the view when the request comes).
#[derive(Debug)]
pub(crate) struct Ready {
    entered: Entered,
}

/// Enter `kept` and make the next command's namespaces, ahead of its request: a standby
/// helper's first step (see [`super::spawner`]). Only for a spawner that keeps a network
/// namespace (the network off), so that nothing about the command's network is left to
/// decide when its request comes.
///
/// # Safety
/// Only in a single-threaded process (the spawner's forked child).
pub(crate) unsafe fn prepare(kept: &Kept) -> std::io::Result<Ready> {
    let failed = |f: Failure| {
        std::io::Error::new(
            std::io::Error::from_raw_os_error(f.errno).kind(),
            format!("{}: {}", f.what, std::io::Error::from_raw_os_error(f.errno)),
        )
    };
    if kept.net.is_none() {
        return Err(std::io::Error::other(
            "a standby helper needs the spawner's network namespace",
        ));
    }
    let entered = kept.enter(true).map_err(failed)?;
    make_namespaces(false, entered).map_err(failed)?;
    make_stacks_ahead();
    Ok(Ready { entered })
}

/// The child of [`Kept::create`]: make the namespaces, say so (a zero byte) on `ready`, and
/// wait to be killed.
fn make_and_wait(net: bool, ready: RawFd) -> ! {
    close_all_but(&mut [ready]);
    // SAFETY: (whole body) system calls of a single-threaded child that ends here.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        let made = make_user_namespace().and_then(|()| {
            if net {
                check(libc::unshare(libc::CLONE_NEWNET), || {
                    "create a network namespace".into()
                })?;
                super::sandbox::loopback_up().map_err(|()| last_err(|| "bring up lo".into()))?;
            }
            Ok(())
        });
        let status = [u8::from(made.is_err())];
        libc::write(ready, status.as_ptr().cast(), 1);
        loop {
            libc::pause();
        }
    }
}

/// A new user namespace for this process, mapping its own uid and gid.
fn make_user_namespace() -> Step {
    // SAFETY: system calls of this single-threaded process.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    // SAFETY: as above.
    check(unsafe { libc::unshare(libc::CLONE_NEWUSER) }, || {
        "create a user namespace".into()
    })?;
    write_file("/proc/self/setgroups", "deny")?;
    write_file("/proc/self/uid_map", &format!("{uid} {uid} 1\n"))?;
    write_file("/proc/self/gid_map", &format!("{gid} {gid} 1\n"))
}

/// What the view holds and how the command runs: made by the executor, read by the helper.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Spec {
    /// Mounts in the order they are made (parents before children).
    pub mounts: Vec<Mount>,
    /// Give the command its own network namespace (only `lo`).
    pub unshare_net: bool,
    /// Network mode, for the seccomp filter and the Landlock TCP rules.
    pub network: NetworkMode,
    /// Working directory of the command (inside the view).
    pub cwd: PathBuf,
    /// Paths (inside the view) the Landlock domain lets the command write.
    pub writable: Vec<PathBuf>,
    /// `(resource, limit)` pairs set on the command.
    pub rlimits: Vec<(u32, u64)>,
    /// Descriptor for the failure report.
    pub step_fd: RawFd,
    /// Descriptor the proxy's listening socket is sent on (`allowlist`).
    pub proxy_fd: Option<RawFd>,
}

/// The helper's command line: `argv[0]`, the hidden argument, the spec, `--`, the command.
pub(crate) fn command_line(spec: &Spec, argv: &[OsString]) -> std::io::Result<Vec<OsString>> {
    let json = serde_json::to_string(spec).map_err(std::io::Error::other)?;
    let mut a: Vec<OsString> = vec![
        "git-agent-sandbox".into(),
        HELPER_ARG.into(),
        json.into(),
        "--".into(),
    ];
    a.extend(argv.iter().cloned());
    Ok(a)
}

/// A failure before the command ran: the errno and what was being done.
struct Failure {
    errno: i32,
    what: String,
}

type Step<T = ()> = std::result::Result<T, Failure>;

fn last_err(what: impl FnOnce() -> String) -> Failure {
    Failure {
        errno: std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
        what: what(),
    }
}

fn io_err(e: std::io::Error, what: impl FnOnce() -> String) -> Failure {
    Failure {
        errno: e.raw_os_error().unwrap_or(libc::EIO),
        what: what(),
    }
}

fn check(r: c_int, what: impl FnOnce() -> String) -> Step {
    if r == 0 { Ok(()) } else { Err(last_err(what)) }
}

/// Write the failure record (errno, little-endian, then the message) in one `write`.
fn report(fd: RawFd, f: &Failure) {
    let mut buf = f.errno.to_le_bytes().to_vec();
    buf.extend_from_slice(f.what.as_bytes());
    buf.truncate(libc::PIPE_BUF);
    // SAFETY: writes a buffer we own.
    unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
}

/// Read a failure record written by the helper: `(errno, message)`.
pub(crate) fn read_failure(fd: RawFd) -> Option<(i32, String)> {
    let mut buf = [0u8; libc::PIPE_BUF];
    // SAFETY: reads into a stack buffer from a descriptor the caller owns.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 4 {
        return None;
    }
    let n = n as usize;
    let errno = i32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
    Some((errno, String::from_utf8_lossy(&buf[4..n]).into_owned()))
}

fn cpath(p: &Path) -> CString {
    // Paths come from the spec, which came from `Path`s: no interior NUL (a NUL would make
    // this an empty path, which every call below refuses).
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// The helper's `main`. `args` is the whole command line.
pub(super) fn main(args: &[Vec<u8>], ns: Namespaces<'_>) -> i32 {
    let Some(spec) = args
        .get(2)
        .and_then(|s| serde_json::from_slice::<Spec>(s).ok())
    else {
        return SETUP_FAILED;
    };
    let argv: Vec<CString> = args
        .iter()
        .skip(4)
        .filter_map(|a| CString::new(a.clone()).ok())
        .collect();
    if argv.is_empty() || args.get(3).map(Vec::as_slice) != Some(b"--") {
        return SETUP_FAILED;
    }
    let (entered, made) = match ns {
        Namespaces::Make(None) => (Entered::default(), false),
        Namespaces::Make(Some(k)) => match k.enter(spec.unshare_net) {
            Ok(e) => (e, false),
            Err(f) => {
                report(spec.step_fd, &f);
                return SETUP_FAILED;
            }
        },
        // Made with the spawner's network namespace: a command that is to have the network
        // would find none, which fails closed; one without it is as it asked.
        Namespaces::Ready(r) => (r.entered, true),
    };
    let mut keep = vec![spec.step_fd];
    keep.extend(spec.proxy_fd);
    close_all_but(&mut keep);
    for &fd in &keep {
        // SAFETY: the command must not inherit these; init and the helper keep them open.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    let namespaces = match made {
        true => Ok(()),
        false => make_namespaces(spec.unshare_net, entered),
    };
    match namespaces.and_then(|()| outer(&spec, &argv, entered)) {
        Ok(code) => code,
        Err(f) => {
            report(spec.step_fd, &f);
            SETUP_FAILED
        }
    }
}

/// Close every descriptor from 3 up except `keep`.
fn close_all_but(keep: &mut [RawFd]) {
    keep.sort_unstable();
    let mut lo: u32 = 3;
    let close = |lo: u32, hi: u32| {
        // SAFETY: closes descriptors of this single-threaded process.
        unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0u32) };
    };
    for &k in keep.iter() {
        let Ok(k) = u32::try_from(k) else { continue };
        if k < lo {
            continue;
        }
        if k > lo {
            close(lo, k - 1);
        }
        lo = k + 1;
    }
    close(lo, u32::MAX);
}

fn write_file(path: &str, data: &str) -> Step {
    std::fs::write(path, data).map_err(|e| io_err(e, || format!("write {path}")))
}

/// The command's namespaces, those not `entered` already: a user namespace of its own, then
/// mount, pid, IPC and UTS namespaces, and a network namespace when `unshare_net`.
fn make_namespaces(unshare_net: bool, entered: Entered) -> Step {
    if !entered.user {
        make_user_namespace()?;
    }
    let mut flags =
        libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    if unshare_net && !entered.net {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare in a single-threaded process.
    check(unsafe { libc::unshare(flags) }, || {
        "create mount, pid, IPC, UTS and network namespaces".into()
    })
}

/// Init, in the namespaces made; returns the exit code the helper ends with (or re-raises
/// the command's signal and does not return).
fn outer(spec: &Spec, argv: &[CString], entered: Entered) -> Step<i32> {
    // SAFETY: (whole body) system calls on memory we own; this process is single-threaded.
    unsafe {
        let mut status_pipe = [0; 2];
        check(
            libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC),
            || "status pipe".into(),
        )?;
        // The helper only waits for init: it may as well be suspended while init runs in its
        // memory, and no page table is copied.
        let mut start_init = || -> c_int {
            libc::close(status_pipe[0]);
            // The namespace dies with the helper: a helper killed by the executor (timeout,
            // process group kill) takes init, and so every process of the command, with it.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            match init(spec, argv, status_pipe[1], entered) {
                Ok(()) => 0,
                Err(f) => {
                    report(spec.step_fd, &f);
                    SETUP_FAILED
                }
            }
        };
        let pid = run_sharing_memory(&mut start_init)
            .map_err(|e| io_err(e, || "start the namespace's init".into()))?;
        libc::close(status_pipe[1]);
        let mut st = 0;
        while libc::waitpid(pid, &mut st, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                return Err(last_err(|| "wait for the namespace's init".into()));
            }
        }
        let mut cmd_status: c_int = 0;
        let n = libc::read(status_pipe[0], (&mut cmd_status as *mut c_int).cast(), 4);
        if n != 4 {
            // Init ended without a command status: it failed (and reported why) or was killed.
            if libc::WIFEXITED(st) {
                return Ok(libc::WEXITSTATUS(st));
            }
            cmd_status = st;
        }
        if libc::WIFSIGNALED(cmd_status) {
            let sig = libc::WTERMSIG(cmd_status);
            let core = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &core);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            return Ok(128 + sig);
        }
        Ok(libc::WEXITSTATUS(cmd_status))
    }
}

/// The namespace's init: build the view, start the command, reap until it exits, then write
/// its wait status to `status_fd`.
fn init(spec: &Spec, argv: &[CString], status_fd: RawFd, entered: Entered) -> Step {
    build_view(spec)?;
    if spec.unshare_net && !entered.net {
        // SAFETY: plain system calls in the new network namespace.
        unsafe { super::sandbox::loopback_up() }.map_err(|()| last_err(|| "bring up lo".into()))?;
    }
    if let Some(fd) = spec.proxy_fd {
        // SAFETY: plain system calls; `fd` is the socket the executor gave us.
        unsafe { super::sandbox::proxy_listener(fd) }
            .map_err(|()| last_err(|| "open the proxy socket".into()))?;
        // SAFETY: the command has no use for it.
        unsafe { libc::close(fd) };
    }
    // Prepared before the fork so the child only applies them.
    let ruleset =
        super::sandbox::landlock_ruleset(&spec.writable, spec.network).map_err(|e| Failure {
            errno: libc::EPERM,
            what: e.to_string(),
        })?;
    let seccomp = super::sandbox::seccomp_program(spec.network).map_err(|e| Failure {
        errno: libc::EINVAL,
        what: e.to_string(),
    })?;
    let cwd = cpath(&spec.cwd);
    // SAFETY: (rest) system calls; the child execs or exits.
    unsafe {
        // Init is suspended until the command has exec'd (or failed to): posix_spawn's way,
        // with no page table copied for a child that replaces its image at once.
        let mut start_command = || -> c_int {
            libc::close(status_fd);
            let f = match confine_and_exec(spec, argv, &cwd, ruleset.as_raw_fd(), &seccomp) {
                Err(f) => f,
                Ok(never) => match never {},
            };
            report(spec.step_fd, &f);
            127
        };
        let pid = run_sharing_memory(&mut start_command)
            .map_err(|e| io_err(e, || "start the command".into()))?;
        drop(ruleset);
        libc::close(spec.step_fd);
        loop {
            let mut st = 0;
            let r = libc::waitpid(-1, &mut st, 0);
            if r == pid {
                libc::write(status_fd, (&st as *const c_int).cast(), 4);
                return Ok(());
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                return Err(last_err(|| "wait for the command".into()));
            }
        }
    }
}

/// The stack of a [`run_sharing_memory`] child; init builds the view on it.
const CHILD_STACK: usize = 1 << 20;

/// Run `f` in a child that shares this process's memory (`CLONE_VM | CLONE_VFORK`, as
/// `posix_spawn` does), on a stack of its own with a guard page below it; the child ends with
/// `f`'s return value as its exit code. This process is suspended until the child execs or
/// exits, so the two never run at once and nothing of this process is copied: a fork of the
/// agent's image costs 100–200 µs of page tables and copy-on-write faults here, two per
/// command. Returns the child's pid.
///
/// # Safety
/// Only in a single-threaded process. `f` runs with this process's memory, so what it
/// allocates stays allocated here, and it must not unwind.
unsafe fn run_sharing_memory(f: &mut dyn FnMut() -> c_int) -> std::io::Result<libc::pid_t> {
    extern "C" fn trampoline(arg: *mut libc::c_void) -> c_int {
        // SAFETY: `arg` is the `&mut dyn FnMut` below, alive until the child execs or exits.
        let f = unsafe { &mut *arg.cast::<&mut dyn FnMut() -> c_int>() };
        let code = f();
        // SAFETY: ends the child without running this process's exit handlers.
        unsafe { libc::_exit(code) }
    }
    // SAFETY: (whole body) an anonymous mapping we own, unmapped once the child has left it.
    unsafe {
        let stack = match take_stack_made_ahead() {
            Some(s) => s,
            None => map_stack()?,
        };
        let mut f = f;
        let pid = libc::clone(
            trampoline,
            stack.base.cast::<u8>().add(stack.len).cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&mut f as *mut &mut dyn FnMut() -> c_int).cast(),
        );
        let err = std::io::Error::last_os_error();
        // The child has exec'd (its own memory now) or exited: the stack is free.
        libc::munmap(stack.base, stack.len);
        if pid < 0 { Err(err) } else { Ok(pid) }
    }
}

/// A child's stack: an anonymous mapping with a guard page at its low end.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

/// How much of a stack made ahead is faulted in: what init and the command's child use
/// before `exec` fits in it many times over.
const STACK_FAULTED_AHEAD: usize = 128 << 10;

/// Stacks a standby helper made ahead ([`make_stacks_ahead`]), for init and the command.
static mut STACKS_MADE_AHEAD: [Option<Stack>; 2] = [const { None }; 2];

/// Map a child's stack of [`CHILD_STACK`] with a guard page below it.
fn map_stack() -> std::io::Result<Stack> {
    // SAFETY: a fresh anonymous mapping; the guard page's protection is ours to set.
    unsafe {
        let page = usize::try_from(libc::sysconf(libc::_SC_PAGESIZE)).unwrap_or(4096);
        let len = CHILD_STACK + page;
        let base = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // The guard page: an overflow faults instead of writing into whatever lies below.
        libc::mprotect(base, page, libc::PROT_NONE);
        Ok(Stack { base, len })
    }
}

/// Map init's and the command's stacks now and fault in their top, so that neither pays
/// for it when the request comes (a standby helper, single-threaded).
fn make_stacks_ahead() {
    // SAFETY: the only access to the array, in a single-threaded process; each top is inside
    // its fresh mapping.
    unsafe {
        let stacks = &raw mut STACKS_MADE_AHEAD;
        for slot in (*stacks).iter_mut() {
            if let Ok(s) = map_stack() {
                let top = s.base.cast::<u8>().add(s.len - STACK_FAULTED_AHEAD);
                std::ptr::write_bytes(top, 0, STACK_FAULTED_AHEAD);
                *slot = Some(s);
            }
        }
    }
}

/// One of the stacks made ahead, if any is left.
fn take_stack_made_ahead() -> Option<Stack> {
    // SAFETY: as in `make_stacks_ahead`: one process (and the children that share its
    // memory, which run only while it is suspended) at a time.
    unsafe {
        let stacks = &raw mut STACKS_MADE_AHEAD;
        (*stacks).iter_mut().find_map(Option::take)
    }
}

enum Never {}

/// In the command's process: limits, no capabilities, `no_new_privs`, Landlock, seccomp, exec.
fn confine_and_exec(
    spec: &Spec,
    argv: &[CString],
    cwd: &CStr,
    ruleset: RawFd,
    seccomp: &[seccompiler::sock_filter],
) -> Step<Never> {
    // SAFETY: (whole body) system calls on memory we own.
    unsafe {
        check(libc::chdir(cwd.as_ptr()), || {
            format!("enter {}", spec.cwd.display())
        })?;
        for &(res, v) in &spec.rlimits {
            let lim = libc::rlimit {
                rlim_cur: v,
                rlim_max: v,
            };
            check(libc::setrlimit(res as _, &lim), || {
                format!("set resource limit {res}")
            })?;
        }
        // An empty bounding set: exec as (namespaced) root grants no capabilities.
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0
                && *libc::__errno_location() != libc::EINVAL
            {
                return Err(last_err(|| "drop capabilities".into()));
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
            || "clear ambient capabilities".into(),
        )?;
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), || {
            "set no_new_privs".into()
        })?;
        let r = libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32);
        if r != 0 {
            return Err(last_err(|| "enter the landlock domain".into()));
        }
        libc::close(ruleset);
        let fprog = libc::sock_fprog {
            len: seccomp.len() as libc::c_ushort,
            filter: seccomp.as_ptr() as *mut libc::sock_filter,
        };
        check(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
                0,
                0,
            ),
            || "install the seccomp filter".into(),
        )?;
        let mut ptrs: Vec<*const c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        libc::execvp(ptrs[0], ptrs.as_ptr());
        let name = argv[0].to_string_lossy().into_owned();
        Err(last_err(|| format!("exec {name}")))
    }
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const AT_RECURSIVE: c_int = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Set mount attributes on `path`'s mount and every mount below it.
fn set_attr(path: &Path, attrs: u64, recursive: bool) -> Step {
    let c = cpath(path);
    let attr = MountAttr {
        attr_set: attrs,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: mount_setattr reads `attr` (of the size given).
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c.as_ptr(),
            if recursive { AT_RECURSIVE } else { 0 },
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        return Ok(());
    }
    if std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS) {
        return Err(last_err(|| format!("make {} read-only", path.display())));
    }
    // Before Linux 5.12: remount the top mount, keeping the flags a user namespace locks.
    // SAFETY: statvfs is plain data; all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: statvfs writes into a struct we own.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(last_err(|| format!("statvfs {}", path.display())));
    }
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
        (libc::ST_RDONLY, libc::MS_RDONLY),
    ] {
        if st.f_flag & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    if attrs & MOUNT_ATTR_RDONLY != 0 {
        flags |= libc::MS_RDONLY;
    }
    if attrs & MOUNT_ATTR_NOSUID != 0 {
        flags |= libc::MS_NOSUID;
    }
    if attrs & MOUNT_ATTR_NODEV != 0 {
        flags |= libc::MS_NODEV;
    }
    // SAFETY: remount of an existing mount point.
    check(
        unsafe {
            libc::mount(
                std::ptr::null(),
                c.as_ptr(),
                std::ptr::null(),
                flags,
                std::ptr::null(),
            )
        },
        || format!("remount {} read-only", path.display()),
    )
}

fn mount(
    src: Option<&CStr>,
    dest: &Path,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> Step {
    let d = cpath(dest);
    let data = data.map(|s| CString::new(s).unwrap_or_default());
    // SAFETY: all pointers are valid NUL-terminated strings or null.
    check(
        unsafe {
            libc::mount(
                src.map_or(std::ptr::null(), CStr::as_ptr),
                d.as_ptr(),
                fstype.map_or(std::ptr::null(), CStr::as_ptr),
                flags,
                data.as_ref()
                    .map_or(std::ptr::null(), |s| s.as_ptr().cast()),
            )
        },
        || format!("mount {}", dest.display()),
    )
}

/// `open_tree(2)`'s flag: a detached copy of the tree, to be attached with `move_mount(2)`.
const OPEN_TREE_CLONE: libc::c_uint = 1;
/// `move_mount(2)`'s flag: the source is the descriptor itself.
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// Bind `from` at `dest`, reaching `from` from `/` one component at a time with
/// `O_NOFOLLOW`, then mounting the tree of that descriptor (`open_tree`, `move_mount`): no
/// symbolic link on the way is followed, whoever put it there and whenever.
fn bind_without_links(from: &Path, dest: &Path) -> Step {
    let what = || format!("bind {} without links", from.display());
    // SAFETY: a constant NUL-terminated path; the result is checked.
    let mut fd = unsafe {
        libc::open(
            c"/".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(last_err(what));
    }
    for comp in from.components().skip(1) {
        let c = CString::new(comp.as_os_str().as_encoded_bytes()).unwrap_or_default();
        // SAFETY: `fd` is an open directory descriptor and `c` a valid C string.
        let next = unsafe {
            libc::openat(
                fd,
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        let err = (next < 0).then(|| last_err(what));
        // SAFETY: `fd` is ours and not used again.
        unsafe { libc::close(fd) };
        if let Some(e) = err {
            return Err(e);
        }
        fd = next;
    }
    // SAFETY: `fd` is an open descriptor and "" with AT_EMPTY_PATH names it.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd,
            c"".as_ptr(),
            OPEN_TREE_CLONE
                | AT_RECURSIVE as libc::c_uint
                | libc::AT_EMPTY_PATH as libc::c_uint
                | libc::O_CLOEXEC as libc::c_uint,
        )
    };
    // SAFETY: `fd` is ours and not used again.
    unsafe { libc::close(fd) };
    if tree < 0 {
        return Err(last_err(what));
    }
    let d = cpath(dest);
    // SAFETY: `tree` is the detached tree just opened; `d` a valid C string.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree as c_int,
            c"".as_ptr(),
            libc::AT_FDCWD,
            d.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    let err = (r != 0).then(|| last_err(what));
    // SAFETY: `tree` is ours and not used again.
    unsafe { libc::close(tree as c_int) };
    err.map_or(Ok(()), Err)
}

fn mkdirs(p: &Path) -> Step {
    std::fs::create_dir_all(p).map_err(|e| io_err(e, || format!("create {}", p.display())))
}

/// An empty file to mount on (its parents created).
fn touch(p: &Path) -> Step {
    if let Some(parent) = p.parent() {
        mkdirs(parent)?;
    }
    match std::fs::symlink_metadata(p) {
        Ok(_) => Ok(()),
        Err(_) => std::fs::File::create(p)
            .map(drop)
            .map_err(|e| io_err(e, || format!("create {}", p.display()))),
    }
}

/// `base` joined with an absolute `p`.
fn under(base: &Path, p: &Path) -> PathBuf {
    base.join(p.strip_prefix("/").unwrap_or(p))
}

/// Build the view and make it the root (in init, inside the new namespaces).
fn build_view(spec: &Spec) -> Step {
    let base = Path::new("/tmp");
    let old = Path::new("/oldroot");
    let new = Path::new("/newroot");
    // Nothing we mount reaches the host, nothing the host mounts later reaches us.
    mount(
        None,
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )?;
    mkdirs(base)?;
    mount(
        Some(c"tmpfs"),
        base,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("size=1m,mode=0755"),
    )?;
    mkdirs(&base.join("oldroot"))?;
    mkdirs(&base.join("newroot"))?;
    mount(
        Some(c"tmpfs"),
        &base.join("newroot"),
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some("size=1m,mode=0755"),
    )?;
    let b = cpath(base);
    let o = cpath(&base.join("oldroot"));
    // SAFETY: pivot_root with two valid paths.
    if unsafe { libc::syscall(libc::SYS_pivot_root, b.as_ptr(), o.as_ptr()) } != 0 {
        return Err(last_err(|| "pivot_root onto a fresh tmpfs".into()));
    }
    std::env::set_current_dir("/").map_err(|e| io_err(e, || "chdir /".into()))?;
    for m in &spec.mounts {
        let dest = under(new, m.dest());
        match m {
            Mount::Bind { src, rw, .. } => {
                let from = under(old, src);
                let meta = std::fs::metadata(&from)
                    .map_err(|e| io_err(e, || format!("bind {}", src.display())))?;
                if meta.is_dir() {
                    mkdirs(&dest)?;
                } else {
                    touch(&dest)?;
                }
                let f = cpath(&from);
                mount(
                    Some(f.as_c_str()),
                    &dest,
                    None,
                    libc::MS_BIND | libc::MS_REC,
                    None,
                )?;
                let attrs = if *rw {
                    MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                } else {
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                };
                set_attr(&dest, attrs, true)?;
            }
            Mount::NoLinks { src, .. } => {
                mkdirs(&dest)?;
                bind_without_links(&under(old, src), &dest)?;
                set_attr(
                    &dest,
                    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                    true,
                )?;
            }
            Mount::Tmpfs { size, mode, .. } => {
                mkdirs(&dest)?;
                mount(
                    Some(c"tmpfs"),
                    &dest,
                    Some(c"tmpfs"),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    Some(&format!("size={size},mode={mode:o}")),
                )?;
            }
            Mount::Symlink { target, .. } => {
                if let Some(parent) = dest.parent() {
                    mkdirs(parent)?;
                }
                std::os::unix::fs::symlink(target, &dest)
                    .map_err(|e| io_err(e, || format!("symlink {}", m.dest().display())))?;
            }
            Mount::Hide { .. } => match std::fs::symlink_metadata(&dest) {
                Ok(meta) if meta.is_dir() => {
                    mount(
                        Some(c"tmpfs"),
                        &dest,
                        Some(c"tmpfs"),
                        libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                        Some("size=4k,mode=0"),
                    )?;
                }
                Ok(meta) if meta.is_file() => {
                    let empty = Path::new("/empty");
                    touch(empty)?;
                    let e = cpath(empty);
                    mount(Some(e.as_c_str()), &dest, None, libc::MS_BIND, None)?;
                    set_attr(
                        &dest,
                        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                        false,
                    )?;
                }
                // Absent (or a symlink, which the view's root cannot follow out of): nothing to hide.
                _ => {}
            },
            Mount::Proc { .. } => {
                mkdirs(&dest)?;
                mount(
                    Some(c"proc"),
                    &dest,
                    Some(c"proc"),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    None,
                )?;
                // Read-only sysctls, as under bubblewrap: the network namespace may be the
                // spawner's, kept for its next command, and Landlock is then not the only
                // thing between a command and the settings that command would inherit.
                let sys = dest.join("sys");
                let sys_c = cpath(&sys);
                mount(Some(&sys_c), &sys, None, libc::MS_BIND | libc::MS_REC, None)?;
                set_attr(&sys, MOUNT_ATTR_RDONLY, true)?;
            }
            Mount::Dev { shm_size, .. } => dev(old, &dest, *shm_size)?,
        }
    }
    std::env::set_current_dir(new).map_err(|e| io_err(e, || "chdir /newroot".into()))?;
    // SAFETY: pivot_root(".", ".") stacks the set-up tmpfs, with the host's root below it at
    // /oldroot, on the view; one lazy unmount detaches both, and from here on no path leads
    // out of the view. (One detach, not one per tree: each ends in an RCU grace period.)
    unsafe {
        if libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) != 0 {
            return Err(last_err(|| "pivot_root into the view".into()));
        }
        check(libc::umount2(c".".as_ptr(), libc::MNT_DETACH), || {
            "detach the set-up tmpfs and the host's root".into()
        })?;
    }
    std::env::set_current_dir("/").map_err(|e| io_err(e, || "chdir /".into()))?;
    set_attr(
        Path::new("/"),
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        false,
    )
}

/// Device nodes a command gets, bound from the host.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

fn dev(old: &Path, dest: &Path, shm_size: u64) -> Step {
    mkdirs(dest)?;
    mount(
        Some(c"tmpfs"),
        dest,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("size=64k,mode=0755"),
    )?;
    for d in DEVICES {
        let from = old.join("dev").join(d);
        if std::fs::symlink_metadata(&from).is_err() {
            continue;
        }
        let to = dest.join(d);
        touch(&to)?;
        let f = cpath(&from);
        mount(Some(f.as_c_str()), &to, None, libc::MS_BIND, None)?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        std::os::unix::fs::symlink(target, dest.join(name))
            .map_err(|e| io_err(e, || format!("symlink /dev/{name}")))?;
    }
    let pts = dest.join("pts");
    mkdirs(&pts)?;
    // A private devpts for ptys; a kernel that refuses it leaves /dev/pts empty (no ptys).
    let _ = mount(
        Some(c"devpts"),
        &pts,
        Some(c"devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    );
    let shm = dest.join("shm");
    mkdirs(&shm)?;
    mount(
        Some(c"tmpfs"),
        &shm,
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&format!("size={shm_size},mode=1777")),
    )
}
