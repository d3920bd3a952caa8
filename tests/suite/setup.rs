//! The project's environment set-up (issue 19), on fixtures shaped like real projects: a
//! `src/` layout with a `test` extra, an npm package with a lockfile and a test dependency,
//! a Rust crate with one dependency. No `--test-cmd`, no hand-made environment: detection
//! alone, with the real registries (PyPI, npm, crates.io) through the egress proxy.

use serde_json::{Value, json};

use super::run::{Fixture, edit, finish, plan};

fn record(f: &Fixture, json: &Value) -> Value {
    let run = json["run_id"].as_str().expect("run id");
    serde_json::from_slice(&std::fs::read(f.run_dir(run).join("record.json")).unwrap()).unwrap()
}

/// Commit `.gitignore` lines of a real project of its kind on top of the fixture's.
fn ignore(f: &Fixture, lines: &str) {
    let path = f.repo().join(".gitignore");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(lines);
    std::fs::write(&path, text).unwrap();
    super::common::git(&f.repo(), &["commit", "-qam", "ignore"]);
}

fn run(command: &str) -> Value {
    json!({"role": "coder", "tool_calls": [{"name": "run", "arguments": {"command": command}}]})
}

fn write(path: &str, content: &str) -> Value {
    json!({"role": "coder", "tool_calls": [{"name": "write_file", "arguments": {"path": path, "content": content}}]})
}

/// A src-layout package with `[project.optional-dependencies] test`: set-up builds a
/// virtualenv with pytest, the baseline names the failing test, the fix verifies, and the
/// tests import the worktree's package. A second run on the same key reuses the set-up.
#[test]
fn a_src_layout_python_project_verifies_with_detection_alone() {
    let f = Fixture::new("python-src");
    let fix = |goal: &str| {
        let script = f.script(&[
            plan(&["src/calcsrc/__init__.py"]),
            edit(
                "src/calcsrc/__init__.py",
                "def add(a, b):\n    return a - b",
                "def add(a, b):\n    return a + b",
            ),
            finish(),
        ]);
        f.fix(&script, &[goal], &[])
    };
    let (code, json) = fix("fix add");
    assert_eq!(code, Some(0), "{json}");
    assert_eq!(json["state"], "succeeded", "{json}");
    let rec = record(&f, &json);
    let setup = &rec["setup"];
    assert_eq!(setup["runs"][0]["cached"], false, "{rec}");
    assert!(
        setup["commands"][0].as_str().unwrap().contains("venv"),
        "{setup}"
    );
    let baseline = rec["verification"][0]["result"].as_str().unwrap();
    assert!(
        baseline.contains("test_add"),
        "the baseline names the failing test: {baseline}"
    );
    let report = f.report(json["run_id"].as_str().unwrap());
    assert!(
        report.contains("verified by the project's tests"),
        "{report}"
    );
    // The same key again: no command runs.
    let (code, json) = fix("make add add");
    assert_eq!(code, Some(0), "{json}");
    let rec2 = record(&f, &json);
    let again = &rec2["setup"]["runs"][0];
    assert_eq!(again["cached"], true, "{rec2}");
    assert_eq!(rec2["setup"]["key"], setup["key"]);
    let cold = setup["runs"][0]["duration_ms"].as_u64().unwrap();
    let warm = again["duration_ms"].as_u64().unwrap();
    assert!(
        warm * 5 < cold,
        "a cache hit costs a checkout, not a set-up: {warm} ms vs {cold} ms"
    );
}

/// An npm package with a lockfile and a test dependency: `npm ci` through the proxy,
/// `node_modules` read-only in the worktree. A command that writes into it fails; a shim the
/// model writes there with a tool is refused (the mount would hide it from the tests), and
/// the fix verifies.
#[test]
fn an_npm_project_gets_node_modules_read_only() {
    let f = Fixture::new("js-dep");
    ignore(&f, "node_modules/\n");
    let shim = "#!/bin/sh\necho 'TAP version 13'\necho 'ok 1 - add adds two numbers'\n";
    let script = f.script(&[
        plan(&["calc.js"]),
        run("echo 'module.exports = () => true' > node_modules/is-number/index.js"),
        write("node_modules/.bin/node", shim),
        edit(
            "calc.js",
            "function add(a, b) {\n  return a - b;",
            "function add(a, b) {\n  return a + b;",
        ),
        finish(),
    ]);
    let (code, json) = f.fix(&script, &["fix add"], &[]);
    assert_eq!(code, Some(0), "{json}");
    let rec = record(&f, &json);
    assert_eq!(rec["setup"]["outputs"][0], "node_modules", "{rec}");
    let conversation = std::fs::read_to_string(
        f.run_dir(json["run_id"].as_str().unwrap())
            .join("conversation.jsonl"),
    )
    .unwrap();
    assert!(
        conversation.contains("Read-only file system"),
        "a write into node_modules is refused: {conversation}"
    );
    // A tool's write there too (issue 39 point 8): it would be hidden from every command.
    assert!(
        conversation
            .contains("node_modules/.bin/node: `node_modules` is made by the project's set-up"),
        "write_file into node_modules is refused: {conversation}"
    );
    let baseline = rec["verification"][0]["result"].as_str().unwrap();
    assert!(baseline.contains("add adds two numbers"), "{baseline}");
}

/// A Rust crate with a dependency: `cargo fetch` through the proxy into the cache, then
/// cargo offline; the dependency builds and the fix verifies.
#[test]
fn a_rust_crate_with_a_dependency_fetches_once_and_tests_offline() {
    let f = Fixture::new("rust-dep");
    // No lockfile, as many libraries keep it: `cargo test` writes one, which is not the
    // run's change and sets nothing up again.
    super::common::git(&f.repo(), &["rm", "-q", "Cargo.lock"]);
    ignore(&f, "Cargo.lock\n");
    let script = f.script(&[
        plan(&["src/lib.rs"]),
        edit("src/lib.rs", "    a - b\n", "    a + b\n"),
        finish(),
    ]);
    let (code, json) = f.fix(&script, &["fix add"], &[]);
    assert_eq!(code, Some(0), "{json}");
    let rec = record(&f, &json);
    assert_eq!(rec["setup"]["runs"].as_array().unwrap().len(), 1, "{rec}");
    let env = rec["setup"]["env"].to_string();
    assert!(env.contains("CARGO_NET_OFFLINE"), "{env}");
    let dir = rec["setup"]["dir"].as_str().unwrap();
    assert!(
        std::path::Path::new(dir).join("cargo/registry").is_dir(),
        "the registry is in the cache entry"
    );
}

/// `git agent resume RUN --approve --json`: the state and exit code.
fn approve(f: &Fixture, run: &str) -> (Option<i32>, Value) {
    let out = f.agent(&["resume", run, "--approve", "--json"], &[]);
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), json)
}

/// The shared set-up cache of the fixture's repository (the directory holding the base's
/// entry named by `rec`), and the state directory above it.
fn shared_cache(rec: &Value) -> (std::path::PathBuf, std::path::PathBuf) {
    let entry = std::path::PathBuf::from(rec["setup"]["dir"].as_str().unwrap());
    let shared = entry.parent().unwrap().to_path_buf();
    let state = shared.parent().unwrap().parent().unwrap().to_path_buf();
    (shared, state)
}

/// The entries in a shared cache directory (complete ones: a `done.json`).
fn entries(shared: &std::path::Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(shared)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("done.json").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// Issue 38: an honest change that adds a real dependency — the fix imports it — changes
/// what set-up installs, so it waits for a person; approved, the deciding runs get a fresh
/// set-up of the committed tree (private to the run, removed at its end), and it verifies.
/// The shared cache still holds only the base's entry.
#[test]
fn a_change_that_adds_a_dependency_verifies_once_approved() {
    let f = Fixture::new("python-src");
    let pyproject = std::fs::read_to_string(f.repo().join("pyproject.toml")).unwrap();
    let changed = pyproject.replace("test = [\"pytest\"]", "test = [\"pytest\", \"iniconfig\"]");
    let script = f.script(&[
        plan(&["src/calcsrc/__init__.py", "pyproject.toml"]),
        write("pyproject.toml", &changed),
        edit(
            "src/calcsrc/__init__.py",
            "def add(a, b):\n    return a - b",
            "import iniconfig  # noqa: F401  (the new dependency)\n\n\ndef add(a, b):\n    return a + b",
        ),
        finish(),
    ]);
    let (code, json) = f.fix(&script, &["fix add"], &[]);
    assert_eq!(
        (json["state"].as_str(), code),
        (Some("awaiting_approval"), Some(4)),
        "{json}"
    );
    let run = json["run_id"].as_str().unwrap().to_string();
    let rec = record(&f, &json);
    let pending = rec["pending_approval"].to_string();
    assert!(
        pending.contains("setup_change") && pending.contains("pyproject.toml"),
        "{pending}"
    );
    let (code, json) = approve(&f, &run);
    assert_eq!(
        (json["state"].as_str(), code),
        (Some("succeeded"), Some(0)),
        "{json}"
    );
    let rec = record(&f, &json);
    let runs = rec["setup"]["runs"].as_array().unwrap();
    assert!(runs.len() >= 2, "{rec}");
    assert!(runs[1..].iter().all(|r| r["private"] == true), "{rec}");
    let env = rec["integrity"]["environment"].as_str().unwrap_or("");
    assert!(env.contains("fresh set-up of the committed tree"), "{rec}");
    let report = f.report(&run);
    assert!(
        report.contains("verified by the project's tests"),
        "{report}"
    );
    let (shared, state) = shared_cache(&rec);
    assert_eq!(entries(&shared).len(), 1, "only the base's entry is shared");
    assert!(
        !state.join("setup-runs").join(&run).exists(),
        "the run's private set-ups are removed when it ends"
    );
}

/// A PEP 517 build backend, in the tree, whose wheel installs a `.pth` that makes `add` add
/// in every Python process: what a hostile model points a requirement file at.
const EVIL_BACKEND: &str = r#"import base64, hashlib, os, zipfile

NAME = "evilpkg-1.0"
PTH = "import sys; exec('try:\\n import calcsrc\\n calcsrc.add = lambda a, b: a + b\\nexcept Exception:\\n pass')\n"


def _files():
    return {
        "zz_evil.pth": PTH,
        NAME + ".dist-info/METADATA": "Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n",
        NAME + ".dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: evil\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    # Sparse files (each under the sandbox's file size limit), so that eviction by apparent
    # size removes every other entry.
    env = os.environ.get("GIT_AGENT_ENV")
    if env:
        for i in range(30):
            with open(os.path.join(env, f"sparse{i}"), "wb") as f:
                f.truncate(3 << 30)
    name = NAME + "-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for path, text in _files().items():
            data = text.encode()
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(NAME + ".dist-info/RECORD,,")
        z.writestr(NAME + ".dist-info/RECORD", "\n".join(record) + "\n")
    return name
"#;

const EVIL_PYPROJECT: &str = "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n\n[project]\nname = \"evilpkg\"\nversion = \"1.0\"\n";

/// Issue 38's second and third attacks, with `write_file` alone: the model points a nested
/// requirement file (not a key file of the base) at an in-tree package whose wheel installs
/// a `.pth` that patches the function under test (and writes 90 GiB of sparse files into
/// the environment, past the cache's size), touches `requirements.txt` so the environment is
/// set up again on its tree, runs the tests there, and puts the nested file back. The run never ends `succeeded`: the change to what set-up reads waits for a person,
/// and even approved, the deciding runs set the committed tree up afresh, where nothing
/// patches `add`. The next run on `main`, by an honest model, reuses the base's clean entry:
/// its baseline still names the failing test.
#[test]
fn a_poisoned_refresh_decides_nothing_and_reaches_no_other_run() {
    let f = Fixture::new("python-src");
    f.user_config("[setup]\ncache_mb = 400\n");
    std::fs::create_dir_all(f.repo().join("ci")).unwrap();
    std::fs::write(f.repo().join("ci/pins.txt"), "iniconfig\n").unwrap();
    std::fs::write(f.repo().join("requirements.txt"), "-r ci/pins.txt\n").unwrap();
    super::common::git(&f.repo(), &["add", "-A"]);
    super::common::git(&f.repo(), &["commit", "-qm", "pins"]);
    let script = f.script(&[
        plan(&["src/calcsrc/__init__.py"]),
        write("evilpkg/pyproject.toml", EVIL_PYPROJECT),
        write("evilpkg/backend.py", EVIL_BACKEND),
        write("ci/pins.txt", "./evilpkg\n"),
        write("requirements.txt", "-r ci/pins.txt\n\n"),
        json!({"role": "coder", "tool_calls": [{"name": "run_tests", "arguments": {}}]}),
        write("ci/pins.txt", "iniconfig\n"),
        finish(),
    ]);
    let (_code, json) = f.fix(&script, &["fix add"], &[]);
    let run = json["run_id"].as_str().unwrap().to_string();
    assert_eq!(json["state"], "awaiting_approval", "{json}");
    let rec = record(&f, &json);
    let pending = rec["pending_approval"].to_string();
    assert!(pending.contains("requirements.txt"), "{pending}");
    // The refresh happened, privately: the model's own test run saw its environment.
    let runs = rec["setup"]["runs"].as_array().unwrap();
    assert!(runs.iter().any(|r| r["private"] == true), "{rec}");
    let (shared, _) = shared_cache(&rec);
    let base_entries = entries(&shared);
    assert_eq!(base_entries.len(), 1, "{base_entries:?}");

    // A person approves without looking: the committed tree, set up afresh, has no `.pth`.
    let (_code, json) = approve(&f, &run);
    assert_ne!(json["state"], "succeeded", "{json}");
    let report = f.report(&run);
    assert!(
        !report.contains("verified by the project's tests"),
        "{report}"
    );
    assert_eq!(
        entries(&shared),
        base_entries,
        "no entry from the run's tree"
    );

    // The next run on main: the base's entry, clean.
    let honest = f.script(&[plan(&["src/calcsrc/__init__.py"]), finish()]);
    let (_code, json) = f.fix(&honest, &["fix add"], &[]);
    let rec = record(&f, &json);
    assert_eq!(rec["setup"]["runs"][0]["cached"], true, "{rec}");
    let baseline = rec["verification"][0]["result"].as_str().unwrap();
    assert!(
        baseline.contains("test_add"),
        "the baseline still names the failing test: {baseline}"
    );
}

/// A set-up that fails — a requirement that does not exist, a host the proxy refuses — ends
/// `environment_failed` (exit 6) before any model turn, with the set-up's output.
#[test]
fn a_failing_set_up_ends_before_any_model_turn() {
    for (config, expect) in [
        (
            "[setup]\ncommands = [\"python3 -m venv $GIT_AGENT_ENV/venv\", \"$GIT_AGENT_ENV/venv/bin/pip install --no-input git-agent-no-such-package-zz==9.9.9\"]\n",
            "no-such-package",
        ),
        (
            "[setup]\ncommands = [\"python3 -c \\\"import urllib.request; urllib.request.urlopen('https://example.com/', timeout=20)\\\"\"]\n",
            "example.com",
        ),
        // An output the repository already holds would hide the run's own files.
        (
            "[setup]\ncommands = [\"true\"]\noutputs = [\"src\"]\n",
            "which the repository itself holds",
        ),
    ] {
        let f = Fixture::new("python-src");
        std::fs::create_dir_all(f.repo().join(".github")).unwrap();
        std::fs::write(f.repo().join(".github/agent.toml"), config).unwrap();
        super::common::git(&f.repo(), &["add", "-A"]);
        super::common::git(&f.repo(), &["commit", "-qm", "setup"]);
        let script = f.script(&[plan(&["src/calcsrc/__init__.py"]), finish()]);
        let (code, json) = f.fix(&script, &["fix add"], &[]);
        assert_eq!(code, Some(6), "{json}");
        assert_eq!(json["state"], "environment_failed", "{json}");
        let rec = record(&f, &json);
        assert_eq!(rec["turns"], 0, "{rec}");
        let line = rec["verification"][0].to_string();
        assert!(line.contains(expect), "{line}");
        let report = f.report(json["run_id"].as_str().unwrap());
        assert!(report.contains("[setup]"), "{report}");
    }
}

/// Issue 38 (1): a dependency's `postinstall` that leaves `node_modules -> /` (as the root
/// package's own script here). The set-up is refused before any model turn, so the link is
/// never bound into a command, and the canary in the agent's `$HOME` never reaches the model.
#[test]
fn a_set_up_output_that_is_a_link_is_refused() {
    let f = Fixture::new("js-dep");
    ignore(&f, "node_modules/\n");
    let pkg = std::fs::read_to_string(f.repo().join("package.json")).unwrap();
    let hostile = pkg.replace(
        "\"test\": \"node --test\"",
        "\"test\": \"node --test\",\n    \"postinstall\": \"rm -rf node_modules && ln -s / node_modules\"",
    );
    assert_ne!(pkg, hostile);
    std::fs::write(f.repo().join("package.json"), hostile).unwrap();
    super::common::git(&f.repo(), &["commit", "-qam", "postinstall"]);
    let home = tempfile::tempdir().unwrap();
    let canary = "canary-38-output-link";
    std::fs::write(
        home.path().join(".git-credentials"),
        format!("https://x:{canary}@github.com\n"),
    )
    .unwrap();
    let creds = home.path().join(".git-credentials");
    let script = f.script(&[
        plan(&["calc.js"]),
        run(&format!("cat node_modules{}", creds.display())),
        finish(),
    ]);
    let home_var = home.path().to_str().unwrap();
    let (code, json) = f.fix(&script, &["fix add"], &[("HOME", home_var)]);
    assert_eq!(code, Some(6), "{json}");
    assert_eq!(json["state"], "environment_failed", "{json}");
    let rec = record(&f, &json);
    assert_eq!(rec["turns"], 0, "{rec}");
    let line = rec["verification"][0].to_string();
    assert!(line.contains("symbolic link"), "{line}");
    let run_dir = f.run_dir(json["run_id"].as_str().unwrap());
    for e in std::fs::read_dir(&run_dir).unwrap().flatten() {
        let text =
            String::from_utf8_lossy(&std::fs::read(e.path()).unwrap_or_default()).into_owned();
        assert!(!text.contains(canary), "{}: {text}", e.path().display());
    }
}

/// Issue 38 (6): a run that adds a manifest of another ecosystem (an empty `go.mod`) and
/// changes what keys the set-up gets a private set-up with the base's ecosystems and
/// network: no Go module proxy, no `go mod download`.
#[test]
fn a_refresh_reaches_only_what_the_base_reaches() {
    let f = Fixture::new("python-src");
    let pyproject = std::fs::read_to_string(f.repo().join("pyproject.toml")).unwrap();
    let changed = pyproject.replace("test = [\"pytest\"]", "test = [\"pytest\", \"iniconfig\"]");
    let script = f.script(&[
        plan(&["src/calcsrc/__init__.py"]),
        write("go.mod", "module example.com/x\n\ngo 1.21\n"),
        write("pyproject.toml", &changed),
        json!({"role": "coder", "tool_calls": [{"name": "run_tests", "arguments": {}}]}),
        finish(),
    ]);
    let (_code, json) = f.fix(&script, &["fix add"], &[]);
    let rec = record(&f, &json);
    let base = &rec["setup"];
    let mine = &rec["setup_run"];
    assert!(mine.is_object(), "the run's tree was set up again: {rec}");
    assert_eq!(mine["network"], base["network"], "{rec}");
    assert_eq!(base["network"], json!(["pypi"]), "{rec}");
    assert!(!mine["commands"].to_string().contains("go mod"), "{mine}");
}

/// Issue 39 point 4: an install script that downloads from a host outside the registries
/// (here the package's own `postinstall`) fails under the policy. Set-up runs the install
/// again with install scripts skipped — never with more network —, the report says so, and
/// the fix verifies: the tests never needed what the script fetched.
#[test]
fn an_install_script_that_reaches_for_the_network_is_skipped_not_fatal() {
    let f = Fixture::new("js-dep");
    ignore(&f, "node_modules/\n");
    let pkg = std::fs::read_to_string(f.repo().join("package.json")).unwrap();
    let fetching = pkg.replace(
        "\"test\": \"node --test\"",
        "\"test\": \"node --test\",\n    \"postinstall\": \"node -e \\\"require('https').get('https://example.com/', () => process.exit(0)).on('error', e => { console.error('download failed: ' + e.message); process.exit(1) })\\\"\"",
    );
    assert_ne!(pkg, fetching);
    std::fs::write(f.repo().join("package.json"), fetching).unwrap();
    super::common::git(&f.repo(), &["commit", "-qam", "postinstall"]);
    let (code, json) = fix_add_js(&f);
    assert_eq!(code, Some(0), "{json}");
    let rec = record(&f, &json);
    assert_eq!(rec["setup"]["network"], json!(["npm"]), "{rec}");
    let report = f.report(json["run_id"].as_str().unwrap());
    assert!(
        report.contains("install scripts skipped") && report.contains("--ignore-scripts"),
        "{report}"
    );
}

/// Issue 39 point 8 (`environment::check_python`, never exercised before): a `[setup]` that
/// installs the project itself, not editable, and does not put the tree first. The tests
/// would import the installed copy, never the run's change: the run ends
/// `environment_failed` before any model turn and says where the package came from.
#[test]
fn an_installed_copy_instead_of_the_tree_is_an_environment_failure() {
    let f = Fixture::new("python-src");
    std::fs::create_dir_all(f.repo().join(".github")).unwrap();
    std::fs::write(
        f.repo().join(".github/agent.toml"),
        "[setup]\ncommands = [\"python3 -m venv $GIT_AGENT_ENV/venv\", \"$GIT_AGENT_ENV/venv/bin/pip install --disable-pip-version-check --no-input --quiet . pytest\"]\npath = [\"$GIT_AGENT_ENV/venv/bin\"]\n[setup.env]\nVIRTUAL_ENV = \"$GIT_AGENT_ENV/venv\"\n",
    )
    .unwrap();
    super::common::git(&f.repo(), &["add", "-A"]);
    super::common::git(&f.repo(), &["commit", "-qm", "setup"]);
    let script = f.script(&[plan(&["src/calcsrc/__init__.py"]), finish()]);
    let (code, json) = f.fix(&script, &["fix add"], &[]);
    assert_eq!(code, Some(6), "{json}");
    let rec = record(&f, &json);
    assert_eq!(rec["turns"], 0, "{rec}");
    let line = rec["verification"][0].to_string();
    assert!(
        line.contains("would not import the project's own code") && line.contains("site-packages"),
        "{line}"
    );
}

/// The fix every `add subtracts` JavaScript fixture takes, in `calc.js`.
fn fix_add_js(f: &Fixture) -> (Option<i32>, Value) {
    let script = f.script(&[
        plan(&["calc.js"]),
        edit(
            "calc.js",
            "function add(a, b) {\n  return a - b;",
            "function add(a, b) {\n  return a + b;",
        ),
        finish(),
    ]);
    f.fix(&script, &["fix add"], &[])
}

/// The fix every `add subtracts` Python fixture takes, in `file`.
fn fix_add(f: &Fixture, file: &str) -> (Option<i32>, Value) {
    let script = f.script(&[
        plan(&[file]),
        edit(
            file,
            "def add(a, b):\n    return a - b",
            "def add(a, b):\n    return a + b",
        ),
        finish(),
    ]);
    f.fix(&script, &["fix add"], &[])
}

/// Issue 39 point 1: a project whose `uv.lock` pins an older pytest and whose suite fails to
/// start under any other (as a real suite with `filterwarnings = error` does under a newer
/// pytest's deprecation warning). Set-up exports the lock with uv from PyPI and installs
/// exactly that; the fix verifies and the record and report say where the versions came
/// from.
#[test]
fn a_uv_lock_decides_the_test_tools_versions() {
    let f = Fixture::new("python-uvlock");
    let (code, json) = fix_add(&f, "src/pinned/__init__.py");
    let rec = record(&f, &json);
    assert_eq!(code, Some(0), "{rec}");
    assert_eq!(json["state"], "succeeded", "{json}");
    let setup = &rec["setup"];
    assert!(
        setup["sources"][0]
            .as_str()
            .unwrap()
            .contains("uv.lock (groups tests and dev)"),
        "{setup}"
    );
    assert!(
        setup["commands"].to_string().contains("uv==0.13.9"),
        "{setup}"
    );
    assert!(
        setup["key_files"].to_string().contains("uv.lock"),
        "a change to the lock sets up again: {setup}"
    );
    let report = f.report(json["run_id"].as_str().unwrap());
    assert!(report.contains("uv.lock"), "{report}");
    let baseline = rec["verification"][0]["result"].as_str().unwrap();
    assert!(baseline.contains("test_add"), "{baseline}");
}

/// Issue 39 point 1: test dependencies only in PEP 735 `[dependency-groups] test` (with an
/// `include-group`), none in extras or requirement files: set-up installs that group (and
/// never the `docs` group, whose package exists nowhere), so the suite imports `six`.
#[test]
fn a_dependency_group_is_what_the_tests_get() {
    let f = Fixture::new("python-groups");
    let (code, json) = fix_add(&f, "src/grouped/__init__.py");
    let rec = record(&f, &json);
    assert_eq!(code, Some(0), "{rec}");
    let setup = &rec["setup"];
    assert!(
        setup["sources"][0]
            .as_str()
            .unwrap()
            .contains("[dependency-groups] test"),
        "{setup}"
    );
    let commands = setup["commands"].to_string();
    assert!(
        commands.contains("'six==1.16.0'") && !commands.contains("does-not-exist"),
        "{commands}"
    );
}

/// Issue 39 point 2: a package whose version setuptools-scm reads from a git tag. Installing
/// it runs `git describe` in the set-up checkout, inside the view; the tests check the
/// version the tag gave, and the fix verifies by detection alone.
#[test]
fn a_version_from_a_git_tag_installs_inside_the_view() {
    let f = Fixture::new("python-scm");
    super::common::git(&f.repo(), &["tag", "-a", "v1.4.0", "-m", "release 1.4.0"]);
    let (code, json) = fix_add(&f, "src/scmcalc/__init__.py");
    let rec = record(&f, &json);
    assert_eq!(code, Some(0), "{rec}");
    assert_eq!(json["state"], "succeeded", "{json}");
    let baseline = rec["verification"][0]["result"].as_str().unwrap();
    assert!(
        baseline.contains("test_add") && !baseline.contains("test_version"),
        "only the bug fails at the base: {baseline}"
    );
}

/// Issue 39 point 1 for Node: a pnpm project (a `pnpm-lock.yaml`, no pnpm on the machine).
/// Set-up installs the pnpm the lockfile needs from the npm registry into its environment
/// (on `PATH` after it, so the detected `pnpm test` runs), installs exactly what the lock
/// holds, and the fix verifies.
#[test]
fn a_pnpm_lockfile_installs_with_pnpm_from_npm() {
    let f = Fixture::new("js-pnpm");
    ignore(&f, "node_modules/\n");
    let (code, json) = fix_add_js(&f);
    let rec = record(&f, &json);
    assert_eq!(code, Some(0), "{rec}");
    let setup = &rec["setup"];
    assert_eq!(
        setup["commands"],
        json!([
            "mkdir -p \"$GIT_AGENT_ENV/pm\" && cd \"$GIT_AGENT_ENV/pm\" && echo '{\"private\": true}' > package.json && npm install --no-audit --no-fund --no-package-lock pnpm@9",
            "\"$GIT_AGENT_ENV/pm/node_modules/.bin/pnpm\" install --frozen-lockfile"
        ]),
        "{setup}"
    );
    assert!(
        setup["sources"].to_string().contains("pnpm-lock.yaml"),
        "{setup}"
    );
}

/// A JavaScript project whose own `prepare` script builds what its tests load into an
/// ignored `dist/` (koa builds its ESM entry so), with `build` as the build step.
fn prepared_js(build: &str) -> Fixture {
    let f = Fixture::new("js-dep");
    let repo = f.repo();
    let pkg = std::fs::read_to_string(repo.join("package.json")).unwrap();
    let pkg = pkg.replace(
        "\"test\": \"node --test\"",
        "\"test\": \"node --test\",\n    \"prepare\": \"node build.js\"",
    );
    std::fs::write(repo.join("package.json"), pkg).unwrap();
    std::fs::write(repo.join("build.js"), build).unwrap();
    let test = std::fs::read_to_string(repo.join("test/calc.test.js")).unwrap();
    std::fs::write(
        repo.join("test/calc.test.js"),
        test.replace("require(\"../calc.js\")", "require(\"../dist/calc.js\")"),
    )
    .unwrap();
    std::fs::write(repo.join(".gitignore"), "node_modules/\ndist/\n").unwrap();
    super::common::git(&repo, &["add", "-A"]);
    super::common::git(&repo, &["commit", "-qm", "build dist in prepare"]);
    f
}

/// What the fixture's build does: `dist/calc.js` is `calc.js` as the checkout has it.
const BUILD_DIST: &str = "const fs = require('fs');\n\
fs.mkdirSync('dist', { recursive: true });\n\
fs.writeFileSync('dist/calc.js', '// built\\n' + fs.readFileSync('calc.js', 'utf8'));\n";

/// Issue 39: npm runs a project's own `prepare` when it installs in the project; set-up
/// installs in a checkout of its own, so what `prepare` builds (an ignored `dist/`) was in
/// no worktree and the tests that load it failed at every base (koa's ESM tests). Set-up
/// now runs it in every checkout before the tests, from that checkout's code: the fix to
/// `calc.js` reaches `dist/` only that way, so a `dist/` carried from the base would fail.
#[test]
fn the_projects_prepare_builds_in_every_checkout_from_its_own_code() {
    let f = prepared_js(BUILD_DIST);
    let (code, json) = fix_add_js(&f);
    let rec = record(&f, &json);
    assert_eq!(code, Some(0), "{rec}");
    assert_eq!(json["state"], "succeeded", "{json}");
    assert_eq!(
        rec["setup"]["before_tests"],
        json!(["npm run prepare"]),
        "{rec}"
    );
    let baseline = rec["verification"][0]["result"].as_str().unwrap();
    assert!(baseline.contains("add adds two numbers"), "{baseline}");
}

/// A `prepare` that works where set-up installs but not in a checkout (it writes into
/// `node_modules`, which every checkout sees read-only) stops the run before any model turn,
/// naming the command, as an environment failure.
#[test]
fn a_prepare_that_fails_in_the_checkout_is_an_environment_failure() {
    let f = prepared_js(&format!(
        "{BUILD_DIST}fs.mkdirSync('node_modules/.cache', {{ recursive: true }});\n\
         fs.writeFileSync('node_modules/.cache/built', 'x');\n"
    ));
    let (code, json) = fix_add_js(&f);
    let rec = record(&f, &json);
    assert_ne!(code, Some(0), "{rec}");
    assert_eq!(json["state"], "environment_failed", "{json}");
    let notes = rec["notes"].to_string();
    assert!(notes.contains("`npm run prepare`"), "{notes}");
    assert_eq!(rec["turns"], 0, "{rec}");
}

/// Issue 39 point 7: a project whose pytest configuration adds a plugin's option
/// (`addopts = "--cov"`) with the plugin nowhere installed: pytest exits 4 before any test.
/// That is the environment, not a bug to fix: `environment_failed` before any model turn,
/// naming the option.
#[test]
fn a_pytest_that_cannot_start_is_an_environment_failure() {
    let f = Fixture::new("python-add");
    let cfg = f.repo().join("pyproject.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{text}addopts = \"--cov=calc\"\n")).unwrap();
    super::common::git(&f.repo(), &["commit", "-qam", "coverage"]);
    let (code, json) = fix_add(&f, "calc.py");
    assert_eq!(code, Some(6), "{json}");
    assert_eq!(json["state"], "environment_failed", "{json}");
    let rec = record(&f, &json);
    assert_eq!(rec["turns"], 0, "{rec}");
    let line = rec["verification"].to_string();
    assert!(
        line.contains("pytest stopped before running any test"),
        "{line}"
    );
    assert!(line.contains("--cov"), "{line}");
}

/// Issue 39 point 8: a project with no packaging metadata whose only declaration is a
/// `requirements-dev.txt` (here with a package the tests import): nothing test-specific
/// exists, so set-up installs the dev file, and the fix verifies by detection alone.
#[test]
fn a_requirements_dev_file_alone_is_what_the_tests_get() {
    let f = Fixture::new("python-add");
    std::fs::write(f.repo().join("requirements-dev.txt"), "six==1.16.0\n").unwrap();
    let test = f.repo().join("tests/test_calc.py");
    let text = std::fs::read_to_string(&test).unwrap();
    std::fs::write(
        &test,
        format!("import six  # from requirements-dev.txt\n{text}"),
    )
    .unwrap();
    super::common::git(&f.repo(), &["add", "-A"]);
    super::common::git(&f.repo(), &["commit", "-qm", "dev requirements"]);
    let (code, json) = fix_add(&f, "calc.py");
    let rec = record(&f, &json);
    assert_eq!(code, Some(0), "{rec}");
    let setup = &rec["setup"];
    assert!(
        setup["sources"][0]
            .as_str()
            .unwrap()
            .contains("requirements-dev.txt"),
        "{setup}"
    );
    assert!(
        setup["commands"]
            .to_string()
            .contains("-r 'requirements-dev.txt'"),
        "{setup}"
    );
}

/// Issue 39 point 8: `git agent doctor --run` does what a run does before its first model
/// turn, for real — set-up, then the baseline, in the sandbox — with no model configured
/// and nothing edited; it says where the project's code is imported from and leaves no
/// branch behind. On a project whose set-up installs a copy, it fails and says why.
#[test]
fn doctor_run_sets_up_and_runs_the_baseline_with_no_model() {
    let f = Fixture::new("python-src");
    let out = f.agent(&["doctor", "--run"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("== run: ok"), "{text}");
    assert!(
        text.contains("imports: the tests import the checkout's own code (calcsrc from src/)"),
        "{text}"
    );
    assert!(
        text.contains("before: 1 failed: `tests/test_calc.py::test_add`"),
        "{text}"
    );
    let branches = super::common::git(&f.repo(), &["branch", "--list", "agent/*"]);
    assert!(branches.trim().is_empty(), "{branches}");
    let status = super::common::git(&f.repo(), &["status", "--porcelain"]);
    assert!(status.trim().is_empty(), "nothing edited: {status}");

    // A set-up that installs a copy of the project: the check fails, saying why.
    std::fs::create_dir_all(f.repo().join(".github")).unwrap();
    std::fs::write(
        f.repo().join(".github/agent.toml"),
        "[setup]\ncommands = [\"python3 -m venv $GIT_AGENT_ENV/venv\", \"$GIT_AGENT_ENV/venv/bin/pip install --disable-pip-version-check --no-input --quiet . pytest\"]\npath = [\"$GIT_AGENT_ENV/venv/bin\"]\n[setup.env]\nVIRTUAL_ENV = \"$GIT_AGENT_ENV/venv\"\n",
    )
    .unwrap();
    super::common::git(&f.repo(), &["add", "-A"]);
    super::common::git(&f.repo(), &["commit", "-qm", "setup"]);
    let out = f.agent(&["doctor", "--run"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("== run: FAILED"), "{text}");
    assert!(
        text.contains("would not import the project's own code"),
        "{text}"
    );
}
