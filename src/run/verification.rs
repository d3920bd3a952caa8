//! Verification: which command proves the change, running it in the sandbox, reading its
//! results against the baseline, and the final check after `finish` that decides the run.
//!
//! Success is decided here and only here, from the test command's results
//! ([`crate::verify::decide`]), never from a model's opinion. [`final_check`] runs the stages
//! of the final verification in order; a new stage (a clean-tree re-run, held-out tests, an
//! environment check) is one more step there that can fail the verdict and say why to the
//! model, recorded as a [`VerifyLine`] of its own [`Check`].

use std::time::Duration;

use serde_json::json;
use tracing::Instrument as _;

use super::checkpoint;
use super::engine::RunEvent;
use super::error::Result;
use super::ledger::Ledger;
use super::report::VerifyLine;
use super::setup::Workbench;
use crate::audit::chain::Kind;
use crate::exec::{ExecRequest, Termination};
use crate::verify::{self, Decision, Observation, RunResult, TestCommand};

/// Bytes of failure summary given to the model and the report.
const FAILURE_SUMMARY_BYTES: usize = 6 * 1024;

/// Which test run this is. Its display is the `when` of the run's [`VerifyLine`] (`before`,
/// `run_tests 2`, `attempt 1`), which the report and the record keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// The baseline, before any edit: what fails already.
    Baseline,
    /// The model asked (`run_tests`); the number is the run's count of test runs so far.
    OnRequest(usize),
    /// The final verification after `finish`, by fix attempt (from 1).
    Attempt(u32),
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::Baseline => f.write_str("before"),
            Check::OnRequest(n) => write!(f, "run_tests {n}"),
            Check::Attempt(n) => write!(f, "attempt {n}"),
        }
    }
}

/// One test run, read.
#[derive(Debug)]
pub(super) struct TestRun {
    /// What the run observed (tests passed and failed, exit code).
    pub(super) obs: Observation,
    /// Its line in the record and the report.
    pub(super) line: VerifyLine,
    /// The verdict against the baseline.
    pub(super) decision: Decision,
}

impl TestRun {
    /// What the model is told: the one-line result, then the failure summary.
    pub(super) fn feedback(&self) -> String {
        if self.line.excerpt.is_empty() {
            self.line.result.clone()
        } else {
            format!("{}\n{}", self.line.result, self.line.excerpt)
        }
    }
}

/// The command that verifies the change: the flag's, else the record's or the config's,
/// else detected in the worktree. A detected command gets the flags that make its output name
/// every test (so the baseline comparison sees them all); a command a person gave runs exactly
/// as given.
pub(super) fn test_command(led: &Ledger<'_>, from_flag: bool) -> Result<Option<TestCommand>> {
    let flag = if from_flag {
        led.rec.test_command.as_deref()
    } else {
        None
    };
    let config = led
        .rec
        .test_command
        .as_deref()
        .or(led.svc.config.settings.verify.test.as_deref());
    Ok(
        verify::resolve(&led.rec.worktree, flag, config)?.map(|mut cmd| {
            let reliable = verify::reliable_command(&cmd);
            if !reliable.added.is_empty() {
                tracing::debug!(command = %reliable.command, why = %reliable.note, "test command made verbose");
                cmd.command = reliable.command;
            }
            cmd
        }),
    )
}

/// Run the test command once and read it against the record's baseline.
pub(super) async fn run_tests(
    led: &mut Ledger<'_>,
    bench: &Workbench,
    cmd: &TestCommand,
    check: Check,
) -> Result<TestRun> {
    let svc = led.svc;
    let since = std::time::SystemTime::now();
    let timeout =
        Duration::from_secs(u64::from(svc.config.settings.verify.timeout_minutes.max(1)) * 60);
    let out = bench
        .executor
        .run(ExecRequest::shell(cmd.command.clone()).timeout(timeout))
        .instrument(tracing::debug_span!("test_command"))
        .await?;
    let mut text = out.stdout.to_text_lossy();
    let err = out.stderr.to_text_lossy();
    if !err.is_empty() {
        text.push('\n');
        text.push_str(&err);
    }
    let exit_code = match out.status {
        Termination::Exited(c) => Some(c),
        _ => None,
    };
    let junit =
        verify::read_junit_reports(&led.rec.worktree, cmd.runner, since).unwrap_or_default();
    let obs = verify::observe(
        cmd,
        &RunResult {
            exit_code,
            output: text.clone(),
        },
        &junit,
    );
    let decision = verify::decide(led.rec.baseline.as_ref(), &obs);
    let result = match check {
        // Nothing to compare the baseline with: it says what fails already.
        Check::Baseline => baseline_result(&obs, exit_code),
        Check::OnRequest(_) | Check::Attempt(_) => decision.headline(&obs),
    };
    let excerpt = if obs.exit_code == Some(0) {
        String::new()
    } else {
        svc.redactor.redact(&verify::failure_summary(
            obs.report.as_ref(),
            &text,
            FAILURE_SUMMARY_BYTES,
        ))
    };
    let when = check.to_string();
    let line = VerifyLine {
        when: when.clone(),
        command: cmd.command.clone(),
        exit_code,
        duration_ms: out.duration.as_millis() as u64,
        result: result.clone(),
        excerpt,
    };
    led.audit(
        Kind::Verify,
        json!({"when": when, "command": cmd.command, "status": out.status, "duration_ms": line.duration_ms, "decision": decision, "dropped_bytes": out.stdout.dropped + out.stderr.dropped}),
    )?;
    led.progress(RunEvent::Verified {
        when,
        result: svc.redactor.clean(&result),
    });
    Ok(TestRun {
        obs,
        line,
        decision,
    })
}

/// The baseline's one-line result: which tests fail already, or the counts.
fn baseline_result(obs: &Observation, exit_code: Option<i32>) -> String {
    match &obs.report {
        Some(r) if !r.failed.is_empty() => format!(
            "{} failed: {}",
            r.failed.len(),
            r.failed
                .iter()
                .take(5)
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(r) => format!("{} passed, {} failed", r.counts.passed, r.counts.failed),
        None => match exit_code {
            Some(c) => format!("exit code {c}"),
            None => "killed".into(),
        },
    }
}

/// The final verification's verdict.
#[derive(Debug)]
pub(super) struct Verdict {
    /// Whether every stage passed: the change is verified.
    pub(super) passed: bool,
    /// What the model is told when it did not (every stage's say, in order).
    pub(super) feedback: String,
}

/// The final verification of fix attempt `attempt`, its stages in order: the commit-time
/// policy undoes what may not be committed (so the tree the tests pass on is the tree that is
/// committed), then the test command decides against the baseline. Each stage's line goes to
/// the record. A stage added here fails `passed` and says why in `feedback`.
pub(super) async fn final_check(
    led: &mut Ledger<'_>,
    bench: &Workbench,
    cmd: &TestCommand,
    attempt: u32,
) -> Result<Verdict> {
    let refused = checkpoint::gate(led, bench)?;
    let run = run_tests(led, bench, cmd, Check::Attempt(attempt)).await?;
    let mut feedback = run.feedback();
    if !refused.is_empty() {
        feedback.push_str(&format!("\n{refused}"));
    }
    let passed = run.decision.success;
    led.rec.verification.push(run.line);
    Ok(Verdict { passed, feedback })
}

#[cfg(test)]
mod tests {
    use super::super::fixture::World;
    use super::super::state::RunState;
    use super::*;

    #[test]
    fn checks_keep_the_names_the_report_and_old_records_use() {
        assert_eq!(Check::Baseline.to_string(), "before");
        assert_eq!(Check::OnRequest(2).to_string(), "run_tests 2");
        assert_eq!(Check::Attempt(1).to_string(), "attempt 1");
    }

    #[tokio::test]
    async fn a_failing_baseline_then_a_passing_attempt_is_verified() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        let bench = Workbench::prepare(&mut led, false).unwrap();
        let cmd = test_command(&led, false)
            .unwrap()
            .expect("the config's command");
        assert_eq!(cmd.command, super::super::fixture::TEST);
        let before = run_tests(&mut led, &bench, &cmd, Check::Baseline)
            .await
            .unwrap();
        assert_eq!(before.line.when, "before");
        assert_eq!(before.line.result, "exit code 1");
        assert_eq!(before.line.exit_code, Some(1));
        led.rec.baseline = Some(before.obs);
        led.rec.state = RunState::Testing;
        let failed = final_check(&mut led, &bench, &cmd, 1).await.unwrap();
        assert!(!failed.passed);
        assert!(!failed.feedback.is_empty());
        std::fs::write(bench.worktree.path().join("value.txt"), "2\n").unwrap();
        let verdict = final_check(&mut led, &bench, &cmd, 2).await.unwrap();
        assert!(verdict.passed, "{}", verdict.feedback);
        let whens: Vec<&str> = led
            .rec
            .verification
            .iter()
            .map(|v| v.when.as_str())
            .collect();
        assert_eq!(whens, ["attempt 1", "attempt 2"]);
        assert_eq!(led.rec.verification[1].exit_code, Some(0));
        let events = w.events();
        assert_eq!(events[0], "verified before: exit code 1");
        assert_eq!(events.len(), 3, "{events:?}");
    }

    /// A file the policy refuses to commit is undone before the tests run, and the model is
    /// told, whoever wrote it.
    #[tokio::test]
    async fn the_final_check_undoes_what_may_not_be_committed_first() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        let bench = Workbench::prepare(&mut led, false).unwrap();
        let cmd = test_command(&led, false).unwrap().unwrap();
        let wt = bench.worktree.path();
        std::fs::write(wt.join("value.txt"), "2\n").unwrap();
        std::fs::write(wt.join(".env"), "TOKEN=x\n").unwrap();
        let verdict = final_check(&mut led, &bench, &cmd, 1).await.unwrap();
        assert!(verdict.passed, "{}", verdict.feedback);
        assert!(verdict.feedback.contains("`.env`"), "{}", verdict.feedback);
        assert!(!wt.join(".env").exists());
        assert!(led.rec.notes[0].starts_with("Not committed, refused by the policy"));
    }
}
