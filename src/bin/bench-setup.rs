//! bench-setup: the project's environment set-up (issue 19) against doing the same by hand.
//!
//! usage: bench-setup REPO --hand "SHELL LINE" [--rounds N]
//!
//! Per round (default 2), in the same run: the hand-made set-up (`--hand`, run with `sh -c`
//! in a fresh clone of REPO, no sandbox, its package caches pointed at empty directories as
//! the sandbox's fresh `$HOME` has them), then `git agent plan` on REPO with a fresh state
//! directory (cold: the set-up runs), then again on the same state directory (warm: the
//! cache entry is reused). Set-up times are read from the run record
//! (`setup.runs[0].duration_ms`: checkout, commands, keeping the outputs). Reports medians,
//! cold ÷ hand and warm ÷ cold, with the baseline test run's duration beside (from the same
//! records: `verification[when = before]`). The `git-agent` binary is the one beside this
//! program.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .status()?
        .success();
    if !ok {
        bail!("git {args:?} failed in {}", dir.display());
    }
    Ok(())
}

/// What one `git agent plan` run's record says.
struct Timing {
    /// The set-up's duration.
    setup: Duration,
    /// Whether the set-up was reused from the cache.
    cached: bool,
    /// The baseline test run's duration (`None`: no test command ran).
    baseline: Option<Duration>,
}

/// One `git agent plan` on `repo` with `state`: the set-up's duration, whether it was
/// reused, and the baseline test run's duration, from the record.
fn agent_plan(agent: &Path, repo: &Path, state: &Path, n: usize) -> Result<Timing> {
    let script = state.with_extension(format!("script-{n}.jsonl"));
    std::fs::write(
        &script,
        "{\"role\":\"planner\",\"tool_calls\":[{\"name\":\"update_plan\",\"arguments\":{\"steps\":[{\"title\":\"bench\",\"files\":[\"README.md\"]}]}}]}\n",
    )?;
    let out = Command::new(agent)
        .args(["plan", "--json", "--model"])
        .arg(format!("scripted:{}", script.display()))
        .arg(format!("bench set-up {n}"))
        .arg("--repo")
        .arg(repo)
        .env("XDG_STATE_HOME", state)
        .output()?;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "no JSON from git agent plan: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let run = json["run_id"].as_str().context("no run id")?;
    let rec: serde_json::Value = serde_json::from_slice(&std::fs::read(
        repo.join(".git/agent/runs").join(run).join("record.json"),
    )?)?;
    let setup = &rec["setup"]["runs"][0];
    let ms = setup["duration_ms"]
        .as_u64()
        .with_context(|| format!("the run set nothing up: {}", rec["notes"]))?;
    let baseline = rec["verification"]
        .as_array()
        .and_then(|v| v.iter().find(|l| l["when"] == "before"))
        .and_then(|l| l["duration_ms"].as_u64())
        .map(Duration::from_millis);
    Ok(Timing {
        setup: Duration::from_millis(ms),
        cached: setup["cached"] == true,
        baseline,
    })
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut repo: Option<PathBuf> = None;
    let mut hand: Option<String> = None;
    let mut rounds = 2usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--hand" => hand = args.next(),
            "--rounds" => rounds = args.next().context("--rounds N")?.parse()?,
            _ => repo = Some(PathBuf::from(a)),
        }
    }
    let (Some(repo), Some(hand)) = (repo, hand) else {
        bail!("usage: bench-setup REPO --hand \"SHELL LINE\" [--rounds N]");
    };
    let agent = std::env::current_exe()?
        .parent()
        .context("no directory")?
        .join("git-agent");
    let tmp = tempfile::tempdir()?;
    let (mut hands, mut colds, mut warms) = (Vec::new(), Vec::new(), Vec::new());
    let mut baselines = Vec::new();
    for round in 0..rounds {
        let clone = tmp.path().join(format!("hand-{round}"));
        git(
            tmp.path(),
            &[
                "clone",
                "-q",
                &repo.display().to_string(),
                &clone.display().to_string(),
            ],
        )?;
        let caches = tmp.path().join(format!("caches-{round}"));
        std::fs::create_dir_all(&caches)?;
        let start = Instant::now();
        let ok = Command::new("sh")
            .arg("-c")
            .arg(&hand)
            .current_dir(&clone)
            .env("PIP_NO_CACHE_DIR", "1")
            .env("npm_config_cache", caches.join("npm"))
            .env("CARGO_HOME", caches.join("cargo"))
            .env("HOME", &caches)
            .status()?
            .success();
        let h = start.elapsed();
        if !ok {
            bail!("the hand-made set-up failed: {hand}");
        }
        let state = tmp.path().join(format!("state-{round}"));
        let cold = agent_plan(&agent, &repo, &state, 2 * round)?;
        if cold.cached {
            bail!("a fresh state directory had a warm cache");
        }
        let warm = agent_plan(&agent, &repo, &state, 2 * round + 1)?;
        if !warm.cached {
            bail!("the second run did not reuse the set-up");
        }
        let baseline = warm.baseline.or(cold.baseline);
        eprintln!(
            "round {round}: hand {:.2} s, cold {:.2} s, warm {:.3} s, baseline tests {}",
            h.as_secs_f64(),
            cold.setup.as_secs_f64(),
            warm.setup.as_secs_f64(),
            baseline.map_or("none".into(), |b| format!("{:.2} s", b.as_secs_f64()))
        );
        baselines.extend(baseline);
        let (cold, warm) = (cold.setup, warm.setup);
        hands.push(h);
        colds.push(cold);
        warms.push(warm);
    }
    let (h, c, w) = (median(hands), median(colds), median(warms));
    let baseline = if baselines.is_empty() {
        "no test command".to_string()
    } else {
        format!("{:.2} s", median(baselines).as_secs_f64())
    };
    println!(
        "{}: hand {:.2} s · cold {:.2} s · warm {:.3} s · cold/hand {:.2}× · warm/cold {:.3}× · baseline tests {baseline}",
        repo.display(),
        h.as_secs_f64(),
        c.as_secs_f64(),
        w.as_secs_f64(),
        c.as_secs_f64() / h.as_secs_f64(),
        w.as_secs_f64() / c.as_secs_f64()
    );
    Ok(())
}
