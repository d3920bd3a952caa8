//! Errors of building a policy.

/// Errors of building a policy from configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A path glob does not parse.
    #[error("invalid path glob `{glob}` in policy.{key} ({origin}): {message}")]
    BadGlob {
        /// The glob as written.
        glob: String,
        /// `allow_paths` or `deny_paths`.
        key: &'static str,
        /// Where it came from.
        origin: String,
        /// globset's reason.
        message: String,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
