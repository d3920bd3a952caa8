//! The final check after `finish`, which decides the run: the verified-change contract as
//! named steps, in order, each able to end it with a [`Verdict`] that says why:
//!
//! 1. [`checkpoint::gate`]: the commit-time policy undoes what may not be committed, and a
//!    change to the test runner's configuration waits for a person
//!    (`policy.runner_config = "ask"`);
//! 2. [`working_tree`]: the test command in the worktree, against the baseline, and what
//!    the tests wrote there set apart from the change (attribution);
//! 3. [`clean_checkout`]: the same in a clean checkout of exactly what would be committed (no
//!    untracked or ignored file, caches empty), in the deciding environment;
//! 4. [`held_out_tests`]: when the run changed test files that the base has, the base's
//!    versions of them against the new code (a weakened assertion does not fix anything);
//! 5. [`super::reproduction`]: when the baseline showed no failing test, a test of the run's that
//!    fails on the base code and passes now (`verify.reproduce`).
//!
//! The integrity block of the report is written as the steps go. This module decides; the
//! test runs themselves are [`super::verification`]'s and the checkouts
//! [`super::clean_checkout`]'s.

use std::time::Duration;

use super::clean_checkout::{Checkouts, run_clean};
use super::error::Result;
use super::ledger::Ledger;
use super::report::{Integrity, TestFileChange};
use super::setup::Workbench;
use super::verdict::{Change, CleanRun, Verdict};
use super::verification::{Check, quoted, run_tests};
use super::{attribution, checkpoint};
use crate::policy::{Approval, runner_change};
use crate::verify::{self, TestCommand};
use crate::workspace::{ChangedBlob, FileStatus};

/// The worktree's test run, as the verdict needs it.
struct WorkingTree {
    passed: bool,
    feedback: String,
}

/// The final verification of fix attempt `attempt`, step by step (see the module's text).
pub(super) async fn run(
    led: &mut Ledger<'_>,
    bench: &Workbench,
    cmd: &TestCommand,
    attempt: u32,
) -> Result<Verdict> {
    let gated = checkpoint::gate(led, bench)?;
    let mut integrity = starting_integrity(led);
    add_excluded(&mut integrity, gated.excluded);
    if let Some(approval) = gated.pending {
        return Ok(conclude(led, integrity, Verdict::pending(approval)));
    }
    let (worktree, change) = working_tree(led, bench, cmd, attempt, &mut integrity).await?;
    let mut feedback = worktree.feedback;
    if !gated.told.is_empty() {
        feedback.push_str(&format!("\n{}", gated.told));
    }
    if !worktree.passed {
        return Ok(conclude(led, integrity, Verdict::failed(feedback)));
    }
    // The environment that decides: the base's, or — for a change to what set-up reads
    // that got past the gate — a fresh set-up of exactly this tree (issue 38).
    let deciding = super::environment::deciding(led, change.snapshot, cmd, &change.paths).await?;
    integrity.environment = deciding.line();
    if let super::environment::Deciding::Failed(why) = &deciding {
        let why = setup_failed_feedback(why);
        return Ok(conclude(led, integrity, Verdict::failed(why)));
    }
    let name = format!("{}-verify", led.rec.run_id);
    let at = Checkouts {
        name: &name,
        cmd,
        changed: &change.paths,
        env: deciding.record(),
    };
    let clean = match clean_checkout(led, &at, &change, attempt, &mut integrity).await? {
        Ok(clean) => clean,
        Err(verdict) => return Ok(conclude(led, integrity, verdict)),
    };
    if let Some(verdict) = held_out_tests(led, &at, &change, attempt, &mut integrity).await? {
        return Ok(conclude(led, integrity, verdict));
    }
    if let Some(verdict) =
        super::reproduction::step(led, &at, &change, &clean, attempt, &mut integrity).await?
    {
        return Ok(conclude(led, integrity, verdict));
    }
    integrity.passed = true;
    let verdict = Verdict {
        passed: true,
        feedback,
        pending: None,
    };
    Ok(conclude(led, integrity, verdict))
}

/// Record the integrity block as it stands and hand back the verdict.
fn conclude(led: &mut Ledger<'_>, integrity: Integrity, verdict: Verdict) -> Verdict {
    led.rec.integrity = Some(integrity);
    verdict
}

/// The integrity block an attempt starts from: what earlier attempts excluded, and whether
/// commands ran unconfined.
fn starting_integrity(led: &Ledger<'_>) -> Integrity {
    Integrity {
        excluded: led
            .rec
            .integrity
            .as_ref()
            .map(|i| i.excluded.clone())
            .unwrap_or_default(),
        unconfined: led.svc.exec_options.sandbox == crate::config::SandboxMode::Off,
        ..Integrity::default()
    }
}

/// Step 2: the tests in the worktree; then what they wrote there is set apart from the
/// change, and the change itself is read and described.
async fn working_tree(
    led: &mut Ledger<'_>,
    bench: &Workbench,
    cmd: &TestCommand,
    attempt: u32,
    integrity: &mut Integrity,
) -> Result<(WorkingTree, Change)> {
    let run = run_tests(led, bench, cmd, Check::Attempt(attempt)).await?;
    let worktree = WorkingTree {
        passed: run.decision.success,
        feedback: run.feedback(),
    };
    led.rec.verification.push(run.line);
    // What the tests wrote in the worktree is not part of the change.
    add_excluded(integrity, attribution::exclude_test_outputs(led, bench)?);
    let repo = &led.svc.repo;
    let base = repo.resolve(&led.rec.base_sha)?;
    let snapshot = bench.worktree.snapshot()?;
    let blobs = repo.changed_blobs(base, snapshot)?;
    describe_changes(led, bench.worktree.path(), &blobs, integrity);
    let paths = blobs.iter().map(|c| c.path.clone()).collect();
    Ok((
        worktree,
        Change {
            base,
            snapshot,
            blobs,
            paths,
        },
    ))
}

/// What the model is told when setting the committed tree up afresh failed.
fn setup_failed_feedback(why: &str) -> String {
    format!(
        "Your change touches what the project's set-up reads, and setting up the committed \
         tree afresh failed: {why}. Fix the manifest or requirement files you changed."
    )
}

/// Step 3: a clean checkout of what would be committed decides; what it excuses
/// (pre-existing and flaky failures) is what the later steps may excuse.
async fn clean_checkout(
    led: &mut Ledger<'_>,
    at: &Checkouts<'_>,
    change: &Change,
    attempt: u32,
    integrity: &mut Integrity,
) -> Result<std::result::Result<CleanRun, Verdict>> {
    let run = run_clean(led, at, change.snapshot, Check::Clean(attempt), None).await?;
    integrity.clean_tree = Some(run.line.result.clone());
    integrity.preexisting.clone_from(&run.decision.preexisting);
    integrity.flaky.clone_from(&run.decision.flaky);
    let ok = run.decision.success;
    let feedback = run.feedback();
    let kept = CleanRun {
        obs: run.obs.clone(),
        took: Duration::from_millis(run.line.duration_ms),
    };
    led.rec.verification.push(run.line);
    if !ok {
        return Ok(Err(Verdict::failed(format!(
            "The tests pass in your working tree but not in a fresh checkout of what would be \
             committed (untracked and ignored files, build outputs and caches do not count; \
             only committed files do):\n{feedback}"
        ))));
    }
    Ok(Ok(kept))
}

/// The changed test files a held-out run judges: whole test files put back as in the base,
/// and files that mix code and tests whose test code changed (how).
#[derive(Debug, Default, PartialEq)]
struct HeldOut {
    whole: Vec<String>,
    mixed: Vec<(String, Vec<String>)>,
}

impl HeldOut {
    /// Sort the changed files: test files exactly as in the base (changed ones put back,
    /// added ones left out: a new test module can patch the runner when it is imported)
    /// run against the new code. A file that mixes code and its tests (a Rust
    /// `#[cfg(test)]` module) cannot be put back whole without undoing the fix, so its
    /// test code is compared.
    fn split(blobs: &[ChangedBlob], baseline: Option<&verify::TestReport>) -> Self {
        let mut held = Self::default();
        for c in blobs {
            match test_file(c, baseline) {
                TestFile::No => {}
                TestFile::Whole => held.whole.push(c.path.clone()),
                TestFile::Mixed(how) if how.is_empty() => {}
                TestFile::Mixed(how) => held.mixed.push((c.path.clone(), how)),
            }
        }
        held
    }

    fn is_empty(&self) -> bool {
        self.whole.is_empty() && self.mixed.is_empty()
    }

    /// Every file judged, whole ones first.
    fn files(&self) -> Vec<String> {
        self.whole
            .iter()
            .cloned()
            .chain(self.mixed.iter().map(|(p, _)| p.clone()))
            .collect()
    }

    /// The mixed files and how their test code changed, for the report and the model.
    fn mixed_listed(&self) -> String {
        self.mixed
            .iter()
            .map(|(p, how)| format!("`{p}`: {}", how.join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Baseline failures the held-out run excuses that the clean run did not: the change to
/// the tests hid them (they pass with the run's test files and fail with the base's), so
/// they are never "pre-existing" (a title-only name, node:test's, places it in no file, so
/// relatedness alone did not see it).
fn hidden_by_test_change(held_out_excused: &[String], clean_excused: &[String]) -> Vec<String> {
    held_out_excused
        .iter()
        .filter(|n| !clean_excused.contains(n))
        .cloned()
        .collect()
}

/// Step 4: held-out tests. `None` when they pass (or are not needed, or a person approved
/// the plan's change to them); a verdict when they fail or wait for that approval.
async fn held_out_tests(
    led: &mut Ledger<'_>,
    at: &Checkouts<'_>,
    change: &Change,
    attempt: u32,
    integrity: &mut Integrity,
) -> Result<Option<Verdict>> {
    let baseline = led.rec.baseline.as_ref().and_then(|b| b.report.as_ref());
    let held = HeldOut::split(&change.blobs, baseline);
    if held.is_empty() {
        integrity.held_out = Some("not needed: no test file was changed".into());
        return Ok(None);
    }
    let mut ok = true;
    let mut said = String::new();
    let mut parts = Vec::new();
    if !held.whole.is_empty() {
        let commit = led
            .svc
            .repo
            .overlay(change.snapshot, change.base, &held.whole)?;
        let run = run_clean(led, at, commit, Check::HeldOut(attempt), None).await?;
        let hidden = hidden_by_test_change(&run.decision.preexisting, &integrity.preexisting);
        ok = run.decision.success && hidden.is_empty();
        parts.push(format!(
            "{} (test files as in the base: {})",
            run.line.result,
            quoted(&held.whole)
        ));
        said = run.feedback();
        if !hidden.is_empty() {
            parts.push(format!(
                "{} pass(es) with the run's test files and fail(s) with the base's: the change to the tests, not to the code, made them pass",
                quoted(&hidden)
            ));
            said.push_str(&format!(
                "\n{} pass with your test files and fail with the base's: the change to \
                 the tests made them pass, not a change to the code.",
                quoted(&hidden)
            ));
        }
        led.rec.verification.push(run.line);
    }
    if !held.mixed.is_empty() {
        ok = false;
        let listed = held.mixed_listed();
        parts.push(format!(
            "the tests inside files that also hold the code changed: {listed}"
        ));
        said.push_str(&format!(
            "\nThe test code inside these files changed: {listed} (it cannot be put back without \
             your change to the code beside it, so a change to an existing test there is \
             no fix)."
        ));
    }
    integrity.held_out = Some(parts.join("; "));
    if ok {
        return Ok(None);
    }
    let judged = held.files();
    let on_purpose = led
        .rec
        .plan
        .as_ref()
        .is_some_and(|p| p.steps.iter().any(|s| s.changes_tests));
    if !on_purpose {
        return Ok(Some(Verdict::failed(format!(
            "You changed or added test files ({}). With the test files exactly as in the \
             base revision, run against your code, the tests do not pass: a change to the \
             tests does not fix the code they test. Fix the code; add new tests in \
             addition to the old ones rather than changing them.\n{}",
            quoted(&judged),
            said.trim_start()
        ))));
    }
    // The request is about the tests themselves: a person decides, for exactly these test
    // files' content.
    let subject = test_change_subject(&judged, &change.blobs);
    let approved = led
        .rec
        .approvals
        .iter()
        .find(|a| a.approves(checkpoint::TEST_CHANGE, &subject))
        .map(|a| match &a.status {
            crate::policy::ApprovalStatus::Approved { by, .. } => by.clone(),
            _ => String::new(),
        });
    match approved {
        Some(by) => {
            if let Some(h) = integrity.held_out.as_mut() {
                h.push_str(&format!(
                    "; accepted: the plan changes these tests on purpose (approved by {by})"
                ));
            }
            Ok(None)
        }
        None => Ok(Some(Verdict::pending(Approval::pending(
            checkpoint::TEST_CHANGE,
            &subject,
            crate::policy::RiskTier::High,
            Vec::new(),
        )))),
    }
}

/// What a person approves when the plan changes tests on purpose: each judged file with the
/// fingerprint of its new content, so an approval covers exactly that content.
fn test_change_subject(judged: &[String], blobs: &[ChangedBlob]) -> String {
    format!(
        "changed tests that fail in their base versions: {}",
        judged
            .iter()
            .map(|p| {
                let blob = blobs
                    .iter()
                    .find(|c| &c.path == p)
                    .map(|c| c.new.as_slice());
                format!("`{p}` at {}", checkpoint::fingerprint(blob))
            })
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// How a changed file counts for the held-out check.
#[derive(Debug, PartialEq, Eq)]
enum TestFile {
    /// Not a test file.
    No,
    /// A test file: its base version is put back whole for the held-out run.
    Whole,
    /// A file holding code and its tests (Rust `#[cfg(test)]`/`#[test]` in the base version):
    /// putting it back would undo the fix, so its test code is compared; how it changed
    /// (empty: it did not).
    Mixed(Vec<String>),
}

/// Whether `c` is a test file: by the runners' naming conventions, because the baseline's
/// results name a test defined in it (a `checks.py` a project's `python_files` collects),
/// or, for a Rust source file whose base version holds tests and a Python module whose
/// doctests the baseline ran, partly (its test parts compared).
fn test_file(c: &ChangedBlob, baseline: Option<&verify::TestReport>) -> TestFile {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if c.path.ends_with(".rs")
        && !verify::is_test_path(&c.path)
        && c.status != FileStatus::Added
        && let Some(old) = verify::rust_test_code(&text(&c.old))
    {
        let new = (c.status != FileStatus::Deleted)
            .then(|| verify::rust_test_code(&text(&c.new)).unwrap_or_default());
        return TestFile::Mixed(verify::test_change(Some(&old), new.as_deref()));
    }
    // A source module whose doctests the runner collects (issue 40): its examples are
    // compared, the module is not put back (that would undo the fix).
    if c.path.ends_with(".py")
        && !verify::is_test_path(&c.path)
        && c.status != FileStatus::Added
        && baseline.is_some_and(|r| verify::names_doctest(r, &c.path))
        && let Some(old) = verify::python_doctests(&text(&c.old))
    {
        let new = (c.status != FileStatus::Deleted)
            .then(|| verify::python_doctests(&text(&c.new)).unwrap_or_default());
        return TestFile::Mixed(verify::doctest_change(&old, new.as_deref()));
    }
    if verify::is_test_path(&c.path)
        || baseline.is_some_and(|r| verify::named_by_results(r, &c.path))
    {
        TestFile::Whole
    } else {
        TestFile::No
    }
}

/// The test files and runner configuration the change touched, for the integrity block.
fn describe_changes(
    led: &Ledger<'_>,
    root: &std::path::Path,
    changed: &[ChangedBlob],
    integrity: &mut Integrity,
) {
    let test_command = led.rec.test_command.as_deref().unwrap_or("");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let baseline = led.rec.baseline.as_ref().and_then(|b| b.report.as_ref());
    for c in changed {
        let old = (c.status != FileStatus::Added).then_some(c.old.as_slice());
        let new = (c.status != FileStatus::Deleted).then_some(c.new.as_slice());
        match test_file(c, baseline) {
            TestFile::No => {}
            TestFile::Mixed(how) if how.is_empty() => {}
            TestFile::Whole => integrity.test_files.push(TestFileChange {
                path: c.path.clone(),
                how: verify::test_change(old.map(text).as_deref(), new.map(text).as_deref()),
            }),
            TestFile::Mixed(how) => integrity.test_files.push(TestFileChange {
                path: c.path.clone(),
                how,
            }),
        }
        // Credited to a person only for exactly this content: an approval of the path at
        // some other content (or of another path that contains this one) is not theirs.
        let at = format!(
            "`{}` at {}:",
            c.path,
            checkpoint::approval_fingerprint(root, &c.path)
        );
        let approved_by = |tool: &str| {
            led.rec
                .approvals
                .iter()
                .filter(|a| a.request.tool == tool)
                .find(|a| {
                    a.request
                        .subject
                        .split("; ")
                        .any(|part| part.starts_with(&at))
                })
                .and_then(|a| match &a.status {
                    crate::policy::ApprovalStatus::Approved { by, .. } => Some(by.clone()),
                    _ => None,
                })
        };
        let credited = |why: String, by: Option<String>| match by {
            Some(by) => format!("{why} (approved by {by})"),
            None => format!("{why} (allowed by the policy)"),
        };
        let at_base = |p: &str| {
            led.svc
                .repo
                .read_file_at(&led.rec.base_sha, p)
                .ok()
                .flatten()
        };
        if let Some(why) = runner_change(&c.path, old, new, test_command, &at_base) {
            integrity
                .runner_config
                .push(credited(why, approved_by(checkpoint::RUNNER_CONFIG)));
        } else if let Some(why) =
            verify::test_special_casing(&c.path, old.map(text).as_deref(), new.map(text).as_deref())
        {
            integrity
                .under_test
                .push(credited(why, approved_by(checkpoint::UNDER_TEST)));
        }
    }
}

fn add_excluded(integrity: &mut Integrity, paths: Vec<String>) {
    for p in paths {
        if !integrity.excluded.contains(&p) {
            integrity.excluded.push(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::World;
    use super::super::state::RunState;
    use super::super::verification::test_command;
    use super::*;

    fn blob(path: &str, status: FileStatus, old: &str, new: &str) -> ChangedBlob {
        ChangedBlob {
            path: path.into(),
            status,
            old: old.into(),
            new: new.into(),
        }
    }

    #[test]
    fn held_out_judges_test_files_whole_and_mixed_files_by_their_test_code() {
        let lib = |answer: u8, expect: u8| {
            format!(
                "pub fn f() -> u8 {{ {answer} }}\n#[cfg(test)]\nmod tests {{\n    #[test]\n    \
                 fn t() {{ assert_eq!(super::f(), {expect}); }}\n}}\n"
            )
        };
        let blobs = [
            blob("src/calc.py", FileStatus::Modified, "x = 1\n", "x = 2\n"),
            blob(
                "tests/test_calc.py",
                FileStatus::Modified,
                "def test_a():\n    assert f() == 1\n",
                "def test_a():\n    assert f() == 2\n",
            ),
            // Added: held out by leaving it out of the tree.
            blob(
                "tests/test_new.py",
                FileStatus::Added,
                "",
                "def test_b():\n    pass\n",
            ),
            // The code beside its tests changed, the tests did not: nothing to judge.
            blob("src/fixed.rs", FileStatus::Modified, &lib(1, 2), &lib(2, 2)),
            // The tests beside the code changed: judged by how.
            blob("src/bent.rs", FileStatus::Modified, &lib(1, 2), &lib(1, 1)),
        ];
        let held = HeldOut::split(&blobs, None);
        assert_eq!(held.whole, ["tests/test_calc.py", "tests/test_new.py"]);
        assert_eq!(held.mixed.len(), 1, "{held:?}");
        assert_eq!(held.mixed[0].0, "src/bent.rs");
        assert!(!held.mixed[0].1.is_empty(), "{held:?}");
        assert!(
            held.mixed_listed().starts_with("`src/bent.rs`: "),
            "{held:?}"
        );
        assert_eq!(
            held.files(),
            ["tests/test_calc.py", "tests/test_new.py", "src/bent.rs"]
        );
        assert!(HeldOut::split(&blobs[..1], None).is_empty());
        assert!(HeldOut::split(&blobs[3..4], None).is_empty());
    }

    #[test]
    fn only_what_the_clean_run_did_not_excuse_was_hidden_by_the_test_change() {
        let held = vec!["t::a".to_string(), "t::b".to_string()];
        let clean = vec!["t::a".to_string()];
        assert_eq!(hidden_by_test_change(&held, &clean), ["t::b"]);
        assert!(hidden_by_test_change(&clean, &held).is_empty());
    }

    #[test]
    fn an_approval_subject_names_each_file_with_its_new_contents_fingerprint() {
        let blobs = [blob("tests/t.py", FileStatus::Modified, "a", "b")];
        let one = test_change_subject(&["tests/t.py".into()], &blobs);
        let other = test_change_subject(
            &["tests/t.py".into()],
            &[blob("tests/t.py", FileStatus::Modified, "a", "c")],
        );
        assert!(
            one.starts_with("changed tests that fail in their base versions: `tests/t.py` at ")
        );
        assert_ne!(one, other, "other content, other subject");
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
        let failed = run(&mut led, &bench, &cmd, 1).await.unwrap();
        assert!(!failed.passed);
        assert!(!failed.feedback.is_empty());
        std::fs::write(bench.worktree.path().join("value.txt"), "2\n").unwrap();
        let verdict = run(&mut led, &bench, &cmd, 2).await.unwrap();
        assert!(verdict.passed, "{}", verdict.feedback);
        let whens: Vec<&str> = led
            .rec
            .verification
            .iter()
            .map(|v| v.when.as_str())
            .collect();
        // The passing attempt is decided again in a clean checkout of what is committed.
        assert_eq!(
            whens,
            ["attempt 1", "attempt 2", "attempt 2, clean checkout"]
        );
        let integrity = led.rec.integrity.as_ref().unwrap();
        assert!(integrity.passed && integrity.reproduced, "{integrity:?}");
        assert_eq!(led.rec.verification[1].exit_code, Some(0));
        let events = w.events();
        assert_eq!(events[0], "verified before: exit code 1");
        assert_eq!(events.len(), 4, "{events:?}");
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
        let verdict = run(&mut led, &bench, &cmd, 1).await.unwrap();
        assert!(verdict.passed, "{}", verdict.feedback);
        assert!(verdict.feedback.contains("`.env`"), "{}", verdict.feedback);
        assert!(!wt.join(".env").exists());
        assert!(led.rec.notes[0].starts_with("Not committed, refused by the policy"));
    }
}
