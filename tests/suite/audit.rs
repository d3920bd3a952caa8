//! The audit chain under a real `kill -9`: a child process appends as fast as it can, is killed
//! mid-stream, and the chain must still verify and continue from its last event.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use git_agent::audit::chain::{self, Appender, Kind, Verification};
use serde_json::json;

const CHILD_ENV: &str = "GIT_AGENT_TEST_AUDIT_CHILD_LOG";

/// Not a test on its own: the child process of `kill9_mid_append_leaves_a_resumable_chain`,
/// run only through `--ignored` with the log path in the environment.
#[test]
#[ignore = "child process of kill9_mid_append_leaves_a_resumable_chain"]
fn kill9_child_appends_forever() {
    let path = std::env::var(CHILD_ENV).expect("run only as the kill -9 test's child");
    let (app, _) = Appender::open(Path::new(&path), "run-kill", chain::no_redaction()).unwrap();
    let filler = "x".repeat(3000);
    for i in 0u64.. {
        app.append(Kind::ToolResult, json!({"i": i, "out": filler}))
            .unwrap();
    }
}

fn lines(path: &Path) -> usize {
    std::fs::read(path)
        .map(|b| b.iter().filter(|c| **c == b'\n').count())
        .unwrap_or(0)
}

#[test]
fn kill9_mid_append_leaves_a_resumable_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let exe = std::env::current_exe().unwrap();
    let mut target = 0;
    for round in 0..3 {
        target += 20;
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "suite::audit::kill9_child_appends_forever",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while lines(&path) < target {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "round {round}: the child wrote only {} events",
                lines(&path)
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "the child exited early"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // `Child::kill` is SIGKILL on Unix: no destructor, no flush, as with `kill -9`.
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );

        // Whatever the kill left, reopening cuts at most a torn line and continues.
        let (app, recovery) = Appender::open(&path, "run-kill", chain::no_redaction()).unwrap();
        assert!(recovery.head.seq >= target as u64);
        let resumed = app
            .append(Kind::State, json!({"resumed_after_kill": round}))
            .unwrap();
        assert_eq!(resumed.seq, recovery.head.seq + 1);
        assert_eq!(resumed.prev, recovery.head.hash);
        let head = app.head().unwrap();
        drop(app);
        match chain::verify(&path, Some("run-kill"), Some(&head)).unwrap() {
            Verification::Intact { events, .. } => assert_eq!(events, head.seq),
            broken => panic!("round {round}: {broken:?}"),
        }
        target = lines(&path);
    }
}
