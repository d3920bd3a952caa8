//! The run record: a directory under `<git-common-dir>/agent/runs/<run-id>/`, mirrored as a
//! commit on `refs/agent/runs/<run-id>` whose tree holds the record's files, so any clone
//! that fetches the ref can audit or resume the run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gix::bstr::ByteSlice;

use super::error::{Error, GixContext, Result, io_err};
use super::repo::Repo;

/// The ref that mirrors a run record.
pub fn run_ref(run_id: &str) -> String {
    format!("refs/agent/runs/{run_id}")
}

impl Repo {
    /// The run record directory (not created).
    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.agent_dir().join("runs").join(run_id)
    }

    /// Snapshot the run record directory as a commit on `refs/agent/runs/<run-id>` (child
    /// of the previous snapshot). Returns the commit, or the old one when nothing changed.
    pub fn mirror_run_record(&self, run_id: &str) -> Result<gix::ObjectId> {
        let g = self.gix();
        let dir = self.run_dir(run_id);
        let mut files = Vec::new();
        collect_files(&dir, &dir, &mut files)?;
        let mut editor = g
            .edit_tree(g.empty_tree().id)
            .ctx(|| "editing an empty tree".to_string())?;
        for (rela, abs) in &files {
            let bytes = std::fs::read(abs).map_err(io_err("cannot read", abs))?;
            let id = g
                .write_blob(&bytes)
                .ctx(|| format!("writing {}", abs.display()))?;
            editor
                .upsert(rela.as_str(), gix::object::tree::EntryKind::Blob, id)
                .ctx(|| format!("adding {rela}"))?;
        }
        let tree = editor
            .write()
            .ctx(|| "writing the record tree".to_string())?
            .detach();
        let name = run_ref(run_id);
        let parent = g
            .try_find_reference(name.as_str())
            .ctx(|| format!("reading {name}"))?
            .and_then(|mut r| r.peel_to_id().ok().map(|id| id.detach()));
        if let Some(p) = parent {
            let old_tree = g
                .find_commit(p)
                .ctx(|| format!("reading {p}"))?
                .tree_id()
                .ctx(|| format!("reading tree of {p}"))?
                .detach();
            if old_tree == tree {
                return Ok(p);
            }
        }
        super::write_commit(
            g,
            super::BOOKKEEPING,
            None,
            &name,
            &format!("run record {run_id}"),
            tree,
            parent,
        )
    }

    /// Read the run record from its ref (as fetched from another clone): file path → bytes.
    pub fn read_run_record(&self, run_id: &str) -> Result<BTreeMap<String, Vec<u8>>> {
        let g = self.gix();
        let name = run_ref(run_id);
        let commit = self.resolve(&name)?;
        let tree = g
            .find_commit(commit)
            .ctx(|| format!("reading {commit}"))?
            .tree()
            .ctx(|| format!("reading tree of {commit}"))?;
        let mut out = BTreeMap::new();
        let mut recorder = gix::traverse::tree::Recorder::default();
        tree.traverse()
            .breadthfirst(&mut recorder)
            .ctx(|| format!("walking {name}"))?;
        for entry in recorder.records {
            if !entry.mode.is_blob() {
                continue;
            }
            let data = g
                .find_object(entry.oid)
                .ctx(|| format!("reading {}", entry.filepath))?
                .detach()
                .data;
            out.insert(entry.filepath.to_str_lossy().into_owned(), data);
        }
        Ok(out)
    }

    /// Write the record from its ref into the local run directory (for resuming a run that
    /// was started in another clone). Existing files are overwritten.
    pub fn restore_run_record(&self, run_id: &str) -> Result<PathBuf> {
        let dir = self.run_dir(run_id);
        for (rela, bytes) in self.read_run_record(run_id)? {
            if rela.split('/').any(|c| c == ".." || c.is_empty()) {
                return Err(Error::InvalidName {
                    name: rela,
                    why: "run record paths must stay inside the record".into(),
                });
            }
            let p = dir.join(&rela);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).map_err(io_err("cannot create", parent))?;
            }
            std::fs::write(&p, bytes).map_err(io_err("cannot write", &p))?;
        }
        Ok(dir)
    }
}

/// The directory of a run's record that is never mirrored: what stays on this machine.
pub const PRIVATE_RUN_DIR: &str = "private";

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("cannot read", dir)(e)),
    };
    for entry in entries {
        let entry = entry.map_err(io_err("cannot read", dir))?;
        let path = entry.path();
        let ft = entry.file_type().map_err(io_err("cannot stat", &path))?;
        if ft.is_dir() {
            if dir == root && entry.file_name() == PRIVATE_RUN_DIR {
                continue;
            }
            collect_files(root, &path, out)?;
        } else if ft.is_file() {
            let rela = path
                .strip_prefix(root)
                .map_err(|_| Error::InvalidName {
                    name: path.display().to_string(),
                    why: "outside the record".into(),
                })?
                .to_string_lossy()
                .replace('\\', "/");
            out.push((rela, path));
        }
    }
    out.sort();
    Ok(())
}
