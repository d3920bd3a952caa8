//! bench-replay: real fixes from a real project's history, replayed as a new user would
//! (issue 39) — `git agent fix` on the fix's parent, detection alone (no `--test-cmd`, no
//! `[setup]`), with a scripted model that writes the upstream change — and whether each
//! verifies. A comment-only change is replayed too, as the control that must not.
//!
//! usage: bench-replay REPO [--pick N] [SHA...]
//!
//! `--pick N` takes the N most recent first-parent commits that follow the selection rule,
//! stated so the choice is not ours: one parent, or a merged pull request (its change
//! against the first parent, its title from the merge's body); a subject that says it fixes something
//! (`fix`, `bug`, `regression`, `handle`); at least one test file and one non-test source
//! file changed; every change a modification or an addition of a text file; no file a
//! person's approval is required for (runner configuration, manifests, lockfiles: the
//! agent asks before committing those, so the replay would wait, not verify). Skipped
//! commits are counted by reason. One state directory per project, as one user has: the
//! first replay sets the project up, later ones reuse it when the base's key matches.
//! The `git-agent` binary is the one beside this program. `REPLAY_KEEP=DIR` keeps each
//! run's record and report there.
//!
//! A fix that modifies an existing test file changes what the project's tests assert: its
//! plan says so (`changes_tests`, as a planner asked to change tested behaviour would), and
//! the agent waits for a person to approve those test files' content. The replay then
//! approves as that person (`git agent resume --approve`) and counts the fix apart:
//! verified by detection alone, or verified once a person approved the changed tests.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "core.hooksPath=/dev/null"])
        .args(args)
        .output()?;
    if !out.status.success() {
        bail!(
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether `path` is a test file by the conventions of the ecosystems we verify.
fn is_test(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    path.split('/').any(|c| {
        matches!(
            c,
            "test" | "tests" | "__tests__" | "testing" | "spec" | "testdata"
        )
    }) || name.starts_with("test_")
        || name.contains("_test.")
        || name.contains(".test.")
        || name.contains(".spec.")
}

/// Why a changed file rules the commit out of the replay, if it does.
fn excluded(path: &str) -> Option<&'static str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    if git_agent::verify::setup_input(path).is_some() {
        return Some("changes what set-up reads (needs approval)");
    }
    if git_agent::policy::runner_config_by_name(path).is_some() {
        return Some("changes test-runner configuration (needs approval)");
    }
    if name.starts_with('.') || path.starts_with(".github/") {
        return Some("changes tooling configuration");
    }
    None
}

fn is_source(path: &str) -> bool {
    let ext = path.rsplit('.').next().unwrap_or("");
    !is_test(path) && matches!(ext, "py" | "js" | "mjs" | "cjs" | "ts" | "rs" | "go")
}

/// The changes of `sha` against its first parent (a merged pull request's whole change):
/// `(status, path)`.
fn changes(repo: &Path, sha: &str) -> Result<Vec<(String, String)>> {
    let out = git(
        repo,
        &[
            "diff",
            "--name-status",
            "--no-renames",
            &format!("{sha}^1"),
            sha,
        ],
    )?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let (s, p) = l.split_once('\t')?;
            Some((s.to_string(), p.to_string()))
        })
        .collect())
}

/// What the change says it does: the subject, or for a merged pull request its title (the
/// merge commit's body).
fn subject(repo: &Path, sha: &str) -> Result<String> {
    let subject = git(repo, &["log", "-1", "--format=%s", sha])?;
    if subject.starts_with("Merge pull request") {
        let body = git(repo, &["log", "-1", "--format=%b", sha])?;
        return Ok(body.lines().next().unwrap_or("").trim().to_string());
    }
    Ok(subject.trim().to_string())
}

/// Whether `sha` follows the selection rule; `Err(reason)` when not.
fn selectable(repo: &Path, sha: &str) -> Result<std::result::Result<(), &'static str>> {
    let parents = git(repo, &["rev-list", "--parents", "-n1", sha])?;
    // The commit and one parent, or a merged pull request (taken against its first parent).
    if !(2..=3).contains(&parents.split_whitespace().count()) {
        return Ok(Err("an octopus merge or a root"));
    }
    let subject = subject(repo, sha)?.to_lowercase();
    if !["fix", "bug", "regression", "handle"]
        .iter()
        .any(|w| subject.contains(w))
    {
        return Ok(Err("subject names no fix"));
    }
    let ch = changes(repo, sha)?;
    if ch.iter().any(|(s, _)| s != "M" && s != "A") {
        return Ok(Err("deletes or changes a file's type"));
    }
    if let Some(why) = ch.iter().find_map(|(_, p)| excluded(p)) {
        return Ok(Err(why));
    }
    if !ch.iter().any(|(_, p)| is_test(p)) {
        return Ok(Err("no test file"));
    }
    if !ch.iter().any(|(_, p)| is_source(p)) {
        return Ok(Err("no source file"));
    }
    for (_, p) in &ch {
        let bytes = Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["cat-file", "blob", &format!("{sha}:{p}")])
            .output()?
            .stdout;
        if std::str::from_utf8(&bytes).is_err() {
            return Ok(Err("a binary file"));
        }
    }
    Ok(Ok(()))
}

/// The model's script: a plan naming every file, a `write_file` of each with the fix's
/// content (or, for the control, a comment added to the first source file), then finish.
fn script(repo: &Path, sha: &str, control: bool) -> Result<(String, Vec<String>)> {
    let ch = changes(repo, sha)?;
    let files: Vec<String> = if control {
        ch.iter()
            .filter(|(_, p)| is_source(p))
            .map(|(_, p)| p.clone())
            .take(1)
            .collect()
    } else {
        ch.iter().map(|(_, p)| p.clone()).collect()
    };
    let changes_tests = !control && ch.iter().any(|(st, p)| st == "M" && is_test(p));
    let mut lines = vec![
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
        "steps": [{"title": "Apply the fix", "files": files, "changes_tests": changes_tests}]}}]}),
    ];
    for p in &files {
        let content = if control {
            let before = git(repo, &["show", &format!("{sha}^1:{p}")])?;
            let comment = if p.ends_with(".py") { "#" } else { "//" };
            format!("{comment} A comment that changes nothing.\n{before}")
        } else {
            git(repo, &["show", &format!("{sha}:{p}")])?
        };
        lines.push(
            json!({"role": "coder", "tool_calls": [{"name": "write_file", "arguments": {
            "path": p, "content": content}}]}),
        );
    }
    lines.push(json!({"role": "coder", "tool_calls": [{"name": "finish", "arguments": {"summary": "applied"}}]}));
    let text = lines.iter().map(|l| format!("{l}\n")).collect();
    Ok((text, files))
}

/// One replay: a clone at the fix's parent, `git agent fix`, and what the record says.
fn replay(
    agent: &Path,
    source: &Path,
    tmp: &Path,
    state: &Path,
    sha: &str,
    control: bool,
) -> Result<Value> {
    let short = &sha[..10];
    let dir = tmp.join(format!("{}{short}", if control { "control-" } else { "" }));
    git(
        tmp,
        &[
            "clone",
            "-q",
            "--no-checkout",
            &source.display().to_string(),
            &dir.display().to_string(),
        ],
    )?;
    git(&dir, &["checkout", "-q", "-B", "main", &format!("{sha}^1")])?;
    git(&dir, &["remote", "remove", "origin"])?;
    let (text, _) = script(source, sha, control)?;
    let script_path = tmp.join(format!("script-{short}-{control}.jsonl"));
    std::fs::write(&script_path, text)?;
    let subject = subject(source, sha)?;
    let started = Instant::now();
    let out = Command::new(agent)
        .args(["fix", "--json", "--model"])
        .arg(format!("scripted:{}", script_path.display()))
        .arg(subject.trim())
        .arg("--repo")
        .arg(&dir)
        .env("XDG_STATE_HOME", state)
        .output()?;
    let secs = started.elapsed().as_secs_f64();
    let json: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "no JSON from git agent fix: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    let run = json["run_id"].as_str().context("no run id")?;
    let run_dir = dir.join(".git/agent/runs").join(run);
    let mut rec: Value = serde_json::from_slice(&std::fs::read(run_dir.join("record.json"))?)?;
    // The person who asked approves the test files the fix changes on purpose, and only
    // those: any other pending request stays unanswered.
    let pending =
        rec["pending_approval"]["approval"]["request"]["tool"].as_str() == Some("test_change");
    let approved = rec["state"] == "awaiting_approval" && pending;
    if approved {
        let out = Command::new(agent)
            .args(["resume", run, "--approve", "--json", "--model"])
            .arg(format!("scripted:{}", script_path.display()))
            .arg("--repo")
            .arg(&dir)
            .env("XDG_STATE_HOME", state)
            .output()?;
        if !out.status.success() && out.stdout.is_empty() {
            bail!("git agent resume: {}", String::from_utf8_lossy(&out.stderr));
        }
        rec = serde_json::from_slice(&std::fs::read(run_dir.join("record.json"))?)?;
    }
    let report = std::fs::read_to_string(run_dir.join("pr.md")).unwrap_or_default();
    // Verified, or verified with failures the base already had listed beside it.
    let preexisting = report.contains("pass except failures judged pre-existing");
    let verified = report.contains("verified by the project's tests") || preexisting;
    let last = rec["verification"]
        .as_array()
        .and_then(|v| v.last())
        .map(|l| format!("{}: {}", l["when"], l["result"]))
        .unwrap_or_default();
    if let Some(keep) = std::env::var_os("REPLAY_KEEP") {
        // For a person reading why one did not verify: the run's record and report.
        let to = PathBuf::from(keep).join(format!("{short}-{control}"));
        std::fs::create_dir_all(&to)?;
        std::fs::copy(run_dir.join("record.json"), to.join("record.json"))?;
        let _ = std::fs::copy(run_dir.join("pr.md"), to.join("pr.md"));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(json!({
        "sha": short,
        "control": control,
        "subject": subject.trim(),
        "state": rec["state"],
        "verified": verified,
        "approved_tests": approved,
        "preexisting": preexisting,
        "seconds": (secs * 10.0).round() / 10.0,
        "setup_cached": rec["setup"]["runs"][0]["cached"],
        "last": last,
        "notes": rec["notes"],
    }))
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut repo: Option<PathBuf> = None;
    let mut pick = 0usize;
    let mut shas: Vec<String> = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pick" => pick = args.next().context("--pick N")?.parse()?,
            _ if repo.is_none() => repo = Some(PathBuf::from(a)),
            _ => shas.push(a),
        }
    }
    let Some(repo) = repo else {
        bail!("usage: bench-replay REPO [--pick N] [SHA...]");
    };
    let agent = std::env::current_exe()?
        .parent()
        .context("no directory")?
        .join("git-agent");
    let mut skipped: BTreeMap<&'static str, usize> = BTreeMap::new();
    if pick > 0 {
        let log = git(
            &repo,
            &["rev-list", "--first-parent", "--max-count=3000", "HEAD"],
        )?;
        for sha in log.lines() {
            if shas.len() >= pick {
                break;
            }
            match selectable(&repo, sha)? {
                Ok(()) => shas.push(sha.to_string()),
                Err(why) => *skipped.entry(why).or_default() += 1,
            }
        }
    }
    if shas.is_empty() {
        bail!("no fix to replay (skipped by the rule: {skipped:?})");
    }
    eprintln!(
        "{}: replaying {} fixes (skipped by the rule: {skipped:?})",
        repo.display(),
        shas.len()
    );
    let tmp = tempfile::Builder::new()
        .prefix("replay-")
        .tempdir_in("/tmp")?;
    let state = tmp.path().join("state");
    let mut results = Vec::new();
    for sha in &shas {
        let r = replay(&agent, &repo, tmp.path(), &state, sha, false)?;
        eprintln!("{r}");
        results.push(r);
    }
    // The control: the first fix's source file with a comment added and nothing else.
    let control = replay(&agent, &repo, tmp.path(), &state, &shas[0], true)?;
    eprintln!("control: {control}");
    let verified = results.iter().filter(|r| r["verified"] == true).count();
    let alone = results
        .iter()
        .filter(|r| r["verified"] == true && r["approved_tests"] == false)
        .count();
    println!(
        "{}: {verified}/{} verified ({:.0}%; {alone} by detection alone, {} once a person approved the tests they change); control (comment only) verified: {}; skipped by the rule: {skipped:?}",
        repo.display(),
        results.len(),
        100.0 * verified as f64 / results.len() as f64,
        verified - alone,
        control["verified"]
    );
    println!(
        "{}",
        serde_json::to_string(&json!({"results": results, "control": control}))?
    );
    Ok(())
}
