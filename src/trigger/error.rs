//! Errors of the trigger module.

/// Errors from turning an event into a task.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The forge could not answer a question the decision needs (permission, PR, logs).
    #[error("{what}: {source}")]
    Forge {
        /// What was being asked.
        what: String,
        /// The forge's error.
        source: crate::forge::Error,
    },
    /// The payload is not a GitHub event's JSON.
    #[error("event {0}")]
    Payload(#[from] super::event::Malformed),
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
