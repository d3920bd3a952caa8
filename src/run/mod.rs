//! The run: the agent loop and its state machine, composing everything below it.
//!
//! A run owns one worktree, one branch and one run record. It asks the model router for a
//! role, never a model; it acts only through tools under the policy; it decides success only
//! from the verification command's results, never from a model's opinion.
//!
//! The loop in parts, each file one concern with its own tests:
//! - `engine.rs` — the front door (`start`, `resume`, `cancel`) and the state machine that
//!   drives a run through its phases (analyze, plan, code, verify) and renders the report;
//! - `state.rs` — the states and which transitions are legal;
//! - `ledger.rs` — what is written down: the record, the audit chain, the conversation, the
//!   transcript, and each transition persisted before the run acts on it;
//! - `setup.rs` — the workbench: worktree, sandboxed executor bound by the run's clock
//!   (`deadline.rs`), the tool context and registry;
//! - `environment.rs` — the project's set-up (issue 19): the plan run once per cache key in
//!   a fresh checkout of the base, kept under the state directory, read-only to every later
//!   command, set up again when the run changes a manifest;
//! - `turn.rs` — one model call, and the dispatch of its calls to the registry (approvals
//!   pause the run there);
//! - `tools.rs` — the `run` tool (through `tools::authorize_command`, the one command gate),
//!   the harness tools `run_tests` and `finish` as a typed enum, and each role's toolset;
//! - `verification.rs` — the test command and test runs read against the baseline;
//!   `preexisting.rs` — which failures may stand as pre-existing (pure rules);
//! - `final_check.rs` — the final check that decides, as named steps: the gate, the working
//!   tree, a clean checkout of what is committed (`clean_checkout.rs`, which decides
//!   nothing), the held-out tests and the reproduction (`reproduction.rs`) — the
//!   verified-change contract;
//! - `publish/` — the one path from a triggered request to a pushed branch and a draft PR
//!   (`mod.rs`), finding the run it belongs to (`find.rs`), its progress comment
//!   (`progress.rs`);
//! - `checkpoint.rs` — the commit-time policy (`gate.rs`, runner configuration), commits and
//!   the secret scan; `attribution.rs` — which action changed each path, so what only the
//!   test command wrote is not committed;
//! - `review.rs` — the reviewer's read of the verified diff.
//!
//! A new verification stage (a clean-tree re-run, held-out tests) is a step in
//! `final_check::run`; preparing the project's environment before the baseline
//! belongs in `environment.rs`; a new phase of the run is a state in `state.rs` and its arm in
//! `engine.rs`'s state machine.

mod attribution;
mod checkpoint;
mod clean_checkout;
mod context;
mod deadline;
pub mod engine;
mod environment;
mod error;
mod final_check;
#[cfg(test)]
mod fixture;
mod gate;
mod in_use;
mod ledger;
mod preexisting;
mod prompt;
pub mod publish;
pub mod record;
pub mod report;
mod reproduction;
mod review;
pub mod services;
mod setup;
pub mod state;
mod tools;
mod turn;
mod verdict;
mod verification;

pub use environment::gc_private as gc_private_setups;
pub use error::{Error, Result};
pub use record::ended_at;
pub use state::RunState;
