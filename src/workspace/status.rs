//! What the index and the work tree say of each other: the paths that differ (status), and
//! the racy entries every index write smudges. Below both the commit and the worktree.

use gix::bstr::BString;

use super::error::{GixContext, Result};
use super::repo::Repo;

/// Paths (repository-relative) that differ between the index and the work tree, plus
/// untracked files that are not ignored. Submodules are left alone.
pub(crate) fn dirty_paths(repo: &Repo) -> Result<Vec<BString>> {
    Ok(status(repo)?.into_iter().map(|c| c.path).collect())
}

/// Mark every entry whose file may have changed since the index was written without its
/// stat showing it, so that the next status compares its content.
///
/// Racy git (git's `racy-git.txt`): a file written in the same second as the index that
/// records it can change again within that second and keep the stat the index holds. Status
/// catches it only while the index's own timestamp is that second; an index written later,
/// carrying the entry over, would hide the change for good — a same-size edit made right after
/// a checkout then vanished from the commit once the policy undid another file. Git "smudges"
/// such entries (size 0) when it writes an index; so does every index write here. The cost
/// is one re-hash of those files at the next status.
pub(crate) fn smudge_racy_entries(index: &mut gix::index::State) {
    let written = index.timestamp().unix_seconds();
    for entry in index.entries_mut() {
        if i64::from(entry.stat.mtime.secs) >= written {
            entry.stat.size = 0;
        }
    }
}

pub(super) struct WorktreeChange {
    pub(super) path: BString,
}

pub(super) fn status(repo: &Repo) -> Result<Vec<WorktreeChange>> {
    use gix::status::index_worktree::Item;
    let iter = repo
        .gix()
        .status(gix::progress::Discard)
        .ctx(|| "preparing status".to_string())?
        .untracked_files(gix::status::UntrackedFiles::Files)
        .index_worktree_rewrites(None)
        .index_worktree_submodules(gix::status::Submodule::Given {
            ignore: gix::submodule::config::Ignore::All,
            check_dirty: false,
        })
        .into_index_worktree_iter(Vec::<BString>::new())
        .ctx(|| "computing status".to_string())?;
    let mut out = Vec::new();
    for item in iter {
        let item = item.ctx(|| "computing status".to_string())?;
        match item {
            Item::Modification {
                rela_path, status, ..
            } => {
                use gix::status::plumbing::index_as_worktree::{Change, EntryStatus};
                match status {
                    EntryStatus::NeedsUpdate(_) => {}
                    EntryStatus::Change(Change::SubmoduleModification(_)) => {}
                    _ => out.push(WorktreeChange { path: rela_path }),
                }
            }
            Item::DirectoryContents { entry, .. } => {
                use gix::dir::entry::{Kind, Status};
                if entry.status == Status::Untracked
                    && matches!(entry.disk_kind, Some(Kind::File | Kind::Symlink))
                {
                    out.push(WorktreeChange {
                        path: entry.rela_path,
                    });
                }
            }
            Item::Rewrite { .. } => {}
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup_by(|a, b| a.path == b.path);
    Ok(out)
}
