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
pub mod services;
pub mod state;
mod tools;

pub use error::{Error, Result};
pub use state::RunState;

// Moved to the bottom of the crate; the run's files still name it through here.
pub(crate) use crate::failpoint::failpoint;
