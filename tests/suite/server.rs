//! The webhook bot over real HTTP on loopback: signatures, size cap, dedup, redelivery,
//! workers, `/agent stop`, shutdown, health, metrics and the status page.
//!
//! The runner here is a test double of the run (what it does is not the point of these tests);
//! `serve_e2e.rs` drives the real runner.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use git_agent::server::{
    self, AppState, JobInput, JobOutcome, JobRunner, RunSummary, WorkerOptions, signature,
};
use git_agent::store::{JobState, SqliteStore, Store};
use secrecy::SecretString;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub const SECRET: &str = "It's a Secret to Everybody";

type Behaviour = dyn Fn(&JobInput, u32) -> Result<JobOutcome, String> + Send + Sync;

/// A runner whose answer is a function of the job and how many times it was called; jobs whose
/// label contains "block" wait for cancellation, "slow" take 300 ms. (The label, not the
/// title: a job keeps only what the agent reads of the payload, `trigger::Event::stored`.)
pub struct TestRunner {
    calls: AtomicUsize,
    running: Mutex<Vec<String>>,
    max_same_lane: AtomicUsize,
    behaviour: Box<Behaviour>,
}

impl TestRunner {
    pub fn new(
        f: impl Fn(&JobInput, u32) -> Result<JobOutcome, String> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(TestRunner {
            calls: AtomicUsize::new(0),
            running: Mutex::new(Vec::new()),
            max_same_lane: AtomicUsize::new(0),
            behaviour: Box::new(f),
        })
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

pub fn ran(detail: &str) -> JobOutcome {
    JobOutcome::Ran(RunSummary {
        run_id: "01TESTRUN".into(),
        state: "succeeded".into(),
        pr_url: Some("https://github.com/octo/repo/pull/1".into()),
        report: Some(format!("report of {detail}")),
        spend_usd: 0.5,
        detail: detail.into(),
    })
}

#[async_trait]
impl JobRunner for TestRunner {
    async fn run(&self, job: &JobInput, cancel: CancellationToken) -> server::Result<JobOutcome> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) as u32 + 1;
        let payload: Value = serde_json::from_slice(&job.payload).unwrap();
        let lane = server::lane_of(&job.event, &job.payload).unwrap_or_default();
        {
            let mut running = self.running.lock().unwrap();
            running.push(lane.clone());
            let same = running.iter().filter(|l| **l == lane).count();
            self.max_same_lane.fetch_max(same, Ordering::SeqCst);
        }
        let label = payload["label"]["name"].as_str().unwrap_or("");
        if label.contains("block") {
            cancel.cancelled().await;
        } else if label.contains("slow") {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        {
            let mut running = self.running.lock().unwrap();
            let i = running.iter().position(|l| *l == lane).unwrap();
            running.remove(i);
        }
        (self.behaviour)(job, n).map_err(|what| server::Error::Runner {
            job: job.job_id.clone(),
            what,
            source: None,
        })
    }
}

/// A plain HTTP client (reqwest is built without a default TLS provider).
pub fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub struct Bot {
    pub url: String,
    pub store: Arc<dyn Store>,
    pub shutdown: CancellationToken,
    pub workers: tokio::task::JoinSet<()>,
    pub server: tokio::task::JoinHandle<server::Result<()>>,
    pub _dir: tempfile::TempDir,
}

pub fn worker_opts(workers: usize) -> WorkerOptions {
    WorkerOptions {
        workers,
        lease: Duration::from_secs(10),
        heartbeat: Duration::from_millis(100),
        poll: Duration::from_millis(50),
        max_attempts: 3,
        grace: Duration::from_millis(200),
        owner: "test".into(),
    }
}

pub async fn start(runner: Arc<dyn JobRunner>, workers: usize) -> Bot {
    start_with(runner, workers, |_| {}).await
}

/// The status token of the bots `start` starts.
pub const STATUS_TOKEN: &str = "let-me-see";

/// [`start`], with the state changed by `configure` first (limits, tokens).
pub async fn start_with(
    runner: Arc<dyn JobRunner>,
    workers: usize,
    configure: impl FnOnce(&mut AppState),
) -> Bot {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("serve.db"))
            .await
            .unwrap(),
    );
    let mut state = AppState::new(store.clone(), SecretString::from(SECRET));
    state.status_token = Some(Arc::new(SecretString::from(STATUS_TOKEN)));
    configure(&mut state);
    let shutdown = CancellationToken::new();
    let workers = server::spawn_workers(
        store.clone(),
        runner,
        state.metrics.clone(),
        state.wake.clone(),
        worker_opts(workers),
        shutdown.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(server::serve(listener, state, shutdown.clone()));
    Bot {
        url,
        store,
        shutdown,
        workers,
        server,
        _dir: dir,
    }
}

/// An `issues.labeled` payload with the trigger label `agent`.
pub fn issue_payload(number: u64, title: &str) -> Vec<u8> {
    labeled_payload(number, title, "agent")
}

/// An `issues.labeled` payload with `label`, which the test runner reads ("block", "slow").
pub fn labeled_payload(number: u64, title: &str, label: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "action": "labeled",
        "label": {"name": label},
        "issue": {"number": number, "title": title, "body": "", "user": {"login": "octocat", "id": 1}},
        "repository": {"full_name": "octo/repo", "name": "repo", "owner": {"login": "octo"}},
        "sender": {"login": "octocat", "id": 1, "type": "User"},
    }))
    .unwrap()
}

pub fn comment_payload(number: u64, body: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "action": "created",
        "issue": {"number": number, "title": "t", "body": ""},
        "comment": {"id": 77, "body": body, "user": {"login": "octocat", "id": 1}},
        "repository": {"full_name": "octo/repo", "name": "repo", "owner": {"login": "octo"}},
        "sender": {"login": "octocat", "id": 1, "type": "User"},
    }))
    .unwrap()
}

pub async fn deliver(
    client: &reqwest::Client,
    url: &str,
    event: &str,
    delivery: &str,
    body: Vec<u8>,
) -> reqwest::Response {
    let sig = signature::sign(&SecretString::from(SECRET), &body);
    client
        .post(format!("{url}/webhook"))
        .header("X-GitHub-Event", event)
        .header("X-GitHub-Delivery", delivery)
        .header("X-Hub-Signature-256", sig)
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// Wait until the job of `delivery` reaches a finished state (or `state`), at most 20 s.
pub async fn wait_state(store: &Arc<dyn Store>, job: &str, want: JobState) {
    for _ in 0..400 {
        if store
            .job(job)
            .await
            .unwrap()
            .is_some_and(|j| j.state == want)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let j = store.job(job).await.unwrap();
    panic!("job {job} never reached {want:?}: {j:?}");
}

async fn job_of(resp: reqwest::Response) -> String {
    let v: Value = resp.json().await.unwrap();
    v["job"].as_str().unwrap().to_string()
}

fn ok_runner() -> Arc<TestRunner> {
    TestRunner::new(|_, _| Ok(ran("ok")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_published_signature_vector_is_accepted() {
    let bot = start(ok_runner(), 1).await;
    let client = client();
    let resp = client
        .post(format!("{}/webhook", bot.url))
        .header("X-GitHub-Event", "ping")
        .header("X-GitHub-Delivery", "vector")
        .header(
            "X-Hub-Signature-256",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        )
        .body("Hello, World!")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap()["ok"], "pong");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_signatures_are_401_and_store_nothing() {
    let runner = ok_runner();
    let bot = start(runner.clone(), 1).await;
    let client = client();
    let body = issue_payload(1, "fix it");
    let good = signature::sign(&SecretString::from(SECRET), &body);
    let sha1 = "sha1=7d38cdd689735b008b3c702edd92eea23791c5f6".to_string();
    let cases: Vec<(&str, Option<(&str, String)>)> = vec![
        ("missing", None),
        ("sha1 only", Some(("X-Hub-Signature", sha1))),
        (
            "wrong secret",
            Some((
                "X-Hub-Signature-256",
                signature::sign(&SecretString::from("nope"), &body),
            )),
        ),
        (
            "short",
            Some(("X-Hub-Signature-256", good[..40].to_string())),
        ),
        (
            "no prefix",
            Some(("X-Hub-Signature-256", good[7..].to_string())),
        ),
        (
            "flipped digit",
            Some((
                "X-Hub-Signature-256",
                format!(
                    "{}{}",
                    &good[..70],
                    if good.ends_with('0') { '1' } else { '0' }
                ),
            )),
        ),
    ];
    for (name, header) in cases {
        let mut req = client
            .post(format!("{}/webhook", bot.url))
            .header("X-GitHub-Event", "issues")
            .header("X-GitHub-Delivery", format!("d-{name}"))
            .body(body.clone());
        if let Some((h, v)) = header {
            req = req.header(h, v);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401, "{name}");
    }
    assert_eq!(bot.store.delivery_count().await.unwrap(), 0);
    assert!(bot.store.recent(10).await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(runner.calls(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_cap_24mb_accepted_25mb_plus_one_is_413() {
    let bot = start(ok_runner(), 1).await;
    let client = client();
    // 24 MB of signed JSON: accepted and queued.
    let mut v: Value = serde_json::from_slice(&issue_payload(3, "big")).unwrap();
    v["pad"] = Value::String("x".repeat(24 * 1024 * 1024));
    let resp = deliver(
        &client,
        &bot.url,
        "issues",
        "big-ok",
        serde_json::to_vec(&v).unwrap(),
    )
    .await;
    assert_eq!(resp.status(), 202);
    // 25 MB + 1, declared: refused on the length (the rest is discarded, never kept).
    let body = vec![b' '; server::MAX_BODY + 1];
    let resp = deliver(&client, &bot.url, "issues", "big-declared", body).await;
    assert_eq!(resp.status(), 413);
    // 25 MB + 1, streamed without a length: refused once the cap is passed.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..25)
        .map(|_| Ok(vec![b' '; 1024 * 1024]))
        .chain(std::iter::once(Ok(vec![b' '; 1])))
        .collect();
    let resp = client
        .post(format!("{}/webhook", bot.url))
        .header("X-GitHub-Event", "issues")
        .header("X-GitHub-Delivery", "big-streamed")
        .header("X-Hub-Signature-256", "sha256=00")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            chunks,
        )))
        .send()
        .await;
    match resp {
        Ok(r) => assert_eq!(r.status(), 413),
        // The server may close the connection while the client is still sending.
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }
    let recent = bot.store.recent(10).await.unwrap();
    assert_eq!(recent.len(), 1);
    assert_eq!(recent[0].delivery_id, "big-ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_identical_deliveries_make_one_job_and_one_run() {
    let runner = ok_runner();
    let bot = start(runner.clone(), 4).await;
    let client = client();
    let body = issue_payload(5, "same");
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (client, url, body) = (client.clone(), bot.url.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            deliver(&client, &url, "issues", "dup-50", body).await
        }));
    }
    let mut accepted = 0;
    let mut jobs = std::collections::HashSet::new();
    for t in tasks {
        let resp = t.await.unwrap();
        let status = resp.status().as_u16();
        assert!(status == 200 || status == 202, "{status}");
        if status == 202 {
            accepted += 1;
        }
        jobs.insert(job_of(resp).await);
    }
    assert_eq!(accepted, 1);
    assert_eq!(jobs.len(), 1);
    let job = jobs.into_iter().next().unwrap();
    wait_state(&bot.store, &job, JobState::Succeeded).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runner.calls(), 1, "one side effect");
    assert_eq!(bot.store.recent(100).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redelivery_reruns_a_failed_job_and_not_a_finished_one() {
    let runner = TestRunner::new(|_, n| {
        if n == 1 {
            Err("forge said 502".into())
        } else {
            Ok(ran("second try"))
        }
    });
    let bot = start(runner.clone(), 1).await;
    let client = client();
    let body = issue_payload(6, "flaky");
    let resp = deliver(&client, &bot.url, "issues", "redo", body.clone()).await;
    assert_eq!(resp.status(), 202);
    let job = job_of(resp).await;
    wait_state(&bot.store, &job, JobState::Failed).await;
    let failed = bot.store.job(&job).await.unwrap().unwrap();
    assert!(failed.detail.unwrap().contains("forge said 502"));
    let resp = deliver(&client, &bot.url, "issues", "redo", body.clone()).await;
    assert_eq!(resp.status(), 202);
    assert_eq!(resp.json::<Value>().await.unwrap()["outcome"], "requeued");
    wait_state(&bot.store, &job, JobState::Succeeded).await;
    let resp = deliver(&client, &bot.url, "issues", "redo", body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await.unwrap()["outcome"], "duplicate");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(runner.calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_events_are_2xx_and_ignored() {
    let bot = start(ok_runner(), 1).await;
    let client = client();
    let resp = deliver(
        &client,
        &bot.url,
        "star",
        "u-1",
        b"{\"action\":\"created\"}".to_vec(),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(resp.json::<Value>().await.unwrap()["ignored"].is_string());
    // A signed body that is not JSON, for an event we handle: 400, never 5xx.
    let resp = deliver(
        &client,
        &bot.url,
        "issues",
        "u-2",
        b"\xff{not json".to_vec(),
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"],
        "payload is not JSON"
    );
    // JSON, but not an event's shape (a repository that is not an object): 400 too.
    let resp = deliver(
        &client,
        &bot.url,
        "issues",
        "u-3",
        b"{\"action\":\"labeled\",\"repository\":\"o/r\"}".to_vec(),
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"],
        "payload does not have the shape of a GitHub event"
    );
    assert_eq!(bot.store.delivery_count().await.unwrap(), 0);
}

/// Every method and path goes through the one router: `POST /webhook` is the webhook, other
/// methods and paths are answered as the router answers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_methods_and_paths_are_the_routers() {
    let bot = start(ok_runner(), 1).await;
    let client = client();
    let get = client
        .get(format!("{}/webhook", bot.url))
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    let elsewhere = client
        .post(format!("{}/webhooks", bot.url))
        .body(issue_payload(1, "t"))
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), 404);
    // With a query string, still the webhook (and still refused unsigned).
    let unsigned = client
        .post(format!("{}/webhook?from=test", bot.url))
        .body(issue_payload(1, "t"))
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status(), 401);
    let health = client
        .get(format!("{}/healthz", bot.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(bot.store.delivery_count().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_stop_cancels_the_running_job_of_its_issue() {
    let runner = TestRunner::new(|job, _| {
        if job.event == "issue_comment" {
            Ok(JobOutcome::Stop {
                lane: server::lane_of(&job.event, &job.payload).unwrap(),
            })
        } else {
            Ok(ran("finished"))
        }
    });
    let bot = start(runner.clone(), 1).await;
    let client = client();
    let job = job_of(
        deliver(
            &client,
            &bot.url,
            "issues",
            "s-1",
            labeled_payload(8, "block me", "block"),
        )
        .await,
    )
    .await;
    wait_state(&bot.store, &job, JobState::Running).await;
    // A second request on the same issue waits behind the first.
    let queued = job_of(
        deliver(
            &client,
            &bot.url,
            "issues",
            "s-2",
            labeled_payload(8, "block too", "block"),
        )
        .await,
    )
    .await;
    // The only run worker is held by the blocked job; the control worker takes the stop.
    let stop = job_of(
        deliver(
            &client,
            &bot.url,
            "issue_comment",
            "s-3",
            comment_payload(8, "/agent stop"),
        )
        .await,
    )
    .await;
    assert_eq!(bot.store.job(&stop).await.unwrap().unwrap().lane, None);
    wait_state(&bot.store, &stop, JobState::Succeeded).await;
    wait_state(&bot.store, &job, JobState::Cancelled).await;
    wait_state(&bot.store, &queued, JobState::Cancelled).await;
    let j = bot.store.job(&stop).await.unwrap().unwrap();
    assert!(
        j.detail
            .unwrap()
            .contains("2 job(s) of octo/repo#8 stopped")
    );
    assert_eq!(runner.calls(), 2, "the queued request never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_per_issue_even_with_idle_workers() {
    let runner = ok_runner();
    let bot = start(runner.clone(), 4).await;
    let client = client();
    let mut jobs = Vec::new();
    for i in 0..6 {
        let resp = deliver(
            &client,
            &bot.url,
            "issues",
            &format!("lane-{i}"),
            labeled_payload(9, "slow", "slow"),
        )
        .await;
        jobs.push(job_of(resp).await);
    }
    for job in &jobs {
        wait_state(&bot.store, job, JobState::Succeeded).await;
    }
    assert_eq!(runner.calls(), 6);
    assert_eq!(runner.max_same_lane.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_a_running_job_for_the_next_process() {
    let runner = ok_runner();
    let mut bot = start(runner.clone(), 1).await;
    let client = client();
    let job = job_of(
        deliver(
            &client,
            &bot.url,
            "issues",
            "sd-1",
            labeled_payload(10, "block", "block"),
        )
        .await,
    )
    .await;
    wait_state(&bot.store, &job, JobState::Running).await;
    bot.shutdown.cancel();
    while bot.workers.join_next().await.is_some() {}
    bot.server.await.unwrap().unwrap();
    let j = bot.store.job(&job).await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Queued, "released, not lost");
    assert_eq!(j.lease_owner, None);
    assert_eq!(j.attempts, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_metrics_and_status_page() {
    let runner = TestRunner::new(|_, _| {
        Ok(JobOutcome::Ran(RunSummary {
            run_id: "01RUN<b>".into(),
            state: "succeeded".into(),
            pr_url: Some("https://github.com/octo/repo/pull/42".into()),
            report: Some("<script>alert(1)</script> all green".into()),
            spend_usd: 1.25,
            detail: "tests pass".into(),
        }))
    });
    let bot = start(runner, 1).await;
    let client = client();
    let resp = client
        .get(format!("{}/healthz", bot.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let job = job_of(
        deliver(
            &client,
            &bot.url,
            "issues",
            "m-1",
            issue_payload(11, "<img src=x>"),
        )
        .await,
    )
    .await;
    wait_state(&bot.store, &job, JobState::Succeeded).await;
    deliver(&client, &bot.url, "star", "m-2", b"{}".to_vec()).await;
    // Unsigned requests are counted without the event name they claim.
    for i in 0..3 {
        let resp = client
            .post(format!("{}/webhook", bot.url))
            .header("x-github-event", format!("made-up-{i}"))
            .header("x-github-delivery", format!("m-u{i}"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
    }

    let metrics = client
        .get(format!("{}/metrics", bot.url))
        .bearer_auth("let-me-see")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("git_agent_deliveries_total{event=\"issues\",outcome=\"queued\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("git_agent_deliveries_total{event=\"star\",outcome=\"ignored\"} 1"));
    assert!(
        metrics.contains(
            "git_agent_deliveries_total{event=\"(unverified)\",outcome=\"unauthorized\"} 3"
        ),
        "{metrics}"
    );
    assert!(!metrics.contains("made-up"), "{metrics}");
    assert!(metrics.contains("git_agent_runs_total{state=\"succeeded\"} 1"));
    assert!(metrics.contains("git_agent_jobs{state=\"succeeded\"} 1"));
    assert!(metrics.contains("git_agent_queue_depth 0"));
    assert!(metrics.contains("git_agent_model_spend_usd_total 1.25"));

    let page = client.get(format!("{}/", bot.url)).send().await.unwrap();
    assert_eq!(page.status(), 401);
    let page = client
        .get(format!("{}/?token=wrong", bot.url))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 401);
    let page = client
        .get(format!("{}/", bot.url))
        .bearer_auth("let-me-see")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("href=\"https://github.com/octo/repo/pull/42\""));
    assert!(html.contains("01RUN&lt;b&gt;"));
    assert!(!html.contains("01RUN<b>"));
    assert!(html.contains("octo/repo"));
    assert!(html.contains("issues.labeled"));
    assert!(html.contains("$1.25"));
    let report = client
        .get(format!("{}/jobs/{job}/report", bot.url))
        .bearer_auth("let-me-see")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(report.contains("&lt;script&gt;alert(1)&lt;/script&gt; all green"));
    assert!(!report.contains("<script>"));
}

/// Chromium driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: fd 3
/// reads commands, fd 4 writes answers, each message a JSON text ended by a NUL byte).
struct Browser {
    child: std::process::Child,
    commands: std::process::ChildStdin,
    answers: std::sync::mpsc::Receiver<Value>,
    next: u64,
    profile: tempfile::TempDir,
}

impl Browser {
    fn launch(chromium: &str) -> Browser {
        use std::io::BufRead as _;
        let profile = tempfile::tempdir().unwrap();
        // The shell puts our pipes on fds 3 and 4, where Chromium looks for them.
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null"#)
            .arg(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                // A container's /dev/shm is often 64 MiB, too small for Chromium's renderer.
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(profile.path().join("stderr.log")).unwrap())
            .spawn()
            .unwrap();
        let commands = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, answers) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut out = std::io::BufReader::new(out);
            let mut message = Vec::new();
            while out.read_until(0, &mut message).unwrap_or(0) > 0 {
                message.pop();
                if let Ok(v) = serde_json::from_slice::<Value>(&message)
                    && tx.send(v).is_err()
                {
                    return;
                }
                message.clear();
            }
        });
        Browser {
            child,
            commands,
            answers,
            next: 0,
            profile,
        }
    }

    /// Send `method` (to `session` when given) and wait for its answer's `result`.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.try_call(session, method, params)
            .unwrap_or_else(|answer| panic!("{method}: {answer}"))
    }

    /// Send `method` and wait for its answer: its `result`, or the whole answer when it is an
    /// error (an evaluation while the page navigates finds no context, for one).
    fn try_call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        use std::io::Write as _;
        self.next += 1;
        let mut message = json!({"id": self.next, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.commands.write_all(&bytes).unwrap();
        loop {
            // A cold Chromium on a loaded two-core machine takes its time for the first answer.
            let answer = match self.answers.recv_timeout(Duration::from_secs(90)) {
                Ok(answer) => answer,
                Err(why) => panic!("no answer to {method} ({why}); {}", self.state()),
            };
            if answer["id"] == json!(self.next) {
                return match answer["error"].is_null() {
                    true => Ok(answer["result"].clone()),
                    false => Err(answer),
                };
            }
        }
    }

    /// Whether Chromium still runs, and the end of what it printed: what a failure needs.
    fn state(&mut self) -> String {
        let status = self.child.try_wait().unwrap();
        let log =
            std::fs::read_to_string(self.profile.path().join("stderr.log")).unwrap_or_default();
        let tail: Vec<&str> = log
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!(
            "chromium exited: {status:?}; its last output:\n{}",
            tail.join("\n")
        )
    }

    /// The value of `expression` in the page of `session`.
    fn eval(&mut self, session: &str, expression: &str) -> Value {
        self.try_eval(session, expression)
            .unwrap_or_else(|answer| panic!("{expression}: {answer}"))
    }

    /// The value of `expression`, or why it has none: the protocol's error, or the page's
    /// exception (a page between two documents has none to run it in).
    fn try_eval(&mut self, session: &str, expression: &str) -> Result<Value, Value> {
        let r = self.try_call(
            Some(session),
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        )?;
        match r.get("exceptionDetails") {
            Some(e) => Err(e.clone()),
            None => Ok(r["result"]["value"].clone()),
        }
    }

    /// Wait until `expression` is a string in the page, and return it. A page that is
    /// navigating answers with an error; that is "not yet", as a null is.
    fn wait_for(&mut self, session: &str, expression: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut last = Value::Null;
        while std::time::Instant::now() < deadline {
            match self.try_eval(session, expression) {
                Ok(Value::String(s)) => return s,
                Ok(v) | Err(v) => last = v,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "the page never had {expression} in 60 s; last answer: {last}; {}",
            self.state()
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status page in Debian's Chromium (`GIT_AGENT_TEST_CHROMIUM`, set by
/// `.ci/setup/chromium.sh`), as a person uses it: the page asks for the token, the login
/// form sets an HttpOnly cookie, the page shows a finished run with its state and links, and
/// the report link works with the cookie alone. Guards issue 20's "the status token never in
/// a URL": no address the browser visits, and no link, carries it; scripts cannot read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_in_headless_chromium_signs_in_and_shows_a_finished_run() {
    let chromium = std::env::var("GIT_AGENT_TEST_CHROMIUM")
        .expect("GIT_AGENT_TEST_CHROMIUM is not set: run .ci/run, or source .ci/setup/chromium.sh");
    let bot = start(ok_runner(), 1).await;
    let client = client();
    let job = job_of(
        deliver(
            &client,
            &bot.url,
            "issues",
            "ch-1",
            issue_payload(12, "<b>bold</b> title"),
        )
        .await,
    )
    .await;
    wait_state(&bot.store, &job, JobState::Succeeded).await;
    let url = bot.url.clone();
    let job2 = job.clone();
    let (dom, seen, report) = tokio::task::spawn_blocking(move || {
        let mut b = Browser::launch(&chromium);
        let target = b.call(None, "Target.createTarget", json!({"url": format!("{url}/")}));
        let attached = b.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        let session = attached["sessionId"].as_str().unwrap().to_string();
        // Without a session the page is the login form.
        b.wait_for(
            &session,
            "document.getElementById('login') ? 'form' : null",
        );
        b.eval(
            &session,
            &format!(
                "document.querySelector('input[name=token]').value = '{STATUS_TOKEN}'; \
                 document.getElementById('login').submit(); true"
            ),
        );
        let dom = b.wait_for(
            &session,
            "document.getElementById('runs') ? document.documentElement.outerHTML : null",
        );
        let seen = b.eval(
            &session,
            "JSON.stringify({href: location.href, cookie: document.cookie})",
        );
        b.eval(&session, &format!("document.querySelector('tr[data-job=\"{job2}\"] a.report').click(); true"));
        let report = b.wait_for(
            &session,
            "document.getElementById('report') ? document.getElementById('report').textContent : null",
        );
        (dom, seen, report)
    })
    .await
    .unwrap();
    let row_start = dom
        .find(&format!("data-job=\"{job}\""))
        .expect("the job's row");
    let row = &dom[row_start..dom[row_start..].find("</tr>").unwrap() + row_start];
    assert!(row.contains("<td class=\"state\">succeeded</td>"), "{row}");
    assert!(
        row.contains("<a class=\"pr\" href=\"https://github.com/octo/repo/pull/1\">"),
        "{row}"
    );
    assert!(
        row.contains(&format!("href=\"/jobs/{job}/report\"")),
        "{row}"
    );
    assert!(row.contains("octo/repo"));
    assert!(!dom.contains(STATUS_TOKEN), "the page carries the token");
    let seen: Value = serde_json::from_str(seen.as_str().unwrap()).unwrap();
    assert_eq!(seen["href"], json!(format!("{}/", bot.url)), "{seen}");
    assert_eq!(
        seen["cookie"],
        json!(""),
        "a script can read the session: {seen}"
    );
    assert_eq!(report, "report of ok");
}

/// Guards issue 20's "/metrics behind the token": without it `/metrics` is refused (it names
/// repositories and events), with it served; a public opt-out serves it to anyone; with no
/// token configured and no opt-out it is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_the_status_token_unless_made_public() {
    let client = client();
    let bot = start(ok_runner(), 1).await;
    let get = |url: String| client.get(url);
    let url = format!("{}/metrics", bot.url);
    assert_eq!(get(url.clone()).send().await.unwrap().status(), 401);
    let wrong = get(url.clone()).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let in_url = get(format!("{url}?token={STATUS_TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(in_url.status(), 401);
    let right = get(url).bearer_auth(STATUS_TOKEN).send().await.unwrap();
    assert_eq!(right.status(), 200);
    assert!(
        right
            .text()
            .await
            .unwrap()
            .contains("git_agent_queue_depth")
    );

    let public = start_with(ok_runner(), 1, |st| st.public_metrics = true).await;
    let open = get(format!("{}/metrics", public.url)).send().await.unwrap();
    assert_eq!(open.status(), 200);
    // Public metrics do not open the status page.
    let page = get(format!("{}/", public.url)).send().await.unwrap();
    assert_eq!(page.status(), 401);

    let off = start_with(ok_runner(), 1, |st| st.status_token = None).await;
    let resp = get(format!("{}/metrics", off.url)).send().await.unwrap();
    assert_eq!(resp.status(), 404);
}

/// Guards issue 20's "the status token only in a header or a login cookie": a token in the
/// URL is refused even when right; the login form sets an HttpOnly, SameSite=Strict cookie
/// that holds no token; the page and its links carry no token; a forged or cleared cookie
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_token_is_taken_from_a_header_or_a_login_cookie_never_the_url() {
    let bot = start(ok_runner(), 1).await;
    // No redirects followed: the login's answer is what is checked.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let job =
        job_of(deliver(&client, &bot.url, "issues", "tok-1", issue_payload(5, "t")).await).await;
    wait_state(&bot.store, &job, JobState::Succeeded).await;

    for path in ["/".to_string(), format!("/jobs/{job}/report")] {
        let resp = client
            .get(format!("{}{path}?token={STATUS_TOKEN}", bot.url))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{path}");
        assert!(
            resp.text()
                .await
                .unwrap()
                .contains("not accepted in the URL")
        );
    }
    // Without a session the page is the login form.
    let page = client.get(format!("{}/", bot.url)).send().await.unwrap();
    assert_eq!(page.status(), 401);
    assert!(page.text().await.unwrap().contains("action=\"/login\""));

    let login = |token: &str| {
        client
            .post(format!("{}/login", bot.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
    };
    assert_eq!(login("wrong").await.unwrap().status(), 401);
    let resp = login(STATUS_TOKEN).await.unwrap();
    assert_eq!(resp.status(), 303);
    assert_eq!(resp.headers()["location"], "/");
    let set = resp.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(
        !set.contains(STATUS_TOKEN),
        "the cookie holds the token: {set}"
    );
    let cookie = set.split(';').next().unwrap().to_string();

    let page = client
        .get(format!("{}/", bot.url))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["cache-control"], "no-store");
    let html = page.text().await.unwrap();
    assert!(
        html.contains(&format!("href=\"/jobs/{job}/report\"")),
        "{html}"
    );
    assert!(
        !html.contains(STATUS_TOKEN) && !html.contains("token="),
        "{html}"
    );
    let report = client
        .get(format!("{}/jobs/{job}/report", bot.url))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(report.status(), 200);
    let metrics = client
        .get(format!("{}/metrics", bot.url))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);

    // A cookie with its end moved, or another token's, is refused.
    let (name, value) = cookie.split_once('=').unwrap();
    let (expires, mac) = value.split_once('.').unwrap();
    let later: i64 = expires.parse::<i64>().unwrap() + 3600;
    for forged in [
        format!("{name}={later}.{mac}"),
        format!("{name}={STATUS_TOKEN}"),
    ] {
        let resp = client
            .get(format!("{}/", bot.url))
            .header("cookie", &forged)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{forged}");
    }
    let out = client
        .post(format!("{}/logout", bot.url))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    assert!(
        out.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
}
