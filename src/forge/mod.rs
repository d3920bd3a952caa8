//! Forges: where issues, pull requests and comments live (GitHub, or files on disk).
//!
//! This module owns the [`Forge`] trait and the forge-neutral types in its signatures, plus the
//! GitHub implementation ([`github::GitHub`], on octocrab and the REST API) and the local one
//! ([`local::LocalForge`], files on disk). Every type here is
//! our own: octocrab's and GitHub's JSON shapes stay inside `github.rs`.
//!
//! It must not decide anything: who may trigger a run is `trigger`'s business, what a PR body
//! says is the report's. A forge fetches, publishes and pushes what it is handed, idempotently:
//! opening a PR twice updates the first, a progress comment is created once per run and edited
//! in place after that.

mod error;
pub mod github;
pub mod local;

use crate::audit::Redacted;
use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use error::{Error, Result};

use crate::task::RepoRef;
use crate::workspace::Repo;

/// A user's permission on a repository, highest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Permission {
    /// No access.
    None,
    /// Read.
    Read,
    /// Triage (read, manage issues).
    Triage,
    /// Write (push).
    Write,
    /// Maintain.
    Maintain,
    /// Admin.
    Admin,
}

impl Permission {
    /// The permission's name as GitHub spells it (`admin`, `maintain`, `write`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::None => "none",
            Permission::Read => "read",
            Permission::Triage => "triage",
            Permission::Write => "write",
            Permission::Maintain => "maintain",
            Permission::Admin => "admin",
        }
    }

    /// Parse GitHub's spelling; `pull` and `push` are the legacy names of read and write.
    pub fn parse(s: &str) -> Option<Permission> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "none" => Permission::None,
            "read" | "pull" => Permission::Read,
            "triage" => Permission::Triage,
            "write" | "push" => Permission::Write,
            "maintain" => Permission::Maintain,
            "admin" => Permission::Admin,
            _ => return None,
        })
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An account on the forge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    /// Login (`octocat`, `dependabot[bot]`).
    pub login: String,
    /// Numeric id, used for the noreply email.
    pub id: u64,
    /// Whether the account is a bot (an App or a machine user typed `Bot`).
    pub is_bot: bool,
}

/// One comment on an issue or pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comment {
    /// Comment id.
    pub id: u64,
    /// Who wrote it.
    pub author: User,
    /// The text, raw (untrusted).
    pub body: String,
}

/// An issue (or the issue side of a pull request) with its conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    /// Issue number.
    pub number: u64,
    /// Title.
    pub title: String,
    /// Body, raw (untrusted); empty when there is none.
    pub body: String,
    /// Who opened it.
    pub author: User,
    /// Label names.
    pub labels: Vec<String>,
    /// `open` or `closed`.
    pub state: String,
    /// Whether this issue is a pull request.
    pub is_pull_request: bool,
    /// Its comments, oldest first.
    pub comments: Vec<Comment>,
}

impl Issue {
    /// The issue as a task's text: `Issue #N: title`, the body, then the `kept` comments
    /// (`@login wrote:`) and how many were `left_out`. Every front door words a task the same
    /// way, so a branch slug or a scripted replay does not depend on which one it came from.
    pub fn task_text<'a>(
        &self,
        kept: impl IntoIterator<Item = &'a Comment>,
        left_out: usize,
    ) -> String {
        let kind = if self.is_pull_request {
            "Pull request"
        } else {
            "Issue"
        };
        let mut text = format!("{kind} #{}: {}\n\n{}\n", self.number, self.title, self.body);
        let kept: Vec<String> = kept
            .into_iter()
            .map(|c| format!("@{} wrote:\n{}\n", c.author.login, c.body.trim()))
            .collect();
        if !kept.is_empty() {
            text.push_str("\nComments:\n\n");
            text.push_str(&kept.join("\n"));
        }
        if left_out > 0 {
            text.push_str(&format!(
                "\n({left_out} comment(s) by people without permission to trigger the agent left out.)\n"
            ));
        }
        text
    }
}

/// A pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullRequest {
    /// PR number.
    pub number: u64,
    /// Title.
    pub title: String,
    /// Body, raw (untrusted).
    pub body: String,
    /// Who opened it.
    pub author: User,
    /// `open` or `closed`.
    pub state: String,
    /// Whether it is a draft.
    pub draft: bool,
    /// The branch it merges from.
    pub head_ref: String,
    /// The commit at its head.
    pub head_sha: String,
    /// `owner/name` of the repository the head branch lives in (differs for forks).
    pub head_repo: Option<String>,
    /// The branch it merges into.
    pub base_ref: String,
    /// Web address.
    pub html_url: String,
}

/// What to open (or update) as a draft pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrRequest {
    /// Title, redacted (it comes from the request's text).
    pub title: Redacted,
    /// Body (the run's report), redacted: a forge takes no other text.
    pub body: Redacted,
    /// The run branch.
    pub head: String,
    /// The branch to merge into.
    pub base: String,
}

/// A comment the forge wrote, as a reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommentRef {
    /// Comment id.
    pub id: u64,
    /// Web address.
    pub html_url: String,
}

/// What a reaction is put on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "snake_case")]
pub enum CommentTarget {
    /// A comment in an issue's or PR's conversation.
    IssueComment(u64),
    /// A review comment on a PR's diff.
    ReviewComment(u64),
}

/// A CI job that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedJob {
    /// Job id (for its log).
    pub id: u64,
    /// Job name.
    pub name: String,
    /// The job's conclusion (`failure`, `timed_out`, `cancelled`).
    pub conclusion: String,
    /// Names of the steps that failed.
    pub failed_steps: Vec<String>,
}

/// A workflow run, in brief.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRun {
    /// Run id.
    pub id: u64,
    /// Workflow name.
    pub name: String,
    /// The commit it ran on.
    pub head_sha: String,
    /// `success`, `failure`, … (none while running).
    pub conclusion: Option<String>,
}

/// The hidden marker that identifies a run's progress comment, so the comment is found and
/// edited again instead of posting a second one.
pub fn progress_marker(run_id: &str) -> String {
    format!("<!-- git-agent:progress run={run_id} -->")
}

/// The run id in a progress comment's marker, if the text carries one.
pub fn progress_run_id(body: &str) -> Option<&str> {
    let rest = &body[body.find("<!-- git-agent:progress run=")? + 28..];
    let id = &rest[..rest.find(" -->")?];
    (!id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
    .then_some(id)
}

/// Fetch a run record's ref off the async threads (git runs as a process).
pub(crate) async fn fetch_record(
    local: Repo,
    remote: &str,
    run_id: &str,
    creds: Option<crate::workspace::PushCredentials>,
) -> Result<()> {
    let (remote_owned, id) = (remote.to_string(), run_id.to_string());
    tokio::task::spawn_blocking(move || local.fetch_run_record(&remote_owned, &id, creds.as_ref()))
        .await?
        .map_err(|source| Error::Fetch {
            what: format!("run record {run_id} from {remote}"),
            source: Box::new(source),
        })
}

/// A place where issues, pull requests and comments live.
///
/// Object-safe: the run and the triggers hold it as `Arc<dyn Forge>`. Every write is
/// idempotent, so a run that is killed and resumed makes one branch, one PR and one comment.
#[async_trait]
pub trait Forge: Send + Sync {
    /// An issue (or a PR's conversation) with all its comments.
    async fn issue(&self, repo: &RepoRef, number: u64) -> Result<Issue>;

    /// A pull request.
    async fn pull_request(&self, repo: &RepoRef, number: u64) -> Result<PullRequest>;

    /// The open pull request whose head is `branch` in `repo` itself, if any.
    async fn pull_request_for_branch(
        &self,
        repo: &RepoRef,
        branch: &str,
    ) -> Result<Option<PullRequest>>;

    /// Push full refs (`refs/heads/agent/…`, `refs/agent/runs/…`) from `local` to `remote`
    /// through the workspace's hardened push, with the forge's credentials. `local` is taken
    /// by value (a cheap clone): a `Repo` may not be shared across threads.
    async fn push(
        &self,
        local: Repo,
        remote: &str,
        refs: &[String],
        branch_prefix: &str,
    ) -> Result<()>;

    /// Fetch `refs/agent/runs/<run_id>` from `remote` into `local`, with the forge's
    /// credentials, so a run started by another process (an earlier Actions job) can be
    /// resumed or republished. The default fetches without credentials (a local path, a
    /// public remote).
    async fn fetch_run_record(&self, local: Repo, remote: &str, run_id: &str) -> Result<()> {
        fetch_record(local, remote, run_id, None).await
    }

    /// Open a draft PR for `req.head`, or update the open PR that already has that head.
    async fn open_draft_pr(&self, repo: &RepoRef, req: &PrRequest) -> Result<PullRequest>;

    /// Create the run's progress comment on issue or PR `number`, or edit it in place when it
    /// exists (found by [`progress_marker`]). `body` should not carry the marker; it is added.
    async fn upsert_progress(
        &self,
        repo: &RepoRef,
        number: u64,
        run_id: &str,
        body: &Redacted,
    ) -> Result<CommentRef>;

    /// Put 👀 on the comment that triggered a run. Reacting twice is not an error.
    async fn react_eyes(&self, repo: &RepoRef, target: CommentTarget) -> Result<()>;

    /// `login`'s permission on `repo`, asked of the forge (never read from a payload).
    async fn permission(&self, repo: &RepoRef, login: &str) -> Result<Permission>;

    /// The failed jobs of a workflow run.
    async fn failed_jobs(&self, repo: &RepoRef, workflow_run_id: u64) -> Result<Vec<FailedJob>>;

    /// The failed workflow runs on `branch` (newest first, at most 100).
    async fn failed_workflow_runs(&self, repo: &RepoRef, branch: &str) -> Result<Vec<WorkflowRun>>;

    /// The plain-text log of one job.
    async fn job_log(&self, repo: &RepoRef, job_id: u64) -> Result<String>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_marker_round_trips() {
        let body = format!("{}\nstate: editing", progress_marker("01JD9X"));
        assert_eq!(progress_run_id(&body), Some("01JD9X"));
        assert_eq!(progress_run_id("no marker"), None);
        assert_eq!(progress_run_id("<!-- git-agent:progress run=a b -->"), None);
    }

    #[test]
    fn permissions_order_and_legacy_names() {
        assert!(Permission::Maintain > Permission::Write);
        assert!(Permission::Triage < Permission::Write);
        assert_eq!(Permission::parse("push"), Some(Permission::Write));
        assert_eq!(Permission::parse("pull"), Some(Permission::Read));
        assert_eq!(Permission::parse("owner"), None);
    }
}
