//! Errors of model calls. Messages name the provider, model, key variable or script that failed.

use std::path::PathBuf;
use std::time::Duration;

use super::budget::Exhausted;

/// Errors from building clients, calling models and replaying scripts.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The provider refused the key (401/403). Never retried.
    #[error(
        "{provider} rejected the API key ({status}): {message}; check the key in the environment variable {key_var}"
    )]
    Auth {
        /// Provider label (`openai`, `anthropic`, `ollama`).
        provider: String,
        /// The environment variable the key came from.
        key_var: String,
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The account is out of credit or over its spend limit. Never retried.
    #[error(
        "{provider} refused the call: spend limit or quota reached ({status}): {message}; the key comes from {key_var}"
    )]
    SpendLimit {
        /// Provider label.
        provider: String,
        /// The environment variable the key came from.
        key_var: String,
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// No key in the environment where the provider needs one.
    #[error("{provider} needs an API key: set the environment variable {key_var}")]
    MissingKey {
        /// Provider label.
        provider: String,
        /// The variable that should hold it.
        key_var: String,
    },
    /// The provider refused the request as malformed (other 4xx). Not retried.
    #[error("{provider} refused the request to {url} ({status}): {message}")]
    Rejected {
        /// Provider label.
        provider: String,
        /// Endpoint.
        url: String,
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// A failure that may pass: 429, 5xx, 529, reset, time-out, cut stream.
    /// Retried inside a client; surfaces only wrapped in [`Error::RetriesExhausted`] or when
    /// the caller disabled retries.
    #[error("{provider}: {message}")]
    Transient {
        /// Provider label.
        provider: String,
        /// What happened.
        message: String,
        /// The server's `retry-after`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// Every retry of a transient failure failed.
    #[error("{provider} model {model} failed after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// Provider label.
        provider: String,
        /// Model name.
        model: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// The reply did not follow the provider's wire format.
    #[error("{provider}: malformed reply: {message}")]
    Protocol {
        /// Provider label.
        provider: String,
        /// What was wrong.
        message: String,
    },
    /// A hard budget would be exceeded by the next call; the run ends in `budget_exhausted`.
    #[error("{0}")]
    BudgetExhausted(Box<Exhausted>),
    /// A `--model`/config spec does not parse.
    #[error("invalid model spec `{spec}`: {message}")]
    Spec {
        /// The spec as given.
        spec: String,
        /// Why it is refused.
        message: String,
    },
    /// No model is configured for a role the run asked for.
    #[error(
        "no model configured for role {role}; set models.{role} or pass --model {role}=PROVIDER:MODEL"
    )]
    NoModel {
        /// The role.
        role: String,
    },
    /// The script has no line left for this call.
    #[error("script exhausted: {path} has no reply left for the {role} call")]
    ScriptExhausted {
        /// The script file.
        path: PathBuf,
        /// Role of the call.
        role: String,
    },
    /// A script line's `expect` text is not in the request.
    #[error("script {path} line {line}: the request does not contain the expected text {expect:?}")]
    ScriptExpect {
        /// The script file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The expected substring.
        expect: String,
    },
    /// A script line does not parse.
    #[error("script {path} line {line}: {message}")]
    Script {
        /// The script file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for {provider}: {message}")]
    Client {
        /// Provider label.
        provider: String,
        /// reqwest's reason.
        message: String,
    },
    /// A file (script, recording) could not be read or written.
    #[error("{context} {path}: {source}")]
    Io {
        /// What we were doing.
        context: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl Error {
    /// Whether a retry may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Transient { .. })
    }

    /// Whether this ends the run in `budget_exhausted` (rather than `failed`).
    pub fn is_budget_exhausted(&self) -> bool {
        matches!(self, Error::BudgetExhausted(_))
    }
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
