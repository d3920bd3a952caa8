//! Where a Python project says what its tests need, in the order a person would trust it
//! (issue 39): a lockfile that covers the tests, PEP 735 dependency groups, test requirement
//! files, test extras, tox's test environment — and dev tooling only when nothing
//! test-specific exists. Pure: it reads the project's files and decides nothing about how
//! they are installed (`setup::python` turns the choice into commands).
//!
//! Every name and requirement read here is the repository's, so untrusted: a requirement
//! that looks like an installer option (`--index-url …`) is dropped, never passed on.

use std::path::{Path, PathBuf};

/// The uv that exports a `uv.lock`, installed from PyPI into the set-up's own entry and
/// removed after (part of the commands, so of the key).
pub const UV_VERSION: &str = "0.13.9";

/// Dependency-group, extra and tox names that hold what the tests need, most specific
/// first; `dev` only when none of these exists.
const TEST_NAMES: &[&str] = &["test", "tests", "testing"];
const DEV: &str = "dev";

/// What the tests need, and from where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `uv.lock`: `uv export` writes the locked closure of these groups and extras.
    UvLock {
        /// `--group` arguments (uv adds `dev` by itself).
        groups: Vec<String>,
    },
    /// `poetry.lock` / `pdm.lock`: every locked version is a constraint, and the test
    /// group's requirements are installed under them.
    Constrained {
        /// The lockfile.
        lock: &'static str,
        /// `name==version`, one per locked name that has one version.
        pins: Vec<String>,
        /// The test group's requirements (names, or PEP 508 lines).
        install: Vec<String>,
        /// The group they came from.
        group: String,
    },
    /// `Pipfile.lock`: its `default` and `develop` sections, exactly.
    Pipfile {
        /// `name==version ; markers` lines.
        pins: Vec<String>,
    },
    /// PEP 735 `[dependency-groups]`, include-groups expanded.
    Groups {
        /// The group chosen.
        name: String,
        /// Its requirements.
        requirements: Vec<String>,
    },
    /// Requirement files.
    Files(Vec<PathBuf>),
    /// tox's `[testenv] deps`.
    Tox {
        /// Requirement lines.
        requirements: Vec<String>,
        /// `-r` files it names.
        files: Vec<PathBuf>,
    },
    /// Only the extras (or nothing) say what the tests need.
    Extras,
}

/// The choice: the source, the project's test extras, and the files it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestDeps {
    /// Where the test dependencies come from.
    pub source: Source,
    /// The project's optional-dependency extras installed with it.
    pub extras: Vec<String>,
    /// `requirements.txt`, what the project runs with, beside any source but a lockfile.
    pub runtime: Option<PathBuf>,
    /// Files the choice read (part of the set-up key).
    pub read: Vec<PathBuf>,
}

impl TestDeps {
    /// One line for the plan, `doctor` and the report: which source was used.
    pub fn describe(&self) -> String {
        let extras = if self.extras.is_empty() {
            String::new()
        } else {
            format!(", with the project's extras [{}]", self.extras.join(","))
        };
        let from = match &self.source {
            Source::UvLock { groups } => format!(
                "uv.lock{}, exact versions (exported by uv {} from PyPI)",
                if groups.is_empty() {
                    " (its dev group)".to_string()
                } else {
                    format!(" (groups {} and dev)", groups.join(", "))
                },
                UV_VERSION
            ),
            Source::Constrained { lock, group, .. } => {
                format!("{lock}: group {group}, every version as the lockfile pins it")
            }
            Source::Pipfile { .. } => {
                "Pipfile.lock (default and develop), exact versions".to_string()
            }
            Source::Groups { name, .. } => {
                format!("pyproject.toml [dependency-groups] {name}")
            }
            Source::Files(files) => files
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            Source::Tox { .. } => "tox.ini [testenv] deps".to_string(),
            Source::Extras if self.extras.is_empty() => {
                "none declared (only the project and its dependencies)".to_string()
            }
            Source::Extras => {
                return format!(
                    "test dependencies: the project's extras [{}]",
                    self.extras.join(",")
                );
            }
        };
        format!("test dependencies: {from}{extras}")
    }
}

/// Choose for the project at `root`; `pyproject` is its parsed `pyproject.toml`.
pub fn choose(root: &Path, pyproject: Option<&toml::Table>) -> TestDeps {
    let optional = pyproject
        .and_then(|d| d.get("project"))
        .and_then(|p| p.get("optional-dependencies"))
        .and_then(toml::Value::as_table);
    let mut extras: Vec<String> = optional
        .map(|o| {
            o.keys()
                .filter(|k| TEST_NAMES.contains(&k.as_str()))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    if let Ok(cfg) = std::fs::read_to_string(root.join("setup.cfg")) {
        extras.extend(setup_cfg_extras(&cfg, TEST_NAMES));
    }
    extras.sort();
    extras.dedup();
    let groups = pyproject
        .and_then(|d| d.get("dependency-groups"))
        .and_then(toml::Value::as_table);
    // What the project runs with, when it keeps that in requirements.txt: installed beside
    // any source but a lockfile (which holds the runtime's versions itself).
    let runtime = root
        .join("requirements.txt")
        .is_file()
        .then(|| PathBuf::from("requirements.txt"));
    let mut read = Vec::new();
    let done = |source: Source, extras: Vec<String>, read: Vec<PathBuf>| {
        let locked = matches!(
            source,
            Source::UvLock { .. } | Source::Constrained { .. } | Source::Pipfile { .. }
        );
        TestDeps {
            source,
            extras,
            runtime: if locked { None } else { runtime.clone() },
            read,
        }
    };
    if root.join("uv.lock").is_file() {
        let mut named: Vec<String> = TEST_NAMES
            .iter()
            .filter(|n| groups.is_some_and(|g| g.contains_key(**n)))
            .map(|n| n.to_string())
            .collect();
        named.dedup();
        return done(
            Source::UvLock { groups: named },
            extras,
            vec!["uv.lock".into()],
        );
    }
    if let Some(s) = poetry(root, pyproject) {
        return done(s, extras, vec!["poetry.lock".into()]);
    }
    if let Some(s) = pdm(root, pyproject) {
        return done(s, extras, vec!["pdm.lock".into()]);
    }
    if let Some(s) = pipfile(root) {
        return done(s, extras, vec!["Pipfile.lock".into()]);
    }
    if let Some(source) = group_source(groups, TEST_NAMES) {
        return done(source, extras, read);
    }
    let files = requirement_files(root, TEST_FILES);
    if !files.is_empty() {
        return done(Source::Files(files), extras, read);
    }
    if !extras.is_empty() {
        return done(Source::Extras, extras, read);
    }
    if let Some((requirements, files)) = tox(root) {
        read.push("tox.ini".into());
        read.extend(files.iter().cloned());
        return done(
            Source::Tox {
                requirements,
                files,
            },
            extras,
            read,
        );
    }
    // Nothing test-specific: the project's dev tooling, which may hold its test tools.
    if let Some(source) = group_source(groups, &[DEV]) {
        return done(source, extras, read);
    }
    let files = requirement_files(root, DEV_FILES);
    if !files.is_empty() {
        return done(Source::Files(files), extras, read);
    }
    let mut dev_extras: Vec<String> = Vec::new();
    if optional.is_some_and(|o| o.contains_key(DEV)) {
        dev_extras.push(DEV.into());
    }
    if let Ok(cfg) = std::fs::read_to_string(root.join("setup.cfg")) {
        dev_extras.extend(setup_cfg_extras(&cfg, &[DEV]));
    }
    dev_extras.dedup();
    done(Source::Extras, dev_extras, read)
}

/// The first of the PEP 735 groups `names` the project has, include-groups expanded.
fn group_source(groups: Option<&toml::Table>, names: &[&str]) -> Option<Source> {
    let g = groups?;
    let name = names.iter().find(|n| g.contains_key(**n))?;
    Some(Source::Groups {
        name: name.to_string(),
        requirements: expand_group(g, name),
    })
}

/// Requirement files that hold test dependencies, relative to the project.
const TEST_FILES: &[&str] = &[
    "requirements-test.txt",
    "requirements_test.txt",
    "requirements-tests.txt",
    "requirements_tests.txt",
    "requirements-testing.txt",
    "test-requirements.txt",
    "test_requirements.txt",
    "tests-requirements.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
    "requirements/testing.txt",
    "tests/requirements.txt",
];

/// Requirement files of dev tooling: used only when nothing test-specific exists.
const DEV_FILES: &[&str] = &[
    "requirements-dev.txt",
    "requirements_dev.txt",
    "dev-requirements.txt",
    "requirements/dev.txt",
];

/// Every requirement file name set-up may read (the ecosystem's detection and its key).
pub fn all_requirement_files(root: &Path) -> Vec<PathBuf> {
    let mut out = requirement_files(root, &["requirements.txt"]);
    out.extend(requirement_files(root, TEST_FILES));
    out.extend(requirement_files(root, DEV_FILES));
    out
}

fn requirement_files(root: &Path, names: &[&str]) -> Vec<PathBuf> {
    names
        .iter()
        .map(PathBuf::from)
        .filter(|p| root.join(p).is_file())
        .collect()
}

/// A requirement line we pass to pip: not an option, not empty, one line.
fn requirement(line: &str) -> Option<String> {
    let t = line.trim();
    (!t.is_empty() && !t.starts_with('-') && !t.starts_with('#') && !t.contains(['\n', '\r', '\0']))
        .then(|| t.to_string())
}

/// A PEP 735 group's requirements with its `{include-group = …}` entries expanded (each
/// group once, so a cycle ends).
fn expand_group(groups: &toml::Table, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = vec![name.to_string()];
    let mut queue = vec![name.to_string()];
    while let Some(g) = queue.pop() {
        let Some(items) = groups.get(&g).and_then(toml::Value::as_array) else {
            continue;
        };
        for item in items {
            if let Some(s) = item.as_str().and_then(requirement) {
                out.push(s);
            } else if let Some(inc) = item.get("include-group").and_then(toml::Value::as_str)
                && !seen.iter().any(|s| s == inc)
            {
                seen.push(inc.to_string());
                queue.push(inc.to_string());
            }
        }
    }
    out
}

/// Keys of `[options.extras_require]` in a `setup.cfg` that are in `names`.
pub fn setup_cfg_extras(text: &str, names: &[&str]) -> Vec<String> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            inside = t == "[options.extras_require]";
            continue;
        }
        if inside
            && !line.starts_with([' ', '\t'])
            && let Some((k, _)) = t.split_once(['=', ':'])
        {
            let k = k.trim();
            if names.contains(&k) {
                out.push(k.to_string());
            }
        }
    }
    out
}

/// A package name or version as a lockfile writes it: nothing a requirement line would
/// read as syntax beyond the version.
fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+' | '!'))
}

/// `name==version` for every `[[package]]` of a TOML lockfile whose name has exactly one
/// version there and comes from a package index (a git or path source is left to pip).
fn toml_pins(lock: &toml::Table) -> Vec<String> {
    let mut versions: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for p in lock
        .get("package")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(name), Some(version)) = (
            p.get("name").and_then(toml::Value::as_str),
            p.get("version").and_then(toml::Value::as_str),
        ) else {
            continue;
        };
        let indexed = p
            .get("source")
            .and_then(|s| s.get("type"))
            .and_then(toml::Value::as_str)
            .is_none_or(|t| t == "legacy");
        if indexed && plain(name) && plain(version) {
            let v = versions.entry(name.to_ascii_lowercase()).or_default();
            if !v.iter().any(|x| x == version) {
                v.push(version.to_string());
            }
        }
    }
    versions
        .into_iter()
        .filter(|(_, v)| v.len() == 1)
        .map(|(n, v)| format!("{n}=={}", v[0]))
        .collect()
}

fn parse_toml(path: &Path) -> Option<toml::Table> {
    std::fs::read_to_string(path).ok()?.parse().ok()
}

/// `poetry.lock`: the test group of `[tool.poetry.group.*]` (or the old
/// `dev-dependencies`), its names installed under the lock's versions.
fn poetry(root: &Path, pyproject: Option<&toml::Table>) -> Option<Source> {
    if !root.join("poetry.lock").is_file() {
        return None;
    }
    let lock = parse_toml(&root.join("poetry.lock"))?;
    let tool = pyproject?.get("tool")?.get("poetry")?;
    let groups = tool.get("group").and_then(toml::Value::as_table);
    let from_group = |name: &str| {
        groups?
            .get(name)?
            .get("dependencies")?
            .as_table()
            .map(|t| (name.to_string(), t.clone()))
    };
    let (group, deps) = TEST_NAMES
        .iter()
        .chain(&[DEV])
        .find_map(|n| from_group(n))
        .or_else(|| {
            tool.get("dev-dependencies")
                .and_then(toml::Value::as_table)
                .map(|t| (DEV.to_string(), t.clone()))
        })?;
    // A name whose value points at a path, git or URL is not on an index: pip gets it from
    // the project's own install, if at all.
    let install = deps
        .iter()
        .filter(|(n, v)| {
            n.as_str() != "python"
                && plain(n)
                && !["path", "git", "url"].iter().any(|k| v.get(*k).is_some())
        })
        .map(|(n, _)| n.clone())
        .collect();
    Some(Source::Constrained {
        lock: "poetry.lock",
        pins: toml_pins(&lock),
        install,
        group,
    })
}

/// `pdm.lock`: the test group of `[tool.pdm.dev-dependencies]` (or PEP 735 groups) under
/// the lock's versions.
fn pdm(root: &Path, pyproject: Option<&toml::Table>) -> Option<Source> {
    if !root.join("pdm.lock").is_file() {
        return None;
    }
    let lock = parse_toml(&root.join("pdm.lock"))?;
    let doc = pyproject?;
    let dev = doc
        .get("tool")
        .and_then(|t| t.get("pdm"))
        .and_then(|p| p.get("dev-dependencies"))
        .and_then(toml::Value::as_table);
    let pep735 = doc.get("dependency-groups").and_then(toml::Value::as_table);
    let (group, install) = TEST_NAMES.iter().chain(&[DEV]).find_map(|n| {
        if let Some(g) = pep735.filter(|g| g.contains_key(*n)) {
            return Some((n.to_string(), expand_group(g, n)));
        }
        let items = dev?.get(*n)?.as_array()?;
        Some((
            n.to_string(),
            items
                .iter()
                .filter_map(|i| i.as_str().and_then(requirement))
                .collect(),
        ))
    })?;
    Some(Source::Constrained {
        lock: "pdm.lock",
        pins: toml_pins(&lock),
        install,
        group,
    })
}

/// `Pipfile.lock`: every pinned package of `default` and `develop`, with its markers.
fn pipfile(root: &Path) -> Option<Source> {
    let text = std::fs::read_to_string(root.join("Pipfile.lock")).ok()?;
    let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
    let mut pins = Vec::new();
    for section in ["default", "develop"] {
        let Some(map) = doc.get(section).and_then(|s| s.as_object()) else {
            continue;
        };
        for (name, spec) in map {
            let Some(version) = spec
                .get("version")
                .and_then(|v| v.as_str())
                .and_then(|v| v.strip_prefix("=="))
            else {
                continue;
            };
            if !plain(name) || !plain(version) {
                continue;
            }
            let markers = spec
                .get("markers")
                .and_then(|m| m.as_str())
                .filter(|m| !m.contains(['\n', '\r', '\0']));
            pins.push(match markers {
                Some(m) => format!("{name}=={version} ; {m}"),
                None => format!("{name}=={version}"),
            });
        }
    }
    Some(Source::Pipfile { pins })
}

/// tox's `[testenv] deps`: requirement lines and the `-r` files they name
/// (`{toxinidir}/` dropped; lines with any other substitution skipped).
fn tox(root: &Path) -> Option<(Vec<String>, Vec<PathBuf>)> {
    let text = std::fs::read_to_string(root.join("tox.ini")).ok()?;
    let mut section = String::new();
    let mut in_deps = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            section = t.trim_matches(['[', ']']).trim().to_string();
            in_deps = false;
            continue;
        }
        if section != "testenv" {
            continue;
        }
        let indented = line.starts_with([' ', '\t']);
        if !indented {
            in_deps = false;
            if let Some((k, v)) = t.split_once('=')
                && k.trim() == "deps"
            {
                in_deps = true;
                lines.push(v.trim().to_string());
            }
        } else if in_deps {
            lines.push(t.to_string());
        }
    }
    let mut requirements = Vec::new();
    let mut files = Vec::new();
    for l in lines {
        let l = l.replace("{toxinidir}/", "");
        let l = l.split(" #").next().unwrap_or("").trim().to_string();
        if l.is_empty() || l.contains('{') {
            continue;
        }
        if let Some(f) = l.strip_prefix("-r") {
            let f = Path::new(f.trim());
            if f.is_relative()
                && !f.components().any(|c| c == std::path::Component::ParentDir)
                && root.join(f).is_file()
            {
                files.push(f.to_path_buf());
            }
        } else if let Some(r) = requirement(&l) {
            requirements.push(r);
        }
    }
    (!requirements.is_empty() || !files.is_empty()).then_some((requirements, files))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(files: &[(&str, &str)]) -> (tempfile::TempDir, TestDeps) {
        let d = tempfile::tempdir().unwrap();
        for (p, c) in files {
            let p = d.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, c).unwrap();
        }
        let doc = std::fs::read_to_string(d.path().join("pyproject.toml"))
            .ok()
            .and_then(|t| t.parse::<toml::Table>().ok());
        let deps = choose(d.path(), doc.as_ref());
        (d, deps)
    }

    const PROJECT: &str = "[project]\nname = \"p\"\nversion = \"0\"\n";

    #[test]
    fn a_uv_lock_comes_first_with_the_test_groups() {
        let py = format!(
            "{PROJECT}[project.optional-dependencies]\ntest = [\"x\"]\n[dependency-groups]\ntests = [\"pytest\"]\ndocs = [\"sphinx\"]\n"
        );
        let (_d, deps) = project(&[
            ("pyproject.toml", &py),
            ("uv.lock", "version = 1\n"),
            ("requirements/tests.txt", "pytest\n"),
        ]);
        assert_eq!(
            deps.source,
            Source::UvLock {
                groups: vec!["tests".into()]
            }
        );
        assert_eq!(deps.extras, vec!["test".to_string()]);
        assert!(
            deps.describe().contains("uv.lock (groups tests and dev)"),
            "{}",
            deps.describe()
        );
    }

    #[test]
    fn dependency_groups_expand_their_includes_and_drop_options() {
        let py = format!(
            "{PROJECT}[dependency-groups]\ntest = [\"six==1.16.0\", {{include-group = \"runner\"}}, \"--index-url=http://evil\"]\nrunner = [\"pytest<9\", {{include-group = \"test\"}}]\ndev = [\"ruff\"]\n"
        );
        let (_d, deps) = project(&[("pyproject.toml", &py), ("requirements-dev.txt", "black\n")]);
        assert_eq!(
            deps.source,
            Source::Groups {
                name: "test".into(),
                requirements: vec!["six==1.16.0".into(), "pytest<9".into()]
            }
        );
    }

    #[test]
    fn test_files_come_before_dev_and_dev_only_when_nothing_else() {
        let (_d, deps) = project(&[
            ("pyproject.toml", PROJECT),
            ("requirements/tests.txt", "pytest==7.4.4\n"),
            ("requirements/dev.txt", "-r tests.txt\nmypy\n"),
            ("requirements.txt", "flask\n"),
        ]);
        assert_eq!(
            deps.source,
            Source::Files(vec!["requirements/tests.txt".into()])
        );
        assert_eq!(deps.runtime, Some("requirements.txt".into()));
        let (_d, deps) = project(&[
            ("pyproject.toml", PROJECT),
            ("requirements-dev.txt", "pytest\n"),
        ]);
        assert_eq!(
            deps.source,
            Source::Files(vec!["requirements-dev.txt".into()])
        );
        let with_extra = format!(
            "{PROJECT}[project.optional-dependencies]\ntests = [\"pytest\"]\ndev = [\"ruff\"]\n"
        );
        let (_d, deps) = project(&[
            ("pyproject.toml", &with_extra),
            ("requirements-dev.txt", "pytest\n"),
        ]);
        assert_eq!(
            (deps.source, deps.extras),
            (Source::Extras, vec!["tests".to_string()])
        );
    }

    #[test]
    fn poetry_and_pdm_locks_pin_every_version_and_install_the_test_group() {
        let py = format!(
            "{PROJECT}[tool.poetry.group.test.dependencies]\npytest = \"^7\"\nlocal = {{path = \"../x\"}}\n"
        );
        let lock = "[[package]]\nname = \"pytest\"\nversion = \"7.4.4\"\n\n[[package]]\nname = \"Pluggy\"\nversion = \"1.0.0\"\n\n[[package]]\nname = \"two\"\nversion = \"1\"\n\n[[package]]\nname = \"two\"\nversion = \"2\"\n\n[[package]]\nname = \"evil\"\nversion = \"1 --index-url x\"\n\n[[package]]\nname = \"fromgit\"\nversion = \"1\"\n[package.source]\ntype = \"git\"\n";
        let (_d, deps) = project(&[("pyproject.toml", &py), ("poetry.lock", lock)]);
        assert_eq!(
            deps.source,
            Source::Constrained {
                lock: "poetry.lock",
                pins: vec!["pluggy==1.0.0".into(), "pytest==7.4.4".into()],
                install: vec!["pytest".into()],
                group: "test".into(),
            }
        );
        let py = format!("{PROJECT}[tool.pdm.dev-dependencies]\ntesting = [\"pytest>=7\"]\n");
        let (_d, deps) = project(&[("pyproject.toml", &py), ("pdm.lock", lock)]);
        assert!(
            matches!(&deps.source, Source::Constrained { lock: "pdm.lock", install, .. } if install == &vec!["pytest>=7".to_string()]),
            "{deps:?}"
        );
    }

    #[test]
    fn a_pipfile_lock_pins_default_and_develop_with_markers() {
        let lock = r#"{"default": {"flask": {"version": "==2.0.1"}}, "develop": {"pytest": {"version": "==7.0.0", "markers": "python_version >= '3.7'"}, "x": {"git": "https://e/x"}}}"#;
        let (_d, deps) = project(&[("Pipfile.lock", lock)]);
        assert_eq!(
            deps.source,
            Source::Pipfile {
                pins: vec![
                    "flask==2.0.1".into(),
                    "pytest==7.0.0 ; python_version >= '3.7'".into()
                ]
            }
        );
    }

    #[test]
    fn tox_deps_are_the_last_test_specific_source() {
        let ini = "[tox]\nenvlist = py\n[testenv]\ndeps =\n    pytest==7.0.0\n    -r{toxinidir}/ci/test.txt\n    {[base]deps}\n    --index-url=http://evil\ncommands = pytest\n[testenv:lint]\ndeps = ruff\n";
        let (_d, deps) = project(&[
            ("pyproject.toml", PROJECT),
            ("tox.ini", ini),
            ("ci/test.txt", "six\n"),
        ]);
        assert_eq!(
            deps.source,
            Source::Tox {
                requirements: vec!["pytest==7.0.0".into()],
                files: vec!["ci/test.txt".into()]
            }
        );
    }
}
