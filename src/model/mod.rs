//! Model access: the [`ModelClient`] trait and its providers (OpenAI-compatible Chat
//! Completions, Anthropic Messages, scripted replay), role routing with fallback, usage, cost
//! and hard budgets.
//!
//! This module owns talking to models: wire formats, streaming, retries, time-outs, prices and
//! the budget check before every call. It does not run tools, decide what to ask, write the
//! audit log or redact secrets: each call returns a [`CallRecord`] and a [`TranscriptEntry`]
//! as data, and the run writes them. It never reads the environment on its own; keys and base
//! URLs come through the `env` lookup the caller passes to [`Router::from_settings`].
//!
//! The run asks a [`Router`] for a [`Role`], never for a model:
//!
//! ```no_run
//! # async fn demo(settings: git_agent::config::Settings) -> Result<(), git_agent::model::Error> {
//! use git_agent::model::{Message, Request, Role, Router, RouterOptions};
//! let env = |k: &str| std::env::var(k).ok();
//! let router = Router::from_settings(&settings, &RouterOptions::default(), &env)?;
//! let req = Request::new(vec![Message::user("Plan the fix for issue 42")], 4096);
//! let out = router.call(Role::Planner, &req, None).await?;
//! // out.reply: text and tool calls; out.record: the `model_call` audit event's data.
//! # Ok(()) }
//! ```

pub mod anthropic;
pub mod budget;
pub mod cost;
mod error;
mod http;
pub mod openai;
mod router;
pub mod scripted;
mod types;

use futures_util::future::BoxFuture;

pub use budget::{Budget, Exhausted, Limit, Spend};
pub use cost::PriceTable;
pub use error::{Error, Result};
pub use router::{
    CallOutcome, CallRecord, ModelSpec, Provider, ResumeState, Route, Router, RouterOptions,
    TranscriptEntry, UsageLine, build_client, parse_assignment, role_specs,
};
pub use types::{
    CallContext, Message, Progress, ProgressFn, Reply, Request, Role, StopReason, ToolCall,
    ToolChoice, ToolSpec, Usage,
};

/// A model behind some wire format. Held as `Arc<dyn ModelClient>`; implementations retry
/// transient failures themselves and report progress through the context.
pub trait ModelClient: Send + Sync + std::fmt::Debug {
    /// Provider label (`openai`, `anthropic`, `ollama`, `scripted`), for prices and records.
    fn provider(&self) -> &str;

    /// Model name as configured (for `scripted`, the script's path).
    fn model(&self) -> &str;

    /// Send `req` and return the whole reply.
    fn complete<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Reply>>;

    /// How many provider requests one call of `req` may make at most (the budget reserves
    /// that many worst cases). One, except where a client has a second way to get an answer.
    fn requests_per_call(&self, _req: &Request) -> u32 {
        1
    }

    /// On resume, pass over the reply an interrupted run already got for `role`. Live models
    /// have nothing to skip; a replayed script moves past the line that call consumed.
    fn skip_replayed(&self, _role: Role) {}
}
