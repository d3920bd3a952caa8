//! Building and updating an [`Index`] of a commit or a work tree.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, mpsc};

use gix::ObjectId;

use super::cache::{Cache, Key};
use super::error::{Error, Result, git_err, io_err};
use super::lang::{Extractor, Parsers};
use super::rank::Ranker;
use super::summary::IndexedFile;
use super::summary::{FileSummary, Lang};
use super::walk::{self, Entry};
use crate::workspace::Repo;

/// How an index is built.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Worker threads for parsing (default: available parallelism).
    pub threads: usize,
    /// Cache directory; default `<git-common-dir>/agent/index/`. `None` inside
    /// [`IndexOptions::cache`] disables the cache.
    pub cache: CacheLocation,
}

/// Where the summary cache lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheLocation {
    /// `<git-common-dir>/agent/index/`.
    Repository,
    /// A directory of the caller's choosing.
    Dir(PathBuf),
    /// No cache: everything is parsed every time.
    Off,
}

impl Default for IndexOptions {
    fn default() -> Self {
        Self {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cache: CacheLocation::Repository,
        }
    }
}

/// What was indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    /// The tree of a commit.
    Commit {
        /// The commit.
        commit: ObjectId,
        /// Its tree.
        tree: ObjectId,
    },
    /// A work tree's files as they are on disk.
    Worktree(PathBuf),
}

/// Counters of a build or update: what was parsed and what came from the cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BuildStats {
    /// Files in the index.
    pub files: usize,
    /// Files parsed in this pass.
    pub parsed: usize,
    /// Files whose summary came from the cache (or an unchanged entry, on update).
    pub cached: usize,
    /// Bytes read and parsed in this pass.
    pub bytes_parsed: u64,
}

/// The project index: every indexable file of one snapshot with its summary. Ranking
/// structures are derived on first use and dropped on update.
pub struct Index {
    snapshot: Snapshot,
    files: Vec<IndexedFile>,
    stats: BuildStats,
    cache_dir: Option<PathBuf>,
    threads: usize,
    ranker: OnceLock<Ranker>,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("snapshot", &self.snapshot)
            .field("files", &self.files.len())
            .field("stats", &self.stats)
            .finish()
    }
}

enum Content {
    Odb,
    Fs(PathBuf),
}

fn key_of(path: &str, blob: ObjectId) -> (Option<Lang>, Key) {
    let lang = Lang::from_path(path);
    (lang, (blob, lang.map_or(0, Lang::tag)))
}

/// Summaries for `todo` (indexes into `entries`), parsed on `threads` workers and appended to
/// the cache as they come. Returns them in `todo` order.
fn parse_all(
    repo: &Repo,
    content: &Content,
    entries: &[Entry],
    todo: &[usize],
    threads: usize,
    cache: Option<&mut Cache>,
) -> Result<(Vec<Arc<FileSummary>>, u64)> {
    let extractor = Extractor::new();
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::sync_channel::<Result<(usize, FileSummary, u64)>>(256);
    let mut out: Vec<Option<Arc<FileSummary>>> = vec![None; todo.len()];
    let mut bytes_total = 0u64;
    let mut writer = match &cache {
        Some(c) => Some(c.writer()?),
        None => None,
    };
    let workers = threads.clamp(1, todo.len().max(1));
    std::thread::scope(|scope| -> Result<()> {
        for _ in 0..workers {
            let tx = tx.clone();
            let gix = repo.gix().clone();
            let (next, extractor) = (&next, &extractor);
            scope.spawn(move || {
                let mut parsers = Parsers::default();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&e) = todo.get(i) else { break };
                    let entry = &entries[e];
                    let result = read_content(&gix, content, entry).and_then(|data| {
                        let (lang, _) = key_of(&entry.path, entry.blob);
                        let s = extractor.summarize(&mut parsers, lang, &data)?;
                        Ok((i, s, data.len() as u64))
                    });
                    if tx.send(result).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for result in rx {
            let (i, summary, bytes) = result?;
            bytes_total += bytes;
            if let Some(w) = writer.as_mut() {
                let entry = &entries[todo[i]];
                w.add(key_of(&entry.path, entry.blob).1, &summary)?;
            }
            out[i] = Some(Arc::new(summary));
        }
        Ok(())
    })?;
    if let (Some(w), Some(cache)) = (writer, cache)
        && let Some(path) = w.finish()?
    {
        cache.adopt(path)?;
    }
    let out = out.into_iter().map(|s| s.unwrap_or_default()).collect();
    Ok((out, bytes_total))
}

fn read_content(gix: &gix::Repository, content: &Content, entry: &Entry) -> Result<Vec<u8>> {
    match content {
        Content::Odb => {
            let obj = gix.find_object(entry.blob).map_err(git_err(|| {
                format!("reading blob {} ({})", entry.blob, entry.path)
            }))?;
            Ok(obj.detach().data)
        }
        Content::Fs(root) => {
            let p = root.join(&entry.path);
            std::fs::read(&p).map_err(io_err("reading", p))
        }
    }
}

impl Index {
    /// Index the tree of `rev` (read from the object database; the work tree is not consulted).
    pub fn at_commit(repo: &Repo, rev: &str, opts: &IndexOptions) -> Result<Index> {
        let commit = repo.resolve(rev)?;
        let tree = walk::commit_tree(repo.gix(), commit)?;
        let entries = walk::tree_entries(repo.gix(), tree)?;
        Self::build(
            repo,
            Snapshot::Commit { commit, tree },
            Content::Odb,
            entries,
            opts,
        )
    }

    /// Index the files of the repository's work tree as they are on disk (ignore rules
    /// respected).
    pub fn at_worktree(repo: &Repo, opts: &IndexOptions) -> Result<Index> {
        let root = repo
            .workdir()
            .ok_or_else(|| Error::NoWorktree(repo.git_dir().to_path_buf()))?
            .to_path_buf();
        let entries = walk::worktree_entries(&root)?;
        Self::build(
            repo,
            Snapshot::Worktree(root.clone()),
            Content::Fs(root),
            entries,
            opts,
        )
    }

    fn resolve_cache_dir(repo: &Repo, opts: &IndexOptions) -> Option<PathBuf> {
        match &opts.cache {
            CacheLocation::Repository => Some(repo.agent_dir().join("index")),
            CacheLocation::Dir(d) => Some(d.clone()),
            CacheLocation::Off => None,
        }
    }

    fn build(
        repo: &Repo,
        snapshot: Snapshot,
        content: Content,
        entries: Vec<Entry>,
        opts: &IndexOptions,
    ) -> Result<Index> {
        let cache_dir = Self::resolve_cache_dir(repo, opts);
        let mut cache = cache_dir.as_ref().map(Cache::open).transpose()?;
        let mut summaries: Vec<Option<Arc<FileSummary>>> = vec![None; entries.len()];
        let mut todo = Vec::new();
        let mut stats = BuildStats {
            files: entries.len(),
            ..BuildStats::default()
        };
        for (i, e) in entries.iter().enumerate() {
            let (_, key) = key_of(&e.path, e.blob);
            match cache.as_ref().and_then(|c| c.get(&key)) {
                Some(s) => {
                    summaries[i] = Some(Arc::new(s));
                    stats.cached += 1;
                }
                None => todo.push(i),
            }
        }
        let (parsed, bytes) = parse_all(
            repo,
            &content,
            &entries,
            &todo,
            opts.threads,
            cache.as_mut(),
        )?;
        stats.parsed = todo.len();
        stats.bytes_parsed = bytes;
        for (i, s) in todo.into_iter().zip(parsed) {
            summaries[i] = Some(s);
        }
        let files = entries
            .into_iter()
            .zip(summaries)
            .map(|(e, s)| IndexedFile {
                path: e.path,
                blob: e.blob,
                summary: s.unwrap_or_default(),
            })
            .collect();
        tracing::debug!(?stats, "index built");
        Ok(Index {
            snapshot,
            files,
            stats,
            cache_dir,
            threads: opts.threads,
            ranker: OnceLock::new(),
        })
    }

    /// Bring a commit index to the tree of `rev`: only subtrees that changed are read and only
    /// changed blobs missing from the cache are parsed.
    pub fn update_to_commit(&mut self, repo: &Repo, rev: &str) -> Result<BuildStats> {
        let commit = repo.resolve(rev)?;
        let tree = walk::commit_tree(repo.gix(), commit)?;
        let changes = match &self.snapshot {
            Snapshot::Commit { tree: old, .. } => walk::diff_trees(repo.gix(), *old, tree)?,
            Snapshot::Worktree(_) => {
                // Switching kinds: rebuild from the commit (the cache keeps it cheap).
                *self = Index::at_commit(
                    repo,
                    rev,
                    &IndexOptions {
                        threads: self.threads,
                        cache: self
                            .cache_dir
                            .clone()
                            .map_or(CacheLocation::Off, CacheLocation::Dir),
                    },
                )?;
                return Ok(self.stats);
            }
        };
        let stats = self.apply(repo, Content::Odb, changes)?;
        self.snapshot = Snapshot::Commit { commit, tree };
        Ok(stats)
    }

    /// Re-read `paths` (repository-relative) from the work tree after they changed on disk.
    /// A path that no longer exists is removed.
    pub fn update_paths(&mut self, repo: &Repo, paths: &[&str]) -> Result<BuildStats> {
        let Snapshot::Worktree(root) = &self.snapshot else {
            return Err(Error::NoWorktree(repo.git_dir().to_path_buf()));
        };
        let root = root.clone();
        let mut changes = Vec::new();
        for &p in paths {
            if walk::skip_path(p) {
                continue;
            }
            let full = root.join(p);
            let blob = match std::fs::read(&full) {
                Ok(data) => Some(walk::blob_id(&data)?),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io_err("reading", full)(e)),
            };
            changes.push(walk::Change {
                path: p.to_string(),
                blob,
            });
        }
        self.apply(repo, Content::Fs(root), changes)
    }

    fn apply(
        &mut self,
        repo: &Repo,
        content: Content,
        changes: Vec<walk::Change>,
    ) -> Result<BuildStats> {
        let mut cache = self.cache_dir.as_ref().map(Cache::open).transpose()?;
        let mut stats = BuildStats::default();
        let mut fresh: Vec<Entry> = Vec::new();
        for change in changes {
            let pos = self
                .files
                .binary_search_by(|f| f.path.as_str().cmp(&change.path));
            match (change.blob, pos) {
                (None, Ok(i)) => {
                    self.files.remove(i);
                }
                (None, Err(_)) => {}
                (Some(blob), Ok(i)) if self.files[i].blob == blob => stats.cached += 1,
                (Some(blob), _) => fresh.push(Entry {
                    path: change.path,
                    blob,
                }),
            }
        }
        let mut todo = Vec::new();
        let mut found: Vec<Option<Arc<FileSummary>>> = vec![None; fresh.len()];
        for (i, e) in fresh.iter().enumerate() {
            match cache
                .as_ref()
                .and_then(|c| c.get(&key_of(&e.path, e.blob).1))
            {
                Some(s) => {
                    found[i] = Some(Arc::new(s));
                    stats.cached += 1;
                }
                None => todo.push(i),
            }
        }
        let (parsed, bytes) =
            parse_all(repo, &content, &fresh, &todo, self.threads, cache.as_mut())?;
        stats.parsed = todo.len();
        stats.bytes_parsed = bytes;
        for (i, s) in todo.into_iter().zip(parsed) {
            found[i] = Some(s);
        }
        for (e, s) in fresh.into_iter().zip(found) {
            let file = IndexedFile {
                path: e.path,
                blob: e.blob,
                summary: s.unwrap_or_default(),
            };
            match self.files.binary_search_by(|f| f.path.cmp(&file.path)) {
                Ok(i) => self.files[i] = file,
                Err(i) => self.files.insert(i, file),
            }
        }
        stats.files = self.files.len();
        self.stats = stats;
        self.ranker = OnceLock::new();
        Ok(stats)
    }

    /// What was indexed.
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// The indexed files, sorted by path.
    pub fn files(&self) -> &[IndexedFile] {
        &self.files
    }

    /// The file at `path`, if indexed.
    pub fn file(&self, path: &str) -> Option<&IndexedFile> {
        self.files
            .binary_search_by(|f| f.path.as_str().cmp(path))
            .ok()
            .map(|i| &self.files[i])
    }

    /// Counters of the last build or update.
    pub fn stats(&self) -> BuildStats {
        self.stats
    }

    /// The cache directory in use, if any.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.cache_dir.as_deref()
    }

    pub(crate) fn ranker(&self) -> &Ranker {
        self.ranker.get_or_init(|| Ranker::new(&self.files))
    }
}
