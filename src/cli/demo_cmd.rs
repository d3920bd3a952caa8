//! `git agent demo`: the whole loop on a sample repository, with a scripted model.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

use super::fix_cmd::{self, FixArgs};
use crate::task::Mode;
use crate::workspace::Repo;

const SCRIPT: &str = include_str!("demo/script.jsonl");
const CARGO_TOML: &str = include_str!("demo/Cargo.toml.txt");
const LIB_RS: &str = include_str!("demo/lib.rs.txt");
const GITIGNORE: &str = include_str!("demo/gitignore.txt");

/// Arguments of `git agent demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to create the sample repository (default: a new temporary directory, kept).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Sandbox for commands, as for `fix` (`off` if this machine cannot sandbox).
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let dir = match args.dir {
        Some(d) => d,
        None => tempfile::Builder::new()
            .prefix("git-agent-demo-")
            .tempdir()
            .context("cannot create a temporary directory")?
            .keep(),
    };
    let repo_dir = dir.join("demo-calc");
    Repo::init_with_files(
        &repo_dir,
        &[
            ("Cargo.toml", CARGO_TOML.as_bytes()),
            ("src/lib.rs", LIB_RS.as_bytes()),
            (".gitignore", GITIGNORE.as_bytes()),
        ],
        "A calculator whose add subtracts",
    )?;
    let script = dir.join("demo-script.jsonl");
    std::fs::write(&script, SCRIPT)
        .with_context(|| format!("cannot write {}", script.display()))?;
    {
        let mut err = super::output::stderr(&super::output::process_redactor()?);
        writeln!(
            err,
            "git-agent demo — the model is SCRIPTED (no API key needed): {}",
            script.display()
        )?;
        writeln!(
            err,
            "sample repository: {} (its `adds` test fails)",
            repo_dir.display()
        )?;
    }
    let code = fix_cmd::fix(
        FixArgs {
            goal: Some(
                "The `adds` test fails: add(1, 2) returns -1. Make `add` return the sum.".into(),
            ),
            issue_file: None,
            issue: None,
            base: Some("main".into()),
            branch: Some("agent/demo-fix-add".into()),
            test_cmd: Some("cargo test --offline".into()),
            models: vec![format!("scripted:{}", script.display())],
            max_usd: None,
            max_turns: None,
            forge: "local".into(),
            sandbox: args.sandbox,
            record: None,
            repo: Some(repo_dir.clone()),
            json: false,
        },
        Mode::Fix,
    )?;
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    writeln!(out)?;
    writeln!(out, "Look around:")?;
    writeln!(out, "  cd {}", repo_dir.display())?;
    writeln!(
        out,
        "  git log --format='%h %s%n%(trailers)' agent/demo-fix-add"
    )?;
    writeln!(out, "  git agent status       # runs, states, spend")?;
    writeln!(
        out,
        "  git agent show <run>   # the pull request description"
    )?;
    writeln!(
        out,
        "  git agent log <run>    # the audit trail; `git agent audit verify <run>` checks it"
    )?;
    writeln!(
        out,
        "The model was scripted; point --model at a real one (openai:…, anthropic:…, ollama:…) to use it for real."
    )?;
    Ok(code)
}
