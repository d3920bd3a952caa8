//! The file-system view a sandboxed command gets: what is bound into it, from where.
//!
//! A command sees the system directories (`/usr`, `/bin`, `/lib*`, `/etc` without its
//! secrets), the toolchain directories of the agent's `PATH` and the toolchain homes they
//! belong to (rustup/cargo, pyenv, nvm, the Go root, …) read-only, what the user added with
//! `sandbox.bind`, the worktree read-write (its `.git` directories read-only), fresh bounded
//! tmpfs `$HOME` and `/tmp`, its own `/proc` and a minimal `/dev`. Nothing else exists in it:
//! not the agent's `$HOME`, state directory, other worktrees and mirrors, `/root`, `/home`,
//! `/run` or `/var/run`. The helper ([`super::helper`]) builds it from the [`Mount`] list made
//! here.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::NetworkMode;

/// `$HOME` inside the view: a fresh tmpfs.
pub const VIEW_HOME: &str = "/home/sandbox";
/// `$TMPDIR` inside the view: a fresh tmpfs.
pub const VIEW_TMP: &str = "/tmp";

/// System directories bound read-only when they are directories (recreated when symlinks, as
/// on merged-`/usr` systems).
const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc",
];

/// Files and directories under `/etc` covered by empty read-only ones: password hashes, sudo
/// rules, private keys, credentials, the agent's own system configuration.
const ETC_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/etc/security/opasswd",
    "/etc/krb5.keytab",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/git-agent",
];

/// Files inside a bound toolchain directory that hold credentials, never in view (issue 41):
/// the path below the toolchain directory (`*` stands for any one directory name), and what
/// it is. A toolchain needs its binaries, toolchains and package caches; none of these.
const TOOLCHAIN_SECRETS: &[(&str, &str)] = &[
    ("credentials.toml", "Cargo's registry tokens"),
    ("credentials", "Cargo's registry tokens (old name)"),
    (".npmrc", "npm's registry tokens"),
    ("etc/npmrc", "npm's global configuration (registry tokens)"),
    (
        "versions/node/*/etc/npmrc",
        "npm's global configuration (registry tokens)",
    ),
    (
        "tools/image/node/*/etc/npmrc",
        "npm's global configuration (registry tokens)",
    ),
    (".yarnrc.yml", "yarn's registry tokens"),
    (".pypirc", "PyPI upload credentials"),
    ("pip.conf", "pip's configuration (index credentials)"),
    (
        "versions/*/pip.conf",
        "pip's configuration (index credentials)",
    ),
    (".netrc", "host passwords"),
    (".git-credentials", "git's stored credentials"),
    (".gem/credentials", "RubyGems' API key"),
    (".docker/config.json", "registry credentials"),
];

/// Cargo's configuration files, hidden only when they hold a registry token (they also hold
/// what a build needs: source replacement, target settings).
const CARGO_CONFIGS: &[&str] = &["config.toml", "config"];

/// The credential files inside the toolchain directory `dir` ([`TOOLCHAIN_SECRETS`], and a
/// Cargo configuration that holds a token), with what each is.
fn toolchain_secrets(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    for (pattern, what) in TOOLCHAIN_SECRETS {
        for p in expand(dir, pattern) {
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            // A link is left as it is in the view; what it leads to is what must go (a
            // dotfile manager links `~/.cargo/credentials.toml` to a file of its own).
            if meta.file_type().is_symlink()
                && let Ok(target) = std::fs::canonicalize(&p)
            {
                out.push((target, *what));
            }
            out.push((p, *what));
        }
    }
    for name in CARGO_CONFIGS {
        let p = dir.join(name);
        let holds_token = std::fs::read_to_string(&p).is_ok_and(|t| {
            t.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with("token") && l["token".len()..].trim_start().starts_with('=')
            })
        });
        if holds_token {
            out.push((p, "Cargo's configuration with a registry token"));
        }
    }
    out
}

/// `dir` joined with `pattern`, each `*` component standing for every directory there.
fn expand(dir: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut at = vec![dir.to_path_buf()];
    for part in pattern.split('/') {
        at = if part == "*" {
            at.iter()
                .filter_map(|d| std::fs::read_dir(d).ok())
                .flat_map(|rd| rd.flatten().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect()
        } else {
            at.into_iter().map(|d| d.join(part)).collect()
        };
    }
    at
}

/// Directories right under `$HOME` that are toolchain homes, bound whole when a `PATH` entry
/// (or a variable naming a toolchain home) lies inside one.
const HOME_TOOLCHAINS: &[&str] = &[
    ".cargo", ".rustup", ".pyenv", ".nvm", ".rbenv", ".goenv", ".volta", ".bun", ".deno",
    ".sdkman", ".asdf", ".juliaup", ".ghcup", ".elan", ".opam", ".nodenv", ".jenv", "go",
];

/// Variables that name toolchain homes.
const TOOLCHAIN_VARS: &[&str] = &[
    "CARGO_HOME",
    "RUSTUP_HOME",
    "PYENV_ROOT",
    "NVM_DIR",
    "GOROOT",
    "GOPATH",
    "JAVA_HOME",
    "VOLTA_HOME",
    "BUN_INSTALL",
    "DENO_INSTALL",
];

/// One mount of the view; paths are the host's for sources and the view's for destinations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Mount {
    /// A bind mount (recursive), read-only unless `rw`.
    Bind {
        /// Host path.
        src: PathBuf,
        /// Path in the view.
        dest: PathBuf,
        /// Writable.
        rw: bool,
    },
    /// A read-only bind (recursive) whose source the helper reaches without following any
    /// symbolic link, component by component, and mounts from that descriptor: a link
    /// planted in a set-up output, or swapped in after the executor checked it, cannot
    /// carry the mount anywhere else. The source must be a canonical path.
    NoLinks {
        /// Host path, canonical.
        src: PathBuf,
        /// Path in the view.
        dest: PathBuf,
    },
    /// A fresh tmpfs of at most `size` bytes.
    Tmpfs {
        /// Path in the view.
        dest: PathBuf,
        /// Size limit in bytes.
        size: u64,
        /// Permission bits of its root.
        mode: u32,
    },
    /// A symbolic link.
    Symlink {
        /// What it points to.
        target: PathBuf,
        /// Path in the view.
        dest: PathBuf,
    },
    /// Cover what is at `dest` (a file or a directory bound earlier) with an empty read-only one.
    Hide {
        /// Path in the view.
        dest: PathBuf,
    },
    /// A new `/proc` for the pid namespace.
    Proc {
        /// Path in the view.
        dest: PathBuf,
    },
    /// A minimal `/dev`: a few device nodes bound from the host, a private `devpts`, `shm`.
    Dev {
        /// Path in the view.
        dest: PathBuf,
        /// Size of `/dev/shm` in bytes.
        shm_size: u64,
    },
}

impl Mount {
    /// Where it appears in the view.
    pub(crate) fn dest(&self) -> &Path {
        match self {
            Mount::Bind { dest, .. }
            | Mount::NoLinks { dest, .. }
            | Mount::Tmpfs { dest, .. }
            | Mount::Symlink { dest, .. }
            | Mount::Hide { dest }
            | Mount::Proc { dest }
            | Mount::Dev { dest, .. } => dest,
        }
    }
}

/// What the view is made of, before the per-command `.git` binds.
#[derive(Debug, Clone)]
pub(crate) struct View {
    /// Mounts, parents first.
    pub mounts: Vec<Mount>,
    /// Toolchain directories found (for the report).
    pub toolchains: Vec<PathBuf>,
    /// Candidates refused, with why (for the report).
    pub refused: Vec<String>,
    /// Why each mount is there, by its target (for `--explain`).
    pub why: std::collections::HashMap<PathBuf, String>,
}

/// Sizes of the view's tmpfs mounts, in bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    pub tmp: u64,
    pub home: u64,
    pub shm: u64,
}

/// Inputs of the view.
pub(crate) struct ViewInputs<'a> {
    pub worktree: &'a Path,
    /// Extra read-write paths (`ExecOptions::writable`).
    pub writable: &'a [PathBuf],
    /// Extra read-only paths (`sandbox.bind`).
    pub bind: &'a [PathBuf],
    /// Read-only directories bound into the worktree (`ExecOptions::project_binds`), their
    /// bases canonical.
    pub project_binds: &'a [crate::exec::ProjectBind],
    /// Secrets the configuration names (`ExecOptions::hide`).
    pub hide: &'a [super::secrets::Secret],
    pub network: NetworkMode,
    pub sizes: Sizes,
    /// Variable lookup (the agent's environment in production).
    pub env: &'a dyn Fn(&str) -> Option<OsString>,
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

/// Whether `a` is `b` or one of its ancestors.
fn covers(a: &Path, b: &Path) -> bool {
    b.starts_with(a)
}

/// Build the view for an executor.
pub(crate) fn build(i: &ViewInputs<'_>) -> View {
    let mut mounts = Vec::new();
    let mut toolchains: Vec<PathBuf> = Vec::new();
    let mut refused = Vec::new();
    let mut why = std::collections::HashMap::new();
    // Credential files inside the toolchain directories, hidden once those are bound.
    let mut hidden: Vec<PathBuf> = Vec::new();
    let mut origin: std::collections::HashMap<PathBuf, String> = Default::default();
    for s in SYSTEM {
        let p = Path::new(s);
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(p) {
                    why.insert(p.to_path_buf(), "system symlink, as on the host".into());
                    mounts.push(Mount::Symlink {
                        target,
                        dest: p.to_path_buf(),
                    });
                }
            }
            Ok(m) if m.is_dir() => {
                let because = if *s == "/etc" {
                    "system directory (its secrets hidden below)"
                } else {
                    "system directory"
                };
                why.insert(p.to_path_buf(), because.to_string());
                mounts.push(Mount::Bind {
                    src: p.to_path_buf(),
                    dest: p.to_path_buf(),
                    rw: false,
                })
            }
            _ => {}
        }
    }
    let home = (i.env)("HOME").map(PathBuf::from);
    let system_covered =
        |p: &Path| SYSTEM.iter().any(|s| p.starts_with(s)) && !p.starts_with("/etc");
    let mut candidates: Vec<(PathBuf, &str)> = Vec::new();
    if let Some(path) = (i.env)("PATH") {
        for d in std::env::split_paths(&path) {
            candidates.push((d, "PATH"));
        }
    }
    for v in TOOLCHAIN_VARS {
        if let Some(p) = (i.env)(v) {
            candidates.push((PathBuf::from(p), v));
        }
    }
    for (cand, from) in candidates {
        let Some(dir) = toolchain_dir(&cand, home.as_deref(), i.worktree) else {
            continue;
        };
        match dir {
            Ok(dir) => {
                if !system_covered(&dir) && !toolchains.iter().any(|t| covers(t, &dir)) {
                    toolchains.retain(|t| !covers(&dir, t));
                    let from = if from == "PATH" {
                        format!("toolchain: {} is on the agent's PATH", cand.display())
                    } else {
                        format!("toolchain: ${from} names {}", cand.display())
                    };
                    origin.insert(dir.clone(), from);
                    toolchains.push(dir);
                }
            }
            Err(why) => refused.push(format!("{} (from {from}): {why}", cand.display())),
        }
    }
    // rustup's proxies in ~/.cargo/bin need ~/.rustup.
    if let Some(h) = &home
        && toolchains.iter().any(|t| t == &h.join(".cargo"))
        && h.join(".rustup").is_dir()
        && !toolchains.iter().any(|t| covers(t, &h.join(".rustup")))
    {
        toolchains.push(h.join(".rustup"));
        origin.insert(
            h.join(".rustup"),
            "toolchain: rustup's proxies in ~/.cargo/bin need it".into(),
        );
    }
    for t in &toolchains {
        why.insert(
            t.clone(),
            origin.remove(t).unwrap_or_else(|| "toolchain".into()),
        );
        for (secret, what) in toolchain_secrets(t) {
            why.insert(
                secret.clone(),
                format!("credential in a toolchain home: {what}"),
            );
            hidden.push(secret);
        }
        mounts.push(Mount::Bind {
            src: t.clone(),
            dest: t.clone(),
            rw: false,
        });
    }
    for b in i.bind {
        match std::fs::canonicalize(b) {
            Ok(c) if home.as_deref().is_some_and(|h| covers(&c, h)) || c == Path::new("/") => {
                refused.push(format!(
                    "{} (sandbox.bind): it holds the agent's home directory",
                    b.display()
                ));
            }
            Ok(c) if covers(&c, i.worktree) => refused.push(format!(
                "{} (sandbox.bind): it holds the worktree's siblings",
                b.display()
            )),
            Ok(c) => {
                why.insert(c.clone(), "configured: sandbox.bind".into());
                mounts.push(Mount::Bind {
                    src: c.clone(),
                    dest: c,
                    rw: false,
                })
            }
            Err(e) => refused.push(format!("{} (sandbox.bind): {e}", b.display())),
        }
    }
    if i.network == NetworkMode::On
        && let Ok(resolv) = std::fs::canonicalize("/etc/resolv.conf")
        && !resolv.starts_with("/etc")
    {
        // Name resolution with the network on: the file /etc/resolv.conf points to.
        why.insert(
            resolv.clone(),
            "name resolution with the network on (/etc/resolv.conf points here)".into(),
        );
        mounts.push(Mount::Bind {
            src: resolv.clone(),
            dest: resolv,
            rw: false,
        });
    }
    why.insert(VIEW_TMP.into(), "fresh, private to the command".into());
    why.insert(
        VIEW_HOME.into(),
        "fresh $HOME, private to the command (not the agent's home)".into(),
    );
    why.insert(i.worktree.to_path_buf(), "the worktree".into());
    mounts.push(Mount::Tmpfs {
        dest: VIEW_TMP.into(),
        size: i.sizes.tmp,
        mode: 0o1777,
    });
    mounts.push(Mount::Tmpfs {
        dest: VIEW_HOME.into(),
        size: i.sizes.home,
        mode: 0o700,
    });
    mounts.push(Mount::Bind {
        src: i.worktree.to_path_buf(),
        dest: i.worktree.to_path_buf(),
        rw: true,
    });
    for b in i.project_binds {
        let dest = i.worktree.join(&b.dest);
        let src = b.base.join(&b.src);
        why.insert(
            dest.clone(),
            format!("set-up output, read-only ({})", src.display()),
        );
        mounts.push(Mount::NoLinks { src, dest });
    }
    for w in i.writable {
        if let Ok(c) = std::fs::canonicalize(w) {
            why.insert(c.clone(), "configured: writable for commands".into());
            mounts.push(Mount::Bind {
                src: c.clone(),
                dest: c,
                rw: true,
            });
        }
    }
    for s in ETC_SECRETS {
        why.insert(s.into(), "secret under /etc".into());
        mounts.push(Mount::Hide { dest: s.into() });
    }
    if let Ok(dir) = std::fs::read_dir("/etc/ssh") {
        for e in dir.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with("ssh_host_") && name.ends_with("_key") {
                why.insert(e.path(), "SSH host private key".into());
                mounts.push(Mount::Hide { dest: e.path() });
            }
        }
    }
    for dest in hidden {
        mounts.push(Mount::Hide { dest });
    }
    for s in super::secrets::resolve(i.hide.to_vec(), home.as_deref()) {
        why.insert(s.path.clone(), format!("secret named by {}", s.named_by));
        mounts.push(Mount::Hide { dest: s.path });
    }
    why.insert("/proc".into(), "the command's own pid namespace".into());
    why.insert("/dev".into(), "minimal device files".into());
    mounts.push(Mount::Proc {
        dest: "/proc".into(),
    });
    mounts.push(Mount::Dev {
        dest: "/dev".into(),
        shm_size: i.sizes.shm,
    });
    sort(&mut mounts);
    View {
        mounts,
        toolchains,
        refused,
        why,
    }
}

/// Parents before children (stable otherwise), so a later mount is never hidden by an
/// earlier one.
pub(crate) fn sort(mounts: &mut [Mount]) {
    mounts.sort_by_key(|m| depth(m.dest()));
}

/// The directory to bind for a `PATH` entry or toolchain variable: `None` to skip silently
/// (absent, already in the system directories or the worktree), `Err` when refused.
fn toolchain_dir(
    cand: &Path,
    home: Option<&Path>,
    worktree: &Path,
) -> Option<Result<PathBuf, &'static str>> {
    if !cand.is_absolute() {
        return None;
    }
    let dir = std::fs::canonicalize(cand).ok().filter(|p| p.is_dir())?;
    if dir.starts_with(worktree) {
        return None;
    }
    if dir == Path::new("/") {
        return Some(Err("it is the root directory"));
    }
    if covers(&dir, worktree) {
        return Some(Err("it holds the worktree and its siblings"));
    }
    let Some(home) = home else {
        return Some(Ok(prefix_of(&dir)));
    };
    let home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    if covers(&dir, &home) {
        return Some(Err("it is (or holds) the agent's home directory"));
    }
    let Ok(rel) = dir.strip_prefix(&home) else {
        return Some(Ok(prefix_of(&dir)));
    };
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    if HOME_TOOLCHAINS.contains(&first.as_ref()) {
        return Some(Ok(home.join(first.as_ref())));
    }
    // Anything else under $HOME: only that directory (e.g. ~/.local/bin), never its parents.
    Some(Ok(dir))
}

/// A `bin` directory outside `$HOME` brings its prefix (`…/python/3.12/bin` needs `…/lib`);
/// other directories come alone.
fn prefix_of(dir: &Path) -> PathBuf {
    if dir.starts_with("/nix/") {
        return PathBuf::from("/nix");
    }
    match (dir.file_name(), dir.parent()) {
        (Some(n), Some(parent)) if n == "bin" && depth(parent) > 2 => parent.to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// One line per mount, for `--explain`, the report and the audit log.
pub(crate) fn describe(mounts: &[Mount]) -> Vec<String> {
    mounts
        .iter()
        .map(|m| match m {
            Mount::Bind { src, dest, rw } if src == dest => format!(
                "{} {}",
                dest.display(),
                if *rw { "read-write" } else { "read-only" }
            ),
            Mount::Bind { src, dest, rw } => format!(
                "{} {} (from {})",
                dest.display(),
                if *rw { "read-write" } else { "read-only" },
                src.display()
            ),
            Mount::NoLinks { src, dest } => {
                format!("{} read-only (from {})", dest.display(), src.display())
            }
            Mount::Tmpfs { dest, size, .. } => {
                format!("{} fresh tmpfs, at most {} MiB", dest.display(), size >> 20)
            }
            Mount::Symlink { target, dest } => {
                format!("{} -> {}", dest.display(), target.display())
            }
            Mount::Hide { dest } => format!("{} hidden (empty)", dest.display()),
            Mount::Proc { dest } => format!("{} own pid namespace", dest.display()),
            Mount::Dev { dest, .. } => format!(
                "{} null zero full random urandom tty, own pts, shm",
                dest.display()
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(vars: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<OsString> {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    fn build_with(home: &Path, wt: &Path, path: String) -> View {
        let env = env_of(vec![("HOME", home.display().to_string()), ("PATH", path)]);
        build(&ViewInputs {
            worktree: wt,
            writable: &[],
            bind: &[],
            project_binds: &[],
            hide: &[],
            network: NetworkMode::Off,
            sizes: Sizes {
                tmp: 1 << 20,
                home: 1 << 20,
                shm: 1 << 20,
            },
            env: &env,
        })
    }

    /// Issue 41 point 1: a bound toolchain home keeps its binaries and caches in view, never
    /// its credential files — a registry token in `~/.cargo/credentials.toml` was readable.
    #[test]
    fn credentials_inside_toolchain_homes_are_hidden() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let home = root.join("home/me");
        let node = home.join(".nvm/versions/node/v20.1.0");
        let files = [
            (home.join(".cargo/bin/cargo"), "bin"),
            (
                home.join(".cargo/credentials.toml"),
                "[registry]\ntoken = \"s\"\n",
            ),
            (
                home.join(".cargo/config.toml"),
                "[registries.corp]\ntoken = \"s\"\n",
            ),
            (home.join(".cargo/registry/cache/x.crate"), "crate"),
            (node.join("bin/node"), "bin"),
            (
                node.join("etc/npmrc"),
                "//registry.npmjs.org/:_authToken=s\n",
            ),
            (home.join(".pyenv/shims/python"), "bin"),
            (
                home.join(".pyenv/versions/3.11.9/pip.conf"),
                "[global]\nindex-url = https://u:s@x\n",
            ),
            (home.join(".pyenv/.netrc"), "machine x password s\n"),
        ];
        for (p, body) in &files {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, body).unwrap();
        }
        let wt = root.join("repos/a");
        std::fs::create_dir_all(&wt).unwrap();
        let path = [
            home.join(".cargo/bin"),
            node.join("bin"),
            home.join(".pyenv/shims"),
        ]
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
        let hidden = |v: &View| -> Vec<PathBuf> {
            let mut h: Vec<PathBuf> = v
                .mounts
                .iter()
                .filter_map(|m| match m {
                    Mount::Hide { dest } if dest.starts_with(&home) => Some(dest.clone()),
                    _ => None,
                })
                .collect();
            h.sort();
            h
        };
        let v = build_with(&home, &wt, path.clone());
        assert_eq!(
            hidden(&v),
            vec![
                home.join(".cargo/config.toml"),
                home.join(".cargo/credentials.toml"),
                node.join("etc/npmrc"),
                home.join(".pyenv/.netrc"),
                home.join(".pyenv/versions/3.11.9/pip.conf"),
            ]
        );
        assert!(
            v.why[&home.join(".cargo/credentials.toml")].contains("Cargo's registry tokens"),
            "{:?}",
            v.why
        );
        // A credentials file that is a link: the file it leads to is hidden too.
        let store = root.join("dotfiles/cargo-credentials.toml");
        std::fs::create_dir_all(store.parent().unwrap()).unwrap();
        std::fs::write(&store, "token = \"s\"\n").unwrap();
        std::fs::remove_file(home.join(".cargo/credentials.toml")).unwrap();
        std::os::unix::fs::symlink(&store, home.join(".cargo/credentials.toml")).unwrap();
        let v = build_with(&home, &wt, path.clone());
        assert!(
            v.mounts
                .iter()
                .any(|m| matches!(m, Mount::Hide { dest } if dest == &store)),
            "{:?}",
            v.mounts
        );
        // A Cargo configuration without a token is what builds need: it stays.
        std::fs::write(home.join(".cargo/config.toml"), "[net]\noffline = true\n").unwrap();
        let v = build_with(&home, &wt, path);
        assert!(!hidden(&v).contains(&home.join(".cargo/config.toml")));
    }

    // Guards the rule that a toolchain on PATH brings its home, never $HOME or its parents.
    #[test]
    fn path_entries_bring_toolchain_homes_never_home_itself() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let home = root.join("home/me");
        for sub in [".cargo/bin", ".rustup", ".pyenv/shims", "bin", ".ssh"] {
            std::fs::create_dir_all(home.join(sub)).unwrap();
        }
        let wt = root.join("repos/a");
        std::fs::create_dir_all(&wt).unwrap();
        let path = [
            home.join(".cargo/bin"),
            home.join(".pyenv/shims"),
            home.join("bin"),
            home.clone(),
            root.join("home"),
            root.join("repos"),
            PathBuf::from("/usr/bin"),
        ]
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
        let v = build_with(&home, &wt, path);
        let mut t = v.toolchains.clone();
        t.sort();
        assert_eq!(
            t,
            vec![
                home.join(".cargo"),
                home.join(".pyenv"),
                home.join(".rustup"),
                home.join("bin")
            ]
        );
        assert_eq!(v.refused.len(), 3, "{:?}", v.refused);
        let binds: Vec<&Path> = v
            .mounts
            .iter()
            .filter_map(|m| match m {
                Mount::Bind { dest, .. } => Some(dest.as_path()),
                _ => None,
            })
            .collect();
        assert!(!binds.iter().any(|b| *b == home || b.ends_with(".ssh")));
        // Parents first: /tmp's tmpfs before a worktree under it, /etc before its secrets.
        let pos = |p: &Path| v.mounts.iter().position(|m| m.dest() == p).unwrap();
        assert!(pos(Path::new("/etc")) < pos(Path::new("/etc/shadow")));
        assert!(pos(Path::new("/tmp")) < pos(&wt));
    }
}
