//! Verification against the real runners on the fixture projects: detect the command, run it
//! for a baseline, apply the fix (or a regression), run again and decide.
//!
//! Needs cargo, python3 with pytest, and node on PATH; a missing tool fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::common::copy_dir;

use git_agent::verify::{
    self, Basis, Names, Observation, RunResult, TestCommand, decide, failure_summary, observe,
    reliable_command,
};

fn fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name);
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join(name);
    copy_dir(&src, &dst);
    (tmp, dst)
}

/// Runs a command line the way the executor will: through `sh -c`, stdout and stderr together.
fn run(dir: &Path, command: &str) -> RunResult {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{command} 2>&1"))
        .current_dir(dir)
        // Each fixture builds into its own temp dir, never the crate's target dir.
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("NO_COLOR", "1")
        // CPython trusts a cached .pyc whose source has the same size and mtime second: an
        // edit like `2` → `3` right after a run would not be seen.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot start `{command}`: {e}"));
    RunResult {
        exit_code: out.status.code(),
        output: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

fn detected(dir: &Path) -> TestCommand {
    verify::resolve(dir, None, None)
        .unwrap()
        .expect("a test command is detected")
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} lacks {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// Runs a command line the way `run/verification.rs` captures it today: stdout and stderr
/// through separate pipes, stderr appended after stdout.
fn run_split(dir: &Path, command: &str) -> RunResult {
    let out = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("NO_COLOR", "1")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap_or_else(|e| panic!("cannot start `{command}`: {e}"));
    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
    output.push('\n');
    output.push_str(&String::from_utf8_lossy(&out.stderr));
    RunResult {
        exit_code: out.status.code(),
        output,
    }
}

fn write(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

/// Baseline, fix, verify; then a regression on top of the fix must be caught.
fn fix_then_regress(
    name: &str,
    expect_cmd: &str,
    failing: &str,
    bug_fix: (&str, &str, &str),
    regression: (&str, &str, &str),
    regressed: &str,
) {
    let (_tmp, dir) = fixture(name);
    fix_then_regress_in(&dir, expect_cmd, failing, bug_fix, regression, regressed);
}

fn fix_then_regress_in(
    dir: &Path,
    expect_cmd: &str,
    failing: &str,
    (file, bug, fix): (&str, &str, &str),
    (rfile, rfrom, rto): (&str, &str, &str),
    regressed: &str,
) {
    let dir = dir.to_owned();
    let cmd = detected(&dir);
    let reliable = reliable_command(&cmd);
    assert_eq!(reliable.command, expect_cmd, "{}", reliable.note);

    let base_run = run(&dir, &reliable.command);
    let baseline = observe(&cmd, &base_run, &[]);
    assert_ne!(baseline.exit_code, Some(0), "{}", base_run.output);
    let report = baseline.report.as_ref().expect("baseline parsed");
    assert_eq!(report.names, Names::Full, "{}", base_run.output);
    assert_eq!(
        report.failed.iter().collect::<Vec<_>>(),
        [failing],
        "{}",
        base_run.output
    );
    let summary = failure_summary(Some(report), &base_run.output, 2048);
    assert!(summary.len() <= 2048);
    assert!(summary.contains(failing), "{summary}");
    assert!(
        summary.contains('5'),
        "the assertion's expected value: {summary}"
    );

    edit(&dir.join(file), bug, fix);
    let fixed_run = run(&dir, &reliable.command);
    let fixed = observe(&cmd, &fixed_run, &[]);
    let d = decide(Some(&baseline), &fixed);
    assert!(d.success, "{d:?}\n{}", fixed_run.output);
    assert_eq!(d.basis, Basis::TestNames);
    assert_eq!(d.newly_passing, [failing]);
    assert!(d.newly_failing.is_empty() && d.still_failing.is_empty());

    edit(&dir.join(rfile), rfrom, rto);
    let broken_run = run(&dir, &reliable.command);
    let broken: Observation = observe(&cmd, &broken_run, &[]);
    let d = decide(Some(&baseline), &broken);
    assert!(!d.success, "{d:?}");
    assert_eq!(d.newly_failing, [regressed], "{}", broken_run.output);
    assert_eq!(d.newly_passing, [failing]);
}

#[test]
fn rust_fixture_fix_and_regression_with_real_cargo() {
    fix_then_regress(
        "rust-add",
        "cargo test --no-fail-fast",
        "fixture_add(src/lib.rs)::tests::adds_two_numbers",
        (
            "src/lib.rs",
            "a: i64, b: i64) -> i64 {\n    a - b",
            "a: i64, b: i64) -> i64 {\n    a + b",
        ),
        ("tests/api.rs", "sub(1, 1), 0", "sub(1, 1), 2"),
        "api(tests/api.rs)::sub_is_public",
    );
}

#[test]
fn python_fixture_fix_and_regression_with_real_pytest() {
    fix_then_regress(
        "python-add",
        "python3 -m pytest -rfEsxXp",
        "tests/test_calc.py::test_add",
        (
            "calc.py",
            "def add(a, b):\n    return a - b",
            "def add(a, b):\n    return a + b",
        ),
        ("tests/test_calc.py", "sub(5, 3) == 2", "sub(5, 3) == 3"),
        "tests/test_calc.py::test_sub",
    );
}

#[test]
fn js_fixture_fix_and_regression_with_real_node_test_runner() {
    fix_then_regress(
        "js-add",
        "npm test",
        "add adds two numbers",
        (
            "calc.js",
            "function add(a, b) {\n  return a - b;",
            "function add(a, b) {\n  return a + b;",
        ),
        ("test/calc.test.js", "sub(5, 3), 2", "sub(5, 3), 3"),
        "sub subtracts two numbers",
    );
}

#[test]
fn deleting_the_failing_test_is_caught_with_real_cargo() {
    let (_tmp, dir) = fixture("rust-add");
    let cmd = detected(&dir);
    let command = reliable_command(&cmd).command;
    let baseline = observe(&cmd, &run(&dir, &command), &[]);
    edit(
        &dir.join("src/lib.rs"),
        "    #[test]\n    fn adds_two_numbers() {\n        assert_eq!(add(2, 3), 5);\n    }\n",
        "",
    );
    let after = observe(&cmd, &run(&dir, &command), &[]);
    assert_eq!(after.exit_code, Some(0));
    let d = decide(Some(&baseline), &after);
    assert!(!d.success, "{d:?}");
    assert_eq!(
        d.missing,
        ["fixture_add(src/lib.rs)::tests::adds_two_numbers"]
    );
}

#[test]
fn pytest_junit_xml_from_a_real_run_names_the_same_outcomes() {
    let (_tmp, dir) = fixture("python-add");
    let xml_path = dir.join("report.xml");
    let result = run(
        &dir,
        &format!("python3 -m pytest --junitxml={}", xml_path.display()),
    );
    assert_eq!(result.exit_code, Some(1), "{}", result.output);
    let xml = std::fs::read_to_string(&xml_path).unwrap();
    let r = verify::parse_junit_xml(&[xml]).unwrap();
    assert_eq!(
        r.failed.iter().collect::<Vec<_>>(),
        ["tests.test_calc.test_add"]
    );
    assert_eq!(
        r.passed.iter().collect::<Vec<_>>(),
        ["tests.test_calc.test_sub"]
    );
    assert!(r.details["tests.test_calc.test_add"].contains("assert -1 == 5"));
}

#[test]
fn node_junit_reporter_from_a_real_run() {
    let (_tmp, dir) = fixture("js-add");
    let result = run(
        &dir,
        "node --test --test-reporter=junit --test-reporter-destination=report.xml",
    );
    assert_eq!(result.exit_code, Some(1), "{}", result.output);
    let xml = std::fs::read_to_string(dir.join("report.xml")).unwrap();
    let r = verify::parse_junit_xml(&[xml]).unwrap();
    assert_eq!(r.failed.len(), 1, "{r:?}");
    assert_eq!(r.passed.len(), 1, "{r:?}");
}

#[test]
fn compile_error_gives_a_summary_with_the_compiler_message() {
    let (_tmp, dir) = fixture("rust-add");
    edit(
        &dir.join("src/lib.rs"),
        "assert_eq!(add(2, 3), 5)",
        "assert_eq!(add(2, 3), \"5\")",
    );
    let cmd = detected(&dir);
    let result = run(&dir, &reliable_command(&cmd).command);
    let obs = observe(&cmd, &result, &[]);
    assert_eq!(obs.exit_code, Some(101));
    assert!(obs.report.is_none(), "{:?}", obs.report);
    let s = failure_summary(None, &result.output, 1024);
    assert!(s.contains("error[E0308]"), "{s}");
    assert!(s.contains("src/lib.rs:19"), "{s}");
    let d = decide(None, &obs);
    assert!(!d.success);
    assert_eq!(d.basis, Basis::ExitCode);
}

/// A Python project that tests with unittest alone: detected as unittest (not pytest, which
/// it does not install), run verbosely, and compared by test id with real CPython.
#[test]
fn python_unittest_project_fix_and_regression_with_real_python() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("unittest-add");
    write(
        &dir,
        &[
            (
                "pyproject.toml",
                "[project]\nname = \"calc\"\nversion = \"0.1\"\n",
            ),
            (
                "calc.py",
                "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n",
            ),
            ("tests/__init__.py", ""),
            (
                "tests/test_calc.py",
                concat!(
                    "import unittest\n\nfrom calc import add, sub\n\n\n",
                    "class CalcTest(unittest.TestCase):\n",
                    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n",
                    "    def test_sub(self):\n        self.assertEqual(sub(5, 3), 2)\n",
                ),
            ),
        ],
    );
    fix_then_regress_in(
        &dir,
        "python3 -m unittest -v",
        "tests.test_calc.CalcTest.test_add",
        (
            "calc.py",
            "def add(a, b):\n    return a - b",
            "def add(a, b):\n    return a + b",
        ),
        ("tests/test_calc.py", "sub(5, 3), 2", "sub(5, 3), 3"),
        "tests.test_calc.CalcTest.test_sub",
    );
}

/// Guards issue 19: with stdout and stderr captured apart (cargo's `Running` lines on stderr,
/// the tests on stdout), two tests of the same name in two test binaries stay two tests, and
/// fixing one is not hidden by the other.
#[test]
fn cargo_same_test_name_in_two_binaries_with_stderr_captured_apart() {
    let (_tmp, dir) = fixture("rust-add");
    // A second integration test binary with a test named like the one in tests/api.rs.
    write(
        &dir,
        &[(
            "tests/twice.rs",
            "#[test]\nfn sub_is_public() {\n    assert_eq!(fixture_add::add(1, 1), 2);\n}\n",
        )],
    );
    let cmd = detected(&dir);
    let command = reliable_command(&cmd).command;
    let base_run = run_split(&dir, &command);
    let baseline = observe(&cmd, &base_run, &[]);
    let report = baseline.report.as_ref().expect("baseline parsed");
    assert_eq!(report.names, Names::Full, "{}", base_run.output);
    assert_eq!(
        report.failed.iter().collect::<Vec<_>>(),
        [
            "fixture_add(src/lib.rs)::tests::adds_two_numbers",
            "twice(tests/twice.rs)::sub_is_public"
        ],
        "{}",
        base_run.output
    );
    assert!(
        report.passed.contains("api(tests/api.rs)::sub_is_public"),
        "{report:?}"
    );

    edit(
        &dir.join("src/lib.rs"),
        "a: i64, b: i64) -> i64 {\n    a - b",
        "a: i64, b: i64) -> i64 {\n    a + b",
    );
    let fixed = observe(&cmd, &run_split(&dir, &command), &[]);
    let d = decide(Some(&baseline), &fixed);
    assert!(d.success, "{d:?}");
    assert_eq!(
        d.newly_passing,
        [
            "fixture_add(src/lib.rs)::tests::adds_two_numbers",
            "twice(tests/twice.rs)::sub_is_public"
        ]
    );
}
