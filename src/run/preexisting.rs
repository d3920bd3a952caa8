//! Which failures may stand as pre-existing (issues 19, 39): a test that failed before and
//! still fails is excused only when nothing ties it to the change — not a variant of a test
//! the run fixed, its file not reaching what the run changed, the same failure before and
//! after — and never when the request or the plan names it. Pure decisions over the
//! [`Evidence`] a test run gathers; [`super::verification`] applies them.

use std::path::Path;

use crate::verify;

/// Whether a test that failed before and still fails is unrelated to the change, so it may
/// stand as pre-existing (issues 19, 39), for every runner: it is no variant (same test,
/// other parameters) of a test the run fixed, its file (where the runner names one) does not
/// reach what the run changed, and it failed the same way before and after. Anything else is
/// doubt and blocks; whether the request or the plan names it is asked apart.
pub(super) fn unrelated(name: &str, ev: &Evidence<'_>) -> bool {
    let stem = name.split('[').next().unwrap_or(name);
    if ev
        .fixed
        .iter()
        .any(|f| f.split('[').next().unwrap_or(f) == stem)
    {
        return false;
    }
    if let Some(file) = test_file_of(name)
        && reaches_changed(ev, name, file)
    {
        return false;
    }
    same_failure(name, ev) == Some(true)
}

/// What tells a still-failing test from one the change touched (issue 39), for every runner.
pub(super) struct Evidence<'a> {
    /// Baseline failures the change fixed (a variant of one is never unrelated).
    pub(super) fixed: &'a [String],
    /// Paths the run changed from the base.
    pub(super) changed: &'a [String],
    /// Where the tests ran now.
    pub(super) root: &'a Path,
    /// The baseline's report and where it ran.
    pub(super) before: Option<&'a verify::TestReport>,
    pub(super) before_root: &'a Path,
    /// This run's report.
    pub(super) after: Option<&'a verify::TestReport>,
    /// A file's content at the run's base (`None`: not there).
    pub(super) base_file: &'a dyn Fn(&str) -> Option<String>,
}

/// Whether `name` failed the same way before and after (the runner's text about it, with
/// paths, durations, line numbers and addresses made alike): `None` when either side has no
/// text for it, which is doubt.
fn same_failure(name: &str, ev: &Evidence<'_>) -> Option<bool> {
    let before = ev.before?.details.get(name)?;
    let after = ev.after?.details.get(name)?;
    Some(
        normalized_failure(before, &[ev.before_root, ev.root])
            == normalized_failure(after, &[ev.before_root, ev.root]),
    )
}

/// A failure's text with what differs between two runs of the same failure made alike.
fn normalized_failure(text: &str, roots: &[&Path]) -> String {
    static PATTERNS: std::sync::LazyLock<Vec<(regex::Regex, &'static str)>> =
        std::sync::LazyLock::new(|| {
            [
                (
                    r"\b\d+(\.\d+)?\s?(ms|s|µs|us|ns|sec|secs|seconds)\b",
                    "<time>",
                ),
                // Rust prints the panicking thread's id: `thread 'name' (117) panicked`, and
                // its backtrace hint once per process, after whichever test panicked first.
                (r"(thread '[^']*') \(\d+\)", "$1"),
                (
                    r"(?m)^note: (?:run with `RUST_BACKTRACE|Some details are omitted).*$",
                    "",
                ),
                (r"(\.[A-Za-z]{1,5}):\d+(:\d+)?", "$1:<line>"),
                (r"\bline \d+", "line <n>"),
                (r"0x[0-9a-fA-F]{6,}", "0x<addr>"),
                (r"\s+", " "),
            ]
            .into_iter()
            .filter_map(|(p, r)| regex::Regex::new(p).ok().map(|re| (re, r)))
            .collect()
        });
    let mut t = text.to_string();
    // Longest first: one root may be the other's prefix (`<worktree>-verify`).
    let mut roots: Vec<&str> = roots
        .iter()
        .filter_map(|r| r.to_str())
        .filter(|r| !r.is_empty())
        .collect();
    roots.sort_by_key(|r| std::cmp::Reverse(r.len()));
    for r in roots {
        t = t.replace(r, "<root>");
    }
    for (re, with) in PATTERNS.iter() {
        t = re.replace_all(&t, *with).into_owned();
    }
    t.trim().to_string()
}

/// The file a test's name places it in, when the runner names one: pytest's
/// `tests/x.py::…`, cargo's `crate(src/lib.rs)::…`, jest's `a/x.test.js › …`, vitest's
/// `x.test.mjs > …`.
pub(super) fn test_file_of(name: &str) -> Option<&str> {
    if let Some((file, _)) = name.split_once("::")
        && let Some(inner) = file.split_once('(').and_then(|(_, r)| r.strip_suffix(')'))
    {
        return Some(inner);
    }
    let first = name
        .split(" › ")
        .next()
        .and_then(|f| f.split(" > ").next())
        .and_then(|f| f.split("::").next())
        .unwrap_or(name)
        .trim();
    let code = [
        ".py", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx", ".rs",
    ];
    (!first.contains(' ') && code.iter().any(|e| first.ends_with(e))).then_some(first)
}

/// Whether the test `name` in `file` reaches what the run changed: the test file itself
/// changed (a Rust source file only when it is a test file: its unit tests sit beside the
/// code) where the test's own definition changed or cannot be told apart, or it imports a
/// changed module (Python, JavaScript). A fix that adds its tests to the file of an
/// unrelated failing test does not touch that test (issue 39).
fn reaches_changed(ev: &Evidence<'_>, name: &str, file: &str) -> bool {
    let (root, changed) = (ev.root, ev.changed);
    let rust_source = file.ends_with(".rs") && !verify::is_test_path(file);
    let Ok(text) = std::fs::read_to_string(root.join(file)) else {
        return !rust_source;
    };
    if !rust_source
        && changed.iter().any(|c| c == file)
        && !own_definition_unchanged(ev, name, file)
    {
        return true;
    }
    if file.ends_with(".py") {
        return changed
            .iter()
            .filter(|p| p.ends_with(".py") && !verify::is_test_path(p))
            .any(|p| imports_module(&text, p));
    }
    if rust_source || file.ends_with(".rs") {
        return false;
    }
    changed
        .iter()
        .filter(|p| !verify::is_test_path(p))
        .any(|p| requires_module(&text, p))
}

/// The function a test id names (`file.py::Class::test_m[p]` → `test_m`,
/// `bin(tests/t.rs)::module::name` → `name`), when it is an identifier.
fn test_function(name: &str) -> Option<&str> {
    let last = name.rsplit("::").next()?;
    let last = last.split('[').next()?.trim();
    (!last.is_empty() && last.chars().all(|c| c.is_alphanumeric() || c == '_')).then_some(last)
}

/// The source of the one `def`/`fn` named `func` in `text`: its line through the line
/// before the next one at its indentation or less (decorators and attributes above it
/// left out). `None` when there is no such definition or more than one.
fn definition(text: &str, func: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let starts = |l: &str| {
        let t = l.trim_start();
        let t = t.strip_prefix("pub ").unwrap_or(t);
        let t = t.strip_prefix("async ").unwrap_or(t);
        [
            format!("fn {func}("),
            format!("def {func}("),
            format!("fn {func}<"),
        ]
        .iter()
        .any(|p| t.starts_with(p.as_str()))
    };
    let mut found = lines.iter().enumerate().filter(|(_, l)| starts(l));
    let (at, first) = found.next()?;
    if found.next().is_some() {
        return None;
    }
    let own = indent(first);
    let mut out = vec![*first];
    for l in &lines[at + 1..] {
        // A Rust body ends at its own `}`; a Python signature may close at its own `)`.
        let brace = l.trim_start().starts_with('}');
        let paren = l.trim_start().starts_with(')');
        if !l.trim().is_empty() && indent(l) <= own && !brace && !paren {
            break;
        }
        out.push(l);
        if brace && indent(l) == own {
            break;
        }
    }
    Some(out.join("\n"))
}

/// Whether JavaScript or TypeScript source `text` imports or requires the module at
/// repository path `path` by a relative specifier ending in its name (with or without the
/// extension; `index` files by their directory).
fn requires_module(text: &str, path: &str) -> bool {
    let code = [".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts", ".tsx"];
    let Some(ext) = code.iter().find(|e| path.ends_with(*e)) else {
        return false;
    };
    let stem = path.strip_suffix(ext).unwrap_or(path);
    let stem = stem.strip_suffix("/index").unwrap_or(stem);
    let name = stem.rsplit('/').next().unwrap_or(stem);
    let Ok(re) = regex::Regex::new(&format!(
        r#"(?:require\s*\(|import\s*\(|from)\s*['"]\.{{1,2}}/(?:[^'"]*/)?{}(?:\.[a-z]+)?['"]"#,
        regex::escape(name)
    )) else {
        return true;
    };
    re.is_match(text)
}

/// Whether the request `goal` names the test `name`: its whole identifier, its file, its
/// function or method (also without the runner's `test_`/`test` prefix: `add` names
/// `test_add`) as a word of the request, or — for a runner that names tests by title — the
/// full title. Never a single word of a title: "should not error" shares words with many
/// requests and names none of them (issue 39).
pub(super) fn requested(name: &str, goal: &str) -> bool {
    let goal_l = goal.to_lowercase();
    let plain = name.split('[').next().unwrap_or(name).trim();
    if plain.len() >= 3 && goal_l.contains(&plain.to_lowercase()) {
        return true;
    }
    if let Some(file) = test_file_of(plain) {
        let base = file.rsplit('/').next().unwrap_or(file);
        if goal_l.contains(&file.to_lowercase()) || goal_l.contains(&base.to_lowercase()) {
            return true;
        }
    }
    let leaf = plain.rsplit([':', '›', '>']).next().unwrap_or(plain).trim();
    if leaf.contains(char::is_whitespace) {
        let title = leaf
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase();
        let goal_n = goal_l.split_whitespace().collect::<Vec<_>>().join(" ");
        return title.len() >= 8 && goal_n.contains(&title);
    }
    let tokens: std::collections::BTreeSet<String> = goal_l
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    let leaf_l = leaf.to_lowercase();
    let bare = leaf_l
        .strip_prefix("test_")
        .or_else(|| leaf_l.strip_suffix("_test"))
        .or_else(|| leaf_l.strip_prefix("test").filter(|r| !r.is_empty()))
        .unwrap_or(&leaf_l);
    tokens.contains(&leaf_l) || (bare.len() >= 3 && tokens.contains(bare))
}

/// Whether the plan is about test `name`: it names the file the test lives in, and the
/// run changed that test's own definition (or it cannot be told apart). A plan that adds
/// its test to a file beside an unrelated failing one is not about that one. A test the
/// plan is about is never excused as pre-existing.
pub(super) fn planned_test(
    name: &str,
    planned: &std::collections::BTreeSet<String>,
    ev: &Evidence<'_>,
) -> bool {
    // cargo names the crate's root source for a unit test, wherever the test is: only a test
    // file the plan names says the plan is about its tests.
    test_file_of(name).is_some_and(|f| {
        verify::is_test_path(f) && planned.contains(f) && !own_definition_unchanged(ev, name, f)
    })
}

/// Whether test `name`'s own definition in `file` is the same at the base and now (both
/// found, once each).
fn own_definition_unchanged(ev: &Evidence<'_>, name: &str, file: &str) -> bool {
    let Some(func) = test_function(name) else {
        return false;
    };
    let Ok(text) = std::fs::read_to_string(ev.root.join(file)) else {
        return false;
    };
    let now = definition(&text, func);
    now.is_some() && (ev.base_file)(file).and_then(|b| definition(&b, func)) == now
}

/// Whether Python source `text` imports the module at repository path `path` (`src/` layouts
/// and relative imports included), as written.
fn imports_module(text: &str, path: &str) -> bool {
    let rel = path.strip_prefix("src/").unwrap_or(path);
    let rel = rel.strip_suffix(".py").unwrap_or(rel);
    let rel = rel.strip_suffix("/__init__").unwrap_or(rel);
    let dotted = rel.replace('/', ".");
    let (parent, last) = match dotted.rsplit_once('.') {
        Some((p, l)) => (Some(p.to_string()), l.to_string()),
        None => (None, dotted.clone()),
    };
    let e = |s: &str| regex::escape(s);
    let mut patterns = vec![
        format!(r"(?m)^\s*import\s+[^\n]*\b{}\b", e(&dotted)),
        format!(r"(?m)^\s*from\s+{}\s+import\b", e(&dotted)),
        format!(r"(?m)^\s*from\s+\.+{}\s+import\b", e(&last)),
        format!(r"(?m)^\s*from\s+\.+\s+import\s+[^\n]*\b{}\b", e(&last)),
    ];
    if let Some(parent) = parent {
        patterns.push(format!(
            r"(?m)^\s*from\s+{}\s+import\s+[^\n]*\b{}\b",
            e(&parent),
            e(&last)
        ));
    }
    patterns.iter().any(|p| {
        // A pattern that does not compile is doubt: count it as importing.
        regex::Regex::new(p).map_or(true, |re| re.is_match(text))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_definition_is_its_own_lines_only() {
        let rust = "#[test]\nfn a() {\n    one();\n}\n\n#[test]\nfn b() {\n    two();\n}\n";
        assert_eq!(
            super::definition(rust, "a").as_deref(),
            Some("fn a() {\n    one();\n}")
        );
        let python = "class T:\n    def test_a(self):\n        x = 1\n\n        assert x\n\n    def test_b(self):\n        pass\n";
        assert_eq!(
            super::definition(python, "test_a").as_deref(),
            Some("    def test_a(self):\n        x = 1\n\n        assert x\n")
        );
        let signature = "def test_a(\n    x,\n):\n    assert x\ndef other():\n    pass\n";
        assert_eq!(
            super::definition(signature, "test_a").as_deref(),
            Some("def test_a(\n    x,\n):\n    assert x")
        );
        // Two of that name: cannot be told apart.
        assert_eq!(
            super::definition("def t():\n  1\ndef t():\n  2\n", "t"),
            None
        );
        assert_eq!(super::test_function("t(tests/t.rs)::m::name"), Some("name"));
        assert_eq!(
            super::test_function("tests/x.py::C::test_m[1-2]"),
            Some("test_m")
        );
        assert_eq!(super::test_function("add adds two numbers"), None);
    }

    #[test]
    fn requested_tests_by_identifier_file_or_full_title() {
        let add = "tests/test_calc.py::test_add";
        assert!(requested(add, "fix add"));
        assert!(requested(add, "Adding numbers: add(2, 3) returns -1"));
        assert!(requested(add, "see tests/test_calc.py"));
        assert!(requested(add, "test_add fails"));
        let title = "calc.test.js › calc › adds two numbers";
        assert!(requested(title, "adds two numbers is broken"));
        assert!(requested(title, "calc.test.js fails"));
        // One shared word of a title names nothing (issue 39).
        assert!(!requested(title, "fix add"));
        assert!(!requested(
            "sub does not error on strings",
            "add should not error"
        ));
        let rust = "fixture(src/lib.rs)::tests::adds_two_numbers";
        assert!(requested(rust, "adds_two_numbers fails"));
        assert!(!requested(rust, "fix add"));
        let env = "tests/test_env.py::test_runs_on_python_two";
        assert!(!requested(env, "fix add"));
        assert!(!requested(env, "fix the test that fails"));
        assert!(!requested(env, "this should run on Python 2"));
        assert!(requested(env, "runs_on_python_two breaks"));
    }

    #[test]
    fn a_failure_is_the_same_across_paths_times_and_lines() {
        let a = Path::new("/state/worktrees/r1");
        let b = Path::new("/state/worktrees/r1-verify");
        let before = "thread 'x' (117) panicked at /state/worktrees/r1/src/lib.rs:40:5:\nleft: 1\nright: 2 (0.03s)";
        let after = "thread 'x' (3) panicked at /state/worktrees/r1-verify/src/lib.rs:44:5:\nleft: 1\nright: 2 (0.05s)\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace";
        assert_eq!(
            normalized_failure(before, &[a, b]),
            normalized_failure(after, &[a, b])
        );
        let changed =
            "thread 'x' panicked at /state/verify/r1-verify/src/lib.rs:44:5:\nleft: 3\nright: 2";
        assert_ne!(
            normalized_failure(before, &[a, b]),
            normalized_failure(changed, &[a, b])
        );
    }

    #[test]
    fn test_files_from_each_runners_names() {
        assert_eq!(
            test_file_of("tests/test_calc.py::test_add"),
            Some("tests/test_calc.py")
        );
        assert_eq!(
            test_file_of("fx(src/lib.rs)::tests::adds"),
            Some("src/lib.rs")
        );
        assert_eq!(
            test_file_of("api(tests/api.rs)::adds"),
            Some("tests/api.rs")
        );
        assert_eq!(
            test_file_of("jt/calc.test.js › calc › adds"),
            Some("jt/calc.test.js")
        );
        assert_eq!(
            test_file_of("calc.test.mjs > calc > adds"),
            Some("calc.test.mjs")
        );
        assert_eq!(test_file_of("add adds two numbers"), None);
        assert!(requires_module(
            "const { add } = require('../calc.js');",
            "calc.js"
        ));
        assert!(requires_module(
            "import { add } from \"../src/calc\";",
            "src/calc.ts"
        ));
        assert!(!requires_module(
            "const x = require('../other.js');",
            "calc.js"
        ));
    }
}
