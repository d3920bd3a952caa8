//! `POST /webhook`: cap, verify, route, persist, then answer.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use std::time::Duration;
use tokio::time::Instant;

use serde_json::{Value, json};

use super::AppState;
use super::limits::{Charge, OverBudget};
use super::listen::{Refusal, Timeout};
use super::signature;
use crate::failpoint::failpoint;
use crate::store::{Enqueued, NewDelivery};
use crate::trigger::Event;
use crate::trigger::command::{self, Command};

/// Longest a refused body is read (and discarded) so its client can read the answer.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Longest a body refused for the budget is read (and discarded).
const BUSY_DRAIN_TIME: Duration = Duration::from_secs(1);

/// Largest delivery accepted: GitHub caps payloads at 25 MB and drops larger ones.
pub const MAX_BODY: usize = 25 * 1024 * 1024;

/// Events that can start or control a run (the trigger's list); every other event is answered
/// 200 and dropped.
pub const HANDLED_EVENTS: &[&str] = crate::trigger::HANDLED;

/// The event label of deliveries refused before their signature is checked: the event header
/// of an unsigned request is anyone's string, and one label per string would let anyone grow
/// the metrics without bound.
const UNVERIFIED: &str = "(unverified)";

fn reply(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Why a body was not read whole.
enum Unread {
    /// It is longer than the cap; the unread rest, to be discarded.
    TooLarge(Body),
    /// Holding more of it would pass the body budget; the unread rest, to be discarded.
    OverBudget(Body),
    /// The client broke off.
    Broken(axum::Error),
}

/// Read at most `max` bytes of `body`, charging what is held to `charge`; once it holds more,
/// `TooLarge` with the unread rest (what was read is dropped). Stops reading there, so an
/// oversized body is never held whole. A body that came in one piece (the usual case on a
/// kept-alive connection) is that piece, not a copy of it. The buffer grows with what
/// arrives, never ahead of it on the client's word (a declared length is only a claim).
async fn read_capped(body: Body, max: usize, charge: &mut Charge) -> Result<Bytes, Unread> {
    let mut stream = body.into_data_stream();
    let mut read = Joined::default();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(Unread::Broken)?;
        if read.total + chunk.len() > max {
            // Past the cap: what was read is dropped; the rest goes back to be discarded.
            return Err(Unread::TooLarge(Body::from_stream(stream)));
        }
        if read.push(chunk, max, charge).is_err() {
            return Err(Unread::OverBudget(Body::from_stream(stream)));
        }
    }
    Ok(read.into_bytes())
}

/// The pieces of a body read so far. The first is kept as it came; once a second arrives,
/// they are copied into one buffer, whose every byte (and the first piece's while it is
/// copied) is charged before it is allocated.
#[derive(Default)]
struct Joined {
    single: Option<Bytes>,
    joined: Vec<u8>,
    total: usize,
}

impl Joined {
    fn push(&mut self, chunk: Bytes, max: usize, charge: &mut Charge) -> Result<(), OverBudget> {
        self.total += chunk.len();
        if self.single.is_none() && self.joined.is_empty() {
            charge.cover(self.total)?;
            self.single = Some(chunk);
            return Ok(());
        }
        let held = self.single.as_ref().map_or(0, Bytes::len);
        if self.total > self.joined.capacity() {
            let (want, need) = growth(self.joined.capacity(), self.total, max);
            let room = charge.cover_most(want + held, need + held)? - held;
            self.joined.reserve_exact(room - self.joined.len());
        }
        if let Some(first) = self.single.take() {
            self.joined.extend_from_slice(&first);
        }
        self.joined.extend_from_slice(&chunk);
        Ok(())
    }

    fn into_bytes(self) -> Bytes {
        self.single.unwrap_or_else(|| Bytes::from(self.joined))
    }
}

/// The capacity a buffer of `cap` bytes grows to once `total` bytes do not fit: what it
/// would like (double) and what it must have. A body the budget holds is not refused for
/// the way its buffer grows (how the bytes arrive in pieces depends on the machine's load),
/// so the buffer takes what the budget has free of the doubling; but it grows by at least an
/// eighth, else a body sent in small pieces into a tight budget would be copied once per
/// piece (quadratic work for the sender's linear bytes), where an eighth bounds the copying
/// to nine times the body.
fn growth(cap: usize, total: usize, max: usize) -> (usize, usize) {
    let want = total.max(2 * cap).min(max);
    let need = total.max(cap + cap / 8).min(max).max(total);
    (want, need)
}

/// Read and discard what is left of a refused body, up to `limit` bytes or until `deadline`,
/// so the client (still writing) reads the answer instead of a broken pipe. Nothing is kept;
/// a client that sends more than that is cut off.
async fn drain(body: Body, limit: u64, deadline: Instant) {
    let mut stream = body.into_data_stream();
    let mut seen = 0u64;
    let _ = tokio::time::timeout_at(deadline, async {
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len() as u64;
            if seen > limit {
                break;
            }
        }
    })
    .await;
}

/// An answer after which the connection is closed: the client's body was not read to its end.
fn reply_and_close(status: StatusCode, body: Value) -> Response {
    let mut response = reply(status, body);
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The handler.
pub(super) async fn receive(State(st): State<AppState>, request: Request) -> Response {
    // The body's deadline runs from its head: a client sending it slowly is cut off there.
    let deadline = Instant::now() + st.limits.body_timeout;
    // The request taken whole: the `HeaderMap` extractor would copy the headers.
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    let event = header_str(headers, "x-github-event").unwrap_or("");
    let declared =
        header_str(headers, header::CONTENT_LENGTH.as_str()).and_then(|v| v.parse::<u64>().ok());
    let drain_limit = 2 * st.max_body as u64;
    let too_large = || {
        reply_and_close(
            StatusCode::PAYLOAD_TOO_LARGE,
            json!({"error": "payload too large"}),
        )
    };
    if declared.is_some_and(|n| n > st.max_body as u64) {
        st.metrics.delivery(UNVERIFIED, "too_large");
        // Refused on the declared length: nothing is read into memory, only discarded.
        drain(body, drain_limit, deadline.min(Instant::now() + DRAIN_TIME)).await;
        return too_large();
    }
    // Held until the body is dropped: every byte of it counts against the budget.
    let mut charge = st.body_budget.charge();
    let read = tokio::time::timeout_at(deadline, read_capped(body, st.max_body, &mut charge));
    let bytes = match read.await {
        Ok(Ok(b)) => b,
        Ok(Err(Unread::TooLarge(rest))) => {
            st.metrics.delivery(UNVERIFIED, "too_large");
            drop(charge);
            drain(rest, drain_limit, deadline.min(Instant::now() + DRAIN_TIME)).await;
            return too_large();
        }
        Ok(Err(Unread::OverBudget(rest))) => {
            st.metrics.delivery(UNVERIFIED, "busy");
            st.metrics.http_refused(Refusal::BodyMemory);
            drop(charge);
            // Briefly, so a client still sending reads the 503 rather than a reset.
            drain(
                rest,
                drain_limit,
                deadline.min(Instant::now() + BUSY_DRAIN_TIME),
            )
            .await;
            let mut busy = reply_and_close(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "too many large deliveries in flight; redeliver it"}),
            );
            busy.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return busy;
        }
        Ok(Err(Unread::Broken(e))) => {
            tracing::debug!(error = %e, "cannot read a webhook body");
            st.metrics.delivery(UNVERIFIED, "bad_body");
            return reply(StatusCode::BAD_REQUEST, json!({"error": "unreadable body"}));
        }
        Err(_) => {
            st.metrics.delivery(UNVERIFIED, "body_timeout");
            st.metrics.http_timeout(Timeout::Body);
            return reply_and_close(
                StatusCode::REQUEST_TIMEOUT,
                json!({"error": "the body did not arrive in time"}),
            );
        }
    };
    let sig = headers.get("x-hub-signature-256").map(|v| v.as_bytes());
    if let Err(why) = signature::verify(&st.secret, sig, &bytes) {
        tracing::warn!(reason = why.as_str(), "webhook signature refused");
        st.metrics.delivery(UNVERIFIED, "unauthorized");
        return reply(StatusCode::UNAUTHORIZED, json!({"error": "bad signature"}));
    }
    let Some(delivery_id) =
        header_str(headers, "x-github-delivery").filter(|d| !d.is_empty() && d.len() <= 128)
    else {
        st.metrics.delivery(event, "bad_request");
        return reply(
            StatusCode::BAD_REQUEST,
            json!({"error": "missing X-GitHub-Delivery"}),
        );
    };
    if event == "ping" {
        st.metrics.delivery(event, "ping");
        return reply(StatusCode::OK, json!({"ok": "pong"}));
    }
    if !HANDLED_EVENTS.contains(&event) {
        st.metrics.delivery(event, "ignored");
        return reply(
            StatusCode::OK,
            json!({"ignored": format!("{event} events are not handled")}),
        );
    }
    // The one parse of the delivery; the job keeps what the agent reads of it.
    let (payload, meta) = match Event::parse(event, &bytes) {
        Ok(parsed) => (parsed.stored(), describe(&parsed, &st.command_prefix)),
        Err(e) => {
            let why = if e.is_not_json() {
                "payload is not JSON"
            } else {
                "payload does not have the shape of a GitHub event"
            };
            tracing::warn!(%delivery_id, error = %e, why, "signed delivery refused");
            st.metrics.delivery(event, "bad_request");
            return reply(StatusCode::BAD_REQUEST, json!({ "error": why }));
        }
    };
    drop(bytes);
    drop(charge);
    let new = NewDelivery {
        delivery_id: delivery_id.to_string(),
        event: event.to_string(),
        payload,
        repo: meta.repo,
        lane: meta.lane,
        trigger: meta.trigger,
    };
    match st.store.enqueue(new).await {
        Ok(outcome) => {
            failpoint("after-enqueue-commit");
            let (status, label) = match &outcome {
                Enqueued::New { .. } => (StatusCode::ACCEPTED, "queued"),
                Enqueued::Requeued { .. } => (StatusCode::ACCEPTED, "requeued"),
                Enqueued::Duplicate { .. } => (StatusCode::OK, "duplicate"),
            };
            if status == StatusCode::ACCEPTED {
                st.wake.notify_one();
            }
            st.metrics.delivery(event, label);
            tracing::info!(%delivery_id, %event, job = outcome.job_id(), outcome = label, "delivery");
            let ack = Ack {
                job: outcome.job_id(),
                outcome: label,
            };
            (status, axum::Json(ack)).into_response()
        }
        Err(e) => {
            tracing::error!(%delivery_id, error = %e, "cannot store a delivery");
            st.metrics.delivery(event, "store_error");
            reply(
                StatusCode::SERVICE_UNAVAILABLE,
                json!({"error": "cannot store the delivery; redeliver it"}),
            )
        }
    }
}

/// The answer to a stored delivery (a struct, not a `json!` map: this is the hot path).
#[derive(serde::Serialize)]
struct Ack<'a> {
    job: &'a str,
    outcome: &'a str,
}

#[derive(Debug, PartialEq)]
struct Meta {
    repo: Option<String>,
    lane: Option<String>,
    trigger: String,
}

/// The lane of a stored delivery (see [`Event::lane`]); `None` when the payload names no
/// issue, pull request or branch (or is not an event's JSON).
pub fn lane_of(event: &str, payload: &[u8]) -> Option<String> {
    Event::parse(event, payload).ok()?.lane()
}

fn describe(event: &Event<'_>, prefix: &str) -> Meta {
    let action = event.action();
    let repo = event.repo().map(|r| r.to_string());
    let mut lane = event.lane();
    let mut trigger = if action.is_empty() {
        event.name.to_string()
    } else {
        format!("{}.{action}", event.name)
    };
    if let Some(body) = event
        .payload
        .comment
        .as_ref()
        .and_then(|c| c.body.as_deref())
        && let Ok(cmd) = command::parse(prefix, body)
    {
        let verb = match cmd {
            Command::Fix(_) => "fix",
            Command::Plan => "plan",
            Command::Stop => "stop",
            Command::Approve(_) => "approve",
            Command::Retry => "retry",
        };
        trigger = format!("{trigger}: {prefix} {verb}");
        // A stop must not wait behind the run it stops.
        if cmd == Command::Stop {
            lane = None;
        }
    }
    Meta {
        repo,
        lane,
        trigger,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body arriving as these pieces.
    fn pieces(sizes: &[usize]) -> Body {
        let chunks: Vec<Result<Bytes, std::io::Error>> = sizes
            .iter()
            .map(|&n| Ok(Bytes::from(vec![b' '; n])))
            .collect();
        Body::from_stream(futures_util::stream::iter(chunks))
    }

    /// Guards the body budget against its own buffer growth: 900 KiB arriving as a small
    /// piece, a large one and a last one (as a loaded machine reads them) fits a 1 MiB
    /// budget, though doubling the buffer would ask for 1.6 MiB; 1.1 MiB does not fit.
    #[tokio::test]
    async fn a_body_the_budget_holds_is_taken_however_it_arrives() {
        let budget = super::super::limits::BodyBudget::new(1024 * 1024);
        let sizes = [8 * 1024, 800 * 1024, 92 * 1024];
        let mut charge = budget.charge();
        let read = read_capped(pieces(&sizes), 25 << 20, &mut charge).await;
        let bytes = read.unwrap_or_else(|_| panic!("refused"));
        assert_eq!(bytes.len(), 900 * 1024);
        assert!(budget.held() <= 1024 * 1024);
        drop(charge);
        assert_eq!(budget.held(), 0);
        let mut charge = budget.charge();
        let read = read_capped(pieces(&[8 * 1024, 1100 * 1024]), 25 << 20, &mut charge).await;
        assert!(matches!(read, Err(Unread::OverBudget(_))));
    }

    #[test]
    fn a_buffer_grows_by_doubling_and_by_an_eighth_at_least() {
        assert_eq!(growth(0, 10, 100), (10, 10));
        assert_eq!(growth(40, 41, 100), (80, 45));
        assert_eq!(growth(40, 90, 100), (90, 90));
        assert_eq!(growth(80, 81, 100), (100, 90));
        assert_eq!(growth(96, 99, 100), (100, 100));
    }

    /// Replays a body sent in small pieces while the budget frees up a piece's worth at a
    /// time (other bodies finishing, as an attacker can arrange): the body is refused or
    /// joined with its bytes copied a bounded number of times, never once per piece.
    #[test]
    fn a_body_in_small_pieces_is_not_copied_once_per_piece() {
        use super::super::limits::{BodyBudget, FREE_BODY_BYTES};
        const PIECE: usize = 4 * 1024;
        const OTHERS: usize = 512;
        let budget = BodyBudget::new(OTHERS * PIECE);
        let mut others: Vec<Charge> = (0..OTHERS)
            .map(|_| {
                let mut c = budget.charge();
                c.cover(FREE_BODY_BYTES + PIECE).unwrap();
                c
            })
            .collect();
        let mut charge = budget.charge();
        let mut read = Joined::default();
        let (mut copied, mut refused) = (0usize, false);
        for _ in 0..(FREE_BODY_BYTES / PIECE + OTHERS) {
            let (len, cap) = (read.joined.len(), read.joined.capacity());
            if read
                .push(Bytes::from(vec![b' '; PIECE]), MAX_BODY, &mut charge)
                .is_err()
            {
                refused = true;
                break;
            }
            if read.joined.capacity() != cap {
                copied += len;
            }
            others.pop();
        }
        assert!(
            refused || copied <= 9 * read.total,
            "{copied} bytes copied for a body of {}",
            read.total
        );
    }

    /// The payload as the receiver stores it: what the agent reads of it.
    fn bytes(v: Value) -> Vec<u8> {
        let sent = serde_json::to_vec(&v).unwrap();
        Event::parse("issues", &sent).unwrap().stored()
    }

    /// `describe` of the stored payload, checked to say the same as of the whole payload.
    fn meta(event: &str, v: Value) -> Meta {
        let whole = serde_json::to_vec(&v).unwrap();
        let whole = describe(&Event::parse(event, &whole).unwrap(), "/agent");
        let stored = bytes(v);
        let stored = describe(&Event::parse(event, &stored).unwrap(), "/agent");
        assert_eq!(whole, stored);
        stored
    }

    #[test]
    fn lanes() {
        let issue = json!({"repository": {"full_name": "o/r"}, "issue": {"number": 4}});
        assert_eq!(
            lane_of("issues", &bytes(issue.clone())).as_deref(),
            Some("o/r#4")
        );
        assert_eq!(
            lane_of("issue_comment", &bytes(issue)).as_deref(),
            Some("o/r#4")
        );
        let ci = json!({"repository": {"full_name": "o/r"},
            "workflow_run": {"pull_requests": [{"number": 9}], "head_branch": "agent/x"}});
        assert_eq!(
            lane_of("workflow_run", &bytes(ci)).as_deref(),
            Some("o/r#9")
        );
        let ci = json!({"repository": {"full_name": "o/r"},
            "workflow_run": {"pull_requests": [], "head_branch": "agent/x"}});
        assert_eq!(
            lane_of("workflow_run", &bytes(ci)).as_deref(),
            Some("o/r@agent/x")
        );
        assert_eq!(lane_of("issues", &bytes(json!({}))), None);
    }

    #[test]
    fn stop_commands_have_no_lane() {
        let p = json!({"action": "created", "repository": {"full_name": "o/r"},
            "issue": {"number": 4}, "comment": {"body": "/agent stop"}});
        let m = meta("issue_comment", p);
        assert_eq!(m.lane, None);
        assert_eq!(m.trigger, "issue_comment.created: /agent stop");
        let p = json!({"action": "created", "repository": {"full_name": "o/r"},
            "issue": {"number": 4}, "comment": {"body": "/agent fix it"}});
        let m = meta("issue_comment", p);
        assert_eq!(m.lane.as_deref(), Some("o/r#4"));
        assert_eq!(m.repo.as_deref(), Some("o/r"));
    }
}
