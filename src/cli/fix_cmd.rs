//! `git agent fix`, `plan`, `resume` and `demo`: the run from a terminal.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, bail};

use super::context;
use super::exit;
use crate::config::{Config, Layer, Source};
use crate::model::ResumeState;
use crate::run::RunState;
use crate::run::engine::{self, Outcome, RunEvent, Services, StartOptions};
use crate::run::record::RunRecord;
use crate::run::services;
use crate::task::{Mode, Origin, Person, Task};
use crate::workspace::Repo;

/// Inputs shared by `fix` and `plan`.
#[derive(Debug, clap::Args)]
pub struct FixArgs {
    /// What to do, in words (or give --issue-file).
    pub goal: Option<String>,
    /// A file holding the issue text (title on the first line, then the body).
    #[arg(long, value_name = "F", conflicts_with = "goal")]
    pub issue_file: Option<PathBuf>,
    /// An issue of the forge: for `--forge local`, `<git-common-dir>/agent/issues/<N>.md`
    /// (title on the first line) or `<N>.json`. The run is linked to it (`Fixes #N`).
    #[arg(long, value_name = "N", conflicts_with_all = ["goal", "issue_file"])]
    pub issue: Option<u64>,
    /// Base ref to branch from (default: HEAD, the commit checked out).
    #[arg(long)]
    pub base: Option<String>,
    /// Branch to create (default: agent/<slug>).
    #[arg(long)]
    pub branch: Option<String>,
    /// The test command (default: from config, else detected).
    #[arg(long, value_name = "CMD")]
    pub test_cmd: Option<String>,
    /// `ROLE=PROVIDER:MODEL` or `PROVIDER:MODEL` for every role; repeatable.
    #[arg(long = "model", value_name = "SPEC")]
    pub models: Vec<String>,
    /// Spend cap in USD.
    #[arg(long, value_name = "X")]
    pub max_usd: Option<f64>,
    /// Model-call cap.
    #[arg(long, value_name = "N")]
    pub max_turns: Option<u32>,
    /// Where the pull request goes: `local` writes pr.md in the run record.
    #[arg(long, default_value = "local", value_parser = ["local"])]
    pub forge: String,
    /// Sandbox for commands: auto, landlock, bwrap, or off (an explicit, audited opt-out).
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<String>,
    /// Write every model reply to PATH in the script format, to replay the run offline.
    #[arg(long, value_name = "PATH")]
    pub record: Option<PathBuf>,
    /// The repository (default: the current directory's).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Print one JSON object instead of progress.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `git agent resume`.
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// Run id or unique prefix.
    pub run: String,
    /// Approve the pending request of a run awaiting approval.
    #[arg(long)]
    pub approve: bool,
    /// `ROLE=PROVIDER:MODEL` (as given to `fix`); repeatable.
    #[arg(long = "model", value_name = "SPEC")]
    pub models: Vec<String>,
    /// Sandbox mode, as for `fix`.
    #[arg(long, value_name = "MODE")]
    pub sandbox: Option<String>,
    /// The repository (default: the current directory's).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn flag(key: &str, value: String, name: &str) -> Layer {
    Layer::Value {
        key: key.into(),
        value,
        origin: Source::Flag { flag: name.into() },
    }
}

fn flag_layers(
    test_cmd: Option<&String>,
    max_usd: Option<f64>,
    max_turns: Option<u32>,
    sandbox: Option<&String>,
) -> Vec<Layer> {
    let mut v = Vec::new();
    if let Some(t) = test_cmd {
        // Quoted so that a command like `make test` stays a string.
        v.push(flag("verify.test", toml_string(t), "--test-cmd"));
    }
    if let Some(x) = max_usd {
        v.push(flag("budget.max_usd", x.to_string(), "--max-usd"));
    }
    if let Some(n) = max_turns {
        v.push(flag("budget.max_turns", n.to_string(), "--max-turns"));
    }
    if let Some(s) = sandbox {
        v.push(flag("sandbox.mode", toml_string(s), "--sandbox"));
    }
    v
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn who() -> Person {
    let login = std::env::var("USER").unwrap_or_else(|_| "local".into());
    Person {
        login,
        name: None,
        email: None,
    }
}

/// The run's services over the resolved config, with progress to the terminal.
pub(super) fn services(
    repo: Repo,
    cfg: Config,
    models: &[String],
    record: Option<PathBuf>,
    resume: Option<ResumeState>,
    progress: &Progress,
) -> anyhow::Result<Services> {
    let opts = services::Options {
        models: models.to_vec(),
        record,
        resume,
        progress: progress.callback.clone(),
        state_dir: None,
        without_model: false,
        secrets: Vec::new(),
    };
    Ok(services::build(repo, cfg, opts)?)
}

/// Where progress goes: a live status line on a terminal, plain lines otherwise, nothing
/// when stdout carries JSON and stderr is not a terminal.
pub(super) struct Progress {
    callback: Arc<dyn Fn(&RunEvent) + Send + Sync>,
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    /// Clear the live line before the result is printed.
    /// Where a run's events go.
    pub(super) fn callback(&self) -> Arc<dyn Fn(&RunEvent) + Send + Sync> {
        self.callback.clone()
    }

    pub(super) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The status line's parts, updated by events.
#[derive(Default)]
struct Status {
    state: String,
    turn: String,
    spend: f64,
    tests: String,
}

impl Status {
    fn line(&self) -> String {
        let mut parts = vec![self.state.clone()];
        if !self.turn.is_empty() {
            parts.push(self.turn.clone());
        }
        parts.push(format!("${:.2}", self.spend));
        if !self.tests.is_empty() {
            parts.push(format!("tests: {}", self.tests));
        }
        parts.join(" · ")
    }
}

fn event_line(e: &RunEvent) -> Option<String> {
    Some(match e {
        RunEvent::State(s) => format!("▸ {s}"),
        RunEvent::Turn { role, n } => format!("  turn {n}: {role}"),
        RunEvent::Tool { name, detail } => {
            let d: String = detail.as_str().chars().take(100).collect();
            format!("    {name} {d}")
        }
        RunEvent::Verified { when, result } => format!("  tests ({when}): {result}"),
        RunEvent::Setup { result } => format!("  set-up: {result}"),
        RunEvent::Spend { usd } if *usd > 0.0 => format!("    spent ${usd:.2}"),
        RunEvent::Spend { .. } => return None,
    })
}

pub(super) fn progress_printer(json: bool) -> anyhow::Result<Progress> {
    let tty = super::output::stderr_is_terminal();
    // The events' texts are redacted by the run already; the terminal redacts once more, as
    // everything the CLI prints.
    let redactor = super::output::process_redactor()?;
    if !tty {
        return Ok(Progress {
            callback: Arc::new(move |e: &RunEvent| {
                if json {
                    return;
                }
                if let Some(line) = event_line(e) {
                    let _ = writeln!(super::output::stderr(&redactor), "{line}");
                }
            }),
            bar: None,
        });
    }
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {elapsed:>4} {wide_msg}")
    {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let status = std::sync::Mutex::new(Status {
        state: "queued".into(),
        ..Status::default()
    });
    let b = bar.clone();
    Ok(Progress {
        callback: Arc::new(move |e: &RunEvent| {
            let mut st = status.lock().unwrap_or_else(|p| p.into_inner());
            match e {
                RunEvent::State(s) => {
                    st.state = s.to_string();
                    b.println(redactor.redact(&format!("▸ {s}")));
                }
                RunEvent::Turn { role, n } => st.turn = format!("turn {n} ({role})"),
                RunEvent::Tool { .. } | RunEvent::Setup { .. } => {
                    if let Some(line) = event_line(e) {
                        b.println(redactor.redact(&line));
                    }
                }
                RunEvent::Verified { when, result } => {
                    st.tests = format!("{when}: {result}");
                    b.println(redactor.redact(&format!("  tests ({when}): {result}")));
                }
                RunEvent::Spend { usd } => st.spend = *usd,
            }
            b.set_message(redactor.redact(&st.line()));
        }),
        bar: Some(bar),
    })
}

fn exit_code(state: RunState) -> u8 {
    match state {
        RunState::Succeeded => exit::SUCCEEDED,
        RunState::BudgetExhausted => exit::BUDGET,
        RunState::EnvironmentFailed => exit::ENVIRONMENT,
        RunState::AwaitingApproval => exit::AWAITING_APPROVAL,
        _ => exit::FAILED,
    }
}

fn print_outcome(o: &Outcome, json: bool) -> anyhow::Result<u8> {
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    if json {
        writeln!(out, "{}", super::runs_cmd::summary_json(&o.record))?;
    } else {
        let r = &o.record;
        writeln!(out, "run {} {}", r.run_id, r.state)?;
        writeln!(out, "  branch  {}", r.branch)?;
        writeln!(
            out,
            "  base    {} ({})",
            r.base_ref,
            r.base_sha.get(..12).unwrap_or(&r.base_sha)
        )?;
        for c in &r.commits {
            writeln!(out, "  commit  {c}")?;
        }
        for n in &r.notes {
            writeln!(out, "  note    {n}")?;
        }
        if let Some(crate::run::record::PrRef::Path(p)) = &r.pr {
            writeln!(out, "  report  {}", p.display())?;
        }
        writeln!(out, "  audit   git agent log {}", r.run_id)?;
    }
    Ok(exit_code(o.record.state))
}

fn goal_text(args: &FixArgs) -> anyhow::Result<String> {
    match (&args.goal, &args.issue_file) {
        (Some(g), _) if !g.trim().is_empty() => Ok(g.clone()),
        (_, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read the issue file {}", f.display())),
        _ => bail!("say what to do: `git agent fix \"…\"`, `--issue N` or `--issue-file F`"),
    }
}

/// The text of issue `n` of the local forge: title, body and comments.
fn local_issue_text(repo: &Repo, n: u64) -> anyhow::Result<String> {
    use crate::forge::Forge as _;
    use crate::forge::local::{LocalForge, LocalOptions};
    let dir = repo.agent_dir().join("issues");
    let forge = LocalForge::for_repo(
        repo,
        LocalOptions {
            issues_dir: Some(dir.clone()),
            ..LocalOptions::default()
        },
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .context("cannot start the async runtime")?;
    let local = crate::task::RepoRef {
        owner: "local".into(),
        name: "local".into(),
    };
    let issue = rt.block_on(forge.issue(&local, n)).with_context(|| {
        format!(
            "cannot read issue {n}: put it in {}/{n}.md (title on the first line) or {n}.json, \
             or pass --issue-file F",
            dir.display()
        )
    })?;
    let kept = issue
        .comments
        .iter()
        .filter(|c| crate::forge::progress_run_id(&c.body).is_none());
    let text = issue.task_text(kept, 0);
    Ok(text)
}

/// `git agent fix` and `git agent plan`.
pub fn fix(args: FixArgs, mode: Mode) -> anyhow::Result<u8> {
    let repo = context::open_repo(args.repo.as_deref())?;
    let (goal, origin) = match args.issue {
        Some(n) => (
            local_issue_text(&repo, n)?,
            Origin::Issue {
                number: n,
                comment_id: None,
            },
        ),
        None => (goal_text(&args)?, Origin::Cli),
    };
    let base = args
        .base
        .clone()
        .unwrap_or_else(|| context::DEFAULT_BASE.to_string());
    let cfg = context::load_config(
        Some((&repo, &base)),
        None,
        flag_layers(
            args.test_cmd.as_ref(),
            args.max_usd,
            args.max_turns,
            args.sandbox.as_ref(),
        ),
    )?;
    let progress = progress_printer(args.json)?;
    let svc = services(
        repo,
        cfg,
        &args.models,
        args.record.clone(),
        None,
        &progress,
    )?;
    let task = Task {
        goal,
        mode,
        origin,
        repo: None,
        base,
        branch: None,
        requested_by: Some(who()),
        key: String::new(),
    };
    // The id is picked here so that an interrupted run can be ended under it.
    let run_id = ulid::Ulid::generate().to_string();
    let opts = StartOptions {
        branch: args.branch.clone(),
        test_command: args.test_cmd.clone(),
        model_flags: args.models.clone(),
        sandbox: args.sandbox.clone(),
        run_id: Some(run_id.clone()),
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let outcome = rt.block_on(interruptible(
        &svc,
        &run_id,
        engine::start(&svc, task, opts),
    ));
    progress.finish();
    print_outcome(&outcome?, args.json)
}

/// Drive `run` (run `run_id`'s start or continuation) until it ends, or until the process
/// gets SIGINT (Ctrl-C) or SIGTERM: then the run is dropped where it stands — its running
/// command killed with its executor — and ended as `cancelled` with a report, so `status`
/// and `show` tell what happened instead of a run that looks alive forever.
async fn interruptible(
    svc: &Services,
    run_id: &str,
    run: impl std::future::Future<Output = crate::run::Result<Outcome>>,
) -> anyhow::Result<Outcome> {
    use tokio::signal::unix::{SignalKind, signal};
    // Listening starts before the run does: a signal never finds the default action (death
    // without a record) in place.
    let mut int = signal(SignalKind::interrupt()).context("cannot listen for SIGINT")?;
    let mut term = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
    let by = tokio::select! {
        biased;
        r = run => return Ok(r?),
        _ = int.recv() => "SIGINT (Ctrl-C)",
        _ = term.recv() => "SIGTERM",
    };
    let note =
        format!("Interrupted by {by} at the terminal; the branch keeps what was verified before.");
    Ok(engine::cancel(svc, run_id, &note)?)
}

/// `git agent resume`.
pub fn resume(args: ResumeArgs) -> anyhow::Result<u8> {
    let repo = context::open_repo(args.repo.as_deref())?;
    let (id, dir) = super::runs_cmd::find_run(&repo, &args.run)?;
    let rec = RunRecord::load(&dir).with_context(|| format!("reading the record of {id}"))?;
    let sandbox = args.sandbox.clone().or(rec.sandbox_flag.clone());
    let cfg = context::load_config(
        Some((&repo, &rec.base_sha)),
        None,
        flag_layers(rec.test_command.as_ref(), None, None, sandbox.as_ref()),
    )?;
    let models = if args.models.is_empty() {
        rec.model_flags.clone()
    } else {
        args.models.clone()
    };
    let resume = ResumeState {
        spent: rec.budget_spent.unwrap_or_default(),
        elapsed: std::time::Duration::from_millis(rec.elapsed_ms),
        roles: rec.roles_called.clone(),
        usage: rec.model_usage.clone(),
    };
    let progress = progress_printer(args.json)?;
    let svc = services(repo, cfg, &models, None, Some(resume), &progress)?;
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let outcome = rt.block_on(interruptible(
        &svc,
        &id,
        engine::resume(&svc, &id, args.approve, &who().login),
    ));
    progress.finish();
    print_outcome(&outcome?, args.json)
}
