//! The run record: everything a run knows, in `<git-common-dir>/agent/runs/<run-id>/`.
//!
//! `record.json` (this type, rewritten atomically after every step), `audit.jsonl` (the
//! hash chain), `transcript.jsonl` (model turns, redacted) and `pr.md` (the rendered report).
//! The directory is mirrored on `refs/agent/runs/<run-id>` after every state change, so a
//! clone that fetches the ref can audit or resume the run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::report::{CostLine, ReportInput, VerifyLine};
use super::state::{RunState, write_atomic, write_replace};
use crate::audit::redact::Redactor;
use crate::task::Task;

/// File names inside a run directory.
pub mod files {
    /// The record.
    pub const RECORD: &str = "record.json";
    /// The conversation so far (redacted), one message per line, appended as it grows, to
    /// continue it after a crash.
    pub const CONVERSATION: &str = "conversation.jsonl";
    /// The audit chain.
    pub const AUDIT: &str = "audit.jsonl";
    /// The model transcript.
    pub const TRANSCRIPT: &str = "transcript.jsonl";
    /// The rendered pull request description.
    pub const PR: &str = "pr.md";
    /// What stays on this machine: never mirrored to `refs/agent/runs/…` (copies of what the
    /// model wrote, kept to undo a later rewrite by the test command).
    pub const PRIVATE: &str = crate::workspace::PRIVATE_RUN_DIR;
}

/// A request waiting for a human.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The model's tool call id that asked.
    pub call_id: String,
    /// The request, with the rules that asked.
    pub approval: crate::policy::Approval,
    /// The state to go back to once approved.
    pub resume_state: RunState,
    /// The calls of the paused turn still to run, the paused call first: once approved they
    /// run in order before the model is asked again, so nothing of that turn is lost or redone.
    #[serde(default)]
    pub remaining: Vec<crate::model::ToolCall>,
}

/// Where the pull request went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrRef {
    /// A forge URL.
    Url(String),
    /// A local file (the local forge).
    Path(PathBuf),
}

/// What a run ended (or paused) with.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The record as last saved.
    pub record: RunRecord,
    /// The run directory.
    pub run_dir: PathBuf,
}

/// The durable state of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Format version of this file.
    pub version: u32,
    /// The run id (a ULID).
    pub run_id: String,
    /// What was asked.
    pub task: Task,
    /// Where the run is.
    pub state: RunState,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// RFC 3339 time of the last write.
    pub updated_at: String,
    /// The run's branch.
    pub branch: String,
    /// The base as given (e.g. `main`).
    pub base_ref: String,
    /// The base commit.
    pub base_sha: String,
    /// The worktree path.
    pub worktree: PathBuf,
    /// The verification command, once known.
    pub test_command: Option<String>,
    /// The plan, once made.
    pub plan: Option<crate::tools::Plan>,
    /// Files changed that the plan did not name.
    pub unplanned: Vec<String>,
    /// Every verification run, in order.
    pub verification: Vec<VerifyLine>,
    /// The baseline test run, read (before any edit).
    pub baseline: Option<crate::verify::Observation>,
    /// Checkpoint commits on the branch, oldest first.
    pub commits: Vec<String>,
    /// Fix rounds used.
    pub fix_attempts: u32,
    /// Model calls made.
    pub turns: u32,
    /// The role of each model call, in order (a replayed script skips these on resume).
    pub roles_called: Vec<crate::model::Role>,
    /// Spend per role and model.
    pub usage: Vec<CostLine>,
    /// The model's summary (from `finish`) or the harness's account.
    pub summary: String,
    /// What was left undone or why the run stopped.
    pub notes: Vec<String>,
    /// A request waiting for approval, if paused.
    pub pending_approval: Option<PendingApproval>,
    /// Approved calls of a paused turn, still to run before the model is asked again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved_calls: Vec<crate::model::ToolCall>,
    /// What the reviewer said, once it has reviewed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<super::report::Review>,
    /// Approvals given (resume `--approve`, `/agent approve`).
    pub approvals: Vec<crate::policy::Approval>,
    /// The pull request, once opened or written.
    pub pr: Option<PrRef>,
    /// The audit chain's head as of the last save, so a cut-off log is detected.
    pub audit_head: Option<crate::audit::chain::Head>,
    /// `--model` flags the run was started with.
    pub model_flags: Vec<String>,
    /// `--sandbox` flag the run was started with.
    pub sandbox_flag: Option<String>,
    /// Usage per role and model, to restore the router's accounts on resume.
    pub model_usage: Vec<(crate::model::Role, String, crate::model::UsageLine)>,
    /// Model spend so far, to restore the budget on resume.
    pub budget_spent: Option<crate::model::Spend>,
    /// Wall-clock milliseconds the run has worked, over all its processes.
    pub elapsed_ms: u64,
    /// The sandbox in force for the run's commands, in one line (mechanism, protections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The last final verification's integrity checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integrity: Option<super::report::Integrity>,
    /// Who last changed each path that differs from the last checkpoint: a tool call, a
    /// command, or the test command (`test command (…)`), whose writes are not committed
    /// unless the model touched them too or the plan names them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attribution: BTreeMap<String, String>,
    /// A fingerprint of each path that differs from the last checkpoint, as last seen, so
    /// the next change to it is attributed to whoever made it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fingerprints: BTreeMap<String, String>,
    /// For each path differing from the last checkpoint that a tool or the model's command
    /// wrote: the fingerprint of what it wrote last and who (its content is kept in the run
    /// directory's `authored/`), so a later rewrite by the test command alone can be undone
    /// to the model's edit rather than to the checkpoint (issue 40).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub authored: BTreeMap<String, (String, String)>,
    /// Baseline failures that passed when run again on their own: left out of decisions.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub flaky: std::collections::BTreeSet<String>,
    /// Lints the base's Rust code trips under this toolchain without their being the
    /// project's rule (`verify::toolchain_lints`): every test command of the run builds with
    /// `--force-warn` for each, so a crate written for an older compiler still gets tested.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forced_warn_lints: Vec<String>,
    /// The project's environment, as set up on the base before the baseline (issue 19):
    /// every command gets it read-only, and it decides the verification (issue 38).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupRecord>,
    /// The environment of the run's own tree, once the run changed what set-up reads: made
    /// privately for this run (never cached, never another run's) and in force for the
    /// worktree's commands only. It never decides a verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup_run: Option<SetupRecord>,
}

/// The set-up a run's commands stand on, and each time it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetupRecord {
    /// The cache key (the plan and its key files' content).
    pub key: String,
    /// The cache entry: read-only to every later command.
    pub dir: PathBuf,
    /// The commands that made it.
    pub commands: Vec<String>,
    /// What set-up could reach.
    pub network: Vec<String>,
    /// The files that key it, relative to the project.
    pub key_files: Vec<PathBuf>,
    /// Project paths mounted read-only into worktrees from the entry's `outputs/`.
    pub outputs: Vec<PathBuf>,
    /// The ecosystems its plan was detected for: a set-up of the run's own tree gets these
    /// and no more (issue 38).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ecosystems: Vec<crate::verify::Ecosystem>,
    /// `PATH` entries for later commands, expanded.
    pub path: Vec<PathBuf>,
    /// Variables for later commands, expanded.
    pub env: Vec<(String, String)>,
    /// The project's Python packages and the directory they must resolve in.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python_packages: Vec<(String, PathBuf)>,
    /// Where each ecosystem's test dependencies came from (issue 39).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    /// Commands every checkout runs before its tests (npm's root `prepare`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before_tests: Vec<String>,
    /// Each time set-up was asked for: the first before the baseline, then after a change
    /// to a manifest or lockfile.
    pub runs: Vec<SetupRun>,
}

impl SetupRecord {
    /// One line for the report: what set it up, from where, and each time it ran.
    pub fn summary(&self) -> String {
        let runs: Vec<String> = self
            .runs
            .iter()
            .map(|r| {
                let how = if r.cached {
                    "reused from the cache".to_string()
                } else if r.private {
                    format!(
                        "set up privately for the run's own tree in {:.1} s",
                        r.duration_ms as f64 / 1000.0
                    )
                } else {
                    format!("set up in {:.1} s", r.duration_ms as f64 / 1000.0)
                };
                format!("{how} ({})", r.reason)
            })
            .collect();
        let commands: Vec<String> = self.commands.iter().map(|c| format!("`{c}`")).collect();
        let network = if self.network.is_empty() {
            "no network".to_string()
        } else {
            format!("network: {}", self.network.join(", "))
        };
        let sources = if self.sources.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.sources.join("; "))
        };
        format!(
            "{}{sources} — {network}; key {}; {}; read-only to every later command",
            commands.join(", "),
            self.key,
            runs.join("; then set up again: ")
        )
    }
}

/// One time set-up was asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetupRun {
    /// Why (`before the baseline`, `Cargo.lock changed`).
    pub reason: String,
    /// The key it looked for.
    pub key: String,
    /// Reused from the cache: no command ran.
    pub cached: bool,
    /// Wall-clock milliseconds, commands and checkout included.
    pub duration_ms: u64,
    /// Made for the run's own tree, privately (not in the shared cache).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub private: bool,
}

impl RunRecord {
    /// Path of the record file in `run_dir`.
    pub fn path(run_dir: &Path) -> PathBuf {
        run_dir.join(files::RECORD)
    }

    /// Read the record of the run in `run_dir`.
    pub fn load(run_dir: &Path) -> std::io::Result<Self> {
        let bytes = std::fs::read(Self::path(run_dir))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// Write the record atomically, stamping `updated_at`.
    pub fn save(&mut self, run_dir: &Path, redactor: &Redactor) -> std::io::Result<()> {
        self.save_with(run_dir, true, redactor)
    }

    /// Write the record, every string in it redacted (the file is pushed with the run's
    /// record ref); `durable` adds the fsyncs (see [`write_replace`]).
    pub fn save_with(
        &mut self,
        run_dir: &Path,
        durable: bool,
        redactor: &Redactor,
    ) -> std::io::Result<()> {
        self.updated_at = now();
        let bytes = redactor
            .clean_json(self, true)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        if durable {
            write_atomic(&Self::path(run_dir), &bytes)
        } else {
            write_replace(&Self::path(run_dir), &bytes)
        }
    }

    /// Whether the run's change is verified: it succeeded, and its last test run is a deciding
    /// one (`attempt N`) whose command exited by itself. A plan-only run verified nothing
    /// (its only test run is the baseline), and a command that was killed — no exit code, or
    /// 128 + N, a shell's word for signal N (137: SIGKILL, the OOM killer's) — proves nothing.
    pub fn verified(&self) -> bool {
        let Some(last) = self.verification.last() else {
            return false;
        };
        self.state == RunState::Succeeded
            && self.task.mode == crate::task::Mode::Fix
            && last.when.starts_with("attempt ")
            && last.exit_code.is_some_and(|c| (0..128).contains(&c))
    }

    /// Total USD spent, and whether some spend is of unknown price.
    pub fn spend(&self) -> (f64, bool) {
        let mut total = 0.0;
        let mut unknown = false;
        for c in &self.usage {
            match c.cost_usd {
                Some(u) => total += u,
                None => unknown |= c.tokens_in + c.tokens_out > 0,
            }
        }
        (total, unknown)
    }

    /// Every file (or directory, ending in `/`) the plan names.
    pub fn planned_files(&self) -> std::collections::BTreeSet<String> {
        self.plan
            .iter()
            .flat_map(|p| p.steps.iter().flat_map(|s| s.files.iter().cloned()))
            .collect()
    }

    /// The report's input, built from this record and the audit trail's lines.
    pub fn report_input(
        &self,
        diffstat: String,
        audit: Vec<String>,
        audit_head: String,
        budget_usd: f64,
    ) -> ReportInput {
        let fixes = match &self.task.origin {
            crate::task::Origin::Issue { number, .. } => Some(format!("Fixes #{number}")),
            crate::task::Origin::PullRequest { number, .. }
            | crate::task::Origin::CiFailure { number, .. } => Some(format!("For #{number}")),
            crate::task::Origin::Cli => None,
        };
        ReportInput {
            run_id: self.run_id.clone(),
            state: self.state.as_str().to_string(),
            fixes,
            summary: if self.summary.trim().is_empty() {
                first_line(&self.task.goal, 200)
            } else {
                self.summary.clone()
            },
            plan: self
                .plan
                .as_ref()
                .map(|p| p.steps.clone())
                .unwrap_or_default(),
            unplanned: self.unplanned.clone(),
            diffstat,
            verification: self.verification.clone(),
            sandbox: self.sandbox.clone(),
            environment: self.setup.as_ref().map(SetupRecord::summary),
            integrity: self.integrity.clone(),
            review: self.review.clone(),
            cost: self.usage.clone(),
            budget_usd,
            notes: self.notes.clone(),
            audit,
            audit_head,
            branch: self.branch.clone(),
            base_ref: self.base_ref.clone(),
            base_sha: self.base_sha.clone(),
        }
    }
}

/// The first non-blank line of `s`, trimmed and cut to `max` characters (with `…`).
pub fn first_line(s: &str, max: usize) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut out: String = line.chars().take(max).collect();
    if line.chars().count() > max {
        out.push('…');
    }
    out
}

/// Now, as RFC 3339 UTC.
pub fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// When the run `id` of `repo` ended, from its record; `None` while it has not (or has no
/// readable record: its worktree is kept). What `gc` asks of every run worktree it finds.
pub fn ended_at(repo: &crate::workspace::Repo, id: &str) -> Option<std::time::SystemTime> {
    let rec = RunRecord::load(&repo.run_dir(id)).ok()?;
    if !rec.state.is_terminal() {
        return None;
    }
    let at: jiff::Timestamp = rec.updated_at.parse().ok()?;
    std::time::SystemTime::try_from(at).ok()
}

#[cfg(test)]
mod tests {
    use super::super::fixture::World;
    use super::*;

    fn line(when: &str, exit_code: Option<i32>) -> VerifyLine {
        VerifyLine {
            when: when.into(),
            command: "t".into(),
            exit_code,
            duration_ms: 1,
            result: String::new(),
            excerpt: String::new(),
        }
    }

    /// Regression (issue 19): `plan --json` said `"passed": true` of a test command killed
    /// with 137, because a plan-only run ends `succeeded`.
    #[test]
    fn only_a_deciding_test_run_that_exited_by_itself_verifies() {
        let w = World::new(&[]);
        let svc = w.services();
        let mut rec = w.ledger(&svc).rec.clone();
        rec.state = RunState::Succeeded;
        assert!(!rec.verified(), "no test ran");
        rec.verification = vec![line("before", Some(1)), line("attempt 1", Some(0))];
        assert!(rec.verified());
        for killed in [Some(137), Some(143), None] {
            rec.verification[1].exit_code = killed;
            assert!(!rec.verified(), "{killed:?}");
        }
        rec.verification = vec![line("before", Some(0))];
        assert!(!rec.verified(), "the baseline decides nothing");
        rec.verification = vec![line("before", Some(1)), line("attempt 1", Some(0))];
        rec.task.mode = crate::task::Mode::Plan;
        assert!(!rec.verified(), "a plan verifies nothing");
        rec.task.mode = crate::task::Mode::Fix;
        rec.state = RunState::Failed;
        assert!(!rec.verified());
    }
}
