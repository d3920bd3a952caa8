use std::path::PathBuf;

/// Errors of the project index. Messages name the repository object, path or cache file that
/// failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the repository failed.
    #[error(transparent)]
    Workspace(#[from] crate::workspace::Error),
    /// A git object could not be read or decoded.
    #[error("{context}: {message}")]
    Git {
        /// What we were doing, naming the object.
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
    /// A tree-sitter query of ours did not compile against its grammar (a bug in this module).
    #[error("tree-sitter query for {language} does not compile")]
    Query {
        /// The language.
        language: &'static str,
        /// tree-sitter's error.
        source: std::sync::Arc<tree_sitter::QueryError>,
    },
    /// A grammar of ours does not load into tree-sitter (a version mismatch; a bug here).
    #[error("tree-sitter grammar for {language} does not load")]
    Grammar {
        /// The language.
        language: &'static str,
        /// tree-sitter's error.
        source: tree_sitter::LanguageError,
    },
    /// The tokenizer used to count repo-map tokens could not be loaded.
    #[error("loading the tokenizer")]
    Tokenizer(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A repository without a work tree was asked for its work tree.
    #[error("repository {0} has no work tree; index a commit instead")]
    NoWorktree(PathBuf),
}

/// `Result` with the index [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

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

pub(crate) fn git_err<E: std::fmt::Display>(
    context: impl FnOnce() -> String,
) -> impl FnOnce(E) -> Error {
    move |e| Error::Git {
        context: context(),
        message: e.to_string(),
    }
}
