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
use sha2::{Digest as _, Sha256};
use tokio_util::sync::CancellationToken;

use super::engine::{self, Services, StartOptions};
use super::error::{Error, Result};
use super::record::{PrRef, RunRecord, files, first_line};
use super::state::RunState;
use crate::audit::chain::{Appender, Kind};
use crate::failpoint::failpoint;
use crate::forge::{CommentTarget, Forge, PrRequest, progress_run_id};
use crate::model::ResumeState;
use crate::task::{Mode, Origin, RepoRef, Task};
use crate::tools::StepStatus;
use crate::trigger::Outcome;
use crate::workspace::{Credentials as GitCredentials, Repo, run_ref};

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

/// The hidden marker carrying a request's key in its progress comment: a hash, so no text
/// of the key can close the HTML comment.
pub fn key_marker(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    format!("<!-- git-agent:key sha256={} -->", hex::encode(digest))
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

/// The newest local run record whose task has `key`.
fn local_run(repo: &Repo, key: &str) -> Option<RunRecord> {
    let runs = repo.agent_dir().join("runs");
    let entries = std::fs::read_dir(&runs).ok()?;
    entries
        .flatten()
        .filter_map(|e| RunRecord::load(&e.path()).ok())
        .filter(|r| r.task.key == key)
        .max_by(|a, b| a.created_at.cmp(&b.created_at))
}

/// The run id a progress comment announces, if it is one we could have made (a ULID): an id
/// from a comment is never used as a path or branch name unchecked.
fn announced_id(body: &str) -> Option<String> {
    let id = progress_run_id(body)?;
    ulid::Ulid::from_string(id).ok().map(|u| u.to_string())
}

/// Find an earlier run of the same request (same non-empty [`Task::key`]).
///
/// Looks at the local run records first (a worker on the same machine), then at the bot
/// comments of the task's conversation for a progress comment carrying the key's marker
/// (an earlier Actions job on another runner); that run's record is fetched from `remote`
/// and restored locally. Comments by people are never believed: anyone can paste a marker.
pub async fn find_run(
    repo: &Repo,
    forge: &dyn Forge,
    task: &Task,
    remote: &str,
) -> Result<Option<Existing>> {
    if task.key.is_empty() {
        return Ok(None);
    }
    if let Some(rec) = local_run(repo, &task.key) {
        return Ok(Some(Existing {
            run_id: rec.run_id.clone(),
            record: Some(rec),
        }));
    }
    let Some((repo_ref, number)) = conversation(task) else {
        return Ok(None);
    };
    let issue = forge
        .issue(&repo_ref, number)
        .await
        .map_err(forge_err(format!("reading {repo_ref}#{number}")))?;
    let marker = key_marker(&task.key);
    let Some(run_id) = issue
        .comments
        .iter()
        .rev()
        .filter(|c| c.author.is_bot && c.body.contains(&marker))
        .find_map(|c| announced_id(&c.body))
    else {
        return Ok(None);
    };
    let record = match forge.fetch_run_record(repo.clone(), remote, &run_id).await {
        Ok(()) => {
            let dir = repo.restore_run_record(&run_id)?;
            match RunRecord::load(&dir) {
                Ok(rec) if rec.task.key == task.key => Some(rec),
                Ok(_) => {
                    tracing::warn!(run = %run_id, "the fetched run record is of another request; starting afresh");
                    return Ok(None);
                }
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "the fetched run record is unreadable; starting again under its id");
                    None
                }
            }
        }
        Err(e) => {
            // Announced but never pushed: the process died early. Start again under the id.
            tracing::info!(run = %run_id, error = %e, "no run record on the remote; starting again under the announced id");
            None
        }
    };
    Ok(Some(Existing { run_id, record }))
}

/// The record of the newest run announced in the conversation `number` by a bot progress
/// comment, or of the run `run_id` when given (which must belong to that conversation); read
/// locally, else fetched from `remote`. For `/agent approve [RUN]`.
pub async fn run_in_conversation(
    repo: &Repo,
    forge: &dyn Forge,
    repo_ref: &RepoRef,
    number: u64,
    run_id: Option<&str>,
    remote: &str,
) -> Result<Option<RunRecord>> {
    let issue = forge
        .issue(repo_ref, number)
        .await
        .map_err(forge_err(format!("reading {repo_ref}#{number}")))?;
    let announced: Vec<String> = issue
        .comments
        .iter()
        .rev()
        .filter(|c| c.author.is_bot)
        .filter_map(|c| announced_id(&c.body))
        .collect();
    let Some(id) = (match run_id {
        Some(want) => announced.into_iter().find(|id| id == want),
        None => announced.into_iter().next(),
    }) else {
        return Ok(None);
    };
    let dir = repo.run_dir(&id);
    if let Ok(rec) = RunRecord::load(&dir) {
        return Ok(Some(rec));
    }
    forge
        .fetch_run_record(repo.clone(), remote, &id)
        .await
        .map_err(forge_err(format!("fetching the record of run {id}")))?;
    let dir = repo.restore_run_record(&id)?;
    let rec = RunRecord::load(&dir).map_err(|e| Error::io("cannot read the record in", &dir, e))?;
    Ok(Some(rec))
}

/// How the repository a request is resolved in gets the branches it names.
#[derive(Clone, Copy)]
pub enum Fetch<'a> {
    /// They are there already (an Actions checkout holds the base and the PR branch).
    Present,
    /// Fetch the task's base branch (and the PR branch it continues, as `origin/<branch>`)
    /// from the remote first, with these credentials (the bot's bare mirror).
    From(Option<&'a GitCredentials>),
}

/// Where a triggered request is resolved: the repository, its forge and remote.
#[derive(Clone, Copy)]
pub struct Lookup<'a> {
    /// The clone or mirror the run works in.
    pub repo: &'a Repo,
    /// The forge holding the conversation.
    pub forge: &'a dyn Forge,
    /// The remote branches and run records are fetched from and pushed to.
    pub remote: &'a str,
    /// Whether to fetch the task's branches first.
    pub fetch: Fetch<'a>,
}

/// What a triggered request comes to, once the run it names or continues is found.
#[derive(Debug)]
pub enum Resolved {
    /// Nothing to publish (an approval with no run awaiting one, a retry of a run that has
    /// not ended, `/agent stop`, an ignored event), and why.
    Ignored(String),
    /// A request to publish.
    Publish(Box<Prepared>),
}

/// A [`PublishRequest`] with the earlier run of the same request already looked for, so that
/// the services can be built with its models and spend and [`publish_prepared`] need not
/// look again.
#[derive(Debug)]
pub struct Prepared {
    /// The request.
    pub req: PublishRequest,
    existing: Option<Existing>,
}

impl Prepared {
    /// The record of the run this request continues, if any.
    pub fn record(&self) -> Option<&RunRecord> {
        self.existing.as_ref().and_then(|e| e.record.as_ref())
    }

    /// The models to run with: `flags` when given, else those the continued run used.
    pub fn models(&self, flags: Vec<String>) -> Vec<String> {
        match self.record() {
            Some(r) if flags.is_empty() => r.model_flags.clone(),
            _ => flags,
        }
    }

    /// What the router needs to continue the earlier run, if there is one.
    pub fn resume_state(&self) -> Option<ResumeState> {
        self.record().map(resume_state)
    }
}

/// Bring the task's base branch (and the PR branch it continues, as `origin/<branch>`) from
/// the remote when `fetch` says so.
fn fetch_for(l: &Lookup<'_>, task: &Task) -> Result<()> {
    let Fetch::From(creds) = l.fetch else {
        return Ok(());
    };
    let base = task
        .base
        .trim_start_matches("refs/heads/")
        .trim_start_matches("origin/");
    let failed = |what: String| {
        move |source| Error::Fetch {
            what,
            source: Box::new(source),
        }
    };
    l.repo
        .fetch_branch(l.remote, base, creds)
        .map_err(failed(format!("cannot fetch {base} from {}", l.remote)))?;
    if let Some(branch) = &task.branch {
        l.repo
            .fetch_branch_as(
                l.remote,
                branch,
                &format!("refs/remotes/origin/{branch}"),
                creds,
            )
            .map_err(failed(format!("cannot fetch {branch} from {}", l.remote)))?;
    }
    Ok(())
}

/// Resolve what the trigger decided into a request to publish: the one place where a run,
/// `/agent approve [RUN]` and `/agent retry` find the run they start, continue or repeat,
/// for the Action and the bot alike. The earlier run of the request is looked for once.
pub async fn resolve(l: &Lookup<'_>, outcome: Outcome) -> Result<Resolved> {
    let ignored = |reason: String| Ok(Resolved::Ignored(reason));
    let prepared = |req, existing| Ok(Resolved::Publish(Box::new(Prepared { req, existing })));
    match outcome {
        Outcome::Ignored { reason } => ignored(reason),
        Outcome::Stop(control) => ignored(format!(
            "/agent stop on {}#{} stops a running job; there is nothing to publish",
            control.repo, control.number
        )),
        Outcome::Run(t) => {
            fetch_for(l, &t.task)?;
            let existing = find_run(l.repo, l.forge, &t.task, l.remote).await?;
            prepared(PublishRequest::new(t.task, t.react_to, l.remote), existing)
        }
        Outcome::Approve { control, run } => {
            let found = run_in_conversation(
                l.repo,
                l.forge,
                &control.repo,
                control.number,
                run.as_deref(),
                l.remote,
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
            fetch_for(l, &record.task)?;
            let mut req = PublishRequest::new(record.task.clone(), Some(control.comment), l.remote);
            req.approve = Some(control.requested_by.login.clone());
            let existing = Existing {
                run_id: record.run_id.clone(),
                record: Some(record),
            };
            prepared(req, Some(existing))
        }
        Outcome::Retry(control) => {
            let found = run_in_conversation(
                l.repo,
                l.forge,
                &control.repo,
                control.number,
                None,
                l.remote,
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
            fetch_for(l, &task)?;
            let existing = find_run(l.repo, l.forge, &task, l.remote).await?;
            let mut req = PublishRequest::new(task, Some(control.comment), l.remote);
            if last.task.branch.is_none() {
                req.start.branch = Some(format!("{}-retry-{comment_id}", last.branch));
            }
            prepared(req, existing)
        }
    }
}

/// What a router needs to continue `rec`: its spend, time and the roles already called (a
/// scripted model skips the replies those calls consumed).
pub fn resume_state(rec: &RunRecord) -> ResumeState {
    ResumeState {
        spent: rec.budget_spent.unwrap_or_default(),
        elapsed: Duration::from_millis(rec.elapsed_ms),
        roles: rec.roles_called.clone(),
        usage: rec.model_usage.clone(),
    }
}

/// What the progress comment shows.
struct ProgressView<'a> {
    run_id: &'a str,
    key: &'a str,
    record: Option<&'a RunRecord>,
    budget_usd: f64,
    pr_url: Option<&'a str>,
    /// The full report, shown folded when there is no PR to hold it (plan-only runs).
    report: Option<&'a str>,
    error: Option<&'a str>,
}

fn state_line(state: RunState) -> &'static str {
    match state {
        RunState::Queued => "⏳ queued",
        RunState::Analyzing => "🔎 analyzing the repository",
        RunState::Planning => "🗺️ planning",
        RunState::Editing => "✏️ editing",
        RunState::Testing => "🧪 testing",
        RunState::Fixing => "🔧 fixing failing tests",
        RunState::AwaitingApproval => "✋ awaiting approval",
        RunState::Succeeded => "✅ succeeded",
        RunState::Failed => "❌ failed",
        RunState::Cancelled => "⏹️ cancelled",
        RunState::BudgetExhausted => "💸 budget exhausted",
        RunState::EnvironmentFailed => "🧰 the tests could not run",
    }
}

/// The progress comment's text (the forge adds its run marker).
fn progress_body(v: &ProgressView<'_>) -> String {
    let state = v.record.map_or(RunState::Queued, |r| r.state);
    let mut out = format!(
        "{}\n**git-agent** run `{}` — {}\n",
        key_marker(v.key),
        v.run_id,
        state_line(state)
    );
    if let Some(rec) = v.record {
        if let Some(plan) = &rec.plan {
            out.push_str("\n**Plan**\n");
            for (i, s) in plan.steps.iter().enumerate() {
                let mark = match s.status {
                    StepStatus::Done => "[x]",
                    StepStatus::Skipped => "[~]",
                    StepStatus::Pending | StepStatus::InProgress => "[ ]",
                };
                out.push_str(&format!("- {mark} {}. {}\n", i + 1, s.title.trim()));
            }
        }
        let (usd, unknown) = rec.spend();
        out.push_str(&format!(
            "\nSpend: ${usd:.2}{} of ${:.2} · {} model call(s) · branch `{}`\n",
            if unknown { " + unpriced" } else { "" },
            v.budget_usd,
            rec.turns,
            rec.branch
        ));
        if let Some(last) = rec.verification.last() {
            out.push_str(&format!("Tests ({}): {}\n", last.when, last.result));
        }
        if state.is_terminal() || state == RunState::AwaitingApproval {
            for n in &rec.notes {
                out.push_str(&format!("\n> {}\n", n.replace('\n', "\n> ")));
            }
        }
    }
    if state == RunState::AwaitingApproval {
        out.push_str("\nReply `/agent approve` to let the run continue.\n");
    }
    if let Some(url) = v.pr_url {
        out.push_str(&format!("\nDraft pull request: {url}\n"));
    }
    if let Some(e) = v.error {
        out.push_str(&format!("\nThe run stopped on an error: `{e}`\n"));
    }
    if let Some(report) = v.report {
        out.push_str(&format!(
            "\n<details><summary>Report</summary>\n\n{report}\n\n</details>\n"
        ));
    }
    out
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
    let audit = open_audit(svc, &dir, &run_id)?;
    push_branch_and_record(svc, forge, &remote, &mut rec, &dir, &audit).await?;
    failpoint("after-push");
    let pr_wanted = wants_pr(!rec.commits.is_empty(), rec.task.mode, rec.state);
    let pr_url = match (pr_wanted, task.repo.as_ref()) {
        (true, Some(repo_ref)) => {
            Some(open_pr(svc, forge, repo_ref, &mut rec, &pr_base, &report, &audit).await?)
        }
        _ => None,
    };
    failpoint("after-pr");
    seal_record(svc, forge, &remote, &mut rec, &dir, &audit).await?;
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

/// The run's one progress comment in its conversation, written over as the run goes.
struct Progress<'a> {
    svc: &'a Services,
    forge: &'a dyn Forge,
    convo: Option<(RepoRef, u64)>,
    run_id: &'a str,
    key: String,
}

impl Progress<'_> {
    /// Write the comment (a courtesy: a forge failure is logged); its URL when written.
    async fn show(
        &self,
        record: Option<RunRecord>,
        pr_url: Option<String>,
        report: Option<String>,
        error: Option<String>,
    ) -> Option<String> {
        let (repo_ref, number) = self.convo.as_ref()?;
        let body = progress_body(&ProgressView {
            run_id: self.run_id,
            key: &self.key,
            record: record.as_ref(),
            budget_usd: self.svc.config.settings.budget.max_usd,
            pr_url: pr_url.as_deref(),
            report: report.as_deref(),
            error: error.as_deref(),
        });
        let body = self.svc.redactor.clean(&body);
        match self
            .forge
            .upsert_progress(repo_ref, *number, self.run_id, &body)
            .await
        {
            Ok(c) => Some(c.html_url),
            Err(e) => {
                tracing::warn!(error = %e, "cannot write the progress comment");
                None
            }
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

/// Push the run's branch (when it made commits) and its record's ref, atomically. A branch
/// name the run made for itself that is taken on the remote (another run for the same
/// issue, from another front door) is published under a name of its own; nothing of the
/// refused attempt is on the remote. A branch the run was asked to continue is never renamed.
async fn push_branch_and_record(
    svc: &Services,
    forge: &dyn Forge,
    remote: &str,
    rec: &mut RunRecord,
    dir: &std::path::Path,
    audit: &Appender,
) -> Result<()> {
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

/// Open the draft PR of the pushed branch into `pr_base`, with the report as its body; its
/// URL.
async fn open_pr(
    svc: &Services,
    forge: &dyn Forge,
    repo_ref: &RepoRef,
    rec: &mut RunRecord,
    pr_base: &str,
    report: &str,
    audit: &Appender,
) -> Result<String> {
    let title = format!("agent: {}", first_line(&rec.task.goal, 72));
    let pr = forge
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
    audit.append(
        Kind::Forge,
        json!({"pull_request": pr.number, "url": pr.html_url, "head": pr.head_ref, "base": pr.base_ref}),
    )?;
    rec.pr = Some(PrRef::Url(pr.html_url.clone()));
    Ok(pr.html_url)
}

/// Seal the record with the audit log's head, save it, mirror it to its ref and push that.
async fn seal_record(
    svc: &Services,
    forge: &dyn Forge,
    remote: &str,
    rec: &mut RunRecord,
    dir: &std::path::Path,
    audit: &Appender,
) -> Result<()> {
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
    fn key_marker_is_stable_and_hides_the_key() {
        let m = key_marker("octocat/Hello-World#42:fix");
        assert_eq!(m, key_marker("octocat/Hello-World#42:fix"));
        assert_ne!(m, key_marker("octocat/Hello-World#43:fix"));
        assert!(!m.contains("Hello-World"));
        // A key that tries to close the comment cannot.
        assert_eq!(key_marker("x --> y").matches("-->").count(), 1);
    }

    #[test]
    fn only_ulids_are_taken_from_comments() {
        let id = ulid::Ulid::generate().to_string();
        let body = format!("{}\nx", crate::forge::progress_marker(&id));
        assert_eq!(announced_id(&body), Some(id));
        let body = format!("{}\nx", crate::forge::progress_marker("main"));
        assert_eq!(announced_id(&body), None);
    }

    #[test]
    fn remote_user_info_is_not_audited() {
        assert_eq!(
            redact_remote("https://x-access-token:ghs_abc@github.com/o/r.git"),
            "https://github.com/o/r.git"
        );
        assert_eq!(redact_remote("/tmp/remote.git"), "/tmp/remote.git");
    }

    #[test]
    fn queued_progress_names_the_run_and_carries_the_key() {
        let body = progress_body(&ProgressView {
            run_id: "01JD",
            key: "o/r#1:fix",
            record: None,
            budget_usd: 5.0,
            pr_url: None,
            report: None,
            error: None,
        });
        assert!(body.contains("run `01JD` — ⏳ queued"), "{body}");
        assert!(body.contains(&key_marker("o/r#1:fix")));
    }
}
