//! Run worktrees: creation on a new branch, the warm pool, reset/rollback, removal, and
//! garbage collection of finished ones.
//!
//! Worktrees live under the state directory the front door gives the [`Repo`]
//! (`<state>/worktrees/<repo-key>/<run-id>`, the pool in `<state>/pool/<repo-key>/`), never
//! beneath the repository: a project's tools treat a checkout inside another checkout, or a
//! path with a `.git` component, as something else (Node walks up into the main checkout's
//! `node_modules`, a static-file server refuses the dotted directory). Worktrees made before
//! that (`<git-common-dir>/agent/worktrees`, `agent/pool`) are still found: a resumed run
//! moves its own out, the pool hands them out, and [`Repo::gc_worktrees`] removes them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use gix::bstr::{BStr, BString, ByteSlice};
use gix::refs::transaction::PreviousValue;

use super::error::{Error, GixContext, Result, io_err};
use super::repo::Repo;

/// What to create.
#[derive(Debug, Clone)]
pub struct WorktreeRequest {
    /// The run id; names the directory `<state>/worktrees/<repo-key>/<run-id>`.
    pub run_id: String,
    /// The full branch name to create (e.g. `agent/42-fix-dates`), without `refs/heads/`.
    pub branch: String,
    /// The revision the branch starts from.
    pub base: String,
}

/// How to create it.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorktreeOptions {
    /// Continue a run: an existing branch of that name is checked out instead of refused.
    pub resume: bool,
    /// Reuse a pooled worktree of a finished run when one is available.
    pub warm: bool,
}

/// A linked worktree owned by one run.
#[derive(Debug, Clone)]
pub struct Worktree {
    repo: Repo,
    path: PathBuf,
    /// The warm pool this worktree goes back to.
    pool: PathBuf,
    run_id: String,
    branch: String,
    base: gix::ObjectId,
}

/// How a worktree came to be, for progress output and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provenance {
    /// Checked out from scratch.
    Fresh {
        /// Pooled worktrees found no longer to belong to this repository (their registration
        /// gone: a re-clone at the same path, `git worktree prune`) and removed on the way.
        discarded: usize,
    },
    /// Taken from the warm pool, reset, and emptied of everything git does not track.
    Warm {
        /// Files written or removed by the reset.
        files_changed: usize,
        /// Untracked and ignored entries an earlier run left, removed (a directory counts
        /// once).
        leftovers_removed: usize,
        /// Pooled worktrees that no longer belonged to this repository, removed first.
        discarded: usize,
    },
    /// An existing run worktree, reopened.
    Reopened,
}

pub(super) fn validate_name(name: &str, what: &str) -> Result<()> {
    let bad = name.is_empty()
        || name.starts_with('-')
        || name.starts_with('/')
        || name.ends_with('/')
        || name.ends_with(".lock")
        || name.contains("..")
        || name.contains("//")
        || name
            .chars()
            .any(|c| c.is_control() || " ~^:?*[\\".contains(c));
    if bad {
        return Err(Error::InvalidName {
            name: name.to_string(),
            why: format!("not a valid {what}"),
        });
    }
    Ok(())
}

/// Whether a component of `path` starts with `.` (`~/.local/state`, `/tmp/.tmpX`): real
/// projects' code takes such a path for a hidden file (a web framework's static-file
/// server answers 404 for anything under a dot-directory), so no checkout of a run may
/// live under one (issue 39).
pub fn has_dot_component(path: &Path) -> bool {
    path.components().any(|c| match c {
        std::path::Component::Normal(n) => n.as_encoded_bytes().first() == Some(&b'.'),
        _ => false,
    })
}

/// Where a state directory's checkouts (run worktrees, the pool, set-up and verification
/// checkouts) go: the state directory itself when no component of it starts with a dot,
/// else `/var/tmp/git-agent-<uid>` (the XDG default `~/.local/state` has one). That
/// directory must be the agent user's own, a real directory no one else may write;
/// otherwise an error, never a checkout in a place another user controls.
pub fn checkouts_root(state: &Path) -> Result<PathBuf> {
    if !has_dot_component(state) {
        return Ok(state.to_path_buf());
    }
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
    let me = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .map_err(io_err("cannot read", "/proc/self"))?;
    let dir = PathBuf::from(format!("/var/tmp/git-agent-{me}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err("cannot create", &dir)(e)),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(io_err("cannot read", &dir))?;
    let ours = meta.is_dir() && meta.uid() == me && meta.permissions().mode() & 0o022 == 0;
    if !ours {
        return Err(Error::CheckoutsDir {
            dir,
            state: state.to_path_buf(),
        });
    }
    Ok(dir)
}

impl Repo {
    /// Directory holding this repository's run worktrees (and its set-up and verification
    /// checkouts): `<checkouts>/worktrees/<repo-key>` (see [`Repo::key`],
    /// [`checkouts_root`]). An error when no state directory was set.
    pub fn worktrees_dir(&self) -> Result<PathBuf> {
        let state = self.state_dir().ok_or(Error::NoStateDir)?;
        Ok(checkouts_root(state)?.join("worktrees").join(self.key()))
    }

    /// The warm pool of this repository: `<checkouts>/pool/<repo-key>` (on the same file
    /// system as the worktrees: a pooled worktree moves with one rename).
    pub fn pool_dir(&self) -> Result<PathBuf> {
        let state = self.state_dir().ok_or(Error::NoStateDir)?;
        Ok(checkouts_root(state)?.join("pool").join(self.key()))
    }

    /// Where run worktrees lived before they moved to the state directory; read for resume,
    /// the pool and gc, never written.
    fn legacy_worktrees_dir(&self) -> PathBuf {
        self.agent_dir().join("worktrees")
    }

    /// The warm pool's old place, beside [`Self::legacy_worktrees_dir`].
    fn legacy_pool_dir(&self) -> PathBuf {
        self.agent_dir().join("pool")
    }

    /// Whether a local branch exists.
    pub fn branch_exists(&self, branch: &str) -> bool {
        self.gix()
            .try_find_reference(format!("refs/heads/{branch}").as_str())
            .ok()
            .flatten()
            .is_some()
    }

    /// Delete the local branch `branch` when it still points at `at` (a branch that moved
    /// is someone's work and stays). `false` when nothing was deleted.
    pub fn delete_branch_at(&self, branch: &str, at: gix::ObjectId) -> Result<bool> {
        let name = format!("refs/heads/{branch}");
        let Ok(Some(r)) = self.gix().try_find_reference(name.as_str()) else {
            return Ok(false);
        };
        if r.try_id().map(|id| id.detach()) != Some(at) {
            return Ok(false);
        }
        r.delete().ctx(|| format!("deleting {name}"))?;
        Ok(true)
    }

    /// Create `refs/heads/<to>` at the commit `refs/heads/<from>` points to: a run whose
    /// branch name is taken on the remote publishes under a name of its own.
    pub fn copy_branch(&self, from: &str, to: &str) -> Result<()> {
        validate_name(to, "branch name")?;
        let target = self.resolve(&format!("refs/heads/{from}"))?;
        self.create_branch(to, target)
    }

    /// Create (or, when resuming, reopen) the worktree of a run.
    pub fn create_worktree(
        &self,
        req: &WorktreeRequest,
        opts: WorktreeOptions,
    ) -> Result<(Worktree, Provenance)> {
        validate_name(&req.run_id, "run id")?;
        if req.run_id.contains('/') {
            return Err(Error::InvalidName {
                name: req.run_id.clone(),
                why: "a run id may not contain `/`".into(),
            });
        }
        validate_name(&req.branch, "branch name")?;
        let base = self.resolve(&req.base)?;
        let dir = self.worktrees_dir()?;
        let path = dir.join(&req.run_id);
        let exists = self.branch_exists(&req.branch);
        if exists && !opts.resume {
            return Err(Error::BranchExists(req.branch.clone()));
        }
        std::fs::create_dir_all(&dir).map_err(io_err("cannot create", &dir))?;
        let mut discarded = 0;
        if opts.resume && path.join(".git").is_file() && !self.registered(&path) {
            // The run's own worktree, whose registration is gone: made again below from its
            // branch (a resumed run then rolls back to its last checkpoint).
            tracing::warn!(worktree = %path.display(), "the run's worktree no longer belongs to the repository: made again");
            std::fs::remove_dir_all(&path).map_err(io_err("cannot remove", &path))?;
            discarded += 1;
        }
        if opts.resume {
            if path.join(".git").exists() {
                let wt = self.open_worktree(&path, &req.run_id, &req.branch, base)?;
                return Ok((wt, Provenance::Reopened));
            }
            // A run started before worktrees left the repository: move it out, or keep
            // using it where it is when it cannot move (another file system).
            let legacy = self.legacy_worktrees_dir().join(&req.run_id);
            if legacy.join(".git").exists() {
                let at = match move_worktree(&legacy, &path) {
                    Ok(()) => path,
                    Err(e) => {
                        tracing::warn!(from = %legacy.display(), error = %e, "the run's worktree stays in its old place");
                        legacy
                    }
                };
                let wt = self.open_worktree(&at, &req.run_id, &req.branch, base)?;
                return Ok((wt, Provenance::Reopened));
            }
        }
        let start = if exists {
            self.resolve(&format!("refs/heads/{}", req.branch))?
        } else {
            base
        };
        if opts.warm
            && let Some(pooled) = self.take_from_pool(&path, &mut discarded)?
        {
            let wt = self.open_worktree(&pooled, &req.run_id, &req.branch, base)?;
            if !exists {
                self.create_branch(&req.branch, start)?;
            }
            let files_changed = wt.switch_to_branch(&req.branch, start)?;
            // An earlier run's ignored files (a `.pyc`, a `node_modules/.bin` shim, a build
            // cache) would reach this run's baseline: another run's model wrote them.
            let leftovers_removed = remove_untracked(&pooled)?;
            return Ok((
                wt,
                Provenance::Warm {
                    files_changed,
                    leftovers_removed,
                    discarded,
                },
            ));
        }
        if !exists {
            self.create_branch(&req.branch, start)?;
        }
        let head = gix::worktree::add::Head::Attached(
            format!("refs/heads/{}", req.branch)
                .try_into()
                .ctx(|| format!("branch name {}", req.branch))?,
        );
        let interrupt = AtomicBool::new(false);
        self.gix()
            .add_worktree(&path, head, gix::progress::Discard, &interrupt)
            .ctx(|| format!("creating worktree {}", path.display()))?;
        let wt = self.open_worktree(&path, &req.run_id, &req.branch, base)?;
        Ok((wt, Provenance::Fresh { discarded }))
    }

    fn create_branch(&self, branch: &str, target: gix::ObjectId) -> Result<()> {
        self.gix()
            .reference(
                format!("refs/heads/{branch}").as_str(),
                target,
                PreviousValue::MustNotExist,
                format!("git-agent: branch from {target}"),
            )
            .map_err(|e| {
                if self.branch_exists(branch) {
                    Error::BranchExists(branch.to_string())
                } else {
                    Error::Git {
                        context: format!("creating branch {branch}"),
                        message: e.to_string(),
                    }
                }
            })?;
        Ok(())
    }

    fn open_worktree(
        &self,
        path: &Path,
        run_id: &str,
        branch: &str,
        base: gix::ObjectId,
    ) -> Result<Worktree> {
        let repo = Repo::open(path)?;
        Ok(Worktree {
            repo,
            path: path.to_path_buf(),
            pool: self.pool_dir()?,
            run_id: run_id.to_string(),
            branch: branch.to_string(),
            base,
        })
    }

    /// Move a pooled worktree (if any) to `dest`, fixing git's bookkeeping of its location.
    /// A pooled worktree that no longer belongs to this repository — its registration under
    /// the common directory's `worktrees/` is gone (the repository was cloned again at the
    /// same path, `git worktree prune` ran) — is removed instead, and counted in `discarded`.
    fn take_from_pool(&self, dest: &Path, discarded: &mut usize) -> Result<Option<PathBuf>> {
        // The old pool last: one of its worktrees moves out only within one file system.
        for pool in [self.pool_dir()?, self.legacy_pool_dir()] {
            for candidate in linked_worktrees_in(&pool) {
                if !self.registered(&candidate) {
                    tracing::warn!(worktree = %candidate.display(), "a pooled worktree no longer belongs to the repository: removed");
                    if std::fs::remove_dir_all(&candidate).is_ok() {
                        *discarded += 1;
                    }
                    continue;
                }
                // A rename is atomic: two runs racing for one pooled worktree cannot both win.
                if std::fs::rename(&candidate, dest).is_ok() {
                    relink(dest)?;
                    return Ok(Some(dest.to_path_buf()));
                }
            }
        }
        Ok(None)
    }

    /// Whether the linked worktree at `path` is registered in this repository: its `.git`
    /// file names an admin entry under this common directory's `worktrees/` that exists.
    fn registered(&self, path: &Path) -> bool {
        let Ok(text) = std::fs::read_to_string(path.join(".git")) else {
            return false;
        };
        let Some(admin) = text
            .trim()
            .strip_prefix("gitdir:")
            .map(|s| PathBuf::from(s.trim()))
        else {
            return false;
        };
        let (Ok(admin), Ok(ours)) = (
            std::fs::canonicalize(&admin),
            std::fs::canonicalize(self.common_dir().join("worktrees")),
        ) else {
            return false;
        };
        admin.starts_with(&ours) && admin.join("HEAD").is_file()
    }

    /// Hand the worktree of run `run_id` (in its place under the state directory, or the
    /// old one inside the repository) to the warm pool, once the run has ended. `None` when
    /// the run has no worktree left.
    pub fn release_run_worktree(&self, run_id: &str) -> Result<Option<PathBuf>> {
        validate_name(run_id, "run id")?;
        for dir in [self.worktrees_dir()?, self.legacy_worktrees_dir()] {
            let path = dir.join(run_id);
            if path.join(".git").is_file() {
                return put_in_pool(&path, &self.pool_dir()?, run_id).map(Some);
            }
        }
        Ok(None)
    }

    /// Remove pooled worktrees, and those of finished runs, that are older than
    /// `opts.older_than`; then, oldest first, more of them while they take more than
    /// `opts.max_bytes`. `finished` says when a run ended (`None`: it has not, or it is not
    /// known — its worktree stays). A pooled worktree's age is the time it was pooled.
    /// Worktrees in the old place inside the repository count too. Returns every worktree
    /// looked at, oldest first, with what was done.
    pub fn gc_worktrees(
        &self,
        opts: &GcOptions,
        finished: &dyn Fn(&str) -> Option<std::time::SystemTime>,
    ) -> Result<Vec<GcEntry>> {
        let now = std::time::SystemTime::now();
        let mut entries = Vec::new();
        for pool in [self.pool_dir()?, self.legacy_pool_dir()] {
            for path in linked_worktrees_in(&pool) {
                let at = std::fs::metadata(&path)
                    .and_then(|m| m.modified())
                    .unwrap_or(now);
                entries.push((at, path, true));
            }
        }
        for dir in [self.worktrees_dir()?, self.legacy_worktrees_dir()] {
            for path in linked_worktrees_in(&dir) {
                let id = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if let Some(at) = finished(&id) {
                    entries.push((at, path, false));
                }
            }
            // A set-up or verification checkout a crash left behind (a checkout of its
            // own, `<run>-setup`/`<run>-verify`): gone once its run has ended.
            for (path, id) in clean_checkouts_in(&dir) {
                if let Some(at) = finished(&id) {
                    entries.push((at, path, false));
                }
            }
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
        let measure_all = opts.measure_kept || opts.max_bytes.is_some();
        let mut out: Vec<GcEntry> = entries
            .into_iter()
            .map(|(at, path, pooled)| {
                let age = now.duration_since(at).unwrap_or_default();
                let bytes = if measure_all || age >= opts.older_than {
                    disk_usage(&path)
                } else {
                    0
                };
                GcEntry {
                    bytes,
                    age,
                    path,
                    pooled,
                    removed: false,
                }
            })
            .collect();
        let mut kept: u64 = 0;
        for e in &mut out {
            if e.age >= opts.older_than {
                remove_linked_worktree(self, &e.path)?;
                e.removed = true;
            } else {
                kept += e.bytes;
            }
        }
        if let Some(max) = opts.max_bytes {
            for e in out.iter_mut().filter(|e| !e.removed) {
                if kept <= max {
                    break;
                }
                remove_linked_worktree(self, &e.path)?;
                e.removed = true;
                kept -= e.bytes;
            }
        }
        self.prune_worktrees()?;
        Ok(out)
    }

    /// Remove admin entries of worktrees whose directories are gone (like `git worktree prune`).
    pub fn prune_worktrees(&self) -> Result<usize> {
        let admin = self.common_dir().join("worktrees");
        let Ok(entries) = std::fs::read_dir(&admin) else {
            return Ok(0);
        };
        let mut pruned = 0;
        for entry in entries.flatten() {
            let dir = entry.path();
            if dir.join("locked").exists() {
                continue;
            }
            let gitdir = std::fs::read_to_string(dir.join("gitdir")).unwrap_or_default();
            let dot_git = PathBuf::from(gitdir.trim());
            if gitdir.trim().is_empty() || !dot_git.exists() {
                std::fs::remove_dir_all(&dir).map_err(io_err("cannot prune", &dir))?;
                pruned += 1;
            }
        }
        Ok(pruned)
    }
}

/// What [`Repo::gc_worktrees`] removes.
#[derive(Debug, Clone, Copy, Default)]
pub struct GcOptions {
    /// Remove what is at least this old.
    pub older_than: std::time::Duration,
    /// Then remove the oldest of the rest while they take more than this many bytes.
    pub max_bytes: Option<u64>,
    /// Measure the worktrees kept too (for a report); without it and without `max_bytes`,
    /// only what is removed is measured, so a gc after every run costs no walk of the rest.
    pub measure_kept: bool,
}

/// A worktree [`Repo::gc_worktrees`] looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcEntry {
    /// Where it is (was).
    pub path: PathBuf,
    /// Disk space it took, in bytes (blocks allocated).
    pub bytes: u64,
    /// Time since it was pooled, or since its run ended.
    pub age: std::time::Duration,
    /// Whether it was in the warm pool (else: a finished run's).
    pub pooled: bool,
    /// Whether gc removed it.
    pub removed: bool,
}

/// The linked worktrees directly in `dir` (directories with a `.git` file), sorted.
fn linked_worktrees_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join(".git").is_file())
        .collect();
    out.sort();
    out
}

/// Clean checkouts in `dir` (a `.git` directory, a name `<run id>-setup` or
/// `<run id>-verify`) with the run id each belongs to.
fn clean_checkouts_in(dir: &Path) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, String)> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join(".git").is_dir())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let id = name
                .strip_suffix("-setup")
                .or_else(|| name.strip_suffix("-verify"))?
                .to_string();
            Some((p, id))
        })
        .collect();
    out.sort();
    out
}

/// Move the worktree at `from` to `to` (same file system) and fix git's bookkeeping.
fn move_worktree(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to).map_err(io_err("cannot move", from))?;
    relink(to)
}

/// Move the worktree at `path` into `pool` as `name`, its HEAD detached at the commit it
/// was on (a pooled worktree holds no branch, so the person can delete the run's branch
/// once merged), stamped with the time it was pooled (its directory's modification time,
/// which gc reads).
fn put_in_pool(path: &Path, pool: &Path, name: &str) -> Result<PathBuf> {
    std::fs::create_dir_all(pool).map_err(io_err("cannot create", pool))?;
    let dest = pool.join(name);
    move_worktree(path, &dest)?;
    let wt = Repo::open(&dest)?;
    let head = wt.resolve("HEAD")?;
    let head_file = wt.git_dir().join("HEAD");
    std::fs::write(&head_file, format!("{head}\n")).map_err(io_err("cannot write", head_file))?;
    let stamp =
        std::fs::File::open(&dest).and_then(|f| f.set_modified(std::time::SystemTime::now()));
    stamp.map_err(io_err("cannot stamp", dest.clone()))?;
    Ok(dest)
}

/// Delete the linked worktree at `path` and its admin entry in `repo`'s common directory.
fn remove_linked_worktree(repo: &Repo, path: &Path) -> Result<()> {
    let admin = std::fs::read_to_string(path.join(".git"))
        .ok()
        .and_then(|c| {
            c.trim()
                .strip_prefix("gitdir:")
                .map(|s| PathBuf::from(s.trim()))
        })
        .and_then(|a| std::fs::canonicalize(a).ok());
    std::fs::remove_dir_all(path).map_err(io_err("cannot remove", path))?;
    if let Some(admin) = admin
        && admin.starts_with(repo.common_dir().join("worktrees"))
    {
        std::fs::remove_dir_all(&admin).map_err(io_err("cannot remove", admin.clone()))?;
    }
    Ok(())
}

/// Bytes allocated on disk under `path`, symlinks not followed; unreadable parts count 0.
fn disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let own = meta.blocks() * 512;
    if !meta.is_dir() {
        return own;
    }
    let children = std::fs::read_dir(path)
        .map(|rd| rd.flatten().map(|e| disk_usage(&e.path())).sum())
        .unwrap_or(0);
    own + children
}

/// After moving a linked worktree to `dir`, point its admin entry's `gitdir` at the new place.
fn relink(dir: &Path) -> Result<()> {
    let dot_git = dir.join(".git");
    let content =
        std::fs::read_to_string(&dot_git).map_err(io_err("cannot read", dot_git.clone()))?;
    let admin = content
        .trim()
        .strip_prefix("gitdir:")
        .map(|s| PathBuf::from(s.trim()))
        .ok_or_else(|| Error::Git {
            context: format!("reading {}", dot_git.display()),
            message: "not a linked worktree".into(),
        })?;
    let gitdir_file = admin.join("gitdir");
    let abs = std::fs::canonicalize(&dot_git).map_err(io_err("cannot resolve", dot_git.clone()))?;
    std::fs::write(&gitdir_file, format!("{}\n", abs.display()))
        .map_err(io_err("cannot write", gitdir_file))?;
    Ok(())
}

impl Worktree {
    /// The worktree root.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run this worktree belongs to.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The run's branch (without `refs/heads/`).
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// The base commit the branch started from.
    pub fn base(&self) -> gix::ObjectId {
        self.base
    }

    /// The repository opened at this worktree.
    pub fn repo(&self) -> &Repo {
        &self.repo
    }

    /// The commit the worktree's branch points at.
    pub fn head(&self) -> Result<gix::ObjectId> {
        self.repo.resolve("HEAD")
    }

    /// Put the worktree, its index and its branch back to `commit` (an earlier checkpoint of
    /// the run, or anything else). Uncommitted changes are discarded; ignored files are kept.
    /// Returns the number of files written or removed.
    pub fn rollback_to(&self, commit: gix::ObjectId) -> Result<usize> {
        let n = reset_worktree(&self.path, commit)?;
        self.repo
            .gix()
            .reference(
                format!("refs/heads/{}", self.branch).as_str(),
                commit,
                PreviousValue::Any,
                format!("git-agent: roll back to {commit}"),
            )
            .ctx(|| format!("moving {} to {commit}", self.branch))?;
        Ok(n)
    }

    /// Put `paths` (worktree-relative) back as they are in HEAD: a changed file gets its
    /// committed content and mode, a new one is removed. Other changes stay. The commit-time
    /// policy uses it to undo what it refuses, whoever wrote it.
    pub fn restore_paths(&self, paths: &[String]) -> Result<usize> {
        let only: BTreeSet<String> = paths.iter().cloned().collect();
        reset_worktree_paths(&self.path, self.head()?, Some(&only))
    }

    /// Point this worktree's HEAD at `branch` (which must exist at `commit`) and reset the
    /// files to `commit`, touching only what differs.
    fn switch_to_branch(&self, branch: &str, commit: gix::ObjectId) -> Result<usize> {
        let n = reset_worktree(&self.path, commit)?;
        let head_file = self.repo.git_dir().join("HEAD");
        std::fs::write(&head_file, format!("ref: refs/heads/{branch}\n"))
            .map_err(io_err("cannot write", head_file))?;
        Ok(n)
    }

    /// Hand the worktree to the warm pool so the next run on this repository can reuse it.
    pub fn release_to_pool(self) -> Result<PathBuf> {
        put_in_pool(&self.path, &self.pool, &self.run_id)
    }

    /// Delete the worktree and its git bookkeeping. The branch stays.
    pub fn remove(self) -> Result<()> {
        let admin = std::fs::canonicalize(self.repo.git_dir())
            .unwrap_or_else(|_| self.repo.git_dir().to_path_buf());
        std::fs::remove_dir_all(&self.path).map_err(io_err("cannot remove", &self.path))?;
        if admin.starts_with(self.repo_common().join("worktrees")) {
            std::fs::remove_dir_all(&admin).map_err(io_err("cannot remove", admin.clone()))?;
        }
        Ok(())
    }

    fn repo_common(&self) -> PathBuf {
        self.repo.common_dir().to_path_buf()
    }
}

/// Reset the files and the index of the worktree at `dir` to the tree of `target`, writing
/// only the paths that differ: those changed between the index's commit and `target`, plus
/// whatever is dirty or untracked in the work tree. Ignored files are left alone.
pub(crate) fn reset_worktree(dir: &Path, target: gix::ObjectId) -> Result<usize> {
    reset_worktree_paths(dir, target, None)
}

/// [`reset_worktree`] restricted to `only` (worktree-relative paths) when given.
fn reset_worktree_paths(
    dir: &Path,
    target: gix::ObjectId,
    only: Option<&BTreeSet<String>>,
) -> Result<usize> {
    // A fresh handle: the index and config must be read as they are now.
    let repo = Repo::open(dir)?;
    let g = repo.gix();
    let head = repo.resolve("HEAD")?;
    let mut paths: BTreeSet<BString> = BTreeSet::new();

    // 1. What differs between the commit the index reflects and the target.
    let head_tree = g
        .find_commit(head)
        .ctx(|| format!("reading {head}"))?
        .tree()
        .ctx(|| format!("reading tree of {head}"))?;
    let target_tree = g
        .find_commit(target)
        .ctx(|| format!("reading {target}"))?
        .tree()
        .ctx(|| format!("reading tree of {target}"))?;
    let changes = g
        .diff_tree_to_tree(
            &head_tree,
            &target_tree,
            gix::diff::Options::default().with_rewrites(None),
        )
        .ctx(|| format!("diffing {head}..{target}"))?;
    for change in changes {
        use gix::object::tree::diff::ChangeDetached as C;
        let (location, mode) = match change {
            C::Addition {
                location,
                entry_mode,
                ..
            }
            | C::Deletion {
                location,
                entry_mode,
                ..
            }
            | C::Modification {
                location,
                entry_mode,
                ..
            } => (location, entry_mode),
            C::Rewrite { location, .. } => (location, gix::object::tree::EntryKind::Blob.into()),
        };
        if !mode.is_tree() {
            paths.insert(location);
        }
    }

    // 2. What is dirty or untracked in the work tree.
    for path in super::status::dirty_paths(&repo)? {
        paths.insert(path);
    }
    if let Some(only) = only {
        paths.retain(|p| only.contains(&p.to_string()));
    }
    if paths.is_empty() {
        return Ok(0);
    }

    // 3. Write the target's version of each path, or remove it.
    let target_index = g
        .index_from_tree(&target_tree.id)
        .ctx(|| format!("building index of {target}"))?;
    let mut partial = gix::index::State::new(g.object_hash());
    let mut to_remove = Vec::new();
    for path in &paths {
        match target_index.entry_by_path(path.as_bstr()) {
            Some(e) => {
                partial.dangerously_push_entry(e.stat, e.id, e.flags, e.mode, path.as_bstr());
            }
            None => to_remove.push(path.clone()),
        }
    }
    partial.sort_entries();
    for path in &to_remove {
        let p = dir.join(super::rela_path(path.as_bstr()));
        remove_path(&p)?;
        prune_empty_parents(dir, &p);
    }
    // A path that becomes a directory (or stops being one) needs the old file out of the way.
    for entry in partial.entries() {
        let rela = entry.path(&partial);
        let p = dir.join(super::rela_path(rela));
        clear_blocking_components(dir, &p)?;
    }
    let mut opts = g
        .checkout_options(gix::worktree::stack::state::attributes::Source::IdMapping)
        .ctx(|| "preparing checkout".to_string())?;
    opts.destination_is_initially_empty = false;
    opts.overwrite_existing = true;
    let interrupt = AtomicBool::new(false);
    let objects = g
        .objects
        .clone()
        .into_arc()
        .ctx(|| "opening the object database".to_string())?;
    let outcome = gix::worktree::state::checkout(
        &mut partial,
        dir,
        objects,
        &gix::progress::Discard,
        &gix::progress::Discard,
        &interrupt,
        opts,
    )
    .ctx(|| format!("checking out {target} in {}", dir.display()))?;
    if let Some(err) = outcome.errors.first() {
        return Err(Error::Git {
            context: format!("checking out {}", err.path),
            message: err.error.to_string(),
        });
    }

    // 4. The index: the old one with the touched paths replaced, so unchanged entries keep
    //    their stat data and the next status stays cheap.
    let mut index = (*g.index_or_empty().ctx(|| "reading the index".to_string())?).clone();
    super::status::smudge_racy_entries(&mut index);
    let touched: BTreeSet<&BStr> = paths.iter().map(|p| p.as_bstr()).collect();
    index.remove_entries(|_, path, _| touched.contains(path));
    for e in partial.entries() {
        index.dangerously_push_entry(e.stat, e.id, e.flags, e.mode, e.path(&partial));
    }
    index.sort_entries();
    index.remove_tree();
    index.remove_resolve_undo();
    index
        .write(Default::default())
        .ctx(|| "writing the index".to_string())?;
    Ok(paths.len())
}

/// Remove everything in the worktree at `dir` that its index does not list, ignored files
/// included (`git clean -ffdx`), leaving tracked files and submodule checkouts as they are.
/// Returns the number of entries removed.
fn remove_untracked(dir: &Path) -> Result<usize> {
    let repo = Repo::open(dir)?;
    let index = repo
        .gix()
        .index_or_empty()
        .ctx(|| "reading the index".to_string())?;
    let mut files: BTreeSet<PathBuf> = BTreeSet::new();
    let mut dirs: BTreeSet<PathBuf> = BTreeSet::new();
    for entry in index.entries() {
        let rela = super::rela_path(entry.path(&index));
        let mut parent = rela.parent();
        while let Some(d) = parent.filter(|d| !d.as_os_str().is_empty()) {
            if !dirs.insert(d.to_path_buf()) {
                break;
            }
            parent = d.parent();
        }
        files.insert(rela);
    }
    let mut removed = 0;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let here = dir.join(&rel);
        let entries = std::fs::read_dir(&here).map_err(io_err("cannot read", &here))?;
        for entry in entries {
            let entry = entry.map_err(io_err("cannot read", &here))?;
            let name = entry.file_name();
            if rel.as_os_str().is_empty() && name == ".git" {
                continue;
            }
            let child = rel.join(&name);
            if files.contains(&child) {
                continue;
            }
            let is_dir = entry
                .file_type()
                .map_err(io_err("cannot stat", entry.path()))?
                .is_dir();
            if is_dir && dirs.contains(&child) {
                stack.push(child);
                continue;
            }
            remove_path(&entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

fn remove_path(p: &Path) -> Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p).map_err(io_err("cannot remove", p)),
        Ok(_) => std::fs::remove_file(p).map_err(io_err("cannot remove", p)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("cannot stat", p)(e)),
    }
}

fn prune_empty_parents(root: &Path, p: &Path) {
    let mut cur = p.parent();
    while let Some(d) = cur {
        if d == root || !d.starts_with(root) || std::fs::remove_dir(d).is_err() {
            break;
        }
        cur = d.parent();
    }
}

/// Remove a file or symlink standing where a directory of `p`'s path must go.
fn clear_blocking_components(root: &Path, p: &Path) -> Result<()> {
    let Ok(rel) = p.strip_prefix(root) else {
        return Ok(());
    };
    let mut cur = root.to_path_buf();
    let comps: Vec<_> = rel.components().collect();
    for (i, c) in comps.iter().enumerate() {
        cur.push(c);
        let last = i + 1 == comps.len();
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if !last && !m.is_dir() => {
                std::fs::remove_file(&cur).map_err(io_err("cannot remove", cur.clone()))?;
                return Ok(());
            }
            Ok(m) if last && m.is_dir() => {
                std::fs::remove_dir_all(&cur).map_err(io_err("cannot remove", cur.clone()))?;
                return Ok(());
            }
            Ok(_) => {}
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}
