//! Publishing a run on a forge: the one path from a triggered task to a pushed branch, a draft
//! pull request and a progress comment, shared by `git agent action` and the webhook bot's
//! workers so that nothing about it differs between them.
//!
//! [`publish`] does, in order:
//! 1. 👀 on the comment that asked (when one did);
//! 2. looks for a run of the same request ([`find_run`], by [`Task::key`]): first in the local
//!    run records, then through the hidden key marker in the forge's progress comments, whose
//!    run record is fetched from the remote (`refs/agent/runs/<id>`) and restored;
//! 3. creates (or edits) the run's progress comment, announcing the run id before any work;
//! 4. runs the engine — [`engine::resume`] when the run exists, else [`engine::start`] under the
//!    id announced in step 3 — editing the progress comment as the run changes state;
//! 5. pushes the run branch (when it has commits) and `refs/agent/runs/<id>` to the remote;
//! 6. opens the draft pull request whose body is the run's full report, or updates the one the
//!    branch already has;
//! 7. writes the PR link into the run record, pushes the record again, and edits the progress
//!    comment to the final state with the link.
//!
//! Every step is idempotent, so publishing the same request twice — a redelivered webhook, a
//! re-run Actions job, a worker that crashed half-way — leaves one branch, one pull request
//! and one progress comment.
//!
//! Cancellation: drop the future (for instance in a `select!` against a shutdown signal). The
//! engine saves the run after every step, so publishing the same request again resumes it.
//!
//! The future is not `Send` (the [`Services`]' repository handle is not `Sync`): run it on a
//! current-thread runtime, in a `LocalSet`, or inside `spawn_blocking` with its own runtime.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::engine::{self, Services, StartOptions};
use super::error::{Error, Result};
use super::record::{PrRef, RunRecord, files, first_line};
use super::state::RunState;
use crate::audit::chain::{Appender, Kind};
use crate::failpoint::failpoint;
use crate::forge::{CommentTarget, Forge, PrRequest};
use crate::task::{Mode, Origin, RepoRef, Task};
use crate::workspace::{Repo, run_ref};

mod find;
mod progress;

pub use find::{
    Fetch, Lookup, Prepared, Resolved, find_run, key_marker, resolve, resume_state,
    run_in_conversation,
};
use progress::Progress;

/// What to publish: a triggered task and where its branch goes.
#[derive(Debug, Clone)]
pub struct PublishRequest {
    /// The task (from `trigger::Triggered::task`, or built by a front door).
    pub task: Task,
    /// The comment to acknowledge with 👀 (`trigger::Triggered::react_to`).
    pub react_to: Option<CommentTarget>,
    /// The remote to push to and fetch run records from: a URL
    /// (`https://github.com/OWNER/REPO.git`) or a path.
    pub remote: String,
    /// Branch, test command and the flags recorded for `resume`. Its `run_id` is ignored:
    /// the id comes from an earlier run of the same request, or is made fresh.
    pub start: StartOptions,
    /// How often the progress comment is brought up to date while the run works
    /// (`None`: only at the start and the end).
    pub progress_every: Option<Duration>,
    /// `Some(login)`: approve the pending request of the run found for this task (it must be
    /// awaiting approval), on behalf of `login`, then continue it (`/agent approve`).
    pub approve: Option<String>,
    /// Fired by `/agent stop`: the run is stopped where it is and recorded as cancelled; its
    /// commits are pushed, no pull request is opened, the progress comment says so.
    pub stop: Option<CancellationToken>,
}

impl PublishRequest {
    /// A request for `task`, pushing to `remote`, with default options and progress every
    /// 20 seconds.
    pub fn new(task: Task, react_to: Option<CommentTarget>, remote: impl Into<String>) -> Self {
        PublishRequest {
            task,
            react_to,
            remote: remote.into(),
            start: StartOptions::default(),
            progress_every: Some(Duration::from_secs(20)),
            approve: None,
            stop: None,
        }
    }
}

/// What [`publish`] did.
#[derive(Debug, Clone)]
pub struct Published {
    /// The run id.
    pub run_id: String,
    /// The state the run ended (or paused) in.
    pub state: RunState,
    /// The draft pull request's address, when the run has commits to propose.
    pub pr_url: Option<String>,
    /// The progress comment's address, when the task has a conversation on the forge.
    pub comment_url: Option<String>,
    /// The run branch.
    pub branch: String,
    /// The full report (the PR body), redacted.
    pub report: String,
    /// Whether an earlier run of the same request was continued rather than a new one started.
    pub resumed: bool,
    /// The run record as last saved.
    pub record: RunRecord,
    /// The run directory.
    pub run_dir: PathBuf,
}

/// A run of the same request found by [`find_run`].
#[derive(Debug, Clone)]
pub struct Existing {
    /// Its id.
    pub run_id: String,
    /// Its record, when one could be read (locally or from the remote's run-record ref).
    /// `None` when only its progress comment survives (the process died before pushing):
    /// the request is started again under the same id, so the comment is reused.
    pub record: Option<RunRecord>,
}

/// The issue or PR whose conversation a task belongs to.
fn conversation(task: &Task) -> Option<(RepoRef, u64)> {
    let number = match &task.origin {
        Origin::Issue { number, .. }
        | Origin::PullRequest { number, .. }
        | Origin::CiFailure { number, .. } => *number,
        Origin::Cli => return None,
    };
    Some((task.repo.clone()?, number))
}

fn forge_err(what: impl Into<String>) -> impl FnOnce(crate::forge::Error) -> Error {
    let what = what.into();
    move |source| Error::Forge {
        what,
        source: Box::new(source),
    }
}

/// Publish `req`: announce, run (or resume), push, open the draft PR, report. See the module
/// documentation for the steps. Forge failures of the comment and the 👀 are logged and
/// passed over (they are courtesy); failures to push or to open the PR are errors.
pub async fn publish(svc: &Services, forge: &dyn Forge, req: PublishRequest) -> Result<Published> {
    let existing = find_run(&svc.repo, forge, &req.task, &req.remote).await?;
    publish_found(svc, forge, req, existing).await
}

/// [`publish`] a request that [`resolve`] prepared, with the earlier run it found.
pub async fn publish_prepared(
    svc: &Services,
    forge: &dyn Forge,
    prepared: Prepared,
) -> Result<Published> {
    publish_found(svc, forge, prepared.req, prepared.existing).await
}

async fn publish_found(
    svc: &Services,
    forge: &dyn Forge,
    req: PublishRequest,
    existing: Option<Existing>,
) -> Result<Published> {
    let PublishRequest {
        mut task,
        react_to,
        remote,
        start,
        progress_every,
        approve,
        stop,
    } = req;
    if stop.as_ref().is_some_and(CancellationToken::is_cancelled) {
        return Err(Error::Invalid(format!(
            "{} was stopped before it started",
            task.key
        )));
    }
    let convo = conversation(&task);
    if let (Some(target), Some((repo_ref, _))) = (react_to, &convo)
        && let Err(e) = forge.react_eyes(repo_ref, target).await
    {
        tracing::warn!(error = %e, "cannot react to the triggering comment");
    }
    let resumed = existing.as_ref().is_some_and(|e| e.record.is_some());
    if approve.is_some() && !resumed {
        return Err(Error::Invalid(format!(
            "no run of {} to approve (its record is neither here nor on the remote)",
            task.key
        )));
    }
    let run_id = existing
        .as_ref()
        .map(|e| e.run_id.clone())
        .unwrap_or_else(|| ulid::Ulid::generate().to_string());
    let pr_base = pr_base_of(&task.base);
    resolve_bases(&svc.repo, &mut task, &pr_base);
    let progress = Progress {
        svc,
        forge,
        convo,
        run_id: &run_id,
        key: task.key.clone(),
    };
    let earlier = existing.and_then(|e| e.record);
    let earlier_pr = earlier.as_ref().and_then(|r| match &r.pr {
        Some(PrRef::Url(u)) => Some(u.clone()),
        _ => None,
    });
    let mut comment_url = progress.show(earlier.clone(), earlier_pr, None, None).await;

    let dir = svc.repo.run_dir(&run_id);
    let how = if resumed {
        EngineRun::Resume {
            approved_by: approve,
        }
    } else {
        EngineRun::Start {
            task: Box::new(task.clone()),
            opts: Box::new(StartOptions {
                run_id: Some(run_id.clone()),
                ..start
            }),
        }
    };
    let watched = Watched {
        dir: &dir,
        shown: earlier.as_ref().map(|r| r.state),
        every: progress_every,
    };
    let outcome = match run_engine(&progress, how, watched, stop.as_ref()).await {
        Ok(o) => o,
        Err(e) => {
            keep_failed_run(&progress, &remote, &dir).await;
            progress
                .show(RunRecord::load(&dir).ok(), None, None, Some(e.to_string()))
                .await;
            return Err(e);
        }
    };
    let mut rec = outcome.record;
    let report_path = dir.join(files::PR);
    let report = std::fs::read_to_string(&report_path)
        .map_err(|e| Error::io("cannot read the report", &report_path, e))?;
    let out = Publication {
        svc,
        forge,
        remote: &remote,
        dir: &dir,
        audit: open_audit(svc, &dir, &run_id)?,
    };
    out.push_branch_and_record(&mut rec).await?;
    failpoint("after-push");
    let pr_wanted = wants_pr(!rec.commits.is_empty(), rec.task.mode, rec.state);
    let pr_url = match (pr_wanted, task.repo.as_ref()) {
        (true, Some(repo_ref)) => Some(out.open_pr(repo_ref, &mut rec, &pr_base, &report).await?),
        _ => None,
    };
    failpoint("after-pr");
    out.seal_record(&mut rec).await?;
    let folded = pr_url.is_none().then(|| report.clone());
    if let Some(url) = progress
        .show(Some(rec.clone()), pr_url.clone(), folded, None)
        .await
    {
        comment_url = Some(url);
    }
    Ok(Published {
        run_id,
        state: rec.state,
        pr_url,
        comment_url,
        branch: rec.branch.clone(),
        report,
        resumed,
        record: rec,
        run_dir: dir,
    })
}

/// The branch a PR merges into, as the forge names it (`refs/heads/` and `origin/` off).
fn pr_base_of(base: &str) -> String {
    base.trim_start_matches("refs/heads/")
        .trim_start_matches("origin/")
        .to_string()
}

/// Make the task's base a ref this clone can resolve: in an Actions checkout a PR's base
/// may exist only as `origin/…`; and a PR's branch that this clone has only as `origin/…`
/// is continued from its tip, so the run adds to the branch instead of replacing it.
fn resolve_bases(repo: &Repo, task: &mut Task, pr_base: &str) {
    if repo.resolve(&task.base).is_err() {
        let remote_ref = format!("origin/{pr_base}");
        if repo.resolve(&remote_ref).is_ok() {
            task.base = remote_ref;
        }
    }
    if let Some(branch) = &task.branch
        && !repo.branch_exists(branch)
    {
        let remote_ref = format!("origin/{branch}");
        if repo.resolve(&remote_ref).is_ok() {
            task.base = remote_ref;
        }
    }
}

/// A new run, or the continuation of a saved one (approved by someone, or not).
enum EngineRun {
    Start {
        task: Box<Task>,
        opts: Box<StartOptions>,
    },
    Resume {
        approved_by: Option<String>,
    },
}

/// Where the run's record is watched for a new state to show, and how often.
struct Watched<'a> {
    dir: &'a std::path::Path,
    shown: Option<RunState>,
    every: Option<Duration>,
}

/// Run the engine until the run ends, showing each new state in the progress comment; on
/// `stop` the engine's future is dropped (it saved at its last step) and the run is ended
/// as cancelled, to be published like any ended run.
async fn run_engine(
    progress: &Progress<'_>,
    how: EngineRun,
    mut watched: Watched<'_>,
    stop: Option<&CancellationToken>,
) -> Result<engine::Outcome> {
    let svc = progress.svc;
    let engine_run = async {
        match how {
            EngineRun::Resume { approved_by } => {
                let by = approved_by.as_deref().unwrap_or("");
                engine::resume(svc, progress.run_id, approved_by.is_some(), by).await
            }
            EngineRun::Start { task, opts } => engine::start(svc, *task, *opts).await,
        }
    };
    let watch = async {
        let Some(every) = watched.every else {
            return std::future::pending::<()>().await;
        };
        loop {
            tokio::time::sleep(every).await;
            if let Ok(rec) = RunRecord::load(watched.dir)
                && watched.shown != Some(rec.state)
            {
                watched.shown = Some(rec.state);
                progress.show(Some(rec), None, None, None).await;
            }
        }
    };
    let stopped = async {
        match stop {
            Some(t) => t.cancelled().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = engine_run => r,
        () = watch => Err(Error::Invalid("the progress watcher ended".into())),
        () = stopped => engine::cancel(svc, progress.run_id, "Stopped by `/agent stop`."),
    }
}

/// A run that ended in an error saved its record and report first: keep them on the
/// remote as evidence (a failure to is logged).
async fn keep_failed_run(progress: &Progress<'_>, remote: &str, dir: &std::path::Path) {
    let svc = progress.svc;
    if RunRecord::load(dir).is_err() {
        return;
    }
    if let Err(e) = progress
        .forge
        .push(
            svc.repo.clone(),
            remote,
            &[run_ref(progress.run_id)],
            &svc.config.settings.git.branch_prefix,
        )
        .await
    {
        tracing::warn!(error = %e, "cannot push the record of a failed run");
    }
}

/// The run's audit log, appended to as it is published.
fn open_audit(svc: &Services, dir: &std::path::Path, run_id: &str) -> Result<Appender> {
    let redactor = svc.redactor.clone();
    Ok(Appender::open(
        &dir.join(files::AUDIT),
        run_id,
        std::sync::Arc::new(move |s: &str| redactor.redact(s)),
    )?
    .0)
}

/// Where an ended run is published: the services, the forge and remote, the run's
/// directory and its audit log.
struct Publication<'a> {
    svc: &'a Services,
    forge: &'a dyn Forge,
    remote: &'a str,
    dir: &'a std::path::Path,
    audit: Appender,
}

impl Publication<'_> {
    /// Push the run's branch (when it made commits) and its record's ref, atomically. A branch
    /// name the run made for itself that is taken on the remote (another run for the same
    /// issue, from another front door) is published under a name of its own; nothing of the
    /// refused attempt is on the remote. A branch the run was asked to continue is never renamed.
    async fn push_branch_and_record(&self, rec: &mut RunRecord) -> Result<()> {
        let Self {
            svc,
            forge,
            remote,
            dir,
            audit,
        } = self;
        let prefix = &svc.config.settings.git.branch_prefix;
        let has_branch = !rec.commits.is_empty() && svc.repo.branch_exists(&rec.branch);
        let mut refs = Vec::new();
        if has_branch {
            refs.push(format!("refs/heads/{}", rec.branch));
        }
        refs.push(run_ref(&rec.run_id));
        let mut pushed = forge.push(svc.repo.clone(), remote, &refs, prefix).await;
        let own_default = engine::default_branch(prefix, &rec.task, &rec.run_id);
        if has_branch && branch_taken(&pushed, &rec.branch, &own_default) {
            let unique = format!("{}-{}", rec.branch, engine::run_suffix(&rec.run_id));
            svc.repo.copy_branch(&rec.branch, &unique)?;
            audit.append(
            Kind::Push,
            json!({"refused": rec.branch, "branch": unique, "why": "the branch exists on the remote with other commits"}),
        )?;
            rec.branch = unique;
            // The record names the branch it published (a forge finds the run by it).
            rec.save(dir, &svc.redactor)
                .map_err(|e| Error::io("cannot write the record in", dir, e))?;
            refs[0] = format!("refs/heads/{}", rec.branch);
            pushed = forge.push(svc.repo.clone(), remote, &refs, prefix).await;
        }
        pushed.map_err(forge_err(format!("pushing {}", refs.join(", "))))?;
        audit.append(
            Kind::Push,
            json!({"remote": redact_remote(remote), "refs": refs}),
        )?;
        Ok(())
    }

    /// Open the draft PR of the pushed branch into `pr_base`, with the report as its body; its
    /// URL.
    async fn open_pr(
        &self,
        repo_ref: &RepoRef,
        rec: &mut RunRecord,
        pr_base: &str,
        report: &str,
    ) -> Result<String> {
        let (svc, audit) = (self.svc, &self.audit);
        let title = format!("agent: {}", first_line(&rec.task.goal, 72));
        let pr = self
            .forge
            .open_draft_pr(
                repo_ref,
                &PrRequest {
                    title: svc.redactor.clean(&title),
                    body: svc.redactor.clean(report),
                    head: rec.branch.clone(),
                    base: pr_base.to_string(),
                },
            )
            .await
            .map_err(forge_err(format!(
                "opening the draft pull request for {}",
                rec.branch
            )))?;
        let opened = json!({
            "pull_request": pr.number, "url": pr.html_url, "head": pr.head_ref, "base": pr.base_ref,
        });
        audit.append(Kind::Forge, opened)?;
        rec.pr = Some(PrRef::Url(pr.html_url.clone()));
        Ok(pr.html_url)
    }

    /// Seal the record with the audit log's head, save it, mirror it to its ref and push that.
    async fn seal_record(&self, rec: &mut RunRecord) -> Result<()> {
        let Self {
            svc,
            forge,
            remote,
            dir,
            audit,
        } = self;
        rec.audit_head = Some(audit.head()?);
        rec.save(dir, &svc.redactor)
            .map_err(|e| Error::io("cannot write the record in", dir, e))?;
        svc.repo.mirror_run_record(&rec.run_id)?;
        let prefix = &svc.config.settings.git.branch_prefix;
        forge
            .push(svc.repo.clone(), remote, &[run_ref(&rec.run_id)], prefix)
            .await
            .map_err(forge_err(format!("pushing {}", run_ref(&rec.run_id))))
    }
}

/// Whether the push was refused because `branch`, the name the run made for itself
/// (`own_default`), is taken on the remote, so it may publish under another; never for a
/// branch it was asked to continue.
fn branch_taken(
    pushed: &std::result::Result<(), crate::forge::Error>,
    branch: &str,
    own_default: &str,
) -> bool {
    matches!(
        pushed,
        Err(crate::forge::Error::Push {
            source: crate::workspace::Error::PushRejected { refs: refused, .. },
            ..
        }) if refused.contains(&format!("refs/heads/{branch}")) && branch == own_default
    )
}

/// Whether an ended run gets a draft PR: it made commits, fixes, and was not stopped.
fn wants_pr(made_commits: bool, mode: Mode, state: RunState) -> bool {
    made_commits && mode == Mode::Fix && state != RunState::Cancelled
}

/// A remote for the audit log: a URL without any user information.
fn redact_remote(remote: &str) -> String {
    match remote.split_once("://") {
        Some((scheme, rest)) => {
            let host_path = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
            format!("{scheme}://{host_path}")
        }
        None => remote.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pr_merges_into_the_branch_as_the_forge_names_it() {
        assert_eq!(pr_base_of("refs/heads/main"), "main");
        assert_eq!(pr_base_of("origin/release/1.x"), "release/1.x");
        assert_eq!(pr_base_of("main"), "main");
    }

    #[test]
    fn only_a_fix_with_commits_that_was_not_stopped_gets_a_pr() {
        assert!(wants_pr(true, Mode::Fix, RunState::Succeeded));
        assert!(wants_pr(true, Mode::Fix, RunState::Failed));
        assert!(!wants_pr(false, Mode::Fix, RunState::Succeeded));
        assert!(!wants_pr(true, Mode::Fix, RunState::Cancelled));
        assert!(!wants_pr(true, Mode::Plan, RunState::Succeeded));
    }

    #[test]
    fn only_the_runs_own_branch_name_is_renamed_when_the_remote_has_it() {
        let rejected = |refs: &[&str]| -> std::result::Result<(), crate::forge::Error> {
            Err(crate::forge::Error::Push {
                remote: "origin".into(),
                source: crate::workspace::Error::PushRejected {
                    refs: refs.iter().map(|r| r.to_string()).collect(),
                    detail: "fetch first".into(),
                },
            })
        };
        let own = "agent/7-fix-it";
        assert!(branch_taken(
            &rejected(&["refs/heads/agent/7-fix-it"]),
            own,
            own
        ));
        // A branch the run was asked to continue keeps its name: the push fails.
        assert!(!branch_taken(
            &rejected(&["refs/heads/feature"]),
            "feature",
            own
        ));
        // Refused for another ref, or not refused: nothing to rename.
        assert!(!branch_taken(&rejected(&["refs/agent/runs/x"]), own, own));
        assert!(!branch_taken(&Ok(()), own, own));
    }

    #[test]
    fn remote_user_info_is_not_audited() {
        assert_eq!(
            redact_remote("https://x-access-token:ghs_abc@github.com/o/r.git"),
            "https://github.com/o/r.git"
        );
        assert_eq!(redact_remote("/tmp/remote.git"), "/tmp/remote.git");
    }
}
