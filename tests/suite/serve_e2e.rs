//! One real delivery end to end through `git agent serve` and its production runner: GitHub's
//! published `issues.labeled` example, signed, posted to the bot; the trigger asks the fake
//! GitHub (checked against GitHub's REST description) for the sender's permission; the run
//! mirrors the repository from its remote, fixes the failing Python test with a scripted
//! model in the sandbox, pushes the branch and opens one draft pull request — through
//! `run::publish`, the path the Action takes: 👀, one progress comment edited in place,
//! `/agent approve` and `/agent retry`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use git_agent::store::{JobState, SqliteStore, Store};
use serde_json::{Value, json};

use super::common::free_port;
use super::github::fake::{Fake, npm_dir};
use super::server::{client, deliver};

pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    super::common::git_with(dir, &["init.defaultBranch=master"], args)
}

fn labeled_example() -> Value {
    let path = npm_dir().join("@octokit/webhooks-examples/api.github.com/index.json");
    let all: Vec<Value> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let issues = all.iter().find(|e| e["name"] == "issues").unwrap();
    let mut p = issues["examples"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "labeled")
        .unwrap()
        .clone();
    p["label"]["name"] = json!("agent");
    p
}

pub(super) struct World {
    pub(super) tmp: tempfile::TempDir,
    pub(super) payload: Value,
    pub(super) owner: String,
    pub(super) name: String,
    pub(super) remote: std::path::PathBuf,
    pub(super) fake: std::sync::Arc<Fake>,
    model: String,
    /// Variables the bot gets on top of (or, when `None`, instead of) the defaults.
    pub(super) serve_env: Vec<(String, Option<std::ffi::OsString>)>,
    /// Run the bot as `nobody` (the unprivileged path: no cgroup, no spawner); the world's
    /// files are then handed to it.
    pub(super) unprivileged: bool,
}

async fn world() -> World {
    world_with(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["calc.py"]}]}}]}),
        edit_line(),
        finish_line(),
    ])
    .await
}

pub(super) fn edit_line() -> Value {
    json!({"role": "coder", "tool_calls": [{"name": "edit_file", "arguments": {
        "path": "calc.py", "old_text": "def add(a, b):\n    return a - b",
        "new_text": "def add(a, b):\n    return a + b"}}]})
}

pub(super) fn finish_line() -> Value {
    json!({"role": "coder", "tool_calls": [{"name": "finish", "arguments": {"summary": "add adds"}}]})
}

pub(super) async fn world_with(lines: &[Value]) -> World {
    let tmp = super::common::tempdir();
    let payload = labeled_example();
    let owner = payload["repository"]["owner"]["login"]
        .as_str()
        .unwrap()
        .to_string();
    let name = payload["repository"]["name"].as_str().unwrap().to_string();
    let base = payload["repository"]["default_branch"]
        .as_str()
        .unwrap()
        .to_string();
    let number = payload["issue"]["number"].as_u64().unwrap();
    let sender = payload["sender"]["login"].as_str().unwrap().to_string();

    // The repository on its "remote": the Python fixture whose test fails.
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/python-add");
    for f in ["calc.py", "pyproject.toml", "tests/test_calc.py"] {
        std::fs::create_dir_all(work.join(f).parent().unwrap()).unwrap();
        std::fs::copy(fixture.join(f), work.join(f)).unwrap();
    }
    std::fs::write(work.join(".gitignore"), "__pycache__/\n.pytest_cache/\n").unwrap();
    git(&work, &["init", "-q", "-b", &base]);
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "fixture"]);
    let remote = tmp
        .path()
        .join("remotes")
        .join(&owner)
        .join(format!("{name}.git"));
    std::fs::create_dir_all(remote.parent().unwrap()).unwrap();
    git(
        tmp.path(),
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            remote.to_str().unwrap(),
        ],
    );

    let fake = Fake::start("").await;
    fake.grant(&sender, "admin", "admin");
    fake.add_issue(
        number,
        payload["issue"]["title"].as_str().unwrap(),
        "calc.add subtracts; make it add.",
        &sender,
        false,
    );

    let script = tmp.path().join("script.jsonl");
    std::fs::write(
        &script,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let model = format!("scripted:{}", script.display());
    std::fs::create_dir_all(tmp.path().join("config/git-agent")).unwrap();
    World {
        tmp,
        payload,
        owner,
        name,
        remote,
        fake,
        model,
        serve_env: Vec::new(),
        unprivileged: false,
    }
}

impl World {
    fn serve(&self, port: u16, kill_at: Option<&str>) -> std::process::Child {
        let mut cmd = if self.unprivileged {
            let st = Command::new("chown")
                .args(["-R", "nobody:nogroup"])
                .arg(self.tmp.path())
                .status()
                .unwrap();
            assert!(st.success());
            let mut c = Command::new("setpriv");
            c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
                .arg(env!("CARGO_BIN_EXE_git-agent"))
                // nobody cannot read root's toolchains or home; the system's are enough.
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("HOME", self.tmp.path().join("home"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_git-agent"))
        };
        cmd.args(["serve", "--workers", "1", "--lease-secs", "2"])
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--state-dir")
            .arg(self.tmp.path().join("state"))
            .arg("--github-api")
            .arg(self.fake.api_base())
            .arg("--git-base")
            .arg(self.tmp.path().join("remotes"))
            .env("GIT_AGENT_WEBHOOK_SECRET", super::server::SECRET)
            .env("GITHUB_TOKEN", "test-token")
            .env("GIT_AGENT_MODELS_PLANNER", &self.model)
            .env("GIT_AGENT_MODELS_CODER", &self.model)
            .env("XDG_CONFIG_HOME", self.tmp.path().join("config"))
            .env("GIT_AGENT_LOG", "warn")
            .env_remove("GIT_AGENT_DATABASE_URL")
            .stdout(Stdio::null());
        for (k, v) in &self.serve_env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        match kill_at {
            Some(k) => cmd.env("GIT_AGENT_TEST_KILL_AT", k),
            None => cmd.env_remove("GIT_AGENT_TEST_KILL_AT"),
        };
        cmd.spawn().unwrap()
    }

    async fn store(&self) -> SqliteStore {
        SqliteStore::open(&self.tmp.path().join("state/serve.db"))
            .await
            .unwrap()
    }

    fn number(&self) -> u64 {
        self.payload["issue"]["number"].as_u64().unwrap()
    }

    /// The bot's progress comments on the issue.
    pub(super) fn progress_comments(&self) -> Vec<String> {
        let n = self.number();
        self.fake
            .world()
            .comments
            .iter()
            .filter(|(i, c)| {
                *i == n
                    && c["body"]
                        .as_str()
                        .unwrap_or("")
                        .contains("git-agent:progress")
            })
            .map(|(_, c)| c["body"].as_str().unwrap().to_string())
            .collect()
    }

    /// `/agent …` from the labeling sender, as an `issue_comment.created` delivery of the same
    /// repository and issue; returns the payload and the comment id.
    pub(super) fn command(&self, text: &str) -> (Value, u64) {
        let path = npm_dir().join("@octokit/webhooks-examples/api.github.com/index.json");
        let all: Vec<Value> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let mut e = all
            .iter()
            .find(|e| e["name"] == "issue_comment")
            .and_then(|e| {
                e["examples"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| x["action"] == "created")
            })
            .unwrap()
            .clone();
        let id = self.fake.add_comment(
            self.number(),
            self.payload["sender"]["login"].as_str().unwrap(),
            false,
            text,
        );
        e["comment"]["id"] = json!(id);
        e["comment"]["body"] = json!(text);
        e["comment"]["user"] = self.payload["sender"].clone();
        e["sender"] = self.payload["sender"].clone();
        e["repository"] = self.payload["repository"].clone();
        e["issue"] = self.payload["issue"].clone();
        e["issue"].as_object_mut().unwrap().remove("pull_request");
        (e, id)
    }

    fn check_one_pr_and_the_fixed_branch(&self) {
        let posts = self.fake.requests(
            "POST",
            &format!("/repos/{}/{}/pulls", self.owner, self.name),
        );
        assert_eq!(posts.len(), 1, "one draft PR");
        self.fake.assert_clean();
        let branches = git(
            &self.remote,
            &["for-each-ref", "--format=%(refname)", "refs/heads/agent/"],
        );
        let all: Vec<&str> = branches.lines().collect();
        assert_eq!(all.len(), 1, "one branch: {all:?}");
        let calc = git(&self.remote, &["show", &format!("{}:calc.py", all[0])]);
        assert!(calc.contains("return a + b"), "{calc}");
    }
}

async fn wait_healthy(url: &str) {
    let c = client();
    for _ in 0..200 {
        if c.get(format!("{url}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} never became healthy");
}

/// A `git agent serve` child of a test, with its client and store.
pub(super) struct Running {
    child: std::process::Child,
    url: String,
    c: reqwest::Client,
    store: SqliteStore,
}

impl Running {
    pub(super) async fn start(w: &World, port: u16, kill_at: Option<&str>) -> Running {
        let url = format!("http://127.0.0.1:{port}");
        let child = w.serve(port, kill_at);
        wait_healthy(&url).await;
        Running {
            child,
            url,
            c: client(),
            store: w.store().await,
        }
    }

    /// Post `payload` as `event` with the delivery id `delivery`; the HTTP status.
    pub(super) async fn post(&self, event: &str, delivery: &str, payload: &Value) -> u16 {
        let body = serde_json::to_vec(payload).unwrap();
        deliver(&self.c, &self.url, event, delivery, body)
            .await
            .status()
            .as_u16()
    }

    /// Wait for the job of `delivery` to finish.
    pub(super) async fn finished(&self, delivery: &str) -> git_agent::store::Job {
        for _ in 0..1200 {
            let jobs = self.store.recent(20).await.unwrap();
            if let Some(j) = jobs
                .into_iter()
                .find(|j| j.delivery_id == delivery && j.state.is_finished())
            {
                return j;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the job of {delivery} did not finish within two minutes: {:?}",
            self.store.recent(20).await.unwrap()
        );
    }

    pub(super) fn stop(self) {
        drop(self);
    }
}

/// A test that fails mid-way does not leave its bot running (it would hold the test
/// harness's output open).
impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labeled_issue_becomes_one_draft_pr_through_the_bot() {
    let w = world().await;
    let bot = Running::start(&w, free_port(), None).await;
    assert_eq!(bot.post("issues", "e2e-1", &w.payload).await, 202);
    let job = bot.finished("e2e-1").await;
    assert_eq!(job.state, JobState::Succeeded, "{job:?}");
    assert_eq!(job.run_state.as_deref(), Some("succeeded"), "{job:?}");
    let pr_url = job.pr_url.clone().expect("a pull request");
    assert!(pr_url.starts_with("https://github.com/"), "{pr_url}");
    assert!(
        job.report
            .as_deref()
            .unwrap_or("")
            .contains("### Verification")
    );
    // A redelivery of the finished job does nothing.
    assert_eq!(bot.post("issues", "e2e-1", &w.payload).await, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    w.check_one_pr_and_the_fixed_branch();
    // One progress comment, edited in place to the end state with the PR's link.
    let comments = w.progress_comments();
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert!(comments[0].contains("✅ succeeded"), "{}", comments[0]);
    assert!(comments[0].contains(&pr_url), "{}", comments[0]);
    bot.stop();
}

/// The worker is killed (SIGKILL) at `point` of its job; after a restart the job is claimed
/// again once its lease runs out and the same run is continued: one run, one branch, one
/// draft PR, one progress comment, the job finished once (on its second attempt).
async fn worker_killed_at(point: &str) {
    let w = world().await;
    let port = free_port();
    let mut bot = Running::start(&w, port, Some(point)).await;
    let delivery = format!("e2e-kill-{point}");
    assert_eq!(bot.post("issues", &delivery, &w.payload).await, 202);
    let status = bot.child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{point}: killed there"
    );
    assert_eq!(
        bot.store.recent(5).await.unwrap()[0].state,
        JobState::Running,
        "{point}"
    );

    let bot = Running::start(&w, port, None).await;
    let job = bot.finished(&delivery).await;
    assert_eq!(job.state, JobState::Succeeded, "{point}: {job:?}");
    assert_eq!(
        job.run_state.as_deref(),
        Some("succeeded"),
        "{point}: {job:?}"
    );
    assert_eq!(job.attempts, 2, "{point}");
    assert!(job.pr_url.is_some(), "{point}: {job:?}");
    let runs: Vec<_> = std::fs::read_dir(w.tmp.path().join("state/repos"))
        .unwrap()
        .flat_map(|o| std::fs::read_dir(o.unwrap().path()).unwrap())
        .flat_map(|r| std::fs::read_dir(r.unwrap().path().join("agent/runs")).unwrap())
        .collect();
    assert_eq!(runs.len(), 1, "{point}: one run, continued");
    w.check_one_pr_and_the_fixed_branch();
    let comments = w.progress_comments();
    assert_eq!(comments.len(), 1, "{point}: {comments:#?}");
    assert!(
        comments[0].contains("✅ succeeded"),
        "{point}: {}",
        comments[0]
    );
    // A redelivery of the finished job does nothing.
    assert_eq!(bot.post("issues", &delivery, &w.payload).await, 200);
    bot.stop();
}

// One test per stage of a job, so they run side by side: in the run (worktree, baseline,
// plan, commit) and in its publishing (the branch pushed, the draft PR opened but not yet
// recorded).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_after_the_worktree_finishes_the_job_once() {
    worker_killed_at("after-worktree").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_after_the_baseline_finishes_the_job_once() {
    worker_killed_at("after-baseline").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_after_the_plan_finishes_the_job_once() {
    worker_killed_at("after-plan").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_after_the_commit_finishes_the_job_once() {
    worker_killed_at("after-commit").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_after_the_push_finishes_the_job_once() {
    worker_killed_at("after-push").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_after_the_pr_is_opened_finishes_the_job_once() {
    worker_killed_at("after-pr").await;
}

/// A policy `ask` pauses the bot's run (no PR; the progress comment says what waits);
/// `/agent approve` in the issue continues the same run to its draft PR, the approved
/// command having run, with 👀 on the approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_approve_continues_the_bots_paused_run() {
    let w = world_with(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["calc.py", "approved.txt"]}]}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "run", "arguments": {"command": "touch approved.txt"}}]}),
        edit_line(),
        finish_line(),
    ])
    .await;
    std::fs::write(
        w.tmp.path().join("config/git-agent/config.toml"),
        "[[policy.commands]]\nprefix = [\"touch\"]\ndecision = \"ask\"\n",
    )
    .unwrap();
    let bot = Running::start(&w, free_port(), None).await;
    assert_eq!(bot.post("issues", "ask-1", &w.payload).await, 202);
    let job = bot.finished("ask-1").await;
    assert_eq!(
        job.run_state.as_deref(),
        Some("awaiting_approval"),
        "{job:?}"
    );
    assert!(w.fake.world().pulls.is_empty());
    let comments = w.progress_comments();
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert!(
        comments[0].contains("✋ awaiting approval"),
        "{}",
        comments[0]
    );
    assert!(
        comments[0].contains("touch approved.txt"),
        "{}",
        comments[0]
    );
    let run_id = job.run_id.clone().unwrap();

    let (event, comment_id) = w.command("/agent approve");
    assert_eq!(bot.post("issue_comment", "approve-1", &event).await, 202);
    let job = bot.finished("approve-1").await;
    assert_eq!(job.run_state.as_deref(), Some("succeeded"), "{job:?}");
    assert_eq!(job.run_id.as_deref(), Some(run_id.as_str()), "the same run");
    w.check_one_pr_and_the_fixed_branch();
    let pulls = w.fake.world().pulls.clone();
    let branch = pulls[0]["head"]["ref"].as_str().unwrap().to_string();
    let files = git(&w.remote, &["show", "--name-only", "--format=", &branch]);
    assert!(
        files.contains("approved.txt"),
        "the approved command ran: {files}"
    );
    let comments = w.progress_comments();
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert!(comments[0].contains("✅ succeeded"), "{}", comments[0]);
    assert!(w.fake.world().reactions.iter().any(|(path, r)| {
        path.ends_with(&format!("/issues/comments/{comment_id}/reactions")) && r == "eyes"
    }));
    w.fake.assert_clean();
    bot.stop();
}

/// `/agent retry` after a finished run starts the request again as a new run on a branch of
/// its own (a second PR); a redelivery of the retry comment does no more work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_retry_runs_the_request_again_as_a_new_run() {
    let w = world().await;
    let bot = Running::start(&w, free_port(), None).await;
    assert_eq!(bot.post("issues", "first", &w.payload).await, 202);
    let first = bot.finished("first").await;
    assert_eq!(first.run_state.as_deref(), Some("succeeded"), "{first:?}");

    let (event, _) = w.command("/agent retry");
    assert_eq!(bot.post("issue_comment", "retry-1", &event).await, 202);
    let second = bot.finished("retry-1").await;
    assert_eq!(second.run_state.as_deref(), Some("succeeded"), "{second:?}");
    assert_ne!(second.run_id, first.run_id, "a new run");
    assert_ne!(second.pr_url, first.pr_url, "its own PR");
    assert_eq!(bot.post("issue_comment", "retry-1", &event).await, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let branches = git(
        &w.remote,
        &["for-each-ref", "--format=%(refname)", "refs/heads/agent/"],
    );
    assert_eq!(branches.lines().count(), 2, "{branches}");
    assert_eq!(w.fake.world().pulls.len(), 2);
    assert_eq!(w.progress_comments().len(), 2);
    w.fake.assert_clean();
    bot.stop();
}

/// `/agent stop` while the bot's run is busy (a long command): the run ends as cancelled —
/// its record and the progress comment say so — and no pull request is opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_stop_ends_the_bots_run_as_cancelled() {
    let w = world_with(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["calc.py"]}]}}]}),
        edit_line(),
        json!({"role": "coder", "tool_calls": [{"name": "run", "arguments": {"command": "sleep 117"}}]}),
        finish_line(),
    ])
    .await;
    std::fs::write(
        w.tmp.path().join("config/git-agent/config.toml"),
        "[[policy.commands]]\nprefix = [\"sleep\"]\ndecision = \"allow\"\n",
    )
    .unwrap();
    let bot = Running::start(&w, free_port(), None).await;
    assert_eq!(bot.post("issues", "long", &w.payload).await, 202);
    // Wait until the run is in its long command.
    let mirror = w
        .tmp
        .path()
        .join(format!("state/repos/{}/{}.git/agent/runs", w.owner, w.name));
    let record = || -> Option<Value> {
        let run = std::fs::read_dir(&mirror).ok()?.next()?.ok()?.path();
        serde_json::from_slice(&std::fs::read(run.join("record.json")).ok()?).ok()
    };
    let mut busy = false;
    for _ in 0..600 {
        let sleeping = Command::new("pgrep")
            .args(["-f", "sleep 117"])
            .output()
            .unwrap()
            .status
            .success();
        if sleeping {
            busy = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        busy,
        "the run never reached its long command: {:?}",
        record()
    );
    let (event, _) = w.command("/agent stop");
    assert_eq!(bot.post("issue_comment", "stop-1", &event).await, 202);
    let job = bot.finished("long").await;
    assert_eq!(job.state, JobState::Cancelled, "{job:?}");
    assert_eq!(job.run_state.as_deref(), Some("cancelled"), "{job:?}");
    assert_eq!(record().unwrap()["state"], "cancelled");
    // The stopped command does not outlive its run.
    let mut gone = false;
    for _ in 0..100 {
        let left = Command::new("pgrep")
            .args(["-f", "sleep 117"])
            .output()
            .unwrap()
            .status
            .success();
        if !left {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the stopped run's command is still running");
    assert!(w.fake.world().pulls.is_empty(), "no PR for a stopped run");
    let comments = w.progress_comments();
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert!(comments[0].contains("⏹️ cancelled"), "{}", comments[0]);
    assert!(
        comments[0].contains("Stopped by `/agent stop`"),
        "{}",
        comments[0]
    );
    w.fake.assert_clean();
    bot.stop();
}
