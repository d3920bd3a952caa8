//! Building what a run needs from the layered configuration: every front door (the terminal,
//! the Action, the bot) composes its [`Services`] here, so that none of them has a way of its
//! own to pick models, mask secrets or read the repository's configuration.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{Error, Result};
use super::state::RunState;
use crate::audit::Redacted;
use crate::audit::redact::Redactor;
use crate::config::{self, Config, Layer, Source};
use crate::exec::{ExecOptions, Secret};
use crate::model::{ResumeState, Role, Router, RouterOptions};
use crate::workspace::Repo;

/// Path of the repository's config file inside its tree.
pub const REPO_CONFIG_PATH: &str = ".github/agent.toml";

/// Progress of a run, for a person watching.
#[derive(Debug, Clone)]
pub enum RunEvent {
    /// The run moved to a state.
    State(RunState),
    /// A model call started.
    Turn {
        /// The role asked.
        role: Role,
        /// Calls so far in this run.
        n: u32,
    },
    /// A tool ran.
    Tool {
        /// Its name.
        name: String,
        /// A short description (path, command), redacted: a model may put a secret in a
        /// command line, and progress reaches a terminal or a CI log.
        detail: Redacted,
    },
    /// A verification run finished.
    Verified {
        /// `before`, `attempt N`.
        when: String,
        /// Its one-line result, redacted (it names tests from the project's output).
        result: Redacted,
    },
    /// The project's environment was set up (or found in the cache).
    Setup {
        /// One line: cached or how long it took, or why it failed; redacted.
        result: Redacted,
    },
    /// Money spent so far.
    Spend {
        /// USD.
        usd: f64,
    },
}

/// Everything a run needs from its front door.
pub struct Services {
    /// The resolved configuration.
    pub config: Config,
    /// The repository (main worktree or bare).
    pub repo: Repo,
    /// Models by role.
    pub router: Arc<Router>,
    /// Masks secrets in everything that leaves the process.
    pub redactor: Arc<Redactor>,
    /// Where progress goes.
    pub progress: Arc<dyn Fn(&RunEvent) + Send + Sync>,
    /// How commands run (sandbox, network, limits).
    pub exec_options: ExecOptions,
    /// Reuse pooled worktrees, and hand a run's worktree to the pool when it ends.
    pub warm_pool: bool,
}

/// Where a run's progress events go.
pub type ProgressSink = Arc<dyn Fn(&RunEvent) + Send + Sync>;

/// Resolve the configuration: defaults < user file < the repository file read from `base`
/// (never the work tree) < `GIT_AGENT_*` < `flags`.
pub fn load_config(
    repo: Option<(&Repo, &str)>,
    user_file: Option<PathBuf>,
    flags: Vec<Layer>,
) -> Result<Config> {
    let mut layers = Vec::new();
    if let Some(path) = user_file.or_else(config::user_config_path)
        && let Some(layer) = config::user_layer(&path)?
    {
        layers.push(layer);
    }
    if let Some((repo, base)) = repo
        && let Some(bytes) = repo.read_file_at(base, REPO_CONFIG_PATH)?
    {
        let text = String::from_utf8(bytes)
            .map_err(|_| Error::Invalid(format!("{base}:{REPO_CONFIG_PATH} is not UTF-8")))?;
        layers.push(Layer::Toml {
            text,
            origin: Source::Repo {
                rev: base.to_string(),
                path: REPO_CONFIG_PATH.to_string(),
            },
        });
    }
    layers.extend(config::env_layers(std::env::vars()));
    layers.extend(flags);
    Ok(Config::resolve(layers)?)
}

/// What [`build`] needs besides the repository and the configuration.
#[derive(Clone)]
pub struct Options {
    /// `--model` flags (or the record's, when a run continues).
    pub models: Vec<String>,
    /// Record every model exchange to this file (`--record`).
    pub record: Option<PathBuf>,
    /// The spend, time and roles of the run being continued.
    pub resume: Option<ResumeState>,
    /// Where progress goes.
    pub progress: ProgressSink,
    /// git-agent's state directory, where run worktrees and the warm pool live (the bot's
    /// `STATE_DIR`); the user's ([`config::user_state_dir`]) when `None`.
    pub state_dir: Option<PathBuf>,
    /// Build without a coder model: for a run that calls none (`doctor --run`'s check).
    pub without_model: bool,
    /// Secret files the front door's own settings name (the bot's key files), hidden from
    /// every command's view with those git's configuration and `sandbox.hide` name.
    pub secrets: Vec<Secret>,
}

impl Options {
    /// Options with `models`, progress as `tracing` debug events (a front door with no
    /// terminal: the bot), nothing recorded, nothing continued.
    pub fn traced(models: Vec<String>) -> Self {
        Options {
            models,
            record: None,
            resume: None,
            progress: Arc::new(|e: &RunEvent| tracing::debug!(event = ?e, "run progress")),
            state_dir: None,
            without_model: false,
            secrets: Vec::new(),
        }
    }
}

/// The executor options of `cfg`, with every secret a setting names hidden from the view:
/// the front door's `secrets`, `sandbox.hide`, and what git's configuration read in `dir`
/// (the repository's) names.
pub fn exec_options(settings: &config::Settings, dir: &Path, secrets: Vec<Secret>) -> ExecOptions {
    let mut opts = ExecOptions::from_settings(settings);
    let env = |k: &str| std::env::var_os(k);
    opts.hide.extend(secrets);
    opts.hide.extend(crate::exec::secrets_from_git(dir, &env));
    opts
}

/// The services of a run over `cfg`: the model router (failing when no coder model is
/// configured), the redactor over the process's secrets and the configured key variables,
/// the executor options, and the repository with the state directory its run worktrees go
/// to (never beneath the repository: see `workspace::worktree`).
pub fn build(repo: Repo, cfg: Config, opts: Options) -> Result<Services> {
    let state = opts
        .state_dir
        .or_else(config::user_state_dir)
        .ok_or_else(|| {
            Error::Invalid(
                "no state directory for run worktrees: set XDG_STATE_HOME or HOME".into(),
            )
        })?;
    let repo = repo.with_state_dir(state);
    let env = |k: &str| std::env::var(k).ok();
    let router = Router::from_settings(
        &cfg.settings,
        &RouterOptions {
            model_flags: opts.models,
            record: opts.record,
            resume: opts.resume,
        },
        &env,
    )?;
    if router.spec(Role::Coder).is_none() && !opts.without_model {
        return Err(Error::Invalid(
            "no model is configured: pass --model PROVIDER:MODEL (e.g. openai:gpt-5, \
             ollama:qwen2.5-coder, scripted:run.jsonl) or set [models] coder in your config"
                .into(),
        ));
    }
    let key_names: Vec<String> = [
        &cfg.settings.providers.openai,
        &cfg.settings.providers.anthropic,
        &cfg.settings.providers.ollama,
    ]
    .into_iter()
    .filter_map(|p| p.api_key_env.clone())
    .collect();
    let redactor = Redactor::from_process_env(&key_names)?;
    let dir = repo
        .workdir()
        .unwrap_or_else(|| repo.git_dir())
        .to_path_buf();
    let exec_options = exec_options(&cfg.settings, &dir, opts.secrets);
    Ok(Services {
        config: cfg,
        repo,
        router: Arc::new(router),
        redactor: Arc::new(redactor),
        progress: opts.progress,
        exec_options,
        warm_pool: true,
    })
}
