//! git-agent: a git-native coding agent.
//!
//! A request (an issue label, an `/agent` comment, a failed CI run or `git agent fix "…"`)
//! becomes a [`task`](crate) handed to one engine, which works in an isolated git worktree and
//! ends in a branch of verified commits and a pull request. See `docs/ARCHITECTURE.md` for the
//! module map; each module's own docs say what it owns.

pub mod audit;
pub mod cli;
pub mod config;
pub mod exec;
mod failpoint;
pub mod forge;
mod fsutil;
pub mod index;
pub mod model;
pub mod policy;
pub mod run;
pub mod server;
pub mod store;
pub mod task;
mod tls;
pub mod tools;
pub mod trigger;
pub mod verify;
pub mod workspace;
