use std::path::PathBuf;

/// Errors of verification. Parsing never fails (unparseable output is a report without
/// names); only reading the project's files does.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A project file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// `package.json` is not valid JSON.
    #[error("invalid {path}: {message}")]
    PackageJson {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The `[setup]` configuration cannot be used as it is.
    #[error("invalid [setup]: {why}")]
    Setup {
        /// What is wrong, naming the key.
        why: String,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;
