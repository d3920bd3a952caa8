//! Two repositories served by one `git agent serve`, their state side by side (issue 17, the
//! cross-tenant leak): a run for repository A whose command (a scripted, prompt-injected
//! model's) tries to read repository B's mirror, B's worktree, B's run record and the job
//! database finds none of them in its view, and nothing of B reaches A's record, report,
//! branch or pull request.

use std::path::Path;

use serde_json::{Value, json};

use super::common::free_port;
use super::serve_e2e::{Running, edit_line, finish_line, git, world_with};

/// In B's repository only (its `calc.py`), so in B's mirror, worktree and run record.
const CANARY_B: &str = "canary-7c2d9a-repo-b";
/// What the probe searches for: matches the canary without containing it, so the probe's own
/// command line (in A's record) does not.
const CANARY_B_PATTERN: &str = "canary-7c2d9a-repo-[b]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_for_one_repository_sees_nothing_of_another() {
    sees_nothing_of_another(false).await;
}

/// The same on the unprivileged path (issue 41 point 5): the bot runs as `nobody`, with no
/// cgroup and no spawner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_for_one_repository_sees_nothing_of_another_unprivileged() {
    sees_nothing_of_another(true).await;
}

async fn sees_nothing_of_another(unprivileged: bool) {
    // Placeholders in the probe are filled once the world's paths are known.
    let probe_line = |probe: &str| json!({"role": "coder", "tool_calls": [{"name": "run", "arguments": {"command": probe}}]});
    let tmp_probe = "PROBE";
    let w = world_with(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["calc.py", "approved.txt"]}]}}]}),
        probe_line(tmp_probe),
        json!({"role": "coder", "tool_calls": [{"name": "run", "arguments": {"command": "touch approved.txt"}}]}),
        edit_line(),
        finish_line(),
    ])
    .await;
    let root = std::fs::canonicalize(w.tmp.path()).unwrap();
    let state = root.join("state");
    let name_b = format!("{}-b", w.name);
    let mirror_b = state
        .join("repos")
        .join(&w.owner)
        .join(format!("{name_b}.git"));
    let db = state.join("serve.db");
    let targets = [
        db.clone(),
        mirror_b.clone(),
        mirror_b.join("agent/runs"),
        state
            .join("worktrees")
            .join(git_agent::workspace::repo_key(&mirror_b)),
    ];
    // `ls` names an absent path only in its output ("cannot access"); the policy allows it.
    let mut probe = String::from("cat calc.py; ls -d");
    for t in &targets {
        probe.push_str(&format!(" '{}'", t.display()));
    }
    probe.push_str("; ");
    // Everything writable or under the state directory's path (the latter lies in /tmp).
    probe.push_str(&format!(
        "grep -rsl '{CANARY_B_PATTERN}' '{}' /tmp /home 2>/dev/null | head -5; echo probe-done",
        state.display()
    ));
    // The same script serves both runs (one model configuration per `serve`): rewrite it.
    let script = root.join("script.jsonl");
    let text = std::fs::read_to_string(&script).unwrap();
    let fixed: String = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            if v["tool_calls"][0]["arguments"]["command"] == tmp_probe {
                v["tool_calls"][0]["arguments"]["command"] = json!(probe);
            }
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&script, fixed).unwrap();
    // Both runs pause before `touch`, so B's worktree and run record stay while A runs.
    let mut config = "[[policy.commands]]\nprefix = [\"touch\"]\ndecision = \"ask\"\n".to_string();
    if unprivileged {
        // nobody has the system's python3, without pytest: the fixture's test as a script.
        config.push_str(
            "[verify]\ntest = \"python3 -c 'import calc; assert calc.add(2, 3) == 5'\"\n",
        );
    }
    std::fs::write(root.join("config/git-agent/config.toml"), config).unwrap();

    // Repository B on the same remote host: A's fixture with the canary in calc.py.
    let work_b = root.join("work-b");
    git(
        &root,
        &[
            "clone",
            "-q",
            w.remote.to_str().unwrap(),
            work_b.to_str().unwrap(),
        ],
    );
    let calc = std::fs::read_to_string(work_b.join("calc.py")).unwrap();
    std::fs::write(work_b.join("calc.py"), format!("# {CANARY_B}\n{calc}")).unwrap();
    git(&work_b, &["commit", "-qam", "b"]);
    let remote_b = w.remote.with_file_name(format!("{name_b}.git"));
    git(
        &root,
        &[
            "clone",
            "-q",
            "--bare",
            work_b.to_str().unwrap(),
            remote_b.to_str().unwrap(),
        ],
    );
    let from = format!("{}/{}", w.owner, w.name);
    let to = format!("{}/{name_b}", w.owner);
    let mut payload_b: Value =
        serde_json::from_str(&w.payload.to_string().replace(&from, &to)).unwrap();
    payload_b["repository"]["name"] = json!(name_b);
    let payload_a = w.payload.clone();

    let mut w = w;
    w.unprivileged = unprivileged;
    let bot = Running::start(&w, free_port(), None).await;
    assert_eq!(bot.post("issues", "b-1", &payload_b).await, 202);
    let job_b = bot.finished("b-1").await;
    assert_eq!(
        job_b.run_state.as_deref(),
        Some("awaiting_approval"),
        "{job_b:?}"
    );
    // B's state is there, with the canary, while A runs.
    let run_b = mirror_b
        .join("agent/runs")
        .join(job_b.run_id.clone().unwrap());
    let record_b = std::fs::read_to_string(run_b.join("conversation.jsonl")).unwrap();
    assert!(record_b.contains(CANARY_B), "B's record holds its canary");
    // B's worktrees are under the state directory, in B's own directory.
    let worktrees_b: Vec<_> = std::fs::read_dir(&targets[3]).unwrap().flatten().collect();
    assert!(
        !worktrees_b.is_empty(),
        "B's worktree is kept while it waits"
    );
    assert!(db.exists());

    assert_eq!(bot.post("issues", "a-1", &payload_a).await, 202);
    let job_a = bot.finished("a-1").await;
    assert_eq!(
        job_a.run_state.as_deref(),
        Some("awaiting_approval"),
        "{job_a:?}"
    );
    let mirror_a = state
        .join("repos")
        .join(&w.owner)
        .join(format!("{}.git", w.name));
    let record_a = std::fs::read_to_string(
        mirror_a
            .join("agent/runs")
            .join(job_a.run_id.clone().unwrap())
            .join("conversation.jsonl"),
    )
    .unwrap();
    assert!(record_a.contains("probe-done"), "the probe ran: {record_a}");
    for t in &targets {
        assert!(
            record_a.contains(&format!(
                "cannot access '{}': No such file or directory",
                t.display()
            )),
            "{} is in A's view:\n{record_a}",
            t.display()
        );
    }
    assert!(!record_a.contains(CANARY_B), "B's canary in A's record");

    // A continues to its pull request: nothing of B in its report, branch or PR.
    let (event, _) = w.command("/agent approve");
    assert_eq!(bot.post("issue_comment", "approve-a", &event).await, 202);
    let job_a = bot.finished("approve-a").await;
    assert_eq!(job_a.run_state.as_deref(), Some("succeeded"), "{job_a:?}");
    let report = job_a.report.clone().unwrap_or_default();
    assert!(report.contains("### Verification"), "{report}");
    assert!(!report.contains(CANARY_B), "{report}");
    // The path it says it took: as nobody no cgroup bounds memory, as root one does.
    let sandbox = report
        .lines()
        .find(|l| l.starts_with("Sandbox: landlock: view ("))
        .unwrap_or_else(|| panic!("no sandbox line: {report}"));
    assert_eq!(
        sandbox.contains("watched per command"),
        unprivileged,
        "{sandbox}"
    );
    let pulls = w.fake.world().pulls.clone();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    assert!(!pulls[0].to_string().contains(CANARY_B));
    let branch = pulls[0]["head"]["ref"].as_str().unwrap().to_string();
    // The remote may belong to nobody now: root reads it anyway.
    let log = git(&w.remote, &["-c", "safe.directory=*", "log", "-p", &branch]);
    assert!(log.contains("return a + b"), "{log}");
    assert!(!log.contains(CANARY_B), "{log}");
    // The fake keys comments by issue number only: B's progress comment (with B's canary in
    // its report) is on the same number, so only A's run's comments are A's.
    let run_a = job_a.run_id.clone().unwrap();
    let mine: Vec<String> = w
        .progress_comments()
        .into_iter()
        .filter(|c| c.contains(&format!("run={run_a}")))
        .collect();
    assert!(!mine.is_empty());
    for c in mine {
        assert!(!c.contains(CANARY_B), "{c}");
    }
    w.fake.assert_clean();
    bot.stop();
}

/// Issue 41 point 2: the files the bot's settings name as secret (its webhook-secret and
/// status-token files) and those git's configuration names (a credential store, an SSH key)
/// are out of a run's view even inside a directory bound into it; a file beside them that no
/// setting names stays readable (the probe's control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_the_settings_name_are_out_of_every_runs_view() {
    use base64::Engine as _;
    let probe = "PROBE";
    let mut w = world_with(&[
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make add add", "files": ["calc.py"]}]}}]}),
        json!({"role": "coder", "tool_calls": [{"name": "run", "arguments": {"command": probe}}]}),
        edit_line(),
        finish_line(),
    ])
    .await;
    let root = std::fs::canonicalize(w.tmp.path()).unwrap();
    // A vault bound into every view (`sandbox.bind`): the bot's files alone in one directory,
    // git's beside a file no setting names.
    let vault = root.join("vault");
    let files = [
        ("bot/webhook.secret", super::server::SECRET.to_string()),
        ("bot/status.token", "status-canary-9e1f".to_string()),
        (
            "git/store",
            "https://x:git-canary-41ab@example.com\n".to_string(),
        ),
        ("git/deploy_key", "ssh-canary-77c0\n".to_string()),
        ("git/README", "readable-control-5d2e\n".to_string()),
    ];
    for (f, body) in &files {
        std::fs::create_dir_all(vault.join(f).parent().unwrap()).unwrap();
        std::fs::write(vault.join(f), body).unwrap();
    }
    let gitconfig = root.join("gitconfig");
    std::fs::write(
        &gitconfig,
        format!(
            "[credential]\n\thelper = store --file={}\n[core]\n\tsshCommand = ssh -i {}\n",
            vault.join("git/store").display(),
            vault.join("git/deploy_key").display()
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("config/git-agent/config.toml"),
        format!("[sandbox]\nbind = [\"{}\"]\n", vault.display()),
    )
    .unwrap();
    let mut cmd = String::new();
    for (f, _) in &files {
        cmd.push_str(&format!(
            "printf '{f}='; base64 -w0 < '{}' 2>/dev/null; echo; ",
            vault.join(f).display()
        ));
    }
    cmd.push_str(&format!(
        "printf 'bot-entries='; ls -A '{}' | wc -l; echo probe-done",
        vault.join("bot").display()
    ));
    let script = root.join("script.jsonl");
    let text = std::fs::read_to_string(&script).unwrap();
    std::fs::write(&script, text.replace(probe, &cmd)).unwrap();
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("probe-done"), "{text}");
    let var = |v: &Path| Some(v.as_os_str().to_owned());
    w.serve_env = vec![
        ("GIT_AGENT_WEBHOOK_SECRET".into(), None),
        (
            "GIT_AGENT_WEBHOOK_SECRET_FILE".into(),
            var(&vault.join("bot/webhook.secret")),
        ),
        (
            "GIT_AGENT_STATUS_TOKEN_FILE".into(),
            var(&vault.join("bot/status.token")),
        ),
        ("GIT_CONFIG_GLOBAL".into(), var(&gitconfig)),
    ];

    let bot = Running::start(&w, free_port(), None).await;
    assert_eq!(bot.post("issues", "s-1", &w.payload).await, 202);
    let job = bot.finished("s-1").await;
    assert_eq!(job.run_state.as_deref(), Some("succeeded"), "{job:?}");
    let record = std::fs::read_to_string(
        root.join("state/repos")
            .join(&w.owner)
            .join(format!("{}.git", w.name))
            .join("agent/runs")
            .join(job.run_id.clone().unwrap())
            .join("conversation.jsonl"),
    )
    .unwrap();
    assert!(record.contains("probe-done"), "the probe ran: {record}");
    let seen =
        |body: &str| record.contains(&base64::engine::general_purpose::STANDARD.encode(body));
    for (f, body) in &files {
        if f.ends_with("README") {
            assert!(seen(body), "the control is readable: {record}");
        } else {
            assert!(!seen(body), "{f} is readable in the run's view:\n{record}");
        }
    }
    // The bot's directory holds only secrets: hidden whole, its listing empty.
    assert!(record.contains("bot-entries=0"), "{record}");
    bot.stop();
}
