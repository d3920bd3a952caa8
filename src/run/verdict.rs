//! What the final verification works on and concludes, shared by its steps
//! (`final_check`, which runs them in order, and `reproduction`): the change, the clean
//! checkout's run, the verdict.

use std::time::Duration;

use crate::policy::Approval;
use crate::verify::Observation;
use crate::workspace::ChangedBlob;

/// The final verification's verdict.
#[derive(Debug)]
pub(super) struct Verdict {
    /// Whether every stage passed: the change is verified.
    pub(super) passed: bool,
    /// What the model is told when it did not (every stage's say, in order).
    pub(super) feedback: String,
    /// A change waits for a person's approval (the run pauses; approved, the check runs again).
    pub(super) pending: Option<Approval>,
}

impl Verdict {
    pub(super) fn failed(feedback: String) -> Self {
        Self {
            passed: false,
            feedback,
            pending: None,
        }
    }

    pub(super) fn pending(approval: Approval) -> Self {
        Self {
            passed: false,
            feedback: String::new(),
            pending: Some(approval),
        }
    }
}

/// What the run changed against the base, as every step sees it.
pub(super) struct Change {
    pub(super) base: gix::ObjectId,
    pub(super) snapshot: gix::ObjectId,
    pub(super) blobs: Vec<ChangedBlob>,
    pub(super) paths: Vec<String>,
}

/// What the clean checkout leaves for the reproduction step.
pub(super) struct CleanRun {
    pub(super) obs: Observation,
    pub(super) took: Duration,
}
