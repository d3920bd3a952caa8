//! The edit engine behind `edit_file`: search/replace that forgives what models get wrong and
//! never applies an edit in the wrong place.
//!
//! The order of attempts is fixed: the exact text; the exact text with the file's line endings;
//! then line-based matching at growing tolerance — trailing whitespace, indentation shifted
//! uniformly (or tabs vs spaces), whitespace inside lines, a missing or extra blank line, and
//! finally a small typo. The first level that finds anything decides: one candidate is applied,
//! more than one is refused with their line numbers. A fuzzy (typo) candidate is applied only
//! when no other place in the file comes close. When nothing matches, the refusal shows the
//! closest region with line numbers so the model can copy the real text.
//!
//! The engine is pure (bytes in, bytes out); the caller writes the result. It keeps the file's
//! line endings, its final newline (or lack of one) and a UTF-8 byte-order mark, and refuses a
//! file that is not UTF-8 rather than risk corrupting it.

use std::fmt::Write as _;

use serde::Serialize;

/// How the old text was found in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchKind {
    /// Byte-for-byte.
    Exact,
    /// Exact once the old text uses the file's line endings (CRLF files).
    LineEndings,
    /// Lines equal but for trailing whitespace.
    TrailingWhitespace,
    /// Lines equal but for a uniform indentation shift or tabs vs spaces; the new text was
    /// re-indented to the file's real indentation.
    Indentation,
    /// Lines equal once runs of whitespace inside them are collapsed.
    Whitespace,
    /// Lines equal once blank lines are ignored (a blank line missing or extra).
    BlankLines,
    /// One line differs by a small typo; no other place in the file comes close.
    Typo,
}

/// An edit that was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The whole new file content.
    pub content: Vec<u8>,
    /// How the old text was found.
    pub kind: MatchKind,
    /// First line (1-based) of the replaced region in the old file.
    pub start_line: usize,
    /// Lines of the old file that were replaced.
    pub old_lines: usize,
    /// Lines of new text written in their place.
    pub new_lines: usize,
}

/// Why an edit was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum RefusalReason {
    /// The file is not valid UTF-8.
    NotUtf8,
    /// `old_text` is empty.
    EmptyOldText,
    /// `old_text` and `new_text` are the same.
    NoChange,
    /// `new_text` has CRLF line endings mixed with LF, or in a file of LF: its carriage
    /// returns may be content or line endings.
    MixedLineEndings,
    /// The old text matches more than one place.
    Ambiguous {
        /// First line (1-based) of each candidate.
        lines: Vec<usize>,
    },
    /// The old text is not in the file.
    NotFound {
        /// First line (1-based) of the closest region, if any region is close at all.
        closest: Option<usize>,
    },
}

/// An edit that was not applied, with a message the model can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The machine-readable reason.
    #[serde(flatten)]
    pub reason: RefusalReason,
    /// What to tell the model.
    pub message: String,
}

/// Longest line shown in a refusal.
const SHOW_LINE_CHARS: usize = 200;
/// Total edit distance a typo may have.
const TYPO_BUDGET: usize = 2;
/// A typo is applied only when every other window is at least this much further away.
const TYPO_MARGIN: usize = 3;

/// Apply `old_text` → `new_text` to `file`.
pub fn apply_edit(file: &[u8], old_text: &str, new_text: &str) -> Result<Applied, Refusal> {
    if old_text.is_empty() {
        return Err(refusal(
            RefusalReason::EmptyOldText,
            "old_text is empty; give the exact lines to replace (with a few lines of context), or use write_file to write a whole file".into(),
        ));
    }
    if old_text == new_text {
        return Err(refusal(
            RefusalReason::NoChange,
            "old_text and new_text are identical; nothing to change".into(),
        ));
    }
    let (bom, body) = match file.strip_prefix(b"\xEF\xBB\xBF") {
        Some(rest) => (true, rest),
        None => (false, file),
    };
    let Ok(text) = std::str::from_utf8(body) else {
        return Err(refusal(
            RefusalReason::NotUtf8,
            "the file is not valid UTF-8; edit_file refuses to change it so it cannot be corrupted (use write_file only if you mean to replace it entirely)".into(),
        ));
    };
    let eol = dominant_eol(text);
    // new_text is written with the file's line endings; where it has CRLF of its own, mixed
    // with LF or in a file of LF, its carriage returns may be content or line endings.
    let crlf = new_text.matches("\r\n").count();
    if crlf > 0 && (crlf < new_text.matches('\n').count() || eol == "\n") {
        return Err(refusal(
            RefusalReason::MixedLineEndings,
            format!(
                "new_text has CRLF line endings{} but the file's lines end in {}; nothing was changed. Give new_text with plain newlines: the file's own line endings are kept.",
                if eol == "\n" { "" } else { " mixed with LF" },
                if eol == "\n" { "LF" } else { "CRLF" },
            ),
        ));
    }
    let mut applied = find_and_apply(text, old_text, new_text, eol)?;
    if bom {
        let mut with_bom = b"\xEF\xBB\xBF".to_vec();
        with_bom.extend_from_slice(&applied.content);
        applied.content = with_bom;
    }
    Ok(applied)
}

fn refusal(reason: RefusalReason, message: String) -> Refusal {
    Refusal { reason, message }
}

fn dominant_eol(text: &str) -> &'static str {
    let crlf = text.matches("\r\n").count();
    let lf = text.matches('\n').count() - crlf;
    if crlf > lf { "\r\n" } else { "\n" }
}

fn to_eol(s: &str, eol: &str) -> String {
    let lf = s.replace("\r\n", "\n");
    if eol == "\n" {
        lf
    } else {
        lf.replace('\n', eol)
    }
}

fn line_of(text: &str, byte: usize) -> usize {
    text.as_bytes()[..byte]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Start offsets of every (possibly overlapping) occurrence.
fn occurrences(text: &str, needle: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find(needle) {
        out.push(from + i);
        // Step one character so overlapping occurrences count too.
        let step = text[from + i..].chars().next().map_or(1, char::len_utf8);
        from += i + step;
        if from > text.len() {
            break;
        }
    }
    out
}

fn find_and_apply(text: &str, old: &str, new: &str, eol: &str) -> Result<Applied, Refusal> {
    // 1. Exact, then exact with the file's line endings.
    let mut tried = vec![(old.to_string(), MatchKind::Exact)];
    let converted = to_eol(old, eol);
    if converted != old {
        tried.push((converted, MatchKind::LineEndings));
    }
    for (needle, kind) in tried {
        let found = occurrences(text, &needle);
        match found.len() {
            0 => continue,
            1 => {
                if let Some(lines) = indentation_twins(text, found[0], &needle) {
                    return Err(ambiguous(lines));
                }
                let (at, end) =
                    absorb_edge_blanks(text, found[0], found[0] + needle.len(), old, new);
                let replacement = to_eol(new, eol);
                let mut content = String::with_capacity(text.len() + replacement.len());
                content.push_str(&text[..at]);
                content.push_str(&replacement);
                content.push_str(&text[end..]);
                return Ok(Applied {
                    content: content.into_bytes(),
                    kind,
                    start_line: line_of(text, at),
                    old_lines: count_lines(&text[at..end]),
                    new_lines: count_lines(&replacement),
                });
            }
            _ => {
                let lines: Vec<usize> = found.iter().map(|&b| line_of(text, b)).collect();
                return Err(ambiguous(lines));
            }
        }
    }
    // 2. Line-based tolerant matching.
    let file = FileLines::new(text);
    let old_l = split_lines(old);
    let new_l = split_lines(new);
    if old_l.lines.iter().all(|l| l.trim().is_empty()) {
        return Err(refusal(
            RefusalReason::NotFound { closest: None },
            "old_text is only whitespace and is not in the file exactly; give the lines around the place to change".into(),
        ));
    }
    for level in LEVELS {
        let cands = find_candidates(&file, &old_l.lines, *level);
        match cands.len() {
            0 => continue,
            1 => {
                let c = &cands[0];
                return apply_candidate(text, &file, &old_l, &new_l, c, level.kind, eol);
            }
            _ => return Err(ambiguous(cands.iter().map(|c| c.start + 1).collect())),
        }
    }
    // 3. A small typo, only when clearly the one place meant.
    match typo_candidate(&file, &old_l.lines) {
        Typo::One(c) => {
            return apply_candidate(text, &file, &old_l, &new_l, &c, MatchKind::Typo, eol);
        }
        Typo::Ambiguous(lines) => return Err(ambiguous(lines)),
        Typo::None => {}
    }
    Err(not_found(&file, &old_l.lines))
}

/// For an exact match of whole lines: the start lines of every place where the same lines
/// appear at another indentation, if there are any. Models often get indentation wrong, so an
/// exact match with an indentation-shifted twin elsewhere is ambiguous.
fn indentation_twins(text: &str, at: usize, needle: &str) -> Option<Vec<usize>> {
    let line_start = at == 0 || text[..at].ends_with('\n');
    let lines = split_lines(needle);
    let nonblank = lines.lines.iter().filter(|l| !l.trim().is_empty()).count();
    if !line_start || nonblank == 0 {
        return None;
    }
    let file = FileLines::new(text);
    let level = Level {
        norm: Norm::Trim,
        skip_blanks: false,
        kind: MatchKind::Indentation,
    };
    let cands = find_candidates(&file, &lines.lines, level);
    if cands.len() <= 1 {
        return None;
    }
    let exact_line = line_of(text, at);
    let exact_end = exact_line + lines.lines.len();
    // Windows overlapping the exact match (runs of closing brackets shifted by one line) are
    // not other places.
    let mut starts: Vec<usize> = cands
        .iter()
        .map(|c| c.start + 1)
        .filter(|&s| s == exact_line || s + lines.lines.len() <= exact_line || s >= exact_end)
        .collect();
    if starts.len() <= 1 {
        return None;
    }
    if !starts.contains(&exact_line) {
        starts.push(exact_line);
    }
    starts.sort_unstable();
    Some(starts)
}

/// Blank lines at the start and at the end of a text (whole lines only).
fn edge_blank_lines(s: &str) -> (usize, usize) {
    let norm = s.replace("\r\n", "\n");
    if norm.trim().is_empty() {
        return (0, 0);
    }
    let lead = norm
        .split_inclusive('\n')
        .take_while(|l| l.ends_with('\n') && l.trim().is_empty())
        .count();
    let trail = match norm.strip_suffix('\n') {
        Some(body) => body
            .split('\n')
            .rev()
            .take_while(|l| l.trim().is_empty())
            .count(),
        None => 0,
    };
    (lead, trail)
}

/// When new_text begins (or ends) with blank lines that old_text lacks and the file has exactly
/// those blank lines just before (after) the match, the model left them out of old_text: they
/// are context, and the match grows over them so they are not doubled.
fn absorb_edge_blanks(
    text: &str,
    mut start: usize,
    mut end: usize,
    old: &str,
    new: &str,
) -> (usize, usize) {
    let (old_lead, old_trail) = edge_blank_lines(old);
    let (mut new_lead, mut new_trail) = edge_blank_lines(new);
    let new_norm = new.replace("\r\n", "\n");
    if new_norm.trim() == old.replace("\r\n", "\n").trim() {
        // The edit adds or removes nothing but blank lines: those blank lines are the change
        // itself, not context, and absorbing them would make the edit a silent no-op.
        return (start, end);
    }
    if !new_norm.is_empty() && new_norm.trim().is_empty() && new_norm.ends_with('\n') {
        // Only blank lines are left: those beyond the old text's own edge blank lines are
        // context the old text missed, absorbed before the match first.
        let blanks = new_norm.matches('\n').count();
        let extra = blanks.saturating_sub(old_lead + old_trail);
        let before = text[..start]
            .strip_suffix('\n')
            .map_or(0, |t| {
                t.split('\n')
                    .rev()
                    .take_while(|l| l.trim().is_empty())
                    .count()
            })
            .min(if text[..start].ends_with('\n') {
                extra
            } else {
                0
            });
        new_lead = old_lead + before;
        new_trail = old_trail + (extra - before);
    }
    if new_lead > old_lead && (start == 0 || text[..start].ends_with('\n')) {
        let mut t = start;
        let mut ok = true;
        for _ in 0..new_lead - old_lead {
            if t == 0 {
                ok = false;
                break;
            }
            let prev = text[..t - 1].rfind('\n').map_or(0, |i| i + 1);
            if text[prev..t].trim().is_empty() {
                t = prev;
            } else {
                ok = false;
                break;
            }
        }
        if ok {
            start = t;
        }
    }
    if new_trail > old_trail && text[..end].ends_with('\n') && old.ends_with('\n') {
        let mut t = end;
        let mut ok = true;
        for _ in 0..new_trail - old_trail {
            let next = text[t..].find('\n').map(|i| t + i + 1);
            match next {
                Some(n) if text[t..n].trim().is_empty() => t = n,
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            end = t;
        }
    }
    (start, end)
}

fn count_lines(s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        s.matches('\n').count() + usize::from(!s.ends_with('\n'))
    }
}

fn ambiguous(mut lines: Vec<usize>) -> Refusal {
    lines.dedup();
    let shown: Vec<String> = lines.iter().take(20).map(|l| l.to_string()).collect();
    let more = if lines.len() > 20 {
        format!(" and {} more", lines.len() - 20)
    } else {
        String::new()
    };
    refusal(
        RefusalReason::Ambiguous {
            lines: lines.clone(),
        },
        format!(
            "old_text matches {} places (starting at lines {}{more}); nothing was changed. Include more surrounding lines in old_text so it matches exactly one place.",
            lines.len(),
            shown.join(", ")
        ),
    )
}

/// The file split into lines, each with its byte range (terminator included).
struct FileLines<'a> {
    lines: Vec<&'a str>,
    starts: Vec<usize>,
    ends: Vec<usize>,
    has_term: Vec<bool>,
}

impl<'a> FileLines<'a> {
    fn new(text: &'a str) -> Self {
        let mut lines = Vec::new();
        let mut starts = Vec::new();
        let mut ends = Vec::new();
        let mut has_term = Vec::new();
        let mut pos = 0;
        while pos < text.len() {
            let (content_end, next) = match text[pos..].find('\n') {
                Some(i) => (pos + i, pos + i + 1),
                None => (text.len(), text.len()),
            };
            let content = &text[pos..content_end];
            lines.push(content.strip_suffix('\r').unwrap_or(content));
            starts.push(pos);
            ends.push(next);
            has_term.push(next > content_end);
            pos = next;
        }
        Self {
            lines,
            starts,
            ends,
            has_term,
        }
    }
}

/// The model's text as lines, with whether it ended in a newline.
struct TextLines {
    lines: Vec<String>,
    final_newline: bool,
}

fn split_lines(s: &str) -> TextLines {
    let norm = s.replace("\r\n", "\n");
    let final_newline = norm.ends_with('\n');
    let body = norm.strip_suffix('\n').unwrap_or(&norm);
    let lines = if norm.is_empty() {
        Vec::new()
    } else {
        body.split('\n').map(str::to_string).collect()
    };
    TextLines {
        lines,
        final_newline,
    }
}

#[derive(Clone, Copy)]
enum Norm {
    /// Trailing whitespace ignored.
    TrimEnd,
    /// Leading and trailing whitespace ignored; indentation must shift uniformly.
    Trim,
    /// All whitespace runs collapsed; indentation must shift uniformly.
    Collapse,
}

#[derive(Clone, Copy)]
struct Level {
    norm: Norm,
    skip_blanks: bool,
    kind: MatchKind,
}

const LEVELS: &[Level] = &[
    Level {
        norm: Norm::TrimEnd,
        skip_blanks: false,
        kind: MatchKind::TrailingWhitespace,
    },
    Level {
        norm: Norm::Trim,
        skip_blanks: false,
        kind: MatchKind::Indentation,
    },
    Level {
        norm: Norm::Collapse,
        skip_blanks: false,
        kind: MatchKind::Whitespace,
    },
    Level {
        norm: Norm::Collapse,
        skip_blanks: true,
        kind: MatchKind::BlankLines,
    },
];

fn normalize(line: &str, norm: Norm) -> String {
    match norm {
        Norm::TrimEnd => line.trim_end().to_string(),
        Norm::Trim => line.trim().to_string(),
        Norm::Collapse => line.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

/// A place in the file the old text matches.
#[derive(Debug, Clone)]
struct Candidate {
    /// First file line (0-based) of the region.
    start: usize,
    /// One past the last file line of the region.
    end: usize,
    /// (old line, file line) pairs of matched non-blank lines.
    pairs: Vec<(usize, usize)>,
    /// How new lines are re-indented.
    indent: IndentMap,
}

/// How indentation of the old text maps to the file's.
#[derive(Debug, Clone, PartialEq)]
enum IndentMap {
    Same,
    /// The file has this prefix on top of the old text's indentation.
    Add(String),
    /// The old text has this prefix on top of the file's indentation.
    Remove(String),
    /// Indentation differs in characters (tabs vs spaces): widths shift by `delta`.
    Width {
        tab: usize,
        delta: isize,
        tabs: bool,
    },
}

fn leading(s: &str) -> &str {
    &s[..s.len() - s.trim_start().len()]
}

fn width(ws: &str, tab: usize) -> usize {
    ws.chars().fold(0, |w, c| {
        if c == '\t' {
            (w / tab + 1) * tab
        } else {
            w + 1
        }
    })
}

fn indent_map(file: &FileLines, old: &[String], pairs: &[(usize, usize)]) -> Option<IndentMap> {
    let ws: Vec<(&str, &str)> = pairs
        .iter()
        .map(|&(o, f)| (leading(file.lines[f]), leading(&old[o])))
        .collect();
    if ws.iter().all(|(f, o)| f == o) {
        return Some(IndentMap::Same);
    }
    let (f0, o0) = ws.first()?;
    if let Some(p) = f0.strip_suffix(o0)
        && ws
            .iter()
            .all(|(f, o)| f.len() >= o.len() && f.strip_suffix(o) == Some(p))
    {
        return Some(IndentMap::Add(p.to_string()));
    }
    if let Some(p) = o0.strip_suffix(f0)
        && ws
            .iter()
            .all(|(f, o)| o.len() >= f.len() && o.strip_suffix(f) == Some(p))
    {
        return Some(IndentMap::Remove(p.to_string()));
    }
    // Render with tabs where most indented lines of the region use them.
    let with_tabs = ws.iter().filter(|(f, _)| f.contains('\t')).count();
    let with_spaces = ws
        .iter()
        .filter(|(f, _)| !f.is_empty() && !f.contains('\t'))
        .count();
    let tabs = with_tabs > 0 && with_tabs >= with_spaces;
    for tab in [4usize, 8, 2] {
        let d0 = width(f0, tab) as isize - width(o0, tab) as isize;
        if ws
            .iter()
            .all(|(f, o)| width(f, tab) as isize - width(o, tab) as isize == d0)
        {
            return Some(IndentMap::Width {
                tab,
                delta: d0,
                tabs,
            });
        }
    }
    None
}

fn nonblank(lines: &[String]) -> Vec<usize> {
    (0..lines.len())
        .filter(|&i| !lines[i].trim().is_empty())
        .collect()
}

fn find_candidates(file: &FileLines, old: &[String], level: Level) -> Vec<Candidate> {
    let fkeys: Vec<String> = file
        .lines
        .iter()
        .map(|l| normalize(l, level.norm))
        .collect();
    let okeys: Vec<String> = old.iter().map(|l| normalize(l, level.norm)).collect();
    let mut out = Vec::new();
    if !level.skip_blanks {
        let m = old.len();
        if m == 0 || m > file.lines.len() {
            return out;
        }
        for s in 0..=file.lines.len() - m {
            if (0..m).all(|i| fkeys[s + i] == okeys[i]) {
                let pairs: Vec<(usize, usize)> = (0..m)
                    .filter(|&i| !old[i].trim().is_empty())
                    .map(|i| (i, s + i))
                    .collect();
                let indent = match level.norm {
                    Norm::TrimEnd => Some(IndentMap::Same),
                    _ => indent_map(file, old, &pairs),
                };
                if let Some(indent) = indent {
                    out.push(Candidate {
                        start: s,
                        end: s + m,
                        pairs,
                        indent,
                    });
                }
            }
        }
        return out;
    }
    let on = nonblank(old);
    let fnb: Vec<usize> = (0..file.lines.len())
        .filter(|&i| !file.lines[i].trim().is_empty())
        .collect();
    if on.is_empty() || on.len() > fnb.len() {
        return out;
    }
    for k in 0..=fnb.len() - on.len() {
        if (0..on.len()).all(|i| fkeys[fnb[k + i]] == okeys[on[i]]) {
            let pairs: Vec<(usize, usize)> = (0..on.len()).map(|i| (on[i], fnb[k + i])).collect();
            let Some(indent) = indent_map(file, old, &pairs) else {
                continue;
            };
            let (start, end) = extend_blanks(file, old, &on, fnb[k], fnb[k + on.len() - 1] + 1);
            out.push(Candidate {
                start,
                end,
                pairs,
                indent,
            });
        }
    }
    out
}

/// Grow a region over the blank lines the old text had before its first and after its last
/// non-blank line, as far as the file has blank lines there.
fn extend_blanks(
    file: &FileLines,
    old: &[String],
    on: &[usize],
    mut start: usize,
    mut end: usize,
) -> (usize, usize) {
    let lead = on.first().copied().unwrap_or(0);
    let trail = old.len() - 1 - on.last().copied().unwrap_or(0);
    for _ in 0..lead {
        if start > 0 && file.lines[start - 1].trim().is_empty() {
            start -= 1;
        }
    }
    for _ in 0..trail {
        if end < file.lines.len() && file.lines[end].trim().is_empty() {
            end += 1;
        }
    }
    (start, end)
}

enum Typo {
    None,
    One(Candidate),
    Ambiguous(Vec<usize>),
}

/// Windows of the file (same non-blank lines as the old text, blank lines ignored) whose
/// lines all match but for a small total edit distance.
fn typo_candidate(file: &FileLines, old: &[String]) -> Typo {
    let on = nonblank(old);
    // At least one other line must match to anchor the place; a typo in a one-line snippet
    // is indistinguishable from different code.
    if on.len() < 2 {
        return Typo::None;
    }
    let fnb: Vec<usize> = (0..file.lines.len())
        .filter(|&i| !file.lines[i].trim().is_empty())
        .collect();
    if on.len() > fnb.len() {
        return Typo::None;
    }
    let fkeys: Vec<String> = file
        .lines
        .iter()
        .map(|l| normalize(l, Norm::Collapse))
        .collect();
    let okeys: Vec<String> = old.iter().map(|l| normalize(l, Norm::Collapse)).collect();
    let limit = TYPO_BUDGET + TYPO_MARGIN;
    // (distance, start index in fnb)
    let mut near: Vec<(usize, usize, bool)> = Vec::new();
    for k in 0..=fnb.len() - on.len() {
        let mut dist = 0;
        let mut differing = 0;
        let mut acceptable = true;
        for i in 0..on.len() {
            let f = &fkeys[fnb[k + i]];
            let o = &okeys[on[i]];
            if f == o {
                continue;
            }
            differing += 1;
            if differing > 2 {
                dist = limit + 1;
                break;
            }
            match bounded_levenshtein(f, o, limit - dist) {
                Some(d) => {
                    dist += d;
                    if !typo_like(f, o) {
                        acceptable = false;
                    }
                }
                None => {
                    dist = limit + 1;
                    break;
                }
            }
        }
        if dist <= limit {
            let ok = acceptable && differing == 1 && dist <= TYPO_BUDGET;
            near.push((dist, k, ok));
        }
    }
    let Some(&(best, k, ok)) = near.iter().min_by_key(|n| n.0) else {
        return Typo::None;
    };
    let rivals: Vec<&(usize, usize, bool)> = near
        .iter()
        .filter(|n| n.1 != k && n.0 < best + TYPO_MARGIN)
        .collect();
    if !rivals.is_empty() {
        if best <= TYPO_BUDGET {
            let mut lines: Vec<usize> = std::iter::once(k)
                .chain(rivals.iter().map(|r| r.1))
                .map(|k| fnb[k] + 1)
                .collect();
            lines.sort_unstable();
            return Typo::Ambiguous(lines);
        }
        return Typo::None;
    }
    if !ok {
        return Typo::None;
    }
    let pairs: Vec<(usize, usize)> = (0..on.len()).map(|i| (on[i], fnb[k + i])).collect();
    let Some(indent) = indent_map(file, old, &pairs) else {
        return Typo::None;
    };
    let (start, end) = extend_blanks(file, old, &on, fnb[k], fnb[k + on.len() - 1] + 1);
    // Blank lines inside the region must correspond one to one, or this is not a typo.
    if end - start != old.len() {
        return Typo::None;
    }
    Typo::One(Candidate {
        start,
        end,
        pairs,
        indent,
    })
}

/// Whether the difference between two lines looks like a slip of letters, not different code:
/// the line is long enough to be recognisable and no digit or symbol differs.
fn typo_like(f: &str, o: &str) -> bool {
    if f.chars().count() < 12 {
        return false;
    }
    let prefix = f.chars().zip(o.chars()).take_while(|(a, b)| a == b).count();
    let suffix = f
        .chars()
        .rev()
        .zip(o.chars().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let fd: String = f
        .chars()
        .skip(prefix)
        .take(f.chars().count().saturating_sub(prefix + suffix))
        .collect();
    let od: String = o
        .chars()
        .skip(prefix)
        .take(o.chars().count().saturating_sub(prefix + suffix))
        .collect();
    fd.chars().chain(od.chars()).all(char::is_alphabetic)
}

/// Levenshtein distance over chars, or `None` when it exceeds `max`.
fn bounded_levenshtein(a: &str, b: &str, max: usize) -> Option<usize> {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > max {
        return None;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        let mut row_min = cur[0];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            row_min = row_min.min(cur[j]);
        }
        if row_min > max {
            return None;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    let d = prev[b.len()];
    (d <= max).then_some(d)
}

/// Inline whitespace conversion seen between the old text and the file.
#[derive(Clone, Copy, PartialEq)]
enum Inline {
    Keep,
    SpacesToTabs,
    TabsToSpaces,
}

fn inline_map(file: &FileLines, old: &[String], pairs: &[(usize, usize)]) -> Inline {
    // Old text with tabs against a region without any: the tabs were the model's, and the
    // file's style is spaces throughout.
    if pairs.iter().all(|&(_, f)| !file.lines[f].contains('\t'))
        && pairs.iter().any(|&(o, _)| old[o].contains('\t'))
    {
        return Inline::TabsToSpaces;
    }
    for &(o, f) in pairs {
        let fr = file.lines[f].trim();
        let or = old[o].trim();
        if fr == or {
            continue;
        }
        if fr.contains('\t') && or.replace("    ", "\t") == fr {
            return Inline::SpacesToTabs;
        }
        if or.contains('\t') && or.replace('\t', "    ") == fr {
            return Inline::TabsToSpaces;
        }
    }
    Inline::Keep
}

fn reindent(line: &str, map: &IndentMap, inline: Inline) -> String {
    if line.trim().is_empty() {
        return match (inline, map) {
            // A whitespace-only line is indentation too, in the file's characters.
            (_, IndentMap::Width { tab, delta, tabs }) if !line.is_empty() => {
                let w = (width(line, *tab) as isize + delta).max(0) as usize;
                if *tabs {
                    format!("{}{}", "\t".repeat(w / tab), " ".repeat(w % tab))
                } else {
                    " ".repeat(w)
                }
            }
            (Inline::TabsToSpaces, _) => line.replace('\t', "    "),
            _ => line.to_string(),
        };
    }
    let ws = leading(line);
    let rest = &line[ws.len()..];
    let rest = match inline {
        Inline::Keep => rest.to_string(),
        Inline::SpacesToTabs => rest.replace("    ", "\t"),
        Inline::TabsToSpaces => rest.replace('\t', "    "),
    };
    let ws = match map {
        IndentMap::Same => ws.to_string(),
        IndentMap::Add(p) => format!("{p}{ws}"),
        IndentMap::Remove(p) => match ws.strip_prefix(p.as_str()) {
            Some(r) => r.to_string(),
            None => String::new(),
        },
        IndentMap::Width { tab, delta, tabs } => {
            let w = (width(ws, *tab) as isize + delta).max(0) as usize;
            if *tabs {
                format!("{}{}", "\t".repeat(w / tab), " ".repeat(w % tab))
            } else {
                " ".repeat(w)
            }
        }
    };
    let ws = match (inline, map) {
        (_, IndentMap::Width { .. }) => ws,
        (Inline::TabsToSpaces, _) => ws.replace('\t', "    "),
        (Inline::SpacesToTabs, _) => ws.replace("    ", "\t"),
        (Inline::Keep, _) => ws,
    };
    format!("{ws}{rest}")
}

fn apply_candidate(
    text: &str,
    file: &FileLines,
    old: &TextLines,
    new: &TextLines,
    c: &Candidate,
    kind: MatchKind,
    eol: &str,
) -> Result<Applied, Refusal> {
    let inline = inline_map(file, &old.lines, &c.pairs);
    let guard = WhitespaceGuard::new(file, c, inline);
    // Multi-line strings the new text opens: the file says nothing about their indentation.
    let mut quoted = 0u8;
    let kind = if kind != MatchKind::Typo && c.indent != IndentMap::Same {
        MatchKind::Indentation
    } else {
        kind
    };
    // A new line identical to an old line the model meant to keep becomes that line as the
    // file has it, so context survives exactly whatever the model got wrong about it.
    // Where a line differs only by trailing whitespace, the model's new line is taken as
    // written (the trailing whitespace may be the change itself).
    let direct = c.end - c.start == old.lines.len();
    let mut cursor = 0;
    let mut blank_cursor = 0;
    let mut out_lines: Vec<String> = Vec::with_capacity(new.lines.len());
    for nl in &new.lines {
        if nl.trim().is_empty() {
            // A blank line of the old text kept in the new: keep the file's own blank line
            // (its whitespace), when lines map one to one.
            let same = direct
                .then(|| {
                    (blank_cursor..old.lines.len())
                        .find(|&i| old.lines[i] == *nl && file.lines[c.start + i].trim().is_empty())
                })
                .flatten();
            match same {
                Some(i) => {
                    out_lines.push(file.lines[c.start + i].to_string());
                    blank_cursor = i + 1;
                }
                None => {
                    if guard.uncertain(nl, quoted != 0) {
                        return Err(uncertain_whitespace(
                            c.start + 1,
                            nl,
                            guard.to_tabs || guard.inline_to_tabs,
                        ));
                    }
                    out_lines.push(reindent(nl, &c.indent, inline));
                }
            }
            continue;
        }
        let same = c
            .pairs
            .iter()
            .skip(cursor)
            .position(|&(o, _)| old.lines[o] == *nl)
            .map(|p| p + cursor);
        match same {
            Some(p)
                if old.lines[c.pairs[p].0].trim_end() != file.lines[c.pairs[p].1].trim_end() =>
            {
                out_lines.push(file.lines[c.pairs[p].1].to_string());
                cursor = p + 1;
                blank_cursor = blank_cursor.max(c.pairs[p].0 + 1);
            }
            Some(p) => {
                // The model had this line right but for trailing whitespace: keep its line.
                out_lines.push(nl.clone());
                cursor = p + 1;
                blank_cursor = blank_cursor.max(c.pairs[p].0 + 1);
            }
            None => {
                if guard.uncertain(nl, quoted != 0) {
                    return Err(uncertain_whitespace(
                        c.start + 1,
                        nl,
                        guard.to_tabs || guard.inline_to_tabs,
                    ));
                }
                out_lines.push(reindent(nl, &c.indent, inline));
            }
        }
        quoted ^= quote_toggles(nl);
    }
    let (mut start, mut end) = (c.start, c.end);
    let old_lead = old.lines.iter().take_while(|l| l.trim().is_empty()).count();
    let new_lead = new.lines.iter().take_while(|l| l.trim().is_empty()).count();
    let old_trail = old
        .lines
        .iter()
        .rev()
        .take_while(|l| l.trim().is_empty())
        .count();
    let new_trail = new
        .lines
        .iter()
        .rev()
        .take_while(|l| l.trim().is_empty())
        .count();
    if new_lead > old_lead
        && start >= new_lead - old_lead
        && (start - (new_lead - old_lead)..start).all(|i| file.lines[i].trim().is_empty())
    {
        start -= new_lead - old_lead;
    }
    if new_trail > old_trail
        && old.final_newline
        && end + (new_trail - old_trail) <= file.lines.len()
        && (end..end + (new_trail - old_trail))
            .all(|i| file.lines[i].trim().is_empty() && file.has_term[i])
    {
        end += new_trail - old_trail;
    }
    let region_start = file.starts[start];
    let region_end = file.ends[end - 1];
    let last_has_term = file.has_term[end - 1];
    let mut replacement = out_lines.join(eol);
    let terminate = if last_has_term {
        // Lines are whole: the region's terminator stays unless the model removed the file's
        // final newline on purpose.
        new.final_newline || !old.final_newline || end < file.lines.len()
    } else {
        // The file ends without a newline here: add one only when the model did so explicitly.
        new.final_newline && !old.final_newline
    };
    if !out_lines.is_empty() && terminate {
        replacement.push_str(eol);
    }
    let mut content = String::with_capacity(text.len() + replacement.len());
    content.push_str(&text[..region_start]);
    content.push_str(&replacement);
    content.push_str(&text[region_end..]);
    Ok(Applied {
        content: content.into_bytes(),
        kind,
        start_line: start + 1,
        old_lines: end - start,
        new_lines: out_lines.len(),
    })
}

/// Lines either side of a match whose indentation tells the local style.
const NEAR_LINES: usize = 10;

/// When the model's whitespace stands for other characters in the file (spaces for tabs, or
/// tabs for spaces), which new lines can be converted with certainty.
///
/// A new line has no counterpart in the file, so the conversion is a guess about what the
/// model meant; the guess is taken only where the file around the match leaves no doubt.
struct WhitespaceGuard {
    /// The model wrote spaces where the file has tabs.
    to_tabs: bool,
    /// The model wrote tabs where the file has spaces.
    to_spaces: bool,
    /// Inline runs of four spaces are turned into tabs.
    inline_to_tabs: bool,
    /// Tab width of the indentation map.
    tab: usize,
    /// Some line near the match is indented with spaces.
    near_space_indent: bool,
    /// Some line near the match has a tab.
    near_tab: bool,
    /// Some line near the match is indented with a tab.
    near_tab_indent: bool,
    /// Some line near the match has a run of four spaces after its first character.
    near_inline_spaces: bool,
}

impl WhitespaceGuard {
    fn new(file: &FileLines, c: &Candidate, inline: Inline) -> Self {
        let (to_tabs, to_spaces, tab) = match c.indent {
            IndentMap::Width { tab, tabs, .. } => (tabs, !tabs, tab),
            _ => (false, false, 4),
        };
        let (from, to) = string_span(file, c.start, c.end);
        let near = &file.lines[from.min(c.start.saturating_sub(NEAR_LINES))
            ..to.max((c.end + NEAR_LINES).min(file.lines.len()))];
        Self {
            to_tabs,
            to_spaces: to_spaces || inline == Inline::TabsToSpaces,
            inline_to_tabs: inline == Inline::SpacesToTabs,
            tab,
            near_space_indent: near.iter().any(|l| {
                let ws = leading(l);
                // Two spaces anywhere in the indentation: `"\t    "` in a file that indents
                // with tabs and spaces both is spaces as much as `"    "` is.
                !l.trim().is_empty() && (ws.contains("  ") || ws.contains(" \t"))
            }),
            near_tab: near.iter().any(|l| l.contains('\t')),
            near_tab_indent: near.iter().any(|l| leading(l).contains('\t')),
            near_inline_spaces: near.iter().any(|l| l.trim().contains("    ")),
        }
    }

    /// Whether converting the whitespace of `line`, a new line of the model's, is a guess.
    /// `quoted` says the line is inside a multi-line string the new text opened, where
    /// indentation is content the file around the match says nothing about.
    fn uncertain(&self, line: &str, quoted: bool) -> bool {
        let rest = line.trim_start();
        let ws = &line[..line.len() - rest.len()];
        let inner = rest.trim_end();
        if self.to_tabs {
            // Spaces standing for tabs: a space indentation of less than one tab can only be
            // spaces; from one tab's width up it is tabs only where the file around the match
            // never indents with spaces, the width is whole tabs, and the line is code, not
            // the inside of a multi-line string.
            let spaces = ws.chars().filter(|&ch| ch == ' ').count();
            let guessed =
                spaces >= self.tab && (self.near_space_indent || quoted || spaces % self.tab != 0);
            // A run of spaces inside the line may have been a tab or spaces.
            let inner_run =
                inner.contains("    ") && (!self.inline_to_tabs || self.near_inline_spaces);
            if guessed || inner_run {
                return true;
            }
        }
        if self.to_spaces {
            // Tabs standing for spaces: a tab in a new line may be a real tab where the file
            // has a tab near the match (or in the multi-line string the match is in); and
            // where the file there indents with tabs too, a new line's spaces may stand for
            // tabs the model left as spaces.
            let spaces = ws.chars().filter(|&ch| ch == ' ').count();
            if (line.contains('\t') && self.near_tab)
                || (spaces >= self.tab && self.near_tab_indent)
            {
                return true;
            }
        }
        if self.inline_to_tabs && !self.to_tabs && inner.contains("    ") && self.near_inline_spaces
        {
            return true;
        }
        false
    }
}

/// The lines of the multi-line string the region `start..end` lies in, from the line after
/// its opening (whose indentation is the code's) to its closing line (the region itself when it is not inside one): a string's
/// indentation follows its own style, which any line of it tells.
fn string_span(file: &FileLines, start: usize, end: usize) -> (usize, usize) {
    // Where the last string open before the region was opened.
    let mut state = 0u8;
    let mut opened = 0;
    for (i, l) in file.lines[..start].iter().enumerate() {
        let next = state ^ quote_toggles(l);
        if state == 0 && next != 0 {
            opened = i;
        }
        state = next;
    }
    if state == 0 {
        return (start, end);
    }
    for (i, l) in file.lines.iter().enumerate().skip(start) {
        state ^= quote_toggles(l);
        if state == 0 {
            return ((opened + 1).min(start), (i + 1).max(end));
        }
    }
    ((opened + 1).min(start), file.lines.len())
}

/// Bits of the multi-line string delimiters a line opens or closes: a backtick (Go raw
/// strings, JavaScript templates, Markdown fences), `"""` and `'''` (Python).
fn quote_toggles(line: &str) -> u8 {
    let mut bits = 0;
    if line.matches('`').count() % 2 == 1 {
        bits |= 1;
    }
    if line.matches("\"\"\"").count() % 2 == 1 {
        bits |= 2;
    }
    if line.matches("'''").count() % 2 == 1 {
        bits |= 4;
    }
    bits
}

fn uncertain_whitespace(line: usize, new_line: &str, spaces_for_tabs: bool) -> Refusal {
    let shown: String = new_line.trim().chars().take(SHOW_LINE_CHARS).collect();
    let (model, file) = if spaces_for_tabs {
        ("spaces", "tabs")
    } else {
        ("tabs", "spaces")
    };
    refusal(
        RefusalReason::Ambiguous { lines: vec![line] },
        format!(
            "old_text matches at line {line} only if its {model} stand for the file's {file}, and the new line `{shown}` has {model} that may be tabs or spaces; nothing was changed. Copy old_text and new_text with the file's own whitespace."
        ),
    )
}

/// Character-bigram similarity of two lines, 0.0..=1.0.
fn similarity(a: &str, b: &str) -> f64 {
    let a = a.trim();
    let b = b.trim();
    if a == b {
        return 1.0;
    }
    if a.len() < 2 || b.len() < 2 {
        return 0.0;
    }
    let grams = |s: &str| -> Vec<(char, char)> {
        let c: Vec<char> = s.chars().collect();
        let mut g: Vec<(char, char)> = c.windows(2).map(|w| (w[0], w[1])).collect();
        g.sort_unstable();
        g
    };
    let (ga, gb) = (grams(a), grams(b));
    let (mut i, mut j, mut common) = (0, 0, 0);
    while i < ga.len() && j < gb.len() {
        match ga[i].cmp(&gb[j]) {
            std::cmp::Ordering::Equal => {
                common += 1;
                i += 1;
                j += 1;
            }
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
        }
    }
    2.0 * common as f64 / (ga.len() + gb.len()) as f64
}

fn not_found(file: &FileLines, old: &[String]) -> Refusal {
    let on = nonblank(old);
    let m = old.len().max(1);
    let mut best: Option<(f64, usize)> = None;
    if !file.lines.is_empty() && !on.is_empty() {
        // Only windows whose first lines resemble the old text are scored in full.
        let first = &old[on[0]];
        for s in 0..file.lines.len() {
            let quick = similarity(file.lines[s], first);
            if quick < 0.3 && on.len() > 1 {
                continue;
            }
            let mut score = 0.0;
            for &o in &on {
                let f = s + o - on[0];
                if f < file.lines.len() {
                    score += similarity(file.lines[f], &old[o]);
                }
            }
            let score = score / on.len() as f64;
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, s));
            }
        }
    }
    let mut msg = String::from("old_text was not found in the file; nothing was changed.");
    let closest = match best {
        Some((score, s)) if score >= 0.4 => {
            let from = s.saturating_sub(2);
            let to = (s + m + 2).min(file.lines.len());
            let _ = writeln!(
                msg,
                " The closest region is lines {}-{}; copy old_text from it exactly:",
                s + 1,
                (s + m).min(file.lines.len())
            );
            for (i, line) in file
                .lines
                .iter()
                .enumerate()
                .take(to.min(from + 40))
                .skip(from)
            {
                let shown: String = line.chars().take(SHOW_LINE_CHARS).collect();
                let _ = writeln!(msg, "{:>6}\t{shown}", i + 1);
            }
            Some(s + 1)
        }
        _ => {
            msg.push_str(
                " No region of the file resembles it; read the file again before editing.",
            );
            None
        }
    };
    refusal(RefusalReason::NotFound { closest }, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(file: &str, old: &str, new: &str) -> Result<(String, MatchKind), Refusal> {
        apply_edit(file.as_bytes(), old, new)
            .map(|a| (String::from_utf8(a.content).unwrap(), a.kind))
    }

    const PY: &str =
        "def f(x):\n    if x:\n        return 1\n    return 2\n\n\ndef g(y):\n    return y\n";

    #[test]
    fn exact_match_applies() {
        let (out, kind) = apply(PY, "        return 1\n", "        return 10\n").unwrap();
        assert_eq!(kind, MatchKind::Exact);
        assert_eq!(out, PY.replace("return 1\n", "return 10\n"));
    }

    #[test]
    fn trailing_whitespace_in_old_text_is_tolerated() {
        let (out, kind) = apply(
            PY,
            "    if x:   \n        return 1  \n",
            "    if x:\n        return 11\n",
        )
        .unwrap();
        assert_eq!(kind, MatchKind::TrailingWhitespace);
        assert_eq!(out, PY.replace("return 1\n", "return 11\n"));
    }

    #[test]
    fn uniform_indentation_shift_is_reindented() {
        // The model dropped one level of indentation from old and new alike.
        let (out, kind) = apply(
            PY,
            "if x:\n    return 1\nreturn 2\n",
            "if x:\n    log(x)\n    return 1\nreturn 2\n",
        )
        .unwrap();
        assert_eq!(kind, MatchKind::Indentation);
        assert_eq!(
            out,
            PY.replace("        return 1\n", "        log(x)\n        return 1\n")
        );
    }

    #[test]
    fn tabs_versus_spaces_is_tolerated_and_new_text_follows_the_file() {
        let go = "func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n";
        let (out, kind) = apply(
            go,
            "    if x {\n        return 1\n    }\n",
            "    if x {\n        y()\n        return 1\n    }\n",
        )
        .unwrap();
        assert_eq!(kind, MatchKind::Indentation);
        assert_eq!(out, "func f() {\n\tif x {\n\t\ty()\n\t\treturn 1\n\t}\n}\n");
    }

    #[test]
    fn spaces_for_tabs_near_lines_indented_with_spaces_is_refused() {
        // The code is indented with tabs but a raw string next to it with spaces: a new line
        // the model indented with spaces may be either, so the edit is refused, never guessed.
        let go = "func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\nconst s = `\n    text\n`\n";
        let old = "    if x {\n        return 1\n    }\n";
        let err = apply(
            go,
            old,
            "    if x {\n        y()\n        return 1\n    }\n",
        )
        .unwrap_err();
        assert!(
            matches!(err.reason, RefusalReason::Ambiguous { .. }),
            "{err:?}"
        );
        assert!(
            err.message.contains("spaces stand for the file's tabs"),
            "{}",
            err.message
        );
        // Kept lines alone are certain: they are the file's own.
        let (out, _) = apply(go, old, "    if x {\n    }\n").unwrap();
        assert_eq!(
            out,
            "func f() {\n\tif x {\n\t}\n}\nconst s = `\n    text\n`\n"
        );
    }

    /// Regression (cobra `tabs`: 23 of 120 refused): lines indented with spaces far from the
    /// match (a template at the other end of the file) say nothing about a new line here.
    #[test]
    fn spaces_for_tabs_far_from_lines_indented_with_spaces_is_applied() {
        let filler: String = (0..NEAR_LINES + 2).map(|i| format!("\tx{i}()\n")).collect();
        let go = format!(
            "func f() {{\n\tif x {{\n\t\treturn 1\n\t}}\n{filler}}}\nconst s = `\n    text\n`\n"
        );
        let (out, kind) = apply(
            &go,
            "    if x {\n        return 1\n    }\n",
            "    if x {\n        y()\n        return 1\n    }\n",
        )
        .unwrap();
        assert_eq!(kind, MatchKind::Indentation);
        assert_eq!(out, go.replace("\t\treturn 1\n", "\t\ty()\n\t\treturn 1\n"));
    }

    /// Spaces that are not whole tabs (`"     \t"` written as nine spaces) cannot be told
    /// apart from tabs followed by spaces.
    #[test]
    fn spaces_for_tabs_that_are_not_whole_tabs_is_refused() {
        let go = "func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n";
        let old = "    if x {\n        return 1\n    }\n";
        let err = apply(
            go,
            old,
            "    if x {\n         y()\n        return 1\n    }\n",
        )
        .unwrap_err();
        assert!(
            matches!(err.reason, RefusalReason::Ambiguous { .. }),
            "{err:?}"
        );
        // Less than one tab's width of spaces can only be spaces.
        let (out, _) = apply(go, old, "    if x {\n  y()\n        return 1\n    }\n").unwrap();
        assert_eq!(out, "func f() {\n\tif x {\n  y()\n\t\treturn 1\n\t}\n}\n");
    }

    /// A multi-line string the new text opens has indentation that is content, and the file
    /// around the match says nothing about it.
    #[test]
    fn spaces_for_tabs_inside_a_string_the_new_text_opens_is_refused() {
        let go = "func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n";
        let old = "    if x {\n        return 1\n    }\n";
        let err = apply(go, old, "    if x {\n        return `a\n    b`\n    }\n").unwrap_err();
        assert!(
            matches!(err.reason, RefusalReason::Ambiguous { .. }),
            "{err:?}"
        );
    }

    /// The reverse direction: the model wrote tabs where the file indents with spaces. A new
    /// line's tabs are spaces, unless the file around the match has tabs of its own.
    #[test]
    fn tabs_for_spaces_is_applied_unless_the_file_near_the_match_has_tabs() {
        let py = "def f(x):\n    if x:\n        return 1\n    return 2\n";
        let old = "\tif x:\n\t\treturn 1\n";
        let new = "\tif x:\n\t\tlog(x)\n\t\treturn 1\n";
        let (out, kind) = apply(py, old, new).unwrap();
        assert_eq!(kind, MatchKind::Indentation);
        assert_eq!(
            out,
            py.replace("        return 1\n", "        log(x)\n        return 1\n")
        );
        let mixed = format!("{py}s = '''\n\tcol\tcol\n'''\n");
        let err = apply(&mixed, old, new).unwrap_err();
        assert!(
            matches!(err.reason, RefusalReason::Ambiguous { .. }),
            "{err:?}"
        );
        assert!(
            err.message.contains("tabs stand for the file's spaces"),
            "{}",
            err.message
        );
    }

    /// Regression (hiredis `crlf`): new_text with CRLF of its own mixed with LF: its carriage
    /// returns may be content, so the edit is refused rather than normalised.
    #[test]
    fn new_text_with_mixed_line_endings_is_refused() {
        let file = "a\r\nb\r\nc\r\n";
        let err = apply(file, "a\nb\n", "a\nB\r\nb\n").unwrap_err();
        assert_eq!(err.reason, RefusalReason::MixedLineEndings);
        let err = apply("a\nb\n", "a\n", "A\r\n").unwrap_err();
        assert_eq!(err.reason, RefusalReason::MixedLineEndings);
        // CRLF throughout in a CRLF file is the file's own line ending.
        let (out, _) = apply(file, "a\r\nb\r\n", "a\r\nB\r\n").unwrap();
        assert_eq!(out, "a\r\nB\r\nc\r\n");
    }

    /// Regression (cobra `tabs`, another seed): a tab in a new line inside a multi-line string
    /// whose other lines mix tabs in, however far from the match, may be a real tab.
    #[test]
    fn tabs_for_spaces_inside_a_string_that_has_tabs_is_refused() {
        let filler: String = (0..NEAR_LINES + 2).map(|i| format!("    x{i}\n")).collect();
        let go = format!(
            "func f() {{\n\ts := `\n\t\tfirst\n{filler}    if x; then\n        y\n    fi\n`\n}}\n"
        );
        let err = apply(&go, "\tif x; then\n\t\ty\n", "\tif x; then\n\t\tz\n\t\ty\n").unwrap_err();
        assert!(
            matches!(err.reason, RefusalReason::Ambiguous { .. }),
            "{err:?}"
        );
        // Outside the string the same edit is certain.
        let clean = go.replace("\t\tfirst\n", "    first\n");
        let (out, _) = apply(
            &clean,
            "\tif x; then\n\t\ty\n",
            "\tif x; then\n\t\tz\n\t\ty\n",
        )
        .unwrap();
        assert_eq!(out, clean.replace("        y\n", "        z\n        y\n"));
    }

    /// Regression (cobra `tabs`, another seed): a whitespace-only new line is indentation in
    /// the file's characters too.
    #[test]
    fn spaces_for_tabs_on_a_whitespace_only_line_follow_the_file() {
        let go = "func f() {\n\ta()\n\tb()\n}\n";
        let (out, _) = apply(go, "    a()\n    b()\n", "    a()\n    \n    b()\n").unwrap();
        assert_eq!(out, "func f() {\n\ta()\n\t\n\tb()\n}\n");
    }

    #[test]
    fn spaces_for_tabs_with_a_run_of_spaces_inside_a_new_line_is_refused() {
        // The model turned every tab into four spaces, one inside a line: that run may have
        // been a tab or spaces, so it is refused rather than guessed.
        let go = "func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n";
        let err = apply(
            go,
            "    if x {\n        return 1\n    }\n",
            "    if     ok := x; ok {\n        return 1\n    }\n",
        )
        .unwrap_err();
        assert!(
            matches!(err.reason, RefusalReason::Ambiguous { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn crlf_file_keeps_crlf() {
        let file = "a\r\nb\r\nc\r\n";
        let (out, kind) = apply(file, "a\nb\n", "a\nB\nB2\n").unwrap();
        assert_eq!(kind, MatchKind::LineEndings);
        assert_eq!(out, "a\r\nB\r\nB2\r\nc\r\n");
    }

    #[test]
    fn missing_blank_line_is_tolerated() {
        let (out, kind) = apply(
            PY,
            "    return 2\ndef g(y):\n    return y\n",
            "    return 2\n\n\ndef g(y, z):\n    return y\n",
        )
        .unwrap();
        assert_eq!(kind, MatchKind::BlankLines);
        assert_eq!(out, PY.replace("def g(y):", "def g(y, z):"));
    }

    #[test]
    fn extra_blank_line_is_tolerated() {
        let file = "alpha()\nbeta()\ngamma()\ndelta()\n";
        let (out, kind) = apply(file, "beta()\n\ngamma()\n", "beta()\ngamma2()\n").unwrap();
        assert_eq!(kind, MatchKind::BlankLines);
        assert_eq!(out, "alpha()\nbeta()\ngamma2()\ndelta()\n");
    }

    /// Regression: a blank context line left out of old_text but kept in new_text was doubled.
    #[test]
    fn blank_context_line_missing_from_old_text_is_not_doubled() {
        let file = "fn a() {}\n\nfn b() {\n    1\n}\n\nfn c() {}\n";
        let (out, _) = apply(file, "fn b() {\n    1\n}\n", "\nfn b() {\n    2\n}\n\n").unwrap();
        assert_eq!(out, file.replace("    1", "    2"));
        // Without blank lines in the file to absorb, the new blank line is inserted.
        let (out, _) = apply("x\ny\n", "y\n", "\ny\n").unwrap();
        assert_eq!(out, "x\n\ny\n");
    }

    /// Regression (found by the property test in CI): an edit whose only change is a blank
    /// line, next to a blank line already in the file, must add it, not report a no-op success.
    #[test]
    fn adding_a_blank_line_beside_one_is_not_a_no_op() {
        let (out, _) = apply("a\n\n\tb b \n", "a\n", "a\n\n").unwrap();
        assert_eq!(out, "a\n\n\n\tb b \n");
        let (out, _) = apply("x\n\ny\n", "y\n", "\ny\n").unwrap();
        assert_eq!(out, "x\n\n\ny\n");
    }

    #[test]
    fn small_typo_is_tolerated_when_unique() {
        let file = "fn main() {\n    let configuration = load_settings();\n    run(configuration);\n    finish();\n}\n";
        let (out, kind) = apply(
            file,
            "    let configuration = load_setings();\n    run(configuration);\n    finish();\n",
            "    let configuration = load_settings();\n    run2(configuration);\n    finish();\n",
        )
        .unwrap();
        assert_eq!(kind, MatchKind::Typo);
        assert_eq!(out, file.replace("run(", "run2("));
    }

    #[test]
    fn typo_in_a_digit_is_not_a_typo() {
        let file = "alpha_value = compute(1)\nbeta_value = compute(2)\ngamma_value = compute(3)\n";
        let err = apply(
            file,
            "alpha_value = compute(1)\nbeta_value = compute(7)\ngamma_value = compute(3)\n",
            "x\n",
        )
        .unwrap_err();
        assert!(
            matches!(err.reason, RefusalReason::NotFound { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn ambiguous_exact_match_is_refused_with_line_numbers() {
        let file = "x = 1\ny = 2\nx = 1\n";
        let err = apply(file, "x = 1\n", "x = 3\n").unwrap_err();
        assert_eq!(err.reason, RefusalReason::Ambiguous { lines: vec![1, 3] });
        assert!(err.message.contains("lines 1, 3"), "{}", err.message);
    }

    /// Regression: an exact match whose lines also appear elsewhere at another indentation was
    /// applied where the model's wrongly indented text happened to match.
    #[test]
    fn exact_match_with_an_indentation_twin_is_refused() {
        let file = "fn a() {\n    x();\n    y();\n}\nfn b() {\n    if c {\n        x();\n        y();\n    }\n}\n";
        let err = apply(file, "        x();\n        y();\n", "        z();\n").unwrap_err();
        assert_eq!(err.reason, RefusalReason::Ambiguous { lines: vec![2, 7] });
        // Runs of closing brackets overlapping the match are not twins.
        let file = "f(|| {\n    g(|| {\n    })\n})\n";
        let (out, kind) = apply(file, "    })\n})\n", "    });\n});\n").unwrap();
        assert_eq!(kind, MatchKind::Exact);
        assert_eq!(out, "f(|| {\n    g(|| {\n    });\n});\n");
    }

    #[test]
    fn ambiguous_tolerant_match_is_refused() {
        let file = "    a()\n    b()\nz\n        a()\n        b()\n";
        let err = apply(file, "a()\nb()\n", "c()\n").unwrap_err();
        assert_eq!(err.reason, RefusalReason::Ambiguous { lines: vec![1, 4] });
    }

    #[test]
    fn typo_near_two_places_is_refused() {
        let file = "first_function_call(alpha)\nsecond_function_call(beta)\nthird_function_call(gamma)\n\nfirst_function_call(alpha)\nsecond_function_call(beta)\nthird_function_call(gamme)\n";
        let err = apply(
            file,
            "first_function_call(alpha)\nsecond_function_call(beta)\nthird_function_call(gammo)\n",
            "x\n",
        )
        .unwrap_err();
        assert!(
            matches!(err.reason, RefusalReason::Ambiguous { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn invented_text_is_refused_showing_closest_region() {
        let file = "def load(path):\n    data = read_bytes(path)\n    return parse(data)\n";
        let err = apply(
            file,
            "def load(path):\n    data = read_bytes_v2(path)\n    return parse_v2(data)\n",
            "x\n",
        )
        .unwrap_err();
        assert_eq!(err.reason, RefusalReason::NotFound { closest: Some(1) });
        assert!(
            err.message.contains("     2\t    data = read_bytes(path)"),
            "{}",
            err.message
        );
    }

    #[test]
    fn non_utf8_is_refused() {
        let file = b"caf\xe9\nx = 1\n";
        let err = apply_edit(file, "x = 1", "x = 2").unwrap_err();
        assert_eq!(err.reason, RefusalReason::NotUtf8);
    }

    #[test]
    fn bom_and_missing_final_newline_are_kept() {
        let file = "\u{feff}a\nb\nc";
        let out = apply_edit(file.as_bytes(), "b  \nc", "B\nC").unwrap();
        assert_eq!(String::from_utf8(out.content).unwrap(), "\u{feff}a\nB\nC");
        let out = apply_edit(b"a\nb\nc\n", "b  \n", "B\n").unwrap();
        assert_eq!(out.content, b"a\nB\nc\n");
    }

    #[test]
    fn empty_and_identical_texts_are_refused() {
        assert_eq!(
            apply(PY, "", "x").unwrap_err().reason,
            RefusalReason::EmptyOldText
        );
        assert_eq!(
            apply(PY, "def f", "def f").unwrap_err().reason,
            RefusalReason::NoChange
        );
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]
            /// An old text that occurs exactly once is always replaced exactly there (blank lines
            /// new_text adds at its edges can merge with blank lines already there), unless the
            /// same lines also occur at another indentation, which is refused as ambiguous.
            #[test]
            fn exact_unique_edit_always_applies(
                lines in proptest::collection::vec("[a-z ]{0,12}", 1..30),
                start in 0usize..30, len in 1usize..6, new in "[A-Z\n]{0,20}",
            ) {
                let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
                let start = start % lines.len();
                let end = (start + len).min(lines.len());
                let old: String = lines[start..end].iter().map(|l| format!("{l}\n")).collect();
                prop_assume!(occurrences(&text, &old).len() == 1 && old != new);
                let at = text.find(&old).unwrap();
                let out = match apply_edit(text.as_bytes(), &old, &new) {
                    Ok(out) => out,
                    Err(r) => {
                        // The one refusal an exact match can get: the same lines elsewhere at
                        // another indentation, listed with the exact place among them.
                        let RefusalReason::Ambiguous { lines } = r.reason else {
                            return Err(TestCaseError::fail(format!("refused: {}", r.message)));
                        };
                        prop_assert!(indentation_twins(&text, at, &old).is_some());
                        prop_assert!(lines.contains(&line_of(&text, at)) && lines.len() > 1);
                        return Ok(());
                    }
                };
                prop_assert_eq!(out.kind, MatchKind::Exact);
                let got = String::from_utf8(out.content).unwrap();
                let literal = text.replacen(&old, &new, 1);
                let (ol, ot) = edge_blank_lines(&old);
                let (nl, nt) = edge_blank_lines(&new);
                let only_blank = !new.is_empty() && new.trim().is_empty();
                if nl <= ol && nt <= ot && !only_blank {
                    prop_assert_eq!(got, literal);
                } else {
                    // Blank lines new_text adds at its edges may be absorbed by blank lines the
                    // file already has there; everything else is the literal replacement.
                    let squeeze = |s: &str| s.lines().filter(|l| !l.trim().is_empty()).collect::<Vec<_>>().join("\n");
                    prop_assert_eq!(squeeze(&got), squeeze(&literal));
                    prop_assert!(got.len() <= literal.len());
                }
            }
        }
    }
}
