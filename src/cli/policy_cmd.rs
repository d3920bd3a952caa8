//! `git agent policy [--explain]`: the effective policy and where each rule came from.

use std::io::Write as _;
use std::path::PathBuf;

use super::context;
use crate::policy::Policy;

/// Arguments of `git agent policy`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Also say where each rule came from (built-in, user file, repository file at the base
    /// ref, environment, flag) and which repository rules were ignored.
    #[arg(long)]
    pub explain: bool,
    /// Repository to read `.github/agent.toml` from (default: the current directory's).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Ref whose `.github/agent.toml` is the repository layer (default: HEAD).
    #[arg(long)]
    pub base: Option<String>,
    /// Judge this command line against the policy and print the verdict as JSON.
    #[arg(long, value_name = "COMMAND")]
    pub check: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let repo = context::open_repo(args.repo.as_deref()).ok();
    let base = match (&repo, args.base) {
        (_, Some(b)) => Some(b),
        (Some(_), None) => Some(context::DEFAULT_BASE.to_string()),
        (None, None) => None,
    };
    let cfg = context::load_config(repo.as_ref().zip(base.as_deref()), None, Vec::new())?;
    let policy = Policy::from_config(&cfg)?;
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    if let Some(line) = args.check {
        let v = policy.judge_command(&line, &[]);
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(match v.decision {
            crate::config::Decision::Allow => super::exit::SUCCEEDED,
            crate::config::Decision::Ask => super::exit::AWAITING_APPROVAL,
            crate::config::Decision::Forbid => super::exit::POLICY,
        });
    }
    let lines = policy.explain();
    let width = lines
        .iter()
        .map(|(w, _)| w.chars().count())
        .max()
        .unwrap_or(0)
        .min(90);
    if let Some(b) = &base {
        writeln!(out, "# policy for base {b}")?;
    }
    for (what, origin) in lines {
        if args.explain {
            writeln!(out, "{what:<width$}  # {origin}")?;
        } else if !what.starts_with("ignored:") {
            writeln!(out, "{what}")?;
        }
    }
    Ok(super::exit::SUCCEEDED)
}
