//! What the index keeps about one file, and its compact binary encoding for the cache.

use std::sync::Arc;

use gix::ObjectId;
use serde::Serialize;

/// A language the index parses with tree-sitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lang {
    /// Rust.
    Rust,
    /// Python.
    Python,
    /// JavaScript (and JSX).
    JavaScript,
    /// TypeScript.
    TypeScript,
    /// TSX.
    Tsx,
    /// Go.
    Go,
    /// Java.
    Java,
    /// C.
    C,
    /// C++.
    Cpp,
    /// Ruby.
    Ruby,
}

impl Lang {
    /// All parsed languages.
    pub const ALL: [Lang; 10] = [
        Lang::Rust,
        Lang::Python,
        Lang::JavaScript,
        Lang::TypeScript,
        Lang::Tsx,
        Lang::Go,
        Lang::Java,
        Lang::C,
        Lang::Cpp,
        Lang::Ruby,
    ];

    /// The language of a path, from its extension.
    pub fn from_path(path: &str) -> Option<Lang> {
        let ext = path.rsplit_once('.').map(|(_, e)| e)?;
        Some(match ext {
            "rs" => Lang::Rust,
            "py" | "pyi" => Lang::Python,
            "js" | "jsx" | "mjs" | "cjs" => Lang::JavaScript,
            "ts" | "mts" | "cts" => Lang::TypeScript,
            "tsx" => Lang::Tsx,
            "go" => Lang::Go,
            "java" => Lang::Java,
            "c" | "h" => Lang::C,
            "cc" | "cpp" | "cxx" | "c++" | "hpp" | "hh" | "hxx" | "h++" | "ipp" => Lang::Cpp,
            "rb" | "rake" => Lang::Ruby,
            _ => return None,
        })
    }

    /// Stable one-byte tag (part of the cache key).
    pub fn tag(self) -> u8 {
        self as u8 + 1
    }

    fn from_tag(tag: u8) -> Option<Lang> {
        Lang::ALL.get(usize::from(tag).checked_sub(1)?).copied()
    }

    /// Lowercase name.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::JavaScript => "javascript",
            Lang::TypeScript => "typescript",
            Lang::Tsx => "tsx",
            Lang::Go => "go",
            Lang::Java => "java",
            Lang::C => "c",
            Lang::Cpp => "cpp",
            Lang::Ruby => "ruby",
        }
    }
}

/// Why a file's content is left out of the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Skip {
    /// Contains NUL bytes or is not UTF-8.
    Binary,
    /// Declares itself generated (`@generated`, `DO NOT EDIT`, …).
    Generated,
    /// Minified: very long lines.
    Minified,
    /// Larger than the size limit.
    TooLarge,
}

/// A definition found in a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Def {
    /// The defined name (last path segment for qualified names).
    pub name: String,
    /// `class`, `function`, `method`, `struct`, … as the language calls it.
    pub kind: String,
    /// 1-based line of the definition's start.
    pub line: u32,
    /// The definition's first line, trimmed: its signature for the repo map.
    pub signature: String,
    /// Index (in the same file's `defs`) of the enclosing definition, if any.
    pub parent: Option<u32>,
    /// The definition's own term bag: `(index into the file's terms, count)` for the words
    /// of its span outside nested definitions (signature, docstring, body), sorted by index.
    #[serde(skip)]
    pub terms: Vec<(u32, u32)>,
}

/// One indexed file.
#[derive(Debug, Clone)]
pub struct IndexedFile {
    /// Repository-relative path.
    pub path: String,
    /// Blob id of the indexed content.
    pub blob: ObjectId,
    /// What was extracted.
    pub summary: Arc<FileSummary>,
}

/// What the index knows about one file's content (keyed in the cache by blob id and language).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FileSummary {
    /// The language it was parsed as, `None` for text.
    pub lang: Option<Lang>,
    /// Why the content was skipped, if it was.
    pub skip: Option<Skip>,
    /// Number of lines.
    pub lines: u32,
    /// Definitions, in source order.
    pub defs: Vec<Def>,
    /// Distinct names referenced (calls, types, attributes), sorted.
    pub refs: Vec<String>,
    /// Imported modules as written (`a.b.c`, `./x`, `<stdio.h>`), distinct, in source order.
    pub imports: Vec<String>,
    /// Bag of index terms (split identifiers and words of comments and strings) with counts,
    /// sorted by term.
    pub terms: Vec<(String, u32)>,
}

/// Cache format version; bump whenever extraction or encoding changes.
pub const FORMAT_VERSION: u32 = 2;

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u32(&mut self, v: u32) {
        // LEB128: most numbers here are small.
        let mut v = v;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(b);
                break;
            }
            self.0.push(b | 0x80);
        }
    }
    fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u32(&mut self) -> Option<u32> {
        let mut v: u32 = 0;
        for shift in (0..35).step_by(7) {
            let b = self.u8()?;
            v |= u32::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    fn str(&mut self) -> Option<&'a str> {
        let n = self.u32()? as usize;
        if n > self.0.len() {
            return None;
        }
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        std::str::from_utf8(s).ok()
    }
}

impl FileSummary {
    /// Append the binary encoding of `self` to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut w = Writer(out);
        w.0.push(self.lang.map_or(0, Lang::tag));
        w.0.push(match self.skip {
            None => 0,
            Some(Skip::Binary) => 1,
            Some(Skip::Generated) => 2,
            Some(Skip::Minified) => 3,
            Some(Skip::TooLarge) => 4,
        });
        w.u32(self.lines);
        w.u32(self.defs.len() as u32);
        for d in &self.defs {
            w.str(&d.name);
            w.str(&d.kind);
            w.u32(d.line);
            w.str(&d.signature);
            w.u32(d.parent.map_or(0, |p| p + 1));
            w.u32(d.terms.len() as u32);
            // Indices are sorted: store the gaps.
            let mut prev = 0;
            for &(t, n) in &d.terms {
                w.u32(t.saturating_sub(prev));
                w.u32(n);
                prev = t;
            }
        }
        w.u32(self.refs.len() as u32);
        for r in &self.refs {
            w.str(r);
        }
        w.u32(self.imports.len() as u32);
        for i in &self.imports {
            w.str(i);
        }
        w.u32(self.terms.len() as u32);
        for (t, n) in &self.terms {
            w.str(t);
            w.u32(*n);
        }
    }

    /// Decode what [`FileSummary::encode`] wrote; `None` when the bytes are not a summary.
    pub fn decode(bytes: &[u8]) -> Option<FileSummary> {
        let mut r = Reader(bytes);
        let lang = match r.u8()? {
            0 => None,
            t => Some(Lang::from_tag(t)?),
        };
        let skip = match r.u8()? {
            0 => None,
            1 => Some(Skip::Binary),
            2 => Some(Skip::Generated),
            3 => Some(Skip::Minified),
            4 => Some(Skip::TooLarge),
            _ => return None,
        };
        let lines = r.u32()?;
        let n = r.u32()? as usize;
        let mut defs = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let mut def = Def {
                name: r.str()?.to_string(),
                kind: r.str()?.to_string(),
                line: r.u32()?,
                signature: r.str()?.to_string(),
                parent: r.u32()?.checked_sub(1),
                terms: Vec::new(),
            };
            let k = r.u32()? as usize;
            def.terms.reserve(k.min(1 << 16));
            let mut prev = 0u32;
            for _ in 0..k {
                prev = prev.checked_add(r.u32()?)?;
                def.terms.push((prev, r.u32()?));
            }
            defs.push(def);
        }
        let n = r.u32()? as usize;
        let mut refs = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            refs.push(r.str()?.to_string());
        }
        let n = r.u32()? as usize;
        let mut imports = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            imports.push(r.str()?.to_string());
        }
        let n = r.u32()? as usize;
        let mut terms = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            terms.push((r.str()?.to_string(), r.u32()?));
        }
        let ok = defs
            .iter()
            .all(|d| d.terms.iter().all(|&(t, _)| (t as usize) < terms.len()));
        (ok && r.0.is_empty()).then_some(FileSummary {
            lang,
            skip,
            lines,
            defs,
            refs,
            imports,
            terms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips() {
        let s = FileSummary {
            lang: Some(Lang::Python),
            skip: None,
            lines: 300,
            defs: vec![Def {
                name: "PairGrid".into(),
                kind: "class".into(),
                line: 1200,
                signature: "class PairGrid(Grid):".into(),
                parent: None,
                terms: vec![(0, 3)],
            }],
            refs: vec!["map".into()],
            imports: vec!["seaborn.utils".into()],
            terms: vec![("grid".into(), 70_000)],
        };
        let mut buf = Vec::new();
        s.encode(&mut buf);
        assert_eq!(FileSummary::decode(&buf), Some(s));
        buf.pop();
        assert_eq!(FileSummary::decode(&buf), None);
    }

    #[test]
    fn lang_tags_round_trip() {
        for l in Lang::ALL {
            assert_eq!(Lang::from_tag(l.tag()), Some(l));
        }
        assert_eq!(Lang::from_path("a/b.tsx"), Some(Lang::Tsx));
        assert_eq!(Lang::from_path("Makefile"), None);
    }
}
