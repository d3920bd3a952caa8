//! What a project needs installed before its tests can run (issue 19): the `[setup]`
//! configuration, or a default detected per ecosystem, as a [`SetupPlan`]. Pure: it reads
//! the project's files and runs nothing; `run` executes the plan in the sandbox.
//!
//! The plan's commands may write one directory, the cache entry (`$GIT_AGENT_ENV`); the
//! project paths named as outputs (`node_modules`) are kept there too. Every later command
//! — the agent's and the verification's — sees that entry read-only, with the plan's `PATH`
//! and variables, so a model cannot plant a shim in what set-up installed.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::detect::{Runner, TestCommand, read_opt as read};
use super::error::{Error, Result};
use super::pydeps::{self, Source, UV_VERSION};
use crate::config::SetupConfig;

/// The variable naming the cache entry set-up commands write and later commands read.
pub const ENV_VAR: &str = "GIT_AGENT_ENV";

/// An ecosystem whose default set-up we know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ecosystem {
    /// A virtualenv with the project's test dependencies.
    Python,
    /// `npm ci` / `pnpm install --frozen-lockfile` / `yarn install --frozen-lockfile`.
    JavaScript,
    /// `cargo fetch`, then cargo offline.
    Rust,
    /// `go mod download`, then no module proxy.
    Go,
}

/// What prepares the project, and what later commands get from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupPlan {
    /// Shell command lines, run in order in a fresh checkout.
    pub commands: Vec<String>,
    /// Registries or hosts the commands may reach.
    pub network: Vec<String>,
    /// Files (relative to the project) whose content decides reuse, sorted.
    pub key_files: Vec<PathBuf>,
    /// Project paths the commands make, kept and mounted read-only into worktrees.
    pub outputs: Vec<PathBuf>,
    /// `PATH` entries for later commands (`$GIT_AGENT_ENV` unexpanded).
    pub path: Vec<String>,
    /// Variables for the commands and every later command (`$GIT_AGENT_ENV` unexpanded).
    pub env: Vec<(String, String)>,
    /// Variables for later commands only (cargo offline once set-up fetched).
    pub after_env: Vec<(String, String)>,
    /// The ecosystems detected (empty when the configuration named the commands).
    pub ecosystems: Vec<Ecosystem>,
    /// Why each part is there, a line each (for `doctor` and the report).
    pub why: Vec<String>,
    /// The project's top-level Python packages and where they must resolve from (relative
    /// to the project): the check that the tests import the worktree's code.
    pub python_packages: Vec<(String, PathBuf)>,
    /// The toolchain programs the environment is built with, resolved (part of the key:
    /// another interpreter means another virtualenv).
    pub toolchains: Vec<PathBuf>,
    /// Files written into the cache entry before the commands run (`constraints.txt` made
    /// from a lockfile): a plain name and its content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<(String, String)>,
    /// Where each ecosystem's test dependencies come from, a line each (for the plan,
    /// `doctor` and the report).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// Commands every checkout runs before its tests, in the view like the tests: what the
    /// project's installer runs in the project itself (npm's root `prepare`, which builds
    /// ignored files such as `dist/` from the checkout's own code). Built where the tests
    /// run, never carried over from the base: a build of the base's code would test that.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before_tests: Vec<String>,
}

/// The plan for the project at `root` (a checkout of the base), from `cfg` and what is
/// found there; `None` when there is nothing to set up. `test` is the test command the run
/// will use, when known (pytest joins the Python environment when it runs the tests).
/// `path_var` is the agent's `PATH`, to resolve toolchains for the cache key.
pub fn plan(
    root: &Path,
    cfg: &SetupConfig,
    test: Option<&TestCommand>,
    path_var: Option<&std::ffi::OsStr>,
) -> Result<Option<SetupPlan>> {
    plan_with(root, cfg, test, path_var, None)
}

/// The plan for a run's own tree at `root` (after the run changed what set-up reads): what
/// [`plan`] finds there, but only for the ecosystems the base's plan had and with the base's
/// network. A manifest the run adds (an empty `go.mod`) never adds a registry, so nothing a
/// run writes widens what a set-up may reach (issue 38).
pub fn plan_like_base(
    root: &Path,
    cfg: &SetupConfig,
    test: Option<&TestCommand>,
    path_var: Option<&std::ffi::OsStr>,
    ecosystems: &[Ecosystem],
    network: &[String],
) -> Result<Option<SetupPlan>> {
    let Some(mut p) = plan_with(root, cfg, test, path_var, Some(ecosystems))? else {
        return Ok(None);
    };
    p.network = network.to_vec();
    Ok(Some(p))
}

fn plan_with(
    root: &Path,
    cfg: &SetupConfig,
    test: Option<&TestCommand>,
    path_var: Option<&std::ffi::OsStr>,
    only: Option<&[Ecosystem]>,
) -> Result<Option<SetupPlan>> {
    let detect = |root: &Path| -> Vec<Ecosystem> {
        detect_ecosystems(root)
            .into_iter()
            .filter(|e| only.is_none_or(|o| o.contains(e)))
            .collect()
    };
    if !cfg.enabled || cfg.commands.as_ref().is_some_and(Vec::is_empty) {
        return Ok(None);
    }
    let mut p = SetupPlan {
        commands: Vec::new(),
        network: Vec::new(),
        key_files: Vec::new(),
        outputs: Vec::new(),
        path: Vec::new(),
        env: Vec::new(),
        after_env: Vec::new(),
        ecosystems: Vec::new(),
        why: Vec::new(),
        python_packages: python_packages(root),
        toolchains: Vec::new(),
        files: Vec::new(),
        sources: Vec::new(),
        before_tests: Vec::new(),
    };
    let mut registries = Vec::new();
    match &cfg.commands {
        Some(commands) => {
            p.commands = commands.clone();
            p.why
                .push("commands: [setup] commands in the configuration".into());
            p.key_files = matching(root, &cfg.key)?;
            for e in detect(root) {
                registries.extend(registry(e).map(String::from));
            }
        }
        None => {
            for e in detect(root) {
                let added = match e {
                    Ecosystem::Python => python(root, test, &mut p)?,
                    Ecosystem::JavaScript => javascript(root, &mut p)?,
                    Ecosystem::Rust => rust(root, &mut p)?,
                    Ecosystem::Go => go(root, &mut p),
                };
                if added {
                    p.ecosystems.push(e);
                    registries.extend(registry(e).map(String::from));
                }
            }
            p.key_files.extend(matching(root, &cfg.key)?);
        }
    }
    p.network = cfg.network.clone().unwrap_or(registries);
    for o in &cfg.outputs {
        let o = relative(o).ok_or_else(|| {
            invalid(format!(
                "setup.outputs: {o} must be a plain path inside the project"
            ))
        })?;
        if !p.outputs.contains(&o) {
            p.outputs.push(o);
        }
    }
    p.path.extend(cfg.path.iter().cloned());
    for (k, v) in &cfg.env {
        check_name(k)?;
        p.env.retain(|(n, _)| n != k);
        p.env.push((k.clone(), v.clone()));
    }
    if p.commands.is_empty() {
        return Ok(None);
    }
    p.key_files.sort();
    p.key_files.dedup();
    for prog in toolchain_programs(&p) {
        if let Some(found) = find_program(prog, path_var) {
            p.toolchains.push(found);
        }
    }
    Ok(Some(p))
}

impl SetupPlan {
    /// The cache key: the plan itself (commands, network, outputs, exports, toolchains) and
    /// the content of every key file. Hex, 20 digits.
    pub fn key(&self, root: &Path) -> Result<String> {
        let mut h = Sha256::new();
        let mut put = |s: &[u8]| {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s);
        };
        put(b"git-agent setup v1");
        for c in &self.commands {
            put(c.as_bytes());
        }
        for n in &self.network {
            put(n.as_bytes());
        }
        for o in &self.outputs {
            put(o.as_os_str().as_encoded_bytes());
        }
        for x in &self.path {
            put(x.as_bytes());
        }
        for (k, v) in self.env.iter().chain(&self.after_env) {
            put(k.as_bytes());
            put(v.as_bytes());
        }
        for t in &self.toolchains {
            put(t.as_os_str().as_encoded_bytes());
        }
        for (name, content) in &self.files {
            put(name.as_bytes());
            put(content.as_bytes());
        }
        for f in &self.key_files {
            put(f.as_os_str().as_encoded_bytes());
            let path = root.join(f);
            match std::fs::read(&path) {
                Ok(bytes) => put(&Sha256::digest(&bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => put(b"absent"),
                Err(source) => return Err(Error::Read { path, source }),
            }
        }
        Ok(hex::encode(&h.finalize()[..10]))
    }

    /// Whether `path` (relative to the project) decides this plan's key: a change to it
    /// means the environment must be set up again.
    pub fn is_key_file(&self, path: &str) -> bool {
        self.key_files.iter().any(|f| f == Path::new(path))
            || [
                "pyproject.toml",
                "setup.py",
                "setup.cfg",
                "uv.lock",
                "poetry.lock",
                "pdm.lock",
                "Pipfile.lock",
                "package.json",
                "package-lock.json",
                "npm-shrinkwrap.json",
                "pnpm-lock.yaml",
                "yarn.lock",
                "Cargo.toml",
                "Cargo.lock",
                "go.mod",
                "go.sum",
            ]
            .contains(&path)
    }
}

/// Why set-up reads `path` (repository-relative), when it is a file any ecosystem's set-up
/// reads by its name, at any depth: manifests and the build code they name, lockfiles,
/// requirement and constraint files, the package managers' own configuration. A change to
/// one changes what is installed and what runs while installing, so it never decides its
/// own verification unless a person approves it (issue 38).
pub fn setup_input(path: &str) -> Option<&'static str> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let in_requirements_dir = path
        .split('/')
        .rev()
        .skip(1)
        .any(|c| c == "requirements" || c == "requirements.d");
    Some(match name {
        "pyproject.toml" | "setup.py" | "setup.cfg" => {
            "a Python package's dependencies and build code (set-up installs and runs it)"
        }
        "Pipfile" | "Pipfile.lock" | "poetry.lock" | "uv.lock" | "pdm.lock" | "pylock.toml" => {
            "a Python lockfile (what set-up installs)"
        }
        "pip.conf" | ".pip.conf" => "pip's configuration (where set-up installs from)",
        "package.json" => {
            "a JavaScript package's dependencies and lifecycle scripts (set-up runs them)"
        }
        "package-lock.json"
        | "npm-shrinkwrap.json"
        | "pnpm-lock.yaml"
        | "yarn.lock"
        | "bun.lockb"
        | "bun.lock" => "a JavaScript lockfile (what set-up installs)",
        ".npmrc"
        | ".yarnrc"
        | ".yarnrc.yml"
        | "pnpm-workspace.yaml"
        | ".pnpmfile.cjs"
        | ".pnpmfile.mjs" => "a package manager's configuration (where and how set-up installs)",
        "Cargo.toml" | "Cargo.lock" => "what cargo fetches and builds",
        "go.mod" | "go.sum" | "go.work" | "go.work.sum" => "what go downloads",
        _ if (name.ends_with(".txt") || name.ends_with(".in"))
            && (name.contains("requirements")
                || name.starts_with("constraints")
                || in_requirements_dir) =>
        {
            "a requirements file (what set-up installs, with what it includes)"
        }
        _ => return None,
    })
}

/// `$GIT_AGENT_ENV` in `value` replaced by `dir`.
pub fn expand(value: &str, dir: &Path) -> String {
    value
        .replace("${GIT_AGENT_ENV}", &dir.display().to_string())
        .replace("$GIT_AGENT_ENV", &dir.display().to_string())
}

fn invalid(why: String) -> Error {
    Error::Setup { why }
}

/// A plain relative path (no `..`, not absolute, not empty).
fn relative(p: &str) -> Option<PathBuf> {
    let path = PathBuf::from(p.trim_end_matches('/'));
    let plain = !path.as_os_str().is_empty()
        && path.components().all(|c| matches!(c, Component::Normal(_)));
    plain.then_some(path)
}

/// Variables set-up may not set: secrets, the loader's, and what the sandbox decides.
fn check_name(name: &str) -> Result<()> {
    let bad = crate::audit::redact::is_secret_name(name)
        || name.starts_with("LD_")
        || name.starts_with("GIT_")
        || ["PATH", "HOME", "TMPDIR", "USER", "SHELL", ENV_VAR].contains(&name)
        || name.is_empty()
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if bad {
        return Err(invalid(format!(
            "setup.env: {name} may not be set (secrets, LD_*, GIT_*, PATH, HOME, TMPDIR and the like are the sandbox's)"
        )));
    }
    Ok(())
}

fn detect_ecosystems(root: &Path) -> Vec<Ecosystem> {
    let has = |f: &str| root.join(f).is_file();
    let mut out = Vec::new();
    if has("pyproject.toml")
        || has("setup.py")
        || has("setup.cfg")
        || !pydeps::all_requirement_files(root).is_empty()
        || root.join("Pipfile.lock").is_file()
    {
        out.push(Ecosystem::Python);
    }
    if has("package.json") {
        out.push(Ecosystem::JavaScript);
    }
    if has("Cargo.toml") {
        out.push(Ecosystem::Rust);
    }
    if has("go.mod") {
        out.push(Ecosystem::Go);
    }
    out
}

/// The registry an ecosystem's set-up may reach by default. The Go module proxy is none:
/// it fetches any origin it is asked for (open egress), so set-up reaches it only when a
/// person's own configuration names `go` in `setup.network` (issue 38).
fn registry(e: Ecosystem) -> Option<&'static str> {
    match e {
        Ecosystem::Python => Some("pypi"),
        Ecosystem::JavaScript => Some("npm"),
        Ecosystem::Rust => Some("crates"),
        Ecosystem::Go => None,
    }
}

fn toolchain_programs(p: &SetupPlan) -> Vec<&'static str> {
    let mut out = Vec::new();
    for e in &p.ecosystems {
        out.push(match e {
            Ecosystem::Python => "python3",
            Ecosystem::JavaScript => "node",
            Ecosystem::Rust => "cargo",
            Ecosystem::Go => "go",
        });
    }
    out
}

fn find_program(name: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path_var?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
}

/// `s` as one single-quoted shell word.
fn shell_word(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Python: a virtualenv in the cache with the project's dependencies and its test
/// dependencies as the project pins them ([`pydeps::choose`]), pytest when it runs the tests
/// (in the same install as the pins, so a pinned pytest stays pinned); the worktree's own
/// code first on the path, so the tests import what the run changed, never an installed copy.
fn python(root: &Path, test: Option<&TestCommand>, p: &mut SetupPlan) -> Result<bool> {
    let pyproject = read(&root.join("pyproject.toml"))?;
    let doc = pyproject
        .as_deref()
        .and_then(|t| t.parse::<toml::Table>().ok());
    let installable = doc
        .as_ref()
        .is_some_and(|d| d.contains_key("project") || d.contains_key("build-system"))
        || root.join("setup.py").is_file()
        || read(&root.join("setup.cfg"))?.is_some_and(|t| t.contains("[metadata]"));
    let deps = pydeps::choose(root, doc.as_ref());
    let pytest = test.is_some_and(|t| t.runner == Runner::Pytest);
    // A project with no packaging metadata and nothing that names its dependencies declares
    // nothing to install: its tests run with what the machine has.
    if !installable && deps.runtime.is_none() && deps.source == Source::Extras {
        return Ok(false);
    }
    let venv = format!("${ENV_VAR}/venv");
    let pip = format!(
        "\"{venv}/bin/python\" -m pip install --disable-pip-version-check --no-input --quiet"
    );
    p.commands.push(format!("python3 -m venv \"{venv}\""));
    let project = |extras: &[String]| match (installable, extras.is_empty()) {
        (false, _) => String::new(),
        (true, true) => " -e .".to_string(),
        (true, false) => format!(" -e '.[{}]'", extras.join(",")),
    };
    let words = |items: &[String]| -> String {
        items
            .iter()
            .map(|r| format!(" {}", shell_word(r)))
            .collect()
    };
    let mut install = pip.clone();
    let mut reqs: Vec<PathBuf> = deps.runtime.iter().cloned().collect();
    let mut after: Vec<String> = Vec::new();
    match &deps.source {
        Source::UvLock { groups } => {
            let uv = format!("${ENV_VAR}/uv");
            p.commands.push(format!(
                "python3 -m venv \"{uv}\" && \"{uv}/bin/python\" -m pip install --disable-pip-version-check --no-input --quiet uv=={UV_VERSION}"
            ));
            let mut export = format!(
                "\"{uv}/bin/uv\" export --frozen --no-cache --format requirements-txt --no-hashes --no-emit-project --no-header"
            );
            for g in groups {
                export.push_str(&format!(" --group {g}"));
            }
            for e in &deps.extras {
                export.push_str(&format!(" --extra {e}"));
            }
            export.push_str(&format!(" -o \"${ENV_VAR}/locked.txt\""));
            p.commands.push(export);
            install.push_str(&format!(" -r \"${ENV_VAR}/locked.txt\""));
            // The lock holds the project's own dependencies: the project without them.
            if installable {
                after.push(format!("{pip} --no-deps -e ."));
            }
            after.push(format!("rm -rf \"{uv}\""));
        }
        Source::Constrained {
            pins,
            install: names,
            ..
        } => {
            p.files.push(("constraints.txt".into(), lines(pins)));
            install.push_str(&format!(" -c \"${ENV_VAR}/constraints.txt\""));
            install.push_str(&project(&deps.extras));
            install.push_str(&words(names));
        }
        Source::Pipfile { pins } => {
            p.files.push(("pinned.txt".into(), lines(pins)));
            install.push_str(&format!(" -r \"${ENV_VAR}/pinned.txt\""));
            install.push_str(&project(&deps.extras));
        }
        Source::Groups { requirements, .. } => {
            install.push_str(&project(&deps.extras));
            install.push_str(&words(requirements));
        }
        Source::Files(files) => {
            reqs.extend(files.iter().cloned());
            install.push_str(&project(&deps.extras));
        }
        Source::Tox {
            requirements,
            files,
        } => {
            reqs.extend(files.iter().cloned());
            install.push_str(&project(&deps.extras));
            install.push_str(&words(requirements));
        }
        Source::Extras => install.push_str(&project(&deps.extras)),
    }
    for r in &reqs {
        install.push_str(&format!(" -r {}", shell_word(&r.display().to_string())));
        p.key_files.push(r.clone());
    }
    if pytest {
        install.push_str(" pytest");
    }
    p.commands.push(install);
    p.commands.extend(after);
    for f in ["pyproject.toml", "setup.py", "setup.cfg"] {
        if root.join(f).is_file() {
            p.key_files.push(f.into());
        }
    }
    p.key_files.extend(deps.read.iter().cloned());
    // Everything else the install reads: what the requirement files include, the local
    // packages they name, the in-tree build backend (issue 38).
    p.key_files.extend(python_reads(root, &reqs, doc.as_ref()));
    p.path.push(format!("{venv}/bin"));
    p.env.push(("VIRTUAL_ENV".into(), venv.clone()));
    // Relative entries are made absolute against the command's directory when Python
    // starts: the worktree's code, or the clean checkout's, comes first either way.
    let src = if root.join("src").is_dir()
        && p.python_packages.iter().any(|(_, d)| d.starts_with("src"))
    {
        "src"
    } else {
        "."
    };
    p.after_env.push(("PYTHONPATH".into(), src.into()));
    p.sources.push(format!("python {}", deps.describe()));
    p.why.push(format!(
        "python: a virtualenv in the cache with {}; {}{}; PYTHONPATH={src} so the tests import the worktree's code",
        match (installable, &deps.runtime) {
            (true, _) => "the project and its dependencies".to_string(),
            (false, Some(r)) => format!("the requirements in {}", r.display()),
            (false, None) => "no project to install".to_string(),
        },
        deps.describe(),
        if pytest {
            "; pytest (it runs the tests), as pinned there when it is"
        } else {
            ""
        },
    ));
    Ok(true)
}

/// `items` one per line, as a requirements or constraints file.
fn lines(items: &[String]) -> String {
    items.iter().map(|i| format!("{i}\n")).collect()
}

/// The project's top-level import packages and the directory they must resolve in: each
/// directory with an `__init__.py` under `src/`, else at the root (test and doc folders
/// left out).
fn python_packages(root: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let scan = |dir: &Path, rel: &Path, out: &mut Vec<(String, PathBuf)>| {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let skip = name.starts_with(['.', '_'])
                || [
                    "test",
                    "tests",
                    "testing",
                    "docs",
                    "doc",
                    "examples",
                    "scripts",
                    "benchmarks",
                    "build",
                    "dist",
                    "node_modules",
                    "venv",
                ]
                .contains(&name.as_str())
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !skip && e.path().join("__init__.py").is_file() {
                out.push((name, rel.to_path_buf()));
            }
        }
    };
    scan(&root.join("src"), Path::new("src"), &mut out);
    if out.is_empty() {
        scan(root, Path::new(""), &mut out);
    }
    out.sort();
    out
}

/// JavaScript: the package manager its lockfile names installs `node_modules`, kept in
/// the cache and mounted read-only into the worktree.
fn javascript(root: &Path, p: &mut SetupPlan) -> Result<bool> {
    let path = root.join("package.json");
    let Some(text) = read(&path)? else {
        return Ok(false);
    };
    let doc: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::PackageJson {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let deps = ["dependencies", "devDependencies", "optionalDependencies"]
        .iter()
        .any(|k| {
            doc.get(k)
                .and_then(|d| d.as_object())
                .is_some_and(|o| !o.is_empty())
        });
    if !deps {
        return Ok(false);
    }
    let has = |f: &str| root.join(f).is_file();
    let manager = package_manager(&doc);
    let (command, lock) = if has("package-lock.json") {
        (
            "npm ci --no-audit --no-fund".to_string(),
            Some("package-lock.json"),
        )
    } else if has("npm-shrinkwrap.json") {
        (
            "npm ci --no-audit --no-fund".to_string(),
            Some("npm-shrinkwrap.json"),
        )
    } else if has("pnpm-lock.yaml") {
        let version = manager
            .filter(|(n, _)| *n == "pnpm")
            .map(|(_, v)| v)
            .unwrap_or_else(|| pnpm_for_lockfile(&root.join("pnpm-lock.yaml")));
        (
            format!(
                "{} install --frozen-lockfile",
                from_npm(p, "pnpm", &version, "pnpm")
            ),
            Some("pnpm-lock.yaml"),
        )
    } else if has("yarn.lock") {
        let classic = std::fs::read_to_string(root.join("yarn.lock"))
            .is_ok_and(|t| t.contains("yarn lockfile v1"));
        let pinned = manager.filter(|(n, _)| *n == "yarn").map(|(_, v)| v);
        let command = if classic {
            let v = pinned.filter(|v| v.starts_with("1.")).unwrap_or("1".into());
            format!(
                "{} install --frozen-lockfile",
                from_npm(p, "yarn", &v, "yarn")
            )
        } else {
            let v = pinned.unwrap_or("4".into());
            format!(
                "{} install --immutable",
                from_npm(p, "@yarnpkg/cli-dist", &v, "yarn")
            )
        };
        (command, Some("yarn.lock"))
    } else {
        (
            "npm install --no-audit --no-fund --no-package-lock".to_string(),
            None,
        )
    };
    p.commands.push(command.clone());
    if let Some(prepare) = root_prepare(&doc, &command) {
        p.why.push(format!(
            "javascript: `{prepare}` in every checkout before its tests (the installer runs \
             the project's own `prepare` there; what it builds comes from that checkout's code)"
        ));
        p.before_tests.push(prepare);
    }
    p.key_files.push("package.json".into());
    if let Some(l) = lock {
        p.key_files.push(l.into());
    }
    if has(".npmrc") {
        p.key_files.push(".npmrc".into());
    }
    p.key_files.extend(javascript_reads(root, &doc));
    p.outputs.push("node_modules".into());
    p.sources.push(match lock {
        Some(l) => format!("javascript test dependencies: {l}, exact versions"),
        None => {
            "javascript test dependencies: package.json ranges (no lockfile: the newest that match)"
                .into()
        }
    });
    p.why.push(format!(
        "javascript: `{command}` ({}); node_modules mounted read-only into the worktree",
        lock.map_or("no lockfile".to_string(), |l| format!("from {l}"))
    ));
    Ok(true)
}

/// The project's own `prepare` script, as the installer `install` runs it in the project
/// (npm, pnpm and classic yarn run it after installing; yarn 2+ does not): the command that
/// runs it by name, so its text comes from `package.json` at the time it runs.
fn root_prepare(doc: &serde_json::Value, install: &str) -> Option<String> {
    doc.get("scripts")?.get("prepare")?.as_str()?;
    let manager = if install.starts_with("npm ") {
        "npm"
    } else if install.contains("pnpm") {
        "pnpm"
    } else if install.contains("yarn") && install.ends_with("--frozen-lockfile") {
        "yarn"
    } else {
        return None;
    };
    Some(format!("{manager} run prepare"))
}

/// The package manager `package.json` pins (`"packageManager": "pnpm@9.12.3+sha512.…"`):
/// its name and version, when both are plain.
fn package_manager(doc: &serde_json::Value) -> Option<(&'static str, String)> {
    let field = doc.get("packageManager")?.as_str()?;
    let (name, version) = field.split_once('@')?;
    let version = version.split('+').next()?;
    let plain = !version.is_empty()
        && version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'));
    let name = ["pnpm", "yarn", "npm"].into_iter().find(|n| *n == name)?;
    plain.then(|| (name, version.to_string()))
}

/// The pnpm major that reads a `pnpm-lock.yaml`, by its `lockfileVersion`.
fn pnpm_for_lockfile(lock: &Path) -> String {
    let text = std::fs::read_to_string(lock).unwrap_or_default();
    let version = text
        .lines()
        .find_map(|l| l.strip_prefix("lockfileVersion:"))
        .map(|v| v.trim().trim_matches(['\'', '"']).to_string())
        .unwrap_or_default();
    match version.as_str() {
        "5.3" => "6",
        "5.4" => "7",
        v if v.starts_with("6.") => "8",
        _ => "9",
    }
    .to_string()
}

/// A package manager from the npm registry at `version` (the machine need not have it),
/// installed into the cache entry and put on `PATH` for every later command (`pnpm test`):
/// returns how set-up invokes it.
fn from_npm(p: &mut SetupPlan, package: &str, version: &str, bin: &str) -> String {
    let prefix = format!("${ENV_VAR}/pm");
    // In its own directory, not `--prefix`: that would also move npm's global configuration
    // (a registry or CA the machine's npm is set up with) to the new prefix.
    p.commands.push(format!(
        "mkdir -p \"{prefix}\" && cd \"{prefix}\" && echo '{{\"private\": true}}' > package.json && npm install --no-audit --no-fund --no-package-lock {package}@{version}"
    ));
    p.path.push(format!("{prefix}/node_modules/.bin"));
    format!("\"{prefix}/node_modules/.bin/{bin}\"")
}

/// Rust: `cargo fetch` into a cargo home in the cache; later commands run cargo offline
/// against it (no `Cargo.lock` needed: cargo resolves from the fetched index).
fn rust(root: &Path, p: &mut SetupPlan) -> Result<bool> {
    let doc = read(&root.join("Cargo.toml"))?
        .and_then(|t| t.parse::<toml::Table>().ok())
        .unwrap_or_default();
    let has_table = |t: Option<&toml::Value>| {
        t.and_then(toml::Value::as_table)
            .is_some_and(|t| !t.is_empty())
    };
    let deps = ["dependencies", "dev-dependencies", "build-dependencies"]
        .iter()
        .any(|k| has_table(doc.get(*k)))
        || doc
            .get("workspace")
            .and_then(|w| w.get("members"))
            .and_then(toml::Value::as_array)
            .is_some_and(|m| !m.is_empty())
        || doc.get("target").is_some();
    if !deps {
        // Nothing to fetch: cargo needs no registry for a crate without dependencies.
        return Ok(false);
    }
    p.commands
        .push("CARGO_NET_OFFLINE=false cargo fetch".into());
    p.env
        .push(("CARGO_HOME".into(), format!("${ENV_VAR}/cargo")));
    p.after_env
        .push(("CARGO_NET_OFFLINE".into(), "true".into()));
    for f in [
        "Cargo.toml",
        "Cargo.lock",
        "rust-toolchain",
        "rust-toolchain.toml",
    ] {
        if root.join(f).is_file() {
            p.key_files.push(f.into());
        }
    }
    if let Ok(members) = matching(root, &["*/Cargo.toml".into(), "*/*/Cargo.toml".into()]) {
        p.key_files.extend(members);
    }
    let toolchain = ["rust-toolchain.toml", "rust-toolchain"]
        .into_iter()
        .find(|f| root.join(f).is_file());
    p.sources.push(format!(
        "rust test dependencies: {}{}",
        if root.join("Cargo.lock").is_file() {
            "Cargo.lock, exact versions"
        } else {
            "Cargo.toml ranges (no Cargo.lock: the newest that match)"
        },
        toolchain.map_or(String::new(), |f| format!(
            "; toolchain as {f} names it (rustup)"
        ))
    ));
    p.why.push(
        "rust: `cargo fetch` into a cargo home in the cache; cargo runs offline after it".into(),
    );
    Ok(true)
}

/// Go: `go mod download` into a module cache in the cache; later commands use no proxy.
fn go(root: &Path, p: &mut SetupPlan) -> bool {
    p.commands.push("GOFLAGS=-mod=mod go mod download".into());
    p.env
        .push(("GOMODCACHE".into(), format!("${ENV_VAR}/gomod")));
    p.after_env.push(("GOPROXY".into(), "off".into()));
    p.after_env.push(("GOFLAGS".into(), "-mod=mod".into()));
    for f in ["go.mod", "go.sum"] {
        if root.join(f).is_file() {
            p.key_files.push(f.into());
        }
    }
    p.why.push(
        "go: `go mod download` into a module cache in the cache; no module proxy after it (the \
         proxy fetches any origin: set-up reaches it only when your own configuration names \
         \"go\" in setup.network)"
            .into(),
    );
    true
}

/// Files under `root` matching any of `globs` (relative, `/`-separated), sorted. Ignored
/// and hidden directories are not walked, and the walk stops four levels down.
/// Most files a set-up input directory (a local package, a build backend) contributes to
/// the key; past it the rest are left out (a directory that large is a project, not a
/// package it installs).
const MAX_DIR_KEY_FILES: usize = 5_000;

/// The files a Python install reads beyond the manifests: every requirement or constraint
/// file `reqs` include (`-r`, `-c`, relative to the including file), every file of a local
/// package they name (`./pkg`, `-e ./pkg`, `file:` URLs; relative to the project) and of the
/// in-tree build backend (`[build-system] backend-path`). Only paths inside `root`; the
/// project itself (`.`) is the manifests already.
fn python_reads(root: &Path, reqs: &[PathBuf], pyproject: Option<&toml::Table>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut queue: Vec<PathBuf> = reqs.to_vec();
    let mut seen: Vec<PathBuf> = reqs.to_vec();
    while let Some(req) = queue.pop() {
        let Ok(text) = std::fs::read_to_string(root.join(&req)) else {
            continue;
        };
        let here = req.parent().unwrap_or(Path::new(""));
        for line in text.lines() {
            let line = line.split(" #").next().unwrap_or("").trim();
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            match requirement_reference(line) {
                Some(Reference::File(f)) => {
                    if let Some(rel) = inside(root, &here.join(f))
                        && root.join(&rel).is_file()
                        && !seen.contains(&rel)
                    {
                        seen.push(rel.clone());
                        files.push(rel.clone());
                        queue.push(rel);
                    }
                }
                Some(Reference::Dir(d)) => {
                    if let Some(rel) = inside(root, Path::new(d))
                        && !rel.as_os_str().is_empty()
                        && root.join(&rel).is_dir()
                    {
                        dirs.push(rel);
                    }
                }
                None => {}
            }
        }
    }
    let backend = pyproject
        .and_then(|d| d.get("build-system"))
        .and_then(|b| b.get("backend-path"))
        .and_then(toml::Value::as_array);
    for b in backend
        .into_iter()
        .flatten()
        .filter_map(toml::Value::as_str)
    {
        if let Some(rel) = inside(root, Path::new(b)) {
            dirs.push(rel);
        }
    }
    for d in dirs {
        files.extend(files_under(root, &d));
    }
    files.sort();
    files.dedup();
    files
}

/// The files an install reads beyond the root manifest and lockfile: every file of a local
/// package a dependency names (`file:`/`link:`, relative to the project) and each workspace's
/// `package.json` (its lifecycle scripts run at install). Only paths inside `root`.
fn javascript_reads(root: &Path, doc: &serde_json::Value) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for section in ["dependencies", "devDependencies", "optionalDependencies"] {
        for v in doc
            .get(section)
            .and_then(|d| d.as_object())
            .into_iter()
            .flat_map(|o| o.values())
            .filter_map(|v| v.as_str())
        {
            let Some(local) = v.strip_prefix("file:").or_else(|| v.strip_prefix("link:")) else {
                continue;
            };
            if let Some(rel) = inside(root, Path::new(local))
                && !rel.as_os_str().is_empty()
            {
                if root.join(&rel).is_dir() {
                    out.extend(files_under(root, &rel));
                } else if root.join(&rel).is_file() {
                    out.push(rel);
                }
            }
        }
    }
    let workspaces = doc.get("workspaces").and_then(|w| {
        w.as_array()
            .or_else(|| w.get("packages").and_then(|p| p.as_array()))
    });
    let globs: Vec<String> = workspaces
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str())
        .filter(|w| !w.starts_with('/') && !w.split('/').any(|c| c == ".."))
        .map(|w| format!("{}/package.json", w.trim_end_matches('/')))
        .collect();
    if let Ok(found) = matching(root, &globs) {
        out.extend(found);
    }
    out.sort();
    out.dedup();
    out
}

/// What a requirement line refers to in the tree.
#[derive(Debug, PartialEq, Eq)]
enum Reference<'a> {
    /// Another requirement or constraint file (relative to the including file).
    File(&'a str),
    /// A local package directory (relative to the project).
    Dir(&'a str),
}

fn requirement_reference(line: &str) -> Option<Reference<'_>> {
    for flag in ["--requirement", "--constraint"] {
        if let Some(rest) = line.strip_prefix(flag)
            && (rest.starts_with(['=', ' ', '\t']))
        {
            return Some(Reference::File(rest.trim_start_matches('=').trim()));
        }
    }
    for flag in ["-r", "-c"] {
        // `-r file`, `-rfile`: pip takes both.
        if let Some(rest) = line.strip_prefix(flag) {
            let f = rest.trim();
            return (!f.is_empty()).then_some(Reference::File(f));
        }
    }
    let target = ["-e", "--editable"]
        .iter()
        .find_map(|f| line.strip_prefix(f))
        .map(|r| r.trim_start_matches('=').trim())
        .unwrap_or(line);
    let target = target.strip_prefix("file:").unwrap_or(target);
    let path = target.split(['[', ';', ' ']).next().unwrap_or(target);
    let local = path.starts_with("./") || path.starts_with("../") || path == ".";
    local.then_some(Reference::Dir(path))
}

/// `p` (relative to `root`) normalised, when it stays inside `root`.
fn inside(root: &Path, p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    // A link inside the tree that leads out is not the tree's.
    let real = std::fs::canonicalize(root.join(&out)).ok()?;
    let top = std::fs::canonicalize(root).ok()?;
    real.starts_with(&top).then_some(out)
}

/// The files under `dir` (relative to `root`), sorted, without version-control or cache
/// directories, at most [`MAX_DIR_KEY_FILES`].
fn files_under(root: &Path, dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = ignore::WalkBuilder::new(root.join(dir))
        .standard_filters(false)
        .filter_entry(|e| {
            let n = e.file_name();
            n != ".git" && n != "__pycache__" && n != "node_modules"
        })
        .build()
        .flatten()
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .filter_map(|e| e.path().strip_prefix(root).ok().map(Path::to_path_buf))
        .take(MAX_DIR_KEY_FILES)
        .collect();
    out.sort();
    out
}

fn matching(root: &Path, globs: &[String]) -> Result<Vec<PathBuf>> {
    if globs.is_empty() {
        return Ok(Vec::new());
    }
    let mut b = globset::GlobSetBuilder::new();
    for g in globs {
        let glob = globset::GlobBuilder::new(g)
            .literal_separator(true)
            .build()
            .map_err(|e| invalid(format!("setup.key: {g}: {e}")))?;
        b.add(glob);
    }
    let set = b.build().map_err(|e| invalid(format!("setup.key: {e}")))?;
    let mut out = Vec::new();
    for e in ignore::WalkBuilder::new(root)
        .max_depth(Some(4))
        .build()
        .flatten()
    {
        if !e.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        if let Ok(rel) = e.path().strip_prefix(root)
            && set.is_match(rel)
        {
            out.push(rel.to_path_buf());
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_covers_what_the_requirement_files_include_and_the_local_packages() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            &[
                (
                    "pyproject.toml",
                    "[build-system]\nrequires = []\nbuild-backend = \"b\"\nbackend-path = [\"_build\"]\n[project]\nname = \"x\"\nversion = \"1\"\n",
                ),
                ("_build/b.py", "def build_wheel(*a): pass\n"),
                (
                    "requirements.txt",
                    "-r ci/pins.txt\n# -r ignored.txt\n--constraint=constraints/c.txt\n",
                ),
                (
                    "ci/pins.txt",
                    "-r more.txt\n./localpkg\n-e ./editable[extra]\nfile:./viafile\nrequests==2.0 # ./not-a-path\n-r ../../outside.txt\n",
                ),
                ("ci/more.txt", "iniconfig\n"),
                ("constraints/c.txt", "iniconfig<3\n"),
                ("localpkg/setup.py", "print('build')\n"),
                ("localpkg/pkg/__init__.py", ""),
                ("editable/pyproject.toml", ""),
                ("viafile/setup.cfg", ""),
            ],
        );
        let p = plan(d.path(), &SetupConfig::default(), None, None)
            .unwrap()
            .unwrap();
        for f in [
            "requirements.txt",
            "ci/pins.txt",
            "ci/more.txt",
            "constraints/c.txt",
            "localpkg/setup.py",
            "localpkg/pkg/__init__.py",
            "editable/pyproject.toml",
            "viafile/setup.cfg",
            "_build/b.py",
        ] {
            assert!(
                p.key_files.contains(&PathBuf::from(f)),
                "{f}: {:?}",
                p.key_files
            );
        }
        assert!(
            !p.key_files
                .iter()
                .any(|f| f.to_string_lossy().contains("outside"))
        );
        // A nested file's change changes the key, though no manifest did.
        let before = p.key(d.path()).unwrap();
        std::fs::write(d.path().join("ci/more.txt"), "./localpkg\n").unwrap();
        assert_ne!(before, p.key(d.path()).unwrap());
        std::fs::write(d.path().join("ci/more.txt"), "iniconfig\n").unwrap();
        std::fs::write(d.path().join("_build/b.py"), "evil\n").unwrap();
        assert_ne!(before, p.key(d.path()).unwrap());
    }

    #[test]
    fn the_key_covers_local_javascript_packages_and_workspaces() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            &[
                (
                    "package.json",
                    "{\"devDependencies\": {\"a\": \"file:./vendor/a\", \"b\": \"link:../outside\", \"c\": \"1.0.0\"}, \"workspaces\": [\"packages/*\"]}",
                ),
                ("package-lock.json", "{}"),
                (
                    "vendor/a/package.json",
                    "{\"scripts\": {\"postinstall\": \"x\"}}",
                ),
                ("vendor/a/index.js", ""),
                ("packages/p/package.json", "{}"),
            ],
        );
        let p = plan(d.path(), &SetupConfig::default(), None, None)
            .unwrap()
            .unwrap();
        for f in [
            "vendor/a/package.json",
            "vendor/a/index.js",
            "packages/p/package.json",
        ] {
            assert!(
                p.key_files.contains(&PathBuf::from(f)),
                "{f}: {:?}",
                p.key_files
            );
        }
        assert!(
            !p.key_files
                .iter()
                .any(|f| f.to_string_lossy().contains("outside"))
        );
    }

    #[test]
    fn setup_inputs_by_name_at_any_depth() {
        for p in [
            "pyproject.toml",
            "plugins/x/setup.py",
            "requirements.txt",
            "requirements/tests.txt",
            "ci/requirements/nested.in",
            "dev-requirements.txt",
            "constraints.txt",
            ".npmrc",
            "packages/a/package.json",
            "yarn.lock",
            "Cargo.toml",
            "crates/x/Cargo.toml",
            "go.mod",
            "uv.lock",
        ] {
            assert!(setup_input(p).is_some(), "{p}");
        }
        for p in [
            "src/app.py",
            "README.md",
            "tests/test_req.py",
            "docs/notes.txt",
            "setup_helpers.py",
        ] {
            assert_eq!(setup_input(p), None, "{p}");
        }
    }

    fn write(root: &Path, files: &[(&str, &str)]) {
        for (f, text) in files {
            let p = root.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
    }

    fn pytest() -> TestCommand {
        TestCommand {
            command: "python3 -m pytest".into(),
            runner: Runner::Pytest,
            source: super::super::detect::CommandSource::Flag,
            script: None,
        }
    }

    #[test]
    fn a_src_layout_project_gets_a_virtualenv_with_its_test_extras_not_its_dev_tooling() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            &[
                (
                    "pyproject.toml",
                    "[project]\nname = \"calc\"\nversion = \"0\"\n[project.optional-dependencies]\ntest = [\"pytest\"]\ndocs = [\"sphinx\"]\n",
                ),
                ("src/calc/__init__.py", ""),
                ("tests/__init__.py", ""),
                ("requirements-dev.txt", "pluggy\n"),
            ],
        );
        let p = plan(d.path(), &SetupConfig::default(), Some(&pytest()), None)
            .unwrap()
            .unwrap();
        assert_eq!(p.ecosystems, vec![Ecosystem::Python]);
        assert_eq!(p.commands[0], "python3 -m venv \"$GIT_AGENT_ENV/venv\"");
        assert!(
            !p.commands[1].contains("requirements-dev.txt"),
            "dev tooling only when nothing test-specific exists: {}",
            p.commands[1]
        );
        assert!(
            p.sources[0].contains("the project's extras [test]"),
            "{:?}",
            p.sources
        );
        assert!(p.commands[1].contains("-e '.[test]'"), "{}", p.commands[1]);
        assert!(p.commands[1].ends_with(" pytest"));
        assert_eq!(p.network, vec!["pypi".to_string()]);
        assert_eq!(
            p.python_packages,
            vec![("calc".into(), PathBuf::from("src"))]
        );
        assert!(p.after_env.contains(&("PYTHONPATH".into(), "src".into())));
        assert_eq!(p.key_files, vec![PathBuf::from("pyproject.toml")]);
    }

    #[test]
    fn pnpm_and_yarn_come_from_npm_at_the_version_the_project_pins() {
        let plan_of = |files: &[(&str, &str)]| {
            let d = tempfile::tempdir().unwrap();
            write(d.path(), files);
            let p = plan(d.path(), &SetupConfig::default(), None, None)
                .unwrap()
                .unwrap();
            assert_eq!(
                p.path,
                vec!["$GIT_AGENT_ENV/pm/node_modules/.bin".to_string()]
            );
            p.commands
        };
        let expect = |package: &str, install: &str| {
            let (bin, args) = install.split_once(' ').unwrap();
            vec![
                format!(
                    "mkdir -p \"$GIT_AGENT_ENV/pm\" && cd \"$GIT_AGENT_ENV/pm\" && echo '{{\"private\": true}}' > package.json && npm install --no-audit --no-fund --no-package-lock {package}"
                ),
                format!("\"$GIT_AGENT_ENV/pm/node_modules/.bin/{bin}\" {args}"),
            ]
        };
        let pkg = "{\"devDependencies\": {\"is-number\": \"7.0.0\"}}";
        let deps = "\"devDependencies\": {\"x\": \"1\"}";
        assert_eq!(
            plan_of(&[
                ("package.json", pkg),
                ("pnpm-lock.yaml", "lockfileVersion: '6.0'\n")
            ]),
            expect("pnpm@8", "pnpm install --frozen-lockfile")
        );
        let pinned = format!("{{\"packageManager\": \"pnpm@9.12.3+sha512.abc\", {deps}}}");
        assert_eq!(
            plan_of(&[
                ("package.json", &pinned),
                ("pnpm-lock.yaml", "lockfileVersion: '9.0'\n")
            ]),
            expect("pnpm@9.12.3", "pnpm install --frozen-lockfile")
        );
        // A version that is not plain is not passed to a shell.
        let odd = format!("{{\"packageManager\": \"pnpm@9;rm -rf ~\", {deps}}}");
        assert_eq!(
            plan_of(&[
                ("package.json", &odd),
                ("pnpm-lock.yaml", "lockfileVersion: '9.0'\n")
            ]),
            expect("pnpm@9", "pnpm install --frozen-lockfile")
        );
        assert_eq!(
            plan_of(&[("package.json", pkg), ("yarn.lock", "# yarn lockfile v1\n")]),
            expect("yarn@1", "yarn install --frozen-lockfile")
        );
        let berry = format!("{{\"packageManager\": \"yarn@4.5.0\", {deps}}}");
        assert_eq!(
            plan_of(&[
                ("package.json", &berry),
                ("yarn.lock", "__metadata:\n  version: 8\n")
            ]),
            expect("@yarnpkg/cli-dist@4.5.0", "yarn install --immutable")
        );
    }

    #[test]
    fn the_root_prepare_runs_before_the_tests_where_the_installer_runs_it() {
        let pkg = serde_json::json!({"scripts": {"prepare": "tsc", "test": "node --test"}});
        let npm = root_prepare(&pkg, "npm ci --no-audit --no-fund");
        assert_eq!(npm.as_deref(), Some("npm run prepare"));
        let pnpm = root_prepare(
            &pkg,
            "\"$GIT_AGENT_ENV/pm/node_modules/.bin/pnpm\" install --frozen-lockfile",
        );
        assert_eq!(pnpm.as_deref(), Some("pnpm run prepare"));
        let yarn = root_prepare(
            &pkg,
            "\"$GIT_AGENT_ENV/pm/node_modules/.bin/yarn\" install --frozen-lockfile",
        );
        assert_eq!(yarn.as_deref(), Some("yarn run prepare"));
        // Yarn 2 and later never run the project's own `prepare` on install.
        let berry = root_prepare(
            &pkg,
            "\"$GIT_AGENT_ENV/pm/node_modules/.bin/yarn\" install --immutable",
        );
        assert_eq!(berry, None);
        let none = serde_json::json!({"scripts": {"test": "node --test"}});
        assert_eq!(root_prepare(&none, "npm ci --no-audit --no-fund"), None);
    }

    #[test]
    fn a_lockfile_chooses_the_installer_and_node_modules_is_an_output() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            &[
                (
                    "package.json",
                    "{\"devDependencies\": {\"is-number\": \"7.0.0\"}}",
                ),
                ("package-lock.json", "{}"),
            ],
        );
        let p = plan(d.path(), &SetupConfig::default(), None, None)
            .unwrap()
            .unwrap();
        assert_eq!(p.commands, vec!["npm ci --no-audit --no-fund".to_string()]);
        assert_eq!(p.outputs, vec![PathBuf::from("node_modules")]);
        assert_eq!(p.network, vec!["npm".to_string()]);
        // A package without dependencies needs nothing.
        write(
            d.path(),
            &[("package.json", "{\"scripts\": {\"test\": \"node t.js\"}}")],
        );
        assert!(
            plan(d.path(), &SetupConfig::default(), None, None)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn the_key_follows_the_lockfile_and_the_commands() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            &[
                ("Cargo.toml", "[package]\nname = \"x\"\n"),
                ("Cargo.lock", "a"),
            ],
        );
        // No dependency, nothing to fetch.
        assert!(
            plan(d.path(), &SetupConfig::default(), None, None)
                .unwrap()
                .is_none()
        );
        write(
            d.path(),
            &[(
                "Cargo.toml",
                "[package]\nname = \"x\"\n[dependencies]\nitoa = \"1\"\n",
            )],
        );
        let cfg = SetupConfig::default();
        let p = plan(d.path(), &cfg, None, None).unwrap().unwrap();
        assert!(
            p.after_env
                .contains(&("CARGO_NET_OFFLINE".into(), "true".into()))
        );
        let k1 = p.key(d.path()).unwrap();
        assert_eq!(k1, p.key(d.path()).unwrap());
        write(d.path(), &[("Cargo.lock", "b")]);
        let k2 = p.key(d.path()).unwrap();
        assert_ne!(k1, k2);
        assert!(p.is_key_file("Cargo.lock"));
        assert!(!p.is_key_file("src/lib.rs"));
        let mut other = p.clone();
        other.commands.push("make deps".into());
        assert_ne!(other.key(d.path()).unwrap(), k2);
    }

    #[test]
    fn declared_commands_replace_detection_and_bad_settings_are_refused() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            &[
                ("package.json", "{\"dependencies\": {\"a\": \"1\"}}"),
                ("deps.lock", "1"),
            ],
        );
        let cfg = SetupConfig {
            commands: Some(vec!["./fetch-deps".into()]),
            key: vec!["*.lock".into()],
            outputs: vec!["vendor/".into()],
            ..SetupConfig::default()
        };
        let p = plan(d.path(), &cfg, None, None).unwrap().unwrap();
        assert_eq!(p.commands, vec!["./fetch-deps".to_string()]);
        assert_eq!(p.key_files, vec![PathBuf::from("deps.lock")]);
        assert_eq!(p.outputs, vec![PathBuf::from("vendor")]);
        assert_eq!(p.network, vec!["npm".to_string()]);
        for bad in [
            SetupConfig {
                outputs: vec!["../escape".into()],
                ..cfg.clone()
            },
            SetupConfig {
                env: [("LD_PRELOAD".to_string(), "/x.so".to_string())].into(),
                ..cfg.clone()
            },
            SetupConfig {
                env: [("GITHUB_TOKEN".to_string(), "x".to_string())].into(),
                ..cfg.clone()
            },
        ] {
            assert!(matches!(
                plan(d.path(), &bad, None, None),
                Err(Error::Setup { .. })
            ));
        }
        let off = SetupConfig {
            commands: Some(vec![]),
            ..SetupConfig::default()
        };
        assert!(plan(d.path(), &off, None, None).unwrap().is_none());
    }

    #[test]
    fn expand_names_the_cache_entry() {
        assert_eq!(
            expand(
                "$GIT_AGENT_ENV/venv/bin:${GIT_AGENT_ENV}/x",
                Path::new("/c/k")
            ),
            "/c/k/venv/bin:/c/k/x"
        );
    }
}
