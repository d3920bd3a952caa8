//! Clean checkouts for the final check: exactly one commit checked out afresh (no
//! untracked or ignored file), its tests run in the deciding environment, then removed; and
//! the base's Rust build kept after the baseline so that each checkout compiles only what
//! the change touched. Decides nothing: [`super::final_check`] does.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::error::Result;
use super::ledger::Ledger;
use super::setup::{self, Workbench};
use super::verification::{Check, TestRun, run_tests_at};
use crate::audit::chain::Kind;
use crate::verify::{self, TestCommand};

/// What every deciding checkout of one attempt shares: its name, the test command, the
/// paths the run changed and the deciding environment.
#[derive(Clone, Copy)]
pub(super) struct Checkouts<'a> {
    pub(super) name: &'a str,
    pub(super) cmd: &'a TestCommand,
    pub(super) changed: &'a [String],
    pub(super) env: Option<&'a super::record::SetupRecord>,
}

/// How long the run's tests may take on the base's code: three times what they took with
/// the change, and never less than half a minute (a suite's start-up varies).
pub(super) fn on_base_limit(with_change: Duration) -> Duration {
    (with_change * 3).max(Duration::from_secs(30))
}

/// Check `commit` out afresh as `at.name`, run the tests there in the deciding environment
/// `at.env` and remove the checkout; `limit` shortens the time-out.
pub(super) async fn run_clean(
    led: &mut Ledger<'_>,
    at: &Checkouts<'_>,
    commit: gix::ObjectId,
    check: Check,
    limit: Option<Duration>,
) -> Result<TestRun> {
    let Checkouts {
        name,
        cmd,
        changed,
        env,
    } = *at;
    let svc = led.svc;
    let tree = svc.repo.clean_checkout(name, commit)?;
    seed_from_base_build(led, tree.path(), commit);
    let executor = setup::executor_at(led, &tree, env)?;
    let run = run_tests_at(
        led,
        executor.as_ref(),
        tree.path(),
        cmd,
        check,
        changed,
        limit,
    )
    .await;
    drop(executor);
    if let Err(e) = tree.remove() {
        tracing::warn!(error = %e, "cannot remove a clean checkout");
    }
    run
}

/// Where the base's Rust build is kept for the run's clean checkouts: its private directory,
/// in no sandbox's view.
fn base_build_dir(led: &Ledger<'_>) -> std::path::PathBuf {
    led.dir
        .join(super::record::files::PRIVATE)
        .join("base-build")
}

/// Largest base build kept (a copy goes into every clean checkout).
const BASE_BUILD_MAX_BYTES: u64 = 8 << 30;

/// Keep the base's Rust build as the baseline left it in the worktree, before any model
/// turn, for the clean checkouts (`workspace::keep_build`): they then compile only what the
/// change touched. Not for a project that moves its build elsewhere (`CARGO_TARGET_DIR`,
/// `build.target-dir`), and a failure only costs the time it would have saved.
pub(super) fn keep_base_build(
    led: &mut Ledger<'_>,
    bench: &Workbench,
    cmd: &TestCommand,
) -> Result<()> {
    if cmd.runner != verify::Runner::Cargo || moves_its_build(led)? {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let into = base_build_dir(led);
    match crate::workspace::keep_build(bench.worktree.path(), &into, BASE_BUILD_MAX_BYTES) {
        Ok(Some(kept)) => led.audit(
            Kind::Verify,
            json!({"base_build": {"kept": kept.dirs, "bytes": kept.bytes, "duration_ms": started.elapsed().as_millis() as u64}}),
        )?,
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "the base's build is not kept");
            let _ = crate::workspace::remove_kept(&into);
        }
    }
    Ok(())
}

/// An ended run's kept build serves nothing.
pub(super) fn remove_base_build(led: &Ledger<'_>) {
    if let Err(e) = crate::workspace::remove_kept(&base_build_dir(led)) {
        tracing::warn!(error = %e, "the base's build stays");
    }
}

/// Whether the project or the front door puts cargo's build somewhere other than `target/`.
fn moves_its_build(led: &Ledger<'_>) -> Result<bool> {
    super::verification::cargo_setting_given(
        led,
        &["CARGO_TARGET_DIR", "CARGO_BUILD_TARGET_DIR"],
        "target-dir",
    )
}

/// Give the clean checkout of `commit` at `root` the base's build, with every file the same
/// as in the base aged so that build counts as fresh; what differs keeps its new time and
/// is compiled. A failure leaves the checkout to build from scratch.
fn seed_from_base_build(led: &Ledger<'_>, root: &Path, commit: gix::ObjectId) {
    let kept = base_build_dir(led);
    if !kept.is_dir() {
        return;
    }
    let changed = led
        .svc
        .repo
        .resolve(&led.rec.base_sha)
        .and_then(|base| led.svc.repo.changed_blobs(base, commit));
    let changed: BTreeSet<String> = match changed {
        Ok(c) => c.into_iter().map(|c| c.path).collect(),
        Err(e) => {
            tracing::warn!(error = %e, "the clean checkout builds from scratch");
            return;
        }
    };
    if let Err(e) = crate::workspace::seed_checkout(&kept, root, &|p| !changed.contains(p)) {
        tracing::warn!(error = %e, "the clean checkout builds from scratch");
    }
}
