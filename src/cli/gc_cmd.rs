//! `git agent gc`: remove old pooled worktrees and those of finished runs.
//!
//! Run worktrees live under the state directory (`$XDG_STATE_HOME/git-agent/worktrees`,
//! `…/pool`), where nothing else cleans them: a project that builds big (a Rust crate's
//! `target/`) fills the disk run after run. The pool keeps build caches warm for the next run;
//! gc bounds what that costs. Run records and branches are never touched.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use super::context;
use crate::workspace::GcOptions;

/// Arguments of `git agent gc`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Remove pooled worktrees pooled, and finished runs' worktrees ended, at least this many
    /// days ago (0: all of them).
    #[arg(long, value_name = "DAYS", default_value_t = 7.0)]
    pub older_than: f64,
    /// Then remove the oldest of the rest while they take more than this many MB.
    #[arg(long, value_name = "MB")]
    pub max_size: Option<u64>,
    /// The state directory holding the worktrees (the bot's `--state-dir`; default:
    /// `$XDG_STATE_HOME/git-agent`, else `~/.local/state/git-agent`).
    #[arg(long, env = "GIT_AGENT_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// The repository (default: the current directory's; for the bot, its mirror
    /// `STATE_DIR/repos/OWNER/NAME.git`).
    #[arg(long)]
    pub repo: Option<PathBuf>,
}

/// `git agent gc`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let state = match args.state_dir {
        Some(d) => super::context::explicit_state_dir(d)?,
        None => crate::config::user_state_dir().context("no HOME; pass --state-dir")?,
    };
    let repo = context::open_repo(args.repo.as_deref())?.with_state_dir(state);
    if !(args.older_than >= 0.0 && args.older_than.is_finite()) {
        anyhow::bail!("--older-than takes a number of days, 0 or more");
    }
    let opts = GcOptions {
        older_than: Duration::from_secs_f64(args.older_than * 86_400.0),
        max_bytes: args.max_size.map(|mb| mb.saturating_mul(1024 * 1024)),
        measure_kept: true,
    };
    let seen = repo.gc_worktrees(&opts, &|id| crate::run::ended_at(&repo, id))?;
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    let mb = |b: u64| b as f64 / (1024.0 * 1024.0);
    // A run removes its private set-ups when it ends; one that crashed leaves them.
    if let Some(state) = repo.state_dir() {
        for (path, bytes) in
            crate::run::gc_private_setups(state, &|id| crate::run::ended_at(&repo, id).is_some())
        {
            writeln!(
                out,
                "removed {} ({:.1} MB, a finished run's private set-up)",
                path.display(),
                mb(bytes)
            )?;
        }
    }
    let (mut freed, mut kept, mut kept_bytes) = (0u64, 0usize, 0u64);
    for e in &seen {
        if e.removed {
            freed += e.bytes;
            writeln!(
                out,
                "removed {} ({:.1} MB, {}, {:.1} days)",
                e.path.display(),
                mb(e.bytes),
                if e.pooled { "pooled" } else { "finished run" },
                e.age.as_secs_f64() / 86_400.0
            )?;
        } else {
            kept += 1;
            kept_bytes += e.bytes;
        }
    }
    writeln!(
        out,
        "freed {:.1} MB; kept {kept} worktree(s), {:.1} MB, under {}",
        mb(freed),
        mb(kept_bytes),
        repo.worktrees_dir()?
            .parent()
            .and_then(|p| p.parent())
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    )?;
    Ok(super::exit::SUCCEEDED)
}
