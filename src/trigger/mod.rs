//! Triggers: a GitHub event (webhook delivery or Action payload) becomes a [`Task`], a control
//! command, or is ignored with a reason.
//!
//! This module owns GitHub's event shape ([`Event`], parsed once; every reader of a payload
//! reads it) and the decision *whether* and *what*: which events start runs (an issue
//! labeled with the configured label, an `/agent` comment, a failed CI run on an agent PR),
//! the comment grammar ([`command`]), who may trigger (the sender's permission asked of the
//! forge — never `author_association` or any other payload field; bots only when allow-listed),
//! which comments reach the prompt (only those of people who could trigger), the CI loop guard,
//! and cutting CI logs to the failure ([`ci_log`]).
//!
//! It must not run anything or write to the forge: reacting, commenting and pushing are the
//! caller's, once it has decided to act on the [`Directive`].

pub mod ci_log;
pub mod command;
mod error;
pub mod event;

use std::collections::HashMap;

pub use error::{Error, Result};
pub use event::{Event, HANDLED, Malformed};

use crate::config::TriggerConfig;
use crate::forge::{CommentTarget, Forge, Permission, User};
use crate::task::{Mode, Origin, Person, RepoRef, Task};
use command::{Command, NotACommand};

/// Behaviour of the triggers beyond the configuration file.
#[derive(Debug, Clone)]
pub struct Options {
    /// Prefix of the branches the agent opens (`git.branch_prefix`).
    pub branch_prefix: String,
    /// Whether CI failures on branches the agent did not open start runs too.
    pub ci_foreign_branches: bool,
    /// Lines kept of each failed job's log.
    pub log_lines: usize,
    /// Bytes kept of each failed job's log.
    pub log_bytes: usize,
    /// Failed jobs whose logs are read at most.
    pub max_failed_jobs: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            branch_prefix: "agent/".into(),
            ci_foreign_branches: false,
            log_lines: 200,
            log_bytes: 16 * 1024,
            max_failed_jobs: 4,
        }
    }
}

/// A run to start.
#[derive(Debug, Clone, PartialEq)]
pub struct Triggered {
    /// The task for the run.
    pub task: Task,
    /// The comment that asked, to acknowledge with 👀.
    pub react_to: Option<CommentTarget>,
}

/// Who asked for a control command, and where.
#[derive(Debug, Clone, PartialEq)]
pub struct Control {
    /// The repository.
    pub repo: RepoRef,
    /// The issue or PR the command was given on.
    pub number: u64,
    /// Whether `number` is a pull request.
    pub is_pull_request: bool,
    /// The comment holding the command.
    pub comment: CommentTarget,
    /// Who gave it.
    pub requested_by: Person,
}

/// What to do about an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Directive {
    /// Start a run.
    Run(Box<Triggered>),
    /// `/agent stop`: stop the run of this issue or PR.
    Stop(Control),
    /// `/agent approve [RUN]`: approve the pending `ask` of the run (or the latest).
    Approve {
        /// Where and by whom.
        control: Control,
        /// The run named in the command, if any.
        run: Option<String>,
    },
    /// `/agent retry`: run the last request of this issue or PR again.
    Retry(Control),
    /// Nothing to do.
    Ignored {
        /// Why, for the log and the Action's summary.
        reason: String,
    },
}

fn ignored(reason: impl Into<String>) -> Result<Directive> {
    Ok(Directive::Ignored {
        reason: reason.into(),
    })
}

/// The forge's user of the event's `sender`.
fn sender_of(event: &Event<'_>) -> Option<User> {
    let v = event.payload.sender.as_ref()?;
    let login = v.login.as_deref()?.to_string();
    let is_bot = v.kind.as_deref() == Some("Bot") || login.ends_with("[bot]");
    Some(User {
        id: v.id.unwrap_or(0),
        login,
        is_bot,
    })
}

/// The repository's default branch, `main` when the payload does not say.
fn default_branch(event: &Event<'_>) -> String {
    event.default_branch().unwrap_or("main").to_string()
}

/// The `Co-authored-by` identity of a GitHub user: the noreply address GitHub maps to them.
pub fn person_of(user: &User) -> Person {
    let email = if user.id > 0 {
        format!("{}+{}@users.noreply.github.com", user.id, user.login)
    } else {
        format!("{}@users.noreply.github.com", user.login)
    };
    Person {
        login: user.login.clone(),
        name: None,
        email: Some(email),
    }
}

/// Decisions about people, with the forge's answers cached for one event.
struct Gate<'a> {
    forge: &'a dyn Forge,
    config: &'a TriggerConfig,
    repo: &'a RepoRef,
    cache: HashMap<String, Option<String>>,
}

impl<'a> Gate<'a> {
    fn new(forge: &'a dyn Forge, config: &'a TriggerConfig, repo: &'a RepoRef) -> Self {
        Gate {
            forge,
            config,
            repo,
            cache: HashMap::new(),
        }
    }

    /// `None` when `user` may trigger runs, else why not.
    async fn refusal(&mut self, user: &User) -> Result<Option<String>> {
        if let Some(r) = self.cache.get(&user.login) {
            return Ok(r.clone());
        }
        let r = if user.is_bot {
            let listed = self
                .config
                .allowed_bots
                .iter()
                .any(|b| b.eq_ignore_ascii_case(&user.login));
            (!listed).then(|| format!("{} is a bot not in trigger.allowed_bots", user.login))
        } else {
            let have = self
                .forge
                .permission(self.repo, &user.login)
                .await
                .map_err(|source| Error::Forge {
                    what: format!("permission of {} on {}", user.login, self.repo),
                    source,
                })?;
            let allowed = self
                .config
                .permissions
                .iter()
                .filter_map(|p| Permission::parse(p))
                .any(|p| p == have);
            (!allowed).then(|| {
                format!(
                    "{} has {} permission on {}; trigger.permissions allows {}",
                    user.login,
                    have,
                    self.repo,
                    self.config.permissions.join(", ")
                )
            })
        };
        self.cache.insert(user.login.clone(), r.clone());
        Ok(r)
    }

    /// The conversation of issue or PR `number` as prompt text: title, body, and the comments
    /// of people who may trigger runs (others' are left out and counted).
    async fn conversation(&mut self, number: u64, skip_comment: Option<u64>) -> Result<String> {
        let issue = self
            .forge
            .issue(self.repo, number)
            .await
            .map_err(|source| Error::Forge {
                what: format!("issue {}#{number}", self.repo),
                source,
            })?;
        let mut left_out = 0usize;
        let mut kept = Vec::new();
        for c in &issue.comments {
            if Some(c.id) == skip_comment || crate::forge::progress_run_id(&c.body).is_some() {
                continue;
            }
            if self.refusal(&c.author).await?.is_some() {
                left_out += 1;
            } else {
                kept.push(c);
            }
        }
        let text = issue.task_text(kept, left_out);
        Ok(text)
    }
}

/// Turn one event into an [`Directive`].
///
/// Asks `forge` for permissions, the conversation, PR branches and CI logs; writes nothing.
/// Events that lack what a decision needs are ignored with a reason, never an error; forge
/// failures are errors (the event can be retried).
pub async fn evaluate(
    forge: &dyn Forge,
    config: &TriggerConfig,
    options: &Options,
    event: &Event<'_>,
) -> Result<Directive> {
    let Some(repo) = event.repo() else {
        return ignored(format!("{} event without a repository", event.name));
    };
    match event.name {
        "issues" => issue_labeled(forge, config, &repo, event).await,
        "issue_comment" => comment(forge, config, options, &repo, event, false).await,
        "pull_request_review_comment" => comment(forge, config, options, &repo, event, true).await,
        "workflow_run" => ci_failure(forge, config, options, &repo, event).await,
        other => ignored(format!("{other} events do not start runs")),
    }
}

/// [`Event::parse`] a payload's bytes, then [`evaluate`] it.
pub async fn evaluate_bytes(
    forge: &dyn Forge,
    config: &TriggerConfig,
    options: &Options,
    event: &str,
    payload: &[u8],
) -> Result<Directive> {
    let event = Event::parse(event, payload)?;
    evaluate(forge, config, options, &event).await
}

fn full_name(repo: &RepoRef) -> String {
    repo.to_string()
}

async fn issue_labeled(
    forge: &dyn Forge,
    config: &TriggerConfig,
    repo: &RepoRef,
    event: &Event<'_>,
) -> Result<Directive> {
    let (action, payload) = (event.action(), &event.payload);
    if action != "labeled" {
        return ignored(format!(
            "issues.{action} does not start runs (only labeled)"
        ));
    }
    let label = payload
        .label
        .as_ref()
        .and_then(|l| l.name.as_deref())
        .unwrap_or("");
    if !label.eq_ignore_ascii_case(&config.label) {
        return ignored(format!(
            "label `{label}` is not the trigger label `{}`",
            config.label
        ));
    }
    let issue = payload.issue.as_ref();
    let Some(number) = issue.and_then(|i| i.number) else {
        return ignored("issues.labeled without an issue number");
    };
    if issue.and_then(|i| i.state.as_deref()) == Some("closed") {
        return ignored(format!("issue #{number} is closed"));
    }
    if issue.is_some_and(|i| i.pull_request.is_some()) {
        return ignored(format!("#{number} is a pull request; label issues instead"));
    }
    let Some(sender) = sender_of(event) else {
        return ignored("issues.labeled without a sender");
    };
    let mut gate = Gate::new(forge, config, repo);
    if let Some(why) = gate.refusal(&sender).await? {
        return ignored(why);
    }
    let goal = gate.conversation(number, None).await?;
    let base = default_branch(event);
    Ok(Directive::Run(Box::new(Triggered {
        task: Task {
            goal,
            mode: Mode::Fix,
            origin: Origin::Issue {
                number,
                comment_id: None,
            },
            repo: Some(repo.clone()),
            base,
            branch: None,
            requested_by: Some(person_of(&sender)),
            key: format!("{}#{number}:fix", full_name(repo)),
        },
        react_to: None,
    })))
}

async fn comment(
    forge: &dyn Forge,
    config: &TriggerConfig,
    options: &Options,
    repo: &RepoRef,
    event: &Event<'_>,
    review: bool,
) -> Result<Directive> {
    let (action, payload) = (event.action(), &event.payload);
    let name = event.name;
    if action != "created" {
        // An edit must not turn old text into a command, nor dodge the checks made on creation.
        return ignored(format!(
            "{name}.{action} is not a command (only new comments are)"
        ));
    }
    let comment = payload.comment.as_ref();
    let Some(comment_id) = comment.and_then(|c| c.id) else {
        return ignored(format!("{name} without a comment id"));
    };
    let body = comment.and_then(|c| c.body.as_deref()).unwrap_or("");
    let cmd = match command::parse(&config.command, body) {
        Ok(c) => c,
        Err(NotACommand::NoPrefix) => {
            return ignored(format!("comment does not start with `{}`", config.command));
        }
        Err(NotACommand::Malformed(why)) => return ignored(why),
    };
    let Some(sender) = sender_of(event) else {
        return ignored(format!("{name} without a sender"));
    };
    let author = comment
        .and_then(|c| c.user.as_ref())
        .and_then(|u| u.login.as_deref());
    if author != Some(sender.login.as_str()) {
        return ignored(format!(
            "comment author {} is not the sender {}",
            author.unwrap_or("(none)"),
            sender.login
        ));
    }
    let (number, is_pr) = if review {
        match payload.pull_request.as_ref().and_then(|p| p.number) {
            Some(n) => (n, true),
            None => return ignored("review comment without a pull request"),
        }
    } else {
        match payload.issue.as_ref() {
            Some(
                issue @ event::Issue {
                    number: Some(n), ..
                },
            ) => (*n, issue.pull_request.is_some()),
            _ => return ignored("issue comment without an issue"),
        }
    };
    let mut gate = Gate::new(forge, config, repo);
    if let Some(why) = gate.refusal(&sender).await? {
        return ignored(why);
    }
    let target = if review {
        CommentTarget::ReviewComment(comment_id)
    } else {
        CommentTarget::IssueComment(comment_id)
    };
    let control = Control {
        repo: repo.clone(),
        number,
        is_pull_request: is_pr,
        comment: target,
        requested_by: person_of(&sender),
    };
    let (mode, request) = match cmd {
        Command::Stop => return Ok(Directive::Stop(control)),
        Command::Retry => return Ok(Directive::Retry(control)),
        Command::Approve(run) => return Ok(Directive::Approve { control, run }),
        Command::Fix(text) => (Mode::Fix, text),
        Command::Plan => (Mode::Plan, String::new()),
    };
    let mut goal = gate.conversation(number, Some(comment_id)).await?;
    if review {
        let path = comment.and_then(|c| c.path.as_deref()).unwrap_or("?");
        let line = comment.and_then(|c| c.line.or(c.original_line));
        let hunk = comment.and_then(|c| c.diff_hunk.as_deref()).unwrap_or("");
        goal.push_str(&format!(
            "\nReview comment on `{path}`{}:\n```diff\n{hunk}\n```\n",
            line.map(|l| format!(" line {l}")).unwrap_or_default()
        ));
    }
    if !request.is_empty() {
        goal.push_str(&format!("\nRequest from @{}:\n{request}\n", sender.login));
    }
    let default_branch = default_branch(event);
    let (origin, base, branch) = if is_pr {
        let pr = forge
            .pull_request(repo, number)
            .await
            .map_err(|source| Error::Forge {
                what: format!("pull request {repo}#{number}"),
                source,
            })?;
        if pr.head_repo.as_deref() != Some(full_name(repo).as_str()) {
            return ignored(format!(
                "pull request #{number} comes from another repository ({}); the agent only \
                 works on branches of {repo}",
                pr.head_repo.as_deref().unwrap_or("deleted fork")
            ));
        }
        let origin = Origin::PullRequest {
            number,
            comment_id: Some(comment_id),
        };
        if pr.head_ref.starts_with(&options.branch_prefix) {
            // The agent's own PR: continue its branch.
            (origin, pr.base_ref, Some(pr.head_ref))
        } else {
            // A person's PR: the agent may only push under its prefix, so it branches from
            // the PR's head and proposes its change into that branch.
            (origin, pr.head_ref, None)
        }
    } else {
        (
            Origin::Issue {
                number,
                comment_id: Some(comment_id),
            },
            default_branch,
            None,
        )
    };
    let verb = if mode == Mode::Plan { "plan" } else { "fix" };
    Ok(Directive::Run(Box::new(Triggered {
        task: Task {
            goal,
            mode,
            origin,
            repo: Some(repo.clone()),
            base,
            branch,
            requested_by: Some(person_of(&sender)),
            key: format!("{}#{number}:{verb}:comment-{comment_id}", full_name(repo)),
        },
        react_to: Some(target),
    })))
}

async fn ci_failure(
    forge: &dyn Forge,
    config: &TriggerConfig,
    options: &Options,
    repo: &RepoRef,
    event: &Event<'_>,
) -> Result<Directive> {
    let action = event.action();
    if action != "completed" {
        return ignored(format!(
            "workflow_run.{action} does not start runs (only completed)"
        ));
    }
    let Some(run) = event.payload.workflow_run.as_ref() else {
        return ignored("workflow_run event without a workflow run");
    };
    let conclusion = run.conclusion.as_deref().unwrap_or("none");
    if conclusion != "failure" {
        return ignored(format!(
            "workflow run concluded `{conclusion}`, not failure"
        ));
    }
    if !config.ci_failure {
        return ignored("trigger.ci_failure is off");
    }
    let (Some(run_id), Some(branch), Some(head_sha)) =
        (run.id, run.head_branch.as_deref(), run.head_sha.as_deref())
    else {
        return ignored("workflow run without id, head branch or head commit");
    };
    let agent_branch = branch.starts_with(&options.branch_prefix);
    if !agent_branch && !options.ci_foreign_branches {
        return ignored(format!(
            "branch `{branch}` was not opened by the agent (prefix `{}`)",
            options.branch_prefix
        ));
    }
    let head_repo = run
        .head_repository
        .as_ref()
        .and_then(|r| r.full_name.as_deref());
    if head_repo != Some(full_name(repo).as_str()) {
        return ignored("the failed run is on a branch of another repository");
    }
    let forge_err = |what: String| move |source: crate::forge::Error| Error::Forge { what, source };
    let mut gate = Gate::new(forge, config, repo);
    let sender = sender_of(event);
    if !agent_branch {
        // A person's branch: whoever set this run off must be allowed to start the agent.
        let Some(sender) = &sender else {
            return ignored("workflow_run without a sender");
        };
        if let Some(why) = gate.refusal(sender).await? {
            return ignored(why);
        }
    }
    let pr = match run.pull_request_number() {
        Some(n) => forge
            .pull_request(repo, n)
            .await
            .map_err(forge_err(format!("pull request {repo}#{n}")))?,
        None => match forge
            .pull_request_for_branch(repo, branch)
            .await
            .map_err(forge_err(format!("pull request for {branch}")))?
        {
            Some(pr) => pr,
            None => return ignored(format!("no open pull request for branch `{branch}`")),
        },
    };
    if pr.state != "open" || pr.head_ref != branch {
        return ignored(format!(
            "pull request #{} is not open on branch `{branch}`",
            pr.number
        ));
    }
    // Loop guard: each agent attempt pushes a new commit, so the distinct commits with a
    // failed run on this branch count the attempts so far (this one included).
    let failed = forge
        .failed_workflow_runs(repo, branch)
        .await
        .map_err(forge_err(format!("failed runs on {branch}")))?;
    let mut shas: Vec<&str> = failed.iter().map(|r| r.head_sha.as_str()).collect();
    shas.push(head_sha);
    shas.sort_unstable();
    shas.dedup();
    if shas.len() > config.max_ci_attempts as usize {
        return ignored(format!(
            "loop guard: CI has failed on {} commits of `{branch}`; trigger.max_ci_attempts is {}",
            shas.len(),
            config.max_ci_attempts
        ));
    }
    let jobs = forge
        .failed_jobs(repo, run_id)
        .await
        .map_err(forge_err(format!("jobs of workflow run {run_id}")))?;
    let name = run.name.as_deref().unwrap_or("CI");
    let mut goal = format!(
        "Make CI green. The workflow `{name}` failed on pull request #{} (branch `{branch}`, \
         commit {head_sha}). Fix the cause so these jobs pass; do not weaken, skip or delete \
         tests.\n",
        pr.number
    );
    if jobs.is_empty() {
        goal.push_str("\n(No failed job is listed for this run.)\n");
    }
    for job in jobs.iter().take(options.max_failed_jobs) {
        let log = forge
            .job_log(repo, job.id)
            .await
            .map_err(forge_err(format!("log of job {}", job.id)))?;
        let steps = if job.failed_steps.is_empty() {
            String::new()
        } else {
            format!(" at step {}", job.failed_steps.join(", "))
        };
        goal.push_str(&format!(
            "\nJob `{}` ended `{}`{steps}:\n```text\n{}\n```\n",
            job.name,
            job.conclusion,
            ci_log::cut_to_failure(&log, options.log_lines, options.log_bytes)
        ));
    }
    if jobs.len() > options.max_failed_jobs {
        goal.push_str(&format!(
            "\n({} more failed job(s) not shown.)\n",
            jobs.len() - options.max_failed_jobs
        ));
    }
    Ok(Directive::Run(Box::new(Triggered {
        task: Task {
            goal,
            mode: Mode::Fix,
            origin: Origin::CiFailure {
                number: pr.number,
                workflow_run_id: run_id,
            },
            repo: Some(repo.clone()),
            base: pr.base_ref,
            branch: Some(branch.to_string()),
            requested_by: sender.filter(|s| !s.is_bot).map(|s| person_of(&s)),
            // Several workflows failing on one commit are one attempt, one run.
            key: format!("{}#{}:ci:{head_sha}", full_name(repo), pr.number),
        },
        react_to: None,
    })))
}
