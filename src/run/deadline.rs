//! The run's wall clock binds its commands: no command may outlive `max_minutes`.
//!
//! The budget is checked before every model call, so before this a single `run` with a long
//! `timeout_s` (or a slow test suite) could overrun the run's time by as long as it liked
//! (issue 17: a 1-minute run overran by 150 s). Every command the run starts goes through
//! [`Bounded`], which cuts its timeout to what is left of the run's time; the next budget
//! check then ends the run as `budget_exhausted`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::exec::{BlockedHost, ExecOutput, ExecRequest, Executor, Result, SandboxReport};
use crate::model::Router;

/// A command started when the run's time is already spent still gets this long, so that it
/// reports "timed out" like any other instead of an error nobody can act on.
const LAST_GRACE: Duration = Duration::from_secs(1);

/// An executor whose commands end no later than the run's deadline.
pub(crate) struct Bounded {
    inner: Arc<dyn Executor>,
    router: Arc<Router>,
    max: Duration,
    default_timeout: Duration,
}

impl Bounded {
    /// Commands of `inner` bounded by `max_minutes` of the run's time as `router` counts it
    /// (a resumed run's earlier time included).
    pub(crate) fn new(
        inner: Arc<dyn Executor>,
        router: Arc<Router>,
        max_minutes: u32,
        default_timeout: Duration,
    ) -> Self {
        Self {
            inner,
            router,
            max: Duration::from_secs(u64::from(max_minutes) * 60),
            default_timeout,
        }
    }

    /// The timeout a request gets: its own (or the default), never past the deadline.
    fn bound(&self, asked: Option<Duration>) -> Duration {
        let left = self.max.saturating_sub(self.router.elapsed());
        asked
            .unwrap_or(self.default_timeout)
            .min(left.max(LAST_GRACE))
    }
}

impl Executor for Bounded {
    fn run(&self, mut request: ExecRequest) -> BoxFuture<'_, Result<ExecOutput>> {
        request.timeout = Some(self.bound(request.timeout));
        self.inner.run(request)
    }

    fn sandbox(&self) -> &SandboxReport {
        self.inner.sandbox()
    }

    fn blocked_hosts(&self) -> Vec<BlockedHost> {
        self.inner.blocked_hosts()
    }
}
