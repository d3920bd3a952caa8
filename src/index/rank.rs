//! Ranking files for a query (issue text, CI log, goal) with no model.
//!
//! Four signals, added: lexical relevance (BM25 over split identifiers, with path and
//! definition-name terms weighted up), the file's best definition (BM25 over each function's or
//! class's own span, so one strongly matching function is not diluted by a long file), exact
//! mentions (file paths and stack-trace frames,
//! dotted module paths, identifiers resolved to the files defining them) and centrality in the
//! file graph (imports and references to definitions) personalized by the files the first two
//! signals found. Tests and non-code files are damped unless the query is about them, and so
//! is code in a minority language of the project (a Python project's bundled JavaScript).
//! Last, each file gains from the best other file of its directory, so the rest of a change
//! that spans one package moves up with its strongest file.
//!
//! The query is read as an issue, first without its template noise (version dumps, HTML
//! comments, URL parameters; see `issue`): terms of its first line (the title) weigh more, terms inside
//! fenced blocks and indented output (logs, package lists) less, adjacent words are also
//! joined (`link check` meets `linkcheck`), terms found in most files are dropped, and a file
//! whose own name is a query term gets a boost scaled by how rare that name is.

use std::collections::HashMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::summary::IndexedFile;
use super::text;

/// A term must be in at least this many files before `max_df` may call it too common: in a
/// small project every term is in a large fraction of the files.
const MIN_COMMON_DF: f64 = 20.0;

/// Weights of the ranking: plain data, so a caller can tune them without code.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RankOptions {
    /// BM25 term-frequency saturation.
    pub k1: f64,
    /// BM25 length normalization.
    pub b: f64,
    /// Extra term frequency given to each term of a file's path.
    pub path_term_weight: f64,
    /// Extra term frequency given to each term of a definition's name.
    pub def_term_weight: f64,
    /// Weight of the (max-normalized) BM25 score.
    pub lexical: f64,
    /// Boost for a file named by a path mention (split among the files it could mean).
    pub path_mention: f64,
    /// Boost for a module named by a dotted path.
    pub module_mention: f64,
    /// Boost for defining a mentioned identifier (scaled by the identifier's rarity).
    pub ident_mention: f64,
    /// Weight of the personalized centrality.
    pub centrality: f64,
    /// Restart probability complement of the personalized PageRank.
    pub damping: f64,
    /// Multiplier for test files when the query is not about tests.
    pub test_factor: f64,
    /// Multiplier for files that are not parsed code (docs, data, config).
    pub non_code_factor: f64,
    /// Multiplier for code under documentation and example directories.
    pub doc_factor: f64,
    /// Weight of a query term occurrence in the first line (an issue's title).
    pub title_weight: f64,
    /// Weight of a query term occurrence inside a fenced block, a `<details>` fold or an
    /// indented line (logs, package lists, output); prose counts 1.
    pub code_block_weight: f64,
    /// Boost for a file whose name (stem) is a term of the query, scaled by how few files
    /// share that name and by the term's weight in the query.
    pub stem_mention: f64,
    /// Weight of the joined form of two adjacent query words (`link check` → `linkcheck`,
    /// `type hints` → `typehints`), which meets file and identifier names written as one word.
    pub join_weight: f64,
    /// Query terms found in more than this fraction of files (and in at least 20 files) are
    /// dropped from BM25 (the project's own name, `self`, `def`): their small idf still adds
    /// up over a long issue.
    pub max_df: f64,
    /// Weight of the file's best definition score (max-normalized): BM25 over each
    /// definition's own span (name, signature, docstring, body outside nested definitions),
    /// so a file with one strongly matching function is not diluted by the rest of it.
    pub def_lexical: f64,
    /// BM25 length normalization for definition spans.
    pub def_b: f64,
    /// Blank environment and package-version dumps (`show_versions()`, `pip freeze`) out of
    /// the query before reading it.
    pub strip_env_dumps: bool,
    /// Cut the query string and fragment of URLs in the query.
    pub strip_url_params: bool,
    /// Blank `<!-- -->` comments (template instructions GitHub does not render).
    pub strip_html_comments: bool,
    /// Multiplier for code in a language with under a quarter as many files as the project's
    /// main language (a Python project's bundled JavaScript), unless the query names that
    /// language.
    pub minority_lang_factor: f64,
    /// Boost from the best other file of the same directory: a file gains this times the
    /// geometric mean of its own score and its best sibling's, so relevant files next to a
    /// strong match (the rest of a change that spans a package) move up.
    pub sibling: f64,
}

impl Default for RankOptions {
    /// Tuned with `bench-locate --sweep` on the tune half of its data only (see that bench).
    fn default() -> Self {
        Self {
            k1: 2.0,
            b: 0.75,
            path_term_weight: 4.0,
            def_term_weight: 2.0,
            lexical: 1.5,
            path_mention: 1.0,
            module_mention: 0.3,
            ident_mention: 0.3,
            centrality: 0.3,
            damping: 0.5,
            test_factor: 0.3,
            non_code_factor: 0.1,
            doc_factor: 0.5,
            title_weight: 3.0,
            code_block_weight: 0.5,
            stem_mention: 0.3,
            join_weight: 0.5,
            max_df: 0.2,
            def_lexical: 2.0,
            def_b: 0.3,
            strip_env_dumps: true,
            strip_url_params: true,
            strip_html_comments: true,
            minority_lang_factor: 0.3,
            sibling: 0.3,
        }
    }
}

/// A ranked file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankedFile {
    /// Repository-relative path.
    pub path: String,
    /// Score (higher is more relevant; only comparable within one query).
    pub score: f64,
}

/// Whether a path is a test file or lives in a test directory.
pub fn is_test_path(path: &str) -> bool {
    let mut segs = path.split('/').peekable();
    while let Some(seg) = segs.next() {
        let lower = seg.to_ascii_lowercase();
        if segs.peek().is_none() {
            let stem = lower.split('.').next().unwrap_or("");
            return stem.starts_with("test_")
                || stem.ends_with("_test")
                || stem.ends_with("_tests")
                || stem == "conftest"
                || stem == "tests"
                || lower.contains(".test.")
                || lower.contains(".spec.")
                || (stem.ends_with("test") && seg.ends_with(".java"));
        }
        if matches!(
            lower.as_str(),
            "test" | "tests" | "testing" | "__tests__" | "spec" | "specs" | "testdata"
        ) {
            return true;
        }
    }
    false
}

/// Whether a path lives under a documentation or examples directory.
pub fn is_doc_path(path: &str) -> bool {
    let mut segs: Vec<&str> = path.split('/').collect();
    segs.pop();
    segs.iter().any(|s| {
        matches!(
            s.to_ascii_lowercase().as_str(),
            "doc" | "docs" | "documentation" | "example" | "examples" | "samples"
        )
    })
}

/// Module keys of a path: `src/flask/app.py` → `src/flask/app`; a package's `__init__.py`,
/// `index.js`, `mod.rs` also stand for their directory.
fn module_keys(path: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let (dir, file) = path.rsplit_once('/').unwrap_or(("", path));
    let stem = file.split('.').next().unwrap_or(file);
    keys.push(if dir.is_empty() {
        stem.to_string()
    } else {
        format!("{dir}/{stem}")
    });
    if matches!(stem, "__init__" | "index" | "mod" | "lib") && !dir.is_empty() {
        keys.push(dir.to_string());
    }
    if file.ends_with(".go") && !dir.is_empty() {
        keys.push(dir.to_string());
    }
    keys
}

fn suffixes(key: &str) -> impl Iterator<Item = &str> {
    std::iter::once(key).chain(key.match_indices('/').map(move |(i, _)| &key[i + 1..]))
}

/// The index terms of a file's name without extension: `lint/expand_modules.py` gives
/// `expand`, `modul`, and last the whole name `expandmodules`; a one-part name gives itself.
fn stem_terms(path: &str) -> Vec<String> {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split('.').next().unwrap_or(file);
    let mut v = Vec::new();
    text::terms(stem, |t| v.push(t.to_string()));
    v
}

/// Per file, its language if that language has under a quarter as many files as the
/// project's main language.
fn minority_langs(files: &[IndexedFile]) -> Vec<Option<super::summary::Lang>> {
    let mut counts: HashMap<super::summary::Lang, usize> = HashMap::new();
    for f in files {
        if let Some(l) = f.summary.lang {
            *counts.entry(l).or_default() += 1;
        }
    }
    let top = counts.values().copied().max().unwrap_or(0);
    files
        .iter()
        .map(|f| {
            f.summary
                .lang
                .filter(|l| counts.get(l).is_some_and(|&c| c * 4 < top))
        })
        .collect()
}

/// Derived structures for ranking one index.
pub struct Ranker {
    paths: Vec<String>,
    is_test: Vec<bool>,
    is_code: Vec<bool>,
    is_doc: Vec<bool>,
    /// The language of each file when it is a minority language of the project.
    minority: Vec<Option<super::summary::Lang>>,
    term_ids: HashMap<String, u32>,
    postings: Vec<Vec<(u32, f32)>>,
    doc_len: Vec<f32>,
    avg_len: f64,
    definers: HashMap<String, Vec<u32>>,
    path_suffix: HashMap<String, Vec<u32>>,
    module_suffix: HashMap<String, Vec<u32>>,
    graph: Vec<Vec<(u32, f32)>>,
    /// Terms of each file's name (stem), and how many files share that name.
    stems: Vec<(Vec<String>, u32)>,
    /// The file of each definition (definitions of all files, numbered in file order).
    def_file: Vec<u32>,
    /// Per term id: the definitions whose own span holds it, with term frequency.
    def_postings: Vec<Vec<(u32, f32)>>,
    def_len: Vec<f32>,
    def_avg_len: f64,
}

impl std::fmt::Debug for Ranker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ranker")
            .field("files", &self.paths.len())
            .field("terms", &self.term_ids.len())
            .finish()
    }
}

fn push_unique(map: &mut HashMap<String, Vec<u32>>, key: &str, i: u32) {
    let v = map.entry(key.to_string()).or_default();
    if v.last() != Some(&i) {
        v.push(i);
    }
}

impl Ranker {
    /// Derive the ranking structures with the default term weights.
    pub fn new(files: &[IndexedFile]) -> Ranker {
        Self::with_options(files, &RankOptions::default())
    }

    /// Derive the ranking structures.
    pub fn with_options(files: &[IndexedFile], opts: &RankOptions) -> Ranker {
        let n = files.len();
        let mut r = Ranker {
            paths: files.iter().map(|f| f.path.clone()).collect(),
            is_test: files.iter().map(|f| is_test_path(&f.path)).collect(),
            is_code: files.iter().map(|f| f.summary.lang.is_some()).collect(),
            is_doc: files.iter().map(|f| is_doc_path(&f.path)).collect(),
            minority: minority_langs(files),
            term_ids: HashMap::new(),
            postings: Vec::new(),
            doc_len: vec![0.0; n],
            avg_len: 1.0,
            definers: HashMap::new(),
            path_suffix: HashMap::new(),
            module_suffix: HashMap::new(),
            graph: vec![Vec::new(); n],
            stems: Vec::with_capacity(n),
            def_file: Vec::new(),
            def_postings: Vec::new(),
            def_len: Vec::new(),
            def_avg_len: 1.0,
        };
        let mut stem_count: HashMap<String, u32> = HashMap::new();
        for f in files {
            let key = stem_terms(&f.path);
            *stem_count.entry(key.join(" ")).or_default() += 1;
            r.stems.push((key, 0));
        }
        for (terms, count) in &mut r.stems {
            *count = stem_count.get(&terms.join(" ")).copied().unwrap_or(1);
        }
        for (i, f) in files.iter().enumerate() {
            let i32_ = i as u32;
            let mut extra: HashMap<&str, f32> = HashMap::new();
            let mut extra_terms: Vec<String> = Vec::new();
            text::terms(&f.path, |t| extra_terms.push(t.to_string()));
            let path_terms = extra_terms.len();
            for d in &f.summary.defs {
                text::terms(&d.name, |t| extra_terms.push(t.to_string()));
            }
            let mut len = 0.0f32;
            let add = |r: &mut Ranker, term: &str, tf: f32| -> u32 {
                let id = match r.term_ids.get(term) {
                    Some(&id) => id,
                    None => {
                        let id = r.postings.len() as u32;
                        r.term_ids.insert(term.to_string(), id);
                        r.postings.push(Vec::new());
                        id
                    }
                };
                let p = &mut r.postings[id as usize];
                match p.last_mut() {
                    Some((doc, w)) if *doc == i32_ => *w += tf,
                    _ => p.push((i32_, tf)),
                }
                id
            };
            for (k, t) in extra_terms.iter().enumerate() {
                let w = if k < path_terms {
                    opts.path_term_weight
                } else {
                    opts.def_term_weight
                } as f32;
                *extra.entry(t.as_str()).or_default() += w;
            }
            let mut local_ids = Vec::with_capacity(f.summary.terms.len());
            for (t, c) in &f.summary.terms {
                let tf = *c as f32 + extra.remove(t.as_str()).unwrap_or(0.0);
                len += tf;
                local_ids.push(add(&mut r, t, tf));
            }
            let mut rest: Vec<(&str, f32)> = extra.drain().collect();
            rest.sort_unstable_by(|a, b| a.0.cmp(b.0));
            for (t, w) in rest {
                len += w;
                add(&mut r, t, w);
            }
            r.doc_len[i] = len;
            r.add_defs(i32_, &f.summary.defs, &local_ids, opts);
            for d in &f.summary.defs {
                push_unique(&mut r.definers, &d.name, i32_);
            }
            for s in suffixes(&f.path) {
                push_unique(&mut r.path_suffix, s, i32_);
            }
            for key in module_keys(&f.path) {
                for s in suffixes(&key) {
                    push_unique(&mut r.module_suffix, s, i32_);
                }
            }
        }
        r.avg_len =
            (r.doc_len.iter().map(|&l| f64::from(l)).sum::<f64>() / n.max(1) as f64).max(1.0);
        r.def_avg_len = (r.def_len.iter().map(|&l| f64::from(l)).sum::<f64>()
            / r.def_len.len().max(1) as f64)
            .max(1.0);
        r.build_graph(files);
        r
    }

    /// Index the definitions of file `file`: each one's own terms (`local_ids` maps the
    /// file's term positions to term ids), its name's terms weighted up and its enclosing
    /// definition's name (a method's class).
    fn add_defs(
        &mut self,
        file: u32,
        defs: &[super::summary::Def],
        local_ids: &[u32],
        opts: &RankOptions,
    ) {
        let mut bag: Vec<(u32, f32)> = Vec::new();
        for d in defs {
            bag.clear();
            for &(t, c) in &d.terms {
                if let Some(&id) = local_ids.get(t as usize) {
                    bag.push((id, c as f32));
                }
            }
            let mut names: Vec<(String, f32)> = Vec::new();
            text::terms(&d.name, |t| {
                names.push((t.to_string(), opts.def_term_weight as f32))
            });
            if let Some(p) = d.parent.and_then(|p| defs.get(p as usize)) {
                text::terms(&p.name, |t| names.push((t.to_string(), 1.0)));
            }
            for (t, w) in names {
                if let Some(&id) = self.term_ids.get(&t) {
                    bag.push((id, w));
                }
            }
            if bag.is_empty() {
                continue;
            }
            bag.sort_unstable_by_key(|(id, _)| *id);
            let def_id = self.def_file.len() as u32;
            self.def_file.push(file);
            if self.def_postings.len() < self.postings.len() {
                self.def_postings.resize(self.postings.len(), Vec::new());
            }
            let mut len = 0.0;
            let mut k = 0;
            while k < bag.len() {
                let id = bag[k].0;
                let mut tf = 0.0;
                while k < bag.len() && bag[k].0 == id {
                    tf += bag[k].1;
                    k += 1;
                }
                len += tf;
                self.def_postings[id as usize].push((def_id, tf));
            }
            self.def_len.push(len);
        }
    }

    fn build_graph(&mut self, files: &[IndexedFile]) {
        let mut edges: Vec<HashMap<u32, f32>> = vec![HashMap::new(); files.len()];
        for (i, f) in files.iter().enumerate() {
            for imp in &f.summary.imports {
                for j in self.resolve_import(&f.path, imp) {
                    if j as usize != i {
                        *edges[i].entry(j).or_default() += 1.0;
                    }
                }
            }
            for r in &f.summary.refs {
                if let Some(d) = self.definers.get(r)
                    && d.len() <= 5
                {
                    let w = 0.5 / d.len() as f32;
                    for &j in d {
                        if j as usize != i {
                            *edges[i].entry(j).or_default() += w;
                        }
                    }
                }
            }
        }
        // Undirected: relevance flows both to what a file uses and to what uses it.
        for (i, out) in edges.iter().enumerate() {
            for (&j, &w) in out {
                self.graph[i].push((j, w));
                self.graph[j as usize].push((i as u32, w));
            }
        }
    }

    fn resolve_import(&self, from: &str, imp: &str) -> Vec<u32> {
        let dir = from.rsplit_once('/').map_or("", |(d, _)| d);
        let mut key = String::new();
        if let Some(rest) = imp
            .strip_prefix("./")
            .or_else(|| imp.strip_prefix("../").map(|_| imp))
        {
            // JS-style relative path.
            let mut parts: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
            let rel = if imp.starts_with("./") { rest } else { imp };
            for seg in rel.split('/') {
                match seg {
                    "." | "" => {}
                    ".." => {
                        parts.pop();
                    }
                    s => parts.push(s),
                }
            }
            key = parts.join("/");
        } else if imp.starts_with('.') && !imp.contains('/') {
            // Python relative import.
            let dots = imp.len() - imp.trim_start_matches('.').len();
            let mut parts: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
            for _ in 1..dots {
                parts.pop();
            }
            let rest = imp.trim_start_matches('.');
            if !rest.is_empty() {
                parts.extend(rest.split('.'));
            }
            key = parts.join("/");
        } else {
            let cleaned = imp
                .trim_start_matches("crate::")
                .trim_start_matches("self::")
                .trim_start_matches("super::");
            let cleaned = cleaned.split(['{', ' ']).next().unwrap_or(cleaned);
            if imp.contains('/') {
                key.push_str(cleaned);
            } else {
                key = cleaned.replace("::", "/").replace('.', "/");
            }
        }
        let key = key.trim_end_matches('/');
        // Strip an extension if one was written.
        let key = match key.rsplit_once('.') {
            Some((k, ext)) if !ext.contains('/') && ext.len() <= 4 => k,
            _ => key,
        };
        let mut k = key;
        loop {
            if let Some(hits) = self.module_suffix.get(k)
                && hits.len() <= 3
            {
                return hits.clone();
            }
            match k.rsplit_once('/') {
                Some((head, _)) if k.contains('/') => k = head,
                _ => return Vec::new(),
            }
        }
    }

    /// Rank every file for `query`; the best first, zero scores left out.
    pub fn rank(&self, query: &str, opts: &RankOptions) -> Vec<RankedFile> {
        let n = self.paths.len();
        if n == 0 {
            return Vec::new();
        }
        let q = Query::parse_weighted(query, opts);
        let lexical = self.bm25(&q.terms, opts);
        let def_norm = if opts.def_lexical > 0.0 {
            let best = self.def_bm25(&q.terms, opts);
            let max = best.iter().copied().fold(0.0, f64::max);
            best.into_iter()
                .map(|v| if max > 0.0 { v / max } else { 0.0 })
                .collect()
        } else {
            vec![0.0; n]
        };
        let mut mention = vec![0.0f64; n];
        let mut named = vec![false; n];
        let mut test_mentioned = false;
        for (p, w) in &q.paths {
            if let Some((key, hits)) = self.match_path(p) {
                let share = opts.path_mention * w / hits.len() as f64;
                for &i in hits {
                    mention[i as usize] += share;
                    // Named outright: its whole path, directories included. A bare
                    // `index.html`, `tox.ini` or `test_foo.py` in an issue is usually the
                    // reporter's own file, so it neither lifts damping nor makes the query
                    // about tests.
                    let whole = key.contains('/') && key == self.paths[i as usize];
                    named[i as usize] |= whole;
                    test_mentioned |= whole && self.is_test[i as usize];
                }
            }
        }
        for (d, w) in &q.dotted {
            self.match_dotted(d, *w, opts, &mut mention);
        }
        let ln_n = (n as f64 + 1.0).ln();
        for (ident, w) in &q.idents {
            let Some(defs) = self.definers.get(ident.as_str()) else {
                continue;
            };
            if defs.len() > 20 {
                continue;
            }
            let rarity = ((n as f64 + 1.0) / defs.len() as f64).ln() / ln_n;
            let share = opts.ident_mention * w * rarity / (defs.len() as f64).sqrt();
            for &i in defs {
                mention[i as usize] += share;
            }
        }
        if opts.stem_mention > 0.0 {
            self.match_stems(&q.terms, opts, &mut mention);
        }
        let max_lex = lexical.iter().copied().fold(0.0, f64::max);
        let lex_norm: Vec<f64> = lexical
            .iter()
            .map(|&s| if max_lex > 0.0 { s / max_lex } else { 0.0 })
            .collect();
        // Seeds for the walk: mentions plus the strongest lexical matches.
        let mut seed: Vec<f64> = (0..n)
            .map(|i| {
                mention[i]
                    + if lex_norm[i] > 0.5 {
                        lex_norm[i] - 0.5
                    } else {
                        0.0
                    }
            })
            .collect();
        let total: f64 = seed.iter().sum();
        let centrality = if total > 0.0 && opts.centrality > 0.0 {
            seed.iter_mut().for_each(|s| *s /= total);
            let pr = self.personalized_pagerank(&seed, opts.damping);
            let max = pr.iter().copied().fold(0.0, f64::max);
            pr.into_iter()
                .map(|v| if max > 0.0 { v / max } else { 0.0 })
                .collect()
        } else {
            vec![0.0; n]
        };
        let about_tests = q.about_tests || test_mentioned;
        let lang_named = |l: super::summary::Lang| q.words.contains(l.name());
        let mut out: Vec<RankedFile> = (0..n)
            .filter_map(|i| {
                let mut s = opts.lexical * lex_norm[i]
                    + opts.def_lexical * def_norm[i]
                    + mention[i]
                    + opts.centrality * centrality[i];
                if s <= 0.0 {
                    return None;
                }
                if self.is_test[i] && !about_tests {
                    s *= opts.test_factor;
                }
                // A file the query names by path is not damped for being docs or data.
                if !self.is_code[i] && !named[i] {
                    s *= opts.non_code_factor;
                }
                if self.is_doc[i] && !named[i] {
                    s *= opts.doc_factor;
                }
                if let Some(l) = self.minority[i]
                    && !named[i]
                    && !lang_named(l)
                {
                    s *= opts.minority_lang_factor;
                }
                Some(RankedFile {
                    path: self.paths[i].clone(),
                    score: s,
                })
            })
            .collect();
        if opts.sibling > 0.0 {
            self.add_sibling_boost(&mut out, opts.sibling);
        }
        out.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.path.cmp(&b.path))
        });
        out
    }

    /// Add `weight` × √(own score × best other score in the same directory) to each file.
    fn add_sibling_boost(&self, out: &mut [RankedFile], weight: f64) {
        let dir = |p: &str| p.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        // The two best scores per directory, so a file's best sibling is never itself.
        let mut best: HashMap<String, (f64, f64)> = HashMap::new();
        for f in out.iter() {
            let e = best.entry(dir(&f.path)).or_insert((0.0, 0.0));
            if f.score > e.0 {
                *e = (f.score, e.0);
            } else if f.score > e.1 {
                e.1 = f.score;
            }
        }
        for f in out.iter_mut() {
            let (first, second) = best[&dir(&f.path)];
            let other = if f.score >= first { second } else { first };
            f.score += weight * (f.score * other).sqrt();
        }
    }

    /// Rank every file with no query: PageRank over the file graph, tests and non-code damped.
    pub fn rank_global(&self, opts: &RankOptions) -> Vec<RankedFile> {
        let n = self.paths.len();
        if n == 0 {
            return Vec::new();
        }
        let seed = vec![1.0 / n as f64; n];
        let pr = self.personalized_pagerank(&seed, 0.85);
        let mut out: Vec<RankedFile> = (0..n)
            .map(|i| {
                let mut s = pr[i];
                if self.is_test[i] {
                    s *= opts.test_factor;
                }
                if !self.is_code[i] {
                    s *= opts.non_code_factor;
                }
                if self.is_doc[i] {
                    s *= opts.doc_factor;
                }
                RankedFile {
                    path: self.paths[i].clone(),
                    score: s,
                }
            })
            .collect();
        out.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.path.cmp(&b.path))
        });
        out
    }

    /// Per file, the BM25 score of its best-matching definition span.
    fn def_bm25(&self, terms: &HashMap<String, f64>, opts: &RankOptions) -> Vec<f64> {
        let n_files = self.paths.len() as f64;
        let n = self.def_file.len() as f64;
        let mut scores = vec![0.0f64; self.def_file.len()];
        for (t, qw) in terms {
            let Some(&id) = self.term_ids.get(t) else {
                continue;
            };
            let file_df = self.postings[id as usize].len() as f64;
            if file_df >= MIN_COMMON_DF && file_df > opts.max_df * n_files {
                continue;
            }
            let Some(post) = self.def_postings.get(id as usize) else {
                continue;
            };
            let df = post.len() as f64;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(d, tf) in post {
                let tf = f64::from(tf);
                let norm = opts.k1
                    * (1.0 - opts.def_b
                        + opts.def_b * f64::from(self.def_len[d as usize]) / self.def_avg_len);
                scores[d as usize] += qw * idf * tf * (opts.k1 + 1.0) / (tf + norm);
            }
        }
        let mut best = vec![0.0f64; self.paths.len()];
        for (d, s) in scores.into_iter().enumerate() {
            let f = self.def_file[d] as usize;
            best[f] = best[f].max(s);
        }
        best
    }

    fn bm25(&self, terms: &HashMap<String, f64>, opts: &RankOptions) -> Vec<f64> {
        let n = self.paths.len() as f64;
        let mut scores = vec![0.0f64; self.paths.len()];
        for (t, qw) in terms {
            let Some(&id) = self.term_ids.get(t) else {
                continue;
            };
            let post = &self.postings[id as usize];
            let df = post.len() as f64;
            if df >= MIN_COMMON_DF && df > opts.max_df * n {
                continue;
            }
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(doc, tf) in post {
                let tf = f64::from(tf);
                let norm = opts.k1
                    * (1.0 - opts.b
                        + opts.b * f64::from(self.doc_len[doc as usize]) / self.avg_len);
                scores[doc as usize] += qw * idf * tf * (opts.k1 + 1.0) / (tf + norm);
            }
        }
        scores
    }

    /// Files whose name is a query term: `linkcheck` → `builders/linkcheck.py`. Every part of
    /// a compound name must be in the query; rare names count more than `utils` or `__init__`.
    fn match_stems(&self, terms: &HashMap<String, f64>, opts: &RankOptions, mention: &mut [f64]) {
        let ln_n = (self.paths.len() as f64 + 1.0).ln();
        for (i, (parts, count)) in self.stems.iter().enumerate() {
            let Some(last) = parts.last() else { continue };
            // The whole name (`expandmodules`) or every part of it.
            let w = terms.get(last).copied().or_else(|| {
                parts[..parts.len() - 1]
                    .iter()
                    .map(|p| terms.get(p).copied())
                    .try_fold(f64::INFINITY, |m, w| w.map(|w| m.min(w)))
                    .filter(|m| m.is_finite())
            });
            let Some(w) = w else { continue };
            let rarity = ((self.paths.len() as f64 + 1.0) / f64::from(*count)).ln() / ln_n;
            mention[i] += opts.stem_mention * w.min(3.0) * rarity * rarity;
        }
    }

    fn match_path<'m>(&self, mention: &'m str) -> Option<(&'m str, &Vec<u32>)> {
        // Longest suffix of the mention (on `/` boundaries) naming indexed files.
        for s in suffixes(mention) {
            if let Some(hits) = self.path_suffix.get(s) {
                return (hits.len() <= 5).then_some((s, hits));
            }
        }
        None
    }

    fn match_dotted(&self, dotted: &str, w: f64, opts: &RankOptions, mention: &mut [f64]) {
        let parts: Vec<&str> = dotted.split('.').collect();
        for k in (1..=parts.len()).rev() {
            let key = parts[..k].join("/");
            let Some(hits) = self.module_suffix.get(&key) else {
                continue;
            };
            if hits.len() > 3 || (k == 1 && parts.len() == 1) {
                return;
            }
            let share = opts.module_mention * w * (k as f64 / parts.len() as f64).sqrt()
                / hits.len() as f64;
            // A bare package name (`requests.get`, `xr.Dataset`) says nothing about where the
            // problem is unless the package's own module defines the next segment.
            if k > 1 {
                for &i in hits {
                    mention[i as usize] += share;
                }
            }
            // The next segment names something inside that module.
            if let Some(next) = parts.get(k)
                && let Some(defs) = self.definers.get(*next)
            {
                for &i in defs {
                    if hits.contains(&i) {
                        mention[i as usize] += share;
                    }
                }
            }
            return;
        }
    }

    fn personalized_pagerank(&self, seed: &[f64], damping: f64) -> Vec<f64> {
        let n = seed.len();
        let out_w: Vec<f64> = self
            .graph
            .iter()
            .map(|e| e.iter().map(|(_, w)| f64::from(*w)).sum())
            .collect();
        let mut r = seed.to_vec();
        let mut next = vec![0.0; n];
        for _ in 0..20 {
            next.iter_mut()
                .zip(seed)
                .for_each(|(x, s)| *x = (1.0 - damping) * s);
            for (i, edges) in self.graph.iter().enumerate() {
                if r[i] == 0.0 || out_w[i] == 0.0 {
                    continue;
                }
                let share = damping * r[i] / out_w[i];
                for &(j, w) in edges {
                    next[j as usize] += share * f64::from(w);
                }
            }
            std::mem::swap(&mut r, &mut next);
        }
        r
    }
}

/// What a query says, beyond its words.
#[derive(Debug, Default)]
pub(crate) struct Query {
    /// Index terms with their (saturated) weights.
    pub terms: HashMap<String, f64>,
    /// File path mentions (stack frames, `file:line`, plain paths) with weights.
    pub paths: Vec<(String, f64)>,
    /// Dotted names that may be module paths (`sphinx.ext.autodoc`, `a::b::c`).
    pub dotted: Vec<(String, f64)>,
    /// Identifiers that look like code, with weights.
    pub idents: HashMap<String, f64>,
    /// Whether the query asks about tests themselves.
    pub about_tests: bool,
    /// Lowercase words of the query (language names are looked up here).
    pub words: std::collections::HashSet<String>,
}

const SOURCE_EXTS: &[&str] = &[
    "py", "pyi", "rs", "js", "jsx", "mjs", "cjs", "ts", "tsx", "go", "java", "c", "h", "cc", "cpp",
    "cxx", "hpp", "hh", "rb", "md", "rst", "txt", "toml", "yaml", "yml", "json", "cfg", "ini",
    "sh", "kt", "swift", "php", "cs", "scala", "css", "html", "xml",
];

impl Query {
    #[cfg(test)]
    pub(crate) fn parse(query: &str) -> Query {
        Self::parse_weighted(query, &RankOptions::default())
    }

    /// Parse `query`, weighting its terms by where they occur: the title line, prose, or a
    /// fenced block / indented output.
    pub(crate) fn parse_weighted(query: &str, opts: &RankOptions) -> Query {
        let cleaned = super::issue::strip_noise(
            query,
            opts.strip_env_dumps,
            opts.strip_url_params,
            opts.strip_html_comments,
        );
        let query = cleaned.as_str();
        let mut q = Query::default();
        let mut counts: HashMap<String, f64> = HashMap::new();
        let mut in_fence = false;
        let mut in_details = false;
        let mut title_seen = false;
        for line in query.lines() {
            let t = line.trim_start();
            if t.starts_with("```") {
                in_fence = !in_fence;
                continue;
            }
            // Issue templates fold logs and `show_versions()` dumps into <details>.
            if t.starts_with("<details") {
                in_details = true;
            } else if t.starts_with("</details") {
                in_details = false;
            }
            let w = if !title_seen && !t.is_empty() {
                title_seen = true;
                opts.title_weight
            } else if in_fence || in_details || line.starts_with("    ") || line.starts_with('\t') {
                opts.code_block_weight
            } else {
                1.0
            };
            text::terms(line, |t| *counts.entry(t.to_string()).or_default() += w);
            if opts.join_weight > 0.0 {
                let mut prev: Option<String> = None;
                for word in line.split(|c: char| !c.is_ascii_alphanumeric()) {
                    let lower = word.to_ascii_lowercase();
                    let alpha = lower.len() >= 2 && lower.bytes().all(|b| b.is_ascii_lowercase());
                    if let (Some(p), true) = (&prev, alpha) {
                        // Single-word identifiers are indexed stemmed, compound ones whole.
                        let joined = format!("{p}{lower}");
                        let stemmed = text::stem(&joined);
                        if stemmed != joined {
                            *counts.entry(stemmed.to_string()).or_default() += w * opts.join_weight;
                        }
                        *counts.entry(joined).or_default() += w * opts.join_weight;
                    }
                    prev = alpha.then_some(lower);
                }
            }
        }
        q.terms = counts
            .into_iter()
            .filter(|(_, c)| *c > 0.0)
            .map(|(t, c)| (t, if c >= 1.0 { 1.0 + c.ln() } else { c }))
            .collect();

        // Regexes are compiled per query: cheap next to ranking, and no global state.
        let (Ok(path_re), Ok(frame_re), Ok(dotted_re), Ok(ident_re), Ok(tests_re)) = (
            Regex::new(r"[A-Za-z0-9_\-./\\]*[A-Za-z0-9_\-]\.([A-Za-z0-9]{1,5})\b"),
            // Python (`File "x.py", line 3, in f`), IPython (`File ~/x.py:3, in C.f(self)`) and
            // pytest (`x.py:3: in f`) frames.
            Regex::new(
                r#"(?m)(?:File "([^"]+)", line \d+, in |File (\S+):\d+, in |^(\S+\.py):\d+: in )(?:[A-Za-z_][A-Za-z0-9_]*\.)*([A-Za-z_][A-Za-z0-9_]*)"#,
            ),
            Regex::new(r"[A-Za-z_][A-Za-z0-9_]*(?:(?:\.|::)[A-Za-z_][A-Za-z0-9_]*)+"),
            Regex::new(r"[A-Za-z_][A-Za-z0-9_]*"),
            Regex::new(
                r"(?i)\b(add|write|fix|update|improve|missing|flaky|broken|failing)\s+(a\s+|the\s+|more\s+|some\s+|new\s+)?(unit\s+|regression\s+)?tests?\b|\btest (suite|coverage)\b",
            ),
        ) else {
            return q;
        };
        q.about_tests = tests_re.is_match(query);
        q.words = query
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| w.to_ascii_lowercase())
            .collect();

        let mut seen_paths: HashMap<String, f64> = HashMap::new();
        for m in path_re.captures_iter(query) {
            let (Some(whole), Some(ext)) = (m.get(0), m.get(1)) else {
                continue;
            };
            let p = whole.as_str().replace('\\', "/");
            let has_dir = p.contains('/');
            if !SOURCE_EXTS.contains(&ext.as_str()) && !has_dir {
                continue;
            }
            let p = p
                .trim_start_matches("./")
                .trim_start_matches('/')
                .to_string();
            let e = seen_paths.entry(p).or_insert(0.0);
            *e = (*e + 1.0).min(3.0);
        }
        for m in frame_re.captures_iter(query) {
            if let Some(func) = m.get(4) {
                *q.idents.entry(func.as_str().to_string()).or_default() += 1.0;
            }
        }
        q.paths = seen_paths
            .into_iter()
            .map(|(p, c)| (p, 1.0 + c.ln()))
            .collect();

        // Code regions: fenced blocks, inline code and traceback-ish lines.
        let mut code = String::new();
        let mut in_fence = false;
        for line in query.lines() {
            let t = line.trim_start();
            if t.starts_with("```") {
                in_fence = !in_fence;
                continue;
            }
            if in_fence
                || t.starts_with(">>>")
                || t.starts_with("File \"")
                || line.starts_with("    ")
            {
                code.push_str(line);
                code.push('\n');
            } else {
                for (k, part) in line.split('`').enumerate() {
                    if k % 2 == 1 {
                        code.push_str(part);
                        code.push('\n');
                    }
                }
            }
        }
        let mut dotted: HashMap<String, f64> = HashMap::new();
        for m in dotted_re.find_iter(query) {
            let s = m.as_str().replace("::", ".");
            let last = s.rsplit('.').next().unwrap_or("");
            if SOURCE_EXTS.contains(&last) {
                continue;
            }
            *dotted.entry(s).or_default() += 1.0;
        }
        q.dotted = dotted.into_iter().map(|(d, c)| (d, 1.0 + c.ln())).collect();

        let mut idents: HashMap<String, f64> = HashMap::new();
        let code_like = |s: &str| {
            s.len() >= 3
                && (s.contains('_') && s.trim_matches('_').len() > 1
                    || s.chars().skip(1).any(|c| c.is_ascii_uppercase())
                        && s.chars().any(|c| c.is_ascii_lowercase()))
        };
        for m in ident_re.find_iter(query) {
            let s = m.as_str();
            let called = query[m.end()..].starts_with('(');
            if code_like(s) || called && s.len() >= 3 {
                *idents.entry(s.to_string()).or_default() += 1.0;
            }
        }
        for m in ident_re.find_iter(&code) {
            let s = m.as_str();
            if s.len() >= 3 {
                *idents.entry(s.to_string()).or_default() += 0.5;
            }
        }
        for (k, v) in idents {
            *q.idents.entry(k).or_default() += v;
        }
        for v in q.idents.values_mut() {
            *v = 1.0 + v.ln().max(0.0);
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_paths_are_recognized() {
        for p in [
            "tests/test_x.py",
            "testing/python/approx.py",
            "src/foo_test.go",
            "web/app.spec.ts",
            "conftest.py",
            "src/test/java/FooTest.java",
        ] {
            assert!(is_test_path(p), "{p}");
        }
        for p in [
            "src/_pytest/python.py",
            "src/contest.rs",
            "attestation/mod.rs",
        ] {
            assert!(!is_test_path(p), "{p}");
        }
    }

    #[test]
    fn query_finds_paths_frames_dotted_and_identifiers() {
        let q = Query::parse(
            "Crash in `PairGrid.map`\n```\nTraceback (most recent call last):\n  File \"/usr/lib/site-packages/seaborn/_core.py\", line 144, in _lookup_single\n```\nSee sphinx.ext.autodoc and src/lib.rs:10. Calling make_thing() fails.",
        );
        let paths: Vec<&str> = q.paths.iter().map(|(p, _)| p.as_str()).collect();
        assert!(
            paths.contains(&"usr/lib/site-packages/seaborn/_core.py"),
            "{paths:?}"
        );
        assert!(paths.contains(&"src/lib.rs"), "{paths:?}");
        assert!(q.idents.contains_key("_lookup_single"));
        assert!(q.idents.contains_key("PairGrid"));
        assert!(q.idents.contains_key("make_thing"));
        assert!(q.dotted.iter().any(|(d, _)| d == "sphinx.ext.autodoc"));
        assert!(!q.about_tests);
        assert!(Query::parse("Please add a regression test for this").about_tests);
    }

    #[test]
    fn ipython_and_pytest_frames_name_their_functions() {
        let q = Query::parse(
            "Slow\n```\nFile ~/env/site-packages/xarray/core/common.py:1815, in get_chunksizes(variables)\nFile ~/env/xarray/core/dataset.py:2110, in Dataset.chunks(self)\nsrc/_pytest/python.py:522: in collect_module\n```\n",
        );
        for f in ["get_chunksizes", "chunks", "collect_module"] {
            assert!(q.idents.contains_key(f), "{f} missing from {:?}", q.idents);
        }
    }

    #[test]
    fn module_keys_cover_packages() {
        assert_eq!(module_keys("src/flask/app.py"), ["src/flask/app"]);
        assert_eq!(module_keys("a/b/__init__.py"), ["a/b/__init__", "a/b"]);
    }
}
