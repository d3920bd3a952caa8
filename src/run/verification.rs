//! Verification: which command proves the change, running it in the sandbox, reading its
//! results against the baseline (the final check that decides the run is `final_check`).
//!
//! Success is decided here and only here, from the test command's results
//! ([`crate::verify::decide`]), never from a model's opinion. [`super::final_check`] runs
//! the stages of the final verification in order; a new stage is one more step there that
//! can fail the verdict and say why to the model, recorded as a [`VerifyLine`] of its own
//! [`Check`].

use std::time::Duration;

use serde_json::json;
use tracing::Instrument as _;

use std::path::Path;

use super::attribution;
use super::error::Result;
use super::ledger::Ledger;
use super::preexisting::{Evidence, planned_test, requested, unrelated};
use super::report::VerifyLine;
use super::services::RunEvent;
use super::setup::Workbench;
use crate::audit::chain::Kind;
use crate::config::Preexisting;
use crate::exec::{ExecRequest, Executor, Termination};
use crate::verify::{self, Observation, RunResult, TestCommand, TestVerdict};

/// Bytes of failure summary given to the model and the report.
const FAILURE_SUMMARY_BYTES: usize = 6 * 1024;

/// Which test run this is. Its display is the `when` of the run's [`VerifyLine`] (`before`,
/// `run_tests 2`, `attempt 1`), which the report and the record keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Check {
    /// The baseline, before any edit: what fails already.
    Baseline,
    /// The baseline's command once more, before any edit: which failures are flaky.
    Rerun,
    /// The model asked (`run_tests`); the number is the run's count of test runs so far.
    OnRequest(usize),
    /// The final verification after `finish`, by fix attempt (from 1).
    Attempt(u32),
    /// The same attempt in a clean checkout of what would be committed.
    Clean(u32),
    /// The same attempt with the base revision's versions of the changed test files.
    HeldOut(u32),
    /// The run's tests on the base revision's code: do they show the problem?
    OnBase(u32),
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Check::Baseline => f.write_str("before"),
            Check::Rerun => f.write_str("before, again (flaky check)"),
            Check::OnRequest(n) => write!(f, "run_tests {n}"),
            Check::Attempt(n) => write!(f, "attempt {n}"),
            Check::Clean(n) => write!(f, "attempt {n}, clean checkout"),
            Check::HeldOut(n) => write!(f, "attempt {n}, held-out tests"),
            Check::OnBase(n) => write!(f, "attempt {n}, tests on the base code"),
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
    pub(super) decision: TestVerdict,
    /// stdout then stderr, as captured (not redacted: it stays in the process).
    pub(super) output: String,
    /// A command set-up runs in every checkout before the tests failed there (its text):
    /// the tests did not run.
    pub(super) before_failed: Option<String>,
    /// Stopped at its time-out.
    pub(super) timed_out: bool,
}

impl TestRun {
    /// What the model is told: the one-line result, then the failure summary, and which
    /// failures it should leave alone.
    pub(super) fn feedback(&self) -> String {
        let mut text = if self.line.excerpt.is_empty() {
            self.line.result.clone()
        } else {
            format!("{}\n{}", self.line.result, self.line.excerpt)
        };
        let leave: Vec<String> = self
            .decision
            .preexisting
            .iter()
            .chain(&self.decision.flaky)
            .cloned()
            .collect();
        if !leave.is_empty() {
            text.push_str(&format!(
                "\nThese failed before your change and are unrelated to it (or flaky); do not try to fix them: {}",
                quoted(&leave)
            ));
        }
        text
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

/// Run the test command once in the run's worktree and read it against the record's
/// baseline. What the run changes in the worktree is attributed to the test command.
pub(super) async fn run_tests(
    led: &mut Ledger<'_>,
    bench: &Workbench,
    cmd: &TestCommand,
    check: Check,
) -> Result<TestRun> {
    attribution::observe(led, &bench.worktree, "a tool or command")?;
    if !matches!(check, Check::Baseline) {
        super::environment::refresh(led, bench, cmd).await?;
    }
    // The changed paths only tell pre-existing failures from related ones: no baseline
    // failure, nothing to tell, no snapshot to write.
    let baseline_failed = led
        .rec
        .baseline
        .as_ref()
        .and_then(|b| b.report.as_ref())
        .is_some_and(|r| !r.failed.is_empty());
    let changed = match check {
        Check::Baseline | Check::Rerun => Vec::new(),
        _ if !baseline_failed => Vec::new(),
        _ => {
            let base = led.svc.repo.resolve(&led.rec.base_sha)?;
            let snapshot = bench.worktree.snapshot()?;
            led.svc
                .repo
                .changed_blobs(base, snapshot)?
                .into_iter()
                .map(|c| c.path)
                .collect()
        }
    };
    let run = run_tests_at(
        led,
        bench.executor.as_ref(),
        bench.worktree.path(),
        cmd,
        check,
        &changed,
        None,
    )
    .await?;
    attribution::observe(
        led,
        &bench.worktree,
        &format!("{} ({check})", attribution::TEST_COMMAND),
    )?;
    // Saved now: a crash before the next save must not leave the test command's files
    // looking like the model's on resume.
    led.save()?;
    Ok(run)
}

/// Lints to build with `--force-warn` before the baseline counts: those the base's code
/// tripped under this toolchain without their being the project's rule
/// (`verify::toolchain_lints`) and not forced yet. `None` when the run passed, showed none,
/// or the project or the front door sets Rust flags of its own (`RUSTFLAGS` would replace
/// a `.cargo/config`'s `rustflags`, so the base is then tested as it is).
pub(super) fn lints_to_force(
    led: &Ledger<'_>,
    cmd: &TestCommand,
    run: &TestRun,
) -> Result<Option<Vec<String>>> {
    if run.obs.exit_code == Some(0) || cmd.runner != verify::Runner::Cargo {
        return Ok(None);
    }
    let new: Vec<String> = verify::toolchain_lints(&run.output)
        .into_iter()
        .filter(|l| !l.contains("::") && !led.rec.forced_warn_lints.contains(l))
        .collect();
    if new.is_empty() {
        return Ok(None);
    }
    let flags = [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTDOCFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
    ];
    if cargo_setting_given(led, &flags, "rustflags")? {
        return Ok(None);
    }
    Ok(Some(new))
}

/// The report's note on lints forced to warnings (`lints_to_force`).
pub(super) fn forced_lints_note(lints: &[String]) -> String {
    format!(
        "The base's code does not build under this toolchain's lints ({}): lints newer than \
         the code, denied by default or made errors by its `deny(warnings)`, not rules the \
         project names. Every test run built with `--force-warn` for them (`RUSTFLAGS`, \
         `RUSTDOCFLAGS`).",
        lints
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Run the test command once through `executor`, rooted at `root` (the worktree or a clean
/// checkout), and read it against the record's baseline; `changed` holds the paths the run
/// changed from the base (for telling pre-existing failures from related ones). `limit`
/// shortens the configured time-out (never lengthens it).
pub(super) async fn run_tests_at(
    led: &mut Ledger<'_>,
    executor: &dyn Executor,
    root: &Path,
    cmd: &TestCommand,
    check: Check,
    changed: &[String],
    limit: Option<Duration>,
) -> Result<TestRun> {
    let svc = led.svc;
    let since = std::time::SystemTime::now();
    let configured =
        Duration::from_secs(u64::from(svc.config.settings.verify.timeout_minutes.max(1)) * 60);
    let timeout = limit.map_or(configured, |l| l.min(configured));
    let before = led
        .rec
        .setup
        .as_ref()
        .map(|s| s.before_tests.clone())
        .unwrap_or_default();
    let mut before_failed = None;
    let mut out = None;
    for c in &before {
        let o = executor
            .run(ExecRequest::shell(c.clone()).timeout(timeout))
            .instrument(tracing::debug_span!("before_tests"))
            .await?;
        led.audit(
            Kind::Verify,
            json!({"when": "before the tests", "command": c, "status": o.status, "duration_ms": o.duration.as_millis() as u64}),
        )?;
        if !matches!(o.status, Termination::Exited(0)) {
            before_failed = Some(c.clone());
            out = Some(o);
            break;
        }
    }
    let out = match out {
        Some(o) => o,
        None => {
            executor
                .run(ExecRequest::shell(cmd.command.clone()).timeout(timeout))
                .instrument(tracing::debug_span!("test_command"))
                .await?
        }
    };
    let mut text = match &before_failed {
        Some(c) => format!(
            "`{c}`, which set-up runs in every checkout before the tests, failed; the tests did not run:\n"
        ),
        None => String::new(),
    };
    text.push_str(&out.stdout.to_text_lossy());
    let err = out.stderr.to_text_lossy();
    if !err.is_empty() {
        text.push('\n');
        text.push_str(&err);
    }
    let exit_code = match out.status {
        Termination::Exited(c) => Some(c),
        _ => None,
    };
    let junit = verify::read_junit_reports(root, cmd.runner, since).unwrap_or_default();
    let obs = verify::observe(
        cmd,
        &RunResult {
            exit_code,
            output: text.clone(),
        },
        &junit,
    );
    let mut decision = verify::decide(led.rec.baseline.as_ref(), &obs);
    if !matches!(check, Check::Baseline | Check::Rerun | Check::OnBase(_)) {
        let allow = svc.config.settings.verify.preexisting == Preexisting::Allow;
        let goal = led.rec.task.goal.clone();
        let fixed = decision.newly_passing.clone();
        let planned = led.rec.planned_files();
        let base_sha = led.rec.base_sha.clone();
        let base_file = |path: &str| -> Option<String> {
            let bytes = svc.repo.read_file_at(&base_sha, path).ok()??;
            String::from_utf8(bytes).ok()
        };
        let evidence = Evidence {
            fixed: &fixed,
            changed,
            root,
            before: led.rec.baseline.as_ref().and_then(|b| b.report.as_ref()),
            before_root: &led.rec.worktree,
            after: obs.report.as_ref(),
            base_file: &base_file,
        };
        verify::excuse(
            &mut decision,
            &obs,
            &led.rec.flaky,
            // The held-out run follows a clean checkout's run that passed; a run that changed
            // a test file did something its tests may show (the reproduction check asks).
            matches!(check, Check::HeldOut(_)) || changed.iter().any(|p| verify::is_test_path(p)),
            |name| allow && unrelated(name, &evidence),
            |name| requested(name, &goal) || planned_test(name, &planned, &evidence),
        );
    }
    let result = match check {
        // Nothing to compare the baseline with: it says what fails already.
        Check::Baseline | Check::Rerun => baseline_result(&obs, exit_code),
        Check::OnRequest(_) | Check::Attempt(_) | Check::Clean(_) | Check::HeldOut(_) => {
            decision.headline(&obs)
        }
        // Not compared with the baseline: the question is which of the run's tests fail.
        Check::OnBase(_) => baseline_result(&obs, exit_code),
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
        output: text,
        before_failed,
        timed_out: matches!(out.status, Termination::TimedOut),
    })
}

/// Run the whole baseline command once more, the same invocation in the same order, to find
/// flaky baseline failures (issue 19). A test is flaky only if it failed in the baseline and
/// passes, by name, in that full rerun: a test that fails only after another one ran (order
/// or shared state) fails again there, where a rerun of it alone would pass (issue 18's
/// attacker review). Flaky tests are named in the report and left out of every decision —
/// except the run's only baseline failure, a test the request names, or every baseline
/// failure at once: a failure that does not come back may still be the one the run is for.
pub(super) async fn find_flaky(
    led: &mut Ledger<'_>,
    bench: &Workbench,
    cmd: &TestCommand,
) -> Result<()> {
    let Some(failed) = led
        .rec
        .baseline
        .as_ref()
        .and_then(|b| b.report.as_ref())
        .filter(|r| r.names >= verify::Names::FailedOnly)
        .map(|r| r.failed.clone())
    else {
        return Ok(());
    };
    if failed.len() < 2 {
        // The only failure is what the run is about; whether it comes back or not, it decides.
        return Ok(());
    }
    // Audited as a test run of its own (`run_tests_at`); not a line of the report's table.
    let run = run_tests(led, bench, cmd, Check::Rerun).await?;
    let goal = led.rec.task.goal.clone();
    let flaky = flaky_in_rerun(&failed, &run.obs, |n| requested(n, &goal));
    led.rec.flaky.extend(flaky);
    if !led.rec.flaky.is_empty() {
        let names: Vec<String> = led.rec.flaky.iter().cloned().collect();
        led.rec.notes.push(format!(
            "Flaky: {} failed in the baseline but passed when the whole test command ran again; left out of the decision.",
            quoted(&names)
        ));
    }
    Ok(())
}

/// The baseline failures (`failed`) that pass, by name, in the full rerun `rerun`; none of
/// them when they all pass (a failure that does not come back may be the one the run is
/// for), and never one the request names.
fn flaky_in_rerun(
    failed: &std::collections::BTreeSet<String>,
    rerun: &Observation,
    requested: impl Fn(&str) -> bool,
) -> Vec<String> {
    let Some(r) = rerun.full_report() else {
        return Vec::new();
    };
    let passed: Vec<String> = failed
        .iter()
        .filter(|n| r.passed.contains(*n) && !r.failed.contains(*n))
        .cloned()
        .collect();
    if passed.len() == failed.len() {
        return Vec::new();
    }
    passed.into_iter().filter(|n| !requested(n)).collect()
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

/// `a`, `b` and `c` as code spans, at most five named.
pub(super) fn quoted(names: &[String]) -> String {
    let mut out: Vec<String> = names.iter().take(5).map(|n| format!("`{n}`")).collect();
    if names.len() > 5 {
        out.push(format!("{} more", names.len() - 5));
    }
    out.join(", ")
}

/// Whether a cargo setting is given outside what the run controls: one of `vars` in the
/// front door's or the environment's variables, or `key` in the base's `.cargo/config`.
pub(super) fn cargo_setting_given(led: &Ledger<'_>, vars: &[&str], key: &str) -> Result<bool> {
    let setup_env = led
        .rec
        .setup
        .as_ref()
        .map(|s| s.env.as_slice())
        .unwrap_or(&[]);
    let given = |env: &[(String, String)]| env.iter().any(|(k, _)| vars.contains(&k.as_str()));
    if given(&led.svc.exec_options.env) || given(setup_env) {
        return Ok(true);
    }
    for config in [".cargo/config.toml", ".cargo/config"] {
        let text = led.svc.repo.read_file_at(&led.rec.base_sha, config)?;
        if text.is_some_and(|t| String::from_utf8_lossy(&t).contains(key)) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards issue 18's attacker review, item 4: only a pass in the full rerun makes a
    /// baseline failure flaky, never all of them at once, never a requested one.
    #[test]
    fn flaky_only_from_a_full_rerun() {
        use crate::verify::{Counts, Format, Names, TestReport};
        let set = |v: &[&str]| {
            v.iter()
                .map(|s| (*s).to_owned())
                .collect::<std::collections::BTreeSet<_>>()
        };
        let rerun = |passed: &[&str], failed: &[&str]| Observation {
            exit_code: Some(1),
            report: Some(TestReport {
                format: Format::Pytest,
                names: Names::Full,
                counts: Counts::default(),
                passed: set(passed),
                failed: set(failed),
                skipped: Default::default(),
                details: Default::default(),
            }),
        };
        let failed = set(&["t::add", "t::wobbly", "t::order"]);
        let none = |_: &str| false;
        assert_eq!(
            flaky_in_rerun(
                &failed,
                &rerun(&["t::wobbly", "t::x"], &["t::add", "t::order"]),
                none
            ),
            ["t::wobbly"]
        );
        assert!(
            flaky_in_rerun(
                &failed,
                &rerun(&["t::add", "t::wobbly", "t::order"], &[]),
                none
            )
            .is_empty()
        );
        assert!(
            flaky_in_rerun(
                &failed,
                &rerun(&["t::wobbly"], &["t::add", "t::order"]),
                |n: &str| n == "t::wobbly"
            )
            .is_empty()
        );
    }

    #[test]
    fn checks_keep_the_names_the_report_and_old_records_use() {
        assert_eq!(Check::Baseline.to_string(), "before");
        assert_eq!(Check::OnRequest(2).to_string(), "run_tests 2");
        assert_eq!(Check::Attempt(1).to_string(), "attempt 1");
    }
}
