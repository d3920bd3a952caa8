//! The agent loop: plan → edit → test → fix, persisted after every step.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tracing::Instrument as _;

use super::error::{Error, Result};
use super::record::{PendingApproval, PrRef, RunRecord, files, now};
use super::report::{self, CostLine, Review, VerifyLine};
use super::state::{RunState, write_atomic};
use super::{failpoint, prompt, tools as run_tools};
use crate::audit::Redacted;
use crate::audit::chain::{self, Appender, Kind};
use crate::audit::redact::Redactor;
use crate::config::Config;
use crate::exec::{ExecOptions, ExecRequest, Executor, LocalExecutor, Termination};
use crate::model::{self, Message, Request, Role, Router};
use crate::policy::Policy;
use crate::task::{Mode, Task, strip_hidden_text};
use crate::tools::{EventSink, Registry, ToolContext, ToolError, ToolEvent};
use crate::verify::{self, Observation, RunResult, TestCommand};
use crate::workspace::{CommitRequest, Repo, Worktree, WorktreeOptions, WorktreeRequest};

/// Largest model reply we ask for, in tokens.
/// Replies without a tool call tolerated in a row before the run stops.
const MAX_IDLE_REPLIES: u32 = 3;
/// Bytes of failure summary given to the model and the report.
const FAILURE_SUMMARY_BYTES: usize = 6 * 1024;
/// How much of the diff the reviewer reads, in characters.
const REVIEW_DIFF_CHARS: usize = 48 * 1024;

/// Progress of a run, for a person watching.
#[derive(Debug, Clone)]
pub enum RunEvent {
    /// The run moved to a state.
    State(RunState),
    /// A model call started.
    Turn {
        /// The role asked.
        role: Role,
        /// Calls so far in this run.
        n: u32,
    },
    /// A tool ran.
    Tool {
        /// Its name.
        name: String,
        /// A short description (path, command), redacted: a model may put a secret in a
        /// command line, and progress reaches a terminal or a CI log.
        detail: Redacted,
    },
    /// A verification run finished.
    Verified {
        /// `before`, `attempt N`.
        when: String,
        /// Its one-line result, redacted (it names tests from the project's output).
        result: Redacted,
    },
    /// Money spent so far.
    Spend {
        /// USD.
        usd: f64,
    },
}

/// Everything a run needs from its front door.
pub struct Services {
    /// The resolved configuration.
    pub config: Config,
    /// The repository (main worktree or bare).
    pub repo: Repo,
    /// Models by role.
    pub router: Arc<Router>,
    /// Masks secrets in everything that leaves the process.
    pub redactor: Arc<Redactor>,
    /// Where progress goes.
    pub progress: Arc<dyn Fn(&RunEvent) + Send + Sync>,
    /// How commands run (sandbox, network, limits).
    pub exec_options: ExecOptions,
    /// Reuse pooled worktrees.
    pub warm_pool: bool,
}

/// How to start a run.
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// Branch name (default `agent/<slug>` or `agent/<run-id>`).
    pub branch: Option<String>,
    /// Test command from a flag (beats config and detection).
    pub test_command: Option<String>,
    /// `--model` flags, kept so `resume` uses the same models.
    pub model_flags: Vec<String>,
    /// `--sandbox` flag, kept so `resume` runs commands the same way.
    pub sandbox: Option<String>,
    /// The run id to use (a fresh ULID when `None`): a front door that announces the run
    /// before it starts (a progress comment) picks the id first.
    pub run_id: Option<String>,
}

/// What a run ended (or paused) with.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The record as last saved.
    pub record: RunRecord,
    /// The run directory.
    pub run_dir: PathBuf,
}

fn slug(text: &str) -> String {
    let mut s = String::new();
    for w in text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(6)
    {
        if !s.is_empty() {
            s.push('-');
        }
        s.push_str(&w.to_ascii_lowercase());
    }
    s.chars()
        .take(40)
        .collect::<String>()
        .trim_end_matches('-')
        .to_string()
}

/// The last six characters of a run id, lower case: what makes a branch name the run's own.
pub fn run_suffix(run_id: &str) -> String {
    let tail: String = run_id.chars().rev().take(6).collect::<String>();
    tail.chars().rev().collect::<String>().to_ascii_lowercase()
}

/// The default branch of a run: `agent/<issue>-<slug>` or `agent/<slug>-<id suffix>`.
pub fn default_branch(prefix: &str, task: &Task, run_id: &str) -> String {
    let first = task.goal.lines().next().unwrap_or("");
    // `Issue #7: title` (the triggers' and `--issue`'s form): the number is in the branch
    // already, so the slug is the title's.
    let first = match first.split_once(": ") {
        Some((head, rest))
            if ["Issue #", "Pull request #"].iter().any(|p| {
                head.strip_prefix(p)
                    .is_some_and(|n| n.parse::<u64>().is_ok())
            }) =>
        {
            rest
        }
        _ => first,
    };
    let s = slug(first);
    let tail = run_suffix(run_id);
    match &task.origin {
        crate::task::Origin::Issue { number, .. } => format!("{prefix}{number}-{s}"),
        _ if s.is_empty() => format!("{prefix}{tail}"),
        _ => format!("{prefix}{s}-{tail}"),
    }
}

/// Start a new run of `task`.
pub async fn start(svc: &Services, mut task: Task, opts: StartOptions) -> Result<Outcome> {
    // A secret pasted into the request (an issue body, a comment) must not reach the branch
    // name, the commit messages, the PR title or the record: the model never needs it.
    task.goal = svc.redactor.redact(&task.goal);
    let run_id = match &opts.run_id {
        Some(id) if !id.is_empty() && !id.contains(['/', '\\', '.']) => id.clone(),
        Some(id) => return Err(Error::Invalid(format!("not a usable run id: {id:?}"))),
        None => ulid::Ulid::generate().to_string(),
    };
    let dir = svc.repo.run_dir(&run_id);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("cannot create", &dir, e))?;
    let branch = opts.branch.clone().unwrap_or_else(|| match &task.branch {
        Some(b) => b.clone(),
        None => default_branch(&svc.config.settings.git.branch_prefix, &task, &run_id),
    });
    let base_sha = svc.repo.resolve(&task.base)?.to_string();
    let mut rec = RunRecord {
        version: 1,
        run_id: run_id.clone(),
        task,
        state: RunState::Queued,
        created_at: now(),
        updated_at: now(),
        branch,
        base_ref: String::new(),
        base_sha,
        worktree: svc.repo.worktrees_dir().join(&run_id),
        test_command: opts
            .test_command
            .clone()
            .or_else(|| svc.config.settings.verify.test.clone()),
        plan: None,
        unplanned: Vec::new(),
        verification: Vec::new(),
        baseline: None,
        commits: Vec::new(),
        fix_attempts: 0,
        turns: 0,
        roles_called: Vec::new(),
        usage: Vec::new(),
        summary: String::new(),
        notes: Vec::new(),
        pending_approval: None,
        approved_calls: Vec::new(),
        review: None,
        approvals: Vec::new(),
        pr: None,
        audit_head: None,
        model_flags: opts.model_flags.clone(),
        sandbox_flag: opts.sandbox.clone(),
        model_usage: Vec::new(),
        budget_spent: None,
        elapsed_ms: 0,
        sandbox: None,
    };
    rec.base_ref = rec.task.base.clone();
    let mut run = Active::open(svc, rec, dir, opts.test_command.is_some())?;
    let sanitized = strip_hidden_text(&run.rec.task.goal);
    run.audit(
        Kind::State,
        json!({
            "state": "queued",
            "task": run.rec.task,
            "hidden_text_removed": sanitized.removed,
            "sandbox": svc.exec_options.sandbox,
        }),
    )?;
    run.persist()?;
    run.drive().await
}

/// Continue a stopped run; with `approve`, approve its pending request first.
pub async fn resume(svc: &Services, run_id: &str, approve: bool, by: &str) -> Result<Outcome> {
    let dir = svc.repo.run_dir(run_id);
    let rec = RunRecord::load(&dir).map_err(|e| Error::io("cannot read the record of", &dir, e))?;
    let mut run = Active::open(svc, rec, dir, false)?;
    run.resumed = true;
    if run.rec.state.is_terminal() {
        return Ok(run.outcome());
    }
    if run.rec.state == RunState::AwaitingApproval {
        let Some(pending) = run.rec.pending_approval.clone() else {
            return Err(Error::Invalid(
                "awaiting approval but nothing is pending".into(),
            ));
        };
        if !approve {
            return Ok(run.outcome());
        }
        let mut approval = pending.approval.clone();
        approval.approve(by);
        run.audit(Kind::Approval, json!({"approved": approval, "by": by}))?;
        run.rec.approvals.push(approval);
        run.rec.pending_approval = None;
        run.rec.approved_calls = pending.remaining.clone();
        let back = pending.resume_state;
        run.rec.state = back;
        run.persist()?;
    }
    run.audit(
        Kind::State,
        json!({"state": run.rec.state.as_str(), "resumed": true}),
    )?;
    run.drive().await
}

/// End a run that was stopped from outside (`/agent stop`) after its future was dropped:
/// the record says cancelled with `note`, the audit log has the transition, the report is
/// written. A run that has already ended is returned as it is.
pub fn cancel(svc: &Services, run_id: &str, note: &str) -> Result<Outcome> {
    let dir = svc.repo.run_dir(run_id);
    let rec = RunRecord::load(&dir).map_err(|e| Error::io("cannot read the record of", &dir, e))?;
    let mut run = Active::open(svc, rec, dir, false)?;
    if run.rec.state.is_terminal() {
        return Ok(run.outcome());
    }
    run.rec.pending_approval = None;
    run.rec.notes.push(note.to_string());
    run.transition(RunState::Cancelled)?;
    run.finish_report()?;
    Ok(run.outcome())
}

/// The audit sink handed to tools: their events become audit events.
struct AuditSink {
    audit: Arc<Appender>,
}

impl EventSink for AuditSink {
    fn record(&self, event: ToolEvent) {
        let kind = match &event {
            ToolEvent::Policy(_) | ToolEvent::PlanGate { .. } => Kind::Policy,
            ToolEvent::PlanUpdated(_) | ToolEvent::FileChanged(_) => Kind::ToolResult,
        };
        let data = serde_json::to_value(&event)
            .unwrap_or_else(|e| json!({"unserializable": e.to_string()}));
        if let Err(e) = self.audit.append(kind, data) {
            tracing::error!(error = %e, "cannot append a tool event to the audit log");
        }
    }
}

struct Active<'a> {
    svc: &'a Services,
    rec: RunRecord,
    dir: PathBuf,
    audit: Arc<Appender>,
    worktree: Option<Worktree>,
    tools: Option<(ToolContext, Registry, Arc<dyn Executor>)>,
    messages: Vec<Message>,
    /// How many of `messages` are in the conversation file (it is append-only).
    conversation_written: usize,
    test_from_flag: bool,
    started: std::time::Instant,
    /// Continuing a run an earlier process started (its branch and worktree may exist).
    resumed: bool,
}

impl<'a> Active<'a> {
    fn open(svc: &'a Services, rec: RunRecord, dir: PathBuf, test_from_flag: bool) -> Result<Self> {
        let redactor = svc.redactor.clone();
        let (audit, recovery) = Appender::open(
            &dir.join(files::AUDIT),
            &rec.run_id,
            Arc::new(move |s: &str| redactor.redact(s)),
        )?;
        if recovery.torn_tail.is_some() {
            tracing::warn!(run = %rec.run_id, "the audit log's last line was torn by a crash; continuing the chain after the last whole event");
        }
        let messages = read_conversation(&dir.join(files::CONVERSATION), &svc.redactor)?;
        let conversation_written = messages.len();
        Ok(Self {
            svc,
            rec,
            dir,
            // One fsync per durable point (persist), not per event.
            audit: Arc::new(audit.sync_each(false)),
            worktree: None,
            tools: None,
            messages,
            conversation_written,
            test_from_flag,
            started: std::time::Instant::now(),
            resumed: false,
        })
    }

    fn outcome(&self) -> Outcome {
        Outcome {
            record: self.rec.clone(),
            run_dir: self.dir.clone(),
        }
    }

    fn audit(&self, kind: Kind, data: serde_json::Value) -> Result<()> {
        self.audit.append(kind, data)?;
        Ok(())
    }

    fn progress(&self, e: RunEvent) {
        (self.svc.progress)(&e);
    }

    /// Save the record and conversation within a step: atomic (safe against `kill -9`) but
    /// without fsync or the ref mirror; [`persist`](Self::persist) does those at transitions.
    fn save(&mut self) -> Result<()> {
        self.write_state(false)
    }

    /// Persist durably at a transition or checkpoint: the audit log synced, the record and
    /// conversation fsynced, the run directory mirrored to `refs/agent/runs/<id>`.
    fn persist(&mut self) -> Result<()> {
        self.audit.sync()?;
        self.write_state(true)
    }

    fn write_state(&mut self, durable: bool) -> Result<()> {
        let _span = tracing::debug_span!("state_persist").entered();
        self.rec.audit_head = Some(self.audit.head()?);
        self.rec.budget_spent = Some(self.svc.router.spent());
        self.rec.model_usage = self.svc.router.usage();
        self.rec.usage = usage_lines(&self.svc.router);
        // Only the messages not yet written are appended (each redacted once), so a save
        // costs what the turn added, not the whole conversation again.
        let conversation = self.dir.join(files::CONVERSATION);
        if self.conversation_written < self.messages.len() || durable {
            let mut text = Redacted::default();
            for m in &self.messages[self.conversation_written..] {
                let line = self
                    .svc
                    .redactor
                    .clean_json(m, false)
                    .map_err(|e| Error::Invalid(format!("cannot encode a message: {e}")))?;
                text.push(&line);
                text.push_static("\n");
            }
            append_bytes(&conversation, &text, durable)?;
            self.conversation_written = self.messages.len();
        }
        self.rec
            .save_with(&self.dir, durable, &self.svc.redactor)
            .map_err(|e| Error::io("cannot write the record in", &self.dir, e))?;
        if durable {
            self.svc.repo.mirror_run_record(&self.rec.run_id)?;
        }
        Ok(())
    }

    fn transition(&mut self, next: RunState) -> Result<()> {
        if self.rec.state != next {
            if !self.rec.state.can_move_to(next) {
                return Err(Error::Invalid(format!(
                    "illegal transition {} → {next}",
                    self.rec.state
                )));
            }
            self.audit(
                Kind::State,
                json!({"from": self.rec.state.as_str(), "state": next.as_str()}),
            )?;
            self.rec.state = next;
        }
        self.persist()?;
        self.progress(RunEvent::State(next));
        Ok(())
    }

    async fn drive(mut self) -> Result<Outcome> {
        let result = self.drive_inner().await;
        match result {
            Ok(()) => {}
            Err(Error::Model(model::Error::BudgetExhausted(ex))) => {
                self.rec.notes.push(format!("Budget exhausted: {ex}."));
                self.transition(RunState::BudgetExhausted)?;
            }
            Err(Error::Model(e)) => {
                self.rec.notes.push(format!("The model failed: {e}"));
                self.transition(RunState::Failed)?;
            }
            Err(e) => {
                // A harness fault: record it and end the run, keeping the evidence.
                self.rec
                    .notes
                    .push(format!("The run stopped on an error: {e}"));
                let _ = self.transition(RunState::Failed);
                self.finish_report()?;
                return Err(e);
            }
        }
        if self.rec.state.is_terminal() || self.rec.state == RunState::AwaitingApproval {
            self.finish_report()?;
        }
        Ok(self.outcome())
    }

    async fn drive_inner(&mut self) -> Result<()> {
        loop {
            match self.rec.state {
                RunState::Queued => {
                    self.prepare_worktree()?;
                    failpoint("after-worktree");
                    self.transition(RunState::Analyzing)?;
                }
                RunState::Analyzing => {
                    self.prepare_worktree()?;
                    self.analyze().await?;
                    failpoint("after-baseline");
                    self.transition(RunState::Planning)?;
                }
                RunState::Planning => {
                    self.prepare_worktree()?;
                    let planned = self.plan().await?;
                    if !planned {
                        return Ok(());
                    }
                    failpoint("after-plan");
                    if self.rec.task.mode == Mode::Plan {
                        self.rec.summary = "Plan only: no files were changed.".into();
                        // A plan-only run ends after planning; nothing to verify.
                        self.rec.state = RunState::Testing;
                        self.transition(RunState::Succeeded)?;
                        return Ok(());
                    }
                    self.transition(RunState::Editing)?;
                }
                RunState::Editing | RunState::Fixing => {
                    self.prepare_worktree()?;
                    self.code().await?;
                    if self.rec.state == RunState::AwaitingApproval || self.rec.state.is_terminal()
                    {
                        return Ok(());
                    }
                }
                RunState::Testing => {
                    self.prepare_worktree()?;
                    self.final_verification().await?;
                }
                RunState::AwaitingApproval => return Ok(()),
                s if s.is_terminal() => return Ok(()),
                _ => return Ok(()),
            }
        }
    }

    /// Create the worktree (or reopen it after a crash) and the tools that work in it.
    fn prepare_worktree(&mut self) -> Result<()> {
        if self.worktree.is_some() {
            return Ok(());
        }
        let resuming = self.resumed;
        let req = WorktreeRequest {
            run_id: self.rec.run_id.clone(),
            branch: self.rec.branch.clone(),
            base: self.rec.base_sha.clone(),
        };
        let (wt, prov) = self.svc.repo.create_worktree(
            &req,
            WorktreeOptions {
                resume: resuming || self.rec.task.branch.is_some(),
                warm: self.svc.warm_pool && !resuming,
            },
        )?;
        if !resuming {
            self.audit(
                Kind::State,
                json!({"worktree": wt.path(), "branch": wt.branch(), "base": self.rec.base_sha, "provenance": format!("{prov:?}")}),
            )?;
        } else if let Some(last) = self.rec.commits.last() {
            // Anything after the last checkpoint was not verified: a resumed run starts from
            // the checkpoint, so no half-applied step survives a crash.
            let id = self.svc.repo.resolve(last)?;
            wt.rollback_to(id)?;
        }
        self.rec.worktree = wt.path().to_path_buf();
        let policy = Arc::new(Policy::from_config(&self.svc.config)?);
        let local: Arc<dyn Executor> = Arc::new(LocalExecutor::new(
            wt.path(),
            self.svc.exec_options.clone(),
        )?);
        // What confines the commands, as it is in force (not as asked): the first thing the
        // audit says about them, and a line of the report.
        let sb = local.sandbox();
        let line = sb.summary();
        if self.rec.sandbox.as_deref() != Some(line.as_str()) {
            self.audit(Kind::Policy, json!({"sandbox_in_force": sb}))?;
            self.rec.sandbox = Some(line);
        }
        // Every command of the run, tests included, ends by the run's deadline.
        let executor: Arc<dyn Executor> = Arc::new(super::deadline::Bounded::new(
            local,
            self.svc.router.clone(),
            self.svc.config.settings.budget.max_minutes,
            self.svc.exec_options.timeout,
        ));
        let sink = Arc::new(AuditSink {
            audit: self.audit.clone(),
        });
        let ctx = ToolContext::new(wt.path(), policy.clone(), sink)
            .map_err(|e| Error::io("cannot open the worktree", wt.path(), e))?;
        if let Some(plan) = &self.rec.plan {
            ctx.with_plan(|p| p.plan = Some(plan.clone()));
        }
        if let Ok(mut a) = ctx.approvals.lock() {
            a.extend(self.rec.approvals.iter().cloned());
        }
        let mut registry = Registry::builtin();
        registry.register(Arc::new(run_tools::RunCommand {
            executor: executor.clone(),
        }));
        self.tools = Some((ctx, registry, executor));
        self.worktree = Some(wt);
        Ok(())
    }

    fn test_command(&self) -> Result<Option<TestCommand>> {
        let wt = self.rec.worktree.clone();
        let flag = if self.test_from_flag {
            self.rec.test_command.as_deref()
        } else {
            None
        };
        let config =
            self.rec
                .test_command
                .as_deref()
                .or(self.svc.config.settings.verify.test.as_deref());
        // A detected command gets the flags that make its output name every test (so the
        // baseline comparison sees them all); a command a person gave runs exactly as given.
        Ok(verify::resolve(&wt, flag, config)?.map(|mut cmd| {
            let reliable = verify::reliable_command(&cmd);
            if !reliable.added.is_empty() {
                tracing::debug!(command = %reliable.command, why = %reliable.note, "test command made verbose");
                cmd.command = reliable.command;
            }
            cmd
        }))
    }

    /// Baseline test run and the context for the first prompt.
    async fn analyze(&mut self) -> Result<()> {
        let cmd = self.test_command()?;
        self.rec.test_command = cmd.as_ref().map(|c| c.command.clone());
        if let Some(cmd) = &cmd
            && self.rec.baseline.is_none()
        {
            let (obs, line) = self.run_tests(cmd, "before").await?;
            self.rec.baseline = Some(obs);
            self.rec.verification.push(line);
        }
        Ok(())
    }

    /// Run the test command once and read it.
    async fn run_tests(
        &mut self,
        cmd: &TestCommand,
        when: &str,
    ) -> Result<(Observation, VerifyLine)> {
        let executor = self.executor()?;
        let since = std::time::SystemTime::now();
        let timeout = Duration::from_secs(
            u64::from(self.svc.config.settings.verify.timeout_minutes.max(1)) * 60,
        );
        let out = executor
            .run(ExecRequest::shell(cmd.command.clone()).timeout(timeout))
            .instrument(tracing::debug_span!("test_command"))
            .await?;
        let mut text = out.stdout.to_text_lossy();
        let err = out.stderr.to_text_lossy();
        if !err.is_empty() {
            text.push('\n');
            text.push_str(&err);
        }
        let exit_code = match out.status {
            Termination::Exited(c) => Some(c),
            _ => None,
        };
        let junit =
            verify::read_junit_reports(&self.rec.worktree, cmd.runner, since).unwrap_or_default();
        let obs = verify::observe(
            cmd,
            &RunResult {
                exit_code,
                output: text.clone(),
            },
            &junit,
        );
        let decision = verify::decide(self.rec.baseline.as_ref(), &obs);
        let result = if when == "before" {
            match &obs.report {
                Some(r) if !r.failed.is_empty() => format!(
                    "{} failed: {}",
                    r.failed.len(),
                    r.failed
                        .iter()
                        .take(5)
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(r) => format!("{} passed, {} failed", r.counts.passed, r.counts.failed),
                None => match exit_code {
                    Some(c) => format!("exit code {c}"),
                    None => "killed".into(),
                },
            }
        } else {
            decision.headline(&obs)
        };
        let excerpt = if obs.exit_code == Some(0) {
            String::new()
        } else {
            self.svc.redactor.redact(&verify::failure_summary(
                obs.report.as_ref(),
                &text,
                FAILURE_SUMMARY_BYTES,
            ))
        };
        let line = VerifyLine {
            when: when.to_string(),
            command: cmd.command.clone(),
            exit_code,
            duration_ms: out.duration.as_millis() as u64,
            result: result.clone(),
            excerpt,
        };
        self.audit(
            Kind::Verify,
            json!({"when": when, "command": cmd.command, "status": out.status, "duration_ms": line.duration_ms, "decision": decision, "dropped_bytes": out.stdout.dropped + out.stderr.dropped}),
        )?;
        self.progress(RunEvent::Verified {
            when: when.to_string(),
            result: self.svc.redactor.clean(&result),
        });
        Ok((obs, line))
    }

    fn executor(&self) -> Result<Arc<dyn Executor>> {
        self.tools
            .as_ref()
            .map(|(_, _, e)| e.clone())
            .ok_or_else(|| Error::Invalid("no worktree prepared".into()))
    }

    fn first_message(&self) -> String {
        let goal = strip_hidden_text(&self.rec.task.goal).text;
        let instructions = prompt::repository_instructions(&self.rec.worktree);
        let map = self.project_map(&goal);
        let baseline = self
            .rec
            .verification
            .first()
            .map(|v| {
                if v.excerpt.is_empty() {
                    v.result.clone()
                } else {
                    format!("{}\n{}", v.result, v.excerpt)
                }
            })
            .unwrap_or_default();
        prompt::first_message(
            &goal,
            &instructions,
            &map,
            self.rec.test_command.as_deref(),
            &baseline,
        )
    }

    fn project_map(&self, goal: &str) -> String {
        super::context::project_map(&self.rec.worktree, goal)
    }

    /// The planner's conversation, until `update_plan` is called. `false` when the run
    /// stopped (paused or failed) instead.
    async fn plan(&mut self) -> Result<bool> {
        if self.rec.plan.is_some() {
            return Ok(true);
        }
        if self.messages.is_empty() {
            self.messages.push(Message::user(self.first_message()));
        }
        let read_only = ["read_file", "list_files", "search", "update_plan"];
        let mut idle = 0;
        loop {
            let specs = self.specs(Some(&read_only));
            let reply = self
                .call(Role::Planner, prompt::planner_system(), specs)
                .await?;
            if reply.tool_calls.is_empty() {
                idle += 1;
                if idle >= MAX_IDLE_REPLIES {
                    self.rec
                        .notes
                        .push("The planner never called update_plan.".into());
                    self.transition(RunState::Failed)?;
                    return Ok(false);
                }
                self.messages.push(Message::user(
                    "Call update_plan with the plan (steps with the files each touches).",
                ));
                self.save()?;
                continue;
            }
            idle = 0;
            for call in &reply.tool_calls {
                if !read_only.contains(&call.name.as_str()) {
                    self.tool_result(
                        call,
                        "The planner may only read and call update_plan.".into(),
                        true,
                    );
                    continue;
                }
                match self.dispatch(call).await? {
                    Dispatched::Done(text, is_error) => self.tool_result(call, text, is_error),
                    Dispatched::Paused => return Ok(false),
                }
            }
            let plan = self
                .tools
                .as_ref()
                .and_then(|(ctx, _, _)| ctx.with_plan(|p| p.plan.clone()));
            self.save()?;
            if let Some(plan) = plan {
                self.rec.plan = Some(plan);
                self.save()?;
                return Ok(true);
            }
        }
    }

    /// The coder's conversation: edits, commands and test runs until `finish` verifies or
    /// the fix attempts run out.
    async fn code(&mut self) -> Result<()> {
        let approved = std::mem::take(&mut self.rec.approved_calls);
        if !approved.is_empty() && self.handle_calls(approved).await? {
            return Ok(());
        }
        let mut idle = 0;
        loop {
            let specs = self.specs(None);
            let reply = self
                .call(Role::Coder, prompt::coder_system(), specs)
                .await?;
            if reply.tool_calls.is_empty() {
                idle += 1;
                if idle >= MAX_IDLE_REPLIES {
                    // The model stopped using tools: verify what it did, as finish would.
                    self.rec.summary = reply.content.trim().to_string();
                    return self.verify_and_decide().await;
                }
                self.messages.push(Message::user(
                    "Use the tools to make the change, then call finish with a summary.",
                ));
                self.save()?;
                continue;
            }
            idle = 0;
            if self.handle_calls(reply.tool_calls).await? {
                return Ok(());
            }
        }
    }

    /// Run one turn's tool calls in order; `finish` goes last. Returns true when the run
    /// paused for approval or has decided (verified after `finish`).
    async fn handle_calls(&mut self, calls: Vec<model::ToolCall>) -> Result<bool> {
        let mut finish = None;
        for (i, call) in calls.iter().enumerate() {
            match call.name.as_str() {
                "finish" => {
                    finish = Some(call.clone());
                }
                "run_tests" => {
                    let text = self.tests_for_model(call).await?;
                    self.tool_result(call, text, false);
                }
                _ => match self.dispatch(call).await? {
                    Dispatched::Done(text, is_error) => self.tool_result(call, text, is_error),
                    Dispatched::Paused => {
                        // Keep the rest of the turn (and a `finish` seen before the pause) to
                        // run once approved.
                        let mut rest = calls[i..].to_vec();
                        rest.extend(finish.take());
                        if let Some(p) = self.rec.pending_approval.as_mut() {
                            p.remaining = rest;
                        }
                        self.save()?;
                        return Ok(true);
                    }
                },
            }
        }
        self.save()?;
        failpoint(&format!("after-turn-{}", self.rec.turns));
        if let Some(call) = finish {
            self.rec.summary = call
                .arguments
                .get("summary")
                .and_then(|s| s.as_str())
                .unwrap_or("")
                .trim()
                .to_string();
            self.tool_result(
                &call,
                "Verifying: the harness runs the tests now.".into(),
                false,
            );
            self.save()?;
            self.verify_and_decide().await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// `run_tests` from the model: run the tests and hand back a focused summary.
    async fn tests_for_model(&mut self, call: &model::ToolCall) -> Result<String> {
        self.audit(Kind::ToolCall, json!({"id": call.id, "name": call.name}))?;
        let Some(cmd) = self.test_command()? else {
            return Ok("No test command is configured or detected for this project.".into());
        };
        let n = self.rec.verification.len();
        let (obs, line) = self.run_tests(&cmd, &format!("run_tests {n}")).await?;
        let decision = verify::decide(self.rec.baseline.as_ref(), &obs);
        if decision.success {
            self.checkpoint("tests pass")?;
        }
        let text = if line.excerpt.is_empty() {
            line.result.clone()
        } else {
            format!("{}\n{}", line.result, line.excerpt)
        };
        self.rec.verification.push(line);
        Ok(text)
    }

    /// After `finish`: test, decide, and either succeed or go round again.
    async fn verify_and_decide(&mut self) -> Result<()> {
        self.transition(RunState::Testing)?;
        self.final_verification().await
    }

    async fn final_verification(&mut self) -> Result<()> {
        let Some(cmd) = self.test_command()? else {
            // Nothing can prove the change: commit it for review, but say so.
            self.rec
                .notes
                .push("No test command was found, so nothing verified this change.".into());
            self.checkpoint("unverified change")?;
            self.transition(RunState::Failed)?;
            return Ok(());
        };
        let attempt = self.rec.fix_attempts + 1;
        // What may not be committed is undone before the tests decide, so the tree they
        // pass on is the tree that is committed.
        let refused = self.commit_gate()?;
        let (obs, line) = self.run_tests(&cmd, &format!("attempt {attempt}")).await?;
        let decision = verify::decide(self.rec.baseline.as_ref(), &obs);
        let mut feedback = if line.excerpt.is_empty() {
            line.result.clone()
        } else {
            format!("{}\n{}", line.result, line.excerpt)
        };
        if !refused.is_empty() {
            feedback.push_str(&format!("\n{refused}"));
        }
        self.rec.verification.push(line);
        if decision.success {
            self.checkpoint("verified")?;
            failpoint("after-commit");
            if self.review().await? {
                self.transition(RunState::Fixing)?;
                return Ok(());
            }
            if self.rec.commits.is_empty() {
                self.rec
                    .notes
                    .push("The tests pass but the run changed nothing.".into());
            }
            self.transition(RunState::Succeeded)?;
            return Ok(());
        }
        self.rec.fix_attempts = attempt;
        if attempt >= self.svc.config.settings.budget.max_fix_attempts {
            self.rec.notes.push(format!(
                "Fix attempts exhausted ({attempt} of {}); the branch keeps the last good checkpoint{}.",
                self.svc.config.settings.budget.max_fix_attempts,
                if self.rec.commits.is_empty() { " (none: no verified step)" } else { "" }
            ));
            self.transition(RunState::Failed)?;
            return Ok(());
        }
        self.messages.push(Message::user(format!(
            "The tests did not pass (attempt {attempt} of {}):\n{}\nFix the failures, then call finish again.",
            self.svc.config.settings.budget.max_fix_attempts, feedback
        )));
        self.transition(RunState::Fixing)?;
        Ok(())
    }

    /// The policy at commit time: every changed path, whoever changed it (a tool, a command,
    /// the tests), is judged; refused ones are put back as in HEAD, audited, noted in the
    /// report and told to the model. Returns what to tell the model ("" when nothing).
    fn commit_gate(&mut self) -> Result<String> {
        let (Some(wt), Some((ctx, _, _))) = (&self.worktree, &self.tools) else {
            return Ok(String::new());
        };
        let planned: std::collections::BTreeSet<String> = self
            .rec
            .plan
            .iter()
            .flat_map(|p| p.steps.iter().flat_map(|s| s.files.iter().cloned()))
            .collect();
        let head = wt.head()?.to_string();
        let mut refused = Vec::new();
        for path in wt.changed_paths()? {
            let in_head = self.svc.repo.read_file_at(&head, &path)?.is_some();
            if let Some(why) =
                super::gate::refusal(wt.path(), &path, &ctx.policy, &planned, in_head)
            {
                refused.push((path, why));
            }
        }
        if refused.is_empty() {
            return Ok(String::new());
        }
        let paths: Vec<String> = refused.iter().map(|(p, _)| p.clone()).collect();
        wt.restore_paths(&paths)?;
        self.audit(
            Kind::Policy,
            json!({"refused_at_commit": refused.iter().map(|(p, w)| json!({"path": p, "why": w})).collect::<Vec<_>>()}),
        )?;
        let lines: Vec<String> = refused.iter().map(|(p, w)| format!("`{p}`: {w}")).collect();
        self.rec.notes.push(format!(
            "Not committed, refused by the policy at commit time: {}.",
            lines.join("; ")
        ));
        Ok(format!(
            "These changes were undone because the policy refuses to commit them (whoever wrote them): {}.",
            lines.join("; ")
        ))
    }

    /// Commit the worktree's changes as a checkpoint, after checking the diff for secrets.
    fn checkpoint(&mut self, why: &str) -> Result<()> {
        let _span = tracing::debug_span!("commit").entered();
        // Files the verification itself wrote are judged too.
        self.commit_gate()?;
        let Some(wt) = &self.worktree else {
            return Ok(());
        };
        if !wt.is_dirty()? {
            return Ok(());
        }
        let step = self.rec.commits.len() + 1;
        let head = self.audit.head()?;
        let mut trailers = vec![
            ("Agent-Run".to_string(), self.rec.run_id.clone()),
            ("Agent-Step".to_string(), step.to_string()),
            ("Audit-Head".to_string(), head.hash.clone()),
        ];
        if let Some(co) = self
            .rec
            .task
            .requested_by
            .as_ref()
            .and_then(|p| p.co_author())
        {
            trailers.push(("Co-authored-by".to_string(), co));
        }
        // Redacted before it is cut: a secret cut in two would no longer be recognised.
        let subject = format!(
            "agent: {}",
            self.svc
                .redactor
                .redact(
                    &strip_hidden_text(self.rec.task.goal.lines().next().unwrap_or("change")).text
                )
                .chars()
                .take(64)
                .collect::<String>()
        );
        let git = &self.svc.config.settings.git;
        let id = wt
            .commit_all(&CommitRequest {
                subject,
                body: self.svc.redactor.redact(&format!(
                    "Checkpoint {step} of run {} ({why}).",
                    self.rec.run_id
                )),
                trailers,
                author_name: git.author_name.clone(),
                author_email: git.author_email.clone(),
                time: None,
            })?
            .map(|id| id.to_string());
        if let Some(id) = id {
            // A secret in what the run adds blocks the push: undo the commit and say so,
            // redacted. The scan reads the blobs (binary too), not the text diff.
            let blobs = self.svc.repo.changed_blobs(
                self.svc.repo.resolve(&self.rec.base_sha)?,
                self.svc.repo.resolve(&id)?,
            )?;
            let changed: Vec<crate::audit::redact::ChangedFile<'_>> = blobs
                .iter()
                .filter(|b| !b.new.is_empty())
                .map(|b| crate::audit::redact::ChangedFile {
                    path: &b.path,
                    old: &b.old,
                    new: &b.new,
                })
                .collect();
            let findings = crate::audit::redact::scan_changes(&changed, &self.svc.redactor);
            if !findings.is_empty() {
                let prev = self
                    .rec
                    .commits
                    .last()
                    .cloned()
                    .unwrap_or(self.rec.base_sha.clone());
                wt.rollback_to(self.svc.repo.resolve(&prev)?)?;
                self.audit(
                    Kind::Policy,
                    json!({"blocked": "secret in diff", "findings": findings}),
                )?;
                return Err(Error::SecretInDiff(
                    findings
                        .iter()
                        .map(|f| {
                            format!(
                                "{}:{} {} ({}) `{}`",
                                f.path, f.line, f.kind, f.encoding, f.redacted
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("; "),
                ));
            }
            self.audit(
                Kind::Commit,
                json!({"commit": id, "step": step, "why": why}),
            )?;
            self.rec.commits.push(id);
            self.persist()?;
        }
        Ok(())
    }

    fn specs(&self, only: Option<&[&str]>) -> Vec<model::ToolSpec> {
        let Some((_, registry, _)) = &self.tools else {
            return Vec::new();
        };
        let mut specs: Vec<model::ToolSpec> = registry
            .specs()
            .into_iter()
            .map(|s| model::ToolSpec {
                name: s.name,
                description: s.description,
                parameters: s.parameters,
            })
            .collect();
        specs.extend(run_tools::harness_specs());
        if let Some(only) = only {
            specs.retain(|s| only.contains(&s.name.as_str()));
        }
        specs
    }

    async fn call(
        &mut self,
        role: Role,
        system: String,
        tools: Vec<model::ToolSpec>,
    ) -> Result<model::Reply> {
        let reply = self.ask(role, system, self.messages.clone(), tools).await?;
        // Saved with the turn's tool results: a crash before that re-asks this turn, which
        // resume makes consistent (the worktree goes back to the last checkpoint).
        self.messages.push(Message::from_reply(&reply));
        Ok(reply)
    }

    /// One model call of `role` on `messages`, counted, audited and transcribed.
    async fn ask(
        &mut self,
        role: Role,
        system: String,
        messages: Vec<Message>,
        tools: Vec<model::ToolSpec>,
    ) -> Result<model::Reply> {
        let max_out = self.svc.config.settings.budget.max_output_tokens.max(1);
        let mut req = Request::new(messages, max_out);
        req.system = Some(system);
        req.tools = tools;
        self.progress(RunEvent::Turn {
            role,
            n: self.rec.turns + 1,
        });
        let result = self
            .svc
            .router
            .call(role, &req, None)
            .instrument(tracing::debug_span!("model_call"))
            .await;
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                self.audit(
                    Kind::ModelCall,
                    json!({"role": role.as_str(), "error": e.to_string()}),
                )?;
                return Err(e.into());
            }
        };
        self.rec.turns += 1;
        self.rec.roles_called.push(role);
        self.audit(
            Kind::ModelCall,
            serde_json::to_value(&out.record).unwrap_or_default(),
        )?;
        let _transcript = tracing::debug_span!("transcript").entered();
        let line = self
            .svc
            .redactor
            .clean_json(&out.transcript, false)
            .unwrap_or_default();
        append_line(&self.dir.join(files::TRANSCRIPT), &line)?;
        self.progress(RunEvent::Spend {
            usd: self.svc.router.spent().usd,
        });
        Ok(out.reply)
    }

    /// Whether a reviewer was asked for: set in config or by a `--model reviewer=` flag (a
    /// bare model spec fills the role but does not turn the review on).
    fn reviewer_enabled(&self) -> bool {
        self.svc.config.settings.models.reviewer.is_some()
            || self
                .rec
                .model_flags
                .iter()
                .any(|f| f.trim_start().starts_with("reviewer="))
    }

    /// Ask the reviewer about the verified diff, once per run. Returns true when a blocking
    /// finding sends the run back to fixing. A reviewer that cannot be had is noted, never
    /// fatal: the tests already decided.
    async fn review(&mut self) -> Result<bool> {
        if !self.reviewer_enabled() || self.rec.review.is_some() {
            return Ok(false);
        }
        let Some(head) = self.rec.commits.last().cloned() else {
            return Ok(false);
        };
        let repo = &self.svc.repo;
        let diff = repo
            .diff(repo.resolve(&self.rec.base_sha)?, repo.resolve(&head)?)?
            .unified();
        let plan = self
            .rec
            .plan
            .as_ref()
            .map(|p| {
                p.steps
                    .iter()
                    .enumerate()
                    .map(|(i, s)| format!("{}. {} ({})", i + 1, s.title, s.files.join(", ")))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        let goal = strip_hidden_text(&self.rec.task.goal).text;
        let msg = prompt::review_message(&goal, &plan, &diff, REVIEW_DIFF_CHARS);
        let model = self
            .svc
            .router
            .spec(Role::Reviewer)
            .map(|s| s.to_string())
            .unwrap_or_default();
        let mut review = Review {
            model,
            ..Review::default()
        };
        match self
            .ask(
                Role::Reviewer,
                prompt::reviewer_system(),
                vec![Message::user(msg)],
                vec![run_tools::review_spec()],
            )
            .await
        {
            Ok(reply) => review.findings = run_tools::parse_review(&reply),
            Err(Error::Model(e)) => review.error = Some(e.to_string()),
            Err(e) => return Err(e),
        }
        let send_back = review.blocking();
        review.sent_back = send_back;
        self.audit(Kind::Verify, json!({"review": review}))?;
        if send_back {
            let findings = review
                .findings
                .iter()
                .filter(|f| f.severity == "blocking")
                .map(|f| match &f.file {
                    Some(p) => format!("- {p}: {}", f.message),
                    None => format!("- {}", f.message),
                })
                .collect::<Vec<_>>()
                .join("\n");
            self.messages.push(Message::user(format!(
                "The tests pass, but a reviewer found blocking problems:\n{findings}\nFix them, \
                 then call finish again. The tests decide success as before."
            )));
        }
        self.rec.review = Some(review);
        self.save()?;
        Ok(send_back)
    }

    fn tool_result(&mut self, call: &model::ToolCall, content: String, is_error: bool) {
        let content = self.svc.redactor.redact(&content);
        let excerpt: String = content.chars().take(300).collect();
        if let Err(e) = self.audit(
            Kind::ToolResult,
            json!({"id": call.id, "name": call.name, "error": is_error, "excerpt": excerpt}),
        ) {
            tracing::error!(error = %e, "cannot audit a tool result");
        }
        self.messages.push(Message::ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content,
            is_error,
        });
    }

    async fn dispatch(&mut self, call: &model::ToolCall) -> Result<Dispatched> {
        self.audit(
            Kind::ToolCall,
            json!({"id": call.id, "name": call.name, "arguments": call.arguments}),
        )?;
        let detail = ["path", "command", "pattern"]
            .iter()
            .find_map(|k| call.arguments.get(*k).and_then(|v| v.as_str()))
            .unwrap_or("");
        self.progress(RunEvent::Tool {
            name: self.svc.redactor.redact(&call.name),
            detail: self.svc.redactor.clean(detail),
        });
        let Some((ctx, registry, _)) = &self.tools else {
            return Err(Error::Invalid("no worktree prepared".into()));
        };
        if registry.get(&call.name).is_none() {
            return Ok(Dispatched::Done(
                format!("There is no tool `{}`.", call.name),
                true,
            ));
        }
        match registry
            .dispatch(ctx, &call.name, call.arguments.clone())
            .instrument(tracing::debug_span!("tool_dispatch"))
            .await
        {
            Ok(out) => Ok(Dispatched::Done(out.content, false)),
            Err(ToolError::ToModel(msg)) => Ok(Dispatched::Done(msg, true)),
            Err(ToolError::AwaitingApproval(approval)) => {
                let resume_state = self.rec.state;
                self.audit(Kind::Approval, json!({"pending": approval}))?;
                self.rec.notes.push(format!(
                    "Waiting for approval to run `{}`. Approve with `git agent resume {} --approve`.",
                    approval.request.subject, self.rec.run_id
                ));
                self.rec.pending_approval = Some(PendingApproval {
                    call_id: call.id.clone(),
                    approval: *approval,
                    resume_state,
                    remaining: Vec::new(),
                });
                // The call stays unanswered until approved; the turn that made it is kept
                // (its later calls are saved by the caller and run after this one).
                self.transition(RunState::AwaitingApproval)?;
                Ok(Dispatched::Paused)
            }
            Err(e @ ToolError::Fatal { .. }) => Err(Error::Tool(e.to_string())),
        }
    }

    /// Render the report, write it as `pr.md`, mirror the record.
    fn finish_report(&mut self) -> Result<()> {
        let repo = &self.svc.repo;
        let head = self.rec.commits.last().cloned();
        let diff = match head {
            Some(h) => repo.diff(repo.resolve(&self.rec.base_sha)?, repo.resolve(&h)?)?,
            None => Default::default(),
        };
        if let Some(plan) = &self.rec.plan {
            self.rec.unplanned = diff
                .files
                .iter()
                .filter(|f| !plan.names(&f.path))
                .map(|f| f.path.clone())
                .collect();
        }
        if let Some(wt) = &self.worktree
            && self.rec.state != RunState::Succeeded
            && let Ok(left) = wt.changed_paths()
            && !left.is_empty()
        {
            self.rec.notes.push(format!(
                "Not committed (unverified): {}.",
                left.iter().take(20).cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        self.rec.elapsed_ms += self.started.elapsed().as_millis() as u64;
        let log = chain::read(&self.dir.join(files::AUDIT))?;
        let lines: Vec<String> = log.events.iter().map(chain::render_event).collect();
        let head = self.audit.head()?;
        let input = self.rec.report_input(
            diff.stat(),
            lines,
            head.hash,
            self.svc.config.settings.budget.max_usd,
        );
        let body = self.svc.redactor.clean(&report::render(&input));
        let pr = self.dir.join(files::PR);
        write_atomic(&pr, &body).map_err(|e| Error::io("cannot write", &pr, e))?;
        self.rec.pr = Some(PrRef::Path(pr));
        self.persist()?;
        Ok(())
    }
}

enum Dispatched {
    Done(String, bool),
    Paused,
}

fn usage_lines(router: &Router) -> Vec<CostLine> {
    router
        .usage()
        .into_iter()
        .map(|(role, spec, u)| CostLine {
            role: role.as_str().to_string(),
            model: spec,
            tokens_in: u.tokens_in,
            tokens_out: u.tokens_out,
            cost_usd: (!u.cost_unknown).then_some(u.cost_usd),
        })
        .collect()
}

/// Append to a file of the run directory (creating it); `sync` adds an fsync.
fn append_bytes(path: &Path, text: &Redacted, sync: bool) -> Result<()> {
    use std::io::Write as _;
    let bytes = text.as_str().as_bytes();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io("cannot open", path, e))?;
    f.write_all(bytes)
        .map_err(|e| Error::io("cannot write", path, e))?;
    if sync {
        f.sync_data()
            .map_err(|e| Error::io("cannot sync", path, e))?;
    }
    Ok(())
}

/// Read the conversation file: one message per line. A torn last line (a crash mid-write)
/// is cut off, so the next append starts on a clean line.
fn read_conversation(path: &Path, redactor: &Redactor) -> Result<Vec<Message>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("cannot read", path, e)),
    };
    let mut messages = Vec::new();
    let mut good = 0;
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        if !line.ends_with(b"\n") {
            break;
        }
        match serde_json::from_slice::<Message>(line) {
            Ok(m) => {
                messages.push(m);
                good += line.len();
            }
            Err(_) => break,
        }
    }
    if good < bytes.len() {
        tracing::warn!(path = %path.display(), "the conversation ends in a torn line; cutting it off");
        // What is kept was written redacted; it goes through the redactor again all the same,
        // since the writer takes nothing else.
        let kept = redactor.clean(&String::from_utf8_lossy(&bytes[..good]));
        write_atomic(path, &kept).map_err(|e| Error::io("cannot rewrite", path, e))?;
    }
    Ok(messages)
}

fn append_line(path: &Path, line: &Redacted) -> Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io("cannot open", path, e))?;
    writeln!(f, "{line}").map_err(|e| Error::io("cannot write", path, e))?;
    Ok(())
}
