//! Protected test-runner configuration: the files that decide what the test command runs and
//! how, so that a change to them is never silent (issue 18).
//!
//! A `conftest.py` hook that turns failures into passes, a `pytest.py` at the root that
//! shadows pytest under `python3 -m pytest`, `"test": "echo ok"` in `package.json`: each made
//! a run "verified" without fixing anything. [`runner_config_change`] names such a change from
//! the file's content before and after; the run then applies `policy.runner_config` (`ask` by
//! default: a person approves that exact content, or the change is not committed).
//!
//! Where a file mixes runner settings with other things (`pyproject.toml`, `setup.cfg`,
//! `package.json`, `Cargo.toml`), only the runner's part is compared, so an ordinary
//! dependency or version bump goes through.

use std::path::Path;

/// Interpreters and runners a file in the tree could stand in for (a shim named `node` that
/// `npm test` finds first on `PATH` through `node_modules/.bin`).
const SHADOWED: &[&str] = &[
    "python", "python3", "node", "nodejs", "npm", "npx", "pnpm", "yarn", "pytest", "py.test",
    "cargo", "rustc", "go", "sh", "bash", "env", "make", "java", "mvn", "gradle",
];

/// Top-level Python modules pytest imports: a root-level file or package of that name
/// shadows the real one under `python3 -m pytest`.
const SHADOWED_MODULES: &[&str] = &[
    "pluggy",
    "iniconfig",
    "packaging",
    "_pytest",
    "pytest",
    "py",
    "exceptiongroup",
    "tomli",
    "colorama",
    "pygments",
];

/// How an entry of [`RUNNER_FILES`] matches a path.
#[derive(Debug, Clone, Copy)]
enum Match {
    /// The file name exactly.
    Name(&'static str),
    /// The file name's beginning (`jest.config.` matches `jest.config.ts`).
    Prefix(&'static str),
    /// The file name's end.
    Suffix(&'static str),
    /// Any directory of the path with this name.
    InDir(&'static str),
    /// Any directory of the path ending so.
    InDirSuffix(&'static str),
}

impl Match {
    fn matches(self, name: &str, rela: &str) -> bool {
        let dirs = || {
            let mut parts: Vec<&str> = rela.split('/').collect();
            parts.pop();
            parts
        };
        match self {
            Match::Name(n) => name == n,
            Match::Prefix(p) => name.starts_with(p),
            Match::Suffix(x) => name.ends_with(x),
            Match::InDir(d) => dirs().contains(&d),
            Match::InDirSuffix(x) => dirs().iter().any(|c| c.ends_with(x)),
        }
    }
}

/// Every file that is runner configuration as a whole (issue 40: one list): how it matches,
/// what it is, and an example path, which the tests check entry by entry. Files whose runner
/// part only their content shows (`pyproject.toml`, `package.json`, `Cargo.toml`,
/// `setup.cfg`, `go.mod`, a `Makefile` the test command runs) are judged in
/// [`runner_config_change`].
const RUNNER_FILES: &[(Match, &str, &str)] = &[
    (
        Match::Name("conftest.py"),
        "pytest's hooks and fixtures",
        "tests/conftest.py",
    ),
    (
        Match::Name("pytest.ini"),
        "pytest's configuration",
        "pytest.ini",
    ),
    (
        Match::Name(".pytest.ini"),
        "pytest's configuration",
        ".pytest.ini",
    ),
    (
        Match::Name("pytest.toml"),
        "pytest's configuration",
        "pytest.toml",
    ),
    (
        Match::Name(".pytest.toml"),
        "pytest's configuration",
        ".pytest.toml",
    ),
    (
        Match::Name("tox.ini"),
        "tox's configuration (and pytest's `[pytest]`)",
        "tox.ini",
    ),
    (Match::Name("noxfile.py"), "nox's sessions", "noxfile.py"),
    (
        Match::Name("sitecustomize.py"),
        "a module every Python process imports",
        "src/sitecustomize.py",
    ),
    (
        Match::Name("usercustomize.py"),
        "a module every Python process imports",
        "usercustomize.py",
    ),
    (
        Match::Suffix(".pth"),
        "a path file Python's `site` executes at start-up",
        "src/x.pth",
    ),
    (
        Match::Name("pytest.py"),
        "a module that shadows pytest",
        "pytest.py",
    ),
    (
        Match::Name(".npmrc"),
        "npm's configuration (node options, the script shell)",
        ".npmrc",
    ),
    (
        Match::Name(".yarnrc"),
        "yarn's configuration (which yarn runs)",
        ".yarnrc",
    ),
    (
        Match::Name(".yarnrc.yml"),
        "yarn's configuration (which yarn runs)",
        ".yarnrc.yml",
    ),
    (
        Match::Name(".pnpmfile.cjs"),
        "pnpm's install hooks",
        ".pnpmfile.cjs",
    ),
    (
        Match::Name(".pnpmfile.mjs"),
        "pnpm's install hooks",
        ".pnpmfile.mjs",
    ),
    (
        Match::Name("bunfig.toml"),
        "bun's configuration",
        "bunfig.toml",
    ),
    (
        Match::Name("node.config.json"),
        "node's configuration",
        "node.config.json",
    ),
    (Match::Name(".taprc"), "tap's configuration", ".taprc"),
    (
        Match::Prefix(".mocharc"),
        "mocha's configuration",
        ".mocharc.yml",
    ),
    (
        Match::Prefix("jest.config."),
        "jest's configuration",
        "jest.config.ts",
    ),
    (
        Match::Prefix("vitest.config."),
        "vitest's configuration",
        "vitest.config.mts",
    ),
    (
        Match::Prefix("vitest.workspace."),
        "vitest's configuration",
        "vitest.workspace.ts",
    ),
    (
        Match::Prefix("vite.config."),
        "vite's configuration (vitest reads it)",
        "vite.config.js",
    ),
    (
        Match::Prefix("ava.config."),
        "ava's configuration",
        "ava.config.js",
    ),
    (
        Match::Prefix("karma.conf."),
        "karma's configuration",
        "karma.conf.js",
    ),
    (
        Match::Name("rust-toolchain"),
        "the Rust toolchain the tests build with",
        "rust-toolchain",
    ),
    (
        Match::Name("rust-toolchain.toml"),
        "the Rust toolchain the tests build with",
        "rust-toolchain.toml",
    ),
    (
        Match::Name("build.rs"),
        "a Cargo build script (runs before the tests, sets cfgs)",
        "build.rs",
    ),
    (
        Match::InDir(".cargo"),
        "Cargo's configuration (runners, flags, aliases, `[env]`)",
        ".cargo/config.toml",
    ),
    (
        Match::Suffix(".pyc"),
        "compiled Python that is imported instead of its source",
        "calc.pyc",
    ),
    (
        Match::Suffix(".pyo"),
        "compiled Python that is imported instead of its source",
        "calc.pyo",
    ),
    (
        Match::Suffix(".so"),
        "a compiled extension loaded before the sources",
        "calc.cpython-312-x86_64-linux-gnu.so",
    ),
    (
        Match::Suffix(".pyd"),
        "a compiled extension loaded before the sources",
        "calc.pyd",
    ),
    (
        Match::Suffix(".dylib"),
        "a compiled extension loaded before the sources",
        "libcalc.dylib",
    ),
    (
        Match::InDirSuffix(".dist-info"),
        "installed-package metadata or bytecode (entry points load pytest plugins)",
        "x-1.0.dist-info/entry_points.txt",
    ),
    (
        Match::InDirSuffix(".egg-info"),
        "installed-package metadata or bytecode (entry points load pytest plugins)",
        "x.egg-info/entry_points.txt",
    ),
    (
        Match::InDir("__pycache__"),
        "installed-package metadata or bytecode (entry points load pytest plugins)",
        "__pycache__/calc.cpython-312.opt-1.cache",
    ),
    (
        Match::InDir("node_modules"),
        "installed JavaScript packages (they stand in for the runner and its assertions)",
        "node_modules/chai/index.js",
    ),
];

/// Files that are runner configuration as a whole, by name.
fn whole_file(name: &str, rela: &str) -> Option<&'static str> {
    RUNNER_FILES
        .iter()
        .find(|(m, _, _)| m.matches(name, rela))
        .map(|(_, what, _)| *what)
}

/// Why changing `rela` from `old` to `new` (`None`: absent) changes how the tests run, or
/// `None` when it does not. `test_command` is the run's test command (a `Makefile` counts when
/// the tests run through `make`).
pub fn runner_config_change(
    rela: &str,
    old: Option<&[u8]>,
    new: Option<&[u8]>,
    test_command: &str,
) -> Option<String> {
    if old == new {
        return None;
    }
    if let Some(why) = runner_config_by_name(rela) {
        return Some(why);
    }
    // A new root-level module named like one pytest imports shadows it (a project that is
    // that module changes its existing files freely).
    if old.is_none()
        && rela.split('/').next().is_some_and(|top| {
            let top = top.strip_suffix(".py").unwrap_or(top);
            SHADOWED_MODULES.contains(&top)
        })
    {
        return Some(format!("`{rela}` shadows a module pytest itself imports"));
    }
    let name = Path::new(rela)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
    let (old_t, new_t) = (text(old), text(new));
    match name.as_str() {
        "pyproject.toml" => toml_parts_differ(
            old_t.as_deref(),
            new_t.as_deref(),
            &[
                &["tool", "pytest"],
                &["tool", "tox"],
                &["tool", "nox"],
                &["tool", "hatch", "envs"],
            ],
        )
        .map(|part| format!("`{rela}`: [{part}] changed (the test runner's settings)")),
        "Cargo.toml" => toml_parts_differ(
            old_t.as_deref(),
            new_t.as_deref(),
            &[
                &["profile"],
                &["test"],
                &["lib"],
                &["bin"],
                &["bench"],
                &["package", "build"],
                &["package", "autotests"],
                &["package", "autobins"],
                &["patch"],
                &["replace"],
            ],
        )
        .map(|part| format!("`{rela}`: [{part}] changed (how tests are built and run)")),
        "package.json" => json_parts_differ(
            old_t.as_deref(),
            new_t.as_deref(),
            &["scripts", "jest", "mocha", "ava", "tap", "vitest"],
        )
        .map(|part| format!("`{rela}`: `{part}` changed (what `npm test` runs and how)")),
        "setup.cfg" => ini_sections_differ(
            old_t.as_deref(),
            new_t.as_deref(),
            &["tool:pytest", "pytest", "tox:tox"],
        )
        .map(|s| format!("`{rela}`: [{s}] changed (the test runner's settings)")),
        "go.mod" => go_directives_differ(old_t.as_deref(), new_t.as_deref()).map(|d| {
            format!("`{rela}`: the `{d}` directive changed (the Go toolchain the tests run with)")
        }),
        "Makefile" | "makefile" | "GNUmakefile" if mentions_make(test_command) => Some(format!(
            "`{rela}` decides what `{}` runs",
            test_command.trim()
        )),
        _ => None,
    }
}

/// Why changing `rela` from `old` to `new` changes how the tests run: [`runner_config_change`],
/// or a file the runner's configuration loads before the tests
/// ([`super::preload::preloaded_by`], by the configuration `base` reads).
pub fn runner_change(
    rela: &str,
    old: Option<&[u8]>,
    new: Option<&[u8]>,
    test_command: &str,
    base: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Option<String> {
    if old == new {
        return None;
    }
    runner_config_change(rela, old, new, test_command).or_else(|| {
        // A preload among the tests is held out of the deciding run like them.
        (!crate::verify::is_test_path(rela))
            .then(|| super::preload::preloaded_by(rela, base, test_command))
            .flatten()
    })
}

/// Why `rela` is runner configuration as a whole, by its name alone (a `conftest.py`, a
/// `pytest.py` shadow, a file named like an interpreter); `None` for files whose runner part
/// only their content shows (`pyproject.toml`, `package.json`, …).
pub fn runner_config_by_name(rela: &str) -> Option<String> {
    let name = Path::new(rela)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(what) = whole_file(&name, rela) {
        return Some(format!("`{rela}` is {what}"));
    }
    if rela.split('/').any(|c| c == "_pytest") {
        return Some(format!("`{rela}` shadows pytest's own package"));
    }
    let base = name.split('.').next().unwrap_or("");
    let versioned_python =
        name.starts_with("python3.") && name[8..].chars().all(|c| c.is_ascii_digit());
    if SHADOWED.contains(&name.as_str())
        || versioned_python
        || (base == "python3" && name.ends_with(".exe"))
    {
        return Some(format!(
            "`{rela}` is named like the `{name}` program and can stand in for it"
        ));
    }
    None
}

/// The first of go.mod's `go` and `toolchain` directives whose value differs (they choose,
/// and may download, the toolchain `go test` runs with).
fn go_directives_differ(old: Option<&str>, new: Option<&str>) -> Option<&'static str> {
    let value = |t: Option<&str>, d: &str| -> Option<String> {
        t?.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(d).filter(|r| r.starts_with(' ')))
            .map(|r| r.trim().to_string())
    };
    ["go", "toolchain"]
        .into_iter()
        .find(|d| value(old, d) != value(new, d))
}

fn mentions_make(cmd: &str) -> bool {
    cmd.split(|c: char| c.is_whitespace() || c == ';' || c == '&' || c == '|')
        .any(|w| w == "make" || w == "gmake")
}

/// The first of `parts` (dotted key paths) whose value differs between two TOML documents.
/// A document that does not parse differs in every part it might hold.
fn toml_parts_differ(old: Option<&str>, new: Option<&str>, parts: &[&[&str]]) -> Option<String> {
    let parse = |t: Option<&str>| -> Result<Option<toml::Table>, ()> {
        match t {
            None => Ok(None),
            Some(t) => t.parse::<toml::Table>().map(Some).map_err(|_| ()),
        }
    };
    let (Ok(a), Ok(b)) = (parse(old), parse(new)) else {
        return Some(parts[0].join("."));
    };
    let get = |t: &Option<toml::Table>, path: &[&str]| -> Option<toml::Value> {
        let mut cur = toml::Value::Table(t.clone()?);
        for k in path {
            cur = cur.as_table()?.get(*k)?.clone();
        }
        Some(cur)
    };
    parts
        .iter()
        .find(|p| get(&a, p) != get(&b, p))
        .map(|p| p.join("."))
}

/// The first of `keys` (top-level) whose value differs between two JSON documents.
fn json_parts_differ(old: Option<&str>, new: Option<&str>, keys: &[&str]) -> Option<String> {
    let parse = |t: Option<&str>| -> Result<Option<serde_json::Value>, ()> {
        match t {
            None => Ok(None),
            Some(t) => serde_json::from_str(t).map(Some).map_err(|_| ()),
        }
    };
    let (Ok(a), Ok(b)) = (parse(old), parse(new)) else {
        return Some(keys[0].to_string());
    };
    let get = |v: &Option<serde_json::Value>, k: &str| v.as_ref().and_then(|v| v.get(k)).cloned();
    keys.iter()
        .find(|k| get(&a, k) != get(&b, k))
        .map(|k| (*k).to_string())
}

/// The first of `sections` whose lines differ between two INI documents.
fn ini_sections_differ(old: Option<&str>, new: Option<&str>, sections: &[&str]) -> Option<String> {
    let section = |t: Option<&str>, want: &str| -> Vec<String> {
        let mut inside = false;
        let mut lines = Vec::new();
        for line in t.unwrap_or("").lines() {
            let l = line.trim();
            if l.starts_with('[') && l.ends_with(']') {
                let name = l[1..l.len() - 1].trim();
                inside = name == want || name.starts_with(&format!("{want}:"));
                continue;
            }
            if inside && !l.is_empty() && !l.starts_with('#') && !l.starts_with(';') {
                lines.push(l.to_string());
            }
        }
        lines
    };
    sections
        .iter()
        .find(|s| section(old, s) != section(new, s))
        .map(|s| (*s).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(rela: &str, old: Option<&str>, new: Option<&str>) -> Option<String> {
        runner_config_change(
            rela,
            old.map(str::as_bytes),
            new.map(str::as_bytes),
            "python3 -m pytest",
        )
    }

    /// Issue 40 point 1: one list, and each entry of it caught by its example path, saying
    /// what it is.
    #[test]
    fn every_entry_of_the_list_is_runner_configuration() {
        for (_, what, example) in RUNNER_FILES {
            let why = change(example, None, Some("x")).unwrap_or_else(|| panic!("{example}"));
            assert!(why.contains(what), "{example}: {why}");
            assert!(
                change(example, Some("x"), None).is_some(),
                "{example} deleted"
            );
        }
    }

    #[test]
    fn a_go_toolchain_directive_is_runner_configuration() {
        let base = "module example.com/calc\n\ngo 1.22\n\nrequire golang.org/x/text v0.14.0\n";
        let bumped = base.replace("v0.14.0", "v0.15.0");
        assert_eq!(change("go.mod", Some(base), Some(&bumped)), None);
        let go = base.replace("go 1.22", "go 1.23");
        assert!(
            change("go.mod", Some(base), Some(&go))
                .unwrap()
                .contains("`go` directive")
        );
        let tc = format!("{base}toolchain go1.23.4\n");
        assert!(
            change("go.mod", Some(base), Some(&tc))
                .unwrap()
                .contains("`toolchain`")
        );
    }

    #[test]
    fn whole_files_and_shadows_are_runner_configuration() {
        for p in [
            "conftest.py",
            "tests/conftest.py",
            "pytest.ini",
            "tox.ini",
            "pytest.py",
            "sitecustomize.py",
            "_pytest/__init__.py",
            "jest.config.js",
            "vitest.config.ts",
            ".mocharc.yml",
            "build.rs",
            ".cargo/config.toml",
            "node_modules/.bin/node",
            "node_modules/chai/index.js",
            ".pytest.ini",
            "pytest.toml",
            ".npmrc",
            ".yarnrc.yml",
            "rust-toolchain.toml",
            "__pycache__/calc.cpython-312.pyc",
            "calc.cpython-312-x86_64-linux-gnu.so",
            "x.dist-info/entry_points.txt",
            "pluggy/__init__.py",
            "iniconfig.py",
            "bin/python3",
            "tools/python3.12",
        ] {
            assert!(change(p, None, Some("x")).is_some(), "{p}");
        }
        // Deleting one is a change too; an unchanged one is not.
        assert!(change("conftest.py", Some("x"), None).is_some());
        assert_eq!(change("conftest.py", Some("x"), Some("x")), None);
        for p in [
            "calc.py",
            "tests/test_calc.py",
            "src/node.rs",
            "python3_notes.md",
            "README.md",
        ] {
            assert_eq!(change(p, None, Some("x")), None, "{p}");
        }
    }

    /// A preload outside the tests is runner configuration; one among them is held out with
    /// the tests instead, so it is not asked about twice.
    #[test]
    fn a_preload_is_runner_configuration_unless_it_is_among_the_tests() {
        let base = |p: &str| {
            (p == ".mocharc.yml").then(|| b"require:\n  - support/a.js\n  - test/b.js\n".to_vec())
        };
        let change = |rela| runner_change(rela, Some(b"1"), Some(b"2"), "npm test", &base);
        assert!(change("support/a.js").is_some_and(|w| w.contains("(a preload)")));
        assert_eq!(change("test/b.js"), None);
        assert_eq!(change("lib/c.js"), None);
        assert_eq!(
            runner_change("support/a.js", Some(b"1"), Some(b"1"), "npm test", &base),
            None
        );
    }

    #[test]
    fn mixed_files_count_only_their_runner_part() {
        let base = "[project]\nname = \"x\"\nversion = \"1\"\n[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n";
        let bumped = base.replace("version = \"1\"", "version = \"2\"");
        assert_eq!(change("pyproject.toml", Some(base), Some(&bumped)), None);
        let deselected = format!("{base}addopts = \"--deselect tests/test_calc.py::test_add\"\n");
        let why = change("pyproject.toml", Some(base), Some(&deselected)).unwrap();
        assert!(why.contains("tool.pytest"), "{why}");
        assert!(change("pyproject.toml", Some(base), Some("not toml [")).is_some());

        let pkg = r#"{"name":"x","version":"1.0.0","scripts":{"test":"node --test"}}"#;
        let echo = r#"{"name":"x","version":"1.0.0","scripts":{"test":"echo ok"}}"#;
        let bumped = r#"{"name":"x","version":"1.0.1","scripts":{"test":"node --test"}}"#;
        assert!(
            change("package.json", Some(pkg), Some(echo))
                .unwrap()
                .contains("scripts")
        );
        assert_eq!(change("package.json", Some(pkg), Some(bumped)), None);

        let cargo = "[package]\nname = \"x\"\n[dependencies]\n";
        let dep = "[package]\nname = \"x\"\n[dependencies]\nitoa = \"1\"\n";
        let harness = "[package]\nname = \"x\"\n[[test]]\nname = \"t\"\nharness = false\n";
        assert_eq!(change("Cargo.toml", Some(cargo), Some(dep)), None);
        let patched =
            format!("{cargo}[patch.crates-io]\napprox = {{ path = \"vendor/approx\" }}\n");
        assert!(change("Cargo.toml", Some(cargo), Some(&patched)).is_some());
        assert!(change("Cargo.toml", Some(cargo), Some(harness)).is_some());

        let cfg = "[metadata]\nname = x\n[tool:pytest]\ntestpaths = tests\n";
        let other = cfg.replace("name = x", "name = y");
        let skipped = format!("{cfg}addopts = -k 'not add'\n");
        assert_eq!(change("setup.cfg", Some(cfg), Some(&other)), None);
        assert!(change("setup.cfg", Some(cfg), Some(&skipped)).is_some());

        // A Makefile only matters when the tests run through make.
        assert_eq!(change("Makefile", Some("a:\n"), Some("b:\n")), None);
        assert!(
            runner_config_change("Makefile", Some(b"a:\n"), Some(b"b:\n"), "make test").is_some()
        );
    }
}
