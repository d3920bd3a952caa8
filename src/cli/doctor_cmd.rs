//! `git agent doctor` and `git agent sandbox --explain`: what this machine gives a run of the
//! repository the command stands in.
//!
//! The doctor is a list of sections, each a check that returns a [`Section`] (a verdict,
//! lines for a person, details for `--json`). The first is the sandbox: the view a command
//! gets, with the limits, namespaces and fallbacks actually in force (computed by
//! `exec::explain`, i.e. by making the executor). Later checks (environment set-up, the test
//! command) are added to [`SECTIONS`].

use std::io::Write as _;
use std::path::PathBuf;

use serde::Serialize;

use super::context;
use crate::config::Settings;
use crate::exec::{Explanation, explain};

/// Arguments of `git agent doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the sections as JSON.
    #[arg(long)]
    pub json: bool,
    /// Repository to check (default: the current directory's).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Also do what a run does before its first model turn, for real: set the project up
    /// (or find it in the cache) and run its tests once on the base, in the sandbox. Says
    /// whether they run, what failed, and where the project's code is imported from. No
    /// model is called and nothing is edited.
    #[arg(long)]
    pub run: bool,
}

/// Arguments of `git agent sandbox`.
#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    /// Print the view a command gets here: binds (and why), what is hidden, tmpfs sizes,
    /// namespaces, Landlock, seccomp, limits, network and the fallbacks taken.
    #[arg(long, required = true)]
    pub explain: bool,
    /// Print it as JSON.
    #[arg(long)]
    pub json: bool,
    /// Repository to explain for (default: the current directory's).
    #[arg(long)]
    pub repo: Option<PathBuf>,
}

/// What every check gets.
pub struct Context {
    /// The repository's working directory (a run's worktree gets the same view).
    pub worktree: PathBuf,
    /// The resolved settings (user file, the repository's file at its base, environment).
    pub settings: Settings,
    /// The repository's name under the state directory (`None` outside a repository).
    pub repo_key: Option<String>,
}

/// One section of the doctor's report.
#[derive(Debug, Serialize)]
pub struct Section {
    /// Short name, e.g. `sandbox`.
    pub name: &'static str,
    /// Whether what it checks works here.
    pub ok: bool,
    /// Lines for a person.
    pub lines: Vec<String>,
    /// Details for a program.
    pub detail: serde_json::Value,
}

/// The doctor's checks, in the order they are printed.
pub const SECTIONS: &[fn(&Context) -> Section] = &[sandbox_section, tests_section, setup_section];

/// The test command a run would use here, and why.
fn tests_section(ctx: &Context) -> Section {
    match crate::verify::resolve(&ctx.worktree, None, ctx.settings.verify.test.as_deref()) {
        Ok(Some(cmd)) => {
            let from = match &cmd.source {
                crate::verify::CommandSource::Flag => "--test-cmd".to_string(),
                crate::verify::CommandSource::Config => "verify.test in the configuration".into(),
                crate::verify::CommandSource::Detected { marker } => {
                    format!("detected from {}", marker.display())
                }
            };
            let run = crate::verify::reliable_command(&cmd);
            Section {
                name: "tests",
                ok: true,
                lines: vec![
                    format!("command: {} ({from})", cmd.command),
                    format!("runs as: {}", run.command),
                ],
                detail: serde_json::json!({"command": cmd, "runs_as": run.command}),
            }
        }
        // Not a failure of this machine: a run can still work, it only cannot verify.
        Ok(None) => Section {
            name: "tests",
            ok: true,
            lines: vec![
                "no test command found: a run here cannot verify its change; set `verify.test` in .github/agent.toml or pass --test-cmd"
                    .into(),
            ],
            detail: serde_json::Value::Null,
        },
        Err(e) => Section {
            name: "tests",
            ok: false,
            lines: vec![format!("cannot read the project: {e}")],
            detail: serde_json::Value::Null,
        },
    }
}

/// The environment set-up a run would do here (issue 19): the commands and why, the
/// network it may use, the files that key its cache, and whether the cache is warm.
fn setup_section(ctx: &Context) -> Section {
    let cfg = &ctx.settings.setup;
    let test = crate::verify::resolve(&ctx.worktree, None, ctx.settings.verify.test.as_deref())
        .ok()
        .flatten();
    let path_var = std::env::var_os("PATH");
    let plan = match crate::verify::setup_plan(
        &ctx.worktree,
        cfg,
        test.as_ref(),
        path_var.as_deref(),
    ) {
        Ok(Some(p)) => p,
        Ok(None) => {
            let why = if !cfg.enabled {
                "set-up is off (setup.enabled = false)"
            } else {
                "nothing to set up: no manifest names dependencies, and [setup] names no commands"
            };
            return Section {
                name: "setup",
                ok: true,
                lines: vec![why.into()],
                detail: serde_json::Value::Null,
            };
        }
        Err(e) => {
            return Section {
                name: "setup",
                ok: false,
                lines: vec![format!("{e}")],
                detail: serde_json::Value::Null,
            };
        }
    };
    let key = plan.key(&ctx.worktree).ok();
    let entry = match (crate::config::user_state_dir(), &ctx.repo_key, &key) {
        (Some(state), Some(repo), Some(key)) => Some(state.join("setup").join(repo).join(key)),
        _ => None,
    };
    let warm = entry
        .as_ref()
        .is_some_and(|e| e.join("done.json").is_file());
    let mut lines = vec!["commands (in a fresh checkout of the base, sandboxed):".to_string()];
    lines.extend(plan.commands.iter().map(|c| format!("  {c}")));
    lines.extend(plan.why.iter().map(|w| format!("why: {w}")));
    let hosts = crate::config::SetupConfig::hosts(&plan.network);
    lines.push(if hosts.is_empty() {
        "network: none".into()
    } else {
        format!(
            "network: {} ({})",
            plan.network.join(", "),
            hosts.join(", ")
        )
    });
    lines.push(format!(
        "cache key: {} from {}",
        key.as_deref().unwrap_or("?"),
        if plan.key_files.is_empty() {
            "the commands".to_string()
        } else {
            format!(
                "the commands and {}",
                plan.key_files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    ));
    if let Some(e) = &entry {
        lines.push(format!(
            "cache: {} ({})",
            e.display(),
            if warm {
                "warm: a run reuses it"
            } else {
                "cold: the next run sets up"
            }
        ));
    }
    if !plan.outputs.is_empty() {
        lines.push(format!(
            "mounted read-only into the worktree: {}",
            plan.outputs
                .iter()
                .map(|o| o.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !plan.python_packages.is_empty() {
        lines.push(format!(
            "python packages that must import from the worktree: {}",
            plan.python_packages
                .iter()
                .map(|(n, d)| format!("{n} ({})", d.join(n).display()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Section {
        name: "setup",
        ok: true,
        lines,
        detail: serde_json::json!({"plan": plan, "key": key, "entry": entry, "warm": warm, "hosts": hosts}),
    }
}

/// The context for the repository at `repo` (or the current directory's).
fn context(repo: Option<&std::path::Path>) -> anyhow::Result<Context> {
    let opened = context::open_repo(repo).ok();
    // The repository's own file at its base, when it has one (not in a repository without
    // commits).
    let base = opened
        .as_ref()
        .map(|_| context::DEFAULT_BASE.to_string())
        .filter(|b| opened.as_ref().is_some_and(|r| r.resolve(b).is_ok()));
    let cfg = context::load_config(opened.as_ref().zip(base.as_deref()), None, Vec::new())?;
    let worktree = match opened.as_ref().and_then(|r| r.workdir()) {
        Some(w) => w.to_path_buf(),
        None => match repo {
            Some(r) => r.to_path_buf(),
            None => std::env::current_dir()?,
        },
    };
    Ok(Context {
        worktree,
        settings: cfg.settings,
        repo_key: opened.as_ref().map(|r| r.key()),
    })
}

pub fn doctor(args: DoctorArgs) -> anyhow::Result<u8> {
    let ctx = context(args.repo.as_deref())?;
    let mut sections: Vec<Section> = SECTIONS.iter().map(|check| check(&ctx)).collect();
    if args.run {
        sections.push(run_section(args.repo.as_deref(), args.json)?);
    }
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "sections": sections }))?
        )?;
    } else {
        for s in &sections {
            writeln!(out, "== {}: {}", s.name, if s.ok { "ok" } else { "FAILED" })?;
            for l in &s.lines {
                writeln!(out, "{l}")?;
            }
            writeln!(out)?;
        }
    }
    Ok(if sections.iter().all(|s| s.ok) {
        super::exit::SUCCEEDED
    } else {
        super::exit::FAILED
    })
}

pub fn sandbox(args: SandboxArgs) -> anyhow::Result<u8> {
    let ctx = context(args.repo.as_deref())?;
    let e = explain_for(&ctx);
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&e)?)?;
    } else {
        for l in lines(&e) {
            writeln!(out, "{l}")?;
        }
    }
    Ok(if e.ok() {
        super::exit::SUCCEEDED
    } else {
        super::exit::FAILED
    })
}

/// `--run`: an environment check run (set-up, then the baseline; no model, no edit) through
/// the engine a run uses, so what it says is what a run would see.
fn run_section(repo: Option<&std::path::Path>, json: bool) -> anyhow::Result<Section> {
    use crate::run::engine::{self, StartOptions};
    use crate::task::{Mode, Origin, Task};
    let repo = context::open_repo(repo)?;
    let base = context::DEFAULT_BASE.to_string();
    let cfg = context::load_config(Some((&repo, &base)), None, Vec::new())?;
    let progress = super::fix_cmd::progress_printer(json)?;
    let svc = crate::run::services::build(
        repo,
        cfg,
        crate::run::services::Options {
            models: Vec::new(),
            record: None,
            resume: None,
            progress: progress.callback(),
            state_dir: None,
            without_model: true,
            secrets: Vec::new(),
        },
    )?;
    let task = Task {
        goal: "Environment check (git agent doctor --run): set up and run the tests once.".into(),
        mode: Mode::Check,
        origin: Origin::Cli,
        repo: None,
        base,
        branch: None,
        requested_by: None,
        key: String::new(),
    };
    let rt = tokio::runtime::Runtime::new()?;
    let outcome = rt.block_on(engine::start(&svc, task, StartOptions::default()));
    progress.finish();
    let rec = outcome?.record;
    Ok(check_run_section(&rec))
}

/// The section for an ended environment check run.
fn check_run_section(rec: &crate::run::record::RunRecord) -> Section {
    use crate::run::state::RunState;
    let ok = rec.state == RunState::Succeeded;
    let mut lines = Vec::new();
    match &rec.setup {
        Some(s) => {
            lines.push(format!("set-up: {}", s.summary()));
            if !s.python_packages.is_empty() && ok {
                let where_: Vec<String> = s
                    .python_packages
                    .iter()
                    .map(|(name, dir)| {
                        let dir = if dir.as_os_str().is_empty() {
                            "the project's root".to_string()
                        } else {
                            format!("{}/", dir.display())
                        };
                        format!("{name} from {dir}")
                    })
                    .collect();
                lines.push(format!(
                    "imports: the tests import the checkout's own code ({}), checked before the baseline",
                    where_.join(", ")
                ));
            }
        }
        None => lines.push("set-up: none (nothing detected or declared to install)".into()),
    }
    match &rec.test_command {
        Some(c) => lines.push(format!("tests: `{c}`")),
        None => lines.push("tests: no test command found".into()),
    }
    for v in &rec.verification {
        lines.push(format!(
            "  {}: {} in {:.1} s",
            v.when,
            v.result,
            v.duration_ms as f64 / 1000.0
        ));
        if !ok && !v.excerpt.is_empty() {
            lines.extend(v.excerpt.lines().take(12).map(|l| format!("    | {l}")));
        }
    }
    for n in &rec.notes {
        lines.push(format!("note: {n}"));
    }
    lines.push(format!(
        "run {} ended {}; `git agent log {}` shows its audit trail",
        rec.run_id, rec.state, rec.run_id
    ));
    Section {
        name: "run",
        ok,
        lines,
        detail: serde_json::json!({
            "run_id": rec.run_id,
            "state": rec.state,
            "setup": rec.setup,
            "test_command": rec.test_command,
            "verification": rec.verification,
            "notes": rec.notes,
        }),
    }
}

/// The sandbox a run here would get, every secret a setting names hidden: those of this
/// machine's git configuration, `sandbox.hide`, and the bot's key files as its variables name
/// them (`git agent serve` started here reads the same ones).
fn explain_for(ctx: &Context) -> Explanation {
    let secrets = super::serve_cmd::secret_files_from_env();
    let opts = crate::run::services::exec_options(&ctx.settings, &ctx.worktree, secrets);
    explain(&ctx.worktree, opts)
}

/// The doctor's first section: the sandbox.
fn sandbox_section(ctx: &Context) -> Section {
    let e = explain_for(ctx);
    Section {
        name: "sandbox",
        ok: e.ok(),
        lines: lines(&e),
        detail: serde_json::to_value(&e).unwrap_or_default(),
    }
}

/// The explanation as lines for a person.
fn lines(e: &Explanation) -> Vec<String> {
    let mut l = vec![format!(
        "worktree: {} (a run's own worktree gets the same view)",
        e.worktree.display()
    )];
    if let Some(why) = &e.unavailable {
        l.push(format!("UNAVAILABLE: no command can run: {why}"));
    }
    if let Some(r) = &e.report {
        l.push(format!(
            "mechanism: {} (asked: {})",
            serde_plain(&r.mechanism),
            serde_plain(&r.requested)
        ));
    }
    if e.view.is_empty() {
        if e.report.is_some() {
            l.push("view: none, the sandbox is off: commands see the whole machine".into());
        }
    } else {
        l.push("view (nothing else of the machine exists in it):".into());
        let width = e
            .view
            .iter()
            .map(|v| v.target.as_os_str().len())
            .max()
            .unwrap_or(0)
            .min(50);
        for v in &e.view {
            let what = match (v.kind, &v.source, v.access, v.size_mib) {
                ("bind", Some(src), Some(a), _) if *src == v.target => format!("{a} bind"),
                ("bind", Some(src), Some(a), _) => format!("{a} bind of {}", src.display()),
                ("tmpfs", _, _, Some(mib)) => format!("rw tmpfs, at most {mib} MiB"),
                ("symlink", Some(t), _, _) => format!("symlink to {}", t.display()),
                ("hidden", ..) => "hidden (covered with an empty read-only one)".into(),
                ("dev", _, _, Some(mib)) => {
                    format!("null zero full random urandom tty, own pts, shm at most {mib} MiB")
                }
                ("proc", ..) => "own /proc".into(),
                (k, ..) => k.to_string(),
            };
            let why = if v.why.is_empty() {
                String::new()
            } else {
                format!("  ({})", v.why)
            };
            l.push(format!(
                "  {:<width$}  {what}{why}",
                v.target.display().to_string()
            ));
        }
    }
    for n in &e.not_bound {
        l.push(format!("not bound: {n}"));
    }
    if let Some(r) = &e.report {
        if !r.namespaces.is_empty() {
            l.push(format!("namespaces: {}", r.namespaces.join(", ")));
        }
        l.push(format!(
            "landlock: kernel ABI {}{}",
            r.landlock_abi,
            if r.mechanism == crate::exec::Mechanism::Landlock {
                ", a second layer over the view"
            } else {
                ", not used"
            }
        ));
        l.push(format!(
            "seccomp: {}",
            if r.mechanism == crate::exec::Mechanism::Landlock {
                "yes"
            } else {
                "no"
            }
        ));
        let lim = &r.limits;
        l.push(format!(
            "limits: memory {} MiB ({}), cpu {} s, file size {} MiB, {} processes, worktree growth {} MiB per command",
            lim.memory_bytes >> 20,
            r.memory,
            lim.cpu_seconds,
            lim.file_size_bytes >> 20,
            lim.max_processes,
            lim.worktree_growth_bytes >> 20
        ));
        l.push(format!(
            "network: {}{}",
            serde_plain(&r.network),
            if r.network != r.network_requested {
                format!(" (asked: {})", serde_plain(&r.network_requested))
            } else {
                String::new()
            }
        ));
        l.push("protections:".into());
        for p in &r.protections {
            l.push(format!("  {p}"));
        }
        if r.fallbacks.is_empty() {
            l.push("fallbacks taken: none".into());
        } else {
            l.push("fallbacks taken:".into());
            for f in &r.fallbacks {
                l.push(format!("  {f}"));
            }
        }
        l.push(format!("summary: {}", r.summary()));
    }
    l
}

/// A unit enum's serde name (`landlock`, `auto`, `off`).
fn serde_plain<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}
