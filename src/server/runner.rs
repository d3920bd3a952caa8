//! The seam between a claimed job and the work it stands for.
//!
//! A worker hands a [`JobRunner`] the stored event and payload and a cancellation token; the
//! runner decides (through `trigger`) whether the event starts a run, runs and publishes it,
//! and says how it ended. Everything about leases, retries and the job's state is the
//! worker's; everything about runs, branches and pull requests is the runner's.

use async_trait::async_trait;

use super::Result;
use tokio_util::sync::CancellationToken;

/// A claimed job, as the runner sees it.
#[derive(Debug, Clone)]
pub struct JobInput {
    /// The job id.
    pub job_id: String,
    /// The delivery id (`X-GitHub-Delivery`).
    pub delivery_id: String,
    /// `X-GitHub-Event`.
    pub event: String,
    /// The payload as the job keeps it: what the agent reads of it (`trigger::Event::stored`).
    pub payload: Vec<u8>,
    /// Which claim of the job this is (1 for the first; more after a crash or a redelivery).
    pub attempt: u32,
    /// The run an earlier attempt recorded, if any.
    pub run_id: Option<String>,
    /// Fired (before the `cancel` token given to [`JobRunner::run`]) when the job is
    /// cancelled by `/agent stop`, rather than by a lost lease or a shutdown: the run should
    /// be ended and recorded as cancelled, not left to be continued by another worker.
    pub stop: CancellationToken,
}

/// How a run ended (or paused).
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The run id.
    pub run_id: String,
    /// The run's state (`succeeded`, `failed`, `awaiting_approval`, …).
    pub state: String,
    /// The draft pull request, if one was opened.
    pub pr_url: Option<String>,
    /// The report (PR body), redacted.
    pub report: Option<String>,
    /// Model spend, USD.
    pub spend_usd: f64,
    /// One line for the status page.
    pub detail: String,
}

/// What a job came to.
#[derive(Debug, Clone, PartialEq)]
pub enum JobOutcome {
    /// A run was started or continued and ended or paused.
    Ran(RunSummary),
    /// `/agent stop` from someone allowed to give it: stop the jobs of this lane.
    Stop {
        /// The lane (`owner/name#N`).
        lane: String,
    },
    /// The event starts nothing (the trigger's reason).
    Ignored {
        /// Why.
        reason: String,
    },
}

/// Turns a job into its outcome. Implementations must be idempotent on the request: a job
/// given again after a crash continues or finds the earlier run instead of starting another.
#[async_trait]
pub trait JobRunner: Send + Sync {
    /// Run `job`. When `cancel` fires (`/agent stop`, lost lease, shutdown past its grace),
    /// return soon; the worker decides what the job's state becomes. An `Err` (usually
    /// [`Error::Runner`](super::Error::Runner)) marks the job failed (a redelivery runs it
    /// again); its text is shown on the status page.
    async fn run(&self, job: &JobInput, cancel: CancellationToken) -> Result<JobOutcome>;
}
