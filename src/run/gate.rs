//! The policy at commit time: every changed path is judged, whoever changed it.
//!
//! The tools ask the policy before they write, but a `run` command (`cp`, a script, the test
//! command itself) writes without asking. Issue 18 saw `.github/workflows/x.yml`, `.env` and
//! `*.pem` written by commands committed, and symlinks out of the tree, a `.gitattributes`
//! naming a filter and a `.gitmodules` with an `ext::` URL committed with only "unplanned
//! change". Before the deciding verification and before every checkpoint the run asks
//! [`refusal`] about each changed path and puts the refused ones back as they are in HEAD.

use std::collections::BTreeSet;
use std::path::Path;

use crate::config::Decision;
use crate::policy::{Policy, symlink_resolves_inside, symlink_target_is_confined};

/// Why the path `rela` (worktree-relative), as it is now in the worktree at `root`, may not be
/// committed; `None` when it may. `planned` holds the plan's files; `was_executable` whether
/// the path is an executable file in the last commit.
///
/// A new executable (or a file made executable) that the plan does not name is refused here;
/// one the plan names still needs a person ([`new_executable`], asked by the checkpoint gate):
/// the model writes the plan, so naming a file there proves nothing.
pub(crate) fn refusal(
    root: &Path,
    rela: &str,
    policy: &Policy,
    planned: &BTreeSet<String>,
    was_executable: bool,
) -> Option<String> {
    let verdict = policy.judge_path(rela);
    if verdict.decision != Decision::Allow {
        return Some(format!(
            "refused by the policy ({}, {})",
            verdict.rule.rule, verdict.rule.origin
        ));
    }
    let full = root.join(rela);
    let Ok(meta) = std::fs::symlink_metadata(&full) else {
        // Deleted: a deletion is judged by the path rules alone.
        return None;
    };
    let name = Path::new(rela)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(&full).ok()?;
        if !symlink_target_is_confined(rela, &target.to_string_lossy()) {
            return Some(format!(
                "a symbolic link pointing out of the repository or into .git (-> {})",
                target.display()
            ));
        }
        // Confined alone, but a chain of links can still leave (`out -> d/up/..` with
        // `d/up -> ..`): resolve it through the tree as the kernel would.
        if !symlink_resolves_inside(root, rela) {
            return Some(format!(
                "a symbolic link that leads out of the repository or into .git through other links (-> {})",
                target.display()
            ));
        }
        return None;
    }
    if name == ".gitmodules" {
        return Some("submodule definitions run URLs and commands for whoever clones".into());
    }
    if name == ".gitattributes"
        && let Ok(text) = std::fs::read_to_string(&full)
        && let Some(line) = text.lines().find(|l| names_a_driver(l))
    {
        return Some(format!(
            "`{}` names a filter, diff or merge driver (a program git runs)",
            line.trim()
        ));
    }
    if new_executable(root, rela, was_executable) && !planned.iter().any(|p| covers(p, rela)) {
        return Some("a new executable the plan does not name".into());
    }
    None
}

/// Whether `rela` is a regular file with an execute bit now that was not an executable file
/// in the last commit (`was_executable`): added as one, or made one by `chmod +x`.
pub(crate) fn new_executable(root: &Path, rela: &str, was_executable: bool) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    !was_executable
        && std::fs::symlink_metadata(root.join(rela))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether a `.gitattributes` line sets a driver: `filter=…`, `diff=…` or `merge=…`.
fn names_a_driver(line: &str) -> bool {
    let line = line.trim();
    if line.starts_with('#') {
        return false;
    }
    line.split_whitespace().skip(1).any(|a| {
        ["filter=", "diff=", "merge="]
            .iter()
            .any(|k| a.starts_with(k))
    })
}

/// Whether a plan entry (a file, or a directory ending in `/`) covers `rela`.
fn covers(entry: &str, rela: &str) -> bool {
    let entry = entry.trim_start_matches("./");
    entry == rela || (entry.ends_with('/') && rela.starts_with(entry))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn drivers_in_gitattributes_are_named() {
        assert!(names_a_driver("*.txt filter=x"));
        assert!(names_a_driver("* text diff=evil"));
        assert!(names_a_driver("*.lock merge=ours"));
        assert!(!names_a_driver("*.txt text eol=lf"));
        assert!(!names_a_driver("*.bin -diff binary"));
        assert!(!names_a_driver("# filter=x"));
    }

    #[test]
    fn refusals_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let policy = Policy::from_config(&Config::resolve([]).unwrap()).unwrap();
        let planned: BTreeSet<String> = ["tools/".to_string()].into();
        let write = |p: &str, text: &str| {
            let f = root.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, text).unwrap();
        };
        write(".github/workflows/x.yml", "on: push");
        write(".env", "A=1");
        write("key.pem", "k");
        write(
            ".gitmodules",
            "[submodule \"x\"]\n\turl = ext::sh -c touch% /tmp/pwned\n",
        );
        write(".gitattributes", "* filter=x\n");
        write("ok.txt", "fine");
        std::os::unix::fs::symlink("/etc/passwd", root.join("out")).unwrap();
        std::os::unix::fs::symlink("..", root.join("up")).unwrap();
        std::os::unix::fs::symlink(".git/config", root.join("cfg")).unwrap();
        std::os::unix::fs::symlink("ok.txt", root.join("in")).unwrap();
        // A chain: each link is confined alone, together they leave.
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::os::unix::fs::symlink("..", root.join("sub/up")).unwrap();
        std::os::unix::fs::symlink("sub/up/..", root.join("chain")).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        for p in ["run.sh", "tools/gen.sh"] {
            write(p, "#!/bin/sh\n");
            std::fs::set_permissions(root.join(p), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let refused = |p: &str| refusal(root, p, &policy, &planned, false);
        for p in [
            ".github/workflows/x.yml",
            ".env",
            "key.pem",
            ".gitmodules",
            ".gitattributes",
            "out",
            "up",
            "cfg",
            "chain",
            "run.sh",
        ] {
            assert!(refused(p).is_some(), "{p} should be refused");
        }
        for p in ["ok.txt", "in", "sub/up", "tools/gen.sh", "deleted.txt"] {
            assert_eq!(refused(p), None, "{p}");
        }
        // An executable that was already committed stays the project's business.
        assert_eq!(refusal(root, "run.sh", &policy, &planned, true), None);
        // One the plan names passes here, but the checkpoint gate asks a person about it.
        assert!(new_executable(root, "tools/gen.sh", false));
        assert!(!new_executable(root, "tools/gen.sh", true));
        assert!(!new_executable(root, "ok.txt", false));
        assert!(!new_executable(root, "in", false));
    }
}
