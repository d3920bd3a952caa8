//! The git engine: repositories, run worktrees, commits, diffs, pushes and run records.
//!
//! Built on gix; the `git` CLI is used only where gix cannot do the job (push), and every
//! such call is hardened (no system/global config, no hooks, no fsmonitor, no external diff or
//! textconv, no filter drivers). Repositories are opened so that programs named in the
//! repository's own config (filter drivers, fsmonitor, hooks) are never run by us.
//!
//! This module must not know about models, tools or policy; it moves bytes between the object
//! database, the index and the work tree.

mod error;
mod repo;

pub use error::{Error, Result};
pub use repo::Repo;
