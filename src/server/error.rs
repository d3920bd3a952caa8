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
    #[error("job {job}: {what}")]
    Runner {
        /// The job.
        job: String,
        /// What went wrong, one line.
        what: String,
        /// The cause, where there is one (its chain goes into the job's record).
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl Error {
    /// Job `job` failed at `what`, for no deeper cause.
    pub(crate) fn runner(job: &str, what: impl Into<String>) -> Self {
        Self::Runner {
            job: job.to_string(),
            what: what.into(),
            source: None,
        }
    }

    /// Job `job` failed at `what` because of `source`.
    pub(crate) fn runner_by(
        job: &str,
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Runner {
            job: job.to_string(),
            what: what.into(),
            source: Some(source.into()),
        }
    }
}

/// `e` and each of its causes not already in its text, joined with ": " (what a job's
/// record and the log keep).
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// Results of the server.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_job_keeps_every_cause_in_its_record() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let forge = crate::forge::Error::Local {
            what: "cannot read /s/state.json".into(),
            source: Some(io),
        };
        let e = Error::runner_by("j1", "cannot set up the GitHub client", forge);
        assert_eq!(
            chain(&e),
            "job j1: cannot set up the GitHub client: local forge: cannot read /s/state.json: \
             no such file"
        );
        // A cause already in a message is not said twice.
        let quoted = Error::runner_by(
            "j2",
            "gone: no such file",
            std::io::Error::other("no such file"),
        );
        assert_eq!(chain(&quoted), "job j2: gone: no such file");
        assert_eq!(
            chain(&Error::runner("j3", "no repository")),
            "job j3: no repository"
        );
    }
}
