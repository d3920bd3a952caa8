//! `GET /healthz`, and the status page: recent jobs as server-side HTML, every value escaped,
//! behind the status token — in an `Authorization: Bearer TOKEN` header, or in a session
//! cookie that `POST /login` sets for a browser (HttpOnly, SameSite=Strict). Never in the
//! URL: a token there is written to access logs, browser history and `Referer` headers, and
//! copied with every link.

use std::fmt::Write as _;

use axum::body::Body;
use axum::extract::{FromRequest as _, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use hmac::{Hmac, KeyInit as _, Mac as _};
use secrecy::{ExposeSecret as _, SecretString};
use sha2::{Digest as _, Sha256};

use super::AppState;
use crate::store::Job;

/// Jobs listed on the page.
const RECENT: u32 = 100;

/// The session cookie's name.
const COOKIE: &str = "git_agent_status";

/// How long a session cookie is good for, seconds.
const SESSION_SECS: i64 = 12 * 3600;

/// Largest login form accepted, bytes.
const MAX_LOGIN_BODY: usize = 4096;

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
pub(super) enum Denied {
    /// No token is configured: the page is off.
    Off,
    /// The request has no token or a wrong one.
    Unauthorized,
    /// The token came in the URL, where it is never accepted.
    InUrl,
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        let message = match self {
            Denied::Off => {
                return (
                    StatusCode::NOT_FOUND,
                    "off: no status token is set (GIT_AGENT_STATUS_TOKEN or \
                     --status-token-file)\n",
                )
                    .into_response();
            }
            Denied::Unauthorized => {
                "a status token is required: an Authorization: Bearer header, or sign in at \
                 /login\n"
            }
            Denied::InUrl => {
                "the status token is not accepted in the URL (it would be logged and copied \
                 with links): send an Authorization: Bearer header, or sign in at /login\n"
            }
        };
        let mut response = (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            message,
        )
            .into_response();
        private(response.headers_mut());
        response
    }
}

/// Headers of every status response: not cached, not framed, no referrer, no scripts.
fn private(headers: &mut HeaderMap) {
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
             frame-ancestors 'none'",
        ),
    );
}

fn private_html(html: String, status: StatusCode) -> Response {
    let mut response = (status, Html(html)).into_response();
    private(response.headers_mut());
    response
}

/// The cookie value of a session that ends at `expires` (Unix seconds): the end, and an HMAC
/// of it keyed by the token. The token itself never goes into the browser, and a new token
/// ends every session.
fn session_value(token: &SecretString, expires: i64) -> String {
    let mac = match Hmac::<Sha256>::new_from_slice(token.expose_secret().as_bytes()) {
        Ok(mut mac) => {
            mac.update(b"git-agent status session\0");
            mac.update(expires.to_string().as_bytes());
            hex::encode(mac.finalize().into_bytes())
        }
        // HMAC takes keys of any length.
        Err(_) => String::new(),
    };
    format!("{expires}.{mac}")
}

/// Whether `value` is a session cookie of `token` that has not ended at `now`.
fn valid_session(token: &SecretString, value: &str, now: i64) -> bool {
    let Some((expires, _)) = value.split_once('.') else {
        return false;
    };
    let Ok(expires) = expires.parse::<i64>() else {
        return false;
    };
    expires > now && same_secret(value, &session_value(token, expires))
}

/// The session cookie's value in `headers`, if any.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// `Ok` when the request carries the status token in its `Authorization` header or a valid
/// session cookie.
pub(super) fn authorized(st: &AppState, headers: &HeaderMap) -> Result<(), Denied> {
    let Some(expected) = &st.status_token else {
        return Err(Denied::Off);
    };
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let Some(given) = bearer {
        return if same_secret(given, expected.expose_secret()) {
            Ok(())
        } else {
            Err(Denied::Unauthorized)
        };
    }
    match session_cookie(headers) {
        Some(value) if valid_session(expected, value, chrono::Utc::now().timestamp()) => Ok(()),
        _ => Err(Denied::Unauthorized),
    }
}

/// [`authorized`], after refusing a request whose URL has a `token` parameter (even the right
/// one: the URL is the one place a token must not be).
pub(super) fn authorized_request(
    st: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<(), Denied> {
    let in_url = query.is_some_and(|q| {
        q.split('&')
            .filter_map(|pair| pair.split('=').next())
            .any(|k| k.eq_ignore_ascii_case("token"))
    });
    if in_url && st.status_token.is_some() {
        return Err(Denied::InUrl);
    }
    authorized(st, headers)
}

/// The login form, with `notice` above it.
fn login_page(status: StatusCode, notice: &str) -> Response {
    private_html(
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>git-agent: sign in\
             </title></head><body><h1>git-agent runs</h1><p id=\"notice\">{}</p>\
             <form id=\"login\" method=\"post\" action=\"/login\"><label>Status token \
             <input type=\"password\" name=\"token\" autocomplete=\"current-password\" \
             required></label> <button type=\"submit\">Sign in</button></form>\
             </body></html>\n",
            escape(notice)
        ),
        status,
    )
}

/// `GET /login`: the form.
pub(super) async fn login_form(State(st): State<AppState>) -> Response {
    if st.status_token.is_none() {
        return Denied::Off.into_response();
    }
    login_page(StatusCode::OK, "Sign in with the status token.")
}

#[derive(serde::Deserialize)]
struct Login {
    token: String,
}

/// `POST /login`: the form's token, checked; when right, a session cookie and back to `/`.
/// The cookie is `Secure` when a proxy says the request came over HTTPS.
pub(super) async fn login(State(st): State<AppState>, request: Request) -> Response {
    let Some(expected) = st.status_token.clone() else {
        return Denied::Off.into_response();
    };
    let secure = request
        .headers()
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
    let read = tokio::time::timeout(
        st.limits.body_timeout,
        axum::body::to_bytes(request.into_body(), MAX_LOGIN_BODY),
    )
    .await;
    let Ok(Ok(bytes)) = read else {
        let mut response = login_page(StatusCode::BAD_REQUEST, "The form did not arrive whole.");
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    };
    // The form as axum reads one (`application/x-www-form-urlencoded`), from the bytes read
    // under the limits above.
    let form = Request::builder()
        .method("POST")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(bytes))
        .map_err(|_| ());
    let parsed = match form {
        Ok(form) => axum::Form::<Login>::from_request(form, &()).await.ok(),
        Err(()) => None,
    };
    match parsed {
        Some(axum::Form(Login { token })) if same_secret(&token, expected.expose_secret()) => {
            let expires = chrono::Utc::now().timestamp() + SESSION_SECS;
            let cookie = format!(
                "{COOKIE}={}; Path=/; Max-Age={SESSION_SECS}; HttpOnly; SameSite=Strict{}",
                session_value(&expected, expires),
                if secure { "; Secure" } else { "" }
            );
            let mut response = Response::new(Body::empty());
            *response.status_mut() = StatusCode::SEE_OTHER;
            let headers = response.headers_mut();
            headers.insert(header::LOCATION, HeaderValue::from_static("/"));
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                headers.insert(header::SET_COOKIE, v);
            }
            private(headers);
            response
        }
        _ => login_page(StatusCode::UNAUTHORIZED, "Wrong token."),
    }
}

/// `POST /logout`: the session cookie, cleared.
pub(super) async fn logout() -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SEE_OTHER;
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, HeaderValue::from_static("/login"));
    headers.insert(
        header::SET_COOKIE,
        HeaderValue::from_static("git_agent_status=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),
    );
    private(headers);
    response
}

fn is_http_url(s: &str) -> bool {
    s.starts_with("https://") || s.starts_with("http://")
}

fn when(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

fn row(out: &mut String, job: &Job) {
    let state = job.run_state.as_deref().unwrap_or(job.state.as_str());
    let pr = match job.pr_url.as_deref().filter(|u| is_http_url(u)) {
        Some(url) => format!("<a class=\"pr\" href=\"{0}\">{0}</a>", escape(url)),
        None => String::new(),
    };
    let report = if job.report.is_some() {
        format!(
            "<a class=\"report\" href=\"/jobs/{}/report\">report</a>",
            escape(&job.id),
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

pub(super) async fn page(State(st): State<AppState>, request: Request) -> Response {
    match authorized_request(&st, request.headers(), request.uri().query()) {
        Ok(()) => {}
        // A browser without a session gets the form.
        Err(Denied::Unauthorized) => {
            let mut response =
                login_page(StatusCode::UNAUTHORIZED, "Sign in with the status token.");
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return response;
        }
        Err(d) => return d.into_response(),
    }
    let jobs = match st.store.recent(RECENT).await {
        Ok(j) => j,
        Err(e) => {
            tracing::error!(error = %e, "status page: cannot list jobs");
            return (StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n").into_response();
        }
    };
    let mut out = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>git-agent runs</title>\
         <style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:left}</style>\
         </head><body><h1>git-agent runs</h1>\n<form method=\"post\" action=\"/logout\">\
         <button type=\"submit\">Sign out</button></form>\n<table id=\"runs\"><thead><tr>\
         <th>queued</th><th>state</th><th>repository</th><th>trigger</th><th>run</th>\
         <th>spend</th><th>pull request</th><th>report</th><th>detail</th></tr></thead>\
         <tbody>\n",
    );
    for job in &jobs {
        row(&mut out, job);
    }
    out.push_str("</tbody></table></body></html>\n");
    private_html(out, StatusCode::OK)
}

pub(super) async fn report(
    State(st): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    if let Err(d) = authorized_request(&st, request.headers(), request.uri().query()) {
        return d.into_response();
    }
    match st.store.job(&id).await {
        Ok(Some(job)) => match job.report {
            Some(text) => private_html(
                format!(
                    "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>report {id}\
                     </title></head><body><pre id=\"report\">{}</pre></body></html>\n",
                    escape(&text),
                    id = escape(&job.id)
                ),
                StatusCode::OK,
            ),
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
    fn sessions_are_the_tokens_and_end() {
        let token = SecretString::from("t0ken");
        let now = 1_000_000;
        let value = session_value(&token, now + 60);
        assert!(!value.contains("t0ken"));
        assert!(valid_session(&token, &value, now));
        assert!(!valid_session(&token, &value, now + 61), "ended");
        let other = SecretString::from("other");
        assert!(!valid_session(&other, &value, now), "another token's");
        let moved = value.replacen(&(now + 60).to_string(), &(now + 6000).to_string(), 1);
        assert!(!valid_session(&token, &moved, now), "an end moved by hand");
        assert!(!valid_session(&token, "garbage", now));
    }

    #[test]
    fn cookies_are_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; git_agent_status=v.x; b=2"),
        );
        assert_eq!(session_cookie(&h), Some("v.x"));
    }
}
