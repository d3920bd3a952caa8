//! The run: the agent loop and its state machine, composing everything below it.
//!
//! A run owns one worktree, one branch and one run record. It asks the model router for a
//! role, never a model; it acts only through tools under the policy; it decides success only
//! from the verification command's results, never from a model's opinion.

pub mod record;
pub mod report;
pub mod state;

pub use state::RunState;
