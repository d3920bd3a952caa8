//! The project index: which files a repository has, what they define and reference, which of
//! them matter for a goal, and a map of the project that fits a token budget.
//!
//! It walks the tree of a commit (read from the object database through gix) or a work tree
//! (ignore rules respected), skips vendored, generated, minified and binary files, extracts
//! definitions, references and imports with tree-sitter (Rust, Python, JavaScript, TypeScript,
//! Go, Java, C, C++, Ruby; other text files are indexed as text) and keeps each file's summary
//! in a cache under `<git-common-dir>/agent/index/`, keyed by blob id, so indexing another
//! commit re-parses only the blobs that changed. Ranking uses no model: BM25 over split
//! identifiers, exact mentions (paths, stack frames, dotted modules, identifiers) and centrality
//! in the file graph personalized by those mentions.
//!
//! This module reads the repository and writes only its own cache directory. It must not edit
//! work trees, run commands or call models.
//!
//! ```no_run
//! use git_agent::index::{Index, IndexOptions, RankOptions, TokenCounter};
//! use git_agent::workspace::Repo;
//!
//! let repo = Repo::discover(".")?;
//! let index = Index::at_commit(&repo, "HEAD", &IndexOptions::default())?;
//! let files = index.locate("TypeError in PairGrid.map with hue", 10);
//! let map = index.repo_map(&TokenCounter::new()?, Some("PairGrid hue"), 2048, &RankOptions::default());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod build;
mod cache;
mod error;
mod issue;
mod lang;
mod map;
mod rank;
mod summary;
pub mod text;
mod walk;

pub use build::{BuildStats, CacheLocation, Index, IndexOptions, Snapshot};
pub use error::{Error, Result};
pub use map::TokenCounter;
pub use rank::{RankOptions, RankedFile, Ranker, is_test_path};
pub use summary::IndexedFile;
pub use summary::{Def, FileSummary, Lang, Skip};
pub use walk::skip_path;
