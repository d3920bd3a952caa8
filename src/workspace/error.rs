use std::path::PathBuf;

/// Errors of the git engine. Messages name the repository, ref or path that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No repository at or above a path.
    #[error("not a git repository (or any parent): {path}: {message}")]
    NotARepo {
        /// Where we looked.
        path: PathBuf,
        /// gix's reason.
        message: String,
    },
    /// A revision did not resolve.
    #[error("cannot resolve revision `{rev}`: {message}")]
    BadRev {
        /// The revision as given.
        rev: String,
        /// Why.
        message: String,
    },
    /// A branch already exists and we were not resuming.
    #[error("branch `{0}` already exists; pick another name or resume the run that owns it")]
    BranchExists(String),
    /// A name is not usable as a branch or run id.
    #[error("invalid name `{name}`: {why}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why it is refused.
        why: String,
    },
    /// A push went to a branch outside the allowed prefix.
    #[error("refusing to push `{branch}`: agent pushes only go to branches under `{prefix}`")]
    PushRefused {
        /// Branch we were asked to push.
        branch: String,
        /// The allowed prefix.
        prefix: String,
    },
    /// The remote refused the push of some refs (the branch exists there with other
    /// commits, or a rule of the remote refused it). The push is atomic: no ref was updated.
    #[error("the remote refused {}: {detail}", refs.join(", "))]
    PushRejected {
        /// The refs the remote refused.
        refs: Vec<String>,
        /// Git's reason, as it printed it.
        detail: String,
    },
    /// A `git` subprocess failed.
    #[error("git {args} failed ({status}): {stderr}")]
    GitCli {
        /// The arguments (never containing credentials).
        args: String,
        /// Exit status.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A gix operation failed.
    #[error("{context}: {message}")]
    Git {
        /// What we were doing.
        context: String,
        /// gix's message.
        message: String,
    },
    /// A filesystem operation failed.
    #[error("{context} {path}: {source}")]
    Io {
        /// What we were doing.
        context: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The state directory has a dot-component and the directory its checkouts go to
    /// instead is not one the agent's user alone controls (issue 39).
    #[error(
        "the run checkouts' directory {dir} (used because the state directory {state} has a component starting with `.`, which real projects take for hidden) is not a directory of this user's that no one else may write; remove it, or give a state directory without a dot-component (GIT_AGENT_STATE_DIR, --state-dir, XDG_STATE_HOME)"
    )]
    CheckoutsDir {
        /// The directory refused.
        dir: PathBuf,
        /// The state directory.
        state: PathBuf,
    },
    /// A run worktree was asked for, but the front door set no state directory to put it in.
    #[error(
        "no state directory for run worktrees (set XDG_STATE_HOME or HOME, or the bot's --state-dir)"
    )]
    NoStateDir,
}

/// `Result` with the workspace [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attach context to gix errors.
pub(crate) trait GixContext<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::fmt::Display> GixContext<T> for std::result::Result<T, E> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::Git {
            context: context(),
            message: e.to_string(),
        })
    }
}

#[allow(dead_code)]
pub(crate) fn io_err(
    context: &'static str,
    path: impl Into<PathBuf>,
) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.into();
    move |source| Error::Io {
        context,
        path,
        source,
    }
}

impl Error {
    /// Whether this is a fault of the harness (a file it could not read or write, the git
    /// engine failing) rather than of what it was asked (a bad revision, a taken branch, a
    /// refused push, a directory that is not a repository).
    pub fn is_internal(&self) -> bool {
        matches!(self, Error::Io { .. } | Error::Git { .. })
    }
}
