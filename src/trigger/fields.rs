//! The fields of an event's payload that the agent reads, and [`project`]: a payload cut down
//! to them.
//!
//! A GitHub delivery is mostly what no decision uses: a `repository` object of ~100 URLs and
//! counters, users with a dozen URLs each, the issue's body (the trigger asks the forge for the
//! conversation instead). The webhook bot stores each job's payload durably before it answers,
//! so it stores [`project`]'s cut: what [`super::evaluate`], the receiver's routing and the
//! App's installation lookup read, and nothing else — an 11.8 KB `issues.labeled` example
//! becomes ~0.4 KB. [`READ`] must name every field those read; the trigger tests evaluate every
//! payload they use both whole and cut and require the same outcome.

use std::fmt;

/// A field [`project`] keeps: its name and, when only part of its object is read, the fields
/// kept inside it (empty: the whole value).
#[derive(Debug)]
pub struct Field {
    /// The key.
    pub name: &'static str,
    /// The fields read inside it; empty when the whole value is kept.
    pub inner: &'static [Field],
}

const fn whole(name: &'static str) -> Field {
    Field { name, inner: &[] }
}

const fn part(name: &'static str, inner: &'static [Field]) -> Field {
    Field { name, inner }
}

const USER: &[Field] = &[whole("login"), whole("id"), whole("type")];

/// Every field of an event's payload the agent reads. An array is cut element by element.
pub const READ: &[Field] = &[
    whole("action"),
    part("installation", &[whole("id")]),
    part("label", &[whole("name")]),
    part("sender", USER),
    part(
        "repository",
        &[
            whole("name"),
            whole("full_name"),
            whole("default_branch"),
            part("owner", &[whole("login")]),
        ],
    ),
    // `pull_request` inside an issue only says the issue is a pull request: kept whole (a few
    // URLs), so its presence reads the same.
    part(
        "issue",
        &[whole("number"), whole("state"), whole("pull_request")],
    ),
    part("pull_request", &[whole("number")]),
    part(
        "comment",
        &[
            whole("id"),
            whole("body"),
            whole("path"),
            whole("line"),
            whole("original_line"),
            whole("diff_hunk"),
            part("user", &[whole("login")]),
        ],
    ),
    part(
        "workflow_run",
        &[
            whole("id"),
            whole("name"),
            whole("conclusion"),
            whole("head_branch"),
            whole("head_sha"),
            part("head_repository", &[whole("full_name")]),
            part("pull_requests", &[whole("number")]),
        ],
    ),
];

/// The most fields one object of [`READ`] keeps (an object's kept fields are tracked in a
/// fixed array on the stack).
const MAX_FIELDS: usize = 16;

const fn widest(fields: &[Field]) -> usize {
    let mut widest = fields.len();
    let mut i = 0;
    while i < fields.len() {
        let inner = self::widest(fields[i].inner);
        if inner > widest {
            widest = inner;
        }
        i += 1;
    }
    widest
}

const _: () = assert!(widest(READ) <= MAX_FIELDS);

/// How deep arrays and objects may nest, as `serde_json` allows: past it a payload is refused
/// rather than the scan's stack grown without bound.
const MAX_DEPTH: u32 = 128;

/// A body that is not one JSON value, and where the scan found that out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotJson {
    what: &'static str,
    line: usize,
    column: usize,
}

impl NotJson {
    fn at(text: &[u8], offset: usize, what: &'static str) -> Self {
        let before = &text[..offset.min(text.len())];
        let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
        let column = 1 + before.iter().rev().take_while(|&&b| b != b'\n').count();
        Self { what, line, column }
    }
}

impl fmt::Display for NotJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {} column {}",
            self.what, self.line, self.column
        )
    }
}

impl std::error::Error for NotJson {}

type Result<T> = std::result::Result<T, NotJson>;

/// `payload` (JSON) cut down to the fields in [`READ`], as compact JSON, in one pass that
/// builds nothing of the rest — every byte is still checked to be JSON (RFC 8259, UTF-8, at
/// most 128 levels deep). Kept values are copied as the text they were sent as. Where a field
/// holds something other than an object it is kept as it is (an array is cut element by
/// element), so a payload of the wrong shape reads the same cut as whole. A key given twice
/// keeps its last value, as `serde_json::from_slice` reads it. Escapes in keys are decoded
/// before they are compared.
///
/// A scan of its own rather than `serde_json` (which it replaced): the webhook bot cuts every
/// delivery before it answers, and through serde's visitors the cut cost 2.4 times the body's
/// HMAC instead of 1.5 times (in the receiver's profile, before and after).
pub fn project(payload: &[u8]) -> Result<Vec<u8>> {
    // JSON text is UTF-8 (RFC 8259 §8.1): checked once for the whole body, so the scan treats
    // strings as bytes and whatever it copies is UTF-8.
    if let Err(e) = std::str::from_utf8(payload) {
        return Err(NotJson::at(payload, e.valid_up_to(), "invalid UTF-8"));
    }
    let mut scan = Scan {
        text: payload,
        at: 0,
        depth: 0,
    };
    let mut out = Vec::with_capacity(512);
    scan.space();
    scan.cut(READ, &mut out)?;
    scan.space();
    if scan.at != payload.len() {
        return Err(scan.fail("trailing characters after the JSON value"));
    }
    Ok(out)
}

/// A cursor over JSON text already checked to be UTF-8.
struct Scan<'a> {
    text: &'a [u8],
    at: usize,
    depth: u32,
}

/// Where an object's key is in the text (between its quotes), and whether it holds escapes.
#[derive(Clone, Copy)]
struct Key {
    start: usize,
    end: usize,
    escaped: bool,
}

impl Key {
    /// The index of the field in `fields` this key names, `None` for one not kept.
    fn field(self, text: &[u8], fields: &[Field]) -> Option<usize> {
        let raw = &text[self.start..self.end];
        let position = |key: &[u8]| fields.iter().position(|f| f.name.as_bytes() == key);
        if !self.escaped {
            return position(raw);
        }
        // Rare: decode the escapes (the scan has checked them). Field names are ASCII, so any
        // other character is kept as a byte no name holds.
        let mut key = Vec::with_capacity(raw.len());
        let mut i = 0;
        while i < raw.len() {
            if raw[i] != b'\\' {
                key.push(raw[i]);
                i += 1;
                continue;
            }
            let (byte, len) = match raw[i + 1] {
                b'b' => (0x08, 2),
                b'f' => (0x0c, 2),
                b'n' => (b'\n', 2),
                b'r' => (b'\r', 2),
                b't' => (b'\t', 2),
                b'u' => {
                    let hex = std::str::from_utf8(&raw[i + 2..i + 6]).unwrap_or("");
                    let code = u32::from_str_radix(hex, 16).unwrap_or(u32::MAX);
                    (
                        u8::try_from(code).ok().filter(u8::is_ascii).unwrap_or(0xff),
                        6,
                    )
                }
                other => (other, 2),
            };
            key.push(byte);
            i += len;
        }
        position(&key)
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `word` that is zero. Exact for the lowest such byte (a borrow
/// only runs upward from a zero byte), which is all [`Scan::string`] reads.
const fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(ONES) & !word & HIGHS
}

/// The high bit of each byte of `word` that ends a plain run of string text: `"`, `\` or a
/// control character (below 0x20, not allowed raw in a string). Exact for the lowest one.
const fn specials(word: u64) -> u64 {
    zero_bytes(word ^ (ONES * b'"' as u64))
        | zero_bytes(word ^ (ONES * b'\\' as u64))
        | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS)
}

/// Where the plain string text from `at` ends: the first `"`, `\` or control character at or
/// after `at`, or a position at most seven bytes before the end of `text` from which the
/// caller goes on byte by byte. Eight bytes at a time in a `u64`. (Sixteen at a time with
/// SSE2 was measured no faster: most strings of a payload are keys and URLs of 10–40 bytes.)
fn plain(text: &[u8], mut at: usize) -> usize {
    while let Some(chunk) = text.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
        let found = specials(word);
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at
}

impl Scan<'_> {
    fn fail(&self, what: &'static str) -> NotJson {
        NotJson::at(self.text, self.at, what)
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// Step over `byte`, or fail with `what`.
    fn expect(&mut self, byte: u8, what: &'static str) -> Result<()> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.fail(what))
        }
    }

    /// Write the cut of the value here to `out`: an object keeps the fields in `fields`
    /// (cutting each in turn), an array is cut element by element, anything else is copied.
    fn cut(&mut self, fields: &'static [Field], out: &mut Vec<u8>) -> Result<()> {
        match self.peek() {
            Some(b'{') => self.cut_object(fields, out),
            Some(b'[') => {
                out.push(b'[');
                self.elements(|scan, first| {
                    if !first {
                        out.push(b',');
                    }
                    scan.cut(fields, out)
                })?;
                out.push(b']');
                Ok(())
            }
            _ => self.copy(out),
        }
    }

    /// Copy the value here to `out` as it was sent.
    fn copy(&mut self, out: &mut Vec<u8>) -> Result<()> {
        let start = self.at;
        self.skip()?;
        out.extend_from_slice(&self.text[start..self.at]);
        Ok(())
    }

    fn cut_object(&mut self, fields: &'static [Field], out: &mut Vec<u8>) -> Result<()> {
        let start = out.len();
        out.push(b'{');
        // Where each kept field's `"name":value` is in `out`, and which were seen.
        let mut kept = [(0usize, 0usize); MAX_FIELDS];
        let mut seen = 0u32;
        let mut repeated = false;
        self.members(|scan, key| {
            let Some(i) = key.field(scan.text, fields) else {
                return scan.skip();
            };
            if seen != 0 {
                out.push(b',');
            }
            repeated |= seen & (1 << i) != 0;
            seen |= 1 << i;
            let from = out.len();
            let field = &fields[i];
            out.push(b'"');
            out.extend_from_slice(field.name.as_bytes());
            out.extend_from_slice(b"\":");
            if field.inner.is_empty() {
                scan.copy(out)?;
            } else {
                scan.cut(field.inner, out)?;
            }
            kept[i] = (from, out.len());
            Ok(())
        })?;
        if repeated {
            // A key given twice: keep only each field's last value.
            let written = out.split_off(start);
            out.push(b'{');
            let mut first = true;
            for (i, &(from, to)) in kept.iter().enumerate().take(fields.len()) {
                if seen & (1 << i) == 0 {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(&written[from - start..to - start]);
            }
        }
        out.push(b'}');
        Ok(())
    }

    /// Step over the array here, calling `element` at each element (with whether it is the
    /// first); `element` must step over it.
    fn elements(&mut self, mut element: impl FnMut(&mut Self, bool) -> Result<()>) -> Result<()> {
        if self.enter(b']')? {
            return Ok(());
        }
        let mut first = true;
        loop {
            element(self, first)?;
            first = false;
            self.space();
            if self.next_or_close(b']', "expected `,` or `]` in an array")? {
                return Ok(());
            }
        }
    }

    /// Step over the object here, calling `value` at each member's value with its key;
    /// `value` must step over the value.
    fn members(&mut self, mut value: impl FnMut(&mut Self, Key) -> Result<()>) -> Result<()> {
        if self.enter(b'}')? {
            return Ok(());
        }
        loop {
            self.expect(b'"', "expected a string key")?;
            let start = self.at;
            let escaped = self.string()?;
            let key = Key {
                start,
                end: self.at - 1,
                escaped,
            };
            self.space();
            self.expect(b':', "expected `:` after an object key")?;
            self.space();
            value(self, key)?;
            self.space();
            if self.next_or_close(b'}', "expected `,` or `}` in an object")? {
                return Ok(());
            }
        }
    }

    /// One level deeper (past the opening bracket here, refused past [`MAX_DEPTH`]); whether
    /// the container ends right away (then stepped over its `close`, one level up again).
    fn enter(&mut self, close: u8) -> Result<bool> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.fail("nested too deep"));
        }
        self.at += 1;
        self.space();
        if self.peek() == Some(close) {
            self.at += 1;
            self.depth -= 1;
            return Ok(true);
        }
        Ok(false)
    }

    /// After a member: `,` (then the next member, `Ok(false)`) or `close` (`Ok(true)`).
    fn next_or_close(&mut self, close: u8, what: &'static str) -> Result<bool> {
        match self.peek() {
            Some(b',') => {
                self.at += 1;
                self.space();
                Ok(false)
            }
            Some(b) if b == close => {
                self.at += 1;
                self.depth -= 1;
                Ok(true)
            }
            _ => Err(self.fail(what)),
        }
    }

    /// Check and step over the value here, building nothing.
    fn skip(&mut self) -> Result<()> {
        match self.peek() {
            Some(b'"') => {
                self.at += 1;
                self.string().map(drop)
            }
            Some(b'{') => self.members(|scan, _| scan.skip()),
            Some(b'[') => self.elements(|scan, _| scan.skip()),
            Some(b't') => self.word(b"true"),
            Some(b'f') => self.word(b"false"),
            Some(b'n') => self.word(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.fail("expected a value")),
            None => Err(self.fail("unexpected end of the body")),
        }
    }

    fn word(&mut self, word: &[u8]) -> Result<()> {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            Ok(())
        } else {
            Err(self.fail("expected a value"))
        }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Result<()> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.fail("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Ok(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Result<()> {
        if !matches!(self.peek(), Some(b'0'..=b'9')) {
            return Err(self.fail("invalid number"));
        }
        self.digits();
        Ok(())
    }

    /// Step over the rest of a string (past its opening quote) and its closing quote;
    /// whether it held an escape. Plain text is skipped many bytes at a time ([`plain`]).
    fn string(&mut self) -> Result<bool> {
        let text = self.text;
        let mut at = self.at;
        let mut escaped = false;
        loop {
            at = plain(text, at);
            match text.get(at) {
                Some(b'"') => {
                    self.at = at + 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    escaped = true;
                    at = self.escape(at + 1)?;
                }
                Some(&b) if b < 0x20 => {
                    self.at = at;
                    return Err(self.fail("control character in a string"));
                }
                Some(_) => at += 1,
                None => {
                    self.at = at;
                    return Err(self.fail("unterminated string"));
                }
            }
        }
    }

    /// The escape whose letter is at `at` (past its backslash); where the text goes on.
    fn escape(&mut self, at: usize) -> Result<usize> {
        match self.text.get(at) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(at + 1),
            Some(b'u') => match self.text.get(at + 1..at + 5) {
                Some(hex) if hex.iter().all(u8::is_ascii_hexdigit) => Ok(at + 5),
                _ => {
                    self.at = at;
                    Err(self.fail("invalid \\u escape"))
                }
            },
            _ => {
                self.at = at;
                Err(self.fail("invalid escape"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn cut(v: &Value) -> Value {
        read(&project(&serde_json::to_vec(v).unwrap()).unwrap())
    }

    fn read(cut: &[u8]) -> Value {
        serde_json::from_slice(cut).unwrap()
    }

    #[test]
    fn keeps_the_fields_read_and_drops_the_rest() {
        let full = json!({
            "action": "labeled",
            "label": {"name": "agent", "color": "fff"},
            "issue": {"number": 4, "state": "open", "body": "long text", "user": {"login": "a"},
                      "pull_request": {"url": "u"}},
            "repository": {"name": "r", "full_name": "o/r", "owner": {"login": "o", "id": 1},
                           "forks": 3, "default_branch": "main"},
            "sender": {"login": "o", "id": 7, "type": "User", "avatar_url": "x"},
            "workflow_run": {"pull_requests": [{"number": 9, "url": "u"}, 5], "id": 1},
            "organization": {"login": "o"},
            "installation": {"id": 5, "node_id": "MDIz"},
        });
        assert_eq!(
            cut(&full),
            json!({
                "action": "labeled",
                "label": {"name": "agent"},
                "issue": {"number": 4, "state": "open", "pull_request": {"url": "u"}},
                "repository": {"name": "r", "full_name": "o/r", "owner": {"login": "o"},
                               "default_branch": "main"},
                "sender": {"login": "o", "id": 7, "type": "User"},
                "workflow_run": {"pull_requests": [{"number": 9}, 5], "id": 1},
                "installation": {"id": 5},
            })
        );
    }

    #[test]
    fn values_of_another_shape_are_kept_as_they_are() {
        let odd = json!({"repository": 42, "issue": [{"number": 1, "x": 2}], "sender": null,
                         "label": "agent", "comment": {"body": {"nested": [1, 2.5, true]}}});
        assert_eq!(
            cut(&odd),
            json!({"repository": 42, "issue": [{"number": 1}], "sender": null,
                   "label": "agent", "comment": {"body": {"nested": [1, 2.5, true]}}})
        );
        assert_eq!(
            cut(&json!([1, {"action": "x", "y": 1}])),
            json!([1, {"action": "x"}])
        );
        assert_eq!(cut(&json!("text")), json!("text"));
    }

    #[test]
    fn escaped_keys_and_repeated_keys_read_as_serde_json_reads_them() {
        let body =
            br#"{"act\u0069on": "a", "action": "b", "sender": {"login": "x", "login": "y"}}"#;
        let cut = project(body).unwrap();
        assert_eq!(read(&cut), json!({"action": "b", "sender": {"login": "y"}}));
        // The cut says each key once: a typed reader (serde's derive refuses a repeated
        // field) reads it too.
        assert_eq!(cut, br#"{"action":"b","sender":{"login":"y"}}"#);
    }

    #[test]
    fn fields_kept_whole_are_the_text_as_sent() {
        let body = r#"{
  "comment": {
    "body": "say \"hi\"\n\u00e9 é",
    "id": 1.5e3, "user": { "login" : "a" }
  },
  "action": null
}"#;
        let cut = project(body.as_bytes()).unwrap();
        assert_eq!(
            String::from_utf8(cut.clone()).unwrap(),
            r#"{"comment":{"body":"say \"hi\"\n\u00e9 é","id":1.5e3,"user":{"login":"a"}},"action":null}"#
        );
        assert_eq!(read(&cut)["comment"]["body"], json!("say \"hi\"\né é"));
    }

    #[test]
    fn bodies_that_are_not_json_are_refused() {
        for bad in [
            &b"{not json"[..],
            b"",
            b"{\"a\": 1} trailing",
            b"{\"a\": [1,}",
        ] {
            assert!(project(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        // Skipped values are checked too.
        assert!(project(br#"{"organization": {"login": tru}}"#).is_err());
        for bad in [
            &br#"{"organization": "a\qb"}"#[..],
            br#"{"organization": "\u12g4"}"#,
            b"{\"organization\": \"tab\there\"}",
            br#"{"organization": 01}"#,
            br#"{"organization": 1.}"#,
            br#"{"organization": -}"#,
            br#"{"organization": 1e+}"#,
            br#"{"organization": [1,]}"#,
            br#"{"organization": {"a" 1}}"#,
            br#"{"organization": {"a": 1,}}"#,
            br#"{"organization": {1: 1}}"#,
            br#"{"organization": "unterminated}"#,
            b"{\"organization\": \"\xff\"}",
        ] {
            let refused = project(bad).unwrap_err();
            assert!(
                serde_json::from_slice::<Value>(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
            assert!(
                refused.to_string().contains(" at line 1 column "),
                "{refused}"
            );
        }
    }

    #[test]
    fn where_a_body_is_refused_is_said_by_line_and_column() {
        let err = project(b"{\n  \"action\": \"a\",\n  \"x\": nul\n}").unwrap_err();
        assert_eq!(err.to_string(), "expected a value at line 3 column 8");
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = |n: usize| format!("{{\"x\": {}{}}}", "[".repeat(n), "]".repeat(n));
        assert!(project(deep(100).as_bytes()).is_ok());
        let err = project(deep(100_000).as_bytes()).unwrap_err();
        assert!(err.to_string().starts_with("nested too deep"), "{err}");
    }

    #[test]
    fn plain_text_ends_at_the_first_quote_backslash_or_control_character() {
        let special = |b: u8| b == b'"' || b == b'\\' || b < 0x20;
        for len in 0..48 {
            for from in 0..=len.min(9) {
                for pos in from..len {
                    for b in [0x00, 0x1f, b'"', b'\\', 0x20, 0x7f, 0x80, 0xc3, 0xff] {
                        let mut text = vec![b'a'; len];
                        text[pos] = b;
                        let first = (from..len).find(|&i| special(text[i])).unwrap_or(len);
                        let got = plain(&text, from);
                        // At the first special byte, or short of it only in the last 7 bytes.
                        assert!(
                            got == first || (got < first && got + 8 > len),
                            "len {len} from {from} byte {b:#x} at {pos}: got {got}, want {first}"
                        );
                    }
                }
            }
        }
    }

    /// `v` with only `fields` kept, as [`project`] says it cuts: built on `serde_json::Value`.
    fn pruned(v: &Value, fields: &[Field]) -> Value {
        if fields.is_empty() {
            return v.clone();
        }
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter_map(|(k, v)| {
                        let field = fields.iter().find(|f| f.name == k)?;
                        Some((k.clone(), pruned(v, field.inner)))
                    })
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(|v| pruned(v, fields)).collect()),
            other => other.clone(),
        }
    }

    /// The scan against `serde_json` on thousands of mangled bodies: it refuses exactly what
    /// `serde_json` refuses (plus text that is not UTF-8), and what it keeps reads as the
    /// payload read whole and pruned to [`READ`].
    #[test]
    fn the_scan_accepts_and_cuts_as_serde_json_reads() {
        // Pretty-printed, with escapes (`\u` ones too), non-ASCII text, every kind of value.
        let base = r#"{
  "action": "labeled",
  "label": {"name": "agent", "color": "f\u00e9", "default": false},
  "issue": {"number": 4, "state": "open", "body": "a \"quoted\" \\ line\n\t\/",
            "labels": [{"name": "x"}, {"name": "y"}], "pull_request": {"url": "u"},
            "score": -1.25e-3, "closed_at": null, "big": 1E+40},
  "repository": {"name": "r", "full_name": "o/r", "owner": {"login": "o", "id": 1},
                 "topics": [], "default_branch": "main", "private": true},
  "sender": {"login": "o", "id": 7, "type": "User"},
  "workflow_run": {"pull_requests": [{"number": 9, "url": "u"}, 5, [1]], "id": 1},
  "comment": {"body": "/agent fix \u263a \ud83d\ude00", "line": 0, "user": {"login": "é"}},
  "install\u0061tion": {"id": 5, "node_id": "MDIz"}
}"#
        .as_bytes()
        .to_vec();
        let noise: &[u8] = b"{}[]:,\"\\ \n0123456789-+.eEtrufalsn\x01\x1f\xc3\xa9\xffu/";
        let mut rng = fastrand::Rng::with_seed(0x5eed);
        let (mut accepted, mut refused, mut compared) = (0, 0, 0);
        for _ in 0..20_000 {
            let mut body = base.clone();
            for _ in 0..rng.usize(1..4) {
                if body.is_empty() {
                    break;
                }
                let at = rng.usize(..body.len());
                match rng.u8(..4) {
                    0 => body[at] = noise[rng.usize(..noise.len())],
                    1 => {
                        body.remove(at);
                    }
                    2 => body.insert(at, noise[rng.usize(..noise.len())]),
                    _ => body.truncate(at),
                }
            }
            let ours = project(&body);
            let json_ok = std::str::from_utf8(&body).is_ok()
                && serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_ok();
            assert_eq!(
                ours.is_ok(),
                json_ok,
                "{}: {ours:?}",
                String::from_utf8_lossy(&body)
            );
            let Ok(cut) = ours else {
                refused += 1;
                continue;
            };
            accepted += 1;
            // (A body serde_json takes as a Value: not one with a lone surrogate escape.)
            if let Ok(whole) = serde_json::from_slice::<Value>(&body) {
                assert_eq!(
                    read(&cut),
                    pruned(&whole, READ),
                    "{}",
                    String::from_utf8_lossy(&body)
                );
                compared += 1;
            }
        }
        // Both kinds were tried, many times.
        assert!(
            compared > 500 && refused > 500,
            "{accepted} accepted ({compared} compared), {refused} refused"
        );
    }
}
