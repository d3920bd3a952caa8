//! The queue's rows as both databases hold them: the columns of a job, the statements both
//! dialects run as written, and the mapping from a row to a [`Job`] or a count.
//!
//! Each database's schema (its column types, its migrations) and the statements only one
//! dialect can say (SQLite's enqueue, Postgres's `FOR UPDATE SKIP LOCKED`) stay with its
//! store.
//!
//! Parameters are written `$1`, `$2`…: Postgres numbers them so, and SQLite reads each as a
//! named parameter numbered by its first appearance. So every statement here names its
//! parameters in order of first appearance (a test checks each one against SQLite), and both
//! stores bind them by position.

use super::{Driver, Error, Job, JobState, Result, StateCounts, state_of, unpack_payload};

/// The columns of a [`Job`], as [`job_of`] reads them by name.
macro_rules! job_cols {
    () => {
        "id, delivery_id, event, payload, repo, lane, trigger_desc, state, attempts, run_id, \
         run_state, pr_url, report, detail, spend_usd, cancel_requested, lease_owner, \
         lease_until, created_at, updated_at, duration_ms"
    };
}
pub(super) use job_cols;

/// The claim of [`Store::claim`](super::Store::claim): the oldest queued job whose lane has
/// no running job, or a running job whose lease ran out; `$lock` ends the choosing `SELECT`
/// (Postgres: `FOR UPDATE SKIP LOCKED`, so concurrent claimers pass each other's rows by;
/// SQLite: nothing, its claims run one at a time in `BEGIN IMMEDIATE`).
///
/// `$1` owner, `$2` lease end, `$3` now, `$4` 1 for [`Claim::Unlaned`](super::Claim::Unlaned).
macro_rules! claim_sql {
    ($lock:literal) => {
        concat!(
            "UPDATE jobs SET state = 'running', lease_owner = $1, lease_until = $2,
                 attempts = attempts + 1, updated_at = $3
             WHERE id = (
                 SELECT j.id FROM jobs j
                 WHERE ($4 = 0 OR j.lane IS NULL)
                   AND ((j.state = 'queued' AND (j.lane IS NULL OR NOT EXISTS (
                         SELECT 1 FROM jobs r WHERE r.lane = j.lane AND r.state = 'running')))
                    OR (j.state = 'running' AND j.lease_until < $3))
                 ORDER BY j.created_at, j.id
                 LIMIT 1 ",
            $lock,
            ")
             RETURNING ",
            $crate::store::rows::job_cols!()
        )
    };
}
pub(super) use claim_sql;

/// A copy of a delivery whose job failed queues the job again: `$1` now, `$2` the job.
pub(super) const REQUEUE: &str = "UPDATE jobs SET state = 'queued', cancel_requested = 0,
        lease_owner = NULL, lease_until = NULL, updated_at = $1
    WHERE id = $2";

/// Renew a lease: `$1` lease end, `$2` now, `$3` job, `$4` owner. Returns `cancel_requested`
/// (no row: the lease is not the owner's).
pub(super) const HEARTBEAT: &str = "UPDATE jobs SET lease_until = $1, updated_at = $2
    WHERE id = $3 AND lease_owner = $4 AND state = 'running'
    RETURNING cancel_requested";

/// Record a job's run: `$1` run, `$2` now, `$3` job, `$4` owner.
pub(super) const SET_RUN: &str = "UPDATE jobs SET run_id = $1, updated_at = $2
    WHERE id = $3 AND lease_owner = $4 AND state = 'running'";

/// Finish a job: `$1` state, `$2` run, `$3` run state, `$4` PR, `$5` report, `$6` detail,
/// `$7` spend, `$8` duration, `$9` now, `$10` job, `$11` owner.
pub(super) const FINISH: &str = "UPDATE jobs SET state = $1, run_id = COALESCE($2, run_id),
        run_state = $3, pr_url = $4, report = $5, detail = $6, spend_usd = $7,
        duration_ms = $8, lease_owner = NULL, lease_until = NULL, updated_at = $9
    WHERE id = $10 AND lease_owner = $11 AND state = 'running'";

/// Give a job back (the attempt did not count): `$1` now, `$2` job, `$3` owner.
pub(super) const RELEASE: &str = "UPDATE jobs SET state = 'queued', lease_owner = NULL,
        lease_until = NULL, attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END,
        updated_at = $1
    WHERE id = $2 AND lease_owner = $3 AND state = 'running'";

/// `/agent stop`, first half: `$1` now, `$2` lane, `$3` the job asking.
pub(super) const CANCEL_QUEUED: &str = "UPDATE jobs SET state = 'cancelled',
        detail = 'stopped before it started', updated_at = $1
    WHERE lane = $2 AND state = 'queued' AND id <> $3";

/// `/agent stop`, second half: `$1` now, `$2` lane, `$3` the job asking.
pub(super) const CANCEL_RUNNING: &str = "UPDATE jobs SET cancel_requested = 1, updated_at = $1
    WHERE lane = $2 AND state = 'running' AND id <> $3";

/// One job: `$1` its id.
pub(super) const JOB: &str = concat!("SELECT ", job_cols!(), " FROM jobs WHERE id = $1");

/// The newest jobs: `$1` how many.
pub(super) const RECENT: &str = concat!(
    "SELECT ",
    job_cols!(),
    " FROM jobs ORDER BY created_at DESC, id DESC LIMIT $1"
);

/// Jobs by state, read by [`count_of`].
pub(super) const COUNTS: &str = "SELECT state, COUNT(*) AS n FROM jobs GROUP BY state";

/// Deliveries stored: one row a delivery id.
pub(super) const DELIVERY_COUNT: &str = "SELECT COUNT(*) AS n FROM jobs";

/// A row of either driver, read by column name. Each store implements it for its driver's row
/// type, mapping the driver's error into [`Error::Database`].
pub(super) trait Columns {
    /// A `TEXT NOT NULL` column.
    fn text(&self, col: &str) -> Result<String>;
    /// A nullable `TEXT` column.
    fn text_or_null(&self, col: &str) -> Result<Option<String>>;
    /// An integer column.
    fn int(&self, col: &str) -> Result<i64>;
    /// A nullable integer column.
    fn int_or_null(&self, col: &str) -> Result<Option<i64>>;
    /// A floating-point column.
    fn real(&self, col: &str) -> Result<f64>;
    /// A binary column.
    fn bytes(&self, col: &str) -> Result<Vec<u8>>;
}

/// The [`Job`] a row of [`job_cols!`] holds.
pub(super) fn job_of(row: &impl Columns) -> Result<Job> {
    let id = row.text("id")?;
    let state = state_of(&id, &row.text("state")?)?;
    Ok(Job {
        delivery_id: row.text("delivery_id")?,
        event: row.text("event")?,
        payload: unpack_payload(&id, row.bytes("payload")?)?,
        repo: row.text_or_null("repo")?,
        lane: row.text_or_null("lane")?,
        trigger: row.text("trigger_desc")?,
        state,
        attempts: u32::try_from(row.int("attempts")?).unwrap_or(u32::MAX),
        run_id: row.text_or_null("run_id")?,
        run_state: row.text_or_null("run_state")?,
        report: row.text_or_null("report")?,
        pr_url: row.text_or_null("pr_url")?,
        detail: row.text_or_null("detail")?,
        spend_usd: row.real("spend_usd")?,
        cancel_requested: row.int("cancel_requested")? != 0,
        lease_owner: row.text_or_null("lease_owner")?,
        lease_until: row.int_or_null("lease_until")?,
        created_at: row.int("created_at")?,
        updated_at: row.int("updated_at")?,
        duration_ms: row.int_or_null("duration_ms")?,
        id,
    })
}

/// A row of [`COUNTS`]: a state and how many jobs are in it.
pub(super) fn count_of(row: &impl Columns) -> Result<(JobState, u64)> {
    let state = state_of("(count)", &row.text("state")?)?;
    Ok((state, u64::try_from(row.int("n")?).unwrap_or(0)))
}

/// Every state with its count (zero where no row has it).
pub(super) fn counts_of(found: impl IntoIterator<Item = (JobState, u64)>) -> StateCounts {
    let mut out: StateCounts = JobState::ALL.iter().map(|s| (*s, 0)).collect();
    for (state, n) in found {
        if let Some(slot) = out.iter_mut().find(|(s, _)| *s == state) {
            slot.1 = n;
        }
    }
    out
}

/// The error of a column that could not be read.
pub(super) fn unreadable<E: Into<Driver>>(col: &str) -> impl FnOnce(E) -> Error + '_ {
    move |source| Error::Database {
        what: format!("read column {col}"),
        source: source.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shared statement, with how many parameters it takes.
    const SHARED: &[(&str, usize)] = &[
        (claim_sql!(""), 4),
        (REQUEUE, 2),
        (HEARTBEAT, 4),
        (SET_RUN, 4),
        (FINISH, 11),
        (RELEASE, 3),
        (CANCEL_QUEUED, 3),
        (CANCEL_RUNNING, 3),
        (JOB, 1),
        (RECENT, 1),
        (COUNTS, 0),
        (DELIVERY_COUNT, 0),
    ];

    /// Guards positional binding in SQLite: each `$N` of a shared statement is SQLite's
    /// parameter number N (it numbers them by first appearance).
    #[test]
    fn sqlite_numbers_each_shared_parameter_as_postgres_does() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(super::super::sqlite::JOBS_TABLE)
            .unwrap();
        for (sql, params) in SHARED {
            let st = conn.prepare(sql).unwrap();
            assert_eq!(st.parameter_count(), *params, "{sql}");
            for n in 1..=*params {
                assert_eq!(
                    st.parameter_name(n),
                    Some(format!("${n}").as_str()),
                    "{sql}"
                );
            }
        }
    }

    #[test]
    fn counts_name_every_state() {
        let counts = counts_of([(JobState::Running, 2), (JobState::Failed, 5)]);
        assert_eq!(
            counts,
            [
                (JobState::Queued, 0),
                (JobState::Running, 2),
                (JobState::Succeeded, 0),
                (JobState::Failed, 5),
                (JobState::Cancelled, 0),
            ]
        );
    }
}
