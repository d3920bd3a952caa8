//! The run's state machine and its durable record.
//!
//! `queued → analyzing → planning → editing → testing ⇄ fixing → (awaiting_approval) →
//! succeeded | failed | cancelled | budget_exhausted`, and `analyzing → environment_failed` when
//! the baseline cannot run at all. Every transition is written to
//! `state.json` in the run directory (atomically: temp file, fsync, rename) before the run
//! acts on it, so a process killed at any moment resumes from the last written state.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::audit::Redacted;
use crate::fsutil::{self, Durability};

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Accepted, not started.
    Queued,
    /// Worktree, baseline tests and project map.
    Analyzing,
    /// The planner is writing the plan.
    Planning,
    /// The coder is editing.
    Editing,
    /// The tests are running.
    Testing,
    /// The coder is fixing after a failed test run.
    Fixing,
    /// Paused until a human approves a pending request.
    AwaitingApproval,
    /// Verified and committed.
    Succeeded,
    /// Ended without passing verification.
    Failed,
    /// Stopped by a person.
    Cancelled,
    /// A budget ran out.
    BudgetExhausted,
    /// The baseline test command could not run at all (not installed, nothing collected,
    /// dependencies missing): the run stopped before the first model turn.
    EnvironmentFailed,
}

impl RunState {
    /// Whether the run has ended.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Succeeded
                | RunState::Failed
                | RunState::Cancelled
                | RunState::BudgetExhausted
                | RunState::EnvironmentFailed
        )
    }

    /// The state's name as written in records and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Analyzing => "analyzing",
            RunState::Planning => "planning",
            RunState::Editing => "editing",
            RunState::Testing => "testing",
            RunState::Fixing => "fixing",
            RunState::AwaitingApproval => "awaiting_approval",
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
            RunState::BudgetExhausted => "budget_exhausted",
            RunState::EnvironmentFailed => "environment_failed",
        }
    }

    /// Whether `self → next` is a transition of the state machine. Any live state may end
    /// (failed, cancelled, budget exhausted) or pause for approval; ended runs never move.
    pub fn can_move_to(self, next: RunState) -> bool {
        use RunState::*;
        if self.is_terminal() {
            return false;
        }
        if matches!(
            next,
            Failed | Cancelled | BudgetExhausted | AwaitingApproval
        ) {
            return true;
        }
        matches!(
            (self, next),
            (Queued, Analyzing)
                | (Analyzing, EnvironmentFailed)
                | (Analyzing, Planning)
                | (Planning, Editing)
                | (Planning, Succeeded)
                | (Editing, Testing)
                | (Testing, Fixing)
                | (Testing, Succeeded)
                | (Fixing, Testing)
                | (Fixing, Editing)
                | (AwaitingApproval, _)
        )
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Write `text` to `path` so that a crash leaves either the old or the new content. Every
/// file of a run directory is pushed with the run's record, so only redacted text is taken.
pub fn write_atomic(path: &Path, text: &Redacted) -> std::io::Result<()> {
    fsutil::write_atomic(path, text.as_str().as_bytes(), Durability::Durable)
}

/// Replace `path` by a temporary file and a rename, without fsync: atomic for any process
/// that reads it and safe against `kill -9`, durable against power loss only once a later
/// [`write_atomic`] or fsync has run. For the many saves inside one step.
pub fn write_replace(path: &Path, text: &Redacted) -> std::io::Result<()> {
    fsutil::write_atomic(path, text.as_str().as_bytes(), Durability::Replace)
}

/// The path of a run's state file.
pub fn state_path(run_dir: &Path) -> PathBuf {
    run_dir.join("state.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_never_move() {
        for s in [
            RunState::Succeeded,
            RunState::Failed,
            RunState::Cancelled,
            RunState::BudgetExhausted,
            RunState::EnvironmentFailed,
        ] {
            assert!(s.is_terminal());
            assert!(!s.can_move_to(RunState::Editing));
            assert!(!s.can_move_to(RunState::Failed));
        }
    }

    #[test]
    fn the_happy_path_and_the_fix_loop_are_transitions() {
        use RunState::*;
        let path = [
            Queued, Analyzing, Planning, Editing, Testing, Fixing, Testing, Succeeded,
        ];
        for w in path.windows(2) {
            assert!(w[0].can_move_to(w[1]), "{} → {}", w[0], w[1]);
        }
        assert!(!Queued.can_move_to(Succeeded));
        assert!(
            !Editing.can_move_to(Succeeded),
            "success only after testing"
        );
        assert!(Testing.can_move_to(AwaitingApproval));
        assert!(AwaitingApproval.can_move_to(Testing));
    }

    #[test]
    fn atomic_write_replaces_whole_content() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/state.json");
        let r = crate::audit::redact::Redactor::new::<_, &str>([]).unwrap();
        write_atomic(&p, &r.clean("{\"a\":1}")).unwrap();
        write_atomic(&p, &r.clean("{}")).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"{}");
        // No temp files left behind.
        assert_eq!(std::fs::read_dir(p.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn names_round_trip_through_serde() {
        let s: RunState = serde_json::from_str("\"budget_exhausted\"").unwrap();
        assert_eq!(s, RunState::BudgetExhausted);
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"budget_exhausted\"");
        assert_eq!(s.as_str(), "budget_exhausted");
    }
}
