//! What a runner's output comes to — a test run's report: names passed and failed, counts,
//! each failure's decisive text, the format it was read from — and the accumulator and small
//! helpers every runner's parser fills it with (`parse` and the parsers of their own files).

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde::{Deserialize, Serialize};

/// The output format a report was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// libtest (`cargo test`), any number of test binaries.
    Cargo,
    /// pytest's terminal output (`-v` lines, `-rA` summary or the default short summary).
    Pytest,
    /// `go test` text (`-v` or not).
    GoTest,
    /// `go test -json`.
    GoTestJson,
    /// jest's default or verbose reporter.
    Jest,
    /// vitest's default or verbose reporter.
    Vitest,
    /// jest's or vitest's `--json` report.
    JestJson,
    /// TAP whose points are tests: node's test runner (its TAP reporter), `ava --tap`, bats.
    NodeTap,
    /// TAP whose points are assertions under a `# test title` comment: tape.
    Tape,
    /// mocha's spec reporter (its default).
    Mocha,
    /// ava's default reporter.
    Ava,
    /// Python's unittest runner, `-v` or not (also nose2 and Django's test runner).
    Unittest,
    /// node's test runner, spec reporter.
    NodeSpec,
    /// Maven surefire console output.
    Maven,
    /// Gradle console output.
    Gradle,
    /// JUnit XML reports.
    JUnitXml,
}

/// How completely the tests are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Names {
    /// Only counts, or nothing useful.
    None,
    /// Failing tests are named, passing ones only counted.
    FailedOnly,
    /// Every passing and failing test is named.
    Full,
}

/// Test counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Passed.
    pub passed: u64,
    /// Failed (errors included).
    pub failed: u64,
    /// Skipped, ignored, todo.
    pub skipped: u64,
}

impl Counts {
    /// Passed plus failed: the tests that ran.
    pub fn ran(&self) -> u64 {
        self.passed + self.failed
    }
}

/// What a test run's output says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestReport {
    /// Where it was read from.
    pub format: Format,
    /// How completely tests are named.
    pub names: Names,
    /// Counts, from the runner's own summary where it prints one.
    pub counts: Counts,
    /// Passing tests.
    pub passed: BTreeSet<String>,
    /// Failing tests (errors included).
    pub failed: BTreeSet<String>,
    /// Skipped tests.
    pub skipped: BTreeSet<String>,
    /// For failing tests: the runner's text about the failure (may be long; the summary cuts).
    pub details: BTreeMap<String, String>,
}

/// Collects results while a parser reads.
#[derive(Default)]
pub(super) struct Acc {
    pub(super) passed: BTreeSet<String>,
    pub(super) failed: BTreeSet<String>,
    pub(super) skipped: BTreeSet<String>,
    pub(super) details: BTreeMap<String, String>,
    /// Counts printed by the runner, summed over its summary lines.
    pub(super) declared: Option<Counts>,
    /// Whether the output lists passing tests one by one.
    pub(super) lists_passes: bool,
    /// Whether the format was recognised at all.
    pub(super) seen: bool,
    /// The output's own structure is doubled (forged by what the tests printed): recognised,
    /// but no name in it can be trusted.
    pub(super) forged: bool,
}

impl Acc {
    pub(super) fn pass(&mut self, name: impl Into<String>) {
        self.seen = true;
        self.passed.insert(name.into());
    }
    pub(super) fn fail(&mut self, name: impl Into<String>) {
        self.seen = true;
        let name = name.into();
        self.passed.remove(&name);
        self.failed.insert(name);
    }
    pub(super) fn skip(&mut self, name: impl Into<String>) {
        self.seen = true;
        self.skipped.insert(name.into());
    }
    pub(super) fn detail(&mut self, name: &str, text: &str) {
        let text = text.trim_matches('\n');
        if text.trim().is_empty() {
            return;
        }
        let entry = self.details.entry(name.to_owned()).or_default();
        if !entry.is_empty() {
            entry.push('\n');
        }
        entry.push_str(text);
    }
    pub(super) fn declare(&mut self, c: Counts) {
        self.seen = true;
        let d = self.declared.get_or_insert_with(Counts::default);
        d.passed += c.passed;
        d.failed += c.failed;
        d.skipped += c.skipped;
    }
    pub(super) fn finish(mut self, format: Format) -> Option<TestReport> {
        if !self.seen {
            return None;
        }
        // A test can appear as passed in a per-test line and failed elsewhere; failure wins.
        let failed = self.failed.clone();
        self.passed.retain(|n| !failed.contains(n));
        let counts = self.declared.unwrap_or(Counts {
            passed: self.passed.len() as u64,
            failed: self.failed.len() as u64,
            skipped: self.skipped.len() as u64,
        });
        let failed_named = self.failed.len() as u64 >= counts.failed;
        // Without a printed total, only a format that lists every test names passes fully.
        let passes_named = match self.declared {
            Some(d) => self.passed.len() as u64 >= d.passed && (self.lists_passes || d.passed == 0),
            None => self.lists_passes,
        };
        let names = if self.forged {
            Names::None
        } else if failed_named && passes_named {
            Names::Full
        } else if failed_named {
            Names::FailedOnly
        } else {
            Names::None
        };
        Some(TestReport {
            format,
            names,
            counts,
            passed: self.passed,
            failed: self.failed,
            skipped: self.skipped,
            details: self.details,
        })
    }
}

/// Removes ANSI colour and cursor sequences, and keeps only the text after the last carriage
/// return of each line (progress redraws).
pub fn strip_ansi(text: &str) -> String {
    let re =
        Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-B]")
            .unwrap_or_else(|_| unreachable_regex());
    let plain = re.replace_all(text, "");
    let mut out = String::with_capacity(plain.len());
    for line in plain.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b.strip_suffix('\r').unwrap_or(b), "\n"),
            None => (line, ""),
        };
        out.push_str(body.rsplit('\r').next().unwrap_or(body));
        out.push_str(nl);
    }
    out
}

/// A pattern that matches nothing: the fallback for our own literal patterns, which compile.
fn unreachable_regex() -> Regex {
    Regex::new(r"[^\s\S]").unwrap_or_else(|_| unreachable_regex())
}

pub(super) fn re(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| {
        tracing::error!(%pattern, error = %e, "invalid built-in pattern");
        unreachable_regex()
    })
}

pub(super) fn num(s: &str) -> u64 {
    s.parse().unwrap_or(0)
}
