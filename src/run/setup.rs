//! Where a run works: its worktree on its branch, the sandboxed executor bound by the run's
//! clock, and the tools (with their context) that act in that worktree.
//!
//! A resumed run reopens its worktree at the last checkpoint, so no half-applied step
//! survives a crash. The environment the tests need (issue 19) is `environment.rs`'s; the
//! executor here takes it from the record and switches when it is set up again.

use std::sync::{Arc, RwLock};

use futures_util::future::BoxFuture;
use serde_json::json;

use super::deadline::Bounded;
use super::error::{Error, Result};
use super::ledger::Ledger;
use super::tools::RunCommand;
use crate::audit::chain::Kind;
use crate::exec::{
    BlockedHost, ExecOptions, ExecOutput, ExecRequest, Executor, LocalExecutor, SandboxReport,
};
use crate::policy::Policy;
use crate::tools::{Registry, ToolContext};
use crate::workspace::{Provenance, Worktree, WorktreeOptions, WorktreeRequest};

/// A prepared worktree and what works in it.
pub(super) struct Workbench {
    /// The run's worktree.
    pub(super) worktree: Worktree,
    /// The tools' context: confined root, policy, plan, approvals, audit sink.
    pub(super) ctx: ToolContext,
    /// The registry tools (`run` included); the harness tools are the turn's.
    pub(super) registry: Registry,
    /// Every command of the run, tests included, goes through this executor.
    pub(super) executor: Arc<dyn Executor>,
    /// The same executor, whose environment a new set-up replaces (issue 19).
    switch: Arc<Switch>,
    /// The run's claims on the shared set-up entries it uses: no eviction removes them
    /// while the workbench lives (issue 38).
    holds: std::sync::Mutex<Vec<super::in_use::Hold>>,
}

impl Workbench {
    /// Create the worktree (or reopen it after a crash, rolled back to the last checkpoint)
    /// and the tools that work in it. `resumed`: an earlier process started this run.
    pub(super) fn prepare(led: &mut Ledger<'_>, resumed: bool) -> Result<Self> {
        let svc = led.svc;
        let req = WorktreeRequest {
            run_id: led.rec.run_id.clone(),
            branch: led.rec.branch.clone(),
            base: led.rec.base_sha.clone(),
        };
        let (wt, prov) = svc.repo.create_worktree(
            &req,
            WorktreeOptions {
                resume: resumed || led.rec.task.branch.is_some(),
                warm: svc.warm_pool && !resumed,
            },
        )?;
        let discarded = match prov {
            Provenance::Fresh { discarded } | Provenance::Warm { discarded, .. } => discarded,
            Provenance::Reopened => 0,
        };
        if discarded > 0 {
            led.rec.notes.push(format!(
                "{discarded} worktree(s) no longer belonged to the repository (it was cloned again at the same path, or `git worktree prune` ran) and were removed; this run's worktree was made afresh."
            ));
        }
        if !resumed {
            led.audit(
                Kind::State,
                json!({"worktree": wt.path(), "branch": wt.branch(), "base": led.rec.base_sha, "provenance": format!("{prov:?}")}),
            )?;
        } else if let Some(last) = led.rec.commits.last() {
            // Anything after the last checkpoint was not verified: a resumed run starts from
            // the checkpoint, so no half-applied step survives a crash.
            let id = svc.repo.resolve(last)?;
            wt.rollback_to(id)?;
        }
        led.rec.worktree = wt.path().to_path_buf();
        let policy = Arc::new(Policy::from_config(&svc.config)?);
        let local = Arc::new(LocalExecutor::new(wt.path(), exec_options(led))?);
        // What confines the commands, as it is in force (not as asked): the first thing the
        // audit says about them, and a line of the report.
        let sb = local.sandbox();
        let line = sb.summary();
        if led.rec.sandbox.as_deref() != Some(line.as_str()) {
            led.audit(Kind::Policy, json!({"sandbox_in_force": sb}))?;
            led.rec.sandbox = Some(line);
        }
        let switch = Arc::new(Switch {
            report: local.sandbox().clone(),
            inner: RwLock::new(bounded(svc, local)),
        });
        let executor: Arc<dyn Executor> = switch.clone();
        let ctx = ToolContext::new(wt.path(), policy, led.tool_events())
            .map_err(|e| Error::io("cannot open the worktree", wt.path(), e))?;
        set_read_only(&ctx, led);
        if let Some(plan) = &led.rec.plan {
            ctx.with_plan(|p| p.plan = Some(plan.clone()));
        }
        if let Ok(mut a) = ctx.approvals.lock() {
            a.extend(led.rec.approvals.iter().cloned());
        }
        let mut registry = Registry::builtin();
        registry.register(Arc::new(RunCommand {
            executor: executor.clone(),
        }));
        let holds = led
            .rec
            .setup
            .as_ref()
            .and_then(|s| super::in_use::hold(&s.dir))
            .into_iter()
            .collect();
        Ok(Self {
            worktree: wt,
            ctx,
            registry,
            executor,
            switch,
            holds: std::sync::Mutex::new(holds),
        })
    }

    /// Keep `hold` for as long as the workbench lives.
    pub(super) fn keep(&self, hold: Option<super::in_use::Hold>) {
        if let (Some(h), Ok(mut holds)) = (hold, self.holds.lock()) {
            holds.push(h);
        }
    }

    /// From now on the run's commands get the environment `led.rec.setup` names (a set-up
    /// that ran, or ran again after a manifest changed).
    pub(super) fn use_environment(&self, led: &Ledger<'_>) -> Result<()> {
        set_read_only(&self.ctx, led);
        let local = Arc::new(LocalExecutor::new(self.worktree.path(), exec_options(led))?);
        let next = bounded(led.svc, local);
        if let Ok(mut inner) = self.switch.inner.write() {
            *inner = next;
        }
        Ok(())
    }
}

/// Tell the tools which project paths the commands see read-only: the outputs of the
/// environment in force.
fn set_read_only(ctx: &ToolContext, led: &Ledger<'_>) {
    let setup = led.rec.setup_run.as_ref().or(led.rec.setup.as_ref());
    let outputs: Vec<String> = setup
        .map(|s| {
            s.outputs
                .iter()
                .map(|o| o.to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    match ctx.read_only.lock() {
        Ok(mut g) => *g = outputs,
        Err(p) => *p.into_inner() = outputs,
    }
}

/// The executor options of the run's commands in its worktree: the front door's, with the
/// environment of the run's own tree when it set one up, else the base's.
fn exec_options(led: &Ledger<'_>) -> ExecOptions {
    let setup = led.rec.setup_run.as_ref().or(led.rec.setup.as_ref());
    options_with(led, setup)
}

/// The front door's executor options with the environment `setup` and the lints the base's
/// code needs forced (`RunRecord::forced_warn_lints`): what every test command of the run
/// gets, in the worktree or a clean checkout.
fn options_with(led: &Ledger<'_>, setup: Option<&super::record::SetupRecord>) -> ExecOptions {
    let mut opts = super::in_use::exec_options(&led.svc.exec_options, setup);
    opts.env.extend(forced_lints_env(led));
    opts
}

/// `RUSTFLAGS` and `RUSTDOCFLAGS` with `--force-warn` for each lint the base's code trips
/// under this toolchain (`RunRecord::forced_warn_lints`); nothing when there is none.
fn forced_lints_env(led: &Ledger<'_>) -> Vec<(String, String)> {
    if led.rec.forced_warn_lints.is_empty() {
        return Vec::new();
    }
    let flags = led
        .rec
        .forced_warn_lints
        .iter()
        .map(|l| format!("--force-warn {l}"))
        .collect::<Vec<_>>()
        .join(" ");
    vec![
        ("RUSTFLAGS".to_string(), flags.clone()),
        ("RUSTDOCFLAGS".to_string(), flags),
    ]
}

/// An executor whose inner executor can be replaced while the tools hold it.
struct Switch {
    /// The sandbox as first made (a new environment changes binds, not the mechanism).
    report: SandboxReport,
    inner: RwLock<Arc<dyn Executor>>,
}

impl Switch {
    fn current(&self) -> Arc<dyn Executor> {
        match self.inner.read() {
            Ok(e) => e.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }
}

impl Executor for Switch {
    fn run(&self, request: ExecRequest) -> BoxFuture<'_, crate::exec::Result<ExecOutput>> {
        let inner = self.current();
        Box::pin(async move { inner.run(request).await })
    }

    fn sandbox(&self) -> &SandboxReport {
        &self.report
    }

    fn blocked_hosts(&self) -> Vec<BlockedHost> {
        self.current().blocked_hosts()
    }
}

/// Every command of the run, tests included, ends by the run's deadline.
pub(super) fn bounded(
    svc: &super::services::Services,
    local: Arc<LocalExecutor>,
) -> Arc<dyn Executor> {
    Arc::new(Bounded::new(
        local,
        svc.router.clone(),
        svc.config.settings.budget.max_minutes,
        svc.exec_options.timeout,
    ))
}

/// An executor like the run's, rooted at `dir` (a clean checkout the final verification
/// runs in): same sandbox, same limits, same deadline, and `setup`, the environment that
/// decides (never the one the run's own tree was set up in while it worked). The
/// repository's objects are bound read-only, so git works in the checkout (issue 39).
pub(super) fn executor_at(
    led: &Ledger<'_>,
    tree: &crate::workspace::CleanTree,
    setup: Option<&super::record::SetupRecord>,
) -> Result<Arc<dyn Executor>> {
    let mut opts = options_with(led, setup);
    opts.bind.push(tree.objects().to_path_buf());
    Ok(bounded(
        led.svc,
        Arc::new(LocalExecutor::new(tree.path(), opts)?),
    ))
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{World, git};
    use super::*;

    #[test]
    fn a_fresh_run_gets_its_branch_and_a_resumed_one_starts_at_its_checkpoint() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        let bench = Workbench::prepare(&mut led, false).unwrap();
        let wt = bench.worktree.path().to_path_buf();
        assert_eq!(led.rec.worktree, wt);
        assert_eq!(
            git(&wt, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(),
            led.rec.branch
        );
        assert!(bench.registry.get("run").is_some());
        assert!(
            led.rec.sandbox.is_some(),
            "the sandbox in force is recorded"
        );
        // A checkpoint, then an unverified edit, then a crash: the resumed run is back at the
        // checkpoint.
        std::fs::write(wt.join("value.txt"), "2\n").unwrap();
        git(&wt, &["commit", "-qam", "checkpoint"]);
        let checkpoint = git(&wt, &["rev-parse", "HEAD"]).trim().to_string();
        led.rec.commits.push(checkpoint.clone());
        std::fs::write(wt.join("value.txt"), "half-applied\n").unwrap();
        std::fs::write(wt.join("stray.txt"), "x\n").unwrap();
        drop(bench);
        let bench = Workbench::prepare(&mut led, true).unwrap();
        let wt = bench.worktree.path();
        assert_eq!(git(wt, &["rev-parse", "HEAD"]).trim(), checkpoint);
        assert_eq!(
            std::fs::read_to_string(wt.join("value.txt")).unwrap(),
            "2\n"
        );
        assert!(git(wt, &["status", "--porcelain"]).trim().is_empty());
    }

    /// Issue 39 point 2: git works in a verification checkout, inside the view, with the
    /// repository's objects and tags but nothing else of its `.git` (its configuration may
    /// hold an Action's token, `agent/runs` the records).
    #[tokio::test(flavor = "multi_thread")]
    async fn git_works_in_a_clean_checkout_and_the_repository_config_stays_out() {
        let w = World::new(&[]);
        git(&w.work(), &["tag", "-a", "v1.4.0", "-m", "release"]);
        std::fs::write(w.work().join("value.txt"), "3\n").unwrap();
        git(&w.work(), &["commit", "-qam", "after the tag"]);
        let config = w.work().join(".git/config");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str("[http]\n\textraheader = AUTHORIZATION: basic c2VjcmV0LXRva2Vu\n");
        std::fs::write(&config, text).unwrap();
        let svc = w.services();
        let led = w.ledger(&svc);
        let head = svc.repo.resolve("main").unwrap();
        let tree = svc.repo.clean_checkout("git-inside", head).unwrap();
        let exec = executor_at(&led, &tree, None).unwrap();
        let common = std::fs::canonicalize(w.work().join(".git")).unwrap();
        let script = format!(
            "git describe --tags && git rev-parse HEAD && git ls-files && git log --oneline | wc -l && \
             if cat '{0}/config' 2>/dev/null || ls '{0}/agent' 2>/dev/null; then echo LEAK; fi",
            common.display()
        );
        let out = exec.run(ExecRequest::shell(script)).await.unwrap();
        let stdout = out.stdout.to_text_lossy();
        assert!(
            out.status.success(),
            "{stdout}{}",
            out.stderr.to_text_lossy()
        );
        let lines: Vec<&str> = stdout.lines().collect();
        assert!(lines[0].starts_with("v1.4.0-1-g"), "{stdout}");
        assert_eq!(lines[1], head.to_string());
        assert!(lines.contains(&"value.txt"), "{stdout}");
        assert!(
            !stdout.contains("LEAK") && !stdout.contains("c2VjcmV0"),
            "{stdout}"
        );
        tree.remove().unwrap();
    }
}
