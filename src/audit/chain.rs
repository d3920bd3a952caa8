//! The hash-chained audit log of DESIGN.md.
//!
//! One event per line: `{"seq","ts","run","kind","data","prev","hash"}`.
//!
//! * `seq` counts from 1 without gaps; `prev` is the `hash` of the event before it, or
//!   [`GENESIS`] (64 zeros) for the first event.
//! * `hash` is the lowercase hex SHA-256 of the bytes of `prev` followed directly by the
//!   [canonical JSON](canonical_json) of the event without its `hash` member, i.e. of the object
//!   `{"data","kind","prev","run","seq","ts"}`.
//! * **Canonical JSON** is the JSON text with every object's members sorted by key (byte order
//!   of the UTF-8 key), no whitespace between tokens, strings escaped as `serde_json` escapes
//!   them (`"` `\` and control characters only; everything else is written as UTF-8) and
//!   numbers as `serde_json` prints them. Because the hash covers this form and not the bytes on
//!   disk, a reformatted but equal line still verifies, while any change of a value does not.
//!
//! Data is redacted (every string and every key, recursively) before it is hashed and written.
//!
//! Appends are one `write` of a whole line, so a crash leaves at most one torn last line. Each
//! append is also `fsync`ed unless the owner groups syncs ([`Appender::sync_each`] off, then
//! [`Appender::sync`] at its durable points): a written line survives `kill -9` either way (it
//! is in the page cache); the fsync only matters when the machine itself goes down. [`Appender::open`] reports such a line, cuts it off and continues the chain
//! from the last valid event. A chain alone cannot show that events were cut off its end; pass
//! the head recorded elsewhere (the run state, the `Audit-Head:` trailer) to [`verify`] to
//! catch that too.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The `prev` of the first event.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A function that removes secrets from a piece of text. Built by the redaction module; the
/// log only calls it.
pub type RedactFn = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// A redactor that changes nothing, for logs that hold no secrets (tests, demos).
pub fn no_redaction() -> RedactFn {
    Arc::new(|s: &str| s.to_owned())
}

/// Errors of the audit log. Messages name the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading, writing or syncing the log failed.
    #[error("audit log {path}: {source}")]
    Io {
        /// The log file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The log is broken before its last line, so appending would extend a forged chain.
    #[error("audit log {path} is broken at seq {seq}: {problem}; refusing to append")]
    Broken {
        /// The log file.
        path: PathBuf,
        /// The first bad sequence number.
        seq: u64,
        /// What is wrong there.
        problem: Problem,
    },
    /// The log belongs to another run.
    #[error("audit log {path} belongs to run `{found}`, not `{expected}`")]
    WrongRun {
        /// The log file.
        path: PathBuf,
        /// The run we meant to append to.
        expected: String,
        /// The run named in the file.
        found: String,
    },
    /// An event could not be encoded (should not happen for JSON values).
    #[error("cannot encode audit event: {0}")]
    Encode(#[from] serde_json::Error),
    /// The appender's lock was poisoned by a panic in another thread.
    #[error("audit log {0}: writer lock poisoned")]
    Poisoned(PathBuf),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What an event records. The names are the contract of DESIGN.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A run state transition.
    State,
    /// A request to a model and its usage.
    ModelCall,
    /// A tool call by the model.
    ToolCall,
    /// What a tool returned.
    ToolResult,
    /// A policy decision.
    Policy,
    /// A person's approval or refusal.
    Approval,
    /// A verification (test) run.
    Verify,
    /// The project's environment set-up.
    Setup,
    /// A commit.
    Commit,
    /// A push.
    Push,
    /// An action on the forge (PR, comment).
    Forge,
}

impl Kind {
    /// The name used in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::State => "state",
            Kind::ModelCall => "model_call",
            Kind::ToolCall => "tool_call",
            Kind::ToolResult => "tool_result",
            Kind::Policy => "policy",
            Kind::Setup => "setup",
            Kind::Approval => "approval",
            Kind::Verify => "verify",
            Kind::Commit => "commit",
            Kind::Push => "push",
            Kind::Forge => "forge",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of the log, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Position in the chain, from 1.
    pub seq: u64,
    /// When it was appended (RFC 3339, UTC).
    pub ts: String,
    /// The run it belongs to.
    pub run: String,
    /// What it records.
    pub kind: Kind,
    /// The (redacted) payload.
    pub data: Value,
    /// The hash of the previous event, or [`GENESIS`].
    pub prev: String,
    /// SHA-256 of `prev` and the canonical event; see the module docs.
    pub hash: String,
}

impl Event {
    /// The hash this event should carry, computed from its other members.
    pub fn compute_hash(&self) -> String {
        let body = serde_json::json!({
            "seq": self.seq,
            "ts": self.ts,
            "run": self.run,
            "kind": self.kind.as_str(),
            "data": self.data,
            "prev": self.prev,
        });
        let mut hasher = Sha256::new();
        hasher.update(self.prev.as_bytes());
        hasher.update(canonical_json(&body).as_bytes());
        hex::encode(hasher.finalize())
    }
}

/// The last event of a chain: what to record elsewhere (run state, `Audit-Head:` trailer) so
/// that cutting events off the end of the log can be detected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// Its sequence number (0 for an empty log).
    pub seq: u64,
    /// Its hash ([`GENESIS`] for an empty log).
    pub hash: String,
}

impl Head {
    fn empty() -> Self {
        Head {
            seq: 0,
            hash: GENESIS.to_owned(),
        }
    }
}

/// The canonical JSON text of a value: members sorted by key, no whitespace.
///
/// Implemented here rather than relying on `serde_json`'s map order, which depends on whether
/// some crate in the build enabled its `preserve_order` feature.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(val, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Applies the redactor to every string and key of a value.
fn redact_value(value: &Value, redact: &RedactFn) -> Value {
    match value {
        Value::String(s) => Value::String(redact(s)),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| redact_value(v, redact)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (redact(k), redact_value(v, redact)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Why an event breaks the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "problem")]
pub enum Problem {
    /// The line is not a well-formed event.
    Unparsable {
        /// The parser's message.
        message: String,
    },
    /// The event's `seq` is not the next number (an event was removed, inserted or moved).
    Sequence {
        /// The seq the chain needed here.
        found: u64,
    },
    /// `prev` is not the hash of the event before it.
    Link,
    /// `hash` does not match the event's content (the event was edited).
    Hash,
    /// The event names another run.
    Run {
        /// The run it names.
        found: String,
    },
    /// The last line is incomplete (a crash during an append, or a cut file).
    TornTail,
    /// The log ends before the head recorded elsewhere (events were cut off its end).
    Truncated {
        /// The seq of the recorded head.
        expected_seq: u64,
    },
    /// The log's head differs from the head recorded elsewhere.
    HeadMismatch,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unparsable { message } => write!(f, "line is not a valid event ({message})"),
            Problem::Sequence { found } => write!(f, "out of sequence (found seq {found})"),
            Problem::Link => f.write_str("prev does not match the previous event's hash"),
            Problem::Hash => f.write_str("hash does not match the event's content"),
            Problem::Run { found } => write!(f, "event belongs to run `{found}`"),
            Problem::TornTail => f.write_str("last line is incomplete"),
            Problem::Truncated { expected_seq } => {
                write!(f, "log ends before the recorded head (seq {expected_seq})")
            }
            Problem::HeadMismatch => f.write_str("log head differs from the recorded head"),
        }
    }
}

/// The result of checking a log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum Verification {
    /// Every event links and hashes correctly (and matches the recorded head, if given).
    Intact {
        /// Number of events.
        events: u64,
        /// The last event.
        head: Head,
        /// Events after the recorded head (0 without one). They link correctly but nothing
        /// outside the log vouches for them: appended after the head was last recorded (a
        /// crash in between), or appended by someone else. Worth a warning, not a failure.
        unanchored: u64,
    },
    /// The first place where the chain breaks.
    Broken {
        /// The first bad sequence number: the seq the chain expected at the bad line.
        seq: u64,
        /// 1-based line number in the file (for truncation: one past the last line).
        line: usize,
        /// What is wrong.
        problem: Problem,
    },
}

impl Verification {
    /// Whether the chain is intact.
    pub fn is_intact(&self) -> bool {
        matches!(self, Verification::Intact { .. })
    }
}

/// A log as read from disk.
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    /// The events that parse, in file order (not checked; see [`verify`]).
    pub events: Vec<Event>,
    /// The incomplete last line, if any (a crash during an append).
    pub torn_tail: Option<TornTail>,
}

/// An incomplete last line, cut off by a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Byte offset where it starts (the length of the valid part of the file).
    pub offset: u64,
    /// Its bytes, lossily decoded.
    pub text: String,
}

struct Lines {
    /// Complete lines (ending in `\n`) with their byte offset.
    complete: Vec<(u64, String)>,
    torn: Option<TornTail>,
}

fn split_lines(bytes: &[u8]) -> Lines {
    let mut complete = Vec::new();
    let mut start = 0usize;
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'\n' {
            let line = String::from_utf8_lossy(&bytes[start..i]).into_owned();
            complete.push((start as u64, line));
            start = i + 1;
        }
    }
    let torn = (start < bytes.len()).then(|| TornTail {
        offset: start as u64,
        text: String::from_utf8_lossy(&bytes[start..]).into_owned(),
    });
    Lines { complete, torn }
}

fn read_bytes(path: &Path) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_end(&mut bytes).map_err(|source| Error::Io {
            path: path.to_owned(),
            source,
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(bytes),
        Err(source) => {
            return Err(Error::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    Ok(bytes)
}

/// Reads a log. A missing file is an empty log; lines that do not parse are skipped here
/// (use [`verify`] to find them).
pub fn read(path: &Path) -> Result<Log> {
    let lines = split_lines(&read_bytes(path)?);
    let events = lines
        .complete
        .iter()
        .filter_map(|(_, l)| serde_json::from_str::<Event>(l).ok())
        .collect();
    Ok(Log {
        events,
        torn_tail: lines.torn,
    })
}

/// Checks the chain in a file. `run`, when given, must be named by every event; `recorded`,
/// when given, is the head recorded outside the log and catches events cut off its end.
pub fn verify(path: &Path, run: Option<&str>, recorded: Option<&Head>) -> Result<Verification> {
    let lines = split_lines(&read_bytes(path)?);
    Ok(verify_lines(&lines, run, recorded))
}

fn verify_lines(lines: &Lines, run: Option<&str>, recorded: Option<&Head>) -> Verification {
    let mut head = Head::empty();
    // The line and hash of the event at the recorded head's seq.
    let mut at_recorded: Option<(usize, String)> = None;
    let mut run_name: Option<String> = run.map(str::to_owned);
    for (index, (_, line)) in lines.complete.iter().enumerate() {
        let expected = head.seq + 1;
        let broken = |problem| Verification::Broken {
            seq: expected,
            line: index + 1,
            problem,
        };
        let event: Event = match serde_json::from_str(line) {
            Ok(e) => e,
            Err(e) => {
                return broken(Problem::Unparsable {
                    message: e.to_string(),
                });
            }
        };
        if event.seq != expected {
            return broken(Problem::Sequence { found: event.seq });
        }
        if event.prev != head.hash {
            return broken(Problem::Link);
        }
        if event.compute_hash() != event.hash {
            return broken(Problem::Hash);
        }
        match &run_name {
            Some(r) if *r != event.run => {
                return broken(Problem::Run {
                    found: event.run.clone(),
                });
            }
            Some(_) => {}
            None => run_name = Some(event.run.clone()),
        }
        if recorded.is_some_and(|r| r.seq == event.seq) {
            at_recorded = Some((index + 1, event.hash.clone()));
        }
        head = Head {
            seq: event.seq,
            hash: event.hash,
        };
    }
    let next_line = lines.complete.len() + 1;
    if lines.torn.is_some() {
        return Verification::Broken {
            seq: head.seq + 1,
            line: next_line,
            problem: Problem::TornTail,
        };
    }
    if let Some(rec) = recorded {
        if head.seq < rec.seq {
            return Verification::Broken {
                seq: head.seq + 1,
                line: next_line,
                problem: Problem::Truncated {
                    expected_seq: rec.seq,
                },
            };
        }
        // The event at the recorded seq must be the recorded one, however long the log is.
        if let Some((line, hash)) = &at_recorded
            && *hash != rec.hash
        {
            return Verification::Broken {
                seq: rec.seq,
                line: *line,
                problem: Problem::HeadMismatch,
            };
        }
    }
    let unanchored = recorded.map_or(0, |r| head.seq.saturating_sub(r.seq));
    Verification::Intact {
        events: head.seq,
        head,
        unanchored,
    }
}

/// What [`Appender::open`] found in an existing log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// The head the appender continues from.
    pub head: Head,
    /// An incomplete last line that was cut off (a crash during an append), if any. The caller
    /// should record it, e.g. in a `state` event, since its bytes are gone from the file.
    pub torn_tail: Option<TornTail>,
}

struct Inner {
    file: File,
    head: Head,
}

/// Appends events to one run's log. Safe to share between threads (`Arc<Appender>`).
pub struct Appender {
    path: PathBuf,
    run: String,
    sync_each: bool,
    redact: RedactFn,
    inner: Mutex<Inner>,
}

impl fmt::Debug for Appender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Appender")
            .field("path", &self.path)
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl Appender {
    /// Opens (or creates) the log of `run` at `path` and continues its chain.
    ///
    /// A torn last line is cut off and returned in [`Recovery`]; any other break is an error,
    /// since appending to a tampered chain would make it look valid from here on.
    pub fn open(path: &Path, run: &str, redact: RedactFn) -> Result<(Self, Recovery)> {
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let lines = split_lines(&read_bytes(path)?);
        let without_tail = Lines {
            complete: lines.complete,
            torn: None,
        };
        let head = match verify_lines(&without_tail, Some(run), None) {
            Verification::Intact { head, .. } => head,
            Verification::Broken {
                problem: Problem::Run { found },
                ..
            } => {
                return Err(Error::WrongRun {
                    path: path.to_owned(),
                    expected: run.to_owned(),
                    found,
                });
            }
            Verification::Broken { seq, problem, .. } => {
                return Err(Error::Broken {
                    path: path.to_owned(),
                    seq,
                    problem,
                });
            }
        };
        let created = !path.exists();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        if let Some(torn) = &lines.torn {
            tracing::warn!(
                path = %path.display(),
                offset = torn.offset,
                bytes = torn.text.len(),
                "audit log ends in a torn line; cutting it off and continuing the chain"
            );
            file.set_len(torn.offset).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        if created {
            sync_parent(path).map_err(io)?;
        }
        let appender = Appender {
            path: path.to_owned(),
            run: run.to_owned(),
            sync_each: true,
            redact,
            inner: Mutex::new(Inner {
                file,
                head: head.clone(),
            }),
        };
        Ok((
            appender,
            Recovery {
                head,
                torn_tail: lines.torn,
            },
        ))
    }

    /// Whether every append is fsynced (the default). Off, the owner calls [`sync`](Self::sync)
    /// at its durable points: one fsync per group of events instead of one per event.
    pub fn sync_each(mut self, on: bool) -> Self {
        self.sync_each = on;
        self
    }

    /// Flush every appended event to disk.
    pub fn sync(&self) -> Result<()> {
        let inner = self
            .inner
            .lock()
            .map_err(|_| Error::Poisoned(self.path.clone()))?;
        inner.file.sync_data().map_err(|source| Error::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current head of the chain.
    pub fn head(&self) -> Result<Head> {
        let inner = self
            .inner
            .lock()
            .map_err(|_| Error::Poisoned(self.path.clone()))?;
        Ok(inner.head.clone())
    }

    /// Redacts `data`, appends it as the next event, syncs it to disk and returns the event as
    /// written.
    pub fn append(&self, kind: Kind, data: Value) -> Result<Event> {
        let ts = jiff::Timestamp::now().to_string();
        self.append_at(kind, data, ts)
    }

    /// Like [`append`](Self::append) with a given timestamp (replays, deterministic tests).
    pub fn append_at(&self, kind: Kind, data: Value, ts: String) -> Result<Event> {
        let _span = tracing::debug_span!("audit_write").entered();
        let data = redact_value(&data, &self.redact);
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| Error::Poisoned(self.path.clone()))?;
        let mut event = Event {
            seq: inner.head.seq + 1,
            ts,
            run: self.run.clone(),
            kind,
            data,
            prev: inner.head.hash.clone(),
            hash: String::new(),
        };
        event.hash = event.compute_hash();
        let mut line = serde_json::to_string(&event)?;
        line.push('\n');
        let io = |source| Error::Io {
            path: self.path.clone(),
            source,
        };
        // One write of the whole line, so a crash tears at most this line.
        inner.file.write_all(line.as_bytes()).map_err(io)?;
        if self.sync_each {
            inner.file.sync_data().map_err(io)?;
        }
        inner.head = Head {
            seq: event.seq,
            hash: event.hash.clone(),
        };
        Ok(event)
    }
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

/// Renders one line per event for `git agent log`: seq, time, kind, a short data summary and
/// the first 12 hex digits of the hash.
pub fn render(events: &[Event]) -> String {
    let mut out = String::new();
    for e in events {
        out.push_str(&render_event(e));
        out.push('\n');
    }
    out
}

/// The line of one event; see [`render`]. The summary is cut at 120 characters.
pub fn render_event(e: &Event) -> String {
    const MAX: usize = 120;
    let summary = match &e.data {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={}", canonical_json(other)),
            })
            .collect::<Vec<_>>()
            .join(" "),
        Value::String(s) => s.clone(),
        other => canonical_json(other),
    };
    let summary: String = summary
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let summary = if summary.chars().count() > MAX {
        let cut: String = summary.chars().take(MAX - 1).collect();
        format!("{cut}…")
    } else {
        summary
    };
    let hash = e.hash.get(..12).unwrap_or(&e.hash);
    format!(
        "{:>5}  {}  {:<11}  {}  [{}]",
        e.seq,
        e.ts,
        e.kind.as_str(),
        summary,
        hash
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn log_with(n: u64) -> (tempfile::TempDir, PathBuf, Vec<Event>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let (app, rec) = Appender::open(&path, "run-1", no_redaction()).unwrap();
        assert_eq!(rec.head, Head::empty());
        let mut events = Vec::new();
        for i in 0..n {
            events.push(
                app.append(Kind::ToolCall, json!({"name": "read_file", "i": i}))
                    .unwrap(),
            );
        }
        (dir, path, events)
    }

    fn file_lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn write_lines(path: &Path, lines: &[String]) {
        let mut text = lines.join("\n");
        text.push('\n');
        std::fs::write(path, text).unwrap();
    }

    fn broken_at(path: &Path, recorded: Option<&Head>) -> (u64, Problem) {
        match verify(path, Some("run-1"), recorded).unwrap() {
            Verification::Broken { seq, problem, .. } => (seq, problem),
            ok => panic!("expected a broken chain, got {ok:?}"),
        }
    }

    #[test]
    fn canonical_json_sorts_keys_recursively_without_whitespace() {
        let v = json!({"b": 1, "a": {"z": [1, {"y": "x", "c": null}], "é": true}, "A": "q\"\n"});
        assert_eq!(
            canonical_json(&v),
            r#"{"A":"q\"\n","a":{"z":[1,{"c":null,"y":"x"}],"é":true},"b":1}"#
        );
    }

    #[test]
    fn hash_is_sha256_of_prev_and_canonical_event() {
        let e = Event {
            seq: 1,
            ts: "2026-01-01T00:00:00Z".into(),
            run: "r".into(),
            kind: Kind::State,
            data: json!({"to": "analyzing"}),
            prev: GENESIS.into(),
            hash: String::new(),
        };
        let canonical = r#"{"data":{"to":"analyzing"},"kind":"state","prev":"0000000000000000000000000000000000000000000000000000000000000000","run":"r","seq":1,"ts":"2026-01-01T00:00:00Z"}"#;
        let expected = hex::encode(Sha256::digest(format!("{GENESIS}{canonical}").as_bytes()));
        assert_eq!(e.compute_hash(), expected);
    }

    #[test]
    fn appended_chain_verifies_and_links() {
        let (_d, path, events) = log_with(5);
        assert_eq!(events[0].prev, GENESIS);
        for w in events.windows(2) {
            assert_eq!(w[1].prev, w[0].hash);
            assert_eq!(w[1].seq, w[0].seq + 1);
        }
        let head = Head {
            seq: 5,
            hash: events[4].hash.clone(),
        };
        assert_eq!(
            verify(&path, Some("run-1"), Some(&head)).unwrap(),
            Verification::Intact {
                events: 5,
                head,
                unanchored: 0
            }
        );
        assert_eq!(read(&path).unwrap().events, events);
    }

    #[test]
    fn every_kind_serializes_to_its_contract_name() {
        let kinds = [
            Kind::State,
            Kind::ModelCall,
            Kind::ToolCall,
            Kind::ToolResult,
            Kind::Policy,
            Kind::Approval,
            Kind::Verify,
            Kind::Commit,
            Kind::Push,
            Kind::Forge,
        ];
        let names: Vec<String> = kinds
            .iter()
            .map(|k| {
                serde_json::to_value(k)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            names,
            [
                "state",
                "model_call",
                "tool_call",
                "tool_result",
                "policy",
                "approval",
                "verify",
                "commit",
                "push",
                "forge"
            ]
        );
        for k in kinds {
            assert_eq!(serde_json::to_value(k).unwrap(), json!(k.as_str()));
        }
    }

    #[test]
    fn edited_event_is_caught_at_its_seq() {
        let (_d, path, _) = log_with(5);
        let mut lines = file_lines(&path);
        lines[2] = lines[2].replace("read_file", "rm_rf");
        write_lines(&path, &lines);
        assert_eq!(broken_at(&path, None), (3, Problem::Hash));
    }

    #[test]
    fn edited_and_rehashed_event_breaks_the_next_link() {
        let (_d, path, _) = log_with(5);
        let mut lines = file_lines(&path);
        let mut e: Event = serde_json::from_str(&lines[1]).unwrap();
        e.data = json!({"name": "forged"});
        e.hash = e.compute_hash();
        lines[1] = serde_json::to_string(&e).unwrap();
        write_lines(&path, &lines);
        assert_eq!(broken_at(&path, None), (3, Problem::Link));
    }

    #[test]
    fn removed_event_is_caught() {
        let (_d, path, _) = log_with(5);
        let mut lines = file_lines(&path);
        lines.remove(1);
        write_lines(&path, &lines);
        assert_eq!(broken_at(&path, None), (2, Problem::Sequence { found: 3 }));
    }

    #[test]
    fn inserted_event_is_caught() {
        let (_d, path, events) = log_with(4);
        let mut lines = file_lines(&path);
        // A well-formed, correctly hashed event that claims seq 3 after event 2.
        let mut forged = Event {
            seq: 3,
            ts: events[1].ts.clone(),
            run: "run-1".into(),
            kind: Kind::Approval,
            data: json!({"approved": true}),
            prev: events[1].hash.clone(),
            hash: String::new(),
        };
        forged.hash = forged.compute_hash();
        lines.insert(2, serde_json::to_string(&forged).unwrap());
        write_lines(&path, &lines);
        // The original event 3 now follows the forged one: its seq and link are wrong.
        assert_eq!(broken_at(&path, None), (4, Problem::Sequence { found: 3 }));
    }

    #[test]
    fn reordered_events_are_caught() {
        let (_d, path, _) = log_with(5);
        let mut lines = file_lines(&path);
        lines.swap(2, 3);
        write_lines(&path, &lines);
        assert_eq!(broken_at(&path, None), (3, Problem::Sequence { found: 4 }));
    }

    #[test]
    fn truncated_log_is_caught_against_the_recorded_head() {
        let (_d, path, events) = log_with(5);
        let head = Head {
            seq: 5,
            hash: events[4].hash.clone(),
        };
        let mut lines = file_lines(&path);
        lines.truncate(3);
        write_lines(&path, &lines);
        assert_eq!(
            broken_at(&path, Some(&head)),
            (4, Problem::Truncated { expected_seq: 5 })
        );
    }

    #[test]
    fn replaced_tail_is_caught_against_the_recorded_head() {
        let (_d, path, events) = log_with(3);
        let head = Head {
            seq: 3,
            hash: events[2].hash.clone(),
        };
        let mut lines = file_lines(&path);
        lines.truncate(2);
        write_lines(&path, &lines);
        let (app, _) = Appender::open(&path, "run-1", no_redaction()).unwrap();
        app.append(Kind::Policy, json!({"decision": "allow"}))
            .unwrap();
        assert_eq!(broken_at(&path, Some(&head)), (3, Problem::HeadMismatch));
    }

    #[test]
    fn events_beyond_the_recorded_head_are_counted_and_a_rewritten_prefix_is_caught() {
        let (_d, path, events) = log_with(3);
        let head = Head {
            seq: 2,
            hash: events[1].hash.clone(),
        };
        match verify(&path, Some("run-1"), Some(&head)).unwrap() {
            Verification::Intact { unanchored, .. } => assert_eq!(unanchored, 1),
            broken => panic!("{broken:?}"),
        }
        // A whole new chain from event 2 on, longer than the recorded head.
        let mut lines = file_lines(&path);
        lines.truncate(1);
        write_lines(&path, &lines);
        let (app, _) = Appender::open(&path, "run-1", no_redaction()).unwrap();
        for _ in 0..3 {
            app.append(Kind::Approval, json!({"approved": true}))
                .unwrap();
        }
        assert_eq!(broken_at(&path, Some(&head)), (2, Problem::HeadMismatch));
    }

    #[test]
    fn torn_tail_is_reported_cut_and_the_chain_continues() {
        let (_d, path, events) = log_with(3);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"seq":4,"ts":"2026-"#).unwrap();
        drop(f);
        assert_eq!(broken_at(&path, None), (4, Problem::TornTail));

        let (app, rec) = Appender::open(&path, "run-1", no_redaction()).unwrap();
        let torn = rec.torn_tail.unwrap();
        assert!(torn.text.starts_with(r#"{"seq":4"#));
        assert_eq!(rec.head.hash, events[2].hash);
        let e = app.append(Kind::State, json!({"to": "editing"})).unwrap();
        assert_eq!((e.seq, e.prev.as_str()), (4, events[2].hash.as_str()));
        assert!(verify(&path, Some("run-1"), None).unwrap().is_intact());
    }

    #[test]
    fn garbage_line_is_unparsable_and_blocks_appending() {
        let (_d, path, _) = log_with(3);
        let mut lines = file_lines(&path);
        lines[1] = "not json".into();
        write_lines(&path, &lines);
        let (seq, problem) = broken_at(&path, None);
        assert_eq!(seq, 2);
        assert!(matches!(problem, Problem::Unparsable { .. }));
        let err = Appender::open(&path, "run-1", no_redaction()).unwrap_err();
        assert!(matches!(err, Error::Broken { seq: 2, .. }), "{err}");
    }

    #[test]
    fn event_of_another_run_is_caught() {
        let (_d, path, _) = log_with(2);
        let err = Appender::open(&path, "run-2", no_redaction()).unwrap_err();
        assert!(matches!(err, Error::WrongRun { .. }), "{err}");
        assert!(matches!(
            verify(&path, Some("run-2"), None).unwrap(),
            Verification::Broken {
                seq: 1,
                problem: Problem::Run { .. },
                ..
            }
        ));
    }

    #[test]
    fn reformatted_but_equal_line_still_verifies() {
        let (_d, path, _) = log_with(2);
        let lines = file_lines(&path);
        let pretty: Vec<String> = lines
            .iter()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                // Reverse key order and add spaces: same content, other bytes.
                let obj = v.as_object().unwrap();
                let parts: Vec<String> = obj
                    .iter()
                    .rev()
                    .map(|(k, v)| format!("{:?} : {}", k, v))
                    .collect();
                format!("{{ {} }}", parts.join(" , "))
            })
            .collect();
        write_lines(&path, &pretty);
        assert!(verify(&path, Some("run-1"), None).unwrap().is_intact());
    }

    #[test]
    fn data_is_redacted_before_hashing_and_writing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let redact: RedactFn = Arc::new(|s: &str| s.replace("hunter2", "***"));
        let (app, _) = Appender::open(&path, "run-1", redact).unwrap();
        let e = app
            .append(
                Kind::ToolResult,
                json!({"out": "password=hunter2", "nested": [{"hunter2": "x hunter2"}]}),
            )
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("hunter2"), "{text}");
        assert_eq!(
            e.data,
            json!({"out": "password=***", "nested": [{"***": "x ***"}]})
        );
        assert!(verify(&path, Some("run-1"), None).unwrap().is_intact());
    }

    #[test]
    fn reopening_continues_the_chain() {
        let (_d, path, events) = log_with(2);
        let (app, rec) = Appender::open(&path, "run-1", no_redaction()).unwrap();
        assert_eq!(rec.head.seq, 2);
        assert!(rec.torn_tail.is_none());
        let e = app.append(Kind::Commit, json!({"sha": "abc"})).unwrap();
        assert_eq!(e.prev, events[1].hash);
        assert_eq!(app.head().unwrap().seq, 3);
        assert!(verify(&path, Some("run-1"), None).unwrap().is_intact());
    }

    #[test]
    fn render_gives_one_line_per_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.jsonl");
        let (app, _) = Appender::open(&path, "run-1", no_redaction()).unwrap();
        app.append_at(
            Kind::State,
            json!({"from": "queued", "to": "analyzing"}),
            "2026-01-01T00:00:00Z".into(),
        )
        .unwrap();
        app.append_at(
            Kind::ToolResult,
            json!({"output": "x\n".repeat(200)}),
            "2026-01-01T00:00:01Z".into(),
        )
        .unwrap();
        let events = read(&path).unwrap().events;
        let text = render(&events);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with(
                "    1  2026-01-01T00:00:00Z  state        from=queued to=analyzing  ["
            ),
            "{}",
            lines[0]
        );
        assert!(lines[0].ends_with(&format!("[{}]", &events[0].hash[..12])));
        assert!(lines[1].contains('…'));
        assert!(lines[1].chars().count() < 200);
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]
        /// Any single removal, swap, duplication or byte edit of a log is caught, given the
        /// recorded head.
        #[test]
        fn any_single_tampering_is_caught(n in 2usize..7, op in 0u8..4, a in 0usize..7, b in 0usize..7, byte in 0usize..400) {
            let (_d, path, events) = log_with(n as u64);
            let head = Head { seq: n as u64, hash: events[n - 1].hash.clone() };
            let mut lines = file_lines(&path);
            let (a, b) = (a % n, b % n);
            match op {
                0 => { lines.remove(a); }
                1 => { proptest::prop_assume!(a != b); lines.swap(a, b); }
                2 => { let l = lines[a].clone(); lines.insert(b, l); }
                _ => {
                    let mut bytes = lines[a].clone().into_bytes();
                    let i = byte % bytes.len();
                    // Change a digit or letter inside the line to another of its kind.
                    let c = bytes[i];
                    proptest::prop_assume!(c.is_ascii_alphanumeric());
                    bytes[i] = if c.is_ascii_digit() { b'0' + (c - b'0' + 1) % 10 } else if c == b'z' { b'a' } else if c == b'Z' { b'A' } else { c + 1 };
                    proptest::prop_assume!(bytes[i].is_ascii_alphanumeric());
                    lines[a] = String::from_utf8(bytes).unwrap();
                }
            }
            write_lines(&path, &lines);
            let v = verify(&path, Some("run-1"), Some(&head)).unwrap();
            proptest::prop_assert!(!v.is_intact(), "not caught: op {} on {:?}", op, lines);
        }
    }
}
