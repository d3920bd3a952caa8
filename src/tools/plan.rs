//! The plan: `update_plan`, and the record of which changes the plan named.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{Result, Tool, ToolContext, ToolError, ToolEvent, ToolFuture, ToolOutput, parse_args};

/// Status of one plan step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    #[default]
    Pending,
    /// Being worked on.
    InProgress,
    /// Finished.
    Done,
    /// Dropped.
    Skipped,
}

/// One step of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanStep {
    /// What the step does.
    pub title: String,
    /// Files (or directories, ending in `/`) it will touch, worktree-relative.
    #[serde(default)]
    pub files: Vec<String>,
    /// Its status.
    #[serde(default)]
    pub status: StepStatus,
    /// The step changes existing tests on purpose (the request is about the tests). The
    /// held-out check then asks a person instead of failing the run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub changes_tests: bool,
}

/// The plan, as the model last gave it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Steps, in order.
    pub steps: Vec<PlanStep>,
    /// Risks the model sees.
    #[serde(default)]
    pub risks: Vec<String>,
    /// The command that verifies the change, if the model proposes one.
    #[serde(default)]
    pub test_command: Option<String>,
}

impl PlanStep {
    /// Whether this step names `path` (or a directory above it).
    pub fn names(&self, path: &str) -> bool {
        self.files.iter().any(|f| {
            let f = f.trim_start_matches("./").trim_end_matches('/');
            path == f || path.strip_prefix(f).is_some_and(|r| r.starts_with('/'))
        })
    }
}

impl Plan {
    /// Whether the plan names `path` (or a directory above it).
    pub fn names(&self, path: &str) -> bool {
        self.steps.iter().any(|s| s.names(path))
    }

    /// Settle each step's status by what the branch holds (`changed`: the paths the
    /// committed change touches): a step naming one of them is done; a step the model called
    /// done whose files none changed is pending again (its edits were never verified and
    /// committed, or never made). A step naming no file, or skipped, keeps the model's word.
    /// So the report's checkboxes say what happened, not what the model last claimed.
    pub fn settle(&mut self, changed: &[String]) {
        for s in &mut self.steps {
            if s.files.is_empty() || s.status == StepStatus::Skipped {
                continue;
            }
            if changed.iter().any(|p| s.names(p)) {
                s.status = StepStatus::Done;
            } else if s.status == StepStatus::Done {
                s.status = StepStatus::Pending;
            }
        }
    }
}

/// What happened to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeAction {
    /// Created.
    Created,
    /// Modified.
    Modified,
    /// Deleted.
    Deleted,
}

/// One change to the worktree, and whether the plan named the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Worktree-relative path.
    pub path: String,
    /// What happened.
    pub action: ChangeAction,
    /// Whether the plan named it (`false` is a plan deviation the report shows).
    pub planned: bool,
}

/// The plan and the changes made so far. The run persists it with the run record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanState {
    /// The plan, once `update_plan` was called.
    pub plan: Option<Plan>,
    /// Every change, in order.
    pub changes: Vec<FileChange>,
}

impl PlanState {
    /// Record a change and return it.
    pub fn record_change(&mut self, path: &str, action: ChangeAction) -> FileChange {
        let planned = self.plan.as_ref().is_some_and(|p| p.names(path));
        let change = FileChange {
            path: path.to_string(),
            action,
            planned,
        };
        self.changes.push(change.clone());
        change
    }

    /// Paths changed that the plan did not name, each once.
    pub fn unplanned(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in self.changes.iter().filter(|c| !c.planned) {
            if !out.contains(&c.path) {
                out.push(c.path.clone());
            }
        }
        out
    }
}

/// `update_plan`: set or revise the plan. Required before any mutating tool.
#[derive(Debug, Clone, Copy, Default)]
pub struct UpdatePlan;

impl Tool for UpdatePlan {
    fn name(&self) -> &str {
        "update_plan"
    }

    fn description(&self) -> &str {
        "Set or revise the plan: the steps, the files each step will touch, and their status. Call it before changing any file, and again as steps progress. Files changed outside the plan are allowed but reported as unplanned."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "title": {"type": "string", "description": "What this step does."},
                            "files": {"type": "array", "items": {"type": "string"}, "description": "Worktree-relative files (or directories ending in /) this step will change."},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "done", "skipped"]},
                            "changes_tests": {"type": "boolean", "description": "True only when the request is to change existing tests themselves; a person then approves the test changes."}
                        },
                        "required": ["title"],
                        "additionalProperties": false
                    }
                },
                "risks": {"type": "array", "items": {"type": "string"}, "description": "What could go wrong."},
                "test_command": {"type": "string", "description": "The command that verifies the change."}
            },
            "required": ["steps"],
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        false
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: serde_json::Value) -> ToolFuture<'a> {
        Box::pin(async move { update_plan(ctx, args) })
    }
}

fn update_plan(ctx: &ToolContext, args: serde_json::Value) -> Result<ToolOutput> {
    let mut plan: Plan = parse_args("update_plan", args)?;
    if plan.steps.is_empty() {
        return Err(ToolError::ToModel("a plan needs at least one step".into()));
    }
    for (i, step) in plan.steps.iter_mut().enumerate() {
        if step.title.trim().is_empty() {
            return Err(ToolError::ToModel(format!("step {} has no title", i + 1)));
        }
        for f in step.files.iter_mut() {
            let dir = f.ends_with('/');
            match crate::policy::lexical_relative(f) {
                Ok(p) => {
                    *f = p.to_string_lossy().into_owned();
                    if dir {
                        f.push('/');
                    }
                }
                Err(r) => {
                    return Err(ToolError::ToModel(format!(
                        "step {}: {}",
                        i + 1,
                        r.message(f)
                    )));
                }
            }
        }
    }
    let mut text = String::from("Plan recorded:\n");
    for (i, s) in plan.steps.iter().enumerate() {
        let mark = match s.status {
            StepStatus::Pending => "[ ]",
            StepStatus::InProgress => "[~]",
            StepStatus::Done => "[x]",
            StepStatus::Skipped => "[-]",
        };
        text.push_str(&format!("{mark} {}. {}", i + 1, s.title));
        if !s.files.is_empty() {
            text.push_str(&format!(" — {}", s.files.join(", ")));
        }
        text.push('\n');
    }
    text.push_str(&approval_notes(ctx, &plan));
    // Changes already made keep the `planned` they had when made: a plan revised afterwards
    // does not hide a deviation.
    ctx.with_plan(|st| st.plan = Some(plan.clone()));
    ctx.record(ToolEvent::PlanUpdated(plan));
    Ok(ToolOutput::text(text))
}

/// What the plan names that a person must approve before the change can be verified: the
/// test runner's configuration and what the project's set-up reads (issue 38), said when the
/// plan is made rather than discovered at the end.
fn approval_notes(ctx: &ToolContext, plan: &Plan) -> String {
    if ctx.policy.runner_config.0 == crate::config::Decision::Allow {
        return String::new();
    }
    let mut lines = Vec::new();
    for f in plan.steps.iter().flat_map(|s| &s.files) {
        let why = crate::policy::runner_config_by_name(f)
            .map(|w| format!("{w}, the test runner's configuration"))
            .or_else(|| {
                crate::verify::setup_input(f).map(|w| {
                    format!("{w}; the deciding runs then set the committed tree up afresh")
                })
            });
        if let Some(why) = why {
            let line = format!("- `{f}`: {why}\n");
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "These planned files need a person's approval before the change can be verified (change the code instead where you can):\n{}",
        lines.concat()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(files: &[&str], status: StepStatus) -> PlanStep {
        PlanStep {
            title: "t".into(),
            files: files.iter().map(|f| f.to_string()).collect(),
            status,
            changes_tests: false,
        }
    }

    /// Regression (issue 19): the report's boxes followed the model's word, so a run whose
    /// verified change touched every planned file showed `[ ]`, and a failed one `[x]`.
    #[test]
    fn settle_ticks_what_the_branch_changed_and_unticks_what_it_did_not() {
        let mut plan = Plan {
            steps: vec![
                step(&["src/lib.rs"], StepStatus::Pending),
                step(&["docs/"], StepStatus::InProgress),
                step(&["README.md"], StepStatus::Done),
                step(&[], StepStatus::Done),
                step(&["x.rs"], StepStatus::Skipped),
            ],
            ..Plan::default()
        };
        plan.settle(&["src/lib.rs".into(), "docs/guide/a.md".into(), "x.rs".into()]);
        let got: Vec<StepStatus> = plan.steps.iter().map(|s| s.status).collect();
        assert_eq!(
            got,
            [
                StepStatus::Done,
                StepStatus::Done,
                StepStatus::Pending,
                StepStatus::Done,
                StepStatus::Skipped
            ]
        );
    }
}
