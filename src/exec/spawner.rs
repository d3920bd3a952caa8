//! A per-executor spawner process, so that no command pays for a cgroup move, and no command
//! is forked from the agent (issue 41 point 4).
//!
//! Moving a process into a cgroup (writing `cgroup.procs`) makes the kernel wait for an RCU
//! grace period unless another move happened just before: about 13 ms on a cgroup v1 pids
//! hierarchy, most of a sandboxed spawn. The spawner joins its cgroups once, when it is
//! started (with the executor), and forks every command from inside them: a command starts
//! in its cgroups by inheritance, with no move.
//!
//! The spawner is the agent's own binary, exec'd fresh with the hidden argument
//! [`SPAWNER_ARG`] (reached through the same `.init_array` hook as the sandbox helper), its
//! control socket at descriptor 3 and nothing else of the agent's open. It is a small,
//! single-threaded process: forking a command from it copies almost nothing, and the code
//! between its `fork` and `exec` is ordinary Rust. The agent sends it, once, where its
//! cgroups are and the constant part of every command's set-up ([`Start`]); then one message
//! per command: the program, `argv` and environment, with the command's standard output and
//! error, step pipe and proxy socket attached ([`super::fdpass`]). Replies are fixed-size
//! records: ready, started (pid, or the errno of a failed set-up or `exec`) and exited (wait
//! status). For the sandbox helper with the network off, the spawner readies the next
//! command's helper between commands ([`Standby`]: forked and in its namespaces, the view not
//! built), once the agent says the last command is cleaned up after. One command at a time: the executor gives concurrent commands spawners of their
//! own, each with its own cgroup, so `pids.max` (the limit plus one for the spawner) still
//! bounds one command. When the agent's end of the socket closes, the spawner kills the
//! command it is running and exits.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt as _, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::cgroup::{Cgroup, CgroupBase};
use super::fdpass::{self, Received};
use super::sandbox::{ChildSetup, Template};

/// `argv[1]` that makes a binary linking this library act as the spawner.
pub(crate) const SPAWNER_ARG: &str = "__git-agent-spawner";

/// The spawner's control socket, in the spawner.
const CTL_FD: RawFd = 3;

/// Where a command forked by the spawner finds its step pipe and proxy socket.
pub(crate) const STEP_FD: RawFd = 3;
/// See [`STEP_FD`].
pub(crate) const PROXY_FD: RawFd = 4;

/// Largest request: the socket's buffer is raised to this where the kernel allows; a larger
/// command line is not for the spawner (the executor then spawns it directly).
const MAX_REQUEST: usize = 4 << 20;

/// The message (no descriptors, no reply) that tells the spawner the agent is done with the
/// last command's cgroup: it may now make the next command's standby helper ([`Standby`]).
const READY_THE_NEXT: &[u8] = b"next";

const READY: u32 = 0;
const STARTED: u32 = 1;
const EXITED: u32 = 2;

/// How long the spawner may take to start, join its cgroup and say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a fork-and-exec may take before the spawner counts as stuck.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A reply from the spawner.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Reply {
    kind: u32,
    pid: i32,
    errno: i32,
    status: i32,
}

/// Why a spawn through the spawner did not happen.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// The request could not be encoded (too large, a NUL byte); the spawner is fine and the
    /// caller may start the command another way, which reports the problem itself.
    Request(std::io::Error),
    /// The command's sandbox setup or `exec` failed (the errno); the spawner is fine.
    Exec(std::io::Error),
    /// The spawner is gone or misbehaved; it must be dropped.
    Broken(std::io::Error),
}

/// What the spawner is told once, when it starts.
#[derive(Debug, Serialize, Deserialize)]
struct Start {
    /// `cgroup.procs` of its pids cgroup.
    procs: PathBuf,
    /// `cgroup.procs` of its memory cgroup, when that is a directory of its own (v1).
    memory_procs: Option<PathBuf>,
    /// Whether a memory cgroup holds it and its commands.
    in_memory_cgroup: bool,
    /// The constant part of each command's set-up.
    template: Template,
    /// The working directory of every command.
    cwd: PathBuf,
    /// The namespaces made once, for every command to enter.
    keep: Keep,
}

/// Which namespaces a spawner makes once for the sandbox helper of each of its commands to
/// enter (see [`super::helper::Kept`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Keep {
    /// None: the commands are not run through the helper.
    Nothing,
    /// A user namespace; each command makes its own network namespace, if any.
    User,
    /// A user namespace and a network namespace with only `lo` (the network is off).
    UserAndNet,
}

/// What to start: the resolved program, its `argv` (with `argv[0]`) and environment.
pub(crate) struct Launch<'a> {
    /// The program file (absolute, or relative to the worktree).
    pub path: &'a Path,
    /// Arguments including `argv[0]`.
    pub argv: &'a [&'a [u8]],
    /// `NAME=value` entries.
    pub env: &'a [(String, String)],
    /// This command's sandbox setup (step pipe, proxy socket); the constant parts come from
    /// the spawner's template.
    pub setup: &'a ChildSetup,
    /// The command's standard output and error (write ends).
    pub stdout: RawFd,
    /// See `stdout`.
    pub stderr: RawFd,
}

/// A running spawner and the cgroup it lives in.
pub(crate) struct Spawner {
    child: std::process::Child,
    ctl: OwnedFd,
    cgroup: Cgroup,
    /// The pid of the command running now, if any.
    running: Option<libc::pid_t>,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawner")
            .field("pid", &self.child.id())
            .field("cgroup", &self.cgroup)
            .finish_non_exhaustive()
    }
}

impl Spawner {
    /// Make a cgroup limited to `max_processes` plus the spawner, and start a spawner that
    /// joins it and sets every command up with `template`'s constant parts in `cwd`, in the
    /// namespaces it makes once as `keep` says.
    pub(crate) fn start(
        base: &CgroupBase,
        max_processes: u64,
        memory_bytes: u64,
        template: &ChildSetup,
        cwd: &Path,
        keep: Keep,
    ) -> std::io::Result<Self> {
        let mut cgroup = base.create(max_processes.saturating_add(1), memory_bytes)?;
        let (ours, theirs) = seqpacket_pair()?;
        raise_send_buffer(&ours);
        let child = exec_spawner(&theirs)?;
        drop(theirs);
        cgroup.spare(child.id() as i32);
        let start = Start {
            procs: cgroup_path(&cgroup.procs),
            memory_procs: cgroup
                .memory
                .as_ref()
                .and_then(|m| m.procs.as_ref())
                .map(|p| cgroup_path(p)),
            in_memory_cgroup: cgroup.memory.is_some(),
            template: template.template(),
            cwd: cwd.to_path_buf(),
            keep,
        };
        let this = Self {
            child,
            ctl: ours,
            cgroup,
            running: None,
        };
        let json = serde_json::to_vec(&start).map_err(std::io::Error::other)?;
        // SAFETY: no descriptors are sent.
        unsafe { fdpass::send(this.ctl.as_raw_fd(), &json, &[]) }
            .map_err(std::io::Error::from_raw_os_error)?;
        let r = this.recv(Some(READY_TIMEOUT))?;
        if r.kind != READY || r.errno != 0 {
            return Err(std::io::Error::other(format!(
                "the spawner could not join its cgroup: {}",
                std::io::Error::from_raw_os_error(r.errno)
            )));
        }
        Ok(this)
    }

    /// The cgroup every command of this spawner runs in.
    pub(crate) fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    /// Tell the spawner the last command is cleaned up after, so that it readies the next
    /// one's sandbox while the agent does other work. Before this, a standby would be in the
    /// cgroup the agent empties after each command.
    pub(crate) fn ready_the_next(&self) {
        // SAFETY: no descriptors are sent. A spawner that is gone fails its next request.
        let _ = unsafe { fdpass::send(self.ctl.as_raw_fd(), READY_THE_NEXT, &[]) };
    }

    /// Start one command; returns its pid once it has `exec`ed.
    pub(crate) fn spawn(&mut self, l: &Launch<'_>) -> Result<i32, SpawnError> {
        if self.running.is_some() {
            return Err(SpawnError::Broken(std::io::Error::other(
                "the spawner is still running a command",
            )));
        }
        let request = encode_request(l).map_err(SpawnError::Request)?;
        let mut fds = vec![l.stdout, l.stderr, l.setup.err_fd()];
        fds.extend(l.setup.proxy_fd());
        // SAFETY: the descriptors are open for the duration of the call.
        match unsafe { fdpass::send(self.ctl.as_raw_fd(), &request, &fds) } {
            Ok(()) => {}
            Err(libc::EMSGSIZE | libc::ENOBUFS) => {
                return Err(SpawnError::Request(std::io::Error::other(
                    "command line too long for the spawner",
                )));
            }
            Err(e) => return Err(SpawnError::Broken(std::io::Error::from_raw_os_error(e))),
        }
        let r = self.recv(Some(START_TIMEOUT)).map_err(SpawnError::Broken)?;
        if r.kind != STARTED {
            return Err(SpawnError::Broken(std::io::Error::other(
                "unexpected reply from the spawner",
            )));
        }
        if r.errno != 0 {
            if r.pid > 0 {
                // The child exited with 127 after reporting; collect that.
                let e = self.recv(Some(START_TIMEOUT)).map_err(SpawnError::Broken)?;
                if e.kind != EXITED {
                    return Err(SpawnError::Broken(std::io::Error::other(
                        "unexpected reply from the spawner",
                    )));
                }
            }
            return Err(SpawnError::Exec(std::io::Error::from_raw_os_error(r.errno)));
        }
        self.running = Some(r.pid);
        Ok(r.pid)
    }

    /// Wait for the running command to exit.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        // SAFETY: `ctl` stays open, and the same descriptor, for longer than `afd` lives.
        let afd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                Borrowed(self.ctl.as_raw_fd()),
                tokio::io::Interest::READABLE,
            )
        }?;
        loop {
            let mut guard = afd.readable().await?;
            match guard.try_io(|_| recv_reply(self.ctl.as_raw_fd(), libc::MSG_DONTWAIT)) {
                Ok(r) => {
                    drop(guard);
                    return self.exited(r?);
                }
                Err(_would_block) => continue,
            }
        }
    }

    /// Wait for the running command to exit, blocking the thread.
    pub(crate) fn wait_blocking(&mut self) -> std::io::Result<ExitStatus> {
        let r = self.recv(None)?;
        self.exited(r)
    }

    fn exited(&mut self, r: Reply) -> std::io::Result<ExitStatus> {
        if r.kind != EXITED || Some(r.pid) != self.running {
            return Err(std::io::Error::other("unexpected reply from the spawner"));
        }
        self.running = None;
        Ok(ExitStatus::from_raw(r.status))
    }

    /// Whether the spawner can take another command: nothing is running and its cgroup
    /// holds no process but the spawner.
    pub(crate) fn reusable(&self) -> bool {
        self.running.is_none() && self.cgroup.is_empty()
    }

    fn recv(&self, timeout: Option<Duration>) -> std::io::Result<Reply> {
        let mut pfd = libc::pollfd {
            fd: self.ctl.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.map_or(-1, |t| i32::try_from(t.as_millis()).unwrap_or(i32::MAX));
        loop {
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the spawner did not answer",
                ));
            }
            return recv_reply(self.ctl.as_raw_fd(), libc::MSG_DONTWAIT);
        }
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        // With its socket shut, the spawner kills its command, or ends and reaps its standby,
        // and exits: nothing it forked is left for the machine's init to reap. Should it not
        // within 50 ms, it is killed.
        // SAFETY: shutdown of our own socket.
        unsafe { libc::shutdown(self.ctl.as_raw_fd(), libc::SHUT_RDWR) };
        for _ in 0..50 {
            if !matches!(self.child.try_wait(), Ok(None)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its command died with it (parent-death signal); whatever that left is killed now.
        self.cgroup.kill_all_now();
    }
}

/// A cgroup file's path, from the form the cgroup module keeps it in.
fn cgroup_path(c: &std::ffi::CStr) -> PathBuf {
    PathBuf::from(OsStr::from_bytes(c.to_bytes()))
}

/// Let one request hold any command line `execve` takes, where the kernel allows it (root
/// may pass the system's cap); a smaller buffer only sends more commands the direct way.
fn raise_send_buffer(sock: &OwnedFd) {
    let size = MAX_REQUEST as libc::c_int;
    for opt in [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF] {
        // SAFETY: setsockopt with a valid int option on our own socket.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return;
        }
    }
}

/// Exec the spawner: this binary with [`SPAWNER_ARG`], `sock` at [`CTL_FD`], standard
/// streams on `/dev/null`, in a process group of its own (a terminal's ^C is the agent's to
/// handle).
fn exec_spawner(sock: &OwnedFd) -> std::io::Result<std::process::Child> {
    let fd = sock.as_raw_fd();
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg0("git-agent-spawner")
        .arg(SPAWNER_ARG)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: only async-signal-safe calls (dup2, fcntl, setpgid) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let r = if fd == CTL_FD {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, CTL_FD)
            };
            if r < 0 || libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// A request: the program, `argv` and `NAME=value` entries, each length-prefixed.
fn encode_request(l: &Launch<'_>) -> std::io::Result<Vec<u8>> {
    let env: Vec<Vec<u8>> = l
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}").into_bytes())
        .collect();
    let mut out = Vec::new();
    let mut put = |items: &mut dyn Iterator<Item = &[u8]>| -> std::io::Result<()> {
        let items: Vec<&[u8]> = items.collect();
        out.extend_from_slice(&(items.len() as u32).to_le_bytes());
        for i in items {
            if i.contains(&0) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "nul byte in a command argument or variable",
                ));
            }
            out.extend_from_slice(&(i.len() as u32).to_le_bytes());
            out.extend_from_slice(i);
        }
        Ok(())
    };
    put(&mut std::iter::once(l.path.as_os_str().as_bytes()))?;
    put(&mut l.argv.iter().copied())?;
    put(&mut env.iter().map(Vec::as_slice))?;
    if out.len() > MAX_REQUEST {
        return Err(std::io::Error::other(
            "command line too long for the spawner",
        ));
    }
    Ok(out)
}

/// The three lists of a request, as C strings; `None` when it is malformed.
fn decode_request(mut b: &[u8]) -> Option<[Vec<CString>; 3]> {
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, rest) = (b.get(..n)?, b.get(n..)?);
        b = rest;
        Some(head)
    };
    let mut list = || -> Option<Vec<CString>> {
        let count = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        (0..count)
            .map(|_| {
                let len = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
                CString::new(take(len)?).ok()
            })
            .collect()
    };
    let path = list()?;
    let argv = list()?;
    let env = list()?;
    (path.len() == 1).then_some([path, argv, env])
}

/// A descriptor owned elsewhere, for `AsyncFd`.
struct Borrowed(RawFd);

impl AsRawFd for Borrowed {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

fn seqpacket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: socketpair returned two fresh descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn recv_reply(sock: RawFd, flags: libc::c_int) -> std::io::Result<Reply> {
    let mut r = Reply::default();
    // SAFETY: receives at most the size of `r` into it.
    let n = unsafe {
        libc::recv(
            sock,
            (&mut r as *mut Reply).cast(),
            std::mem::size_of::<Reply>(),
            flags,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if n as usize != std::mem::size_of::<Reply>() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the spawner is gone",
        ));
    }
    Ok(r)
}

/// Send a reply; a parent that is gone ends the spawner.
fn reply(ctl: RawFd, kind: u32, pid: i32, errno: i32, status: i32) {
    let r = Reply {
        kind,
        pid,
        errno,
        status,
    };
    // SAFETY: sends a plain struct from the stack.
    let n = unsafe {
        libc::send(
            ctl,
            (&r as *const Reply).cast(),
            std::mem::size_of::<Reply>(),
            libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        std::process::exit(0);
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The spawner process: entered from the `.init_array` hook when `argv[1]` is
/// [`SPAWNER_ARG`]; returns the exit code.
pub(crate) fn main() -> i32 {
    // Only the control socket (and the standard streams, on /dev/null) stays open.
    // SAFETY: closes descriptors of this single-threaded process that nothing else uses.
    unsafe { libc::syscall(libc::SYS_close_range, (CTL_FD + 1) as u32, u32::MAX, 0u32) };
    // Nothing is blocked; a vanished agent is an EPIPE, not a signal.
    // SAFETY: signal dispositions of this process.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let mut buf = vec![0u8; MAX_REQUEST];
    let mut fds = [-1; fdpass::MAX_FDS];
    // SAFETY: the start message carries no descriptors; any would be ours to drop.
    let start = match unsafe { fdpass::recv(CTL_FD, 0, &mut buf, &mut fds) } {
        Ok(Received::Message { len, fds: 0 }) => serde_json::from_slice::<Start>(&buf[..len]).ok(),
        _ => None,
    };
    let Some(start) = start else {
        reply(CTL_FD, READY, 0, libc::EINVAL, 0);
        return 1;
    };
    if let Err(e) = join(&start) {
        reply(CTL_FD, READY, 0, e.raw_os_error().unwrap_or(libc::EIO), 0);
        return 1;
    }
    // Without them, each command makes its own (as an exec'd helper does): slower, as safe.
    let kept = match start.keep {
        Keep::Nothing => None,
        keep => super::helper::Kept::create(keep == Keep::UserAndNet).ok(),
    };
    reply(CTL_FD, READY, std::process::id() as i32, 0, 0);
    let mut standby = Standby::make(&start, kept.as_ref());
    loop {
        serve_one(&start, &mut buf, kept.as_ref(), &mut standby);
    }
}

/// Join the spawner's cgroups; sharing the memory cgroup with its commands, it should never
/// be the OOM killer's choice: exempt where it may lower its score (`CAP_SYS_RESOURCE`), and
/// each command raises its own to the maximum.
fn join(start: &Start) -> std::io::Result<()> {
    std::fs::write(&start.procs, "0")?;
    if let Some(m) = &start.memory_procs {
        std::fs::write(m, "0")?;
    }
    if start.in_memory_cgroup {
        let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    }
    Ok(())
}

/// Take one request, fork its command, say it started (or why not), wait for it, say how it
/// ended. Ends the process when the agent has gone.
fn serve_one(
    start: &Start,
    buf: &mut [u8],
    kept: Option<&super::helper::Kept>,
    standby: &mut Option<Standby>,
) {
    let mut fds = [-1; fdpass::MAX_FDS];
    // SAFETY: the descriptors received are ours and closed below.
    let got = unsafe { fdpass::recv(CTL_FD, 0, buf, &mut fds) };
    let (len, n) = match got {
        Err(libc::EINTR) => return,
        Err(_) | Ok(Received::Closed) => {
            if let Some(s) = standby.take() {
                s.discard();
            }
            std::process::exit(0)
        }
        Ok(Received::Truncated) => (0, 0),
        Ok(Received::Message { len, fds }) => (len, fds),
    };
    // SAFETY: each received descriptor is owned once, here.
    let owned: Vec<OwnedFd> = fds[..n]
        .iter()
        .map(|&fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    if owned.is_empty() && &buf[..len] == READY_THE_NEXT {
        if standby.is_none() {
            *standby = Standby::make(start, kept);
        }
        return;
    }
    let request = decode_request(&buf[..len]);
    let (Some([path, argv, env]), true) = (request, owned.len() >= 3) else {
        reply(CTL_FD, STARTED, -1, libc::EINVAL, 0);
        return;
    };
    let is_helper = start.template.helper && super::helper::is_helper_call(&argv);
    let handed = match standby.take() {
        Some(s) if is_helper => s.hand(&buf[..len], &fds[..n]),
        Some(s) => {
            s.discard();
            None
        }
        None => None,
    };
    if let Some((pid, status_r)) = handed {
        drop(owned);
        wait_and_report(pid, status_r);
        return;
    }
    let (status_r, status_w) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => {
            reply(
                CTL_FD,
                STARTED,
                -1,
                e.raw_os_error().unwrap_or(libc::EIO),
                0,
            );
            return;
        }
    };
    let cmd = CommandParts {
        path: &path[0],
        argv: &argv,
        env: &env,
        stdout: owned[0].as_raw_fd(),
        stderr: owned[1].as_raw_fd(),
        step: owned[2].as_raw_fd(),
        proxy: owned.get(3).map(AsRawFd::as_raw_fd),
        status: status_w.as_raw_fd(),
    };
    // SAFETY: this process is single-threaded: the child may run any code before `exec`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        command_child(start, &cmd, kept);
    }
    let fork_errno = errno();
    drop(status_w);
    drop(owned);
    if pid < 0 {
        reply(CTL_FD, STARTED, -1, fork_errno, 0);
        return;
    }
    wait_and_report(pid, status_r);
}

/// The command `pid` is forked (or handed its request): say it started, or why its set-up
/// failed (an errno on `status_r`; EOF is success), wait for it, say how it ended.
fn wait_and_report(pid: libc::pid_t, status_r: std::io::PipeReader) {
    let mut e = [0u8; 4];
    let failed = std::io::Read::read_exact(&mut &status_r, &mut e).is_ok();
    let e = if failed { i32::from_ne_bytes(e) } else { 0 };
    // While the command runs, the spawner holds only its control socket and the pidfd.
    drop(status_r);
    reply(CTL_FD, STARTED, pid, e, 0);
    if e == 0 {
        // SAFETY: `pid` is our child.
        unsafe { watch(CTL_FD, pid) };
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && errno() != libc::EINTR {
            // Cannot happen for our own child; report a kill.
            status = libc::SIGKILL;
            break;
        }
    }
    reply(CTL_FD, EXITED, pid, 0, status);
}

/// The next command's helper, made while the agent is busy elsewhere: forked, settled
/// ([`settle_child`]) and in its namespaces ([`super::helper::prepare`]), waiting on a socket
/// of its own for its request. Forking, a fresh process's first page faults and making the
/// namespaces are then off the command's path (about 0.6 ms of the view's 2.3 ms here).
///
/// Nothing of the command is decided ahead: the view is built, and the command confined, from
/// its own request when it comes, as for a helper forked then. Only for a spawner that keeps a
/// network namespace (the network off); a request that is not for the helper discards it.
struct Standby {
    pid: libc::pid_t,
    sock: OwnedFd,
    status: std::io::PipeReader,
}

impl Standby {
    /// Fork one, if the spawner keeps its commands' namespaces (and the network is off).
    fn make(start: &Start, kept: Option<&super::helper::Kept>) -> Option<Standby> {
        let kept = kept.filter(|_| start.template.helper && start.keep == Keep::UserAndNet)?;
        let (ours, theirs) = seqpacket_pair().ok()?;
        raise_send_buffer(&ours);
        let (status_r, status_w) = std::io::pipe().ok()?;
        // SAFETY: getpid has no preconditions.
        let spawner = unsafe { libc::getpid() };
        // SAFETY: this process is single-threaded; the child ends in `standby_child`.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            drop(ours);
            drop(status_r);
            standby_child(
                start,
                kept,
                spawner,
                theirs.as_raw_fd(),
                status_w.as_raw_fd(),
            );
        }
        (pid > 0).then_some(Standby {
            pid,
            sock: ours,
            status: status_r,
        })
    }

    /// Give it the request and its descriptors; its pid and status pipe, or `None` (it is
    /// then gone, and the request is forked for as without one).
    fn hand(self, request: &[u8], fds: &[RawFd]) -> Option<(libc::pid_t, std::io::PipeReader)> {
        // SAFETY: the descriptors are open for the duration of the call.
        match unsafe { fdpass::send(self.sock.as_raw_fd(), request, fds) } {
            Ok(()) => Some((self.pid, self.status)),
            Err(_) => {
                self.discard();
                None
            }
        }
    }

    /// End it unused.
    fn discard(self) {
        // SAFETY: our own child, killed and reaped.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// The standby's life: settle, make the namespaces, wait for the request, run it. It dies
/// with the spawner.
fn standby_child(
    start: &Start,
    kept: &super::helper::Kept,
    spawner: libc::pid_t,
    sock: RawFd,
    status: RawFd,
) -> ! {
    // SAFETY: (whole body) the child of a single-threaded process, before `exec`.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        if libc::getppid() != spawner {
            libc::_exit(0);
        }
        // The spawner's control socket is the spawner's to answer on, not its standby's.
        libc::close(CTL_FD);
        settle_child(start, status);
        // Should this fail, the request is run as without a standby, and its helper says why.
        let ready = super::helper::prepare(kept).ok();
        let mut buf = vec![0u8; MAX_REQUEST];
        let mut fds = [-1; fdpass::MAX_FDS];
        let (len, n) = loop {
            match fdpass::recv(sock, 0, &mut buf, &mut fds) {
                Ok(Received::Message { len, fds }) => break (len, fds),
                Err(libc::EINTR) => continue,
                _ => libc::_exit(0),
            }
        };
        libc::close(sock);
        let Some([path, argv, env]) = decode_request(&buf[..len]).filter(|_| n >= 3) else {
            fail_child(status, libc::EINVAL);
        };
        let cmd = CommandParts {
            path: &path[0],
            argv: &argv,
            env: &env,
            stdout: fds[0],
            stderr: fds[1],
            step: fds[2],
            proxy: (n > 3).then_some(fds[3]),
            status,
        };
        let ns = match ready {
            Some(r) => super::helper::Namespaces::Ready(r),
            None => super::helper::Namespaces::Make(Some(kept)),
        };
        attach_and_run(start, &cmd, ns)
    }
}

/// One command, as the spawner's child needs it.
struct CommandParts<'a> {
    path: &'a CString,
    argv: &'a [CString],
    env: &'a [CString],
    stdout: RawFd,
    stderr: RawFd,
    step: RawFd,
    proxy: Option<RawFd>,
    /// Where a failure before `exec` is reported (an errno); close-on-exec, so success is
    /// EOF.
    status: RawFd,
}

/// Wait until the command `pid` exits; if the agent goes away first (its end of `ctl`
/// closes), kill the command's process group and the command, and end the spawner. Without
/// pidfds (Linux < 5.3) this only returns when the command exits.
///
/// # Safety
/// Only in the spawner.
unsafe fn watch(ctl: RawFd, pid: libc::pid_t) {
    // SAFETY: system calls on stack memory.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as RawFd;
        if pidfd < 0 {
            return;
        }
        let mut fds = [
            libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: ctl,
                events: 0,
                revents: 0,
            },
        ];
        loop {
            let n = libc::poll(fds.as_mut_ptr(), 2, -1);
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n < 0 || fds[0].revents != 0 {
                break;
            }
            if fds[1].revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
                let mut st = 0;
                libc::waitpid(pid, &mut st, 0);
                libc::_exit(0);
            }
        }
        libc::close(pidfd);
    }
}

/// Write `e` on the status pipe `status` and end the child: its set-up failed.
fn fail_child(status: RawFd, e: i32) -> ! {
    // SAFETY: writes four bytes from the stack, then ends the child.
    unsafe {
        libc::write(status, (&e as *const i32).cast(), 4);
        libc::_exit(127)
    }
}

/// The command's child: settled, then its request attached and run.
fn command_child(start: &Start, c: &CommandParts<'_>, kept: Option<&super::helper::Kept>) -> ! {
    settle_child(start, c.status);
    attach_and_run(start, c, super::helper::Namespaces::Make(kept))
}

/// What a command's child does whatever the request: signals as a fresh process has them,
/// the OOM score, a process group of its own, the working directory.
fn settle_child(start: &Start, status: RawFd) {
    let report = |e: i32| -> ! { fail_child(status, e) };
    // SAFETY: (whole body) the child of a single-threaded process, before `exec`.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // Sharing its memory cgroup with the spawner, a command is the OOM killer's first
        // choice in it (and on the host): the maximum score, which a process may always set
        // for itself; written while still root with CAP_SYS_RESOURCE it is also the floor, so
        // the command cannot take it back.
        if start.in_memory_cgroup
            && let Err(e) = std::fs::write("/proc/self/oom_score_adj", "1000")
        {
            report(e.raw_os_error().unwrap_or(libc::EIO));
        }
        if libc::setpgid(0, 0) < 0 {
            report(errno());
        }
        if let Err(e) = std::env::set_current_dir(&start.cwd) {
            report(e.raw_os_error().unwrap_or(libc::EIO));
        }
    }
}

/// The request's part of a command's child: standard streams, step pipe and proxy socket at
/// their numbers, the template's limits, then the helper (in this process) or `exec`.
fn attach_and_run(start: &Start, c: &CommandParts<'_>, ns: super::helper::Namespaces<'_>) -> ! {
    let report = |e: i32| -> ! { fail_child(c.status, e) };
    let os = |r: libc::c_int| if r < 0 { report(errno()) } else { r };
    // SAFETY: (whole body) the child of a single-threaded process, before `exec`.
    unsafe {
        // The status pipe, step pipe and proxy socket out of the way first, so that none
        // lands on another or on a standard stream.
        let status = os(libc::fcntl(c.status, libc::F_DUPFD_CLOEXEC, 10));
        let report = |e: i32| -> ! { fail_child(status, e) };
        let high_step = libc::fcntl(c.step, libc::F_DUPFD_CLOEXEC, 10);
        let high_proxy = c.proxy.map(|p| libc::fcntl(p, libc::F_DUPFD_CLOEXEC, 10));
        if high_step < 0 || high_proxy.is_some_and(|p| p < 0) {
            report(errno());
        }
        for (fd, target) in [(c.stdout, 1), (c.stderr, 2)] {
            let r = if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            };
            if r < 0 {
                report(errno());
            }
        }
        // The step pipe and the proxy socket at the numbers the helper is told: 3 and 4.
        if libc::dup2(high_step, STEP_FD) < 0
            || high_proxy.is_some_and(|p| libc::dup2(p, PROXY_FD) < 0)
        {
            report(errno());
        }
        let proxy = high_proxy.map(|_| PROXY_FD);
        if let Err(e) = start.template.apply(STEP_FD, proxy) {
            report(e.raw_os_error().unwrap_or(libc::EPERM));
        }
        let ptrs = |v: &[CString]| -> Vec<*const libc::c_char> {
            v.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        if start.template.helper && super::helper::is_helper_call(c.argv) {
            // The helper closes the status pipe with every other descriptor: EOF, started.
            super::helper::run_in_process(c.argv, c.env, ns);
        }
        let (argv, envp) = (ptrs(c.argv), ptrs(c.env));
        libc::execve(c.path.as_ptr(), argv.as_ptr(), envp.as_ptr());
        report(errno())
    }
}
