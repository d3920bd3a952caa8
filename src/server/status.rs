//! `GET /healthz`, and the status page: recent jobs as server-side HTML, every value escaped,
//! behind a token (`Authorization: Bearer TOKEN` or `?token=TOKEN`).

use std::collections::HashMap;
use std::fmt::Write as _;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use secrecy::ExposeSecret as _;
use sha2::{Digest as _, Sha256};

use super::AppState;
use crate::store::Job;

/// Jobs listed on the page.
const RECENT: u32 = 100;

pub(super) async fn healthz(State(st): State<AppState>) -> Response {
    match st.store.health().await {
        Ok(()) => (StatusCode::OK, "ok\n").into_response(),
        Err(e) => {
            tracing::error!(error = %e, "healthz: store unavailable");
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response()
        }
    }
}

/// Escape text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Compare digests so the time taken does not depend on where the strings differ.
fn same_secret(given: &str, expected: &str) -> bool {
    let a = Sha256::digest(given.as_bytes());
    let b = Sha256::digest(expected.as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// Why the status page was refused.
#[derive(Debug, Clone, Copy)]
enum Denied {
    /// No token is configured: the page is off.
    Off,
    /// The request has no token or a wrong one.
    Unauthorized,
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        match self {
            Denied::Off => (StatusCode::NOT_FOUND, "the status page is off\n").into_response(),
            Denied::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "a status token is required\n",
            )
                .into_response(),
        }
    }
}

/// `Ok(token as given)` when the request carries the status token.
fn authorized(
    st: &AppState,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<String, Denied> {
    let Some(expected) = &st.status_token else {
        return Err(Denied::Off);
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| query.get("token").map(String::as_str));
    match given {
        Some(g) if same_secret(g, expected.expose_secret()) => Ok(g.to_string()),
        _ => Err(Denied::Unauthorized),
    }
}

fn is_http_url(s: &str) -> bool {
    s.starts_with("https://") || s.starts_with("http://")
}

fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

fn row(out: &mut String, job: &Job, token_q: &str) {
    let state = job.run_state.as_deref().unwrap_or(job.state.as_str());
    let pr = match job.pr_url.as_deref().filter(|u| is_http_url(u)) {
        Some(url) => format!("<a class=\"pr\" href=\"{0}\">{0}</a>", escape(url)),
        None => String::new(),
    };
    let report = if job.report.is_some() {
        format!(
            "<a class=\"report\" href=\"/jobs/{}/report{}\">report</a>",
            escape(&job.id),
            token_q
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "<tr data-job=\"{id}\"><td>{created}</td><td class=\"state\">{state}</td>\
         <td>{repo}</td><td>{trigger}</td><td>{run}</td><td>${spend:.2}</td><td>{pr}</td>\
         <td>{report}</td><td>{detail}</td></tr>",
        id = escape(&job.id),
        created = escape(&when(job.created_at)),
        state = escape(state),
        repo = escape(job.repo.as_deref().unwrap_or("")),
        trigger = escape(&job.trigger),
        run = escape(job.run_id.as_deref().unwrap_or("")),
        spend = job.spend_usd,
        detail = escape(job.detail.as_deref().unwrap_or("")),
    );
}

pub(super) async fn page(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let token = match authorized(&st, &headers, &query) {
        Ok(t) => t,
        Err(d) => return d.into_response(),
    };
    let jobs = match st.store.recent(RECENT).await {
        Ok(j) => j,
        Err(e) => {
            tracing::error!(error = %e, "status page: cannot list jobs");
            return (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response();
        }
    };
    // Links carry the token only when it came in the query (a browser without headers).
    let token_q = if query.contains_key("token") {
        format!("?token={}", escape(&urlencode(&token)))
    } else {
        String::new()
    };
    let mut out = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>git-agent runs</title>\
         <style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}</style>\
         </head><body><h1>git-agent runs</h1>\n<table id=\"runs\"><thead><tr><th>queued</th>\
         <th>state</th><th>repository</th><th>trigger</th><th>run</th><th>spend</th>\
         <th>pull request</th><th>report</th><th>detail</th></tr></thead><tbody>\n",
    );
    for job in &jobs {
        row(&mut out, job, &token_q);
    }
    out.push_str("</tbody></table></body></html>\n");
    Html(out).into_response()
}

fn urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

pub(super) async fn report(
    State(st): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Err(d) = authorized(&st, &headers, &query) {
        return d.into_response();
    }
    match st.store.job(&id).await {
        Ok(Some(job)) => match job.report {
            Some(text) => Html(format!(
                "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>report {id}</title>\
                 </head><body><pre id=\"report\">{}</pre></body></html>\n",
                escape(&text),
                id = escape(&job.id)
            ))
            .into_response(),
            None => (StatusCode::NOT_FOUND, "no report yet\n").into_response(),
        },
        Ok(None) => (StatusCode::NOT_FOUND, "no such job\n").into_response(),
        Err(e) => {
            tracing::error!(error = %e, "report: cannot read a job");
            (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
    }

    #[test]
    fn secret_comparison() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abd", "abc"));
        assert!(!same_secret("", "abc"));
    }

    #[test]
    fn urlencodes_tokens() {
        assert_eq!(urlencode("a b&c"), "a%20b%26c");
    }
}
