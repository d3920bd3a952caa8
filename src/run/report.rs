//! The pull request description, rendered from the run record alone.
//!
//! Sections, in order: summary · plan (each step's status; changes outside the plan marked)
//! · changes (diffstat) · verification (every command, exit code, duration, decisive lines,
//! before and after) · review (when a reviewer is configured) · cost (per role and model) · audit trail (collapsed) · how to
//! reproduce. The result never exceeds [`MAX_BODY`] characters: long parts are cut with a
//! pointer to the full record. The text passes the redactor before it leaves the process;
//! that is the caller's job (the renderer is pure).

use serde::{Deserialize, Serialize};

/// GitHub's limit on a pull request body, in characters.
pub const MAX_BODY: usize = 65_536;

pub use crate::tools::{PlanStep as PlanLine, StepStatus};

/// One run of the verification command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyLine {
    /// `before`, `attempt 1`, …, `final`.
    pub when: String,
    /// The command.
    pub command: String,
    /// Exit code (`None` when killed by a signal or time-out).
    pub exit_code: Option<i32>,
    /// Duration in milliseconds.
    pub duration_ms: u64,
    /// One-line result, e.g. `2 failed: a, b` or `148 passed; the 2 that failed before now pass`.
    pub result: String,
    /// The decisive lines of output (failure excerpts), already cut to size.
    pub excerpt: String,
}

/// Spend of one role on one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostLine {
    /// Role (`planner`, `coder`, …).
    pub role: String,
    /// `PROVIDER:MODEL`.
    pub model: String,
    /// Input tokens.
    pub tokens_in: u64,
    /// Output tokens.
    pub tokens_out: u64,
    /// USD, `None` when the model's price is unknown.
    pub cost_usd: Option<f64>,
}

/// One finding of the reviewer model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReviewFinding {
    /// `blocking` (sends the run back to fixing once) or `note`.
    pub severity: String,
    /// The file it is about, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// What the reviewer found.
    pub message: String,
}

/// What the reviewer said of the verified diff.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Review {
    /// `PROVIDER:MODEL` of the reviewer.
    pub model: String,
    /// Its findings (none: it approved).
    pub findings: Vec<ReviewFinding>,
    /// Whether a blocking finding sent the run back to fixing (at most once).
    pub sent_back: bool,
    /// Why the review could not be had, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Review {
    /// Whether any finding blocks.
    pub fn blocking(&self) -> bool {
        self.findings.iter().any(|f| f.severity == "blocking")
    }
}

/// One test file the change touched, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestFileChange {
    /// Repository-relative path.
    pub path: String,
    /// How it changed (`deleted`, `skip/xfail marker added`, …); empty: nothing of note.
    pub how: Vec<String>,
}

/// The integrity of the final verification (issue 18): what shows that the tests that passed
/// are the project's tests, run on what is committed, and that they showed the problem.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Integrity {
    /// Test files the change touched, with how.
    pub test_files: Vec<TestFileChange>,
    /// Runner configuration the change touched: why it counts and what became of it.
    pub runner_config: Vec<String>,
    /// Code the change makes behave differently under test, and who let it (issue 40).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub under_test: Vec<String>,
    /// The run in a fresh checkout of what is committed (`None`: it did not run).
    pub clean_tree: Option<String>,
    /// The base revision's versions of the changed test files run against the new code, or
    /// why that did not run.
    pub held_out: Option<String>,
    /// The test that reproduces the problem (fails on the base code, passes after), or why
    /// there is none.
    pub reproduction: Option<String>,
    /// Whether a test showed the problem before the change: a baseline failure, or a
    /// reproduction test.
    pub reproduced: bool,
    /// Files left out of the commit because only the test command wrote them.
    pub excluded: Vec<String>,
    /// The environment the deciding runs had: the base's, or a fresh set-up of the committed
    /// tree when the change touches what set-up reads (`None`: no set-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// Tests that failed before and still fail, unrelated to the change (not blocking).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preexisting: Vec<String>,
    /// Tests that failed in the baseline but passed on their own (left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flaky: Vec<String>,
    /// The commands ran with `sandbox.mode = "off"`: nothing kept the clean checkout's run
    /// apart from what earlier commands left on the machine (a file in the shared `/tmp`, a
    /// daemon still running), so a pass there is not called verified.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unconfined: bool,
    /// Every check passed.
    pub passed: bool,
}

/// Everything the report shows; built from the run record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportInput {
    /// Run id.
    pub run_id: String,
    /// Final (or current) state, e.g. `succeeded`.
    pub state: String,
    /// `Fixes #42`-style link to the request, if any.
    pub fixes: Option<String>,
    /// One-paragraph summary (the model's `finish` summary or the harness's account).
    pub summary: String,
    /// The plan.
    pub plan: Vec<PlanLine>,
    /// Changed files the plan did not name.
    pub unplanned: Vec<String>,
    /// `git diff --stat`-like text.
    pub diffstat: String,
    /// Verification runs in order.
    pub verification: Vec<VerifyLine>,
    /// The sandbox the commands ran in, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The project's environment set-up, in one line (issue 19).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// The final verification's integrity checks (`None` before one ran, and in records
    /// older than them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<Integrity>,
    /// The reviewer's findings, when a reviewer is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Review>,
    /// Spend per role and model.
    pub cost: Vec<CostLine>,
    /// The budget in USD.
    pub budget_usd: f64,
    /// What was left undone or why the run stopped (failure, budget, pending approval).
    pub notes: Vec<String>,
    /// One line per audit event.
    pub audit: Vec<String>,
    /// Hash at the head of the audit chain.
    pub audit_head: String,
    /// The branch with the commits.
    pub branch: String,
    /// The base as asked (`HEAD`, `main`): the report says what the run started from, since
    /// a base other than the one a person expected explains every edit that then misses.
    #[serde(default)]
    pub base_ref: String,
    /// The base commit.
    #[serde(default)]
    pub base_sha: String,
}

fn fmt_duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 120_000 {
        format!("{:.0} s", ms as f64 / 1000.0)
    } else {
        format!("{:.1} min", ms as f64 / 60_000.0)
    }
}

fn fmt_tokens(n: u64) -> String {
    if n >= 1000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

/// Make text safe inside a Markdown table cell or inline code.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Cut `s` to at most `max` characters at a line boundary, saying what was cut.
fn cut(s: &str, max: usize, pointer: &str) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out = String::new();
    for line in s.lines() {
        if out.chars().count() + line.chars().count() + 1 + 80 > max {
            break;
        }
        out.push_str(line);
        out.push('\n');
    }
    let dropped = s.lines().count() - out.lines().count();
    out.push_str(&format!("… {dropped} more lines cut; {pointer}\n"));
    out
}

/// The integrity block of the verification section.
fn integrity_block(i: &Integrity) -> String {
    let or = |v: &Option<String>, none: &str| v.as_deref().map_or(none.to_string(), cell);
    let mut out = String::from("\n**Integrity**\n");
    if i.unconfined {
        out.push_str("- Sandbox: off — every command, the clean checkout's included, ran unconfined on this machine\n");
    }
    out.push_str(&format!(
        "- Clean checkout of what is committed: {}\n",
        or(&i.clean_tree, "did not run")
    ));
    out.push_str(&format!(
        "- Held-out tests (the base's test files, the new code): {}\n",
        or(&i.held_out, "did not run")
    ));
    out.push_str(&format!(
        "- Reproduction: {}\n",
        or(&i.reproduction, "did not run")
    ));
    if i.test_files.is_empty() {
        out.push_str("- Test files changed: none\n");
    } else {
        let files: Vec<String> = i
            .test_files
            .iter()
            .map(|t| {
                if t.how.is_empty() {
                    format!("`{}`", cell(&t.path))
                } else {
                    format!("`{}` ({})", cell(&t.path), cell(&t.how.join(", ")))
                }
            })
            .collect();
        out.push_str(&format!("- Test files changed: {}\n", files.join("; ")));
    }
    if i.runner_config.is_empty() {
        out.push_str("- Runner configuration changed: none\n");
    } else {
        let lines: Vec<String> = i.runner_config.iter().map(|l| cell(l)).collect();
        out.push_str(&format!(
            "- Runner configuration changed: {}\n",
            lines.join("; ")
        ));
    }
    if !i.under_test.is_empty() {
        let lines: Vec<String> = i.under_test.iter().map(|l| cell(l)).collect();
        out.push_str(&format!(
            "- Behaves differently under test: {}\n",
            lines.join("; ")
        ));
    }
    if let Some(env) = &i.environment {
        out.push_str(&format!(
            "- Environment of the deciding runs: {}\n",
            cell(env)
        ));
    }
    if !i.preexisting.is_empty() {
        let names: Vec<String> = i
            .preexisting
            .iter()
            .map(|p| format!("`{}`", cell(p)))
            .collect();
        out.push_str(&format!(
            "- Pre-existing failures, unrelated to the change (not blocking): {}\n",
            names.join(", ")
        ));
    }
    if !i.flaky.is_empty() {
        let names: Vec<String> = i.flaky.iter().map(|p| format!("`{}`", cell(p))).collect();
        out.push_str(&format!(
            "- Flaky (failed before, passed on its own; left out): {}\n",
            names.join(", ")
        ));
    }
    if !i.excluded.is_empty() {
        let files: Vec<String> = i
            .excluded
            .iter()
            .map(|p| format!("`{}`", cell(p)))
            .collect();
        out.push_str(&format!(
            "- Not committed (written only by the test command): {}\n",
            files.join(", ")
        ));
    }
    out
}

/// Render the pull request description.
pub fn render(r: &ReportInput) -> String {
    let pointer = format!("the full record is in `git agent log {}`", r.run_id);
    let sections = [
        head_section(r),
        plan_section(r),
        changes_section(r, &pointer),
        verification_section(r, &pointer),
        review_section(r),
        cost_section(r),
    ];
    let reproduce = reproduce_line(r);
    // The audit trail takes whatever room is left, so the whole never exceeds MAX_BODY.
    let fixed: usize = sections
        .iter()
        .chain(std::iter::once(&reproduce))
        .map(|s| s.chars().count())
        .sum();
    let mut body = sections.concat();
    body.push_str(&audit_section(r, fixed, &pointer));
    body.push_str(&reproduce);
    cut_to_the_limit(body, &pointer)
}

/// What the run's state lets the report claim: "verified" only when every integrity check
/// passed and a test showed the problem.
fn verdict(r: &ReportInput) -> &'static str {
    match r.state.as_str() {
        "succeeded" => match &r.integrity {
            Some(i) if i.passed && i.unconfined => {
                "Draft for review; the project's tests pass, but **commands ran without a sandbox** (`sandbox.mode = \"off\"`), so nothing kept the clean checkout apart from what earlier commands left — not verified."
            }
            Some(i)
                if i.passed && i.reproduced && i.preexisting.is_empty() && i.flaky.is_empty() =>
            {
                "Draft for review; verified by the project's tests."
            }
            // A failure left standing is judged beside a test that showed the problem, never
            // alone: a run may add a test that passes anyway (issue 39).
            Some(i)
                if i.passed
                    && i.reproduced
                    && (!i.preexisting.is_empty() || !i.flaky.is_empty()) =>
            {
                "Draft for review; the project's tests pass except failures judged pre-existing or flaky (listed below) — **check that they are unrelated**."
            }
            Some(i) if i.passed => {
                "Draft for review; the project's tests pass, but **no test showed the problem** before the change."
            }
            Some(_) => "Draft for review; see the integrity checks below.",
            // A plan-only run, or a record older than the integrity checks: no claim.
            None => "Draft for review.",
        },
        "failed" => "Draft for review; **verification did not pass** — see below.",
        "budget_exhausted" => {
            "Draft for review; **the budget ran out** before verification passed."
        }
        "awaiting_approval" => "**Paused: waiting for approval** — see below.",
        "environment_failed" => {
            "**The project's tests could not run** before any change, so nothing was attempted — see below."
        }
        "cancelled" => "**Cancelled.**",
        _ => "In progress.",
    }
}

/// The hidden marker, the issue it fixes, the summary with the verdict, and the run's notes.
fn head_section(r: &ReportInput) -> String {
    let mut head = format!("<!-- git-agent run {} -->\n", r.run_id);
    let verdict = verdict(r);
    match &r.fixes {
        Some(f) => head.push_str(&format!("**{f}** — {} {verdict}\n", r.summary.trim())),
        None => head.push_str(&format!("{} {verdict}\n", r.summary.trim())),
    }
    if !r.notes.is_empty() {
        head.push('\n');
        for n in &r.notes {
            head.push_str(&format!("> {}\n", cell(n)));
        }
    }
    head
}

/// The plan as a checklist, and the changes no step planned.
fn plan_section(r: &ReportInput) -> String {
    let mut plan = String::from("\n### Plan\n");
    if r.plan.is_empty() {
        plan.push_str("_No plan was made._\n");
    }
    for (i, s) in r.plan.iter().enumerate() {
        let mark = match s.status {
            StepStatus::Done => "[x]",
            StepStatus::Skipped => "[~]",
            StepStatus::Pending | StepStatus::InProgress => "[ ]",
        };
        let files = if s.files.is_empty() {
            String::new()
        } else {
            format!(
                " — {}",
                s.files
                    .iter()
                    .map(|f| format!("`{}`", cell(f)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        plan.push_str(&format!("- {mark} {}. {}{files}\n", i + 1, cell(&s.title)));
    }
    for u in &r.unplanned {
        plan.push_str(&format!("- ⚠ unplanned change: `{}`\n", cell(u)));
    }
    plan
}

/// The base the branch starts from, and the diffstat (cut, with a pointer to the record).
fn changes_section(r: &ReportInput, pointer: &str) -> String {
    let base = if r.base_sha.is_empty() {
        String::new()
    } else {
        let short: String = r.base_sha.chars().take(12).collect();
        format!("Base: `{}` at `{short}`.\n", cell(&r.base_ref))
    };
    if r.diffstat.trim().is_empty() {
        format!("\n### Changes\n{base}_No changes._\n")
    } else {
        format!(
            "\n### Changes\n{base}```\n{}```\n",
            cut(&r.diffstat, 6000, pointer)
        )
    }
}

/// Each test command's line, its decisive output, the integrity checks, and what the
/// commands ran in.
fn verification_section(r: &ReportInput, pointer: &str) -> String {
    let mut verify = String::from("\n### Verification\n");
    if r.verification.is_empty() {
        verify.push_str("_No test command ran._\n");
    } else {
        verify.push_str("| when | command | exit | time | result |\n|---|---|---|---|---|\n");
        for v in &r.verification {
            verify.push_str(&format!(
                "| {} | `{}` | {} | {} | {} |\n",
                cell(&v.when),
                cell(&v.command),
                v.exit_code.map_or("killed".to_string(), |c| c.to_string()),
                fmt_duration(v.duration_ms),
                cell(&v.result)
            ));
        }
        let excerpts: Vec<&VerifyLine> = r
            .verification
            .iter()
            .filter(|v| !v.excerpt.trim().is_empty())
            .collect();
        for v in excerpts {
            verify.push_str(&format!(
                "\n<details><summary>{} — decisive output</summary>\n\n```\n{}```\n</details>\n",
                cell(&v.when),
                cut(&v.excerpt.replace("```", "ʼʼʼ"), 4000, pointer)
            ));
        }
    }
    if let Some(i) = &r.integrity {
        verify.push_str(&integrity_block(i));
    }
    if let Some(sb) = &r.sandbox {
        verify.push_str(&format!("\nSandbox: {}\n", cell(sb)));
    }
    if let Some(env) = &r.environment {
        verify.push_str(&format!("\nEnvironment: {}\n", cell(env)));
    }
    verify
}

/// The reviewer's findings, or why it could not review; nothing when no reviewer ran.
fn review_section(r: &ReportInput) -> String {
    let mut review = String::new();
    if let Some(rv) = &r.review {
        review.push_str(&format!("\n### Review\nBy `{}`", cell(&rv.model)));
        if let Some(e) = &rv.error {
            review.push_str(&format!(": _could not review_ — {}\n", cell(e)));
        } else if rv.findings.is_empty() {
            review.push_str(": no findings.\n");
        } else {
            review.push_str(if rv.sent_back {
                "; a blocking finding sent the run back to fixing once (verification still decides).\n"
            } else {
                ":\n"
            });
            for f in rv.findings.iter().take(30) {
                let at = f
                    .file
                    .as_deref()
                    .map(|p| format!(" `{}`", cell(p)))
                    .unwrap_or_default();
                let msg: String = f.message.chars().take(500).collect();
                review.push_str(&format!(
                    "- **{}**{at}: {}\n",
                    cell(&f.severity),
                    cell(&msg)
                ));
            }
        }
    }
    review
}

/// Tokens and dollars per model call, and the total against the budget.
fn cost_section(r: &ReportInput) -> String {
    let mut cost = String::from("\n### Cost\n");
    let mut total = 0.0;
    let mut unknown = false;
    let parts: Vec<String> = r
        .cost
        .iter()
        .map(|c| {
            let usd = match c.cost_usd {
                Some(u) => {
                    total += u;
                    format!("${u:.2}")
                }
                None => {
                    unknown = true;
                    "cost unknown".to_string()
                }
            };
            format!(
                "{} `{}` {} in / {} out {usd}",
                c.role,
                cell(&c.model),
                fmt_tokens(c.tokens_in),
                fmt_tokens(c.tokens_out)
            )
        })
        .collect();
    if parts.is_empty() {
        cost.push_str("_No model calls._\n");
    } else {
        cost.push_str(&parts.join(" · "));
        cost.push_str(&format!(
            " · total ${total:.2}{} of ${:.2}\n",
            if unknown { " + unknown" } else { "" },
            r.budget_usd
        ));
    }
    cost
}

/// How to fetch the run's record and reproduce, check or resume it.
fn reproduce_line(r: &ReportInput) -> String {
    format!(
        "\nReproduce: `git fetch origin refs/agent/runs/{id}:refs/agent/runs/{id}` then \
         `git agent log {id}`, `git agent audit verify {id}` or `git agent resume {id}`. \
         Branch: `{}`.\n",
        cell(&r.branch),
        id = r.run_id
    )
}

/// The audit trail in a fold, cut to the room the other `fixed` characters leave.
fn audit_section(r: &ReportInput, fixed: usize, pointer: &str) -> String {
    let short_head: String = r.audit_head.chars().take(12).collect();
    let audit_open = format!(
        "\n<details><summary>Audit trail ({} events, chain head {short_head}…)</summary>\n\n```\n",
        r.audit.len()
    );
    let audit_close = "```\n</details>\n";
    let room =
        MAX_BODY.saturating_sub(fixed + audit_open.chars().count() + audit_close.len() + 200);
    let audit_text = cut(
        &r.audit
            .iter()
            .map(|l| l.replace("```", "ʼʼʼ"))
            .collect::<Vec<_>>()
            .join("\n"),
        room,
        pointer,
    );
    let mut audit = audit_open;
    audit.push_str(&audit_text);
    if !audit_text.ends_with('\n') {
        audit.push('\n');
    }
    audit.push_str(audit_close);
    audit
}

/// Last resort, should the fixed sections themselves be huge: cut the body to
/// [`MAX_BODY`] with a note that points to the record.
fn cut_to_the_limit(body: String, pointer: &str) -> String {
    if body.chars().count() <= MAX_BODY {
        return body;
    }
    let note = format!("\n… report cut at {MAX_BODY} characters; {pointer}\n");
    let keep = MAX_BODY - note.chars().count();
    body.chars().take(keep).collect::<String>() + &note
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sandbox in force is a line of the verification section (issue 17).
    #[test]
    fn the_sandbox_in_force_is_in_the_verification_section() {
        let mut r = sample("succeeded");
        r.sandbox = Some("landlock (ABI 6): mount, pid and network namespaces".into());
        let body = render(&r);
        let verification = body.split("### Verification").nth(1).unwrap();
        let verification = verification.split("\n### ").next().unwrap();
        assert!(
            verification.contains("Sandbox: landlock (ABI 6): mount, pid and network namespaces"),
            "{verification}"
        );
    }

    pub(crate) fn sample(state: &str) -> ReportInput {
        ReportInput {
            run_id: "01JDRUNID".into(),
            state: state.into(),
            fixes: Some("Fixes #42".into()),
            summary: "`add` now adds instead of subtracting.".into(),
            plan: vec![
                PlanLine {
                    title: "Make `add` add".into(),
                    files: vec!["src/lib.rs".into()],
                    status: StepStatus::Done,
                    changes_tests: false,
                },
                PlanLine {
                    title: "Cover it with a test".into(),
                    files: vec!["tests/add.rs".into()],
                    status: if state == "succeeded" {
                        StepStatus::Done
                    } else {
                        StepStatus::Pending
                    },
                    changes_tests: false,
                },
            ],
            unplanned: vec!["README.md".into()],
            diffstat: " src/lib.rs | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n".into(),
            verification: vec![
                VerifyLine {
                    when: "before".into(),
                    command: "cargo test".into(),
                    exit_code: Some(101),
                    duration_ms: 41_000,
                    result: "1 failed: `adds`".into(),
                    excerpt: "assertion `left == right` failed\n  left: -1\n right: 3\n".into(),
                },
                VerifyLine {
                    when: "attempt 1".into(),
                    command: "cargo test".into(),
                    exit_code: Some(if state == "succeeded" { 0 } else { 101 }),
                    duration_ms: 1_200,
                    result: if state == "succeeded" {
                        "4 passed; the 1 that failed before now passes; none newly failing".into()
                    } else {
                        "1 failed: `adds`".into()
                    },
                    excerpt: String::new(),
                },
            ],
            sandbox: None,
            environment: None,
            integrity: (state == "succeeded").then(|| Integrity {
                clean_tree: Some(
                    "4 passed, 0 failed; the 1 that failed before now passes; none newly failing"
                        .into(),
                ),
                held_out: Some("not needed: no test file was changed".into()),
                reproduction: Some("the baseline's failing tests (`adds`)".into()),
                reproduced: true,
                passed: true,
                ..Integrity::default()
            }),
            review: None,
            cost: vec![
                CostLine {
                    role: "planner".into(),
                    model: "anthropic:claude-sonnet-4-5".into(),
                    tokens_in: 18_200,
                    tokens_out: 1_100,
                    cost_usd: Some(0.07),
                },
                CostLine {
                    role: "coder".into(),
                    model: "openai:local-model".into(),
                    tokens_in: 640,
                    tokens_out: 53,
                    cost_usd: None,
                },
            ],
            budget_usd: 5.0,
            notes: match state {
                "failed" => vec!["Fix attempts exhausted (3 of 3); the branch keeps the last good checkpoint.".into()],
                "budget_exhausted" => vec!["Budget exhausted: $5.00 of $5.00 spent before the next call.".into()],
                "awaiting_approval" => vec!["Waiting for approval to run `npm install left-pad` (rule: default `ask`). Approve with `git agent resume 01JDRUNID --approve`.".into()],
                _ => vec![],
            },
            audit: vec![
                "0 state queued".into(),
                "1 state analyzing".into(),
                "2 verify cargo test exit 101".into(),
            ],
            audit_head: "3f9c0a1b2c3d4e5f".into(),
            branch: "agent/42-fix-add".into(),
            base_ref: "HEAD".into(),
            base_sha: "1a2b3c4d5e6f7a8b9c0d1a2b3c4d5e6f7a8b9c0d".into(),
        }
    }

    /// Each step of `render` on its own: what it decides, from the input it is given.
    #[test]
    fn the_verdict_claims_verified_only_with_a_reproduction_and_a_sandbox() {
        let mut r = sample("succeeded");
        assert_eq!(
            verdict(&r),
            "Draft for review; verified by the project's tests."
        );
        r.integrity.as_mut().unwrap().reproduced = false;
        assert!(
            verdict(&r).contains("**no test showed the problem**"),
            "{}",
            verdict(&r)
        );
        r.integrity.as_mut().unwrap().reproduced = true;
        r.integrity.as_mut().unwrap().unconfined = true;
        assert!(verdict(&r).contains("not verified"), "{}", verdict(&r));
        r.integrity.as_mut().unwrap().passed = false;
        assert_eq!(
            verdict(&r),
            "Draft for review; see the integrity checks below."
        );
        r.integrity = None;
        assert_eq!(verdict(&r), "Draft for review.");
        assert!(verdict(&sample("failed")).contains("verification did not pass"));
        assert_eq!(verdict(&sample("cancelled")), "**Cancelled.**");
        assert_eq!(verdict(&sample("coding")), "In progress.");
    }

    #[test]
    fn the_head_names_the_run_the_issue_and_quotes_each_note() {
        let mut r = sample("failed");
        let head = head_section(&r);
        assert!(
            head.starts_with("<!-- git-agent run 01JDRUNID -->\n**Fixes #42** — "),
            "{head}"
        );
        assert!(
            head.contains("\n> Fix attempts exhausted (3 of 3)"),
            "{head}"
        );
        r.fixes = None;
        r.notes = vec!["a | b\nc".into()];
        let head = head_section(&r);
        assert!(!head.contains("**Fixes"), "{head}");
        assert!(
            head.contains("> a \\| b c\n"),
            "a note stays one quoted line: {head}"
        );
    }

    #[test]
    fn the_plan_marks_each_step_and_flags_unplanned_changes() {
        let mut r = sample("failed");
        let plan = plan_section(&r);
        assert!(
            plan.contains("- [x] 1. Make `add` add — `src/lib.rs`\n"),
            "{plan}"
        );
        assert!(
            plan.contains("- [ ] 2. Cover it with a test — `tests/add.rs`\n"),
            "{plan}"
        );
        assert!(
            plan.contains("- ⚠ unplanned change: `README.md`\n"),
            "{plan}"
        );
        r.plan.clear();
        r.unplanned.clear();
        assert_eq!(plan_section(&r), "\n### Plan\n_No plan was made._\n");
    }

    #[test]
    fn the_changes_name_the_base_and_cut_a_huge_diffstat() {
        let mut r = sample("succeeded");
        let changes = changes_section(&r, "POINTER");
        assert!(
            changes.contains("Base: `HEAD` at `1a2b3c4d5e6f`.\n```\n src/lib.rs"),
            "{changes}"
        );
        r.diffstat = "x | 1 +\n".repeat(2000);
        let changes = changes_section(&r, "POINTER");
        assert!(
            changes.chars().count() < 6200 && changes.contains("POINTER"),
            "{changes}"
        );
        r.diffstat.clear();
        r.base_sha.clear();
        assert_eq!(
            changes_section(&r, "POINTER"),
            "\n### Changes\n_No changes._\n"
        );
    }

    #[test]
    fn verification_has_a_row_per_command_and_the_decisive_output_folded() {
        let mut r = sample("failed");
        let v = verification_section(&r, "POINTER");
        assert!(
            v.contains("| before | `cargo test` | 101 | 41 s | 1 failed: `adds` |"),
            "{v}"
        );
        assert!(
            v.contains("<details><summary>before — decisive output</summary>"),
            "{v}"
        );
        assert_eq!(
            v.matches("<details>").count(),
            1,
            "an empty excerpt has no fold: {v}"
        );
        r.verification[0].exit_code = None;
        r.verification[0].excerpt = "```\nbreak out\n".into();
        let v = verification_section(&r, "POINTER");
        assert!(v.contains("| killed |"), "{v}");
        assert!(
            !v.contains("```\nbreak out"),
            "an excerpt cannot close its code block: {v}"
        );
        r.verification.clear();
        r.environment = Some("python 3.12 from .python-version".into());
        let v = verification_section(&r, "POINTER");
        assert!(v.contains("_No test command ran._"), "{v}");
        assert!(
            v.ends_with("\nEnvironment: python 3.12 from .python-version\n"),
            "{v}"
        );
    }

    #[test]
    fn the_review_lists_findings_or_says_why_there_are_none() {
        let mut r = sample("succeeded");
        assert_eq!(review_section(&r), "", "no reviewer, no section");
        r.review = Some(Review {
            model: "openai:reviewer".into(),
            findings: vec![ReviewFinding {
                severity: "blocking".into(),
                file: Some("src/lib.rs".into()),
                message: "m".repeat(600),
            }],
            sent_back: true,
            error: None,
        });
        let review = review_section(&r);
        assert!(
            review.contains("sent the run back to fixing once"),
            "{review}"
        );
        assert!(
            review.contains(&format!(
                "- **blocking** `src/lib.rs`: {}\n",
                "m".repeat(500)
            )),
            "{review}"
        );
        r.review.as_mut().unwrap().error = Some("timed out".into());
        assert!(review_section(&r).ends_with(": _could not review_ — timed out\n"));
        r.review = Some(Review {
            model: "m".into(),
            ..Review::default()
        });
        assert!(review_section(&r).ends_with(": no findings.\n"));
    }

    #[test]
    fn the_cost_totals_what_is_known_and_says_what_is_not() {
        let mut r = sample("succeeded");
        let cost = cost_section(&r);
        assert!(
            cost.contains("planner `anthropic:claude-sonnet-4-5` "),
            "{cost}"
        );
        assert!(
            cost.ends_with(" · total $0.07 + unknown of $5.00\n"),
            "{cost}"
        );
        r.cost.clear();
        assert_eq!(cost_section(&r), "\n### Cost\n_No model calls._\n");
    }

    #[test]
    fn the_audit_trail_takes_only_the_room_left() {
        let mut r = sample("succeeded");
        let audit = audit_section(&r, 0, "POINTER");
        assert!(
            audit.contains("Audit trail (3 events, chain head 3f9c0a1b2c3d…)"),
            "{audit}"
        );
        assert!(
            audit.ends_with("2 verify cargo test exit 101\n```\n</details>\n"),
            "{audit}"
        );
        r.audit = vec!["e".repeat(100); 1000];
        let audit = audit_section(&r, MAX_BODY - 5_000, "POINTER");
        assert!(
            audit.chars().count() < 5_000 && audit.contains("POINTER"),
            "{}",
            audit.len()
        );
    }

    #[test]
    fn a_body_over_the_limit_is_cut_with_a_pointer() {
        assert_eq!(cut_to_the_limit("short".into(), "P"), "short");
        let cut = cut_to_the_limit("x".repeat(MAX_BODY + 10), "POINTER");
        assert_eq!(cut.chars().count(), MAX_BODY);
        assert!(
            cut.ends_with("characters; POINTER\n"),
            "{}",
            &cut[cut.len() - 80..]
        );
        assert!(reproduce_line(&sample("succeeded")).contains("Branch: `agent/42-fix-add`."));
    }

    #[test]
    fn report_snapshots_per_final_state() {
        for state in [
            "succeeded",
            "failed",
            "budget_exhausted",
            "awaiting_approval",
        ] {
            let body = render(&sample(state));
            insta::assert_snapshot!(format!("report_{state}"), body);
        }
    }

    /// The integrity block (issue 18) for a clean run and for a run that changed a test
    /// file; the headline says "verified" only when every check passed and a test showed
    /// the problem.
    #[test]
    fn integrity_block_snapshots() {
        let mut clean = sample("succeeded");
        clean.integrity = Some(Integrity {
            clean_tree: Some(
                "4 passed, 0 failed; the 1 that failed before now passes; none newly failing"
                    .into(),
            ),
            held_out: Some("not needed: no test file was changed".into()),
            reproduction: Some("the baseline's failing tests (`adds`)".into()),
            reproduced: true,
            passed: true,
            ..Integrity::default()
        });
        let body = render(&clean);
        assert!(body.contains("verified by the project's tests"));
        insta::assert_snapshot!(
            "integrity_clean",
            integrity_block(clean.integrity.as_ref().unwrap())
        );

        let mut changed = sample("failed");
        changed.integrity = Some(Integrity {
            test_files: vec![TestFileChange {
                path: "tests/test_calc.py".into(),
                how: vec![
                    "1 assertion(s) removed or changed".into(),
                    "an assertion that cannot fail added".into(),
                ],
            }],
            runner_config: vec!["`conftest.py` is pytest's hooks and fixtures (approved by ada)".into()],
            under_test: Vec::new(),
            environment: None,
            clean_tree: Some("2 passed, 0 failed; the 1 that failed before now passes; none newly failing".into()),
            held_out: Some("1 passed, 1 failed; 1 still failing; none newly failing (test files as in the base: `tests/test_calc.py`)".into()),
            reproduction: None,
            reproduced: true,
            excluded: vec!["Cargo.lock".into()],
            preexisting: vec!["tests/test_env.py::test_runs_on_python_two".into()],
            flaky: Vec::new(),
            unconfined: false,
            passed: false,
        });
        insta::assert_snapshot!(
            "integrity_changed_test",
            integrity_block(changed.integrity.as_ref().unwrap())
        );

        // Succeeded, but nothing failed before: never "verified".
        let mut unshown = clean.clone();
        if let Some(i) = unshown.integrity.as_mut() {
            i.reproduced = false;
        }
        let body = render(&unshown);
        assert!(!body.contains("verified by the project's tests"), "{body}");
        assert!(body.contains("no test showed the problem"), "{body}");

        // Every check passed, but with the sandbox off: never "verified".
        let mut unconfined = clean.clone();
        if let Some(i) = unconfined.integrity.as_mut() {
            i.unconfined = true;
        }
        let body = render(&unconfined);
        assert!(!body.contains("verified by the project's tests"), "{body}");
        assert!(body.contains("commands ran without a sandbox"), "{body}");
        assert!(body.contains("- Sandbox: off"), "{body}");
    }

    #[test]
    fn sections_come_in_order() {
        let body = render(&sample("succeeded"));
        let pos = |needle: &str| body.find(needle).unwrap_or_else(|| panic!("{needle}"));
        let order = [
            "<!-- git-agent run",
            "**Fixes #42**",
            "### Plan",
            "### Changes",
            "### Verification",
            "### Cost",
            "Audit trail",
            "Reproduce:",
        ];
        for w in order.windows(2) {
            assert!(pos(w[0]) < pos(w[1]), "{} before {}", w[0], w[1]);
        }
        assert!(body.contains("⚠ unplanned change: `README.md`"));
        assert!(body.contains("cost unknown"));
        assert!(body.contains("total $0.07 + unknown of $5.00"));
    }

    #[test]
    fn huge_reports_are_cut_to_the_limit_with_a_pointer() {
        let mut r = sample("failed");
        r.audit = (0..20_000)
            .map(|i| format!("{i} tool_call read_file src/{i}.rs"))
            .collect();
        r.verification[0].excerpt = "x".repeat(200_000);
        r.diffstat = (0..5_000).map(|i| format!(" f{i}.rs | 1 +\n")).collect();
        r.plan = (0..2_000)
            .map(|i| PlanLine {
                title: format!("step {i} {}", "y".repeat(40)),
                files: vec![],
                status: StepStatus::Pending,
                changes_tests: false,
            })
            .collect();
        let body = render(&r);
        assert!(body.chars().count() <= MAX_BODY, "{}", body.chars().count());
        assert!(body.contains("git agent log 01JDRUNID"));
        assert!(body.starts_with("<!-- git-agent run 01JDRUNID -->"));
    }

    #[test]
    fn table_cells_cannot_break_the_table() {
        let mut r = sample("failed");
        r.verification[0].command = "a | b\nc".into();
        let body = render(&r);
        assert!(body.contains("`a \\| b c`"));
    }
}
