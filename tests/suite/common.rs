//! Helpers every integration suite shares: the test's own `git` and fixture copying.

use std::path::Path;
use std::process::Command;

/// Run `git` in `dir` with a fixed identity, `main` as the default branch, no hooks, no
/// fsmonitor and no system or global configuration; panics with git's stderr unless it
/// succeeds; its stdout. The one `git` of the integration tests.
pub fn git(dir: &Path, args: &[&str]) -> String {
    git_with(dir, &[], args)
}

/// [`git`] with more `-c` settings (`"init.defaultBranch=master"`), which win over the
/// defaults.
pub fn git_with(dir: &Path, config: &[&str], args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    cmd.args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
        ]);
    for c in config {
        cmd.args(["-c", c]);
    }
    let out = cmd
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Copy the directory tree `from` to `to`: files with their permissions, symbolic links as
/// links (never followed).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        let kind = e.file_type().unwrap();
        if kind.is_dir() {
            copy_dir(&e.path(), &dest);
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), dest).unwrap();
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// A loopback port free now (the server under test binds it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A temporary directory whose path has no component starting with `.` (tempfile's own
/// start with `.tmp`): run checkouts go under a test's state directory only when it has
/// none (issue 39), and a state directory named by a flag with one is refused.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ga-test-")
        .tempdir()
        .expect("a temporary directory")
}
