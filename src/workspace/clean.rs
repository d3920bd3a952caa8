//! Clean checkouts: a commit checked out afresh in a directory of its own, with nothing from
//! any other work tree — no untracked file, no ignored file, no build cache. The verification
//! that decides a run runs there (issue 18), so a file the model planted beside its change
//! (a git-ignored `.pyc`, a `node_modules/.bin` shim) cannot make the tests pass.
//!
//! Also here: commits that mix two trees path by path ([`Repo::overlay`]), for the held-out
//! check (the run's code under the base's test files) and the reproduction check (the base's
//! code under the run's tests).

use std::path::{Path, PathBuf};

use gix::bstr::ByteSlice as _;

use super::error::{GixContext, Result, io_err};
use super::repo::Repo;

/// A commit checked out afresh; removed with [`CleanTree::remove`] (or by the next checkout
/// of the same name).
#[derive(Debug)]
pub struct CleanTree {
    path: PathBuf,
    commit: gix::ObjectId,
    objects: PathBuf,
}

impl CleanTree {
    /// The checkout's root.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The commit checked out.
    pub fn commit(&self) -> gix::ObjectId {
        self.commit
    }

    /// The repository's object store, the checkout's alternate: bound read-only into the
    /// view of a command that runs there, so git works in it (issue 39).
    pub fn objects(&self) -> &Path {
        &self.objects
    }

    /// Delete the checkout.
    pub fn remove(self) -> Result<()> {
        remove_checkout(&self.path)
    }
}

/// Remove the checkout at `path`, if any. Nothing inside it is read first: commands ran
/// there and may have rewritten its `.git` to point anywhere.
fn remove_checkout(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        _ => std::fs::remove_dir_all(path).map_err(io_err("cannot remove", path)),
    }
}

/// The `.git` of a checkout of its own, clone-like: `HEAD` detached at `commit`, a minimal
/// configuration, the repository's tags in `packed-refs`, and the repository's object
/// store as its only alternate. `git describe`, `rev-parse`, `ls-files` and `log` work in
/// it with nothing of the repository's `.git` but its objects: never its configuration (an
/// Action's token may be there), its hooks, or `agent/runs` (issue 39).
fn write_clone_like_git_dir(
    repo: &Repo,
    dir: &Path,
    commit: gix::ObjectId,
    objects: &Path,
) -> Result<()> {
    let git = dir.join(".git");
    for d in ["objects/info", "objects/pack", "refs/heads", "refs/tags"] {
        let d = git.join(d);
        std::fs::create_dir_all(&d).map_err(io_err("cannot create", d.clone()))?;
    }
    let write = |name: &str, text: &str| {
        let p = git.join(name);
        std::fs::write(&p, text).map_err(io_err("cannot write", p.clone()))
    };
    let sha256 = repo.gix().object_hash() != gix::hash::Kind::Sha1;
    write(
        "config",
        &format!(
            "[core]\n\trepositoryformatversion = {}\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = false\n{}",
            u8::from(sha256),
            if sha256 {
                "[extensions]\n\tobjectformat = sha256\n"
            } else {
                ""
            }
        ),
    )?;
    write("HEAD", &format!("{commit}\n"))?;
    let mut alternates = objects.as_os_str().as_encoded_bytes().to_vec();
    alternates.push(b'\n');
    let p = git.join("objects/info/alternates");
    std::fs::write(&p, alternates).map_err(io_err("cannot write", p.clone()))?;
    let mut packed = String::new();
    let refs = repo
        .gix()
        .references()
        .ctx(|| "reading references".to_string())?;
    let mut tags: Vec<(String, gix::ObjectId)> = Vec::new();
    for r in refs.tags().ctx(|| "reading tags".to_string())?.flatten() {
        let name = r.name().as_bstr().to_string();
        if let Some(id) = r.try_id()
            && !name.contains(['\n', ' '])
        {
            tags.push((name, id.detach()));
        }
    }
    tags.sort();
    for (name, id) in tags {
        packed.push_str(&format!("{id} {name}\n"));
    }
    write("packed-refs", &packed)?;
    Ok(())
}

impl Repo {
    /// Check `commit` out, detached, in a fresh directory `name` beside the run worktrees,
    /// as a checkout of its own (not a linked worktree: its `.git` must work inside a view
    /// that holds none of the repository's). An earlier checkout of that name is removed
    /// first, so nothing of it survives.
    pub fn clean_checkout(&self, name: &str, commit: gix::ObjectId) -> Result<CleanTree> {
        super::worktree::validate_name(name, "checkout name")?;
        let dir = self.worktrees_dir()?;
        std::fs::create_dir_all(&dir).map_err(io_err("cannot create", dir.clone()))?;
        let path = dir.join(name);
        remove_checkout(&path)?;
        let objects = self.common_dir().join("objects");
        let objects = std::fs::canonicalize(&objects).map_err(io_err("cannot resolve", objects))?;
        std::fs::create_dir_all(&path).map_err(io_err("cannot create", path.clone()))?;
        write_clone_like_git_dir(self, &path, commit, &objects)?;
        super::git_cli::run(
            &path,
            ["read-tree", "-u", "--reset", &commit.to_string()],
            &[],
        )
        .inspect_err(|_| {
            let _ = remove_checkout(&path);
        })?;
        Ok(CleanTree {
            path,
            commit,
            objects,
        })
    }

    /// A commit (on no branch, parent `onto`) whose tree is `onto`'s with each of `paths`
    /// (repository-relative) as it is in `from`: taken when `from` has it, removed when not.
    /// Returns `onto` itself when that changes nothing.
    pub fn overlay(
        &self,
        onto: gix::ObjectId,
        from: gix::ObjectId,
        paths: &[String],
    ) -> Result<gix::ObjectId> {
        let g = self.gix();
        let tree_of = |c: gix::ObjectId| -> Result<gix::Tree<'_>> {
            g.find_commit(c)
                .ctx(|| format!("reading {c}"))?
                .tree()
                .ctx(|| format!("reading tree of {c}"))
        };
        let onto_tree = tree_of(onto)?;
        let from_tree = tree_of(from)?;
        let mut editor = g
            .edit_tree(onto_tree.id)
            .ctx(|| format!("editing tree {}", onto_tree.id))?;
        for path in paths {
            let entry = from_tree
                .lookup_entry_by_path(path)
                .ctx(|| format!("looking up {path} in {from}"))?;
            match entry {
                Some(e) if !e.mode().is_tree() => {
                    editor
                        .upsert(path.as_bytes().as_bstr(), e.mode().kind(), e.object_id())
                        .ctx(|| format!("setting {path}"))?;
                }
                Some(_) => {}
                None => {
                    editor
                        .remove(path.as_bytes().as_bstr())
                        .ctx(|| format!("removing {path}"))?;
                }
            }
        }
        let tree = editor
            .write()
            .ctx(|| "writing the tree".to_string())?
            .detach();
        if tree == onto_tree.id {
            return Ok(onto);
        }
        super::write_loose_commit(g, "git-agent: overlay for verification", tree, onto)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn a_clean_checkout_holds_the_commit_and_nothing_else() {
        let tmp = tempfile::Builder::new()
            .prefix("ga-test-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().join("repo");
        let repo = Repo::init_with_files(
            &dir,
            &[
                ("a.txt", b"a\n"),
                ("tests/t.txt", b"t1\n"),
                (".gitignore", b"*.pyc\n"),
            ],
            "base",
        )
        .unwrap()
        .with_state_dir(tmp.path().join("state"));
        let base = repo.resolve("HEAD").unwrap();
        std::fs::write(dir.join("a.txt"), "a2\n").unwrap();
        std::fs::write(dir.join("tests/t.txt"), "t2\n").unwrap();
        std::fs::write(dir.join("planted.pyc"), "x").unwrap();
        git(&dir, &["commit", "-qam", "change"]);
        let head = repo.resolve("HEAD").unwrap();

        let clean = repo.clean_checkout("c1", head).unwrap();
        let p = clean.path().to_path_buf();
        assert_eq!(std::fs::read_to_string(p.join("a.txt")).unwrap(), "a2\n");
        assert!(!p.join("planted.pyc").exists(), "ignored files stay behind");
        // Something written in the checkout is gone at the next checkout of that name.
        std::fs::write(p.join("left.pyc"), "x").unwrap();
        let again = repo.clean_checkout("c1", head).unwrap();
        assert!(
            !again.path().components().any(|c| c.as_os_str() == ".git"),
            "{}",
            again.path().display()
        );
        assert!(!again.path().join("left.pyc").exists());
        assert_eq!(
            git(again.path(), &["rev-parse", "HEAD"]).trim(),
            head.to_string()
        );

        // The run's code under the base's test file, and the base's code under the run's.
        let held_out = repo
            .overlay(
                head,
                base,
                &["tests/t.txt".to_string(), "gone.txt".to_string()],
            )
            .unwrap();
        let h = repo.clean_checkout("c2", held_out).unwrap();
        assert_eq!(
            std::fs::read_to_string(h.path().join("a.txt")).unwrap(),
            "a2\n"
        );
        assert_eq!(
            std::fs::read_to_string(h.path().join("tests/t.txt")).unwrap(),
            "t1\n"
        );
        let repro = repo
            .overlay(base, head, &["tests/t.txt".to_string()])
            .unwrap();
        let r = repo.clean_checkout("c3", repro).unwrap();
        assert_eq!(
            std::fs::read_to_string(r.path().join("a.txt")).unwrap(),
            "a\n"
        );
        assert_eq!(
            std::fs::read_to_string(r.path().join("tests/t.txt")).unwrap(),
            "t2\n"
        );
        // Nothing to change: the commit itself.
        assert_eq!(repo.overlay(head, head, &["a.txt".into()]).unwrap(), head);
        for c in [again, h, r] {
            let path = c.path().to_path_buf();
            c.remove().unwrap();
            assert!(!path.exists());
        }
        assert_eq!(repo.prune_worktrees().unwrap(), 0);
    }
}
