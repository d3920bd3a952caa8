//! The run's progress comment: what it shows at each state, and writing it over in place.

use super::super::record::RunRecord;
use super::super::services::Services;
use super::super::state::RunState;
use super::key_marker;
use crate::forge::Forge;
use crate::task::RepoRef;
use crate::tools::StepStatus;

/// What the progress comment shows.
struct ProgressView<'a> {
    run_id: &'a str,
    key: &'a str,
    record: Option<&'a RunRecord>,
    budget_usd: f64,
    pr_url: Option<&'a str>,
    /// The full report, shown folded when there is no PR to hold it (plan-only runs).
    report: Option<&'a str>,
    error: Option<&'a str>,
}

fn state_line(state: RunState) -> &'static str {
    match state {
        RunState::Queued => "⏳ queued",
        RunState::Analyzing => "🔎 analyzing the repository",
        RunState::Planning => "🗺️ planning",
        RunState::Editing => "✏️ editing",
        RunState::Testing => "🧪 testing",
        RunState::Fixing => "🔧 fixing failing tests",
        RunState::AwaitingApproval => "✋ awaiting approval",
        RunState::Succeeded => "✅ succeeded",
        RunState::Failed => "❌ failed",
        RunState::Cancelled => "⏹️ cancelled",
        RunState::BudgetExhausted => "💸 budget exhausted",
        RunState::EnvironmentFailed => "🧰 the tests could not run",
    }
}

/// The progress comment's text (the forge adds its run marker).
fn progress_body(v: &ProgressView<'_>) -> String {
    let state = v.record.map_or(RunState::Queued, |r| r.state);
    let mut out = format!(
        "{}\n**git-agent** run `{}` — {}\n",
        key_marker(v.key),
        v.run_id,
        state_line(state)
    );
    if let Some(rec) = v.record {
        if let Some(plan) = &rec.plan {
            out.push_str("\n**Plan**\n");
            for (i, s) in plan.steps.iter().enumerate() {
                let mark = match s.status {
                    StepStatus::Done => "[x]",
                    StepStatus::Skipped => "[~]",
                    StepStatus::Pending | StepStatus::InProgress => "[ ]",
                };
                out.push_str(&format!("- {mark} {}. {}\n", i + 1, s.title.trim()));
            }
        }
        let (usd, unknown) = rec.spend();
        out.push_str(&format!(
            "\nSpend: ${usd:.2}{} of ${:.2} · {} model call(s) · branch `{}`\n",
            if unknown { " + unpriced" } else { "" },
            v.budget_usd,
            rec.turns,
            rec.branch
        ));
        if let Some(last) = rec.verification.last() {
            out.push_str(&format!("Tests ({}): {}\n", last.when, last.result));
        }
        if state.is_terminal() || state == RunState::AwaitingApproval {
            for n in &rec.notes {
                out.push_str(&format!("\n> {}\n", n.replace('\n', "\n> ")));
            }
        }
    }
    if state == RunState::AwaitingApproval {
        out.push_str("\nReply `/agent approve` to let the run continue.\n");
    }
    if let Some(url) = v.pr_url {
        out.push_str(&format!("\nDraft pull request: {url}\n"));
    }
    if let Some(e) = v.error {
        out.push_str(&format!("\nThe run stopped on an error: `{e}`\n"));
    }
    if let Some(report) = v.report {
        out.push_str(&format!(
            "\n<details><summary>Report</summary>\n\n{report}\n\n</details>\n"
        ));
    }
    out
}

/// The run's one progress comment in its conversation, written over as the run goes.
pub(super) struct Progress<'a> {
    pub(super) svc: &'a Services,
    pub(super) forge: &'a dyn Forge,
    pub(super) convo: Option<(RepoRef, u64)>,
    pub(super) run_id: &'a str,
    pub(super) key: String,
}

impl Progress<'_> {
    /// Write the comment (a courtesy: a forge failure is logged); its URL when written.
    pub(super) async fn show(
        &self,
        record: Option<RunRecord>,
        pr_url: Option<String>,
        report: Option<String>,
        error: Option<String>,
    ) -> Option<String> {
        let (repo_ref, number) = self.convo.as_ref()?;
        let body = progress_body(&ProgressView {
            run_id: self.run_id,
            key: &self.key,
            record: record.as_ref(),
            budget_usd: self.svc.config.settings.budget.max_usd,
            pr_url: pr_url.as_deref(),
            report: report.as_deref(),
            error: error.as_deref(),
        });
        let body = self.svc.redactor.clean(&body);
        match self
            .forge
            .upsert_progress(repo_ref, *number, self.run_id, &body)
            .await
        {
            Ok(c) => Some(c.html_url),
            Err(e) => {
                tracing::warn!(error = %e, "cannot write the progress comment");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_progress_names_the_run_and_carries_the_key() {
        let body = progress_body(&ProgressView {
            run_id: "01JD",
            key: "o/r#1:fix",
            record: None,
            budget_usd: 5.0,
            pr_url: None,
            report: None,
            error: None,
        });
        assert!(body.contains("run `01JD` — ⏳ queued"), "{body}");
        assert!(body.contains(&key_marker("o/r#1:fix")));
    }
}
