//! `git agent action` end to end: the real binary, a fixture repository checked out as a
//! runner would, a published webhook example as the event, a scripted model, the fake GitHub
//! API (every request checked against GitHub's REST description) and a bare repository on
//! disk as the remote.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::{Value, json};

use super::fake::{Fake, npm_dir};
use crate::suite::common::{copy_dir, git};

const REPO: &str = "Codertocat/Hello-World";

/// The `NAME.ACTION` example of `@octokit/webhooks-examples`, on the fixture's default branch.
fn example(name: &str, action: &str) -> Value {
    let path = npm_dir().join("@octokit/webhooks-examples/api.github.com/index.json");
    let list: Vec<Value> = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut event = list
        .iter()
        .find(|e| e["name"] == name)
        .and_then(|e| {
            e["examples"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["action"] == action)
        })
        .unwrap_or_else(|| panic!("no {name}.{action} example"))
        .clone();
    assert_eq!(event["repository"]["full_name"], REPO);
    event["repository"]["default_branch"] = json!("main");
    event
}

/// `issues.labeled`, adjusted: the label is the trigger label.
fn labeled_event() -> Value {
    let mut event = example("issues", "labeled");
    event["label"]["name"] = json!("agent");
    event
}

fn script_lines() -> Vec<Value> {
    vec![
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["src/lib.rs"]}]}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "edit_file", "arguments": {
            "path": "src/lib.rs",
            "old_text": "pub fn add(a: i64, b: i64) -> i64 {\n    a - b",
            "new_text": "pub fn add(a: i64, b: i64) -> i64 {\n    a + b"}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "finish", "arguments": {"summary": "add adds"}}]}),
    ]
}

/// A runner's world: the remote (a bare repository under a fake server root), a checkout
/// of it, the event file, the script and a private config home.
struct Runner {
    tmp: tempfile::TempDir,
    event_name: &'static str,
}

impl Runner {
    fn new() -> Self {
        Self::with_event("issues", &labeled_event())
    }

    fn with_event(event_name: &'static str, event: &Value) -> Self {
        let tmp = super::super::common::tempdir();
        let seed = tmp.path().join("seed");
        copy_dir(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rust-add"),
            &seed,
        );
        std::fs::write(seed.join(".gitignore"), "target/\n").unwrap();
        git(&seed, &["init", "-q"]);
        git(&seed, &["add", "-A"]);
        git(&seed, &["commit", "-qm", "fixture"]);
        let server = tmp.path().join("server/Codertocat");
        std::fs::create_dir_all(&server).unwrap();
        git(
            &server,
            &[
                "clone",
                "-q",
                "--bare",
                seed.to_str().unwrap(),
                "Hello-World.git",
            ],
        );
        std::fs::create_dir_all(tmp.path().join("config/git-agent")).unwrap();
        let script: String = script_lines().iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(tmp.path().join("script.jsonl"), script).unwrap();
        std::fs::write(tmp.path().join("event.json"), event.to_string()).unwrap();
        Runner { tmp, event_name }
    }

    /// Replace the scripted model's replies.
    fn script(&self, lines: &[Value]) {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(self.tmp.path().join("script.jsonl"), text).unwrap();
    }

    /// Write the user configuration (`$XDG_CONFIG_HOME/git-agent/config.toml`).
    fn user_config(&self, text: &str) {
        std::fs::write(self.tmp.path().join("config/git-agent/config.toml"), text).unwrap();
    }

    /// Replace the event.
    fn event(&mut self, name: &'static str, event: &Value) {
        self.event_name = name;
        std::fs::write(self.tmp.path().join("event.json"), event.to_string()).unwrap();
    }

    fn remote(&self) -> PathBuf {
        self.tmp.path().join("server/Codertocat/Hello-World.git")
    }

    /// A fresh checkout of the remote, as actions/checkout makes on a new runner.
    fn checkout(&self, name: &str) -> PathBuf {
        git(
            self.tmp.path(),
            &["clone", "-q", self.remote().to_str().unwrap(), name],
        );
        self.tmp.path().join(name)
    }

    /// Run `git-agent action` in `workspace` against the fake; returns exit code, stdout,
    /// stderr, outputs and step summary.
    async fn action(&self, fake: &Fake, workspace: &Path, tag: &str) -> ActionRun {
        self.action_with(fake, workspace, tag, &[]).await
    }

    async fn action_with(
        &self,
        fake: &Fake,
        workspace: &Path,
        tag: &str,
        envs: &[(&str, &str)],
    ) -> ActionRun {
        let output = self.tmp.path().join(format!("output-{tag}"));
        let summary = self.tmp.path().join(format!("summary-{tag}"));
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_git-agent"))
            .arg("action")
            .current_dir(workspace)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap())
            .env("HOME", std::env::var("HOME").unwrap())
            .env("XDG_CONFIG_HOME", self.tmp.path().join("config"))
            // Run worktrees and the pool go to the state directory: the test's own.
            .env("XDG_STATE_HOME", self.tmp.path().join("state"))
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_EVENT_NAME", self.event_name)
            .env("GITHUB_EVENT_PATH", self.tmp.path().join("event.json"))
            .env("GITHUB_REPOSITORY", REPO)
            .env("GITHUB_API_URL", fake.api_base())
            .env(
                "GITHUB_SERVER_URL",
                format!("file://{}", self.tmp.path().join("server").display()),
            )
            .env("GITHUB_WORKSPACE", workspace)
            .env("GITHUB_TOKEN", "ghs_actions_job_token")
            .env("GITHUB_OUTPUT", &output)
            .env("GITHUB_STEP_SUMMARY", &summary)
            .env(
                "INPUT_MODEL",
                format!(
                    "scripted:{}",
                    self.tmp.path().join("script.jsonl").display()
                ),
            )
            .env("INPUT_MAX-USD", "2")
            .envs(envs.iter().copied())
            .output()
            .await
            .unwrap();
        ActionRun {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            outputs: parse_outputs(&std::fs::read_to_string(&output).unwrap_or_default()),
            summary: std::fs::read_to_string(&summary).unwrap_or_default(),
        }
    }
}

#[derive(Debug)]
struct ActionRun {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    outputs: HashMap<String, String>,
    summary: String,
}

/// Parse `$GITHUB_OUTPUT` as the runner does: `name<<DELIM` … `DELIM`, or `name=value`.
fn parse_outputs(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((name, delim)) = line.split_once("<<") {
            let mut value = Vec::new();
            for l in lines.by_ref() {
                if l == delim {
                    break;
                }
                value.push(l);
            }
            out.insert(name.to_string(), value.join("\n"));
        } else if let Some((name, value)) = line.split_once('=') {
            out.insert(name.to_string(), value.to_string());
        }
    }
    out
}

fn progress_comments(fake: &Fake, issue: u64) -> Vec<Value> {
    fake.world()
        .comments
        .iter()
        .filter(|(n, c)| {
            *n == issue
                && c["body"]
                    .as_str()
                    .unwrap_or("")
                    .contains("git-agent:progress")
        })
        .map(|(_, c)| c.clone())
        .collect()
}

fn refs(git_dir: &Path) -> Vec<String> {
    let out = Command::new("git")
        .args([
            "--git-dir",
            git_dir.to_str().unwrap(),
            "for-each-ref",
            "--format=%(refname)",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A labeled issue becomes a pushed branch and a draft PR whose body is the full report;
/// the outputs and the step summary are written; re-running the job (in the same checkout,
/// then on a fresh runner) publishes the same run again: one branch, one PR, one comment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labeled_issue_becomes_a_draft_pr_and_reruns_are_idempotent() {
    let fake: Arc<Fake> = Fake::start("").await;
    fake.grant("Codertocat", "admin", "admin");
    fake.add_issue(
        1,
        "add returns the difference",
        "`add(2, 3)` should be 5; the test `adds_two_numbers` fails.",
        "Codertocat",
        false,
    );
    let runner = Runner::new();
    let work = runner.checkout("work");

    let first = runner.action(&fake, &work, "1").await;
    assert_eq!(first.code, Some(0), "{first:#?}");
    let run_id = first.outputs["run-id"].clone();
    assert!(!run_id.is_empty(), "{first:#?}");
    assert_eq!(first.outputs["state"], "succeeded");
    assert!(
        first.stdout.contains(&format!("run {run_id} succeeded")),
        "{}",
        first.stdout
    );

    // The draft PR: one, draft, from the run branch into main, body = the full report.
    let pulls = fake.world().pulls.clone();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let pr = &pulls[0];
    assert_eq!(pr["draft"], true);
    assert_eq!(pr["base"]["ref"], "main");
    assert_eq!(first.outputs["pr-url"], pr["html_url"].as_str().unwrap());
    let branch = pr["head"]["ref"].as_str().unwrap().to_string();
    assert!(branch.starts_with("agent/1-"), "{branch}");
    let report =
        std::fs::read_to_string(work.join(".git/agent/runs").join(&run_id).join("pr.md")).unwrap();
    assert_eq!(pr["body"].as_str().unwrap(), report);
    for section in [
        "Fixes #1",
        "### Plan",
        "### Changes",
        "### Verification",
        "### Cost",
        "Audit trail",
    ] {
        assert!(
            report.contains(section),
            "no {section} in the report:\n{report}"
        );
    }
    assert!(report.contains("| before | `cargo test"), "{report}");
    // The step summary is the report.
    assert_eq!(first.summary.trim_end(), report.trim_end());

    // The remote has the branch (with the agent's commit) and the run record, nothing else new.
    let remote_refs = refs(&runner.remote());
    assert!(
        remote_refs.contains(&format!("refs/heads/{branch}")),
        "{remote_refs:?}"
    );
    assert!(
        remote_refs.contains(&format!("refs/agent/runs/{run_id}")),
        "{remote_refs:?}"
    );
    assert_eq!(remote_refs.len(), 3, "{remote_refs:?}");
    let msg = git(&runner.remote(), &["log", "-1", "--format=%B", &branch]);
    assert!(msg.contains(&format!("Agent-Run: {run_id}")), "{msg}");
    let lib = git(&runner.remote(), &["show", &format!("{branch}:src/lib.rs")]);
    assert!(lib.contains("a + b"), "{lib}");
    // The pushed record knows its PR.
    let record = git(
        &runner.remote(),
        &["show", &format!("refs/agent/runs/{run_id}:record.json")],
    );
    assert!(
        record.contains(pr["html_url"].as_str().unwrap()),
        "{record}"
    );

    // One progress comment, final state, with the PR link; authenticated with the job token.
    let comments = progress_comments(&fake, 1);
    assert_eq!(comments.len(), 1, "{comments:#?}");
    let body = comments[0]["body"].as_str().unwrap();
    assert!(
        body.contains(&format!("run `{run_id}` — ✅ succeeded")),
        "{body}"
    );
    assert!(body.contains(pr["html_url"].as_str().unwrap()), "{body}");
    assert!(
        body.contains("- [x] 1. Make add add") || body.contains("- [ ] 1. Make add add"),
        "{body}"
    );
    assert!(
        fake.world()
            .seen
            .iter()
            .all(|s| s.authorization.as_deref() == Some("Bearer ghs_actions_job_token")),
        "every API call carries the job's token"
    );
    assert!(
        !fake
            .requests("GET", "/collaborators/Codertocat/permission")
            .is_empty()
    );

    // Re-run in the same checkout: the same run is published again.
    let again = runner.action(&fake, &work, "2").await;
    assert_eq!(again.code, Some(0), "{again:#?}");
    assert_eq!(again.outputs["run-id"], run_id);
    assert_eq!(again.outputs["pr-url"], first.outputs["pr-url"]);
    assert_eq!(fake.world().pulls.len(), 1);
    assert_eq!(progress_comments(&fake, 1).len(), 1);
    assert!(
        !fake.requests("PATCH", "/pulls/1").is_empty(),
        "the PR is updated"
    );

    // Re-run on a fresh runner: the run is found by its progress comment, its record
    // fetched from the remote, and published again — still one PR, one comment.
    let fresh = runner.checkout("fresh");
    let third = runner.action(&fake, &fresh, "3").await;
    assert_eq!(third.code, Some(0), "{third:#?}");
    assert_eq!(third.outputs["run-id"], run_id, "{third:#?}");
    assert_eq!(third.outputs["state"], "succeeded");
    assert_eq!(third.outputs["pr-url"], first.outputs["pr-url"]);
    assert_eq!(fake.world().pulls.len(), 1);
    assert_eq!(progress_comments(&fake, 1).len(), 1);
    assert_eq!(refs(&runner.remote()).len(), 3);
    let turns = fresh
        .join(".git/agent/runs")
        .join(&run_id)
        .join("record.json");
    assert!(turns.exists(), "the record was restored from the remote");

    fake.assert_clean();
}

/// An event that starts nothing exits 0, says why, and still writes the outputs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignored_event_exits_zero_with_the_reason() {
    let fake: Arc<Fake> = Fake::start("").await;
    fake.grant("Codertocat", "read", "read");
    fake.add_issue(1, "t", "b", "Codertocat", false);
    let runner = Runner::new();
    let work = runner.checkout("work");
    let run = runner.action(&fake, &work, "1").await;
    assert_eq!(run.code, Some(0), "{run:#?}");
    assert!(
        run.stdout
            .starts_with("ignored: Codertocat has read permission"),
        "{run:#?}"
    );
    assert_eq!(run.outputs["state"], "ignored");
    assert_eq!(run.outputs["run-id"], "");
    assert!(run.summary.contains("ignored"), "{}", run.summary);
    assert!(fake.world().pulls.is_empty());
    assert!(progress_comments(&fake, 1).is_empty());
    assert!(
        run.stderr.is_empty() || !run.stderr.contains("error"),
        "{}",
        run.stderr
    );
    fake.assert_clean();
}

/// `/agent fix …` in an issue comment: 👀 on the comment, the request reaches the model's
/// task, the commit credits the commenter, and the draft PR is opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_fix_comment_gets_eyes_and_a_draft_pr() {
    let fake: Arc<Fake> = Fake::start("").await;
    let mut event = example("issue_comment", "created");
    let number = event["issue"]["number"].as_u64().unwrap();
    let sender = event["sender"]["login"].as_str().unwrap().to_string();
    event["comment"]["body"] = json!("/agent fix make add add");
    event["comment"]["user"] = event["sender"].clone();
    event["issue"]
        .as_object_mut()
        .unwrap()
        .remove("pull_request");
    let comment_id = event["comment"]["id"].as_u64().unwrap();
    fake.grant(&sender, "write", "write");
    fake.add_issue(
        number,
        "add returns the difference",
        "`add(2, 3)` is -1.",
        &sender,
        false,
    );
    let runner = Runner::with_event("issue_comment", &event);
    let work = runner.checkout("work");
    let run = runner.action(&fake, &work, "1").await;
    assert_eq!(run.code, Some(0), "{run:#?}");
    assert_eq!(run.outputs["state"], "succeeded");
    let reactions = fake.world().reactions.clone();
    assert_eq!(
        reactions,
        vec![(
            format!("/repos/{REPO}/issues/comments/{comment_id}/reactions"),
            "eyes".to_string()
        )]
    );
    let pulls = fake.world().pulls.clone();
    assert_eq!(pulls.len(), 1);
    assert_eq!(
        run.outputs["pr-url"],
        pulls[0]["html_url"].as_str().unwrap()
    );
    let branch = pulls[0]["head"]["ref"].as_str().unwrap();
    let msg = git(&runner.remote(), &["log", "-1", "--format=%B", branch]);
    assert!(
        msg.contains(&format!("Co-authored-by: {sender} <")),
        "the commenter is credited: {msg}"
    );
    let record = git(
        &runner.remote(),
        &[
            "show",
            &format!("refs/agent/runs/{}:record.json", run.outputs["run-id"]),
        ],
    );
    assert!(
        record.contains("make add add"),
        "the request reaches the task"
    );
    assert_eq!(progress_comments(&fake, number).len(), 1);
    fake.assert_clean();
}

fn issue_world(fake: &Fake) {
    fake.grant("Codertocat", "admin", "admin");
    fake.add_issue(
        1,
        "add returns the difference",
        "`add(2, 3)` should be 5.",
        "Codertocat",
        false,
    );
}

/// The run id announced in the only progress comment of issue 1.
fn announced_run(fake: &Fake) -> String {
    let comments = progress_comments(fake, 1);
    assert_eq!(comments.len(), 1, "{comments:#?}");
    let body = comments[0]["body"].as_str().unwrap();
    git_agent::forge::progress_run_id(body).unwrap().to_string()
}

/// kill -9 after the plan, then the job is re-run: in the same checkout the run resumes
/// (the scripted model continues where it stopped); on a fresh runner, where nothing was
/// pushed, it starts again under the announced id. Either way: one PR, one comment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_job_rerun_makes_one_pr_and_one_comment() {
    // Same checkout: resume.
    let fake: Arc<Fake> = Fake::start("").await;
    issue_world(&fake);
    let runner = Runner::new();
    let work = runner.checkout("work");
    let killed = runner
        .action_with(
            &fake,
            &work,
            "1",
            &[("GIT_AGENT_TEST_KILL_AT", "after-plan")],
        )
        .await;
    assert_eq!(killed.code, None, "killed by SIGKILL: {killed:#?}");
    let announced = announced_run(&fake);
    assert!(fake.world().pulls.is_empty());
    let again = runner.action(&fake, &work, "2").await;
    assert_eq!(again.code, Some(0), "{again:#?}");
    assert_eq!(again.outputs["run-id"], announced);
    assert_eq!(again.outputs["state"], "succeeded");
    assert_eq!(fake.world().pulls.len(), 1);
    assert_eq!(announced_run(&fake), announced);
    let body = progress_comments(&fake, 1)[0]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(body.contains("✅ succeeded"), "{body}");
    fake.assert_clean();

    // Fresh runner: the record never reached the remote; the announced id is reused.
    let fake: Arc<Fake> = Fake::start("").await;
    issue_world(&fake);
    let runner = Runner::new();
    let work = runner.checkout("work");
    let killed = runner
        .action_with(
            &fake,
            &work,
            "1",
            &[("GIT_AGENT_TEST_KILL_AT", "after-plan")],
        )
        .await;
    assert_eq!(killed.code, None, "{killed:#?}");
    let announced = announced_run(&fake);
    let fresh = runner.checkout("fresh");
    let again = runner.action(&fake, &fresh, "2").await;
    assert_eq!(again.code, Some(0), "{again:#?}");
    assert_eq!(again.outputs["run-id"], announced);
    assert_eq!(fake.world().pulls.len(), 1);
    assert_eq!(announced_run(&fake), announced);
    fake.assert_clean();
}

/// A policy `ask` pauses the run (exit 4, no PR, the comment says so); `/agent approve` in
/// the issue, handled by a job on a fresh runner, fetches the run's record, approves and
/// finishes it: the same run, one PR, one comment, 👀 on the approval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_approve_continues_the_paused_run_on_a_fresh_runner() {
    let fake: Arc<Fake> = Fake::start("").await;
    issue_world(&fake);
    let mut runner = Runner::new();
    runner.user_config("[[policy.commands]]\nprefix = [\"touch\"]\ndecision = \"ask\"\n");
    runner.script(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["src/lib.rs", "approved.txt"]}]}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "run", "arguments": {"command": "touch approved.txt"}}]}),
        script_lines()[1].clone(),
        script_lines()[2].clone(),
    ]);
    let work = runner.checkout("work");
    let paused = runner.action(&fake, &work, "1").await;
    assert_eq!(paused.code, Some(4), "{paused:#?}");
    assert_eq!(paused.outputs["state"], "awaiting_approval");
    assert_eq!(paused.outputs["pr-url"], "");
    assert!(fake.world().pulls.is_empty());
    let run_id = announced_run(&fake);
    assert_eq!(paused.outputs["run-id"], run_id);
    let body = progress_comments(&fake, 1)[0]["body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(body.contains("✋ awaiting approval"), "{body}");
    assert!(body.contains("touch approved.txt"), "{body}");

    let mut event = example("issue_comment", "created");
    event["comment"]["body"] = json!("/agent approve");
    event["comment"]["user"] = event["sender"].clone();
    event["issue"]["number"] = json!(1);
    event["issue"]
        .as_object_mut()
        .unwrap()
        .remove("pull_request");
    let comment_id = event["comment"]["id"].as_u64().unwrap();
    runner.event("issue_comment", &event);
    let fresh = runner.checkout("fresh");
    let approved = runner.action(&fake, &fresh, "2").await;
    assert_eq!(approved.code, Some(0), "{approved:#?}");
    assert_eq!(approved.outputs["run-id"], run_id);
    assert_eq!(approved.outputs["state"], "succeeded");
    let pulls = fake.world().pulls.clone();
    assert_eq!(pulls.len(), 1);
    let branch = pulls[0]["head"]["ref"].as_str().unwrap();
    let files = git(
        &runner.remote(),
        &["show", "--name-only", "--format=", branch],
    );
    assert!(
        files.contains("approved.txt"),
        "the approved command ran: {files}"
    );
    assert_eq!(announced_run(&fake), run_id);
    assert!(fake.world().reactions.iter().any(|(path, c)| {
        path.ends_with(&format!("/issues/comments/{comment_id}/reactions")) && c == "eyes"
    }));
    fake.assert_clean();
}

/// CI failed on the agent's PR: the job continues the PR's branch, which the runner's
/// checkout has only as `origin/agent/…`; the new commit goes on top of it (a fast-forward
/// push) and the existing PR is updated, not a second one opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ci_failure_on_the_agent_pr_adds_to_its_branch() {
    let fake: Arc<Fake> = Fake::start("").await;
    let mut runner = Runner::new();
    // The agent's earlier work: a branch on the remote with one commit, and its PR.
    let earlier = runner.checkout("earlier");
    git(&earlier, &["checkout", "-q", "-b", "agent/1-add"]);
    std::fs::write(earlier.join("NOTES.md"), "work in progress\n").unwrap();
    git(&earlier, &["add", "NOTES.md"]);
    git(&earlier, &["commit", "-qm", "agent: earlier step"]);
    git(&earlier, &["push", "-q", "origin", "agent/1-add"]);
    let old_tip = git(&earlier, &["rev-parse", "HEAD"]).trim().to_string();
    fake.add_pull(2, "agent/1-add", "main", REPO);
    fake.add_issue(2, "agent: add", "earlier report", "git-agent[bot]", true);
    let mut event = example("workflow_run", "completed");
    let run_id = event["workflow_run"]["id"].as_u64().unwrap();
    event["workflow_run"]["conclusion"] = json!("failure");
    event["workflow_run"]["head_branch"] = json!("agent/1-add");
    event["workflow_run"]["head_sha"] = json!(old_tip);
    event["workflow_run"]["head_repository"]["full_name"] = json!(REPO);
    event["workflow_run"]["pull_requests"] = json!([]);
    fake.world().jobs.insert(
        run_id,
        vec![json!({"id": 77, "name": "test", "conclusion": "failure",
                    "steps": [{"name": "cargo test", "conclusion": "failure"}]})],
    );
    fake.world().logs.insert(
        77,
        "running 1 test\ntest adds_two_numbers ... FAILED\nassertion `left == right` failed\n  left: -1\n right: 5\n"
            .into(),
    );
    runner.event("workflow_run", &event);
    let work = runner.checkout("work");
    let run = runner.action(&fake, &work, "1").await;
    assert_eq!(run.code, Some(0), "{run:#?}");
    assert_eq!(run.outputs["state"], "succeeded");
    let new_tip = git(&runner.remote(), &["rev-parse", "agent/1-add"])
        .trim()
        .to_string();
    assert_ne!(new_tip, old_tip);
    git(
        &runner.remote(),
        &["merge-base", "--is-ancestor", &old_tip, &new_tip],
    );
    let notes = git(&runner.remote(), &["show", "agent/1-add:NOTES.md"]);
    assert_eq!(notes, "work in progress\n", "the earlier work is kept");
    let pulls = fake.world().pulls.clone();
    assert_eq!(pulls.len(), 1, "the PR is updated, not opened again");
    assert!(!fake.requests("PATCH", "/pulls/2").is_empty());
    assert!(pulls[0]["body"].as_str().unwrap().contains("For #2"));
    assert_eq!(progress_comments(&fake, 2).len(), 1);
    let record = git(
        &runner.remote(),
        &[
            "show",
            &format!("refs/agent/runs/{}:record.json", run.outputs["run-id"]),
        ],
    );
    assert!(
        record.contains("adds_two_numbers ... FAILED"),
        "the CI log reaches the task"
    );
    fake.assert_clean();
}
