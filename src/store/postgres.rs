//! The shared store: Postgres, for several `serve` processes on one queue.
//!
//! Claims pick their row with `FOR UPDATE SKIP LOCKED`, so concurrent claimers never wait on
//! or take the same job; the unique index on running lanes turns a race between two claimers
//! of one lane into a unique violation for the loser, which claims nothing this round.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row as _;
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};

use super::sqlite::{counts_of, job_cols, job_of};
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
        let schema = |source| Error::Schema {
            url: shown.clone(),
            source,
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

#[async_trait]
impl Store for PostgresStore {
    async fn enqueue(&self, d: NewDelivery) -> Result<Enqueued> {
        let now = now_ms();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(Error::db("begin a delivery"))?;
        // The upsert returns the row it wrote: the fresh id only when it is new. On a copy it
        // holds the job's row lock to the commit, so the requeue below is not raced by
        // another copy of the same delivery.
        let fresh = new_id();
        let row = sqlx::query(
            "INSERT INTO jobs (id, delivery_id, event, payload, repo, lane, trigger_desc,
                 state, created_at, updated_at, deliveries, last_delivery_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'queued', $8, $8, 1, $8)
             ON CONFLICT (delivery_id) DO UPDATE SET deliveries = jobs.deliveries + 1,
                 last_delivery_at = EXCLUDED.last_delivery_at
             RETURNING id, state",
        )
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
        let job_id: String = row.try_get("id").map_err(Error::db("read a job"))?;
        let out = if job_id == fresh {
            Enqueued::New { job_id }
        } else {
            let state: String = row.try_get("state").map_err(Error::db("read a job"))?;
            let state = state_of(&job_id, &state)?;
            if state == JobState::Failed {
                sqlx::query(
                    "UPDATE jobs SET state = 'queued', cancel_requested = 0,
                         lease_owner = NULL, lease_until = NULL, updated_at = $1
                     WHERE id = $2",
                )
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
        let row = sqlx::query(concat!(
            "UPDATE jobs SET state = 'running', lease_owner = $1, lease_until = $2,
                 attempts = attempts + 1, updated_at = $3
             WHERE id = (
                 SELECT j.id FROM jobs j
                 WHERE ($4 = 0 OR j.lane IS NULL)
                   AND ((j.state = 'queued' AND (j.lane IS NULL OR NOT EXISTS (
                         SELECT 1 FROM jobs r WHERE r.lane = j.lane AND r.state = 'running')))
                    OR (j.state = 'running' AND j.lease_until < $3))
                 ORDER BY j.created_at, j.id
                 LIMIT 1
                 FOR UPDATE SKIP LOCKED)
             RETURNING ",
            job_cols!()
        ))
        .bind(owner)
        .bind(now.saturating_add(ms(lease)))
        .bind(now)
        .bind(i64::from(which == Claim::Unlaned))
        .fetch_optional(&self.pool)
        .await;
        match row {
            Ok(Some(row)) => Ok(Some(job_of!(&row))),
            Ok(None) => Ok(None),
            // Another process claimed a job of the same lane at the same moment.
            Err(e) if is_unique_violation(&e) => Ok(None),
            Err(e) => Err(Error::db("claim a job")(e)),
        }
    }

    async fn heartbeat(&self, job: &str, owner: &str, lease: Duration) -> Result<Heartbeat> {
        let now = now_ms();
        let row = sqlx::query(
            "UPDATE jobs SET lease_until = $1, updated_at = $2
             WHERE id = $3 AND lease_owner = $4 AND state = 'running'
             RETURNING cancel_requested",
        )
        .bind(now.saturating_add(ms(lease)))
        .bind(now)
        .bind(job)
        .bind(owner)
        .fetch_optional(&self.pool)
        .await
        .map_err(Error::db(format!("renew the lease of job {job}")))?;
        Ok(match row {
            Some(row) => Heartbeat::Held {
                cancel: row.try_get::<i64, _>(0).map_err(Error::db("read a job"))? != 0,
            },
            None => Heartbeat::Lost,
        })
    }

    async fn set_run(&self, job: &str, owner: &str, run_id: &str) -> Result<bool> {
        let r = sqlx::query(
            "UPDATE jobs SET run_id = $1, updated_at = $2
             WHERE id = $3 AND lease_owner = $4 AND state = 'running'",
        )
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
        let r = sqlx::query(
            "UPDATE jobs SET state = $1, run_id = COALESCE($2, run_id), run_state = $3,
                 pr_url = $4, report = $5, detail = $6, spend_usd = $7, duration_ms = $8,
                 lease_owner = NULL, lease_until = NULL, updated_at = $9
             WHERE id = $10 AND lease_owner = $11 AND state = 'running'",
        )
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
        let r = sqlx::query(
            "UPDATE jobs SET state = 'queued', lease_owner = NULL, lease_until = NULL,
                 attempts = GREATEST(attempts - 1, 0), updated_at = $1
             WHERE id = $2 AND lease_owner = $3 AND state = 'running'",
        )
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
        let queued = sqlx::query(
            "UPDATE jobs SET state = 'cancelled', detail = 'stopped before it started',
                 updated_at = $1
             WHERE lane = $2 AND state = 'queued' AND id <> $3",
        )
        .bind(now)
        .bind(lane)
        .bind(except_job)
        .execute(&mut *tx)
        .await
        .map_err(Error::db(format!("cancel the queued jobs of {lane}")))?;
        let running = sqlx::query(
            "UPDATE jobs SET cancel_requested = 1, updated_at = $1
             WHERE lane = $2 AND state = 'running' AND id <> $3",
        )
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
        let row = sqlx::query(concat!("SELECT ", job_cols!(), " FROM jobs WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .map_err(Error::db(format!("read job {id}")))?;
        Ok(match row {
            Some(row) => Some(job_of!(&row)),
            None => None,
        })
    }

    async fn recent(&self, limit: u32) -> Result<Vec<Job>> {
        let rows: Vec<PgRow> = sqlx::query(concat!(
            "SELECT ",
            job_cols!(),
            " FROM jobs ORDER BY created_at DESC, id DESC LIMIT $1"
        ))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(Error::db("list recent jobs"))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.push(job_of!(row));
        }
        Ok(out)
    }

    async fn counts(&self) -> Result<StateCounts> {
        let rows = sqlx::query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
            .fetch_all(&self.pool)
            .await
            .map_err(Error::db("count jobs"))?;
        counts_of(&rows)
    }

    async fn health(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(Error::db("reach the database"))?;
        Ok(())
    }

    async fn delivery_count(&self) -> Result<u64> {
        let row = sqlx::query("SELECT COUNT(*) FROM jobs")
            .fetch_one(&self.pool)
            .await
            .map_err(Error::db("count deliveries"))?;
        let n: i64 = row.try_get(0).map_err(Error::db("count deliveries"))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
