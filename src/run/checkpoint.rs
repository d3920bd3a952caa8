//! Checkpoints: what the run commits to its branch, and what it refuses to.
//!
//! Before every checkpoint (and before the deciding test run) the commit-time policy
//! ([`gate`], over [`super::gate::refusal`]) judges every changed path, whoever changed it, and
//! puts refused ones back. A checkpoint ([`commit`]) commits the worktree with the run's
//! trailers, then scans the blobs the run adds for secrets: a finding undoes the commit and
//! ends the run ([`Error::SecretInDiff`]), so nothing secret is ever pushed.

use serde_json::json;

use super::attribution;
use super::error::{Error, Result};
use super::ledger::Ledger;
use super::setup::Workbench;
use crate::audit::chain::Kind;
use crate::audit::redact::{ChangedFile, scan_changes};
use crate::config::Decision;
use crate::policy::{Approval, RiskTier, runner_change};
use crate::workspace::CommitRequest;

/// What the commit-time policy did.
#[derive(Debug, Default)]
pub(super) struct Gated {
    /// What to tell the model ("" when nothing).
    pub(super) told: String,
    /// Changes to the test runner's configuration that wait for a person (`ask`): one
    /// approval for all of them, of exactly their content.
    pub(super) pending: Option<Approval>,
    /// Files put back because only the test command wrote them.
    pub(super) excluded: Vec<String>,
}

/// The tool name of approvals for runner configuration.
pub(super) const RUNNER_CONFIG: &str = "runner_config";

/// The tool name of approvals for changes to what set-up reads (issue 38).
pub(super) const SETUP_CHANGE: &str = "setup_change";

/// The tool name of approvals for new executables the plan names.
pub(super) const NEW_EXECUTABLE: &str = "new_executable";

/// The tool name of approvals for test changes the plan makes on purpose (held-out check).
pub(super) const TEST_CHANGE: &str = "test_change";

/// The tool name of approvals for code that behaves differently under test (issue 40).
pub(super) const UNDER_TEST: &str = "under_test";

/// The policy at commit time: every changed path, whoever changed it (a tool, a command, the
/// tests), is judged; refused ones are put back as in HEAD, audited, noted in the report and
/// told to the model. What only the test command wrote is put back too
/// ([`attribution::exclude_test_outputs`]). A change to the test runner's configuration is
/// judged by `policy.runner_config`: `forbid` puts it back, `ask` needs a person's approval
/// of that exact content ([`Gated::pending`]), `allow` lets it through (the report still
/// names it).
pub(super) fn gate(led: &mut Ledger<'_>, bench: &Workbench) -> Result<Gated> {
    let mut gated = Gated {
        excluded: attribution::exclude_test_outputs(led, bench)?,
        ..Gated::default()
    };
    let wt = &bench.worktree;
    let planned = led.rec.planned_files();
    let head = wt.head()?.to_string();
    let policy = &bench.ctx.policy;
    let test_command = led.rec.test_command.clone().unwrap_or_default();
    let mut refused = Vec::new();
    let mut asks = Vec::new();
    let mut executables = Vec::new();
    let mut setup_asks = Vec::new();
    let mut under_test_asks = Vec::new();
    for path in wt.changed_paths()? {
        let old = led.svc.repo.read_file_at(&head, &path)?;
        let was_executable = led.svc.repo.executable_at(&head, &path)?;
        if let Some(why) = super::gate::refusal(wt.path(), &path, policy, &planned, was_executable)
        {
            refused.push((path, why));
            continue;
        }
        let new = super::attribution::current_content(wt.path(), &path);
        // What a person approves: the content, and for a link what it leads to as well, so
        // editing the link's target afterwards needs a new approval.
        let approved = approval_fingerprint(wt.path(), &path);
        if super::gate::new_executable(wt.path(), &path, was_executable) {
            // The plan names it, but the model wrote the plan: a person decides (issue 18).
            executables.push(format!("`{path}` at {approved}: a new executable file"));
        }
        // The runner's configuration decides how the tests run; what set-up reads decides
        // what is installed and what runs while installing (issue 38). Either decides its
        // own verification only once a person lets it (a change to what set-up reads then
        // gets a fresh set-up of the committed tree for the deciding runs).
        // Code that asks whether it runs under a test is what the tests see, not what users
        // run: passing tests prove nothing about it (issue 40).
        let (old_text, new_text) = (
            old.as_deref().map(String::from_utf8_lossy),
            new.as_deref().map(String::from_utf8_lossy),
        );
        let under_test =
            crate::verify::test_special_casing(&path, old_text.as_deref(), new_text.as_deref());
        let at_head = |p: &str| led.svc.repo.read_file_at(&head, p).ok().flatten();
        let judged = match runner_change(
            &path,
            old.as_deref(),
            new.as_deref(),
            &test_command,
            &at_head,
        ) {
            Some(why) => Some((why, "the test runner's configuration", &mut asks)),
            None if under_test.is_some() => under_test.map(|why| {
                (
                    why,
                    "code that behaves differently under test",
                    &mut under_test_asks,
                )
            }),
            None if led.rec.setup.is_some() => super::environment::setup_inputs(
                led.rec.setup.as_ref(),
                std::slice::from_ref(&path),
            )
            .pop()
            .map(|(_, why)| (why, "what set-up reads", &mut setup_asks)),
            None => None,
        };
        let Some((why, what, asked)) = judged else {
            continue;
        };
        match policy.runner_config.0 {
            Decision::Allow => {}
            Decision::Forbid => refused.push((
                path,
                format!(
                    "{why}; changing {what} is forbidden ({}, {})",
                    policy.runner_config.1.rule, policy.runner_config.1.origin
                ),
            )),
            Decision::Ask => asked.push(format!("`{path}` at {approved}: {why}")),
        }
    }
    // One question at a time, in this order; each for exactly these contents.
    let rules = vec![policy.runner_config.1.clone()];
    for (tool, lines, rules) in [
        (NEW_EXECUTABLE, &executables, Vec::new()),
        (RUNNER_CONFIG, &asks, rules.clone()),
        (UNDER_TEST, &under_test_asks, rules.clone()),
        (SETUP_CHANGE, &setup_asks, rules),
    ] {
        if gated.pending.is_none() {
            gated.pending = unapproved(led, tool, lines, rules);
        }
    }
    if refused.is_empty() {
        return Ok(gated);
    }
    let paths: Vec<String> = refused.iter().map(|(p, _)| p.clone()).collect();
    wt.restore_paths(&paths)?;
    led.audit(
        Kind::Policy,
        json!({"refused_at_commit": refused.iter().map(|(p, w)| json!({"path": p, "why": w})).collect::<Vec<_>>()}),
    )?;
    let lines: Vec<String> = refused.iter().map(|(p, w)| format!("`{p}`: {w}")).collect();
    led.rec.notes.push(format!(
        "Not committed, refused by the policy at commit time: {}.",
        lines.join("; ")
    ));
    gated.told = format!(
        "These changes were undone because the policy refuses to commit them (whoever wrote them): {}.",
        lines.join("; ")
    );
    Ok(gated)
}

/// The approval `tool` needs for `lines` (one subject, all of them), unless a person gave it
/// already; `None` when there is nothing to ask.
fn unapproved(
    led: &Ledger<'_>,
    tool: &str,
    lines: &[String],
    rules: Vec<crate::policy::RuleRef>,
) -> Option<Approval> {
    if lines.is_empty() {
        return None;
    }
    let subject = lines.join("; ");
    let approved = led.rec.approvals.iter().any(|a| a.approves(tool, &subject));
    (!approved).then(|| Approval::pending(tool, &subject, RiskTier::High, rules))
}

/// What an approval of `rela` covers: its content, and for a symbolic link its target and
/// the content that target has now (a link approved as `conftest.py -> helpers/c.py` must not
/// stay approved once `helpers/c.py` changes). `None` when it is gone.
fn approved_content(root: &std::path::Path, rela: &str) -> Option<Vec<u8>> {
    let full = root.join(rela);
    let meta = std::fs::symlink_metadata(&full).ok()?;
    if !meta.file_type().is_symlink() {
        return std::fs::read(&full).ok();
    }
    let mut out = b"symlink -> ".to_vec();
    out.extend(
        std::fs::read_link(&full)
            .ok()?
            .as_os_str()
            .as_encoded_bytes(),
    );
    if let Ok(followed) = std::fs::read(&full) {
        out.push(0);
        out.extend(followed);
    }
    Some(out)
}

/// The fingerprint an approval of `rela` (in the worktree at `root`) names.
pub(super) fn approval_fingerprint(root: &std::path::Path, rela: &str) -> String {
    fingerprint(approved_content(root, rela).as_deref())
}

/// A short content hash, so an approval covers exactly the content it was given for.
pub(super) fn fingerprint(content: Option<&[u8]>) -> String {
    use sha2::Digest as _;
    match content {
        None => "deleted".into(),
        Some(b) => sha2::Sha256::digest(b)
            .iter()
            .take(6)
            .map(|x| format!("{x:02x}"))
            .collect(),
    }
}

/// Commit the worktree's changes as a checkpoint (`why` goes in its body), after the
/// commit-time policy and before the secret scan. Nothing to commit is not an error.
pub(super) fn commit(led: &mut Ledger<'_>, bench: &Workbench, why: &str) -> Result<()> {
    let _span = tracing::debug_span!("commit").entered();
    // Files the verification itself wrote are judged too. A runner-configuration change
    // still waiting for a person is not checkpointed: the final check asks for it.
    if gate(led, bench)?.pending.is_some() {
        return Ok(());
    }
    let wt = &bench.worktree;
    if !wt.is_dirty()? {
        return Ok(());
    }
    let svc = led.svc;
    let step = led.rec.commits.len() + 1;
    let head = led.audit_head()?;
    let mut trailers = vec![
        ("Agent-Run".to_string(), led.rec.run_id.clone()),
        ("Agent-Step".to_string(), step.to_string()),
        ("Audit-Head".to_string(), head.hash.clone()),
    ];
    if let Some(co) = led
        .rec
        .task
        .requested_by
        .as_ref()
        .and_then(|p| p.co_author())
    {
        trailers.push(("Co-authored-by".to_string(), co));
    }
    // Redacted before it is cut: a secret cut in two would no longer be recognised.
    let subject = format!(
        "agent: {}",
        svc.redactor
            .redact(led.rec.task.goal.lines().next().unwrap_or("change"))
            .chars()
            .take(64)
            .collect::<String>()
    );
    let git = &svc.config.settings.git;
    let id = wt
        .commit_all(&CommitRequest {
            subject,
            body: svc.redactor.redact(&format!(
                "Checkpoint {step} of run {} ({why}).",
                led.rec.run_id
            )),
            trailers,
            author_name: git.author_name.clone(),
            author_email: git.author_email.clone(),
            time: None,
        })?
        .map(|id| id.to_string());
    let Some(id) = id else {
        return Ok(());
    };
    // A secret in what the run adds blocks the push: undo the commit and say so, redacted.
    // The scan reads the blobs (binary too), not the text diff.
    let blobs = svc
        .repo
        .changed_blobs(svc.repo.resolve(&led.rec.base_sha)?, svc.repo.resolve(&id)?)?;
    let changed = ChangedFile::with_content(&blobs);
    let findings = scan_changes(&changed, &svc.redactor);
    if !findings.is_empty() {
        let prev = led
            .rec
            .commits
            .last()
            .cloned()
            .unwrap_or(led.rec.base_sha.clone());
        wt.rollback_to(svc.repo.resolve(&prev)?)?;
        led.audit(
            Kind::Policy,
            json!({"blocked": "secret in diff", "findings": findings}),
        )?;
        return Err(Error::SecretInDiff(
            findings
                .iter()
                .map(|f| {
                    format!(
                        "{}:{} {} ({}) `{}`",
                        f.path, f.line, f.kind, f.encoding, f.redacted
                    )
                })
                .collect::<Vec<_>>()
                .join("; "),
        ));
    }
    led.audit(
        Kind::Commit,
        json!({"commit": id, "step": step, "why": why}),
    )?;
    led.rec.commits.push(id);
    led.persist()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{World, git};
    use super::*;

    /// An approval of a symlinked runner configuration covers what the link leads to: the
    /// model cannot have `conftest.py -> helpers/c.py` approved and then rewrite the helper.
    #[test]
    fn an_approved_link_is_fingerprinted_with_what_it_leads_to() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("helpers")).unwrap();
        std::fs::write(root.join("helpers/c.py"), "def pytest_configure(c): pass\n").unwrap();
        std::os::unix::fs::symlink("helpers/c.py", root.join("conftest.py")).unwrap();
        let approved = fingerprint(approved_content(root, "conftest.py").as_deref());
        std::fs::write(root.join("helpers/c.py"), "import os; os._exit(0)\n").unwrap();
        let now = fingerprint(approved_content(root, "conftest.py").as_deref());
        assert_ne!(approved, now, "the helper changed behind the approved link");
        // A regular file: its content, as before.
        std::fs::write(root.join("pytest.ini"), "[pytest]\n").unwrap();
        assert_eq!(
            fingerprint(approved_content(root, "pytest.ini").as_deref()),
            fingerprint(Some(b"[pytest]\n"))
        );
        assert_eq!(approved_content(root, "gone.py"), None);
    }

    #[test]
    fn a_checkpoint_commits_with_the_runs_trailers_and_nothing_twice() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        let bench = Workbench::prepare(&mut led, false).unwrap();
        let wt = bench.worktree.path().to_path_buf();
        commit(&mut led, &bench, "clean").unwrap();
        assert!(led.rec.commits.is_empty(), "a clean tree commits nothing");
        std::fs::write(wt.join("value.txt"), "2\n").unwrap();
        commit(&mut led, &bench, "verified").unwrap();
        assert_eq!(led.rec.commits.len(), 1);
        let id = &led.rec.commits[0];
        assert_eq!(git(&wt, &["rev-parse", "HEAD"]).trim(), id);
        let msg = git(&wt, &["log", "-1", "--format=%B"]);
        assert!(msg.starts_with("agent: Make value two"), "{msg}");
        assert!(msg.contains(&format!(
            "Checkpoint 1 of run {} (verified).",
            led.rec.run_id
        )));
        assert!(
            msg.contains(&format!("Agent-Run: {}", led.rec.run_id)),
            "{msg}"
        );
        assert!(
            msg.contains("Agent-Step: 1") && msg.contains("Audit-Head: "),
            "{msg}"
        );
        git(&wt, &["fsck", "--strict", "--no-progress"]);
        commit(&mut led, &bench, "again").unwrap();
        assert_eq!(led.rec.commits.len(), 1);
    }

    /// A secret the run adds is never committed: the checkpoint is undone and the run told.
    #[test]
    fn a_secret_in_the_change_undoes_the_checkpoint() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        let bench = Workbench::prepare(&mut led, false).unwrap();
        let wt = bench.worktree.path().to_path_buf();
        let base = git(&wt, &["rev-parse", "HEAD"]);
        std::fs::write(wt.join("value.txt"), format!("2\n{}\n", World::SECRET)).unwrap();
        let err = commit(&mut led, &bench, "verified").unwrap_err();
        let Error::SecretInDiff(found) = &err else {
            panic!("{err}");
        };
        assert!(found.contains("value.txt:2"), "{found}");
        assert!(!found.contains(World::SECRET), "{found}");
        assert!(led.rec.commits.is_empty());
        assert_eq!(git(&wt, &["rev-parse", "HEAD"]), base);
    }

    #[test]
    fn the_gate_puts_back_a_refused_path_and_keeps_the_rest() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut led = w.ledger(&svc);
        let bench = Workbench::prepare(&mut led, false).unwrap();
        let wt = bench.worktree.path().to_path_buf();
        std::fs::write(wt.join("value.txt"), "2\n").unwrap();
        std::fs::write(wt.join(".gitmodules"), "[submodule \"x\"]\n").unwrap();
        let told = gate(&mut led, &bench).unwrap().told;
        assert!(told.contains("`.gitmodules`"), "{told}");
        assert!(!wt.join(".gitmodules").exists());
        assert_eq!(
            std::fs::read_to_string(wt.join("value.txt")).unwrap(),
            "2\n"
        );
        assert_eq!(gate(&mut led, &bench).unwrap().told, "");
    }
}
