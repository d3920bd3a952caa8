//! Errors of command execution.

use std::path::PathBuf;

/// Errors from setting up or starting a command. A command that runs and fails is not an
/// error: it is an [`ExecOutput`](super::ExecOutput) with its status.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The requested sandbox is not available here; nothing was run (fail closed).
    #[error(
        "sandbox `{mode}` is not available: {reason}; commands will not run without it (set sandbox.mode = \"off\" to opt out explicitly)"
    )]
    SandboxUnavailable {
        /// The requested mode.
        mode: String,
        /// Why it cannot be had.
        reason: String,
    },
    /// The sandbox could not be prepared for one command.
    #[error("cannot prepare the sandbox for {what}: {source}")]
    SandboxSetup {
        /// The step or path that failed.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The worktree does not exist or is not a directory.
    #[error("worktree {path} is not a directory")]
    Worktree {
        /// The path given.
        path: PathBuf,
    },
    /// A directory to bind into the worktree cannot be (its source is missing, its path
    /// leaves the worktree, or its mount point cannot be made).
    #[error("cannot bind {path} into the worktree: {why}")]
    ProjectBind {
        /// The source or destination concerned.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The command line is empty.
    #[error("empty command")]
    EmptyCommand,
    /// A request tried to pass a variable that looks like a secret.
    #[error("refusing to pass environment variable {name} to a command: it looks like a secret")]
    SecretEnv {
        /// The variable's name.
        name: String,
    },
    /// Allowlist egress needs a mode that can confine the command to the proxy.
    #[error("network mode `allowlist` is not supported with sandbox `{mode}`: {reason}")]
    AllowlistUnsupported {
        /// The sandbox mode.
        mode: String,
        /// Why.
        reason: String,
    },
    /// The private temp directory could not be made.
    #[error("cannot create the private temp directory: {0}")]
    TempDir(std::io::Error),
    /// The process could not be started (inside the sandbox setup or at exec).
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The underlying error; for sandbox steps it names the step.
        source: std::io::Error,
    },
    /// Waiting for the process failed.
    #[error("cannot wait for `{program}`: {source}")]
    Wait {
        /// The program.
        program: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The egress proxy could not be started.
    #[error("cannot start the egress proxy: {0}")]
    Proxy(std::io::Error),
    /// The seccomp filter could not be built.
    #[error("cannot build the seccomp filter: {0}")]
    Seccomp(String),
    /// The Landlock ruleset could not be built.
    #[error("cannot build the landlock ruleset for {path}: {message}")]
    Landlock {
        /// The path (or `ruleset`) involved.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// Executor construction needs a tokio runtime (for the egress proxy and process I/O).
    #[error("the executor needs a tokio runtime")]
    NoRuntime,
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether this is a fault of the harness (a command it could not start or wait for, no
    /// temporary directory, no runtime) rather than of the configuration or the machine (a
    /// sandbox this machine cannot give, a secret in the environment, an empty command).
    pub fn is_internal(&self) -> bool {
        matches!(
            self,
            Error::Spawn { .. } | Error::Wait { .. } | Error::TempDir(_) | Error::NoRuntime
        )
    }
}
