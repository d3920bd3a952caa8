//! Durable webhook deliveries and the jobs they start: SQLite (embedded, the default) and
//! Postgres (several `serve` processes sharing one queue).
//!
//! This module owns the queue's rules, identical in both stores:
//! - a delivery and its job are written in one transaction keyed on the delivery id
//!   (`X-GitHub-Delivery`): the same delivery twice is one job; a redelivery of a failed job
//!   queues it again; of a queued, running, succeeded or cancelled one does nothing;
//! - a job is claimed with a lease that its worker renews (heartbeat); a job whose lease ran
//!   out (its worker died) is claimed again by anyone;
//! - at most one job of a lane (one issue or pull request) runs at a time, enforced by a
//!   unique index on running lanes, so it holds across processes;
//! - only the lease holder can finish, release or record a run on a job.
//!
//! One driver per database: rusqlite for SQLite (`sqlite.rs`: its schema, its enqueue, the
//! threads that hold its connections), sqlx for Postgres (`postgres.rs`: likewise).
//! `rows.rs` holds what the two share: the statements both dialects accept as written and the
//! mapping from a row to a [`Job`].
//!
//! It must not parse payloads, talk to the forge or run anything: it stores bytes and states.

mod error;
mod postgres;
mod rows;
mod sqlite;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

pub use error::{Driver, Error, Result};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    /// Waiting for a worker.
    Queued,
    /// Held by a worker's lease.
    Running,
    /// Finished; the run (if any) ended, whatever its verdict.
    Succeeded,
    /// Finished with an error; a redelivery queues it again.
    Failed,
    /// Stopped by `/agent stop` (or shutdown of a job that may not run again).
    Cancelled,
}

impl JobState {
    /// Every state, for metrics.
    pub const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// The state named `s`.
    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the job will not run again by itself.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

/// A verified delivery to store.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    /// `X-GitHub-Delivery`.
    pub delivery_id: String,
    /// `X-GitHub-Event`.
    pub event: String,
    /// The payload to keep (the receiver keeps the fields the agent reads); stored as given.
    pub payload: Vec<u8>,
    /// `owner/name`, when the payload names a repository.
    pub repo: Option<String>,
    /// The issue or PR the job belongs to (`owner/name#N`): one job of a lane runs at a time.
    /// `None` for jobs that must never wait for a run (control commands such as `/agent stop`).
    pub lane: Option<String>,
    /// A short description of what asked (`issues.labeled`, `issue_comment: /agent fix`).
    pub trigger: String,
}

/// What [`Store::enqueue`] did with a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// A new delivery: its job is queued.
    New {
        /// The job.
        job_id: String,
    },
    /// A redelivery of a job that failed: it is queued again.
    Requeued {
        /// The job.
        job_id: String,
    },
    /// A redelivery of a job that is queued, running, succeeded or cancelled: nothing to do.
    Duplicate {
        /// The job.
        job_id: String,
        /// Its state.
        state: JobState,
    },
}

impl Enqueued {
    /// The job concerned.
    pub fn job_id(&self) -> &str {
        match self {
            Enqueued::New { job_id }
            | Enqueued::Requeued { job_id }
            | Enqueued::Duplicate { job_id, .. } => job_id,
        }
    }
}

/// A stored job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Its id (a ULID).
    pub id: String,
    /// The delivery that made it.
    pub delivery_id: String,
    /// The event name.
    pub event: String,
    /// The payload, as [`NewDelivery::payload`] gave it.
    pub payload: Vec<u8>,
    /// `owner/name`.
    pub repo: Option<String>,
    /// Its lane (see [`NewDelivery::lane`]).
    pub lane: Option<String>,
    /// What asked.
    pub trigger: String,
    /// Its state.
    pub state: JobState,
    /// Times it was claimed.
    pub attempts: u32,
    /// The run it started, once known.
    pub run_id: Option<String>,
    /// The state the run ended (or paused) in (`succeeded`, `failed`, `awaiting_approval`…).
    pub run_state: Option<String>,
    /// The pull request the run opened.
    pub pr_url: Option<String>,
    /// The run's rendered report (the PR body, redacted).
    pub report: Option<String>,
    /// A one-line result or error.
    pub detail: Option<String>,
    /// Model spend of the run, USD.
    pub spend_usd: f64,
    /// Whether `/agent stop` asked it to stop.
    pub cancel_requested: bool,
    /// Who holds the lease.
    pub lease_owner: Option<String>,
    /// Until when (ms since the epoch).
    pub lease_until: Option<i64>,
    /// When it was stored (ms since the epoch).
    pub created_at: i64,
    /// When it last changed (ms since the epoch).
    pub updated_at: i64,
    /// How long its last attempt ran, ms.
    pub duration_ms: Option<i64>,
}

/// How a job ended, written by its lease holder.
#[derive(Debug, Clone, PartialEq)]
pub struct Finish {
    /// `Succeeded`, `Failed` or `Cancelled`.
    pub state: JobState,
    /// The run, if one was started.
    pub run_id: Option<String>,
    /// The state the run ended in.
    pub run_state: Option<String>,
    /// The pull request, if one was opened.
    pub pr_url: Option<String>,
    /// The run's report.
    pub report: Option<String>,
    /// A one-line result or error.
    pub detail: String,
    /// Model spend, USD.
    pub spend_usd: f64,
    /// How long the attempt ran, ms.
    pub duration_ms: i64,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease is renewed; `cancel` says whether `/agent stop` asked the job to stop.
    Held {
        /// Stop requested.
        cancel: bool,
    },
    /// The lease is no longer ours (it expired and someone else claimed the job, or the job
    /// was finished): stop working on it.
    Lost,
}

/// Which jobs a claim may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Any runnable job.
    Any,
    /// Only jobs without a lane (control commands such as `/agent stop`), so a worker kept
    /// for them answers a stop while every other worker is busy with a run.
    Unlaned,
}

/// Jobs counted by state, for `/metrics`.
pub type StateCounts = Vec<(JobState, u64)>;

/// The durable queue. Both implementations pass the same test suite.
#[async_trait]
pub trait Store: Send + Sync {
    /// Store a verified delivery and its job in one transaction (see the module rules).
    async fn enqueue(&self, delivery: NewDelivery) -> Result<Enqueued>;
    /// Claim the oldest runnable job for `owner` for `lease`: a queued job whose lane has no
    /// running job, or a running job whose lease expired; `which` narrows the choice.
    async fn claim(&self, owner: &str, lease: Duration, which: Claim) -> Result<Option<Job>>;
    /// Renew the lease of `job` held by `owner`.
    async fn heartbeat(&self, job: &str, owner: &str, lease: Duration) -> Result<Heartbeat>;
    /// Record the run a job started, so a later attempt can find it. False if the lease is
    /// not `owner`'s.
    async fn set_run(&self, job: &str, owner: &str, run_id: &str) -> Result<bool>;
    /// Finish a job. False (and nothing written) if the lease is not `owner`'s.
    async fn finish(&self, job: &str, owner: &str, finish: &Finish) -> Result<bool>;
    /// Give a job back to the queue (graceful shutdown). False if the lease is not `owner`'s.
    async fn release(&self, job: &str, owner: &str) -> Result<bool>;
    /// `/agent stop`: cancel the queued jobs of `lane` and ask its running job to stop.
    /// Returns how many jobs were affected.
    async fn cancel_lane(&self, lane: &str, except_job: &str) -> Result<u64>;
    /// One job.
    async fn job(&self, id: &str) -> Result<Option<Job>>;
    /// The most recent jobs, newest first.
    async fn recent(&self, limit: u32) -> Result<Vec<Job>>;
    /// Jobs counted by state.
    async fn counts(&self) -> Result<StateCounts>;
    /// Whether deliveries can be stored now (for `/healthz`): the database answers, and
    /// SQLite's delivery writer is running.
    async fn health(&self) -> Result<()>;
    /// Deliveries stored (by delivery id: copies of one delivery count once).
    async fn delivery_count(&self) -> Result<u64>;
}

/// Open the store a URL names: `sqlite://PATH` (or a bare path) or `postgres://…`.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok(Arc::new(PostgresStore::connect(url).await?));
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    if path.is_empty() || url.contains("://") && !url.starts_with("sqlite:") {
        return Err(Error::UnsupportedUrl(url.to_string()));
    }
    Ok(Arc::new(
        SqliteStore::open(std::path::Path::new(path)).await?,
    ))
}

/// A URL fit for logs: the password replaced.
pub fn display_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A new job id: a ULID that increases within this process even inside one millisecond, so
/// jobs created in the same millisecond are claimed in the order they arrived (claims order
/// by `created_at`, then id; a plain ULID is random within its millisecond).
fn new_id() -> String {
    static IDS: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());
    let mut ids = IDS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match ids.generate() {
        Ok(id) => id.to_string(),
        // 2^80 ids in one millisecond: cannot happen; a plain one is still a valid id.
        Err(_) => ulid::Ulid::generate().to_string(),
    }
}

/// The mark opening a compressed payload: a JSON body never starts with a NUL byte, so
/// payloads stored raw (before compression, or by an older version) read back as they are.
const PACKED: &[u8] = b"\0lz4";

/// Largest payload a packed one may unpack to: more than any body the receiver accepts
/// (25 MB), so a corrupt length cannot make a read allocate gigabytes.
const MAX_UNPACKED: usize = 32 * 1024 * 1024;

/// A payload as stored: LZ4-compressed behind [`PACKED`]. Webhook JSON shrinks 3–4×, and the
/// bytes a delivery writes (WAL, then the table, each with its fsync) are what bounds how many
/// a second the store acknowledges.
pub(crate) fn pack_payload(raw: &[u8]) -> Vec<u8> {
    // One allocation: the mark, the length (as `decompress_size_prepended` reads it), then the
    // block compressed in place.
    let Ok(len) = u32::try_from(raw.len()) else {
        return raw.to_vec();
    };
    let head = PACKED.len() + 4;
    let mut out = vec![0; head + lz4_flex::block::get_maximum_output_size(raw.len())];
    out[..PACKED.len()].copy_from_slice(PACKED);
    out[PACKED.len()..head].copy_from_slice(&len.to_le_bytes());
    match lz4_flex::block::compress_into(raw, &mut out[head..]) {
        Ok(n) => out.truncate(head + n),
        // Cannot happen (the buffer has the maximum size); the simple way is still right.
        Err(_) => {
            out.truncate(head - 4);
            out.extend_from_slice(&lz4_flex::compress_prepend_size(raw));
        }
    }
    out
}

/// The payload [`pack_payload`] stored (or a raw one as it is).
pub(crate) fn unpack_payload(job: &str, stored: Vec<u8>) -> Result<Vec<u8>> {
    let Some(packed) = stored.strip_prefix(PACKED) else {
        return Ok(stored);
    };
    let corrupt = |message: String| Error::CorruptPayload {
        job: job.to_string(),
        message,
        source: None,
    };
    let size = packed
        .first_chunk::<4>()
        .map(|b| u32::from_le_bytes(*b) as usize)
        .ok_or_else(|| corrupt("no length".into()))?;
    if size > MAX_UNPACKED {
        return Err(corrupt(format!("claims {size} bytes")));
    }
    lz4_flex::decompress_size_prepended(packed).map_err(|e| Error::CorruptPayload {
        job: job.to_string(),
        message: "it does not decompress".into(),
        source: Some(e),
    })
}

fn state_of(job: &str, s: &str) -> Result<JobState> {
    JobState::parse(s).ok_or_else(|| Error::UnknownState {
        job: job.to_string(),
        state: s.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_url_hides_the_password() {
        assert_eq!(
            display_url("postgres://agent:s3cret@db:5432/jobs"),
            "postgres://agent:***@db:5432/jobs"
        );
        assert_eq!(display_url("sqlite:///var/x.db"), "sqlite:///var/x.db");
    }

    #[test]
    fn payloads_round_trip_packed_and_raw_ones_read_as_they_are() {
        let body = br#"{"action":"labeled","issue":{"url":"https://api.github.com/repos/o/r/issues/1","comments_url":"https://api.github.com/repos/o/r/issues/1/comments"}}"#;
        let packed = pack_payload(body);
        assert!(packed.starts_with(PACKED));
        assert_eq!(unpack_payload("j", packed).unwrap(), body);
        assert_eq!(unpack_payload("j", body.to_vec()).unwrap(), body);
        assert_eq!(unpack_payload("j", Vec::new()).unwrap(), b"");
        // A corrupt length or body is an error, not a huge allocation or a panic.
        let mut huge = PACKED.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            unpack_payload("j", huge),
            Err(Error::CorruptPayload { .. })
        ));
        let mut cut = pack_payload(body);
        cut.truncate(cut.len() - 5);
        assert!(unpack_payload("j", cut).is_err());
        assert!(unpack_payload("j", PACKED.to_vec()).is_err());
    }

    /// Guards FIFO claims: ids made in one millisecond still sort in the order they were made.
    #[test]
    fn job_ids_increase_within_a_millisecond() {
        let ids: Vec<String> = (0..2000).map(|_| new_id()).collect();
        for pair in ids.windows(2) {
            assert!(pair[0] < pair[1], "{} then {}", pair[0], pair[1]);
        }
        assert!(ids.iter().all(|i| i.len() == 26));
    }

    #[test]
    fn states_round_trip() {
        for s in JobState::ALL {
            assert_eq!(JobState::parse(s.as_str()), Some(s));
        }
        assert_eq!(JobState::parse("nope"), None);
    }
}
