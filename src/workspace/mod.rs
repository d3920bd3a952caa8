//! The git engine: repositories, run worktrees, commits, diffs, pushes and run records.
//!
//! Built on gix; the `git` CLI is used only where gix cannot do the job (push), and every
//! such call is hardened (no system/global config, no hooks, no fsmonitor, no external diff or
//! textconv, no filter drivers). Repositories are opened so that programs named in the
//! repository's own config (filter drivers, fsmonitor, hooks) are never run by us.
//!
//! This module must not know about models, tools or policy; it moves bytes between the object
//! database, the index and the work tree.

mod build_cache;
mod clean;
mod commit;
mod diff;
mod error;
mod git_cli;
mod record;
mod remote;
mod repo;
mod status;
mod worktree;

pub use build_cache::{KeptBuild, keep_build, remove_kept, seed_checkout};
pub use clean::CleanTree;
pub use commit::CommitRequest;
pub use diff::{ChangedBlob, Diff, FileDiff, FileStatus};
pub use error::{Error, Result};
pub use record::{PRIVATE_RUN_DIR, run_ref};
pub use remote::PushCredentials;
pub use repo::{Repo, repo_key};
pub use worktree::{
    GcEntry, GcOptions, Provenance, Worktree, WorktreeOptions, WorktreeRequest, checkouts_root,
    has_dot_component,
};

/// A repository-relative path (bytes, `/`-separated) as a filesystem path.
#[cfg(unix)]
pub(crate) fn rela_path(rela: &gix::bstr::BStr) -> std::path::PathBuf {
    use std::os::unix::ffi::OsStrExt as _;
    std::path::PathBuf::from(std::ffi::OsStr::from_bytes(rela))
}

/// A filesystem path's bytes (symlink targets are stored as they are).
#[cfg(unix)]
pub(crate) fn path_bytes(p: &std::path::Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt as _;
    p.as_os_str().as_bytes().to_vec()
}

/// Write a commit by `name <email>` (author and committer) at `time` (now when `None`) and
/// move `reference` to it; the one place the engine turns an identity into a signature.
pub(crate) fn write_commit(
    g: &gix::Repository,
    (name, email): (&str, &str),
    time: Option<i64>,
    reference: &str,
    message: &str,
    tree: gix::ObjectId,
    parents: impl IntoIterator<Item = gix::ObjectId>,
) -> Result<gix::ObjectId> {
    use error::GixContext as _;
    let sig = gix::actor::Signature {
        name: name.into(),
        email: email.into(),
        time: time.map_or_else(gix::date::Time::now_utc, |t| gix::date::Time::new(t, 0)),
    };
    let mut buf = gix::date::parse::TimeBuf::default();
    let s = sig.to_ref(&mut buf);
    Ok(g.commit_as(s, s, reference, message, tree, parents)
        .ctx(|| format!("committing on {reference}"))?
        .detach())
}

/// Write a bookkeeping commit of `tree` on `parent` that no reference points to (the
/// verification's snapshot and overlays): the object database only, nothing moves.
pub(crate) fn write_loose_commit(
    g: &gix::Repository,
    message: &str,
    tree: gix::ObjectId,
    parent: gix::ObjectId,
) -> Result<gix::ObjectId> {
    use error::GixContext as _;
    let sig = gix::actor::Signature {
        name: BOOKKEEPING.0.into(),
        email: BOOKKEEPING.1.into(),
        time: gix::date::Time::now_utc(),
    };
    let mut buf = gix::date::parse::TimeBuf::default();
    let s = sig.to_ref(&mut buf);
    Ok(g.new_commit_as(s, s, message, tree, [parent])
        .ctx(|| format!("writing {message:?}"))?
        .id)
}

/// Identity of the commits git-agent makes for its own bookkeeping (run records, demo).
pub(crate) const BOOKKEEPING: (&str, &str) = ("git-agent", "git-agent@localhost");
