//! bench-verify: the cost of the clean-tree verification (issue 18) on one repository.
//!
//! usage: bench-verify REPO --test CMD [--runs N]
//!
//! In a run worktree of REPO (its HEAD), the test command runs once to warm it (as the
//! baseline does), then N times (default 3) in the worktree and N times in a clean checkout
//! of the same commit made as the final verification makes it (snapshot, fresh checkout, a
//! sandboxed executor rooted there, the test run, removal). Reports medians and the ratio
//! clean / worktree: what deciding on the committed tree costs over deciding in the
//! worktree the model worked in.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use git_agent::config::Config;
use git_agent::exec::{ExecOptions, ExecRequest, Executor, LocalExecutor, Termination};
use git_agent::workspace::{Repo, WorktreeOptions, WorktreeRequest};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

async fn run_tests(exec: &dyn Executor, cmd: &str) -> Result<(Duration, Option<i32>)> {
    let start = Instant::now();
    let out = exec
        .run(ExecRequest::shell(cmd.to_string()).timeout(Duration::from_secs(1800)))
        .await?;
    let code = match out.status {
        Termination::Exited(c) => Some(c),
        _ => None,
    };
    Ok((start.elapsed(), code))
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut repo_path: Option<PathBuf> = None;
    let mut test: Option<String> = None;
    let mut runs = 3usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--test" => test = args.next(),
            "--runs" => runs = args.next().context("--runs N")?.parse()?,
            _ if repo_path.is_none() => repo_path = Some(a.into()),
            other => bail!("unexpected argument {other}"),
        }
    }
    let (Some(repo_path), Some(test)) = (repo_path, test) else {
        bail!("usage: bench-verify REPO --test CMD [--runs N]");
    };
    let config = Config::resolve(Vec::new())?;
    let opts = ExecOptions::from_settings(&config.settings);
    let repo = Repo::discover(&repo_path)?;
    let id = format!("bench-verify-{}", std::process::id());
    let (wt, _) = repo.create_worktree(
        &WorktreeRequest {
            run_id: id.clone(),
            branch: format!("bench/{id}"),
            base: "HEAD".into(),
        },
        WorktreeOptions::default(),
    )?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let exec = LocalExecutor::new(wt.path(), opts.clone())?;
        eprintln!("sandbox: {}", exec.sandbox().summary());
        let (warm, code) = run_tests(&exec, &test).await?;
        eprintln!("warm-up (the baseline) in the worktree: {warm:?}, exit {code:?}");
        let mut in_worktree = Vec::new();
        let mut in_clean = Vec::new();
        let mut checkout = Vec::new();
        for i in 0..runs {
            let (t, code) = run_tests(&exec, &test).await?;
            eprintln!("worktree run {i}: {t:?}, exit {code:?}");
            in_worktree.push(t);
            let start = Instant::now();
            let snap = wt.snapshot()?;
            let tree = repo.clean_checkout(&format!("{id}-verify"), snap)?;
            let clean_exec = LocalExecutor::new(tree.path(), opts.clone())?;
            checkout.push(start.elapsed());
            let (_, code) = run_tests(&clean_exec, &test).await?;
            drop(clean_exec);
            tree.remove()?;
            let t = start.elapsed();
            eprintln!("clean run {i}: {t:?}, exit {code:?}");
            in_clean.push(t);
        }
        anyhow::Ok((median(in_worktree), median(in_clean), median(checkout)))
    });
    let _ = wt.remove();
    let (w, c, k) = result?;
    println!("repository: {}", repo_path.display());
    println!("test command: {test}");
    println!("runs: {runs} (medians)");
    println!("worktree (warm) run:         {:>10.3} s", w.as_secs_f64());
    println!("clean checkout + run:        {:>10.3} s", c.as_secs_f64());
    println!("  of which checkout+executor: {:>9.3} s", k.as_secs_f64());
    println!(
        "ratio clean / worktree:      {:>10.2}x",
        c.as_secs_f64() / w.as_secs_f64()
    );
    Ok(())
}
