//! `git agent serve`: the webhook bot.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use crate::server::github::{Credentials, GitHubRunner, Publisher, Target};
use crate::server::{self, AppState, JobRunner, WorkerOptions};
use crate::store;

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

fn init_tracing(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// The bot's run path until the shared `run::publish` is in: mirror the repository's base
/// branch into a bare repository under the state directory, run the engine there, push the
/// branch and the run record, open the draft pull request.
struct EnginePublisher {
    mirrors: PathBuf,
}

#[async_trait::async_trait]
impl Publisher for EnginePublisher {
    async fn publish(
        &self,
        triggered: crate::trigger::Triggered,
        target: Target,
        cancel: CancellationToken,
    ) -> server::Result<server::RunSummary> {
        let key = triggered.task.key.clone();
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
                    tokio::select! {
                        r = engine_publish(&mirrors, triggered, target) => r,
                        () = cancel.cancelled() => Err(anyhow::anyhow!("cancelled")),
                    }
                }),
                Err(e) => Err(anyhow::anyhow!("cannot start a runtime for the run: {e}")),
            };
            let _ = tx.send(result);
        });
        let result = rx.await.map_err(|_| server::Error::Runner {
            job: key.clone(),
            message: "the run's thread died".into(),
        })?;
        result.map_err(|e| server::Error::Runner {
            job: key,
            message: format!("{e:#}"),
        })
    }
}

async fn engine_publish(
    mirrors: &std::path::Path,
    triggered: crate::trigger::Triggered,
    target: Target,
) -> anyhow::Result<server::RunSummary> {
    use crate::workspace::{Credentials as GitCredentials, Repo, run_ref};
    let task = triggered.task;
    let repo_ref = task.repo.clone().context("the task names no repository")?;
    let dir = mirrors
        .join(&repo_ref.owner)
        .join(format!("{}.git", repo_ref.name));
    if !dir.exists() {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        gix::init_bare(&dir).with_context(|| format!("cannot init {}", dir.display()))?;
    }
    let repo = Repo::open(&dir)?;
    let creds = target
        .git_token
        .as_ref()
        .map(|t| GitCredentials::Token(secrecy::ExposeSecret::expose_secret(t).to_string()));
    repo.fetch_branch(&target.remote, &task.base, creds.as_ref())
        .with_context(|| format!("cannot fetch {} from {}", task.base, target.remote))?;
    let cfg = crate::cli::context::load_config(Some((&repo, &task.base)), None, Vec::new())?;
    let prefix = cfg.settings.git.branch_prefix.clone();
    let svc = run_services(repo, cfg)?;
    // A job claimed again after its worker died continues the run of the same request
    // (one branch, one PR) instead of starting another.
    let out = match earlier_run(&svc.repo, &task.key) {
        Some(run_id) => {
            tracing::info!(%run_id, key = %task.key, "continuing the earlier run of this request");
            crate::run::engine::resume(&svc, &run_id, false, "git-agent").await?
        }
        None => crate::run::engine::start(&svc, task.clone(), Default::default()).await?,
    };
    let rec = out.record;
    let (spend_usd, _) = rec.spend();
    let report = std::fs::read_to_string(out.run_dir.join(crate::run::record::files::PR)).ok();
    let mut pr_url = None;
    if !rec.commits.is_empty() {
        let refs = vec![format!("refs/heads/{}", rec.branch), run_ref(&rec.run_id)];
        target
            .forge
            .push(svc.repo.clone(), &target.remote, &refs, &prefix)
            .await
            .context("cannot push the run branch")?;
        let pr = target
            .forge
            .open_draft_pr(
                &repo_ref,
                &crate::forge::PrRequest {
                    title: crate::run::record::first_line(&task.goal, 72),
                    body: report.clone().unwrap_or_default(),
                    head: rec.branch.clone(),
                    base: task.base.clone(),
                },
            )
            .await
            .context("cannot open the draft pull request")?;
        pr_url = Some(pr.html_url);
    }
    Ok(server::RunSummary {
        run_id: rec.run_id.clone(),
        state: rec.state.as_str().to_string(),
        pr_url,
        report,
        spend_usd,
        detail: format!("run {} {}", rec.run_id, rec.state.as_str()),
    })
}

/// The newest run in the mirror whose task has `key`.
fn earlier_run(repo: &crate::workspace::Repo, key: &str) -> Option<String> {
    let runs = repo.agent_dir().join("runs");
    let mut found: Vec<String> = std::fs::read_dir(&runs)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let id = e.file_name().to_string_lossy().into_owned();
            let rec = crate::run::record::RunRecord::load(&e.path()).ok()?;
            (rec.task.key == key).then_some(id)
        })
        .collect();
    // Run ids are ULIDs: the largest is the newest.
    found.sort();
    found.pop()
}

fn run_services(
    repo: crate::workspace::Repo,
    cfg: crate::config::Config,
) -> anyhow::Result<crate::run::engine::Services> {
    use crate::model::{Router, RouterOptions};
    let env = |k: &str| std::env::var(k).ok();
    let router = Router::from_settings(
        &cfg.settings,
        &RouterOptions {
            model_flags: Vec::new(),
            record: None,
            resume: None,
        },
        &env,
    )?;
    if router.spec(crate::model::Role::Coder).is_none() {
        bail!("no model is configured for the bot: set [models] coder or GIT_AGENT_MODELS_CODER");
    }
    let mut key_names: Vec<String> = Vec::new();
    for p in [
        &cfg.settings.providers.openai,
        &cfg.settings.providers.anthropic,
        &cfg.settings.providers.ollama,
    ] {
        if let Some(k) = &p.api_key_env {
            key_names.push(k.clone());
        }
    }
    let redactor = crate::audit::redact::Redactor::from_process_env(&key_names)?;
    let exec_options = crate::exec::ExecOptions::from_settings(&cfg.settings);
    Ok(crate::run::engine::Services {
        config: cfg,
        repo,
        router: Arc::new(router),
        redactor: Arc::new(redactor),
        progress: Arc::new(|e: &crate::run::engine::RunEvent| {
            tracing::debug!(event = ?e, "run progress");
        }),
        exec_options,
        warm_pool: false,
    })
}

/// Run the server until SIGINT or SIGTERM.
pub fn run(args: Args, log: &str) -> anyhow::Result<u8> {
    init_tracing(log, args.log_format);
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
        eprintln!(
            "git agent serve: listening on http://{} (store {})",
            listener.local_addr()?,
            store::display_url(&url)
        );
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
