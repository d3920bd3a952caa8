//! The push-time secret scan over the blobs a commit range adds.
//!
//! The text-diff scan ([`super::scan_diff`]) only sees what a unified diff shows, and a model
//! told to leak a value can write it so that no line matches: hex, reversed, rot13, base64
//! wrapped at any width, `%XX` or `\uXXXX` escapes, half in one file and half in another,
//! behind one invalid UTF-8 byte so that the file counts as binary. This scan reads the
//! bytes of every changed blob, binary or not, and looks at them the way a decoder would:
//!
//! - **Known values** (the redactor's secrets). Each value is turned into its forms (plain,
//!   reversed, rot13, hex in any letter case, base64 at the three byte offsets in both
//!   alphabets) and each form is cut into overlapping grams. The added bytes are searched with
//!   whitespace and NUL removed (so wrapping, line splits and UTF-16 make no difference), and
//!   again after decoding escape sequences (`%XX`, `\xXX`, `\uXXXX`, `\NNN`, `&#…;`). Grams
//!   found in a row make pieces; pieces map back to byte ranges of the value, whatever
//!   their encoding, and a value is found when the pieces cover most of it. The search runs
//!   over the concatenation of every file's added bytes, so a value split across lines or
//!   files, in any order, is found as long as each piece is at least a gram long.
//! - **Private keys by shape**, headers or not: base64, hex or raw DER that starts like a
//!   PKCS#1, PKCS#8 (plain or encrypted) or SEC1 private key, and the OpenSSH key magic.
//! - **Token patterns** (`ghp_…`, `sk-…`, AWS key ids, …) on the raw and unescaped bytes.
//!
//! For a modified file only the lines the new version adds are read (a multiset difference of
//! lines, so moved lines do not count), and a key shape already in the old version is not a
//! finding: the repository had it before the run. Every finding is redacted before it leaves
//! this module: the path through the redactor, the line with every found span masked.
//!
//! What it cannot see: pieces shorter than a gram placed out of order, compressed or
//! encrypted content, and encodings composed beyond one step (base64 of the hex of a value).
//! The sandbox keeping secrets out of the model's reach is the boundary; this is the net.

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

use super::{Finding, MASK, Redactor};

/// Gram length for plain, reversed and rot13 forms: a piece shorter than this is not found
/// out of order.
const PLAIN_GRAM: usize = 8;
/// Gram length for hex forms (8 bytes of the value).
const HEX_GRAM: usize = 16;
/// Gram length for base64 forms (9 bytes of the value).
const B64_GRAM: usize = 12;
/// A value is found when pieces cover at least this many fifths of its bytes.
const COVER_FIFTHS: usize = 4;
/// Findings reported per secret at most (its pieces can be many).
const MAX_FINDINGS_PER_SECRET: usize = 20;
/// Characters of a line shown in a finding.
const SHOWN_CHARS: usize = 160;

/// One changed file of a commit range, as the scan reads it.
#[derive(Debug, Clone, Copy)]
pub struct ChangedFile<'a> {
    /// Repository-relative path (redacted before it is reported).
    pub path: &'a str,
    /// The blob before the change; empty for an added file.
    pub old: &'a [u8],
    /// The blob after the change.
    pub new: &'a [u8],
}

impl<'a> ChangedFile<'a> {
    /// The files of `blobs` that hold content after the change (deleted ones add nothing
    /// to scan), as the scan reads them.
    pub fn with_content(blobs: &'a [crate::workspace::ChangedBlob]) -> Vec<ChangedFile<'a>> {
        blobs
            .iter()
            .filter(|b| !b.new.is_empty())
            .map(|b| ChangedFile {
                path: &b.path,
                old: &b.old,
                new: &b.new,
            })
            .collect()
    }
}

/// Scan the changed files of a commit range for secrets. An empty list means none was found;
/// any finding must block the push, and the list is safe to report.
pub fn scan_changes(files: &[ChangedFile<'_>], redactor: &Redactor) -> Vec<Finding> {
    redactor.diff_scanner().scan(files)
}

impl Redactor {
    /// A scanner for this redactor's secrets, built once and used for many scans.
    pub fn diff_scanner(&self) -> DiffScanner<'_> {
        DiffScanner::new(self)
    }
}

/// How a form encodes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Enc {
    Plain,
    Reversed,
    Rot13,
    Hex,
    /// Base64 of the value after `filler` bytes; the form starts at character `first`.
    Base64 {
        filler: usize,
        first: usize,
    },
}

impl Enc {
    fn name(self) -> &'static str {
        match self {
            Enc::Plain => "plain",
            Enc::Reversed => "reversed",
            Enc::Rot13 => "rot13",
            Enc::Hex => "hex",
            Enc::Base64 { .. } => "base64",
        }
    }
}

/// One searchable form of one secret value.
struct Form {
    secret: usize,
    enc: Enc,
    len: usize,
    /// For plain-like forms (whitespace dropped): the value's byte index of each character.
    pos: Vec<usize>,
}

impl Form {
    /// The value's bytes fully covered by characters `a..b` of this form.
    fn covered(&self, a: usize, b: usize, value_len: usize) -> Vec<usize> {
        match self.enc {
            Enc::Plain | Enc::Rot13 => self.pos[a..b].to_vec(),
            Enc::Reversed => self.pos[self.len - b..self.len - a].to_vec(),
            Enc::Hex => (a.div_ceil(2)..b / 2).collect(),
            Enc::Base64 { filler, first } => {
                let from = (6 * (first + a)).div_ceil(8);
                let to = (6 * (first + b)) / 8;
                (from.max(filler)..to.min(filler + value_len))
                    .map(|i| i - filler)
                    .collect()
            }
        }
    }
}

/// Where a gram occurs: (form index, offset in the form).
type GramSites = Vec<(usize, usize)>;

/// Grams of many forms in one automaton; a pattern id maps to every (form, offset) it is.
struct Grams {
    ac: Option<AhoCorasick>,
    at: Vec<GramSites>,
}

impl Grams {
    fn build(grams: HashMap<Vec<u8>, GramSites>, case_insensitive: bool) -> Self {
        let (pats, at): (Vec<Vec<u8>>, Vec<GramSites>) = grams.into_iter().unzip();
        let ac = if pats.is_empty() {
            None
        } else {
            AhoCorasickBuilder::new()
                .match_kind(MatchKind::Standard)
                .ascii_case_insensitive(case_insensitive)
                .build(&pats)
                .ok()
        };
        Grams { ac, at }
    }
}

/// A run of grams found in a row: characters `a..b` of form `form` at `start..` of the view.
#[derive(Debug, Clone, Copy)]
struct Piece {
    form: usize,
    a: usize,
    b: usize,
    start: usize,
}

/// The secret scanner of one [`Redactor`] (see the module docs).
pub struct DiffScanner<'r> {
    redactor: &'r Redactor,
    forms: Vec<Form>,
    exact: Grams,
    hex: Grams,
    /// Whitespace bytes of each value count as covered: the searched views have none.
    blank: Vec<Vec<bool>>,
}

impl std::fmt::Debug for DiffScanner<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiffScanner")
            .field("forms", &self.forms.len())
            .finish_non_exhaustive()
    }
}

fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | 0)
}

impl<'r> DiffScanner<'r> {
    fn new(redactor: &'r Redactor) -> Self {
        let mut forms = Vec::new();
        let mut texts: Vec<Vec<u8>> = Vec::new();
        let mut blank = Vec::new();
        for (si, v) in redactor.values.iter().enumerate() {
            blank.push(v.iter().map(|b| is_blank(*b)).collect());
            let pos: Vec<usize> = (0..v.len()).filter(|&i| !is_blank(v[i])).collect();
            let plain: Vec<u8> = pos.iter().map(|&i| v[i]).collect();
            let mut cands: Vec<(Enc, Vec<u8>, Vec<usize>)> = vec![
                (Enc::Plain, plain.clone(), pos.clone()),
                (
                    Enc::Reversed,
                    plain.iter().rev().copied().collect(),
                    pos.clone(),
                ),
                (Enc::Rot13, rot13(&plain), pos.clone()),
                (Enc::Hex, hex::encode(v).into_bytes(), Vec::new()),
            ];
            for filler in 0..3usize {
                let mut buf = vec![0u8; filler];
                buf.extend_from_slice(v);
                let first = (8 * filler).div_ceil(6);
                let end = (8 * (filler + v.len())) / 6;
                for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
                    if let Some(core) = engine.encode(&buf).get(first..end) {
                        cands.push((
                            Enc::Base64 { filler, first },
                            core.as_bytes().to_vec(),
                            Vec::new(),
                        ));
                    }
                }
            }
            // rot13 of a value without letters, and URL-safe base64 of one without `+` or
            // `/`, are the same text as another form.
            let mut seen: Vec<Vec<u8>> = Vec::new();
            for (enc, text, pos) in cands {
                if text.is_empty() || seen.contains(&text) {
                    continue;
                }
                seen.push(text.clone());
                forms.push(Form {
                    secret: si,
                    enc,
                    len: text.len(),
                    pos,
                });
                texts.push(text);
            }
        }
        let mut exact: HashMap<Vec<u8>, Vec<(usize, usize)>> = HashMap::new();
        let mut hexg: HashMap<Vec<u8>, Vec<(usize, usize)>> = HashMap::new();
        for (fi, (form, text)) in forms.iter().zip(&texts).enumerate() {
            let (gram, map) = match form.enc {
                Enc::Hex => (HEX_GRAM, &mut hexg),
                Enc::Base64 { .. } => (B64_GRAM, &mut exact),
                _ => (PLAIN_GRAM, &mut exact),
            };
            let gram = gram.min(text.len());
            for (off, w) in text.windows(gram).enumerate() {
                let key = if form.enc == Enc::Hex {
                    w.to_ascii_lowercase()
                } else {
                    w.to_vec()
                };
                map.entry(key).or_default().push((fi, off));
            }
        }
        DiffScanner {
            redactor,
            forms,
            exact: Grams::build(exact, false),
            hex: Grams::build(hexg, true),
            blank,
        }
    }

    /// Scan these changed files (see [`scan_changes`]).
    pub fn scan(&self, files: &[ChangedFile<'_>]) -> Vec<Finding> {
        let prepared: Vec<Prepared> = files.iter().map(Prepared::new).collect();
        let mut hits: Vec<Hit> = Vec::new();
        for (fi, (p, f)) in prepared.iter().zip(files).enumerate() {
            self.tokens(fi, p, &mut hits);
            shapes(fi, p, f.old, &mut hits);
        }
        self.known_values(&prepared, &mut hits);
        render(self.redactor, files, &prepared, hits)
    }

    /// Token patterns on the raw and the unescaped bytes (known values are
    /// [`Self::known_values`]'s, which names their encoding).
    fn tokens(&self, fi: usize, p: &Prepared, hits: &mut Vec<Hit>) {
        for m in self.redactor.all.find_iter(&p.added) {
            let kind = self.redactor.kind_of(m.as_bytes());
            if kind == "known-secret" {
                continue;
            }
            hits.push(Hit {
                kind,
                encoding: "plain".to_string(),
                spans: vec![(fi, m.start(), m.end())],
            });
        }
        let Some(u) = &p.unesc else { return };
        for m in self.redactor.all.find_iter(&u.bytes) {
            let kind = self.redactor.kind_of(m.as_bytes());
            if kind == "known-secret" {
                continue;
            }
            let s = u.map[m.start()] as usize;
            let e = escape_end(&p.added, u.map[m.end() - 1] as usize);
            // Without an escape inside, the raw pass has it already.
            if e - s == m.len() {
                continue;
            }
            hits.push(Hit {
                kind,
                encoding: "escaped".to_string(),
                spans: vec![(fi, s, e)],
            });
        }
    }

    /// Known values in any of their forms, whole or in pieces, over all files at once.
    fn known_values(&self, prepared: &[Prepared], hits: &mut Vec<Hit>) {
        if self.forms.is_empty() {
            return;
        }
        let n = self.redactor.values.len();
        let mut concats = vec![Concat::of(prepared.iter().map(|p| Some(&p.sq)), false)];
        if prepared.iter().any(|p| p.unesc_sq.is_some()) {
            concats.push(Concat::of(
                prepared.iter().map(|p| p.unesc_sq.as_ref()),
                true,
            ));
        }
        // Per secret: the pieces found, with the concatenation they were found in.
        let mut found: Vec<Vec<(usize, Piece)>> = (0..n).map(|_| Vec::new()).collect();
        for (ci, concat) in concats.iter().enumerate() {
            for piece in self.pieces(&concat.bytes) {
                found[self.forms[piece.form].secret].push((ci, piece));
            }
        }
        for (si, pieces) in found.into_iter().enumerate() {
            if pieces.is_empty() {
                continue;
            }
            let value_len = self.blank[si].len();
            let mut covered = self.blank[si].clone();
            for (_, pc) in &pieces {
                for i in self.forms[pc.form].covered(pc.a, pc.b, value_len) {
                    covered[i] = true;
                }
            }
            let count = covered.iter().filter(|c| **c).count();
            if count * 5 < value_len * COVER_FIFTHS {
                continue;
            }
            let mut encs: Vec<&str> = Vec::new();
            let mut spans = Vec::new();
            for (ci, pc) in &pieces {
                let concat = &concats[*ci];
                let enc = self.forms[pc.form].enc.name();
                let enc = if concat.escaped && enc == "plain" {
                    "escaped"
                } else {
                    enc
                };
                if !encs.contains(&enc) {
                    encs.push(enc);
                }
                spans.extend(concat.source_spans(prepared, pc.start, pc.start + (pc.b - pc.a)));
            }
            let mut files: Vec<usize> = spans.iter().map(|s| s.0).collect();
            files.sort_unstable();
            files.dedup();
            let mut encoding = encs.join("+");
            if files.len() > 1 {
                encoding.push_str(", split across files");
            } else if pieces.len() > 1 {
                encoding.push_str(", split");
            }
            hits.push(Hit {
                kind: "known-secret",
                encoding,
                spans,
            });
        }
    }

    /// Runs of consecutive grams in `hay`.
    fn pieces(&self, hay: &[u8]) -> Vec<Piece> {
        // (form, diagonal = hay position - form offset) -> form offsets of the grams found.
        let mut diag: HashMap<(usize, isize), Vec<usize>> = HashMap::new();
        for g in [&self.exact, &self.hex] {
            let Some(ac) = &g.ac else { continue };
            for m in ac.find_overlapping_iter(hay) {
                for &(form, off) in &g.at[m.pattern().as_usize()] {
                    diag.entry((form, m.start() as isize - off as isize))
                        .or_default()
                        .push(off);
                }
            }
        }
        let mut out = Vec::new();
        for ((form, d), mut offs) in diag {
            let f = &self.forms[form];
            let gram = match f.enc {
                Enc::Hex => HEX_GRAM,
                Enc::Base64 { .. } => B64_GRAM,
                _ => PLAIN_GRAM,
            }
            .min(f.len);
            offs.sort_unstable();
            offs.dedup();
            let mut i = 0;
            while i < offs.len() {
                let mut j = i;
                while j + 1 < offs.len() && offs[j + 1] == offs[j] + 1 {
                    j += 1;
                }
                let (a, b) = (offs[i], offs[j] + gram);
                out.push(Piece {
                    form,
                    a,
                    b,
                    start: (d + a as isize) as usize,
                });
                i = j + 1;
            }
        }
        out.sort_by_key(|p| (p.start, p.form));
        out
    }
}

/// A view of some bytes: `bytes[i]` came from `source[map[i]]`.
struct View {
    bytes: Vec<u8>,
    map: Vec<u32>,
}

/// One file's added bytes and the views the scan searches.
struct Prepared {
    /// The added bytes: the whole new blob, or the lines a modified file gains.
    added: Vec<u8>,
    /// For a modified file: (offset in `added`, 1-based line in the new blob) of each line.
    lines: Option<Vec<(usize, u32)>>,
    /// `added` without whitespace and NUL bytes.
    sq: View,
    /// `added` with escape sequences decoded, when it has any.
    unesc: Option<View>,
    /// `unesc` without whitespace and NUL bytes.
    unesc_sq: Option<View>,
}

impl Prepared {
    fn new(f: &ChangedFile<'_>) -> Self {
        let (added, lines) = if f.old.is_empty() {
            (f.new.to_vec(), None)
        } else {
            let (a, l) = added_lines(f.old, f.new);
            (a, Some(l))
        };
        let sq = squeeze(&added, None);
        let unesc = unescape(&added);
        let unesc_sq = unesc.as_ref().map(|u| squeeze(&u.bytes, Some(&u.map)));
        Prepared {
            added,
            lines,
            sq,
            unesc,
            unesc_sq,
        }
    }

    /// The 1-based line (in the new blob) of byte `at` of `added`, and that line's extent in
    /// `added`.
    fn line_of(&self, at: usize) -> (u32, usize, usize) {
        let start = self.added[..at.min(self.added.len())]
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |p| p + 1);
        let end = self.added[start..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(self.added.len(), |p| start + p);
        let line = match &self.lines {
            None => 1 + self.added[..start].iter().filter(|b| **b == b'\n').count() as u32,
            Some(l) => {
                let i = l
                    .partition_point(|(off, _)| *off <= start)
                    .saturating_sub(1);
                l.get(i).map_or(0, |x| x.1)
            }
        };
        (line, start, end)
    }
}

/// The lines of `new` that `old` does not have (as a multiset), in order, with their
/// positions.
fn added_lines(old: &[u8], new: &[u8]) -> (Vec<u8>, Vec<(usize, u32)>) {
    let mut have: HashMap<&[u8], usize> = HashMap::new();
    for l in old.split_inclusive(|b| *b == b'\n') {
        *have.entry(trim_eol(l)).or_default() += 1;
    }
    let mut out = Vec::new();
    let mut lines = Vec::new();
    for (n, l) in new.split_inclusive(|b| *b == b'\n').enumerate() {
        if let Some(c) = have.get_mut(trim_eol(l))
            && *c > 0
        {
            *c -= 1;
            continue;
        }
        lines.push((out.len(), n as u32 + 1));
        out.extend_from_slice(l);
        if !l.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    (out, lines)
}

fn trim_eol(l: &[u8]) -> &[u8] {
    let l = l.strip_suffix(b"\n").unwrap_or(l);
    l.strip_suffix(b"\r").unwrap_or(l)
}

/// `src` without whitespace and NUL bytes; `map` composes with an earlier view's map.
fn squeeze(src: &[u8], map: Option<&[u32]>) -> View {
    let mut bytes = Vec::with_capacity(src.len());
    let mut out = Vec::with_capacity(src.len());
    for (i, b) in src.iter().enumerate() {
        if !is_blank(*b) {
            bytes.push(*b);
            out.push(map.map_or(i as u32, |m| m[i]));
        }
    }
    View { bytes, map: out }
}

/// `src` with escape sequences decoded, or `None` when it has none.
fn unescape(src: &[u8]) -> Option<View> {
    let mut bytes = Vec::with_capacity(src.len());
    let mut map = Vec::with_capacity(src.len());
    let mut changed = false;
    let mut i = 0;
    while i < src.len() {
        if matches!(src[i], b'%' | b'\\' | b'&')
            && let Some((decoded, used)) = decode_escape(&src[i..])
        {
            for b in decoded {
                bytes.push(b);
                map.push(i as u32);
            }
            i += used;
            changed = true;
            continue;
        }
        bytes.push(src[i]);
        map.push(i as u32);
        i += 1;
    }
    changed.then_some(View { bytes, map })
}

fn hex_val(b: u8) -> Option<u32> {
    (b as char).to_digit(16)
}

fn hex_n(s: &[u8], n: usize) -> Option<u32> {
    if s.len() < n {
        return None;
    }
    s[..n]
        .iter()
        .try_fold(0u32, |acc, b| Some(acc * 16 + hex_val(*b)?))
}

fn char_bytes(c: u32) -> Option<Vec<u8>> {
    let c = char::from_u32(c)?;
    Some(c.to_string().into_bytes())
}

/// One escape sequence at the start of `s`: its decoded bytes and its length.
fn decode_escape(s: &[u8]) -> Option<(Vec<u8>, usize)> {
    match s[0] {
        b'%' => Some((vec![hex_n(&s[1..], 2)? as u8], 3)),
        b'\\' => {
            let e = *s.get(1)?;
            match e {
                b'x' => Some((vec![hex_n(&s[2..], 2)? as u8], 4)),
                b'u' if s.get(2) == Some(&b'{') => {
                    let close = s.iter().take(12).position(|b| *b == b'}')?;
                    let v = std::str::from_utf8(&s[3..close]).ok()?;
                    Some((char_bytes(u32::from_str_radix(v, 16).ok()?)?, close + 1))
                }
                b'u' => {
                    let hi = hex_n(&s[2..], 4)?;
                    if (0xD800..0xDC00).contains(&hi)
                        && s.get(6..8) == Some(b"\\u")
                        && let Some(lo) = hex_n(&s[8..], 4)
                        && (0xDC00..0xE000).contains(&lo)
                    {
                        let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                        return Some((char_bytes(c)?, 12));
                    }
                    Some((char_bytes(hi)?, 6))
                }
                b'U' => Some((char_bytes(hex_n(&s[2..], 8)?)?, 10)),
                b'0'..=b'7' => {
                    let n = s[1..]
                        .iter()
                        .take(3)
                        .take_while(|b| (b'0'..=b'7').contains(*b))
                        .count();
                    let v = s[1..1 + n]
                        .iter()
                        .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
                    Some((vec![(v & 0xff) as u8], 1 + n))
                }
                b'n' => Some((vec![b'\n'], 2)),
                b'r' => Some((vec![b'\r'], 2)),
                b't' => Some((vec![b'\t'], 2)),
                b'/' | b'\\' | b'"' | b'\'' | b'`' => Some((vec![e], 2)),
                _ => None,
            }
        }
        b'&' => {
            let end = s.iter().take(12).position(|b| *b == b';')?;
            let body = &s[1..end];
            let c = if let Some(h) = body
                .strip_prefix(b"#x")
                .or_else(|| body.strip_prefix(b"#X"))
            {
                u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?
            } else if let Some(d) = body.strip_prefix(b"#") {
                std::str::from_utf8(d).ok()?.parse().ok()?
            } else {
                match body {
                    b"amp" => u32::from(b'&'),
                    b"lt" => u32::from(b'<'),
                    b"gt" => u32::from(b'>'),
                    b"quot" => u32::from(b'"'),
                    b"apos" => u32::from(b'\''),
                    _ => return None,
                }
            };
            Some((char_bytes(c)?, end + 1))
        }
        _ => None,
    }
}

/// rot13 of the ASCII letters; every other byte unchanged.
pub(super) fn rot13(s: &[u8]) -> Vec<u8> {
    s.iter()
        .map(|&b| match b {
            b'a'..=b'z' => (b - b'a' + 13) % 26 + b'a',
            b'A'..=b'Z' => (b - b'A' + 13) % 26 + b'A',
            _ => b,
        })
        .collect()
}

/// The squeezed views of every file, end to end, so that pieces in different files meet.
struct Concat {
    bytes: Vec<u8>,
    /// (start in `bytes`, file index) of each file's segment.
    segs: Vec<(usize, usize)>,
    escaped: bool,
}

impl Concat {
    /// `escaped`: these are the unescaped views (files without escapes are left out).
    fn of<'a>(views: impl Iterator<Item = Option<&'a View>>, escaped: bool) -> Self {
        let mut bytes = Vec::new();
        let mut segs = Vec::new();
        for (fi, v) in views.enumerate() {
            if let Some(v) = v {
                segs.push((bytes.len(), fi));
                bytes.extend_from_slice(&v.bytes);
            }
        }
        Concat {
            bytes,
            segs,
            escaped,
        }
    }

    /// The byte ranges of the source files that `start..end` of the concatenation came from.
    fn source_spans(
        &self,
        files: &[Prepared],
        start: usize,
        end: usize,
    ) -> Vec<(usize, usize, usize)> {
        let mut out = Vec::new();
        for (k, &(seg_start, fi)) in self.segs.iter().enumerate() {
            let seg_end = self.segs.get(k + 1).map_or(self.bytes.len(), |s| s.0);
            let (s, e) = (start.max(seg_start), end.min(seg_end));
            if s >= e {
                continue;
            }
            let p = &files[fi];
            let view = if self.escaped {
                p.unesc_sq.as_ref().unwrap_or(&p.sq)
            } else {
                &p.sq
            };
            let (vs, ve) = (s - seg_start, e - seg_start);
            if let (Some(a), Some(b)) = (view.map.get(vs), view.map.get(ve - 1)) {
                let b = if self.escaped {
                    // The unescaped view maps to escape starts; cover the whole escape.
                    escape_end(&p.added, *b as usize)
                } else {
                    *b as usize + 1
                };
                out.push((fi, *a as usize, b));
            }
        }
        out
    }
}

/// The end of the escape sequence (or single byte) starting at `at`.
fn escape_end(src: &[u8], at: usize) -> usize {
    if matches!(src.get(at), Some(b'%' | b'\\' | b'&'))
        && let Some((_, used)) = decode_escape(&src[at..])
    {
        return at + used;
    }
    at + 1
}

/// A secret found: what, how written, and where (file, start, end in the file's added bytes).
struct Hit {
    kind: &'static str,
    encoding: String,
    spans: Vec<(usize, usize, usize)>,
}

/// Private keys by shape in one file's added bytes.
fn shapes(fi: usize, p: &Prepared, old: &[u8], hits: &mut Vec<Hit>) {
    let mut found = key_shapes(p);
    if found.is_empty() {
        return;
    }
    if !old.is_empty() {
        // A key the repository already had is not the run's doing.
        let before = key_shapes(&Prepared::new(&ChangedFile {
            path: "",
            old: &[],
            new: old,
        }));
        found.retain(|(_, _, _, sig)| !before.iter().any(|b| &b.3 == sig));
    }
    for (enc, s, e, _) in found {
        hits.push(Hit {
            kind: "private-key",
            encoding: enc.to_string(),
            spans: vec![(fi, s, e)],
        });
    }
}

/// Key shapes in a file: (encoding, start, end in `added`, signature bytes).
fn key_shapes(p: &Prepared) -> Vec<(&'static str, usize, usize, Vec<u8>)> {
    let mut out = Vec::new();
    // Raw DER and the binary OpenSSH format.
    let raw = &p.added;
    for (i, _) in raw.iter().enumerate().filter(|(_, b)| **b == 0x30) {
        if der_private_key(&raw[i..]) {
            out.push((
                "der",
                i,
                raw.len().min(i + 64),
                raw[i..raw.len().min(i + 24)].to_vec(),
            ));
        }
    }
    const SSH_MAGIC: &[u8] = b"openssh-key-v1\0";
    const SSH_MAGIC_B64: &[u8] = b"b3BlbnNzaC1rZXktdjE";
    if let Some(i) = memfind(raw, SSH_MAGIC) {
        out.push(("openssh", i, i + SSH_MAGIC.len(), SSH_MAGIC.to_vec()));
    }
    for view in std::iter::once(&p.sq).chain(p.unesc_sq.as_ref()) {
        let v = &view.bytes;
        let span = |s: usize, e: usize| (view.map[s] as usize, view.map[e - 1] as usize + 1);
        let mut i = 0;
        while let Some(k) = memfind(&v[i..], SSH_MAGIC_B64) {
            let s = i + k;
            let e = s + b64_run(&v[s..]);
            let (a, b) = span(s, e);
            out.push(("openssh", a, b, v[s..e.min(s + 64)].to_vec()));
            i = e.max(s + 1);
        }
        let mut run_start = 0;
        let mut in_run = false;
        let mut i = 0;
        while i < v.len() {
            let c = v[i];
            if !is_b64(c) {
                in_run = false;
                i += 1;
                continue;
            }
            if !in_run {
                in_run = true;
                run_start = i;
            }
            let aligned = (i - run_start) % 4 == 0;
            if (c == b'M' || (aligned && maybe_sequence(&v[i..])))
                && let Some(d) = b64_prefix(&v[i..])
            {
                let shift = if c == b'M' && der_private_key(&d) {
                    Some(0)
                } else if aligned {
                    (0..3).find(|&k| der_private_key(&d[k..]))
                } else {
                    None
                };
                if let Some(k) = shift {
                    let e = i + b64_run(&v[i..]);
                    let (a, b) = span(i, e);
                    out.push(("base64", a, b, d[k..].to_vec()));
                    i = e;
                    in_run = false;
                    continue;
                }
            }
            if c == b'3'
                && v.get(i + 1) == Some(&b'0')
                && let Some(d) = hex_prefix(&v[i..])
                && der_private_key(&d)
            {
                let e = i + v[i..].iter().take_while(|b| b.is_ascii_hexdigit()).count();
                let (a, b) = span(i, e);
                out.push(("hex", a, b, d));
                i = e;
                in_run = false;
                continue;
            }
            i += 1;
        }
    }
    out
}

fn is_b64(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_' | b'=')
}

fn b64_run(v: &[u8]) -> usize {
    v.iter().take_while(|c| is_b64(**c)).count()
}

/// Whether one of the first three bytes that base64 at the start of `v` decodes to is 0x30
/// (a DER SEQUENCE), cheaply, before decoding more.
fn maybe_sequence(v: &[u8]) -> bool {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let Some(q) = v.get(..4) else { return false };
    let Some(n) = q.iter().try_fold(0u32, |acc, c| Some(acc << 6 | val(*c)?)) else {
        return false;
    };
    n >> 16 == 0x30 || (n >> 8) & 0xff == 0x30 || n & 0xff == 0x30
}

/// The first 24 bytes decoded from 32 base64 characters at the start of `v`.
fn b64_prefix(v: &[u8]) -> Option<Vec<u8>> {
    let chunk = v.get(..32)?;
    if !chunk
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'/' | b'-' | b'_'))
    {
        return None;
    }
    let std: Vec<u8> = chunk
        .iter()
        .map(|&c| match c {
            b'-' => b'+',
            b'_' => b'/',
            c => c,
        })
        .collect();
    STANDARD_NO_PAD.decode(std).ok()
}

/// The first 20 bytes decoded from 40 hex digits at the start of `v`.
fn hex_prefix(v: &[u8]) -> Option<Vec<u8>> {
    hex::decode(v.get(..40)?).ok()
}

fn memfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// DER prefixes of the OIDs of key algorithms a PKCS#8 key names.
const KEY_ALGORITHMS: &[&[u8]] = &[
    // 1.2.840.113549.1.1 (rsaEncryption, RSASSA-PSS) and 1.2.840.113549.1.3.1 (DH)
    &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01],
    &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x03, 0x01],
    // 1.2.840.10045.2.1 (ecPublicKey) and 1.2.840.10040.4.1 (DSA)
    &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01],
    &[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x01],
    // 1.3.101.110–113 (X25519, X448, Ed25519, Ed448)
    &[0x2b, 0x65],
    // 2.16.840.1.101.3.4.3 and .4 (ML-DSA, SLH-DSA, ML-KEM)
    &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03],
    &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x04],
];

/// Whether `d` starts like the DER of a private key.
fn der_private_key(d: &[u8]) -> bool {
    if d.len() < 16 || d[0] != 0x30 {
        return false;
    }
    let (len, h) = match d[1] {
        n if n < 0x80 => (n as usize, 2),
        0x81 => (d[2] as usize, 3),
        0x82 => ((d[2] as usize) << 8 | d[3] as usize, 4),
        _ => return false,
    };
    if len < 0x20 {
        return false;
    }
    let b = &d[h..];
    // PKCS#1 RSA or DSA: version 0, then a long INTEGER (the modulus or p).
    if b.starts_with(&[2, 1, 0, 2]) && matches!(b[4], 0x20..=0x7f | 0x81 | 0x82 | 0x83) {
        return true;
    }
    // PKCS#8 (v1 or v2): version, then an AlgorithmIdentifier whose OID is a key algorithm
    // (the same shape with a hash OID is, e.g., a certificate extension: certifi's CA bundle).
    if (b.starts_with(&[2, 1, 0, 0x30]) || b.starts_with(&[2, 1, 1, 0x30]))
        && b[4] < 0x80
        && b[5] == 0x06
    {
        let oid = &b[7..];
        return KEY_ALGORITHMS.iter().any(|k| oid.starts_with(k));
    }
    // SEC1 EC: version 1, then the private scalar as an OCTET STRING of a curve's size.
    if b.starts_with(&[2, 1, 1, 4]) && matches!(b[4], 0x18 | 0x1c | 0x20 | 0x30 | 0x41 | 0x42) {
        return true;
    }
    // Encrypted PKCS#8: an AlgorithmIdentifier for PBES2 first.
    const PBES2: &[u8] = &[
        0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x05, 0x0d,
    ];
    b.len() >= 2 + PBES2.len() && b[0] == 0x30 && b[1] < 0x80 && b[2..].starts_with(PBES2)
}

/// Findings from hits: one per file and line, every found span masked in the line shown.
fn render(
    redactor: &Redactor,
    files: &[ChangedFile<'_>],
    prepared: &[Prepared],
    hits: Vec<Hit>,
) -> Vec<Finding> {
    let mut masks: Vec<Vec<(usize, usize)>> = vec![Vec::new(); files.len()];
    for h in &hits {
        for &(fi, s, e) in &h.spans {
            masks[fi].push((s, e));
        }
    }
    let mut out: Vec<Finding> = Vec::new();
    for h in &hits {
        let mut n = 0;
        for &(fi, s, _) in &h.spans {
            let p = &prepared[fi];
            let (line, ls, le) = p.line_of(s);
            let f = Finding {
                path: redactor.redact(files[fi].path),
                line,
                kind: h.kind.to_string(),
                encoding: h.encoding.clone(),
                redacted: shown(redactor, &p.added[ls..le], ls, &masks[fi]),
            };
            if !out.iter().any(|o| {
                o.path == f.path && o.line == f.line && o.kind == f.kind && o.encoding == f.encoding
            }) {
                out.push(f);
                n += 1;
                if n >= MAX_FINDINGS_PER_SECRET {
                    break;
                }
            }
        }
    }
    out.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
    out
}

/// A line of added bytes starting at `base`, with every span masked, redacted and cut.
fn shown(redactor: &Redactor, line: &[u8], base: usize, masks: &[(usize, usize)]) -> String {
    let end = base + line.len();
    let mut ranges: Vec<(usize, usize)> = masks
        .iter()
        .filter(|(s, e)| *s < end && *e > base)
        .map(|(s, e)| ((*s).max(base) - base, (*e).min(end) - base))
        .collect();
    ranges.sort_unstable();
    let mut bytes = Vec::with_capacity(line.len());
    let mut at = 0;
    for (s, e) in ranges {
        if s >= at {
            bytes.extend_from_slice(&line[at..s]);
            bytes.extend_from_slice(MASK.as_bytes());
        }
        at = at.max(e);
    }
    bytes.extend_from_slice(&line[at.min(line.len())..]);
    let text: String = String::from_utf8_lossy(&bytes)
        .chars()
        .map(|c| if c.is_control() && c != '\t' { '.' } else { c })
        .collect();
    let text = redactor.redact(&text);
    let mut cut: String = text.chars().take(SHOWN_CHARS).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};

    const CANARY: &str = "ghs_Canary7Qx2LmP9vKt4RzW8yBn3HdJ6sFa1";

    fn r() -> Redactor {
        Redactor::new([CANARY]).unwrap()
    }

    fn added(path: &str, new: &[u8]) -> Vec<Finding> {
        scan_changes(
            &[ChangedFile {
                path,
                old: b"",
                new,
            }],
            &r(),
        )
    }

    /// No part of the canary long enough to matter appears in a report.
    fn assert_clean(f: &[Finding]) {
        let json = serde_json::to_string(f).unwrap();
        for w in CANARY.as_bytes().windows(8) {
            let w = std::str::from_utf8(w).unwrap();
            assert!(!json.contains(w), "{w} leaked in {json}");
        }
        let hex = hex::encode(CANARY);
        for w in hex.as_bytes().windows(16) {
            assert!(!json.contains(std::str::from_utf8(w).unwrap()), "{json}");
        }
    }

    fn wrap(s: &str, width: usize) -> String {
        s.as_bytes()
            .chunks(width)
            .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
            .collect()
    }

    /// Every encoding a model could use to carry a known value past the scan is found.
    #[test]
    fn every_encoding_of_a_known_value_is_found() {
        let b64 = |k: usize, url: bool| {
            let mut v = b"xyz"[..k].to_vec();
            v.extend_from_slice(CANARY.as_bytes());
            v.extend_from_slice(b"!");
            if url {
                URL_SAFE.encode(v)
            } else {
                STANDARD.encode(v)
            }
        };
        let rev: String = CANARY.chars().rev().collect();
        let r13 = String::from_utf8(rot13(CANARY.as_bytes())).unwrap();
        let pct: String = CANARY.bytes().map(|b| format!("%{b:02x}")).collect();
        let json: String = CANARY
            .chars()
            .map(|c| format!("\\u{:04X}", c as u32))
            .collect();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("raw", format!("token = {CANARY}\n").into_bytes(), "plain"),
            (
                "hex",
                format!("x = \"{}\"\n", hex::encode(CANARY)).into_bytes(),
                "hex",
            ),
            (
                "HEX",
                format!("{}\n", hex::encode_upper(CANARY)).into_bytes(),
                "hex",
            ),
            ("rev", format!("s = '{rev}'\n").into_bytes(), "reversed"),
            ("rot13", format!("{r13}\n").into_bytes(), "rot13"),
            ("b64-0", wrap(&b64(0, false), 12).into_bytes(), "base64"),
            ("b64-1", wrap(&b64(1, false), 7).into_bytes(), "base64"),
            ("b64-2", wrap(&b64(2, true), 76).into_bytes(), "base64"),
            ("pct", format!("u={pct}\n").into_bytes(), "escaped"),
            (
                "json",
                format!("{{\"t\": \"{json}\"}}\n").into_bytes(),
                "escaped",
            ),
            (
                "split-lines",
                format!("a = \"{}\"\nb = \"{}\"\n", &CANARY[..20], &CANARY[20..]).into_bytes(),
                "split",
            ),
            (
                "utf16",
                CANARY.bytes().flat_map(|b| [b, 0]).collect(),
                "plain",
            ),
            (
                "behind-ff",
                [b"\xff\xfe junk ".as_slice(), CANARY.as_bytes()].concat(),
                "plain",
            ),
        ];
        for (name, content, enc) in cases {
            let f = added("data.bin", &content);
            assert!(
                f.iter()
                    .any(|f| f.kind == "known-secret" && f.encoding.contains(enc)),
                "{name}: {f:?}"
            );
            assert_clean(&f);
        }
    }

    #[test]
    fn a_value_split_across_files_in_any_order_is_found() {
        let (a, b) = CANARY.split_at(17);
        // The second half sorts first, inside other text, and the halves are in hex and plain.
        let f = scan_changes(
            &[
                ChangedFile {
                    path: "a.txt",
                    old: b"",
                    new: format!("see {b} there\n").as_bytes(),
                },
                ChangedFile {
                    path: "z.txt",
                    old: b"",
                    new: format!("x {}\n", hex::encode(a)).as_bytes(),
                },
            ],
            &r(),
        );
        assert!(
            f.iter()
                .any(|f| f.path == "a.txt" && f.encoding.contains("split across files")),
            "{f:?}"
        );
        assert!(f.iter().any(|f| f.path == "z.txt"), "{f:?}");
        assert_clean(&f);
        // A piece alone is not a finding.
        assert!(added("a.txt", format!("see {b} there\n").as_bytes()).is_empty());
    }

    #[test]
    fn a_modified_file_is_judged_on_the_lines_it_gains() {
        let old = format!("keep\n{CANARY}\n");
        let moved = format!("{CANARY}\nkeep\nnew line\n");
        let r = r();
        let f = scan_changes(
            &[ChangedFile {
                path: "f",
                old: old.as_bytes(),
                new: moved.as_bytes(),
            }],
            &r,
        );
        // Known values are not suppressed by the old side: a moved line is not added, though.
        assert!(f.is_empty(), "{f:?}");
        let grown = format!("keep\n{CANARY}\nx={}\n", hex::encode(CANARY));
        let f = scan_changes(
            &[ChangedFile {
                path: "f",
                old: old.as_bytes(),
                new: grown.as_bytes(),
            }],
            &r,
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].line, f[0].encoding.as_str()), (3, "hex"));
        assert_eq!(f[0].redacted, "x=***");
    }

    // Real throwaway keys (generated once for these tests with openssl and ssh-keygen, used
    // nowhere).
    const RSA_PKCS1: &str = "\
MIIBOgIBAAJBANWssPZVEiO4jwl35zTDaqx/+BHsTjvSDrT/jWCCnv5/hgVzLBAI
rc7BpZ4jeCVdeQl9c7/jTQG6w3Hcm0FXuxsCAwEAAQJAKjBq0HiDmGH8fBYcpKJh
EaZCyOcrm0wic0JyG7guxHj0/L2nZdrgC8SMRd5Ywy0ZDM9veydu+1eD1NqVzgfY
gQIhAPTQLVUJ39ZE6kPXp2EH2RaBOkBkqJZI2T3fZ/QWyk/LAiEA33BBP1U/wNqL
90qqpgCEYWL7BjLQKBElRvgsvw16N/ECIQDgx5w37n8Vb+VhMUs/7kLHRRRFN6cL
hgvhoZUDK0HLDQIgDSx5LFrCX4SDLBli5laxd2x2kG7+ht477GtFeB47ToECIFRT
Jv4f31g3Ise1PL8pJYZs0iwXfdnPO+Z1nFeaFrqY
";
    const EC_SEC1: &str = "MHcCAQEEIKkQjgBL51Q3NIpwmIUmShdh9bysrZO+4puccKhSKCIIoAoGCCqGSM49
AwEHoUQDQgAEswURBFQnxdVqXwfVzxJAP54bvo/7fw8/GQBBoeknXJq4Eb4RLNvu
rD4oRE74XV1Bl9cl+Gne9X/6JNJm18vHUw==
";
    const ED25519_PKCS8: &str =
        "MC4CAQAwBQYDK2VwBCIEIF165CQIWgY8usweTcxbNCMqW8cF108AQ1eaufVC6qF9\n";
    const OPENSSH: &str = "\
b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW
QyNTUxOQAAACAwwqI0UzQ5Hyr/jVU35lEB+Mu4psDuAea0ZVplJ27ZbQAAAIg9zlF2Pc5R
dgAAAAtzc2gtZWQyNTUxOQAAACAwwqI0UzQ5Hyr/jVU35lEB+Mu4psDuAea0ZVplJ27ZbQ
AAAEBCvL/ybYGSyoE5LxwY/08Fivu0gCnV8dn9AikR+ILpiTDCojRTNDkfKv+NVTfmUQH4
y7imwO4B5rRlWmUnbtltAAAAAAECAwQF
";

    #[test]
    fn private_keys_are_found_by_shape_without_headers() {
        let der = STANDARD.decode(RSA_PKCS1.replace('\n', "")).unwrap();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            ("body", RSA_PKCS1.as_bytes().to_vec(), "base64"),
            (
                "one line",
                RSA_PKCS1.replace('\n', "").into_bytes(),
                "base64",
            ),
            (
                "escaped",
                format!("k = \"{}\"", RSA_PKCS1.replace('\n', "\\n")).into_bytes(),
                "base64",
            ),
            (
                "after junk",
                format!("QUJD{}", RSA_PKCS1).into_bytes(),
                "base64",
            ),
            (
                "shifted",
                STANDARD
                    .encode([b"\x07".as_slice(), &der].concat())
                    .into_bytes(),
                "base64",
            ),
            ("der", [b"\x00\x01".as_slice(), &der].concat(), "der"),
            ("hex", hex::encode(&der).into_bytes(), "hex"),
            ("ec", EC_SEC1.as_bytes().to_vec(), "base64"),
            ("ed25519", ED25519_PKCS8.as_bytes().to_vec(), "base64"),
            ("openssh", OPENSSH.as_bytes().to_vec(), "openssh"),
        ];
        let none = Redactor::new(Vec::<String>::new()).unwrap();
        for (name, content, enc) in cases {
            let f = scan_changes(
                &[ChangedFile {
                    path: "k",
                    old: b"",
                    new: &content,
                }],
                &none,
            );
            assert!(
                f.iter()
                    .any(|f| f.kind == "private-key" && f.encoding == enc),
                "{name}: {f:?}"
            );
            let json = serde_json::to_string(&f).unwrap();
            for key in [RSA_PKCS1, EC_SEC1, ED25519_PKCS8, OPENSSH] {
                assert!(!json.contains(&key[20..36]), "{name}: {json}");
            }
        }
        // A key the old version already had is not the change's doing.
        let f = scan_changes(
            &[ChangedFile {
                path: "k",
                old: RSA_PKCS1.as_bytes(),
                new: format!("# test key\n{RSA_PKCS1}").as_bytes(),
            }],
            &none,
        );
        assert!(f.is_empty(), "{f:?}");
    }

    /// Regression: a certificate extension shaped like PKCS#8 but naming a hash (seen in
    /// certifi's CA bundle when measuring false positives) is not a key.
    #[test]
    fn pkcs8_shape_needs_a_key_algorithm() {
        // SEQUENCE { INTEGER 0, SEQUENCE { OID sha1, NULL }, OCTET STRING (20 bytes) }
        let mut der = vec![0x30, 0x31, 0x02, 0x01, 0x00, 0x30, 0x09, 0x06, 0x05];
        der.extend_from_slice(&[0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00, 0x04, 0x20]);
        der.extend_from_slice(&[0x11; 32]);
        assert!(!der_private_key(&der));
        let ed = STANDARD.decode(ED25519_PKCS8.trim()).unwrap();
        assert!(der_private_key(&ed));
    }

    #[test]
    fn ordinary_content_is_not_a_finding() {
        let mut text = String::new();
        for i in 0..2000 {
            text.push_str(&format!(
                "fn f{i}() -> u64 {{ 0x{:016x} }} // {} {}\n",
                i * 7919,
                STANDARD.encode(format!("line {i} of some ordinary text")),
                hex::encode(format!("{i:08}"))
            ));
        }
        let f = added("src/lib.rs", text.as_bytes());
        assert!(f.is_empty(), "{f:?}");
    }

    #[test]
    fn the_path_is_reported_redacted() {
        let path = format!("dir/{CANARY}.txt");
        let f = added(&path, CANARY.as_bytes());
        assert!(!f.is_empty());
        assert!(f.iter().all(|f| f.path == "dir/***.txt"), "{f:?}");
    }
}
