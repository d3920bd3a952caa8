//! Approvals: the record of an `ask` that paused a run, and of the human's answer.

use serde::{Deserialize, Serialize};

use super::{RiskTier, RuleRef};

/// What the run asks a human to approve. Persisted with the run while it waits in
/// `awaiting_approval`, and written to the audit log (`kind = "approval"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Unique id (a ULID), quoted by `git agent resume RUN --approve` and `/agent approve`.
    pub id: String,
    /// The tool that asked (`run`).
    pub tool: String,
    /// The exact subject approved: the command line as the model gave it.
    pub subject: String,
    /// Highest risk among the parts that asked.
    pub risk: RiskTier,
    /// The rules that asked.
    pub rules: Vec<RuleRef>,
    /// When it was asked (RFC 3339).
    pub requested_at: String,
}

/// The state of an approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a human.
    Pending,
    /// Approved.
    Approved {
        /// Who approved (login or local user name).
        by: String,
        /// When (RFC 3339).
        at: String,
    },
    /// Denied; the run tells the model and carries on without it.
    Denied {
        /// Who denied.
        by: String,
        /// When (RFC 3339).
        at: String,
        /// Why, if given.
        reason: Option<String>,
    },
}

/// A request and its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// What was asked.
    pub request: ApprovalRequest,
    /// The answer so far.
    #[serde(flatten)]
    pub status: ApprovalStatus,
}

impl Approval {
    /// A new pending approval for `subject` asked by `tool`.
    pub fn pending(tool: &str, subject: &str, risk: RiskTier, rules: Vec<RuleRef>) -> Self {
        Self {
            request: ApprovalRequest {
                id: ulid::Ulid::generate().to_string(),
                tool: tool.to_string(),
                subject: subject.to_string(),
                risk,
                rules,
                requested_at: jiff::Timestamp::now().to_string(),
            },
            status: ApprovalStatus::Pending,
        }
    }

    /// Record a human's approval.
    pub fn approve(&mut self, by: &str) {
        self.status = ApprovalStatus::Approved {
            by: by.to_string(),
            at: jiff::Timestamp::now().to_string(),
        };
    }

    /// Record a human's denial.
    pub fn deny(&mut self, by: &str, reason: Option<String>) {
        self.status = ApprovalStatus::Denied {
            by: by.to_string(),
            at: jiff::Timestamp::now().to_string(),
            reason,
        };
    }

    /// Whether this approval lets `tool` act on exactly `subject`.
    pub fn approves(&self, tool: &str, subject: &str) -> bool {
        matches!(self.status, ApprovalStatus::Approved { .. })
            && self.request.tool == tool
            && self.request.subject == subject
    }
}
