//! One turn of a conversation: the model call (counted, audited, transcribed) and the
//! dispatch of its tool calls to the registry, with the answer each call gets.
//!
//! The harness tools ([`HarnessTool`](super::tools::HarnessTool)) are not dispatched here: the
//! engine answers them, since they move the run's state. A call that needs a person's approval
//! pauses the run: [`dispatch`] records the pending approval and moves to
//! `awaiting_approval`.

use serde_json::json;
use tracing::Instrument as _;

use super::error::{Error, Result};
use super::ledger::Ledger;
use super::record::{PendingApproval, first_line};
use super::services::RunEvent;
use super::setup::Workbench;
use super::state::RunState;
use crate::audit::chain::Kind;
use crate::model::{self, Message, Request, Role, ToolCall, ToolSpec};
use crate::tools::ToolError;

/// What a dispatched call came to.
#[derive(Debug)]
pub(super) enum Dispatched {
    /// The answer for the model, and whether it reports a failure.
    Done {
        /// The text the model gets.
        text: String,
        /// Whether it is an error the model should act on.
        is_error: bool,
    },
    /// The call waits for a person's approval; the run is paused.
    Paused,
}

/// One model call of `role` on `messages`, counted, audited and transcribed.
pub(super) async fn ask(
    led: &mut Ledger<'_>,
    role: Role,
    system: String,
    messages: Vec<Message>,
    tools: Vec<ToolSpec>,
) -> Result<model::Reply> {
    let svc = led.svc;
    let max_out = svc.config.settings.budget.max_output_tokens.max(1);
    let mut req = Request::new(messages, max_out);
    req.system = Some(system);
    req.tools = tools;
    led.progress(RunEvent::Turn {
        role,
        n: led.rec.turns + 1,
    });
    let result = svc
        .router
        .call(role, &req, None)
        .instrument(tracing::debug_span!("model_call"))
        .await;
    let out = match result {
        Ok(out) => out,
        Err(e) => {
            led.audit(
                Kind::ModelCall,
                json!({"role": role.as_str(), "error": e.to_string()}),
            )?;
            return Err(e.into());
        }
    };
    led.rec.turns += 1;
    led.rec.roles_called.push(role);
    led.audit(
        Kind::ModelCall,
        serde_json::to_value(&out.record).unwrap_or_default(),
    )?;
    let _transcript = tracing::debug_span!("transcript").entered();
    let line = svc
        .redactor
        .clean_json(&out.transcript, false)
        .unwrap_or_default();
    led.transcribe(&line)?;
    led.progress(RunEvent::Spend {
        usd: svc.router.spent().usd,
    });
    Ok(out.reply)
}

/// A turn of the run's conversation: ask with the conversation so far and keep the reply in
/// it. The reply is saved with the turn's tool results: a crash before that re-asks this
/// turn, which resume makes consistent (the worktree goes back to the last checkpoint).
pub(super) async fn call(
    led: &mut Ledger<'_>,
    role: Role,
    system: String,
    tools: Vec<ToolSpec>,
) -> Result<model::Reply> {
    let messages = led.messages().to_vec();
    let reply = ask(led, role, system, messages, tools).await?;
    led.push(Message::from_reply(&reply));
    Ok(reply)
}

/// Give the model the answer to `call`, redacted, and audit an excerpt of it.
pub(super) fn tool_result(led: &mut Ledger<'_>, call: &ToolCall, content: &str, is_error: bool) {
    let content = led.svc.redactor.redact(content);
    let excerpt: String = content.chars().take(300).collect();
    if let Err(e) = led.audit(
        Kind::ToolResult,
        json!({"id": call.id, "name": call.name, "error": is_error, "excerpt": excerpt}),
    ) {
        tracing::error!(error = %e, "cannot audit a tool result");
    }
    led.push(Message::ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content,
        is_error,
    });
}

/// Run a registry tool call. A failure the model can act on is its answer; a call that
/// needs approval records the pending approval and moves the run to `awaiting_approval`
/// (the call stays unanswered until approved); a harness fault ends the run.
pub(super) async fn dispatch(
    led: &mut Ledger<'_>,
    bench: &Workbench,
    call: &ToolCall,
) -> Result<Dispatched> {
    led.audit(
        Kind::ToolCall,
        json!({"id": call.id, "name": call.name, "arguments": call.arguments}),
    )?;
    let detail = ["path", "command", "pattern"]
        .iter()
        .find_map(|k| call.arguments.get(*k).and_then(|v| v.as_str()))
        .unwrap_or("");
    led.progress(RunEvent::Tool {
        name: led.svc.redactor.redact(&call.name),
        detail: led.svc.redactor.clean(detail),
    });
    let Some(tool) = bench.registry.get(&call.name) else {
        return Ok(Dispatched::Done {
            text: format!("There is no tool `{}`.", call.name),
            is_error: true,
        });
    };
    let mutating = tool.mutating();
    let result = bench
        .registry
        .dispatch(&bench.ctx, &call.name, call.arguments.clone())
        .instrument(tracing::debug_span!("tool_dispatch"))
        .await;
    if mutating {
        // Whatever the call changed in the worktree is its doing (a command's writes too).
        let writer = match detail {
            "" => format!("{} {}", call.name, call.id),
            d => format!("{} {} ({})", call.name, call.id, first_line(d, 80)),
        };
        let writer = led.svc.redactor.redact(&writer);
        super::attribution::observe(led, &bench.worktree, &writer)?;
    }
    match result {
        Ok(out) => Ok(Dispatched::Done {
            text: out.content,
            is_error: false,
        }),
        Err(ToolError::ToModel(msg)) => Ok(Dispatched::Done {
            text: msg,
            is_error: true,
        }),
        Err(ToolError::AwaitingApproval(approval)) => {
            let resume_state = led.rec.state;
            led.audit(Kind::Approval, json!({"pending": approval}))?;
            led.rec.notes.push(format!(
                "{} to run `{}`. Approve with `git agent resume {} --approve`.",
                super::ledger::WAITING,
                approval.request.subject,
                led.rec.run_id
            ));
            led.rec.pending_approval = Some(PendingApproval {
                call_id: call.id.clone(),
                approval: *approval,
                resume_state,
                remaining: Vec::new(),
            });
            // The turn that made the call is kept (its later calls are saved by the caller
            // and run after this one).
            led.transition(RunState::AwaitingApproval)?;
            Ok(Dispatched::Paused)
        }
        Err(e @ ToolError::Fatal { .. }) => Err(Error::Tool(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::World;
    use super::super::record::files;
    use super::*;

    fn call_of(name: &str, args: serde_json::Value) -> ToolCall {
        ToolCall {
            id: format!("c-{name}"),
            name: name.into(),
            arguments: args,
        }
    }

    #[tokio::test]
    async fn a_turn_is_counted_audited_transcribed_and_kept_in_the_conversation() {
        let w = World::new(&[json!({"role": "coder", "content": "thinking"})]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        led.push(Message::user("go"));
        let reply = call(&mut led, Role::Coder, "sys".into(), Vec::new())
            .await
            .unwrap();
        assert_eq!(reply.content, "thinking");
        assert_eq!(
            (led.rec.turns, led.rec.roles_called.clone()),
            (1, vec![Role::Coder])
        );
        assert_eq!(led.messages().len(), 2);
        let transcript = std::fs::read_to_string(led.dir.join(files::TRANSCRIPT)).unwrap();
        assert_eq!(transcript.lines().count(), 1);
        assert_eq!(w.events(), ["turn coder 1"]);
        // The script is spent: the next call fails, is audited, and counts nothing.
        let err = call(&mut led, Role::Coder, "sys".into(), Vec::new())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Model(_)), "{err}");
        assert_eq!(led.rec.turns, 1);
        let log = crate::audit::chain::read(&led.dir.join(files::AUDIT)).unwrap();
        let calls: Vec<_> = log
            .events
            .iter()
            .filter(|e| e.kind == Kind::ModelCall)
            .collect();
        assert_eq!(calls.len(), 2);
        assert!(calls[1].data.get("error").is_some(), "{:?}", calls[1].data);
    }

    #[tokio::test]
    async fn calls_are_answered_refused_or_paused_for_approval() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        led.transition(RunState::Analyzing).unwrap();
        let bench = Workbench::prepare(&mut led, false).unwrap();
        let read = call_of("read_file", json!({"path": "value.txt"}));
        match dispatch(&mut led, &bench, &read).await.unwrap() {
            Dispatched::Done { text, is_error } => {
                assert!(!is_error && text.contains('1'), "{text}");
            }
            Dispatched::Paused => panic!("a read never pauses"),
        }
        let unknown = call_of("launch", json!({}));
        match dispatch(&mut led, &bench, &unknown).await.unwrap() {
            Dispatched::Done { text, is_error } => {
                assert!(is_error);
                assert_eq!(text, "There is no tool `launch`.");
            }
            Dispatched::Paused => panic!("an unknown tool never pauses"),
        }
        // The plan gate: no edit before update_plan, told to the model.
        let edit = call_of("write_file", json!({"path": "value.txt", "content": "2\n"}));
        assert!(matches!(
            dispatch(&mut led, &bench, &edit).await.unwrap(),
            Dispatched::Done { is_error: true, .. }
        ));
        bench
            .ctx
            .with_plan(|p| p.plan = Some(crate::tools::Plan::default()));
        let ask_first = call_of("run", json!({"command": "pip install requests"}));
        assert!(matches!(
            dispatch(&mut led, &bench, &ask_first).await.unwrap(),
            Dispatched::Paused
        ));
        assert_eq!(led.rec.state, RunState::AwaitingApproval);
        let pending = led.rec.pending_approval.clone().unwrap();
        assert_eq!(pending.call_id, "c-run");
        assert_eq!(pending.resume_state, RunState::Analyzing);
        assert!(
            led.rec.notes[0].contains("Waiting for approval"),
            "{:?}",
            led.rec.notes
        );
        assert_eq!(
            w.events(),
            [
                "state analyzing",
                "tool read_file",
                "tool launch",
                "tool write_file",
                "tool run",
                "state awaiting_approval"
            ]
        );
    }

    #[test]
    fn a_tool_result_is_redacted_before_the_model_or_the_log_sees_it() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        let c = call_of("read_file", json!({}));
        tool_result(&mut led, &c, &format!("token {}", World::SECRET), false);
        let Message::ToolResult { content, .. } = &led.messages()[0] else {
            panic!("a tool result");
        };
        assert!(!content.contains(World::SECRET), "{content}");
        led.persist().unwrap();
        let log = std::fs::read_to_string(led.dir.join(files::AUDIT)).unwrap();
        assert!(!log.contains(World::SECRET));
    }
}
