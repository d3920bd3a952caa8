//! `GET /metrics`: Prometheus text exposition, written by hand (a handful of series).
//!
//! Counters kept in this process: deliveries by event and outcome, jobs finished by run
//! state, run durations (histogram), model spend. Queue depth and jobs by state are read
//! from the store at scrape time, so they are the same whichever process is scraped.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::listen::{Refusal, Timeout};
use super::status;
use crate::store::JobState;

/// Upper bounds of the run-duration buckets, seconds.
const BUCKETS: [f64; 10] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

#[derive(Debug, Default)]
struct Inner {
    /// By event, then outcome.
    deliveries: BTreeMap<String, BTreeMap<&'static str, u64>>,
    runs: BTreeMap<String, u64>,
    duration_buckets: [u64; BUCKETS.len()],
    duration_count: u64,
    duration_sum: f64,
    spend_usd: f64,
}

/// In-process counters.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
    /// HTTP connections open now.
    connections: AtomicU64,
    /// Connections refused at the cap, bodies refused over the budget.
    refused: [AtomicU64; 2],
    /// Requests or connections ended by the header, body and idle timeouts.
    timeouts: [AtomicU64; 3],
}

/// Counts an open connection until dropped.
pub(super) struct OpenConnection<'a>(&'a AtomicU64);

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let mut guard = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    /// Count a delivery of `event` answered with `outcome`. Allocates only for an event not
    /// seen before (this runs for every delivery).
    pub fn delivery(&self, event: &str, outcome: &'static str) {
        let event = if event.is_empty() { "(none)" } else { event };
        // Event names come from the sender; keep the label set bounded: 64 characters.
        let event = match event.char_indices().nth(64) {
            Some((cut, _)) => &event[..cut],
            None => event,
        };
        self.with(|m| {
            let by_outcome = match m.deliveries.get_mut(event) {
                Some(b) => b,
                None => m.deliveries.entry(event.to_string()).or_default(),
            };
            *by_outcome.entry(outcome).or_default() += 1;
        });
    }

    /// Count an open connection while the guard lives.
    pub(super) fn http_connection(&self) -> OpenConnection<'_> {
        self.connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(&self.connections)
    }

    /// Count a refused connection or body.
    pub(super) fn http_refused(&self, why: Refusal) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Count a timeout.
    pub(super) fn http_timeout(&self, which: Timeout) {
        self.timeouts[which as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The HTTP series: open connections, bytes held by bodies being read, refusals and
    /// timeouts.
    fn render_http(&self, out: &mut String, body_bytes: usize) {
        out.push_str("# HELP git_agent_http_connections HTTP connections open.\n");
        out.push_str("# TYPE git_agent_http_connections gauge\n");
        let _ = writeln!(
            out,
            "git_agent_http_connections {}",
            self.connections.load(Ordering::Relaxed)
        );
        out.push_str(
            "# HELP git_agent_http_body_bytes Bytes held by request bodies being read, past \
             each body's free allowance.\n",
        );
        out.push_str("# TYPE git_agent_http_body_bytes gauge\n");
        let _ = writeln!(out, "git_agent_http_body_bytes {body_bytes}");
        out.push_str(
            "# HELP git_agent_http_refused_total Connections refused at the cap and bodies \
             refused over the memory budget.\n",
        );
        out.push_str("# TYPE git_agent_http_refused_total counter\n");
        for (i, reason) in ["connections", "body_memory"].iter().enumerate() {
            let _ = writeln!(
                out,
                "git_agent_http_refused_total{{reason=\"{reason}\"}} {}",
                self.refused[i].load(Ordering::Relaxed)
            );
        }
        out.push_str(
            "# HELP git_agent_http_timeouts_total Requests and connections cut off by a timeout.\n",
        );
        out.push_str("# TYPE git_agent_http_timeouts_total counter\n");
        for (i, kind) in ["header", "body", "idle"].iter().enumerate() {
            let _ = writeln!(
                out,
                "git_agent_http_timeouts_total{{kind=\"{kind}\"}} {}",
                self.timeouts[i].load(Ordering::Relaxed)
            );
        }
    }

    /// Count a finished job: the run's state (or `ignored`, `error`), how long, what it cost.
    pub fn job_finished(&self, run_state: &str, seconds: f64, spend_usd: f64) {
        self.with(|m| {
            *m.runs.entry(run_state.to_string()).or_default() += 1;
            for (i, le) in BUCKETS.iter().enumerate() {
                if seconds <= *le {
                    m.duration_buckets[i] += 1;
                }
            }
            m.duration_count += 1;
            m.duration_sum += seconds;
            m.spend_usd += spend_usd;
        });
    }

    /// The exposition text, with the store's `counts` of jobs by state.
    pub fn render(&self, counts: &[(JobState, u64)]) -> String {
        let mut out = String::new();
        self.with(|m| {
            out.push_str(
                "# HELP git_agent_deliveries_total Webhook deliveries by event and outcome.\n",
            );
            out.push_str("# TYPE git_agent_deliveries_total counter\n");
            for (event, outcome, n) in m
                .deliveries
                .iter()
                .flat_map(|(e, by)| by.iter().map(move |(o, n)| (e, o, n)))
            {
                let _ = writeln!(
                    out,
                    "git_agent_deliveries_total{{event=\"{}\",outcome=\"{}\"}} {n}",
                    label(event),
                    label(outcome)
                );
            }
            out.push_str(
                "# HELP git_agent_runs_total Jobs finished by this process, by run state.\n",
            );
            out.push_str("# TYPE git_agent_runs_total counter\n");
            for (state, n) in &m.runs {
                let _ = writeln!(
                    out,
                    "git_agent_runs_total{{state=\"{}\"}} {n}",
                    label(state)
                );
            }
            out.push_str(
                "# HELP git_agent_run_duration_seconds Time from claim to finish of a job.\n",
            );
            out.push_str("# TYPE git_agent_run_duration_seconds histogram\n");
            for (i, le) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "git_agent_run_duration_seconds_bucket{{le=\"{le}\"}} {}",
                    m.duration_buckets[i]
                );
            }
            let _ = writeln!(
                out,
                "git_agent_run_duration_seconds_bucket{{le=\"+Inf\"}} {}",
                m.duration_count
            );
            let _ = writeln!(out, "git_agent_run_duration_seconds_sum {}", m.duration_sum);
            let _ = writeln!(
                out,
                "git_agent_run_duration_seconds_count {}",
                m.duration_count
            );
            out.push_str(
                "# HELP git_agent_model_spend_usd_total Model spend of finished jobs, USD.\n",
            );
            out.push_str("# TYPE git_agent_model_spend_usd_total counter\n");
            let _ = writeln!(out, "git_agent_model_spend_usd_total {}", m.spend_usd);
        });
        out.push_str("# HELP git_agent_jobs Jobs in the store by state.\n");
        out.push_str("# TYPE git_agent_jobs gauge\n");
        for (state, n) in counts {
            let _ = writeln!(out, "git_agent_jobs{{state=\"{}\"}} {n}", state.as_str());
        }
        let depth = counts
            .iter()
            .find(|(s, _)| *s == JobState::Queued)
            .map_or(0, |c| c.1);
        out.push_str("# HELP git_agent_queue_depth Jobs waiting for a worker.\n");
        out.push_str("# TYPE git_agent_queue_depth gauge\n");
        let _ = writeln!(out, "git_agent_queue_depth {depth}");
        out
    }
}

/// A label value escaped as the exposition format requires.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `GET /metrics`: behind the status token unless the operator made it public.
pub(super) async fn render_route(State(st): State<AppState>, headers: HeaderMap) -> Response {
    if !st.public_metrics
        && let Err(denied) = status::authorized(&st, &headers)
    {
        return denied.into_response();
    }
    match st.store.counts().await {
        Ok(counts) => {
            let mut text = st.metrics.render(&counts);
            st.metrics.render_http(&mut text, st.body_budget.held());
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "metrics: cannot count jobs");
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition() {
        let m = Metrics::default();
        m.delivery("issues", "queued");
        m.delivery("issues", "queued");
        m.delivery("we\"ird", "ignored");
        m.delivery(&"é".repeat(100), "ignored");
        m.delivery(&"é".repeat(64), "ignored");
        m.job_finished("succeeded", 12.0, 0.5);
        let text = m.render(&[(JobState::Queued, 3), (JobState::Running, 1)]);
        assert!(
            text.contains("git_agent_deliveries_total{event=\"issues\",outcome=\"queued\"} 2\n")
        );
        assert!(text.contains("event=\"we\\\"ird\""));
        // A long event name is cut to 64 characters, on a character boundary.
        let long = format!("event=\"{}\",outcome=\"ignored\"}} 2\n", "é".repeat(64));
        assert!(text.contains(&long), "{text}");
        assert!(text.contains("git_agent_runs_total{state=\"succeeded\"} 1\n"));
        assert!(text.contains("git_agent_run_duration_seconds_bucket{le=\"5\"} 0\n"));
        assert!(text.contains("git_agent_run_duration_seconds_bucket{le=\"15\"} 1\n"));
        assert!(text.contains("git_agent_run_duration_seconds_count 1\n"));
        assert!(text.contains("git_agent_model_spend_usd_total 0.5\n"));
        assert!(text.contains("git_agent_queue_depth 3\n"));
        assert!(text.contains("git_agent_jobs{state=\"running\"} 1\n"));
    }
}
