//! Path rules: `allow_paths` and `deny_paths` globs over worktree-relative paths.

use std::path::{Component, Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobMatcher};
use serde::Serialize;

use super::{Error, Result, RuleRef};
use crate::config::{Decision, Source};

/// The judgment of writing one path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathVerdict {
    /// The worktree-relative path judged.
    pub path: String,
    /// `allow` or `forbid` (paths are never `ask`).
    pub decision: Decision,
    /// The rule that decided.
    pub rule: RuleRef,
}

#[derive(Debug, Clone)]
struct Rule {
    glob: String,
    matcher: GlobMatcher,
    rule: RuleRef,
}

/// Compiled path globs.
#[derive(Debug, Clone)]
pub(super) struct PathRules {
    allow: Vec<Rule>,
    deny: Vec<Rule>,
    allow_origin: Source,
}

fn compile(globs: &[(String, Source)], key: &'static str) -> Result<Vec<Rule>> {
    globs
        .iter()
        .map(|(g, origin)| {
            // `literal_separator`: `*` stays within one directory, `**` crosses them.
            let glob: Glob = GlobBuilder::new(g)
                .literal_separator(true)
                .build()
                .map_err(|e| Error::BadGlob {
                    glob: g.clone(),
                    key,
                    origin: origin.to_string(),
                    message: e.kind().to_string(),
                })?;
            Ok(Rule {
                glob: g.clone(),
                matcher: glob.compile_matcher(),
                rule: RuleRef::new(format!("{key}: {g:?}"), origin),
            })
        })
        .collect()
}

impl PathRules {
    /// Globs with where each came from (a repository adds deny globs to the user's).
    pub(super) fn new(
        allow: &[(String, Source)],
        allow_origin: &Source,
        deny: &[(String, Source)],
    ) -> Result<Self> {
        Ok(Self {
            allow: compile(allow, "allow_paths")?,
            deny: compile(deny, "deny_paths")?,
            allow_origin: allow_origin.clone(),
        })
    }

    /// Deny wins over allow; with allow globs, a path must match one of them.
    pub(super) fn judge(&self, path: &str) -> PathVerdict {
        let path = path.trim_start_matches("./");
        let verdict = |decision, rule: RuleRef| PathVerdict {
            path: path.to_string(),
            decision,
            rule,
        };
        if let Some(r) = self.deny.iter().find(|r| r.matcher.is_match(path)) {
            return verdict(Decision::Forbid, r.rule.clone());
        }
        if self.allow.is_empty() {
            return verdict(
                Decision::Allow,
                RuleRef::new(
                    "allow_paths = [] (everything not denied)",
                    &self.allow_origin,
                ),
            );
        }
        match self.allow.iter().find(|r| r.matcher.is_match(path)) {
            Some(r) => verdict(Decision::Allow, r.rule.clone()),
            None => verdict(
                Decision::Forbid,
                RuleRef::new(
                    format!(
                        "allow_paths = {:?} (path matches none)",
                        self.allow
                            .iter()
                            .map(|r| r.glob.as_str())
                            .collect::<Vec<_>>()
                    ),
                    &self.allow_origin,
                ),
            ),
        }
    }

    pub(super) fn describe(&self) -> Vec<(String, RuleRef)> {
        self.deny
            .iter()
            .chain(&self.allow)
            .map(|r| (r.rule.rule.clone(), r.rule.clone()))
            .collect()
    }
}

/// Why a path is refused before it is even looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRefusal {
    /// An absolute path.
    Absolute,
    /// `..` climbs above the worktree root.
    Escapes,
    /// A component is `.git` (the worktree's or a nested repository's).
    InGit,
    /// A NUL byte.
    Nul,
}

impl PathRefusal {
    /// A message the model can act on.
    pub fn message(self, path: &str) -> String {
        match self {
            PathRefusal::Absolute => format!(
                "{path}: absolute paths are refused; give a path relative to the repository root (e.g. `src/main.rs`)"
            ),
            PathRefusal::Escapes => format!(
                "{path}: leaves the repository (`..` above the root); only files inside the repository can be used"
            ),
            PathRefusal::InGit => format!(
                "{path}: paths inside `.git` are refused; git metadata is managed by the harness, not by tools"
            ),
            PathRefusal::Nul => format!("{path:?}: paths may not contain NUL bytes"),
        }
    }
}

/// A model-supplied path checked lexically: relative, no `..` above the root, no `.git`
/// component (any case). Returns it normalized (`.` dropped, inner `..` folded). This is the
/// first check only; `tools` then resolves the path beneath the root with the kernel, which is
/// what catches symlinks.
pub fn lexical_relative(path: &str) -> std::result::Result<PathBuf, PathRefusal> {
    if path.contains('\0') {
        return Err(PathRefusal::Nul);
    }
    let p = Path::new(path);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(PathRefusal::Escapes);
                }
            }
            Component::Normal(name) => {
                if name.as_encoded_bytes().eq_ignore_ascii_case(b".git") {
                    return Err(PathRefusal::InGit);
                }
                out.push(name);
            }
            Component::RootDir | Component::Prefix(_) => return Err(PathRefusal::Absolute),
        }
    }
    if path.starts_with('~') {
        return Err(PathRefusal::Absolute);
    }
    Ok(out)
}

/// Whether a symlink at `link` (worktree-relative) pointing to `target` stays inside the
/// worktree and out of `.git`.
pub fn symlink_target_is_confined(link: &str, target: &str) -> bool {
    if Path::new(target).is_absolute() {
        return false;
    }
    let Ok(link) = lexical_relative(link) else {
        return false;
    };
    let base = link.parent().unwrap_or(Path::new(""));
    lexical_relative(&base.join(target).to_string_lossy()).is_ok()
}

/// Whether the symlink at `link` (worktree-relative) in the worktree at `root` resolves,
/// through every link on the way, to a place inside the worktree and out of `.git`.
///
/// [`symlink_target_is_confined`] reads one link alone; a chain can pass it link by link and
/// still leave: `d/up -> ..` is confined (it names the root) and `out -> d/up/..` is confined
/// lexically (it names `d`), yet `out` resolves to the root's parent. This walks the path as
/// the kernel would, component by component beneath `root`, following each symlink it meets
/// (at most 40, as Linux does). A path that does not exist yet is read lexically from there.
pub fn symlink_resolves_inside(root: &Path, link: &str) -> bool {
    use std::ffi::OsString;
    let Ok(link) = lexical_relative(link) else {
        return false;
    };
    let Ok(target) = std::fs::read_link(root.join(&link)) else {
        return false;
    };
    let mut at: Vec<OsString> = link
        .parent()
        .map(|p| p.iter().map(|c| c.to_os_string()).collect())
        .unwrap_or_default();
    // Components still to walk, next one last.
    let mut todo: Vec<OsString> = Vec::new();
    let push_target = |todo: &mut Vec<OsString>, t: &Path| -> bool {
        if t.has_root() {
            return false;
        }
        todo.extend(t.iter().rev().map(|c| c.to_os_string()));
        true
    };
    if !push_target(&mut todo, &target) {
        return false;
    }
    let mut links_followed = 1;
    while let Some(c) = todo.pop() {
        if c == "." {
            continue;
        }
        if c == ".." {
            if at.pop().is_none() {
                return false;
            }
            continue;
        }
        if c.as_encoded_bytes().eq_ignore_ascii_case(b".git") {
            return false;
        }
        at.push(c);
        let here: PathBuf = at.iter().collect();
        let full = root.join(&here);
        if std::fs::symlink_metadata(&full).is_ok_and(|m| m.file_type().is_symlink()) {
            links_followed += 1;
            if links_followed > 40 {
                return false;
            }
            let Ok(next) = std::fs::read_link(&full) else {
                return false;
            };
            at.pop();
            if !push_target(&mut todo, &next) {
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_chains_are_followed() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("d/e/f.txt"), "x").unwrap();
        symlink("..", root.join("d/up")).unwrap();
        symlink("d/up/..", root.join("out")).unwrap();
        symlink("e/f.txt", root.join("d/file")).unwrap();
        symlink("d/file", root.join("chain")).unwrap();
        symlink("d/up/e", root.join("via")).unwrap();
        symlink("gitdir", root.join("d/e/g")).unwrap();
        symlink("../../.git", root.join("d/e/gitdir")).unwrap();
        symlink("d/e/g/hooks", root.join("hooks")).unwrap();
        symlink("loop2", root.join("loop1")).unwrap();
        symlink("loop1", root.join("loop2")).unwrap();
        symlink("not/yet/there", root.join("dangling")).unwrap();
        symlink("not/../../x", root.join("dangling-out")).unwrap();
        // Each link alone is confined, lexically.
        for l in ["d/up", "out", "d/file", "chain", "via", "hooks", "loop1"] {
            let t = std::fs::read_link(root.join(l)).unwrap();
            assert!(
                symlink_target_is_confined(l, &t.to_string_lossy()) || l == "out",
                "{l}"
            );
        }
        assert!(symlink_resolves_inside(root, "d/up"));
        assert!(symlink_resolves_inside(root, "d/file"));
        assert!(symlink_resolves_inside(root, "chain"));
        assert!(symlink_resolves_inside(root, "dangling"));
        assert!(
            !symlink_resolves_inside(root, "out"),
            "d/up/.. is the root's parent"
        );
        assert!(
            !symlink_resolves_inside(root, "hooks"),
            "through d/e/g into .git"
        );
        assert!(
            !symlink_resolves_inside(root, "loop1"),
            "a loop never resolves"
        );
        assert!(!symlink_resolves_inside(root, "dangling-out"));
        assert!(!symlink_resolves_inside(root, "../x"));
    }

    #[test]
    fn lexical_checks() {
        assert_eq!(
            lexical_relative("a/./b/../c").unwrap(),
            PathBuf::from("a/c")
        );
        assert_eq!(
            lexical_relative("../../etc/passwd"),
            Err(PathRefusal::Escapes)
        );
        assert_eq!(lexical_relative("a/../../x"), Err(PathRefusal::Escapes));
        assert_eq!(lexical_relative("/etc/passwd"), Err(PathRefusal::Absolute));
        assert_eq!(
            lexical_relative("~/.ssh/id_rsa"),
            Err(PathRefusal::Absolute)
        );
        assert_eq!(lexical_relative("sub/.git/HEAD"), Err(PathRefusal::InGit));
        assert_eq!(lexical_relative(".GIT/config"), Err(PathRefusal::InGit));
        assert!(symlink_target_is_confined("a/link", "../b"));
        assert!(!symlink_target_is_confined("a/link", "../../b"));
        assert!(!symlink_target_is_confined("link", "/etc"));
        assert!(!symlink_target_is_confined("link", ".git/hooks"));
    }
}
