//! `git agent action`: one GitHub Actions job, from the event to the draft pull request.
//!
//! Reads what the runner provides — `GITHUB_EVENT_NAME`, `GITHUB_EVENT_PATH`,
//! `GITHUB_REPOSITORY`, `GITHUB_API_URL`, `GITHUB_SERVER_URL`, `GITHUB_WORKSPACE`,
//! `GITHUB_TOKEN` — and the action's inputs as `INPUT_*` variables; evaluates the trigger
//! (permission asked of the API); publishes the run through [`crate::run::publish`]; writes
//! `run-id`, `pr-url` and `state` to `$GITHUB_OUTPUT` and the report to
//! `$GITHUB_STEP_SUMMARY`. Exit codes are DESIGN.md's; an ignored event exits 0 with its
//! reason.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, bail};

use super::context;
use super::exit;
use crate::config::{Layer, Source};
use crate::forge::Forge;
use crate::forge::github::{Auth, GitHub, GitHubOptions};
use crate::run::RunState;
use crate::run::engine::StartOptions;
use crate::run::publish::{self, Fetch, Lookup, Prepared, Resolved};
use crate::trigger::{self, Directive, Event};
use crate::workspace::Repo;

/// Arguments of `git agent action`; each defaults to the variable the runner sets.
#[derive(Debug, clap::Args)]
pub struct ActionArgs {
    /// The event's name.
    #[arg(long, env = "GITHUB_EVENT_NAME")]
    pub event_name: String,
    /// The file holding the event's payload.
    #[arg(long, env = "GITHUB_EVENT_PATH")]
    pub event_path: PathBuf,
    /// The checked-out repository (default: `GITHUB_WORKSPACE`, else the current directory).
    #[arg(long, env = "GITHUB_WORKSPACE")]
    pub repo: Option<PathBuf>,
    /// REST API base (GitHub Enterprise Server: `https://HOST/api/v3`).
    #[arg(long, env = "GITHUB_API_URL", default_value = "https://api.github.com")]
    pub api_url: String,
    /// Web base; the push remote is `<server-url>/<repository>.git`.
    #[arg(long, env = "GITHUB_SERVER_URL", default_value = "https://github.com")]
    pub server_url: String,
    /// `OWNER/REPO` (default: the payload's repository).
    #[arg(long, env = "GITHUB_REPOSITORY")]
    pub repository: Option<String>,
}

/// An action input as the runner passes it: `INPUT_<NAME>` upper-cased, hyphens kept (some
/// runners, and our composite `action.yml`, spell them with underscores).
fn input(name: &str) -> Option<String> {
    let upper = name.to_ascii_uppercase();
    [
        format!("INPUT_{upper}"),
        format!("INPUT_{}", upper.replace('-', "_")),
    ]
    .iter()
    .find_map(|var| std::env::var(var).ok())
    .map(|v| v.trim().to_string())
    .filter(|v| !v.is_empty())
}

fn input_layer(name: &str, key: &str, quote: bool) -> Option<Layer> {
    let value = input(name)?;
    Some(Layer::Value {
        key: key.into(),
        value: if quote {
            toml::Value::String(value).to_string()
        } else {
            value
        },
        origin: Source::Env {
            var: format!("INPUT_{}", name.to_ascii_uppercase()),
        },
    })
}

/// Inputs that are configuration keys; they beat `GIT_AGENT_*` like flags do.
fn input_layers() -> Vec<Layer> {
    [
        ("max-usd", "budget.max_usd", false),
        ("max-turns", "budget.max_turns", false),
        ("max-minutes", "budget.max_minutes", false),
        ("label", "trigger.label", true),
        ("test-command", "verify.test", true),
    ]
    .iter()
    .filter_map(|(name, key, quote)| input_layer(name, key, *quote))
    .collect()
}

/// `--model`-style specs from the model inputs: `model` for every role, then per role.
fn model_flags() -> Vec<String> {
    let mut flags: Vec<String> = input("model").into_iter().collect();
    for role in ["planner", "coder", "reviewer"] {
        if let Some(spec) = input(&format!("{role}-model")) {
            flags.push(format!("{role}={spec}"));
        }
    }
    flags
}

/// Append `name=value` to a `$GITHUB_OUTPUT`-style file in the delimiter form, which is
/// safe for any value (newlines included).
fn append_output(path: &Path, name: &str, value: &str) -> anyhow::Result<()> {
    let mut delim = format!("ghadelimiter_{}", ulid::Ulid::generate());
    while value.contains(&delim) {
        delim = format!("ghadelimiter_{}", ulid::Ulid::generate());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    write!(f, "{name}<<{delim}\n{value}\n{delim}\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The step's outputs and summary, where the runner asked for them.
struct Report {
    output: Option<PathBuf>,
    summary: Option<PathBuf>,
}

impl Report {
    fn from_env() -> Self {
        let path = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Report {
            output: path("GITHUB_OUTPUT"),
            summary: path("GITHUB_STEP_SUMMARY"),
        }
    }

    fn outputs(&self, run_id: &str, pr_url: &str, state: &str) -> anyhow::Result<()> {
        if let Some(p) = &self.output {
            append_output(p, "run-id", run_id)?;
            append_output(p, "pr-url", pr_url)?;
            append_output(p, "state", state)?;
        }
        Ok(())
    }

    fn summary(&self, text: &str) -> anyhow::Result<()> {
        if let Some(p) = &self.summary {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .with_context(|| format!("cannot open {}", p.display()))?;
            // The job summary is shown on the workflow's page: redacted like the terminal.
            let mut f = super::output::Redacting::new(super::output::process_redactor()?, f);
            writeln!(f, "{text}").with_context(|| format!("cannot write {}", p.display()))?;
            f.flush()
                .with_context(|| format!("cannot write {}", p.display()))?;
        }
        Ok(())
    }
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

/// The first of `candidates` that resolves in `repo`.
fn resolvable(repo: &Repo, candidates: &[String]) -> Option<String> {
    candidates.iter().find(|c| repo.resolve(c).is_ok()).cloned()
}

/// `git agent action`.
pub fn run(args: ActionArgs) -> anyhow::Result<u8> {
    let payload = std::fs::read(&args.event_path)
        .with_context(|| format!("cannot read the event {}", args.event_path.display()))?;
    let event = Event::parse(&args.event_name, &payload)
        .with_context(|| format!("cannot read the event {}", args.event_path.display()))?;
    let report = Report::from_env();
    let repo = context::open_repo(args.repo.as_deref())?;
    let default_branch = event.default_branch().unwrap_or("main").to_string();
    // The repository's config comes from its default branch, never the work tree.
    let config_rev = resolvable(
        &repo,
        &[default_branch.clone(), format!("origin/{default_branch}")],
    )
    .unwrap_or_else(|| context::DEFAULT_BASE.to_string());
    let cfg = context::load_config(Some((&repo, &config_rev)), None, input_layers())?;
    let token = std::env::var("GITHUB_TOKEN")
        .ok()
        .filter(|t| !t.trim().is_empty())
        .or_else(|| input("github-token"));
    let Some(token) = token else {
        bail!(
            "no GitHub token: set GITHUB_TOKEN (the action passes its `github-token` input, default github.token)"
        );
    };
    let rt = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    // octocrab's client spawns its service on the runtime it is built in.
    let _in_runtime = rt.enter();
    let gh = GitHub::new(
        Auth::Token(token.into()),
        GitHubOptions {
            api_base: args.api_url.clone(),
            ..GitHubOptions::default()
        },
    )?;
    let forge: Arc<dyn Forge> = Arc::new(gh);
    let options = trigger::Options {
        branch_prefix: cfg.settings.git.branch_prefix.clone(),
        ..trigger::Options::default()
    };
    let outcome = rt.block_on(trigger::evaluate(
        forge.as_ref(),
        &cfg.settings.trigger,
        &options,
        &event,
    ))?;
    let repository = match &outcome {
        Directive::Ignored { reason } => {
            return ignore(&report, reason, &format!("event ignored — {reason}"));
        }
        Directive::Stop(_) | Directive::Retry(_) => {
            let reason = "`/agent stop` and `/agent retry` are handled by the GitHub App \
                          (`git agent serve`), not by the Action";
            return ignore(&report, reason, reason);
        }
        Directive::Run(t) => t.task.repo.as_ref().map(std::string::ToString::to_string),
        Directive::Approve { control, .. } => Some(control.repo.to_string()),
    };
    let Some(repository) = args.repository.clone().or(repository) else {
        bail!("no repository: GITHUB_REPOSITORY is unset and the event names none");
    };
    let remote = remote_of(&args, &repository);
    // A run of the same request (a re-run job) continues with its models and spend; an
    // approval continues the conversation's run that awaits one.
    let lookup = Lookup {
        repo: &repo,
        forge: forge.as_ref(),
        remote: &remote,
        fetch: Fetch::Present,
    };
    let mut prepared = match rt.block_on(publish::resolve(&lookup, outcome))? {
        Resolved::Ignored(reason) => return ignore(&report, &reason, &reason),
        Resolved::Publish(p) => *p,
    };
    let models = prepared.models(model_flags());
    let resume = prepared.resume_state();
    let svc = super::fix_cmd::services(
        repo,
        cfg,
        &models,
        None,
        resume,
        &super::fix_cmd::progress_printer(false)?,
    )?;
    if prepared.req.approve.is_none() {
        prepared.req.start = StartOptions {
            test_command: input("test-command"),
            model_flags: models,
            ..StartOptions::default()
        };
    }
    finish(&rt, &svc, forge.as_ref(), prepared, &report)
}

/// Say why the event starts nothing: `reason` in the log, `summary` in the job summary.
fn ignore(report: &Report, reason: &str, summary: &str) -> anyhow::Result<u8> {
    super::output::say(format_args!("ignored: {reason}"))?;
    report.outputs("", "", "ignored")?;
    report.summary(&format!("git-agent: {summary}"))?;
    Ok(exit::SUCCEEDED)
}

fn remote_of(args: &ActionArgs, repository: &str) -> String {
    format!(
        "{}/{}.git",
        args.server_url.trim_end_matches('/'),
        repository
    )
}

/// Publish, then write the outputs, the summary and the result lines.
fn finish(
    rt: &tokio::runtime::Runtime,
    svc: &crate::run::engine::Services,
    forge: &dyn Forge,
    prepared: Prepared,
    report: &Report,
) -> anyhow::Result<u8> {
    let published = match rt.block_on(publish::publish_prepared(svc, forge, prepared)) {
        Ok(p) => p,
        Err(e) => {
            super::output::warn(format_args!("error: {e}"))?;
            report.outputs("", "", "failed")?;
            report.summary(&format!("git-agent: the run stopped on an error: {e}"))?;
            return Ok(exit::FAILED);
        }
    };
    let pr_url = published.pr_url.clone().unwrap_or_default();
    report.outputs(&published.run_id, &pr_url, published.state.as_str())?;
    report.summary(&published.report)?;
    super::output::say(format_args!("run {} {}", published.run_id, published.state))?;
    super::output::say(format_args!("  branch  {}", published.branch))?;
    if !pr_url.is_empty() {
        super::output::say(format_args!("  pr      {pr_url}"))?;
    }
    if let Some(c) = &published.comment_url {
        super::output::say(format_args!("  comment {c}"))?;
    }
    Ok(exit_code(published.state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_use_a_delimiter_the_value_does_not_contain() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out");
        append_output(&p, "state", "succeeded").unwrap();
        append_output(&p, "multi", "a\nb\n").unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let mut lines = text.lines();
        let first = lines.next().unwrap();
        let (name, delim) = first.split_once("<<").unwrap();
        assert_eq!(name, "state");
        assert_eq!(lines.next(), Some("succeeded"));
        assert_eq!(lines.next(), Some(delim));
        let (name, delim) = lines.next().unwrap().split_once("<<").unwrap();
        assert_eq!(name, "multi");
        assert_eq!(lines.next(), Some("a"));
        assert_eq!(lines.next(), Some("b"));
        assert_eq!(lines.next(), Some(""));
        assert_eq!(lines.next(), Some(delim));
    }
}
