use std::path::{Path, PathBuf};

/// Errors that end (or refuse to start) a run. A tool failure the model can act on is not
/// one of these: it goes back to the model as a message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The git engine failed.
    #[error(transparent)]
    Workspace(#[from] crate::workspace::Error),
    /// A model call failed for good (including budget exhaustion).
    #[error(transparent)]
    Model(#[from] crate::model::Error),
    /// The executor could not start a command or set up the sandbox.
    #[error(transparent)]
    Exec(#[from] crate::exec::Error),
    /// The audit log could not be written or read.
    #[error(transparent)]
    Audit(#[from] crate::audit::chain::Error),
    /// The policy could not be built from the configuration.
    #[error(transparent)]
    Policy(#[from] crate::policy::Error),
    /// The layered configuration could not be resolved.
    #[error(transparent)]
    Config(#[from] crate::config::Error),
    /// The secret redactor could not be built.
    #[error(transparent)]
    Redact(#[from] crate::audit::redact::Error),
    /// Test-command detection failed.
    #[error(transparent)]
    Verify(#[from] crate::verify::Error),
    /// The forge failed while the run was being published (comment, push, pull request).
    #[error("{what}: {source}")]
    Forge {
        /// What was being done.
        what: String,
        /// The forge's error (boxed: it is large, and rare on the engine's paths).
        source: Box<crate::forge::Error>,
    },
    /// A branch could not be fetched from the remote.
    #[error("{what}: {source}")]
    Fetch {
        /// What was being fetched, from where.
        what: String,
        /// The git engine's error.
        source: Box<crate::workspace::Error>,
    },
    /// A tool hit a harness fault.
    #[error("{0}")]
    Tool(String),
    /// The change contains what looks like a secret; nothing was pushed.
    #[error("the change contains what looks like a secret, so it was not committed or pushed: {0}")]
    SecretInDiff(String),
    /// The run record is inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// A file in the run directory could not be read or written.
    #[error("{context} {path}: {source}")]
    Io {
        /// What we were doing.
        context: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether this is a fault of the harness itself (its own files, the git engine, the
    /// audit log, a command it could not start) rather than of the request, the
    /// configuration, the model or the forge.
    pub fn is_internal(&self) -> bool {
        match self {
            Error::Workspace(e) => e.is_internal(),
            Error::Exec(e) => e.is_internal(),
            Error::Audit(_) | Error::Tool(_) | Error::Io { .. } => true,
            Error::Model(_)
            | Error::Policy(_)
            | Error::Config(_)
            | Error::Redact(_)
            | Error::Verify(_)
            | Error::Forge { .. }
            | Error::Fetch { .. }
            | Error::SecretInDiff(_)
            | Error::Invalid(_) => false,
        }
    }

    pub(crate) fn io(context: &'static str, path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            context,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// `Result` with the run's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
