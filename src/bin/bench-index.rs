//! bench-index: a full index build of a large repository against `ctags -R` in the same run,
//! then the update after a one-file change, with peak memory of both.
//!
//! `cargo run --release --features bench --bin bench-index -- [--repo DIR] [--threads N] [--skip-ctags]`
//!
//! The repository must have a work tree (ctags reads files; we read the commit's blobs from the
//! object database). The one-file change is committed and then undone with `git reset`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result, bail};
use git_agent::index::{CacheLocation, Index, IndexOptions};
use git_agent::workspace::Repo;

fn peak_rss_self_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

#[allow(unsafe_code)]
fn peak_rss_children_kib() -> u64 {
    // SAFETY: rusage is plain data; all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    if rc == 0 { ru.ru_maxrss as u64 } else { 0 }
}

fn git(dir: &std::path::Path, args: &[&str]) -> Result<()> {
    let st = Command::new("git")
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .status()?;
    if !st.success() {
        bail!("git {args:?} failed");
    }
    Ok(())
}

fn main() -> Result<()> {
    let mut dir = PathBuf::from("/work/targets/index/bench/linux-source-6.1");
    let mut threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut ctags = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repo" => dir = args.next().context("--repo needs a path")?.into(),
            "--threads" => threads = args.next().context("--threads needs N")?.parse()?,
            "--skip-ctags" => ctags = false,
            other => bail!("unknown argument {other}"),
        }
    }
    let repo = Repo::open(&dir)?;
    let scratch = tempfile::tempdir()?;

    let ctags_secs = if ctags {
        let t = Instant::now();
        let st = Command::new("ctags")
            .args(["-R", "-f"])
            .arg(scratch.path().join("tags"))
            .arg(".")
            .current_dir(&dir)
            .status()
            .context("running ctags (apt-get install universal-ctags)")?;
        if !st.success() {
            bail!("ctags failed: {st}");
        }
        let secs = t.elapsed().as_secs_f64();
        let tags = std::fs::metadata(scratch.path().join("tags"))?.len();
        eprintln!("ctags -R: {secs:.1} s, tags file {} MiB", tags >> 20);
        Some(secs)
    } else {
        None
    };
    let ctags_peak = peak_rss_children_kib();

    let opts = IndexOptions {
        threads,
        cache: CacheLocation::Dir(scratch.path().join("cache")),
    };
    let t = Instant::now();
    let mut index = Index::at_commit(&repo, "HEAD", &opts)?;
    let build_secs = t.elapsed().as_secs_f64();
    let build_peak = peak_rss_self_kib();
    let stats = index.stats();
    let cache_bytes: u64 = std::fs::read_dir(scratch.path().join("cache"))?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    let defs: usize = index.files().iter().map(|f| f.summary.defs.len()).sum();

    // Warm rebuild: every summary from the cache.
    let t = Instant::now();
    let warm = Index::at_commit(&repo, "HEAD", &opts)?;
    let warm_secs = t.elapsed().as_secs_f64();
    drop(warm);

    // One-file change, committed.
    let target = index
        .files()
        .iter()
        .find(|f| f.path.ends_with(".c") && f.summary.lines > 200)
        .map(|f| f.path.clone())
        .context("no C file to change")?;
    let path = dir.join(&target);
    let mut text = std::fs::read_to_string(&path)?;
    text.push_str("\nint bench_index_added_function(int x) { return x + 1; }\n");
    std::fs::write(&path, &text)?;
    git(
        &dir,
        &["commit", "-q", "-a", "-m", "bench-index: one-file change"],
    )?;
    let t = Instant::now();
    let upd = index.update_to_commit(&repo, "HEAD");
    let update_ms = t.elapsed().as_secs_f64() * 1000.0;
    git(&dir, &["reset", "-q", "--hard", "HEAD~1"])?;
    let upd = upd?;
    let found = index.file(&target).is_some_and(|f| {
        f.summary
            .defs
            .iter()
            .any(|d| d.name == "bench_index_added_function")
    });
    if !found {
        bail!("the update did not pick up the new function in {target}");
    }

    println!(
        "repository: {} ({} files indexed, {} definitions)",
        dir.display(),
        stats.files,
        defs
    );
    println!("threads: ours {threads}, ctags 1\n");
    println!("| step | ours | ctags -R | ratio (ctags time / ours) |");
    println!("|---|---|---|---|");
    match ctags_secs {
        Some(c) => println!(
            "| full build | {build_secs:.1} s ({} MiB parsed) | {c:.1} s | {:.2}x |",
            stats.bytes_parsed >> 20,
            c / build_secs
        ),
        None => println!("| full build | {build_secs:.1} s | (skipped) | |"),
    }
    println!("| warm rebuild from cache | {warm_secs:.2} s | | |");
    println!(
        "| update after a one-file change | {update_ms:.1} ms ({} parsed) | | |",
        upd.parsed
    );
    println!(
        "| peak memory | {} MiB | {} MiB | |",
        build_peak >> 10,
        ctags_peak >> 10
    );
    println!("| cache on disk | {} MiB | | |", cache_bytes >> 20);
    Ok(())
}
