//! bench-verify: the cost of the clean-tree verification (issue 18) on one repository.
//!
//! usage: bench-verify REPO --test CMD [--runs N]
//!
//! In a run worktree of REPO (its HEAD), the test command runs once to warm it (as the
//! baseline does), then N times (default 3) in the worktree and N times in a clean checkout
//! of the same commit made as the final verification makes it (snapshot, fresh checkout, a
//! sandboxed executor rooted there, the test run, removal) — once cold, once seeded from the
//! base's build kept after the warm-up as a run keeps it (`workspace::keep_build`,
//! `seed_checkout`). Reports medians and the ratios clean / worktree: what deciding on the
//! committed tree costs over deciding in the worktree the model worked in.
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
    // Run worktrees and checkouts in a state directory of the bench's own (no dot in it).
    let state = tempfile::Builder::new()
        .prefix("bench-verify-state-")
        .tempdir_in("/tmp")?;
    let repo = Repo::discover(&repo_path)?.with_state_dir(state.path());
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
        // As the run does after its baseline: keep the base's Rust build (if any) aside.
        let kept_dir = tempfile::Builder::new()
            .prefix("bench-verify-kept-")
            .tempdir()?;
        let kept_at = kept_dir.path().join("base-build");
        let start = Instant::now();
        let kept = git_agent::workspace::keep_build(wt.path(), &kept_at, u64::MAX)?;
        let keep_took = start.elapsed();
        eprintln!("kept the base's build: {kept:?} in {keep_took:?}");
        let base = wt.head()?;
        let mut in_worktree = Vec::new();
        let mut in_clean = Vec::new();
        let mut in_seeded = Vec::new();
        let mut checkout = Vec::new();
        let mut seeding = Vec::new();
        for i in 0..runs {
            let (t, code) = run_tests(&exec, &test).await?;
            eprintln!("worktree run {i}: {t:?}, exit {code:?}");
            in_worktree.push(t);
            for seeded in [false, true] {
                let start = Instant::now();
                let snap = wt.snapshot()?;
                let tree = repo.clean_checkout(&format!("{id}-verify"), snap)?;
                let before_seed = start.elapsed();
                if seeded {
                    let changed: std::collections::BTreeSet<String> = repo
                        .changed_blobs(base, snap)?
                        .into_iter()
                        .map(|c| c.path)
                        .collect();
                    git_agent::workspace::seed_checkout(&kept_at, tree.path(), &|p| {
                        !changed.contains(p)
                    })?;
                    seeding.push(start.elapsed() - before_seed);
                }
                let clean_exec = LocalExecutor::new(tree.path(), opts.clone())?;
                if !seeded {
                    checkout.push(start.elapsed());
                }
                let (_, code) = run_tests(&clean_exec, &test).await?;
                drop(clean_exec);
                tree.remove()?;
                let t = start.elapsed();
                let what = if seeded {
                    "seeded from the base's build"
                } else {
                    "cold"
                };
                eprintln!("clean run {i} ({what}): {t:?}, exit {code:?}");
                if seeded {
                    in_seeded.push(t);
                } else {
                    in_clean.push(t);
                }
            }
        }
        anyhow::Ok((
            median(in_worktree),
            median(in_clean),
            median(in_seeded),
            median(checkout),
            median(seeding),
            keep_took,
        ))
    });
    let _ = wt.remove();
    let (w, c, sd, k, seed, keep) = result?;
    println!("repository: {}", repo_path.display());
    println!("test command: {test}");
    println!("runs: {runs} (medians)");
    println!(
        "worktree (warm) run:            {:>10.3} s",
        w.as_secs_f64()
    );
    println!(
        "clean checkout + run, cold:     {:>10.3} s",
        c.as_secs_f64()
    );
    println!(
        "  of which checkout+executor:   {:>10.3} s",
        k.as_secs_f64()
    );
    println!(
        "clean checkout + run, seeded:   {:>10.3} s",
        sd.as_secs_f64()
    );
    println!(
        "  of which seeding:             {:>10.3} s",
        seed.as_secs_f64()
    );
    println!(
        "keeping the base's build (once): {:>9.3} s",
        keep.as_secs_f64()
    );
    println!(
        "ratio clean / worktree:         {:>10.2}x cold, {:.2}x seeded",
        c.as_secs_f64() / w.as_secs_f64(),
        sd.as_secs_f64() / w.as_secs_f64()
    );
    Ok(())
}
