//! The final check's last step (issue 19's reproduction): when the baseline showed no
//! failing test, does a test of the run's fail on the base code and pass now? Said in the
//! integrity block always; required by `verify.reproduce = "require"`.

use std::collections::BTreeSet;
use std::time::Duration;

use super::clean_checkout::{Checkouts, on_base_limit, run_clean};
use super::error::Result;
use super::ledger::Ledger;
use super::preexisting::test_file_of;
use super::report::Integrity;
use super::verdict::{Change, CleanRun, Verdict};
use super::verification::{Check, quoted};
use crate::config::Reproduce;
use crate::verify::{self, Observation};
use crate::workspace::FileStatus;

/// Step 5: did a test show the problem before the change? `None` unless
/// `verify.reproduce = "require"` and none did.
pub(super) async fn step(
    led: &mut Ledger<'_>,
    at: &Checkouts<'_>,
    change: &Change,
    clean: &CleanRun,
    attempt: u32,
    integrity: &mut Integrity,
) -> Result<Option<Verdict>> {
    let mode = led.svc.config.settings.verify.reproduce;
    let left: Vec<String> = integrity
        .preexisting
        .iter()
        .chain(&integrity.flaky)
        .cloned()
        .collect();
    if let Some(failing) = baseline_failures(led.rec.baseline.as_ref(), &left) {
        integrity.reproduced = true;
        integrity.reproduction = Some(format!("the baseline's failing tests ({failing})"));
        return Ok(None);
    }
    let test_paths: Vec<String> = change
        .blobs
        .iter()
        .filter(|c| c.status != FileStatus::Deleted && verify::is_test_path(&c.path))
        .map(|c| c.path.clone())
        .collect();
    // The run's tests: the ones it added, and the passing ones in the test files it
    // changed (a real fix often makes an existing test ask for the right behaviour).
    let mut new_tests = new_test_names(led.rec.baseline.as_ref(), &clean.obs);
    new_tests.extend(tests_in_files(&clean.obs, &test_paths, &led.rec.flaky));
    new_tests.sort();
    new_tests.dedup();
    let (reproduced, line) = if new_tests.is_empty() || test_paths.is_empty() {
        (false, nothing_to_reproduce(mode))
    } else {
        let commit = led
            .svc
            .repo
            .overlay(change.base, change.snapshot, &test_paths)?;
        // The base's code may hang on the run's tests (a fix for a hang or a leak): the
        // same tests just finished with the change, so a few times that is long enough.
        let limit = on_base_limit(clean.took);
        let run = run_clean(led, at, commit, Check::OnBase(attempt), Some(limit)).await?;
        let failing: Vec<String> = new_tests
            .iter()
            .filter(|n| fails_for_real(run.obs.report.as_ref(), n))
            .cloned()
            .collect();
        let hung = run.timed_out;
        led.rec.verification.push(run.line);
        on_base_result(&new_tests, &failing, hung, limit, clean.took)
    };
    integrity.reproduced = reproduced;
    integrity.reproduction = Some(line.clone());
    if !reproduced && mode == Reproduce::Require {
        return Ok(Some(Verdict::failed(format!(
            "No test shows the problem ({line}). Add a test that fails on the base \
             revision's code and passes with your change (`verify.reproduce = \"require\"`), \
             then call finish again."
        ))));
    }
    Ok(None)
}

/// The reproduction line when the run has no test to try on the base's code.
fn nothing_to_reproduce(mode: Reproduce) -> String {
    match mode {
        Reproduce::Off => {
            "not asked (`verify.reproduce = \"off\"`); no test failed before the change".into()
        }
        _ => "none: no test failed before the change and the change adds no test".into(),
    }
}

/// Whether the run's tests on the base's code show the problem, and the line that says so:
/// some fail by name, or (none failing) they never finish there.
fn on_base_result(
    new_tests: &[String],
    failing: &[String],
    hung: bool,
    limit: Duration,
    with_change: Duration,
) -> (bool, String) {
    if failing.is_empty() && hung {
        // A test that never finishes on the base's code and passes with the change shows
        // the problem as a failing one does.
        return (
            true,
            format!(
                "the run's tests ({}) do not finish on the base code: stopped after {} s \
                 (with the change they all ran in {} s)",
                quoted(new_tests),
                limit.as_secs(),
                with_change.as_secs()
            ),
        );
    }
    if failing.is_empty() {
        return (
            false,
            format!(
                "none: the new tests ({}) do not fail on the base code by a named failure (they pass, are skipped, or cannot import there), so they do not show the problem",
                quoted(new_tests)
            ),
        );
    }
    (
        true,
        format!(
            "{} fail(s) on the base code and pass(es) now",
            quoted(failing)
        ),
    )
}

/// The failing tests the baseline named (or its failing exit), when it showed any, less the
/// ones the run left standing as pre-existing or flaky (`left`).
fn baseline_failures(baseline: Option<&Observation>, left: &[String]) -> Option<String> {
    let b = baseline?;
    match &b.report {
        // A failure the run left standing (pre-existing, flaky) showed nothing about it.
        Some(r) if !r.failed.is_empty() => {
            let shown: Vec<String> = r
                .failed
                .iter()
                .filter(|n| !left.contains(n))
                .cloned()
                .collect();
            (!shown.is_empty()).then(|| quoted(&shown))
        }
        _ => match b.exit_code {
            Some(0) => None,
            Some(c) => Some(format!("exit code {c}")),
            None => Some("killed".into()),
        },
    }
}

/// Whether the test `name` really failed in `report` (the run's tests on the base code): named
/// failing — not merely absent (a module that could not be collected on the base, an
/// unreadable output), not skipped, and not failing only because what it imports is missing
/// on the base (`ImportError`, `ModuleNotFoundError`: the test of a function the change adds
/// shows no problem in the code it fixes). Issue 18's attacker review.
fn fails_for_real(report: Option<&verify::TestReport>, name: &str) -> bool {
    let Some(r) = report.filter(|r| r.names >= verify::Names::FailedOnly) else {
        return false;
    };
    let import_error = r.details.get(name).is_some_and(|d| {
        d.lines().any(|l| {
            let l = l.trim_start_matches(['E', ' ']);
            l.starts_with("ImportError") || l.starts_with("ModuleNotFoundError")
        })
    });
    r.failed.contains(name) && !r.skipped.contains(name) && !import_error
}

/// Tests that pass now and that the baseline did not run: the run's new tests.
fn new_test_names(baseline: Option<&Observation>, now: &Observation) -> Vec<String> {
    let Some(r) = now.full_report() else {
        return Vec::new();
    };
    let before = baseline.and_then(|b| b.report.as_ref());
    r.passed
        .iter()
        .filter(|n| before.is_none_or(|b| !b.passed.contains(*n) && !b.failed.contains(*n)))
        .cloned()
        .collect()
}

/// The passing tests whose file (as the runner names it) is one of `files`.
///
/// Where the runner's names place no test in a file (node:test and mocha name a test by its
/// suites and title), every test that passes now is a candidate, the flaky ones aside: the
/// run on the base's code differs from the baseline only by the run's test files, so a test
/// failing there and passing now is one those files changed (issue 39: a koa fix that made
/// an existing assertion strict was never seen to reproduce).
fn tests_in_files(now: &Observation, files: &[String], flaky: &BTreeSet<String>) -> Vec<String> {
    let Some(r) = now.report.as_ref() else {
        return Vec::new();
    };
    let placed = r.passed.iter().any(|n| test_file_of(n).is_some());
    r.passed
        .iter()
        .filter(|n| match test_file_of(n) {
            Some(f) => files.iter().any(|p| p == f),
            None => !placed && !flaky.contains(*n),
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_the_base_a_named_failure_or_a_hang_reproduces_and_a_pass_does_not() {
        let tests = vec!["t::new".to_string()];
        let (limit, took) = (Duration::from_secs(30), Duration::from_secs(2));
        let (yes, line) = on_base_result(&tests, &tests, false, limit, took);
        assert!(
            yes && line == "`t::new` fail(s) on the base code and pass(es) now",
            "{line}"
        );
        let (yes, line) = on_base_result(&tests, &[], true, limit, took);
        assert!(
            yes && line.contains("do not finish on the base code: stopped after 30 s"),
            "{line}"
        );
        let (yes, line) = on_base_result(&tests, &[], false, limit, took);
        assert!(
            !yes && line.starts_with("none: the new tests (`t::new`)"),
            "{line}"
        );
        assert!(nothing_to_reproduce(Reproduce::Off).starts_with("not asked"));
        assert!(nothing_to_reproduce(Reproduce::Require).starts_with("none:"));
    }
}
