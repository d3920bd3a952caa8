//! The reviewer: once the tests pass, a second model reads the verified diff against the
//! plan. A blocking finding sends the run back to fixing, once; the tests still decide
//! success. A reviewer that cannot be had is noted, never fatal.

use serde_json::json;

use super::error::{Error, Result};
use super::ledger::Ledger;
use super::report::{Review, ReviewFinding};
use super::{prompt, turn};
use crate::audit::chain::Kind;
use crate::model::{Message, Role, ToolSpec};

/// How much of the diff the reviewer reads, in characters.
const REVIEW_DIFF_CHARS: usize = 48 * 1024;

/// Whether a reviewer was asked for: set in config or by a `--model reviewer=` flag (a bare
/// model spec fills the role but does not turn the review on).
pub(super) fn enabled(led: &Ledger<'_>) -> bool {
    led.svc.config.settings.models.reviewer.is_some()
        || led
            .rec
            .model_flags
            .iter()
            .any(|f| f.trim_start().starts_with("reviewer="))
}

/// Ask the reviewer about the verified diff, once per run. Returns true when a blocking
/// finding sends the run back to fixing (the findings are then the model's next message).
pub(super) async fn review(led: &mut Ledger<'_>) -> Result<bool> {
    if !enabled(led) || led.rec.review.is_some() {
        return Ok(false);
    }
    let Some(head) = led.rec.commits.last().cloned() else {
        return Ok(false);
    };
    let svc = led.svc;
    let repo = &svc.repo;
    let diff = repo
        .diff(repo.resolve(&led.rec.base_sha)?, repo.resolve(&head)?)?
        .unified();
    let plan = led
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
    let msg = prompt::review_message(&led.rec.task.goal, &plan, &diff, REVIEW_DIFF_CHARS);
    let model = svc
        .router
        .spec(Role::Reviewer)
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut review = Review {
        model,
        ..Review::default()
    };
    match turn::ask(
        led,
        Role::Reviewer,
        prompt::reviewer_system(),
        vec![Message::user(msg)],
        vec![review_spec()],
    )
    .await
    {
        Ok(reply) => review.findings = parse_review(&reply),
        Err(Error::Model(e)) => review.error = Some(e.to_string()),
        Err(e) => return Err(e),
    }
    let send_back = review.blocking();
    review.sent_back = send_back;
    led.audit(Kind::Verify, json!({"review": review}))?;
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
        led.push(Message::user(format!(
            "The tests pass, but a reviewer found blocking problems:\n{findings}\nFix them, \
             then call finish again. The tests decide success as before."
        )));
    }
    led.rec.review = Some(review);
    led.save()?;
    Ok(send_back)
}

/// The reviewer's one tool: its findings on the verified diff.
fn review_spec() -> ToolSpec {
    ToolSpec {
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
fn parse_review(reply: &crate::model::Reply) -> Vec<ReviewFinding> {
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
mod tests {
    use super::super::fixture::{World, git};
    use super::super::setup::Workbench;
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

    /// Commit `value.txt` = 2 as the run's checkpoint, as a verified run would have.
    fn verified(led: &mut Ledger<'_>) {
        let bench = Workbench::prepare(led, false).unwrap();
        std::fs::write(bench.worktree.path().join("value.txt"), "2\n").unwrap();
        super::super::checkpoint::commit(led, &bench, "verified").unwrap();
        assert_eq!(led.rec.commits.len(), 1);
        assert!(git(bench.worktree.path(), &["status", "--short"]).is_empty());
    }

    #[tokio::test]
    async fn no_reviewer_asked_for_means_no_review() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        verified(&mut led);
        assert!(!enabled(&led));
        assert!(!review(&mut led).await.unwrap());
        assert!(led.rec.review.is_none());
        assert_eq!(led.rec.turns, 0);
    }

    #[tokio::test]
    async fn a_blocking_finding_sends_the_run_back_once_with_the_findings() {
        let w = World::new(&[
            json!({"role": "reviewer", "expect": "value.txt", "tool_calls": [
                {"name": "submit_review", "arguments": {"findings": [
                    {"severity": "blocking", "file": "value.txt", "message": "two is not enough"}
                ]}}
            ]}),
        ]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        led.rec.model_flags.push("reviewer=scripted:x".into());
        assert!(enabled(&led));
        verified(&mut led);
        assert!(review(&mut led).await.unwrap());
        let r = led.rec.review.clone().unwrap();
        assert!(r.sent_back && r.error.is_none());
        let Some(Message::User { content, .. }) = led.messages().last() else {
            panic!("the findings go to the coder: {:?}", led.messages());
        };
        assert!(
            content.contains("- value.txt: two is not enough"),
            "{content}"
        );
        // Once per run: the second time nothing is asked.
        assert!(!review(&mut led).await.unwrap());
        assert_eq!(led.rec.turns, 1);
    }

    #[tokio::test]
    async fn a_reviewer_that_cannot_be_had_is_noted_not_fatal() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        led.rec.model_flags.push("reviewer=scripted:x".into());
        verified(&mut led);
        assert!(!review(&mut led).await.unwrap());
        let r = led.rec.review.clone().unwrap();
        assert!(r.error.is_some() && !r.sent_back, "{r:?}");
    }
}
