//! A prepared environment as a run uses it: the lock that keeps its shared cache entry from
//! eviction while the run holds it, and the executor options that put it in a command's
//! view. Below both the set-up step (`environment`) and the workbench (`setup`), which use
//! them.

use std::path::Path;

use super::record::SetupRecord;
use crate::exec::ExecOptions;

/// A run's claim on a shared cache entry: a shared lock on `<entry>.use`, held while the run
/// uses the entry. Eviction needs that lock exclusively, so it never removes an entry a run
/// holds (issue 38). Dropped with the run's workbench.
#[derive(Debug)]
pub(super) struct Hold(#[allow(dead_code)] std::fs::File);

/// Hold the shared cache entry `dir`; `None` when the lock cannot be had (an eviction is
/// removing it).
pub(super) fn hold(dir: &Path) -> Option<Hold> {
    let f = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.with_extension("use"))
        .ok()?;
    f.try_lock_shared().ok()?;
    Some(Hold(f))
}

/// The executor options of a run's commands with its set-up in force: the entry bound
/// read-only, its outputs bound into the worktree, its `PATH` and variables.
pub(super) fn exec_options(base: &ExecOptions, setup: Option<&SetupRecord>) -> ExecOptions {
    let mut opts = base.clone();
    if let Some(s) = setup {
        opts.bind.push(s.dir.clone());
        for o in &s.outputs {
            opts.project_binds.push(crate::exec::ProjectBind {
                base: s.dir.clone(),
                src: Path::new("outputs").join(o),
                dest: o.clone(),
            });
        }
        opts.env.extend(s.env.iter().cloned());
        opts.path_prefix.extend(s.path.iter().cloned());
    }
    opts
}
