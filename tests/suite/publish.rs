//! `run::publish` in-process on the local forge, as a worker would call it: a fixture
//! repository, a bare remote, issues as files, a scripted model.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::common::{copy_dir, git};
use git_agent::audit::redact::Redactor;
use git_agent::config::Config;
use git_agent::exec::ExecOptions;
use git_agent::forge::local::{LocalForge, LocalOptions};
use git_agent::forge::{Forge, progress_run_id};
use git_agent::model::{Router, RouterOptions};
use git_agent::run::RunState;
use git_agent::run::engine::Services;
use git_agent::run::publish::{PublishRequest, publish};
use git_agent::task::{Mode, Origin, RepoRef, Task};
use git_agent::workspace::Repo;
use serde_json::json;

struct World {
    tmp: tempfile::TempDir,
}

impl World {
    fn new(script: &[serde_json::Value]) -> Self {
        let tmp = super::common::tempdir();
        let work = tmp.path().join("work");
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust-add"),
            &work,
        );
        std::fs::write(work.join(".gitignore"), "target/\n").unwrap();
        git(&work, &["init", "-q"]);
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", "fixture"]);
        git(tmp.path(), &["clone", "-q", "--bare", "work", "remote.git"]);
        let issues = tmp.path().join("issues");
        std::fs::create_dir_all(&issues).unwrap();
        std::fs::write(
            issues.join("7.md"),
            "# add returns the difference\n\n`add(2, 3)` should be 5.\n",
        )
        .unwrap();
        let text: String = script.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(tmp.path().join("script.jsonl"), text).unwrap();
        World { tmp }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.tmp.path().join(p)
    }

    fn services(&self) -> Services {
        let repo = Repo::open(self.path("work"))
            .unwrap()
            .with_state_dir(self.path("state"));
        let config = Config::resolve(Vec::new()).unwrap();
        let router = Router::from_settings(
            &config.settings,
            &RouterOptions {
                model_flags: vec![format!("scripted:{}", self.path("script.jsonl").display())],
                record: None,
                resume: None,
            },
            &|_| None,
        )
        .unwrap();
        let exec_options = ExecOptions::from_settings(&config.settings);
        Services {
            config,
            repo,
            router: Arc::new(router),
            redactor: Arc::new(Redactor::from_process_env(&[]).unwrap()),
            progress: Arc::new(|_| {}),
            exec_options,
            warm_pool: false,
        }
    }

    fn forge(&self, svc: &Services) -> LocalForge {
        LocalForge::for_repo(
            &svc.repo,
            LocalOptions {
                issues_dir: Some(self.path("issues")),
                ..LocalOptions::default()
            },
        )
    }
}

fn repo_ref() -> RepoRef {
    RepoRef {
        owner: "me".into(),
        name: "calc".into(),
    }
}

async fn task(forge: &dyn Forge, mode: Mode) -> Task {
    let issue = forge.issue(&repo_ref(), 7).await.unwrap();
    Task {
        goal: format!("Issue #7: {}\n\n{}", issue.title, issue.body),
        mode,
        origin: Origin::Issue {
            number: 7,
            comment_id: None,
        },
        repo: Some(repo_ref()),
        base: "main".into(),
        branch: None,
        requested_by: None,
        key: format!("me/calc#7:{mode:?}"),
    }
}

/// Published through the local forge: the branch and run ref on the remote, the PR is the
/// run's pr.md, one progress comment; publishing again resumes the same run and PR.
#[tokio::test]
async fn publish_on_the_local_forge_is_idempotent() {
    let world = World::new(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["src/lib.rs"]}]}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "edit_file", "arguments": {
            "path": "src/lib.rs",
            "old_text": "pub fn add(a: i64, b: i64) -> i64 {\n    a - b",
            "new_text": "pub fn add(a: i64, b: i64) -> i64 {\n    a + b"}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "finish", "arguments": {"summary": "add adds"}}]}),
    ]);
    let svc = world.services();
    let forge = world.forge(&svc);
    let remote = world.path("remote.git").display().to_string();
    let t = task(&forge, Mode::Fix).await;
    let first = publish(&svc, &forge, PublishRequest::new(t.clone(), None, &remote))
        .await
        .unwrap();
    assert_eq!(first.state, RunState::Succeeded);
    assert!(!first.resumed);
    let pr_md = first.run_dir.join("pr.md");
    assert_eq!(
        first.pr_url.as_deref(),
        Some(format!("file://{}", pr_md.display()).as_str())
    );
    assert_eq!(std::fs::read_to_string(&pr_md).unwrap(), first.report);
    let refs = git(
        &world.path("remote.git"),
        &["for-each-ref", "--format=%(refname)"],
    );
    assert!(
        refs.contains(&format!("refs/heads/{}", first.branch)),
        "{refs}"
    );
    assert!(
        refs.contains(&format!("refs/agent/runs/{}", first.run_id)),
        "{refs}"
    );
    let issue = forge.issue(&repo_ref(), 7).await.unwrap();
    assert_eq!(issue.comments.len(), 1);
    assert_eq!(
        progress_run_id(&issue.comments[0].body),
        Some(first.run_id.as_str())
    );
    assert!(issue.comments[0].body.contains("✅ succeeded"));

    let second = publish(&svc, &forge, PublishRequest::new(t, None, &remote))
        .await
        .unwrap();
    assert_eq!(second.run_id, first.run_id);
    assert!(second.resumed);
    assert_eq!(second.pr_url, first.pr_url);
    let pr = forge
        .pull_request_for_branch(&repo_ref(), &first.branch)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pr.number, 1);
    assert_eq!(forge.issue(&repo_ref(), 7).await.unwrap().comments.len(), 1);
}

/// A plan-only run changes nothing: no PR, no branch pushed; the report is folded into the
/// progress comment.
#[tokio::test]
async fn plan_only_run_reports_in_the_comment() {
    let world = World::new(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["src/lib.rs"]}]}}]}),
    ]);
    let svc = world.services();
    let forge = world.forge(&svc);
    let remote = world.path("remote.git").display().to_string();
    let t = task(&forge, Mode::Plan).await;
    let out = publish(&svc, &forge, PublishRequest::new(t, None, &remote))
        .await
        .unwrap();
    assert_eq!(out.state, RunState::Succeeded);
    assert_eq!(out.pr_url, None);
    let refs = git(
        &world.path("remote.git"),
        &["for-each-ref", "--format=%(refname)"],
    );
    assert!(!refs.contains("refs/heads/agent/"), "{refs}");
    assert!(
        refs.contains(&format!("refs/agent/runs/{}", out.run_id)),
        "{refs}"
    );
    let body = forge.issue(&repo_ref(), 7).await.unwrap().comments[0]
        .body
        .clone();
    assert!(
        body.contains("<details><summary>Report</summary>"),
        "{body}"
    );
    assert!(body.contains("Make add add"), "{body}");
}

/// The local forge, recording every progress comment body it is asked to write.
struct Recording {
    inner: LocalForge,
    bodies: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl Forge for Recording {
    async fn issue(
        &self,
        r: &RepoRef,
        n: u64,
    ) -> git_agent::forge::Result<git_agent::forge::Issue> {
        self.inner.issue(r, n).await
    }
    async fn pull_request(
        &self,
        r: &RepoRef,
        n: u64,
    ) -> git_agent::forge::Result<git_agent::forge::PullRequest> {
        self.inner.pull_request(r, n).await
    }
    async fn pull_request_for_branch(
        &self,
        r: &RepoRef,
        b: &str,
    ) -> git_agent::forge::Result<Option<git_agent::forge::PullRequest>> {
        self.inner.pull_request_for_branch(r, b).await
    }
    async fn push(
        &self,
        local: Repo,
        remote: &str,
        refs: &[String],
        prefix: &str,
    ) -> git_agent::forge::Result<()> {
        self.inner.push(local, remote, refs, prefix).await
    }
    async fn open_draft_pr(
        &self,
        r: &RepoRef,
        req: &git_agent::forge::PrRequest,
    ) -> git_agent::forge::Result<git_agent::forge::PullRequest> {
        self.inner.open_draft_pr(r, req).await
    }
    async fn upsert_progress(
        &self,
        r: &RepoRef,
        n: u64,
        run: &str,
        body: &git_agent::audit::Redacted,
    ) -> git_agent::forge::Result<git_agent::forge::CommentRef> {
        self.bodies.lock().unwrap().push(body.to_string());
        self.inner.upsert_progress(r, n, run, body).await
    }
    async fn react_eyes(
        &self,
        r: &RepoRef,
        t: git_agent::forge::CommentTarget,
    ) -> git_agent::forge::Result<()> {
        self.inner.react_eyes(r, t).await
    }
    async fn permission(
        &self,
        r: &RepoRef,
        login: &str,
    ) -> git_agent::forge::Result<git_agent::forge::Permission> {
        self.inner.permission(r, login).await
    }
    async fn failed_jobs(
        &self,
        r: &RepoRef,
        id: u64,
    ) -> git_agent::forge::Result<Vec<git_agent::forge::FailedJob>> {
        self.inner.failed_jobs(r, id).await
    }
    async fn failed_workflow_runs(
        &self,
        r: &RepoRef,
        b: &str,
    ) -> git_agent::forge::Result<Vec<git_agent::forge::WorkflowRun>> {
        self.inner.failed_workflow_runs(r, b).await
    }
    async fn job_log(&self, r: &RepoRef, id: u64) -> git_agent::forge::Result<String> {
        self.inner.job_log(r, id).await
    }
}

/// While the run works, the progress comment follows its state (here polled every 10 ms):
/// queued first, the baseline test run seen as `analyzing`, succeeded last.
#[tokio::test]
async fn progress_comment_follows_the_run() {
    let world = World::new(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["src/lib.rs"]}]}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "edit_file", "arguments": {
            "path": "src/lib.rs",
            "old_text": "pub fn add(a: i64, b: i64) -> i64 {\n    a - b",
            "new_text": "pub fn add(a: i64, b: i64) -> i64 {\n    a + b"}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "finish", "arguments": {"summary": "add adds"}}]}),
    ]);
    let svc = world.services();
    let forge = Recording {
        inner: world.forge(&svc),
        bodies: std::sync::Mutex::new(Vec::new()),
    };
    let remote = world.path("remote.git").display().to_string();
    let t = task(&forge, Mode::Fix).await;
    let mut req = PublishRequest::new(t, None, &remote);
    req.progress_every = Some(std::time::Duration::from_millis(10));
    let out = publish(&svc, &forge, req).await.unwrap();
    assert_eq!(out.state, RunState::Succeeded);
    let bodies = forge.bodies.lock().unwrap().clone();
    let states: Vec<&str> = bodies
        .iter()
        .map(|b| {
            b.lines()
                .nth(1)
                .unwrap_or("")
                .rsplit(" — ")
                .next()
                .unwrap_or("")
        })
        .collect();
    eprintln!("progress states: {states:?}");
    assert_eq!(states.first(), Some(&"⏳ queued"), "{states:?}");
    assert_eq!(states.last(), Some(&"✅ succeeded"), "{states:?}");
    assert!(
        states.contains(&"🔎 analyzing the repository"),
        "{states:?}"
    );
    assert_eq!(forge.issue(&repo_ref(), 7).await.unwrap().comments.len(), 1);
}

/// Regression (issue 20): a run whose branch name is already taken on the remote (another run
/// for the same issue, from another front door) published under a name of its own; before,
/// its branch push was refused and its run ref pushed anyway.
#[tokio::test]
async fn a_taken_branch_name_publishes_under_a_run_suffix() {
    let world = World::new(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["src/lib.rs"]}]}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "edit_file", "arguments": {
            "path": "src/lib.rs",
            "old_text": "pub fn add(a: i64, b: i64) -> i64 {\n    a - b",
            "new_text": "pub fn add(a: i64, b: i64) -> i64 {\n    a + b"}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "finish", "arguments": {"summary": "add adds"}}]}),
    ]);
    // Another run's branch for issue 7, with its own commit, is on the remote already.
    let other = world.path("other");
    git(
        world.tmp.path(),
        &[
            "clone",
            "-q",
            world.path("remote.git").to_str().unwrap(),
            "other",
        ],
    );
    std::fs::write(other.join("OTHER.md"), "another run\n").unwrap();
    git(&other, &["add", "-A"]);
    git(
        &other,
        &[
            "-c",
            "user.name=o",
            "-c",
            "user.email=o@x",
            "commit",
            "-qm",
            "other run",
        ],
    );
    git(
        &other,
        &[
            "push",
            "-q",
            "origin",
            "HEAD:refs/heads/agent/7-add-returns-the-difference",
        ],
    );
    let theirs = git(
        &world.path("remote.git"),
        &["rev-parse", "refs/heads/agent/7-add-returns-the-difference"],
    );

    let svc = world.services();
    let forge = world.forge(&svc);
    let remote = world.path("remote.git").display().to_string();
    let t = task(&forge, Mode::Fix).await;
    let published = publish(&svc, &forge, PublishRequest::new(t, None, &remote))
        .await
        .unwrap();
    assert_eq!(published.state, RunState::Succeeded);
    let suffix = git_agent::run::engine::run_suffix(&published.run_id);
    assert_eq!(
        published.branch,
        format!("agent/7-add-returns-the-difference-{suffix}")
    );
    let remote_git = world.path("remote.git");
    // The other run's branch is untouched; this run's commits are on its own branch.
    assert_eq!(
        git(
            &remote_git,
            &["rev-parse", "refs/heads/agent/7-add-returns-the-difference"]
        ),
        theirs
    );
    let log = git(
        &remote_git,
        &[
            "log",
            "--format=%s",
            &format!("refs/heads/{}", published.branch),
        ],
    );
    assert!(!log.contains("other run"), "{log}");
    let record = git(
        &remote_git,
        &[
            "show",
            &format!("refs/agent/runs/{}:record.json", published.run_id),
        ],
    );
    let record: serde_json::Value = serde_json::from_str(&record).unwrap();
    assert_eq!(record["branch"], published.branch.as_str());
    let pr = forge
        .pull_request_for_branch(&repo_ref(), &published.branch)
        .await
        .unwrap();
    assert!(pr.is_some(), "the draft PR's head is the run's own branch");
}

/// Regression (issue 20): `git agent action` pushed `refs/agent/runs/<id>` with the raw token
/// the model put in its plan title and `finish` summary (the PR body was masked). Nothing
/// pushed to the remote — branch commits, the record's ref, the PR body, the comment —
/// holds the secret now.
#[tokio::test]
async fn nothing_pushed_holds_a_secret_from_the_models_words() {
    const KNOWN: &str = "canary-value-0d9e8f7a6b5c4d3e";
    let world = World::new(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": format!("Make add add {KNOWN}"), "files": ["src/lib.rs"]}]}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "edit_file", "arguments": {
            "path": "src/lib.rs",
            "old_text": "pub fn add(a: i64, b: i64) -> i64 {\n    a - b",
            "new_text": "pub fn add(a: i64, b: i64) -> i64 {\n    a + b"}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "finish", "arguments": {
            "summary": format!("add adds; token {KNOWN}")}}]}),
    ]);
    let mut svc = world.services();
    svc.redactor = Arc::new(Redactor::new([KNOWN]).unwrap());
    let forge = world.forge(&svc);
    let remote = world.path("remote.git").display().to_string();
    let t = task(&forge, Mode::Fix).await;
    let published = publish(&svc, &forge, PublishRequest::new(t, None, &remote))
        .await
        .unwrap();
    assert_eq!(published.state, RunState::Succeeded);
    let objects = std::process::Command::new("git")
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .current_dir(world.path("remote.git"))
        .output()
        .unwrap();
    let objects = String::from_utf8_lossy(&objects.stdout);
    assert!(
        objects.contains("add adds; token ***"),
        "the record was pushed"
    );
    assert!(!objects.contains(KNOWN), "a secret reached the remote");
    assert!(!published.report.contains(KNOWN));
    let issue = forge.issue(&repo_ref(), 7).await.unwrap();
    assert!(issue.comments.iter().all(|c| !c.body.contains(KNOWN)));
}
