//! `git agent status`, `show`, `log` and `audit verify`: reading run records.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};

use super::context;
use crate::audit::chain;
use crate::run::record::{RunRecord, files, first_line};
use crate::workspace::Repo;

/// Where to find runs.
#[derive(Debug, clap::Args)]
pub struct RepoArg {
    /// The repository (default: the current directory's).
    #[arg(long)]
    pub repo: Option<PathBuf>,
}

/// Arguments of `git agent status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// One run (id or unique prefix); all runs when omitted.
    pub run: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub repo: RepoArg,
}

/// Arguments naming one run.
#[derive(Debug, clap::Args)]
pub struct RunArg {
    /// Run id or unique prefix.
    pub run: String,
    #[command(flatten)]
    pub repo: RepoArg,
}

/// `git agent audit …`.
#[derive(Debug, clap::Subcommand)]
pub enum AuditCommand {
    /// Check the audit hash chain; exits 1 if anything was edited, removed, inserted or
    /// reordered.
    Verify(RunArg),
}

/// Find a run directory by id or unique prefix; a run known only by its fetched ref
/// (`refs/agent/runs/<id>`) is restored from it first.
pub fn find_run(repo: &Repo, id: &str) -> anyhow::Result<(String, PathBuf)> {
    let runs = repo.agent_dir().join("runs");
    let exact = runs.join(id);
    if !id.is_empty() && !id.contains('/') && exact.join(files::RECORD).exists() {
        return Ok((id.to_string(), exact));
    }
    let mut matches: Vec<String> = std::fs::read_dir(&runs)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(id))
                .collect()
        })
        .unwrap_or_default();
    matches.sort();
    match matches.len() {
        1 => {
            let m = matches.remove(0);
            let dir = runs.join(&m);
            Ok((m, dir))
        }
        0 => {
            if repo.resolve(&crate::workspace::run_ref(id)).is_ok() {
                let dir = repo.restore_run_record(id)?;
                return Ok((id.to_string(), dir));
            }
            bail!(
                "no run `{id}` in {} (fetch it with `git fetch origin refs/agent/runs/{id}:refs/agent/runs/{id}`)",
                runs.display()
            )
        }
        _ => bail!("run id `{id}` is ambiguous: {}", matches.join(", ")),
    }
}

fn all_runs(repo: &Repo) -> Vec<RunRecord> {
    let runs = repo.agent_dir().join("runs");
    let mut out: Vec<RunRecord> = std::fs::read_dir(runs)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| RunRecord::load(&e.path()).ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.created_at.cmp(&b.created_at));
    out
}

/// The `--json` summary of DESIGN.md for one run.
pub fn summary_json(rec: &RunRecord) -> serde_json::Value {
    let last = rec.verification.last();
    let (cost, _) = rec.spend();
    let tokens_in: u64 = rec.usage.iter().map(|c| c.tokens_in).sum();
    let tokens_out: u64 = rec.usage.iter().map(|c| c.tokens_out).sum();
    let pr = match &rec.pr {
        Some(crate::run::record::PrRef::Url(u)) => serde_json::json!({"url": u}),
        Some(crate::run::record::PrRef::Path(p)) => serde_json::json!({"path": p}),
        None => serde_json::Value::Null,
    };
    serde_json::json!({
        "run_id": rec.run_id,
        "state": rec.state.as_str(),
        "branch": rec.branch,
        "base": rec.base_ref,
        "base_sha": rec.base_sha,
        "commits": rec.commits,
        "verification": {
            "command": rec.test_command,
            "exit_code": last.and_then(|v| v.exit_code),
            "passed": rec.verified(),
            "attempts": rec.fix_attempts,
        },
        "usage": {"tokens_in": tokens_in, "tokens_out": tokens_out, "cost_usd": cost},
        "pr": pr,
    })
}

pub fn status(args: StatusArgs) -> anyhow::Result<u8> {
    let repo = context::open_repo(args.repo.repo.as_deref())?;
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    if let Some(id) = args.run {
        let (_, dir) = find_run(&repo, &id)?;
        let rec = RunRecord::load(&dir).with_context(|| format!("reading {}", dir.display()))?;
        if args.json {
            writeln!(out, "{}", summary_json(&rec))?;
        } else {
            let (usd, unknown) = rec.spend();
            writeln!(out, "run      {}", rec.run_id)?;
            writeln!(out, "state    {}", rec.state)?;
            writeln!(
                out,
                "branch   {} (from {} {})",
                rec.branch,
                rec.base_ref,
                short(&rec.base_sha)
            )?;
            writeln!(out, "goal     {}", first_line(&rec.task.goal, 72))?;
            writeln!(
                out,
                "turns    {}  fix attempts {}",
                rec.turns, rec.fix_attempts
            )?;
            writeln!(
                out,
                "spend    ${usd:.2}{}",
                if unknown { " + unknown" } else { "" }
            )?;
            for c in &rec.commits {
                writeln!(out, "commit   {c}")?;
            }
            for n in &rec.notes {
                writeln!(out, "note     {n}")?;
            }
            writeln!(out, "record   {}", dir.display())?;
        }
        return Ok(super::exit::SUCCEEDED);
    }
    let runs = all_runs(&repo);
    if args.json {
        let list: Vec<_> = runs.iter().map(summary_json).collect();
        writeln!(out, "{}", serde_json::Value::Array(list))?;
        return Ok(super::exit::SUCCEEDED);
    }
    if runs.is_empty() {
        writeln!(
            out,
            "no runs in {}",
            repo.agent_dir().join("runs").display()
        )?;
    }
    for r in runs {
        let (usd, unknown) = r.spend();
        writeln!(
            out,
            "{}  {:<17} {:<32} ${usd:.2}{}  {}",
            r.run_id,
            r.state.as_str(),
            r.branch,
            if unknown { "+?" } else { "" },
            first_line(&r.task.goal, 72)
        )?;
    }
    Ok(super::exit::SUCCEEDED)
}

pub fn show(args: RunArg) -> anyhow::Result<u8> {
    let repo = context::open_repo(args.repo.repo.as_deref())?;
    let (_, dir) = find_run(&repo, &args.run)?;
    let pr = dir.join(files::PR);
    let body = std::fs::read_to_string(&pr)
        .with_context(|| format!("run {} has no report yet ({})", args.run, pr.display()))?;
    write!(
        super::output::stdout(&super::output::process_redactor()?),
        "{body}"
    )?;
    Ok(super::exit::SUCCEEDED)
}

pub fn log(args: RunArg) -> anyhow::Result<u8> {
    let repo = context::open_repo(args.repo.repo.as_deref())?;
    let (_, dir) = find_run(&repo, &args.run)?;
    let log = chain::read(&dir.join(files::AUDIT))?;
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    write!(out, "{}", chain::render(&log.events))?;
    if let Some(t) = log.torn_tail {
        writeln!(
            out,
            "(incomplete last line at byte {}: the process was killed mid-write)",
            t.offset
        )?;
    }
    Ok(super::exit::SUCCEEDED)
}

pub fn audit(cmd: AuditCommand) -> anyhow::Result<u8> {
    let AuditCommand::Verify(args) = cmd;
    let repo = context::open_repo(args.repo.repo.as_deref())?;
    let (id, dir) = find_run(&repo, &args.run)?;
    let recorded = RunRecord::load(&dir).ok().and_then(|r| r.audit_head);
    let v = chain::verify(&dir.join(files::AUDIT), Some(&id), recorded.as_ref())?;
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    match v {
        chain::Verification::Intact {
            events,
            head,
            unanchored,
        } => {
            writeln!(
                out,
                "audit chain of {id} intact: {events} events, head {}",
                head.hash
            )?;
            if unanchored > 0 {
                writeln!(
                    out,
                    "({unanchored} events after the head the run record last saved: written by a process that stopped before saving)"
                )?;
            }
            Ok(super::exit::SUCCEEDED)
        }
        chain::Verification::Broken { seq, line, problem } => {
            writeln!(
                out,
                "audit chain of {id} BROKEN at event {seq} (line {line}): {problem}"
            )?;
            Ok(super::exit::FAILED)
        }
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}
