//! The local executor: runs commands on this machine inside the sandbox.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::io::AsyncReadExt;

use super::capture::Capture;
use super::cgroup::{self, CgroupBase};
use super::error::{Error, Result};
use super::proxy::{BlockedHost, EgressProxy};
use super::sandbox::{self, ChildSetup, LandlockSpawn, Mechanism, ParentSide, SandboxReport};
use super::{CommandLine, ExecOptions, ExecOutput, ExecRequest, Executor, Termination};
use crate::audit::redact::is_secret_name;
use crate::config::{NetworkMode, SandboxMode};

/// How long output is still read after the command's process group is gone, in case a
/// process that left the group holds a pipe open.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug)]
enum Backend {
    Landlock {
        seccomp: Arc<Vec<seccompiler::sock_filter>>,
        /// Made once per executor; every command restricts itself with it.
        ruleset: Arc<OwnedFd>,
    },
    Bwrap {
        path: PathBuf,
    },
    None,
}

/// Runs commands on this machine, in the worktree, inside the configured sandbox.
#[derive(Debug)]
pub struct LocalExecutor {
    worktree: PathBuf,
    opts: ExecOptions,
    /// Private directory: `home/` is `$HOME`, `tmp/` is `$TMPDIR`. Removed on drop.
    private: tempfile::TempDir,
    backend: Backend,
    report: SandboxReport,
    proxy: Option<EgressProxy>,
    /// Per-command pids cgroups, when running as root (where `RLIMIT_NPROC` does not bind).
    cgroups: Option<CgroupBase>,
}

impl LocalExecutor {
    /// An executor for `worktree`. Chooses and tries the sandbox now (one `true` is run in
    /// it): if the requested sandbox cannot be had this fails with
    /// [`Error::SandboxUnavailable`] and nothing will run.
    pub fn new(worktree: &Path, opts: ExecOptions) -> Result<Self> {
        let worktree = std::fs::canonicalize(worktree)
            .ok()
            .filter(|p| p.is_dir())
            .ok_or_else(|| Error::Worktree {
                path: worktree.to_path_buf(),
            })?;
        let private = tempfile::Builder::new()
            .prefix("git-agent-exec-")
            .tempdir()
            .map_err(Error::TempDir)?;
        for sub in ["home", "tmp"] {
            std::fs::create_dir(private.path().join(sub)).map_err(Error::TempDir)?;
        }
        let abi = sandbox::landlock_abi();
        let mut this = Self {
            worktree,
            opts,
            private,
            backend: Backend::None,
            report: SandboxReport {
                requested: SandboxMode::Off,
                mechanism: Mechanism::None,
                opted_out: true,
                network: NetworkMode::On,
                network_requested: NetworkMode::On,
                landlock_abi: abi,
                protections: Vec::new(),
            },
            proxy: None,
            cgroups: None,
        };
        if cgroup::is_root() {
            this.cgroups = CgroupBase::find();
            if this.cgroups.is_none() {
                tracing::warn!(
                    "running as root without a writable pids cgroup: the process limit cannot be enforced"
                );
            }
        }
        this.report.requested = this.opts.sandbox;
        this.report.network_requested = this.opts.network;
        let mode = this.opts.sandbox;
        let network = this.opts.network;
        let mut ll_writable = vec![this.worktree.clone(), this.private.path().to_path_buf()];
        ll_writable.extend(this.opts.writable.iter().cloned());
        let landlock = || -> Result<Backend> {
            if abi < 1 {
                return Err(Error::SandboxUnavailable {
                    mode: "landlock".into(),
                    reason: "the kernel does not support Landlock (or it is disabled at boot)"
                        .into(),
                });
            }
            Ok(Backend::Landlock {
                seccomp: Arc::new(sandbox::seccomp_program(network)?),
                ruleset: Arc::new(sandbox::landlock_ruleset(&ll_writable, network)?),
            })
        };
        let bwrap = || -> Result<Backend> {
            if network == NetworkMode::Allowlist {
                return Err(Error::AllowlistUnsupported {
                    mode: "bwrap".into(),
                    reason: "bubblewrap cannot hand the egress proxy into the command's network namespace; use the landlock sandbox".into(),
                });
            }
            let path = sandbox::find_in_path("bwrap").ok_or_else(|| Error::SandboxUnavailable {
                mode: "bwrap".into(),
                reason: "bubblewrap (`bwrap`) is not installed".into(),
            })?;
            Ok(Backend::Bwrap { path })
        };
        match mode {
            SandboxMode::Off => {
                tracing::warn!("sandbox explicitly turned off: commands run unconfined");
                this.report.protections = vec![
                    "none: sandbox turned off by the user".into(),
                    "allow-listed environment without secrets".into(),
                    "own process group, wall-clock timeout, resource limits".into(),
                ];
                if network == NetworkMode::Allowlist {
                    return Err(Error::AllowlistUnsupported {
                        mode: "off".into(),
                        reason: "without a sandbox nothing confines the command to the proxy"
                            .into(),
                    });
                }
                return Ok(this);
            }
            SandboxMode::Landlock => {
                this.backend = landlock()?;
                this.verify("landlock")?;
            }
            SandboxMode::Bwrap => {
                this.backend = bwrap()?;
                this.verify("bwrap")?;
            }
            SandboxMode::Auto => {
                let first = landlock().and_then(|b| {
                    this.backend = b;
                    this.verify("landlock")
                });
                if let Err(e1) = first {
                    tracing::info!(error = %e1, "landlock sandbox unavailable, trying bubblewrap");
                    let second = bwrap().and_then(|b| {
                        this.backend = b;
                        this.verify("bwrap")
                    });
                    if let Err(e2) = second {
                        return Err(Error::SandboxUnavailable {
                            mode: "auto".into(),
                            reason: format!("landlock: {e1}; bwrap: {e2}"),
                        });
                    }
                }
            }
        }
        this.report.opted_out = false;
        this.report.network = network;
        this.report.mechanism = match this.backend {
            Backend::Landlock { .. } => Mechanism::Landlock,
            Backend::Bwrap { .. } => Mechanism::Bwrap,
            Backend::None => Mechanism::None,
        };
        this.report.protections = this.protections();
        if network == NetworkMode::Allowlist {
            this.proxy = Some(EgressProxy::new(&this.opts.network_allow));
        }
        Ok(this)
    }

    /// The private directory (`home/`, `tmp/`) commands see as `$HOME` and `$TMPDIR`.
    pub fn private_dir(&self) -> &Path {
        self.private.path()
    }

    /// The worktree commands run in (canonical).
    pub fn worktree(&self) -> &Path {
        &self.worktree
    }

    fn protections(&self) -> Vec<String> {
        let mut p = vec![
            "allow-listed environment without secrets; HOME and TMPDIR private".to_string(),
            "own process group, wall-clock timeout killing the group".to_string(),
            format!(
                "rlimits: cpu {} s, file size {} bytes, {} processes ({}), no core dumps",
                self.opts.limits.cpu_seconds,
                self.opts.limits.file_size_bytes,
                self.opts.limits.max_processes,
                if self.cgroups.is_some() {
                    "pids cgroup"
                } else if cgroup::is_root() {
                    "NOT enforced: root without a pids cgroup"
                } else {
                    "RLIMIT_NPROC"
                }
            ),
            "writes only to the worktree and the private dir; .git and nested .git read-only"
                .to_string(),
        ];
        match &self.backend {
            Backend::Landlock { .. } => {
                p.push(format!(
                    "landlock (kernel ABI {}, rights up to ABI 6 used), no_new_privs, no capabilities",
                    self.report.landlock_abi
                ));
                p.push(
                    "user and mount namespaces; no ptrace of or signals to outside processes"
                        .into(),
                );
                p.push("seccomp: no io_uring, keyrings, perf or userfaultfd".into());
            }
            Backend::Bwrap { path } => {
                p.push(format!(
                    "bubblewrap {}: user, pid, ipc, uts namespaces; no capabilities",
                    path.display()
                ));
            }
            Backend::None => {}
        }
        p.push(match self.opts.network {
            NetworkMode::Off => "network off: own empty network namespace; seccomp allows only AF_UNIX sockets (landlock)".into(),
            NetworkMode::Allowlist => format!(
                "network allowlist: own network namespace whose only way out is the egress proxy admitting {:?}",
                self.opts.network_allow
            ),
            NetworkMode::On => "network on: unrestricted".into(),
        });
        p
    }

    /// Run `true` in the sandbox once, so a sandbox that cannot be set up fails here.
    fn verify(&self, mode: &str) -> Result<()> {
        let (mut cmd, parent) = self.command("true", &[], Vec::new())?;
        cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        let out = cmd.output().map_err(|e| Error::SandboxUnavailable {
            mode: mode.into(),
            reason: describe_spawn_error(&e, &parent),
        })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stderr: String = stderr.trim().chars().take(500).collect();
            return Err(Error::SandboxUnavailable {
                mode: mode.into(),
                reason: format!(
                    "a trial command in the sandbox failed ({}): {stderr}",
                    out.status
                ),
            });
        }
        Ok(())
    }

    /// The std command for `program args` with the sandbox applied.
    fn command(
        &self,
        program: &str,
        args: &[String],
        extra_env: Vec<(String, String)>,
    ) -> Result<(std::process::Command, ParentSide)> {
        let home = self.private.path().join("home");
        let tmp = self.private.path().join("tmp");
        let mut env_extra = extra_env;
        if self.opts.network == NetworkMode::Allowlist {
            let url = format!("http://127.0.0.1:{}", sandbox::PROXY_PORT);
            for k in [
                "HTTP_PROXY",
                "HTTPS_PROXY",
                "http_proxy",
                "https_proxy",
                "ALL_PROXY",
                "all_proxy",
            ] {
                env_extra.push((k.to_string(), url.clone()));
            }
        }
        let parent_env = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        let env = super::env::sandbox_env(parent_env, &self.opts.pass_env, &home, &tmp, &env_extra);

        let (mut cmd, setup, parent) = match &self.backend {
            Backend::Landlock { seccomp, ruleset } => {
                let (setup, parent) = ChildSetup::landlock(LandlockSpawn {
                    worktree: &self.worktree,
                    network: self.opts.network,
                    limits: &self.opts.limits,
                    seccomp: seccomp.clone(),
                    ruleset: ruleset.clone(),
                })?;
                let mut cmd = std::process::Command::new(program);
                cmd.args(args);
                (cmd, setup, parent)
            }
            Backend::Bwrap { path } => {
                let (setup, parent) = ChildSetup::limits_only(&self.opts.limits)?;
                let mut cmd = std::process::Command::new(path);
                cmd.args(sandbox::bwrap_args(
                    &self.worktree,
                    self.private.path(),
                    &self.opts.writable,
                    self.opts.network,
                ));
                cmd.arg(program).args(args);
                (cmd, setup, parent)
            }
            Backend::None => {
                let (setup, parent) = ChildSetup::limits_only(&self.opts.limits)?;
                let mut cmd = std::process::Command::new(program);
                cmd.args(args);
                (cmd, setup, parent)
            }
        };
        let (mut setup, mut parent) = (setup, parent);
        if let Some(base) = &self.cgroups {
            let cg =
                base.create(self.opts.limits.max_processes)
                    .map_err(|e| Error::SandboxSetup {
                        what: "the command's pids cgroup".into(),
                        source: e,
                    })?;
            setup.join_cgroup(cg.procs.clone());
            parent.cgroup = Some(cg);
        }
        cmd.env_clear()
            .envs(env)
            .current_dir(&self.worktree)
            .stdin(Stdio::null())
            .process_group(0);
        // SAFETY: `apply` only makes async-signal-safe system calls on data prepared above.
        unsafe {
            cmd.pre_exec(move || setup.apply());
        }
        Ok((cmd, parent))
    }

    async fn run_inner(&self, req: ExecRequest) -> Result<ExecOutput> {
        if let Some((name, _)) = req.env.iter().find(|(k, _)| is_secret_name(k)) {
            return Err(Error::SecretEnv { name: name.clone() });
        }
        let (program, args): (String, Vec<String>) = match &req.command {
            CommandLine::Argv(v) => {
                let (p, a) = v.split_first().ok_or(Error::EmptyCommand)?;
                (p.clone(), a.to_vec())
            }
            CommandLine::Shell(s) => ("/bin/sh".into(), vec!["-c".into(), s.clone()]),
        };
        let timeout = req.timeout.unwrap_or(self.opts.timeout);
        let (std_cmd, parent) = self.command(&program, &args, req.env)?;
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let start = Instant::now();
        let mut child = cmd.spawn().map_err(|e| Error::Spawn {
            program: program.clone(),
            source: std::io::Error::new(e.kind(), describe_spawn_error(&e, &parent)),
        })?;
        let pid = child.id().map(|p| p as i32);
        let userns = pid.and_then(|p| std::fs::read_link(format!("/proc/{p}/ns/user")).ok());
        let own_userns = std::fs::read_link("/proc/self/ns/user").ok();
        let userns = userns.filter(|u| Some(u) != own_userns.as_ref());

        let blocked: Arc<Mutex<Vec<BlockedHost>>> = Arc::default();
        let proxy_task = match (&self.proxy, &parent.proxy_sock) {
            (Some(proxy), Some(sock)) => Some(self.serve_proxy(proxy, sock)?),
            _ => None,
        };
        let before = self.proxy.as_ref().map_or(0, |p| p.blocked().len());

        let cap = self.opts.limits.output_cap_bytes;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let out_task = child
            .stdout
            .take()
            .map(|p| tokio::spawn(read_capped(p, cap, stop_rx.clone())));
        let err_task = child
            .stderr
            .take()
            .map(|p| tokio::spawn(read_capped(p, cap, stop_rx.clone())));

        let waited = tokio::select! {
            s = child.wait() => Some(s),
            _ = tokio::time::sleep(timeout) => None,
        };
        if let Some(cg) = &parent.cgroup {
            cg.kill_all().await;
        }
        if let Some(pid) = pid {
            kill_group(pid).await;
        }
        let status = match waited {
            Some(s) => Some(s.map_err(|e| Error::Wait {
                program: program.clone(),
                source: e,
            })?),
            None => {
                let _ = child.wait().await;
                None
            }
        };
        if let Some(cg) = &parent.cgroup {
            cg.kill_all().await;
            cg.drained().await;
        }
        // Every process of the command's user namespace descends from the child, which joined
        // the cgroup before unsharing, and none can leave it (cgroupfs is not writable under
        // Landlock, and read-only under bubblewrap's `--ro-bind / /`): an empty cgroup means an
        // empty namespace, so the /proc scan is skipped.
        let ns_empty = parent.cgroup.as_ref().is_some_and(|cg| cg.is_empty());
        if let Some(ns) = &userns
            && !ns_empty
        {
            kill_namespace(ns).await;
        }
        // The group is gone; give stragglers' pipes a moment, then stop reading.
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(DRAIN_GRACE).await;
            let _ = stop_tx.send(true);
        });
        let stdout = match out_task {
            Some(t) => t.await.unwrap_or_else(|_| Capture::new(0).finish()),
            None => Capture::new(0).finish(),
        };
        let stderr = match err_task {
            Some(t) => t.await.unwrap_or_else(|_| Capture::new(0).finish()),
            None => Capture::new(0).finish(),
        };
        stopper.abort();
        if let Some(t) = proxy_task {
            t.abort();
        }
        if let Some(p) = &self.proxy {
            blocked
                .lock()
                .map(|mut b| b.extend(p.blocked().into_iter().skip(before)))
                .ok();
        }
        let status = match status {
            None => Termination::TimedOut,
            Some(s) => match (s.code(), s.signal()) {
                (Some(c), _) => Termination::Exited(c),
                (None, Some(sig)) => Termination::Signaled(sig),
                (None, None) => Termination::Exited(-1),
            },
        };
        let blocked_hosts = blocked.lock().map(|b| b.clone()).unwrap_or_default();
        tracing::debug!(?status, program, elapsed = ?start.elapsed(), "command finished");
        Ok(ExecOutput {
            status,
            stdout,
            stderr,
            duration: start.elapsed(),
            pid: pid.map_or(0, |p| p as u32),
            blocked_hosts,
        })
    }

    fn serve_proxy(
        &self,
        proxy: &EgressProxy,
        sock: &OwnedFd,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let fd = sandbox::recv_fd(sock).map_err(Error::Proxy)?;
        let std_listener = std::net::TcpListener::from(fd);
        std_listener.set_nonblocking(true).map_err(Error::Proxy)?;
        let listener = tokio::net::TcpListener::from_std(std_listener).map_err(Error::Proxy)?;
        Ok(proxy.serve(listener))
    }
}

impl Executor for LocalExecutor {
    fn run(&self, request: ExecRequest) -> BoxFuture<'_, Result<ExecOutput>> {
        Box::pin(self.run_inner(request))
    }

    fn sandbox(&self) -> &SandboxReport {
        &self.report
    }

    fn blocked_hosts(&self) -> Vec<BlockedHost> {
        self.proxy
            .as_ref()
            .map(EgressProxy::blocked)
            .unwrap_or_default()
    }
}

/// The spawn error, with the sandbox step that failed when the child reported one.
fn describe_spawn_error(e: &std::io::Error, parent: &ParentSide) -> String {
    let mut b = [0u8; 1];
    // SAFETY: reads at most one byte into a stack buffer from a non-blocking pipe we own.
    let n = unsafe { libc::read(parent.err_pipe.as_raw_fd(), b.as_mut_ptr().cast(), 1) };
    if n == 1 {
        let mut msg = format!(
            "sandbox setup failed at `{}`: {e}",
            sandbox::step_name(b[0])
        );
        if b[0] <= 1 && userns_restricted_by_apparmor() {
            msg.push_str(
                " (kernel.apparmor_restrict_unprivileged_userns=1, as on stock Ubuntu 24.04, denies \
                 unprivileged user namespaces: run the agent as root, or set the sysctl to 0, or \
                 opt out with sandbox.mode = \"off\")",
            );
        }
        msg
    } else {
        e.to_string()
    }
}

fn userns_restricted_by_apparmor() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
        .is_ok_and(|v| v.trim() == "1")
}

async fn read_capped<R: tokio::io::AsyncRead + Unpin>(
    mut pipe: R,
    cap: usize,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> super::Captured {
    let mut capture = Capture::new(cap);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        tokio::select! {
            r = pipe.read(&mut buf) => match r {
                Ok(0) | Err(_) => break,
                Ok(n) => capture.push(&buf[..n]),
            },
            _ = stop.changed() => break,
        }
    }
    capture.finish()
}

/// SIGKILL the process group until it is empty (bounded: zombies whose reaping is up to
/// another process may keep it non-empty a little longer).
async fn kill_group(pgid: i32) {
    for _ in 0..200 {
        // SAFETY: kill with a negative pid signals the group; no memory is involved.
        let r = unsafe { libc::kill(-pgid, libc::SIGKILL) };
        if r != 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        if !group_has_live_members(pgid) {
            return;
        }
    }
    tracing::warn!(
        pgid,
        "process group still has members after repeated SIGKILL"
    );
}

/// Whether any non-zombie process is in the group.
fn group_has_live_members(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|e| {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // Fields after the parenthesised command: state ppid pgrp …
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            return false;
        };
        let mut f = rest.split(' ');
        let state = f.next();
        let _ppid = f.next();
        let pgrp = f.next().and_then(|p| p.parse::<i32>().ok());
        pgrp == Some(pgid) && state != Some("Z")
    })
}

/// SIGKILL every process in the command's user namespace (catches processes that left the
/// process group with `setsid`).
async fn kill_namespace(ns: &Path) {
    for _ in 0..50 {
        let mut found = false;
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                    continue;
                };
                if std::fs::read_link(format!("/proc/{pid}/ns/user")).is_ok_and(|l| l == ns) {
                    found = true;
                    // SAFETY: plain signal to a pid.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        if !found {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
