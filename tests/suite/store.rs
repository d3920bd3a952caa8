//! The job store's rules, run against SQLite and against a real Postgres
//! (`GIT_AGENT_TEST_DATABASE_URL`, started by `.ci/setup/postgres.sh`; the Postgres tests fail
//! when it is missing).

use std::sync::Arc;
use std::time::Duration;

use git_agent::store::{
    Claim, Enqueued, Finish, Heartbeat, JobState, NewDelivery, PostgresStore, SqliteStore, Store,
};

/// A store in a fresh temp directory (kept alive by the returned guard).
pub async fn sqlite() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("state/serve.db"))
        .await
        .unwrap();
    assert_eq!(store.journal_mode().await.unwrap(), "wal");
    (Arc::new(store), dir)
}

/// The test Postgres URL; panics (the test fails) when it is not set.
pub fn pg_admin_url() -> String {
    std::env::var("GIT_AGENT_TEST_DATABASE_URL").expect(
        "GIT_AGENT_TEST_DATABASE_URL is not set: run .ci/run, or source .ci/setup/postgres.sh",
    )
}

/// A fresh database on the test server, and its URL.
pub async fn pg_fresh_url() -> String {
    let admin = pg_admin_url();
    let name = format!("t_{}", ulid::Ulid::generate().to_string().to_lowercase());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test Postgres {admin}: {e}"));
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let (base, query) = match admin.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (admin.as_str(), String::new()),
    };
    let cut = base.rfind('/').unwrap();
    format!("{}/{name}{query}", &base[..cut])
}

async fn postgres() -> (Arc<dyn Store>, ()) {
    let url = pg_fresh_url().await;
    (Arc::new(PostgresStore::connect(&url).await.unwrap()), ())
}

fn delivery(id: &str, lane: Option<&str>) -> NewDelivery {
    NewDelivery {
        delivery_id: id.to_string(),
        event: "issues".into(),
        payload: format!("{{\"delivery\":\"{id}\"}}").into_bytes(),
        repo: Some("octo/repo".into()),
        lane: lane.map(str::to_string),
        trigger: "issues.labeled".into(),
    }
}

fn finish(state: JobState) -> Finish {
    Finish {
        state,
        run_id: Some("01RUN".into()),
        run_state: Some("succeeded".into()),
        pr_url: None,
        report: Some("# report".into()),
        detail: format!("ended {}", state.as_str()),
        spend_usd: 0.25,
        duration_ms: 10,
    }
}

const LEASE: Duration = Duration::from_secs(60);

fn count(counts: &[(JobState, u64)], state: JobState) -> u64 {
    counts.iter().find(|(s, _)| *s == state).map_or(0, |c| c.1)
}

async fn duplicate_delivery_is_one_job(store: Arc<dyn Store>) {
    let first = store
        .enqueue(delivery("d-1", Some("octo/repo#1")))
        .await
        .unwrap();
    let Enqueued::New { job_id } = first.clone() else {
        panic!("first delivery not new: {first:?}")
    };
    let again = store
        .enqueue(delivery("d-1", Some("octo/repo#1")))
        .await
        .unwrap();
    assert_eq!(
        again,
        Enqueued::Duplicate {
            job_id: job_id.clone(),
            state: JobState::Queued
        }
    );
    assert_eq!(store.delivery_count().await.unwrap(), 1);
    let counts = store.counts().await.unwrap();
    assert_eq!(count(&counts, JobState::Queued), 1);
    let job = store.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.payload, b"{\"delivery\":\"d-1\"}");
    assert_eq!(job.lane.as_deref(), Some("octo/repo#1"));
    assert_eq!(job.trigger, "issues.labeled");
}

async fn fifty_concurrent_copies_make_one_job(store: Arc<dyn Store>) {
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.enqueue(delivery("same", None)).await.unwrap()
        }));
    }
    let mut new = 0;
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let e = t.await.unwrap();
        if matches!(e, Enqueued::New { .. }) {
            new += 1;
        }
        ids.insert(e.job_id().to_string());
    }
    assert_eq!(new, 1, "exactly one copy makes the job");
    assert_eq!(ids.len(), 1, "every copy names the same job");
    assert_eq!(store.recent(100).await.unwrap().len(), 1);
}

async fn redelivery_reruns_failed_not_succeeded(store: Arc<dyn Store>) {
    let id = store.enqueue(delivery("r-1", None)).await.unwrap();
    let job = store.claim("w1", LEASE, Claim::Any).await.unwrap().unwrap();
    assert_eq!(job.id, id.job_id());
    assert_eq!(job.attempts, 1);
    assert!(
        store
            .finish(&job.id, "w1", &finish(JobState::Failed))
            .await
            .unwrap()
    );
    let again = store.enqueue(delivery("r-1", None)).await.unwrap();
    assert_eq!(
        again,
        Enqueued::Requeued {
            job_id: job.id.clone()
        }
    );
    let job = store.claim("w2", LEASE, Claim::Any).await.unwrap().unwrap();
    assert_eq!(job.attempts, 2, "the requeued job is claimed again");
    assert!(
        store
            .finish(&job.id, "w2", &finish(JobState::Succeeded))
            .await
            .unwrap()
    );
    let third = store.enqueue(delivery("r-1", None)).await.unwrap();
    assert_eq!(
        third,
        Enqueued::Duplicate {
            job_id: job.id.clone(),
            state: JobState::Succeeded
        }
    );
    assert!(
        store
            .claim("w3", LEASE, Claim::Any)
            .await
            .unwrap()
            .is_none(),
        "no work"
    );
    let done = store.job(&job.id).await.unwrap().unwrap();
    assert_eq!(done.state, JobState::Succeeded);
    assert_eq!(done.run_id.as_deref(), Some("01RUN"));
    assert_eq!(done.detail.as_deref(), Some("ended succeeded"));
    assert!((done.spend_usd - 0.25).abs() < 1e-9);
    assert_eq!(done.lease_owner, None);
}

async fn expired_lease_is_claimed_again_and_old_owner_is_locked_out(store: Arc<dyn Store>) {
    store.enqueue(delivery("l-1", None)).await.unwrap();
    let short = Duration::from_millis(300);
    let job = store
        .claim("dead", short, Claim::Any)
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .claim("other", short, Claim::Any)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store.heartbeat(&job.id, "dead", short).await.unwrap(),
        Heartbeat::Held { cancel: false }
    );
    tokio::time::sleep(Duration::from_millis(450)).await;
    let again = store
        .claim("alive", LEASE, Claim::Any)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.id, job.id);
    assert_eq!(again.attempts, 2);
    assert_eq!(
        store.heartbeat(&job.id, "dead", short).await.unwrap(),
        Heartbeat::Lost
    );
    assert!(
        !store
            .finish(&job.id, "dead", &finish(JobState::Failed))
            .await
            .unwrap()
    );
    assert!(!store.set_run(&job.id, "dead", "X").await.unwrap());
    assert!(store.set_run(&job.id, "alive", "01ALIVE").await.unwrap());
    assert!(
        store
            .finish(&job.id, "alive", &finish(JobState::Succeeded))
            .await
            .unwrap()
    );
    let j = store.job(&job.id).await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Succeeded);
    assert_eq!(j.run_id.as_deref(), Some("01RUN"));
}

async fn one_running_job_per_lane(store: Arc<dyn Store>) {
    let a = store.enqueue(delivery("a", Some("o/r#7"))).await.unwrap();
    let b = store.enqueue(delivery("b", Some("o/r#7"))).await.unwrap();
    let c = store.enqueue(delivery("c", Some("o/r#8"))).await.unwrap();
    let first = store.claim("w", LEASE, Claim::Any).await.unwrap().unwrap();
    assert_eq!(first.id, a.job_id());
    let second = store.claim("w", LEASE, Claim::Any).await.unwrap().unwrap();
    assert_eq!(second.id, c.job_id(), "b waits for a, c's lane is free");
    assert!(store.claim("w", LEASE, Claim::Any).await.unwrap().is_none());
    assert!(
        store
            .finish(&first.id, "w", &finish(JobState::Succeeded))
            .await
            .unwrap()
    );
    let third = store.claim("w", LEASE, Claim::Any).await.unwrap().unwrap();
    assert_eq!(third.id, b.job_id());
}

async fn stop_cancels_queued_and_flags_running(store: Arc<dyn Store>) {
    let a = store.enqueue(delivery("a", Some("o/r#1"))).await.unwrap();
    let b = store.enqueue(delivery("b", Some("o/r#1"))).await.unwrap();
    let other = store.enqueue(delivery("o", Some("o/r#2"))).await.unwrap();
    let running = store.claim("w", LEASE, Claim::Any).await.unwrap().unwrap();
    assert_eq!(running.id, a.job_id());
    assert_eq!(store.cancel_lane("o/r#1", "none").await.unwrap(), 2);
    assert_eq!(
        store.job(b.job_id()).await.unwrap().unwrap().state,
        JobState::Cancelled
    );
    assert_eq!(
        store.heartbeat(&running.id, "w", LEASE).await.unwrap(),
        Heartbeat::Held { cancel: true }
    );
    assert_eq!(
        store.job(other.job_id()).await.unwrap().unwrap().state,
        JobState::Queued
    );
    // A cancelled job's redelivery does not bring it back.
    assert!(matches!(
        store.enqueue(delivery("b", Some("o/r#1"))).await.unwrap(),
        Enqueued::Duplicate {
            state: JobState::Cancelled,
            ..
        }
    ));
}

async fn release_gives_the_job_back(store: Arc<dyn Store>) {
    store.enqueue(delivery("x", Some("o/r#3"))).await.unwrap();
    let job = store.claim("w1", LEASE, Claim::Any).await.unwrap().unwrap();
    assert!(!store.release(&job.id, "w2").await.unwrap(), "not w2's");
    assert!(store.release(&job.id, "w1").await.unwrap());
    let j = store.job(&job.id).await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Queued);
    assert_eq!(j.attempts, 0, "a release is not an attempt");
    let again = store.claim("w2", LEASE, Claim::Any).await.unwrap().unwrap();
    assert_eq!(again.id, job.id);
    assert_eq!(again.attempts, 1);
}

async fn concurrent_claimers_never_share_a_job(store: Arc<dyn Store>) {
    for i in 0..30 {
        store
            .enqueue(delivery(&format!("c{i}"), Some(&format!("o/r#{}", i % 10))))
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for w in 0..6 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("w{w}");
            let mut got = Vec::new();
            let mut idle = 0;
            while idle < 20 {
                match store.claim(&owner, LEASE, Claim::Any).await.unwrap() {
                    Some(job) => {
                        idle = 0;
                        got.push(job.id.clone());
                        assert!(
                            store
                                .finish(&job.id, &owner, &finish(JobState::Succeeded))
                                .await
                                .unwrap()
                        );
                    }
                    None => {
                        idle += 1;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(all.len(), 30, "every job claimed");
    assert_eq!(unique.len(), 30, "none twice");
    let counts = store.counts().await.unwrap();
    assert_eq!(count(&counts, JobState::Succeeded), 30);
}

async fn control_claims_take_only_unlaned_jobs(store: Arc<dyn Store>) {
    let run = store.enqueue(delivery("run", Some("o/r#1"))).await.unwrap();
    let stop = store.enqueue(delivery("stop", None)).await.unwrap();
    let first = store
        .claim("ctl", LEASE, Claim::Unlaned)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        first.id,
        stop.job_id(),
        "the older laned job is passed over"
    );
    assert!(
        store
            .claim("ctl", LEASE, Claim::Unlaned)
            .await
            .unwrap()
            .is_none()
    );
    let next = store.claim("w", LEASE, Claim::Any).await.unwrap().unwrap();
    assert_eq!(next.id, run.job_id());
}

async fn recent_is_newest_first(store: Arc<dyn Store>) {
    for i in 0..5 {
        store
            .enqueue(delivery(&format!("n{i}"), None))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let recent = store.recent(3).await.unwrap();
    let ids: Vec<_> = recent.iter().map(|j| j.delivery_id.as_str()).collect();
    assert_eq!(ids, ["n4", "n3", "n2"]);
}

macro_rules! both_stores {
    ($($case:ident),* $(,)?) => {
        mod sqlite_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let (store, _dir) = super::sqlite().await;
                    super::$case(store).await;
                }
            )*
        }
        mod postgres_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let (store, ()) = super::postgres().await;
                    super::$case(store).await;
                }
            )*
        }
    };
}

both_stores!(
    duplicate_delivery_is_one_job,
    fifty_concurrent_copies_make_one_job,
    redelivery_reruns_failed_not_succeeded,
    expired_lease_is_claimed_again_and_old_owner_is_locked_out,
    one_running_job_per_lane,
    stop_cancels_queued_and_flags_running,
    release_gives_the_job_back,
    concurrent_claimers_never_share_a_job,
    recent_is_newest_first,
    control_claims_take_only_unlaned_jobs,
);

#[tokio::test]
async fn sqlite_store_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.db");
    let id = {
        let store = SqliteStore::open(&path).await.unwrap();
        store.enqueue(delivery("keep", None)).await.unwrap()
    };
    let store = SqliteStore::open(&path).await.unwrap();
    let job = store.job(id.job_id()).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Queued);
}

/// A Postgres database made before deliveries were merged into jobs: its jobs keep their
/// delivery counts, the old table goes, and the redelivery rules hold for the old jobs.
#[tokio::test]
async fn postgres_database_before_the_merge_keeps_its_jobs() {
    let url = pg_fresh_url().await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    for stmt in [
        "CREATE TABLE deliveries (
            delivery_id TEXT PRIMARY KEY,
            event TEXT NOT NULL,
            first_at BIGINT NOT NULL,
            last_at BIGINT NOT NULL,
            times BIGINT NOT NULL
        )",
        "CREATE TABLE jobs (
            id TEXT PRIMARY KEY,
            delivery_id TEXT NOT NULL UNIQUE REFERENCES deliveries(delivery_id),
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
            duration_ms BIGINT
        )",
        "INSERT INTO deliveries VALUES ('a', 'issues', 10, 30, 2), ('b', 'issues', 20, 20, 1)",
        "INSERT INTO jobs (id, delivery_id, event, payload, trigger_desc, state, created_at,
             updated_at)
         VALUES ('ja', 'a', 'issues', '\\x7b7d', 'label', 'failed', 10, 40),
                ('jb', 'b', 'issues', '\\x7b7d', 'label', 'succeeded', 20, 50)",
    ] {
        sqlx::query(stmt).execute(&pool).await.unwrap();
    }
    let store = PostgresStore::connect(&url).await.unwrap();
    let (old,): (Option<String>,) = sqlx::query_as("SELECT to_regclass('deliveries')::text")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(old, None, "the deliveries table is still there");
    let merged: Vec<(String, i64, i64)> =
        sqlx::query_as("SELECT id, deliveries, last_delivery_at FROM jobs ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(merged, [("ja".into(), 2, 30), ("jb".into(), 1, 20)]);
    assert_eq!(store.job("jb").await.unwrap().unwrap().payload, b"{}");
    assert_eq!(
        store.enqueue(delivery("a", None)).await.unwrap(),
        Enqueued::Requeued {
            job_id: "ja".into()
        }
    );
    assert_eq!(
        store.enqueue(delivery("b", None)).await.unwrap(),
        Enqueued::Duplicate {
            job_id: "jb".into(),
            state: JobState::Succeeded
        }
    );
    assert_eq!(store.delivery_count().await.unwrap(), 2);
    // A second process starting on the merged database finds nothing to do.
    let again = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(again.delivery_count().await.unwrap(), 2);
}

/// A CA file named by `var` (set by `.ci/setup/postgres.sh`); the test fails when it is not.
fn pg_ca(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run .ci/run, or source .ci/setup/postgres.sh")
    })
}

/// `url` with `params` added to its query string.
fn with_params(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

// Guards TLS to Postgres (the way `serve` reaches a shared database on another machine):
// `sslmode=require` connects encrypted — without TLS built in it was refused — and
// `verify-full` trusts the server under its CA and refuses it under another.
#[tokio::test]
async fn postgres_over_tls_is_encrypted_and_the_server_is_verified() {
    use sqlx::Connection as _;
    let url = pg_fresh_url().await;
    let required = with_params(&url, "sslmode=require");
    let store = PostgresStore::connect(&required)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let first = store.enqueue(delivery("tls-1", None)).await.unwrap();
    assert!(matches!(first, Enqueued::New { .. }), "{first:?}");
    let mut conn = sqlx::PgConnection::connect(&required).await.unwrap();
    let (ssl,): (bool,) =
        sqlx::query_as("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(ssl, "the server sees a plain connection");

    let verified = with_params(
        &url,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            pg_ca("GIT_AGENT_TEST_DATABASE_CA")
        ),
    );
    let store = PostgresStore::connect(&verified)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(store.delivery_count().await.unwrap(), 1);

    let other = with_params(
        &url,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            pg_ca("GIT_AGENT_TEST_DATABASE_OTHER_CA")
        ),
    );
    let Err(refused) = PostgresStore::connect(&other).await else {
        panic!("a server certificate from another CA was trusted");
    };
    let text = format!("{refused:#}");
    assert!(text.contains("connect to"), "{text}");
    assert!(
        !text.contains("git_agent_test:git_agent_test"),
        "password shown: {text}"
    );
}
