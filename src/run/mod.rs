//! The run: the agent loop and its state machine, composing everything below it.
//!
//! A run owns one worktree, one branch and one run record. It asks the model router for a
//! role, never a model; it acts only through tools under the policy; it decides success only
//! from the verification command's results, never from a model's opinion.

mod context;
mod deadline;
pub mod engine;
mod error;
mod gate;
mod prompt;
pub mod publish;
pub mod record;
pub mod report;
pub mod state;
mod tools;

pub use error::{Error, Result};
pub use state::RunState;

/// Kill this process with SIGKILL at a named point when `GIT_AGENT_TEST_KILL_AT` names it, as
/// `kill -9` would: the crash tests' way to stop a run, a publish or the webhook receiver
/// exactly there. The variable is read once per process (the receiver passes a point on every
/// delivery); the tests set it when they spawn the process.
pub(crate) fn failpoint(name: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| std::env::var("GIT_AGENT_TEST_KILL_AT").ok());
    if at.as_deref() == Some(name) {
        // SAFETY: getpid and kill are async-signal-safe libc calls with valid arguments.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
