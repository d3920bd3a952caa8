//! The shared store: Postgres, for several `serve` processes on one queue.
//!
//! Claims pick their row with `FOR UPDATE SKIP LOCKED`, so concurrent claimers never wait on
//! or take the same job; the unique index on running lanes turns a race between two claimers
//! of one lane into a unique violation for the loser, which claims nothing this round.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row as _;
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};

use super::rows::{self, Columns, claim_sql, count_of, counts_of, job_of};
use super::{
    Claim, Enqueued, Error, Finish, Heartbeat, Job, JobState, NewDelivery, Result, StateCounts,
    Store, display_url, ms, new_id, now_ms, pack_payload, state_of,
};

/// Serializes schema creation between processes starting at once.
const SCHEMA_LOCK: i64 = 0x6769_7461_6765_6e74; // "gitagent"

/// The same queue as SQLite's (see `sqlite::JOBS_TABLE`): one row a delivery id.
const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS jobs (
        id TEXT PRIMARY KEY,
        delivery_id TEXT NOT NULL UNIQUE,
        event TEXT NOT NULL,
        payload BYTEA NOT NULL,
        repo TEXT,
        lane TEXT,
        trigger_desc TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts BIGINT NOT NULL DEFAULT 0,
        run_id TEXT,
        run_state TEXT,
        pr_url TEXT,
        report TEXT,
        detail TEXT,
        spend_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
        cancel_requested BIGINT NOT NULL DEFAULT 0,
        lease_owner TEXT,
        lease_until BIGINT,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        duration_ms BIGINT,
        deliveries BIGINT NOT NULL DEFAULT 1,
        last_delivery_at BIGINT NOT NULL
    )",
    // A database made before deliveries were merged into jobs: the counts move over from the
    // `deliveries` table, which goes (with the reference to it) once they have. Only then is
    // `jobs` altered: `ALTER TABLE` locks it against every other process's claims, even when
    // the column is there already.
    "DO $$ BEGIN
        IF to_regclass('deliveries') IS NOT NULL THEN
            ALTER TABLE jobs ADD COLUMN IF NOT EXISTS deliveries BIGINT NOT NULL DEFAULT 1;
            ALTER TABLE jobs ADD COLUMN IF NOT EXISTS last_delivery_at BIGINT NOT NULL DEFAULT 0;
            UPDATE jobs SET deliveries = d.times, last_delivery_at = d.last_at
                FROM deliveries d WHERE d.delivery_id = jobs.delivery_id;
            UPDATE jobs SET last_delivery_at = created_at WHERE last_delivery_at = 0;
            DROP TABLE deliveries CASCADE;
        END IF;
    END $$",
    "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, created_at, id)",
    "CREATE UNIQUE INDEX IF NOT EXISTS jobs_one_running_per_lane ON jobs(lane)
        WHERE state = 'running' AND lane IS NOT NULL",
];

/// The Postgres store.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Connect to `url` and create the schema if it is missing.
    pub async fn connect(url: &str) -> Result<Self> {
        let shown = display_url(url);
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect(url)
            .await
            .map_err(Error::db(format!("connect to {shown}")))?;
        let schema = |source: sqlx::Error| Error::Schema {
            url: shown.clone(),
            source: source.into(),
        };
        let mut tx = pool.begin().await.map_err(schema)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(SCHEMA_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(schema)?;
        for stmt in SCHEMA {
            sqlx::query(*stmt).execute(&mut *tx).await.map_err(schema)?;
        }
        tx.commit().await.map_err(schema)?;
        Ok(PostgresStore { pool })
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().as_deref() == Some("23505"))
}

/// Claims skip the rows other claimers hold locked.
const CLAIM: &str = claim_sql!("FOR UPDATE SKIP LOCKED");

/// A new delivery and its job, or a copy counted on its job (see the module rules). One
/// upsert: it returns the row it wrote, the fresh id only when it is new, and on a copy it
/// holds the job's row lock to the commit, so a requeue is not raced by another copy of the
/// same delivery.
const ENQUEUE: &str = "INSERT INTO jobs (id, delivery_id, event, payload, repo, lane,
        trigger_desc, state, created_at, updated_at, deliveries, last_delivery_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, 'queued', $8, $8, 1, $8)
    ON CONFLICT (delivery_id) DO UPDATE SET deliveries = jobs.deliveries + 1,
        last_delivery_at = EXCLUDED.last_delivery_at
    RETURNING id, state";

impl Columns for PgRow {
    fn text(&self, col: &str) -> Result<String> {
        self.try_get(col).map_err(rows::unreadable(col))
    }
    fn text_or_null(&self, col: &str) -> Result<Option<String>> {
        self.try_get(col).map_err(rows::unreadable(col))
    }
    fn int(&self, col: &str) -> Result<i64> {
        self.try_get(col).map_err(rows::unreadable(col))
    }
    fn int_or_null(&self, col: &str) -> Result<Option<i64>> {
        self.try_get(col).map_err(rows::unreadable(col))
    }
    fn real(&self, col: &str) -> Result<f64> {
        self.try_get(col).map_err(rows::unreadable(col))
    }
    fn bytes(&self, col: &str) -> Result<Vec<u8>> {
        self.try_get(col).map_err(rows::unreadable(col))
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn enqueue(&self, d: NewDelivery) -> Result<Enqueued> {
        let now = now_ms();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(Error::db("begin a delivery"))?;
        let fresh = new_id();
        let row = sqlx::query(ENQUEUE)
            .bind(&fresh)
            .bind(&d.delivery_id)
            .bind(&d.event)
            .bind(pack_payload(&d.payload))
            .bind(&d.repo)
            .bind(&d.lane)
            .bind(&d.trigger)
            .bind(now)
            .fetch_one(&mut *tx)
            .await
            .map_err(Error::db(format!("queue delivery {}", d.delivery_id)))?;
        let job_id = row.text("id")?;
        let out = if job_id == fresh {
            Enqueued::New { job_id }
        } else {
            let state = state_of(&job_id, &row.text("state")?)?;
            if state == JobState::Failed {
                sqlx::query(rows::REQUEUE)
                    .bind(now)
                    .bind(&job_id)
                    .execute(&mut *tx)
                    .await
                    .map_err(Error::db(format!("requeue job {job_id}")))?;
                Enqueued::Requeued { job_id }
            } else {
                Enqueued::Duplicate { job_id, state }
            }
        };
        tx.commit()
            .await
            .map_err(Error::db(format!("commit delivery {}", d.delivery_id)))?;
        Ok(out)
    }

    async fn claim(&self, owner: &str, lease: Duration, which: Claim) -> Result<Option<Job>> {
        let now = now_ms();
        let row = sqlx::query(CLAIM)
            .bind(owner)
            .bind(now.saturating_add(ms(lease)))
            .bind(now)
            .bind(i64::from(which == Claim::Unlaned))
            .fetch_optional(&self.pool)
            .await;
        match row {
            Ok(Some(row)) => Ok(Some(job_of(&row)?)),
            Ok(None) => Ok(None),
            // Another process claimed a job of the same lane at the same moment.
            Err(e) if is_unique_violation(&e) => Ok(None),
            Err(e) => Err(Error::db("claim a job")(e)),
        }
    }

    async fn heartbeat(&self, job: &str, owner: &str, lease: Duration) -> Result<Heartbeat> {
        let now = now_ms();
        let row = sqlx::query(rows::HEARTBEAT)
            .bind(now.saturating_add(ms(lease)))
            .bind(now)
            .bind(job)
            .bind(owner)
            .fetch_optional(&self.pool)
            .await
            .map_err(Error::db(format!("renew the lease of job {job}")))?;
        Ok(match row {
            Some(row) => Heartbeat::Held {
                cancel: row.int("cancel_requested")? != 0,
            },
            None => Heartbeat::Lost,
        })
    }

    async fn set_run(&self, job: &str, owner: &str, run_id: &str) -> Result<bool> {
        let r = sqlx::query(rows::SET_RUN)
            .bind(run_id)
            .bind(now_ms())
            .bind(job)
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(Error::db(format!("record the run of job {job}")))?;
        Ok(r.rows_affected() == 1)
    }

    async fn finish(&self, job: &str, owner: &str, f: &Finish) -> Result<bool> {
        let r = sqlx::query(rows::FINISH)
            .bind(f.state.as_str())
            .bind(&f.run_id)
            .bind(&f.run_state)
            .bind(&f.pr_url)
            .bind(&f.report)
            .bind(&f.detail)
            .bind(f.spend_usd)
            .bind(f.duration_ms)
            .bind(now_ms())
            .bind(job)
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(Error::db(format!("finish job {job}")))?;
        Ok(r.rows_affected() == 1)
    }

    async fn release(&self, job: &str, owner: &str) -> Result<bool> {
        let r = sqlx::query(rows::RELEASE)
            .bind(now_ms())
            .bind(job)
            .bind(owner)
            .execute(&self.pool)
            .await
            .map_err(Error::db(format!("release job {job}")))?;
        Ok(r.rows_affected() == 1)
    }

    async fn cancel_lane(&self, lane: &str, except_job: &str) -> Result<u64> {
        let now = now_ms();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(Error::db("begin a cancel"))?;
        let queued = sqlx::query(rows::CANCEL_QUEUED)
            .bind(now)
            .bind(lane)
            .bind(except_job)
            .execute(&mut *tx)
            .await
            .map_err(Error::db(format!("cancel the queued jobs of {lane}")))?;
        let running = sqlx::query(rows::CANCEL_RUNNING)
            .bind(now)
            .bind(lane)
            .bind(except_job)
            .execute(&mut *tx)
            .await
            .map_err(Error::db(format!("stop the running job of {lane}")))?;
        tx.commit().await.map_err(Error::db("commit a cancel"))?;
        Ok(queued.rows_affected() + running.rows_affected())
    }

    async fn job(&self, id: &str) -> Result<Option<Job>> {
        let row = sqlx::query(rows::JOB)
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(Error::db(format!("read job {id}")))?;
        row.as_ref().map(job_of).transpose()
    }

    async fn recent(&self, limit: u32) -> Result<Vec<Job>> {
        let found: Vec<PgRow> = sqlx::query(rows::RECENT)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(Error::db("list recent jobs"))?;
        found.iter().map(job_of).collect()
    }

    async fn counts(&self) -> Result<StateCounts> {
        let found = sqlx::query(rows::COUNTS)
            .fetch_all(&self.pool)
            .await
            .map_err(Error::db("count jobs"))?;
        Ok(counts_of(
            found.iter().map(count_of).collect::<Result<Vec<_>>>()?,
        ))
    }

    async fn health(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(Error::db("reach the database"))?;
        Ok(())
    }

    async fn delivery_count(&self) -> Result<u64> {
        let row = sqlx::query(rows::DELIVERY_COUNT)
            .fetch_one(&self.pool)
            .await
            .map_err(Error::db("count deliveries"))?;
        Ok(u64::try_from(row.int("n")?).unwrap_or(0))
    }
}
