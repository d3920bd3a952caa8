//! One real delivery end to end through `git agent serve` and its production runner: GitHub's
//! published `issues.labeled` example, signed, posted to the bot; the trigger asks the fake
//! GitHub (checked against GitHub's REST description) for the sender's permission; the run
//! mirrors the repository from its remote, fixes the failing Python test with a scripted
//! model in the sandbox, pushes the branch and opens one draft pull request.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use git_agent::store::{JobState, SqliteStore, Store};
use serde_json::{Value, json};

use super::github::fake::{Fake, npm_dir};
use super::server::{client, deliver};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "init.defaultBranch=master",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labeled_issue_becomes_one_draft_pr_through_the_bot() {
    let tmp = tempfile::tempdir().unwrap();
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
    let remotes = tmp.path().join("remotes");
    let remote = remotes.join(&owner).join(format!("{name}.git"));
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
    let lines = [
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["calc.py"]}]}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "edit_file", "arguments": {
            "path": "calc.py", "old_text": "def add(a, b):\n    return a - b",
            "new_text": "def add(a, b):\n    return a + b"}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "finish", "arguments": {"summary": "add adds"}}]}),
    ];
    std::fs::write(
        &script,
        lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
    )
    .unwrap();
    let model = format!("scripted:{}", script.display());

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let state = tmp.path().join("state");
    let mut child = Command::new(env!("CARGO_BIN_EXE_git-agent"))
        .args(["serve", "--workers", "1"])
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--state-dir")
        .arg(&state)
        .arg("--github-api")
        .arg(fake.api_base())
        .arg("--git-base")
        .arg(&remotes)
        .env("GIT_AGENT_WEBHOOK_SECRET", super::server::SECRET)
        .env("GITHUB_TOKEN", "test-token")
        .env("GIT_AGENT_MODELS_PLANNER", &model)
        .env("GIT_AGENT_MODELS_CODER", &model)
        .env("XDG_CONFIG_HOME", tmp.path().join("config"))
        .env("GIT_AGENT_LOG", "warn")
        .env_remove("GIT_AGENT_DATABASE_URL")
        .env_remove("GIT_AGENT_TEST_KILL_AT")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let c = client();
    for _ in 0..200 {
        if c.get(format!("{url}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let body = serde_json::to_vec(&payload).unwrap();
    let resp = deliver(&c, &url, "issues", "e2e-1", body.clone()).await;
    assert_eq!(resp.status(), 202);
    let store = SqliteStore::open(&state.join("serve.db")).await.unwrap();
    let mut job = None;
    for _ in 0..1200 {
        let jobs = store.recent(5).await.unwrap();
        if let Some(j) = jobs.into_iter().find(|j| j.state.is_finished()) {
            job = Some(j);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let job = job.expect("the job finished within two minutes");
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
    let again = deliver(&c, &url, "issues", "e2e-1", body).await;
    assert_eq!(again.status(), 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let posts = fake.requests("POST", &format!("/repos/{owner}/{name}/pulls"));
    assert_eq!(posts.len(), 1, "one draft PR");
    fake.assert_clean();
    // The branch is on the remote with the fix.
    let branches = git(
        &remote,
        &["for-each-ref", "--format=%(refname)", "refs/heads/agent/"],
    );
    let branch = branches
        .lines()
        .next()
        .expect("the run branch on the remote")
        .to_string();
    let calc = git(&remote, &["show", &format!("{branch}:calc.py")]);
    assert!(calc.contains("return a + b"), "{calc}");
    child.kill().unwrap();
    child.wait().unwrap();
}
