//! HTTP plumbing shared by the providers: client construction, error classification,
//! `retry-after`, bounded jittered back-off, per-call and per-chunk time-outs, and an
//! incremental Server-Sent-Events parser.

use std::future::Future;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;

use super::error::{Error, Result};
use super::types::{CallContext, Progress};
use crate::config::ModelNetConfig;

/// Seconds from config as a `Duration`; nonsense (negative, NaN) falls back to `default`.
pub(crate) fn secs(s: f64, default: f64) -> Duration {
    Duration::try_from_secs_f64(s)
        .or_else(|_| Duration::try_from_secs_f64(default))
        .unwrap_or(Duration::from_secs(60))
}

/// Build the HTTP client. reqwest is compiled with `rustls-no-provider`, so the process's
/// provider is installed first.
pub(crate) fn client(net: &ModelNetConfig, provider: &str) -> Result<reqwest::Client> {
    crate::tls::install_provider();
    reqwest::Client::builder()
        .connect_timeout(secs(net.connect_timeout_s, 10.0))
        .build()
        .map_err(|e| Error::Client {
            provider: provider.to_string(),
            message: e.to_string(),
        })
}

/// Who is calling, for error messages.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub provider: String,
    pub model: String,
    pub key_var: String,
    pub url: String,
}

impl Caller {
    pub(crate) fn transient(&self, message: impl Into<String>) -> Error {
        Error::Transient {
            provider: self.provider.clone(),
            message: message.into(),
            retry_after: None,
        }
    }

    pub(crate) fn protocol(&self, message: impl Into<String>) -> Error {
        Error::Protocol {
            provider: self.provider.clone(),
            message: message.into(),
        }
    }

    /// Map a transport failure (connect, reset, time-out, broken body) to a transient error.
    pub(crate) fn transport(&self, e: &reqwest::Error) -> Error {
        let what = if e.is_connect() {
            "cannot connect to"
        } else if e.is_timeout() {
            "timed out talking to"
        } else {
            "connection to"
        };
        // reqwest's Display omits the cause chain, which holds the useful part (reset, EOF).
        let mut msg = format!("{what} {}: {e}", self.url);
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        self.transient(msg)
    }

    /// Send and classify the status: success returns the response, anything else an error
    /// that says whether a retry may help.
    pub(crate) async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let resp = req.send().await.map_err(|e| self.transport(&e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let headers = resp.headers().clone();
        let body = resp.text().await.unwrap_or_default();
        Err(self.classify(status, &headers, &body))
    }

    /// Turn an error status and body into an [`Error`].
    pub(crate) fn classify(&self, status: StatusCode, headers: &HeaderMap, body: &str) -> Error {
        let message = error_message(body);
        let code = status.as_u16();
        let lower = body.to_ascii_lowercase();
        let spend = [
            "insufficient_quota",
            "exceeded your current quota",
            "credit balance",
            "spend limit",
            "billing_error",
            "billing hard limit",
        ]
        .iter()
        .any(|p| lower.contains(p));
        if code == 401 || code == 403 {
            return Error::Auth {
                provider: self.provider.clone(),
                key_var: self.key_var.clone(),
                status: code,
                message,
            };
        }
        if code == 402 || (spend && (code == 429 || code == 400)) {
            return Error::SpendLimit {
                provider: self.provider.clone(),
                key_var: self.key_var.clone(),
                status: code,
                message,
            };
        }
        if matches!(code, 408 | 409 | 429) || status.is_server_error() || code == 529 {
            return Error::Transient {
                provider: self.provider.clone(),
                message: format!("{} answered {code}: {message}", self.url),
                retry_after: retry_after(headers),
            };
        }
        Error::Rejected {
            provider: self.provider.clone(),
            url: self.url.clone(),
            status: code,
            message,
        }
    }
}

/// The `message` of an OpenAI (`{"error":{"message"}}`) or Anthropic
/// (`{"type":"error","error":{"type","message"}}`) error body, else the body's start.
pub(crate) fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
        let e = &v["error"];
        if let Some(m) = e["message"].as_str().or(e.as_str()) {
            return match e["type"].as_str() {
                Some(t) => format!("{t}: {m}"),
                None => m.to_string(),
            };
        }
    }
    let t = body.trim();
    match t.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_string(),
    }
}

/// `retry-after-ms` (OpenAI), else `retry-after` in seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    let v = get("retry-after")?;
    if let Ok(s) = v.parse::<f64>() {
        return Duration::try_from_secs_f64(s).ok();
    }
    let when = jiff::fmt::rfc2822::parse(v).ok()?.timestamp();
    let d = when.duration_since(jiff::Timestamp::now());
    Some(Duration::try_from(d).unwrap_or(Duration::ZERO))
}

/// Back-off before retry `attempt` (1-based): `base·2^(attempt-1)`, capped at `max`, times a
/// random factor in [0.5, 1] so many clients do not retry in step.
pub(crate) fn backoff(net: &ModelNetConfig, attempt: u32) -> Duration {
    let base = secs(net.backoff_base_s, 1.0).as_secs_f64();
    let max = secs(net.backoff_max_s, 60.0).as_secs_f64();
    let exp = base * 2f64.powi(attempt.saturating_sub(1).min(30) as i32);
    let d = exp.min(max) * (0.5 + 0.5 * fastrand::f64());
    Duration::from_secs_f64(d)
}

/// Longest `retry-after` we honour; a longer one counts as a failed call.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// Run `attempt` with the per-call time-out, retrying transient failures up to
/// `net.max_retries` times. Sleeps go through tokio's clock.
pub(crate) async fn with_retries<T, F, Fut>(
    net: &ModelNetConfig,
    caller: &Caller,
    ctx: &CallContext,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let call_timeout = secs(net.request_timeout_s, 600.0);
    let mut n = 0u32;
    loop {
        n += 1;
        ctx.report(Progress::Attempt { n });
        let mut limit = call_timeout;
        if let Some(d) = ctx.deadline {
            limit = limit.min(d.saturating_duration_since(tokio::time::Instant::now()));
        }
        let result = match tokio::time::timeout(limit, attempt()).await {
            Ok(r) => r,
            Err(_) => Err(caller.transient(format!(
                "call to {} timed out after {:.1} s",
                caller.url,
                limit.as_secs_f64()
            ))),
        };
        let err = match result {
            Ok(v) => return Ok(v),
            Err(e) if e.is_transient() => e,
            Err(e) => return Err(e),
        };
        let Error::Transient {
            message,
            retry_after,
            ..
        } = &err
        else {
            return Err(err);
        };
        let past_deadline = ctx
            .deadline
            .is_some_and(|d| tokio::time::Instant::now() >= d);
        let too_long = retry_after.is_some_and(|r| r > MAX_RETRY_AFTER);
        if n > net.max_retries || past_deadline || too_long {
            return Err(Error::RetriesExhausted {
                provider: caller.provider.clone(),
                model: caller.model.clone(),
                attempts: n,
                last: message.clone(),
            });
        }
        let wait = retry_after.unwrap_or_else(|| backoff(net, n));
        tracing::warn!(provider = %caller.provider, model = %caller.model, attempt = n, wait_s = wait.as_secs_f64(), error = %message, "model call failed; retrying");
        ctx.report(Progress::Retry {
            attempt: n,
            wait,
            reason: message.clone(),
        });
        tokio::time::sleep(wait).await;
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined by `\n`.
    pub data: String,
}

/// An incremental SSE parser: feed bytes as they arrive, take whole events out.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
    has_data: bool,
}

impl SseParser {
    /// Add bytes and return the events they complete.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<Event> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < self.buf.len() {
            let b = self.buf[i];
            if b == b'\n' || b == b'\r' {
                // A lone `\r` at the end may be the first half of `\r\n`: wait for more.
                if b == b'\r' && i + 1 == self.buf.len() {
                    break;
                }
                let line = String::from_utf8_lossy(&self.buf[start..i]).into_owned();
                if b == b'\r' && self.buf.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                i += 1;
                start = i;
                if let Some(ev) = self.line(&line) {
                    out.push(ev);
                }
                continue;
            }
            i += 1;
        }
        self.buf.drain(..start);
        out
    }

    /// Flush at end of stream: an event not followed by a blank line still counts.
    pub(crate) fn finish(&mut self) -> Option<Event> {
        if !self.buf.is_empty() {
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
            if let Some(ev) = self.line(&line) {
                return Some(ev);
            }
        }
        self.line("")
    }

    fn line(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            if !self.has_data {
                self.event = None;
                return None;
            }
            self.has_data = false;
            return Some(Event {
                event: self.event.take(),
                data: std::mem::take(&mut self.data).join("\n"),
            });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                self.data.push(value.to_string());
                self.has_data = true;
            }
            _ => {}
        }
        None
    }
}

/// Next chunk of a body stream within the per-chunk time-out.
pub(crate) async fn next_chunk<S, B>(
    stream: &mut S,
    chunk_timeout: Duration,
    caller: &Caller,
) -> Result<Option<B>>
where
    S: Stream<Item = reqwest::Result<B>> + Unpin,
{
    match tokio::time::timeout(chunk_timeout, stream.next()).await {
        Err(_) => Err(caller.transient(format!(
            "no data from {} for {:.1} s (per-chunk time-out)",
            caller.url,
            chunk_timeout.as_secs_f64()
        ))),
        Ok(None) => Ok(None),
        Ok(Some(Ok(b))) => Ok(Some(b)),
        Ok(Some(Err(e))) => Err(caller.transport(&e)),
    }
}

/// Whether the response is an event stream (else it is one JSON document: a server that
/// ignored `stream: true`, or a non-streaming request).
pub(crate) fn is_event_stream(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Parse a tool call's accumulated argument text: empty means `{}`; text that is not JSON is
/// kept as a JSON string so the tool layer can tell the model.
pub(crate) fn parse_arguments(raw: &str) -> serde_json::Value {
    let t = raw.trim();
    if t.is_empty() {
        return serde_json::Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(t).unwrap_or_else(|_| serde_json::Value::String(raw.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_split_anywhere_reassemble() {
        let text = "event: a\r\ndata: {\"x\":1}\r\n\r\n: comment\n\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n";
        for cut in 0..text.len() {
            let mut p = SseParser::default();
            let mut evs = p.feed(&text.as_bytes()[..cut]);
            evs.extend(p.feed(&text.as_bytes()[cut..]));
            assert_eq!(evs.len(), 3, "cut at {cut}");
            assert_eq!(evs[0].event.as_deref(), Some("a"));
            assert_eq!(evs[0].data, "{\"x\":1}");
            assert_eq!(evs[1].data, "line1\nline2");
            assert_eq!(evs[1].event, None);
            assert_eq!(evs[2].data, "[DONE]");
        }
    }

    #[test]
    fn sse_finish_flushes_unterminated_event() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: tail").is_empty());
        assert_eq!(p.finish().map(|e| e.data), Some("tail".to_string()));
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert("retry-after-ms", "1500".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut h = HeaderMap::new();
        let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let date = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&later)
            .unwrap();
        h.insert("retry-after", date.parse().unwrap());
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let net = ModelNetConfig {
            backoff_base_s: 1.0,
            backoff_max_s: 8.0,
            ..ModelNetConfig::default()
        };
        for _ in 0..50 {
            let d1 = backoff(&net, 1).as_secs_f64();
            assert!((0.5..=1.0).contains(&d1), "{d1}");
            let d3 = backoff(&net, 3).as_secs_f64();
            assert!((2.0..=4.0).contains(&d3), "{d3}");
            let d10 = backoff(&net, 10).as_secs_f64();
            assert!((4.0..=8.0).contains(&d10), "{d10}");
        }
    }

    // The retry loop on tokio's paused clock: sleeps and time-outs advance virtual time at
    // once, so the real waits (7 s, minutes of back-off) are checked to the millisecond
    // without spending them.

    fn caller() -> Caller {
        Caller {
            provider: "openai".into(),
            model: "m".into(),
            key_var: "OPENAI_API_KEY".into(),
            url: "http://x".into(),
        }
    }

    fn flaky(retry_after: Option<Duration>) -> Error {
        Error::Transient {
            provider: "openai".into(),
            message: "503: overloaded".into(),
            retry_after,
        }
    }

    /// Runs `with_retries` where attempt n (0-based) gives `outcome(n)`; returns the result
    /// and the virtual time of each attempt since the start.
    async fn drive(
        net: &ModelNetConfig,
        ctx: &CallContext,
        outcome: impl Fn(usize) -> Option<Result<u32>>,
    ) -> (Result<u32>, Vec<Duration>) {
        let t0 = tokio::time::Instant::now();
        let times = std::sync::Mutex::new(Vec::new());
        let r = with_retries(net, &caller(), ctx, || {
            let n = {
                let mut t = times.lock().unwrap();
                t.push(t0.elapsed());
                t.len() - 1
            };
            let out = outcome(n);
            async move {
                match out {
                    Some(r) => r,
                    // A call that never answers.
                    None => std::future::pending().await,
                }
            }
        })
        .await;
        (r, times.into_inner().unwrap())
    }

    fn net(max_retries: u32) -> ModelNetConfig {
        ModelNetConfig {
            request_timeout_s: 30.0,
            max_retries,
            backoff_base_s: 1.0,
            backoff_max_s: 8.0,
            ..ModelNetConfig::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_7_waits_7_seconds_then_succeeds() {
        let waits = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let w = waits.clone();
        let mut ctx = CallContext::new(super::super::Role::Coder);
        ctx.progress = Some(std::sync::Arc::new(move |p| {
            if let Progress::Retry { wait, .. } = p {
                w.lock().unwrap().push(wait);
            }
        }));
        let (r, times) = drive(&net(3), &ctx, |n| {
            Some(match n {
                0 => Err(flaky(Some(Duration::from_secs(7)))),
                _ => Ok(42),
            })
        })
        .await;
        assert_eq!(r.unwrap(), 42);
        assert_eq!(times, [Duration::ZERO, Duration::from_secs(7)]);
        assert_eq!(*waits.lock().unwrap(), [Duration::from_secs(7)]);
    }

    #[tokio::test(start_paused = true)]
    async fn server_errors_back_off_exponentially_with_jitter_and_give_up() {
        let (r, times) = drive(
            &net(5),
            &CallContext::new(super::super::Role::Coder),
            |_| Some(Err(flaky(None))),
        )
        .await;
        assert!(
            matches!(r, Err(Error::RetriesExhausted { attempts: 6, .. })),
            "{r:?}"
        );
        assert_eq!(times.len(), 6, "one call and five retries: {times:?}");
        // Gap before retry n is base·2^(n-1) capped at 8 s, times a factor in [0.5, 1].
        for (n, pair) in times.windows(2).enumerate() {
            let gap = (pair[1] - pair[0]).as_secs_f64();
            let full = (2f64.powi(n as i32)).min(8.0);
            assert!(
                gap >= full * 0.5 && gap <= full,
                "retry {}: waited {gap} s, expected within [{}, {full}]: {times:?}",
                n + 1,
                full * 0.5
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn auth_errors_and_huge_retry_after_are_not_waited_for() {
        let ctx = CallContext::new(super::super::Role::Coder);
        let (r, times) = drive(&net(5), &ctx, |_| {
            Some(Err(Error::Auth {
                provider: "openai".into(),
                key_var: "OPENAI_API_KEY".into(),
                status: 401,
                message: "bad key".into(),
            }))
        })
        .await;
        assert!(matches!(r, Err(Error::Auth { .. })), "{r:?}");
        assert_eq!(times, [Duration::ZERO]);

        let t0 = tokio::time::Instant::now();
        let (r, times) = drive(&net(5), &ctx, |_| {
            Some(Err(flaky(Some(Duration::from_secs(3600)))))
        })
        .await;
        assert!(
            matches!(r, Err(Error::RetriesExhausted { attempts: 1, .. })),
            "{r:?}"
        );
        assert_eq!(times.len(), 1);
        assert_eq!(
            t0.elapsed(),
            Duration::ZERO,
            "an hour's retry-after is not slept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_times_out_each_attempt() {
        let (r, times) = drive(
            &net(1),
            &CallContext::new(super::super::Role::Coder),
            |_| None,
        )
        .await;
        let Err(Error::RetriesExhausted { attempts, last, .. }) = &r else {
            panic!("{r:?}");
        };
        assert_eq!(*attempts, 2);
        assert!(last.contains("timed out after 30.0 s"), "{last}");
        let gap = (times[1] - times[0]).as_secs_f64();
        assert!(
            (30.5..=31.0).contains(&gap),
            "30 s time-out plus 0.5–1 s back-off: {gap}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_run_deadline_clamps_time_outs_and_stops_retries() {
        let mut ctx = CallContext::new(super::super::Role::Coder);
        ctx.deadline = Some(tokio::time::Instant::now() + Duration::from_secs(10));
        let t0 = tokio::time::Instant::now();
        let (r, times) = drive(&net(100), &ctx, |n| match n {
            0 => Some(Err(flaky(Some(Duration::from_secs(4))))),
            _ => None,
        })
        .await;
        assert!(matches!(r, Err(Error::RetriesExhausted { .. })), "{r:?}");
        assert_eq!(times, [Duration::ZERO, Duration::from_secs(4)]);
        assert_eq!(
            t0.elapsed(),
            Duration::from_secs(10),
            "the second attempt is cut at the deadline, not at the 30 s time-out"
        );
    }

    #[test]
    fn classification() {
        let c = Caller {
            provider: "openai".into(),
            model: "m".into(),
            key_var: "OPENAI_API_KEY".into(),
            url: "http://x".into(),
        };
        let h = HeaderMap::new();
        let e = c.classify(
            StatusCode::UNAUTHORIZED,
            &h,
            r#"{"error":{"message":"bad key"}}"#,
        );
        assert!(matches!(e, Error::Auth { .. }));
        assert!(e.to_string().contains("OPENAI_API_KEY"), "{e}");
        let e = c.classify(
            StatusCode::TOO_MANY_REQUESTS,
            &h,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota"}}"#,
        );
        assert!(matches!(e, Error::SpendLimit { .. }), "{e}");
        let e = c.classify(StatusCode::TOO_MANY_REQUESTS, &h, "slow down");
        assert!(e.is_transient());
        let e = c.classify(
            StatusCode::from_u16(529).unwrap(),
            &h,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert!(e.is_transient());
        assert!(e.to_string().contains("overloaded_error"), "{e}");
        let e = c.classify(
            StatusCode::BAD_REQUEST,
            &h,
            r#"{"error":{"message":"bad schema"}}"#,
        );
        assert!(matches!(e, Error::Rejected { status: 400, .. }));
    }

    #[test]
    fn arguments_parse_or_stay_text() {
        assert_eq!(parse_arguments(""), serde_json::json!({}));
        assert_eq!(parse_arguments("{\"a\":1}"), serde_json::json!({"a":1}));
        assert_eq!(parse_arguments("{oops"), serde_json::json!("{oops"));
    }
}
