//! Loading what every command needs: the repository and the layered configuration.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::config::{Config, Layer};
use crate::workspace::Repo;

/// The base used when none is given at a terminal: `HEAD`, the commit checked out. Not the
/// remote's default branch: a local commit (the failing test a person just wrote) must be
/// in the run's tree, or every edit the model makes against the files it reads fails.
pub const DEFAULT_BASE: &str = "HEAD";

/// Open the repository at or above `dir` (the current directory when `None`).
pub fn open_repo(dir: Option<&Path>) -> anyhow::Result<Repo> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    Ok(Repo::discover(&dir)?)
}

/// Resolve the configuration: defaults < user file < the repository file read from `base`
/// (never the work tree) < `GIT_AGENT_*` < `flags`.
pub fn load_config(
    repo: Option<(&Repo, &str)>,
    user_file: Option<PathBuf>,
    flags: Vec<Layer>,
) -> anyhow::Result<Config> {
    Ok(crate::run::services::load_config(repo, user_file, flags)?)
}

/// A state directory a person named (`--state-dir`, `GIT_AGENT_STATE_DIR`): refused when a
/// component starts with `.`, since run checkouts go under it and real projects take such
/// a path for hidden (issue 39). The default (`~/.local/state/git-agent`) has one too; its
/// checkouts go elsewhere (`workspace::checkouts_root`).
pub(crate) fn explicit_state_dir(dir: std::path::PathBuf) -> anyhow::Result<std::path::PathBuf> {
    if crate::workspace::has_dot_component(&dir) {
        anyhow::bail!(
            "state directory {}: a component starts with `.`; run worktrees go under it, and real projects take such paths for hidden files (a static-file server answers 404). Choose one without (--state-dir, GIT_AGENT_STATE_DIR)",
            dir.display()
        );
    }
    Ok(dir)
}
