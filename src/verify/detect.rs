//! Which command runs a project's tests, and how to make its output parseable.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::error::{Error, Result};

/// The tool behind a test command, as far as we can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Runner {
    /// `cargo test` (libtest output).
    Cargo,
    /// pytest.
    Pytest,
    /// Python's unittest runner (`python -m unittest`), nose2, Django's `manage.py test`: the
    /// same text output.
    Unittest,
    /// `go test`.
    GoTest,
    /// `npm test` (the script decides the real runner).
    Npm,
    /// `pnpm test`.
    Pnpm,
    /// `yarn test`.
    Yarn,
    /// Maven (surefire).
    Maven,
    /// Gradle.
    Gradle,
    /// `make test`.
    Make,
    /// Anything else.
    Other,
}

impl Runner {
    /// Guesses the runner of a command line given by a person (`--test-cmd`, config).
    pub fn of_command(command: &str) -> Runner {
        let words: Vec<&str> = command.split_whitespace().collect();
        let has = |w: &str| words.contains(&w);
        let first = words
            .first()
            .map(|w| w.rsplit('/').next().unwrap_or(w))
            .unwrap_or("");
        match first {
            "cargo" => Runner::Cargo,
            "pytest" | "py.test" => Runner::Pytest,
            "go" if has("test") => Runner::GoTest,
            "npm" => Runner::Npm,
            "pnpm" => Runner::Pnpm,
            "yarn" => Runner::Yarn,
            "mvn" | "mvnw" => Runner::Maven,
            "gradle" | "gradlew" => Runner::Gradle,
            "make" => Runner::Make,
            "nose2" => Runner::Unittest,
            _ if words.windows(2).any(|w| w == ["-m", "pytest"]) => Runner::Pytest,
            _ if words
                .windows(2)
                .any(|w| w == ["-m", "unittest"] || w == ["-m", "nose2"]) =>
            {
                Runner::Unittest
            }
            _ if words
                .windows(2)
                .any(|w| w[0].ends_with("manage.py") && w[1] == "test") =>
            {
                Runner::Unittest
            }
            _ => Runner::Other,
        }
    }
}

/// Where a test command came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "from")]
pub enum CommandSource {
    /// `--test-cmd`.
    Flag,
    /// The `verify.test` configuration key.
    Config,
    /// Found from a file in the worktree.
    Detected {
        /// The file that gave it away, relative to the worktree.
        marker: PathBuf,
    },
}

/// A test command and what we know about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestCommand {
    /// The shell command line.
    pub command: String,
    /// The tool it runs.
    pub runner: Runner,
    /// Where it came from.
    pub source: CommandSource,
    /// For `npm`/`pnpm`/`yarn`: the `scripts.test` it runs.
    pub script: Option<String>,
}

/// npm's placeholder for "no tests".
const NPM_PLACEHOLDER: &str = "no test specified";

/// A project file's text, or `None` when it does not exist.
pub(super) fn read_opt(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

fn detected(command: impl Into<String>, runner: Runner, marker: &str) -> TestCommand {
    TestCommand {
        command: command.into(),
        runner,
        source: CommandSource::Detected {
            marker: PathBuf::from(marker),
        },
        script: None,
    }
}

/// Every test command the worktree suggests, best first: Cargo, package.json `scripts.test`,
/// pytest (pyproject.toml, setup.cfg, tox.ini, pytest.ini), go.mod, Maven, Gradle, a
/// Makefile `test` target. Empty when nothing fits.
pub fn detect(worktree: &Path) -> Result<Vec<TestCommand>> {
    let mut found = Vec::new();

    if let Some(text) = read_opt(&worktree.join("Cargo.toml"))? {
        // A root package with workspace members tests only itself unless asked for the
        // workspace.
        let both = text
            .parse::<toml::Table>()
            .map(|t| {
                let members = t
                    .get("workspace")
                    .and_then(|w| w.get("members"))
                    .and_then(|m| m.as_array())
                    .is_some_and(|m| !m.is_empty());
                members && t.contains_key("package")
            })
            .unwrap_or(false);
        let cmd = if both {
            "cargo test --workspace"
        } else {
            "cargo test"
        };
        found.push(detected(cmd, Runner::Cargo, "Cargo.toml"));
    }

    let pkg_path = worktree.join("package.json");
    if let Some(text) = read_opt(&pkg_path)? {
        let pkg: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::PackageJson {
                path: pkg_path.clone(),
                message: e.to_string(),
            })?;
        let script = pkg
            .get("scripts")
            .and_then(|s| s.get("test"))
            .and_then(|s| s.as_str());
        if let Some(script) = script.filter(|s| !s.contains(NPM_PLACEHOLDER)) {
            let manager = pkg
                .get("packageManager")
                .and_then(|m| m.as_str())
                .unwrap_or("");
            let (runner, cmd) =
                if worktree.join("pnpm-lock.yaml").exists() || manager.starts_with("pnpm@") {
                    (Runner::Pnpm, "pnpm test")
                } else if worktree.join("yarn.lock").exists() || manager.starts_with("yarn@") {
                    (Runner::Yarn, "yarn test")
                } else {
                    (Runner::Npm, "npm test")
                };
            let mut c = detected(cmd, runner, "package.json");
            c.script = Some(script.to_owned());
            found.push(c);
        }
    }

    for marker in ["pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini"] {
        if worktree.join(marker).is_file() {
            // `python3`, not `python`: Debian and Ubuntu ship no `python` by default, and a
            // virtualenv has both.
            let (cmd, runner) = python_runner(worktree)?;
            found.push(detected(cmd, runner, marker));
            break;
        }
    }

    if worktree.join("go.mod").is_file() {
        found.push(detected("go test ./...", Runner::GoTest, "go.mod"));
    }

    if worktree.join("pom.xml").is_file() {
        let cmd = if worktree.join("mvnw").is_file() {
            "./mvnw -B test"
        } else {
            "mvn -B test"
        };
        found.push(detected(cmd, Runner::Maven, "pom.xml"));
    }

    for marker in ["build.gradle.kts", "build.gradle"] {
        if worktree.join(marker).is_file() {
            let cmd = if worktree.join("gradlew").is_file() {
                "./gradlew test"
            } else {
                "gradle test"
            };
            found.push(detected(cmd, Runner::Gradle, marker));
            break;
        }
    }

    for marker in ["GNUmakefile", "makefile", "Makefile"] {
        if let Some(text) = read_opt(&worktree.join(marker))? {
            if has_make_target(&text, "test") {
                found.push(detected("make test", Runner::Make, marker));
            }
            break;
        }
    }
    Ok(found)
}

/// Files whose text says which Python test runner a project uses.
const PYTHON_CONFIG: [&str; 6] = [
    "pyproject.toml",
    "setup.cfg",
    "tox.ini",
    "setup.py",
    "noxfile.py",
    "Pipfile",
];

/// At most this many test files are read to tell unittest from pytest.
const MAX_TEST_FILES: usize = 200;

/// The Python test command: pytest unless the project shows it does without.
///
/// pytest runs unittest suites too, but a project that never mentions pytest does not install
/// it, and `python3 -m pytest` then fails before any test runs. So: pytest when anything
/// mentions it (a `pytest.ini` or `conftest.py`, the word `pytest` in a config or
/// requirements file, a test file importing it) or when no test file says otherwise; nose2
/// when the configuration names it; unittest when the test files import `unittest` and
/// nothing names pytest. unittest discovers from the top only through packages, so a `tests/`
/// without `__init__.py` is started there (`discover -s tests`).
fn python_runner(worktree: &Path) -> Result<(&'static str, Runner)> {
    let pytest = ("python3 -m pytest", Runner::Pytest);
    if worktree.join("pytest.ini").is_file()
        || ["conftest.py", "tests/conftest.py", "test/conftest.py"]
            .iter()
            .any(|c| worktree.join(c).is_file())
    {
        return Ok(pytest);
    }
    let mut config = String::new();
    for name in PYTHON_CONFIG {
        config.push_str(&read_opt(&worktree.join(name))?.unwrap_or_default());
    }
    for dir in [".", "requirements"] {
        let Ok(entries) = std::fs::read_dir(worktree.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if dir != "." || (name.starts_with("requirements") && name.ends_with(".txt")) {
                config.push_str(&read_opt(&e.path())?.unwrap_or_default());
            }
        }
    }
    if config.contains("pytest") {
        return Ok(pytest);
    }
    let mut files = Vec::new();
    for dir in ["tests", "test", "."] {
        test_files(
            &worktree.join(dir),
            if dir == "." { 0 } else { 3 },
            &mut files,
        );
    }
    let mut uses_unittest = false;
    for f in files.iter().take(MAX_TEST_FILES) {
        let text = read_opt(f)?.unwrap_or_default();
        if text.contains("import pytest") || text.contains("from pytest") {
            return Ok(pytest);
        }
        uses_unittest |= text.contains("import unittest") || text.contains("from unittest");
    }
    if !uses_unittest {
        return Ok(pytest);
    }
    if config.contains("nose2") || worktree.join("nose2.cfg").is_file() {
        return Ok(("python3 -m nose2", Runner::Unittest));
    }
    for dir in ["tests", "test"] {
        let d = worktree.join(dir);
        if d.is_dir() && !d.join("__init__.py").is_file() {
            return Ok(if dir == "tests" {
                ("python3 -m unittest discover -s tests", Runner::Unittest)
            } else {
                ("python3 -m unittest discover -s test", Runner::Unittest)
            });
        }
    }
    Ok(("python3 -m unittest", Runner::Unittest))
}

/// Python test files (`test*.py`, `*_test.py`) under `dir`, `depth` directories deep, in
/// name order.
fn test_files(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        if p.is_dir() {
            if depth > 0 && !name.starts_with('.') && name != "node_modules" {
                test_files(&p, depth - 1, out);
            }
        } else if name.ends_with(".py") && (name.starts_with("test") || name.ends_with("_test.py"))
        {
            out.push(p);
        }
        if out.len() >= MAX_TEST_FILES {
            return;
        }
    }
}

/// Whether a Makefile defines a rule for `target` (not a variable like `test := …`).
fn has_make_target(text: &str, target: &str) -> bool {
    text.lines().any(|line| {
        if line.starts_with(['\t', ' ', '#', '.']) {
            return false;
        }
        let Some((targets, rest)) = line.split_once(':') else {
            return false;
        };
        !rest.starts_with('=') && targets.split_whitespace().any(|t| t == target)
    })
}

/// The test command of a run: `--test-cmd` wins, then the `verify.test` config key, then the
/// first detected command. `None` when there is none at all.
pub fn resolve(
    worktree: &Path,
    flag: Option<&str>,
    config: Option<&str>,
) -> Result<Option<TestCommand>> {
    let given = |cmd: &str, source| TestCommand {
        command: cmd.to_owned(),
        runner: Runner::of_command(cmd),
        source,
        script: None,
    };
    if let Some(cmd) = flag.filter(|c| !c.trim().is_empty()) {
        return Ok(Some(given(cmd, CommandSource::Flag)));
    }
    if let Some(cmd) = config.filter(|c| !c.trim().is_empty()) {
        return Ok(Some(given(cmd, CommandSource::Config)));
    }
    Ok(detect(worktree)?.into_iter().next())
}

/// A command with flags added so that its output names every test.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reliable {
    /// The command to run.
    pub command: String,
    /// The flags that were added (empty when none).
    pub added: Vec<String>,
    /// Why these flags, or why none.
    pub note: String,
}

/// Adds flags that make a detected command's output name every test, where that cannot change
/// what the tests do. A command given by a person (flag, config) is returned unchanged.
///
/// Where a runner can also write a machine-readable report, the choice is per runner:
/// - Maven and Gradle write JUnit XML anyway; [`read_junit_reports`] reads it.
/// - pytest gets `-rfEsxXp`, not `--junitxml`: the report file would land in the worktree,
///   where a checkpoint could commit it, and `-r` prints the same node ids. Not `-rA`: its
///   `P` adds a `PASSES` section with what every passing test printed, text the code under
///   test writes (a fake `9 passed` line, issue 18).
/// - jest and vitest get their verbose reporters, not `--json`, and go gets `-v`, not
///   `-json`: the executor keeps the head and tail of a long output and drops the middle,
///   which costs a verbose run some names but leaves one JSON document unparseable; and
///   older go prints build failures outside its JSON events. Both JSON forms are still read
///   when a person asks for them.
/// - mocha gets `--reporter=spec`, ava, tape and node's runner nothing: they name every test
///   as they are; the returned `note` says why in each case.
pub fn reliable_command(cmd: &TestCommand) -> Reliable {
    let unchanged = |note: &str| Reliable {
        command: cmd.command.clone(),
        added: Vec::new(),
        note: note.to_owned(),
    };
    if !matches!(cmd.source, CommandSource::Detected { .. }) {
        return unchanged("a command given by a person is run exactly as given");
    }
    let words: Vec<&str> = cmd.command.split_whitespace().collect();
    let has_word = |w: &str| words.contains(&w);
    let add = |flags: &[&str], note: &str| {
        let mut command = cmd.command.clone();
        for f in flags {
            command.push(' ');
            command.push_str(f);
        }
        Reliable {
            command,
            added: flags.iter().map(|f| (*f).to_owned()).collect(),
            note: note.to_owned(),
        }
    };
    match cmd.runner {
        Runner::Cargo if !has_word("--no-fail-fast") => add(
            &["--no-fail-fast"],
            "without it cargo stops at the first failing test binary, so the tests of later \
             binaries are neither passed nor failed and cannot be compared with the baseline",
        ),
        Runner::Pytest if !words.iter().any(|w| w.starts_with("-r")) => add(
            &["-rfEsxXp"],
            "-rfEsxXp adds a short summary line for every test (PASSED/FAILED/…), so passing \
             tests are named too, without -rA's section of what passing tests printed; it \
             changes nothing else",
        ),
        Runner::Unittest if !has_word("-v") && !has_word("--verbose") => add(
            &["-v"],
            "-v prints a line per test, so passing tests are named too; it changes nothing \
             else",
        ),
        Runner::GoTest if !has_word("-v") && !has_word("-json") => add(
            &["-v"],
            "-v prints a line per test, so passing tests are named too",
        ),
        Runner::Npm | Runner::Pnpm | Runner::Yarn => {
            let Some(script) = cmd.script.as_deref() else {
                return unchanged("the package script is unknown");
            };
            if script.contains(['&', '|', ';', '>', '<', '$', '`']) {
                return unchanged(
                    "the test script is more than one command; extra arguments would reach \
                     only its last command",
                );
            }
            let sep = if cmd.runner == Runner::Yarn {
                ""
            } else {
                "-- "
            };
            let (tool, rest) = script_runner(script);
            let has = |flag: &str| {
                rest.iter()
                    .any(|w| *w == flag || w.starts_with(&format!("{flag}=")))
            };
            let (flag, note) = match tool {
                "jest" if !has("--verbose") => (
                    "--verbose",
                    "jest names passing tests only in its verbose reporter",
                ),
                "vitest" if !has("--reporter") => (
                    "--reporter=verbose",
                    "vitest names passing tests only in its verbose reporter",
                ),
                // spec is mocha's default, but a `.mocharc` may choose another reporter
                // (dot, a JUnit file for CI); spec names every test, and naming the reporter
                // on the command line beats the file. Its JSON reporter is not used: it
                // shares stdout with the tests' own console output, which breaks the JSON.
                "mocha" if !has("--reporter") && !has("-R") => (
                    "--reporter=spec",
                    "mocha's spec reporter names every test; a .mocharc could choose another",
                ),
                _ => {
                    return unchanged(
                        "the script's runner names every test already (node --test, ava, \
                         tape) or is not one we know how to make name them",
                    );
                }
            };
            let mut r = add(&[&format!("{sep}{flag}")], note);
            r.added = vec![flag.to_owned()];
            r
        }
        Runner::Maven | Runner::Gradle => unchanged(
            "surefire and gradle write JUnit XML reports by default; read them with \
             read_junit_reports",
        ),
        Runner::Make => {
            unchanged("make's test target can run anything; extra flags could change what it does")
        }
        _ => unchanged("the command already names its tests"),
    }
}

/// The test runner a package script starts and the words after it, looking through the
/// wrappers scripts put in front (`nyc mocha`, `cross-env CI=1 jest`, `npx vitest run`).
/// Arguments added to the script reach the last command, which is the runner.
fn script_runner(script: &str) -> (&str, Vec<&str>) {
    const WRAPPERS: [&str; 4] = ["nyc", "c8", "cross-env", "npx"];
    let words: Vec<&str> = script.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| !WRAPPERS.contains(w) && !w.contains('=') && !w.starts_with('-'))
        .filter(|&i| i == 0 || WRAPPERS.contains(&words[i - 1]) || words[i - 1].contains('='));
    match at {
        Some(i) => (words[i], words[i + 1..].to_vec()),
        None => ("", Vec::new()),
    }
}

/// Where a runner writes its JUnit XML reports, relative to the worktree.
pub fn junit_report_dirs(runner: Runner) -> &'static [&'static str] {
    match runner {
        Runner::Maven => &["target/surefire-reports", "target/failsafe-reports"],
        Runner::Gradle => &["build/test-results"],
        _ => &[],
    }
}

/// Reads the JUnit XML reports a Maven or Gradle run wrote, skipping files older than `since`
/// (the start of the run), so stale reports of an earlier run are not mistaken for this one.
pub fn read_junit_reports(
    worktree: &Path,
    runner: Runner,
    since: SystemTime,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for dir in junit_report_dirs(runner) {
        collect_xml(&worktree.join(dir), since, 4, &mut out)?;
    }
    Ok(out)
}

fn collect_xml(dir: &Path, since: SystemTime, depth: u32, out: &mut Vec<String>) -> Result<()> {
    let read_err = |source| Error::Read {
        path: dir.to_owned(),
        source,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(read_err(e)),
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let meta = std::fs::symlink_metadata(&path).map_err(read_err)?;
        if meta.is_dir() && depth > 0 {
            collect_xml(&path, since, depth - 1, out)?;
        } else if meta.is_file()
            && path.extension().is_some_and(|e| e == "xml")
            && meta.modified().map_or(true, |m| m >= since)
        {
            let text = std::fs::read(&path).map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?;
            out.push(String::from_utf8_lossy(&text).into_owned());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    fn commands(files: &[(&str, &str)]) -> Vec<String> {
        let dir = tree(files);
        detect(dir.path())
            .unwrap()
            .into_iter()
            .map(|c| c.command)
            .collect()
    }

    #[test]
    fn detects_each_ecosystem() {
        assert_eq!(
            commands(&[("Cargo.toml", "[package]\nname='a'")]),
            ["cargo test"]
        );
        assert_eq!(
            commands(&[(
                "Cargo.toml",
                "[package]\nname='a'\n[workspace]\nmembers=['b']"
            )]),
            ["cargo test --workspace"]
        );
        assert_eq!(
            commands(&[("Cargo.toml", "[package]\nname='a'\n[workspace]\n")]),
            ["cargo test"]
        );
        assert_eq!(commands(&[("pyproject.toml", "")]), ["python3 -m pytest"]);
        assert_eq!(commands(&[("tox.ini", "")]), ["python3 -m pytest"]);
        assert_eq!(commands(&[("setup.cfg", "")]), ["python3 -m pytest"]);
        assert_eq!(commands(&[("pytest.ini", "")]), ["python3 -m pytest"]);
        assert_eq!(commands(&[("go.mod", "module x")]), ["go test ./..."]);
        assert_eq!(commands(&[("pom.xml", "<project/>")]), ["mvn -B test"]);
        assert_eq!(
            commands(&[("pom.xml", ""), ("mvnw", "")]),
            ["./mvnw -B test"]
        );
        assert_eq!(commands(&[("build.gradle", "")]), ["gradle test"]);
        assert_eq!(
            commands(&[("build.gradle.kts", ""), ("gradlew", "")]),
            ["./gradlew test"]
        );
        assert_eq!(
            commands(&[("Makefile", "all: build\n\ntest: build\n\t./run-tests\n")]),
            ["make test"]
        );
        assert!(commands(&[("Makefile", "test := 1\nall:\n\techo test:\n")]).is_empty());
        assert!(commands(&[("README.md", "hi")]).is_empty());
    }

    #[test]
    fn package_manager_follows_the_lockfile() {
        let pkg = r#"{"scripts": {"test": "jest"}}"#;
        assert_eq!(commands(&[("package.json", pkg)]), ["npm test"]);
        assert_eq!(
            commands(&[("package.json", pkg), ("package-lock.json", "{}")]),
            ["npm test"]
        );
        assert_eq!(
            commands(&[("package.json", pkg), ("pnpm-lock.yaml", "")]),
            ["pnpm test"]
        );
        assert_eq!(
            commands(&[("package.json", pkg), ("yarn.lock", "")]),
            ["yarn test"]
        );
        assert_eq!(
            commands(&[(
                "package.json",
                r#"{"packageManager": "pnpm@9.1.0", "scripts": {"test": "vitest"}}"#
            )]),
            ["pnpm test"]
        );
    }

    #[test]
    fn package_json_without_a_real_test_script_is_skipped() {
        let placeholder = r#"{"scripts": {"test": "echo \"Error: no test specified\" && exit 1"}}"#;
        assert!(commands(&[("package.json", placeholder)]).is_empty());
        assert!(commands(&[("package.json", r#"{"name": "x"}"#)]).is_empty());
        let dir = tree(&[("package.json", "{not json")]);
        assert!(matches!(detect(dir.path()), Err(Error::PackageJson { .. })));
    }

    #[test]
    fn several_markers_give_several_candidates_in_order() {
        let found = commands(&[
            ("Makefile", "test:\n\tcargo test\n"),
            ("Cargo.toml", "[package]\nname='a'"),
            ("package.json", r#"{"scripts": {"test": "node --test"}}"#),
        ]);
        assert_eq!(found, ["cargo test", "npm test", "make test"]);
    }

    #[test]
    fn flag_beats_config_beats_detection() {
        let dir = tree(&[("Cargo.toml", "[package]\nname='a'")]);
        let r = |flag, config| resolve(dir.path(), flag, config).unwrap().unwrap();
        let c = r(Some("pytest -x"), Some("make check"));
        assert_eq!(
            (c.command.as_str(), c.source),
            ("pytest -x", CommandSource::Flag)
        );
        assert_eq!(c.runner, Runner::Pytest);
        let c = r(None, Some("make check"));
        assert_eq!((c.runner, c.source), (Runner::Make, CommandSource::Config));
        let c = r(None, None);
        assert_eq!(c.command, "cargo test");
        assert_eq!(
            c.source,
            CommandSource::Detected {
                marker: "Cargo.toml".into()
            }
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(resolve(empty.path(), None, None).unwrap().is_none());
    }

    #[test]
    fn runner_is_guessed_from_a_given_command() {
        assert_eq!(Runner::of_command("cargo nextest run"), Runner::Cargo);
        assert_eq!(Runner::of_command("python -m pytest tests"), Runner::Pytest);
        assert_eq!(Runner::of_command("/usr/bin/go test ./..."), Runner::GoTest);
        assert_eq!(Runner::of_command("./gradlew check"), Runner::Gradle);
        assert_eq!(
            Runner::of_command("python3 -m unittest discover -s tests -v"),
            Runner::Unittest
        );
        assert_eq!(Runner::of_command("python -m nose2 -v"), Runner::Unittest);
        assert_eq!(Runner::of_command("nose2"), Runner::Unittest);
        assert_eq!(
            Runner::of_command("python manage.py test -v 2"),
            Runner::Unittest
        );
        assert_eq!(Runner::of_command("bash ci.sh"), Runner::Other);
    }

    #[test]
    fn reliable_flags_are_added_only_where_harmless() {
        let dir = tree(&[
            ("Cargo.toml", "[package]\nname='a'"),
            ("package.json", r#"{"scripts": {"test": "jest --ci"}}"#),
            ("pytest.ini", ""),
            ("go.mod", ""),
            ("Makefile", "test:\n\ttrue\n"),
        ]);
        let found = detect(dir.path()).unwrap();
        let got: Vec<String> = found.iter().map(|c| reliable_command(c).command).collect();
        assert_eq!(
            got,
            [
                "cargo test --no-fail-fast",
                "npm test -- --verbose",
                "python3 -m pytest -rfEsxXp",
                "go test ./... -v",
                "make test"
            ]
        );
        // A person's command is never changed.
        let given = resolve(dir.path(), Some("pytest"), None).unwrap().unwrap();
        assert_eq!(reliable_command(&given).command, "pytest");
        assert!(reliable_command(&given).added.is_empty());
        // A compound script would pass the flag to its last command only.
        let compound = TestCommand {
            script: Some("tsc && jest".into()),
            ..found[1].clone()
        };
        assert_eq!(reliable_command(&compound).command, "npm test");
        let yarn = TestCommand {
            command: "yarn test".into(),
            runner: Runner::Yarn,
            script: Some("vitest run".into()),
            ..found[1].clone()
        };
        assert_eq!(
            reliable_command(&yarn).command,
            "yarn test --reporter=verbose"
        );
    }

    #[test]
    fn python_projects_that_never_mention_pytest_get_unittest() {
        let unittest_test = ("tests/test_a.py", "import unittest\n");
        let package = ("tests/__init__.py", "");
        // Anything that names pytest keeps pytest, even over unittest-style tests.
        for pytest_sign in [
            (
                "pyproject.toml",
                "[project.optional-dependencies]\ntest = ['pytest>=8']\n",
            ),
            ("conftest.py", ""),
            ("tests/conftest.py", ""),
            ("pytest.ini", ""),
            ("requirements-dev.txt", "pytest==8.3\n"),
            ("requirements/test.txt", "pytest\n"),
            ("tests/test_b.py", "import pytest\n"),
        ] {
            assert_eq!(
                commands(&[("setup.cfg", ""), package, unittest_test, pytest_sign]),
                ["python3 -m pytest"],
                "{pytest_sign:?}"
            );
        }
        // No test file says which: pytest, as before.
        assert_eq!(commands(&[("pyproject.toml", "")]), ["python3 -m pytest"]);
        // unittest only: from the top through the package, or from inside `tests/`.
        assert_eq!(
            commands(&[("setup.cfg", ""), package, unittest_test]),
            ["python3 -m unittest"]
        );
        assert_eq!(
            commands(&[
                ("pyproject.toml", "[project]\nname = 'a'\n"),
                ("tests/test_a.py", "from unittest import TestCase\n")
            ]),
            ["python3 -m unittest discover -s tests"]
        );
        assert_eq!(
            commands(&[
                ("setup.cfg", "[options.extras_require]\ntest = nose2\n"),
                package,
                unittest_test
            ]),
            ["python3 -m nose2"]
        );
    }

    #[test]
    fn detected_unittest_and_mocha_are_asked_to_name_every_test() {
        let dir = tree(&[
            ("setup.cfg", ""),
            ("tests/__init__.py", ""),
            ("tests/test_a.py", "import unittest\n"),
        ]);
        let cmd = resolve(dir.path(), None, None).unwrap().unwrap();
        assert_eq!(cmd.runner, Runner::Unittest);
        let r = reliable_command(&cmd);
        assert_eq!(r.command, "python3 -m unittest -v");
        assert_eq!(r.added, ["-v"]);

        let npm = |script: &str| {
            let dir = tree(&[(
                "package.json",
                &format!(r#"{{"scripts": {{"test": "{script}"}}}}"#),
            )]);
            reliable_command(&resolve(dir.path(), None, None).unwrap().unwrap()).command
        };
        assert_eq!(npm("mocha"), "npm test -- --reporter=spec");
        assert_eq!(
            npm("nyc --reporter=lcov mocha --timeout 5000"),
            "npm test -- --reporter=spec"
        );
        assert_eq!(
            npm("cross-env NODE_ENV=test mocha"),
            "npm test -- --reporter=spec"
        );
        // The script's own reporter choice stands.
        assert_eq!(npm("mocha --reporter dot"), "npm test");
        assert_eq!(npm("mocha -R tap"), "npm test");
        // Runners whose output names every test already.
        assert_eq!(npm("ava"), "npm test");
        assert_eq!(npm("tape test/*.js"), "npm test");
        assert_eq!(npm("jest --verbose=false"), "npm test");
    }

    /// Guards issue 19: a flag a person gives the runner is kept, as given, and so is the
    /// command a run recorded (which comes back as configuration on the next check).
    #[test]
    fn flags_a_person_gives_are_kept() {
        let dir = tree(&[
            ("pyproject.toml", ""),
            ("Cargo.toml", "[package]\nname='a'"),
        ]);
        for given in [
            "pytest -x -k foo",
            "python3 -m pytest -x -k 'foo and not bar' -p no:cacheprovider",
            "cargo test -p core -- --test-threads=1",
            "python3 -m unittest tests.test_a",
            "npm test -- --grep adds",
        ] {
            for (flag, config) in [(Some(given), None), (None, Some(given))] {
                let cmd = resolve(dir.path(), flag, config).unwrap().unwrap();
                let r = reliable_command(&cmd);
                assert_eq!(r.command, given);
                assert!(r.added.is_empty(), "{given}: {:?}", r.added);
            }
        }
        let detected = resolve(dir.path(), None, None).unwrap().unwrap();
        let first = reliable_command(&detected).command;
        assert_eq!(first, "cargo test --no-fail-fast");
        let again = resolve(dir.path(), None, Some(&first)).unwrap().unwrap();
        assert_eq!(reliable_command(&again).command, first);
    }

    #[test]
    fn junit_reports_older_than_the_run_are_ignored() {
        let dir = tree(&[
            ("target/surefire-reports/TEST-a.xml", "<testsuite/>"),
            ("target/surefire-reports/a.txt", "x"),
            (
                "build/test-results/test/TEST-b.xml",
                "<testsuite name='b'/>",
            ),
        ]);
        let long_ago = SystemTime::UNIX_EPOCH;
        let maven = read_junit_reports(dir.path(), Runner::Maven, long_ago).unwrap();
        assert_eq!(maven, ["<testsuite/>"]);
        let gradle = read_junit_reports(dir.path(), Runner::Gradle, long_ago).unwrap();
        assert_eq!(gradle, ["<testsuite name='b'/>"]);
        let future = SystemTime::now() + std::time::Duration::from_secs(3600);
        assert!(
            read_junit_reports(dir.path(), Runner::Maven, future)
                .unwrap()
                .is_empty()
        );
    }
}
