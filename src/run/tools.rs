//! The tools the run composes from the executor and verification: `run` (a registry tool that
//! goes through [`crate::tools::authorize_command`], the one command gate), the harness tools
//! `run_tests` and `finish` ([`HarnessTool`]), which the loop answers itself because they move
//! the run's state, and the [`Toolset`] each conversation is offered.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::exec::{ExecRequest, Executor, Termination};
use crate::model::ToolSpec;
use crate::tools::{Registry, Tool, ToolContext, ToolError, ToolFuture, ToolOutput, fit};

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

/// The tools the loop answers itself, because they move the run's state (a test run, the
/// verdict) rather than the worktree. They are not in the [`Registry`]: the turn sees them by
/// this type before dispatching anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HarnessTool {
    /// `run_tests`: run the project's test command and hand the model a focused summary.
    RunTests,
    /// `finish`: the model declares the change complete; the harness verifies and decides.
    Finish,
}

impl HarnessTool {
    /// Every harness tool, in the order their specs are offered.
    pub const ALL: [HarnessTool; 2] = [HarnessTool::RunTests, HarnessTool::Finish];

    /// The name the model calls it by.
    pub fn name(self) -> &'static str {
        match self {
            HarnessTool::RunTests => "run_tests",
            HarnessTool::Finish => "finish",
        }
    }

    /// The harness tool a call names, if it names one.
    pub fn of(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// Its spec, as a model is told about it.
    pub fn spec(self) -> ToolSpec {
        match self {
            HarnessTool::RunTests => ToolSpec {
                name: self.name().into(),
                description: "Run the project's test command and get a focused summary of failures.".into(),
                parameters: json!({"type": "object", "properties": {}, "additionalProperties": false}),
            },
            HarnessTool::Finish => ToolSpec {
                name: self.name().into(),
                description: "Declare the change complete. The harness then runs the tests and decides success from their results.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"summary": {"type": "string", "description": "One paragraph on what changed and why."}},
                    "required": ["summary"],
                    "additionalProperties": false
                }),
            },
        }
    }
}

/// Which tools a conversation is offered, and so which calls of it are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toolset {
    /// The planner's: the registry's tools that change nothing (read, list, search and
    /// `update_plan`); no command, no edit, no harness tool.
    ReadOnly,
    /// The coder's: every registry tool, then the harness tools.
    All,
}

impl Toolset {
    /// The specs to send with a request, in name order, harness tools last.
    pub fn specs(self, registry: &Registry) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = registry
            .specs()
            .into_iter()
            .filter(|s| self.allows(registry, &s.name))
            .collect();
        if self == Toolset::All {
            specs.extend(HarnessTool::ALL.map(HarnessTool::spec));
        }
        specs
    }

    /// Whether a call of `name` may run in this conversation.
    pub fn allows(self, registry: &Registry, name: &str) -> bool {
        match self {
            Toolset::All => true,
            Toolset::ReadOnly => registry.get(name).is_some_and(|t| !t.mutating()),
        }
    }
}

#[cfg(test)]
mod toolset_tests {
    use super::*;
    use crate::exec::{ExecOptions, LocalExecutor};

    fn registry(dir: &std::path::Path) -> Registry {
        let mut r = Registry::builtin();
        r.register(Arc::new(RunCommand {
            executor: Arc::new(LocalExecutor::new(dir, ExecOptions::default()).unwrap()),
        }));
        r
    }

    #[test]
    fn harness_tools_are_known_by_name_and_nothing_else_is() {
        for t in HarnessTool::ALL {
            assert_eq!(HarnessTool::of(t.name()), Some(t));
            assert_eq!(t.spec().name, t.name());
        }
        assert_eq!(HarnessTool::of("run"), None);
        assert_eq!(HarnessTool::of("Finish"), None);
    }

    #[test]
    fn the_planner_reads_and_plans_and_the_coder_gets_everything() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path());
        let names =
            |set: Toolset| -> Vec<String> { set.specs(&r).into_iter().map(|s| s.name).collect() };
        assert_eq!(
            names(Toolset::ReadOnly),
            ["list_files", "read_file", "search", "update_plan"]
        );
        for name in [
            "run",
            "edit_file",
            "write_file",
            "delete_file",
            "finish",
            "run_tests",
            "nope",
        ] {
            assert!(!Toolset::ReadOnly.allows(&r, name), "{name}");
        }
        let all = names(Toolset::All);
        assert_eq!(&all[all.len() - 2..], ["run_tests", "finish"]);
        assert!(all.contains(&"run".to_string()) && all.contains(&"edit_file".to_string()));
        assert_eq!(all.len(), 10);
    }

    /// The `run` tool judges its command by `tools::authorize_command`, the gate the policy
    /// tests test: a forbidden command never reaches the executor.
    #[tokio::test]
    async fn run_goes_through_the_one_command_gate() {
        let dir = tempfile::tempdir().unwrap();
        let r = registry(dir.path());
        let config = crate::config::Config::resolve(Vec::new()).unwrap();
        let policy = Arc::new(crate::policy::Policy::from_config(&config).unwrap());
        let sink = Arc::new(crate::tools::MemorySink::default());
        let ctx = ToolContext::new(dir.path(), policy, sink.clone()).unwrap();
        ctx.with_plan(|p| p.plan = Some(crate::tools::Plan::default()));
        let out = r.dispatch(&ctx, "run", json!({"command": "sudo ls"})).await;
        assert!(matches!(out, Err(ToolError::ToModel(_))), "{out:?}");
        let out = r
            .dispatch(&ctx, "run", json!({"command": "pip install requests"}))
            .await;
        assert!(
            matches!(out, Err(ToolError::AwaitingApproval(_))),
            "{out:?}"
        );
        let events = sink.take();
        assert!(
            matches!(
                events.as_slice(),
                [
                    crate::tools::ToolEvent::Policy(_),
                    crate::tools::ToolEvent::Policy(_)
                ]
            ),
            "{events:?}"
        );
    }
}
