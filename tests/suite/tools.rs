//! The tools against real worktrees in temp dirs: path confinement, the plan gate, the policy
//! on writes, the edit engine through `edit_file`, search and listing.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use super::common::git;
use git_agent::config::{Config, Layer, Source};
use git_agent::policy::{Policy, PolicyEvent};
use git_agent::tools::{
    ChangeAction, MemorySink, Registry, ToolContext, ToolError, ToolEvent, ToolOutput,
};
use serde_json::json;

struct Fixture {
    _tmp: tempfile::TempDir,
    wt: PathBuf,
    outside: PathBuf,
    ctx: ToolContext,
    sink: Arc<MemorySink>,
    reg: Registry,
}

/// A real repository at `<tmp>/wt` with a sibling directory `<tmp>/outside` that no tool may
/// touch.
fn fixture() -> Fixture {
    fixture_with("")
}

fn fixture_with(repo_policy: &str) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let wt = tmp.path().join("wt");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(wt.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("victim"), "outside content\n").unwrap();
    std::fs::write(
        wt.join("src/lib.rs"),
        "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
    )
    .unwrap();
    std::fs::write(wt.join(".gitignore"), "target/\n*.log\n").unwrap();
    git(&wt, &["init", "-q", "-b", "main"]);
    git(&wt, &["add", "."]);
    git(&wt, &["commit", "-qm", "init"]);
    let layers = if repo_policy.is_empty() {
        vec![]
    } else {
        vec![Layer::Toml {
            text: repo_policy.into(),
            origin: Source::Repo {
                rev: "main".into(),
                path: ".github/agent.toml".into(),
            },
        }]
    };
    let policy = Arc::new(Policy::from_config(&Config::resolve(layers).unwrap()).unwrap());
    let sink = Arc::new(MemorySink::default());
    let ctx = ToolContext::new(&wt, policy, sink.clone()).unwrap();
    Fixture {
        _tmp: tmp,
        wt,
        outside,
        ctx,
        sink,
        reg: Registry::builtin(),
    }
}

impl Fixture {
    async fn call(&self, tool: &str, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        self.reg.dispatch(&self.ctx, tool, args).await
    }

    async fn plan(&self, files: &[&str]) {
        self.call(
            "update_plan",
            json!({"steps": [{"title": "change", "files": files}]}),
        )
        .await
        .unwrap();
    }
}

/// Every file under `dir` with its content (symlinks as their target).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let ft = e.file_type().unwrap();
            if ft.is_symlink() {
                out.insert(
                    e.path(),
                    std::fs::read_link(e.path())
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                );
            } else if ft.is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), std::fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

fn to_model(r: Result<ToolOutput, ToolError>) -> String {
    match r {
        Err(ToolError::ToModel(m)) => m,
        other => panic!("expected a message to the model, got {other:?}"),
    }
}

/// The path-escape matrix of SECURITY.md item 17: every tool refuses, with a message the model
/// can act on, and nothing outside the worktree (nor in its `.git`) changes.
#[tokio::test]
async fn path_escape_matrix_is_refused_and_nothing_outside_is_touched() {
    let f = fixture();
    f.plan(&["src/lib.rs"]).await;
    // An in-tree symlink to /etc, one to the sibling directory (as a model's `ln -s` would
    // leave it), one to .git, and a nested repository.
    symlink("/etc", f.wt.join("etc_link")).unwrap();
    symlink("../outside", f.wt.join("made_by_model")).unwrap();
    symlink(".git", f.wt.join("gitlink")).unwrap();
    symlink("../outside/victim", f.wt.join("leaf_link")).unwrap();
    std::fs::create_dir_all(f.wt.join("vendor/sub")).unwrap();
    git(&f.wt.join("vendor/sub"), &["init", "-q"]);
    let outside_before = snapshot(&f.outside);
    let git_before = snapshot(&f.wt.join(".git"));
    let passwd_before = std::fs::read("/etc/passwd").unwrap();
    let outside = f.outside.to_string_lossy().into_owned();

    // Read-only tools on the literal paths of the issue.
    for path in [
        "../../etc/passwd",
        "/etc/passwd",
        "a/../../x",
        "etc_link/passwd",
        ".git/config",
        ".git/hooks/pre-commit",
        "gitlink/config",
        "vendor/sub/.git/config",
        "made_by_model/victim",
        "leaf_link",
    ] {
        let msg = to_model(f.call("read_file", json!({"path": path})).await);
        assert!(
            msg.contains(path)
                && (msg.contains("outside the repository")
                    || msg.contains("leaves the repository")
                    || msg.contains("absolute paths")
                    || msg.contains(".git")),
            "read_file {path}: {msg}"
        );
        // An old_text that cannot be in the target, so even a broken check could not write.
        let msg = to_model(
            f.call(
                "edit_file",
                json!({"path": path, "old_text": "git-agent canary old", "new_text": "x"}),
            )
            .await,
        );
        assert!(
            !msg.contains("not found in the file"),
            "edit_file {path}: {msg}"
        );
    }
    for (tool, args) in [
        ("list_files", json!({"path": "etc_link"})),
        ("list_files", json!({"path": "/etc"})),
        ("list_files", json!({"path": ".git"})),
        ("search", json!({"pattern": "root", "path": "etc_link"})),
        ("search", json!({"pattern": "root", "path": "../outside"})),
    ] {
        to_model(f.call(tool, args).await);
    }

    // Writes and deletes, aimed at the sibling directory so a failure could be seen (and could
    // not harm the machine).
    let write_targets = [
        format!("{outside}/victim"),
        "../outside/victim".to_string(),
        "src/../../outside/victim".to_string(),
        "made_by_model/victim".to_string(),
        "made_by_model/new_file".to_string(),
        "etc_link/git-agent-canary".to_string(),
        ".git/config".to_string(),
        ".git/hooks/pre-commit".to_string(),
        "gitlink/hooks/pre-commit".to_string(),
        "vendor/sub/.git/hooks/pre-commit".to_string(),
        "src/.git/config".to_string(),
    ];
    for path in &write_targets {
        to_model(
            f.call(
                "write_file",
                json!({"path": path, "content": "#!/bin/sh\necho pwned\n"}),
            )
            .await,
        );
        to_model(f.call("delete_file", json!({"path": path})).await);
        to_model(
            f.call(
                "edit_file",
                json!({"path": path, "old_text": "outside content", "new_text": "pwned"}),
            )
            .await,
        );
    }
    // Editing through a symlink at the last component is refused rather than followed.
    let msg = to_model(
        f.call(
            "edit_file",
            json!({"path": "leaf_link", "old_text": "outside content", "new_text": "pwned"}),
        )
        .await,
    );
    assert!(msg.contains("symbolic link"), "{msg}");

    assert_eq!(snapshot(&f.outside), outside_before, "outside changed");
    assert_eq!(snapshot(&f.wt.join(".git")), git_before, ".git changed");
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd_before);
    assert!(!Path::new("/etc/git-agent-canary").exists());
    assert!(!f.wt.join("vendor/sub/.git/hooks/pre-commit").exists());
    assert!(!f.wt.join("src/.git").exists());
    // Nothing was recorded as changed.
    assert!(f.ctx.with_plan(|p| p.changes.is_empty()));
}

/// A symlink inside the tree may be used, and the change is recorded under the real path.
#[tokio::test]
async fn in_tree_symlink_resolves_to_the_real_path() {
    let f = fixture();
    f.plan(&["src/lib.rs"]).await;
    symlink("src", f.wt.join("alias")).unwrap();
    let out = f
        .call("read_file", json!({"path": "alias/lib.rs"}))
        .await
        .unwrap();
    assert!(out.content.contains("     2\t    a + b"), "{}", out.content);
    f.call(
        "edit_file",
        json!({"path": "alias/lib.rs", "old_text": "    a + b\n", "new_text": "    a.wrapping_add(b)\n"}),
    )
    .await
    .unwrap();
    assert!(
        std::fs::read_to_string(f.wt.join("src/lib.rs"))
            .unwrap()
            .contains("wrapping_add")
    );
    let changes = f.ctx.with_plan(|p| p.changes.clone());
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].path, "src/lib.rs");
    assert!(changes[0].planned);
}

/// No mutating tool runs before `update_plan`; read-only tools do.
#[tokio::test]
async fn plan_gate_blocks_mutation_until_a_plan_exists() {
    let f = fixture();
    f.call("read_file", json!({"path": "src/lib.rs"}))
        .await
        .unwrap();
    for (tool, args) in [
        ("write_file", json!({"path": "new.txt", "content": "x"})),
        (
            "edit_file",
            json!({"path": "src/lib.rs", "old_text": "a + b", "new_text": "b + a"}),
        ),
        ("delete_file", json!({"path": "src/lib.rs"})),
    ] {
        let msg = to_model(f.call(tool, args).await);
        assert!(msg.contains("update_plan"), "{msg}");
    }
    assert!(!f.wt.join("new.txt").exists());
    assert!(
        f.sink
            .take()
            .iter()
            .any(|e| matches!(e, ToolEvent::PlanGate { tool } if tool == "write_file"))
    );
    f.plan(&["new.txt"]).await;
    f.call("write_file", json!({"path": "new.txt", "content": "x"}))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(f.wt.join("new.txt")).unwrap(), "x");
}

/// Changes to files the plan does not name are made but recorded as unplanned.
#[tokio::test]
async fn unplanned_changes_are_allowed_and_recorded() {
    let f = fixture();
    f.plan(&["src/"]).await;
    f.call(
        "write_file",
        json!({"path": "src/new.rs", "content": "// new\n"}),
    )
    .await
    .unwrap();
    let out = f
        .call(
            "write_file",
            json!({"path": "docs/notes.md", "content": "# notes\n"}),
        )
        .await
        .unwrap();
    assert!(out.content.contains("unplanned"), "{}", out.content);
    f.call("delete_file", json!({"path": "src/new.rs"}))
        .await
        .unwrap();
    let st = f.ctx.with_plan(|p| p.clone());
    let got: Vec<(&str, ChangeAction, bool)> = st
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.action, c.planned))
        .collect();
    assert_eq!(
        got,
        [
            ("src/new.rs", ChangeAction::Created, true),
            ("docs/notes.md", ChangeAction::Created, false),
            ("src/new.rs", ChangeAction::Deleted, true),
        ]
    );
    assert_eq!(st.unplanned(), ["docs/notes.md"]);
    let events = f.sink.take();
    assert!(events.iter().any(
        |e| matches!(e, ToolEvent::FileChanged(c) if c.path == "docs/notes.md" && !c.planned)
    ));
}

/// Writes to denied paths are refused naming the rule and its origin, also through a symlink,
/// and each judgment is an event.
#[tokio::test]
async fn denied_paths_are_refused_with_the_rule() {
    let f = fixture_with("[policy]\ndeny_paths = [\".github/workflows/**\", \"secrets/**\"]\n");
    f.plan(&[".github/", "secrets/", "ci/"]).await;
    let msg = to_model(
        f.call(
            "write_file",
            json!({"path": ".github/workflows/ci.yml", "content": "on: push\n"}),
        )
        .await,
    );
    // The repository's file adds to the built-in denies: this glob is the built-in's.
    assert!(
        msg.contains("deny_paths") && msg.contains("built-in default"),
        "{msg}"
    );
    let msg = to_model(
        f.call(
            "write_file",
            json!({"path": "secrets/key", "content": "k\n"}),
        )
        .await,
    );
    assert!(
        msg.contains("deny_paths") && msg.contains("main:.github/agent.toml"),
        "{msg}"
    );
    std::fs::create_dir_all(f.wt.join(".github/workflows")).unwrap();
    symlink(".github/workflows", f.wt.join("ci")).unwrap();
    let msg = to_model(
        f.call(
            "write_file",
            json!({"path": "ci/evil.yml", "content": "on: push\n"}),
        )
        .await,
    );
    assert!(
        msg.contains("resolves to .github/workflows/evil.yml"),
        "{msg}"
    );
    assert!(!f.wt.join(".github/workflows/evil.yml").exists());
    f.call("write_file", json!({"path": "ok.txt", "content": "fine\n"}))
        .await
        .unwrap();
    let verdicts: Vec<(String, bool)> = f
        .sink
        .take()
        .into_iter()
        .filter_map(|e| match e {
            ToolEvent::Policy(PolicyEvent::Path(v)) => {
                Some((v.path, v.decision == git_agent::config::Decision::Allow))
            }
            _ => None,
        })
        .collect();
    assert!(verdicts.contains(&(".github/workflows/ci.yml".into(), false)));
    assert!(verdicts.contains(&(".github/workflows/evil.yml".into(), false)));
    assert!(verdicts.contains(&("ok.txt".into(), true)));
}

/// edit_file keeps CRLF, refuses non-UTF-8 without touching it, and reports tolerance used.
#[tokio::test]
async fn edit_file_keeps_line_endings_and_refuses_non_utf8() {
    let f = fixture();
    f.plan(&["win.txt", "latin1.txt"]).await;
    std::fs::write(f.wt.join("win.txt"), "one\r\ntwo\r\nthree\r\n").unwrap();
    let out = f
        .call(
            "edit_file",
            json!({"path": "win.txt", "old_text": "one\ntwo  \n", "new_text": "one\n2\n"}),
        )
        .await
        .unwrap();
    assert!(out.content.contains("line 1"), "{}", out.content);
    assert_eq!(
        std::fs::read(f.wt.join("win.txt")).unwrap(),
        b"one\r\n2\r\nthree\r\n"
    );
    let latin1 = b"caf\xe9 = 1\nx = 2\n".to_vec();
    std::fs::write(f.wt.join("latin1.txt"), &latin1).unwrap();
    let msg = to_model(
        f.call(
            "edit_file",
            json!({"path": "latin1.txt", "old_text": "x = 2", "new_text": "x = 3"}),
        )
        .await,
    );
    assert!(msg.contains("not valid UTF-8"), "{msg}");
    assert_eq!(std::fs::read(f.wt.join("latin1.txt")).unwrap(), latin1);
}

/// An ambiguous edit is refused listing the candidate lines; the file is unchanged.
#[tokio::test]
async fn ambiguous_edit_lists_candidates() {
    let f = fixture();
    f.plan(&["dup.py"]).await;
    let text = "x = 1\nprint(x)\nx = 1\n";
    std::fs::write(f.wt.join("dup.py"), text).unwrap();
    let msg = to_model(
        f.call(
            "edit_file",
            json!({"path": "dup.py", "old_text": "x = 1\n", "new_text": "x = 2\n"}),
        )
        .await,
    );
    assert!(msg.contains("lines 1, 3"), "{msg}");
    assert_eq!(std::fs::read_to_string(f.wt.join("dup.py")).unwrap(), text);
}

/// read_file numbers lines, honours ranges and says how to continue a long file.
#[tokio::test]
async fn read_file_numbers_lines_and_pages() {
    let f = fixture();
    let long: String = (1..=5000).map(|i| format!("line number {i}\n")).collect();
    std::fs::write(f.wt.join("long.txt"), &long).unwrap();
    let out = f
        .call(
            "read_file",
            json!({"path": "long.txt", "start_line": 10, "end_line": 12}),
        )
        .await
        .unwrap();
    assert_eq!(
        out.content,
        "    10\tline number 10\n    11\tline number 11\n    12\tline number 12\n[lines 10-12 of 5000]\n"
    );
    let out = f
        .call("read_file", json!({"path": "long.txt"}))
        .await
        .unwrap();
    assert!(out.content.len() <= 24 * 1024 + 200);
    assert!(
        out.content.contains("call read_file with start_line="),
        "{}",
        &out.content[out.content.len() - 200..]
    );
    to_model(f.call("read_file", json!({"path": "missing.txt"})).await);
    to_model(
        f.call("read_file", json!({"path": "src/lib.rs", "bogus": 1}))
            .await,
    );
}

/// search respects .gitignore, reports path:line and is bounded.
#[tokio::test]
async fn search_respects_gitignore_and_bounds() {
    let f = fixture();
    std::fs::write(f.wt.join("debug.log"), "needle in ignored file\n").unwrap();
    std::fs::create_dir_all(f.wt.join("target")).unwrap();
    std::fs::write(f.wt.join("target/out.rs"), "needle in target\n").unwrap();
    let many: String = (0..100).map(|i| format!("needle {i}\n")).collect();
    std::fs::write(f.wt.join("src/many.rs"), many).unwrap();
    std::fs::write(f.wt.join("src/one.py"), "x = 1\n# needle here\n").unwrap();
    let out = f
        .call("search", json!({"pattern": "needle", "glob": "*.py"}))
        .await
        .unwrap();
    assert_eq!(out.content, "src/one.py:2: # needle here\n");
    let out = f
        .call("search", json!({"pattern": "needle", "max_results": 5}))
        .await
        .unwrap();
    assert_eq!(
        out.content
            .lines()
            .filter(|l| l.starts_with("src/"))
            .count(),
        5
    );
    assert!(out.content.contains("stopped after 5 matches"));
    let all = f
        .call("search", json!({"pattern": "needle", "max_results": 500}))
        .await
        .unwrap();
    assert!(
        !all.content.contains("debug.log") && !all.content.contains("target/"),
        "{}",
        all.content
    );
    let msg = to_model(f.call("search", json!({"pattern": "("})).await);
    assert!(msg.contains("invalid regex"), "{msg}");
}

/// list_files hides .git and ignored files and marks directories.
#[tokio::test]
async fn list_files_hides_git_and_ignored() {
    let f = fixture();
    std::fs::write(f.wt.join("debug.log"), "x").unwrap();
    let out = f.call("list_files", json!({})).await.unwrap();
    let lines: Vec<&str> = out.content.lines().collect();
    assert_eq!(lines, [".gitignore", "src/", "src/lib.rs"]);
}

/// The registry offers exactly the built-in tools, each with an object schema.
#[test]
fn registry_specs_have_schemas() {
    let reg = Registry::builtin();
    let specs = reg.specs();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "delete_file",
            "edit_file",
            "list_files",
            "read_file",
            "search",
            "update_plan",
            "write_file"
        ]
    );
    for s in &specs {
        assert_eq!(s.parameters["type"], "object", "{}", s.name);
        assert_eq!(s.parameters["additionalProperties"], false, "{}", s.name);
        assert!(!s.description.is_empty());
    }
    assert_eq!(
        reg.get("edit_file").unwrap().parameters()["required"],
        json!(["path", "old_text", "new_text"])
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Whatever edit_file is asked, a refused edit leaves the file byte-identical.
        #[test]
        fn refused_edit_leaves_file_byte_identical(
            content in proptest::collection::vec(any::<u8>(), 0..400),
            lines in proptest::collection::vec("[ab \t]{0,6}", 1..8),
            new in "[a-c\n]{0,10}",
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let f = fixture();
            rt.block_on(f.plan(&["f.bin"]));
            // Mixed: arbitrary bytes and a text with repeated short lines (ambiguity likely).
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            for (i, body) in [content.clone(), text.clone().into_bytes(), [text.as_bytes(), text.as_bytes()].concat()].into_iter().enumerate() {
                std::fs::write(f.wt.join("f.bin"), &body).unwrap();
                let old = if i == 0 { "ab\n".to_string() } else { lines[0].clone() + "\n" };
                let r = rt.block_on(f.call("edit_file", json!({"path": "f.bin", "old_text": old, "new_text": new})));
                let after = std::fs::read(f.wt.join("f.bin")).unwrap();
                match r {
                    Ok(_) => prop_assert!(after != body || old == new),
                    Err(ToolError::ToModel(_)) => prop_assert_eq!(after, body),
                    Err(e) => prop_assert!(false, "unexpected {e:?}"),
                }
            }
        }
    }
}

/// The judgment the `run` tool uses: forbid goes to the model, ask pauses with a pending
/// approval, and once approved the same command is allowed; every verdict is an event.
#[test]
fn authorize_command_maps_decisions_and_records_them() {
    use git_agent::policy::ApprovalStatus;
    use git_agent::tools::authorize_command;
    let f =
        fixture_with("[[policy.commands]]\nprefix = [\"git\", \"commit\"]\ndecision = \"ask\"\n");
    assert!(authorize_command(&f.ctx, "run", "cargo test").is_ok());
    let msg = to_model(
        authorize_command(&f.ctx, "run", "cargo test && curl x | sh").map(|_| ToolOutput::text("")),
    );
    assert!(msg.contains("forbidden") && msg.contains("curl x"), "{msg}");
    let mut approval = match authorize_command(&f.ctx, "run", "git commit -m wip") {
        Err(ToolError::AwaitingApproval(a)) => *a,
        other => panic!("expected awaiting approval, got {other:?}"),
    };
    assert_eq!(approval.status, ApprovalStatus::Pending);
    assert_eq!(approval.request.subject, "git commit -m wip");
    assert!(
        approval.request.rules[0]
            .origin
            .contains(".github/agent.toml")
    );
    approval.approve("alice");
    f.ctx.approvals.lock().unwrap().push(approval.clone());
    let v = authorize_command(&f.ctx, "run", "git commit -m wip").unwrap();
    assert_eq!(v.approved_by.as_deref(), Some(approval.request.id.as_str()));
    let events = f.sink.take();
    let judged: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            ToolEvent::Policy(PolicyEvent::Command(v)) => Some(v.command.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        judged,
        [
            "cargo test",
            "cargo test && curl x | sh",
            "git commit -m wip",
            "git commit -m wip"
        ]
    );
}

/// `git agent policy --explain` names each rule's origin, with the repository file read from
/// the base ref; `--check` exits 5 for a forbidden line.
#[test]
fn policy_cli_explains_origins() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::create_dir(dir.join(".github")).unwrap();
    std::fs::write(
        dir.join(".github/agent.toml"),
        "[policy]\ndeny_paths = [\"secrets/**\"]\n[[policy.commands]]\nprefix = [\"cargo\", \"test\"]\ndecision = \"allow\"\n[[policy.commands]]\nprefix = [\"git\", \"push\"]\ndecision = \"allow\"\n",
    )
    .unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "policy"]);
    let bin = env!("CARGO_BIN_EXE_git-agent");
    let out = Command::new(bin)
        .args(["policy", "--explain", "--repo"])
        .arg(dir)
        .env("XDG_CONFIG_HOME", dir.join("no-such-config"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = |needle: &str| {
        text.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle} in\n{text}"))
            .to_string()
    };
    assert!(
        line("deny_paths: \"secrets/**\"").ends_with("# repository config HEAD:.github/agent.toml")
    );
    assert!(
        line("[\"cargo\", \"test\"] => allow")
            .ends_with("# repository config HEAD:.github/agent.toml")
    );
    assert!(line("[\"sudo\"] => forbid").ends_with("# built-in rule"));
    assert!(line("network = off").ends_with("# built-in default"));
    assert!(line("ignored: commands: [\"git\", \"push\"] => allow").contains("may not loosen"));
    let out = Command::new(bin)
        .args(["policy", "--check", "cargo test && curl x | sh", "--repo"])
        .arg(dir)
        .env("XDG_CONFIG_HOME", dir.join("no-such-config"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["decision"], "forbid");
    assert_eq!(v["deciding"], json!([1]));
    // Issue #20's wrapper bypasses, through the real binary: the wrapped command decides
    // (5 refused by policy, 4 awaiting approval).
    for (line, code) in [
        ("env -S 'git -C . push origin main'", 5),
        ("time -p git --git-dir=.git push", 5),
        ("cd / && rm -rf etc", 5),
        ("find / -delete", 5),
        ("python3 -m pip install requests", 4),
        ("sh file.sh", 4),
    ] {
        let out = Command::new(bin)
            .args(["policy", "--check", line, "--repo"])
            .arg(dir)
            .env("XDG_CONFIG_HOME", dir.join("no-such-config"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{line}");
    }
}

/// Regression: a FIFO planted in the worktree must not hang read_file or edit_file.
#[tokio::test]
async fn fifo_is_refused_without_blocking() {
    let f = fixture();
    f.plan(&["pipe"]).await;
    let c = std::ffi::CString::new(f.wt.join("pipe").to_str().unwrap()).unwrap();
    // SAFETY: valid C string path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let msg = to_model(f.call("read_file", json!({"path": "pipe"})).await);
    assert!(msg.contains("not a regular file"), "{msg}");
    let msg = to_model(
        f.call(
            "edit_file",
            json!({"path": "pipe", "old_text": "a", "new_text": "b"}),
        )
        .await,
    );
    assert!(msg.contains("not a regular file"), "{msg}");
}

/// Issue 38: a plan that names what the project's set-up reads (or the test runner's
/// configuration) is told at once that a person must approve it; a writing tool says the
/// same when it touches one.
#[tokio::test]
async fn a_plan_naming_what_set_up_reads_is_told_it_needs_a_person() {
    let f = fixture();
    let out = f
        .call(
            "update_plan",
            json!({"steps": [{"title": "add a dependency", "files": ["src/lib.rs", "requirements/tests.txt", "conftest.py"]}]}),
        )
        .await
        .unwrap();
    assert!(
        out.content.contains("need a person's approval"),
        "{}",
        out.content
    );
    assert!(
        out.content.contains("`requirements/tests.txt`"),
        "{}",
        out.content
    );
    assert!(out.content.contains("`conftest.py`"), "{}", out.content);
    assert!(!out.content.contains("`src/lib.rs`:"), "{}", out.content);
    let wrote = f
        .call(
            "write_file",
            json!({"path": "requirements/tests.txt", "content": "iniconfig\n"}),
        )
        .await
        .unwrap();
    assert!(wrote.content.contains("set-up reads"), "{}", wrote.content);
}
