//! Command execution: the sandbox, limits, egress and secret hygiene, against real processes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use git_agent::config::{NetworkMode, SandboxMode};
use git_agent::exec::{ExecOptions, ExecOutput, ExecRequest, Executor, LocalExecutor, Termination};

/// A real repository with a nested repository inside it.
fn repo() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("wt");
    std::fs::create_dir(&root).unwrap();
    let git = |cwd: &Path, args: &[&str]| {
        let s = Command::new("git")
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        assert!(
            s.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&s.stderr)
        );
    };
    git(&root, &["init", "-q"]);
    std::fs::write(root.join("README"), "hello\n").unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    git(&root.join("sub"), &["init", "-q"]);
    (dir, root)
}

fn opts(sandbox: SandboxMode, network: NetworkMode) -> ExecOptions {
    ExecOptions {
        sandbox,
        network,
        timeout: Duration::from_secs(60),
        ..ExecOptions::default()
    }
}

async fn sh(exec: &LocalExecutor, script: &str) -> ExecOutput {
    exec.run(ExecRequest::shell(script)).await.unwrap()
}

fn text(out: &ExecOutput) -> String {
    format!(
        "{}{}",
        out.stdout.to_text_lossy(),
        out.stderr.to_text_lossy()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smoke_landlock_runs_true_and_echo() {
    let (_d, root) = repo();
    let exec = LocalExecutor::new(&root, opts(SandboxMode::Landlock, NetworkMode::Off)).unwrap();
    let out = sh(
        &exec,
        "echo hi; pwd; id; cat /proc/self/status | grep -E 'NoNewPrivs|Cap'; echo err >&2; exit 3",
    )
    .await;
    println!("{}", text(&out));
    assert_eq!(out.status, Termination::Exited(3));
}
