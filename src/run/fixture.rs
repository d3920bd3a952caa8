//! A world for the run's unit tests: a real git repository in a temp dir whose test command
//! passes once `value.txt` says `2`, the default configuration, a scripted model and a
//! progress log.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::engine::{RunEvent, Services, StartOptions};
use super::ledger::Ledger;
use crate::audit::redact::Redactor;
use crate::config::Config;
use crate::exec::ExecOptions;
use crate::model::{Router, RouterOptions};
use crate::task::{Mode, Origin, Task};
use crate::workspace::Repo;

/// The project's test command: passes when `value.txt` holds `2`.
pub(super) const TEST: &str = "sh check.sh";

pub(super) struct World {
    tmp: tempfile::TempDir,
    events: Arc<Mutex<Vec<String>>>,
}

/// Run git in `dir`, panicking with its stderr when it fails.
pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl World {
    /// A secret the redactor knows.
    pub(super) const SECRET: &'static str = "sk-fixture-Zq8wK3pX9vLmT4rB";

    /// A repository with `value.txt` = 1 committed on `main`, and `script` as the model.
    pub(super) fn new(script: &[serde_json::Value]) -> Self {
        // No dot-component: run checkouts go under its state directory (issue 39).
        let tmp = tempfile::Builder::new()
            .prefix("ga-test-")
            .tempdir()
            .expect("temp dir");
        let work = tmp.path().join("work");
        std::fs::create_dir_all(&work).expect("work dir");
        std::fs::write(work.join("value.txt"), "1\n").expect("write");
        std::fs::write(work.join("check.sh"), "grep -qx 2 value.txt\n").expect("write");
        git(&work, &["init", "-q", "-b", "main"]);
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", "fixture"]);
        let text: String = script.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(tmp.path().join("script.jsonl"), text).expect("write");
        World {
            tmp,
            events: Arc::default(),
        }
    }

    /// The main worktree.
    pub(super) fn work(&self) -> PathBuf {
        self.tmp.path().join("work")
    }

    /// Services over the world: `TEST` as the test command, no warm pool.
    pub(super) fn services(&self) -> Services {
        let repo = Repo::open(self.work())
            .expect("repo opens")
            .with_state_dir(self.tmp.path().join("state"));
        let mut config = Config::resolve(Vec::new()).expect("default config");
        config.settings.verify.test = Some(TEST.into());
        let script = self.tmp.path().join("script.jsonl");
        let router = Router::from_settings(
            &config.settings,
            &RouterOptions {
                model_flags: vec![format!("scripted:{}", script.display())],
                record: None,
                resume: None,
            },
            &|_| None,
        )
        .expect("router");
        let exec_options = ExecOptions::from_settings(&config.settings);
        let events = self.events.clone();
        Services {
            config,
            repo,
            router: Arc::new(router),
            redactor: Arc::new(Redactor::new([Self::SECRET]).expect("redactor")),
            progress: Arc::new(move |e: &RunEvent| {
                let line = match e {
                    RunEvent::State(s) => format!("state {s}"),
                    RunEvent::Turn { role, n } => format!("turn {role} {n}"),
                    RunEvent::Tool { name, .. } => format!("tool {name}"),
                    RunEvent::Verified { when, result } => format!("verified {when}: {result}"),
                    RunEvent::Setup { result } => format!("setup {result}"),
                    RunEvent::Spend { .. } => return,
                };
                if let Ok(mut v) = events.lock() {
                    v.push(line);
                }
            }),
            exec_options,
            warm_pool: false,
        }
    }

    /// The task of every run here: "Make value two".
    pub(super) fn task() -> Task {
        Task {
            goal: "Make value two".into(),
            mode: Mode::Fix,
            origin: Origin::Cli,
            repo: None,
            base: "main".into(),
            branch: None,
            requested_by: None,
            key: String::new(),
        }
    }

    /// A fresh run of [`task`](Self::task), queued, with its directory created.
    pub(super) fn ledger<'a>(&self, svc: &'a Services) -> Ledger<'a> {
        let (rec, dir) =
            super::engine::new_record(svc, Self::task(), &StartOptions::default()).expect("record");
        Ledger::open(svc, rec, dir).expect("ledger opens")
    }

    /// What progress said so far (spend left out).
    pub(super) fn events(&self) -> Vec<String> {
        self.events.lock().map(|v| v.clone()).unwrap_or_default()
    }
}
