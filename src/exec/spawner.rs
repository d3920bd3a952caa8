//! A per-executor spawner process, so that no command pays for a cgroup move.
//!
//! Moving a process into a cgroup (writing `cgroup.procs`) makes the kernel wait for an RCU
//! grace period unless another move happened just before (the global threadgroup rwsem has
//! to leave its fast mode): about 13 ms on this machine's cgroup v1 pids hierarchy, most of
//! a sandboxed spawn. The spawner joins its pids cgroup once, when it is started (with the
//! executor), and forks every command from inside it: a command starts in the cgroup by
//! inheritance, with no move.
//!
//! The spawner is forked from the multithreaded agent and never execs, so it lives by the
//! rules of the code between `fork` and `exec`: only system calls, on memory prepared before
//! the fork, no allocation, no locks. Its standard streams are `/dev/null` and every other
//! descriptor it inherited is closed, so it keeps none of the agent's files, sockets or pipes
//! open. A request is written by the parent into a shared anonymous mapping (at the same
//! address in both processes, so it holds ready `argv`/`envp` pointer arrays) while the
//! spawner waits, then announced by one datagram carrying the command's descriptors; replies
//! are fixed-size records: started (pid, or the errno of a failed setup or exec) and exited
//! (wait status). One command at a time: the executor gives concurrent commands spawners of
//! their own, each with its own cgroup, so `pids.max` (the limit plus one for the spawner)
//! still bounds one command. Each command's child applies the same sandbox setup as a
//! directly spawned one; the forked child drops the mapping at `exec`.

use std::ffi::{CStr, CString, c_char};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use super::cgroup::{Cgroup, CgroupBase};
use super::sandbox::ChildSetup;

/// Size of the request mapping: enough for any command line `execve` accepts.
const SHM_LEN: usize = 8 << 20;

/// Where a command forked by the spawner finds its step pipe and proxy socket.
pub(crate) const STEP_FD: RawFd = 3;
/// See [`STEP_FD`].
pub(crate) const PROXY_FD: RawFd = 4;

const READY: u32 = 0;
const STARTED: u32 = 1;
const EXITED: u32 = 2;

/// How long the spawner may take to join its cgroup and say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a fork-and-exec may take before the spawner counts as stuck.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The request header at the start of the mapping; pointers point into the mapping.
#[repr(C)]
struct Header {
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
}

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

/// The shared request mapping.
struct Shm(*mut u8);

// SAFETY: the mapping is plain memory owned by this value; access is serialized by `&mut
// Spawner` on our side and by the request/reply protocol with the spawner.
unsafe impl Send for Shm {}
// SAFETY: as above; `&Shm` gives no access to the memory.
unsafe impl Sync for Shm {}

impl Shm {
    fn new() -> std::io::Result<Self> {
        // SAFETY: an anonymous shared mapping; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SHM_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self(p.cast()))
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`.
        unsafe { libc::munmap(self.0.cast(), SHM_LEN) };
    }
}

/// Bump writer into the mapping.
struct Writer<'a> {
    shm: &'a Shm,
    off: usize,
}

impl Writer<'_> {
    fn alloc(&mut self, size: usize, align: usize) -> std::io::Result<*mut u8> {
        let start = self.off.next_multiple_of(align);
        let end = start
            .checked_add(size)
            .filter(|&e| e <= SHM_LEN)
            .ok_or_else(|| std::io::Error::other("command line too long for the spawner"))?;
        self.off = end;
        // SAFETY: start..end lies inside the mapping.
        Ok(unsafe { self.shm.0.add(start) })
    }

    fn str(&mut self, s: &[u8]) -> std::io::Result<*const c_char> {
        if s.contains(&0) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "nul byte in a command argument or variable",
            ));
        }
        let p = self.alloc(s.len() + 1, 1)?;
        // SAFETY: `p` has room for the bytes and the terminating NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
            *p.add(s.len()) = 0;
        }
        Ok(p.cast_const().cast())
    }

    fn ptrs(&mut self, items: &[*const c_char]) -> std::io::Result<*const *const c_char> {
        let size = std::mem::size_of::<*const c_char>();
        let p = self
            .alloc((items.len() + 1) * size, size)?
            .cast::<*const c_char>();
        // SAFETY: `p` is aligned and has room for the items and the terminating null.
        unsafe {
            std::ptr::copy_nonoverlapping(items.as_ptr(), p, items.len());
            *p.add(items.len()) = std::ptr::null();
        }
        Ok(p.cast_const())
    }
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
    pid: libc::pid_t,
    ctl: OwnedFd,
    shm: Shm,
    cgroup: Cgroup,
    /// The pid of the command running now, if any.
    running: Option<libc::pid_t>,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawner")
            .field("pid", &self.pid)
            .field("cgroup", &self.cgroup)
            .finish_non_exhaustive()
    }
}

impl Spawner {
    /// Make a cgroup limited to `max_processes` plus the spawner, and start a spawner in it
    /// that sets every command up with `template`'s constant parts and runs it in `cwd`.
    pub(crate) fn start(
        base: &CgroupBase,
        max_processes: u64,
        memory_bytes: u64,
        template: &ChildSetup,
        cwd: &Path,
    ) -> std::io::Result<Self> {
        let mut cgroup = base.create(max_processes.saturating_add(1), memory_bytes)?;
        let shm = Shm::new()?;
        let (ours, theirs) = seqpacket_pair()?;
        let cwd = CString::new(cwd.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
        let keep = vec![theirs.as_raw_fd()];
        // SAFETY: getpid cannot fail.
        let parent = unsafe { libc::getpid() };
        let procs = cgroup.procs.clone();
        let memory_procs = cgroup.memory.as_ref().and_then(|m| m.procs.clone());
        let in_memory_cgroup = cgroup.memory.is_some();
        let shm_ptr = shm.0.cast_const();
        // SAFETY: the child runs `serve`, which only makes system calls on memory prepared
        // above and never returns.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: we are the forked child; see `serve`.
            unsafe {
                serve(
                    theirs.as_raw_fd(),
                    &keep,
                    &procs,
                    memory_procs.as_deref(),
                    in_memory_cgroup,
                    parent,
                    template,
                    &cwd,
                    shm_ptr,
                )
            }
        }
        drop(theirs);
        cgroup.spare(pid);
        let this = Self {
            pid,
            ctl: ours,
            shm,
            cgroup,
            running: None,
        };
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

    /// Start one command; returns its pid once it has `exec`ed.
    pub(crate) fn spawn(&mut self, l: &Launch<'_>) -> Result<i32, SpawnError> {
        if self.running.is_some() {
            return Err(SpawnError::Broken(std::io::Error::other(
                "the spawner is still running a command",
            )));
        }
        self.write_request(l).map_err(SpawnError::Request)?;
        let mut fds = vec![l.stdout, l.stderr, l.setup.err_fd()];
        fds.extend(l.setup.proxy_fd());
        send_fds(self.ctl.as_raw_fd(), &fds).map_err(SpawnError::Broken)?;
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

    fn write_request(&mut self, l: &Launch<'_>) -> std::io::Result<()> {
        let mut w = Writer {
            shm: &self.shm,
            off: std::mem::size_of::<Header>(),
        };
        let path = w.str(l.path.as_os_str().as_bytes())?;
        let argv = l
            .argv
            .iter()
            .map(|a| w.str(a))
            .collect::<std::io::Result<Vec<_>>>()?;
        let envp = l
            .env
            .iter()
            .map(|(k, v)| w.str(format!("{k}={v}").as_bytes()))
            .collect::<std::io::Result<Vec<_>>>()?;
        let argv = w.ptrs(&argv)?;
        let envp = w.ptrs(&envp)?;
        // SAFETY: the header slot at offset 0 is aligned (the mapping is page-aligned) and
        // reserved.
        unsafe {
            self.shm
                .0
                .cast::<Header>()
                .write(Header { path, argv, envp });
        }
        Ok(())
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        // SAFETY: signals and reaps our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut st = 0;
            while libc::waitpid(self.pid, &mut st, 0) < 0
                && *libc::__errno_location() == libc::EINTR
            {}
        }
        // Its command died with it (parent-death signal); whatever that left is killed now.
        self.cgroup.kill_all_now();
    }
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

fn send_fds(sock: RawFd, fds: &[RawFd]) -> std::io::Result<()> {
    let mut control = [0u64; 8];
    let len = std::mem::size_of_val(fds);
    // SAFETY: the control buffer is aligned and large enough for four descriptors; the
    // message is one byte.
    unsafe {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(len as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() || fds.len() > 4 {
            return Err(std::io::Error::other("too many descriptors"));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(len as u32) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
        if libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) != 1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
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
unsafe fn reply(ctl: RawFd, kind: u32, pid: i32, errno: i32, status: i32) {
    let r = Reply {
        kind,
        pid,
        errno,
        status,
    };
    // SAFETY: sends a plain struct.
    unsafe {
        let n = libc::send(
            ctl,
            (&r as *const Reply).cast(),
            std::mem::size_of::<Reply>(),
            libc::MSG_NOSIGNAL,
        );
        if n < 0 {
            libc::_exit(0);
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Close every descriptor from 3 up except those in `keep` (sorted).
unsafe fn close_all_but(keep: &[RawFd]) {
    // SAFETY: closes descriptors of this (single-threaded) process only.
    unsafe {
        let close_range = |lo: u32, hi: u32| {
            if libc::syscall(libc::SYS_close_range, lo, hi, 0u32) != 0 {
                let mut r: libc::rlimit = std::mem::zeroed();
                let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
                    r.rlim_cur.min(1 << 20) as u32
                } else {
                    4096
                };
                for fd in lo..=hi.min(max) {
                    libc::close(fd as RawFd);
                }
            }
        };
        let mut lo: u32 = 3;
        for &k in keep {
            let Ok(k) = u32::try_from(k) else { continue };
            if k < lo {
                continue;
            }
            if k > lo {
                close_range(lo, k - 1);
            }
            lo = k + 1;
        }
        close_range(lo, u32::MAX);
    }
}

/// The spawner's life: set itself apart, join the cgroup, then fork one command per request.
///
/// # Safety
/// Only in the child of `fork`; never returns.
#[allow(clippy::too_many_arguments)]
unsafe fn serve(
    ctl: RawFd,
    keep: &[RawFd],
    procs: &CStr,
    memory_procs: Option<&CStr>,
    in_memory_cgroup: bool,
    parent: libc::pid_t,
    template: &ChildSetup,
    cwd: &CStr,
    shm: *const u8,
) -> ! {
    // SAFETY: (whole body) system calls on memory prepared before the fork; no allocation.
    unsafe {
        // The agent's handlers would run agent code here (a runtime's signal pipe): default
        // dispositions, nothing blocked; a vanished parent is an EPIPE, not a signal.
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        for sig in 1..65 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::sigaction(sig, &sa, std::ptr::null_mut());
            }
        }
        sa.sa_sigaction = libc::SIG_IGN;
        libc::sigaction(libc::SIGPIPE, &sa, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        // No parent-death signal: it follows the forking *thread*, which may be a pool thread
        // that retires. The spawner ends when the agent's end of `ctl` closes instead.
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        // Out of the agent's process group: a terminal's ^C is the agent's to handle.
        libc::setpgid(0, 0);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 {
            reply(ctl, READY, 0, errno(), 0);
            libc::_exit(1);
        }
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
        close_all_but(keep);
        if super::sandbox::write_file(procs, b"0") != 0
            || memory_procs.is_some_and(|m| super::sandbox::write_file(m, b"0") != 0)
        {
            reply(ctl, READY, 0, errno(), 0);
            libc::_exit(1);
        }
        // Sharing the memory cgroup with the commands, the spawner should never be the OOM
        // killer's choice (its resident set, shared with the agent it was forked from, may
        // look large): exempt where this may lower its score (CAP_SYS_RESOURCE), and each
        // command's child raises its own score to the maximum (see `command_child`).
        if in_memory_cgroup {
            let _ = super::sandbox::write_file(c"/proc/self/oom_score_adj", b"-1000");
        }
        reply(ctl, READY, libc::getpid(), 0, 0);
        loop {
            let mut control = [0u64; 16];
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
            let n = libc::recvmsg(ctl, &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                libc::_exit(0);
            }
            let mut fds: [RawFd; 4] = [-1; 4];
            let mut nfds = 0;
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let count = ((*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                        / std::mem::size_of::<RawFd>();
                    let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                    for i in 0..count {
                        let fd = std::ptr::read_unaligned(data.add(i));
                        if nfds < fds.len() {
                            fds[nfds] = fd;
                            nfds += 1;
                        } else {
                            libc::close(fd);
                        }
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
            let close_fds = |fds: &[RawFd]| {
                for &fd in fds {
                    if fd >= 0 {
                        libc::close(fd);
                    }
                }
            };
            if nfds < 3 || msg.msg_flags & libc::MSG_CTRUNC != 0 {
                close_fds(&fds);
                reply(ctl, STARTED, -1, libc::EINVAL, 0);
                continue;
            }
            let mut status_pipe = [0; 2];
            if libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                let e = errno();
                close_fds(&fds);
                reply(ctl, STARTED, -1, e, 0);
                continue;
            }
            let header = &*shm.cast::<Header>();
            let proxy = if nfds > 3 { Some(fds[3]) } else { None };
            let pid = libc::fork();
            if pid == 0 {
                command_child(
                    in_memory_cgroup,
                    template,
                    header,
                    fds[0],
                    fds[1],
                    fds[2],
                    proxy,
                    status_pipe[1],
                    cwd,
                );
            }
            let fork_errno = errno();
            libc::close(status_pipe[1]);
            close_fds(&fds);
            if pid < 0 {
                libc::close(status_pipe[0]);
                reply(ctl, STARTED, -1, fork_errno, 0);
                continue;
            }
            let mut e: i32 = 0;
            loop {
                let n = libc::read(status_pipe[0], (&mut e as *mut i32).cast(), 4);
                if n < 0 && errno() == libc::EINTR {
                    continue;
                }
                if n != 4 {
                    e = 0;
                }
                break;
            }
            libc::close(status_pipe[0]);
            reply(ctl, STARTED, pid, e, 0);
            if e == 0 {
                watch(ctl, pid);
            }
            let mut status = 0;
            loop {
                let r = libc::waitpid(pid, &mut status, 0);
                if r == pid {
                    break;
                }
                if r < 0 && errno() != libc::EINTR {
                    // Cannot happen for our own child; report a kill.
                    status = libc::SIGKILL;
                    break;
                }
            }
            reply(ctl, EXITED, pid, 0, status);
        }
    }
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

/// The command's child: standard streams, working directory, the sandbox, `exec`.
/// A failure is reported as an errno on `status` (close-on-exec, so success is EOF).
#[allow(clippy::too_many_arguments)]
unsafe fn command_child(
    in_memory_cgroup: bool,
    template: &ChildSetup,
    header: &Header,
    stdout: RawFd,
    stderr: RawFd,
    step: RawFd,
    proxy: Option<RawFd>,
    status: RawFd,
    cwd: &CStr,
) -> ! {
    // SAFETY: (whole body) system calls on memory prepared before the fork; no allocation.
    unsafe {
        // Out of the way of the numbers the helper's descriptors are given below.
        let moved = libc::fcntl(status, libc::F_DUPFD_CLOEXEC, 10);
        let status = if moved < 0 { status } else { moved };
        let report = |e: i32| -> ! {
            libc::write(status, (&e as *const i32).cast(), 4);
            libc::_exit(127)
        };
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGPIPE, &sa, std::ptr::null_mut());
        // Sharing its memory cgroup with the spawner, a command is the OOM killer's first
        // choice in it (and on the host): the maximum score, which a process may always set
        // for itself; written while still root with CAP_SYS_RESOURCE it is also the floor, so
        // the command cannot take it back.
        if in_memory_cgroup && super::sandbox::write_file(c"/proc/self/oom_score_adj", b"1000") != 0
        {
            report(errno());
        }
        if libc::setpgid(0, 0) != 0 {
            report(errno());
        }
        for (fd, target) in [(stdout, 1), (stderr, 2)] {
            let r = if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, target)
            };
            if r < 0 {
                report(errno());
            }
        }
        if libc::chdir(cwd.as_ptr()) != 0 {
            report(errno());
        }
        // The step pipe and the proxy socket at the numbers the helper is told: 3 and 4
        // (moved out of the way first, so neither lands on the other).
        let high_step = libc::fcntl(step, libc::F_DUPFD_CLOEXEC, 10);
        let high_proxy = proxy.map(|p| libc::fcntl(p, libc::F_DUPFD_CLOEXEC, 10));
        if high_step < 0 || high_proxy.is_some_and(|p| p < 0) {
            report(errno());
        }
        if libc::dup2(high_step, STEP_FD) < 0
            || high_proxy.is_some_and(|p| libc::dup2(p, PROXY_FD) < 0)
        {
            report(errno());
        }
        let proxy = high_proxy.map(|_| PROXY_FD);
        if let Err(e) = template.apply_with(STEP_FD, proxy) {
            report(e.raw_os_error().unwrap_or(libc::EPERM));
        }
        libc::execve(header.path, header.argv, header.envp);
        report(errno())
    }
}
