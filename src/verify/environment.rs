//! A baseline that cannot run is not a bug to fix (issue 19): the test command's program is
//! not installed, the test modules cannot even be imported, nothing is collected, or the
//! dependencies cannot be fetched. Spending model turns "fixing" that only burns money (seen
//! on real projects: three fix attempts against `No module named pytest`), so the run stops
//! before the first model turn with `environment_failed` and says what it saw.
//!
//! Only a run in which no test ran at all is judged here: once any test passes or fails, the
//! environment works and what fails is the project's business.

use std::sync::LazyLock;

use regex::Regex;

use super::detect::{Runner, TestCommand};
use super::report::{TestReport, strip_ansi};

/// Why the tests could not run, with the lines that show it and what would help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvironmentProblem {
    /// One sentence: what is wrong.
    pub why: String,
    /// The decisive lines of the output (at most a few).
    pub lines: Vec<String>,
    /// What to change so the tests can run.
    pub hint: String,
}

struct Sign {
    pattern: &'static str,
    why: &'static str,
}

/// Output lines that show the environment, not the code, is at fault, in the order they are
/// looked for.
const SIGNS: &[Sign] = &[
    Sign {
        pattern: r"No module named '?pytest'?\b",
        why: "pytest is not installed where the test command runs",
    },
    // Before "command not found": a toolchain manager says that too, after saying why.
    Sign {
        pattern: r#"(?i)(?:rustup could not choose a version|toolchain '[^']+' is not installed|no default toolchain (?:is )?configured|pyenv: version [`'"][^`'"]+[`'"] is not installed|no (?:preset )?version (?:is set|installed) for command|volta error|ERR_PNPM_UNSUPPORTED_ENGINE|the engine "node" is incompatible|unsupported engine|requires rustc [0-9.]+ or newer|could not write settings file|syncing channel updates for|nvm: .*(?:not yet installed|is not installed))"#,
        why: "the toolchain the project asks for is not installed where the tests run (a toolchain manager with no toolchain, or a version the project does not support)",
    },
    Sign {
        pattern: r"(?i)(?:command not found|: not found$|: No such file or directory$|exec: .*: not found)",
        why: "the test command's program was not found",
    },
    // pytest exits 4 before any test when its command line, or the `addopts` of its
    // configuration, names what it does not know: most often a plugin's option (`--cov`)
    // with the plugin not installed.
    Sign {
        pattern: r"(?:^(?:ERROR: )?usage: \S*(?:pytest|py\.test)|^\S*(?:pytest|__main__\.py): error: |^ERROR: file or directory not found: )",
        why: "pytest stopped before running any test: its command line or configuration names an option or path it does not know (a plugin the configuration uses, such as pytest-cov for `--cov`, is not installed where the tests run)",
    },
    Sign {
        pattern: r#"Missing script: "?test"?"#,
        why: "the package has no `test` script",
    },
    Sign {
        pattern: r"(?:ImportError while importing test module|ERROR collecting|ModuleNotFoundError: No module named)",
        why: "the test modules could not be imported (a dependency or the project itself is not installed)",
    },
    Sign {
        pattern: r"(?:Cannot find module '[^'./][^']*'|ERR_MODULE_NOT_FOUND)",
        why: "a JavaScript dependency is missing (no node_modules?)",
    },
    Sign {
        pattern: r"(?:failed to get `[^`]+` as a dependency|failed to download|no matching package named|failed to load source for dependency|attempting to make an HTTP request, but --offline was specified|Couldn't resolve host name|failed to query replaced source registry)",
        why: "the crate's dependencies could not be fetched",
    },
    Sign {
        pattern: r"(?:no tests ran|collected 0 items|^running 0 tests$|No tests found|^# tests 0$|ℹ tests 0)",
        why: "no tests were collected",
    },
];

fn compiled() -> &'static [(Option<Regex>, &'static str)] {
    static RES: LazyLock<Vec<(Option<Regex>, &'static str)>> = LazyLock::new(|| {
        SIGNS
            .iter()
            .map(|s| (Regex::new(&format!("(?m){}", s.pattern)).ok(), s.why))
            .collect()
    });
    &RES
}

/// What the baseline run says about the environment: `Some` when no test ran at all and the
/// output (or an exit code of 127) shows why.
pub fn environment_problem(
    cmd: &TestCommand,
    exit_code: Option<i32>,
    output: &str,
    report: Option<&TestReport>,
) -> Option<EnvironmentProblem> {
    let text = strip_ansi(output);
    // pytest names a module it could not collect as a failure (`ERROR tests/test_x.py`):
    // that is no test having run.
    static COLLECTING: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(r"ERROR collecting (\S+)").ok());
    let uncollected: Vec<&str> = COLLECTING
        .as_ref()
        .map(|re| {
            re.captures_iter(&text)
                .filter_map(|c| c.get(1).map(|m| m.as_str()))
                .collect()
        })
        .unwrap_or_default();
    let any_ran = report.is_some_and(|r| {
        !r.passed.is_empty()
            || r.counts.passed > 0
            || r.failed.iter().any(|n| !uncollected.contains(&n.as_str()))
    });
    if any_ran {
        return None;
    }
    let mut found: Option<(&str, Vec<String>)> = None;
    for (re, why) in compiled() {
        let Some(re) = re else { continue };
        let lines: Vec<String> = text
            .lines()
            .filter(|l| re.is_match(l.trim_end()))
            .take(3)
            .map(|l| l.trim().chars().take(300).collect())
            .collect();
        if !lines.is_empty() {
            found = Some((why, lines));
            break;
        }
    }
    let (why, lines) = match (found, exit_code) {
        (Some(f), _) => f,
        (None, Some(4)) if cmd.runner == Runner::Pytest => (
            "pytest stopped before running any test (exit code 4: a usage error)",
            last_lines(&text),
        ),
        (None, Some(127)) => (
            "the test command's program was not found (exit code 127)",
            last_lines(&text),
        ),
        // Every test ran zero times and the command says it passed: nothing was tested.
        (None, Some(0)) if report.is_some() => ("no tests were collected", last_lines(&text)),
        _ => return None,
    };
    Some(EnvironmentProblem {
        why: why.to_string(),
        lines,
        hint: hint(cmd),
    })
}

/// A command set-up runs in every checkout before the tests (`SetupPlan::before_tests`, the
/// project's own `prepare`) failed at the baseline: `output` is what it said.
pub fn before_tests_problem(command: &str, output: &str) -> EnvironmentProblem {
    EnvironmentProblem {
        why: format!(
            "`{command}`, which set-up runs in every checkout before the tests (the installer \
             runs the project's own `prepare` there), failed"
        ),
        lines: last_lines(&strip_ansi(output)),
        hint: "The code was not touched: make the project's `prepare` script work in a fresh \
               checkout with `node_modules` read-only and no network, or declare the set-up \
               in `[setup]` of `.github/agent.toml` (`git agent doctor --run` shows what a \
               run sees)."
            .into(),
    }
}

fn last_lines(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..]
        .iter()
        .map(|l| l.trim().chars().take(300).collect())
        .collect()
}

/// What to change, by runner.
fn hint(cmd: &TestCommand) -> String {
    let what = match cmd.runner {
        Runner::Pytest => {
            "install the project and its test dependencies where the tests run (for example a virtualenv with `pip install -e .[test]` and pytest) and name the command that uses it"
        }
        Runner::Npm | Runner::Pnpm | Runner::Yarn => {
            "install the dependencies first (`npm ci` with the lockfile) so `node_modules` exists, and check the `test` script"
        }
        Runner::Cargo => {
            "fetch the dependencies before the run (`cargo fetch`, with a `Cargo.lock`) so the tests can build offline, or allow the registry in `[policy] network_allow`"
        }
        _ => "make the test command runnable from a fresh checkout in the sandbox",
    };
    format!(
        "The code was not touched: {what}; then give the command with `--test-cmd` or `[verify] test` in `.github/agent.toml` (`git agent doctor` shows what a run sees)."
    )
}

/// The lints that broke a Rust build without being the project's own rule: lints this
/// toolchain denies by default (`dangerous_implicit_autorefs`), or warnings a blanket
/// `#![deny(warnings)]` turned into errors (`unexpected_cfgs`). A crate that denies warnings
/// and was written for an older compiler stops building when a newer one adds a lint; its
/// tests never run at all. A lint the project denies by name (`#![deny(missing_docs)]`) is
/// its rule and is never listed. Sorted, without repeats.
pub fn toolchain_lints(output: &str) -> Vec<String> {
    static LEVEL: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(
            r"`#\[deny\(([a-z0-9_]+(?:::[a-z0-9_]+)?)\)\]` (?:on by default|implied by `(?:#\[deny\(warnings\)\]|-D warnings)`)",
        )
        .ok()
    });
    let Some(re) = LEVEL.as_ref() else {
        return Vec::new();
    };
    let text = strip_ansi(output);
    let mut lints: Vec<String> = re
        .captures_iter(&text)
        .filter_map(|c| c.get(1).map(|m| m.as_str().to_string()))
        .collect();
    lints.sort();
    lints.dedup();
    lints
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{CommandSource, parse_output};

    fn cmd(command: &str, runner: Runner) -> TestCommand {
        TestCommand {
            command: command.into(),
            runner,
            source: CommandSource::Config,
            script: None,
        }
    }

    fn problem(c: &TestCommand, code: i32, out: &str) -> Option<EnvironmentProblem> {
        let report = parse_output(Some(c.runner), out);
        environment_problem(c, Some(code), out, report.as_ref())
    }

    #[test]
    fn a_baseline_that_cannot_run_is_named() {
        let py = cmd("python3 -m pytest", Runner::Pytest);
        let p = problem(&py, 1, "/usr/bin/python3: No module named pytest\n").unwrap();
        assert_eq!(p.why, "pytest is not installed where the test command runs");
        assert_eq!(p.lines, ["/usr/bin/python3: No module named pytest"]);
        assert!(p.hint.contains("pip install -e"), "{}", p.hint);

        let collect = "==================================== ERRORS ====================================\n\
_____________________ ERROR collecting tests/test_calc.py ______________________\n\
ImportError while importing test module '/w/tests/test_calc.py'.\n\
E   ModuleNotFoundError: No module named 'attrs'\n\
=========================== short test summary info ============================\n\
ERROR tests/test_calc.py\n\
!!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!\n\
=============================== 1 error in 0.05s ===============================\n";
        let p = problem(&py, 2, collect).unwrap();
        assert!(p.why.contains("could not be imported"), "{p:?}");

        let empty = "============================= test session starts ==============================\ncollected 0 items\n\n============================ no tests ran in 0.01s =============================\n";
        assert_eq!(
            problem(&py, 5, empty).unwrap().why,
            "no tests were collected"
        );

        let npm = cmd("npm test", Runner::Npm);
        let p = problem(
            &npm,
            127,
            "> x@1.0.0 test\n> jest\n\nsh: 1: jest: not found\n",
        )
        .unwrap();
        assert_eq!(p.why, "the test command's program was not found");
        assert!(problem(&npm, 1, "npm error Missing script: \"test\"\n").is_some());

        let cargo = cmd("cargo test", Runner::Cargo);
        let out = "    Updating crates.io index\nerror: failed to get `itoa` as a dependency of package `x v0.1.0 (/w)`\n\nCaused by:\n  failed to load source for dependency `itoa`\n";
        let p = problem(&cargo, 101, out).unwrap();
        assert_eq!(p.why, "the crate's dependencies could not be fetched");
        assert!(problem(&cmd("foo", Runner::Other), 127, "").is_some());
    }

    /// Issue 39 point 7: pytest exits 4 (a usage error) before any test when the project's
    /// `addopts` names a plugin's option and the plugin is missing.
    #[test]
    fn a_pytest_usage_error_is_the_environment() {
        let py = cmd("python3 -m pytest", Runner::Pytest);
        let out = "ERROR: usage: __main__.py [options] [file_or_dir] [file_or_dir] [...]\n\
__main__.py: error: unrecognized arguments: --cov=src --cov-report=term\n  \
inifile: /w/pyproject.toml\n  rootdir: /w\n";
        let p = problem(&py, 4, out).unwrap();
        assert!(
            p.why.starts_with("pytest stopped before running any test"),
            "{p:?}"
        );
        assert!(p.lines.iter().any(|l| l.contains("--cov")), "{p:?}");
        let missing = "ERROR: file or directory not found: tests/unit\n\n";
        assert!(problem(&py, 4, missing).is_some());
        // Exit 4 and nothing recognisable: still no test ran.
        let p = problem(&py, 4, "something else entirely\n").unwrap();
        assert!(p.why.contains("exit code 4"), "{p:?}");
        // A suite that ran and failed is never the environment.
        let ran = "tests/test_x.py F\n=========================== short test summary info ============================\nFAILED tests/test_x.py::test_a - assert 1 == 2\n============================== 1 failed in 0.01s ===============================\n";
        assert!(problem(&py, 1, ran).is_none());
    }

    /// Issue 39 point 7: the test program never reached the project because its toolchain
    /// manager had nothing to run.
    #[test]
    fn a_toolchain_manager_without_a_toolchain_is_the_environment() {
        let toolchain = "the toolchain the project asks for";
        let cargo = cmd("cargo test", Runner::Cargo);
        for out in [
            "error: rustup could not choose a version of cargo to run, because one wasn't specified explicitly, and no default is configured.\nhelp: run 'rustup default stable'\n",
            "error: toolchain '1.70.0-x86_64-unknown-linux-gnu' is not installed\n",
            // rustup installing the toolchain it was asked for, in a home it cannot write.
            "info: syncing channel updates for stable-x86_64-unknown-linux-gnu\nerror: could not create temp file /h/tmp/x_file: Read-only file system (os error 30)\n",
            "error: package `semver v1.0.0` cannot be built because it requires rustc 1.80 or newer, while the currently active rustc version is 1.70.0\n",
        ] {
            let p = problem(&cargo, 1, out).expect(out);
            assert!(p.why.starts_with(toolchain), "{out}: {p:?}");
        }
        let py = cmd("python3 -m pytest", Runner::Pytest);
        let out = "pyenv: version `3.8.10' is not installed (set by /w/.python-version)\n";
        assert!(problem(&py, 1, out).unwrap().why.starts_with(toolchain));
        let npm = cmd("npm test", Runner::Npm);
        let out = " ERR_PNPM_UNSUPPORTED_ENGINE  Unsupported environment (bad pnpm and/or Node.js version)\n";
        assert!(problem(&npm, 1, out).unwrap().why.starts_with(toolchain));
    }

    #[test]
    fn a_baseline_where_any_test_ran_is_the_projects_business() {
        let py = cmd("python3 -m pytest", Runner::Pytest);
        // One test module cannot import a name (perhaps the bug itself), others ran.
        let out = "tests/test_a.py::test_x PASSED\nERROR collecting tests/test_b.py\nE   ImportError: cannot import name 'y'\n========== 1 passed, 1 error in 0.1s ==========\n";
        assert_eq!(problem(&py, 1, out), None);
        // An ordinary failure.
        let out = "tests/test_calc.py::test_add FAILED\n========== 1 failed in 0.1s ==========\n";
        assert_eq!(problem(&py, 1, out), None);
        // A compile error in the code under test is a bug to fix, not an environment.
        let cargo = cmd("cargo test", Runner::Cargo);
        assert_eq!(
            problem(
                &cargo,
                101,
                "error[E0308]: mismatched types\n --> src/lib.rs:2:5\n"
            ),
            None
        );
    }

    /// Real rustc output: a lint denied by default in this toolchain, and one a crate's
    /// `#![deny(warnings)]` turned into an error; a lint the crate denies by name is its own.
    #[test]
    fn toolchain_lints_are_those_denied_by_default_or_by_deny_warnings() {
        let output = "error: implicit autoref creates a reference to the dereference of a raw pointer\n    --> src/header/map.rs:2316:35\n     = note: `#[deny(dangerous_implicit_autorefs)]` on by default\nerror: unexpected `cfg` condition name: `httparse_simd`\nnote: the lint level is defined here\n  --> src/lib.rs:2:9\n2  | #![deny(warnings)]\n   = note: `#[deny(unexpected_cfgs)]` implied by `#[deny(warnings)]`\n   = note: `#[deny(unexpected_cfgs)]` implied by `#[deny(warnings)]`\nerror: missing documentation for a function\nnote: the lint level is defined here\n1 | #![deny(missing_docs)]\nerror: unused variable: `x`\n   = note: `#[deny(unused_variables)]` implied by `-D warnings`\nerror: this is clippy\n   = note: `#[deny(clippy::all)]` on by default\n";
        assert_eq!(
            toolchain_lints(output),
            vec![
                "clippy::all",
                "dangerous_implicit_autorefs",
                "unexpected_cfgs",
                "unused_variables"
            ]
        );
        assert!(toolchain_lints("error[E0425]: cannot find value `x`\n").is_empty());
    }
}
