//! TEMP compile shim
use crate::workspace::Repo;
use std::path::Path;
pub fn project_map(_repo: &Repo, _worktree: &Path, _goal: &str) -> String {
    String::new()
}
