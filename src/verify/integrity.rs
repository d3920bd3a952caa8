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

/// Whether `rela` (repository-relative) is a test file by the conventions of the common
/// runners: a `tests`/`test`/`__tests__`/`spec` directory, or a name like `test_x.py`,
/// `x_test.py`, `x.test.js`, `x.spec.ts`, `x_test.go`, `XTest.java`, `x_spec.rb`.
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
                Some("tests" | "test" | "__tests__" | "spec" | "testing")
            )
        })
    });
    let stem = name.split('.').next().unwrap_or("");
    in_test_dir
        || (name.ends_with(".py")
            && (stem.starts_with("test_") || stem.ends_with("_test") || stem.ends_with("_tests")))
        || name.contains(".test.")
        || name.contains(".spec.")
        || name.ends_with("_test.go")
        || name.ends_with("_spec.rb")
        || (name.ends_with(".java") && (stem.ends_with("Test") || stem.ends_with("Tests")))
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
        ] {
            assert!(!is_test_path(p), "{p}");
        }
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
