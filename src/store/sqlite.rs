//! The embedded store: one SQLite file in WAL mode, through one driver (rusqlite).
//!
//! Every write runs in a `BEGIN IMMEDIATE` transaction (or is one statement, which takes the
//! write lock when it starts), so writers queue on SQLite's write lock (with a busy timeout)
//! instead of failing when a deferred transaction tries to upgrade. `synchronous=FULL`: what
//! a commit wrote is on disk, not only in the WAL's page cache, when the commit returns.
//!
//! Every statement runs synchronously on a thread the store controls: deliveries on the
//! writer's, checkpoints on the checkpointer's, claims and reads on blocking tasks
//! ([`Connections`]), each holding one connection for its whole transaction. (Through sqlx's
//! SQLite driver every statement was a hand-off to that connection's own thread and back.)
//!
//! Deliveries are group-committed: one writer (a thread of its own, with a connection of its
//! own, running prepared statements synchronously) takes every delivery waiting when it is
//! free and stores them in one transaction (a group where one delivery fails is stored again
//! one by one, each in a savepoint, so one bad delivery is refused alone). Concurrent
//! deliveries queue in a channel instead of sleeping in SQLite's busy handler.
//!
//! Durable before the 2xx: the writer's connection commits at `synchronous=FULL` like every
//! other (the commit returns once the WAL is fsynced), and a delivery is answered only after
//! its group's commit. One fsync covers the whole group, and while it runs the next group
//! gathers in the channel, so the group size follows the load. (A separate syncer thread
//! that fsynced the WAL while the writer committed the next group was measured too: the
//! writer then took groups of ~5 instead of ~25 and each group's fixed cost made the
//! receiver slower on a CPU-bound machine, 8k/s against 9.5–12k/s at 64 connections.)

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{OptionalExtension as _, TransactionBehavior, params};
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::rows::{self, Columns, claim_sql, count_of, counts_of, job_cols, job_of};
use super::{
    Claim, Driver, Enqueued, Error, Finish, Heartbeat, Job, JobState, NewDelivery, Result,
    StateCounts, Store, ms, new_id, now_ms, pack_payload, state_of,
};

/// The queue: one row a delivery id, its job. A job's `deliveries` counts the copies of its
/// delivery received and `last_delivery_at` says when the last came.
///
/// (Deliveries had a table of their own, which every job referenced: a second row, a second
/// index on the delivery id and more statements for each delivery. One table holds the same
/// facts and a new delivery is one insert; [`merge_deliveries_into_jobs`] moves older files
/// over.)
pub(super) const JOBS_TABLE: &str = "CREATE TABLE IF NOT EXISTS jobs (
        id TEXT PRIMARY KEY,
        delivery_id TEXT NOT NULL UNIQUE,
        event TEXT NOT NULL,
        payload BLOB NOT NULL,
        repo TEXT,
        lane TEXT,
        trigger_desc TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        run_id TEXT,
        run_state TEXT,
        pr_url TEXT,
        report TEXT,
        detail TEXT,
        spend_usd REAL NOT NULL DEFAULT 0,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        lease_owner TEXT,
        lease_until INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        duration_ms INTEGER,
        deliveries INTEGER NOT NULL DEFAULT 1,
        last_delivery_at INTEGER NOT NULL
    )";

const INDEXES: &str = "
    CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, created_at, id);
    -- One running job per lane, whoever claims it: the per-PR limit holds across processes.
    CREATE UNIQUE INDEX IF NOT EXISTS jobs_one_running_per_lane ON jobs(lane)
        WHERE state = 'running' AND lane IS NOT NULL;";

/// Make the schema at `conn`'s file (or bring an older one up to date), in one transaction.
fn make_schema(conn: &mut rusqlite::Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute_batch(JOBS_TABLE)?;
    merge_deliveries_into_jobs(&tx)?;
    tx.execute_batch(INDEXES)?;
    tx.commit()
}

/// A file made before deliveries were merged into jobs has a `deliveries` table, which `jobs`
/// references: SQLite cannot drop that reference in place, so `jobs` is built again with the
/// counts of its deliveries, inside the caller's transaction (all of it or none of it).
fn merge_deliveries_into_jobs(conn: &rusqlite::Connection) -> rusqlite::Result<()> {
    let old = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'deliveries'",
            [],
            |_| Ok(()),
        )
        .optional()?;
    if old.is_none() {
        return Ok(());
    }
    let merged = JOBS_TABLE.replacen("jobs (", "jobs_merged (", 1);
    let copy = concat!(
        "INSERT INTO jobs_merged (",
        job_cols!(),
        ", deliveries, last_delivery_at) SELECT ",
        job_cols!(),
        ", COALESCE((SELECT d.times FROM deliveries d WHERE d.delivery_id = jobs.delivery_id), 1),
           COALESCE((SELECT d.last_at FROM deliveries d WHERE d.delivery_id = jobs.delivery_id),
                    created_at)
         FROM jobs"
    );
    for stmt in [
        merged.as_str(),
        copy,
        // `jobs` goes first: it references `deliveries`. Its indexes go with it and are made
        // again on the new table by the caller.
        "DROP TABLE jobs",
        "DROP TABLE deliveries",
        "ALTER TABLE jobs_merged RENAME TO jobs",
    ] {
        conn.execute_batch(stmt)?;
    }
    tracing::info!("merged the deliveries table into jobs");
    Ok(())
}

/// Most deliveries committed in one transaction.
const MAX_GROUP: usize = 256;

/// Most connections claims and reads hold at once (deliveries have the writer's own).
const MAX_CONNECTIONS: usize = 8;

/// A delivery waiting for the group committer, and where its outcome goes.
type Pending = (NewDelivery, oneshot::Sender<Result<Enqueued>>);

/// The SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    conns: Arc<Connections>,
    /// Deliveries for the group committer ([`commit_groups`]); it stops when every clone of
    /// the store is dropped.
    deliveries: mpsc::Sender<Pending>,
}

/// The connections claims and reads run on: at most [`MAX_CONNECTIONS`], opened when first
/// needed, each used by one blocking task at a time for its whole transaction, and kept for
/// the next.
#[derive(Debug)]
struct Connections {
    path: PathBuf,
    wal_limit: i64,
    idle: Mutex<Vec<rusqlite::Connection>>,
    slots: Arc<Semaphore>,
}

impl Connections {
    /// Run `work` on a connection, on a blocking thread (a statement may wait for the write
    /// lock, up to the busy timeout, and the runtime's threads must not).
    async fn run<T, F>(self: &Arc<Self>, work: F) -> Result<T>
    where
        F: FnOnce(&mut rusqlite::Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        // The semaphore is never closed; an error would mean it was.
        let slot = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|_| Error::ShuttingDown)?;
        let conns = Arc::clone(self);
        let task = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let idle = conns
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let mut conn = match idle {
                Some(conn) => conn,
                None => open_raw(&conns.path, conns.wal_limit)?,
            };
            let out = work(&mut conn);
            // A connection left inside a transaction (cannot happen: every transaction ends
            // or is rolled back when dropped) is closed rather than handed on.
            if conn.is_autocommit() {
                conns
                    .idle
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(conn);
            }
            out
        });
        match task.await {
            Ok(out) => out,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: the runtime is shutting down.
            Err(_) => Err(Error::ShuttingDown),
        }
    }
}

impl SqliteStore {
    /// Open (creating if needed) the database file at `path` and its schema.
    pub async fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, WAL_SIZE_LIMIT).await
    }

    /// [`open`](Self::open), with a restarted WAL cut back to `wal_limit` bytes.
    async fn open_with(path: &Path, wal_limit: i64) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let owned = path.to_path_buf();
        let first = tokio::task::spawn_blocking(move || create(&owned, wal_limit));
        let first = match first.await {
            Ok(conn) => conn?,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => return Err(Error::ShuttingDown),
        };
        let (deliveries, rx) = mpsc::channel(4 * MAX_GROUP);
        // The delivery writer and the checkpointer have connections of their own.
        let writer_conn = open_raw(path, wal_limit)?;
        let checkpointer_conn = open_raw(path, wal_limit)?;
        let io = |what, source| Error::Thread { what, source };
        // The writer and the checkpointer run on threads of their own: as tasks of the
        // server's runtime they waited behind every ready request task.
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || commit_groups(writer_conn, rx))
            .map_err(|e| io("the delivery writer", e))?;
        let alive = deliveries.downgrade();
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || checkpoints(&checkpointer_conn, &alive))
            .map_err(|e| io("the WAL checkpointer", e))?;
        Ok(SqliteStore {
            conns: Arc::new(Connections {
                path: path.to_path_buf(),
                wal_limit,
                idle: Mutex::new(vec![first]),
                slots: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            }),
            deliveries,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.conns.path
    }

    /// The journal mode in force (`wal` once opened).
    pub async fn journal_mode(&self) -> Result<String> {
        self.conns
            .run(|conn| {
                conn.pragma_query_value(None, "journal_mode", |r| r.get(0))
                    .map_err(Error::db("read the journal mode"))
            })
            .await
    }
}

/// How often the background checkpointer copies the WAL into the database file. Each copy ends
/// with an fsync of the database file, which competes with the commits' fsyncs of the WAL, and
/// a page written by many commits (the tail of every index) is copied once a checkpoint: every
/// 50 ms, bench-webhook's p99 at 256 connections was 52–159 ms in four runs, 35–46 ms after.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// The size a WAL file is cut back to when SQLite starts it over. SQLite starts the WAL over
/// when a write begins with every frame already copied into the database; under steady load
/// the writer has always appended more by the time a passive checkpoint ends, so during a
/// burst the WAL grows (bench-webhook: 720 MB in 10 s at 12k deliveries/s) and is reused from
/// the start once the burst is over. Without a limit the file kept its largest size for good.
/// (Forcing a `RESTART` checkpoint during the burst bounds it, but was measured to stall the
/// writer: p99 at 256 connections 80–105 ms instead of 30–45.)
const WAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// The first connection to the database at `path`: creates the file if it is missing, puts it
/// in WAL mode (which the file keeps) and makes its schema.
fn create(path: &Path, wal_limit: i64) -> Result<rusqlite::Connection> {
    let mut conn = connect(path, wal_limit, rusqlite::OpenFlags::SQLITE_OPEN_CREATE)?;
    let schema = |source: rusqlite::Error| Error::Schema {
        url: path.display().to_string(),
        source: source.into(),
    };
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
        .map_err(schema)?;
    make_schema(&mut conn).map_err(schema)?;
    Ok(conn)
}

/// A connection to the database at `path` (its schema made already), set up as every
/// connection of the store: `synchronous=FULL`, foreign keys on, automatic checkpoints off
/// (they run in the background, [`checkpoints`], not in the commit that happens to cross the
/// threshold, which every delivery waiting on it would wait for); a WAL started over is cut
/// back to `wal_limit` bytes.
fn open_raw(path: &Path, wal_limit: i64) -> Result<rusqlite::Connection> {
    connect(path, wal_limit, rusqlite::OpenFlags::empty())
}

fn connect(
    path: &Path,
    wal_limit: i64,
    extra: rusqlite::OpenFlags,
) -> Result<rusqlite::Connection> {
    let fail = Error::db(format!("open sqlite {}", path.display()));
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
            | extra,
    );
    let setup = |conn: &rusqlite::Connection| -> rusqlite::Result<()> {
        conn.busy_timeout(Duration::from_secs(30))?;
        for (name, value) in [
            ("synchronous", "FULL"),
            ("foreign_keys", "ON"),
            ("wal_autocheckpoint", "0"),
        ] {
            conn.pragma_update(None, name, value)?;
        }
        conn.pragma_update(None, "journal_size_limit", wal_limit)
    };
    conn.and_then(|conn| setup(&conn).map(|()| conn))
        .map_err(fail)
}

/// The background checkpointer: a passive checkpoint every [`CHECKPOINT_EVERY`] (it never
/// blocks writers or readers), so the WAL stays small without any commit paying for it.
/// Stops with the store (when the group committer's channel is gone).
fn checkpoints(conn: &rusqlite::Connection, alive: &mpsc::WeakSender<Pending>) {
    loop {
        std::thread::sleep(CHECKPOINT_EVERY);
        if alive.upgrade().is_none() {
            return;
        }
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "WAL checkpoint failed; retrying later");
        }
    }
}

/// The group committer: whatever deliveries are waiting (up to [`MAX_GROUP`]) go into one
/// transaction on the writer's connection; each caller is answered once it is committed.
fn commit_groups(mut conn: rusqlite::Connection, mut rx: mpsc::Receiver<Pending>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while rx.blocking_recv_many(&mut group, MAX_GROUP) > 0 {
        let outcomes = commit_group(&mut conn, &group);
        for ((_, reply), outcome) in group.drain(..).zip(outcomes) {
            // A caller that went away (its request was dropped) needs no answer.
            let _ = reply.send(outcome);
        }
    }
}

/// Store `group` in one transaction; one outcome per delivery, in order.
///
/// Each delivery's statements ([`enqueue_one`]) are prepared once and run on this thread (no
/// hand-off per statement).
/// If one fails (a constraint or trigger refusing it), the transaction is rolled back and the
/// group is stored again with each delivery in a savepoint of its own ([`commit_one_by_one`]),
/// so one bad delivery is refused alone.
fn commit_group(conn: &mut rusqlite::Connection, group: &[Pending]) -> Vec<Result<Enqueued>> {
    let now = now_ms();
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return failed(group, "begin", e),
    };
    let mut outcomes = Vec::with_capacity(group.len());
    for (d, _) in group {
        match enqueue_one(&tx, d, now) {
            Ok(out) => outcomes.push(out),
            Err(e) => {
                tracing::debug!(error = %e, "a delivery failed its group; storing them one by one");
                if let Err(e) = tx.rollback() {
                    return failed(group, "roll back a group", e);
                }
                return commit_one_by_one(conn, group, now);
            }
        }
    }
    match tx.commit() {
        Ok(()) => outcomes.into_iter().map(Ok).collect(),
        Err(e) => failed(group, "commit", e),
    }
}

/// Every delivery of `group` failed: `what` failed with `e`.
fn failed(group: &[Pending], what: &'static str, e: rusqlite::Error) -> Vec<Result<Enqueued>> {
    let source = Arc::new(Driver::from(e));
    group
        .iter()
        .map(|(d, _)| {
            Err(Error::Enqueue {
                delivery: d.delivery_id.clone(),
                what,
                source: Arc::clone(&source),
            })
        })
        .collect()
}

/// Store `group` one delivery at a time, each in a savepoint of one transaction, so a
/// delivery that fails leaves the others stored.
fn commit_one_by_one(
    conn: &mut rusqlite::Connection,
    group: &[Pending],
    now: i64,
) -> Vec<Result<Enqueued>> {
    let mut tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return failed(group, "begin", e),
    };
    let mut outcomes = Vec::with_capacity(group.len());
    for (d, _) in group {
        let sp = match tx.savepoint() {
            Ok(sp) => sp,
            Err(e) => return failed(group, "savepoint", e),
        };
        match enqueue_one(&sp, d, now) {
            Ok(out) => match sp.commit() {
                Ok(()) => outcomes.push(Ok(out)),
                Err(e) => return failed(group, "release savepoint", e),
            },
            // Dropping the savepoint rolls it back.
            Err(e) => outcomes.push(Err(e)),
        }
    }
    match tx.commit() {
        Ok(()) => outcomes,
        Err(e) => failed(group, "commit", e),
    }
}

/// One delivery and its job, inside the caller's transaction (see the module rules): a new
/// delivery id gets a queued job; a copy of a known one is counted on its job, and requeues
/// that job if it failed; any other copy is a duplicate of its job.
///
/// One insert in the common case. (Not one upsert with `RETURNING`: on a table with several
/// unique indexes SQLite gives such a statement a statement journal, a temp file written
/// with every page the statement changes — ~1,200 `pwrite`s a commit, a quarter of the
/// receiver's throughput.)
fn enqueue_one(conn: &rusqlite::Connection, d: &NewDelivery, now: i64) -> Result<Enqueued> {
    let fail = |what, e: rusqlite::Error| Error::Enqueue {
        delivery: d.delivery_id.clone(),
        what,
        source: Arc::new(e.into()),
    };
    let fresh = new_id();
    let inserted = conn
        .prepare_cached(
            "INSERT INTO jobs (id, delivery_id, event, payload, repo, lane, trigger_desc, state,
                     created_at, updated_at, deliveries, last_delivery_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 'queued', $8, $8, 1, $8)
                 ON CONFLICT (delivery_id) DO NOTHING",
        )
        .and_then(|mut st| {
            st.execute(params![
                fresh,
                d.delivery_id,
                d.event,
                d.payload,
                d.repo,
                d.lane,
                d.trigger,
                now
            ])
        })
        .map_err(|e| fail("queue its job", e))?;
    if inserted == 1 {
        return Ok(Enqueued::New { job_id: fresh });
    }
    let (job_id, state) = conn
        .prepare_cached(
            "UPDATE jobs SET deliveries = deliveries + 1, last_delivery_at = $1
                 WHERE delivery_id = $2
                 RETURNING id, state",
        )
        .and_then(|mut st| {
            st.query_row(params![now, d.delivery_id], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
        })
        .map_err(|e| fail("count a copy on its job", e))?;
    let state = state_of(&job_id, &state)?;
    if state != JobState::Failed {
        return Ok(Enqueued::Duplicate { job_id, state });
    }
    conn.prepare_cached(rows::REQUEUE)
        .and_then(|mut st| st.execute(params![now, job_id]))
        .map_err(|e| fail("requeue its job", e))?;
    Ok(Enqueued::Requeued { job_id })
}

impl Columns for rusqlite::Row<'_> {
    fn text(&self, col: &str) -> Result<String> {
        self.get(col).map_err(rows::unreadable(col))
    }
    fn text_or_null(&self, col: &str) -> Result<Option<String>> {
        self.get(col).map_err(rows::unreadable(col))
    }
    fn int(&self, col: &str) -> Result<i64> {
        self.get(col).map_err(rows::unreadable(col))
    }
    fn int_or_null(&self, col: &str) -> Result<Option<i64>> {
        self.get(col).map_err(rows::unreadable(col))
    }
    fn real(&self, col: &str) -> Result<f64> {
        self.get(col).map_err(rows::unreadable(col))
    }
    fn bytes(&self, col: &str) -> Result<Vec<u8>> {
        self.get(col).map_err(rows::unreadable(col))
    }
}

/// Claims run one at a time (`BEGIN IMMEDIATE`): no row locks to skip.
const CLAIM: &str = claim_sql!("");

/// Every row `sql` returns for `params`, read with `read`.
fn all_of<T>(
    conn: &rusqlite::Connection,
    sql: &str,
    params: impl rusqlite::Params,
    what: &str,
    read: impl Fn(&rusqlite::Row<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let mut st = conn.prepare_cached(sql).map_err(Error::db(what))?;
    let mut found = st.query(params).map_err(Error::db(what))?;
    let mut out = Vec::new();
    while let Some(row) = found.next().map_err(Error::db(what))? {
        out.push(read(row)?);
    }
    Ok(out)
}

/// A statement's count of changed rows.
fn changed(
    conn: &rusqlite::Connection,
    sql: &str,
    params: impl rusqlite::Params,
    what: String,
) -> Result<usize> {
    conn.prepare_cached(sql)
        .and_then(|mut st| st.execute(params))
        .map_err(Error::db(what))
}

#[async_trait]
impl Store for SqliteStore {
    async fn enqueue(&self, d: NewDelivery) -> Result<Enqueued> {
        let (reply, outcome) = oneshot::channel();
        // Compressed here, on the caller's task, so the single writer only writes.
        let packed = NewDelivery {
            payload: pack_payload(&d.payload),
            ..d
        };
        self.deliveries
            .send((packed, reply))
            .await
            .map_err(|_| Error::WriterStopped)?;
        outcome.await.map_err(|_| Error::WriterStopped)?
    }

    async fn claim(&self, owner: &str, lease: Duration, which: Claim) -> Result<Option<Job>> {
        let now = now_ms();
        let owner = owner.to_string();
        let until = now.saturating_add(ms(lease));
        let unlaned = i64::from(which == Claim::Unlaned);
        self.conns
            .run(move |conn| {
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(Error::db("begin a claim"))?;
                let mut job = all_of(
                    &tx,
                    CLAIM,
                    params![owner, until, now, unlaned],
                    "claim a job",
                    |r| job_of(r),
                )?;
                tx.commit().map_err(Error::db("commit a claim"))?;
                Ok(job.pop())
            })
            .await
    }

    async fn heartbeat(&self, job: &str, owner: &str, lease: Duration) -> Result<Heartbeat> {
        let now = now_ms();
        let (job, owner) = (job.to_string(), owner.to_string());
        self.conns
            .run(move |conn| {
                let cancel = conn
                    .prepare_cached(rows::HEARTBEAT)
                    .and_then(|mut st| {
                        st.query_row(
                            params![now.saturating_add(ms(lease)), now, job, owner],
                            |r| r.get::<_, i64>(0),
                        )
                        .optional()
                    })
                    .map_err(Error::db(format!("renew the lease of job {job}")))?;
                Ok(match cancel {
                    Some(cancel) => Heartbeat::Held {
                        cancel: cancel != 0,
                    },
                    None => Heartbeat::Lost,
                })
            })
            .await
    }

    async fn set_run(&self, job: &str, owner: &str, run_id: &str) -> Result<bool> {
        let (job, owner, run_id) = (job.to_string(), owner.to_string(), run_id.to_string());
        self.conns
            .run(move |conn| {
                let what = format!("record the run of job {job}");
                let n = changed(
                    conn,
                    rows::SET_RUN,
                    params![run_id, now_ms(), job, owner],
                    what,
                )?;
                Ok(n == 1)
            })
            .await
    }

    async fn finish(&self, job: &str, owner: &str, f: &Finish) -> Result<bool> {
        let (job, owner, f) = (job.to_string(), owner.to_string(), f.clone());
        self.conns
            .run(move |conn| {
                let n = changed(
                    conn,
                    rows::FINISH,
                    params![
                        f.state.as_str(),
                        f.run_id,
                        f.run_state,
                        f.pr_url,
                        f.report,
                        f.detail,
                        f.spend_usd,
                        f.duration_ms,
                        now_ms(),
                        job,
                        owner
                    ],
                    format!("finish job {job}"),
                )?;
                Ok(n == 1)
            })
            .await
    }

    async fn release(&self, job: &str, owner: &str) -> Result<bool> {
        let (job, owner) = (job.to_string(), owner.to_string());
        self.conns
            .run(move |conn| {
                let what = format!("release job {job}");
                let n = changed(conn, rows::RELEASE, params![now_ms(), job, owner], what)?;
                Ok(n == 1)
            })
            .await
    }

    async fn cancel_lane(&self, lane: &str, except_job: &str) -> Result<u64> {
        let now = now_ms();
        let (lane, except_job) = (lane.to_string(), except_job.to_string());
        self.conns
            .run(move |conn| {
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(Error::db("begin a cancel"))?;
                let queued = changed(
                    &tx,
                    rows::CANCEL_QUEUED,
                    params![now, lane, except_job],
                    format!("cancel the queued jobs of {lane}"),
                )?;
                let running = changed(
                    &tx,
                    rows::CANCEL_RUNNING,
                    params![now, lane, except_job],
                    format!("stop the running job of {lane}"),
                )?;
                tx.commit().map_err(Error::db("commit a cancel"))?;
                Ok(u64::try_from(queued + running).unwrap_or(u64::MAX))
            })
            .await
    }

    async fn job(&self, id: &str) -> Result<Option<Job>> {
        let id = id.to_string();
        self.conns
            .run(move |conn| {
                let what = format!("read job {id}");
                Ok(all_of(conn, rows::JOB, params![id], &what, |r| job_of(r))?.pop())
            })
            .await
    }

    async fn recent(&self, limit: u32) -> Result<Vec<Job>> {
        self.conns
            .run(move |conn| {
                all_of(
                    conn,
                    rows::RECENT,
                    params![i64::from(limit)],
                    "list recent jobs",
                    |r| job_of(r),
                )
            })
            .await
    }

    async fn counts(&self) -> Result<StateCounts> {
        self.conns
            .run(|conn| {
                let found = all_of(conn, rows::COUNTS, [], "count jobs", |r| count_of(r))?;
                Ok(counts_of(found))
            })
            .await
    }

    async fn health(&self) -> Result<()> {
        if self.deliveries.is_closed() {
            return Err(Error::WriterStopped);
        }
        self.conns
            .run(|conn| {
                conn.query_row("SELECT 1", [], |_| Ok(()))
                    .map_err(Error::db("reach the database"))
            })
            .await
    }

    async fn delivery_count(&self) -> Result<u64> {
        self.conns
            .run(|conn| {
                let n: i64 = conn
                    .query_row(rows::DELIVERY_COUNT, [], |r| r.get(0))
                    .map_err(Error::db("count deliveries"))?;
                Ok(u64::try_from(n).unwrap_or(0))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(id: &str) -> NewDelivery {
        NewDelivery {
            delivery_id: id.into(),
            event: "issues".into(),
            payload: b"{}".to_vec(),
            repo: Some("o/r".into()),
            lane: Some(format!("o/r#{id}")),
            trigger: "issues.labeled".into(),
        }
    }

    /// A connection of the test's own to the store's file.
    fn sql(store: &SqliteStore) -> rusqlite::Connection {
        open_raw(store.path(), WAL_SIZE_LIMIT).unwrap()
    }

    /// Every row `query` returns, read with `read`.
    fn rows_of<T>(
        store: &SqliteStore,
        query: &str,
        read: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Vec<T> {
        let conn = sql(store);
        let mut st = conn.prepare(query).unwrap();
        st.query_map([], read)
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// The schema before deliveries were merged into jobs, as files made then have it.
    const SCHEMA_BEFORE_MERGE: &str = "
        CREATE TABLE deliveries (
            delivery_id TEXT PRIMARY KEY,
            event TEXT NOT NULL,
            first_at INTEGER NOT NULL,
            last_at INTEGER NOT NULL,
            times INTEGER NOT NULL
        );
        CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            delivery_id TEXT NOT NULL UNIQUE REFERENCES deliveries(delivery_id),
            event TEXT NOT NULL,
            payload BLOB NOT NULL,
            repo TEXT,
            lane TEXT,
            trigger_desc TEXT NOT NULL,
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            run_id TEXT,
            run_state TEXT,
            pr_url TEXT,
            report TEXT,
            detail TEXT,
            spend_usd REAL NOT NULL DEFAULT 0,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_until INTEGER,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            duration_ms INTEGER
        );
        CREATE INDEX jobs_by_state ON jobs(state, created_at, id);
        CREATE UNIQUE INDEX jobs_one_running_per_lane ON jobs(lane)
            WHERE state = 'running' AND lane IS NOT NULL;
        INSERT INTO deliveries VALUES ('a', 'issues', 10, 30, 2), ('b', 'issues', 20, 20, 1);
        INSERT INTO jobs (id, delivery_id, event, payload, repo, lane, trigger_desc, state,
                attempts, pr_url, created_at, updated_at)
            VALUES ('ja', 'a', 'issues', x'7b7d', 'o/r', 'o/r#1', 'label', 'failed', 1, NULL,
                    10, 40),
                   ('jb', 'b', 'issues', x'7b7d', 'o/r', 'o/r#2', 'label', 'succeeded', 1,
                    'https://github.com/o/r/pull/3', 20, 50);
    ";

    /// A file made before the merge opens with its jobs and their delivery counts kept, and
    /// the redelivery rules hold for them as before.
    #[tokio::test]
    async fn an_older_file_has_its_deliveries_merged_into_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.db");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "wal").unwrap();
        conn.execute_batch(SCHEMA_BEFORE_MERGE).unwrap();
        drop(conn);

        let store = SqliteStore::open(&path).await.unwrap();
        let tables: Vec<(String,)> = rows_of(
            &store,
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
            |r| Ok((r.get(0)?,)),
        );
        assert_eq!(tables, [("jobs".to_string(),)]);
        let merged: Vec<(String, String, i64, i64)> = rows_of(
            &store,
            "SELECT id, delivery_id, deliveries, last_delivery_at FROM jobs ORDER BY id",
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        );
        assert_eq!(
            merged,
            [
                ("ja".into(), "a".into(), 2, 30),
                ("jb".into(), "b".into(), 1, 20)
            ]
        );
        let jb = store.job("jb").await.unwrap().unwrap();
        assert_eq!(jb.state, JobState::Succeeded);
        assert_eq!(jb.pr_url.as_deref(), Some("https://github.com/o/r/pull/3"));
        assert_eq!(jb.payload, b"{}");
        assert_eq!(
            store.enqueue(delivery("a")).await.unwrap(),
            Enqueued::Requeued {
                job_id: "ja".into()
            }
        );
        assert_eq!(
            store.enqueue(delivery("b")).await.unwrap(),
            Enqueued::Duplicate {
                job_id: "jb".into(),
                state: JobState::Succeeded
            }
        );
        assert!(matches!(
            store.enqueue(delivery("c")).await.unwrap(),
            Enqueued::New { .. }
        ));
        assert_eq!(store.delivery_count().await.unwrap(), 3);
        let (times,): (i64,) = sql(&store)
            .query_row("SELECT deliveries FROM jobs WHERE id = 'ja'", [], |r| {
                Ok((r.get(0)?,))
            })
            .unwrap();
        assert_eq!(times, 3);
        // The indexes are there again, on the new table.
        let (indexes,): (i64,) = sql(&store)
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'
                     AND name IN ('jobs_by_state', 'jobs_one_running_per_lane')",
                [],
                |r| Ok((r.get(0)?,)),
            )
            .unwrap();
        assert_eq!(indexes, 2);
        // Opening again finds nothing left to merge.
        drop(store);
        let store = SqliteStore::open(&path).await.unwrap();
        assert_eq!(store.delivery_count().await.unwrap(), 3);
    }

    /// A burst grows the WAL past its limit; once the checkpointer has caught up, the next
    /// commit starts the WAL over and the file is cut back to the limit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wal_grown_in_a_burst_is_cut_back_after_it() {
        const LIMIT: u64 = 256 * 1024;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.db");
        let wal = dir.path().join("serve.db-wal");
        let store = SqliteStore::open_with(&path, LIMIT as i64).await.unwrap();
        let mut burst = tokio::task::JoinSet::new();
        for i in 0..200 {
            let store = store.clone();
            let mut d = delivery(&format!("d{i}"));
            d.payload = std::iter::repeat_with(|| fastrand::u8(..))
                .take(12 * 1024)
                .collect();
            burst.spawn(async move { store.enqueue(d).await });
        }
        while let Some(r) = burst.join_next().await {
            r.unwrap().unwrap();
        }
        let grown = std::fs::metadata(&wal).unwrap().len();
        assert!(
            grown > 4 * LIMIT,
            "the burst left a WAL of {grown} bytes only"
        );
        let (mut size, mut after) = (grown, 0);
        while after < 50 && size > LIMIT {
            // Time for a checkpoint to copy the burst, then a write to start the WAL over.
            tokio::time::sleep(CHECKPOINT_EVERY * 2).await;
            store
                .enqueue(delivery(&format!("after{after}")))
                .await
                .unwrap();
            after += 1;
            size = std::fs::metadata(&wal).unwrap().len();
        }
        assert!(size <= LIMIT, "the WAL is still {size} bytes (was {grown})");
        assert_eq!(store.delivery_count().await.unwrap(), 200 + after);
    }

    /// Claims and reads never hold more than [`MAX_CONNECTIONS`] connections, however many ask
    /// at once, and the connections are kept for the next.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn claims_and_reads_share_a_bounded_set_of_connections() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("serve.db"))
            .await
            .unwrap();
        let job = store.enqueue(delivery("a")).await.unwrap();
        let mut reads = tokio::task::JoinSet::new();
        for _ in 0..100 {
            let store = store.clone();
            let id = job.job_id().to_string();
            reads.spawn(async move { store.job(&id).await });
        }
        while let Some(r) = reads.join_next().await {
            assert_eq!(r.unwrap().unwrap().unwrap().delivery_id, "a");
        }
        let idle = store.conns.idle.lock().unwrap().len();
        assert!((1..=MAX_CONNECTIONS).contains(&idle), "{idle} idle");
        assert_eq!(
            store.conns.slots.available_permits(),
            MAX_CONNECTIONS,
            "a slot was kept"
        );
    }

    /// When the writer's thread is gone (its end of the channel dropped, as a panic would),
    /// the store says so to `/healthz` and refuses deliveries with a clear error.
    #[tokio::test]
    async fn a_stopped_writer_is_unhealthy() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(&dir.path().join("serve.db"))
            .await
            .unwrap();
        store.health().await.unwrap();
        let (gone, writer_end) = mpsc::channel(1);
        drop(writer_end);
        store.deliveries = gone;
        assert!(matches!(store.health().await, Err(Error::WriterStopped)));
        let err = store.enqueue(delivery("x")).await.unwrap_err();
        assert!(err.to_string().contains("writer has stopped"), "{err}");
    }

    #[tokio::test]
    async fn the_background_checkpointer_moves_the_wal_into_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.db");
        let store = SqliteStore::open(&path).await.unwrap();
        let before = std::fs::metadata(&path).unwrap().len();
        for i in 0..40 {
            let mut d = delivery(&format!("d{i}"));
            // Incompressible, so the stored size is the payload's size.
            d.payload = std::iter::repeat_with(|| fastrand::u8(..))
                .take(12 * 1024)
                .collect();
            store.enqueue(d).await.unwrap();
        }
        let mut grown = 0;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            grown = std::fs::metadata(&path).unwrap().len() - before;
            if grown > 40 * 12 * 1024 {
                break;
            }
        }
        assert!(
            grown > 40 * 12 * 1024,
            "database file grew by {grown} bytes only"
        );
    }

    #[tokio::test]
    async fn one_failing_delivery_in_a_group_leaves_the_others_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("serve.db"))
            .await
            .unwrap();
        sql(&store)
            .execute_batch(
                "CREATE TRIGGER refuse BEFORE INSERT ON jobs WHEN NEW.delivery_id = 'bad'
                 BEGIN SELECT RAISE(ABORT, 'refused'); END",
            )
            .unwrap();
        // One group, as the committer would take it: the duplicate of `a` is seen inside it.
        let group: Vec<Pending> = ["a", "bad", "b", "a"]
            .into_iter()
            .map(|id| (delivery(id), oneshot::channel().0))
            .collect();
        let mut conn = open_raw(&dir.path().join("serve.db"), WAL_SIZE_LIMIT).unwrap();
        let out = commit_group(&mut conn, &group);
        drop(conn);
        assert!(matches!(out[0], Ok(Enqueued::New { .. })), "{:?}", out[0]);
        assert!(out[1].is_err(), "{:?}", out[1]);
        assert!(matches!(out[2], Ok(Enqueued::New { .. })), "{:?}", out[2]);
        match (&out[0], &out[3]) {
            (Ok(first), Ok(Enqueued::Duplicate { job_id, .. })) => {
                assert_eq!(first.job_id(), job_id)
            }
            other => panic!("{other:?}"),
        }
        // The refused delivery's own row was rolled back with its savepoint.
        assert_eq!(store.delivery_count().await.unwrap(), 2);
        // And it can be delivered again once the cause is gone.
        sql(&store).execute_batch("DROP TRIGGER refuse").unwrap();
        let again = store.enqueue(delivery("bad")).await.unwrap();
        assert!(matches!(again, Enqueued::New { .. }), "{again:?}");
    }

    /// A refused delivery's error keeps SQLite's error as its source (not only its text).
    #[tokio::test]
    async fn a_refused_delivery_keeps_sqlites_error_as_its_source() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("serve.db"))
            .await
            .unwrap();
        sql(&store)
            .execute_batch(
                "CREATE TRIGGER refuse BEFORE INSERT ON jobs
                 BEGIN SELECT RAISE(ABORT, 'refused'); END",
            )
            .unwrap();
        let err = store.enqueue(delivery("bad")).await.unwrap_err();
        assert!(
            err.to_string()
                .starts_with("cannot store delivery bad: queue its job: "),
            "{err}"
        );
        let source = std::error::Error::source(&err).expect("a source");
        let driver = source
            .downcast_ref::<Arc<Driver>>()
            .expect("the driver's error");
        assert!(
            matches!(driver.as_ref(), Driver::Sqlite(e) if e.to_string().contains("refused")),
            "{driver:?}"
        );
    }

    #[tokio::test]
    async fn payloads_are_stored_compressed_and_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("serve.db"))
            .await
            .unwrap();
        let mut d = delivery("c");
        d.payload = (0..300)
            .map(|i| format!(r#"{{"url":"https://api.github.com/repos/o/r/issues/{i}"}},"#))
            .collect::<String>()
            .into_bytes();
        let job = store.enqueue(d.clone()).await.unwrap();
        let (stored,): (Vec<u8>,) = sql(&store)
            .query_row(
                "SELECT payload FROM jobs WHERE id = ?1",
                [job.job_id()],
                |r| Ok((r.get(0)?,)),
            )
            .unwrap();
        assert!(
            stored.len() * 3 < d.payload.len(),
            "{} stored for {}",
            stored.len(),
            d.payload.len()
        );
        let read = store.job(job.job_id()).await.unwrap().unwrap();
        assert_eq!(read.payload, d.payload);
    }

    /// A group in one transaction gives each delivery the outcome storing them one by one
    /// would: a repeated id inside the group is a duplicate of its first occurrence.
    #[tokio::test]
    async fn a_group_in_one_transaction_has_the_outcomes_of_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("serve.db"))
            .await
            .unwrap();
        let Enqueued::New { job_id: f } = store.enqueue(delivery("f")).await.unwrap() else {
            panic!("f is new")
        };
        let Enqueued::New { job_id: s } = store.enqueue(delivery("s")).await.unwrap() else {
            panic!("s is new")
        };
        for (id, state) in [(&f, "failed"), (&s, "succeeded")] {
            sql(&store)
                .execute(
                    "UPDATE jobs SET state = ?1 WHERE id = ?2",
                    params![state, id],
                )
                .unwrap();
        }
        let group: Vec<Pending> = ["n", "f", "s", "n", "f"]
            .into_iter()
            .map(|id| (delivery(id), oneshot::channel().0))
            .collect();
        let mut conn = open_raw(&dir.path().join("serve.db"), WAL_SIZE_LIMIT).unwrap();
        let out: Vec<Enqueued> = commit_group(&mut conn, &group)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let Enqueued::New { job_id: n } = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(
            out[1..],
            [
                Enqueued::Requeued { job_id: f.clone() },
                Enqueued::Duplicate {
                    job_id: s.clone(),
                    state: JobState::Succeeded
                },
                Enqueued::Duplicate {
                    job_id: n.clone(),
                    state: JobState::Queued
                },
                Enqueued::Duplicate {
                    job_id: f.clone(),
                    state: JobState::Queued
                },
            ]
        );
        assert_eq!(
            store.job(&f).await.unwrap().unwrap().state,
            JobState::Queued
        );
        assert_eq!(store.job(n).await.unwrap().unwrap().payload, b"{}".to_vec());
        let times: Vec<(String, i64)> = rows_of(
            &store,
            "SELECT delivery_id, deliveries FROM jobs ORDER BY delivery_id",
            |r| Ok((r.get(0)?, r.get(1)?)),
        );
        let times: Vec<(&str, i64)> = times.iter().map(|(d, t)| (d.as_str(), *t)).collect();
        assert_eq!(times, [("f", 3), ("n", 2), ("s", 2)]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_deliveries_are_each_answered_after_their_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("serve.db"))
            .await
            .unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..200 {
            let store = store.clone();
            tasks.spawn(async move { store.enqueue(delivery(&format!("d{}", i % 100))).await });
        }
        let (mut new, mut dup) = (0, 0);
        while let Some(r) = tasks.join_next().await {
            match r.unwrap().unwrap() {
                Enqueued::New { .. } => new += 1,
                Enqueued::Duplicate { .. } => dup += 1,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!((new, dup), (100, 100));
        // Answered means committed: a fresh connection sees every one.
        drop(store);
        let reopened = SqliteStore::open(&dir.path().join("serve.db"))
            .await
            .unwrap();
        assert_eq!(reopened.delivery_count().await.unwrap(), 100);
    }
}
