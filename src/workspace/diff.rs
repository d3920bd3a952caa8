//! Unified diffs and diffstats between two commits of a run, computed with `similar`.
//!
//! No external diff program or textconv filter is ever consulted: the bytes in the object
//! database are compared as they are.

use gix::bstr::ByteSlice;

use super::error::{GixContext, Result};
use super::repo::Repo;

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    /// New file.
    Added,
    /// File removed.
    Deleted,
    /// Content or mode changed.
    Modified,
}

/// One file's change.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileDiff {
    /// Repository-relative path.
    pub path: String,
    /// Added, deleted or modified.
    pub status: FileStatus,
    /// Whether either side is binary (then there is no text patch).
    pub binary: bool,
    /// Lines added.
    pub additions: usize,
    /// Lines removed.
    pub deletions: usize,
    /// The unified patch of this file, with `diff --git` header.
    pub patch: String,
}

/// All changes between two commits.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Diff {
    /// Per-file changes, sorted by path.
    pub files: Vec<FileDiff>,
}

impl Diff {
    /// The whole unified diff.
    pub fn unified(&self) -> String {
        self.files.iter().map(|f| f.patch.as_str()).collect()
    }

    /// Total lines added.
    pub fn additions(&self) -> usize {
        self.files.iter().map(|f| f.additions).sum()
    }

    /// Total lines removed.
    pub fn deletions(&self) -> usize {
        self.files.iter().map(|f| f.deletions).sum()
    }

    /// A diffstat in the shape `git diff --stat` prints.
    pub fn stat(&self) -> String {
        let width = self.files.iter().map(|f| f.path.len()).max().unwrap_or(0);
        let max = self
            .files
            .iter()
            .map(|f| f.additions + f.deletions)
            .max()
            .unwrap_or(0);
        let scale = |n: usize| if max > 40 { (n * 40).div_ceil(max) } else { n };
        let mut out = String::new();
        for f in &self.files {
            if f.binary {
                out.push_str(&format!(" {:<width$} | Bin\n", f.path));
            } else {
                out.push_str(&format!(
                    " {:<width$} | {:>4} {}{}\n",
                    f.path,
                    f.additions + f.deletions,
                    "+".repeat(scale(f.additions)),
                    "-".repeat(scale(f.deletions)),
                ));
            }
        }
        let n = self.files.len();
        out.push_str(&format!(
            " {n} file{} changed, {} insertion{}(+), {} deletion{}(-)\n",
            if n == 1 { "" } else { "s" },
            self.additions(),
            if self.additions() == 1 { "" } else { "s" },
            self.deletions(),
            if self.deletions() == 1 { "" } else { "s" },
        ));
        out
    }
}

/// One changed file's blobs, for scans that read content rather than a text patch.
#[derive(Debug, Clone)]
pub struct ChangedBlob {
    /// Repository-relative path.
    pub path: String,
    /// Added, deleted or modified.
    pub status: FileStatus,
    /// The content before (empty for an added file).
    pub old: Vec<u8>,
    /// The content after (empty for a deleted file).
    pub new: Vec<u8>,
}

impl Repo {
    /// The diff from commit `old` to commit `new`.
    pub fn diff(&self, old: gix::ObjectId, new: gix::ObjectId) -> Result<Diff> {
        let files = self
            .changed_blobs(old, new)?
            .into_iter()
            .map(|b| file_diff(b.path, b.status, &b.old, &b.new))
            .collect();
        Ok(Diff { files })
    }

    /// The blobs of every file that differs between commits `old` and `new`, sorted by path
    /// (submodules and trees left out; a symlink's blob is its target).
    pub fn changed_blobs(
        &self,
        old: gix::ObjectId,
        new: gix::ObjectId,
    ) -> Result<Vec<ChangedBlob>> {
        let g = self.gix();
        let old_tree = g
            .find_commit(old)
            .ctx(|| format!("reading {old}"))?
            .tree()
            .ctx(|| format!("reading tree of {old}"))?;
        let new_tree = g
            .find_commit(new)
            .ctx(|| format!("reading {new}"))?
            .tree()
            .ctx(|| format!("reading tree of {new}"))?;
        let changes = g
            .diff_tree_to_tree(
                &old_tree,
                &new_tree,
                gix::diff::Options::default().with_rewrites(None),
            )
            .ctx(|| format!("diffing {old}..{new}"))?;
        let mut files = Vec::new();
        for change in changes {
            use gix::object::tree::diff::ChangeDetached as C;
            let (path, status, old_id, new_id, mode) = match change {
                C::Addition {
                    location,
                    entry_mode,
                    id,
                    ..
                } => (location, FileStatus::Added, None, Some(id), entry_mode),
                C::Deletion {
                    location,
                    entry_mode,
                    id,
                    ..
                } => (location, FileStatus::Deleted, Some(id), None, entry_mode),
                C::Modification {
                    location,
                    previous_id,
                    entry_mode,
                    id,
                    ..
                } => (
                    location,
                    FileStatus::Modified,
                    Some(previous_id),
                    Some(id),
                    entry_mode,
                ),
                C::Rewrite { .. } => continue,
            };
            if mode.is_tree() || mode.is_commit() {
                continue;
            }
            let read = |id: Option<gix::ObjectId>| -> Result<Vec<u8>> {
                match id {
                    Some(id) => Ok(g
                        .find_object(id)
                        .ctx(|| format!("reading blob {id}"))?
                        .detach()
                        .data),
                    None => Ok(Vec::new()),
                }
            };
            files.push(ChangedBlob {
                path: path.to_str_lossy().into_owned(),
                status,
                old: read(old_id)?,
                new: read(new_id)?,
            });
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }
}

fn is_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(8000).any(|&b| b == 0) || std::str::from_utf8(bytes).is_err()
}

fn file_diff(path: String, status: FileStatus, old: &[u8], new: &[u8]) -> FileDiff {
    let (a, b) = match status {
        FileStatus::Added => ("/dev/null".to_string(), format!("b/{path}")),
        FileStatus::Deleted => (format!("a/{path}"), "/dev/null".to_string()),
        FileStatus::Modified => (format!("a/{path}"), format!("b/{path}")),
    };
    let mut patch = format!("diff --git a/{path} b/{path}\n");
    match status {
        FileStatus::Added => patch.push_str("new file\n"),
        FileStatus::Deleted => patch.push_str("deleted file\n"),
        FileStatus::Modified => {}
    }
    if is_binary(old) || is_binary(new) {
        patch.push_str(&format!("Binary files {a} and {b} differ\n"));
        return FileDiff {
            path,
            status,
            binary: true,
            additions: 0,
            deletions: 0,
            patch,
        };
    }
    let old_s = String::from_utf8_lossy(old);
    let new_s = String::from_utf8_lossy(new);
    let diff = similar::TextDiff::from_lines(old_s.as_ref(), new_s.as_ref());
    let (mut additions, mut deletions) = (0, 0);
    for c in diff.iter_all_changes() {
        match c.tag() {
            similar::ChangeTag::Insert => additions += 1,
            similar::ChangeTag::Delete => deletions += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    if additions + deletions > 0 {
        patch.push_str(
            &diff
                .unified_diff()
                .context_radius(3)
                .header(&a, &b)
                .to_string(),
        );
    }
    FileDiff {
        path,
        status,
        binary: false,
        additions,
        deletions,
        patch,
    }
}
