//! The webhook bot: `POST /webhook` (size cap, signature, dedup, durable enqueue), the worker
//! pool that runs the queued jobs, `/healthz`, `/metrics` and the status page.
//!
//! This module owns the HTTP surface and the job life cycle around a run: it verifies a
//! delivery before parsing a byte of it, stores it with its job in one transaction before
//! answering, and hands claimed jobs to a [`JobRunner`]. The production runner
//! ([`github::GitHubRunner`]) is the bot's one contact with GitHub: it makes the client for a
//! delivery's App installation (minting its token), asks `trigger` what the event means and
//! hands runs to [`publisher::EnginePublisher`], which mirrors the repository and calls
//! `run::publish`. It must not decide whether an event starts a run (that is `trigger`), run
//! the agent loop or publish by a path of its own (that is `run`). Queue rules (dedup,
//! redelivery, leases, one run per PR) are the `store`'s.

mod error;
pub mod github;
mod limits;
mod listen;
mod metrics;
pub mod publisher;
pub mod runner;
pub mod signature;
mod status;
mod webhook;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use secrecy::SecretString;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use error::{Error, Result};
pub use limits::{BodyBudget, FREE_BODY_BYTES, Limits, MAX_READ_BUFFER};
pub use metrics::Metrics;
pub use runner::{JobInput, JobOutcome, JobRunner, RunSummary};
pub use webhook::{HANDLED_EVENTS, MAX_BODY, lane_of};
pub use worker::{WorkerOptions, spawn_workers};

use crate::store::Store;

/// What the HTTP side needs.
#[derive(Clone)]
pub struct AppState {
    /// The queue.
    pub store: Arc<dyn Store>,
    /// The webhook secret (`GIT_AGENT_WEBHOOK_SECRET` or `--webhook-secret-file`).
    pub secret: Arc<SecretString>,
    /// The status page token; `None` turns the page off (and `/metrics`, unless public).
    pub status_token: Option<Arc<SecretString>>,
    /// `/metrics` without the token (`--public-metrics`): the operator's explicit choice.
    pub public_metrics: bool,
    /// Timeouts and caps on clients; `serve` enforces them.
    pub limits: Limits,
    /// The bytes bodies being read hold; `serve` makes it `limits.body_memory` large.
    pub body_budget: Arc<BodyBudget>,
    /// Counters for `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Woken when a job is queued, so an idle worker claims it at once.
    pub wake: Arc<Notify>,
    /// Largest body accepted, bytes.
    pub max_body: usize,
    /// The comment-command prefix (`/agent`), to tell control commands from runs.
    pub command_prefix: String,
}

impl AppState {
    /// State for `store` and `secret` with the defaults: 25 MB bodies, `/agent`, no status page.
    pub fn new(store: Arc<dyn Store>, secret: SecretString) -> Self {
        AppState {
            store,
            secret: Arc::new(secret),
            status_token: None,
            public_metrics: false,
            limits: Limits::default(),
            body_budget: Arc::new(BodyBudget::new(Limits::default().body_memory)),
            metrics: Arc::new(Metrics::default()),
            wake: Arc::new(Notify::new()),
            max_body: MAX_BODY,
            command_prefix: "/agent".into(),
        }
    }
}

/// The routes: `POST /webhook`, `GET /healthz`, `GET /metrics` (behind the status token
/// unless public), `GET /` and `GET /jobs/{id}/report` (behind the status token), and
/// `GET`/`POST /login`, `POST /logout` (the status page's cookie).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/webhook", post(webhook::receive))
        .route("/healthz", get(status::healthz))
        .route("/metrics", get(metrics::render_route))
        .route("/", get(status::page))
        .route("/jobs/{id}/report", get(status::report))
        .route("/login", get(status::login_form).post(status::login))
        .route("/logout", post(status::logout))
        .with_state(state)
}

/// Serve `state` on `listener` until `shutdown` fires; in-flight requests finish first. The
/// caller says where it listens (`git agent serve` prints or logs its address and store).
/// `state.limits` bound what clients can hold: see [`Limits`].
pub async fn serve(
    listener: TcpListener,
    mut state: AppState,
    shutdown: CancellationToken,
) -> Result<()> {
    state.body_budget = Arc::new(BodyBudget::new(state.limits.body_memory));
    let (limits, metrics) = (state.limits.clone(), state.metrics.clone());
    listen::accept_loop(listener, router(state), limits, metrics, shutdown).await;
    Ok(())
}

/// How long a worker keeps a job before another may take it, by default.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(120);
