//! The success decision: exit codes and test names, never a model's opinion.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::detect::TestCommand;
use super::junit::parse_junit_xml;
use super::parse::parse_output;
use super::report::{Names, TestReport};

/// What the executor reported for one run of the test command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunResult {
    /// The exit code; `None` when the process was killed (signal, time-out).
    pub exit_code: Option<i32>,
    /// stdout and stderr as captured (possibly capped head and tail).
    pub output: String,
}

/// One test run, read: its exit code and what its output says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// The exit code; `None` when the process was killed.
    pub exit_code: Option<i32>,
    /// The parsed results; `None` when the output could not be read.
    pub report: Option<TestReport>,
}

impl Observation {
    /// The parsed results where they name every test that ran, passing ones too.
    pub fn full_report(&self) -> Option<&TestReport> {
        self.report.as_ref().filter(|r| r.names == Names::Full)
    }
}

/// Reads a run: its output, and the JUnit XML reports it wrote (for Maven and Gradle; see
/// [`read_junit_reports`](super::read_junit_reports)). The XML wins when it names more.
pub fn observe(cmd: &TestCommand, result: &RunResult, junit_xml: &[String]) -> Observation {
    let text = parse_output(Some(cmd.runner), &result.output);
    let xml = parse_junit_xml(junit_xml);
    let report = match (text, xml) {
        (Some(t), Some(x)) => {
            let t_rank = (t.names, t.passed.len() + t.failed.len());
            let x_rank = (x.names, x.passed.len() + x.failed.len());
            Some(if x_rank > t_rank { x } else { t })
        }
        (t, x) => t.or(x),
    };
    Observation {
        exit_code: result.exit_code,
        report,
    }
}

/// What a decision rests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Exit code plus a comparison of every test's name with the baseline.
    TestNames,
    /// Exit code plus a comparison of failing tests' names and of counts (the output does
    /// not name passing tests).
    FailedNames,
    /// The exit code alone (names could not be parsed, or there is nothing to compare).
    ExitCode,
}

/// The verdict on a test run, with the evidence for the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestVerdict {
    /// Whether the change is verified.
    pub success: bool,
    /// What the verdict rests on.
    pub basis: Basis,
    /// The run's exit code.
    pub exit_code: Option<i32>,
    /// Failed in the baseline, pass now.
    pub newly_passing: Vec<String>,
    /// Fail now and did not fail in the baseline.
    pub newly_failing: Vec<String>,
    /// Failed in the baseline and still fail.
    pub still_failing: Vec<String>,
    /// Failed in the baseline and did not run now (removed, renamed or skipped): blocks
    /// success, since deleting a failing test is not fixing it.
    pub missing: Vec<String>,
    /// Passed in the baseline and did not run now; reported, not blocking.
    pub dropped: Vec<String>,
    /// Plain sentences explaining the verdict, for the report and the model.
    pub notes: Vec<String>,
    /// The baseline named failing tests but this run's output could not be read into names:
    /// not a success, whatever the exit code.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unreadable: bool,
    /// Failed in the baseline, still fail, and are unrelated to the change: not blocking
    /// (`verify.preexisting = "allow"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preexisting: Vec<String>,
    /// Failed in the baseline but passed when the baseline ran again: left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flaky: Vec<String>,
    /// Why still-failing tests were not excused as pre-existing although the run fixed
    /// others (the request names them, or they may be what was asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_excused: Option<String>,
    /// Pass now and were not in the baseline at all: tests the run added (full names only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub added_passing: Vec<String>,
}

impl TestVerdict {
    /// One line for the report, e.g. `3 passed; the 1 that failed before now passes; none
    /// newly failing`.
    pub fn headline(&self, after: &Observation) -> String {
        let mut parts = Vec::new();
        if let Some(r) = &after.report {
            parts.push(format!(
                "{} passed, {} failed",
                r.counts.passed, r.counts.failed
            ));
        }
        match self.newly_passing.len() {
            0 => {}
            1 => parts.push("the 1 that failed before now passes".to_owned()),
            n => parts.push(format!("the {n} that failed before now pass")),
        }
        if !self.still_failing.is_empty() {
            parts.push(format!("{} still failing", self.still_failing.len()));
        }
        if !self.preexisting.is_empty() {
            parts.push(format!(
                "{} failing before and unrelated (pre-existing)",
                self.preexisting.len()
            ));
        }
        if !self.flaky.is_empty() {
            parts.push(format!("{} flaky left out", self.flaky.len()));
        }
        if let Some(why) = &self.not_excused {
            parts.push(why.clone());
        }
        if !self.missing.is_empty() {
            parts.push(format!("{} failing before did not run", self.missing.len()));
        }
        if self.unreadable {
            parts.push("the runner's output could not be read into test names".to_owned());
        }
        if self.basis != Basis::ExitCode {
            match self.newly_failing.len() {
                0 => parts.push("none newly failing".to_owned()),
                n => parts.push(format!("{n} newly failing")),
            }
        } else {
            parts.push(match self.exit_code {
                Some(c) => format!("exit code {c} (tests not compared by name)"),
                None => "killed (tests not compared by name)".to_owned(),
            });
        }
        parts.join("; ")
    }
}

/// Take `flaky` tests (failed in the baseline, passed in a full rerun) out of the decision,
/// and let the still-failing tests for which `unrelated` says so stand as pre-existing — but
/// only when the run fixed at least one baseline failure or added passing tests, nothing
/// newly fails, names
/// compare in full, and every test that fails now is accounted for. When in doubt it blocks.
///
/// `shown`: an earlier deciding run of the same attempt already showed what the run did
/// (the held-out run, whose test files are the base's, comes after the clean checkout's).
/// `requested` says whether the request (or the plan) names a test: its identifier, file or
/// full title. A requested test is never excused, and where the request names a baseline
/// failure that still fails nothing is (issue 18: a model fixing another baseline failure
/// instead of the one it was asked about). `unrelated` carries the evidence — for every
/// runner, the same failure before and after, in a test that does not reach the change —
/// so as many unrelated failures as the base had may stand beside one real fix (issue 39).
pub fn excuse(
    d: &mut TestVerdict,
    now: &Observation,
    flaky: &BTreeSet<String>,
    shown: bool,
    unrelated: impl Fn(&str) -> bool,
    requested: impl Fn(&str) -> bool,
) {
    if d.basis == Basis::ExitCode || d.unreadable {
        return;
    }
    let take = |v: &mut Vec<String>, out: &mut Vec<String>, keep: &dyn Fn(&str) -> bool| {
        let (gone, stay): (Vec<String>, Vec<String>) = v.drain(..).partition(|n| !keep(n));
        *v = stay;
        out.extend(gone);
    };
    let mut left_out = Vec::new();
    for v in [&mut d.newly_failing, &mut d.still_failing, &mut d.missing] {
        take(v, &mut left_out, &|n| !flaky.contains(n));
    }
    left_out.sort();
    left_out.dedup();
    d.flaky = left_out;
    // The run did something a test shows: it fixed a baseline failure, or added tests that
    // pass (a real fix usually comes with its own new test, and the reproduction check asks
    // whether that test fails on the base's code before the run is called verified).
    let did = shown || !d.newly_passing.is_empty() || !d.added_passing.is_empty();
    if did && d.newly_failing.is_empty() && d.missing.is_empty() {
        let asked: Vec<&String> = d.still_failing.iter().filter(|n| requested(n)).collect();
        if !asked.is_empty() {
            let named = asked
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ");
            d.notes.push(format!(
                "the request names {named}, which failed before the change and still fails: \
                 never excused as pre-existing"
            ));
            d.not_excused = Some(format!(
                "the request names {named}: still failing, not excused"
            ));
        }
        let candidates: Vec<String> = d
            .still_failing
            .iter()
            .filter(|n| !requested(n) && unrelated(n))
            .cloned()
            .collect();
        if asked.is_empty() {
            let mut pre = Vec::new();
            take(&mut d.still_failing, &mut pre, &|n| {
                !candidates.iter().any(|c| c == n)
            });
            d.preexisting = pre;
        }
    }
    if !d.preexisting.is_empty() {
        d.notes.push(format!(
            "{} test(s) failed before the change and still fail, unrelated to it (pre-existing): {}",
            d.preexisting.len(),
            d.preexisting.join(", ")
        ));
    }
    let excused: BTreeSet<&String> = d.preexisting.iter().chain(&d.flaky).collect();
    let failing_accounted = now
        .report
        .as_ref()
        .is_some_and(|r| r.failed.iter().all(|n| excused.contains(n)));
    let exit_ok = now.exit_code == Some(0) || (now.exit_code.is_some() && failing_accounted);
    d.success = exit_ok
        && d.newly_failing.is_empty()
        && d.still_failing.is_empty()
        && d.missing.is_empty()
        && failing_accounted;
}

fn usable(o: Option<&Observation>) -> Option<&TestReport> {
    o.and_then(|o| o.report.as_ref())
        .filter(|r| r.names >= Names::FailedOnly)
}

/// Decides whether a run verifies the change.
///
/// Success = the command exited 0, every test that failed in the baseline passes now, and no
/// test fails now that did not fail before. Tests are compared by name where both runs name
/// them; otherwise the exit code decides and the notes say so. `baseline` is the run before
/// any edit (`None` when there was none).
pub fn decide(baseline: Option<&Observation>, after: &Observation) -> TestVerdict {
    let mut d = TestVerdict {
        success: false,
        basis: Basis::ExitCode,
        exit_code: after.exit_code,
        newly_passing: Vec::new(),
        newly_failing: Vec::new(),
        still_failing: Vec::new(),
        missing: Vec::new(),
        dropped: Vec::new(),
        notes: Vec::new(),
        unreadable: false,
        preexisting: Vec::new(),
        flaky: Vec::new(),
        not_excused: None,
        added_passing: Vec::new(),
    };
    let exit_ok = after.exit_code == Some(0);
    match after.exit_code {
        Some(0) => {}
        Some(c) => d
            .notes
            .push(format!("the test command exited with code {c}")),
        None => d
            .notes
            .push("the test command was killed (time-out or signal)".to_owned()),
    }

    let Some(now) = usable(Some(after)) else {
        // The baseline named failing tests: only names can show they pass now. An exit code
        // of 0 with unreadable output is what a runner killed early (`os._exit(0)` in a
        // conftest) or replaced (`"test": "echo ok"`) looks like, so it proves nothing.
        if let Some(before) = usable(baseline)
            && !before.failed.is_empty()
        {
            d.unreadable = true;
            d.missing = before.failed.iter().cloned().collect();
            d.notes.push(format!(
                "the baseline named {} failing test(s), but the runner's output now names no \
                 test at all, so nothing shows they pass; the exit code alone does not verify \
                 a fix",
                before.failed.len()
            ));
            return d;
        }
        d.notes.push(
            "the failing tests could not be named from the output, so the exit code alone \
             decides"
                .to_owned(),
        );
        d.success = exit_ok;
        return d;
    };
    let Some(before) = usable(baseline) else {
        // Nothing to compare with: every test must pass.
        d.newly_failing = now.failed.iter().cloned().collect();
        d.notes.push(match baseline {
            None => "there was no baseline run, so every test must pass".to_owned(),
            Some(_) => {
                "the baseline's tests could not be named, so every test must pass now".to_owned()
            }
        });
        d.success = exit_ok && now.failed.is_empty();
        if exit_ok && !now.failed.is_empty() {
            d.notes
                .push("the command exited 0 although tests are reported failing".to_owned());
        }
        return d;
    };

    let full = before.names == Names::Full && now.names == Names::Full;
    d.basis = if full {
        Basis::TestNames
    } else {
        Basis::FailedNames
    };
    let diff = |a: &BTreeSet<String>, b: &BTreeSet<String>| -> Vec<String> {
        a.difference(b).cloned().collect()
    };
    d.newly_failing = diff(&now.failed, &before.failed);
    d.still_failing = now.failed.intersection(&before.failed).cloned().collect();
    // A baseline failure that is skipped or xfailed now was not fixed, in every mode: a skip
    // raised from the code under test is still a test that did not pass (issue 18).
    let skipped_now: BTreeSet<String> = before.failed.intersection(&now.skipped).cloned().collect();
    if now.names == Names::Full {
        d.newly_passing = before
            .failed
            .intersection(&now.passed)
            .filter(|n| !skipped_now.contains(*n))
            .cloned()
            .collect();
        d.missing = before
            .failed
            .iter()
            .filter(|n| {
                !now.failed.contains(*n) && (!now.passed.contains(*n) || skipped_now.contains(*n))
            })
            .cloned()
            .collect();
        if before.names == Names::Full {
            d.added_passing = now
                .passed
                .iter()
                .filter(|n| {
                    !before.passed.contains(*n)
                        && !before.failed.contains(*n)
                        && !before.skipped.contains(*n)
                })
                .cloned()
                .collect();
        }
    } else {
        // Passing tests are not named: a test that failed before and is not failing now is
        // taken as passing, guarded by the counts — more tests must pass than before, by at
        // least the ones taken as fixed, and no more may be skipped than before. Where the
        // counts do not show that, every one of them is in doubt.
        d.newly_passing = diff(&before.failed, &now.failed);
        d.missing = skipped_now.iter().cloned().collect();
        d.newly_passing.retain(|n| !skipped_now.contains(n));
        d.notes.push(
            "the output names failing tests only; tests that failed before and are not \
             reported failing now are counted as passing"
                .to_owned(),
        );
        let fixed = d.newly_passing.len() as u64;
        let doubt = if now.counts.ran() < before.counts.ran() {
            Some(format!(
                "fewer tests ran than in the baseline ({} < {}), so a test may have been \
                 removed instead of fixed",
                now.counts.ran(),
                before.counts.ran()
            ))
        } else if now.counts.skipped > before.counts.skipped {
            Some(format!(
                "more tests were skipped than in the baseline ({} > {}), so a test may have \
                 been skipped instead of fixed",
                now.counts.skipped, before.counts.skipped
            ))
        } else if now.counts.passed < before.counts.passed + fixed {
            Some(format!(
                "fewer tests passed ({}) than the baseline's {} plus the {fixed} taken as \
                 fixed, so not every one of them passed",
                now.counts.passed, before.counts.passed
            ))
        } else {
            None
        };
        if let Some(why) = doubt {
            d.notes.push(why);
            d.missing.append(&mut d.newly_passing);
            d.missing.sort();
            d.missing.dedup();
        }
    }
    if full {
        d.dropped = before
            .passed
            .iter()
            .filter(|n| !now.passed.contains(*n) && !now.failed.contains(*n))
            .cloned()
            .collect();
    }
    if !d.missing.is_empty() {
        d.notes.push(format!(
            "{} test(s) that failed in the baseline did not run now (removed, renamed or \
             skipped); that is not a fix",
            d.missing.len()
        ));
    }
    if !d.dropped.is_empty() {
        d.notes.push(format!(
            "{} test(s) that passed in the baseline did not run now",
            d.dropped.len()
        ));
    }
    if exit_ok && !now.failed.is_empty() {
        d.notes
            .push("the command exited 0 although tests are reported failing".to_owned());
    }
    if !exit_ok && now.failed.is_empty() {
        d.notes.push(
            "no test is reported failing, but the exit code is not 0 (a build error, a crash, \
             or a failure outside the tests)"
                .to_owned(),
        );
    }
    d.success = exit_ok && now.failed.is_empty() && d.missing.is_empty();
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{Counts, Format};
    use std::collections::BTreeMap;

    fn report(names: Names, passed: &[&str], failed: &[&str]) -> TestReport {
        let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        TestReport {
            format: Format::Cargo,
            names,
            counts: Counts {
                passed: passed.len() as u64,
                failed: failed.len() as u64,
                skipped: 0,
            },
            passed: if names == Names::Full {
                set(passed)
            } else {
                BTreeSet::new()
            },
            failed: set(failed),
            skipped: BTreeSet::new(),
            details: BTreeMap::new(),
        }
    }

    fn obs(code: i32, r: Option<TestReport>) -> Observation {
        Observation {
            exit_code: Some(code),
            report: r,
        }
    }

    #[test]
    fn fix_that_makes_the_failing_test_pass_succeeds() {
        let before = obs(101, Some(report(Names::Full, &["a"], &["b"])));
        let after = obs(0, Some(report(Names::Full, &["a", "b"], &[])));
        let d = decide(Some(&before), &after);
        assert!(d.success, "{d:?}");
        assert_eq!(d.basis, Basis::TestNames);
        assert_eq!(d.newly_passing, ["b"]);
        assert!(d.newly_failing.is_empty() && d.still_failing.is_empty());
        assert_eq!(
            d.headline(&after),
            "2 passed, 0 failed; the 1 that failed before now passes; none newly failing"
        );
    }

    #[test]
    fn a_regression_fails_even_when_the_target_passes() {
        let before = obs(101, Some(report(Names::Full, &["a"], &["b"])));
        let after = obs(101, Some(report(Names::Full, &["b"], &["a"])));
        let d = decide(Some(&before), &after);
        assert!(!d.success);
        assert_eq!(
            (d.newly_passing.clone(), d.newly_failing.clone()),
            (vec!["b".into()], vec!["a".into()])
        );
    }

    #[test]
    fn still_failing_is_a_failure() {
        let before = obs(1, Some(report(Names::Full, &["a"], &["b"])));
        let after = obs(1, Some(report(Names::Full, &["a"], &["b"])));
        let d = decide(Some(&before), &after);
        assert!(!d.success);
        assert_eq!(d.still_failing, ["b"]);
    }

    #[test]
    fn deleting_the_failing_test_is_not_a_fix() {
        let before = obs(101, Some(report(Names::Full, &["a"], &["b"])));
        let after = obs(0, Some(report(Names::Full, &["a"], &[])));
        let d = decide(Some(&before), &after);
        assert!(!d.success);
        assert_eq!(d.missing, ["b"]);
    }

    #[test]
    fn deleting_the_failing_test_is_caught_by_counts_when_passes_are_unnamed() {
        let before = obs(1, Some(report(Names::FailedOnly, &["a", "c"], &["b"])));
        let after = obs(0, Some(report(Names::FailedOnly, &["a", "c"], &[])));
        let d = decide(Some(&before), &after);
        assert!(!d.success, "{d:?}");
        assert_eq!(d.missing, ["b"]);
        let fixed = obs(0, Some(report(Names::FailedOnly, &["a", "b", "c"], &[])));
        let d = decide(Some(&before), &fixed);
        assert!(d.success, "{d:?}");
        assert_eq!(d.basis, Basis::FailedNames);
        assert_eq!(d.newly_passing, ["b"]);
    }

    /// Guards issue 18: a baseline failure that is skipped now is not fixed — named as
    /// skipped, or (passes unnamed) hidden behind counts that show one more skip.
    #[test]
    fn a_skipped_baseline_failure_is_not_fixed_in_any_mode() {
        let before = obs(1, Some(report(Names::Full, &["a"], &["b"])));
        let mut skipped = report(Names::Full, &["a"], &[]);
        skipped.skipped.insert("b".into());
        skipped.counts.skipped = 1;
        let d = decide(Some(&before), &obs(0, Some(skipped.clone())));
        assert!(!d.success && d.missing == ["b"], "{d:?}");
        // Even if a line also calls it passed.
        skipped.passed.insert("b".into());
        let d = decide(Some(&before), &obs(0, Some(skipped)));
        assert!(!d.success && d.missing == ["b"], "{d:?}");

        let before = obs(1, Some(report(Names::FailedOnly, &["a"], &["b"])));
        let mut now = report(Names::FailedOnly, &["a", "x"], &[]);
        now.counts.skipped = 1;
        // The run count is even inflated (another test added): the skip count still tells.
        let d = decide(Some(&before), &obs(0, Some(now.clone())));
        assert!(!d.success && d.missing == ["b"], "{d:?}");
        // Named as skipped in a failed-names-only report.
        now.counts.skipped = 0;
        now.skipped.insert("b".into());
        let d = decide(Some(&before), &obs(0, Some(now)));
        assert!(!d.success && d.missing == ["b"], "{d:?}");
        // The passed count must grow by the ones taken as fixed.
        let mut now = report(Names::FailedOnly, &["a"], &[]);
        now.counts.skipped = 0;
        now.counts.failed = 1; // an unnamed failure (output cut): ran stays 2
        let d = decide(Some(&before), &obs(0, Some(now)));
        assert!(!d.success && d.missing == ["b"], "{d:?}");
    }

    #[test]
    fn exit_code_must_be_zero_even_if_all_tests_pass() {
        let before = obs(101, Some(report(Names::Full, &["a"], &["b"])));
        let after = obs(101, Some(report(Names::Full, &["a", "b"], &[])));
        let d = decide(Some(&before), &after);
        assert!(!d.success);
        assert!(
            d.notes.iter().any(|n| n.contains("exit code is not 0")),
            "{:?}",
            d.notes
        );
        let killed = Observation {
            exit_code: None,
            report: after.report.clone(),
        };
        assert!(!decide(Some(&before), &killed).success);
    }

    #[test]
    fn unparsed_output_falls_back_to_the_exit_code_and_says_so() {
        let before = obs(2, None);
        let d = decide(Some(&before), &obs(0, None));
        assert!(d.success);
        assert_eq!(d.basis, Basis::ExitCode);
        assert!(d.notes.iter().any(|n| n.contains("exit code alone")));
        assert!(!decide(Some(&before), &obs(1, None)).success);
    }

    /// Issue 18: a conftest calling `os._exit(0)`, or `"test": "echo ok"`, leaves an exit
    /// code of 0 and nothing to read. Where the baseline named failures, that is no fix.
    #[test]
    fn unreadable_output_after_a_named_failing_baseline_is_not_a_fix() {
        let before = obs(1, Some(report(Names::Full, &["a"], &["b"])));
        let d = decide(Some(&before), &obs(0, None));
        assert!(!d.success, "{d:?}");
        assert!(d.unreadable);
        assert_eq!(d.missing, ["b"]);
        assert!(
            d.headline(&obs(0, None))
                .contains("could not be read into test names"),
            "{}",
            d.headline(&obs(0, None))
        );
        // A baseline that named no failure leaves the exit code to decide, and says so.
        let clean = obs(0, Some(report(Names::Full, &["a"], &[])));
        let d = decide(Some(&clean), &obs(0, None));
        assert!(d.success && !d.unreadable);
    }

    /// Issue 19 point 7: a test failing before for an unrelated reason does not block a run
    /// that fixed what it was for; a flaky one is left out; a related one still blocks.
    #[test]
    fn preexisting_and_flaky_failures_are_excused_only_when_unrelated() {
        let before = obs(
            1,
            Some(report(
                Names::Full,
                &["a"],
                &["fix", "py_version", "wobbly"],
            )),
        );
        let after = obs(
            1,
            Some(report(
                Names::Full,
                &["a", "fix"],
                &["py_version", "wobbly"],
            )),
        );
        let flaky: BTreeSet<String> = ["wobbly".to_string()].into();
        let mut d = decide(Some(&before), &after);
        assert!(!d.success);
        excuse(
            &mut d,
            &after,
            &flaky,
            false,
            |n| n == "py_version",
            |n| n == "fix",
        );
        assert!(d.success, "{d:?}");
        assert_eq!(d.preexisting, ["py_version"]);
        assert_eq!(d.flaky, ["wobbly"]);
        assert!(
            d.headline(&after).contains("pre-existing"),
            "{}",
            d.headline(&after)
        );
        // Related (or in doubt): it blocks.
        let mut d = decide(Some(&before), &after);
        excuse(&mut d, &after, &flaky, false, |_| false, |n| n == "fix");
        assert!(!d.success);
        assert_eq!(d.still_failing, ["py_version"]);
        // Nothing fixed: nothing excused.
        let nothing = obs(1, Some(report(Names::Full, &["a"], &["fix", "py_version"])));
        let mut d = decide(Some(&before), &nothing);
        excuse(
            &mut d,
            &nothing,
            &BTreeSet::new(),
            false,
            |_| true,
            |_| false,
        );
        assert!(!d.success && d.preexisting.is_empty());
        // A newly failing test always fails the run.
        let broke = obs(1, Some(report(Names::Full, &["fix"], &["py_version", "a"])));
        let mut d = decide(Some(&before), &broke);
        excuse(&mut d, &broke, &BTreeSet::new(), false, |_| true, |_| false);
        assert!(!d.success);
    }

    /// Issue 39 (attrs, replayed): the base fails one unrelated test, and the fix comes with
    /// a new test of its own, so no baseline failure flips. Its added, passing test is what
    /// the run did: the unrelated failure stands as pre-existing. Without it, nothing does.
    #[test]
    fn a_fix_that_adds_its_own_test_lets_an_unrelated_failure_stand() {
        let before = obs(1, Some(report(Names::Full, &["a"], &["py_version"])));
        let after = obs(
            1,
            Some(report(Names::Full, &["a", "new_test"], &["py_version"])),
        );
        let mut d = decide(Some(&before), &after);
        assert_eq!(d.added_passing, ["new_test"]);
        excuse(&mut d, &after, &BTreeSet::new(), false, |_| true, |_| false);
        assert!(d.success, "{d:?}");
        assert_eq!(d.preexisting, ["py_version"]);
        // Nothing added, nothing fixed: nothing excused.
        let same = obs(1, Some(report(Names::Full, &["a"], &["py_version"])));
        let mut d = decide(Some(&before), &same);
        excuse(&mut d, &same, &BTreeSet::new(), false, |_| true, |_| false);
        assert!(!d.success && d.preexisting.is_empty(), "{d:?}");
        // The held-out run has the base's test files, so not the added test: the clean
        // checkout's run before it showed what the run did.
        let mut d = decide(Some(&before), &same);
        excuse(&mut d, &same, &BTreeSet::new(), true, |_| true, |_| false);
        assert!(d.success && d.preexisting == ["py_version"], "{d:?}");
    }

    /// Guards issue 18's attacker review, item 3: the model fixes another baseline failure
    /// instead of the one the request is about; that one is never excused. Where the request
    /// names none, as many unrelated failures as the base had stand beside one real fix
    /// (issue 39: a URL library's 10 failing conformance cases).
    #[test]
    fn the_requested_failure_is_never_excused() {
        let before = obs(1, Some(report(Names::Full, &["a"], &["fix", "other"])));
        let after = obs(1, Some(report(Names::Full, &["a", "other"], &["fix"])));
        let mut d = decide(Some(&before), &after);
        excuse(
            &mut d,
            &after,
            &BTreeSet::new(),
            false,
            |_| true,
            |n| n == "fix",
        );
        assert!(!d.success, "{d:?}");
        assert!(d.preexisting.is_empty());
        assert!(
            d.notes
                .iter()
                .any(|n| n.contains("the request names `fix`")),
            "{d:?}"
        );
        // One fixed, ten unrelated left: excused, and listed.
        let ten: Vec<String> = (0..10).map(|i| format!("conformance_{i}")).collect();
        let mut failing: Vec<&str> = ten.iter().map(String::as_str).collect();
        failing.push("x");
        let before = obs(1, Some(report(Names::Full, &["a"], &failing)));
        let after = obs(1, Some(report(Names::Full, &["a", "x"], &failing[..10])));
        let mut d = decide(Some(&before), &after);
        excuse(&mut d, &after, &BTreeSet::new(), false, |_| true, |_| false);
        assert!(d.success && d.preexisting.len() == 10, "{d:?}");
        // Unrelated by no evidence: it blocks.
        let mut d = decide(Some(&before), &after);
        excuse(
            &mut d,
            &after,
            &BTreeSet::new(),
            false,
            |_| false,
            |_| false,
        );
        assert!(!d.success && d.preexisting.is_empty(), "{d:?}");
    }

    #[test]
    fn unparsed_baseline_requires_every_test_to_pass() {
        // E.g. the baseline did not compile: nothing to compare, so nothing may fail.
        let before = obs(101, None);
        let d = decide(
            Some(&before),
            &obs(0, Some(report(Names::Full, &["a", "b"], &[]))),
        );
        assert!(d.success);
        assert_eq!(d.basis, Basis::ExitCode);
        let d = decide(
            Some(&before),
            &obs(0, Some(report(Names::Full, &["a"], &["b"]))),
        );
        assert!(!d.success);
        assert_eq!(d.newly_failing, ["b"]);
    }

    #[test]
    fn dropped_passing_tests_are_reported_but_do_not_block() {
        let before = obs(1, Some(report(Names::Full, &["a", "old"], &["b"])));
        let after = obs(0, Some(report(Names::Full, &["a", "b"], &[])));
        let d = decide(Some(&before), &after);
        assert!(d.success);
        assert_eq!(d.dropped, ["old"]);
    }

    #[test]
    fn observe_prefers_junit_xml_when_it_names_more() {
        // A real `mvn test` run: the console names only the failure, the report every test.
        let cmd = TestCommand {
            command: "mvn -B test".into(),
            runner: crate::verify::Runner::Maven,
            source: crate::verify::CommandSource::Config,
            script: None,
        };
        let result = RunResult {
            exit_code: Some(1),
            output: include_str!("testdata/maven_surefire.txt").into(),
        };
        let text_only = observe(&cmd, &result, &[]);
        assert_eq!(text_only.report.as_ref().unwrap().names, Names::FailedOnly);
        let xml = include_str!("testdata/surefire_TEST-com.example.CalcTest.xml").to_owned();
        let both = observe(&cmd, &result, &[xml]);
        let r = both.report.unwrap();
        assert_eq!(r.format, Format::JUnitXml);
        assert_eq!(r.names, Names::Full);
        assert_eq!(r.passed.len(), 1);
    }

    #[test]
    fn no_baseline_means_everything_must_pass() {
        let d = decide(None, &obs(0, Some(report(Names::Full, &["a"], &[]))));
        assert!(d.success);
        assert!(!decide(None, &obs(0, Some(report(Names::Full, &["a"], &["b"])))).success);
    }
}
