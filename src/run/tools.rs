//! The tools the run composes from the executor and verification: `run`, and the specs of
//! `run_tests` and `finish`, which the loop itself answers because they move the run's state.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::exec::{ExecRequest, Executor, Termination};
use crate::tools::{Tool, ToolContext, ToolError, ToolFuture, ToolOutput, fit};

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
            // The one policy gate every command-running tool shares.
            crate::tools::authorize_command(ctx, "run", command)?;
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
            if let Some(why) = &out.stopped {
                text.push_str(&format!("{why}\n"));
            }
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

/// The reviewer's one tool: its findings on the verified diff.
pub fn review_spec() -> crate::model::ToolSpec {
    crate::model::ToolSpec {
        name: "submit_review".into(),
        description: "Report your review of the diff: an empty list approves it.".into(),
        parameters: json!({
            "type": "object",
            "properties": {"findings": {"type": "array", "items": {
                "type": "object",
                "properties": {
                    "severity": {"type": "string", "enum": ["blocking", "note"], "description": "blocking: the change is wrong or incomplete against the plan and must be fixed; note: worth saying, not blocking."},
                    "file": {"type": "string"},
                    "message": {"type": "string"}
                },
                "required": ["severity", "message"],
                "additionalProperties": false
            }}},
            "required": ["findings"],
            "additionalProperties": false
        }),
    }
}

/// Read the reviewer's findings from its reply: the `submit_review` call, or its text as a
/// note when it answered without the tool. Junk never blocks: an unknown severity is a note.
pub fn parse_review(reply: &crate::model::Reply) -> Vec<super::report::ReviewFinding> {
    use super::report::ReviewFinding;
    let Some(call) = reply.tool_calls.iter().find(|c| c.name == "submit_review") else {
        let text = reply.content.trim();
        return if text.is_empty() {
            Vec::new()
        } else {
            vec![ReviewFinding {
                severity: "note".into(),
                file: None,
                message: text.chars().take(2000).collect(),
            }]
        };
    };
    let items = call
        .arguments
        .get("findings")
        .and_then(|f| f.as_array())
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .take(50)
        .filter_map(|f| {
            let message = f.get("message")?.as_str()?.trim();
            if message.is_empty() {
                return None;
            }
            let severity = match f.get("severity").and_then(|s| s.as_str()) {
                Some("blocking") => "blocking",
                _ => "note",
            };
            Some(ReviewFinding {
                severity: severity.into(),
                file: f
                    .get("file")
                    .and_then(|p| p.as_str())
                    .map(|p| p.chars().take(300).collect()),
                message: message.chars().take(2000).collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod review_tests {
    use super::*;
    use crate::model::{Reply, ToolCall};

    fn reply(args: serde_json::Value) -> Reply {
        Reply {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "c".into(),
                name: "submit_review".into(),
                arguments: args,
            }],
            usage: Default::default(),
            stop: crate::model::StopReason::ToolUse,
            model: "m".into(),
        }
    }

    #[test]
    fn findings_are_read_and_junk_never_blocks() {
        let f = parse_review(&reply(json!({"findings": [
            {"severity": "blocking", "file": "src/a.rs", "message": "misses the negative case"},
            {"severity": "CRITICAL!!", "message": "unknown severity"},
            {"severity": "blocking", "message": "  "},
            {"message": 7}
        ]})));
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].severity, "blocking");
        assert_eq!(f[0].file.as_deref(), Some("src/a.rs"));
        assert_eq!(f[1].severity, "note");
        assert!(parse_review(&reply(json!("nonsense"))).is_empty());
        let mut text = reply(json!({}));
        text.tool_calls.clear();
        text.content = "Looks fine to me".into();
        let f = parse_review(&text);
        assert_eq!((f.len(), f[0].severity.as_str()), (1, "note"));
    }
}
