//! `git agent map`: the project map, optionally focused on a query, within a token budget.

use std::io::Write as _;
use std::path::PathBuf;

use crate::index::{Index, IndexOptions, RankOptions, TokenCounter};

use super::context;

/// Arguments of `git agent map`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Focus the map on this goal, issue text or log (default: the most central files).
    #[arg(long)]
    pub query: Option<String>,
    /// Token budget of the map (counted with tiktoken's cl100k_base).
    #[arg(long, default_value_t = 2048)]
    pub tokens: usize,
    /// Repository (default: the current directory's).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Map this commit instead of the work tree.
    #[arg(long)]
    pub rev: Option<String>,
}

/// Build the index of the work tree (or `rev`) and print it as a map.
pub fn open_index(repo: &crate::workspace::Repo, rev: Option<&str>) -> anyhow::Result<Index> {
    let opts = IndexOptions::default();
    Ok(match rev {
        Some(rev) => Index::at_commit(repo, rev, &opts)?,
        None if repo.workdir().is_some() => Index::at_worktree(repo, &opts)?,
        None => Index::at_commit(repo, "HEAD", &opts)?,
    })
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let repo = context::open_repo(args.repo.as_deref())?;
    let index = open_index(&repo, args.rev.as_deref())?;
    let counter = TokenCounter::new()?;
    let map = index.repo_map(
        &counter,
        args.query.as_deref(),
        args.tokens,
        &RankOptions::default(),
    );
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    write!(out, "{map}")?;
    Ok(super::exit::SUCCEEDED)
}
