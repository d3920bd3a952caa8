//! Staging every change of a worktree and committing it, as `git add -A && git commit` would.

use std::io::Read as _;
use std::path::Path;

use gix::bstr::{BString, ByteSlice};

use super::error::{GixContext, Result, io_err};
use super::repo::Repo;
use super::status::{smudge_racy_entries, status};
use super::worktree::Worktree;

/// Who a commit is by and what it says.
#[derive(Debug, Clone)]
pub struct CommitRequest {
    /// Subject line.
    pub subject: String,
    /// Body paragraphs (may be empty).
    pub body: String,
    /// Trailers, in order, e.g. `("Agent-Run", id)`, `("Co-authored-by", "Ada <ada@x>")`.
    pub trailers: Vec<(String, String)>,
    /// Author and committer name.
    pub author_name: String,
    /// Author and committer email.
    pub author_email: String,
    /// Commit time in seconds since the epoch (now when `None`).
    pub time: Option<i64>,
}

impl CommitRequest {
    /// The full message: subject, body, then the trailer block.
    pub fn message(&self) -> String {
        let mut msg = self.subject.trim().to_string();
        msg.push('\n');
        if !self.body.trim().is_empty() {
            msg.push('\n');
            msg.push_str(self.body.trim());
            msg.push('\n');
        }
        if !self.trailers.is_empty() {
            msg.push('\n');
            for (k, v) in &self.trailers {
                // A trailer value is one line: newlines in untrusted text would forge trailers.
                let v = v.replace(['\n', '\r'], " ");
                msg.push_str(&format!("{k}: {}\n", v.trim()));
            }
        }
        msg
    }
}

impl Worktree {
    /// Repository-relative paths that differ from the last commit (ignored files aside).
    pub fn changed_paths(&self) -> Result<Vec<String>> {
        Ok(status(self.repo())?
            .into_iter()
            .map(|c| c.path.to_str_lossy().into_owned())
            .collect())
    }

    /// Whether anything in the work tree differs from the last commit (ignored files aside).
    pub fn is_dirty(&self) -> Result<bool> {
        Ok(!status(self.repo())?.is_empty())
    }

    /// Stage every change in the work tree and commit it on the run's branch, as
    /// `git add -A && git commit` would: additions, deletions, renames, executable bits,
    /// symlinks (stored as links, never followed), binary files; ignored files and
    /// submodules left alone; no filter driver and no hook runs.
    ///
    /// Returns `None` when there is nothing to commit.
    pub fn commit_all(&self, req: &CommitRequest) -> Result<Option<gix::ObjectId>> {
        // A fresh handle so config and index are read as they are now.
        let repo = Repo::open(self.path())?;
        let Some(Staged {
            head,
            tree,
            mut index,
            removed,
        }) = self.stage(&repo)?
        else {
            return Ok(None);
        };
        let g = repo.gix();
        let id = super::write_commit(
            g,
            (&req.author_name, &req.author_email),
            req.time,
            "HEAD",
            &req.message(),
            tree,
            [head],
        )?;
        index.remove_entries(|_, path, _| removed.contains(path));
        index.sort_entries();
        index.remove_tree();
        index
            .write(Default::default())
            .ctx(|| "writing the index".to_string())?;
        Ok(Some(id))
    }

    /// The commit that [`Worktree::commit_all`] would make now, written to the object
    /// database but on no branch: HEAD, the index and the files stay as they are. HEAD itself
    /// when nothing differs. The clean-tree verification checks this commit out afresh, so
    /// what the tests pass on is exactly what a checkpoint would commit.
    pub fn snapshot(&self) -> Result<gix::ObjectId> {
        let repo = Repo::open(self.path())?;
        let Some(staged) = self.stage(&repo)? else {
            return repo.resolve("HEAD");
        };
        super::write_loose_commit(
            repo.gix(),
            "git-agent: snapshot for verification",
            staged.tree,
            staged.head,
        )
    }

    /// Stage every change into a tree (as `git add -A` would) and the index that goes with
    /// it; `None` when the tree would equal HEAD's.
    fn stage(&self, repo: &Repo) -> Result<Option<Staged>> {
        let changes = status(repo)?;
        if changes.is_empty() {
            return Ok(None);
        }
        let g = repo.gix();
        let head = repo.resolve("HEAD")?;
        let head_tree = g
            .find_commit(head)
            .ctx(|| format!("reading {head}"))?
            .tree_id()
            .ctx(|| format!("reading tree of {head}"))?
            .detach();
        let mut index = (*g.index_or_empty().ctx(|| "reading the index".to_string())?).clone();
        smudge_racy_entries(&mut index);
        let (mut pipeline, _) = g
            .filter_pipeline(Some(head_tree))
            .ctx(|| "preparing filters".to_string())?;
        let mut editor = g
            .edit_tree(head_tree)
            .ctx(|| format!("editing tree {head_tree}"))?;
        let mut removed = std::collections::BTreeSet::new();
        // New entries are pushed unsorted, so lookups only search the original, sorted part.
        let sorted_len = index.entries().len();
        for change in &changes {
            let rela = change.path.as_bstr();
            let fs_path = self.path().join(super::rela_path(rela));
            let meta = match std::fs::symlink_metadata(&fs_path) {
                Ok(m) => Some(m),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io_err("cannot stat", fs_path)(e)),
            };
            let Some(meta) = meta else {
                editor
                    .remove(rela)
                    .ctx(|| format!("removing {rela} from the tree"))?;
                removed.insert(change.path.clone());
                continue;
            };
            let (id, kind, mode) = if meta.file_type().is_symlink() {
                let target =
                    std::fs::read_link(&fs_path).map_err(io_err("cannot read link", &fs_path))?;
                let bytes = super::path_bytes(&target);
                let id = g
                    .write_blob(bytes.as_slice())
                    .ctx(|| format!("writing {rela}"))?
                    .detach();
                (
                    id,
                    gix::object::tree::EntryKind::Link,
                    gix::index::entry::Mode::SYMLINK,
                )
            } else if meta.is_file() {
                let id = blob_from_file(
                    &mut pipeline,
                    &index,
                    &fs_path,
                    rela.to_path_lossy().as_ref(),
                    g,
                )?;
                if is_executable(&meta) {
                    (
                        id,
                        gix::object::tree::EntryKind::BlobExecutable,
                        gix::index::entry::Mode::FILE_EXECUTABLE,
                    )
                } else {
                    (
                        id,
                        gix::object::tree::EntryKind::Blob,
                        gix::index::entry::Mode::FILE,
                    )
                }
            } else {
                // A directory where a file was (or a nested repository): leave it alone.
                continue;
            };
            editor
                .upsert(rela, kind, id)
                .ctx(|| format!("adding {rela} to the tree"))?;
            // Stat after hashing, so a later change is seen; a failure only costs a re-hash.
            let stat = gix::index::fs::Metadata::from_path_no_follow(&fs_path)
                .ok()
                .and_then(|m| gix::index::entry::Stat::from_fs(&m).ok())
                .unwrap_or_default();
            let found = index.entry_index_by_path_and_stage_bounded(
                rela,
                gix::index::entry::Stage::Unconflicted,
                sorted_len,
            );
            match found.map(|i| &mut index.entries_mut()[i]) {
                Some(e) => {
                    e.id = id;
                    e.mode = mode;
                    e.stat = stat;
                }
                None => {
                    index.dangerously_push_entry(
                        stat,
                        id,
                        gix::index::entry::Flags::empty(),
                        mode,
                        rela,
                    );
                }
            }
        }
        let tree = editor
            .write()
            .ctx(|| "writing the tree".to_string())?
            .detach();
        if tree == head_tree {
            return Ok(None);
        }
        Ok(Some(Staged {
            head,
            tree,
            index,
            removed,
        }))
    }
}

/// Every change of a worktree staged: the tree a commit would hold, and the index to write
/// once it is committed.
struct Staged {
    head: gix::ObjectId,
    tree: gix::ObjectId,
    index: gix::fs::FileSnapshot<gix::index::File>,
    removed: std::collections::BTreeSet<BString>,
}

fn blob_from_file(
    pipeline: &mut gix::filter::Pipeline<'_>,
    index: &gix::index::State,
    fs_path: &Path,
    rela: &Path,
    g: &gix::Repository,
) -> Result<gix::ObjectId> {
    let file = std::fs::File::open(fs_path).map_err(io_err("cannot open", fs_path))?;
    let mut outcome = pipeline
        .convert_to_git(file, rela, index)
        .ctx(|| format!("converting {}", rela.display()))?;
    let mut bytes = Vec::new();
    outcome
        .read_to_end(&mut bytes)
        .map_err(io_err("cannot read", fs_path))?;
    Ok(g.write_blob(&bytes)
        .ctx(|| format!("writing {}", rela.display()))?
        .detach())
}

#[cfg(unix)]
fn is_executable(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    meta.permissions().mode() & 0o111 != 0
}

#[cfg(not(unix))]
fn is_executable(_meta: &std::fs::Metadata) -> bool {
    false
}
