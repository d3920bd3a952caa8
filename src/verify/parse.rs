//! Result parsers: a runner's output → passed and failed test names, counts and the decisive
//! text of each failure.
//!
//! Names are qualified so that they are unique across a run and stable between runs of the
//! same command: cargo `crate(src/lib.rs)::tests::name`, pytest node ids, go `pkg::TestName`,
//! jest `file › describe › test`, vitest `file > describe > test`, node and mocha
//! `suite > test`, ava `file › test`, tape's test titles, unittest ids
//! `package.module.Class.method`, JUnit `classname.name`. Compare only reports of the same
//! command.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::detect::Runner;
use super::report::{Acc, Counts, Format, TestReport, num, re, strip_ansi};

/// Parses a test run's output (stdout and stderr as captured; colours are stripped here).
///
/// Every known format is tried; the report that names the most tests wins. Where `hint` (the
/// runner of the command) has formats of its own, only those are read; otherwise it breaks
/// ties. `None` when no format is recognised.
pub fn parse_output(hint: Option<Runner>, output: &str) -> Option<TestReport> {
    let text = strip_ansi(output);
    let candidates = [
        parse_cargo(&text),
        parse_pytest(&text),
        parse_go_json(&text),
        parse_go(&text),
        parse_jest_json(&text),
        parse_jest(&text),
        parse_vitest(&text),
        parse_node_tap(&text),
        parse_node_spec(&text),
        super::mocha::parse_mocha(&text),
        super::ava::parse_ava(&text),
        super::unittest::parse_unittest(&text),
        parse_maven(&text),
        parse_gradle(&text),
    ];
    // The runner's own format, where the command says which runner it is. Any other reading
    // of its output is text the tests printed: `ok 1 - tests/test_x.py::test_y` printed by
    // the code under test is TAP to a TAP reader, never a pytest result (issue 18).
    let own = |f: Format| match hint {
        Some(Runner::Cargo) => Some(f == Format::Cargo),
        Some(Runner::Pytest) => Some(f == Format::Pytest),
        Some(Runner::GoTest) => Some(matches!(f, Format::GoTest | Format::GoTestJson)),
        Some(Runner::Maven) => Some(f == Format::Maven),
        Some(Runner::Gradle) => Some(f == Format::Gradle),
        Some(Runner::Npm | Runner::Pnpm | Runner::Yarn) => Some(matches!(
            f,
            Format::Jest
                | Format::Vitest
                | Format::JestJson
                | Format::NodeTap
                | Format::NodeSpec
                | Format::Tape
                | Format::Mocha
                | Format::Ava
        )),
        Some(Runner::Unittest) => Some(f == Format::Unittest),
        Some(Runner::Make | Runner::Other) | None => None,
    };
    candidates
        .into_iter()
        .flatten()
        .filter(|r| own(r.format) != Some(false))
        .max_by_key(|r| {
            (
                r.names,
                r.passed.len() + r.failed.len(),
                r.counts.ran(),
                own(r.format) == Some(true),
            )
        })
}

// ---------------------------------------------------------------------------------------
// cargo test (libtest)

/// Reads libtest output, naming each test `binary(source)::path` after the `Running …` or
/// `Doc-tests …` line of its test binary, so that `test_eq` in `src/lib.rs` and in
/// `tests/api.rs` stay two tests.
///
/// cargo prints those lines on stderr and the tests print on stdout. Captured through one
/// pipe (`2>&1`) each line precedes its binary's `running N tests`; captured as two streams
/// and joined, every `running N tests` comes first and the binaries follow in the same order,
/// so the k-th header belongs to the k-th binary. Both layouts give the same names. When the
/// numbers differ (a `harness = false` binary that prints no header, output cut short) the
/// binaries cannot be matched up, and names are left unqualified rather than guessed.
fn parse_cargo(text: &str) -> Option<TestReport> {
    let running = re(
        r"^\s*Running (?:unittests )?(\S+) \((?:.*/)?([^/()]+?)(?:-[0-9a-f]{8,})?(?:\.exe)?\)\s*$",
    );
    let doc = re(r"^\s*Doc-tests (\S+)\s*$");
    let header = re(r"^running \d+ tests?$");
    let binary = |l: &str| {
        if let Some(c) = running.captures(l) {
            Some(format!("{}({})::", &c[2], &c[1]))
        } else {
            doc.captures(l).map(|c| format!("{}(doc)::", &c[1]))
        }
    };
    // Split layout: the tests' stdout came before cargo's stderr.
    let mut binaries: Vec<String> = Vec::new();
    let mut headers = 0usize;
    let mut header_first = false;
    for l in text.lines() {
        if let Some(b) = binary(l) {
            binaries.push(b);
        } else if header.is_match(l) {
            header_first |= binaries.is_empty();
            headers += 1;
        }
    }
    let mut by_position = if header_first && binaries.len() == headers {
        Some(binaries.into_iter())
    } else {
        if header_first && !binaries.is_empty() {
            tracing::debug!(
                binaries = binaries.len(),
                headers,
                "cargo output: test binaries and their headers do not pair up; names unqualified"
            );
        }
        None
    };
    let line = re(r"^test (.+?) \.\.\. (ok|FAILED|ignored.*|bench.*)$");
    let result = re(
        r"^test result: (?:ok|FAILED)\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; \d+ filtered out",
    );
    let stdout_hdr = re(r"^---- (.+?) std(?:out|err) ----$");
    // A test that overflows its stack kills its whole binary before any result line: the
    // runtime names it on stderr, which follows its binary's `Running` line in both layouts.
    let overflowed = re(r"^thread '(.+?)'(?: \(\d+\))? has overflowed its stack$");
    let mut acc = Acc {
        lists_passes: true,
        ..Acc::default()
    };
    let mut prefix = String::new();
    let mut running_now = String::new();
    let mut block: Option<(String, String)> = None;
    for l in text.lines() {
        if let Some((name, body)) = &mut block {
            if l == "failures:" || l.starts_with("---- ") || l.starts_with("test result:") {
                let (name, body) = (name.clone(), body.clone());
                acc.detail(&name, &body);
                block = None;
            } else {
                body.push_str(l);
                body.push('\n');
                continue;
            }
        }
        if let Some(b) = binary(l) {
            if !header_first {
                prefix = b.clone();
            }
            running_now = b;
        } else if let Some(c) = overflowed.captures(l).filter(|c| &c[1] != "main") {
            let name = format!("{running_now}{}", &c[1]);
            acc.detail(&name, l);
            acc.fail(name);
        } else if header.is_match(l) {
            if let Some(b) = by_position.as_mut().and_then(Iterator::next) {
                prefix = b;
            }
        } else if let Some(c) = line.captures(l) {
            let name = format!("{prefix}{}", &c[1]);
            match &c[2] {
                "ok" => acc.pass(name),
                "FAILED" => acc.fail(name),
                s if s.starts_with("ignored") => acc.skip(name),
                _ => acc.pass(name),
            }
        } else if let Some(c) = result.captures(l) {
            acc.declare(Counts {
                passed: num(&c[1]),
                failed: num(&c[2]),
                skipped: num(&c[3]),
            });
        } else if let Some(c) = stdout_hdr.captures(l) {
            block = Some((format!("{prefix}{}", &c[1]), String::new()));
        }
    }
    if let Some((name, body)) = block {
        acc.detail(&name, &body);
    }
    acc.finish(Format::Cargo)
}

// ---------------------------------------------------------------------------------------
// pytest

fn parse_pytest_counts(summary: &str) -> Counts {
    let item = re(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)");
    let mut c = Counts::default();
    for m in item.captures_iter(summary) {
        let n = num(&m[1]);
        match &m[2] {
            "passed" | "xpassed" => c.passed += n,
            "failed" | "error" | "errors" => c.failed += n,
            "skipped" | "xfailed" => c.skipped += n,
            _ => {}
        }
    }
    c
}

/// Where a line of pytest's terminal output stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PytestPart {
    /// `test session starts` up to the first section: progress and `-v` result lines.
    Session,
    /// `FAILURES`/`ERRORS`: each failure's traceback, read for its details only.
    Details,
    /// `short test summary info`: one line per reported test (`-r`).
    Summary,
    /// Any other section (`PASSES`, `warnings summary`, …): nothing in it is a result.
    Other,
    /// After the final counts line: nothing pytest prints.
    End,
}

/// Reads pytest's terminal output.
///
/// Results are read only where pytest itself writes them: the session's progress and `-v`
/// lines, the `short test summary info` section and the final counts line. The bodies of the
/// other sections — tracebacks, the `PASSES` section of `-rA`, warnings, and every
/// `--- Captured stdout … ---` block — hold what the code under test printed, so a
/// `PASSED x` or `9 passed in 0.01s` line there is text, not a result. Where the structure
/// itself is doubled (a second session header, a second summary section, a second final
/// line outside captured output: what code printing at exit looks like), the output is
/// taken as forged and names nothing (issue 18).
fn parse_pytest(text: &str) -> Option<TestReport> {
    let short = re(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL|SKIPPED) (.+?)(?: - .*)?$");
    let verbose =
        re(r"^(\S+::\S.*?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?:\s+\[\s*\d+%\])?\s*$");
    let final_line = re(
        r"^=*\s*((?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)(?:, )?)+)(?: in [\d.]+s.*?)\s*=*$",
    );
    let header = re(r"^={3,} (.+?) ={3,}$");
    let title = re(r"^_{3,} (.+?) _{3,}$");
    let captured = re(r"^-{3,} Captured .+ -{3,}$");
    let mut acc = Acc::default();
    let mut sections: Vec<(String, String)> = Vec::new();
    let mut part = PytestPart::Session;
    let mut in_captured = false;
    let (mut sessions, mut summaries) = (0usize, 0usize);
    let mut finals: Vec<Counts> = Vec::new();
    let mut captured_final: Option<Counts> = None;
    for l in text.lines() {
        if let Some(c) = final_line.captures(l) {
            let counts = parse_pytest_counts(&c[1]);
            if in_captured {
                // Printed by a test, or the real last line after a captured block that no
                // section closed (`-rN`): only the last such line may be pytest's.
                captured_final = Some(counts);
            } else {
                finals.push(counts);
                part = PytestPart::End;
            }
            continue;
        }
        if let Some(c) = header.captures(l) {
            in_captured = false;
            let name = c[1].trim();
            part = match name {
                "test session starts" => {
                    sessions += 1;
                    PytestPart::Session
                }
                "short test summary info" => {
                    summaries += 1;
                    PytestPart::Summary
                }
                "FAILURES" | "ERRORS" => PytestPart::Details,
                _ => PytestPart::Other,
            };
            continue;
        }
        if matches!(part, PytestPart::Details | PytestPart::Other) {
            if title.is_match(l) {
                in_captured = false;
            } else if captured.is_match(l) {
                in_captured = true;
            }
        }
        match part {
            PytestPart::Details => {
                if let Some(c) = title.captures(l) {
                    sections.push((c[1].to_owned(), String::new()));
                } else if let Some((_, body)) = sections.last_mut() {
                    body.push_str(l);
                    body.push('\n');
                }
            }
            PytestPart::Other | PytestPart::End => {}
            PytestPart::Session | PytestPart::Summary => {
                let (name, status) = if let Some(c) = short.captures(l) {
                    (c[2].to_owned(), c[1].to_owned())
                } else if let Some(c) = verbose.captures(l) {
                    (c[1].to_owned(), c[2].to_owned())
                } else {
                    continue;
                };
                match status.as_str() {
                    "PASSED" | "XPASS" => {
                        acc.lists_passes = true;
                        acc.pass(name);
                    }
                    "FAILED" | "ERROR" => acc.fail(name),
                    // `SKIPPED [1] file:line: reason` names no test.
                    "SKIPPED" if name.starts_with('[') => acc.seen = true,
                    _ => acc.skip(name),
                }
            }
        }
    }
    if sessions > 1 || summaries > 1 || finals.len() > 1 {
        tracing::debug!(
            sessions,
            summaries,
            finals = finals.len(),
            "pytest output repeats its own structure: taken as forged, no test named"
        );
        acc.forged = true;
    }
    if let Some(c) = finals.last().copied().or(captured_final) {
        acc.declare(c);
    }
    // Sections are titled `test_x[param]`, `TestClass.test_m`, `ERROR collecting path` or,
    // for a fixture that failed, `ERROR at setup of test_x` (`teardown`).
    let failed: Vec<String> = acc.failed.iter().cloned().collect();
    for (title, body) in sections {
        let key = title
            .strip_prefix("ERROR collecting ")
            .map(str::to_owned)
            .unwrap_or_else(|| {
                let test = ["ERROR at setup of ", "ERROR at teardown of "]
                    .iter()
                    .find_map(|p| title.strip_prefix(p))
                    .unwrap_or(&title);
                // `TestClass.test_m[a.b]`: a dot is a class separator only before the
                // parameters, which may hold any text (`[val=a = attr.ib(type=int)]`).
                let (path, params) = test.split_at(test.find('[').unwrap_or(test.len()));
                format!("{}{params}", path.replace('.', "::"))
            });
        if let Some(name) = failed
            .iter()
            .find(|n| *n == &key || n.ends_with(&format!("::{key}")))
        {
            acc.detail(name, &body);
        }
    }
    acc.finish(Format::Pytest)
}

// ---------------------------------------------------------------------------------------
// go test

fn parse_go(text: &str) -> Option<TestReport> {
    let result = re(r"^(\s*)--- (PASS|FAIL|SKIP): (\S+) \(");
    let run = re(r"^=== RUN\s+(\S+)");
    let pkg = re(
        r"^(ok|FAIL|---? FAIL)\s+(\S+)\s+(?:[\d.]+s|\(cached\)|\[build failed\]|\[setup failed\])",
    );
    let mut acc = Acc::default();
    // Results wait for their package line, which follows a package's tests.
    let mut pending: Vec<(String, &str, String)> = Vec::new();
    let mut output: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut after_fail: Option<(String, usize)> = None;
    let mut build_errors: Option<(String, String)> = None;
    for l in text.lines() {
        if let Some(c) = run.captures(l) {
            acc.lists_passes = true;
            current = Some(c[1].to_owned());
            after_fail = None;
            continue;
        }
        if let Some(c) = result.captures(l) {
            let status = match &c[2] {
                "PASS" => "pass",
                "FAIL" => "fail",
                _ => "skip",
            };
            if status == "pass" {
                acc.lists_passes = true;
            }
            let name = c[3].to_owned();
            if status == "fail" {
                after_fail = Some((name.clone(), c[1].len()));
            }
            pending.push((name, status, String::new()));
            current = None;
            continue;
        }
        if let Some(p) = l.strip_prefix("# ") {
            // `# pkg [pkg.test]` opens the compiler's messages for a package.
            let p = p.split_whitespace().next().unwrap_or("").to_owned();
            build_errors = Some((p, String::new()));
            continue;
        }
        if let Some(c) = pkg.captures(l) {
            let p = c[2].to_owned();
            if l.contains("[build failed]") || l.contains("[setup failed]") {
                let name = format!("{p}::[build]");
                if let Some((_, text)) = build_errors.take().filter(|(bp, _)| *bp == p) {
                    acc.detail(&name, &text);
                }
                acc.fail(name);
            }
            for (name, status, _) in pending.drain(..) {
                let full = format!("{p}::{name}");
                match status {
                    "pass" => acc.pass(full),
                    "fail" => {
                        if let Some(out) = output.get(&name) {
                            acc.detail(&full, out);
                        }
                        acc.fail(full);
                    }
                    _ => acc.skip(full),
                }
            }
            output.clear();
            current = None;
            after_fail = None;
            continue;
        }
        if let Some((_, text)) = &mut build_errors {
            text.push_str(l);
            text.push('\n');
            continue;
        }
        // Output of a test: under `=== RUN` with -v, under `--- FAIL` without it.
        let owner = match (&current, &after_fail) {
            (Some(t), _) => Some(t.clone()),
            (None, Some((t, indent)))
                if l.len() > *indent && l.starts_with(&" ".repeat(indent + 4)) =>
            {
                Some(t.clone())
            }
            _ => None,
        };
        if let Some(t) = owner {
            let entry = output.entry(t).or_default();
            entry.push_str(l);
            entry.push('\n');
        }
    }
    if !pending.is_empty() {
        // Output cut before the package line: keep the names unqualified.
        for (name, status, _) in pending {
            match status {
                "pass" => acc.pass(name),
                "fail" => acc.fail(name),
                _ => acc.skip(name),
            }
        }
    }
    acc.finish(Format::GoTest)
}

fn parse_go_json(text: &str) -> Option<TestReport> {
    #[derive(Deserialize)]
    struct Ev {
        #[serde(rename = "Action")]
        action: String,
        #[serde(rename = "Package", default)]
        package: String,
        #[serde(rename = "Test")]
        test: Option<String>,
        #[serde(rename = "Output")]
        output: Option<String>,
    }
    let mut acc = Acc {
        lists_passes: true,
        ..Acc::default()
    };
    let mut outputs: BTreeMap<String, String> = BTreeMap::new();
    let build_failed = re(r"^FAIL\s+(\S+) \[(?:build|setup) failed\]");
    for l in text.lines() {
        // Build failures are printed as text even with -json (go ≤ 1.23).
        if let Some(c) = build_failed.captures(l) {
            acc.fail(format!("{}::[build]", &c[1]));
            continue;
        }
        let Ok(ev) = serde_json::from_str::<Ev>(l.trim()) else {
            continue;
        };
        let Some(test) = ev.test else {
            if ev.action == "fail" {
                acc.fail(format!("{}::[package]", ev.package));
            } else {
                acc.seen = true;
            }
            continue;
        };
        let name = format!("{}::{}", ev.package, test);
        match ev.action.as_str() {
            "pass" => acc.pass(name),
            "fail" => {
                if let Some(out) = outputs.get(&name) {
                    let body: String = out
                        .lines()
                        .filter(|l| !l.starts_with("=== ") && !l.trim_start().starts_with("--- "))
                        .map(|l| format!("{l}\n"))
                        .collect();
                    acc.detail(&name, &body);
                }
                acc.fail(name);
            }
            "skip" => acc.skip(name),
            "output" => outputs
                .entry(name)
                .or_default()
                .push_str(ev.output.as_deref().unwrap_or("")),
            _ => {}
        }
    }
    // A package fails when any of its tests fails; keep the package entry only when it failed
    // without a failing test (build errors, panics outside tests).
    let failing_pkgs: Vec<String> = acc
        .failed
        .iter()
        .filter_map(|n| n.strip_suffix("::[package]").map(str::to_owned))
        .collect();
    for p in failing_pkgs {
        let prefix = format!("{p}::");
        if acc
            .failed
            .iter()
            .any(|n| n.starts_with(&prefix) && !n.ends_with("::[package]"))
        {
            acc.failed.remove(&format!("{p}::[package]"));
        }
    }
    acc.finish(Format::GoTestJson)
}

// ---------------------------------------------------------------------------------------
// jest and vitest

fn parse_js_summary(l: &str) -> Option<Counts> {
    let item = re(r"(\d+) (passed|failed|skipped|todo|pending)");
    let mut c = Counts::default();
    for m in item.captures_iter(l) {
        let n = num(&m[1]);
        match &m[2] {
            "passed" => c.passed += n,
            "failed" => c.failed += n,
            _ => c.skipped += n,
        }
    }
    Some(c)
}

fn parse_jest(text: &str) -> Option<TestReport> {
    let file = re(r"^(PASS|FAIL) (\S+)");
    let test = re(r"^(\s+)(✓|✕|○|√|×) (?:skipped |todo )?(.+?)(?: \(\d+(?:\.\d+)? ?m?s\))?$");
    let group = re(r"^(\s+)(\S.*)$");
    let bullet = re(r"^\s+● (.+)$");
    let summary = re(r"^Tests:\s+(.*\d+ total)");
    let mut acc = Acc::default();
    let mut current_file = String::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut block: Option<(String, String)> = None;
    let mut saw_summary = false;
    for l in text.lines() {
        if let Some(c) = summary.captures(l) {
            saw_summary = true;
            if let Some(counts) = parse_js_summary(&c[1]) {
                acc.declare(counts);
            }
            continue;
        }
        if let Some(c) = file.captures(l) {
            if let Some((n, b)) = block.take() {
                acc.detail(&n, &b);
            }
            current_file = c[2].to_owned();
            stack.clear();
            continue;
        }
        if let Some(c) = bullet.captures(l) {
            if let Some((n, b)) = block.take() {
                acc.detail(&n, &b);
            }
            let title = c[1].to_owned();
            if title.starts_with("Test suite failed to run") {
                let name = format!("{current_file} › [suite]");
                acc.fail(name.clone());
                block = Some((name, String::new()));
            } else {
                let name = format!("{current_file} › {title}");
                acc.fail(name.clone());
                block = Some((name, String::new()));
            }
            continue;
        }
        if let Some((_, body)) = &mut block {
            if l.starts_with("Test Suites:") {
                let (n, b) = block.take().unwrap_or_default();
                acc.detail(&n, &b);
            } else {
                body.push_str(l);
                body.push('\n');
            }
            continue;
        }
        if let Some(c) = test.captures(l) {
            let indent = c[1].len();
            stack.retain(|(i, _)| *i < indent);
            let mut parts = vec![current_file.clone()];
            parts.extend(stack.iter().map(|(_, g)| g.clone()));
            parts.push(c[3].to_owned());
            let name = parts.join(" › ");
            match &c[2] {
                "✓" | "√" => {
                    acc.lists_passes = true;
                    acc.pass(name);
                }
                "✕" | "×" => acc.fail(name),
                _ => acc.skip(name),
            }
        } else if !current_file.is_empty()
            && let Some(c) = group.captures(l)
        {
            let indent = c[1].len();
            stack.retain(|(i, _)| *i < indent);
            stack.push((indent, c[2].trim().to_owned()));
        }
    }
    if let Some((n, b)) = block {
        acc.detail(&n, &b);
    }
    if !saw_summary {
        return None;
    }
    acc.finish(Format::Jest)
}

fn parse_vitest(text: &str) -> Option<TestReport> {
    // Verbose: ` ✓ file > suite > test 1ms`. Default: `FAIL  file > suite > test` headers.
    let line = re(r"^ {0,2}(✓|×|↓|✗|√) (\S+ > .+?)(?: \d+(?:\.\d+)?\s?m?s)?$");
    let fail_hdr = re(r"^ ?FAIL\s+(\S+ > .+?)\s*$");
    let summary = re(r"^\s*Tests\s+(.*\(\d+\))");
    let sep = re(r"^⎯{3,}");
    let mut acc = Acc::default();
    let mut saw_summary = false;
    let mut block: Option<(String, String)> = None;
    for l in text.lines() {
        if let Some(c) = summary.captures(l) {
            saw_summary = true;
            if let Some(counts) = parse_js_summary(&c[1]) {
                acc.declare(counts);
            }
            continue;
        }
        if let Some(c) = fail_hdr.captures(l) {
            if let Some((n, b)) = block.take() {
                acc.detail(&n, &b);
            }
            let name = c[1].to_owned();
            acc.fail(name.clone());
            block = Some((name, String::new()));
            continue;
        }
        if sep.is_match(l) {
            if let Some((n, b)) = block.take() {
                acc.detail(&n, &b);
            }
            continue;
        }
        if let Some((_, body)) = &mut block {
            body.push_str(l);
            body.push('\n');
            continue;
        }
        if let Some(c) = line.captures(l) {
            let name = c[2].to_owned();
            match &c[1] {
                "✓" | "√" => {
                    acc.lists_passes = true;
                    acc.pass(name);
                }
                "×" | "✗" => acc.fail(name),
                _ => acc.skip(name),
            }
        }
    }
    if let Some((n, b)) = block {
        acc.detail(&n, &b);
    }
    if !saw_summary {
        return None;
    }
    acc.finish(Format::Vitest)
}

fn parse_jest_json(text: &str) -> Option<TestReport> {
    // The report is one JSON object; find it even with other output around it.
    let start = text.find("{\"num")?;
    let value: serde_json::Value = serde_json::Deserializer::from_str(&text[start..])
        .into_iter::<serde_json::Value>()
        .next()?
        .ok()?;
    let results = value.get("testResults")?.as_array()?;
    let mut acc = Acc {
        lists_passes: true,
        seen: true,
        ..Acc::default()
    };
    for file in results {
        let fname = file.get("name").and_then(|n| n.as_str()).unwrap_or("");
        let assertions = file
            .get("assertionResults")
            .and_then(|a| a.as_array())
            .cloned()
            .unwrap_or_default();
        if assertions.is_empty() && file.get("status").and_then(|s| s.as_str()) == Some("failed") {
            let name = format!("{fname} › [suite]");
            if let Some(msg) = file.get("message").and_then(|m| m.as_str()) {
                acc.detail(&name, msg);
            }
            acc.fail(name);
        }
        for a in assertions {
            let mut parts = vec![fname.to_owned()];
            if let Some(anc) = a.get("ancestorTitles").and_then(|t| t.as_array()) {
                parts.extend(anc.iter().filter_map(|t| t.as_str().map(str::to_owned)));
            }
            parts.push(
                a.get("title")
                    .and_then(|t| t.as_str())
                    .unwrap_or("")
                    .to_owned(),
            );
            let name = parts.join(" › ");
            match a.get("status").and_then(|s| s.as_str()).unwrap_or("") {
                "passed" => acc.pass(name),
                "failed" => {
                    let msgs: Vec<String> = a
                        .get("failureMessages")
                        .and_then(|m| m.as_array())
                        .map(|m| {
                            m.iter()
                                .filter_map(|x| x.as_str().map(strip_ansi))
                                .collect()
                        })
                        .unwrap_or_default();
                    acc.detail(&name, &msgs.join("\n"));
                    acc.fail(name);
                }
                _ => acc.skip(name),
            }
        }
    }
    acc.finish(Format::JestJson)
}

// ---------------------------------------------------------------------------------------
// node --test

/// TAP, in the two shapes test runners give it.
///
/// Where each test point is a test (node's test runner, `ava --tap`, bats, Perl's
/// Test::More): the point's description is the name, and `# Subtest:` blocks nest, named
/// `suite > test`. Where points are assertions grouped under a `# title` comment (tape and
/// its kin, which write `ok 3 should be equal` with no ` - `): the comment is the test, it
/// fails when any of its assertions fails, and assertion numbers and messages are not part
/// of any name, so adding an assertion renames nothing. tape prints the titles of nested
/// tests flat, and two tests with the same title (in two files) are one name.
fn parse_node_tap(text: &str) -> Option<TestReport> {
    let subtest = re(r"^(\s*)# Subtest: (.+)$");
    let result = re(r"^(\s*)(ok|not ok) \d+(?: -)? (.+?)(?: # ((?i:SKIP|TODO))(?-u:\b).*)?$");
    let yaml_key = re(r"^(\s*)([A-Za-z_]+):");
    let plan = re(r"^1\.\.\d+");
    let title = re(r"^# (?:(SKIP|TODO) )?(.+?)\s*$");
    // The runner's closing counts, and node's, are comments too.
    let counts = re(
        r"^# (?:tests|pass|fail|skip|skipped|todo|ok|suites|cancelled|duration_ms)(?:\s+[\d.]+)?\s*$",
    );
    let dashed = re(r"^\s*(?:ok|not ok) \d+ - ");
    let grouped = !text
        .lines()
        .any(|l| subtest.is_match(l) || dashed.is_match(l))
        && text
            .lines()
            .find(|l| result.is_match(l) || (title.is_match(l) && !counts.is_match(l)))
            .is_some_and(|l| l.starts_with('#'));
    // The `# title` comment the next assertions belong to, and whether it is a TODO.
    let mut group: Option<(String, bool)> = None;
    // TAP lists every test, passing or not.
    let mut acc = Acc {
        lists_passes: true,
        ..Acc::default()
    };
    let mut saw_header = false;
    // (indent, name, has children)
    let mut stack: Vec<(usize, String, bool)> = Vec::new();
    // The failing test whose YAML block we are in, its key indentation and the current key.
    let mut yaml: Option<(String, Option<usize>, String)> = None;
    let mut last_failed: Option<String> = None;
    let mut diagnostics: Option<String> = None;
    for l in text.lines() {
        if l.starts_with("TAP version") || plan.is_match(l) {
            saw_header = true;
            continue;
        }
        if grouped {
            if let Some(c) = title.captures(l).filter(|_| !counts.is_match(l)) {
                let name = c[2].to_owned();
                match c.get(1).map(|m| m.as_str()) {
                    Some("SKIP") => {
                        acc.skip(name);
                        group = None;
                    }
                    todo => group = Some((name, todo.is_some())),
                }
                last_failed = None;
                yaml = None;
                continue;
            }
            if let Some(c) = result.captures(l) {
                last_failed = None;
                yaml = None;
                let Some((name, todo)) = group.clone() else {
                    // An assertion outside any test: its description is all there is.
                    record_point(&mut acc, c[3].to_owned(), &c[2], c.get(4).is_some());
                    continue;
                };
                if todo {
                    acc.skip(name);
                } else if &c[2] == "not ok" && c.get(4).is_none() {
                    last_failed = Some(name.clone());
                    acc.fail(name);
                } else {
                    acc.pass(name);
                }
                continue;
            }
        }
        if let Some(c) = subtest.captures(l) {
            let indent = c[1].len();
            if let Some(parent) = stack.last_mut()
                && parent.0 < indent
            {
                parent.2 = true;
            }
            stack.push((indent, c[2].to_owned(), false));
            last_failed = None;
            diagnostics = None;
            yaml = None;
            continue;
        }
        if let Some(c) = result.captures(l) {
            let indent = c[1].len();
            // The result line closes the subtest at its indentation.
            let pos = stack.iter().rposition(|(i, _, _)| *i == indent);
            let (name, leaf) = match pos {
                Some(p) => {
                    let name = stack[..=p]
                        .iter()
                        .map(|(_, n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(" > ");
                    let leaf = !stack[p].2;
                    stack.truncate(p);
                    (name, leaf)
                }
                None => (c[3].to_owned(), true),
            };
            last_failed = None;
            yaml = None;
            if !leaf {
                continue;
            }
            diagnostics = None;
            if &c[2] == "not ok" && c.get(4).is_none() {
                last_failed = Some(name.clone());
                diagnostics = Some(name.clone());
            }
            record_point(&mut acc, name, &c[2], c.get(4).is_some());
            continue;
        }
        // Comments after a failing point are its diagnostics (bats: file, line, command).
        if let Some(name) = &diagnostics
            && l.starts_with('#')
            && !counts.is_match(l)
        {
            let name = name.clone();
            acc.detail(&name, l);
            continue;
        }
        let t = l.trim();
        if t == "---" {
            if let Some(name) = last_failed.take() {
                yaml = Some((name, None, String::new()));
            }
            continue;
        }
        if t == "..." {
            yaml = None;
            continue;
        }
        if let Some((name, key_indent, key)) = &mut yaml {
            // Keys sit at the indentation of the block's first key (node: level with `---`;
            // tape and ava: two deeper).
            if let Some(c) = yaml_key.captures(l)
                && *key_indent.get_or_insert(c[1].len()) == c[1].len()
            {
                *key = c[2].to_owned();
            }
            // node: error, expected, actual, operator, location; tape: operator, expected,
            // actual, at; ava: message, details, at. Not the stack: its first user frame
            // is `at`/`location` already.
            if matches!(
                key.as_str(),
                "error"
                    | "expected"
                    | "actual"
                    | "operator"
                    | "location"
                    | "at"
                    | "message"
                    | "details"
            ) {
                let name = name.clone();
                acc.detail(&name, l.trim_end());
            }
        }
    }
    if !saw_header {
        return None;
    }
    acc.finish(if grouped {
        Format::Tape
    } else {
        Format::NodeTap
    })
}

/// A TAP point that is a test of its own: `# SKIP` or `# TODO` skips it.
fn record_point(acc: &mut Acc, name: String, status: &str, directive: bool) {
    if directive {
        acc.skip(name);
    } else if status == "ok" {
        acc.pass(name);
    } else {
        acc.fail(name);
    }
}

fn parse_node_spec(text: &str) -> Option<TestReport> {
    let line = re(r"^(\s*)(✔|✖|﹣|▶) (.+?)(?: \([\d.]+m?s\))?(?: # (SKIP|TODO).*)?$");
    let info = re(r"^ℹ (tests|pass|fail|skipped|todo) (\d+)$");
    let mut acc = Acc::default();
    let mut declared = Counts::default();
    let mut saw_info = false;
    let mut suites: Vec<(usize, String)> = Vec::new();
    let mut block: Option<(String, usize, String)> = None;
    for l in text.lines() {
        if l.starts_with("✖ failing tests:") {
            break;
        }
        if let Some(c) = info.captures(l) {
            saw_info = true;
            let n = num(&c[2]);
            match &c[1] {
                "pass" => declared.passed = n,
                "fail" => declared.failed = n,
                "skipped" | "todo" => declared.skipped += n,
                _ => {}
            }
            continue;
        }
        if let Some(c) = line.captures(l) {
            if let Some((n, _, b)) = block.take() {
                acc.detail(&n, &b);
            }
            let indent = c[1].len();
            let title = c[3].to_owned();
            if &c[2] == "▶" {
                suites.retain(|(i, _)| *i < indent);
                suites.push((indent, title));
                continue;
            }
            // A suite's own result line closes it; it is not a test.
            if let Some(p) = suites
                .iter()
                .rposition(|(i, n)| *i == indent && *n == title)
            {
                suites.truncate(p);
                continue;
            }
            suites.retain(|(i, _)| *i < indent);
            let mut parts: Vec<String> = suites.iter().map(|(_, n)| n.clone()).collect();
            parts.push(title);
            let name = parts.join(" > ");
            if c.get(4).is_some() || &c[2] == "﹣" {
                acc.skip(name);
            } else if &c[2] == "✔" {
                acc.lists_passes = true;
                acc.pass(name);
            } else {
                acc.fail(name.clone());
                block = Some((name, indent, String::new()));
            }
            continue;
        }
        if let Some((_, indent, body)) = &mut block {
            let t = l.trim_start();
            if l.len() - t.len() > *indent && !t.starts_with("at node:") && !t.contains("(node:") {
                body.push_str(l);
                body.push('\n');
            }
        }
    }
    if let Some((n, _, b)) = block {
        acc.detail(&n, &b);
    }
    if !saw_info {
        return None;
    }
    acc.declare(declared);
    acc.finish(Format::NodeSpec)
}

// ---------------------------------------------------------------------------------------
// Maven and Gradle console output (names come from their JUnit XML reports)

fn parse_maven(text: &str) -> Option<TestReport> {
    let totals = re(
        r"^\[(?:INFO|WARNING|ERROR)\] Tests run: (\d+), Failures: (\d+), Errors: (\d+), Skipped: (\d+)\s*$",
    );
    let failure = re(r"^\[ERROR\]\s{2,}(\S+?)(?::(\d+))?(?: (.*))?$");
    let section = re(r"^\[ERROR\] (Failures|Errors):\s*$");
    let mut acc = Acc::default();
    let mut last: Option<Counts> = None;
    let mut in_section = false;
    for l in text.lines() {
        if let Some(c) = totals.captures(l) {
            // The un-suffixed line after `Results:` is the total of the module.
            last = Some(Counts {
                passed: num(&c[1]).saturating_sub(num(&c[2]) + num(&c[3]) + num(&c[4])),
                failed: num(&c[2]) + num(&c[3]),
                skipped: num(&c[4]),
            });
            in_section = false;
            continue;
        }
        if section.is_match(l) {
            in_section = true;
            continue;
        }
        if in_section {
            if let Some(c) = failure.captures(l) {
                let name = c[1].to_owned();
                acc.detail(&name, l.trim_start_matches("[ERROR]").trim());
                acc.fail(name);
            } else if !l.starts_with("[ERROR]   ") {
                in_section = false;
            }
        }
    }
    if let Some(c) = last {
        acc.declare(c);
    }
    acc.finish(Format::Maven)
}

fn parse_gradle(text: &str) -> Option<TestReport> {
    let test = re(r"^(\S.*?) > (.+?) (PASSED|FAILED|SKIPPED)$");
    let summary = re(r"^(\d+) tests? completed(?:, (\d+) failed)?(?:, (\d+) skipped)?");
    let mut acc = Acc::default();
    let mut last_failed: Option<String> = None;
    for l in text.lines() {
        if let Some(c) = test.captures(l) {
            let name = format!("{}.{}", &c[1], &c[2]);
            last_failed = None;
            match &c[3] {
                "PASSED" => {
                    acc.lists_passes = true;
                    acc.pass(name);
                }
                "FAILED" => {
                    last_failed = Some(name.clone());
                    acc.fail(name);
                }
                _ => acc.skip(name),
            }
        } else if let Some(c) = summary.captures(l) {
            let total = num(&c[1]);
            let failed = c.get(2).map_or(0, |m| num(m.as_str()));
            let skipped = c.get(3).map_or(0, |m| num(m.as_str()));
            acc.declare(Counts {
                passed: total.saturating_sub(failed + skipped),
                failed,
                skipped,
            });
        } else if let Some(name) = &last_failed {
            if l.starts_with("    ") && !l.trim_start().starts_with("at ") {
                let name = name.clone();
                acc.detail(&name, l.trim());
            } else if !l.starts_with("    ") {
                last_failed = None;
            }
        }
    }
    acc.finish(Format::Gradle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::report::Names;
    use std::collections::BTreeSet;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    // The `testdata/` files are real runs of the real tools on small projects (see
    // `fixtures/README.md` for how each was made), with absolute paths rewritten.

    #[test]
    fn cargo_names_tests_per_binary_and_sums_counts() {
        let r = parse_output(
            Some(Runner::Cargo),
            include_str!("testdata/cargo_two_binaries.txt"),
        )
        .unwrap();
        assert_eq!(r.format, Format::Cargo);
        assert_eq!(r.names, Names::Full);
        assert_eq!(
            r.failed,
            set(&["fixture_add(src/lib.rs)::tests::adds_two_numbers"])
        );
        assert_eq!(
            r.passed,
            set(&[
                "fixture_add(src/lib.rs)::tests::subtracts_two_numbers",
                "api(tests/api.rs)::sub_is_public"
            ])
        );
        assert_eq!(
            r.counts,
            Counts {
                passed: 2,
                failed: 1,
                skipped: 0
            }
        );
        let d = &r.details["fixture_add(src/lib.rs)::tests::adds_two_numbers"];
        assert!(d.contains("panicked at src/lib.rs:19:9"), "{d}");
        assert!(d.contains("left: -1"), "{d}");
    }

    /// Guards issue 19: `test_eq` in three binaries is three tests, not one, whether cargo's
    /// stderr (its `Running …` lines) came through the tests' pipe or after their stdout.
    #[test]
    fn cargo_same_test_name_in_several_binaries_in_either_layout() {
        let split = parse_output(
            Some(Runner::Cargo),
            include_str!("testdata/cargo_same_name_split.txt"),
        )
        .unwrap();
        assert_eq!(split.names, Names::Full);
        assert_eq!(
            split.passed,
            set(&[
                "eqs(src/lib.rs)::tests::test_eq",
                "second(tests/second.rs)::test_eq"
            ])
        );
        assert_eq!(
            split.failed,
            set(&[
                "first(tests/first.rs)::test_eq",
                "eqs(doc)::src/lib.rs - add (line 3)"
            ])
        );
        assert_eq!(split.skipped, set(&["second(tests/second.rs)::slow"]));
        assert!(split.details["first(tests/first.rs)::test_eq"].contains("left: -1"));
        assert!(split.details["eqs(doc)::src/lib.rs - add (line 3)"].contains("left: 0"));
        let joined = parse_output(
            Some(Runner::Cargo),
            include_str!("testdata/cargo_same_name_interleaved.txt"),
        )
        .unwrap();
        assert_eq!(
            (&joined.passed, &joined.failed, &joined.skipped),
            (&split.passed, &split.failed, &split.skipped)
        );
        assert_eq!(joined.counts, split.counts);
    }

    #[test]
    fn cargo_binaries_that_do_not_pair_up_leave_names_unqualified() {
        // The split run with one `Running` line lost: guessing would misname a binary.
        let text = include_str!("testdata/cargo_same_name_split.txt").replace(
            "     Running tests/second.rs (target/debug/deps/second-8fa355c45c7d1045)\n",
            "",
        );
        let r = parse_output(Some(Runner::Cargo), &text).unwrap();
        assert!(r.failed.contains("test_eq"), "{r:?}");
        assert!(r.passed.contains("tests::test_eq"), "{r:?}");
        assert!(
            r.passed
                .iter()
                .chain(&r.failed)
                .all(|n| !n.contains("::test_eq") || n == "tests::test_eq")
        );
    }

    /// bytes' fix for an endless recursion: on the base its new test overflows the stack and
    /// takes its binary down before any result line. The runtime's message names the test,
    /// in the binary whose `Running` line came last, however cargo's streams were joined.
    #[test]
    fn cargo_a_test_that_overflows_its_stack_fails_by_name() {
        let stdout = "running 2 tests\ntest a ... ok\ntest b ... ok\n\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\nrunning 3 tests\ntest copy ... ok\n";
        let stderr = "     Running tests/test_buf.rs (target/debug/deps/test_buf-0123456789abcdef)\n     Running tests/test_buf_mut.rs (target/debug/deps/test_buf_mut-0123456789abcdef)\n\nthread 'test_bytes_mut_reuse' has overflowed its stack\nfatal runtime error: stack overflow, aborting\nerror: test failed, to rerun pass `--test test_buf_mut`\n";
        let joined = "     Running tests/test_buf.rs (target/debug/deps/test_buf-0123456789abcdef)\nrunning 2 tests\ntest a ... ok\ntest b ... ok\n\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n\n     Running tests/test_buf_mut.rs (target/debug/deps/test_buf_mut-0123456789abcdef)\n\nrunning 3 tests\ntest copy ... ok\n\nthread 'test_bytes_mut_reuse' (8095) has overflowed its stack\nfatal runtime error: stack overflow, aborting\nerror: test failed, to rerun pass `--test test_buf_mut`\n";
        for text in [format!("{stdout}{stderr}"), joined.to_string()] {
            let r = parse_cargo(&text).unwrap();
            assert_eq!(
                r.failed.iter().collect::<Vec<_>>(),
                ["test_buf_mut(tests/test_buf_mut.rs)::test_bytes_mut_reuse"],
                "{text}"
            );
            assert!(r.passed.contains("test_buf(tests/test_buf.rs)::a"));
        }
    }

    #[test]
    fn cargo_compile_error_names_nothing() {
        let r = parse_output(
            Some(Runner::Cargo),
            include_str!("testdata/cargo_compile_error.txt"),
        );
        assert!(r.is_none(), "{r:?}");
    }

    #[test]
    fn pytest_ra_names_every_test() {
        let r = parse_output(Some(Runner::Pytest), include_str!("testdata/pytest_ra.txt")).unwrap();
        assert_eq!(r.format, Format::Pytest);
        assert_eq!(r.names, Names::Full);
        assert_eq!(r.passed, set(&["tests/test_calc.py::test_sub"]));
        assert_eq!(r.failed, set(&["tests/test_calc.py::test_add"]));
        assert!(r.details["tests/test_calc.py::test_add"].contains("E       assert -1 == 5"));
    }

    /// Guards issue 18: the code under test skips the failing test and, from a passing test,
    /// prints `PASSED tests/test_calc.py::test_add` and a fake `9 passed` line, which `-rA`
    /// shows in its `PASSES` section. Only pytest's own lines count: `test_add` is not named.
    #[test]
    fn pytest_captured_output_is_not_a_result() {
        let r = parse_output(
            Some(Runner::Pytest),
            include_str!("testdata/pytest_ra_forged_passes.txt"),
        )
        .unwrap();
        assert_eq!(r.names, Names::Full, "{r:?}");
        assert_eq!(r.passed, set(&["tests/test_calc.py::test_sub"]));
        assert!(r.failed.is_empty());
        assert_eq!(
            r.counts,
            Counts {
                passed: 1,
                failed: 0,
                skipped: 1
            }
        );
    }

    /// Guards issue 18: a second `short test summary info` printed inside captured output, or
    /// a summary and final line printed at exit after pytest's own, is forged structure: the
    /// output names nothing, and no other format may read it either.
    #[test]
    fn pytest_doubled_structure_names_nothing() {
        for out in [
            include_str!("testdata/pytest_ra_forged_header.txt"),
            include_str!("testdata/pytest_forged_at_exit.txt"),
        ] {
            let r = parse_output(Some(Runner::Pytest), out).unwrap();
            assert_eq!(r.format, Format::Pytest);
            assert_eq!(r.names, Names::None, "{out}\n{r:?}");
        }
        // TAP printed by the code under test is not read as the results of a pytest run.
        let tap = format!(
            "{}ok 1 - tests/test_calc.py::test_add\nok 2 - tests/test_calc.py::test_sub\n1..2\n",
            include_str!("testdata/pytest_forged_at_exit.txt")
        );
        let r = parse_output(Some(Runner::Pytest), &tap).unwrap();
        assert_eq!((r.format, r.names), (Format::Pytest, Names::None));
        assert_eq!(parse_output(None, &tap).unwrap().format, Format::NodeTap);
    }

    #[test]
    fn pytest_default_names_failures_only() {
        let r = parse_output(
            Some(Runner::Pytest),
            include_str!("testdata/pytest_default.txt"),
        )
        .unwrap();
        assert_eq!(r.names, Names::FailedOnly);
        assert_eq!(r.failed, set(&["tests/test_calc.py::test_add"]));
        assert_eq!(
            r.counts,
            Counts {
                passed: 1,
                failed: 1,
                skipped: 0
            }
        );
    }

    #[test]
    fn pytest_params_classes_skips_and_tracebacks() {
        let r = parse_output(None, include_str!("testdata/pytest_mixed.txt")).unwrap();
        assert_eq!(r.names, Names::Full);
        assert_eq!(
            r.failed,
            set(&[
                "tests/test_mathx.py::test_mean_empty",
                "tests/test_mathx.py::test_parse[x-None]",
                "tests/test_mathx.py::TestThing::test_method"
            ])
        );
        assert_eq!(
            r.passed,
            set(&[
                "tests/test_mathx.py::test_mean",
                "tests/test_mathx.py::test_parse[1-1]"
            ])
        );
        assert_eq!(
            r.counts,
            Counts {
                passed: 2,
                failed: 3,
                skipped: 1
            }
        );
        assert!(r.details["tests/test_mathx.py::test_parse[x-None]"].contains("ValueError"));
        assert!(r.details["tests/test_mathx.py::TestThing::test_method"].contains("Differing"));
    }

    #[test]
    fn pytest_details_of_a_parameter_with_dots_and_spaces() {
        // pytest-mypy-plugins names cases by their source text (attrs' `test_mypy.yml`).
        let out = "\
============================= test session starts ==============================
collected 2 items

tests/test_mypy.yml F.                                                   [100%]

=================================== FAILURES ===================================
__________ TestK.case[val=a = attr.ib(type=int)] __________
E   TypecheckAssertionError: Cannot find module named \"attr\"
=========================== short test summary info ============================
FAILED tests/test_mypy.yml::TestK::case[val=a = attr.ib(type=int)]
========================= 1 failed, 1 passed in 0.50s ==========================
";
        let r = parse_output(None, out).unwrap();
        let name = "tests/test_mypy.yml::TestK::case[val=a = attr.ib(type=int)]";
        assert_eq!(r.failed, set(&[name]));
        assert!(r.details[name].contains("Cannot find module"), "{r:?}");
    }

    #[test]
    fn pytest_collection_error_is_a_failure() {
        let r = parse_output(None, include_str!("testdata/pytest_collection_error.txt")).unwrap();
        assert_eq!(r.failed, set(&["tests/test_broken.py"]));
        assert!(r.details["tests/test_broken.py"].contains("ModuleNotFoundError"));
        assert_eq!(r.counts.failed, 1);
    }

    #[test]
    fn go_verbose_names_tests_and_subtests_per_package() {
        let r = parse_output(
            Some(Runner::GoTest),
            include_str!("testdata/go_verbose.txt"),
        )
        .unwrap();
        assert_eq!(r.format, Format::GoTest);
        assert_eq!(r.names, Names::Full);
        assert_eq!(
            r.failed,
            set(&[
                "example.com/calc::TestAdd",
                "example.com/calc::TestTable",
                "example.com/calc::TestTable/small"
            ])
        );
        assert_eq!(
            r.passed,
            set(&[
                "example.com/calc::TestSub",
                "example.com/calc::TestTable/zero",
                "example.com/calc/util::TestDouble"
            ])
        );
        assert!(
            r.details["example.com/calc::TestAdd"]
                .contains("calc_test.go:7: Add(2, 3) = -1, want 5")
        );
    }

    #[test]
    fn go_plain_names_failures_only() {
        let r = parse_output(Some(Runner::GoTest), include_str!("testdata/go_plain.txt")).unwrap();
        assert_eq!(r.names, Names::FailedOnly);
        assert!(r.failed.contains("example.com/calc::TestAdd"));
        assert!(
            r.details["example.com/calc::TestTable/small"].contains("want 2")
                || r.details["example.com/calc::TestTable"].contains("want 2")
        );
    }

    #[test]
    fn go_build_failure_is_a_failing_entry_with_the_compiler_messages() {
        let out = include_str!("testdata/go_build_failed.txt");
        let r = parse_output(Some(Runner::GoTest), out).unwrap();
        assert!(r.failed.contains("example.com/calc::[build]"), "{r:?}");
        assert!(r.passed.contains("example.com/calc/util::TestDouble"));
        assert!(
            r.details["example.com/calc::[build]"].contains("./calc.go:4:33: invalid operation")
        );
        // -json prints the build failure as text; it must not be lost.
        let json = "{\"Action\":\"pass\",\"Package\":\"example.com/calc/util\",\"Test\":\"TestDouble\"}\nFAIL\texample.com/calc [build failed]\n";
        let j = parse_output(None, json).unwrap();
        assert!(j.failed.contains("example.com/calc::[build]"), "{j:?}");
    }

    #[test]
    fn go_json_matches_go_verbose() {
        let json = parse_output(None, include_str!("testdata/go_json.txt")).unwrap();
        let text = parse_output(None, include_str!("testdata/go_verbose.txt")).unwrap();
        assert_eq!(json.format, Format::GoTestJson);
        assert_eq!(json.names, Names::Full);
        assert_eq!((json.passed, json.failed), (text.passed, text.failed));
        assert!(json.details["example.com/calc::TestAdd"].contains("want 5"));
    }

    #[test]
    fn jest_verbose_names_every_test_with_its_file_and_describe() {
        let r = parse_output(Some(Runner::Npm), include_str!("testdata/jest_verbose.txt")).unwrap();
        assert_eq!(r.format, Format::Jest);
        assert_eq!(r.names, Names::Full);
        assert_eq!(
            r.failed,
            set(&["jt/calc.test.js › calc › adds two numbers"])
        );
        assert_eq!(
            r.passed,
            set(&[
                "jt/calc.test.js › calc › subtracts two numbers",
                "jt/other.test.js › truth"
            ])
        );
        assert!(r.details["jt/calc.test.js › calc › adds two numbers"].contains("Received: -1"));
    }

    #[test]
    fn jest_default_names_failures_only_with_the_same_names() {
        let r = parse_output(Some(Runner::Npm), include_str!("testdata/jest_default.txt")).unwrap();
        assert_eq!(r.names, Names::FailedOnly);
        assert_eq!(
            r.failed,
            set(&["jt/calc.test.js › calc › adds two numbers"])
        );
        assert_eq!(
            r.counts,
            Counts {
                passed: 2,
                failed: 1,
                skipped: 0
            }
        );
    }

    #[test]
    fn jest_json_names_every_test() {
        let r = parse_output(None, include_str!("testdata/jest.json")).unwrap();
        assert_eq!(r.format, Format::JestJson);
        assert_eq!(r.names, Names::Full);
        assert_eq!(r.failed.len(), 1);
        assert_eq!(r.passed.len(), 2);
        let failed = r.failed.iter().next().unwrap();
        assert!(
            failed.ends_with("calc.test.js › calc › adds two numbers"),
            "{failed}"
        );
        assert!(r.details[failed].contains("Received: -1"));
    }

    #[test]
    fn vitest_verbose_and_default() {
        let v = parse_output(
            Some(Runner::Npm),
            include_str!("testdata/vitest_verbose.txt"),
        )
        .unwrap();
        assert_eq!(v.format, Format::Vitest);
        assert_eq!(v.names, Names::Full);
        assert_eq!(v.failed, set(&["calc.test.mjs > calc > adds two numbers"]));
        assert_eq!(
            v.passed,
            set(&[
                "calc.test.mjs > calc > subtracts two numbers",
                "other.test.mjs > truth"
            ])
        );
        assert!(
            v.details["calc.test.mjs > calc > adds two numbers"].contains("expected -1 to be 5")
        );
        let d = parse_output(
            Some(Runner::Npm),
            include_str!("testdata/vitest_default.txt"),
        )
        .unwrap();
        assert_eq!(d.names, Names::FailedOnly);
        assert_eq!(d.failed, v.failed);
        assert_eq!(
            d.counts,
            Counts {
                passed: 2,
                failed: 1,
                skipped: 0
            }
        );
    }

    #[test]
    fn vitest_json_is_read_like_jest_json() {
        let r = parse_output(None, include_str!("testdata/vitest.json")).unwrap();
        assert_eq!(r.format, Format::JestJson);
        assert_eq!((r.passed.len(), r.failed.len()), (2, 1));
    }

    #[test]
    fn node_tap_and_spec_agree() {
        let tap = parse_output(Some(Runner::Npm), include_str!("testdata/node_tap.txt")).unwrap();
        assert_eq!(tap.format, Format::NodeTap);
        assert_eq!(tap.names, Names::Full);
        assert_eq!(tap.failed, set(&["add adds two numbers"]));
        assert_eq!(tap.passed, set(&["sub subtracts two numbers"]));
        assert!(tap.details["add adds two numbers"].contains("-1 !== 5"));
        let spec = parse_output(None, include_str!("testdata/node_spec.txt")).unwrap();
        assert_eq!(spec.format, Format::NodeSpec);
        assert_eq!((spec.passed, spec.failed), (tap.passed, tap.failed));
        assert_eq!(
            spec.counts,
            Counts {
                passed: 1,
                failed: 1,
                skipped: 0
            }
        );
    }

    #[test]
    fn node_nested_suites_name_leaves_only() {
        let tap = parse_output(None, include_str!("testdata/node_tap_nested.txt")).unwrap();
        assert_eq!(tap.failed, set(&["calc > adds"]));
        assert_eq!(tap.passed, set(&["calc > inner > subs"]));
        assert_eq!(tap.skipped, set(&["calc > later"]));
        let spec = parse_output(None, include_str!("testdata/node_spec_nested.txt")).unwrap();
        assert_eq!(
            (&spec.failed, &spec.passed, &spec.skipped),
            (&tap.failed, &tap.passed, &tap.skipped)
        );
        assert!(spec.details["calc > adds"].contains("0 !== 2"));
    }

    /// tape: a test is its `# title`; its assertions decide whether it passed.
    #[test]
    fn tape_names_tests_by_title_not_by_assertion() {
        let r = parse_output(Some(Runner::Npm), include_str!("testdata/tape.txt")).unwrap();
        assert_eq!(r.format, Format::Tape);
        assert_eq!(r.names, Names::Full);
        assert_eq!(
            r.passed,
            set(&["subtracts two numbers", "inner passes"]),
            "{r:?}"
        );
        // `adds two numbers` is in both files; one of them fails, so the name fails.
        assert_eq!(r.failed, set(&["adds two numbers", "inner fails"]));
        assert_eq!(r.skipped, set(&["skipped one"]));
        let d = &r.details["adds two numbers"];
        assert!(d.contains("expected: |-") && d.contains("-1"), "{d}");
        assert!(d.contains("calc.test.js:5:5"), "{d}");
        assert!(!d.contains("lib/test.js"), "the stack is left out: {d}");
        assert!(r.details["inner fails"].contains("{ a: 0 }"));

        let todo = parse_output(None, include_str!("testdata/tape_todo.txt")).unwrap();
        assert_eq!(todo.format, Format::Tape);
        assert_eq!(todo.skipped, set(&["not done yet"]));
        assert_eq!(todo.passed, set(&["done"]));
        assert!(todo.failed.is_empty());
    }

    #[test]
    fn tap_without_dashes_or_titles_names_each_point() {
        // bats: every point a test, no ` - `, no `TAP version`, diagnostics as comments.
        let r = parse_output(None, include_str!("testdata/bats.txt")).unwrap();
        assert_eq!(r.format, Format::NodeTap);
        assert_eq!(r.passed, set(&["addition works"]));
        assert_eq!(r.failed, set(&["subtraction works"]));
        assert_eq!(r.skipped, set(&["skipped one"]));
        assert!(r.details["subtraction works"].contains("`[ \"$r\" -eq 2 ]' failed"));
    }

    #[test]
    fn maven_real_surefire_console() {
        let r = parse_output(
            Some(Runner::Maven),
            include_str!("testdata/maven_surefire.txt"),
        )
        .unwrap();
        assert_eq!(r.format, Format::Maven);
        assert_eq!(r.names, Names::FailedOnly);
        assert_eq!(r.failed, set(&["CalcTest.testAdd"]));
        assert_eq!(
            r.counts,
            Counts {
                passed: 1,
                failed: 1,
                skipped: 0
            }
        );
        assert!(r.details["CalcTest.testAdd"].contains("expected:<5> but was:<-1>"));
    }

    #[test]
    fn maven_console_counts_and_failures() {
        // Shape of Maven 3 + surefire 3 console output, as documented by surefire.
        let out = "\
[INFO] Running com.example.CalcTest
[ERROR] Tests run: 2, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: 0.05 s <<< FAILURE! - in com.example.CalcTest
[ERROR] com.example.CalcTest.testAdd  Time elapsed: 0.01 s  <<< FAILURE!
[INFO]
[INFO] Results:
[INFO]
[ERROR] Failures:
[ERROR]   CalcTest.testAdd:12 expected: <5> but was: <-1>
[INFO]
[ERROR] Tests run: 2, Failures: 1, Errors: 0, Skipped: 0
";
        let r = parse_output(Some(Runner::Maven), out).unwrap();
        assert_eq!(r.format, Format::Maven);
        assert_eq!(r.names, Names::FailedOnly);
        assert_eq!(r.failed, set(&["CalcTest.testAdd"]));
        assert_eq!(
            r.counts,
            Counts {
                passed: 1,
                failed: 1,
                skipped: 0
            }
        );
        assert!(r.details["CalcTest.testAdd"].contains("but was: <-1>"));
    }

    #[test]
    fn gradle_console_with_test_logging() {
        // Gradle's console with `testLogging { events "passed", "failed" }`, as documented.
        let out = "\
> Task :test

CalcTest > testSub() PASSED

CalcTest > testAdd() FAILED
    org.opentest4j.AssertionFailedError: expected: <5> but was: <-1>
        at app//CalcTest.testAdd(CalcTest.java:12)

2 tests completed, 1 failed
";
        let r = parse_output(Some(Runner::Gradle), out).unwrap();
        assert_eq!(r.names, Names::Full);
        assert_eq!(r.failed, set(&["CalcTest.testAdd()"]));
        assert_eq!(r.passed, set(&["CalcTest.testSub()"]));
        assert!(r.details["CalcTest.testAdd()"].contains("but was: <-1>"));
    }

    #[test]
    fn unknown_output_is_none() {
        assert!(parse_output(None, "Building...\nerror: something broke\n").is_none());
        assert!(parse_output(None, "").is_none());
    }

    #[test]
    fn ansi_and_carriage_returns_are_stripped() {
        assert_eq!(
            strip_ansi("\x1b[31mred\x1b[0m ok\r\n50%\r100%\n"),
            "red ok\n100%\n"
        );
    }

    proptest::proptest! {
        /// Arbitrary output never panics a parser, and every report's failing tests are
        /// disjoint from its passing ones.
        #[test]
        fn parsers_never_panic(
            text in "((test |--- FAIL: |=== RUN |ok  |FAIL|PASSED |FAILED |● |✓ |× |✖ |▶ |# Subtest: |not ok 1 - |TAP version 13|ℹ pass 1|Tests: |\\[ERROR\\] |---- | \\.\\.\\. |::| > | › |  ✔ |  ✘ \\[fail\\]: |  - \\[skip\\] |  ─|  1 test failed|  1\\) |  2 passing|  1 failing|1\\.\\.2|ok 1 |# |  ---|    at: |Ran 2 tests in 0s|FAIL: |ERROR: |={6}|-{6}|OK|running 1 test|     Running tests/a.rs \\(t/a-0123456789abcdef\\)|[a-z0-9 ]|é|\\n|\\t|\\{|\\}|\"|:|,)){0,60}"
        ) {
            if let Some(r) = parse_output(None, &text) {
                proptest::prop_assert!(r.passed.is_disjoint(&r.failed));
            }
            let _ = crate::verify::parse_junit_xml(&[text.as_str()]);
            let _ = crate::verify::failure_summary(None, &text, 64);
        }

        /// XML-ish input never panics the JUnit reader.
        #[test]
        fn junit_reader_never_panics(
            text in "(<testcase |<testsuite>|</testcase>|<failure |/>|>|<!\\[CDATA\\[|\\]\\]>|<!--|-->|name=\"|classname='|&amp;|&#x|&#|;|\"|'|[a-z ]|é){0,60}"
        ) {
            let _ = crate::verify::parse_junit_xml(&[text.as_str()]);
        }
    }
}
