//! Process execution for the agent's commands: sandbox, limits, egress and environment.
//!
//! This module owns running one command in a run's worktree: in its own process group, with a
//! wall-clock timeout that kills the whole group, resource limits, output captured up to a cap
//! (head and tail kept, the rest counted), an allow-listed environment without secrets, and a
//! sandbox that lets it write only the worktree (never its `.git`) and a private temp dir.
//! Network access follows [`NetworkMode`](crate::config::NetworkMode): none, per-domain
//! through an in-process proxy ([`proxy`]), or unrestricted.
//!
//! It must not decide whether a command may run (that is `policy`), interpret its output
//! (that is `verify`), or redact it (that is `audit::redact`, applied by whoever writes the
//! output somewhere). When the requested sandbox cannot be had it fails closed; running without
//! one happens only on the explicit [`SandboxMode::Off`](crate::config::SandboxMode::Off),
//! which [`SandboxReport`] exposes so the caller can record it in the audit log.
//!
//! ```no_run
//! # async fn f(settings: &git_agent::config::Settings) -> Result<(), git_agent::exec::Error> {
//! use std::sync::Arc;
//! use git_agent::exec::{Executor, ExecOptions, ExecRequest, LocalExecutor};
//! let exec: Arc<dyn Executor> =
//!     Arc::new(LocalExecutor::new("/path/to/worktree".as_ref(), ExecOptions::from_settings(settings))?);
//! let out = exec.run(ExecRequest::shell("cargo test 2>&1")).await?;
//! println!("{:?} {}", out.status, out.stdout.to_text_lossy());
//! # Ok(()) }
//! ```

mod capture;
// System calls between fork and exec, namespaces, mounts and descriptors: the unsafe
// code of the crate lives in these modules, each block with its SAFETY argument.
#[allow(unsafe_code)]
mod cgroup;
mod env;
mod error;
mod explain;
// SCM_RIGHTS.
#[allow(unsafe_code)]
mod fdpass;
// statvfs.
#[allow(unsafe_code)]
mod growth;
#[allow(unsafe_code)]
mod helper;
// The `.init_array` entry and the start-up `argv` it reads.
#[allow(unsafe_code)]
mod hook;
#[allow(unsafe_code)]
mod local;
mod memory;
pub mod proxy;
#[allow(unsafe_code)]
mod sandbox;
mod secrets;
#[allow(unsafe_code)]
mod spawner;
mod view;

use std::path::PathBuf;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Serialize;

pub use capture::Captured;
pub use cgroup::MemoryMechanism;
pub use env::{DEFAULT_PASS_ENV, sandbox_env};
pub use error::{Error, Result};
pub use explain::{Explanation, ViewEntry, explain};
pub use local::LocalExecutor;
pub use proxy::{BlockedHost, EgressProxy};
pub use sandbox::{Mechanism, SandboxReport, SandboxSupport, probe};
pub use secrets::{Secret, from_git as secrets_from_git};
pub use view::{VIEW_HOME, VIEW_TMP};

use crate::config::{NetworkMode, SandboxMode, Settings};

/// Runs commands for the agent. Held as `Arc<dyn Executor>` so a run can swap the local
/// executor for another (a remote runner, a container) without changing its callers.
pub trait Executor: Send + Sync {
    /// Run one command to completion (or until its timeout) and report what happened.
    /// A command that fails, is killed or times out is an `Ok` with that status; `Err` means
    /// the command could not be started (or the sandbox could not be set up).
    fn run(&self, request: ExecRequest) -> BoxFuture<'_, Result<ExecOutput>>;

    /// What sandbox this executor applies, for the audit log.
    fn sandbox(&self) -> &SandboxReport;

    /// Every host the egress proxy refused so far, across all commands, for the report.
    fn blocked_hosts(&self) -> Vec<BlockedHost>;
}

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum CommandLine {
    /// A program and its arguments, run without a shell.
    Argv(Vec<String>),
    /// A shell command line, run as `/bin/sh -c LINE` (the `run` tool's form).
    Shell(String),
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// The command.
    pub command: CommandLine,
    /// Wall-clock limit; the executor's default when `None`.
    pub timeout: Option<Duration>,
    /// Extra environment variables for this command. Names that look like secrets
    /// (`*_TOKEN`, `*_KEY`, …) are refused with an error rather than passed.
    pub env: Vec<(String, String)>,
}

impl ExecRequest {
    /// Run `argv` directly.
    pub fn argv<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            command: CommandLine::Argv(argv.into_iter().map(Into::into).collect()),
            timeout: None,
            env: Vec::new(),
        }
    }

    /// Run a shell command line.
    pub fn shell(line: impl Into<String>) -> Self {
        Self {
            command: CommandLine::Shell(line.into()),
            timeout: None,
            env: Vec::new(),
        }
    }

    /// With this wall-clock limit.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Termination {
    /// It exited with this code.
    Exited(i32),
    /// A signal killed it (e.g. 9 by a limit, 24 `SIGXCPU`, 25 `SIGXFSZ`).
    Signaled(i32),
    /// The wall-clock limit passed; the whole process group was killed.
    TimedOut,
}

impl Termination {
    /// Whether the command exited with code 0.
    pub fn success(&self) -> bool {
        matches!(self, Termination::Exited(0))
    }
}

/// What a command did.
#[derive(Debug, Clone, Serialize)]
pub struct ExecOutput {
    /// How it ended.
    pub status: Termination,
    /// Its standard output, capped.
    pub stdout: Captured,
    /// Its standard error, capped.
    pub stderr: Captured,
    /// Wall-clock time from spawn to the last process of its group reaped.
    pub duration: Duration,
    /// Process id of the command (also its process-group id), for the audit log.
    pub pid: u32,
    /// Hosts the egress proxy refused during this command.
    pub blocked_hosts: Vec<BlockedHost>,
    /// Why the executor stopped the command before it ended, other than its timeout (a
    /// bound it passed, e.g. the worktree's growth); `None` when it ran to its end.
    pub stopped: Option<String>,
}

/// Resource limits of each command (per process where the kernel counts per process).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// CPU seconds (`RLIMIT_CPU`); `SIGXCPU` then `SIGKILL` past it.
    pub cpu_seconds: u64,
    /// Largest file a process may write (`RLIMIT_FSIZE`); `SIGXFSZ` past it.
    pub file_size_bytes: u64,
    /// Processes and threads of the sandbox's user (`RLIMIT_NPROC`), which the sandbox's own
    /// user namespace makes effective even for root.
    pub max_processes: u64,
    /// Bytes kept of each of stdout and stderr (half head, half tail).
    pub output_cap_bytes: usize,
    /// Memory of the command: its cgroup's `memory.max` where the executor has a memory
    /// cgroup, else `RLIMIT_DATA` per process.
    pub memory_bytes: u64,
    /// Size of the command's fresh `/tmp` (and `/dev/shm`).
    pub tmp_bytes: u64,
    /// Size of the command's fresh `$HOME`.
    pub home_bytes: u64,
    /// How much the worktree may grow during one command; past it the command is stopped.
    pub worktree_growth_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            cpu_seconds: 3600,
            file_size_bytes: 4 << 30,
            max_processes: 2048,
            output_cap_bytes: 1 << 20,
            memory_bytes: 8 << 30,
            tmp_bytes: 4 << 30,
            home_bytes: 1 << 30,
            worktree_growth_bytes: 16 << 30,
        }
    }
}

/// A directory something other than the agent made (a set-up output), bound read-only into
/// the worktree. The agent's own `base` may be reached through links; `src` below it is
/// resolved with no symbolic link followed, when the executor is made and again by the
/// helper when it mounts, so a link planted there never carries the mount out of `base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectBind {
    /// A directory of the agent's (the set-up's cache entry).
    pub base: PathBuf,
    /// The source, relative to `base`, as the set-up left it (`outputs/node_modules`).
    pub src: PathBuf,
    /// Where it appears, relative to the worktree (`node_modules`).
    pub dest: PathBuf,
}

/// Behaviour of a [`LocalExecutor`], with defaults.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Which sandbox to use; `Off` is the explicit opt-out.
    pub sandbox: SandboxMode,
    /// Network access of commands.
    pub network: NetworkMode,
    /// Hosts (`name`, `name:port`, `*.suffix`) reachable in `Allowlist` mode.
    pub network_allow: Vec<String>,
    /// Resource limits.
    pub limits: Limits,
    /// Default wall-clock limit of a command.
    pub timeout: Duration,
    /// Environment variables passed through from the parent when set (names only; values
    /// come from the parent). Secret-looking names are never passed whatever this says.
    pub pass_env: Vec<String>,
    /// Extra paths the command may write (e.g. a shared build cache), bound read-write into
    /// its view.
    pub writable: Vec<PathBuf>,
    /// Extra paths bound read-only into the view (`sandbox.bind`, the set-up's cache).
    pub bind: Vec<PathBuf>,
    /// Directories bound read-only *into the worktree*, e.g. the set-up's `node_modules`
    /// (issue 19). The mount point is made in the worktree when it is missing; without a
    /// sandbox it becomes a symbolic link.
    pub project_binds: Vec<ProjectBind>,
    /// Variables every command gets on top of the allow-listed environment (the set-up's
    /// exports: `VIRTUAL_ENV`, `CARGO_HOME`, …). Secret-looking names are refused.
    pub env: Vec<(String, String)>,
    /// Directories put before the `PATH` every command gets (a set-up's `venv/bin`).
    pub path_prefix: Vec<PathBuf>,
    /// Secrets the configuration names, each covered with an empty read-only file or
    /// directory in the view wherever it lies (`sandbox.hide`, the bot's key files, what
    /// git's configuration names: [`secrets_from_git`]).
    pub hide: Vec<Secret>,
    /// As root with a pids cgroup: fork commands from a spawner process that joined its
    /// pids cgroup once, when the executor was made, so starting a command moves no process
    /// between cgroups (a cold move waits for an RCU grace period: about 13 ms on a cgroup v1
    /// hierarchy). `false` makes every command join a fresh cgroup of its own instead.
    pub spawner: bool,
}

impl Default for ExecOptions {
    fn default() -> Self {
        Self {
            sandbox: SandboxMode::Auto,
            network: NetworkMode::Off,
            network_allow: Vec::new(),
            limits: Limits::default(),
            timeout: Duration::from_secs(15 * 60),
            pass_env: DEFAULT_PASS_ENV.iter().map(|s| s.to_string()).collect(),
            writable: Vec::new(),
            bind: Vec::new(),
            project_binds: Vec::new(),
            env: Vec::new(),
            path_prefix: Vec::new(),
            hide: Vec::new(),
            spawner: true,
        }
    }
}

impl ExecOptions {
    /// Options from the resolved settings: sandbox mode, network mode and allowlist, and the
    /// verification timeout as the default command timeout.
    pub fn from_settings(settings: &Settings) -> Self {
        let sb = &settings.sandbox;
        let d = Limits::default();
        let mib = |v: Option<u64>, default: u64| v.map_or(default, |m| m.saturating_mul(1 << 20));
        Self {
            sandbox: sb.mode,
            network: settings.policy.network,
            network_allow: settings.policy.network_allow.clone(),
            timeout: Duration::from_secs(u64::from(settings.verify.timeout_minutes.max(1)) * 60),
            bind: sb.bind.clone(),
            hide: sb
                .hide
                .iter()
                .map(|p| Secret::new(p.clone(), "sandbox.hide"))
                .collect(),
            limits: Limits {
                memory_bytes: mib(sb.memory_mb, d.memory_bytes),
                tmp_bytes: mib(sb.tmp_mb, d.tmp_bytes),
                home_bytes: mib(sb.home_mb, d.home_bytes),
                worktree_growth_bytes: mib(sb.worktree_growth_mb, d.worktree_growth_bytes),
                ..d
            },
            ..Self::default()
        }
    }
}
