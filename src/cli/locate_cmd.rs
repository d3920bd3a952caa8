//! `git agent locate`: files ranked for a goal, issue text or CI log.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;

use super::{context, map_cmd};

/// Arguments of `git agent locate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The goal, issue text or log; `-` reads it from standard input.
    pub query: String,
    /// How many files to print.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Print `{"files":[{"path","score"}…]}`, best first.
    #[arg(long)]
    pub json: bool,
    /// Repository (default: the current directory's).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Rank the files of this commit instead of the work tree.
    #[arg(long)]
    pub rev: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let query = if args.query == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        args.query
    };
    let repo = context::open_repo(args.repo.as_deref())?;
    let index = map_cmd::open_index(&repo, args.rev.as_deref())?;
    let files = index.locate(&query, args.top);
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    if args.json {
        let v = serde_json::json!({ "files": files });
        writeln!(out, "{}", serde_json::to_string(&v)?)?;
    } else {
        for f in &files {
            writeln!(out, "{:>8.3}  {}", f.score, f.path)?;
        }
    }
    Ok(super::exit::SUCCEEDED)
}
