//! The repo map: the most relevant files with their key signatures, packed into a token budget
//! counted with a real tokenizer.

use std::fmt::Write as _;

use super::build::Index;
use super::error::{Error, Result};
use super::rank::{RankOptions, RankedFile};
use super::summary::FileSummary;

/// Counts tokens the way the models do (tiktoken's `cl100k_base`). Loading it takes a moment:
/// hold one and reuse it.
pub struct TokenCounter {
    bpe: tiktoken_rs::CoreBPE,
}

impl std::fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenCounter(cl100k_base)")
    }
}

impl TokenCounter {
    /// Load the `cl100k_base` encoding.
    pub fn new() -> Result<Self> {
        let bpe = tiktoken_rs::cl100k_base().map_err(|e| Error::Tokenizer(e.into()))?;
        Ok(Self { bpe })
    }

    /// Number of tokens in `text`.
    pub fn count(&self, text: &str) -> usize {
        self.bpe.encode_ordinary(text).len()
    }
}

/// Kinds that are noise in a map when a file has many definitions.
fn minor(kind: &str) -> bool {
    matches!(kind, "variable" | "const" | "var" | "macro" | "static")
}

/// The block of one file: its path, then its definitions (top level and one level in).
fn render_file(path: &str, s: &FileSummary, max_defs: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{path}");
    let many = s.defs.len() > 12;
    let mut shown = 0;
    for d in &s.defs {
        let depth = match d.parent {
            None => 0,
            Some(p) => match s.defs.get(p as usize).and_then(|p| p.parent) {
                None => 1,
                Some(_) => continue,
            },
        };
        if many && minor(&d.kind) || d.signature.is_empty() {
            continue;
        }
        if shown == max_defs {
            let _ = writeln!(out, "  …");
            break;
        }
        let indent = if depth == 0 { "  " } else { "    " };
        let _ = writeln!(out, "{indent}{}", d.signature);
        shown += 1;
    }
    out
}

impl Index {
    /// A map of the project in at most `budget` tokens: files ranked for `query` (or by
    /// centrality when there is none), each with its key signatures.
    pub fn repo_map(
        &self,
        counter: &TokenCounter,
        query: Option<&str>,
        budget: usize,
        opts: &RankOptions,
    ) -> String {
        let ranked: Vec<RankedFile> = match query {
            Some(q) if !q.trim().is_empty() => {
                let mut r = self.rank(q, opts);
                // Files with no score still belong in a map when the budget allows.
                let have: std::collections::HashSet<String> =
                    r.iter().map(|f| f.path.clone()).collect();
                r.extend(
                    self.ranker()
                        .rank_global(opts)
                        .into_iter()
                        .filter(|f| !have.contains(&f.path)),
                );
                r
            }
            _ => self.ranker().rank_global(opts),
        };
        let mut out = String::new();
        let mut used = 0;
        for f in ranked {
            let Some(file) = self.file(&f.path) else {
                continue;
            };
            if file.summary.skip.is_some() {
                continue;
            }
            // Try the full block, then shorter ones, then the path alone.
            let mut placed = false;
            for max_defs in [40, 12, 4, 0] {
                let block = render_file(&f.path, &file.summary, max_defs);
                let cost = counter.count(&block);
                if used + cost <= budget {
                    out.push_str(&block);
                    used += cost;
                    placed = true;
                    break;
                }
            }
            if !placed {
                break;
            }
        }
        out
    }

    /// Rank every file for `query`, best first.
    pub fn rank(&self, query: &str, opts: &RankOptions) -> Vec<RankedFile> {
        self.ranker().rank(query, opts)
    }

    /// The `top` files for `query`, best first, with the default weights.
    pub fn locate(&self, query: &str, top: usize) -> Vec<RankedFile> {
        let mut r = self.rank(query, &RankOptions::default());
        r.truncate(top);
        r
    }
}
