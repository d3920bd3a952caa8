//! Tool errors: what goes back to the model, what pauses the run, what ends it.

use crate::policy::Approval;

/// A failed tool call.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// Something the model can act on (a refused path, an edit that did not match, bad
    /// arguments). The run sends the message back to the model and carries on.
    #[error("{0}")]
    ToModel(String),
    /// The policy said `ask`: the run persists the approval request and pauses in
    /// `awaiting_approval`.
    #[error("awaiting approval of `{}`", .0.request.subject)]
    AwaitingApproval(Box<Approval>),
    /// A fault of the harness (I/O on the worktree, a broken invariant): the run ends.
    #[error("tool {tool} failed: {source}")]
    Fatal {
        /// The tool.
        tool: String,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl ToolError {
    /// A harness fault of `tool`.
    pub fn fatal(tool: &str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Fatal {
            tool: tool.to_string(),
            source: source.into(),
        }
    }
}

/// `Result` with [`ToolError`].
pub type Result<T, E = ToolError> = std::result::Result<T, E>;
