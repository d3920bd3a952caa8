//! Errors of the forge module.

/// Errors from talking to a forge.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The forge answered with a status we do not retry.
    #[error("{method} {path}: HTTP {status}: {message}")]
    Http {
        /// HTTP method of the request.
        method: String,
        /// Path of the request (no host, no query secrets).
        path: String,
        /// The status code.
        status: u16,
        /// GitHub's `message`, or the start of the body.
        message: String,
    },
    /// Rate-limited more often, or for longer, than the retry policy allows.
    #[error("{method} {path}: rate limited; gave up after {attempts} attempts ({why})")]
    RateLimited {
        /// HTTP method of the request.
        method: String,
        /// Path of the request.
        path: String,
        /// Requests made.
        attempts: u32,
        /// Why the policy stopped waiting.
        why: String,
    },
    /// The request could not be sent or its response not read.
    #[error("{method} {path}: {source}")]
    Transport {
        /// HTTP method of the request.
        method: String,
        /// Path of the request.
        path: String,
        /// The underlying client error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A response did not have the documented shape.
    #[error("{what}: unexpected response: {source}")]
    Decode {
        /// Which response.
        what: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// Authentication could not be set up (bad App key, no token).
    #[error("github authentication: {what}")]
    Auth {
        /// What could not be done.
        what: String,
        /// The cause, where there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The API base URL is not usable.
    #[error("github api base {url}: {why}")]
    BaseUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
        /// The parser's error, where it has one.
        #[source]
        source: Option<BoxError>,
    },
    /// Pushing the run branch failed.
    #[error("push to {remote}: {source}")]
    Push {
        /// The remote.
        remote: String,
        /// The git engine's error.
        source: crate::workspace::Error,
    },
    /// Fetching a run record failed.
    #[error("fetch of {what}: {source}")]
    Fetch {
        /// The ref and the remote.
        what: String,
        /// The git engine's error.
        source: Box<crate::workspace::Error>,
    },
    /// The local forge could not read or write its files, or lacks what was asked.
    #[error("local forge: {what}")]
    Local {
        /// What could not be done, or what is missing.
        what: String,
        /// The file system's error, where there is one.
        #[source]
        source: Option<std::io::Error>,
    },
    /// A background task died (a bug, not a forge failure).
    #[error("a forge task ended abnormally")]
    Join(#[from] tokio::task::JoinError),
}

/// Any error, as a cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Error {
    /// Authentication failed at `what`, because of `source`.
    pub(crate) fn auth(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Auth {
            what: what.into(),
            source: Some(source.into()),
        }
    }
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
