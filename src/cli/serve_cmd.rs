//! `git agent serve`: the webhook bot.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use crate::exec::Secret;
use crate::server::github::{BotCredentials, GitHubRunner};
use crate::server::publisher::EnginePublisher;
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
    /// A file holding the GitHub App's webhook secret (or set `GIT_AGENT_WEBHOOK_SECRET`).
    /// The server refuses to start without one. Secrets are never flags: a process's
    /// arguments are visible to every user of the machine.
    #[arg(long, env = "GIT_AGENT_WEBHOOK_SECRET_FILE")]
    pub webhook_secret_file: Option<PathBuf>,
    /// The GitHub App's id.
    #[arg(long, env = "GIT_AGENT_APP_ID")]
    pub app_id: Option<u64>,
    /// The GitHub App's private key, a PEM file (or set `GIT_AGENT_APP_KEY` to the PEM text
    /// or the file's path).
    #[arg(long, env = "GIT_AGENT_APP_KEY_FILE")]
    pub app_key_file: Option<PathBuf>,
    /// Refused: secrets are not taken on the command line.
    #[arg(long = "webhook-secret", hide = true, value_name = "REFUSED")]
    pub webhook_secret_flag: Option<String>,
    /// Refused: secrets are not taken on the command line.
    #[arg(long = "status-token", hide = true, value_name = "REFUSED")]
    pub status_token_flag: Option<String>,
    /// Refused: secrets are not taken on the command line.
    #[arg(long = "app-key", hide = true, value_name = "REFUSED")]
    pub app_key_flag: Option<String>,
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
    /// A file holding the token of the status page at `/` and of `/metrics` (or set
    /// `GIT_AGENT_STATUS_TOKEN`); without one the page is off.
    #[arg(long, env = "GIT_AGENT_STATUS_TOKEN_FILE")]
    pub status_token_file: Option<PathBuf>,
    /// Serve `/metrics` without the status token (it names repositories and events).
    #[arg(long, env = "GIT_AGENT_PUBLIC_METRICS")]
    pub public_metrics: bool,
    /// Seconds a connection has to send a complete request head (slow headers are cut off).
    #[arg(long, env = "GIT_AGENT_HEADER_TIMEOUT_SECS", default_value_t = 15.0, value_parser = positive_secs)]
    pub header_timeout_secs: f64,
    /// Seconds a request has to send its body (slower is answered 408 and closed).
    #[arg(long, env = "GIT_AGENT_BODY_TIMEOUT_SECS", default_value_t = 60.0, value_parser = positive_secs)]
    pub body_timeout_secs: f64,
    /// Seconds a kept-alive connection may stay silent between requests.
    #[arg(long, env = "GIT_AGENT_IDLE_TIMEOUT_SECS", default_value_t = 10.0, value_parser = positive_secs)]
    pub idle_timeout_secs: f64,
    /// Connections open at once; more are answered 503 and closed.
    #[arg(long, env = "GIT_AGENT_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
    /// MiB that request bodies being read may hold between them (each body's first 64 KiB
    /// aside); a body that would pass it is answered 503. A 25 MB delivery needs 32.
    #[arg(long, env = "GIT_AGENT_BODY_MEMORY_MIB", default_value_t = 100)]
    pub body_memory_mib: usize,
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

fn positive_secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number of seconds")),
    }
}

/// A secret from its environment variable's value `env` or from `file`: both is an error
/// (which one was meant?), neither is `None`, and so is an empty one. A file's trailing
/// newline is not part of the secret.
fn read_secret(
    var: &str,
    env: Option<String>,
    file_flag: &str,
    file: Option<&Path>,
) -> anyhow::Result<Option<String>> {
    let env = env.filter(|v| !v.is_empty());
    match (env, file) {
        (Some(_), Some(_)) => bail!("both {var} and {file_flag} are set: give one"),
        (Some(v), None) => Ok(Some(v)),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {file_flag} {}", path.display()))?;
            let text = text.trim_end_matches(['\r', '\n']).to_string();
            if text.is_empty() {
                bail!("{file_flag} {} is empty", path.display());
            }
            Ok(Some(text))
        }
        (None, None) => Ok(None),
    }
}

/// Refuse a secret given as a flag: it is in the process's arguments for anyone to read.
fn refuse_secret_flags(args: &Args) -> anyhow::Result<()> {
    let given = [
        (
            &args.webhook_secret_flag,
            "--webhook-secret",
            "GIT_AGENT_WEBHOOK_SECRET",
            "--webhook-secret-file",
        ),
        (
            &args.status_token_flag,
            "--status-token",
            "GIT_AGENT_STATUS_TOKEN",
            "--status-token-file",
        ),
        (
            &args.app_key_flag,
            "--app-key",
            "GIT_AGENT_APP_KEY",
            "--app-key-file",
        ),
    ];
    for (value, flag, var, file) in given {
        if value.is_some() {
            bail!(
                "{flag} is not accepted: a flag's value is visible to every user of the machine \
                 (ps, /proc/PID/cmdline). Set {var} or pass {file} PATH instead"
            );
        }
    }
    Ok(())
}

/// The limits on clients from the flags.
fn limits(args: &Args) -> server::Limits {
    server::Limits {
        header_timeout: Duration::from_secs_f64(args.header_timeout_secs),
        body_timeout: Duration::from_secs_f64(args.body_timeout_secs),
        idle_timeout: Duration::from_secs_f64(args.idle_timeout_secs),
        max_connections: args.max_connections.max(1),
        body_memory: args.body_memory_mib.saturating_mul(1024 * 1024),
    }
}

fn state_dir(flag: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(d) = flag {
        return super::context::explicit_state_dir(d);
    }
    crate::config::user_state_dir().context("no HOME; pass --state-dir")
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

/// The secret files the bot's settings name (flags, or the variables they default to), each
/// with the setting that named it: out of every command's view (issue 41 point 2).
fn secret_files(args: &Args) -> Vec<Secret> {
    let env_key = std::env::var("GIT_AGENT_APP_KEY").ok();
    named_secret_files(
        [
            (
                args.app_key_file.as_deref(),
                "--app-key-file (GIT_AGENT_APP_KEY_FILE)",
            ),
            (
                args.webhook_secret_file.as_deref(),
                "--webhook-secret-file (GIT_AGENT_WEBHOOK_SECRET_FILE)",
            ),
            (
                args.status_token_file.as_deref(),
                "--status-token-file (GIT_AGENT_STATUS_TOKEN_FILE)",
            ),
        ],
        env_key.as_deref(),
    )
}

/// The bot's secret files as its variables name them, for `git agent sandbox --explain` and
/// the doctor on the machine `serve` runs on.
pub(super) fn secret_files_from_env() -> Vec<Secret> {
    let var = |v: &str| {
        std::env::var_os(v)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let (key, webhook, status) = (
        var("GIT_AGENT_APP_KEY_FILE"),
        var("GIT_AGENT_WEBHOOK_SECRET_FILE"),
        var("GIT_AGENT_STATUS_TOKEN_FILE"),
    );
    let env_key = std::env::var("GIT_AGENT_APP_KEY").ok();
    named_secret_files(
        [
            (key.as_deref(), "GIT_AGENT_APP_KEY_FILE"),
            (webhook.as_deref(), "GIT_AGENT_WEBHOOK_SECRET_FILE"),
            (status.as_deref(), "GIT_AGENT_STATUS_TOKEN_FILE"),
        ],
        env_key.as_deref(),
    )
}

/// `files` that are set, and `GIT_AGENT_APP_KEY` when it holds a path rather than the PEM
/// text.
fn named_secret_files(files: [(Option<&Path>, &str); 3], app_key: Option<&str>) -> Vec<Secret> {
    let mut out: Vec<Secret> = files
        .into_iter()
        .filter_map(|(p, named_by)| p.map(|p| Secret::new(absolute(p), named_by)))
        .collect();
    if let Some(k) = app_key.filter(|k| !k.is_empty() && !k.trim_start().starts_with("-----BEGIN"))
    {
        out.push(Secret::new(
            absolute(Path::new(k)),
            "GIT_AGENT_APP_KEY (a path)",
        ));
    }
    out
}

/// `p` from the current directory when relative, as the server reads it.
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Run the server until SIGINT or SIGTERM.
pub fn run(args: Args, log: &str) -> anyhow::Result<u8> {
    init_tracing(log, args.log_format)?;
    refuse_secret_flags(&args)?;
    let env = |var: &str| std::env::var(var).ok();
    let Some(secret) = read_secret(
        "GIT_AGENT_WEBHOOK_SECRET",
        env("GIT_AGENT_WEBHOOK_SECRET"),
        "--webhook-secret-file",
        args.webhook_secret_file.as_deref(),
    )?
    else {
        bail!(
            "no webhook secret: set GIT_AGENT_WEBHOOK_SECRET or pass --webhook-secret-file \
             (the server refuses unsigned deliveries and will not start without one)"
        );
    };
    let status_token = read_secret(
        "GIT_AGENT_STATUS_TOKEN",
        env("GIT_AGENT_STATUS_TOKEN"),
        "--status-token-file",
        args.status_token_file.as_deref(),
    )?;
    let app_key = match env("GIT_AGENT_APP_KEY").filter(|k| !k.is_empty()) {
        // The variable may hold the PEM text or a file's path.
        Some(key) if !key.trim_start().starts_with("-----BEGIN") => {
            if args.app_key_file.is_some() {
                bail!("both GIT_AGENT_APP_KEY and --app-key-file are set: give one");
            }
            read_secret("", None, "the App key file", Some(Path::new(&key)))?
        }
        key => read_secret(
            "GIT_AGENT_APP_KEY",
            key,
            "--app-key-file",
            args.app_key_file.as_deref(),
        )?,
    };
    let credentials = match (args.app_id, app_key) {
        (Some(app_id), Some(pem)) => BotCredentials::App {
            app_id,
            key: Arc::new(SecretString::from(pem)),
        },
        (None, None) => match std::env::var("GITHUB_TOKEN").ok().filter(|t| !t.is_empty()) {
            Some(t) => BotCredentials::Token(Arc::new(SecretString::from(t))),
            None => bail!(
                "no GitHub credentials: set GIT_AGENT_APP_ID and GIT_AGENT_APP_KEY (or \
                 --app-id and --app-key-file), or GITHUB_TOKEN"
            ),
        },
        _ => bail!("the App id and the App key go together"),
    };
    let limits = limits(&args);
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
        app.status_token = status_token.map(|t| Arc::new(SecretString::from(t)));
        app.public_metrics = args.public_metrics;
        app.limits = limits;
        let runner: Arc<dyn JobRunner> = Arc::new(GitHubRunner {
            credentials,
            options: crate::forge::github::GitHubOptions {
                api_base: args.github_api.clone(),
                ..Default::default()
            },
            trigger: crate::config::TriggerConfig::default(),
            trigger_options: crate::trigger::Options::default(),
            git_base: args.git_base.clone(),
            publisher: Arc::new(EnginePublisher::new(state.clone()).hiding(secret_files(&args))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(argv: &[&str]) -> Args {
        Cli::try_parse_from(std::iter::once("serve").chain(argv.iter().copied()))
            .unwrap()
            .args
    }

    /// Guards issue 20's "secrets never by flag": a secret on argv is refused, naming the
    /// variable and the file flag to use instead.
    #[test]
    fn secrets_given_as_flags_are_refused() {
        for (flag, var, file) in [
            (
                "--webhook-secret",
                "GIT_AGENT_WEBHOOK_SECRET",
                "--webhook-secret-file",
            ),
            (
                "--status-token",
                "GIT_AGENT_STATUS_TOKEN",
                "--status-token-file",
            ),
            ("--app-key", "GIT_AGENT_APP_KEY", "--app-key-file"),
        ] {
            let args = parse(&[flag, "s3cret"]);
            let err = refuse_secret_flags(&args).unwrap_err().to_string();
            assert!(
                err.contains(flag) && err.contains(var) && err.contains(file),
                "{err}"
            );
            assert!(
                !err.contains("s3cret"),
                "the refusal repeats the secret: {err}"
            );
        }
        refuse_secret_flags(&parse(&[])).unwrap();
    }

    #[test]
    fn secrets_come_from_the_environment_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "from-file\n").unwrap();
        let got = read_secret("V", Some("from-env".into()), "--f", None).unwrap();
        assert_eq!(got.as_deref(), Some("from-env"));
        let got = read_secret("V", None, "--f", Some(&file)).unwrap();
        assert_eq!(
            got.as_deref(),
            Some("from-file"),
            "the newline is not the secret's"
        );
        let both = read_secret("V", Some("x".into()), "--f", Some(&file)).unwrap_err();
        assert!(both.to_string().contains("give one"), "{both}");
        assert_eq!(
            read_secret("V", Some(String::new()), "--f", None).unwrap(),
            None
        );
        std::fs::write(&file, "\n").unwrap();
        assert!(
            read_secret("V", None, "--f", Some(&file)).is_err(),
            "an empty file"
        );
    }

    #[test]
    fn limits_come_from_the_flags() {
        let args = parse(&[
            "--header-timeout-secs",
            "0.5",
            "--body-timeout-secs",
            "2",
            "--idle-timeout-secs",
            "1.5",
            "--max-connections",
            "7",
            "--body-memory-mib",
            "3",
            "--public-metrics",
        ]);
        let l = limits(&args);
        assert_eq!(l.header_timeout, Duration::from_millis(500));
        assert_eq!(l.body_timeout, Duration::from_secs(2));
        assert_eq!(l.idle_timeout, Duration::from_millis(1500));
        assert_eq!(l.max_connections, 7);
        assert_eq!(l.body_memory, 3 * 1024 * 1024);
        assert!(args.public_metrics);
        let bad = Cli::try_parse_from(["serve", "--header-timeout-secs", "0"]);
        assert!(bad.is_err());
    }
}
