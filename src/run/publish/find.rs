//! Finding the run a request belongs to: in the local run records, else through the key
//! marker of the forge's progress comments (its record fetched from the remote); and
//! resolving a triggered outcome into a request ready to publish.

use std::time::Duration;

use super::super::error::{Error, Result};
use super::super::record::RunRecord;
use super::super::state::RunState;
use super::{Existing, PublishRequest, conversation, forge_err};
use crate::forge::{CommentTarget, Forge, progress_run_id};
use crate::model::ResumeState;
use crate::task::{RepoRef, Task};
use crate::trigger::Directive;
use crate::workspace::{PushCredentials, Repo};
use sha2::{Digest as _, Sha256};

/// The hidden marker carrying a request's key in its progress comment: a hash, so no text
/// of the key can close the HTML comment.
pub fn key_marker(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    format!("<!-- git-agent:key sha256={} -->", hex::encode(digest))
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
    From(Option<&'a PushCredentials>),
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
/// the services can be built with its models and spend and [`super::publish_prepared`] need not
/// look again.
#[derive(Debug)]
pub struct Prepared {
    /// The request.
    pub req: PublishRequest,
    /// The earlier run of the same request, found while resolving.
    pub(super) existing: Option<Existing>,
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
pub async fn resolve(l: &Lookup<'_>, outcome: Directive) -> Result<Resolved> {
    let ignored = |reason: String| Ok(Resolved::Ignored(reason));
    let prepared = |req, existing| Ok(Resolved::Publish(Box::new(Prepared { req, existing })));
    match outcome {
        Directive::Ignored { reason } => ignored(reason),
        Directive::Stop(control) => ignored(format!(
            "/agent stop on {}#{} stops a running job; there is nothing to publish",
            control.repo, control.number
        )),
        Directive::Run(t) => {
            fetch_for(l, &t.task)?;
            let existing = find_run(l.repo, l.forge, &t.task, l.remote).await?;
            prepared(PublishRequest::new(t.task, t.react_to, l.remote), existing)
        }
        Directive::Approve { control, run } => {
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
        Directive::Retry(control) => {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
