//! The project map for the first prompt, from the index.

use std::path::Path;

use crate::index::{Index, IndexOptions, RankOptions, TokenCounter};
use crate::workspace::Repo;

/// Tokens of the first prompt given to the project map.
pub const MAP_TOKENS: usize = 2048;

/// The project map of the worktree's commit ranked for `goal`, within [`MAP_TOKENS`]. The
/// index cache is shared by every run on the repository, so only changed blobs are parsed.
/// When the index cannot be built the run goes on without a map, and the log says why.
pub fn project_map(worktree: &Path, goal: &str) -> String {
    let build = || -> Result<String, Box<dyn std::error::Error>> {
        let wt = Repo::open(worktree)?;
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
