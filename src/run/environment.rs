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
use super::in_use::{Hold, hold};
use super::ledger::Ledger;
use super::record::{SetupRecord, SetupRun};
use crate::audit::chain::Kind;
use crate::config::{NetworkMode, SandboxMode, SetupConfig};
use crate::exec::{ExecOutput, ExecRequest, Executor, LocalExecutor};
use crate::verify::{self, SETUP_ENV_VAR, SetupPlan, TestCommand};

/// What set-up came to.
pub(super) enum Prepared {
    /// The project needs none.
    Nothing,
    /// Ready (made now or found in the cache), with the hold that keeps a shared entry
    /// from eviction while this run uses it.
    Ready(Box<SetupRecord>, Option<Hold>),
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
    Ok(state_dir(led)?.join("setup").join(led.svc.repo.key()))
}

fn state_dir(led: &Ledger<'_>) -> Result<PathBuf> {
    led.svc
        .repo
        .state_dir()
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            Error::Invalid("set-up needs a state directory (the front door names one)".into())
        })
}

/// The directory of a run's private set-ups: never in the shared cache, removed when the
/// run ends ([`remove_private`]).
fn private_root(state: &Path, run_id: &str) -> PathBuf {
    state.join("setup-runs").join(run_id)
}

/// Remove the private set-ups under `state` of runs that `ended` says have ended (a run
/// that crashed before it could remove its own), with the bytes each took. For `gc`.
pub fn gc_private(state: &Path, ended: &dyn Fn(&str) -> bool) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(state.join("setup-runs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let id = e.file_name().to_string_lossy().into_owned();
        if !ended(&id) {
            continue;
        }
        let bytes = allocated(&e.path());
        if std::fs::remove_dir_all(e.path()).is_ok() {
            out.push((e.path(), bytes));
        }
    }
    out
}

/// Remove the run's private set-ups (it ended: nothing will use them again).
pub(super) fn remove_private(svc: &super::services::Services, run_id: &str) {
    let Some(state) = svc.repo.state_dir() else {
        return;
    };
    let dir = private_root(state, run_id);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => tracing::debug!(dir = %dir.display(), "private set-up removed"),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a private set-up")
        }
    }
}

/// Whose environment a set-up makes, and so who may reuse it (issue 38).
pub(super) enum Scope<'b> {
    /// The base revision's, in the shared cache: every run on its key reuses it, so only a
    /// pristine checkout of the run's base commit may make it.
    Base,
    /// A tree of the run's (a snapshot after it changed what set-up reads, or the committed
    /// tree a person approved): made fresh under the run's private directory with the
    /// base's ecosystems and network, never cached, never seen by another run.
    Run {
        /// The base's environment: its ecosystems and network bound this one.
        base: &'b SetupRecord,
    },
}

/// Set the environment up for `commit`, or find the base's in the cache. `test` is the
/// run's test command.
pub(super) async fn ensure(
    led: &mut Ledger<'_>,
    commit: gix::ObjectId,
    test: Option<&TestCommand>,
    reason: &str,
    scope: Scope<'_>,
) -> Result<Prepared> {
    let svc = led.svc;
    let started = Instant::now();
    if matches!(scope, Scope::Base) && commit != svc.repo.resolve(&led.rec.base_sha)? {
        return Err(Error::Invalid(format!(
            "a shared set-up is made only from the run's base, not {commit}"
        )));
    }
    let name = format!("{}-setup", led.rec.run_id);
    let tree = svc.repo.clean_checkout(&name, commit)?;
    let result = ensure_in(led, &tree, test, reason, scope, started).await;
    if let Err(e) = tree.remove() {
        tracing::warn!(error = %e, "cannot remove the set-up checkout");
    }
    result
}

async fn ensure_in(
    led: &mut Ledger<'_>,
    tree: &crate::workspace::CleanTree,
    test: Option<&TestCommand>,
    reason: &str,
    scope: Scope<'_>,
    started: Instant,
) -> Result<Prepared> {
    let root = tree.path();
    let svc = led.svc;
    let cfg = &svc.config.settings.setup;
    let path_var = std::env::var_os("PATH");
    let planned = match &scope {
        Scope::Base => verify::setup_plan(root, cfg, test, path_var.as_deref()),
        Scope::Run { base } => verify::setup_plan_like_base(
            root,
            cfg,
            test,
            path_var.as_deref(),
            &base.ecosystems,
            &base.network,
        ),
    };
    let plan = match planned {
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
    let key = plan.key(root)?;
    let private = matches!(scope, Scope::Run { .. });
    let (parent, dir) = if private {
        let parent = private_root(&state_dir(led)?, &led.rec.run_id);
        let n = led.rec.setup.as_ref().map_or(0, |s| s.runs.len());
        let dir = parent.join(format!("{key}-{n}"));
        (parent, dir)
    } else {
        let parent = cache_root(led)?;
        let dir = parent.join(&key);
        (parent, dir)
    };
    std::fs::create_dir_all(&parent).map_err(|e| Error::io("cannot create", &parent, e))?;
    // A private set-up is the run's alone; the lock keeps two runs from making (or one from
    // evicting) a shared entry at once.
    let _lock = if private {
        None
    } else {
        Some(lock(&parent.join(format!("{key}.lock"))).await?)
    };
    let done = dir.join("done.json");
    let cached = !private && done.is_file();
    if cached {
        // What the set-up that made it had to say (install scripts it skipped) is this
        // run's to report too.
        if let Some(notes) = std::fs::read(&done)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|m| m["notes"].as_array().cloned())
        {
            led.rec
                .notes
                .extend(notes.iter().filter_map(|n| n.as_str().map(String::from)));
        }
        // Least recently used goes first: a use is a touch.
        let _ = std::fs::File::options()
            .append(true)
            .open(&done)
            .and_then(|f| f.set_modified(SystemTime::now()));
    } else if let Some(failed) = make(led, tree, &plan, &key, &dir, reason).await? {
        return Ok(failed);
    } else if !private {
        evict(&svc.config.settings.setup, &parent, &dir);
    }
    // Taken while the creation lock is still held: no eviction can come in between.
    let held = if private { None } else { hold(&dir) };
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
        private,
    };
    led.audit(
        Kind::Setup,
        json!({"event": "ready", "key": key, "cached": cached, "private": private, "duration_ms": duration_ms}),
    )?;
    Ok(Prepared::Ready(
        Box::new(SetupRecord {
            key,
            dir: dir.clone(),
            commands: plan.commands.clone(),
            network: plan.network.clone(),
            key_files: plan.key_files.clone(),
            outputs: plan.outputs.clone(),
            ecosystems: plan.ecosystems.clone(),
            path: plan.path.iter().map(|p| PathBuf::from(expand(p))).collect(),
            env,
            python_packages: plan.python_packages.clone(),
            sources: plan.sources.clone(),
            before_tests: plan.before_tests.clone(),
            runs: vec![run],
        }),
        held,
    ))
}

/// Run the plan in `root` into a fresh entry `dir` and keep its outputs there; the entry is
/// complete once `done.json` is written. `Some(failure)` when it could not be made (the
/// entry is then removed).
async fn make(
    led: &mut Ledger<'_>,
    tree: &crate::workspace::CleanTree,
    plan: &SetupPlan,
    key: &str,
    dir: &Path,
    reason: &str,
) -> Result<Option<Prepared>> {
    let root = tree.path();
    let failed = |why: String, lines: Vec<String>| {
        let _ = std::fs::remove_dir_all(dir);
        Prepared::Failed {
            why,
            lines,
            commands: plan.commands.clone(),
        }
    };
    if dir.exists() {
        // Half an environment from a crash or a failed set-up: never reused.
        std::fs::remove_dir_all(dir).map_err(|e| Error::io("cannot remove", dir, e))?;
    }
    std::fs::create_dir_all(dir.join("outputs")).map_err(|e| Error::io("cannot create", dir, e))?;
    if let Some(o) = plan.outputs.iter().find(|o| root.join(o).exists()) {
        // An output is what set-up makes; one the checkout already holds would cover the
        // run's own files with the base's, read-only, in every later command.
        return Ok(Some(failed(
            format!(
                "setup.outputs names {}, which the repository itself holds; name only what set-up makes",
                o.display()
            ),
            Vec::new(),
        )));
    }
    led.audit(
        Kind::Setup,
        json!({"event": "start", "reason": reason, "key": key, "commands": plan.commands, "network": plan.network, "why": plan.why}),
    )?;
    if let Err(why) = write_plan_files(dir, &plan.files) {
        return Ok(Some(failed(why, Vec::new())));
    }
    let mut notes = Vec::new();
    if let Some((why, lines)) = run_commands(led, tree, plan, dir, &mut notes).await? {
        led.audit(
            Kind::Setup,
            json!({"event": "failed", "key": key, "why": why}),
        )?;
        return Ok(Some(failed(why, lines)));
    }
    if let Err(why) = outputs_stay_outputs(root, dir, &plan.outputs) {
        led.audit(
            Kind::Setup,
            json!({"event": "failed", "key": key, "why": why}),
        )?;
        return Ok(Some(failed(why, Vec::new())));
    }
    for o in &plan.outputs {
        let from = root.join(o);
        let to = dir.join("outputs").join(o);
        if let Some(p) = to.parent() {
            std::fs::create_dir_all(p).map_err(|e| Error::io("cannot create", p, e))?;
        }
        std::fs::rename(&from, &to).map_err(|e| Error::io("cannot keep", &from, e))?;
    }
    let cap = entry_cap(&led.svc.config.settings.setup);
    let used = allocated(dir);
    if used > cap {
        // Refused, never a reason to evict other entries to make room.
        let why = format!(
            "set-up left {} MiB in its environment, more than one environment may take (half of setup.cache_mb = {}); raise setup.cache_mb in your own configuration",
            used >> 20,
            led.svc.config.settings.setup.cache_mb
        );
        led.audit(
            Kind::Setup,
            json!({"event": "failed", "key": key, "why": why}),
        )?;
        return Ok(Some(failed(why, Vec::new())));
    }
    let meta = json!({"key": key, "commands": plan.commands, "key_files": plan.key_files, "bytes": used, "notes": notes});
    led.rec.notes.extend(notes);
    let done = dir.join("done.json");
    crate::fsutil::write_atomic(
        &done,
        meta.to_string().as_bytes(),
        crate::fsutil::Durability::Durable,
    )
    .map_err(|e| Error::io("cannot write", &done, e))?;
    Ok(None)
}

/// Write the files the plan made from the project (`constraints.txt` from a lockfile) into
/// the fresh entry `dir`: plain names only, never a path.
fn write_plan_files(dir: &Path, files: &[(String, String)]) -> std::result::Result<(), String> {
    for (name, content) in files {
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
        if !plain {
            return Err(format!(
                "set-up plan names a file {name:?} that is not a plain name"
            ));
        }
        std::fs::write(dir.join(name), content)
            .map_err(|e| format!("cannot write {name} into the set-up environment: {e}"))?;
    }
    Ok(())
}

/// Run the plan's commands in `root` with `dir` writable and only the plan's network.
/// `Some((why, lines))` when one failed.
async fn run_commands(
    led: &mut Ledger<'_>,
    tree: &crate::workspace::CleanTree,
    plan: &SetupPlan,
    dir: &Path,
    notes: &mut Vec<String>,
) -> Result<Option<(String, Vec<String>)>> {
    let root = tree.path();
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
    // git works in the checkout (a version from a tag): its objects, read-only (issue 39).
    opts.bind.push(tree.objects().to_path_buf());
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
        led.progress(super::services::RunEvent::Setup {
            result: svc.redactor.clean(&format!("running `{command}`")),
        });
        let out = exec
            .run(ExecRequest::shell(command.clone()).timeout(left))
            .await?;
        audit_command(led, command, &out)?;
        if out.status.success() {
            continue;
        }
        let Some(retry) = without_install_scripts(command).filter(|_| install_script_failed(&out))
        else {
            return Ok(Some((
                failure_line(command, &out),
                decisive_lines(led, &out),
            )));
        };
        // A dependency's install script (a downloader, a telemetry ping) failed, often on a
        // host the policy does not allow: once more without scripts, never with more network
        // (issue 39). The tests say whether the project needed what the script made.
        let reached: Vec<String> = out.blocked_hosts.iter().map(|b| b.host.clone()).collect();
        led.audit(
            Kind::Setup,
            json!({"event": "retry_without_install_scripts", "command": retry, "blocked_hosts": reached}),
        )?;
        let left = deadline.saturating_duration_since(Instant::now());
        let again = exec
            .run(ExecRequest::shell(retry.clone()).timeout(left))
            .await?;
        audit_command(led, &retry, &again)?;
        if !again.status.success() {
            return Ok(Some((
                failure_line(command, &out),
                decisive_lines(led, &out),
            )));
        }
        let on = if reached.is_empty() {
            String::new()
        } else {
            format!(
                " (it reached for {}, which the policy does not allow)",
                reached.join(", ")
            )
        };
        notes.push(format!(
            "A dependency's install script failed{on}: set-up ran `{retry}` instead, with install scripts skipped and no more network."
        ));
    }
    Ok(None)
}

/// One set-up command and how it ended, in the audit log.
fn audit_command(led: &mut Ledger<'_>, command: &str, out: &ExecOutput) -> Result<()> {
    led.audit(
        Kind::Setup,
        json!({"event": "command", "command": command, "status": out.status, "duration_ms": out.duration.as_millis() as u64, "blocked_hosts": out.blocked_hosts}),
    )
}

/// The package manager's install `command` with its dependencies' lifecycle scripts
/// skipped, when it is one that can (`npm ci`/`install`, `pnpm install`, `yarn install`).
fn without_install_scripts(command: &str) -> Option<String> {
    let installs = [
        "npm ci",
        "npm install",
        "pnpm install",
        "yarn install --frozen-lockfile",
    ];
    // A package manager set-up installed is invoked by its path: `"…/.bin/pnpm" install`.
    let program = match command.strip_prefix('"').and_then(|c| c.split_once('"')) {
        Some((path, rest)) => format!("{}{rest}", path.rsplit('/').next().unwrap_or(path)),
        None => command.to_string(),
    };
    (installs.iter().any(|i| program.starts_with(i)) && !command.contains("--ignore-scripts"))
        .then(|| format!("{command} --ignore-scripts"))
}

/// Whether a failed install failed in a lifecycle script (or reached for a host the proxy
/// refused).
fn install_script_failed(out: &ExecOutput) -> bool {
    if !out.blocked_hosts.is_empty() {
        return true;
    }
    let text = format!(
        "{}\n{}",
        out.stdout.to_text_lossy(),
        out.stderr.to_text_lossy()
    )
    .to_lowercase();
    [
        "command sh -c",
        "elifecycle",
        "lifecycle script",
        "install script",
    ]
    .iter()
    .any(|m| text.contains(m))
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

/// Whether what set-up left can be kept as outputs: the entry's `outputs` directory is still
/// the one the agent made, and each output is a directory the commands made in the
/// checkout, reached with no symbolic link followed. A link (`node_modules -> /`, left by
/// a dependency's `postinstall`) would be bound into every later command wherever it
/// points. `Err(why)`, one line, when not.
fn outputs_stay_outputs(
    root: &Path,
    dir: &Path,
    outputs: &[PathBuf],
) -> std::result::Result<(), String> {
    if let Err(e) = crate::fsutil::dir_without_links(dir, Path::new("outputs")) {
        return Err(format!(
            "set-up replaced the cache entry's outputs directory ({}); refused",
            crate::fsutil::link_refusal(&e)
        ));
    }
    for o in outputs {
        if let Err(e) = crate::fsutil::dir_without_links(root, o) {
            let why = match e.raw_os_error() {
                Some(libc::ENOENT) => {
                    format!("set-up made no {} (named in setup.outputs)", o.display())
                }
                _ => format!(
                    "set-up output {} is refused: {}; an output must be a directory the set-up made",
                    o.display(),
                    crate::fsutil::link_refusal(&e)
                ),
            };
            return Err(why);
        }
    }
    Ok(())
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

/// The most one environment may take: half of `setup.cache_mb`, so that one set-up can
/// never claim the whole cache.
fn entry_cap(cfg: &SetupConfig) -> u64 {
    cfg.cache_mb.saturating_mul(1 << 20) / 2
}

/// Keep the whole set-up cache under `setup.cache_mb`: least recently used entries (by
/// their `done.json`'s time) go first; `keep`, and every entry a run holds or is making
/// (its `.use` or `.lock` taken), stay. Sizes are what the entries really take on disk
/// (allocated blocks, each file once), so sparse files or hard links cannot steer it.
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
            entries.push((used, allocated(&p), p));
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
        // Both locks, kept until the entry is gone: no run may start using it meanwhile.
        let Some(_claims) = claim_for_eviction(&p) else {
            continue;
        };
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

/// The entry's creation lock and use lock, both exclusively, without waiting: `None` when a
/// run is making the entry or holds it.
fn claim_for_eviction(entry: &Path) -> Option<(std::fs::File, std::fs::File)> {
    let take = |ext: &str| {
        let f = std::fs::File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(entry.with_extension(ext))
            .ok()?;
        f.try_lock().ok()?;
        Some(f)
    };
    Some((take("lock")?, take("use")?))
}

/// Bytes `p` really takes on disk: allocated blocks, each file (inode) once, links not
/// followed.
fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(m) = e.metadata() else { continue };
            if !seen.insert((m.dev(), m.ino())) {
                continue;
            }
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

/// Before a test run in the worktree after the baseline: when the run changed what keys
/// its environment (a manifest, a lockfile), set up again on a snapshot of its tree —
/// privately, with the base's ecosystems and network, its own audited step — and give the
/// worktree's commands that environment from now on, so the model sees what its change
/// does. It never decides a verification, and no other run ever sees it (issue 38). Back
/// on the base's key, the worktree gets the base's environment again. A set-up that fails
/// keeps the old environment and says so in the report.
pub(super) async fn refresh(
    led: &mut Ledger<'_>,
    bench: &super::setup::Workbench,
    cmd: &TestCommand,
) -> Result<()> {
    let Some(base) = led.rec.setup.clone() else {
        return Ok(());
    };
    let current = led.rec.setup_run.clone().unwrap_or_else(|| base.clone());
    let root = bench.worktree.path();
    let cfg = &led.svc.config.settings.setup;
    let path_var = std::env::var_os("PATH");
    let Ok(Some(plan)) = verify::setup_plan_like_base(
        root,
        cfg,
        Some(cmd),
        path_var.as_deref(),
        &base.ecosystems,
        &base.network,
    ) else {
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
    if key == base.key {
        led.rec.setup_run = None;
        led.rec
            .notes
            .push("The run's tree keys the base's environment again; its commands use it.".into());
        led.save()?;
        bench.use_environment(led)?;
        return Ok(());
    }
    let reason = format!(
        "the run changed what keys the set-up ({})",
        changed.join(", ")
    );
    let snapshot = bench.worktree.snapshot()?;
    match ensure(
        led,
        snapshot,
        Some(cmd),
        &reason,
        Scope::Run { base: &base },
    )
    .await?
    {
        Prepared::Ready(mine, _) => {
            let line = format!("set up again, privately for the run's own tree: {reason}");
            if let Some(b) = led.rec.setup.as_mut() {
                b.runs.extend(mine.runs.iter().cloned());
            }
            led.rec.setup_run = Some(*mine);
            led.rec.notes.push(format!(
                "The environment was {line}. Its commands in the worktree use it; the verification that decides uses the base's environment unless a person approves the change."
            ));
            led.save()?;
            bench.use_environment(led)?;
            led.progress(super::services::RunEvent::Setup {
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

/// The environment the deciding verification of `commit` (what would be committed) runs in.
pub(super) enum Deciding {
    /// The base's (`None`: the project needs no set-up).
    Base(Option<SetupRecord>),
    /// A fresh, private set-up of the committed tree: the change touches what set-up reads,
    /// and the commit-time gate let it through (a person approved it, or the policy allows).
    Fresh(SetupRecord),
    /// That set-up could not be made: the change cannot be verified.
    Failed(String),
}

impl Deciding {
    /// The record the deciding runs get.
    pub(super) fn record(&self) -> Option<&SetupRecord> {
        match self {
            Deciding::Base(s) => s.as_ref(),
            Deciding::Fresh(s) => Some(s),
            Deciding::Failed(_) => None,
        }
    }

    /// One line for the integrity block.
    pub(super) fn line(&self) -> Option<String> {
        match self {
            Deciding::Base(None) => None,
            Deciding::Base(Some(s)) => Some(format!("the base's (key {})", s.key)),
            Deciding::Fresh(s) => Some(format!(
                "a fresh set-up of the committed tree (key {}), never cached: the change touches what set-up reads",
                s.key
            )),
            Deciding::Failed(why) => Some(format!(
                "none: setting up the committed tree failed ({why})"
            )),
        }
    }
}

/// The environment that decides the verification of `commit`: the base's, unless `changed`
/// (the paths the run changed from the base) touches what set-up reads — then a fresh set-up
/// of exactly that tree, made now, private to the run, never the one the run's commands
/// used while it worked (issue 38).
pub(super) async fn deciding(
    led: &mut Ledger<'_>,
    commit: gix::ObjectId,
    cmd: &TestCommand,
    changed: &[String],
) -> Result<Deciding> {
    let Some(base) = led.rec.setup.clone() else {
        return Ok(Deciding::Base(None));
    };
    let inputs = setup_inputs(Some(&base), changed);
    if inputs.is_empty() {
        return Ok(Deciding::Base(Some(base)));
    }
    let reason = format!(
        "the deciding verification of a change to what set-up reads ({})",
        inputs
            .iter()
            .map(|(p, _)| p.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(
        match ensure(led, commit, Some(cmd), &reason, Scope::Run { base: &base }).await? {
            Prepared::Ready(fresh, _) => {
                if let Some(b) = led.rec.setup.as_mut() {
                    b.runs.extend(fresh.runs.iter().cloned());
                }
                Deciding::Fresh(*fresh)
            }
            Prepared::Failed { why, .. } => Deciding::Failed(why),
            Prepared::Nothing => Deciding::Base(Some(base)),
        },
    )
}

/// The paths among `changed` that set-up reads, each with why: a manifest, lockfile,
/// requirement or package-manager configuration file by name (`verify::setup_input`), or a
/// file the base's plan keys on.
pub(super) fn setup_inputs(
    setup: Option<&SetupRecord>,
    changed: &[String],
) -> Vec<(String, String)> {
    changed
        .iter()
        .filter_map(|p| {
            let why = verify::setup_input(p).map(String::from).or_else(|| {
                setup
                    .is_some_and(|s| s.key_files.iter().any(|k| k == Path::new(p)))
                    .then(|| "a file the set-up's cache key covers".to_string())
            })?;
            Some((p.clone(), why))
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A complete entry `name` under `parent` holding `real` bytes of data and a sparse file
    /// of `sparse` bytes' apparent size.
    fn entry(parent: &Path, name: &str, real: usize, sparse: u64) -> PathBuf {
        let dir = parent.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("data"), vec![7u8; real]).unwrap();
        let f = std::fs::File::create(dir.join("sparse")).unwrap();
        f.set_len(sparse).unwrap();
        std::fs::write(dir.join("done.json"), "{}").unwrap();
        dir
    }

    fn cfg(cache_mb: u64) -> SetupConfig {
        SetupConfig {
            cache_mb,
            ..SetupConfig::default()
        }
    }

    #[test]
    fn sparse_files_and_hard_links_count_what_they_take_on_disk() {
        let d = tempfile::tempdir().unwrap();
        let e = entry(d.path(), "k", 1 << 20, 100 << 30);
        for i in 0..50 {
            std::fs::hard_link(e.join("data"), e.join(format!("link{i}"))).unwrap();
        }
        let used = allocated(&e);
        assert!(used >= 1 << 20, "{used}");
        assert!(used < 4 << 20, "a 100 GiB sparse file and 50 links: {used}");
    }

    /// Issue 38: a set-up that writes sparse files cannot make eviction remove the others,
    /// and an entry a run holds is never removed, whatever the cache's size.
    #[test]
    fn eviction_counts_blocks_and_keeps_what_a_run_holds() {
        let d = tempfile::tempdir().unwrap();
        let parent = d.path().join("setup/repo");
        let base = entry(&parent, "base", 1 << 20, 0);
        std::thread::sleep(Duration::from_millis(20));
        let hostile = entry(&parent, "hostile", 0, 100 << 30);
        evict(&cfg(4), &parent, &hostile);
        assert!(base.join("done.json").is_file(), "the base's entry stays");

        // Over the cap for real: the least recently used goes, unless a run holds it.
        let other = entry(&parent, "other", 3 << 20, 0);
        let held = hold(&base).expect("hold");
        evict(&cfg(2), &parent, &other);
        assert!(base.is_dir(), "a held entry is never evicted");
        drop(held);
        // A process another test forks in this one keeps a copy of the hold's descriptor
        // (and so the lock) until it execs: a moment, so the next eviction may still skip it.
        for _ in 0..100 {
            evict(&cfg(2), &parent, &other);
            if !base.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!base.exists(), "unheld, the least recently used goes");
        assert!(other.is_dir(), "the entry just made stays");
    }

    #[test]
    fn only_a_package_managers_install_is_retried_without_scripts() {
        assert_eq!(
            without_install_scripts("npm ci --no-audit --no-fund").as_deref(),
            Some("npm ci --no-audit --no-fund --ignore-scripts")
        );
        assert!(without_install_scripts("pnpm install --frozen-lockfile").is_some());
        assert_eq!(
            without_install_scripts(
                "\"$GIT_AGENT_ENV/pm/node_modules/.bin/pnpm\" install --frozen-lockfile"
            )
            .as_deref(),
            Some(
                "\"$GIT_AGENT_ENV/pm/node_modules/.bin/pnpm\" install --frozen-lockfile --ignore-scripts"
            )
        );
        assert!(
            without_install_scripts(
                "\"$GIT_AGENT_ENV/pm/node_modules/.bin/yarn\" install --immutable"
            )
            .is_none()
        );
        assert!(without_install_scripts("npm ci --ignore-scripts").is_none());
        assert!(without_install_scripts("python3 -m venv x").is_none());
        assert!(without_install_scripts("cargo fetch").is_none());
    }

    #[test]
    fn one_environment_may_take_half_the_cache() {
        assert_eq!(entry_cap(&cfg(100)), 50 << 20);
    }
}
