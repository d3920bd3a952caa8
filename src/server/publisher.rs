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
        let job = what.clone();
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
                    let run = Run {
                        job: &job,
                        state: &state,
                        secrets,
                        repo_ref: &repo,
                    };
                    tokio::select! {
                        r = run.publish(outcome, target, stop.clone()) => r,
                        () = dropped => Err(Error::runner(&job, "cancelled")),
                    }
                }),
                Err(e) => Err(Error::runner_by(
                    &job,
                    "cannot start a runtime for the run",
                    e,
                )),
            };
            let _ = tx.send(result);
        });
        rx.await
            .map_err(|_| Error::runner(&what, "the run's thread died"))?
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

/// The bare mirror of `repo_ref` under `mirrors`, created on first use; errors are `job`'s.
fn mirror(job: &str, mirrors: &Path, repo_ref: &RepoRef) -> Result<Repo> {
    let dir = mirrors
        .join(&repo_ref.owner)
        .join(format!("{}.git", repo_ref.name));
    let failed = |what: &str| format!("cannot {what} the mirror {}", dir.display());
    if !dir.exists() {
        std::fs::create_dir_all(&dir).map_err(|e| Error::runner_by(job, failed("create"), e))?;
        gix::init_bare(&dir).map_err(|e| Error::runner_by(job, failed("init"), e))?;
    }
    Repo::open(&dir).map_err(|e| Error::runner_by(job, failed("open"), e))
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

/// One job's run, as the publisher's thread carries it out.
struct Run<'a> {
    /// The job's name, for its errors.
    job: &'a str,
    state: &'a Path,
    secrets: Vec<Secret>,
    repo_ref: &'a RepoRef,
}

impl Run<'_> {
    /// Resolve, build the services from the layered configuration of the task's base branch
    /// (the models of the run it continues), and publish. Each error says which step failed
    /// and keeps its cause, whose chain goes into the job's record.
    async fn publish(
        self,
        outcome: Directive,
        target: Target,
        stop: CancellationToken,
    ) -> Result<JobOutcome> {
        let job = self.job;
        let failed =
            |what: &'static str| move |e: crate::run::Error| Error::runner_by(job, what, e);
        let forge = target.forge.as_ref();
        let repo = mirror(job, &self.state.join("repos"), self.repo_ref)?;
        let creds = target.git_token.clone().map(PushCredentials::Token);
        let lookup = Lookup {
            repo: &repo,
            forge,
            remote: &target.remote,
            fetch: Fetch::From(creds.as_ref()),
        };
        let resolved = publish::resolve(&lookup, outcome).await;
        let mut prepared = match resolved.map_err(failed("cannot resolve the request"))? {
            Resolved::Ignored(reason) => return Ok(JobOutcome::Ignored { reason }),
            Resolved::Publish(p) => *p,
        };
        let base = Some((&repo, prepared.req.task.base.as_str()));
        let cfg = services::load_config(base, None, Vec::new())
            .map_err(failed("cannot load the configuration"))?;
        let models = prepared.models(Vec::new());
        let mut opts = services::Options::traced(models.clone());
        opts.state_dir = Some(self.state.to_path_buf());
        opts.secrets = self.secrets;
        opts.resume = prepared.resume_state();
        let mut svc = services::build(repo, cfg, opts).map_err(failed("cannot set the run up"))?;
        // Several workers share a mirror: each run checks out its own worktree.
        svc.warm_pool = false;
        prepared.req.start.model_flags = models;
        prepared.req.stop = Some(stop);
        let published = publish::publish_prepared(&svc, forge, prepared)
            .await
            .map_err(failed("the run failed"))?;
        Ok(JobOutcome::Ran(summary(&published)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that fails keeps its cause: the record says which step failed and why.
    #[test]
    fn a_mirror_that_cannot_be_made_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let repo = RepoRef {
            owner: "o".into(),
            name: "r".into(),
        };
        let e = mirror("o/r#4", &file, &repo).map(|_| ()).unwrap_err();
        let text = super::super::error::chain(&e);
        assert!(
            text.starts_with("job o/r#4: cannot create the mirror "),
            "{text}"
        );
        let io = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert!(io.is_some(), "{e:?}");
        assert!(text.ends_with(&io.unwrap().to_string()), "{text}");
    }
}
