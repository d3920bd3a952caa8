//! How a change touched the tests themselves: which files are tests, and what happened to
//! each (tests deleted, skip or xfail markers added, assertions removed or weakened).
//!
//! This is evidence for the report's integrity block and for the model, not a verdict: the
//! held-out check (the base's test files run against the new code) is what stops a weakened
//! assertion from counting as a fix. The patterns are plain text, across the common runners.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use super::report::{Format, TestReport};

/// Whether `rela` (repository-relative) is a test file by the conventions of the common
/// runners: a `tests`/`test`/`__tests__`/`spec` directory, test data beside tests
/// (`testdata`, `fixtures`, `snapshots`, `__snapshots__`, `*.snap`), or a name like
/// `test_x.py`, `x_test.py`, Django's `tests.py`, `x.test.js`, node's `x-test.js` and
/// `test-x.js`, `x.spec.ts`, `x_test.go`, `XTest.java`, `x_spec.rb`.
///
/// Names alone miss tests: see [`named_by_results`] (a file the baseline's results name) and
/// [`rust_test_code`] (a Rust source file holding its own tests).
pub fn is_test_path(rela: &str) -> bool {
    let p = Path::new(rela);
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name == "conftest.py" {
        // Runner configuration, judged as such (`policy::runner_config_change`).
        return false;
    }
    let in_test_dir = p.parent().is_some_and(|d| {
        d.components().any(|c| {
            matches!(
                c.as_os_str().to_str(),
                Some(
                    "tests"
                        | "test"
                        | "__tests__"
                        | "spec"
                        | "testing"
                        | "testdata"
                        | "fixtures"
                        | "snapshots"
                        | "__snapshots__"
                )
            )
        })
    });
    let stem = name.split('.').next().unwrap_or("");
    let js = [".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx"]
        .iter()
        .any(|e| name.ends_with(e));
    in_test_dir
        || (name.ends_with(".py")
            && (stem.starts_with("test_")
                || stem.ends_with("_test")
                || stem.ends_with("_tests")
                || stem == "tests"))
        || (js && (stem.starts_with("test-") || stem.ends_with("-test")))
        || name.contains(".test.")
        || name.contains(".spec.")
        || name.ends_with(".snap")
        || name.ends_with("_test.go")
        || name.ends_with("_spec.rb")
        || (name.ends_with(".java") && (stem.ends_with("Test") || stem.ends_with("Tests")))
}

/// Whether the test results in `report` name a test in the file `rela`: a pytest node id
/// `rela::…`, a jest/ava `rela › …` or vitest `rela > …` name, a cargo `binary(rela)::…`, a
/// unittest id `package.module.…` of `rela`. Whatever a project's runner collects from a
/// file is a test file, whatever its name.
///
/// Only a test *defined* in the file counts (issue 40): a doctest the runner collects from a
/// source module's docstrings (pytest's `--doctest-modules` id `calc.py::calc.add`, a
/// unittest `DocTestSuite` id `calc.add`) names that module without making it a test file —
/// see [`names_doctest`] and [`python_doctests`].
pub fn named_by_results(report: &TestReport, rela: &str) -> bool {
    all_names(report).any(|n| names_in(report, rela, n) == Some(Named::Test))
}

/// Whether the results name a doctest collected from the Python source file `rela`.
pub fn names_doctest(report: &TestReport, rela: &str) -> bool {
    all_names(report).any(|n| names_in(report, rela, n) == Some(Named::Doctest))
}

fn all_names(report: &TestReport) -> impl Iterator<Item = &String> {
    report
        .passed
        .iter()
        .chain(&report.failed)
        .chain(&report.skipped)
}

/// What a result's name says about the file `rela`.
#[derive(Debug, PartialEq, Eq)]
enum Named {
    /// A test defined in it.
    Test,
    /// A doctest from its docstrings.
    Doctest,
}

fn names_in(report: &TestReport, rela: &str, n: &str) -> Option<Named> {
    let item = [
        format!("{rela}::"),
        format!("{rela} › "),
        format!("{rela} > "),
    ]
    .iter()
    .find_map(|p| {
        n.strip_prefix(p.as_str())
            .map(|rest| (p.ends_with("::"), rest))
    });
    if let Some((pytest_like, rest)) = item {
        // pytest names a test `file::test_x[…]` or `file::Class::test_x`; a doctest item is
        // named by the dotted path of what holds it (`file::pkg.mod.func`).
        let first = rest.split("::").next().unwrap_or(rest);
        let first = first.split('[').next().unwrap_or(first);
        return Some(
            if pytest_like && rela.ends_with(".py") && first.contains('.') {
                Named::Doctest
            } else {
                Named::Test
            },
        );
    }
    if n.contains(&format!("({rela})::")) {
        return Some(Named::Test);
    }
    if report.format != Format::Unittest {
        return None;
    }
    let dotted = rela
        .strip_suffix(".py")
        .map(|m| format!("{}.", m.trim_end_matches("/__init__").replace('/', ".")))?;
    let rest = n.strip_prefix(dotted.as_str())?;
    // unittest's loader collects methods named `test…` (`testMethodPrefix`); a
    // `DocTestSuite` case is named after the function whose docstring holds it.
    let last = rest.rsplit('.').next().unwrap_or(rest);
    Some(if last.starts_with("test") {
        Named::Test
    } else {
        Named::Doctest
    })
}

/// Ways code asks whether it runs under a test (issue 40): each a pattern over one line and
/// what it is, for the languages it applies to (by file extension).
const UNDER_TEST: &[(&[&str], &str, &str)] = &[
    (&["rs"], r"cfg!\s*\(\s*test\s*\)", "`cfg!(test)`"),
    (
        &["rs"],
        r"cfg\s*\(\s*not\s*\(\s*test\s*\)\s*\)",
        "`cfg(not(test))`",
    ),
    (
        &["py"],
        r#"["'](?:pytest|_pytest|unittest)["']\s+(?:not\s+)?in\s+sys\.modules|sys\.modules\.get\(\s*["'](?:pytest|_pytest)["']"#,
        "a check for pytest in `sys.modules`",
    ),
    (
        &["py"],
        r"PYTEST_CURRENT_TEST|PYTEST_VERSION|_called_from_test",
        "a check for pytest's variables",
    ),
    (
        &["js", "mjs", "cjs", "jsx", "ts", "mts", "cts", "tsx"],
        r#"NODE_ENV\s*[!=]==?\s*["']test["']|["']test["']\s*[!=]==?\s*process\.env\.NODE_ENV"#,
        "a check for `NODE_ENV` being `test`",
    ),
    (
        &["js", "mjs", "cjs", "jsx", "ts", "mts", "cts", "tsx"],
        r"JEST_WORKER_ID|process\.env\.VITEST\b|NODE_TEST_CONTEXT|process\.env\.MOCHA\b|typeof\s+(?:jest|describe|it)\s*[!=]==?",
        "a check for the test runner",
    ),
    (
        &["go"],
        r#"testing\.Testing\(\)|flag\.Lookup\(\s*"test\.v"\s*\)"#,
        "a check for `go test`",
    ),
];

/// Whether a change makes production code behave differently under test (issue 40): a line
/// the change adds to a non-test source file `rela` that asks whether it runs under a test
/// (`cfg!(test)`, `"pytest" in sys.modules`, `process.env.NODE_ENV === 'test'`,
/// `JEST_WORKER_ID`). Such code is what a test sees and not what users run, so passing tests
/// prove nothing about it: a person decides. The first such line, said plainly; `None` when
/// there is none (lines already in `old` do not count).
pub fn test_special_casing(rela: &str, old: Option<&str>, new: Option<&str>) -> Option<String> {
    /// A pattern compiled, with the extensions it applies to and what it is.
    type Compiled = (&'static [&'static str], Option<Regex>, &'static str);
    static RES: LazyLock<Vec<Compiled>> = LazyLock::new(|| {
        UNDER_TEST
            .iter()
            .map(|(exts, p, what)| (*exts, Regex::new(p).ok(), *what))
            .collect()
    });
    if is_test_path(rela) {
        return None;
    }
    let ext = rela.rsplit_once('.').map(|(_, e)| e)?;
    let new = new?;
    let before: BTreeMap<&str, usize> = {
        let mut m = BTreeMap::new();
        for l in old.unwrap_or("").lines() {
            *m.entry(l.trim()).or_insert(0) += 1;
        }
        m
    };
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for line in new.lines() {
        let t = line.trim();
        let n = seen.entry(t).or_insert(0);
        *n += 1;
        if *n <= before.get(t).copied().unwrap_or(0) {
            continue;
        }
        for (exts, re, what) in RES.iter() {
            if exts.contains(&ext) && re.as_ref().is_some_and(|r| r.is_match(t)) {
                let shown: String = t.chars().take(120).collect();
                return Some(format!(
                    "`{rela}` behaves differently under test ({what}: `{shown}`)"
                ));
            }
        }
    }
    None
}

/// The doctest examples in a Python source file's text, one line each (`>>> source` with its
/// continuation lines, then `=> expected output`), in order; `None` when it holds none. A
/// module whose docstrings the runner collects mixes code and tests, like a Rust file with a
/// test module: its examples are compared ([`doctest_change`]), the file is not put back.
pub fn python_doctests(text: &str) -> Option<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    let flush = |c: &mut Option<(String, Vec<String>)>, out: &mut Vec<String>| {
        if let Some((src, want)) = c.take() {
            out.push(format!("{src} => {}", want.join("\\n")));
        }
    };
    for line in text.lines() {
        let t = line.trim();
        if let Some(src) = t.strip_prefix(">>>") {
            flush(&mut current, &mut out);
            current = Some((format!(">>> {}", src.trim()), Vec::new()));
        } else if let Some((src, want)) = current.as_mut() {
            if let Some(more) = t.strip_prefix("...").filter(|_| want.is_empty()) {
                src.push_str(" ... ");
                src.push_str(more.trim());
            } else if t.is_empty() || t.starts_with("\"\"\"") || t.starts_with("'''") {
                flush(&mut current, &mut out);
            } else {
                want.push(
                    t.trim_end_matches("\"\"\"")
                        .trim_end_matches("'''")
                        .to_string(),
                );
            }
        }
    }
    flush(&mut current, &mut out);
    (!out.is_empty()).then(|| out.join("\n"))
}

/// What happened to a module's doctest examples ([`python_doctests`] of each side): examples
/// removed or changed (a changed expected output is a changed assertion) and skip
/// directives added; empty when nothing of note changed. New examples are fine.
pub fn doctest_change(old: &str, new: Option<&str>) -> Vec<String> {
    let Some(new) = new else {
        return vec!["deleted".to_string()];
    };
    let lines = |t: &str| -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for l in t.lines() {
            *m.entry(l.to_string()).or_insert(0) += 1;
        }
        m
    };
    let (a, b) = (lines(old), lines(new));
    let gone: usize = a
        .iter()
        .map(|(l, n)| n.saturating_sub(b.get(l).copied().unwrap_or(0)))
        .sum();
    let mut how = Vec::new();
    if gone > 0 {
        how.push(format!("{gone} doctest example(s) removed or changed"));
    }
    let skips = |t: &str| t.matches("doctest: +SKIP").count();
    if skips(new) > skips(old) {
        how.push("doctest skip directive added".into());
    }
    how
}

static RUST_TEST_ATTR: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"#\[\s*(?:cfg\s*\(\s*test\s*\)|(?:\w+::)*test\b[^\]]*|rstest\b[^\]]*)\]").ok()
});

/// The test code of a Rust source file: every item under `#[cfg(test)]` or a test attribute
/// (`#[test]`, `#[tokio::test]`, `#[rstest]`), attribute through closing brace, joined;
/// `None` when the file holds none. Braces are matched outside comments, strings and
/// character literals.
///
/// A file that mixes code and its tests cannot be put back whole for the held-out run — that
/// would undo the fix with the tests — so its test code is compared instead (issue 18).
pub fn rust_test_code(text: &str) -> Option<String> {
    let re = RUST_TEST_ATTR.as_ref()?;
    let code = code_mask(text);
    let mut out = String::new();
    let mut done = 0usize;
    for m in re.find_iter(text) {
        if m.start() < done || !code.get(m.start()).copied().unwrap_or(false) {
            continue;
        }
        let mut depth = 0usize;
        let mut end = None;
        for (i, b) in text.bytes().enumerate().skip(m.end()) {
            if !code[i] {
                continue;
            }
            match b {
                b'{' => depth += 1,
                b'}' if depth > 0 => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i + 1);
                        break;
                    }
                }
                // `#[cfg(test)] use x;` or `mod tests;`: the item ends without a body.
                b';' if depth == 0 => {
                    end = Some(i + 1);
                    break;
                }
                _ => {}
            }
        }
        let end = end.unwrap_or(text.len());
        out.push_str(&text[m.start()..end]);
        out.push('\n');
        done = end;
    }
    (!out.is_empty()).then_some(out)
}

/// For each byte of Rust source: whether it is code (not inside a comment, a string or a
/// character literal).
fn code_mask(text: &str) -> Vec<bool> {
    let b = text.as_bytes();
    let mut mask = vec![true; b.len()];
    let mut i = 0;
    let mark = |from: usize, to: usize, mask: &mut Vec<bool>| {
        for m in mask.iter_mut().take(to.min(b.len())).skip(from) {
            *m = false;
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            rest.iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p)
        } else if rest.starts_with(b"/*") {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            j
        } else if rest.starts_with(b"r#") || rest.starts_with(b"r\"") || rest.starts_with(b"br") {
            let start = if rest[0] == b'b' { 2 } else { 1 };
            let hashes = rest[start..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(start + hashes) != Some(&b'"') {
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = i + start + hashes + 1;
            b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| body + p + close.len())
        } else if rest[0] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            j + 1
        } else if rest[0] == b'\'' {
            // A character literal (`'{'`, `'\''`, `'\u{7b}'`), not a lifetime (`'a`).
            match rest.get(1) {
                Some(b'\\') => rest[2..]
                    .iter()
                    .skip(1)
                    .position(|&c| c == b'\'')
                    .map_or(i + 1, |p| i + 3 + p + 1),
                Some(_) if rest.get(2) == Some(&b'\'') => i + 3,
                _ => {
                    i += 1;
                    continue;
                }
            }
        } else {
            i += 1;
            continue;
        };
        let end = end.min(b.len());
        mark(i, end, &mut mask);
        i = end.max(i + 1);
    }
    mask
}

static TEST_DEF: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"(?m)^\s*(?:async\s+)?def\s+test\w*\s*\(|^\s*(?:it|test|specify)(?:\.\w+)?\s*\(|#\[(?:tokio::)?test\]|^\s*func\s+Test\w+\s*\(|@Test\b",
    )
    .ok()
});

static SKIP: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"@pytest\.mark\.(?:skip|skipif|xfail)\b|@unittest\.(?:skip\w*|expectedFailure)\b|\bpytest\.(?:skip|xfail|importorskip)\s*\(|\bself\.skipTest\s*\(|\b(?:it|test|describe)\.(?:skip|todo)\s*\(|\bx(?:it|describe|test)\s*\(|#\[ignore\b|\bt\.Skip(?:Now|f)?\s*\(|@Disabled\b|@Ignore\b",
    )
    .ok()
});

static ASSERT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"\bassert(?:\w*!?|\.\w+)\s*[\(\s]|\bexpect\s*\(|\bself\.assert\w+\s*\(|\bt\.(?:Error|Fatal)f?\s*\(")
        .ok()
});

/// Assertions that cannot fail: `assert True`, `assert 1`, `assert x == x`,
/// `expect(true).toBe(true)`, `assert_eq!(a, a)`.
static TAUTOLOGY: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^\s*assert\s+(?:True|1|not\s+(?:False|0|None))\s*(?:#.*)?$|^\s*assert!\s*\(\s*true\s*\)|expect\s*\(\s*(true|1)\s*\)\s*\.\s*(?:toBe|toEqual|toStrictEqual)\s*\(\s*(true|1)\s*\)|assert\.(?:ok|equal|strictEqual)\s*\(\s*true\s*(?:,\s*true\s*)?\)",
    )
    .ok()
});

fn same_sides(line: &str) -> bool {
    // `assert x == x` and `assert_eq!(x, x)`, the sides compared as written.
    static EQ: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"^\s*assert\s+(.+?)\s*==\s*(.+?)\s*$").ok());
    static MACRO: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"^\s*assert_eq!\s*\(\s*([^,]+?)\s*,\s*([^,]+?)\s*\)").ok());
    [&*EQ, &*MACRO].iter().any(|re| {
        re.as_ref()
            .and_then(|re| re.captures(line))
            .is_some_and(|c| c[1].trim() == c[2].trim())
    })
}

/// Whether a built-in pattern (`None`: it did not compile, which the tests rule out)
/// matches.
fn matches(re: &Option<Regex>, text: &str) -> bool {
    re.as_ref().is_some_and(|r| r.is_match(text))
}

fn count(re: &Option<Regex>, text: &str) -> usize {
    re.as_ref().map_or(0, |r| r.find_iter(text).count())
}

fn lines_matching<'a>(text: &'a str, re: &Option<Regex>) -> BTreeMap<&'a str, usize> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        if matches(re, l) {
            *m.entry(l.trim()).or_insert(0) += 1;
        }
    }
    m
}

/// Lines of `a` (as a multiset) that `b` lacks.
fn missing(a: &BTreeMap<&str, usize>, b: &BTreeMap<&str, usize>) -> usize {
    a.iter()
        .map(|(l, n)| n.saturating_sub(b.get(l).copied().unwrap_or(0)))
        .sum()
}

/// What happened to one test file, in short phrases (`"deleted"`, `"1 test removed"`,
/// `"skip/xfail marker added"`, `"2 assertions removed or changed"`, `"an assertion that
/// cannot fail added"`); empty when nothing of note changed.
pub fn test_change(old: Option<&str>, new: Option<&str>) -> Vec<String> {
    let (old, new) = match (old, new) {
        (None, None) => return Vec::new(),
        (None, Some(n)) => {
            let mut how = vec!["added".to_string()];
            how.extend(tautologies(n, ""));
            if matches(&SKIP, n) {
                how.push("with a skip/xfail marker".into());
            }
            return how;
        }
        (Some(_), None) => return vec!["deleted".to_string()],
        (Some(o), Some(n)) => (o, n),
    };
    let mut how = Vec::new();
    let removed_tests = count(&TEST_DEF, old).saturating_sub(count(&TEST_DEF, new));
    if removed_tests > 0 {
        how.push(format!("{removed_tests} test(s) removed"));
    }
    if count(&SKIP, new) > count(&SKIP, old) {
        how.push("skip/xfail marker added".into());
    }
    let removed_asserts = missing(&lines_matching(old, &ASSERT), &lines_matching(new, &ASSERT));
    if removed_asserts > 0 {
        how.push(format!("{removed_asserts} assertion(s) removed or changed"));
    }
    how.extend(tautologies(new, old));
    how
}

/// "an assertion that cannot fail" when `new` has one that `old` did not.
fn tautologies(new: &str, old: &str) -> Option<String> {
    let is_taut = |l: &&str| matches(&TAUTOLOGY, l) || same_sides(l);
    let before = old.lines().filter(is_taut).count();
    let after = new.lines().filter(is_taut).count();
    (after > before).then(|| "an assertion that cannot fail added".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_files_by_convention() {
        for p in [
            "tests/test_calc.py",
            "test_calc.py",
            "pkg/calc_test.py",
            "test/calc.test.js",
            "src/calc.spec.ts",
            "src/__tests__/calc.js",
            "tests/it.rs",
            "calc_test.go",
            "src/test/java/CalcTest.java",
            // Issue 18's attacker review: names the first list missed.
            "app/tests.py",
            "lib/calc-test.js",
            "test-calc.js",
            "pkg/testdata/golden.txt",
            "spec/fixtures/input.json",
            "src/__snapshots__/calc.test.js.snap",
            "snapshots/out.txt",
            "src/calc.snap",
        ] {
            assert!(is_test_path(p), "{p}");
        }
        for p in [
            "calc.py",
            "src/lib.rs",
            "conftest.py",
            "tests/conftest.py",
            "latest.py",
            "contest.js",
            "latest-news.js",
            "attest.py",
            "src/tests_helper.rs",
        ] {
            assert!(!is_test_path(p), "{p}");
        }
    }

    /// A report in which `names` passed.
    fn report(format: Format, names: &[&str]) -> TestReport {
        TestReport {
            format,
            names: crate::verify::Names::Full,
            counts: crate::verify::Counts::default(),
            passed: names.iter().map(|n| (*n).to_owned()).collect(),
            failed: Default::default(),
            skipped: Default::default(),
            details: Default::default(),
        }
    }

    /// Guards issue 18's attacker review: a file is a test file when the baseline's results
    /// name a test in it, whatever its name.
    #[test]
    fn files_the_results_name_are_test_files() {
        let py = report(
            Format::Pytest,
            &["checks.py::test_add", "pkg/verify.py::T::test_x[1]"],
        );
        assert!(named_by_results(&py, "checks.py"));
        assert!(named_by_results(&py, "pkg/verify.py"));
        assert!(!named_by_results(&py, "calc.py"));
        assert!(!named_by_results(&py, "checks"));
        let js = report(Format::Jest, &["lib/check.js › calc › adds"]);
        assert!(named_by_results(&js, "lib/check.js"));
        let cargo = report(
            Format::Cargo,
            &["fixture_add(src/lib.rs)::tests::adds_two_numbers"],
        );
        assert!(named_by_results(&cargo, "src/lib.rs"));
        assert!(!named_by_results(&cargo, "src/other.rs"));
        let ut = report(Format::Unittest, &["app.checks.CalcTest.test_add"]);
        assert!(named_by_results(&ut, "app/checks.py"));
        assert!(!named_by_results(&ut, "app/check.py"));
    }

    /// Issue 40 point 5: a doctest the runner collects from a source module does not make
    /// that module a test file (its held-out version would undo the fix); a test defined in
    /// a file still does.
    #[test]
    fn a_doctest_names_its_module_without_making_it_a_test_file() {
        let ut = report(
            Format::Unittest,
            &[
                "calc.add",
                "pkg.mod.Parser.parse",
                "test_calc.CalcTest.test_sub",
            ],
        );
        assert!(!named_by_results(&ut, "calc.py"));
        assert!(names_doctest(&ut, "calc.py"));
        assert!(names_doctest(&ut, "pkg/mod.py"));
        assert!(named_by_results(&ut, "test_calc.py"));
        let py = report(
            Format::Pytest,
            &[
                "src/calc.py::calc.add",
                "checks.py::test_x[a.b]",
                "checks.py::T::test_y",
            ],
        );
        assert!(!named_by_results(&py, "src/calc.py"));
        assert!(names_doctest(&py, "src/calc.py"));
        assert!(named_by_results(&py, "checks.py"));
        assert!(!names_doctest(&py, "checks.py"));
    }

    /// Issue 40 point 3: each way production code asks whether it runs under a test is
    /// caught when the change adds it, in its own language only, and never in test files.
    #[test]
    fn code_that_asks_whether_it_runs_under_a_test_is_named() {
        let hit = |path: &str, line: &str| test_special_casing(path, Some(""), Some(line));
        for (path, line) in [
            ("src/lib.rs", "    if cfg!(test) { return a + b; }"),
            ("src/lib.rs", "#[cfg(not(test))]"),
            ("calc.py", "    if \"pytest\" in sys.modules:"),
            ("calc.py", "    if 'pytest' in sys.modules:"),
            ("calc.py", "    if sys.modules.get('pytest'):"),
            ("calc.py", "    if os.environ.get(\"PYTEST_CURRENT_TEST\"):"),
            (
                "lib/a.js",
                "  if (process.env.NODE_ENV === 'test') return a + b",
            ),
            ("lib/a.ts", "  if ('test' == process.env.NODE_ENV) {"),
            ("lib/a.js", "  if (process.env.JEST_WORKER_ID) {"),
            ("lib/a.mjs", "  if (typeof jest !== 'undefined') {"),
            ("calc.go", "\tif testing.Testing() {"),
        ] {
            assert!(hit(path, line).is_some(), "{path}: {line}");
        }
        let why = hit("calc.py", "    if \"pytest\" in sys.modules:").unwrap();
        assert!(
            why.starts_with("`calc.py` behaves differently under test"),
            "{why}"
        );
        for (path, line) in [
            // Another language's idiom, a test file, a line the base already had.
            ("calc.py", "if (process.env.NODE_ENV === 'test')"),
            ("tests/test_calc.py", "if \"pytest\" in sys.modules:"),
            ("src/lib.rs", "#[cfg(test)]"),
            (
                "lib/a.js",
                "const env = process.env.NODE_ENV || 'production'",
            ),
        ] {
            assert!(hit(path, line).is_none(), "{path}: {line}");
        }
        let base = "if 'pytest' in sys.modules:\n    pass\n";
        assert!(test_special_casing("c.py", Some(base), Some(&format!("{base}x = 1\n"))).is_none());
        assert!(test_special_casing("c.py", Some(base), Some(&format!("{base}{base}"))).is_some());
    }

    #[test]
    fn doctest_examples_are_compared_not_the_file() {
        let base = "def add(a, b):\n    \"\"\"Add.\n\n    >>> add(2, 3)\n    5\n    >>> add(\n    ...     1, 1)\n    2\n    \"\"\"\n    return a - b\n";
        let ex = python_doctests(base).unwrap();
        assert_eq!(ex, ">>> add(2, 3) => 5\n>>> add( ... 1, 1) => 2");
        // The fix changes the code only: nothing of note.
        let fixed = base.replace("return a - b", "return a + b");
        assert!(doctest_change(&ex, python_doctests(&fixed).as_deref()).is_empty());
        // A new example beside the old ones is fine.
        let more = base.replace(
            "    2\n    \"\"\"",
            "    2\n    >>> add(0, 0)\n    0\n    \"\"\"",
        );
        assert!(doctest_change(&ex, python_doctests(&more).as_deref()).is_empty());
        // The expected output made to fit the bug, or the example skipped: weakened.
        let weak = base.replace("    5\n", "    -1\n");
        assert_eq!(
            doctest_change(&ex, python_doctests(&weak).as_deref()),
            ["1 doctest example(s) removed or changed"]
        );
        let skip = base.replace(">>> add(2, 3)", ">>> add(2, 3)  # doctest: +SKIP");
        assert!(
            doctest_change(&ex, python_doctests(&skip).as_deref())
                .contains(&"doctest skip directive added".to_string())
        );
        assert_eq!(python_doctests("def f():\n    return 1\n"), None);
    }

    #[test]
    fn rust_test_code_is_the_items_under_test_attributes() {
        let src = "pub fn add(a: i64, b: i64) -> i64 {\n    a + b\n}\n\n// #[test] in a comment\nconst S: &str = \"#[test] {\";\nconst C: char = '}';\nfn f<'a>(x: &'a str) -> &'a str { x }\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn adds() {\n        let s = \"}\";\n        assert_eq!(add(2, 3), 5);\n    }\n}\n\n#[tokio::test]\nasync fn later() { assert!(true) }\n";
        let code = rust_test_code(src).unwrap();
        assert!(code.starts_with("#[cfg(test)]\nmod tests {"), "{code}");
        assert!(
            code.contains("assert_eq!(add(2, 3), 5);\n    }\n}\n"),
            "{code}"
        );
        assert!(
            code.contains("#[tokio::test]\nasync fn later() { assert!(true) }"),
            "{code}"
        );
        assert!(!code.contains("a + b"), "{code}");
        assert!(!code.contains("const S"), "{code}");
        assert_eq!(rust_test_code("pub fn add() {}\n"), None);
        // The weakened assertion shows in the test code's change.
        let weak = src.replace(
            "assert_eq!(add(2, 3), 5)",
            "assert_eq!(add(2, 3), add(2, 3))",
        );
        let how = test_change(
            rust_test_code(src).as_deref(),
            rust_test_code(&weak).as_deref(),
        );
        assert_eq!(how, ["1 assertion(s) removed or changed"]);
        // A fix in the code beside the tests changes no test code.
        let fixed = src.replace("a + b", "a - b");
        assert_eq!(rust_test_code(src), rust_test_code(&fixed));
    }

    #[test]
    fn how_a_test_file_changed() {
        let py = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_sub():\n    assert sub(5, 3) == 2\n";
        assert!(test_change(Some(py), Some(py)).is_empty());
        // The issue's weakened assertion: the failing check replaced by one that cannot fail.
        let weak = py.replace("assert add(2, 3) == 5", "assert add(2, 3) == add(2, 3)");
        let how = test_change(Some(py), Some(&weak));
        assert_eq!(
            how,
            [
                "1 assertion(s) removed or changed",
                "an assertion that cannot fail added"
            ]
        );
        let skipped = py.replace("def test_add", "@pytest.mark.skip\ndef test_add");
        assert_eq!(
            test_change(Some(py), Some(&skipped)),
            ["skip/xfail marker added"]
        );
        let xfail = py.replace("def test_add", "@pytest.mark.xfail\ndef test_add");
        assert_eq!(
            test_change(Some(py), Some(&xfail)),
            ["skip/xfail marker added"]
        );
        let deleted = py.replace("def test_add():\n    assert add(2, 3) == 5\n", "");
        assert_eq!(
            test_change(Some(py), Some(&deleted)),
            ["1 test(s) removed", "1 assertion(s) removed or changed"]
        );
        assert_eq!(test_change(Some(py), None), ["deleted"]);
        // A new test added beside the old ones is just that.
        let more = format!("{py}\n\ndef test_add_negative():\n    assert add(-1, -1) == -2\n");
        assert!(test_change(Some(py), Some(&more)).is_empty());

        let js = "test('add', () => {\n  assert.strictEqual(add(2, 3), 5);\n});\n";
        let js_skip = js.replace("test('add'", "test.skip('add'");
        assert_eq!(
            test_change(Some(js), Some(&js_skip)),
            ["skip/xfail marker added"]
        );
        let js_true = js.replace("assert.strictEqual(add(2, 3), 5)", "assert.ok(true)");
        assert_eq!(
            test_change(Some(js), Some(&js_true)),
            [
                "1 assertion(s) removed or changed",
                "an assertion that cannot fail added"
            ]
        );
        let rs = "#[test]\nfn adds() {\n    assert_eq!(add(2, 3), 5);\n}\n";
        let rs_ignored = rs.replace("#[test]", "#[test]\n#[ignore]");
        assert_eq!(
            test_change(Some(rs), Some(&rs_ignored)),
            ["skip/xfail marker added"]
        );
        assert_eq!(
            test_change(None, Some("def test_x():\n    assert True\n")),
            ["added", "an assertion that cannot fail added"]
        );
    }
}
