//! The webhook bot: `POST /webhook` (size cap, signature, dedup, durable enqueue), the worker
//! pool that runs the queued jobs, `/healthz`, `/metrics` and the status page.
//!
//! This module owns the HTTP surface and the job life cycle around a run: it verifies a
//! delivery before parsing a byte of it, stores it with its job in one transaction before
//! answering, and hands claimed jobs to a [`JobRunner`]. It must not decide whether an event
//! starts a run (that is `trigger`), run the agent loop (that is `run`) or talk to the forge
//! itself: the runner does those. Queue rules (dedup, redelivery, leases, one run per PR)
//! are the `store`'s.

mod error;
pub mod github;
mod metrics;
pub mod runner;
pub mod signature;
mod status;
mod webhook;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Router, ServiceExt as _};
use futures_util::FutureExt as _;
use futures_util::future::Either;
use secrecy::SecretString;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

pub use error::{Error, Result};
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
    /// The webhook secret (`--webhook-secret`).
    pub secret: Arc<SecretString>,
    /// The status page token; `None` turns the page off.
    pub status_token: Option<Arc<SecretString>>,
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
            metrics: Arc::new(Metrics::default()),
            wake: Arc::new(Notify::new()),
            max_body: MAX_BODY,
            command_prefix: "/agent".into(),
        }
    }
}

/// The routes: `POST /webhook`, `GET /healthz`, `GET /metrics`, `GET /` and
/// `GET /jobs/{id}/report` (the last two behind the status token).
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/webhook", post(webhook::receive))
        .route("/healthz", get(status::healthz))
        .route("/metrics", get(metrics::render_route))
        .route("/", get(status::page))
        .route("/jobs/{id}/report", get(status::report))
        .with_state(state)
}

/// Serve `state` on `listener` until `shutdown` fires; in-flight requests finish first. The
/// caller says where it listens (`git agent serve` prints or logs its address and store).
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: CancellationToken,
) -> Result<()> {
    // `POST /webhook` goes straight to its handler, every other request through the router
    // (which routes `/webhook` the same way): the router's matching, path parameters and
    // boxed handler service cost allocations on every delivery.
    let routes = router(state.clone());
    let app = tower::service_fn(move |request: axum::extract::Request| {
        let webhook =
            request.method() == axum::http::Method::POST && request.uri().path() == "/webhook";
        if webhook {
            Either::Left(webhook::receive(State(state.clone()), request).map(Ok))
        } else {
            Either::Right(routes.clone().oneshot(request))
        }
    });
    axum::serve(listener, app.into_make_service())
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(|source| Error::Serve { source })
}

/// How long a worker keeps a job before another may take it, by default.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(120);
