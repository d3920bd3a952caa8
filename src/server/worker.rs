//! The worker pool: N tasks that claim jobs, keep their leases alive, hand them to the
//! [`JobRunner`] and write how they ended.
//!
//! Global limit: the number of workers. Per-PR limit: the store's (one running job a lane).
//! One more worker takes only control jobs (`/agent stop`), so a stop is answered while every
//! run worker is busy.
//! Shutdown: workers stop claiming at once; a running job gets `grace` to finish, then is
//! cancelled and its lease released, so the next process (or another one on the same
//! Postgres) continues it. `/agent stop` reaches a running job through its heartbeat.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Metrics;
use super::runner::{JobInput, JobOutcome, JobRunner};
use crate::store::{Claim, Finish, Heartbeat, Job, JobState, Store};

/// How the pool works.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Workers (jobs run at once in this process).
    pub workers: usize,
    /// Lease taken on a claim and on each heartbeat.
    pub lease: Duration,
    /// Time between heartbeats (well under `lease`).
    pub heartbeat: Duration,
    /// Time between claims when the queue looks empty (a delivery wakes a worker at once).
    pub poll: Duration,
    /// Claims after which a job that never finished (its worker died each time) fails.
    pub max_attempts: u32,
    /// Time a running job gets to finish after shutdown begins.
    pub grace: Duration,
    /// Lease owner prefix, unique per process (`host-pid`).
    pub owner: String,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            workers: 2,
            lease: super::DEFAULT_LEASE,
            heartbeat: Duration::from_secs(20),
            poll: Duration::from_secs(2),
            max_attempts: 3,
            grace: Duration::from_secs(30),
            owner: format!("{}-{}", hostname(), std::process::id()),
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "host".into())
}

struct Ctx {
    store: Arc<dyn Store>,
    runner: Arc<dyn JobRunner>,
    metrics: Arc<Metrics>,
    wake: Arc<Notify>,
    opts: WorkerOptions,
    shutdown: CancellationToken,
}

/// Start the pool. The returned set finishes when every worker has stopped after `shutdown`.
pub fn spawn_workers(
    store: Arc<dyn Store>,
    runner: Arc<dyn JobRunner>,
    metrics: Arc<Metrics>,
    wake: Arc<Notify>,
    opts: WorkerOptions,
    shutdown: CancellationToken,
) -> JoinSet<()> {
    let ctx = Arc::new(Ctx {
        store,
        runner,
        metrics,
        wake,
        opts,
        shutdown,
    });
    let mut set = JoinSet::new();
    for i in 0..ctx.opts.workers.max(1) {
        let ctx = ctx.clone();
        set.spawn(async move { worker(ctx, format!("w{i}"), Claim::Any).await });
    }
    let control = ctx.clone();
    set.spawn(async move { worker(control, "control".into(), Claim::Unlaned).await });
    set
}

async fn worker(ctx: Arc<Ctx>, name: String, which: Claim) {
    let owner = format!("{}-{name}", ctx.opts.owner);
    loop {
        if ctx.shutdown.is_cancelled() {
            break;
        }
        match ctx.store.claim(&owner, ctx.opts.lease, which).await {
            Ok(Some(job)) => process(&ctx, &owner, job).await,
            Ok(None) => {
                tokio::select! {
                    () = ctx.wake.notified() => {}
                    () = tokio::time::sleep(ctx.opts.poll) => {}
                    () = ctx.shutdown.cancelled() => break,
                }
            }
            Err(e) => {
                tracing::error!(error = %e, worker = %owner, "cannot claim a job");
                tokio::select! {
                    () = tokio::time::sleep(ctx.opts.poll) => {}
                    () = ctx.shutdown.cancelled() => break,
                }
            }
        }
    }
    tracing::debug!(worker = %owner, "worker stopped");
}

/// Why a job's token was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    Stopped,
    LeaseLost,
    Shutdown,
}

fn finish_of(state: JobState, detail: impl Into<String>, started: Instant) -> Finish {
    Finish {
        state,
        run_id: None,
        run_state: None,
        pr_url: None,
        report: None,
        detail: detail.into(),
        spend_usd: 0.0,
        duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
    }
}

async fn write_finish(ctx: &Ctx, owner: &str, job: &Job, f: Finish, started: Instant) {
    let label = f.run_state.clone().unwrap_or_else(|| match f.state {
        JobState::Cancelled => "cancelled".into(),
        JobState::Failed => "error".into(),
        _ => "ignored".into(),
    });
    match ctx.store.finish(&job.id, owner, &f).await {
        Ok(true) => {
            ctx.metrics
                .job_finished(&label, started.elapsed().as_secs_f64(), f.spend_usd);
            tracing::info!(job = %job.id, state = f.state.as_str(), detail = %f.detail, "job finished");
        }
        Ok(false) => tracing::warn!(job = %job.id, "lease lost before the job could be finished"),
        Err(e) => tracing::error!(job = %job.id, error = %e, "cannot finish a job"),
    }
}

async fn process(ctx: &Ctx, owner: &str, job: Job) {
    let started = Instant::now();
    tracing::info!(job = %job.id, attempt = job.attempts, trigger = %job.trigger, "job claimed");
    if job.cancel_requested {
        let f = finish_of(JobState::Cancelled, "stopped by /agent stop", started);
        return write_finish(ctx, owner, &job, f, started).await;
    }
    if job.attempts > ctx.opts.max_attempts {
        let f = finish_of(
            JobState::Failed,
            format!(
                "gave up after {} attempts that never finished",
                ctx.opts.max_attempts
            ),
            started,
        );
        return write_finish(ctx, owner, &job, f, started).await;
    }
    let cancel = CancellationToken::new();
    let stop = CancellationToken::new();
    let why: Arc<Mutex<Option<Why>>> = Arc::new(Mutex::new(None));
    let set_why = |why: &Mutex<Option<Why>>, w: Why| {
        if let Ok(mut g) = why.lock()
            && g.is_none()
        {
            *g = Some(w);
        }
    };
    let beat = {
        let store = ctx.store.clone();
        let (cancel, stop) = (cancel.clone(), stop.clone());
        let why = why.clone();
        let (id, owner) = (job.id.clone(), owner.to_string());
        let (every, lease) = (ctx.opts.heartbeat, ctx.opts.lease);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match store.heartbeat(&id, &owner, lease).await {
                    Ok(Heartbeat::Held { cancel: false }) => {}
                    Ok(Heartbeat::Held { cancel: true }) => {
                        set_why(&why, Why::Stopped);
                        stop.cancel();
                        cancel.cancel();
                    }
                    Ok(Heartbeat::Lost) => {
                        set_why(&why, Why::LeaseLost);
                        cancel.cancel();
                        break;
                    }
                    Err(e) => tracing::warn!(job = %id, error = %e, "heartbeat failed"),
                }
            }
        })
    };
    let input = JobInput {
        job_id: job.id.clone(),
        delivery_id: job.delivery_id.clone(),
        event: job.event.clone(),
        payload: job.payload.clone(),
        attempt: job.attempts,
        run_id: job.run_id.clone(),
        stop: stop.clone(),
    };
    let run = ctx.runner.run(&input, cancel.clone());
    tokio::pin!(run);
    let result = tokio::select! {
        r = &mut run => r,
        () = async {
            ctx.shutdown.cancelled().await;
            tokio::time::sleep(ctx.opts.grace).await;
        } => {
            set_why(&why, Why::Shutdown);
            cancel.cancel();
            run.await
        }
    };
    beat.abort();
    let why = why.lock().ok().and_then(|g| *g);
    match why {
        Some(Why::LeaseLost) => {
            tracing::warn!(job = %job.id, "lease lost while running; another worker owns the job");
        }
        Some(Why::Shutdown) => match ctx.store.release(&job.id, owner).await {
            Ok(_) => tracing::info!(job = %job.id, "shutdown: job released for another worker"),
            Err(e) => tracing::error!(job = %job.id, error = %e, "cannot release a job"),
        },
        Some(Why::Stopped) => {
            let mut f = finish_of(JobState::Cancelled, "stopped by /agent stop", started);
            if let Ok(JobOutcome::Ran(run)) = &result {
                f.run_id = Some(run.run_id.clone());
                f.run_state = Some(run.state.clone());
                f.pr_url = run.pr_url.clone();
                f.report = run.report.clone();
                f.spend_usd = run.spend_usd;
            }
            write_finish(ctx, owner, &job, f, started).await;
        }
        None => {
            let f = match result {
                Ok(JobOutcome::Ran(run)) => Finish {
                    state: JobState::Succeeded,
                    run_id: Some(run.run_id),
                    run_state: Some(run.state),
                    pr_url: run.pr_url,
                    report: run.report,
                    detail: run.detail,
                    spend_usd: run.spend_usd,
                    duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
                },
                Ok(JobOutcome::Stop { lane }) => {
                    let detail = match ctx.store.cancel_lane(&lane, &job.id).await {
                        Ok(n) => format!("/agent stop: {n} job(s) of {lane} stopped"),
                        Err(e) => {
                            let f = finish_of(JobState::Failed, e.to_string(), started);
                            return write_finish(ctx, owner, &job, f, started).await;
                        }
                    };
                    finish_of(JobState::Succeeded, detail, started)
                }
                Ok(JobOutcome::Ignored { reason }) => {
                    finish_of(JobState::Succeeded, format!("ignored: {reason}"), started)
                }
                Err(e) => finish_of(JobState::Failed, super::error::chain(&e), started),
            };
            write_finish(ctx, owner, &job, f, started).await;
        }
    }
}
