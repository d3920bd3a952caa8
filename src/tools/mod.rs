//! The tools the model may call: the [`Tool`] trait, the [`Registry`] that dispatches calls,
//! the per-run [`ToolContext`], the built-in file, search and plan tools, and the edit engine.
//!
//! Every path a tool touches is confined beneath the worktree root by the kernel
//! ([`confine`]); every write is judged by the [`Policy`] and recorded as
//! an event; no mutating tool runs before `update_plan`. A failure the model can act on is
//! [`ToolError::ToModel`] — a message back to the model — while only harness faults are
//! [`ToolError::Fatal`] and end the run. Results are sized for a model: reads carry line
//! numbers, long output is cut to head and tail with a note of what was cut.
//!
//! This module must not run processes, talk to models or write git objects. The `run` tool
//! is composed by the run loop from `exec`, registered with [`Registry::register`], and judges
//! every command line with [`authorize_command`], the one command gate. `run_tests` and
//! `finish` are the run loop's own harness tools, never in a registry. A tool's spec is the
//! model layer's [`ToolSpec`], so what the registry lists is what a request carries.

// openat2/mkdirat/renameat on descriptors: file access confined to the worktree.
#[allow(unsafe_code)]
pub mod confine;
pub mod edit;
mod error;
mod files;
mod output;
mod plan;
mod search;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde::Serialize;

pub use error::{Result, ToolError};
pub use files::{DeleteFile, EditFile, ListFiles, ReadFile, WriteFile};
pub use output::{OutputLimits, fit};
pub use plan::{ChangeAction, FileChange, Plan, PlanState, PlanStep, StepStatus, UpdatePlan};
pub use search::Search;

/// A tool as a model provider is told about it: the model layer's one type, so the specs the
/// registry gives are the specs a request carries.
pub use crate::model::ToolSpec;
use crate::policy::{Approval, Policy, PolicyEvent};

/// What a tool call returns to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The text the model sees, already sized for it.
    pub content: String,
}

impl ToolOutput {
    /// A text result.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
        }
    }
}

/// The future a tool call returns.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = Result<ToolOutput>> + Send + 'a>>;

/// A tool the model may call. Object-safe, held as `Arc<dyn Tool>`.
pub trait Tool: Send + Sync {
    /// The name the model calls it by.
    fn name(&self) -> &str;
    /// What it does, for the model.
    fn description(&self) -> &str;
    /// JSON Schema of its arguments (an `object` schema).
    fn parameters(&self) -> serde_json::Value;
    /// Whether it changes the worktree (and so needs a plan first).
    fn mutating(&self) -> bool;
    /// Run it.
    fn call<'a>(&'a self, ctx: &'a ToolContext, args: serde_json::Value) -> ToolFuture<'a>;
}

/// What tools report for the audit log, as data. The run turns these into audit events.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ToolEvent {
    /// A policy judgment (`kind = "policy"`).
    Policy(PolicyEvent),
    /// The plan was set or changed.
    PlanUpdated(Plan),
    /// A file in the worktree was created, modified or deleted.
    FileChanged(FileChange),
    /// A tool was refused because no plan exists yet.
    PlanGate {
        /// The tool that was refused.
        tool: String,
    },
}

/// Where tools send their events. The run's implementation appends them to the audit log.
pub trait EventSink: Send + Sync {
    /// Record one event.
    fn record(&self, event: ToolEvent);
}

/// An event sink that keeps events in memory, in order.
#[derive(Debug, Default)]
pub struct MemorySink {
    events: Mutex<Vec<ToolEvent>>,
}

impl MemorySink {
    /// Take the events recorded so far.
    pub fn take(&self) -> Vec<ToolEvent> {
        match self.events.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        }
    }
}

impl EventSink for MemorySink {
    fn record(&self, event: ToolEvent) {
        match self.events.lock() {
            Ok(mut g) => g.push(event),
            Err(p) => p.into_inner().push(event),
        }
    }
}

/// Everything a tool call may use: the confined worktree, the policy, the plan, approvals and
/// the event sink. One per run; shared by every call.
pub struct ToolContext {
    root: confine::Root,
    /// The run's policy.
    pub policy: Arc<Policy>,
    /// The plan and the changes made so far.
    pub plan: Arc<Mutex<PlanState>>,
    /// Approvals given so far (the `run` tool consults them).
    pub approvals: Arc<Mutex<Vec<Approval>>>,
    /// Where events go.
    pub events: Arc<dyn EventSink>,
    /// Output size limits.
    pub limits: OutputLimits,
    /// Project paths every command sees read-only (the set-up's outputs, `node_modules`):
    /// a tool's write there would be hidden from every command by the mount, so it is
    /// refused instead.
    pub read_only: Arc<Mutex<Vec<String>>>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("root", &self.root.path())
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// A context for the worktree at `worktree`.
    pub fn new(
        worktree: &Path,
        policy: Arc<Policy>,
        events: Arc<dyn EventSink>,
    ) -> std::io::Result<Self> {
        Ok(Self {
            root: confine::Root::open(worktree)?,
            policy,
            plan: Arc::new(Mutex::new(PlanState::default())),
            approvals: Arc::new(Mutex::new(Vec::new())),
            events,
            limits: OutputLimits::default(),
            read_only: Arc::new(Mutex::new(Vec::new())),
        })
    }

    /// The read-only project path `rel` (worktree-relative) is inside, if any.
    pub fn read_only_at(&self, rel: &str) -> Option<String> {
        let ro = match self.read_only.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        ro.into_iter().find(|r| {
            rel == r
                || rel
                    .strip_prefix(r.as_str())
                    .is_some_and(|t| t.starts_with('/'))
        })
    }

    /// The confined worktree root.
    pub fn root(&self) -> &confine::Root {
        &self.root
    }

    /// Run `f` on the plan state.
    pub fn with_plan<T>(&self, f: impl FnOnce(&mut PlanState) -> T) -> T {
        match self.plan.lock() {
            Ok(mut g) => f(&mut g),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    /// Approvals given so far.
    pub fn approvals(&self) -> Vec<Approval> {
        match self.approvals.lock() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Record an event.
    pub fn record(&self, event: ToolEvent) {
        self.events.record(event);
    }
}

/// The tools of a run, by name.
#[derive(Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The built-in tools of this module: `read_file`, `list_files`, `search`, `update_plan`,
    /// `edit_file`, `write_file`, `delete_file`. The run adds `run`.
    pub fn builtin() -> Self {
        let mut r = Self::new();
        r.register(Arc::new(ReadFile));
        r.register(Arc::new(ListFiles));
        r.register(Arc::new(Search));
        r.register(Arc::new(UpdatePlan));
        r.register(Arc::new(EditFile));
        r.register(Arc::new(WriteFile));
        r.register(Arc::new(DeleteFile));
        r
    }

    /// Add (or replace) a tool.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    /// A tool by name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The specs to send to a model, in name order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .values()
            .map(|t| ToolSpec {
                name: t.name().to_string(),
                description: t.description().to_string(),
                parameters: t.parameters(),
            })
            .collect()
    }

    /// Call a tool by name, enforcing the plan gate: no mutating tool before `update_plan`.
    pub async fn dispatch(
        &self,
        ctx: &ToolContext,
        name: &str,
        args: serde_json::Value,
    ) -> Result<ToolOutput> {
        let Some(tool) = self.tools.get(name) else {
            return Err(ToolError::ToModel(format!(
                "there is no tool `{name}`; the tools are: {}",
                self.tools.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        };
        if tool.mutating() && ctx.with_plan(|p| p.plan.is_none()) {
            ctx.record(ToolEvent::PlanGate {
                tool: name.to_string(),
            });
            return Err(ToolError::ToModel(format!(
                "`{name}` changes files, and no plan exists yet: call update_plan first with the steps and the files each step will touch"
            )));
        }
        tool.call(ctx, args).await
    }
}

/// Judge a command line for the `run` tool (or any tool that runs commands): the verdict is
/// recorded as a policy event; `forbid` goes back to the model, `ask` (without a matching
/// approval in the context) becomes [`ToolError::AwaitingApproval`] carrying the pending
/// [`Approval`] for the run to persist; `allow` returns the verdict so the caller can run the
/// command (and record its risk).
pub fn authorize_command(
    ctx: &ToolContext,
    tool: &str,
    line: &str,
) -> Result<crate::policy::CommandVerdict> {
    let verdict = ctx.policy.judge_command(line, &ctx.approvals());
    ctx.record(ToolEvent::Policy(PolicyEvent::Command(verdict.clone())));
    match verdict.decision {
        crate::config::Decision::Allow => Ok(verdict),
        crate::config::Decision::Forbid => Err(ToolError::ToModel(verdict.message())),
        crate::config::Decision::Ask => Err(ToolError::AwaitingApproval(Box::new(
            verdict.approval_request(tool),
        ))),
    }
}

/// Parse a tool's arguments, or tell the model what was wrong with them.
pub(crate) fn parse_args<T: serde::de::DeserializeOwned>(
    tool: &str,
    args: serde_json::Value,
) -> Result<T> {
    serde_json::from_value(args)
        .map_err(|e| ToolError::ToModel(format!("invalid arguments for {tool}: {e}")))
}
