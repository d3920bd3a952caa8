//! The agent loop: plan → edit → test → fix, persisted after every step.
//!
//! This file holds the front door ([`start`], [`resume`], [`cancel`]) and the state machine
//! that drives a run through its phases; the parts it composes live beside it: the ledger
//! (record, audit, conversation), the workbench (worktree, executor, tools), the turn (model
//! call and tool dispatch), verification, checkpoints and the reviewer.

use std::path::PathBuf;

use serde_json::json;

use super::environment::{self, Prepared};
use super::error::{Error, Result};
use super::ledger::{self, Ledger};
use super::record::{PendingApproval, RunRecord, now};
use super::report::VerifyLine;
use super::setup::Workbench;
use super::state::RunState;
use super::tools::{HarnessTool, Toolset};
use super::turn::{self, Dispatched};
use super::verification::{self, Check};
use super::{checkpoint, prompt, review};
use crate::audit::chain::Kind;
use crate::failpoint::failpoint;
use crate::model::{self, Message, Role, ToolCall};
use crate::task::{Mode, Task, strip_hidden_text};
use crate::verify;

/// Replies without a tool call tolerated in a row before the run stops.
const MAX_IDLE_REPLIES: u32 = 3;

pub use super::record::Outcome;
pub use super::services::{RunEvent, Services};

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

/// The record of a new run of `task` and its directory (created): the id, the branch and
/// the base commit chosen, nothing run yet.
pub(super) fn new_record(
    svc: &Services,
    task: Task,
    opts: &StartOptions,
) -> Result<(RunRecord, PathBuf)> {
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
        worktree: svc.repo.worktrees_dir()?.join(&run_id),
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
        integrity: None,
        attribution: Default::default(),
        setup: None,
        setup_run: None,
        fingerprints: Default::default(),
        authored: Default::default(),
        flaky: Default::default(),
        forced_warn_lints: Vec::new(),
    };
    rec.base_ref = rec.task.base.clone();
    Ok((rec, dir))
}

/// Start a new run of `task`.
pub async fn start(svc: &Services, mut task: Task, opts: StartOptions) -> Result<Outcome> {
    // A secret pasted into the request (an issue body, a comment) must not reach the branch
    // name, the commit messages, the PR title or the record: the model never needs it.
    task.goal = svc.redactor.redact(&task.goal);
    // Hidden text (HTML comments, invisible characters, collapsed details) is for no reader:
    // it is taken out here, once, so the record, the prompts, the branch, the commits and the
    // PR all hold the visible request. What was removed is in the audit log.
    let sanitized = strip_hidden_text(&task.goal);
    task.goal.clone_from(&sanitized.text);
    let (rec, dir) = new_record(svc, task, &opts)?;
    let mut run = Active::open(svc, rec, dir, opts.test_command.is_some())?;
    run.led.audit(
        Kind::State,
        json!({
            "state": "queued",
            "task": run.led.rec.task,
            "hidden_text_removed": sanitized.removed,
            "sandbox": svc.exec_options.sandbox,
        }),
    )?;
    run.led.persist()?;
    run.drive().await
}

/// After a run ends, what `git agent gc` removes by default goes without anyone asking
/// (issue 39): pooled worktrees and finished runs' worktrees a week old, and the private
/// set-ups of runs that ended without removing theirs. Only what goes is measured; a
/// failure is logged, never the run's.
fn collect_garbage(svc: &Services) {
    let opts = crate::workspace::GcOptions {
        older_than: std::time::Duration::from_secs(7 * 86_400),
        max_bytes: None,
        measure_kept: false,
    };
    match svc
        .repo
        .gc_worktrees(&opts, &|id| super::record::ended_at(&svc.repo, id))
    {
        Ok(seen) => {
            for e in seen.iter().filter(|e| e.removed) {
                tracing::info!(path = %e.path.display(), bytes = e.bytes, "gc: removed an old worktree");
            }
        }
        Err(e) => tracing::warn!(error = %e, "gc after the run failed"),
    }
    if let Some(state) = svc.repo.state_dir() {
        environment::gc_private(state, &|id| {
            super::record::ended_at(&svc.repo, id).is_some()
        });
    }
}

/// Continue a stopped run; with `approve`, approve its pending request first.
pub async fn resume(svc: &Services, run_id: &str, approve: bool, by: &str) -> Result<Outcome> {
    let dir = svc.repo.run_dir(run_id);
    let mut rec =
        RunRecord::load(&dir).map_err(|e| Error::io("cannot read the record of", &dir, e))?;
    // Records started before the goal was cleaned at `start` hold it as it was asked.
    rec.task.goal = strip_hidden_text(&rec.task.goal).text;
    let mut run = Active::open(svc, rec, dir, false)?;
    run.resumed = true;
    let led = &mut run.led;
    if led.rec.state.is_terminal() {
        return Ok(led.outcome());
    }
    if led.rec.state == RunState::AwaitingApproval {
        let Some(pending) = led.rec.pending_approval.clone() else {
            return Err(Error::Invalid(
                "awaiting approval but nothing is pending".into(),
            ));
        };
        if !approve {
            return Ok(led.outcome());
        }
        let mut approval = pending.approval.clone();
        approval.approve(by);
        led.audit(Kind::Approval, json!({"approved": approval, "by": by}))?;
        led.rec.approvals.push(approval);
        led.rec.pending_approval = None;
        led.rec.approved_calls = pending.remaining.clone();
        led.rec.state = pending.resume_state;
        // What the pause said is no longer so: the run goes on, and the report written at
        // its end says again what is still uncommitted (a reviewer read "waiting" and
        // "not committed" over a branch with the commit on it).
        led.rec.notes.retain(|n| !ledger::describes_a_pause(n));
        led.persist()?;
    }
    led.audit(
        Kind::State,
        json!({"state": led.rec.state.as_str(), "resumed": true}),
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
    if run.led.rec.state.is_terminal() {
        return Ok(run.led.outcome());
    }
    run.led.rec.pending_approval = None;
    run.led.rec.notes.push(note.to_string());
    run.led.transition(RunState::Cancelled)?;
    run.finish_report()?;
    run.release_worktree();
    Ok(run.led.outcome())
}

/// A run in this process: its ledger, its workbench once prepared, and the state machine
/// that moves it through planning, coding and verification.
struct Active<'a> {
    led: Ledger<'a>,
    bench: Option<Workbench>,
    test_from_flag: bool,
    /// Continuing a run an earlier process started (its branch and worktree may exist).
    resumed: bool,
}

impl<'a> Active<'a> {
    fn open(svc: &'a Services, rec: RunRecord, dir: PathBuf, test_from_flag: bool) -> Result<Self> {
        Ok(Self {
            led: Ledger::open(svc, rec, dir)?,
            bench: None,
            test_from_flag,
            resumed: false,
        })
    }

    /// Prepare the workbench on first use (reopened at the last checkpoint on resume).
    fn prepare(&mut self) -> Result<()> {
        if self.bench.is_none() {
            self.bench = Some(Workbench::prepare(&mut self.led, self.resumed)?);
        }
        Ok(())
    }

    /// The ledger and the (prepared) workbench together, for the parts that need both.
    fn parts(&mut self) -> Result<(&mut Ledger<'a>, &Workbench)> {
        self.prepare()?;
        match &self.bench {
            Some(bench) => Ok((&mut self.led, bench)),
            None => Err(Error::Invalid("no worktree prepared".into())),
        }
    }

    async fn drive(mut self) -> Result<Outcome> {
        let result = self.drive_inner().await;
        match result {
            Ok(()) => {}
            Err(Error::Model(model::Error::BudgetExhausted(ex))) => {
                self.led.rec.notes.push(format!("Budget exhausted: {ex}."));
                self.led.transition(RunState::BudgetExhausted)?;
            }
            Err(Error::Model(e)) => {
                self.led.rec.notes.push(format!("The model failed: {e}"));
                self.led.transition(RunState::Failed)?;
            }
            Err(e) => {
                // A harness fault: record it and end the run, keeping the evidence.
                self.led
                    .rec
                    .notes
                    .push(format!("The run stopped on an error: {e}"));
                let _ = self.led.transition(RunState::Failed);
                self.finish_report()?;
                return Err(e);
            }
        }
        if self.led.rec.state.is_terminal() || self.led.rec.state == RunState::AwaitingApproval {
            self.finish_report()?;
        }
        self.release_worktree();
        self.drop_check_branch();
        Ok(self.led.outcome())
    }

    /// An ended run's worktree goes to the warm pool (when the services keep one), so the
    /// next run here starts from its build caches instead of from scratch. The branch holds
    /// everything the run verified; the report is written. A failure to move it is logged
    /// and leaves the worktree where it is (gc removes it later).
    fn release_worktree(&mut self) {
        let svc = self.led.svc;
        if self.led.rec.state.is_terminal() {
            // The run's private set-ups (issue 38) serve nothing once it has ended.
            environment::remove_private(svc, &self.led.rec.run_id);
            super::clean_checkout::remove_base_build(&self.led);
            collect_garbage(svc);
        }
        if !svc.warm_pool || !self.led.rec.state.is_terminal() {
            return;
        }
        // The executor and the tools hold the worktree's path: let them go first.
        self.bench = None;
        match svc.repo.release_run_worktree(&self.led.rec.run_id) {
            Ok(Some(pooled)) => {
                tracing::debug!(run = %self.led.rec.run_id, to = %pooled.display(), "worktree pooled");
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(run = %self.led.rec.run_id, error = %e, "the worktree stays: cannot pool it");
            }
        }
    }

    /// An environment check (`doctor --run`) leaves no branch behind: it never commits, so
    /// its branch is still the base.
    fn drop_check_branch(&self) {
        let rec = &self.led.rec;
        if rec.task.mode != Mode::Check || !rec.state.is_terminal() {
            return;
        }
        let svc = self.led.svc;
        let deleted = svc
            .repo
            .resolve(&rec.base_sha)
            .and_then(|base| svc.repo.delete_branch_at(&rec.branch, base));
        if let Err(e) = deleted {
            tracing::warn!(run = %rec.run_id, error = %e, "the check's branch stays");
        }
    }

    async fn drive_inner(&mut self) -> Result<()> {
        if self.resumed {
            self.restore_environment().await?;
        }
        loop {
            match self.led.rec.state {
                RunState::Queued => {
                    self.prepare()?;
                    failpoint("after-worktree");
                    self.led.transition(RunState::Analyzing)?;
                }
                RunState::Analyzing => {
                    self.prepare()?;
                    self.analyze().await?;
                    if self.led.rec.state.is_terminal() {
                        return Ok(());
                    }
                    failpoint("after-baseline");
                    if self.led.rec.task.mode == Mode::Check {
                        self.led.rec.summary =
                            "Environment check: set-up and the baseline ran; no model turn, no edit."
                                .into();
                        // Like a plan-only run: nothing to verify, so straight to the end.
                        self.led.rec.state = RunState::Testing;
                        self.led.transition(RunState::Succeeded)?;
                        return Ok(());
                    }
                    self.led.transition(RunState::Planning)?;
                }
                RunState::Planning => {
                    self.prepare()?;
                    let planned = self.plan().await?;
                    if !planned {
                        return Ok(());
                    }
                    failpoint("after-plan");
                    if self.led.rec.task.mode == Mode::Plan {
                        self.led.rec.summary = "Plan only: no files were changed.".into();
                        // A plan-only run ends after planning; nothing to verify.
                        self.led.rec.state = RunState::Testing;
                        self.led.transition(RunState::Succeeded)?;
                        return Ok(());
                    }
                    self.led.transition(RunState::Editing)?;
                }
                RunState::Editing | RunState::Fixing => {
                    self.prepare()?;
                    self.code().await?;
                    if self.led.rec.state == RunState::AwaitingApproval
                        || self.led.rec.state.is_terminal()
                    {
                        return Ok(());
                    }
                }
                RunState::Testing => {
                    self.prepare()?;
                    self.final_verification().await?;
                }
                RunState::AwaitingApproval => return Ok(()),
                s if s.is_terminal() => return Ok(()),
                _ => return Ok(()),
            }
        }
    }

    /// The baseline test run, before any edit.
    async fn analyze(&mut self) -> Result<()> {
        let cmd = verification::test_command(&self.led, self.test_from_flag)?;
        self.led.rec.test_command = cmd.as_ref().map(|c| c.command.clone());
        if let Some(cmd) = &cmd
            && self.led.rec.baseline.is_none()
        {
            if self.led.rec.setup.is_none() && !self.environment(cmd).await? {
                return Ok(());
            }
            let (led, bench) = self.parts()?;
            let mut run = verification::run_tests(led, bench, cmd, Check::Baseline).await?;
            // Each round can only add lints the last build showed; a few rounds cover a crate
            // whose lib and test targets fail on different ones.
            for _ in 0..3 {
                let Some(lints) = verification::lints_to_force(led, cmd, &run)? else {
                    break;
                };
                // The base does not build under this compiler's lints: test it as its own
                // toolchain would have, and say so.
                led.rec.forced_warn_lints.extend(lints);
                bench.use_environment(led)?;
                run = verification::run_tests(led, bench, cmd, Check::Baseline).await?;
            }
            if !led.rec.forced_warn_lints.is_empty() {
                led.rec
                    .notes
                    .push(verification::forced_lints_note(&led.rec.forced_warn_lints));
            }
            let problem = match &run.before_failed {
                Some(c) => Some(verify::before_tests_problem(c, &run.output)),
                None => verify::environment_problem(
                    cmd,
                    run.obs.exit_code,
                    &run.output,
                    run.obs.report.as_ref(),
                ),
            };
            if let Some(p) = &problem {
                // Not a bug to fix: stop before the first model turn and say what was seen.
                run.line.result = format!("could not run: {}", p.why);
                run.line.excerpt = led.svc.redactor.redact(&p.lines.join("\n"));
            }
            led.rec.baseline = Some(run.obs);
            led.rec.verification.push(run.line);
            if let Some(p) = problem {
                led.rec.notes.push(format!(
                    "The project's tests could not run before any change: {}. {}",
                    p.why, p.hint
                ));
                led.transition(RunState::EnvironmentFailed)?;
                return Ok(());
            }
            verification::find_flaky(led, bench, cmd).await?;
            super::clean_checkout::keep_base_build(led, bench, cmd)?;
        }
        Ok(())
    }

    /// A resumed run whose base environment left the cache while it was stopped (waiting
    /// for a person, or after a crash: nothing held it) sets it up again from the base
    /// before any command needs it.
    async fn restore_environment(&mut self) -> Result<()> {
        let gone = self
            .led
            .rec
            .setup
            .as_ref()
            .is_some_and(|s| !s.dir.join("done.json").is_file());
        if !gone || self.led.rec.state.is_terminal() {
            return Ok(());
        }
        let Some(cmd) = verification::test_command(&self.led, self.test_from_flag)? else {
            return Ok(());
        };
        self.prepare()?;
        self.environment(&cmd).await?;
        Ok(())
    }

    /// Set the project's environment up before the baseline (issue 19), or find it in the
    /// cache; the run's commands get it from now on. `false` when the run ended
    /// `environment_failed` instead: no model turn is spent on an environment it never had.
    async fn environment(&mut self, cmd: &verify::TestCommand) -> Result<bool> {
        let base = self.led.svc.repo.resolve(&self.led.rec.base_sha)?;
        let started = std::time::Instant::now();
        let prepared = environment::ensure(
            &mut self.led,
            base,
            Some(cmd),
            "before the baseline",
            environment::Scope::Base,
        )
        .await?;
        let (led, bench) = self.parts()?;
        let problem = match prepared {
            Prepared::Nothing => return Ok(true),
            Prepared::Ready(setup, held) => {
                let run = setup.runs.last().cloned();
                bench.keep(held);
                led.rec.setup = Some(*setup);
                led.save()?;
                bench.use_environment(led)?;
                let line = match run {
                    Some(r) if r.cached => format!("reused from the cache (key {})", r.key),
                    Some(r) => format!(
                        "ready in {:.1} s (key {})",
                        r.duration_ms as f64 / 1000.0,
                        r.key
                    ),
                    None => "ready".into(),
                };
                led.progress(RunEvent::Setup {
                    result: led.svc.redactor.clean(&line),
                });
                let setup = led.rec.setup.clone();
                match &setup {
                    Some(s) => {
                        environment::check_python(bench.executor.as_ref(), bench.worktree.path(), s)
                            .await?
                            .map(|why| (why, Vec::new()))
                    }
                    None => None,
                }
                .map(|(why, lines)| (why, lines, Vec::new()))
            }
            Prepared::Failed {
                why,
                lines,
                commands,
            } => Some((why, lines, commands)),
        };
        let Some((why, lines, commands)) = problem else {
            return Ok(true);
        };
        let led = &mut self.led;
        led.progress(RunEvent::Setup {
            result: led.svc.redactor.clean(&format!("failed: {why}")),
        });
        led.rec.verification.push(VerifyLine {
            when: "set-up".into(),
            command: commands.join(" && "),
            exit_code: None,
            duration_ms: started.elapsed().as_millis() as u64,
            result: format!("could not set up: {why}"),
            excerpt: lines.join("\n"),
        });
        led.rec.notes.push(format!(
            "The project's environment could not be set up before any change: {why}. \
             Declare what the project needs in `[setup]` of `.github/agent.toml` (commands, \
             network, outputs), or see what was detected with `git agent doctor --run`."
        ));
        led.transition(RunState::EnvironmentFailed)?;
        Ok(false)
    }

    fn first_message(&self) -> String {
        let rec = &self.led.rec;
        let goal = rec.task.goal.clone();
        let instructions = prompt::repository_instructions(&rec.worktree);
        let map = super::context::project_map(&rec.worktree, &goal);
        let baseline = rec
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
        let mut m = prompt::first_message(
            &goal,
            &instructions,
            &map,
            rec.test_command.as_deref(),
            &baseline,
        );
        let shows_failure = rec
            .baseline
            .as_ref()
            .is_some_and(|b| b.exit_code != Some(0));
        if rec.test_command.is_some()
            && !shows_failure
            && self.led.svc.config.settings.verify.reproduce != crate::config::Reproduce::Off
        {
            m.push_str(prompt::REPRODUCE_FIRST);
        }
        m
    }

    /// The planner's conversation, until `update_plan` is called. `false` when the run
    /// stopped (paused or failed) instead.
    async fn plan(&mut self) -> Result<bool> {
        if self.led.rec.plan.is_some() {
            return Ok(true);
        }
        if self.led.messages().is_empty() {
            let first = self.first_message();
            self.led.push(Message::user(first));
        }
        let mut idle = 0;
        loop {
            let (led, bench) = self.parts()?;
            let specs = Toolset::ReadOnly.specs(&bench.registry);
            let reply = turn::call(led, Role::Planner, prompt::planner_system(), specs).await?;
            if reply.tool_calls.is_empty() {
                idle += 1;
                if idle >= MAX_IDLE_REPLIES {
                    led.rec
                        .notes
                        .push("The planner never called update_plan.".into());
                    led.transition(RunState::Failed)?;
                    return Ok(false);
                }
                led.push(Message::user(
                    "Call update_plan with the plan (steps with the files each touches).",
                ));
                led.save()?;
                continue;
            }
            idle = 0;
            for call in &reply.tool_calls {
                if !Toolset::ReadOnly.allows(&bench.registry, &call.name) {
                    turn::tool_result(
                        led,
                        call,
                        "The planner may only read and call update_plan.",
                        true,
                    );
                    continue;
                }
                match turn::dispatch(led, bench, call).await? {
                    Dispatched::Done { text, is_error } => {
                        turn::tool_result(led, call, &text, is_error)
                    }
                    Dispatched::Paused => return Ok(false),
                }
            }
            let plan = bench.ctx.with_plan(|p| p.plan.clone());
            led.save()?;
            if let Some(plan) = plan {
                led.rec.plan = Some(plan);
                led.save()?;
                return Ok(true);
            }
        }
    }

    /// The coder's conversation: edits, commands and test runs until `finish` verifies or
    /// the fix attempts run out.
    async fn code(&mut self) -> Result<()> {
        let approved = std::mem::take(&mut self.led.rec.approved_calls);
        if !approved.is_empty() && self.handle_calls(approved).await? {
            return Ok(());
        }
        let mut idle = 0;
        loop {
            let (led, bench) = self.parts()?;
            let specs = Toolset::All.specs(&bench.registry);
            let reply = turn::call(led, Role::Coder, prompt::coder_system(), specs).await?;
            if reply.tool_calls.is_empty() {
                idle += 1;
                if idle >= MAX_IDLE_REPLIES {
                    // The model stopped using tools: verify what it did, as finish would.
                    led.rec.summary = reply.content.trim().to_string();
                    return self.verify_and_decide().await;
                }
                led.push(Message::user(
                    "Use the tools to make the change, then call finish with a summary.",
                ));
                led.save()?;
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
    async fn handle_calls(&mut self, calls: Vec<ToolCall>) -> Result<bool> {
        let mut finish = None;
        for (i, call) in calls.iter().enumerate() {
            match HarnessTool::of(&call.name) {
                Some(HarnessTool::Finish) => {
                    finish = Some(call.clone());
                }
                Some(HarnessTool::RunTests) => {
                    let text = self.tests_for_model(call).await?;
                    turn::tool_result(&mut self.led, call, &text, false);
                }
                None => {
                    let (led, bench) = self.parts()?;
                    match turn::dispatch(led, bench, call).await? {
                        Dispatched::Done { text, is_error } => {
                            turn::tool_result(led, call, &text, is_error)
                        }
                        Dispatched::Paused => {
                            // Keep the rest of the turn (and a `finish` seen before the pause)
                            // to run once approved.
                            let mut rest = calls[i..].to_vec();
                            rest.extend(finish.take());
                            if let Some(p) = led.rec.pending_approval.as_mut() {
                                p.remaining = rest;
                            }
                            led.save()?;
                            return Ok(true);
                        }
                    }
                }
            }
        }
        self.keep_plan();
        self.led.save()?;
        failpoint(&format!("after-turn-{}", self.led.rec.turns));
        if let Some(call) = finish {
            self.led.rec.summary = call
                .arguments
                .get("summary")
                .and_then(|s| s.as_str())
                .unwrap_or("")
                .trim()
                .to_string();
            turn::tool_result(
                &mut self.led,
                &call,
                "Verifying: the harness runs the tests now.",
                false,
            );
            self.led.save()?;
            self.verify_and_decide().await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// `run_tests` from the model: run the tests and hand back a focused summary.
    async fn tests_for_model(&mut self, call: &ToolCall) -> Result<String> {
        self.led
            .audit(Kind::ToolCall, json!({"id": call.id, "name": call.name}))?;
        let Some(cmd) = verification::test_command(&self.led, self.test_from_flag)? else {
            return Ok("No test command is configured or detected for this project.".into());
        };
        let (led, bench) = self.parts()?;
        let n = led.rec.verification.len();
        let run = verification::run_tests(led, bench, &cmd, Check::OnRequest(n)).await?;
        if run.decision.success {
            checkpoint::commit(led, bench, "tests pass")?;
        }
        let text = run.feedback();
        led.rec.verification.push(run.line);
        Ok(text)
    }

    /// After `finish`: test, decide, and either succeed or go round again.
    async fn verify_and_decide(&mut self) -> Result<()> {
        self.led.transition(RunState::Testing)?;
        self.final_verification().await
    }

    /// The deciding verification: success is committed (then reviewed), failure goes back
    /// to the coder with the feedback until the fix attempts run out.
    async fn final_verification(&mut self) -> Result<()> {
        let Some(cmd) = verification::test_command(&self.led, self.test_from_flag)? else {
            // Nothing can prove the change: commit it for review, but say so.
            let (led, bench) = self.parts()?;
            led.rec
                .notes
                .push("No test command was found, so nothing verified this change.".into());
            checkpoint::commit(led, bench, "unverified change")?;
            led.transition(RunState::Failed)?;
            return Ok(());
        };
        let (led, bench) = self.parts()?;
        // Every deciding verification is an attempt, passed or not (a reviewer may send a
        // passed one back): the report's `attempt N` labels and `--json`'s `attempts` count
        // the same thing.
        let attempt = led.rec.fix_attempts + 1;
        let verdict = super::final_check::run(led, bench, &cmd, attempt).await?;
        if let Some(approval) = verdict.pending {
            // A change to the test runner's configuration: a person approves that exact
            // content (then this check runs again) or the run waits.
            led.audit(Kind::Approval, json!({"pending": approval}))?;
            let what = match approval.request.tool.as_str() {
                checkpoint::TEST_CHANGE => "the plan changes existing tests on purpose",
                checkpoint::UNDER_TEST => {
                    "the change makes the code behave differently under test, so passing tests \
                     do not show what users get"
                }
                checkpoint::SETUP_CHANGE => "the change touches what set-up reads",
                checkpoint::NEW_EXECUTABLE => "the change adds an executable file",
                _ => "the change touches the test runner's configuration",
            };
            led.rec.notes.push(format!(
                "{}: {what} ({}). Approve with `git agent resume {} --approve`.",
                ledger::WAITING,
                approval.request.subject,
                led.rec.run_id
            ));
            led.rec.pending_approval = Some(PendingApproval {
                call_id: String::new(),
                approval,
                resume_state: RunState::Testing,
                remaining: Vec::new(),
            });
            led.transition(RunState::AwaitingApproval)?;
            return Ok(());
        }
        led.rec.fix_attempts = attempt;
        if verdict.passed {
            checkpoint::commit(led, bench, "verified")?;
            failpoint("after-commit");
            if review::review(led).await? {
                led.transition(RunState::Fixing)?;
                return Ok(());
            }
            if led.rec.commits.is_empty() {
                led.rec
                    .notes
                    .push("The tests pass but the run changed nothing.".into());
            }
            led.transition(RunState::Succeeded)?;
            return Ok(());
        }
        let max = led.svc.config.settings.budget.max_fix_attempts;
        if attempt >= max {
            let none = if led.rec.commits.is_empty() {
                " (none: no verified step)"
            } else {
                ""
            };
            led.rec.notes.push(format!(
                "Fix attempts exhausted ({attempt} of {max}); the branch keeps the last good checkpoint{none}."
            ));
            led.transition(RunState::Failed)?;
            return Ok(());
        }
        led.push(Message::user(format!(
            "The tests did not pass (attempt {attempt} of {max}):\n{}\nFix the failures, then call finish again.",
            verdict.feedback
        )));
        led.transition(RunState::Fixing)?;
        Ok(())
    }

    /// The plan as the coder last revised it (`update_plan` while coding) becomes the
    /// record's, so the report shows the plan the run worked to, not the planner's first.
    fn keep_plan(&mut self) {
        if let Some(bench) = &self.bench
            && let Some(plan) = bench.ctx.with_plan(|p| p.plan.clone())
            && !plan.steps.is_empty()
        {
            self.led.rec.plan = Some(plan);
        }
    }

    /// Render the report, write it as `pr.md`, mirror the record.
    fn finish_report(&mut self) -> Result<()> {
        self.keep_plan();
        let worktree = self.bench.as_ref().map(|b| &b.worktree);
        self.led.write_report(worktree)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{World, git};
    use super::super::record::files;
    use super::*;
    use serde_json::Value;

    fn plan() -> Value {
        json!({"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {
            "steps": [{"title": "Make it two", "files": ["value.txt"]}]}}]})
    }

    fn coder(calls: Value) -> Value {
        json!({"role": "coder", "tool_calls": calls})
    }

    fn write(value: &str) -> Value {
        json!({"name": "write_file", "arguments": {"path": "value.txt", "content": value}})
    }

    fn finish() -> Value {
        json!({"name": "finish", "arguments": {"summary": "two"}})
    }

    fn states(w: &World) -> Vec<String> {
        w.events()
            .into_iter()
            .filter_map(|e| e.strip_prefix("state ").map(str::to_string))
            .collect()
    }

    #[tokio::test]
    async fn the_state_machine_walks_plan_edit_test_to_success() {
        let w = World::new(&[plan(), coder(json!([write("2\n"), finish()]))]);
        let svc = w.services();
        let out = start(&svc, World::task(), StartOptions::default())
            .await
            .unwrap();
        let rec = &out.record;
        assert_eq!(rec.state, RunState::Succeeded, "{:?}", rec.notes);
        assert_eq!(
            states(&w),
            ["analyzing", "planning", "editing", "testing", "succeeded"]
        );
        let whens: Vec<&str> = rec.verification.iter().map(|v| v.when.as_str()).collect();
        assert_eq!(whens, ["before", "attempt 1", "attempt 1, clean checkout"]);
        assert_eq!(rec.commits.len(), 1);
        assert_eq!(rec.summary, "two");
        assert_eq!(
            git(&w.work(), &["rev-parse", &rec.branch]).trim(),
            rec.commits[0]
        );
        assert!(out.run_dir.join(files::PR).exists());
        // A finished run is returned as it is.
        let again = resume(&svc, &rec.run_id, false, "t").await.unwrap();
        assert_eq!(&again.record, rec);
    }

    #[tokio::test]
    async fn a_failed_attempt_goes_back_to_fixing_until_the_attempts_run_out() {
        let w = World::new(&[
            plan(),
            coder(json!([write("3\n"), finish()])),
            coder(json!([finish()])),
        ]);
        let mut svc = w.services();
        svc.config.settings.budget.max_fix_attempts = 2;
        let out = start(&svc, World::task(), StartOptions::default())
            .await
            .unwrap();
        let rec = &out.record;
        assert_eq!(rec.state, RunState::Failed);
        assert_eq!(rec.fix_attempts, 2);
        assert_eq!(
            states(&w),
            [
                "analyzing",
                "planning",
                "editing",
                "testing",
                "fixing",
                "testing",
                "failed"
            ]
        );
        assert!(rec.commits.is_empty());
        assert!(
            rec.notes
                .iter()
                .any(|n| n.starts_with("Fix attempts exhausted (2 of 2)")),
            "{:?}",
            rec.notes
        );
        assert!(
            rec.notes
                .iter()
                .any(|n| n.starts_with("Not committed (unverified): value.txt")),
            "{:?}",
            rec.notes
        );
    }

    /// A call that needs approval pauses the turn; approved, the rest of that turn (its
    /// `finish` too) runs before the model is asked again.
    #[tokio::test]
    async fn an_approval_pauses_the_turn_and_resume_runs_the_rest_of_it() {
        let w = World::new(&[
            plan(),
            coder(json!([
                write("2\n"),
                {"name": "run", "arguments": {"command": "cat <<EOF\nhello\nEOF"}},
                finish()
            ])),
        ]);
        let svc = w.services();
        let out = start(&svc, World::task(), StartOptions::default())
            .await
            .unwrap();
        let rec = &out.record;
        assert_eq!(rec.state, RunState::AwaitingApproval);
        let pending = rec.pending_approval.clone().unwrap();
        let names: Vec<&str> = pending.remaining.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["run", "finish"]);
        let waiting = resume(&svc, &rec.run_id, false, "t").await.unwrap();
        assert_eq!(waiting.record.state, RunState::AwaitingApproval);
        let done = resume(&svc, &rec.run_id, true, "alice").await.unwrap();
        let rec = &done.record;
        assert_eq!(rec.state, RunState::Succeeded, "{:?}", rec.notes);
        assert_eq!(rec.approvals.len(), 1);
        assert_eq!(rec.turns, 2, "nothing was asked again");
        assert!(rec.pending_approval.is_none() && rec.approved_calls.is_empty());
    }

    #[tokio::test]
    async fn a_planner_that_never_plans_fails_the_run() {
        let idle = json!({"role": "planner", "content": "hmm"});
        let w = World::new(&[
            idle.clone(),
            json!({"role": "planner", "tool_calls": [{"name": "run", "arguments": {"command": "ls"}}]}),
            idle.clone(),
            idle.clone(),
            idle,
        ]);
        let svc = w.services();
        let out = start(&svc, World::task(), StartOptions::default())
            .await
            .unwrap();
        let rec = &out.record;
        assert_eq!(rec.state, RunState::Failed);
        assert_eq!(rec.turns, 5);
        assert!(
            rec.notes
                .contains(&"The planner never called update_plan.".to_string())
        );
        let ledger = std::fs::read_to_string(out.run_dir.join(files::CONVERSATION)).unwrap();
        assert!(ledger.contains("The planner may only read and call update_plan."));
    }

    #[test]
    fn cancel_ends_a_queued_run_and_leaves_an_ended_one_alone() {
        let w = World::new(&[]);
        let svc = w.services();
        let led = w.ledger(&svc);
        let id = led.rec.run_id.clone();
        let mut led = led;
        led.persist().unwrap();
        drop(led);
        let out = cancel(&svc, &id, "Stopped.").unwrap();
        assert_eq!(out.record.state, RunState::Cancelled);
        assert_eq!(out.record.notes, ["Stopped."]);
        assert!(out.run_dir.join(files::PR).exists());
        let again = cancel(&svc, &id, "Again.").unwrap();
        assert_eq!(again.record.notes, ["Stopped."]);
    }
}
