//! `git agent serve` as a real process, killed with SIGKILL: between the delivery's commit and
//! its response, and in the middle of a job. After a restart each job finishes exactly once.
//!
//! The GitHub API is a loopback server answering the permission question the trigger asks;
//! the sender has only `read`, so the job's work is that one forge call and ends "ignored".

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::routing::get;
use git_agent::store::{JobState, SqliteStore, Store};
use serde_json::{Value, json};

use super::common::free_port;
use super::server::{client, deliver, issue_payload};

#[derive(Clone, Default)]
struct FakeGitHub {
    permission_calls: Arc<AtomicUsize>,
    hang: Arc<AtomicBool>,
}

async fn permission(State(f): State<FakeGitHub>) -> axum::Json<Value> {
    f.permission_calls.fetch_add(1, Ordering::SeqCst);
    if f.hang.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs(600)).await;
    }
    axum::Json(json!({"permission": "read", "role_name": "read", "user": {"login": "octocat"}}))
}

async fn fake_github() -> (String, FakeGitHub) {
    let fake = FakeGitHub::default();
    let app = axum::Router::new()
        .route(
            "/repos/{owner}/{repo}/collaborators/{user}/permission",
            get(permission),
        )
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, fake)
}

/// A `serve` process, killed when dropped: a test that fails must not leave it running (it
/// holds the test's stderr, so `cargo test` would wait for it).
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Served {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Served {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

fn spawn_serve(db: &std::path::Path, port: u16, api: &str, kill_at: Option<&str>) -> Served {
    spawn_serve_url(&format!("sqlite://{}", db.display()), port, api, kill_at)
}

fn spawn_serve_url(db_url: &str, port: u16, api: &str, kill_at: Option<&str>) -> Served {
    let mut cmd = serve_command(db_url, port, api);
    match kill_at {
        Some(k) => cmd.env("GIT_AGENT_TEST_KILL_AT", k),
        None => cmd.env_remove("GIT_AGENT_TEST_KILL_AT"),
    };
    Served(cmd.spawn().unwrap())
}

/// `git agent serve` on `port` with one worker, a 2 s lease and no grace, the store at
/// `db_url` and the GitHub API at `api`; warnings to the test's stderr.
fn serve_command(db_url: &str, port: u16, api: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_git-agent"));
    cmd.args([
        "serve",
        "--workers",
        "1",
        "--lease-secs",
        "2",
        "--grace-secs",
        "0",
    ])
    .arg("--listen")
    .arg(format!("127.0.0.1:{port}"))
    .arg("--database-url")
    .arg(db_url)
    .arg("--github-api")
    .arg(api)
    .env("GIT_AGENT_WEBHOOK_SECRET", super::server::SECRET)
    .env("GITHUB_TOKEN", "test-token")
    .env_remove("GIT_AGENT_APP_ID")
    .env_remove("GIT_AGENT_APP_KEY")
    .env("GIT_AGENT_LOG", "warn")
    .env_remove("GIT_AGENT_LOG_FORMAT")
    .env_remove("GIT_AGENT_TEST_KILL_AT")
    .stdout(Stdio::null())
    .stderr(Stdio::inherit());
    cmd
}

async fn wait_healthy(url: &str) {
    let c = client();
    for _ in 0..200 {
        if let Ok(r) = c.get(format!("{url}/healthz")).send().await
            && r.status() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server at {url} never became healthy");
}

async fn wait_job(
    store: &SqliteStore,
    want: impl Fn(&git_agent::store::Job) -> bool,
) -> git_agent::store::Job {
    for _ in 0..400 {
        if let Some(j) = store
            .recent(10)
            .await
            .unwrap()
            .into_iter()
            .find(|j| want(j))
        {
            return j;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no job reached the wanted state: {:?}",
        store.recent(10).await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_between_commit_and_response_runs_the_job_once() {
    let dir = super::common::tempdir();
    let db = dir.path().join("serve.db");
    let (api, fake) = fake_github().await;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut child = spawn_serve(&db, port, &api, Some("after-enqueue-commit"));
    wait_healthy(&url).await;
    let c = client();
    let body = issue_payload(21, "crash after commit");
    let sig = git_agent::server::signature::sign(
        &secrecy::SecretString::from(super::server::SECRET),
        &body,
    );
    let sent = c
        .post(format!("{url}/webhook"))
        .header("X-GitHub-Event", "issues")
        .header("X-GitHub-Delivery", "kill-1")
        .header("X-Hub-Signature-256", sig)
        .body(body.clone())
        .send()
        .await;
    assert!(sent.is_err(), "the process died before answering: {sent:?}");
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    // The delivery was committed: the job is there, not yet run.
    let store = SqliteStore::open(&db).await.unwrap();
    let jobs = store.recent(10).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].state, JobState::Queued);
    assert_eq!(fake.permission_calls.load(Ordering::SeqCst), 0);

    let mut child = spawn_serve(&db, port, &api, None);
    wait_healthy(&url).await;
    // GitHub saw no 2xx and redelivers: still one job.
    let resp = deliver(&c, &url, "issues", "kill-1", body).await;
    assert!(resp.status().is_success(), "{}", resp.status());
    let job = wait_job(&store, |j| j.state.is_finished()).await;
    assert_eq!(job.state, JobState::Succeeded);
    assert!(
        job.detail.as_deref().unwrap_or("").starts_with("ignored:"),
        "{job:?}"
    );
    assert_eq!(job.attempts, 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        fake.permission_calls.load(Ordering::SeqCst),
        1,
        "worked once"
    );
    assert_eq!(store.recent(10).await.unwrap().len(), 1);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_mid_job_is_finished_once_after_its_lease_expires() {
    let dir = super::common::tempdir();
    let db = dir.path().join("serve.db");
    let (api, fake) = fake_github().await;
    fake.hang.store(true, Ordering::SeqCst);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut child = spawn_serve(&db, port, &api, None);
    wait_healthy(&url).await;
    let c = client();
    let resp = deliver(
        &c,
        &url,
        "issues",
        "mid-1",
        issue_payload(22, "crash mid job"),
    )
    .await;
    assert_eq!(resp.status(), 202);
    let store = SqliteStore::open(&db).await.unwrap();
    // The worker is inside the job (waiting on the forge) when it is killed.
    for _ in 0..200 {
        if fake.permission_calls.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(fake.permission_calls.load(Ordering::SeqCst), 1);
    let running = wait_job(&store, |j| j.state == JobState::Running).await;
    child.kill().unwrap();
    child.wait().unwrap();
    fake.hang.store(false, Ordering::SeqCst);

    let mut child = spawn_serve(&db, port, &api, None);
    wait_healthy(&url).await;
    let job = wait_job(&store, |j| j.state.is_finished()).await;
    assert_eq!(job.id, running.id);
    assert_eq!(job.state, JobState::Succeeded);
    assert_eq!(
        job.attempts, 2,
        "claimed again once the dead worker's lease ran out"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fake.permission_calls.load(Ordering::SeqCst), 2);
    assert_eq!(store.recent(10).await.unwrap().len(), 1);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn serve_refuses_to_start_without_a_webhook_secret() {
    let out = Command::new(env!("CARGO_BIN_EXE_git-agent"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("GIT_AGENT_WEBHOOK_SECRET")
        .env("GITHUB_TOKEN", "x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no webhook secret"), "{err}");
}

/// `--log-format json`: every line the server logs is one JSON object, and a delivery's line
/// carries its id, event and outcome as fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_a_line_with_the_deliverys_fields() {
    let dir = super::common::tempdir();
    let (api, _fake) = fake_github().await;
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let db = dir.path().join("serve.db");
    let mut cmd = serve_command(&format!("sqlite://{}", db.display()), port, &api);
    cmd.args(["--log-format", "json"])
        .env("GIT_AGENT_LOG", "info")
        .stderr(Stdio::piped());
    let mut child = Served(cmd.spawn().unwrap());
    wait_healthy(&url).await;
    let resp = deliver(
        &client(),
        &url,
        "issues",
        "json-log-1",
        issue_payload(31, "json logs"),
    )
    .await;
    assert_eq!(resp.status(), 202);
    let store = SqliteStore::open(&db).await.unwrap();
    wait_job(&store, |j| j.state.is_finished()).await;
    // The worker logs the job's end just after storing it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    child.kill().unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut out).unwrap();
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );
    let started = lines
        .iter()
        .find(|l| l["fields"]["message"] == "git agent serve started")
        .unwrap_or_else(|| panic!("no start line: {lines:#?}"));
    assert_eq!(started["fields"]["listen"], format!("127.0.0.1:{port}"));
    let delivery = lines
        .iter()
        .find(|l| l["fields"]["message"] == "delivery")
        .unwrap_or_else(|| panic!("no delivery line: {lines:#?}"));
    assert_eq!(delivery["fields"]["delivery_id"], "json-log-1");
    assert_eq!(delivery["fields"]["event"], "issues");
    assert_eq!(delivery["fields"]["outcome"], "queued");
    assert!(
        lines
            .iter()
            .any(|l| l["fields"]["message"] == "job finished"),
        "{lines:#?}"
    );
}

/// A `--log` filter that does not parse is refused at start, not silently replaced.
#[test]
fn serve_refuses_a_log_filter_it_cannot_read() {
    let dir = super::common::tempdir();
    let mut child = Served(
        Command::new(env!("CARGO_BIN_EXE_git-agent"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--log",
                "git_agent=loud",
            ])
            .arg("--state-dir")
            .arg(dir.path())
            .env("GIT_AGENT_WEBHOOK_SECRET", "s")
            .env("GITHUB_TOKEN", "x")
            .env_remove("GIT_AGENT_DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // A server that started anyway would run until killed: wait a bounded time.
    let mut status = None;
    for _ in 0..400 {
        status = child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = status.expect("the server started with a filter it cannot read");
    assert_eq!(status.code(), Some(2));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("cannot read the log filter"), "{err}");
}

/// Two `serve` processes on one Postgres: deliveries sent to either (the same delivery to
/// both at once, too) are each worked exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_work_each_job_once() {
    let db_url = super::store::pg_fresh_url().await;
    let (api, fake) = fake_github().await;
    let ports = [free_port(), free_port()];
    let mut children: Vec<Served> = ports
        .iter()
        .map(|p| spawn_serve_url(&db_url, *p, &api, None))
        .collect();
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    for u in &urls {
        wait_healthy(u).await;
    }
    let c = client();
    let mut sends = Vec::new();
    for i in 0..12u64 {
        for u in &urls {
            // Every delivery goes to both servers at once.
            let (c, u) = (c.clone(), u.clone());
            sends.push(tokio::spawn(async move {
                deliver(
                    &c,
                    &u,
                    "issues",
                    &format!("pg-{i}"),
                    issue_payload(100 + i, "pg"),
                )
                .await
            }));
        }
    }
    for s in sends {
        let r = s.await.unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    let store = git_agent::store::PostgresStore::connect(&db_url)
        .await
        .unwrap();
    let mut finished = Vec::new();
    for _ in 0..400 {
        finished = store.recent(100).await.unwrap();
        if finished.len() == 12 && finished.iter().all(|j| j.state.is_finished()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(finished.len(), 12, "one job per delivery");
    for j in &finished {
        assert_eq!(j.state, JobState::Succeeded, "{j:?}");
        assert_eq!(j.attempts, 1, "claimed once: {j:?}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        fake.permission_calls.load(Ordering::SeqCst),
        12,
        "each job worked once"
    );
    assert_eq!(store.delivery_count().await.unwrap(), 12);
    for child in &mut children {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
