//! The local executor: runs commands on this machine inside the sandbox.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio::io::AsyncReadExt;

use super::capture::Capture;
use super::cgroup::{self, CgroupBase, MemoryMechanism};
use super::error::{Error, Result};
use super::growth;
use super::helper::{self, Spec};
use super::memory;
use super::proxy::{BlockedHost, EgressProxy};
use super::sandbox::{self, ChildSetup, Mechanism, ParentSide, SandboxReport};
use super::spawner::{self as spawner_mod, Keep, Launch, SpawnError, Spawner};
use super::view::{self, View};
use super::{CommandLine, ExecOptions, ExecOutput, ExecRequest, Executor, Termination};
use crate::audit::redact::is_secret_name;
use crate::config::{NetworkMode, SandboxMode};

/// How long output is still read after the command's process group is gone, in case a
/// process that left the group holds a pipe open.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug)]
enum Backend {
    /// The view, built by the sandbox helper (namespaces, mounts, Landlock, seccomp).
    Landlock {
        /// What every command's view holds, before its `.git` binds.
        view: View,
    },
    /// The same view, built by bubblewrap (no Landlock or seccomp layer).
    Bwrap {
        path: PathBuf,
        /// What every command's view holds, before its `.git` binds.
        view: View,
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
    /// Idle spawners (with `cgroups`): each lives in a pids cgroup of its own and forks
    /// commands inside it, so starting a command moves no process between cgroups.
    spawners: Mutex<Vec<Spawner>>,
}

/// A command ready to start: what to exec, its environment and its sandbox setup.
struct Prepared {
    /// The program as given (also `argv[0]`); bubblewrap's path under bubblewrap; the
    /// helper (`/proc/self/exe`) for the view.
    program: OsString,
    args: Vec<OsString>,
    /// For the view: the helper's spec (its descriptor numbers are set at launch) and the
    /// command's own `argv`.
    helper: Option<(Spec, Vec<OsString>)>,
    env: Vec<(String, String)>,
    setup: ChildSetup,
    parent: ParentSide,
}

/// How a started command is waited for.
enum Proc {
    /// Spawned directly by this process.
    Child(tokio::process::Child),
    /// Forked by a spawner, which reports its exit.
    Spawned(Spawner),
}

type Pipe = Box<dyn tokio::io::AsyncRead + Unpin + Send>;

/// A started command.
struct Running {
    pid: Option<i32>,
    proc: Proc,
    stdout: Option<Pipe>,
    stderr: Option<Pipe>,
    parent: ParentSide,
}

impl Running {
    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match &mut self.proc {
            Proc::Child(c) => c.wait().await,
            Proc::Spawned(s) => s.wait().await,
        }
    }

    /// The cgroup that holds the command: its own, or its spawner's.
    fn cgroup(&self) -> Option<&super::cgroup::Cgroup> {
        match &self.proc {
            Proc::Spawned(s) => Some(s.cgroup()),
            Proc::Child(_) => self.parent.cgroup.as_ref(),
        }
    }
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
        let opts = mount_points(&worktree, opts)?;
        let abi = sandbox::landlock_abi();
        let limits_copy = opts.limits.clone();
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
                namespaces: Vec::new(),
                view: Vec::new(),
                toolchains: Vec::new(),
                limits: limits_copy,
                memory: MemoryMechanism::None,
                fallbacks: Vec::new(),
            },
            proxy: None,
            cgroups: None,
            spawners: Mutex::default(),
        };
        if cgroup::is_root() {
            this.cgroups = CgroupBase::find();
            if this.cgroups.is_none() {
                tracing::warn!(
                    "running as root without a writable pids cgroup: the process limit cannot be enforced"
                );
            }
        }
        this.report.memory = this.memory_mechanism();
        this.report.requested = this.opts.sandbox;
        this.report.network_requested = this.opts.network;
        let mode = this.opts.sandbox;
        let network = this.opts.network;
        let the_view = build_view(&this.worktree, &this.opts);
        let landlock = || -> Result<Backend> {
            if abi < 1 {
                return Err(Error::SandboxUnavailable {
                    mode: "landlock".into(),
                    reason: "the kernel does not support Landlock (or it is disabled at boot)"
                        .into(),
                });
            }
            if !super::hook::available() {
                return Err(Error::SandboxUnavailable {
                    mode: "landlock".into(),
                    reason: "this binary does not carry the sandbox helper (its start-up hook did not run)".into(),
                });
            }
            Ok(Backend::Landlock {
                view: the_view.clone(),
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
            Ok(Backend::Bwrap {
                path,
                view: the_view.clone(),
            })
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
                this.warm_spawner();
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
        if let Backend::Landlock { view } | Backend::Bwrap { view, .. } = &this.backend {
            this.report.view = view::describe(&view.mounts);
            this.report.toolchains = view.toolchains.clone();
            this.report.namespaces = ["user", "mount", "pid", "ipc", "uts"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            if network != NetworkMode::On {
                this.report.namespaces.push("network".into());
            }
            for r in &view.refused {
                this.report.fallbacks.push(format!("not bound: {r}"));
            }
        }
        if this.report.mechanism == Mechanism::Bwrap && mode == SandboxMode::Auto {
            this.report.fallbacks.push(
                "landlock view unavailable, bubblewrap used (no Landlock or seccomp layer)".into(),
            );
        }
        if this.cgroups.is_none() && cgroup::is_root() {
            this.report.fallbacks.push(
                "root without a writable pids cgroup: the process limit is not enforced".into(),
            );
        }
        if this.report.memory == MemoryMechanism::RlimitData {
            let why = match &this.cgroups {
                Some(c) => c.memory_missing().unwrap_or("none found").to_string(),
                None if cgroup::is_root() => "no writable cgroup hierarchy".to_string(),
                None => "not root: no cgroup is made".to_string(),
            };
            this.report.fallbacks.push(format!(
                "memory: watched by the executor, not a memory cgroup ({why})"
            ));
        }
        if network == NetworkMode::Allowlist {
            this.proxy = Some(EgressProxy::new(&this.opts.network_allow));
        }
        this.warm_spawner();
        if this.cgroups.is_some()
            && this.opts.spawner
            && this.spawners.lock().is_ok_and(|v| v.is_empty())
        {
            this.report.fallbacks.push(
                "no command spawner could be started: each command joins its cgroups itself (a slower start)".into(),
            );
        }
        Ok(this)
    }

    /// What a command writes to and is bounded on: the worktree first (its file system is the
    /// one watched), then the writable paths.
    fn growth_roots(&self) -> Vec<PathBuf> {
        let mut roots = vec![self.worktree.clone()];
        roots.extend(
            self.opts
                .writable
                .iter()
                .filter_map(|w| std::fs::canonicalize(w).ok()),
        );
        roots
    }

    /// Resolves once the command whose init is `pid` holds more memory than its limit, where
    /// no memory cgroup bounds it (the unprivileged path); never otherwise.
    async fn watch_memory(&self, pid: Option<i32>) -> u64 {
        match pid {
            Some(p) if self.data_rlimit() => memory::watch(p, self.opts.limits.memory_bytes).await,
            _ => std::future::pending().await,
        }
    }

    /// How each command's memory is bounded here.
    fn memory_mechanism(&self) -> MemoryMechanism {
        self.cgroups
            .as_ref()
            .map_or(MemoryMechanism::RlimitData, CgroupBase::memory_mechanism)
    }

    /// Whether `RLIMIT_DATA` bounds memory (no memory cgroup does).
    fn data_rlimit(&self) -> bool {
        self.memory_mechanism() == MemoryMechanism::RlimitData
    }

    /// Start one spawner now, so the first command does not pay for its cgroup move.
    fn warm_spawner(&self) {
        let idle = self.spawners.lock().map(|v| v.len()).unwrap_or(1);
        if idle == 0
            && let Some(s) = self.start_spawner()
        {
            self.give_back(s);
        }
    }

    /// A new spawner for the current backend, in a cgroup of its own (as root only).
    fn start_spawner(&self) -> Option<Spawner> {
        let base = self.cgroups.as_ref().filter(|_| self.opts.spawner)?;
        let (template, keep) = match &self.backend {
            Backend::Landlock { .. } if self.opts.network == NetworkMode::Off => {
                (ChildSetup::helper(self.opts.network), Keep::UserAndNet)
            }
            Backend::Landlock { .. } => (ChildSetup::helper(self.opts.network), Keep::User),
            Backend::Bwrap { .. } | Backend::None => (
                ChildSetup::limits_only(&self.opts.limits, self.data_rlimit()),
                Keep::Nothing,
            ),
        };
        let started = template.and_then(|(t, _)| {
            Spawner::start(
                base,
                self.opts.limits.max_processes,
                self.opts.limits.memory_bytes,
                &t,
                &self.worktree,
                keep,
            )
            .map_err(|e| Error::SandboxSetup {
                what: "the command spawner".into(),
                source: e,
            })
        });
        match started {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "no spawner: each command joins its own pids cgroup");
                None
            }
        }
    }

    /// An idle spawner, or a new one (a command running concurrently with another).
    fn take_spawner(&self) -> Option<Spawner> {
        self.cgroups.as_ref().filter(|_| self.opts.spawner)?;
        let idle = self.spawners.lock().ok().and_then(|mut v| v.pop());
        idle.or_else(|| self.start_spawner())
    }

    /// Return a spawner to the pool if it can run another command (else it is dropped, which
    /// kills it and whatever is left in its cgroup).
    fn give_back(&self, s: Spawner) {
        if s.reusable()
            && let Ok(mut v) = self.spawners.lock()
        {
            // Its last command is cleaned up after: the next one's sandbox may be readied.
            s.ready_the_next();
            v.push(s);
        }
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
            "inherited descriptors closed at exec (close_range)".to_string(),
            format!(
                "limits: cpu {} s, file size {} bytes, memory {} MiB ({}), {} processes ({}), no core dumps",
                self.opts.limits.cpu_seconds,
                self.opts.limits.file_size_bytes,
                self.opts.limits.memory_bytes >> 20,
                self.memory_mechanism(),
                self.opts.limits.max_processes,
                if self.cgroups.is_some() {
                    "pids cgroup"
                } else if cgroup::is_root() {
                    "NOT enforced: root without a pids cgroup"
                } else {
                    "RLIMIT_NPROC"
                }
            ),
            format!(
                "worktree growth per command at most {} MiB (checked while it runs; the command is stopped past it)",
                self.opts.limits.worktree_growth_bytes >> 20
            ),
        ];
        match &self.backend {
            Backend::Landlock { .. } => {
                p.push(format!(
                    "view: a fresh root with the system and toolchain directories read-only, the worktree read-write (.git and nested .git read-only), fresh tmpfs $HOME ({} MiB) and /tmp ({} MiB), own /proc, minimal /dev; nothing else of the machine",
                    self.opts.limits.home_bytes >> 20,
                    self.opts.limits.tmp_bytes >> 20
                ));
                p.push(
                    "user, mount, pid, IPC and UTS namespaces: only its own processes; all of them die with the command".into(),
                );
                p.push(format!(
                    "landlock over the view (kernel ABI {}, rights up to ABI 6 used), no_new_privs, no capabilities; no ptrace of or signals to outside processes",
                    self.report.landlock_abi
                ));
                p.push("seccomp: no io_uring, keyrings, perf or userfaultfd; no raw, packet or netlink sockets without the network".into());
            }
            Backend::Bwrap { path, .. } => {
                p.push(format!(
                    "bubblewrap {}: the same view; user, mount, pid, IPC, UTS namespaces; no capabilities; no Landlock or seccomp layer",
                    path.display()
                ));
            }
            Backend::None => {}
        }
        p.push(match self.opts.network {
            NetworkMode::Off => "network off: own network namespace with only its own loopback".into(),
            NetworkMode::Allowlist => format!(
                "network allowlist: own network namespace whose only way out is the egress proxy admitting {:?}",
                self.opts.network_allow
            ),
            NetworkMode::On => "network on: unrestricted".into(),
        });
        p
    }

    /// Run `true` in the sandbox once, so a sandbox that cannot be set up fails here. Through
    /// a fresh spawner when commands will use one (kept only if this succeeds, so a failed
    /// trial leaves no spawner set up for the wrong mechanism).
    fn verify(&self, mode: &str) -> Result<()> {
        let unavailable = |reason: String| Error::SandboxUnavailable {
            mode: mode.into(),
            reason,
        };
        let p = self.prepare("true", &[], Vec::new())?;
        let (status, stderr) = if let Some(mut sp) = self.start_spawner() {
            let null = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/null")
                .map_err(|e| Error::SandboxSetup {
                    what: "/dev/null for the trial command".into(),
                    source: e,
                })?;
            let (err_r, err_w) = pipe().map_err(|e| Error::SandboxSetup {
                what: "the trial command's step pipe".into(),
                source: e,
            })?;
            let pid = self.spawn_via(&mut sp, &p, null.as_raw_fd(), err_w.as_raw_fd());
            drop(err_w);
            match pid {
                Ok(_) => {}
                Err(SpawnError::Exec(e)) => {
                    return Err(unavailable(describe_spawn_error(&e, &p.parent)));
                }
                Err(SpawnError::Request(e) | SpawnError::Broken(e)) => {
                    return Err(unavailable(format!("the command spawner failed: {e}")));
                }
            }
            let status = sp
                .wait_blocking()
                .map_err(|e| unavailable(format!("the command spawner failed: {e}")))?;
            let mut stderr = Vec::new();
            let _ = std::io::Read::read_to_end(&mut std::fs::File::from(err_r), &mut stderr);
            self.give_back(sp);
            if let Some(why) = setup_failure(&p.parent) {
                return Err(unavailable(why));
            }
            (status, stderr)
        } else {
            let (mut cmd, parent) = self.std_command(p)?;
            cmd.stdout(Stdio::null()).stderr(Stdio::piped());
            let out = cmd
                .output()
                .map_err(|e| unavailable(describe_spawn_error(&e, &parent)))?;
            if let Some(why) = setup_failure(&parent) {
                return Err(unavailable(why));
            }
            (out.status, out.stderr)
        };
        if !status.success() {
            let stderr = String::from_utf8_lossy(&stderr);
            let stderr: String = stderr.trim().chars().take(500).collect();
            return Err(unavailable(format!(
                "a trial command in the sandbox failed ({status}): {stderr}"
            )));
        }
        Ok(())
    }

    /// `program args` with the sandbox prepared: environment, setup, parent-side handles.
    fn prepare(
        &self,
        program: &str,
        args: &[String],
        extra_env: Vec<(String, String)>,
    ) -> Result<Prepared> {
        let (home, tmp) = match self.backend {
            Backend::Landlock { .. } | Backend::Bwrap { .. } => (
                PathBuf::from(view::VIEW_HOME),
                PathBuf::from(view::VIEW_TMP),
            ),
            Backend::None => (
                self.private.path().join("home"),
                self.private.path().join("tmp"),
            ),
        };
        let view_mounts = |view: &View| command_mounts(view, &self.worktree);
        let mut env_extra = self.opts.env.clone();
        env_extra.extend(extra_env);
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
        let mut env =
            super::env::sandbox_env(parent_env, &self.opts.pass_env, &home, &tmp, &env_extra);
        super::env::prepend_path(&mut env, &self.opts.path_prefix);
        let plain_args = || args.iter().map(OsString::from).collect::<Vec<_>>();
        let mut helper_spec = None;
        let (program, args, (setup, parent)) = match &self.backend {
            Backend::Landlock { view } => {
                let mounts = view_mounts(view);
                let mut writable = vec![
                    self.worktree.clone(),
                    PathBuf::from(view::VIEW_TMP),
                    PathBuf::from(view::VIEW_HOME),
                    PathBuf::from("/dev/shm"),
                    PathBuf::from("/dev/pts"),
                ];
                writable.extend(
                    self.opts
                        .writable
                        .iter()
                        .filter_map(|w| std::fs::canonicalize(w).ok()),
                );
                let spec = Spec {
                    mounts,
                    unshare_net: self.opts.network != NetworkMode::On,
                    network: self.opts.network,
                    cwd: self.worktree.clone(),
                    writable,
                    rlimits: sandbox::rlimits(&self.opts.limits, self.data_rlimit()),
                    step_fd: -1,
                    proxy_fd: None,
                };
                let mut argv = vec![OsString::from(program)];
                argv.extend(plain_args());
                helper_spec = Some((spec, argv));
                (
                    OsString::from("/proc/self/exe"),
                    Vec::new(),
                    ChildSetup::helper(self.opts.network)?,
                )
            }
            Backend::Bwrap { path, view } => {
                let mut a =
                    sandbox::bwrap_args(&self.worktree, &view_mounts(view), self.opts.network);
                a.push(program.into());
                a.extend(plain_args());
                (
                    path.clone().into_os_string(),
                    a,
                    ChildSetup::limits_only(&self.opts.limits, self.data_rlimit())?,
                )
            }
            Backend::None => (
                OsString::from(program),
                plain_args(),
                ChildSetup::limits_only(&self.opts.limits, self.data_rlimit())?,
            ),
        };
        Ok(Prepared {
            program,
            args,
            helper: helper_spec,
            env,
            setup,
            parent,
        })
    }

    /// The std command for a prepared command, joining a pids cgroup of its own when the
    /// process limit needs one (the path without a spawner).
    fn std_command(&self, p: Prepared) -> Result<(std::process::Command, ParentSide)> {
        let is_helper = p.helper.is_some();
        let args = match &p.helper {
            Some(_) => helper_args(&p, p.setup.err_fd(), p.setup.proxy_fd())?,
            None => p.args.clone(),
        };
        let Prepared {
            program,
            env,
            mut setup,
            mut parent,
            ..
        } = p;
        let mut cmd = std::process::Command::new(program);
        if is_helper && !args.is_empty() {
            cmd.arg0(&args[0]);
            cmd.args(&args[1..]);
        } else {
            cmd.args(args);
        }
        if let Some(base) = &self.cgroups {
            let cg = base
                .create(
                    self.opts.limits.max_processes,
                    self.opts.limits.memory_bytes,
                )
                .map_err(|e| Error::SandboxSetup {
                    what: "the command's cgroups".into(),
                    source: e,
                })?;
            setup.join_cgroup(
                cg.procs.clone(),
                cg.memory.as_ref().and_then(|m| m.procs.clone()),
            );
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

    /// Start a prepared command through `sp`, with these standard output and error.
    fn spawn_via(
        &self,
        sp: &mut Spawner,
        p: &Prepared,
        stdout: std::os::fd::RawFd,
        stderr: std::os::fd::RawFd,
    ) -> std::result::Result<i32, SpawnError> {
        let path_var = p
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        let path = resolve_program(&p.program, path_var, &self.worktree)
            .ok_or_else(|| SpawnError::Exec(std::io::Error::from_raw_os_error(libc::ENOENT)))?;
        let helper_argv = match &p.helper {
            Some(_) => Some(
                helper_args(
                    p,
                    spawner_mod::STEP_FD,
                    p.setup.proxy_fd().map(|_| spawner_mod::PROXY_FD),
                )
                .map_err(|e| SpawnError::Request(std::io::Error::other(e)))?,
            ),
            None => None,
        };
        let argv: Vec<&[u8]> = match &helper_argv {
            Some(a) => a.iter().map(|a| a.as_bytes()).collect(),
            None => std::iter::once(p.program.as_bytes())
                .chain(p.args.iter().map(|a| a.as_bytes()))
                .collect(),
        };
        sp.spawn(&Launch {
            path: &path,
            argv: &argv,
            env: &p.env,
            setup: &p.setup,
            stdout,
            stderr,
        })
    }

    /// Start a prepared command: through a spawner when there is one, else directly.
    fn launch(&self, p: Prepared, program: &str) -> Result<Running> {
        let spawn_err = |e: std::io::Error, parent: &ParentSide| Error::Spawn {
            program: program.to_string(),
            source: std::io::Error::new(e.kind(), describe_spawn_error(&e, parent)),
        };
        if let Some(mut sp) = self.take_spawner() {
            let (out_r, out_w) = pipe().map_err(|e| spawn_err(e, &p.parent))?;
            let (err_r, err_w) = pipe().map_err(|e| spawn_err(e, &p.parent))?;
            let r = self.spawn_via(&mut sp, &p, out_w.as_raw_fd(), err_w.as_raw_fd());
            drop((out_w, err_w));
            match r {
                Ok(pid) => {
                    let rx = |fd: OwnedFd| -> Result<Pipe> {
                        let r = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
                            .map_err(|e| spawn_err(e, &p.parent))?;
                        Ok(Box::new(r))
                    };
                    return Ok(Running {
                        pid: Some(pid),
                        stdout: Some(rx(out_r)?),
                        stderr: Some(rx(err_r)?),
                        proc: Proc::Spawned(sp),
                        parent: p.parent,
                    });
                }
                Err(SpawnError::Exec(e)) => {
                    self.give_back(sp);
                    return Err(spawn_err(e, &p.parent));
                }
                Err(SpawnError::Request(e)) => {
                    tracing::debug!(error = %e, "command not for the spawner; spawning it directly");
                    self.give_back(sp);
                }
                Err(SpawnError::Broken(e)) => {
                    tracing::warn!(error = %e, "command spawner failed; spawning directly");
                }
            }
        }
        let (std_cmd, parent) = self.std_command(p)?;
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| spawn_err(e, &parent))?;
        let pid = child.id().map(|p| p as i32);
        let stdout = child.stdout.take().map(|p| Box::new(p) as Pipe);
        let stderr = child.stderr.take().map(|p| Box::new(p) as Pipe);
        Ok(Running {
            pid,
            proc: Proc::Child(child),
            stdout,
            stderr,
            parent,
        })
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
        let prepared = self.prepare(&program, &args, req.env)?;
        let start = Instant::now();
        let mut running = self.launch(prepared, &program)?;
        // The spawner's cgroup outlives its commands: count this command's OOM kills only.
        let oom_before = running
            .cgroup()
            .and_then(|c| c.memory.as_ref())
            .map_or(0, |m| m.oom_kills());
        let pid = running.pid;
        let userns = pid.and_then(|p| std::fs::read_link(format!("/proc/{p}/ns/user")).ok());
        let own_userns = std::fs::read_link("/proc/self/ns/user").ok();
        let userns = userns.filter(|u| Some(u) != own_userns.as_ref());

        let blocked: Arc<Mutex<Vec<BlockedHost>>> = Arc::default();
        let proxy_task = match (&self.proxy, &running.parent.proxy_sock) {
            (Some(proxy), Some(sock)) => Some(self.serve_proxy(proxy, sock)?),
            _ => None,
        };
        let before = self.proxy.as_ref().map_or(0, |p| p.blocked().len());

        let cap = self.opts.limits.output_cap_bytes;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let out_task = running
            .stdout
            .take()
            .map(|p| tokio::spawn(read_capped(p, cap, stop_rx.clone())));
        let err_task = running
            .stderr
            .take()
            .map(|p| tokio::spawn(read_capped(p, cap, stop_rx.clone())));

        let bound = self.opts.limits.worktree_growth_bytes;
        let mut grew = None;
        let mut hog = None;
        let waited = tokio::select! {
            s = running.wait() => Some(s),
            _ = tokio::time::sleep(timeout) => None,
            g = growth::watch(self.growth_roots(), bound) => {
                grew = Some(g);
                None
            }
            m = self.watch_memory(pid) => {
                hog = Some(m);
                None
            }
        };
        if let Some(cg) = running.cgroup() {
            cg.kill_all().await;
        }
        if let Some(pid) = pid {
            kill_group(pid).await;
        }
        let oom_now = |r: &Running| {
            r.cgroup()
                .and_then(|c| c.memory.as_ref())
                .map_or(0, |m| m.oom_kills().saturating_sub(oom_before))
        };
        // The spawner shares the command's memory cgroup; where it cannot exempt itself and
        // looks larger than the command (a big agent, a small limit), the OOM killer may take
        // it, and the command dies with it: that is the command's out-of-memory kill too.
        let mut lost_to_oom = false;
        let status = match waited {
            Some(Err(_)) if oom_now(&running) > 0 => {
                lost_to_oom = true;
                None
            }
            Some(s) => Some(s.map_err(|e| Error::Wait {
                program: program.clone(),
                source: e,
            })?),
            None => {
                let s = running.wait().await;
                if grew.is_some() || hog.is_some() {
                    s.ok()
                } else {
                    None
                }
            }
        };
        if let Some(code) = status.and_then(|s| s.code())
            && (code == helper::SETUP_FAILED || code == 127)
            && let Some((errno, what)) = helper::read_failure(running.parent.err_pipe.as_raw_fd())
        {
            let source = std::io::Error::from_raw_os_error(errno);
            return Err(if code == 127 {
                Error::Spawn {
                    program: program.clone(),
                    source: std::io::Error::new(source.kind(), format!("{what}: {source}")),
                }
            } else {
                Error::SandboxSetup { what, source }
            });
        }
        if let Some(cg) = running.cgroup() {
            cg.kill_all().await;
            cg.drained().await;
        }
        let oom_killed = oom_now(&running);
        // Every process of the command's user namespace descends from the child, which joined
        // the cgroup before unsharing, and none can leave it (cgroupfs is not writable under
        // Landlock, and read-only under bubblewrap's `--ro-bind / /`): an empty cgroup means an
        // empty namespace, so the /proc scan is skipped.
        let ns_empty = running.cgroup().is_some_and(|cg| cg.is_empty());
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
        if let Proc::Spawned(sp) = running.proc {
            self.give_back(sp);
        }
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
            None if grew.is_some() || hog.is_some() || lost_to_oom => {
                Termination::Signaled(libc::SIGKILL)
            }
            None => Termination::TimedOut,
            Some(s) => match (s.code(), s.signal()) {
                (Some(c), _) => Termination::Exited(c),
                (None, Some(sig)) => Termination::Signaled(sig),
                (None, None) => Termination::Exited(-1),
            },
        };
        let blocked_hosts = blocked.lock().map(|b| b.clone()).unwrap_or_default();
        let limit_mib = self.opts.limits.memory_bytes >> 20;
        let stopped = grew
            .map(|g| g.message())
            .or_else(|| {
                hog.map(|used| {
                    format!(
                        "killed: out of memory, past the limit of {limit_mib} MiB per command \
                         (its processes held {} MiB; watched, no memory cgroup here)",
                        used >> 20
                    )
                })
            })
            .or_else(|| {
                (oom_killed > 0).then(|| {
                    format!(
                        "killed: out of memory, past the limit of {} MiB per command ({}; {} process{} killed)",
                        self.opts.limits.memory_bytes >> 20,
                        self.memory_mechanism(),
                        oom_killed,
                        if oom_killed == 1 { "" } else { "es" }
                    )
                })
            });
        tracing::debug!(?status, program, elapsed = ?start.elapsed(), "command finished");
        Ok(ExecOutput {
            status,
            stdout,
            stderr,
            duration: start.elapsed(),
            pid: pid.map_or(0, |p| p as u32),
            blocked_hosts,
            stopped,
        })
    }

    /// Serve the egress proxy on the listener the command's init sends once its network
    /// namespace is up (after the helper has started, so this waits for it).
    fn serve_proxy(
        &self,
        proxy: &EgressProxy,
        sock: &OwnedFd,
    ) -> Result<tokio::task::JoinHandle<()>> {
        let sock = sock.try_clone().map_err(Error::Proxy)?;
        let proxy = proxy.clone();
        Ok(tokio::spawn(async move {
            // SAFETY: the AsyncFd owns `sock`, an open descriptor, for its whole life.
            let registered = unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(
                    sock,
                    tokio::io::Interest::READABLE,
                )
            };
            let Ok(afd) = registered else {
                return;
            };
            let fd = loop {
                let Ok(mut guard) = afd.readable().await else {
                    return;
                };
                match guard.try_io(|inner| sandbox::recv_fd(inner.get_ref())) {
                    Ok(Ok(fd)) => break fd,
                    Ok(Err(_)) => return,
                    Err(_would_block) => continue,
                }
            };
            let std_listener = std::net::TcpListener::from(fd);
            if std_listener.set_nonblocking(true).is_err() {
                return;
            }
            let Ok(listener) = tokio::net::TcpListener::from_std(std_listener) else {
                return;
            };
            let serving = AbortOnDrop(proxy.serve(listener));
            let _ = serving.wait().await;
        }))
    }
}

/// The view every command of an executor for `worktree` (canonical) with `opts` gets, before
/// its `.git` binds: from the agent's environment and the configuration.
pub(super) fn build_view(worktree: &Path, opts: &ExecOptions) -> View {
    let env = |k: &str| std::env::var_os(k);
    let l = &opts.limits;
    view::build(&view::ViewInputs {
        worktree,
        writable: &opts.writable,
        bind: &opts.bind,
        project_binds: &opts.project_binds,
        hide: &opts.hide,
        network: opts.network,
        sizes: view::Sizes {
            tmp: l.tmp_bytes,
            home: l.home_bytes,
            shm: l.tmp_bytes,
        },
        env: &env,
    })
}

/// Make the mount point of each of `opts.project_binds` in `worktree` (an empty directory,
/// which git does not see), or, without a sandbox, a symbolic link to the source. A
/// destination that climbs out of the worktree is refused, and so is a source that is, or
/// passes through, a symbolic link below its base (a set-up that left `node_modules -> /`
/// would otherwise bind the host's root into every command).
fn mount_points(worktree: &Path, mut opts: ExecOptions) -> Result<ExecOptions> {
    let mut binds = Vec::new();
    for bind in std::mem::take(&mut opts.project_binds) {
        let plain = |p: &Path| {
            !p.as_os_str().is_empty()
                && p.components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
        };
        if !plain(&bind.dest) {
            return Err(Error::ProjectBind {
                path: bind.dest,
                why: "it must be a plain path inside the worktree".into(),
            });
        }
        let base = std::fs::canonicalize(&bind.base).map_err(|e| Error::ProjectBind {
            path: bind.base.clone(),
            why: e.to_string(),
        })?;
        let src = base.join(&bind.src);
        if !plain(&bind.src) {
            return Err(Error::ProjectBind {
                path: src,
                why: "its source must be a plain path below its base".into(),
            });
        }
        crate::fsutil::dir_without_links(&base, &bind.src).map_err(|e| Error::ProjectBind {
            path: src.clone(),
            why: format!(
                "{}; a set-up output must be a directory the set-up made",
                crate::fsutil::link_refusal(&e)
            ),
        })?;
        let dest = worktree.join(&bind.dest);
        let made = if opts.sandbox == crate::config::SandboxMode::Off {
            match std::fs::symlink_metadata(&dest) {
                Ok(_) => Ok(()),
                Err(_) => std::os::unix::fs::symlink(&src, &dest),
            }
        } else if std::fs::symlink_metadata(&dest).is_ok_and(|m| m.file_type().is_symlink()) {
            // A link there would carry the mount wherever it points.
            Err(std::io::Error::other("it is a symbolic link"))
        } else {
            std::fs::create_dir_all(&dest)
        };
        made.map_err(|e| Error::ProjectBind {
            path: dest.clone(),
            why: e.to_string(),
        })?;
        binds.push(crate::exec::ProjectBind {
            base,
            src: bind.src,
            dest: bind.dest,
        });
    }
    opts.project_binds = binds;
    Ok(opts)
}

/// One command's mounts: the view, and the worktree's `.git` directories read-only.
pub(super) fn command_mounts(view: &View, worktree: &Path) -> Vec<view::Mount> {
    let mut mounts = view.mounts.clone();
    for g in sandbox::git_dirs(worktree) {
        mounts.push(view::Mount::Bind {
            src: g.clone(),
            dest: g,
            rw: false,
        });
    }
    view::sort(&mut mounts);
    mounts
}

/// A task aborted when this is dropped (so aborting the task that awaits it stops it too).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl AbortOnDrop {
    async fn wait(mut self) -> std::result::Result<(), tokio::task::JoinError> {
        (&mut self.0).await
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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

/// The spawn error, with the helper's failure record when it wrote one.
fn describe_spawn_error(e: &std::io::Error, parent: &ParentSide) -> String {
    setup_failure(parent).unwrap_or_else(|| e.to_string())
}

/// The sandbox helper's failure record, as a sentence naming the cause and, where one is
/// known, the fix.
fn setup_failure(parent: &ParentSide) -> Option<String> {
    let (errno, what) = helper::read_failure(parent.err_pipe.as_raw_fd())?;
    let err = std::io::Error::from_raw_os_error(errno);
    let mut msg = format!("sandbox setup failed at `{what}`: {err}");
    if what.contains("namespace") || what.contains("uid_map") || what.contains("setgroups") {
        msg.push_str(&userns_hint());
    }
    Some(msg)
}

/// Why user namespaces are refused here, and what to do about it.
fn userns_hint() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|v| v.trim().to_string())
            .ok()
    };
    let opt_out = "or opt out explicitly with sandbox.mode = \"off\"";
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        format!(
            " (kernel.apparmor_restrict_unprivileged_userns=1, as on stock Ubuntu 24.04, denies \
             unprivileged user namespaces: run the agent as root, or set the sysctl to 0, {opt_out})"
        )
    } else if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        format!(
            " (kernel.unprivileged_userns_clone=0 denies unprivileged user namespaces: set it to \
             1, or run the agent as root, {opt_out})"
        )
    } else if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        format!(" (user.max_user_namespaces=0: set it above 0, {opt_out})")
    } else {
        format!(
            " (the command's view needs user namespaces; a container runtime's seccomp profile \
             often refuses them: allow unshare/clone with CLONE_NEWUSER, {opt_out})"
        )
    }
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

/// The helper's whole `argv` (with `argv[0]`) for a prepared view command, telling it where
/// its step pipe and proxy socket are.
fn helper_args(p: &Prepared, step_fd: i32, proxy_fd: Option<i32>) -> Result<Vec<OsString>> {
    let Some((spec, argv)) = &p.helper else {
        return Ok(p.args.clone());
    };
    let mut spec = spec.clone();
    spec.step_fd = step_fd;
    spec.proxy_fd = proxy_fd;
    helper::command_line(&spec, argv).map_err(|e| Error::SandboxSetup {
        what: "the sandbox helper's command line".into(),
        source: e,
    })
}

/// A pipe, both ends close-on-exec.
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The file `execvp` would run for `program` with this `PATH` (empty entries and relative
/// ones are relative to `cwd`, where the command runs); a name with a slash is used as is.
fn resolve_program(program: &std::ffi::OsStr, path: Option<&str>, cwd: &Path) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    if program.is_empty() {
        return None;
    }
    let path = path.unwrap_or("/usr/local/bin:/usr/bin:/bin");
    path.split(':').find_map(|dir| {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(dir)
        };
        let candidate = dir.join(program);
        let full = cwd.join(&candidate);
        let meta = std::fs::metadata(&full).ok()?;
        use std::os::unix::fs::PermissionsExt;
        (meta.is_file() && meta.permissions().mode() & 0o111 != 0).then_some(candidate)
    })
}
