//! The project map for the first prompt, from the index.

use std::path::Path;

use crate::index::{Index, IndexOptions, RankOptions, TokenCounter};
use crate::workspace::Repo;

/// Tokens of the first prompt given to the project map.
pub const MAP_TOKENS: usize = 2048;

/// The project map of the worktree's commit ranked for `goal`, within [`MAP_TOKENS`]; empty
/// (with a warning in the log) when the index cannot be built, since a run can work without.
pub fn project_map(repo: &Repo, worktree: &Path, goal: &str) -> String {
    let build = || -> Result<String, crate::index::Error> {
        let wt = Repo::open(worktree).map_err(|e| crate::index::Error::Other(e.to_string()))?;
        let _ = repo;
        let index = Index::at_commit(&wt, "HEAD", &IndexOptions::default())?;
        let counter = TokenCounter::new()?;
        Ok(index.repo_map(&counter, Some(goal), MAP_TOKENS, &RankOptions::default()))
    };
    match build() {
        Ok(map) => map,
        Err(e) => {
            tracing::warn!(error = %e, "no project map for this run");
            String::new()
        }
    }
}
