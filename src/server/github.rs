//! The production [`JobRunner`]: a GitHub client for the delivery's App installation, the
//! trigger's decision, and — for a run — the shared publish path behind [`Publisher`].

use std::sync::Arc;

use async_trait::async_trait;
use secrecy::SecretString;
use tokio_util::sync::CancellationToken;

use super::runner::{JobInput, JobOutcome, JobRunner};
use super::{Error, Result};
use crate::config::TriggerConfig;
use crate::forge::Forge;
use crate::forge::github::{Auth, GitHub, GitHubOptions};
use crate::task::RepoRef;
use crate::trigger::{self, Directive, Event};

/// How the bot authenticates to GitHub. `Debug` never shows the key or the token.
#[derive(Clone, Debug)]
pub enum BotCredentials {
    /// As a GitHub App: each delivery's `installation.id` picks the installation.
    App {
        /// `--app-id`.
        app_id: u64,
        /// `GIT_AGENT_APP_KEY` or `--app-key-file`, PEM.
        key: Arc<SecretString>,
    },
    /// One token for every repository (a personal or fine-grained token; tests).
    Token(Arc<SecretString>),
}

/// Where a run's branch goes and with which credentials.
#[derive(Clone)]
pub struct Target {
    /// The forge (permissions, pull requests, comments).
    pub forge: Arc<dyn Forge>,
    /// The git remote of the repository (`https://github.com/OWNER/NAME.git`, or a path).
    pub remote: String,
    /// The token git uses over HTTPS (an installation token), if any.
    pub git_token: Option<SecretString>,
}

/// Runs a request to its pull request, put behind a trait so the worker does not depend on
/// how it is done (production: `run::publish`, the path the Action takes too).
#[async_trait]
pub trait Publisher: Send + Sync {
    /// Carry out what the trigger decided for `repo` (a run, `/agent approve`, `/agent
    /// retry`) on `target`; return soon once `cancel` fires. `stop` fires first when the
    /// cause is `/agent stop`: then end the run as cancelled and say so. A request that finds
    /// nothing to do (an approval with no run awaiting one) is [`JobOutcome::Ignored`].
    async fn publish(
        &self,
        repo: RepoRef,
        outcome: Directive,
        target: Target,
        cancel: CancellationToken,
        stop: CancellationToken,
    ) -> Result<JobOutcome>;
}

/// The production runner.
pub struct GitHubRunner {
    /// Credentials.
    pub credentials: BotCredentials,
    /// GitHub client options (API base for Enterprise Server or a test server).
    pub options: GitHubOptions,
    /// Base of the git remotes: `https://github.com` gives `https://github.com/OWNER/NAME.git`.
    pub git_base: String,
    /// The trigger section of the configuration.
    pub trigger: TriggerConfig,
    /// Trigger behaviour.
    pub trigger_options: trigger::Options,
    /// The run-and-publish path.
    pub publisher: Arc<dyn Publisher>,
}

impl GitHubRunner {
    fn forge_for(&self, job: &JobInput, event: &Event<'_>) -> Result<GitHub> {
        let fail = |what: &str| Error::runner(&job.job_id, what);
        let auth = match &self.credentials {
            BotCredentials::Token(t) => Auth::Token(SecretString::clone(t)),
            BotCredentials::App { app_id, key } => {
                let installation_id = event
                    .installation_id()
                    .ok_or_else(|| fail("the delivery names no App installation"))?;
                Auth::App {
                    app_id: *app_id,
                    private_key_pem: SecretString::clone(key),
                    installation_id,
                }
            }
        };
        GitHub::new(auth, self.options.clone())
            .map_err(|e| Error::runner_by(&job.job_id, "cannot set up the GitHub client", e))
    }
}

#[async_trait]
impl JobRunner for GitHubRunner {
    async fn run(&self, job: &JobInput, cancel: CancellationToken) -> Result<JobOutcome> {
        let event = match Event::parse(&job.event, &job.payload) {
            Ok(event) => event,
            Err(e) => {
                return Ok(JobOutcome::Ignored {
                    reason: e.to_string(),
                });
            }
        };
        let github = Arc::new(self.forge_for(job, &event)?);
        let forge: Arc<dyn Forge> = github.clone();
        let outcome =
            trigger::evaluate(forge.as_ref(), &self.trigger, &self.trigger_options, &event)
                .await
                .map_err(|e| {
                    Error::runner_by(&job.job_id, "cannot read what the event asks for", e)
                })?;
        let repo = match &outcome {
            Directive::Ignored { reason } => {
                return Ok(JobOutcome::Ignored {
                    reason: reason.clone(),
                });
            }
            Directive::Stop(control) => {
                return Ok(JobOutcome::Stop {
                    lane: format!("{}#{}", control.repo, control.number),
                });
            }
            Directive::Approve { control, .. } | Directive::Retry(control) => control.repo.clone(),
            Directive::Run(t) => match &t.task.repo {
                Some(r) => r.clone(),
                None => return Err(Error::runner(&job.job_id, "the task names no repository")),
            },
        };
        let git_token = github
            .git_token()
            .await
            .map_err(|e| Error::runner_by(&job.job_id, "cannot get a token for git", e))?;
        let target = Target {
            forge,
            remote: format!(
                "{}/{}/{}.git",
                self.git_base.trim_end_matches('/'),
                repo.owner,
                repo.name
            ),
            git_token: Some(git_token),
        };
        self.publisher
            .publish(repo, outcome, target, cancel, job.stop.clone())
            .await
    }
}
