//! Errors of the server.

/// Errors from the webhook server and its workers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listener failed.
    #[error("webhook server: {source}")]
    Serve {
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The job store failed.
    #[error(transparent)]
    Store(#[from] crate::store::Error),
    /// A job's run failed; the job is marked failed and a redelivery runs it again.
    #[error("job {job}: {message}")]
    Runner {
        /// The job.
        job: String,
        /// What went wrong, one line.
        message: String,
    },
}

/// Results of the server.
pub type Result<T, E = Error> = std::result::Result<T, E>;
