//! bench-workspace: our git engine against the `git` CLI on one repository, in one run.
//!
//! usage: bench-workspace REPO [--runs N] [--files N]
//!
//! Reports medians of N (default 5) for: `git worktree add` vs our fresh worktree; our warm
//! pool reuse after a run that changed a few files; our commit of a K-file change (default
//! 10) vs `git add -A && git commit`. Ratios are ours / git's.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use git_agent::workspace::{CommitRequest, Repo, WorktreeOptions, WorktreeRequest};

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("git")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
        ])
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn tracked_files(dir: &Path, n: usize) -> Result<Vec<String>> {
    let out = Command::new("git")
        .args(["ls-files", "*.c"])
        .current_dir(dir)
        .output()?;
    let all: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    if all.len() < n {
        bail!("need at least {n} tracked .c files");
    }
    let step = all.len() / n;
    Ok((0..n).map(|i| all[i * step].clone()).collect())
}

fn touch_files(root: &Path, files: &[String], tag: &str) -> Result<()> {
    for f in files {
        let p = root.join(f);
        let mut data = std::fs::read(&p)?;
        data.extend_from_slice(format!("/* {tag} */\n").as_bytes());
        std::fs::write(&p, data)?;
    }
    Ok(())
}

fn req(subject: &str) -> CommitRequest {
    CommitRequest {
        subject: subject.into(),
        body: String::new(),
        trailers: vec![("Agent-Run".into(), "bench".into())],
        author_name: "bench".into(),
        author_email: "bench@example.com".into(),
        time: None,
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut repo_dir: Option<PathBuf> = None;
    let mut runs = 5usize;
    let mut nfiles = 10usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().context("--runs N")?.parse()?,
            "--files" => nfiles = args.next().context("--files N")?.parse()?,
            _ => repo_dir = Some(PathBuf::from(a)),
        }
    }
    let repo_dir = repo_dir.context("usage: bench-workspace REPO [--runs N] [--files N]")?;
    let files = tracked_files(&repo_dir, nfiles)?;
    let scratch = tempfile::tempdir()?;
    // Run worktrees and the pool live in a state directory of the bench's own.
    let repo = Repo::discover(&repo_dir)?.with_state_dir(scratch.path().join("state"));
    let count = {
        let out = Command::new("git")
            .args(["ls-files"])
            .current_dir(&repo_dir)
            .output()?;
        out.stdout.iter().filter(|&&b| b == b'\n').count()
    };
    println!(
        "repository: {} ({count} files), medians of {runs}",
        repo_dir.display()
    );

    // Branch names unique to this invocation, deleted at the end, so runs never collide
    // with what an interrupted earlier run left behind.
    let tag = format!("{:x}", std::process::id());
    let mut made: Vec<String> = Vec::new();
    let (mut git_add, mut ours_fresh, mut ours_warm, mut git_commit, mut ours_commit) =
        (vec![], vec![], vec![], vec![], vec![]);
    for i in 0..runs {
        // git worktree add
        let dest = scratch.path().join(format!("git-wt-{i}"));
        let t = Instant::now();
        git(
            &repo_dir,
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                &{
                    let b = format!("bench/git-{tag}-{i}");
                    made.push(b.clone());
                    b
                },
                dest.to_str().context("utf8")?,
                "HEAD",
            ],
        )?;
        git_add.push(t.elapsed());

        // git add -A && git commit of a K-file change, in that worktree
        touch_files(&dest, &files, &format!("git {i}"))?;
        let t = Instant::now();
        git(&dest, &["add", "-A"])?;
        git(&dest, &["commit", "-q", "-m", "bench"])?;
        git_commit.push(t.elapsed());
        git(
            &repo_dir,
            &[
                "worktree",
                "remove",
                "--force",
                dest.to_str().context("utf8")?,
            ],
        )?;

        // our fresh worktree
        let t = Instant::now();
        let (wt, _) = repo.create_worktree(
            &WorktreeRequest {
                run_id: format!("bench-fresh-{tag}-{i}"),
                branch: {
                    let b = format!("agent/bench-fresh-{tag}-{i}");
                    made.push(b.clone());
                    b
                },
                base: "HEAD".into(),
            },
            WorktreeOptions::default(),
        )?;
        ours_fresh.push(t.elapsed());

        // our commit of the same K-file change
        touch_files(wt.path(), &files, &format!("ours {i}"))?;
        let t = Instant::now();
        wt.commit_all(&req("bench"))?.context("a commit")?;
        ours_commit.push(t.elapsed());

        // hand it to the pool, then take it for the next run (warm reuse)
        wt.release_to_pool()?;
        let t = Instant::now();
        let (wt, prov) = repo.create_worktree(
            &WorktreeRequest {
                run_id: format!("bench-warm-{tag}-{i}"),
                branch: {
                    let b = format!("agent/bench-warm-{tag}-{i}");
                    made.push(b.clone());
                    b
                },
                base: "HEAD".into(),
            },
            WorktreeOptions {
                resume: false,
                warm: true,
            },
        )?;
        ours_warm.push(t.elapsed());
        if !matches!(prov, git_agent::workspace::Provenance::Warm { .. }) {
            bail!("expected a warm reuse, got {prov:?}");
        }
        wt.remove()?;
        eprintln!("run {} of {runs} done", i + 1);
    }
    let mut delete = vec!["branch", "-q", "-D"];
    delete.extend(made.iter().map(String::as_str));
    git(&repo_dir, &delete)?;
    let (ga, of, ow, gc, oc) = (
        median(git_add),
        median(ours_fresh),
        median(ours_warm),
        median(git_commit),
        median(ours_commit),
    );
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("| operation | git | ours | ours / git | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| fresh worktree | {:.0} ms | {:.0} ms | {:.2}× | ≤ 1.1× |",
        ms(ga),
        ms(of),
        ms(of) / ms(ga)
    );
    println!(
        "| warm reuse (vs git worktree add) | {:.0} ms | {:.1} ms | {:.3}× | ≤ 0.05× |",
        ms(ga),
        ms(ow),
        ms(ow) / ms(ga)
    );
    println!(
        "| commit of {nfiles} files | {:.0} ms | {:.0} ms | {:.2}× | ≤ 1.0× |",
        ms(gc),
        ms(oc),
        ms(oc) / ms(gc)
    );
    Ok(())
}
