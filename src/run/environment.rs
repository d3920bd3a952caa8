//! The project's environment (issue 19): the set-up plan (`verify::setup_plan`) run once per
//! cache key, in a fresh checkout, in the sandbox, with only the registries it may reach;
//! its outputs kept under `<state>/setup/<repo-key>/<key>/` and given read-only to every
//! later command of every run on that key.
//!
//! Set-up runs on the base revision before the baseline, so it is the repository's trusted
//! configuration that decides it, never the model; when the run changes a manifest or a
//! lockfile it runs again on the changed tree, as its own audited step. A cache entry is
//! complete only once `done.json` is written in it, under a lock, so a crash or a
//! concurrent run never reuses half an environment.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use super::error::{Error, Result};
use super::ledger::Ledger;
use super::record::{SetupRecord, SetupRun};
use crate::audit::chain::Kind;
use crate::config::{NetworkMode, SandboxMode, SetupConfig};
use crate::exec::{ExecOptions, ExecOutput, ExecRequest, Executor, LocalExecutor};
use crate::verify::{self, SETUP_ENV_VAR, SetupPlan, TestCommand};

/// What set-up came to.
pub(super) enum Prepared {
    /// The project needs none.
    Nothing,
    /// Ready (made now or found in the cache).
    Ready(SetupRecord),
    /// A command failed or an output is missing: the run cannot test.
    Failed {
        /// One line.
        why: String,
        /// The decisive lines of the output, redacted.
        lines: Vec<String>,
        /// The commands set-up ran or would have run.
        commands: Vec<String>,
    },
}

/// The directory holding every cache entry of this repository.
fn cache_root(led: &Ledger<'_>) -> Result<PathBuf> {
    let state = led.svc.repo.state_dir().ok_or_else(|| {
        Error::Invalid("set-up needs a state directory (the front door names one)".into())
    })?;
    Ok(state.join("setup").join(led.svc.repo.key()))
}

/// Set the environment up for `commit` (the base, or a snapshot of the run's tree after a
/// manifest changed), or find it in the cache. `test` is the run's test command.
pub(super) async fn ensure(
    led: &mut Ledger<'_>,
    commit: gix::ObjectId,
    test: Option<&TestCommand>,
    reason: &str,
) -> Result<Prepared> {
    let svc = led.svc;
    let started = Instant::now();
    let name = format!("{}-setup", led.rec.run_id);
    let tree = svc.repo.clean_checkout(&name, commit)?;
    let result = ensure_in(led, tree.path(), test, reason, started).await;
    if let Err(e) = tree.remove() {
        tracing::warn!(error = %e, "cannot remove the set-up checkout");
    }
    result
}

async fn ensure_in(
    led: &mut Ledger<'_>,
    root: &Path,
    test: Option<&TestCommand>,
    reason: &str,
    started: Instant,
) -> Result<Prepared> {
    let svc = led.svc;
    let cfg = &svc.config.settings.setup;
    let path_var = std::env::var_os("PATH");
    let plan = match verify::setup_plan(root, cfg, test, path_var.as_deref()) {
        Ok(Some(p)) => p,
        Ok(None) => return Ok(Prepared::Nothing),
        Err(e) => {
            return Ok(Prepared::Failed {
                why: e.to_string(),
                lines: Vec::new(),
                commands: Vec::new(),
            });
        }
    };
    let key = plan.key(root).map_err(|e| Error::Invalid(e.to_string()))?;
    let parent = cache_root(led)?;
    std::fs::create_dir_all(&parent).map_err(|e| Error::io("cannot create", &parent, e))?;
    let dir = parent.join(&key);
    let _lock = lock(&parent.join(format!("{key}.lock"))).await?;
    let done = dir.join("done.json");
    let cached = done.is_file();
    if cached {
        // Least recently used goes first: a use is a touch.
        let _ = std::fs::File::options()
            .append(true)
            .open(&done)
            .and_then(|f| f.set_modified(SystemTime::now()));
    } else {
        if dir.exists() {
            // Half an environment from a crash or a failed set-up: never reused.
            std::fs::remove_dir_all(&dir).map_err(|e| Error::io("cannot remove", &dir, e))?;
        }
        std::fs::create_dir_all(dir.join("outputs"))
            .map_err(|e| Error::io("cannot create", &dir, e))?;
        if let Some(o) = plan.outputs.iter().find(|o| root.join(o).exists()) {
            // An output is what set-up makes; one the checkout already holds would cover the
            // run's own files with the base's, read-only, in every later command.
            let _ = std::fs::remove_dir_all(&dir);
            return Ok(Prepared::Failed {
                why: format!(
                    "setup.outputs names {}, which the repository itself holds; name only what set-up makes",
                    o.display()
                ),
                lines: Vec::new(),
                commands: plan.commands.clone(),
            });
        }
        led.audit(
            Kind::Setup,
            json!({"event": "start", "reason": reason, "key": key, "commands": plan.commands, "network": plan.network, "why": plan.why}),
        )?;
        if let Some(failed) = run_commands(led, root, &plan, &dir).await? {
            let _ = std::fs::remove_dir_all(&dir);
            led.audit(
                Kind::Setup,
                json!({"event": "failed", "key": key, "why": failed.0}),
            )?;
            return Ok(Prepared::Failed {
                why: failed.0,
                lines: failed.1,
                commands: plan.commands.clone(),
            });
        }
        for o in &plan.outputs {
            let from = root.join(o);
            let to = dir.join("outputs").join(o);
            if !from.is_dir() {
                let _ = std::fs::remove_dir_all(&dir);
                return Ok(Prepared::Failed {
                    why: format!("set-up made no {} (named in setup.outputs)", o.display()),
                    lines: Vec::new(),
                    commands: plan.commands.clone(),
                });
            }
            if let Some(p) = to.parent() {
                std::fs::create_dir_all(p).map_err(|e| Error::io("cannot create", p, e))?;
            }
            std::fs::rename(&from, &to).map_err(|e| Error::io("cannot keep", &from, e))?;
        }
        let meta = json!({"key": key, "commands": plan.commands, "key_files": plan.key_files, "made_ms": started.elapsed().as_millis() as u64});
        crate::fsutil::write_atomic(
            &done,
            meta.to_string().as_bytes(),
            crate::fsutil::Durability::Durable,
        )
        .map_err(|e| Error::io("cannot write", &done, e))?;
        evict(&svc.config.settings.setup, &parent, &dir);
    }
    let duration_ms = started.elapsed().as_millis() as u64;
    let expand = |v: &str| verify::expand_setup_env(v, &dir);
    let mut env: Vec<(String, String)> = plan
        .env
        .iter()
        .chain(&plan.after_env)
        .map(|(k, v)| (k.clone(), expand(v)))
        .collect();
    env.push((SETUP_ENV_VAR.into(), dir.display().to_string()));
    let run = SetupRun {
        reason: reason.into(),
        key: key.clone(),
        cached,
        duration_ms,
    };
    let mut runs = led
        .rec
        .setup
        .as_ref()
        .map(|s| s.runs.clone())
        .unwrap_or_default();
    runs.push(run);
    led.audit(
        Kind::Setup,
        json!({"event": "ready", "key": key, "cached": cached, "duration_ms": duration_ms}),
    )?;
    Ok(Prepared::Ready(SetupRecord {
        key,
        dir: dir.clone(),
        commands: plan.commands.clone(),
        network: plan.network.clone(),
        key_files: plan.key_files.clone(),
        outputs: plan.outputs.clone(),
        path: plan.path.iter().map(|p| PathBuf::from(expand(p))).collect(),
        env,
        python_packages: plan.python_packages.clone(),
        runs,
    }))
}

/// Run the plan's commands in `root` with `dir` writable and only the plan's network.
/// `Some((why, lines))` when one failed.
async fn run_commands(
    led: &mut Ledger<'_>,
    root: &Path,
    plan: &SetupPlan,
    dir: &Path,
) -> Result<Option<(String, Vec<String>)>> {
    let svc = led.svc;
    let cfg = &svc.config.settings.setup;
    let mut opts = svc.exec_options.clone();
    let hosts = SetupConfig::hosts(&plan.network);
    opts.network = match (opts.sandbox, hosts.is_empty()) {
        (_, true) => NetworkMode::Off,
        // Without a sandbox nothing confines a command to the proxy: the explicit opt-out
        // already gave every command the machine's network.
        (SandboxMode::Off, false) => NetworkMode::On,
        (_, false) => NetworkMode::Allowlist,
    };
    opts.network_allow = hosts;
    opts.writable.push(dir.to_path_buf());
    opts.env = plan
        .env
        .iter()
        .map(|(k, v)| (k.clone(), verify::expand_setup_env(v, dir)))
        .collect();
    opts.env
        .push((SETUP_ENV_VAR.into(), dir.display().to_string()));
    let limit = Duration::from_secs(u64::from(cfg.timeout_minutes.max(1)) * 60);
    opts.timeout = limit;
    let local = match LocalExecutor::new(root, opts) {
        Ok(l) => std::sync::Arc::new(l),
        Err(e) => return Ok(Some((format!("set-up cannot run here: {e}"), Vec::new()))),
    };
    let exec = super::setup::bounded(svc, local);
    let deadline = Instant::now() + limit;
    for command in &plan.commands {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Some((
                format!(
                    "set-up took longer than setup.timeout_minutes = {}",
                    cfg.timeout_minutes
                ),
                Vec::new(),
            )));
        }
        led.progress(super::engine::RunEvent::Setup {
            result: svc.redactor.clean(&format!("running `{command}`")),
        });
        let out = exec
            .run(ExecRequest::shell(command.clone()).timeout(left))
            .await?;
        led.audit(
            Kind::Setup,
            json!({"event": "command", "command": command, "status": out.status, "duration_ms": out.duration.as_millis() as u64, "blocked_hosts": out.blocked_hosts}),
        )?;
        if !out.status.success() {
            return Ok(Some((
                failure_line(command, &out),
                decisive_lines(led, &out),
            )));
        }
    }
    Ok(None)
}

fn failure_line(command: &str, out: &ExecOutput) -> String {
    let how = match out.status {
        crate::exec::Termination::Exited(c) => format!("exited {c}"),
        crate::exec::Termination::Signaled(s) => format!("was killed by signal {s}"),
        crate::exec::Termination::TimedOut => "timed out".into(),
    };
    let blocked = if out.blocked_hosts.is_empty() {
        String::new()
    } else {
        let hosts: Vec<String> = out.blocked_hosts.iter().map(|b| b.host.clone()).collect();
        format!(
            "; the egress proxy refused {} (add it to setup.network in your own configuration)",
            hosts.join(", ")
        )
    };
    let stopped = out
        .stopped
        .as_deref()
        .map(|s| format!(" ({s})"))
        .unwrap_or_default();
    format!("set-up command `{command}` {how}{stopped}{blocked}")
}

/// The last lines of what a failed command printed, redacted.
fn decisive_lines(led: &Ledger<'_>, out: &ExecOutput) -> Vec<String> {
    let text = format!(
        "{}\n{}",
        out.stdout.to_text_lossy(),
        out.stderr.to_text_lossy()
    );
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(15)..];
    tail.iter()
        .map(|l| {
            led.svc
                .redactor
                .redact(&l.chars().take(300).collect::<String>())
        })
        .collect()
}

/// An exclusive lock on `path` (created), waited for without blocking the runtime.
async fn lock(path: &Path) -> Result<std::fs::File> {
    let f = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| Error::io("cannot open", path, e))?;
    loop {
        match f.try_lock() {
            Ok(()) => return Ok(f),
            Err(std::fs::TryLockError::WouldBlock) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io("cannot lock", path, e));
            }
        }
    }
}

/// Keep the whole set-up cache under `setup.cache_mb`: least recently used entries (by
/// their `done.json`'s time) go first; `keep` and entries another run holds stay.
fn evict(cfg: &SetupConfig, parent: &Path, keep: &Path) {
    let Some(state) = parent.parent() else {
        return;
    };
    let cap = cfg.cache_mb.saturating_mul(1 << 20);
    let mut entries: Vec<(SystemTime, u64, PathBuf)> = Vec::new();
    let repos = std::fs::read_dir(state).into_iter().flatten().flatten();
    for repo in repos {
        for e in std::fs::read_dir(repo.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = e.path();
            let Ok(done) = std::fs::metadata(p.join("done.json")) else {
                continue;
            };
            let used = done.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            entries.push((used, size_of(&p), p));
        }
    }
    let mut total: u64 = entries.iter().map(|e| e.1).sum();
    entries.sort();
    for (_, size, p) in entries {
        if total <= cap {
            break;
        }
        if p == keep {
            continue;
        }
        let lock_path = p.with_extension("lock");
        let held = std::fs::File::options()
            .write(true)
            .open(&lock_path)
            .map(|f| f.try_lock().is_err())
            .unwrap_or(false);
        if held {
            continue;
        }
        match std::fs::remove_dir_all(&p) {
            Ok(()) => {
                total = total.saturating_sub(size);
                tracing::info!(entry = %p.display(), "set-up cache entry evicted");
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(entry = %p.display(), error = %e, "cannot evict"),
        }
    }
}

/// Bytes under `p`, not following links.
fn size_of(p: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(_) => total += e.metadata().map(|m| m.len()).unwrap_or(0),
                Err(_) => {}
            }
        }
    }
    total
}

/// Before a test run after the baseline: when the run changed what keys its environment (a
/// manifest, a lockfile), set up again on the changed tree — the same sandbox and network
/// rules, its own audited step — and use that environment from now on. A set-up that fails
/// keeps the old environment and says so in the report; the tests then show the model what
/// its change did.
pub(super) async fn refresh(
    led: &mut Ledger<'_>,
    bench: &super::setup::Workbench,
    cmd: &TestCommand,
) -> Result<()> {
    let Some(current) = led.rec.setup.clone() else {
        return Ok(());
    };
    let root = bench.worktree.path();
    let cfg = &led.svc.config.settings.setup;
    let path_var = std::env::var_os("PATH");
    let Ok(Some(plan)) = verify::setup_plan(root, cfg, Some(cmd), path_var.as_deref()) else {
        return Ok(());
    };
    // What the tool calls and commands changed since the last checkpoint, never what only
    // the test command wrote (a `Cargo.lock` from `cargo test` is not the run's change).
    let changed: Vec<String> = led
        .rec
        .attribution
        .iter()
        .filter(|(_, who)| !who.starts_with(super::attribution::TEST_COMMAND))
        .map(|(p, _)| p.clone())
        .filter(|p| plan.is_key_file(p) || current.key_files.iter().any(|k| k == Path::new(p)))
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    let Ok(key) = plan.key(root) else {
        return Ok(());
    };
    if key == current.key {
        return Ok(());
    }
    let reason = format!(
        "the run changed what keys the set-up ({})",
        changed.join(", ")
    );
    let snapshot = bench.worktree.snapshot()?;
    match ensure(led, snapshot, Some(cmd), &reason).await? {
        Prepared::Ready(setup) => {
            let line = format!("set up again: {reason}");
            led.rec.setup = Some(setup);
            led.rec.notes.push(format!("The environment was {line}."));
            led.save()?;
            bench.use_environment(led)?;
            led.progress(super::engine::RunEvent::Setup {
                result: led.svc.redactor.clean(&line),
            });
        }
        Prepared::Failed { why, .. } => {
            led.rec.notes.push(format!(
                "The run changed what keys the set-up, and setting up again failed ({why}); the tests ran in the earlier environment."
            ));
        }
        Prepared::Nothing => {}
    }
    Ok(())
}

/// The executor options of a run's commands with its set-up in force: the entry bound
/// read-only, its outputs bound into the worktree, its `PATH` and variables.
pub(super) fn exec_options(base: &ExecOptions, setup: Option<&SetupRecord>) -> ExecOptions {
    let mut opts = base.clone();
    if let Some(s) = setup {
        opts.bind.push(s.dir.clone());
        for o in &s.outputs {
            opts.project_binds
                .push((s.dir.join("outputs").join(o), o.clone()));
        }
        opts.env.extend(s.env.iter().cloned());
        opts.path_prefix.extend(s.path.iter().cloned());
    }
    opts
}

/// For a Python project: ask the run's interpreter where each of the project's packages
/// is imported from. `Some(why)` when one resolves outside `root` (an installed copy would
/// be tested, not the run's code) or not at all.
pub(super) async fn check_python(
    exec: &dyn Executor,
    root: &Path,
    setup: &SetupRecord,
) -> Result<Option<String>> {
    if setup.python_packages.is_empty() || !setup.env.iter().any(|(k, _)| k == "VIRTUAL_ENV") {
        return Ok(None);
    }
    let names: Vec<&str> = setup
        .python_packages
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    let script = "import importlib.util, sys\nfor n in sys.argv[1:]:\n    s = importlib.util.find_spec(n)\n    print(n, (s.origin or (list(s.submodule_search_locations or []) or [''])[0]) if s else '')\n";
    let mut argv = vec!["python".to_string(), "-c".into(), script.into()];
    argv.extend(names.iter().map(|n| n.to_string()));
    let out = exec.run(ExecRequest::argv(argv)).await?;
    let text = out.stdout.to_text_lossy();
    for (name, rel) in &setup.python_packages {
        let origin = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or("")
            .trim();
        let inside = root.join(rel);
        if origin.is_empty() || !Path::new(origin).starts_with(&inside) {
            let found = if origin.is_empty() {
                "cannot be imported".to_string()
            } else {
                format!("is imported from {origin}")
            };
            return Ok(Some(format!(
                "the tests would not import the project's own code: package `{name}` {found}, not from {}",
                inside.display()
            )));
        }
    }
    Ok(None)
}
