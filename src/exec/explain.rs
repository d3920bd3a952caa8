//! What a command would get, for `git agent sandbox --explain` and `git agent doctor`.
//!
//! Computed by the code that builds the view ([`super::local::build_view`],
//! [`super::local::command_mounts`]) and by making the executor itself, which tries the
//! sandbox with one `true` and so reports the mechanism, limits and fallbacks actually in
//! force, or the fail-closed error naming the cause and the fix. There is no second copy of
//! the rules here, only their description.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::local::{build_view, command_mounts};
use super::sandbox::{Mechanism, SandboxReport};
use super::view::Mount;
use super::{ExecOptions, LocalExecutor};

/// One entry of a command's view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViewEntry {
    /// Where it appears in the view.
    pub target: PathBuf,
    /// `bind`, `tmpfs`, `hidden`, `symlink`, `proc` or `dev`.
    pub kind: &'static str,
    /// For a bind, the host path; for a symlink, its target.
    pub source: Option<PathBuf>,
    /// `ro` or `rw`, for binds and tmpfs mounts.
    pub access: Option<&'static str>,
    /// Size bound of a tmpfs mount, in MiB.
    pub size_mib: Option<u64>,
    /// Why it is there: system directory, toolchain from `PATH`, configured, …
    pub why: String,
}

/// The sandbox a command run in a worktree would get.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The worktree (canonical).
    pub worktree: PathBuf,
    /// The view, parents first; empty when the sandbox is turned off (the command then sees
    /// the whole machine).
    pub view: Vec<ViewEntry>,
    /// Candidates for the view that were refused, each with why.
    pub not_bound: Vec<String>,
    /// The executor's report: mechanism, namespaces, Landlock ABI, limits and the memory
    /// mechanism, network, fallbacks taken. `None` when the sandbox could not be had.
    pub report: Option<SandboxReport>,
    /// Why no command could run (the sandbox asked for cannot be had here): the same error a
    /// run fails closed with.
    pub unavailable: Option<String>,
}

impl Explanation {
    /// Whether commands can run as configured.
    pub fn ok(&self) -> bool {
        self.unavailable.is_none()
    }
}

/// Explain the sandbox for commands run in `worktree` with `opts`. Makes an executor (which
/// runs one `true` in the sandbox) and drops it.
pub fn explain(worktree: &Path, opts: ExecOptions) -> Explanation {
    let wt = std::fs::canonicalize(worktree).unwrap_or_else(|_| worktree.to_path_buf());
    let made = LocalExecutor::new(&wt, opts.clone());
    let (report, unavailable) = match &made {
        Ok(e) => (Some(super::Executor::sandbox(e).clone()), None),
        Err(e) => (None, Some(e.to_string())),
    };
    drop(made);
    let view = build_view(&wt, &opts);
    let off = report
        .as_ref()
        .is_some_and(|r| r.mechanism == Mechanism::None);
    let entries = if off {
        Vec::new()
    } else {
        command_mounts(&view, &wt)
            .into_iter()
            .filter_map(|m| entry(&m, &view.why, &wt))
            .collect()
    };
    Explanation {
        worktree: wt,
        view: entries,
        not_bound: view.refused,
        report,
        unavailable,
    }
}

fn entry(
    m: &Mount,
    why: &std::collections::HashMap<PathBuf, String>,
    worktree: &Path,
) -> Option<ViewEntry> {
    let because = |dest: &Path| {
        why.get(dest).cloned().unwrap_or_else(|| {
            if dest.starts_with(worktree) {
                "the worktree's git directory (read-only)".into()
            } else {
                String::new()
            }
        })
    };
    let rw = |rw: bool| Some(if rw { "rw" } else { "ro" });
    Some(match m {
        Mount::Bind { src, dest, rw: w } => ViewEntry {
            target: dest.clone(),
            kind: "bind",
            source: Some(src.clone()),
            access: rw(*w),
            size_mib: None,
            why: because(dest),
        },
        Mount::NoLinks { src, dest } => ViewEntry {
            target: dest.clone(),
            kind: "bind",
            source: Some(src.clone()),
            access: rw(false),
            size_mib: None,
            why: because(dest),
        },
        Mount::Tmpfs { dest, size, .. } => ViewEntry {
            target: dest.clone(),
            kind: "tmpfs",
            source: None,
            access: rw(true),
            size_mib: Some(size >> 20),
            why: because(dest),
        },
        Mount::Symlink { target, dest } => ViewEntry {
            target: dest.clone(),
            kind: "symlink",
            source: Some(target.clone()),
            access: None,
            size_mib: None,
            why: because(dest),
        },
        // The helper covers only what exists on the host; so does the explanation.
        Mount::Hide { dest } => {
            std::fs::symlink_metadata(dest)
                .ok()
                .filter(|m| m.is_dir() || m.is_file())?;
            ViewEntry {
                target: dest.clone(),
                kind: "hidden",
                source: None,
                access: None,
                size_mib: None,
                why: because(dest),
            }
        }
        Mount::Proc { dest } => ViewEntry {
            target: dest.clone(),
            kind: "proc",
            source: None,
            access: None,
            size_mib: None,
            why: because(dest),
        },
        Mount::Dev { dest, shm_size } => ViewEntry {
            target: dest.clone(),
            kind: "dev",
            source: None,
            access: None,
            size_mib: Some(shm_size >> 20),
            why: because(dest),
        },
    })
}
