//! `git agent serve`: the webhook bot.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use crate::forge::CommentTarget;
use crate::run::publish::{self, PublishRequest, Published};
use crate::run::state::RunState;
use crate::server::github::{Credentials, GitHubRunner, Publisher, Request, Target};
use crate::server::{self, AppState, JobOutcome, JobRunner, WorkerOptions};
use crate::store;
use crate::task::{RepoRef, Task};
use crate::workspace::{Credentials as GitCredentials, Repo};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
}

/// `git agent serve` flags; each has an environment variable.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on.
    #[arg(long, env = "GIT_AGENT_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The GitHub App's webhook secret. The server refuses to start without one.
    #[arg(long, env = "GIT_AGENT_WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: Option<String>,
    /// The GitHub App's id.
    #[arg(long, env = "GIT_AGENT_APP_ID")]
    pub app_id: Option<u64>,
    /// The GitHub App's private key: PEM text, or the path of a PEM file.
    #[arg(long, env = "GIT_AGENT_APP_KEY", hide_env_values = true)]
    pub app_key: Option<String>,
    /// Job store: `sqlite://PATH` or `postgres://…` (default: a SQLite file in the state
    /// directory).
    #[arg(long, env = "GIT_AGENT_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Jobs run at once by this process.
    #[arg(long, env = "GIT_AGENT_WORKERS", default_value_t = 2)]
    pub workers: usize,
    /// State directory (default `$XDG_STATE_HOME/git-agent` or `~/.local/state/git-agent`).
    #[arg(long, env = "GIT_AGENT_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Token for the status page at `/` (off without one).
    #[arg(long, env = "GIT_AGENT_STATUS_TOKEN", hide_env_values = true)]
    pub status_token: Option<String>,
    /// GitHub API base (`https://HOST/api/v3` for Enterprise Server).
    #[arg(
        long,
        env = "GIT_AGENT_GITHUB_API",
        default_value = "https://api.github.com"
    )]
    pub github_api: String,
    /// Base of the repositories' git remotes (`OWNER/NAME.git` is appended).
    #[arg(long, env = "GIT_AGENT_GIT_BASE", default_value = "https://github.com")]
    pub git_base: String,
    /// Seconds a worker holds a job without a heartbeat before another may take it.
    #[arg(long, env = "GIT_AGENT_LEASE_SECS", default_value_t = 120)]
    pub lease_secs: u64,
    /// Seconds a running job gets to finish on shutdown before its lease is released.
    #[arg(long, env = "GIT_AGENT_GRACE_SECS", default_value_t = 30)]
    pub grace_secs: u64,
    /// Log format.
    #[arg(long, env = "GIT_AGENT_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
}

fn state_dir(flag: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(d) = flag {
        return Ok(d);
    }
    if let Some(d) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(d).join("git-agent"));
    }
    let home = std::env::var_os("HOME").context("no HOME; pass --state-dir")?;
    Ok(PathBuf::from(home).join(".local/state/git-agent"))
}

/// Logging to stderr, as text or one JSON object a line. A filter that does not parse is an
/// error: a server started with a typo in `--log` must not run with logs other than asked.
fn init_tracing(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .with_context(|| format!("cannot read the log filter {filter:?} (--log, GIT_AGENT_LOG)"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(super::output::LogWriter::new(
            super::output::process_redactor()?,
        ));
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
    Ok(())
}

/// The bot's run path: mirror the repository's base branch into a bare repository under the
/// state directory, then hand the request to `run::publish` — the path the Action takes —
/// for the 👀, the progress comment, the run (or its continuation), the push and the draft PR.
struct EnginePublisher {
    mirrors: PathBuf,
}

#[async_trait::async_trait]
impl Publisher for EnginePublisher {
    async fn publish(
        &self,
        request: Request,
        target: Target,
        cancel: CancellationToken,
        stop: CancellationToken,
    ) -> server::Result<JobOutcome> {
        let what = match &request {
            Request::Run(t) => t.task.key.clone(),
            Request::Approve { control, .. } => {
                format!("{}#{}:approve", control.repo, control.number)
            }
            Request::Retry(control) => format!("{}#{}:retry", control.repo, control.number),
        };
        let mirrors = self.mirrors.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // The engine's future is not Send (a repository handle is not Sync): it gets a thread
        // and a current-thread runtime of its own.
        std::thread::spawn(move || {
            let result = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(async move {
                    // `/agent stop` is publish's to handle (the run ends as cancelled and
                    // says so); a lost lease or a shutdown only drops the run, which the
                    // next worker continues.
                    let dropped = async {
                        cancel.cancelled().await;
                        if stop.is_cancelled() {
                            std::future::pending::<()>().await;
                        }
                    };
                    tokio::select! {
                        r = engine_publish(&mirrors, request, target, stop.clone()) => r,
                        () = dropped => Err(anyhow::anyhow!("cancelled")),
                    }
                }),
                Err(e) => Err(anyhow::anyhow!("cannot start a runtime for the run: {e}")),
            };
            let _ = tx.send(result);
        });
        let result = rx.await.map_err(|_| server::Error::Runner {
            job: what.clone(),
            message: "the run's thread died".into(),
        })?;
        result.map_err(|e| server::Error::Runner {
            job: what,
            message: format!("{e:#}"),
        })
    }
}

/// The bare mirror of `repo_ref` under `mirrors`, created on first use.
fn mirror(mirrors: &std::path::Path, repo_ref: &RepoRef) -> anyhow::Result<Repo> {
    let dir = mirrors
        .join(&repo_ref.owner)
        .join(format!("{}.git", repo_ref.name));
    if !dir.exists() {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        gix::init_bare(&dir).with_context(|| format!("cannot init {}", dir.display()))?;
    }
    Ok(Repo::open(&dir)?)
}

/// Bring the task's base branch (and the PR branch it continues, as `origin/<branch>`) from
/// the remote into the mirror.
fn fetch_for(repo: &Repo, task: &Task, target: &Target) -> anyhow::Result<()> {
    let creds = target
        .git_token
        .as_ref()
        .map(|t| GitCredentials::Token(secrecy::ExposeSecret::expose_secret(t).to_string()));
    let base = task
        .base
        .trim_start_matches("refs/heads/")
        .trim_start_matches("origin/");
    repo.fetch_branch(&target.remote, base, creds.as_ref())
        .with_context(|| format!("cannot fetch {base} from {}", target.remote))?;
    if let Some(branch) = &task.branch {
        repo.fetch_branch_as(
            &target.remote,
            branch,
            &format!("refs/remotes/origin/{branch}"),
            creds.as_ref(),
        )
        .with_context(|| format!("cannot fetch {branch} from {}", target.remote))?;
    }
    Ok(())
}

fn summary(p: &Published) -> server::RunSummary {
    let (spend_usd, _) = p.record.spend();
    server::RunSummary {
        run_id: p.run_id.clone(),
        state: p.state.as_str().to_string(),
        pr_url: p.pr_url.clone(),
        report: Some(p.report.clone()),
        spend_usd,
        detail: format!("run {} {}", p.run_id, p.state.as_str()),
    }
}

async fn engine_publish(
    mirrors: &std::path::Path,
    request: Request,
    target: Target,
    stop: CancellationToken,
) -> anyhow::Result<JobOutcome> {
    let forge = target.forge.as_ref();
    let repo_ref = request
        .repo()
        .cloned()
        .context("the task names no repository")?;
    let repo = mirror(mirrors, &repo_ref)?;
    let ignored = |reason: String| Ok(JobOutcome::Ignored { reason });
    // What to publish, and the record of the run it continues (for its spend and models).
    let (mut req, record) = match request {
        Request::Run(t) => {
            fetch_for(&repo, &t.task, &target)?;
            let record = publish::find_run(&repo, forge, &t.task, &target.remote)
                .await?
                .and_then(|e| e.record);
            (
                PublishRequest::new(t.task, t.react_to, target.remote.clone()),
                record,
            )
        }
        Request::Approve { control, run } => {
            let found = publish::run_in_conversation(
                &repo,
                forge,
                &control.repo,
                control.number,
                run.as_deref(),
                &target.remote,
            )
            .await?;
            let Some(record) = found else {
                return ignored(format!(
                    "no agent run{} on #{} to approve",
                    run.map(|r| format!(" {r}")).unwrap_or_default(),
                    control.number
                ));
            };
            if record.state != RunState::AwaitingApproval {
                return ignored(format!(
                    "run {} is {}, not awaiting approval",
                    record.run_id, record.state
                ));
            }
            fetch_for(&repo, &record.task, &target)?;
            let mut req = PublishRequest::new(
                record.task.clone(),
                Some(control.comment),
                target.remote.clone(),
            );
            req.approve = Some(control.requested_by.login.clone());
            (req, Some(record))
        }
        Request::Retry(control) => {
            let found = publish::run_in_conversation(
                &repo,
                forge,
                &control.repo,
                control.number,
                None,
                &target.remote,
            )
            .await?;
            let Some(last) = found else {
                return ignored(format!("no agent run on #{} to retry", control.number));
            };
            if !last.state.is_terminal() {
                return ignored(format!(
                    "run {} is {}: it has not ended, so there is nothing to retry",
                    last.run_id, last.state
                ));
            }
            // A new request: keyed on the retry comment (a redelivery of it continues the same
            // retry), on a branch of its own beside the first run's.
            let mut task = last.task.clone();
            let (CommentTarget::IssueComment(comment_id)
            | CommentTarget::ReviewComment(comment_id)) = control.comment;
            task.key = format!("{}:retry-{comment_id}", last.task.key);
            fetch_for(&repo, &task, &target)?;
            let record = publish::find_run(&repo, forge, &task, &target.remote)
                .await?
                .and_then(|e| e.record);
            let mut req = PublishRequest::new(task, Some(control.comment), target.remote.clone());
            if last.task.branch.is_none() {
                req.start.branch = Some(format!("{}-retry-{comment_id}", last.branch));
            }
            (req, record)
        }
    };
    let cfg = crate::cli::context::load_config(Some((&repo, &req.task.base)), None, Vec::new())?;
    let models = record
        .as_ref()
        .map(|r| r.model_flags.clone())
        .unwrap_or_default();
    let mut svc = super::fix_cmd::services(
        repo,
        cfg,
        &models,
        None,
        record.as_ref().map(publish::resume_state),
        &super::fix_cmd::Progress::traced(),
    )?;
    // Several workers share a mirror: each run checks out its own worktree.
    svc.warm_pool = false;
    req.start.model_flags = models;
    req.stop = Some(stop);
    let published = publish::publish(&svc, forge, req).await?;
    Ok(JobOutcome::Ran(summary(&published)))
}

/// Run the server until SIGINT or SIGTERM.
pub fn run(args: Args, log: &str) -> anyhow::Result<u8> {
    init_tracing(log, args.log_format)?;
    let Some(secret) = args.webhook_secret.clone().filter(|s| !s.is_empty()) else {
        bail!(
            "no webhook secret: set --webhook-secret or GIT_AGENT_WEBHOOK_SECRET (the server \
             refuses unsigned deliveries and will not start without one)"
        );
    };
    let credentials = match (args.app_id, &args.app_key) {
        (Some(app_id), Some(key)) => {
            let pem = if key.trim_start().starts_with("-----BEGIN") {
                key.clone()
            } else {
                std::fs::read_to_string(key)
                    .with_context(|| format!("cannot read the App key file {key}"))?
            };
            Credentials::App {
                app_id,
                key: Arc::new(SecretString::from(pem)),
            }
        }
        (None, None) => match std::env::var("GITHUB_TOKEN").ok().filter(|t| !t.is_empty()) {
            Some(t) => Credentials::Token(Arc::new(SecretString::from(t))),
            None => bail!(
                "no GitHub credentials: set --app-id and --app-key (GIT_AGENT_APP_ID, \
                 GIT_AGENT_APP_KEY), or GITHUB_TOKEN"
            ),
        },
        _ => bail!("--app-id and --app-key go together"),
    };
    let state = state_dir(args.state_dir.clone())?;
    let url = match &args.database_url {
        Some(u) => u.clone(),
        None => format!("sqlite://{}", state.join("serve.db").display()),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async move {
        let store = store::open(&url)
            .await
            .with_context(|| format!("cannot open the job store {}", store::display_url(&url)))?;
        let mut app = AppState::new(store.clone(), SecretString::from(secret));
        app.status_token = args
            .status_token
            .filter(|t| !t.is_empty())
            .map(|t| Arc::new(SecretString::from(t)));
        let runner: Arc<dyn JobRunner> = Arc::new(GitHubRunner {
            credentials,
            options: crate::forge::github::GitHubOptions {
                api_base: args.github_api.clone(),
                ..Default::default()
            },
            trigger: crate::config::TriggerConfig::default(),
            trigger_options: crate::trigger::Options::default(),
            git_base: args.git_base.clone(),
            publisher: Arc::new(EnginePublisher {
                mirrors: state.join("repos"),
            }),
        });
        let lease = Duration::from_secs(args.lease_secs.max(1));
        let opts = WorkerOptions {
            workers: args.workers.max(1),
            lease,
            heartbeat: (lease / 4).max(Duration::from_millis(100)),
            grace: Duration::from_secs(args.grace_secs),
            ..WorkerOptions::default()
        };
        let shutdown = CancellationToken::new();
        let mut workers = server::spawn_workers(
            store,
            runner,
            app.metrics.clone(),
            app.wake.clone(),
            opts,
            shutdown.clone(),
        );
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let (addr, shown) = (listener.local_addr()?, store::display_url(&url));
        match args.log_format {
            // A log collector reads every line of stderr as JSON: the start is a log record.
            LogFormat::Json => {
                tracing::info!(listen = %addr, store = %shown, "git agent serve started");
            }
            LogFormat::Text => {
                super::output::warn(format_args!(
                    "git agent serve: listening on http://{addr} (store {shown})"
                ))?;
            }
        }
        let signals = shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutting down: no new claims; running jobs get their grace period");
            signals.cancel();
        });
        server::serve(listener, app, shutdown.clone()).await?;
        while workers.join_next().await.is_some() {}
        Ok(0)
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
