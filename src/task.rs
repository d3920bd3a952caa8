//! The `Task`: what every front door (CLI, Action, webhook bot) hands to the run.
//!
//! A task is plain data: the goal as a person wrote it, where the request came from, which
//! repository and base it is about, who asked, and what kind of run it is. It knows nothing
//! about how a run works; triggers build it, the run consumes it.

use serde::{Deserialize, Serialize};

/// What the run should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Plan, edit, verify, commit, open a pull request.
    #[default]
    Fix,
    /// Stop after the plan; read-only.
    Plan,
}

/// Where the request came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// A person at a terminal.
    Cli,
    /// A labeled issue or an `/agent` comment on an issue.
    Issue {
        /// Issue number.
        number: u64,
        /// The triggering comment, if a comment triggered it.
        comment_id: Option<u64>,
    },
    /// An `/agent` comment on a pull request (the run continues that PR's branch).
    PullRequest {
        /// Pull request number.
        number: u64,
        /// The triggering comment.
        comment_id: Option<u64>,
    },
    /// A failed CI run on a pull request branch.
    CiFailure {
        /// Pull request number.
        number: u64,
        /// The workflow run that failed.
        workflow_run_id: u64,
    },
}

/// A GitHub repository by owner and name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoRef {
    /// Owner (user or organization).
    pub owner: String,
    /// Repository name.
    pub name: String,
}

impl std::fmt::Display for RepoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// The human on whose behalf the run works (credited with `Co-authored-by`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Person {
    /// Login or local user name.
    pub login: String,
    /// Display name, when known.
    pub name: Option<String>,
    /// Email, when known (for GitHub users, the noreply address).
    pub email: Option<String>,
}

impl Person {
    /// The `Co-authored-by` trailer value, when an email is known.
    pub fn co_author(&self) -> Option<String> {
        let email = self.email.as_deref()?;
        let name = self.name.as_deref().unwrap_or(&self.login);
        Some(format!("{name} <{email}>"))
    }
}

/// One unit of work for the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The request as written (issue title and body, comment text, CI log excerpt, or the
    /// CLI goal). Untrusted: hidden text is stripped before it reaches a prompt, and the
    /// raw text is kept in the audit log.
    pub goal: String,
    /// Read-only planning or a full fix.
    pub mode: Mode,
    /// Where the request came from.
    pub origin: Origin,
    /// The GitHub repository, when the task is about one.
    pub repo: Option<RepoRef>,
    /// The base ref to branch from (e.g. `main`, `origin/main`).
    pub base: String,
    /// An existing branch to continue (a PR's head), instead of a new `agent/…` branch.
    pub branch: Option<String>,
    /// Who asked.
    pub requested_by: Option<Person>,
    /// Stable key of the request, so a redelivered event maps to the same run and side
    /// effects (branch, PR, progress comment) happen once, e.g. `owner/repo#42:fix`.
    pub key: String,
}
