//! The git engine against real repositories, checked with the `git` CLI.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::common::{copy_dir, git};
use git_agent::workspace::{
    CommitRequest, Provenance, PushCredentials, Repo, WorktreeOptions, WorktreeRequest,
};

fn write(dir: &Path, rela: &str, content: &[u8]) {
    let p = dir.join(rela);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

/// A repository with a few files and one commit on `main`.
fn sample_repo(dir: &Path) {
    git(dir, &["init", "-q"]);
    write(dir, "README.md", b"# sample\n");
    write(
        dir,
        "src/lib.rs",
        b"pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n",
    );
    write(dir, "src/util.rs", b"pub fn one() -> i32 { 1 }\n");
    write(dir, "old_name.txt", b"to be renamed\nline two\n");
    write(dir, "delete_me.txt", b"bye\n");
    write(dir, "script.sh", b"#!/bin/sh\necho hi\n");
    write(dir, ".gitignore", b"target/\n*.log\n");
    write(dir, "data.bin", &[0, 1, 2, 3, 255, 254]);
    std::os::unix::fs::symlink("src/lib.rs", dir.join("link_to_lib")).unwrap();
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "initial"]);
}

/// The repository at or above `dir`, with a state directory of its own for run worktrees
/// (kept while the returned guard lives).
fn open(dir: impl AsRef<Path>) -> (Repo, tempfile::TempDir) {
    let state = super::common::tempdir();
    let repo = Repo::discover(dir).unwrap().with_state_dir(state.path());
    (repo, state)
}

fn request(run: &str, branch: &str) -> WorktreeRequest {
    WorktreeRequest {
        run_id: run.into(),
        branch: branch.into(),
        base: "main".into(),
    }
}

fn commit_req(subject: &str) -> CommitRequest {
    CommitRequest {
        subject: subject.into(),
        body: "Body text.".into(),
        trailers: vec![
            ("Agent-Run".into(), "run1".into()),
            ("Agent-Step".into(), "1".into()),
            ("Co-authored-by".into(), "Ada <ada@example.com>".into()),
        ],
        author_name: "git-agent".into(),
        author_email: "git-agent@example.com".into(),
        time: Some(1_700_000_000),
    }
}

/// Apply the same matrix of changes to a directory.
fn apply_matrix(dir: &Path) {
    // modify
    write(
        dir,
        "src/lib.rs",
        b"pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
    );
    // add in a new nested directory
    write(dir, "src/deep/nested/new.rs", b"pub fn new() {}\n");
    // delete
    std::fs::remove_file(dir.join("delete_me.txt")).unwrap();
    // rename
    std::fs::rename(dir.join("old_name.txt"), dir.join("new_name.txt")).unwrap();
    // chmod +x
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("script.sh");
    let mut perm = std::fs::metadata(&p).unwrap().permissions();
    perm.set_mode(0o755);
    std::fs::set_permissions(&p, perm).unwrap();
    // new symlink (stored as a link, target outside the tree never followed)
    std::os::unix::fs::symlink("/etc/passwd", dir.join("outside_link")).unwrap();
    // retarget an existing symlink
    std::fs::remove_file(dir.join("link_to_lib")).unwrap();
    std::os::unix::fs::symlink("src/util.rs", dir.join("link_to_lib")).unwrap();
    // binary
    write(dir, "data.bin", &[9, 0, 8, 0, 7, 200, 201]);
    write(dir, "new.bin", &[0, 0, 0, 1]);
    // ignored files
    write(dir, "target/debug/out", b"ignored\n");
    write(dir, "build.log", b"ignored\n");
    // CRLF file under text=auto
    write(dir, ".gitattributes", b"*.txt text=auto\n");
    write(dir, "windows.txt", b"line one\r\nline two\r\n");
}

fn tree_of(dir: &Path, rev: &str) -> String {
    git(dir, &["rev-parse", &format!("{rev}^{{tree}}")])
        .trim()
        .to_string()
}

/// Our commit of a matrix of changes equals what `git add -A && git commit` makes in a copy.
#[test]
fn commit_matches_git_add_all_for_a_matrix_of_changes() {
    let tmp = super::common::tempdir();
    let main = tmp.path().join("repo");
    std::fs::create_dir(&main).unwrap();
    sample_repo(&main);

    // Reference: plain git in a copy.
    let reference = tmp.path().join("reference");
    copy_dir(&main, &reference);
    apply_matrix(&reference);
    git(&reference, &["add", "-A"]);
    git(&reference, &["commit", "-qm", "reference"]);

    // Ours: in a run worktree.
    let (repo, _state) = open(main.join("src"));
    let (wt, prov) = repo
        .create_worktree(&request("run1", "agent/run1"), WorktreeOptions::default())
        .unwrap();
    assert_eq!(prov, Provenance::Fresh { discarded: 0 });
    assert_eq!(wt.path(), repo.worktrees_dir().unwrap().join("run1"));
    apply_matrix(wt.path());
    assert!(wt.is_dirty().unwrap());
    let id = wt
        .commit_all(&commit_req("Fix add"))
        .unwrap()
        .expect("a commit");
    assert_eq!(
        wt.changed_paths().unwrap(),
        Vec::<String>::new(),
        "index and work tree agree after commit"
    );

    assert_eq!(tree_of(&main, &id.to_string()), tree_of(&reference, "HEAD"));
    git(&main, &["fsck", "--strict", "--no-progress"]);

    // Trailers and identity.
    let msg = git(&main, &["log", "-1", "--format=%B", &id.to_string()]);
    assert!(msg.contains("Agent-Run: run1\n"), "{msg}");
    assert!(
        msg.contains("Co-authored-by: Ada <ada@example.com>"),
        "{msg}"
    );
    let trailers = git(
        &main,
        &[
            "log",
            "-1",
            "--format=%(trailers:key=Agent-Step,valueonly)",
            &id.to_string(),
        ],
    );
    assert_eq!(trailers.trim(), "1");
    assert_eq!(
        git(&main, &["log", "-1", "--format=%an <%ae>", "agent/run1"]).trim(),
        "git-agent <git-agent@example.com>"
    );
    // Git agrees the worktree is clean.
    assert_eq!(git(wt.path(), &["status", "--porcelain"]), "");
    // Nothing to commit the second time.
    assert_eq!(wt.commit_all(&commit_req("again")).unwrap(), None);
}

/// An existing branch is refused unless resuming; resuming reopens the same worktree.
#[test]
fn existing_branch_is_refused_unless_resuming() {
    let tmp = super::common::tempdir();
    sample_repo(tmp.path());
    let (repo, _state) = open(tmp.path());
    git(tmp.path(), &["branch", "agent/taken"]);
    let err = repo
        .create_worktree(&request("r1", "agent/taken"), WorktreeOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("agent/taken"), "{err}");

    let (wt, _) = repo
        .create_worktree(&request("r2", "agent/r2"), WorktreeOptions::default())
        .unwrap();
    write(wt.path(), "x.txt", b"x\n");
    wt.commit_all(&commit_req("x")).unwrap().unwrap();
    let (again, prov) = repo
        .create_worktree(
            &request("r2", "agent/r2"),
            WorktreeOptions {
                resume: true,
                warm: false,
            },
        )
        .unwrap();
    assert_eq!(prov, Provenance::Reopened);
    assert!(again.path().join("x.txt").exists());
    // Invalid names never reach git.
    for bad in ["-x", "a b", "a..b", "x.lock", ""] {
        assert!(
            repo.create_worktree(&request("r3", bad), WorktreeOptions::default())
                .is_err(),
            "{bad}"
        );
    }
    assert!(
        repo.create_worktree(&request("../escape", "agent/e"), WorktreeOptions::default())
            .is_err()
    );
}

/// A pooled worktree reaches the next run with nothing git does not track: an ignored
/// `.pyc` of a "fixed" module or a `node_modules/.bin/node` shim that one run's model wrote
/// would otherwise decide the next run's baseline (issue 18).
#[test]
fn a_pooled_worktree_keeps_no_ignored_file_of_the_run_before() {
    let tmp = super::common::tempdir();
    sample_repo(tmp.path());
    write(
        tmp.path(),
        ".gitignore",
        b"target/\n*.log\n__pycache__/\nnode_modules/\n",
    );
    git(tmp.path(), &["add", ".gitignore"]);
    git(tmp.path(), &["commit", "-qm", "ignore caches"]);
    let (repo, _state) = open(tmp.path());
    let (wt, _) = repo
        .create_worktree(
            &request("hostile", "agent/hostile"),
            WorktreeOptions::default(),
        )
        .unwrap();
    write(
        wt.path(),
        "src/__pycache__/util.cpython-311.pyc",
        b"\x00poison",
    );
    write(
        wt.path(),
        "node_modules/.bin/node",
        b"#!/bin/sh\necho 'ok 1'\n",
    );
    write(wt.path(), "run.log", b"log\n");
    write(wt.path(), "junk/untracked.txt", b"junk\n");
    std::os::unix::fs::symlink("/etc", wt.path().join("src/etc-link")).unwrap();
    wt.release_to_pool().unwrap();

    let (wt2, prov) = repo
        .create_worktree(
            &request("next", "agent/next"),
            WorktreeOptions {
                resume: false,
                warm: true,
            },
        )
        .unwrap();
    match prov {
        Provenance::Warm {
            leftovers_removed, ..
        } => assert_eq!(leftovers_removed, 3, "__pycache__, node_modules, run.log"),
        other => panic!("expected warm reuse, got {other:?}"),
    }
    for gone in [
        "src/__pycache__",
        "node_modules",
        "run.log",
        "junk",
        "src/etc-link",
    ] {
        assert!(
            std::fs::symlink_metadata(wt2.path().join(gone)).is_err(),
            "{gone} survived the pool"
        );
    }
    // Exactly what a fresh checkout would hold: nothing ignored, nothing untracked.
    assert_eq!(git(wt2.path(), &["status", "--porcelain", "--ignored"]), "");
    assert_eq!(tree_of(wt2.path(), "HEAD"), tree_of(tmp.path(), "main"));
    assert!(wt2.path().join("src/util.rs").exists());
}

/// Warm reuse resets a pooled worktree to the new base touching only what differs, and the
/// result is indistinguishable (for git) from a fresh checkout.
#[test]
fn warm_pool_reuse_resets_only_changed_files() {
    let tmp = super::common::tempdir();
    sample_repo(tmp.path());
    let (repo, _state) = open(tmp.path());
    let (wt, _) = repo
        .create_worktree(&request("first", "agent/first"), WorktreeOptions::default())
        .unwrap();
    apply_matrix(wt.path());
    wt.commit_all(&commit_req("first run")).unwrap().unwrap();
    // Leave some uncommitted junk too: a failed run might.
    write(wt.path(), "junk/untracked.txt", b"junk\n");
    write(wt.path(), "README.md", b"dirty\n");
    let untouched = wt.path().join("src/util.rs");
    let before = std::fs::metadata(&untouched).unwrap().modified().unwrap();
    let pooled = wt.release_to_pool().unwrap();
    assert!(pooled.starts_with(repo.pool_dir().unwrap()));

    // main moves on meanwhile.
    write(tmp.path(), "README.md", b"# sample v2\n");
    git(tmp.path(), &["commit", "-qam", "v2"]);

    let (wt2, prov) = repo
        .create_worktree(
            &request("second", "agent/second"),
            WorktreeOptions {
                resume: false,
                warm: true,
            },
        )
        .unwrap();
    match prov {
        Provenance::Warm { files_changed, .. } => assert!(files_changed > 0 && files_changed < 30),
        other => panic!("expected warm reuse, got {other:?}"),
    }
    assert_eq!(wt2.path(), repo.worktrees_dir().unwrap().join("second"));
    // Clean per git, on the new branch, at main's tree.
    assert_eq!(git(wt2.path(), &["status", "--porcelain"]), "");
    assert_eq!(
        git(wt2.path(), &["symbolic-ref", "HEAD"]).trim(),
        "refs/heads/agent/second"
    );
    assert_eq!(tree_of(wt2.path(), "HEAD"), tree_of(tmp.path(), "main"));
    assert_eq!(
        std::fs::read(wt2.path().join("README.md")).unwrap(),
        b"# sample v2\n"
    );
    assert!(!wt2.path().join("junk/untracked.txt").exists());
    assert!(
        !wt2.path().join("src/deep").exists(),
        "emptied dirs removed"
    );
    assert!(wt2.path().join("delete_me.txt").exists());
    // Ignored output of the run before is gone: a poisoned cache must not
    // reach the next run (trusted build outputs come from set-up instead).
    assert!(!wt2.path().join("target/debug/out").exists());
    // An unchanged file was not rewritten.
    let after = std::fs::metadata(wt2.path().join("src/util.rs"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after);
    // git sees the worktree at its new place.
    let list = git(tmp.path(), &["worktree", "list", "--porcelain"]);
    assert!(
        list.contains(&format!("worktree {}", wt2.path().display())),
        "{list}"
    );
    // And it still commits correctly.
    write(wt2.path(), "z.txt", b"z\n");
    let id = wt2.commit_all(&commit_req("z")).unwrap().unwrap();
    git(tmp.path(), &["fsck", "--strict", "--no-progress"]);
    let files = git(
        tmp.path(),
        &["show", "--name-only", "--format=", &id.to_string()],
    );
    assert_eq!(files.trim(), "z.txt");
}

/// Rolling back to a checkpoint restores its tree and branch exactly.
#[test]
fn rollback_to_a_checkpoint() {
    let tmp = super::common::tempdir();
    sample_repo(tmp.path());
    let (repo, _state) = open(tmp.path());
    let (wt, _) = repo
        .create_worktree(&request("rb", "agent/rb"), WorktreeOptions::default())
        .unwrap();
    write(wt.path(), "step1.txt", b"one\n");
    let c1 = wt.commit_all(&commit_req("step 1")).unwrap().unwrap();
    apply_matrix(wt.path());
    wt.commit_all(&commit_req("step 2")).unwrap().unwrap();
    write(wt.path(), "uncommitted.txt", b"u\n");
    wt.rollback_to(c1).unwrap();
    assert_eq!(wt.head().unwrap(), c1);
    assert_eq!(git(wt.path(), &["status", "--porcelain"]), "");
    assert_eq!(
        tree_of(wt.path(), "HEAD"),
        tree_of(tmp.path(), &c1.to_string())
    );
    assert!(wt.path().join("delete_me.txt").exists());
    assert!(!wt.path().join("new_name.txt").exists());
    assert!(!wt.path().join("uncommitted.txt").exists());
}

/// The diff against the base lists each file with the right counts, and never runs an
/// external diff program.
#[test]
fn diff_and_diffstat_against_base() {
    let tmp = super::common::tempdir();
    sample_repo(tmp.path());
    let (repo, _state) = open(tmp.path());
    let (wt, _) = repo
        .create_worktree(&request("d", "agent/d"), WorktreeOptions::default())
        .unwrap();
    apply_matrix(wt.path());
    let head = wt.commit_all(&commit_req("m")).unwrap().unwrap();
    let diff = repo.diff(wt.base(), head).unwrap();
    let lib = diff.files.iter().find(|f| f.path == "src/lib.rs").unwrap();
    assert_eq!((lib.additions, lib.deletions), (1, 1));
    assert!(
        lib.patch.contains("-    a - b\n+    a + b\n"),
        "{}",
        lib.patch
    );
    assert!(diff.files.iter().any(|f| f.path == "data.bin" && f.binary));
    // Same numbers as git's own numstat for text files.
    let numstat = git(
        tmp.path(),
        &[
            "diff",
            "--no-renames",
            "--numstat",
            &wt.base().to_string(),
            &head.to_string(),
        ],
    );
    for line in numstat.lines() {
        let mut parts = line.split('\t');
        let (a, d, path) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let ours = diff.files.iter().find(|f| f.path == path).unwrap();
        if a == "-" {
            assert!(ours.binary, "{path}");
        } else {
            assert_eq!(ours.additions.to_string(), a, "{path}");
            assert_eq!(ours.deletions.to_string(), d, "{path}");
        }
    }
    let stat = diff.stat();
    assert!(stat.contains("files changed"), "{stat}");
    assert!(stat.contains("src/lib.rs"), "{stat}");
}

/// A repository that plants programs in its config (hooks, fsmonitor, a clean/smudge filter
/// bound by `.gitattributes`, an external diff) fires none of them through any operation.
#[test]
fn planted_canaries_never_fire() {
    let tmp = super::common::tempdir();
    let dir = tmp.path().join("repo");
    std::fs::create_dir(&dir).unwrap();
    sample_repo(&dir);
    let canary_dir = tmp.path().join("canaries");
    std::fs::create_dir(&canary_dir).unwrap();
    let canary = |name: &str| -> String {
        let script = canary_dir.join(format!("{name}.sh"));
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\ntouch {}/{name}.fired\ncat\n",
                canary_dir.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        script.display().to_string()
    };
    let hooks = tmp.path().join("hooks");
    std::fs::create_dir(&hooks).unwrap();
    for hook in [
        "pre-commit",
        "post-commit",
        "commit-msg",
        "pre-push",
        "post-checkout",
        "reference-transaction",
    ] {
        let script = canary(hook);
        std::fs::copy(&script, hooks.join(hook)).unwrap();
        std::fs::copy(&script, dir.join(".git/hooks").join(hook)).unwrap();
    }
    let cfg = |k: &str, v: &str| git(&dir, &["config", k, v]);
    cfg("core.hooksPath", &hooks.display().to_string());
    cfg("core.fsmonitor", &canary("fsmonitor"));
    cfg("filter.x.clean", &canary("clean"));
    cfg("filter.x.smudge", &canary("smudge"));
    cfg("filter.x.process", &canary("process"));
    cfg("diff.external", &canary("diffexternal"));
    cfg("core.sshCommand", &canary("ssh"));
    write(&dir, ".gitattributes", b"* filter=x diff=x\n");
    cfg("diff.x.textconv", &canary("textconv"));
    // Commit the attributes with hooks and filters off, so the canaries are armed but unfired.
    for args in [&["add", "-A"][..], &["commit", "-qm", "attrs"][..]] {
        let st = Command::new("git")
            .args(["-c", "core.hooksPath=/dev/null", "-c", "filter.x.clean=cat"])
            .args([
                "-c",
                "filter.x.smudge=cat",
                "-c",
                "filter.x.process=",
                "-c",
                "core.fsmonitor=false",
            ])
            .args(["-c", "user.name=T", "-c", "user.email=t@e"])
            .args(args)
            .current_dir(&dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .unwrap();
        assert!(st.success(), "{args:?}");
    }
    assert!(git(&dir, &["ls-files"]).contains(".gitattributes"));
    std::fs::write(dir.join(".git/config"), {
        let mut c = std::fs::read_to_string(dir.join(".git/config")).unwrap();
        c.push_str("[filter \"x\"]\n\trequired = true\n");
        c
    })
    .unwrap();
    let remote = tmp.path().join("remote.git");
    git(
        tmp.path(),
        &["init", "-q", "--bare", remote.to_str().unwrap()],
    );
    // The bare remote plants its own hooks too.
    for hook in ["pre-receive", "update", "post-receive"] {
        std::fs::copy(canary(hook), remote.join("hooks").join(hook)).unwrap();
    }

    let (repo, _state) = open(&dir);
    let (wt, _) = repo
        .create_worktree(&request("c", "agent/c"), WorktreeOptions::default())
        .unwrap();
    write(wt.path(), "src/lib.rs", b"changed\n");
    write(wt.path(), "added.txt", b"added\n");
    let id = wt.commit_all(&commit_req("c")).unwrap().unwrap();
    repo.diff(wt.base(), id).unwrap();
    wt.rollback_to(wt.base()).unwrap();
    write(wt.path(), "again.txt", b"again\n");
    wt.commit_all(&commit_req("again")).unwrap().unwrap();
    repo.push(
        remote.to_str().unwrap(),
        &["refs/heads/agent/c".into()],
        "agent/",
        None,
    )
    .unwrap();
    let pooled = wt.release_to_pool();
    assert!(pooled.is_ok());
    let (wt2, _) = repo
        .create_worktree(
            &request("c2", "agent/c2"),
            WorktreeOptions {
                resume: false,
                warm: true,
            },
        )
        .unwrap();
    wt2.remove().unwrap();

    let fired: Vec<String> = std::fs::read_dir(&canary_dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.ends_with(".fired").then_some(name)
        })
        .collect();
    // The remote's receive hooks are the remote's business, not our host's programs... but
    // a local bare remote runs on this host, so they are hardened away too.
    assert!(fired.is_empty(), "canaries fired: {fired:?}");
    // The file content went in unfiltered.
    let blob = git(&dir, &["cat-file", "-p", &format!("{id}:added.txt")]);
    assert_eq!(blob, "added\n");
}

/// A path where the `git` on PATH logs its argv, so tests can see every host-side git call.
fn git_shim(dir: &Path) -> (PathBuf, PathBuf) {
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap()
    .trim()
    .to_string();
    let bin = dir.join("shim-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.join("argv.log");
    std::fs::write(
        bin.join("git"),
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> {}\nexec {real} \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("git"), std::fs::Permissions::from_mode(0o755)).unwrap();
    (bin, log)
}

fn grep_tree(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                let data = std::fs::read(&p).unwrap();
                if data.windows(needle.len()).any(|w| w == needle) {
                    hits.push(p);
                }
            }
        }
    }
    hits
}

/// Pushing works, the token goes out as an HTTP header, and it is in no argv and no file
/// under either repository's `.git`.
#[test]
fn push_keeps_the_token_out_of_argv_and_files() {
    let tmp = super::common::tempdir();
    let dir = tmp.path().join("repo");
    std::fs::create_dir(&dir).unwrap();
    sample_repo(&dir);
    let remote = tmp.path().join("remote.git");
    git(
        tmp.path(),
        &["init", "-q", "--bare", remote.to_str().unwrap()],
    );
    let (shim, log) = git_shim(tmp.path());
    let token = "ghs_CanaryToken1234567890abcdef";

    let (repo, _state) = open(&dir);
    let (wt, _) = repo
        .create_worktree(&request("p", "agent/p"), WorktreeOptions::default())
        .unwrap();
    write(wt.path(), "p.txt", b"p\n");
    let id = wt.commit_all(&commit_req("p")).unwrap().unwrap();

    let old_path = std::env::var("PATH").unwrap();
    let path = format!("{}:{old_path}", shim.display());
    // Run the push in a child process with the shimmed PATH, through the library.
    push_in_child(
        &dir,
        remote.to_str().unwrap(),
        "refs/heads/agent/p",
        token,
        &path,
    );

    assert_eq!(
        git(&remote, &["rev-parse", "refs/heads/agent/p"]).trim(),
        id.to_string()
    );
    let argv = std::fs::read_to_string(&log).unwrap();
    assert!(argv.contains("push"), "the shim saw the push: {argv}");
    assert!(!argv.contains(token), "token in argv: {argv}");
    assert!(grep_tree(&dir.join(".git"), token.as_bytes()).is_empty());
    assert!(grep_tree(&remote, token.as_bytes()).is_empty());

    // Pushing the default branch is refused before git runs.
    let err = repo
        .push(
            remote.to_str().unwrap(),
            &["refs/heads/main".into()],
            "agent/",
            None,
        )
        .unwrap_err();
    assert!(err.to_string().contains("refusing to push"), "{err}");

    // Over HTTP the token is sent as a Basic Authorization header.
    let header = capture_http_auth(&repo, token);
    use base64::Engine;
    let expected =
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
    assert_eq!(header, format!("Basic {expected}"));
}

/// Runs `Repo::push` in a child process (this test binary, one ignored entry test) whose
/// PATH has the logging shim first; changing PATH in this process would race other tests.
fn push_in_child(dir: &Path, remote: &str, r: &str, token: &str, path: &str) {
    let exe = std::env::current_exe().unwrap();
    let st = Command::new(exe)
        .args([
            "--exact",
            "suite::workspace::push_helper_entry",
            "--nocapture",
            "--include-ignored",
        ])
        .env("PATH", path)
        .env("PUSH_HELPER_DIR", dir)
        .env("PUSH_HELPER_REMOTE", remote)
        .env("PUSH_HELPER_REF", r)
        .env("PUSH_HELPER_TOKEN", token)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Not a test on its own: the child side of `push_keeps_the_token_out_of_argv_and_files`.
#[test]
#[ignore = "entry point for a child process of another test"]
fn push_helper_entry() {
    let Ok(dir) = std::env::var("PUSH_HELPER_DIR") else {
        return;
    };
    let (repo, _state) = open(dir);
    repo.push(
        &std::env::var("PUSH_HELPER_REMOTE").unwrap(),
        &[std::env::var("PUSH_HELPER_REF").unwrap()],
        "agent/",
        Some(&PushCredentials::Token(
            std::env::var("PUSH_HELPER_TOKEN").unwrap().into(),
        )),
    )
    .unwrap();
}

/// A loopback HTTP server that records the Authorization header of git's first request.
fn capture_http_auth(repo: &Repo, token: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut auth = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
            if let Some(v) = line.strip_prefix("Authorization: ") {
                auth = v.trim().to_string();
            }
        }
        let mut s = stream;
        let _ = s
            .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        auth
    });
    let err = repo
        .push(
            &format!("http://127.0.0.1:{port}/repo.git"),
            &["refs/heads/agent/p".into()],
            "agent/",
            Some(&PushCredentials::Token(token.into())),
        )
        .unwrap_err();
    // The error shows git's words but never the token.
    assert!(!err.to_string().contains(token));
    server.join().unwrap()
}

/// The run record round-trips through `refs/agent/runs/<id>`: written, pushed to a bare
/// remote, fetched into a second clone, read back equal.
#[test]
fn run_record_ref_round_trips_through_a_remote() {
    let tmp = super::common::tempdir();
    let dir = tmp.path().join("repo");
    std::fs::create_dir(&dir).unwrap();
    sample_repo(&dir);
    let remote = tmp.path().join("remote.git");
    git(
        tmp.path(),
        &["init", "-q", "--bare", remote.to_str().unwrap()],
    );

    let (repo, _state) = open(&dir);
    let run_dir = repo.run_dir("01JRUN");
    write(&run_dir, "state.json", br#"{"state":"editing"}"#);
    write(&run_dir, "audit.jsonl", b"{\"seq\":0}\n");
    let c1 = repo.mirror_run_record("01JRUN").unwrap();
    assert_eq!(
        repo.mirror_run_record("01JRUN").unwrap(),
        c1,
        "unchanged → same commit"
    );
    write(&run_dir, "state.json", br#"{"state":"succeeded"}"#);
    write(&run_dir, "transcript/0001.json", b"{}");
    let c2 = repo.mirror_run_record("01JRUN").unwrap();
    assert_ne!(c1, c2);
    assert_eq!(
        git(&dir, &["rev-parse", &format!("{c2}^")]).trim(),
        c1.to_string(),
        "snapshots form a history"
    );
    repo.push(
        remote.to_str().unwrap(),
        &["refs/agent/runs/01JRUN".into()],
        "agent/",
        None,
    )
    .unwrap();

    let clone = tmp.path().join("clone");
    git(
        tmp.path(),
        &[
            "clone",
            "-q",
            remote.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let other = Repo::discover(&clone).unwrap();
    assert!(other.read_run_record("01JRUN").is_err(), "not fetched yet");
    other.fetch_run_record("origin", "01JRUN", None).unwrap();
    let theirs = other.read_run_record("01JRUN").unwrap();
    let ours = repo.read_run_record("01JRUN").unwrap();
    assert_eq!(theirs, ours);
    assert_eq!(theirs["state.json"], br#"{"state":"succeeded"}"#);
    assert!(theirs.contains_key("transcript/0001.json"));
    let restored = other.restore_run_record("01JRUN").unwrap();
    assert_eq!(
        std::fs::read(restored.join("audit.jsonl")).unwrap(),
        b"{\"seq\":0}\n"
    );
}

/// Removing a worktree deletes it and its bookkeeping; prune clears stale entries.
#[test]
fn remove_and_prune() {
    let tmp = super::common::tempdir();
    sample_repo(tmp.path());
    let (repo, _state) = open(tmp.path());
    let (wt, _) = repo
        .create_worktree(&request("rm", "agent/rm"), WorktreeOptions::default())
        .unwrap();
    let path = wt.path().to_path_buf();
    wt.remove().unwrap();
    assert!(!path.exists());
    assert!(!git(tmp.path(), &["worktree", "list"]).contains(path.to_str().unwrap()));
    let (wt, _) = repo
        .create_worktree(&request("gone", "agent/gone"), WorktreeOptions::default())
        .unwrap();
    std::fs::remove_dir_all(wt.path()).unwrap();
    assert_eq!(repo.prune_worktrees().unwrap(), 1);
}

/// Regression (issue 20): a push of a refused branch with the run's record ref pushed the
/// record anyway; the push is atomic and says which ref the remote refused.
#[test]
fn a_refused_branch_push_pushes_nothing_and_names_the_ref() {
    let tmp = super::common::tempdir();
    let dir = tmp.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    sample_repo(&dir);
    git(tmp.path(), &["clone", "-q", "--bare", "work", "remote.git"]);
    let remote = tmp.path().join("remote.git");
    // The remote's agent/x has a commit this repository does not have.
    git(tmp.path(), &["clone", "-q", "remote.git", "other"]);
    let other = tmp.path().join("other");
    write(&other, "theirs.txt", b"theirs\n");
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-qm", "theirs"]);
    git(&other, &["push", "-q", "origin", "HEAD:refs/heads/agent/x"]);

    let (repo, _state) = open(&dir);
    let (wt, _) = repo
        .create_worktree(&request("x", "agent/x"), WorktreeOptions::default())
        .unwrap();
    write(wt.path(), "ours.txt", b"ours\n");
    wt.commit_all(&commit_req("ours")).unwrap().unwrap();
    git(
        &dir,
        &["update-ref", "refs/agent/runs/x", "refs/heads/agent/x"],
    );
    let err = repo
        .push(
            remote.to_str().unwrap(),
            &["refs/heads/agent/x".into(), "refs/agent/runs/x".into()],
            "agent/",
            None,
        )
        .unwrap_err();
    match &err {
        git_agent::workspace::Error::PushRejected { refs, .. } => {
            assert_eq!(refs, &vec!["refs/heads/agent/x".to_string()])
        }
        other => panic!("expected PushRejected, got {other}"),
    }
    let refs = git(&remote, &["for-each-ref", "--format=%(refname)"]);
    assert!(!refs.contains("refs/agent/runs/x"), "{refs}");
    // And the branch under a name of its own goes through.
    repo.copy_branch("agent/x", "agent/x-abc123").unwrap();
    repo.push(
        remote.to_str().unwrap(),
        &[
            "refs/heads/agent/x-abc123".into(),
            "refs/agent/runs/x".into(),
        ],
        "agent/",
        None,
    )
    .unwrap();
    let refs = git(&remote, &["for-each-ref", "--format=%(refname)"]);
    assert!(
        refs.contains("refs/agent/runs/x") && refs.contains("agent/x-abc123"),
        "{refs}"
    );
}

/// Issue 19: a run's worktree lives under the state directory, outside the repository and
/// with no `.git` component in its path; the key names the repository and tells apart two
/// checkouts of the same name, whichever worktree the repository is opened from.
#[test]
fn run_worktrees_live_outside_the_repository_and_any_dot_git() {
    let tmp = super::common::tempdir();
    let a = tmp.path().join("one/app");
    let b = tmp.path().join("two/app");
    for d in [&a, &b] {
        std::fs::create_dir_all(d).unwrap();
        sample_repo(d);
    }
    let state = tmp.path().join("state");
    let ra = Repo::discover(&a).unwrap().with_state_dir(&state);
    let rb = Repo::discover(&b).unwrap().with_state_dir(&state);
    assert!(ra.key().starts_with("app-") && rb.key().starts_with("app-"));
    assert_ne!(ra.key(), rb.key());
    let (wt, _) = ra
        .create_worktree(&request("r1", "agent/r1"), WorktreeOptions::default())
        .unwrap();
    assert_eq!(
        wt.path(),
        state.join("worktrees").join(ra.key()).join("r1").as_path()
    );
    assert!(!wt.path().starts_with(&a));
    assert!(
        !wt.path().components().any(|c| c.as_os_str() == ".git"),
        "{}",
        wt.path().display()
    );
    // Opened from its own subdirectory or from the run's worktree: the same key.
    assert_eq!(Repo::discover(a.join("src")).unwrap().key(), ra.key());
    assert_eq!(Repo::discover(wt.path()).unwrap().key(), ra.key());
    assert_eq!(
        git(wt.path(), &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
        "agent/r1"
    );
    git(&a, &["fsck", "--strict", "--no-progress"]);
    // Without a state directory there is nowhere to put one.
    let bare = Repo::discover(&b).unwrap();
    let err = bare
        .create_worktree(&request("r2", "agent/r2"), WorktreeOptions::default())
        .unwrap_err();
    assert!(err.to_string().contains("no state directory"), "{err}");
}

/// Issue 19 migration: a run whose worktree was made in the old place
/// (`.git/agent/worktrees/<id>`) is moved out when it resumes, with git's bookkeeping
/// following it, and keeps its uncommitted work.
#[test]
fn a_resumed_run_moves_its_old_worktree_out_of_the_repository() {
    let tmp = super::common::tempdir();
    sample_repo(tmp.path());
    let old = tmp.path().join(".git/agent/worktrees/old");
    git(
        tmp.path(),
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "agent/old",
            old.to_str().unwrap(),
        ],
    );
    write(&old, "wip.txt", b"work in progress\n");
    let (repo, _state) = open(tmp.path());
    let (wt, prov) = repo
        .create_worktree(
            &request("old", "agent/old"),
            WorktreeOptions {
                resume: true,
                warm: false,
            },
        )
        .unwrap();
    assert_eq!(prov, Provenance::Reopened);
    assert_eq!(wt.path(), repo.worktrees_dir().unwrap().join("old"));
    assert!(!old.exists());
    assert_eq!(
        std::fs::read(wt.path().join("wip.txt")).unwrap(),
        b"work in progress\n"
    );
    let list = git(tmp.path(), &["worktree", "list", "--porcelain"]);
    assert!(
        list.contains(&format!("worktree {}", wt.path().display())),
        "{list}"
    );
    assert!(!list.contains("agent/worktrees/old"), "{list}");
    assert_eq!(
        git(wt.path(), &["status", "--porcelain"]).trim(),
        "?? wip.txt"
    );
    git(tmp.path(), &["fsck", "--strict", "--no-progress"]);
}

/// `release_run_worktree` pools an ended run's worktree; gc removes pooled ones and finished
/// runs' by age, then the oldest while over the size cap, the old places' too, and git
/// forgets them. A run that has not ended keeps its worktree.
#[test]
fn gc_removes_old_pooled_and_finished_worktrees_by_age_and_size() {
    use git_agent::workspace::GcOptions;
    use std::time::{Duration, SystemTime};
    let tmp = super::common::tempdir();
    sample_repo(tmp.path());
    let (repo, _state) = open(tmp.path());
    let mk = |id: &str| {
        repo.create_worktree(
            &request(id, &format!("agent/{id}")),
            WorktreeOptions::default(),
        )
        .unwrap()
        .0
    };
    let pooled = mk("pooled");
    // Some build output, so sizes differ and count.
    write(pooled.path(), "target/big.bin", &vec![7u8; 256 * 1024]);
    drop(pooled);
    let pooled = repo.release_run_worktree("pooled").unwrap().unwrap();
    assert!(pooled.starts_with(repo.pool_dir().unwrap()));
    assert_eq!(repo.release_run_worktree("nothing-here").unwrap(), None);
    let finished = mk("finished").path().to_path_buf();
    let running = mk("running").path().to_path_buf();
    // A pooled worktree left in the old place by an earlier version.
    let legacy = tmp.path().join(".git/agent/pool/legacy");
    git(
        tmp.path(),
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "agent/legacy",
            legacy.to_str().unwrap(),
        ],
    );
    // Set-up and verification checkouts a crash left behind: one of the finished run, one
    // of the running one.
    let head = repo.resolve("HEAD").unwrap();
    let left = repo.clean_checkout("finished-verify", head).unwrap();
    let left = left.path().to_path_buf();
    let live_setup = repo.clean_checkout("running-setup", head).unwrap();
    let live_setup = live_setup.path().to_path_buf();
    let ended = |id: &str| match id {
        "finished" => Some(SystemTime::now() - Duration::from_secs(3 * 86_400)),
        _ => None,
    };

    // Nothing is ten days old.
    let seen = repo
        .gc_worktrees(
            &GcOptions {
                older_than: Duration::from_secs(10 * 86_400),
                max_bytes: None,
                measure_kept: true,
            },
            &ended,
        )
        .unwrap();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen.iter().all(|e| !e.removed));
    assert!(
        !seen
            .iter()
            .any(|e| e.path == running || e.path == live_setup),
        "a live run is not gc's"
    );
    // The finished run ended three days ago: two days removes it, and only it.
    let seen = repo
        .gc_worktrees(
            &GcOptions {
                older_than: Duration::from_secs(2 * 86_400),
                max_bytes: None,
                measure_kept: true,
            },
            &ended,
        )
        .unwrap();
    let removed: Vec<_> = seen.iter().filter(|e| e.removed).collect();
    assert_eq!(removed.len(), 2, "{seen:?}");
    assert!(removed.iter().any(|e| e.path == finished));
    assert!(removed.iter().any(|e| e.path == left));
    assert!(!finished.exists() && !left.exists() && pooled.exists() && legacy.exists());
    assert!(live_setup.exists());
    // A size cap below the big one's size removes the oldest until the rest fit.
    let big = seen.iter().find(|e| e.path == pooled).unwrap().bytes;
    assert!(big >= 256 * 1024, "{big}");
    let seen = repo
        .gc_worktrees(
            &GcOptions {
                older_than: Duration::from_secs(10 * 86_400),
                max_bytes: Some(1),
                measure_kept: true,
            },
            &ended,
        )
        .unwrap();
    assert!(seen.iter().all(|e| e.removed), "{seen:?}");
    assert!(!pooled.exists() && !legacy.exists() && running.exists());
    let list = git(tmp.path(), &["worktree", "list", "--porcelain"]);
    assert!(
        !list.contains("pooled") && !list.contains("legacy"),
        "{list}"
    );
    assert!(list.contains(running.to_str().unwrap()), "{list}");
    git(tmp.path(), &["fsck", "--strict", "--no-progress"]);
}

/// Racy git: a same-size edit made in the second the index was written keeps the stat the
/// index holds. Writing the index again later (here: the policy undoing another file) must
/// not hide that edit from status and from the commit.
#[test]
fn a_racy_edit_survives_a_later_index_write() {
    let tmp = super::common::tempdir();
    sample_repo(tmp.path());
    // ctime moves on every write and cannot be set back; the kernel's coarse clock makes it
    // equal in the real race. Ignoring it here reproduces that race deterministically.
    git(tmp.path(), &["config", "core.trustctime", "false"]);
    let (repo, _state) = open(tmp.path());
    let (wt, _) = repo
        .create_worktree(&request("racy", "agent/racy"), WorktreeOptions::default())
        .unwrap();
    let readme = wt.path().join("README.md");
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
    let set_mtime = |p: &Path| {
        std::fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(then)
            .unwrap()
    };
    // The index records README.md as written at `then`, and was itself written then.
    set_mtime(&readme);
    git(wt.path(), &["update-index", "--refresh"]);
    let index = PathBuf::from(
        git(
            wt.path(),
            &["rev-parse", "--path-format=absolute", "--git-path", "index"],
        )
        .trim(),
    );
    set_mtime(&index);
    // The edit, in that same second: same size, same mtime, same inode.
    std::fs::write(&readme, b"# SAMPLE\n").unwrap();
    set_mtime(&readme);
    assert_eq!(wt.changed_paths().unwrap(), vec!["README.md".to_string()]);

    // A later index write.
    write(wt.path(), "refused.env", b"TOKEN=x\n");
    wt.restore_paths(&["refused.env".to_string()]).unwrap();
    assert!(!wt.path().join("refused.env").exists());

    assert_eq!(wt.changed_paths().unwrap(), vec!["README.md".to_string()]);
    let c = wt.commit_all(&commit_req("racy")).unwrap().unwrap();
    assert_eq!(
        git(wt.path(), &["show", &format!("{c}:README.md")]),
        "# SAMPLE\n"
    );
    assert_eq!(git(wt.path(), &["status", "--porcelain"]), "");
}
