//! bench-run: the harness's own cost per turn of a run — everything except model latency and
//! test commands — on a 50-turn scripted run in a large repository.
//!
//! usage: bench-run [--files N] [--turns N] [--runs N]
//!
//! Builds a synthetic repository of N files (default 20,000; created with `git fast-import`,
//! not timed), then drives the real engine in-process with a scripted model of T turns
//! (default 50: one plan, edits, reads, scoped searches and listings, then `finish`) and the
//! test command `true`. Per turn it reports the median wall time between model calls, and a
//! breakdown by tracing span (exclusive time: a span's children are not counted twice):
//! model call (the router and the scripted client: our code, no network), tool dispatch,
//! policy, audit write, state persist (record, conversation and the `refs/agent/runs` mirror)
//! and commit. The peer, measured in the same run on the same repository, is what an agent
//! that auto-commits every edit pays per turn with git itself (`git add -A && git commit`, as
//! aider does); the ratio is ours / the peer's.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use git_agent::audit::redact::Redactor;
use git_agent::config::{Config, Layer, Source};
use git_agent::exec::ExecOptions;
use git_agent::model::{Router, RouterOptions};
use git_agent::run::engine::{self, RunEvent, Services, StartOptions};
use git_agent::task::{Mode, Origin, Task};
use git_agent::workspace::Repo;
use serde_json::json;
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, Layer as _, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

/// Span names, in report order.
const PARTS: &[&str] = &[
    "model_call",
    "tool_dispatch",
    "policy",
    "audit_write",
    "state_persist",
    "commit",
    "transcript",
    "test_command",
];

fn arg(args: &[String], name: &str, default: usize) -> Result<usize> {
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .context("missing value")?
            .parse()
            .with_context(|| format!("{name} takes a number")),
        None => Ok(default),
    }
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
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
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn path_of(i: usize) -> String {
    format!("src/mod_{}/sub_{}/file_{i}.rs", i % 40, (i / 40) % 25)
}

fn body_of(i: usize) -> String {
    let mut s = format!("//! File {i}.\n\n");
    for f in 0..12 {
        s.push_str(&format!(
            "/// Returns {f} plus the file number.\npub fn value_{i}_{f}() -> u64 {{\n    {i} + {f}\n}}\n\n"
        ));
    }
    s
}

/// A repository of `n` files, written in one `git fast-import` stream.
fn make_repo(dir: &Path, n: usize) -> Result<()> {
    git(dir, &["init", "-q", "-b", "main"])?;
    let mut child = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .spawn()?;
    {
        let mut w = std::io::BufWriter::new(child.stdin.take().context("stdin")?);
        for i in 0..n {
            let b = body_of(i);
            write!(w, "blob\nmark :{}\ndata {}\n{b}\n", i + 1, b.len())?;
        }
        let msg = "synthetic tree";
        write!(
            w,
            "commit refs/heads/main\ncommitter bench <bench@example.com> 1700000000 +0000\ndata {}\n{msg}\n",
            msg.len()
        )?;
        for i in 0..n {
            writeln!(w, "M 100644 :{} {}", i + 1, path_of(i))?;
        }
        writeln!(w, "M 100644 inline README.md\ndata 6\nbench\n")?;
    }
    if !child.wait()?.success() {
        bail!("git fast-import failed");
    }
    git(dir, &["reset", "-q", "--hard", "main"])?;
    Ok(())
}

/// The script: a plan, then edits, reads, scoped searches and listings in rotation, then
/// `finish`, `turns` model calls in all.
fn script(turns: usize, files: usize) -> String {
    let targets: Vec<usize> = (0..turns).map(|k| (k * 7919) % files).collect();
    let mut lines = vec![
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
        "steps": [{"title": "Touch the values", "files": targets.iter().map(|&i| path_of(i)).collect::<Vec<_>>()}]}}]}),
    ];
    for (k, &i) in targets.iter().enumerate().take(turns.saturating_sub(2)) {
        let call = match k % 4 {
            0 | 2 => json!({"name": "edit_file", "arguments": {"path": path_of(i),
                "old_text": format!("    {i} + 3\n"), "new_text": format!("    {i} + 3 + 0\n")}}),
            1 => json!({"name": "read_file", "arguments": {"path": path_of(i)}}),
            _ => {
                if k % 8 == 3 {
                    json!({"name": "search", "arguments": {"pattern": format!("value_{i}_"), "path": format!("src/mod_{}/sub_{}", i % 40, (i / 40) % 25)}})
                } else {
                    json!({"name": "list_files", "arguments": {"path": format!("src/mod_{}", i % 40)}})
                }
            }
        };
        lines.push(json!({"role": "coder", "tool_calls": [call]}));
    }
    lines.push(json!({"role": "coder", "tool_calls": [{"name": "finish", "arguments": {"summary": "touched"}}]}));
    lines
        .iter()
        .map(|l| l.to_string() + "\n")
        .collect::<String>()
}

/// Exclusive time per span name per turn.
#[derive(Default)]
struct Totals {
    by_turn: BTreeMap<u32, BTreeMap<&'static str, Duration>>,
}

struct Timing {
    start: Instant,
    children: Duration,
}

struct SpanTimes {
    turn: Arc<AtomicU32>,
    totals: Arc<Mutex<Totals>>,
}

impl<S> tracing_subscriber::Layer<S> for SpanTimes
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, _attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Timing {
                start: Instant::now(),
                children: Duration::ZERO,
            });
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(name) = PARTS.iter().find(|n| **n == span.name()) else {
            return;
        };
        let (inclusive, children) = match span.extensions().get::<Timing>() {
            Some(t) => (t.start.elapsed(), t.children),
            None => return,
        };
        if let Some(parent) = span.parent()
            && let Some(t) = parent.extensions_mut().get_mut::<Timing>()
        {
            t.children += inclusive;
        }
        let turn = self.turn.load(Ordering::Relaxed);
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        *totals
            .by_turn
            .entry(turn)
            .or_default()
            .entry(name)
            .or_default() += inclusive.saturating_sub(children);
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

struct Measured {
    per_turn: Vec<Duration>,
    parts: BTreeMap<&'static str, Vec<Duration>>,
    state: String,
    turns: u32,
}

async fn one_run(repo_dir: &Path, script_path: &Path, turns: usize) -> Result<Measured> {
    let turn = Arc::new(AtomicU32::new(0));
    let totals = Arc::new(Mutex::new(Totals::default()));
    let marks: Arc<Mutex<Vec<(u32, Instant)>>> = Arc::default();
    let subscriber = tracing_subscriber::registry().with(
        SpanTimes {
            turn: turn.clone(),
            totals: totals.clone(),
        }
        .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
    );
    let _guard = tracing::subscriber::set_default(subscriber);

    let layers = vec![
        Layer::Value {
            key: "verify.test".into(),
            value: "\"true\"".into(),
            origin: Source::Flag {
                flag: "--test-cmd".into(),
            },
        },
        Layer::Value {
            key: "budget.max_turns".into(),
            value: (turns + 5).to_string(),
            origin: Source::Flag {
                flag: "--max-turns".into(),
            },
        },
    ];
    let cfg = Config::resolve(layers)?;
    let model = format!("scripted:{}", script_path.display());
    let router = Router::from_settings(
        &cfg.settings,
        &RouterOptions {
            model_flags: vec![model.clone()],
            record: None,
            resume: None,
        },
        &|k: &str| std::env::var(k).ok(),
    )?;
    let exec_options = ExecOptions::from_settings(&cfg.settings);
    let t = turn.clone();
    let m = marks.clone();
    let svc = Services {
        config: cfg,
        repo: Repo::open(repo_dir)?.with_state_dir(repo_dir.with_file_name("state")),
        router: Arc::new(router),
        redactor: Arc::new(Redactor::from_process_env(&[])?),
        progress: Arc::new(move |e: &RunEvent| {
            if let RunEvent::Turn { n, .. } = e {
                t.store(*n, Ordering::Relaxed);
                m.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((*n, Instant::now()));
            }
        }),
        exec_options,
        warm_pool: false,
    };
    let task = Task {
        goal: "Touch the values".into(),
        mode: Mode::Fix,
        origin: Origin::Cli,
        repo: None,
        base: "main".into(),
        branch: None,
        requested_by: None,
        key: String::new(),
    };
    let opts = StartOptions {
        test_command: Some("true".into()),
        model_flags: vec![model],
        ..StartOptions::default()
    };
    let outcome = engine::start(&svc, task, opts).await?;
    let marks = marks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let totals = totals.lock().unwrap_or_else(|p| p.into_inner());
    // Coder turns between the first and the last (no plan, no baseline, no final test).
    let mut per_turn = Vec::new();
    let mut parts: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    for w in marks.windows(2) {
        let (n, at) = w[0];
        if n < 2 || n as usize >= turns {
            continue;
        }
        let spent = totals.by_turn.get(&n).cloned().unwrap_or_default();
        let tests = spent.get("test_command").copied().unwrap_or_default();
        per_turn.push((w[1].1 - at).saturating_sub(tests));
        for p in PARTS {
            parts
                .entry(p)
                .or_default()
                .push(spent.get(p).copied().unwrap_or_default());
        }
    }
    Ok(Measured {
        per_turn,
        parts,
        state: outcome.record.state.to_string(),
        turns: outcome.record.turns,
    })
}

/// The peer: one file edited and auto-committed with git per turn.
fn peer(repo_dir: &Path, runs: usize) -> Result<Vec<Duration>> {
    let mut v = Vec::new();
    for k in 0..runs {
        let p = repo_dir.join(path_of(k * 31));
        let mut s = std::fs::read_to_string(&p)?;
        s.push_str("// touched\n");
        let t = Instant::now();
        std::fs::write(&p, s)?;
        git(repo_dir, &["add", "-A"])?;
        git(repo_dir, &["commit", "-q", "-m", "edit"])?;
        v.push(t.elapsed());
    }
    Ok(v)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let files = arg(&args, "--files", 20_000)?;
    let turns = arg(&args, "--turns", 50)?.max(4);
    let runs = arg(&args, "--runs", 3)?.max(1);
    let tmp = tempfile::tempdir()?;
    let repo_dir: PathBuf = tmp.path().join("big");
    std::fs::create_dir_all(&repo_dir)?;
    let t = Instant::now();
    make_repo(&repo_dir, files)?;
    eprintln!(
        "repository: {files} files, made in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let script_path = tmp.path().join("script.jsonl");
    std::fs::write(&script_path, script(turns, files))?;

    let rt = tokio::runtime::Runtime::new()?;
    let mut per_turn = Vec::new();
    let mut parts: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    for r in 0..runs {
        let m = rt.block_on(one_run(&repo_dir, &script_path, turns))?;
        if m.state != "succeeded" {
            bail!("run {r} ended {} after {} turns", m.state, m.turns);
        }
        eprintln!(
            "run {}: {} turns, median {} per turn",
            r + 1,
            m.turns,
            ms(median(m.per_turn.clone()))
        );
        per_turn.extend(m.per_turn);
        for (k, v) in m.parts {
            parts.entry(k).or_default().extend(v);
        }
    }
    let peer_dir = tmp.path().join("peer");
    git(
        tmp.path(),
        &[
            "clone",
            "-q",
            repo_dir.to_str().context("utf-8 path")?,
            "peer",
        ],
    )?;
    let peer_times = peer(&peer_dir, 30)?;

    let ours = median(per_turn.clone());
    let theirs = median(peer_times);
    let mut sorted = per_turn.clone();
    sorted.sort();
    let p90 = sorted[(sorted.len() * 9 / 10).min(sorted.len() - 1)];
    println!(
        "bench-run: {files} files, {turns}-turn scripted run × {runs}, {} coder turns measured",
        per_turn.len()
    );
    println!(
        "harness per turn: median {} (p90 {}), target ≤ 5 ms",
        ms(ours),
        ms(p90)
    );
    println!("breakdown (median per turn, exclusive):");
    for p in PARTS {
        if *p == "test_command" {
            continue;
        }
        let v = parts.get(p).cloned().unwrap_or_default();
        println!("  {p:<14} {}", ms(median(v)));
    }
    println!(
        "peer: git add -A && git commit per edit: median {}",
        ms(theirs)
    );
    println!(
        "ratio ours/peer: {:.2}",
        ours.as_secs_f64() / theirs.as_secs_f64().max(1e-9)
    );
    Ok(())
}
