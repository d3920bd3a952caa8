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
/// model writes there with a tool is not what the tests see (the mount covers it), and the
/// fix verifies.
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

/// A changed lockfile (here: a manifest gains a requirement) sets the environment up again
/// on the changed tree, as its own step, and the report says so.
#[test]
fn a_changed_manifest_sets_up_again() {
    let f = Fixture::new("python-src");
    let pyproject = std::fs::read_to_string(f.repo().join("pyproject.toml")).unwrap();
    let changed = pyproject.replace("test = [\"pytest\"]", "test = [\"pytest\", \"iniconfig\"]");
    let script = f.script(&[
        plan(&["src/calcsrc/__init__.py", "pyproject.toml"]),
        write("pyproject.toml", &changed),
        edit(
            "src/calcsrc/__init__.py",
            "def add(a, b):\n    return a - b",
            "def add(a, b):\n    return a + b",
        ),
        finish(),
    ]);
    let (_code, json) = f.fix(&script, &["fix add"], &[]);
    let rec = record(&f, &json);
    let runs = rec["setup"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{rec}");
    assert!(
        runs[1]["reason"]
            .as_str()
            .unwrap()
            .contains("pyproject.toml"),
        "{rec}"
    );
    assert_ne!(runs[0]["key"], runs[1]["key"]);
    let report = f.report(json["run_id"].as_str().unwrap());
    assert!(report.contains("set up again"), "{report}");
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
