//! The tools the run composes from the executor and verification: `run`, and the specs of
//! `run_tests` and `finish`, which the loop itself answers because they move the run's state.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::config::Decision;
use crate::exec::{ExecRequest, Executor, Termination};
use crate::policy::Approval;
use crate::tools::{Tool, ToolContext, ToolError, ToolEvent, ToolFuture, ToolOutput, fit};

/// Longest a `run` command may take when the model asks for more.
const MAX_RUN_SECONDS: u64 = 30 * 60;

/// `run`: a shell command in the worktree, judged by the command policy, run in the sandbox.
pub struct RunCommand {
    /// The sandboxed executor of this run's worktree.
    pub executor: Arc<dyn Executor>,
}

impl Tool for RunCommand {
    fn name(&self) -> &str {
        "run"
    }

    fn description(&self) -> &str {
        "Run a shell command in the repository's worktree (sandboxed: no network unless the \
         policy allows it, no secrets). Returns the exit status and the output, cut to head \
         and tail when long."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command line."},
                "timeout_s": {"type": "integer", "minimum": 1, "maximum": MAX_RUN_SECONDS, "description": "Wall-clock limit in seconds."}
            },
            "required": ["command"],
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: serde_json::Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let Some(command) = args.get("command").and_then(|c| c.as_str()) else {
                return Err(ToolError::ToModel(
                    "`command` (a string) is required".into(),
                ));
            };
            let verdict = ctx.policy.judge_command(command, &ctx.approvals());
            ctx.record(ToolEvent::Policy(crate::policy::PolicyEvent::Command(
                verdict.clone(),
            )));
            match verdict.decision {
                Decision::Forbid => {
                    return Err(ToolError::ToModel(format!(
                        "refused by policy: {}",
                        verdict.message()
                    )));
                }
                Decision::Ask => {
                    return Err(ToolError::AwaitingApproval(Box::new(Approval::pending(
                        "run",
                        command,
                        verdict.risk,
                        verdict.deciding_rules(),
                    ))));
                }
                Decision::Allow => {}
            }
            let timeout = args
                .get("timeout_s")
                .and_then(|t| t.as_u64())
                .map(|s| Duration::from_secs(s.clamp(1, MAX_RUN_SECONDS)));
            let mut req = ExecRequest::shell(command);
            req.timeout = timeout;
            let out = self
                .executor
                .run(req)
                .await
                .map_err(|e| ToolError::fatal("run", e))?;
            let status = match out.status {
                Termination::Exited(c) => format!("exit code {c}"),
                Termination::Signaled(s) => format!("killed by signal {s}"),
                Termination::TimedOut => "timed out (the whole process group was killed)".into(),
            };
            let mut text = format!("{status} after {:.1} s\n", out.duration.as_secs_f64());
            let stdout = out.stdout.to_text_lossy();
            let stderr = out.stderr.to_text_lossy();
            if !stdout.is_empty() {
                text.push_str("--- stdout\n");
                text.push_str(&fit(&stdout, ctx.limits.max_bytes));
            }
            if !stderr.is_empty() {
                text.push_str("\n--- stderr\n");
                text.push_str(&fit(&stderr, ctx.limits.max_bytes));
            }
            if !out.blocked_hosts.is_empty() {
                text.push_str(&format!(
                    "\nblocked network access to: {}",
                    out.blocked_hosts
                        .iter()
                        .map(|h| h.host.clone())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            Ok(ToolOutput::text(text))
        })
    }
}

/// Specs of the tools the loop answers itself.
pub fn harness_specs() -> Vec<crate::model::ToolSpec> {
    vec![
        crate::model::ToolSpec {
            name: "run_tests".into(),
            description: "Run the project's test command and get a focused summary of failures.".into(),
            parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        },
        crate::model::ToolSpec {
            name: "finish".into(),
            description: "Declare the change complete. The harness then runs the tests and decides success from their results.".into(),
            parameters: json!({
                "type": "object",
                "properties": {"summary": {"type": "string", "description": "One paragraph on what changed and why."}},
                "required": ["summary"],
                "additionalProperties": false
            }),
        },
    ]
}
