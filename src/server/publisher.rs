//! The bot's run path: mirror the repository's base branch into a bare repository under the
//! state directory, resolve the request there (`run::publish::resolve`, as the Action does)
//! and hand it to `run::publish` for the 👀, the progress comment, the run (or its
//! continuation), the push and the draft PR.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::github::{Publisher, Target};
use super::runner::{JobOutcome, RunSummary};
use super::{Error, Result};
use crate::exec::Secret;
use crate::run::publish::{self, Fetch, Lookup, Published, Resolved};
use crate::run::services;
use crate::task::RepoRef;
use crate::trigger::Directive;
use crate::workspace::{PushCredentials, Repo};

/// The production [`Publisher`]: runs in bare mirrors kept under the state directory
/// (`STATE_DIR/repos/<owner>/<name>.git`), one per repository; their run worktrees go to
/// `STATE_DIR/worktrees/<repo-key>/`.
pub struct EnginePublisher {
    state: PathBuf,
    /// The bot's own secret files (App key, webhook secret, status token), hidden from every
    /// command of every run.
    secrets: Vec<Secret>,
}

impl EnginePublisher {
    /// A publisher keeping its mirrors and run worktrees under `state` (the bot's
    /// `STATE_DIR`).
    pub fn new(state: PathBuf) -> Self {
        EnginePublisher {
            state,
            secrets: Vec::new(),
        }
    }

    /// This publisher with `secrets` (the files the bot's settings name) out of every
    /// run's view.
    pub fn hiding(mut self, secrets: Vec<Secret>) -> Self {
        self.secrets = secrets;
        self
    }
}

/// Why a job could not be carried out, for the worker's log and the job's record.
fn failed(job: &str) -> impl Fn(String) -> Error + '_ {
    move |what| Error::runner(job, what)
}

#[async_trait]
impl Publisher for EnginePublisher {
    async fn publish(
        &self,
        repo: RepoRef,
        outcome: Directive,
        target: Target,
        cancel: CancellationToken,
        stop: CancellationToken,
    ) -> Result<JobOutcome> {
        let what = job_name(&repo, &outcome);
        let state = self.state.clone();
        let secrets = self.secrets.clone();
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
                        r = run_and_publish(&state, secrets, &repo, outcome, target, stop.clone()) => r,
                        () = dropped => Err("cancelled".to_string()),
                    }
                }),
                Err(e) => Err(format!("cannot start a runtime for the run: {e}")),
            };
            let _ = tx.send(result);
        });
        let fail = failed(&what);
        let result = rx.await.map_err(|_| fail("the run's thread died".into()))?;
        result.map_err(fail)
    }
}

/// The job's name in errors: the task's key, or the conversation and the command.
fn job_name(repo: &RepoRef, outcome: &Directive) -> String {
    match outcome {
        Directive::Run(t) => t.task.key.clone(),
        Directive::Approve { control, .. } => format!("{repo}#{}:approve", control.number),
        Directive::Retry(control) => format!("{repo}#{}:retry", control.number),
        Directive::Stop(control) => format!("{repo}#{}:stop", control.number),
        Directive::Ignored { .. } => format!("{repo}:ignored"),
    }
}

/// The bare mirror of `repo_ref` under `mirrors`, created on first use.
fn mirror(mirrors: &Path, repo_ref: &RepoRef) -> std::result::Result<Repo, String> {
    let dir = mirrors
        .join(&repo_ref.owner)
        .join(format!("{}.git", repo_ref.name));
    if !dir.exists() {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        gix::init_bare(&dir).map_err(|e| format!("cannot init {}: {e}", dir.display()))?;
    }
    Repo::open(&dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))
}

fn summary(p: &Published) -> RunSummary {
    let (spend_usd, _) = p.record.spend();
    RunSummary {
        run_id: p.run_id.clone(),
        state: p.state.as_str().to_string(),
        pr_url: p.pr_url.clone(),
        report: Some(p.report.clone()),
        spend_usd,
        detail: format!("run {} {}", p.run_id, p.state.as_str()),
    }
}

/// Resolve, build the services from the layered configuration of the task's base branch
/// (the models of the run it continues), and publish. Errors are flattened to their text
/// with every cause (`{:#}`-style) for the job's record.
async fn run_and_publish(
    state: &Path,
    secrets: Vec<Secret>,
    repo_ref: &RepoRef,
    outcome: Directive,
    target: Target,
    stop: CancellationToken,
) -> std::result::Result<JobOutcome, String> {
    let text = |e: crate::run::Error| super::error::chain(&e);
    let forge = target.forge.as_ref();
    let repo = mirror(&state.join("repos"), repo_ref)?;
    let creds = target
        .git_token
        .as_ref()
        .cloned()
        .map(PushCredentials::Token);
    let lookup = Lookup {
        repo: &repo,
        forge,
        remote: &target.remote,
        fetch: Fetch::From(creds.as_ref()),
    };
    let mut prepared = match publish::resolve(&lookup, outcome).await.map_err(text)? {
        Resolved::Ignored(reason) => return Ok(JobOutcome::Ignored { reason }),
        Resolved::Publish(p) => *p,
    };
    let cfg = services::load_config(Some((&repo, &prepared.req.task.base)), None, Vec::new())
        .map_err(text)?;
    let models = prepared.models(Vec::new());
    let mut opts = services::Options::traced(models.clone());
    opts.state_dir = Some(state.to_path_buf());
    opts.secrets = secrets;
    opts.resume = prepared.resume_state();
    let mut svc = services::build(repo, cfg, opts).map_err(text)?;
    // Several workers share a mirror: each run checks out its own worktree.
    svc.warm_pool = false;
    prepared.req.start.model_flags = models;
    prepared.req.stop = Some(stop);
    let published = publish::publish_prepared(&svc, forge, prepared)
        .await
        .map_err(text)?;
    Ok(JobOutcome::Ran(summary(&published)))
}
