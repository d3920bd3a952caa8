//! The local forge: issues, pull requests and comments as files on disk (`--forge local`).
//!
//! - **Issues** are read from a directory: `<n>.json` (the [`Issue`] shape, comments
//!   included) or `<n>.md` (the first line is the title, a leading `# ` dropped; the rest is
//!   the body).
//! - **Pull requests** are the run's report written as `pr.md` in the record directory of the
//!   run whose branch is the PR's head (`<git-common-dir>/agent/runs/<id>/pr.md`), with an
//!   index in the forge's state directory so a second open updates the same PR.
//! - **Progress comments** and **reactions** are kept in the state directory
//!   (`<git-common-dir>/agent/forge/` by default), edited in place like on GitHub.
//! - **Permissions** come from configuration (a map of logins, and a default).
//! - **Pushes** go through the workspace's hardened push, without credentials.
//!
//! There is no CI here: no failed jobs, no workflow runs, no job logs.

use crate::audit::Redacted;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{
    Comment, CommentRef, CommentTarget, Error, FailedJob, Forge, Issue, Permission, PrRequest,
    PullRequest, Result, User, WorkflowRun, progress_marker,
};
use crate::task::RepoRef;
use crate::workspace::Repo;

/// Who may do what on the local forge; plain data, from configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalOptions {
    /// Where issues are read from (`<n>.json` or `<n>.md`); none when `None`.
    pub issues_dir: Option<PathBuf>,
    /// Permission by login.
    pub permissions: BTreeMap<String, Permission>,
    /// Permission of everyone else (a local user owns their repository: `admin`).
    pub default_permission: Permission,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            issues_dir: None,
            permissions: BTreeMap::new(),
            default_permission: Permission::Admin,
        }
    }
}

/// A pull request as the local forge keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct LocalPull {
    number: u64,
    title: String,
    head: String,
    base: String,
    /// The `pr.md` holding the body.
    path: PathBuf,
}

/// The forge's own state: pull requests, comments, reactions.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    pulls: Vec<LocalPull>,
    /// Comments written by the forge, by issue number.
    comments: BTreeMap<u64, Vec<Comment>>,
    /// Reactions put on comments: (`issue_comment` | `review_comment`, id, content).
    reactions: Vec<(String, u64, String)>,
    next_id: u64,
}

/// The local forge. See the module documentation for where each thing lives.
#[derive(Debug)]
pub struct LocalForge {
    state_dir: PathBuf,
    runs_dir: PathBuf,
    options: LocalOptions,
    /// Serializes read-modify-write of the state file within this process.
    lock: Mutex<()>,
}

/// The forge's own account: progress comments are its.
fn bot() -> User {
    User {
        login: "git-agent[bot]".into(),
        id: 0,
        is_bot: true,
    }
}

/// What the local forge lacks.
fn local(what: impl Into<String>) -> Error {
    Error::Local {
        what: what.into(),
        source: None,
    }
}

/// A file the local forge could not read or write.
fn local_io(what: impl Into<String>, source: std::io::Error) -> Error {
    Error::Local {
        what: what.into(),
        source: Some(source),
    }
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes =
        std::fs::read(path).map_err(|e| local_io(format!("cannot read {}", path.display()), e))?;
    serde_json::from_slice(&bytes).map_err(|source| Error::Decode {
        what: path.display().to_string(),
        source,
    })
}

/// Write `bytes` to `path` atomically (temp file in the same directory, then rename).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::fsutil::write_atomic(path, bytes, crate::fsutil::Durability::Durable)
        .map_err(|e| local_io(format!("cannot write {}", path.display()), e))
}

impl LocalForge {
    /// A local forge keeping its state in `state_dir` and finding run records in `runs_dir`.
    pub fn new(state_dir: PathBuf, runs_dir: PathBuf, options: LocalOptions) -> Self {
        LocalForge {
            state_dir,
            runs_dir,
            options,
            lock: Mutex::new(()),
        }
    }

    /// A local forge for `repo`: state in `<git-common-dir>/agent/forge/`, run records in
    /// `<git-common-dir>/agent/runs/`.
    pub fn for_repo(repo: &Repo, options: LocalOptions) -> Self {
        Self::new(
            repo.agent_dir().join("forge"),
            repo.agent_dir().join("runs"),
            options,
        )
    }

    fn state_path(&self) -> PathBuf {
        self.state_dir.join("state.json")
    }

    /// Read the state, let `f` change it, write it back.
    fn update<T>(&self, f: impl FnOnce(&mut State) -> Result<T>) -> Result<T> {
        let _held = self
            .lock
            .lock()
            .map_err(|_| local("the state lock is poisoned"))?;
        let path = self.state_path();
        let mut state: State = if path.exists() {
            read_json(&path)?
        } else {
            State {
                next_id: 1,
                ..State::default()
            }
        };
        let out = f(&mut state)?;
        let bytes = serde_json::to_vec_pretty(&state).map_err(|source| Error::Decode {
            what: "local forge state".into(),
            source,
        })?;
        write_atomic(&path, &bytes)?;
        Ok(out)
    }

    fn read_state(&self) -> Result<State> {
        let _held = self
            .lock
            .lock()
            .map_err(|_| local("the state lock is poisoned"))?;
        let path = self.state_path();
        if path.exists() {
            read_json(&path)
        } else {
            Ok(State::default())
        }
    }

    /// The record directory of the newest run whose branch is `branch`.
    fn run_dir_of(&self, branch: &str) -> Result<PathBuf> {
        #[derive(Deserialize)]
        struct RecordHead {
            branch: String,
            #[serde(default)]
            created_at: String,
        }
        let entries = std::fs::read_dir(&self.runs_dir)
            .map_err(|e| local_io(format!("cannot read {}", self.runs_dir.display()), e))?;
        entries
            .flatten()
            .filter_map(|e| {
                let head: RecordHead = read_json(&e.path().join("record.json")).ok()?;
                (head.branch == branch).then_some((head.created_at, e.path()))
            })
            .max()
            .map(|(_, dir)| dir)
            .ok_or_else(|| local(format!("no run record has the branch {branch}")))
    }

    fn pull(&self, p: &LocalPull) -> Result<PullRequest> {
        let body = std::fs::read_to_string(&p.path)
            .map_err(|e| local_io(format!("cannot read {}", p.path.display()), e))?;
        Ok(PullRequest {
            number: p.number,
            title: p.title.clone(),
            body,
            author: bot(),
            state: "open".into(),
            draft: true,
            head_ref: p.head.clone(),
            head_sha: String::new(),
            head_repo: None,
            base_ref: p.base.clone(),
            html_url: format!("file://{}", p.path.display()),
        })
    }

    fn read_issue(&self, number: u64) -> Result<Issue> {
        let Some(dir) = &self.options.issues_dir else {
            return Err(local("no issues directory is configured"));
        };
        let json = dir.join(format!("{number}.json"));
        let md = dir.join(format!("{number}.md"));
        if json.exists() {
            let mut issue: Issue = read_json(&json)?;
            issue.number = number;
            return Ok(issue);
        }
        let text = std::fs::read_to_string(&md)
            .map_err(|e| local_io(format!("no issue {number} in {}", dir.display()), e))?;
        let (title, body) = text.split_once('\n').unwrap_or((text.as_str(), ""));
        Ok(Issue {
            number,
            title: title.trim().trim_start_matches('#').trim().to_string(),
            body: body.trim_start_matches('\n').to_string(),
            author: User {
                login: std::env::var("USER").unwrap_or_else(|_| "local".into()),
                id: 0,
                is_bot: false,
            },
            labels: Vec::new(),
            state: "open".into(),
            is_pull_request: false,
            comments: Vec::new(),
        })
    }
}

#[async_trait]
impl Forge for LocalForge {
    async fn issue(&self, _repo: &RepoRef, number: u64) -> Result<Issue> {
        let mut issue = self.read_issue(number)?;
        let state = self.read_state()?;
        issue
            .comments
            .extend(state.comments.get(&number).cloned().unwrap_or_default());
        Ok(issue)
    }

    async fn pull_request(&self, _repo: &RepoRef, number: u64) -> Result<PullRequest> {
        let state = self.read_state()?;
        let p = state
            .pulls
            .iter()
            .find(|p| p.number == number)
            .ok_or_else(|| local(format!("no pull request {number}")))?;
        self.pull(p)
    }

    async fn pull_request_for_branch(
        &self,
        _repo: &RepoRef,
        branch: &str,
    ) -> Result<Option<PullRequest>> {
        let state = self.read_state()?;
        state
            .pulls
            .iter()
            .find(|p| p.head == branch)
            .map(|p| self.pull(p))
            .transpose()
    }

    async fn push(
        &self,
        local_repo: Repo,
        remote: &str,
        refs: &[String],
        branch_prefix: &str,
    ) -> Result<()> {
        let (remote_owned, refs, prefix) =
            (remote.to_string(), refs.to_vec(), branch_prefix.to_string());
        tokio::task::spawn_blocking(move || local_repo.push(&remote_owned, &refs, &prefix, None))
            .await?
            .map_err(|source| Error::Push {
                remote: remote.to_string(),
                source,
            })
    }

    async fn open_draft_pr(&self, _repo: &RepoRef, req: &PrRequest) -> Result<PullRequest> {
        let dir = self.run_dir_of(&req.head)?;
        let path = dir.join("pr.md");
        write_atomic(&path, req.body.as_str().as_bytes())?;
        let pull = self.update(|s| {
            if let Some(p) = s.pulls.iter_mut().find(|p| p.head == req.head) {
                p.title = req.title.to_string();
                p.path = path.clone();
                return Ok(p.clone());
            }
            let p = LocalPull {
                number: s.pulls.len() as u64 + 1,
                title: req.title.to_string(),
                head: req.head.clone(),
                base: req.base.clone(),
                path: path.clone(),
            };
            s.pulls.push(p.clone());
            Ok(p)
        })?;
        self.pull(&pull)
    }

    async fn upsert_progress(
        &self,
        _repo: &RepoRef,
        number: u64,
        run_id: &str,
        body: &Redacted,
    ) -> Result<CommentRef> {
        let marker = progress_marker(run_id);
        let text = format!("{marker}\n{body}");
        let url = |id: u64| format!("file://{}#comment-{id}", self.state_path().display());
        self.update(|s| {
            let list = s.comments.entry(number).or_default();
            if let Some(c) = list.iter_mut().rev().find(|c| c.body.contains(&marker)) {
                c.body = text.clone();
                return Ok(CommentRef {
                    id: c.id,
                    html_url: url(c.id),
                });
            }
            let id = s.next_id.max(1);
            s.next_id = id + 1;
            s.comments.entry(number).or_default().push(Comment {
                id,
                author: bot(),
                body: text.clone(),
            });
            Ok(CommentRef {
                id,
                html_url: url(id),
            })
        })
    }

    async fn react_eyes(&self, _repo: &RepoRef, target: CommentTarget) -> Result<()> {
        let (kind, id) = match target {
            CommentTarget::IssueComment(id) => ("issue_comment", id),
            CommentTarget::ReviewComment(id) => ("review_comment", id),
        };
        self.update(|s| {
            let r = (kind.to_string(), id, "eyes".to_string());
            if !s.reactions.contains(&r) {
                s.reactions.push(r);
            }
            Ok(())
        })
    }

    async fn permission(&self, _repo: &RepoRef, login: &str) -> Result<Permission> {
        Ok(self
            .options
            .permissions
            .get(login)
            .copied()
            .unwrap_or(self.options.default_permission))
    }

    async fn failed_jobs(&self, _repo: &RepoRef, _run: u64) -> Result<Vec<FailedJob>> {
        Ok(Vec::new())
    }

    async fn failed_workflow_runs(
        &self,
        _repo: &RepoRef,
        _branch: &str,
    ) -> Result<Vec<WorkflowRun>> {
        Ok(Vec::new())
    }

    async fn job_log(&self, _repo: &RepoRef, job_id: u64) -> Result<String> {
        Err(local(format!(
            "no CI on the local forge: no log for job {job_id}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_ref() -> RepoRef {
        RepoRef {
            owner: "me".into(),
            name: "proj".into(),
        }
    }

    fn forge(tmp: &Path) -> LocalForge {
        let issues = tmp.join("issues");
        std::fs::create_dir_all(&issues).unwrap();
        std::fs::write(
            issues.join("7.md"),
            "# Parser rejects week dates\n\n`2024-W01` fails.\n",
        )
        .unwrap();
        let json = serde_json::json!({
            "number": 0, "title": "From JSON", "body": "b",
            "author": {"login": "ada", "id": 1, "is_bot": false},
            "labels": ["agent"], "state": "open", "is_pull_request": false,
            "comments": [{"id": 9, "author": {"login": "bob", "id": 2, "is_bot": false}, "body": "+1"}]
        });
        std::fs::write(issues.join("8.json"), json.to_string()).unwrap();
        let run = tmp.join("runs/01RUN");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(
            run.join("record.json"),
            r#"{"branch": "agent/7-week-dates", "created_at": "2026-11-30T06:00:00Z"}"#,
        )
        .unwrap();
        let mut permissions = BTreeMap::new();
        permissions.insert("rea".to_string(), Permission::Read);
        LocalForge::new(
            tmp.join("forge"),
            tmp.join("runs"),
            LocalOptions {
                issues_dir: Some(issues),
                permissions,
                default_permission: Permission::Write,
            },
        )
    }

    #[tokio::test]
    async fn issues_come_from_markdown_and_json() {
        let tmp = tempfile::tempdir().unwrap();
        let f = forge(tmp.path());
        let md = f.issue(&repo_ref(), 7).await.unwrap();
        assert_eq!(md.title, "Parser rejects week dates");
        assert_eq!(md.body, "`2024-W01` fails.\n");
        let js = f.issue(&repo_ref(), 8).await.unwrap();
        assert_eq!((js.number, js.title.as_str()), (8, "From JSON"));
        assert_eq!(js.comments[0].body, "+1");
        assert!(f.issue(&repo_ref(), 9).await.is_err());
    }

    #[tokio::test]
    async fn pr_is_the_run_records_pr_md_and_opened_once() {
        let tmp = tempfile::tempdir().unwrap();
        let f = forge(tmp.path());
        let req = PrRequest {
            title: "agent: week dates".into(),
            body: "report v1".into(),
            head: "agent/7-week-dates".into(),
            base: "main".into(),
        };
        let first = f.open_draft_pr(&repo_ref(), &req).await.unwrap();
        assert!(first.draft);
        let pr_md = tmp.path().join("runs/01RUN/pr.md");
        assert_eq!(std::fs::read_to_string(&pr_md).unwrap(), "report v1");
        assert_eq!(first.html_url, format!("file://{}", pr_md.display()));
        let second = f
            .open_draft_pr(
                &repo_ref(),
                &PrRequest {
                    body: "report v2".into(),
                    ..req.clone()
                },
            )
            .await
            .unwrap();
        assert_eq!(second.number, first.number);
        assert_eq!(second.body, "report v2");
        let found = f
            .pull_request_for_branch(&repo_ref(), "agent/7-week-dates")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.number, first.number);
        let unknown = PrRequest {
            head: "agent/none".into(),
            ..req
        };
        assert!(f.open_draft_pr(&repo_ref(), &unknown).await.is_err());
    }

    #[tokio::test]
    async fn progress_comment_is_created_once_then_edited() {
        let tmp = tempfile::tempdir().unwrap();
        let f = forge(tmp.path());
        let a = f
            .upsert_progress(&repo_ref(), 7, "01RUN", &"queued".into())
            .await
            .unwrap();
        let b = f
            .upsert_progress(&repo_ref(), 7, "01RUN", &"succeeded".into())
            .await
            .unwrap();
        assert_eq!(a.id, b.id);
        let issue = f.issue(&repo_ref(), 7).await.unwrap();
        assert_eq!(issue.comments.len(), 1);
        assert!(issue.comments[0].author.is_bot);
        assert!(issue.comments[0].body.ends_with("\nsucceeded"));
        assert_eq!(
            super::super::progress_run_id(&issue.comments[0].body),
            Some("01RUN")
        );
        f.react_eyes(&repo_ref(), CommentTarget::IssueComment(9))
            .await
            .unwrap();
        f.react_eyes(&repo_ref(), CommentTarget::IssueComment(9))
            .await
            .unwrap();
        assert_eq!(f.read_state().unwrap().reactions.len(), 1);
    }

    #[tokio::test]
    async fn permissions_come_from_configuration() {
        let tmp = tempfile::tempdir().unwrap();
        let f = forge(tmp.path());
        assert_eq!(
            f.permission(&repo_ref(), "rea").await.unwrap(),
            Permission::Read
        );
        assert_eq!(
            f.permission(&repo_ref(), "anyone").await.unwrap(),
            Permission::Write
        );
        assert!(f.job_log(&repo_ref(), 1).await.is_err());
        assert!(f.failed_jobs(&repo_ref(), 1).await.unwrap().is_empty());
    }
}
