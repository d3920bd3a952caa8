use std::path::{Path, PathBuf};

use gix::bstr::ByteSlice;

use super::error::{Error, GixContext, Result};

/// An open repository. Cheap to clone (gix shares its object caches per thread-safe handle).
#[derive(Clone)]
pub struct Repo {
    inner: gix::Repository,
    /// `common_dir`, canonicalized once so paths derived from it compare equal whichever
    /// worktree the repository was opened from.
    common: PathBuf,
    /// git-agent's state directory for this process (`$XDG_STATE_HOME/git-agent`, the bot's
    /// `STATE_DIR`), where run worktrees and the warm pool live; set by the front door.
    state: Option<PathBuf>,
}

impl std::fmt::Debug for Repo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repo")
            .field("git_dir", &self.inner.git_dir())
            .finish()
    }
}

/// Open options that never let the repository's own config name a program we would run:
/// no system or global config, and filter drivers only from our own (API) overrides.
pub(crate) fn hardened_open_options() -> gix::open::Options {
    gix::open::Options::isolated()
        .filter_config_section(|meta| {
            !matches!(
                meta.source,
                gix::config::Source::Local | gix::config::Source::Worktree
            )
        })
        .config_overrides([
            "core.fsmonitor=false",
            // Reflogs need a committer; the machine may have no git identity at all.
            "gitoxide.committer.nameFallback=git-agent",
            "gitoxide.committer.emailFallback=git-agent@localhost",
            "gitoxide.author.nameFallback=git-agent",
            "gitoxide.author.emailFallback=git-agent@localhost",
        ])
}

/// The name of the repository whose canonical common git directory is `common` under the
/// state directory, stable and distinct per repository: its directory's name (sanitized to
/// `[A-Za-z0-9_-]`, at most 40 characters; `app` for `app/.git` or `app.git`) and the first
/// 12 hex digits of the SHA-256 of the path. The name keeps the directories readable; the
/// hash keeps two checkouts both called `app` apart.
pub fn repo_key(common: &Path) -> String {
    use sha2::{Digest as _, Sha256};
    let named = match common.file_name().and_then(|n| n.to_str()) {
        Some(".git") => common.parent().and_then(|p| p.file_name()),
        _ => common.file_name(),
    };
    let raw = named.map(|n| n.to_string_lossy()).unwrap_or_default();
    let raw = raw.strip_suffix(".git").unwrap_or(&raw);
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    let name = match name.trim_matches('-') {
        "" => "repo",
        n => n,
    };
    let digest = Sha256::digest(super::path_bytes(common));
    let hash: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("{name}-{hash}")
}

impl Repo {
    /// Open the repository containing `path` (the path may be anywhere inside its work tree).
    pub fn discover(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let opts = hardened_open_options();
        let inner =
            gix::discover_opts(path, Default::default(), opts).map_err(|e| Error::NotARepo {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        Ok(Self::wrap(inner))
    }

    /// Open exactly the repository at `git_dir_or_workdir`, without searching upwards.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let inner = hardened_open_options()
            .open(path.to_path_buf())
            .map(gix::Repository::from)
            .map_err(|e| Error::NotARepo {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        Ok(Self::wrap(inner))
    }

    fn wrap(inner: gix::Repository) -> Self {
        let common = std::fs::canonicalize(inner.common_dir())
            .unwrap_or_else(|_| inner.common_dir().to_path_buf());
        Self {
            inner,
            common,
            state: None,
        }
    }

    /// This repository with git-agent's state directory `dir`: run worktrees go to
    /// `<dir>/worktrees/<repo-key>/<run-id>` and the warm pool to `<dir>/pool/<repo-key>/`.
    /// The front door picks the directory (the user's state directory, the bot's
    /// `STATE_DIR`); nothing in this module reads the environment for it.
    pub fn with_state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state = Some(dir.into());
        self
    }

    /// The state directory set by [`Repo::with_state_dir`], if any.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state.as_deref()
    }

    /// This repository's name under the state directory: [`repo_key`] of its common dir.
    pub fn key(&self) -> String {
        repo_key(self.common_dir())
    }

    /// The gix handle, for modules (such as `index`) that read objects directly.
    pub fn gix(&self) -> &gix::Repository {
        &self.inner
    }

    /// The directory shared by all worktrees (`.git` of the main worktree).
    pub fn common_dir(&self) -> &Path {
        &self.common
    }

    /// This worktree's private git directory.
    pub fn git_dir(&self) -> &Path {
        self.inner.git_dir()
    }

    /// The work tree root, if the repository has one.
    pub fn workdir(&self) -> Option<&Path> {
        self.inner.workdir()
    }

    /// git-agent's directory inside the repository, `<git-common-dir>/agent`: what belongs
    /// with the repository (run records, local issues, the index cache). Run worktrees do
    /// not: they live under the state directory ([`Repo::with_state_dir`]).
    pub fn agent_dir(&self) -> PathBuf {
        self.common_dir().join("agent")
    }

    /// Resolve a revision (`main`, `origin/main`, `HEAD~2`, a SHA) to a commit id.
    pub fn resolve(&self, rev: &str) -> Result<gix::ObjectId> {
        let id = self
            .inner
            .rev_parse_single(rev.as_bytes().as_bstr())
            .map_err(|e| Error::BadRev {
                rev: rev.to_string(),
                message: e.to_string(),
            })?;
        let commit = id
            .object()
            .ctx(|| format!("reading object of `{rev}`"))?
            .peel_to_commit()
            .map_err(|e| Error::BadRev {
                rev: rev.to_string(),
                message: format!("not a commit: {e}"),
            })?;
        Ok(commit.id)
    }

    /// The bytes of `path` in the tree of `rev`, or `None` when the path is not there.
    /// Reads the object database only: the work tree is never consulted.
    pub fn read_file_at(&self, rev: &str, path: &str) -> Result<Option<Vec<u8>>> {
        let commit_id = self.resolve(rev)?;
        let tree = self
            .inner
            .find_commit(commit_id)
            .ctx(|| format!("reading commit {commit_id}"))?
            .tree()
            .ctx(|| format!("reading tree of {commit_id}"))?;
        let Some(entry) = tree
            .lookup_entry_by_path(path)
            .ctx(|| format!("looking up {path} in {rev}"))?
        else {
            return Ok(None);
        };
        if !entry.mode().is_blob() {
            return Ok(None);
        }
        let blob = entry.object().ctx(|| format!("reading {rev}:{path}"))?;
        Ok(Some(blob.detach().data))
    }
    /// Whether `path` is an executable file in the tree of `rev` (mode 100755); `false` when
    /// it is not there or is something else.
    pub fn executable_at(&self, rev: &str, path: &str) -> Result<bool> {
        let commit_id = self.resolve(rev)?;
        let tree = self
            .inner
            .find_commit(commit_id)
            .ctx(|| format!("reading commit {commit_id}"))?
            .tree()
            .ctx(|| format!("reading tree of {commit_id}"))?;
        Ok(tree
            .lookup_entry_by_path(path)
            .ctx(|| format!("looking up {path} in {rev}"))?
            .is_some_and(|e| e.mode().is_executable()))
    }
}

impl Repo {
    /// Create a repository at `dir` (which must be empty or missing) whose `main` branch has
    /// one commit holding `files` (path, bytes), checked out with a matching index. Used by
    /// `git agent demo` and by tests that need a repository without a `git` binary.
    pub fn init_with_files(dir: &Path, files: &[(&str, &[u8])], message: &str) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(super::error::io_err("cannot create", dir))?;
        let g = gix::init(dir).ctx(|| format!("creating a repository in {}", dir.display()))?;
        let mut editor = g
            .edit_tree(g.empty_tree().id)
            .ctx(|| "editing an empty tree".to_string())?;
        for (path, bytes) in files {
            let id = g.write_blob(bytes).ctx(|| format!("writing {path}"))?;
            editor
                .upsert(*path, gix::object::tree::EntryKind::Blob, id)
                .ctx(|| format!("adding {path}"))?;
            let p = dir.join(path);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(super::error::io_err("cannot create", parent))?;
            }
            std::fs::write(&p, bytes).map_err(super::error::io_err("cannot write", &p))?;
        }
        let tree = editor
            .write()
            .ctx(|| "writing the tree".to_string())?
            .detach();
        super::write_commit(
            &g,
            super::BOOKKEEPING,
            None,
            "refs/heads/main",
            message,
            tree,
            None,
        )?;
        std::fs::write(g.git_dir().join("HEAD"), "ref: refs/heads/main\n").map_err(
            super::error::io_err("cannot write", g.git_dir().join("HEAD")),
        )?;
        let mut index = g
            .index_from_tree(&tree)
            .ctx(|| "building the index".to_string())?;
        index
            .write(Default::default())
            .ctx(|| "writing the index".to_string())?;
        Repo::open(dir)
    }
}
