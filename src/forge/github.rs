//! GitHub (github.com or Enterprise Server) through its REST API.
//!
//! octocrab carries the requests: base URI (GHES), authentication by token or as a GitHub App
//! (it signs the App JWT, mints the installation token, caches it and mints a new one before
//! it expires). We use its raw `_get`/`_post`/… calls rather than its typed API for two
//! reasons: rate limits need every response's status, headers and body, which the typed API
//! turns into an opaque error; and some of its typed models reject GitHub's own documented
//! responses (the collaborator-permission one among them). The JSON is parsed here, into the
//! forge's own types.

use crate::audit::Redacted;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use http::{HeaderMap, Method};
use http_body_util::BodyExt as _;
use octocrab::Octocrab;
use secrecy::{ExposeSecret as _, SecretString};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{
    CommentRef, CommentTarget, Error, FailedJob, Forge, Issue, Permission, PrRequest, PullRequest,
    Result, User, WorkflowRun, progress_marker,
};
use crate::task::RepoRef;
use crate::workspace::{PushCredentials, Repo};

/// GitHub's hard limit on a pull request body and a comment, in characters.
pub const BODY_LIMIT: usize = 65_536;

/// Pages of 100 comments read at most from one conversation.
const MAX_PAGES: u32 = 30;

/// Bytes of one job log kept at most (the log is cut to the failure later).
const MAX_LOG_BYTES: usize = 8 << 20;

/// How the client authenticates. `Debug` never shows the token or the key.
#[derive(Clone, Debug)]
pub enum Auth {
    /// A token: `GITHUB_TOKEN` in Actions, or a personal access token.
    Token(SecretString),
    /// As a GitHub App installation.
    App {
        /// The App's id.
        app_id: u64,
        /// The App's private key, PEM (`GIT_AGENT_APP_KEY`).
        private_key_pem: SecretString,
        /// The installation to act as (from the webhook's `installation.id`).
        installation_id: u64,
    },
}

/// When and how long to wait on rate limits and server errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Requests made at most for one call (the first try included).
    pub max_attempts: u32,
    /// First wait on a secondary rate limit without `retry-after`; doubles per hit.
    pub secondary_min: Duration,
    /// First wait after a 5xx; doubles per retry.
    pub server_error_base: Duration,
    /// Longest single wait; a limit that asks for more fails the call instead.
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 6,
            secondary_min: Duration::from_secs(60),
            server_error_base: Duration::from_secs(1),
            max_wait: Duration::from_secs(20 * 60),
        }
    }
}

/// Options of the GitHub client.
#[derive(Debug, Clone)]
pub struct GitHubOptions {
    /// API base: `https://api.github.com`, or `https://HOST/api/v3` for Enterprise Server.
    pub api_base: String,
    /// Rate-limit and 5xx retries.
    pub retry: RetryPolicy,
    /// Connect time-out.
    pub connect_timeout: Option<Duration>,
    /// Time-out for reading a response.
    pub read_timeout: Option<Duration>,
}

impl Default for GitHubOptions {
    fn default() -> Self {
        Self {
            api_base: "https://api.github.com".into(),
            retry: RetryPolicy::default(),
            connect_timeout: Some(Duration::from_secs(30)),
            read_timeout: Some(Duration::from_secs(120)),
        }
    }
}

/// What a 403/429/5xx response asks of us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Not a limit: hand the response to the caller.
    No,
    /// Primary limit or `retry-after`: wait this long.
    For(Duration),
    /// Secondary limit without `retry-after`: wait, and count it for the back-off.
    Secondary(Duration),
    /// Server error: back off this long.
    ServerError(Duration),
}

/// Decide what a response asks of us, following GitHub's documented rules: `retry-after` is
/// honoured; `x-ratelimit-remaining: 0` waits until `x-ratelimit-reset` (epoch seconds);
/// a secondary limit without either waits at least `secondary_min`, doubling per hit.
pub fn rate_limit_wait(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    now: SystemTime,
    secondary_hits: u32,
    server_errors: u32,
    policy: &RetryPolicy,
) -> Wait {
    if matches!(status, 500 | 502 | 503 | 504) {
        return Wait::ServerError(policy.server_error_base * 2u32.saturating_pow(server_errors));
    }
    if status != 403 && status != 429 {
        return Wait::No;
    }
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    if let Some(secs) = header("retry-after") {
        return Wait::For(Duration::from_secs(secs.max(1)));
    }
    if header("x-ratelimit-remaining") == Some(0)
        && let Some(reset) = header("x-ratelimit-reset")
    {
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // One second past the reset, so the window has surely turned over.
        return Wait::For(Duration::from_secs(reset.saturating_sub(now) + 1));
    }
    let text = String::from_utf8_lossy(body).to_ascii_lowercase();
    if status == 429 || text.contains("secondary rate limit") || text.contains("abuse") {
        return Wait::Secondary(policy.secondary_min * 2u32.saturating_pow(secondary_hits));
    }
    Wait::No
}

/// A response read to the end.
struct Response {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// The GitHub forge.
pub struct GitHub {
    crab: Octocrab,
    auth: Auth,
    retry: RetryPolicy,
    /// Plain client for following log redirects to blob storage, without our credentials.
    blobs: reqwest::Client,
    /// Progress comments this process has written, by (repo, issue, run).
    progress: Mutex<HashMap<(String, u64, String), u64>>,
}

impl std::fmt::Debug for GitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHub").field("auth", &self.auth).finish()
    }
}

fn transport(
    method: &Method,
    path: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> Error {
    Error::Transport {
        method: method.to_string(),
        path: strip_query(path).to_string(),
        source: Box::new(e),
    }
}

fn strip_query(path: &str) -> &str {
    path.split('?').next().unwrap_or(path)
}

/// Percent-encode one path segment or query value.
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn repo_path(repo: &RepoRef) -> String {
    format!("/repos/{}/{}", enc(&repo.owner), enc(&repo.name))
}

/// Cut `body` to GitHub's limit, saying so at the end.
fn fit_body(body: &str) -> String {
    if body.chars().count() <= BODY_LIMIT {
        return body.to_string();
    }
    let note = "\n\n… (cut here: the text exceeded GitHub's 65,536-character limit; the full \
                report is in the run record)";
    let keep = BODY_LIMIT - note.chars().count();
    let mut out: String = body.chars().take(keep).collect();
    out.push_str(note);
    out
}

#[derive(Deserialize)]
struct UserJson {
    login: String,
    id: u64,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

impl From<UserJson> for User {
    fn from(u: UserJson) -> User {
        let is_bot = u.kind.as_deref() == Some("Bot") || u.login.ends_with("[bot]");
        User {
            login: u.login,
            id: u.id,
            is_bot,
        }
    }
}

#[derive(Deserialize)]
struct LabelJson {
    name: String,
}

#[derive(Deserialize)]
struct IssueJson {
    number: u64,
    title: String,
    body: Option<String>,
    user: UserJson,
    #[serde(default)]
    labels: Vec<LabelJson>,
    state: String,
    #[serde(default)]
    pull_request: Option<Value>,
}

#[derive(Deserialize)]
struct CommentJson {
    id: u64,
    body: Option<String>,
    user: UserJson,
    #[serde(default)]
    html_url: String,
}

#[derive(Deserialize)]
struct RepoJson {
    full_name: String,
}

#[derive(Deserialize)]
struct BranchJson {
    #[serde(rename = "ref")]
    ref_: String,
    sha: String,
    repo: Option<RepoJson>,
}

#[derive(Deserialize)]
struct PullJson {
    number: u64,
    title: String,
    body: Option<String>,
    user: UserJson,
    state: String,
    #[serde(default)]
    draft: Option<bool>,
    head: BranchJson,
    base: BranchJson,
    html_url: String,
}

impl From<PullJson> for PullRequest {
    fn from(p: PullJson) -> PullRequest {
        PullRequest {
            number: p.number,
            title: p.title,
            body: p.body.unwrap_or_default(),
            author: p.user.into(),
            state: p.state,
            draft: p.draft.unwrap_or(false),
            head_ref: p.head.ref_,
            head_sha: p.head.sha,
            head_repo: p.head.repo.map(|r| r.full_name),
            base_ref: p.base.ref_,
            html_url: p.html_url,
        }
    }
}

#[derive(Deserialize)]
struct PermissionJson {
    permission: String,
    #[serde(default)]
    role_name: Option<String>,
}

#[derive(Deserialize)]
struct StepJson {
    name: String,
    #[serde(default)]
    conclusion: Option<String>,
}

#[derive(Deserialize)]
struct JobJson {
    id: u64,
    name: String,
    #[serde(default)]
    conclusion: Option<String>,
    #[serde(default)]
    steps: Vec<StepJson>,
}

#[derive(Deserialize)]
struct RunJson {
    id: u64,
    #[serde(default)]
    name: Option<String>,
    head_sha: String,
    #[serde(default)]
    conclusion: Option<String>,
}

#[derive(Deserialize)]
struct RunsJson {
    workflow_runs: Vec<RunJson>,
}

#[derive(Deserialize)]
struct JobsJson {
    jobs: Vec<JobJson>,
}

impl GitHub {
    /// A client for `options.api_base` authenticated by `auth`.
    pub fn new(auth: Auth, options: GitHubOptions) -> Result<GitHub> {
        crate::tls::install_provider();
        let base = options.api_base.trim_end_matches('/').to_string();
        let bad_base = |why: &str, source: Option<super::error::BoxError>| Error::BaseUrl {
            url: options.api_base.clone(),
            why: why.into(),
            source,
        };
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(bad_base("not an http(s) URL", None));
        }
        let builder = Octocrab::builder()
            .base_uri(base.as_str())
            .map_err(|e| bad_base("not a URI", Some(e.into())))?
            .add_header(
                http::header::ACCEPT,
                "application/vnd.github+json".to_string(),
            )
            .add_header(
                http::HeaderName::from_static("x-github-api-version"),
                "2022-11-28".to_string(),
            )
            .set_connect_timeout(options.connect_timeout)
            .set_read_timeout(options.read_timeout);
        let auth = match auth {
            // A token read from a file often ends in a newline; octocrab would panic on a
            // header value that is not valid, so it is checked here.
            Auth::Token(token) => {
                let token = token.expose_secret().trim().to_string();
                if token.is_empty()
                    || http::HeaderValue::from_str(&format!("Bearer {token}")).is_err()
                {
                    return Err(Error::Auth {
                        what: "the token is empty or holds characters not allowed in a header"
                            .into(),
                        source: None,
                    });
                }
                Auth::Token(token.into())
            }
            app => app,
        };
        let crab = match &auth {
            Auth::Token(token) => builder
                .personal_token(token.expose_secret().to_string())
                .build()
                .map_err(|e| Error::auth("cannot build the client", e))?,
            Auth::App {
                app_id,
                private_key_pem,
                installation_id,
            } => {
                let key =
                    octocrab::EncodingKey::from_rsa_pem(private_key_pem.expose_secret().as_bytes())
                        .map_err(|e| Error::auth("the App private key is not RSA PEM", e))?;
                builder
                    .app((*app_id).into(), key)
                    .build()
                    .map_err(|e| Error::auth("cannot build the client", e))?
                    .installation((*installation_id).into())
                    .map_err(|e| Error::auth(format!("installation {installation_id}"), e))?
            }
        };
        let blobs = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(5))
            .connect_timeout(Duration::from_secs(30))
            .timeout(Duration::from_secs(300))
            .build()
            .map_err(|e| Error::auth("cannot build the log client", e))?;
        Ok(GitHub {
            crab,
            auth,
            retry: options.retry,
            blobs,
            progress: Mutex::new(HashMap::new()),
        })
    }

    /// The token for git over HTTPS: the configured one, or a fresh installation token.
    pub async fn git_token(&self) -> Result<SecretString> {
        match &self.auth {
            Auth::Token(t) => Ok(t.clone()),
            Auth::App { .. } => self
                .crab
                .installation_token_with_buffer(chrono::Duration::minutes(5))
                .await
                .map_err(|e| Error::auth("cannot mint an installation token", e)),
        }
    }

    /// Send one request, waiting out rate limits and 5xx as the policy allows.
    async fn request(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Response> {
        let mut attempts = 0u32;
        let mut secondary_hits = 0u32;
        let mut server_errors = 0u32;
        loop {
            attempts += 1;
            let sent = if method == Method::GET {
                self.crab._get(path).await
            } else if method == Method::POST {
                self.crab._post(path, body).await
            } else if method == Method::PATCH {
                self.crab._patch(path, body).await
            } else if method == Method::PUT {
                self.crab._put(path, body).await
            } else if method == Method::DELETE {
                self.crab._delete(path, body).await
            } else {
                return Err(Error::Http {
                    method: method.to_string(),
                    path: strip_query(path).to_string(),
                    status: 0,
                    message: "method not supported by this client".into(),
                });
            };
            let resp = sent.map_err(|e| transport(&method, path, e))?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body_bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| transport(&method, path, e))?
                .to_bytes()
                .to_vec();
            let wait = rate_limit_wait(
                status,
                &headers,
                &body_bytes,
                SystemTime::now(),
                secondary_hits,
                server_errors,
                &self.retry,
            );
            let delay = match wait {
                Wait::No => {
                    return Ok(Response {
                        status,
                        headers,
                        body: body_bytes,
                    });
                }
                Wait::For(d) => d,
                Wait::Secondary(d) => {
                    secondary_hits += 1;
                    d
                }
                Wait::ServerError(d) => {
                    server_errors += 1;
                    d
                }
            };
            let give_up = |why: String| Error::RateLimited {
                method: method.to_string(),
                path: strip_query(path).to_string(),
                attempts,
                why,
            };
            if attempts >= self.retry.max_attempts {
                return Err(give_up(format!("last status {status}")));
            }
            if delay > self.retry.max_wait {
                return Err(give_up(format!(
                    "asked to wait {} s, more than the {} s allowed",
                    delay.as_secs(),
                    self.retry.max_wait.as_secs()
                )));
            }
            tracing::warn!(
                %method, path = strip_query(path), status, wait_s = delay.as_secs_f64(), attempts,
                "github: waiting before retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// A request whose non-2xx answer is an error.
    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Response> {
        let resp = self.request(method.clone(), path, body).await?;
        if (200..300).contains(&resp.status) {
            Ok(resp)
        } else {
            Err(http_error(&method, path, &resp))
        }
    }

    async fn get_json<T: DeserializeOwned>(&self, path: &str, what: &str) -> Result<T> {
        let resp = self.call(Method::GET, path, None).await?;
        decode(&resp.body, what)
    }

    async fn comments(&self, repo: &RepoRef, number: u64) -> Result<Vec<CommentJson>> {
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let path = format!(
                "{}/issues/{number}/comments?per_page=100&page={page}",
                repo_path(repo)
            );
            let batch: Vec<CommentJson> = self.get_json(&path, "issue comments").await?;
            let n = batch.len();
            all.extend(batch);
            if n < 100 {
                break;
            }
        }
        Ok(all)
    }

    async fn update_pr(&self, repo: &RepoRef, number: u64, req: &PrRequest) -> Result<PullRequest> {
        let path = format!("{}/pulls/{number}", repo_path(repo));
        let body = json!({ "title": req.title, "body": fit_body(req.body.as_str()) });
        let resp = self.call(Method::PATCH, &path, Some(&body)).await?;
        Ok(decode::<PullJson>(&resp.body, "updated pull request")?.into())
    }

    async fn create_comment(&self, repo: &RepoRef, number: u64, body: &str) -> Result<CommentRef> {
        let path = format!("{}/issues/{number}/comments", repo_path(repo));
        let resp = self
            .call(Method::POST, &path, Some(&json!({ "body": body })))
            .await?;
        let c: CommentJson = decode(&resp.body, "new comment")?;
        Ok(CommentRef {
            id: c.id,
            html_url: c.html_url,
        })
    }

    /// Edit a comment; `None` when it is gone or no longer ours to edit.
    async fn edit_comment(
        &self,
        repo: &RepoRef,
        id: u64,
        body: &str,
    ) -> Result<Option<CommentRef>> {
        let path = format!("{}/issues/comments/{id}", repo_path(repo));
        let resp = self
            .request(Method::PATCH, &path, Some(&json!({ "body": body })))
            .await?;
        match resp.status {
            200..=299 => {
                let c: CommentJson = decode(&resp.body, "edited comment")?;
                Ok(Some(CommentRef {
                    id: c.id,
                    html_url: c.html_url,
                }))
            }
            403 | 404 => Ok(None),
            _ => Err(http_error(&Method::PATCH, &path, &resp)),
        }
    }
}

fn decode<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T> {
    serde_json::from_slice(body).map_err(|source| Error::Decode {
        what: what.to_string(),
        source,
    })
}

fn http_error(method: &Method, path: &str, resp: &Response) -> Error {
    let message = serde_json::from_slice::<Value>(&resp.body)
        .ok()
        .and_then(|v| {
            let mut m = v.get("message")?.as_str()?.to_string();
            if let Some(errors) = v.get("errors").and_then(Value::as_array) {
                for e in errors {
                    if let Some(s) = e.get("message").and_then(Value::as_str) {
                        m.push_str(": ");
                        m.push_str(s);
                    }
                }
            }
            Some(m)
        })
        .unwrap_or_else(|| {
            String::from_utf8_lossy(&resp.body)
                .chars()
                .take(300)
                .collect()
        });
    Error::Http {
        method: method.to_string(),
        path: strip_query(path).to_string(),
        status: resp.status,
        message,
    }
}

/// Whether a 422 from creating a PR says one already exists for the head.
fn already_exists(resp: &Response) -> bool {
    resp.status == 422
        && String::from_utf8_lossy(&resp.body)
            .to_ascii_lowercase()
            .contains("already exists")
}

#[async_trait]
impl Forge for GitHub {
    async fn issue(&self, repo: &RepoRef, number: u64) -> Result<Issue> {
        let path = format!("{}/issues/{number}", repo_path(repo));
        let i: IssueJson = self.get_json(&path, "issue").await?;
        let comments = self
            .comments(repo, number)
            .await?
            .into_iter()
            .map(|c| super::Comment {
                id: c.id,
                author: c.user.into(),
                body: c.body.unwrap_or_default(),
            })
            .collect();
        Ok(Issue {
            number: i.number,
            title: i.title,
            body: i.body.unwrap_or_default(),
            author: i.user.into(),
            labels: i.labels.into_iter().map(|l| l.name).collect(),
            state: i.state,
            is_pull_request: i.pull_request.is_some(),
            comments,
        })
    }

    async fn pull_request(&self, repo: &RepoRef, number: u64) -> Result<PullRequest> {
        let path = format!("{}/pulls/{number}", repo_path(repo));
        Ok(self
            .get_json::<PullJson>(&path, "pull request")
            .await?
            .into())
    }

    async fn pull_request_for_branch(
        &self,
        repo: &RepoRef,
        branch: &str,
    ) -> Result<Option<PullRequest>> {
        let path = format!(
            "{}/pulls?state=open&per_page=10&head={}",
            repo_path(repo),
            enc(&format!("{}:{branch}", repo.owner))
        );
        let prs: Vec<PullJson> = self.get_json(&path, "pull requests").await?;
        Ok(prs
            .into_iter()
            .map(PullRequest::from)
            .find(|p| p.head_ref == branch))
    }

    async fn push(
        &self,
        local: Repo,
        remote: &str,
        refs: &[String],
        branch_prefix: &str,
    ) -> Result<()> {
        let creds = PushCredentials::Token(self.git_token().await?);
        let (remote_owned, refs, prefix) =
            (remote.to_string(), refs.to_vec(), branch_prefix.to_string());
        tokio::task::spawn_blocking(move || local.push(&remote_owned, &refs, &prefix, Some(&creds)))
            .await?
            .map_err(|source| Error::Push {
                remote: remote.to_string(),
                source,
            })
    }

    async fn fetch_run_record(&self, local: Repo, remote: &str, run_id: &str) -> Result<()> {
        let creds = PushCredentials::Token(self.git_token().await?);
        super::fetch_record(local, remote, run_id, Some(creds)).await
    }

    async fn open_draft_pr(&self, repo: &RepoRef, req: &PrRequest) -> Result<PullRequest> {
        if let Some(existing) = self.pull_request_for_branch(repo, &req.head).await? {
            return self.update_pr(repo, existing.number, req).await;
        }
        let path = format!("{}/pulls", repo_path(repo));
        let body = json!({
            "title": req.title,
            "head": req.head,
            "base": req.base,
            "body": fit_body(req.body.as_str()),
            "draft": true,
        });
        let resp = self.request(Method::POST, &path, Some(&body)).await?;
        if (200..300).contains(&resp.status) {
            return Ok(decode::<PullJson>(&resp.body, "new pull request")?.into());
        }
        if already_exists(&resp) {
            // Another delivery of the same run won the race: update the PR it opened.
            if let Some(existing) = self.pull_request_for_branch(repo, &req.head).await? {
                return self.update_pr(repo, existing.number, req).await;
            }
        }
        Err(http_error(&Method::POST, &path, &resp))
    }

    async fn upsert_progress(
        &self,
        repo: &RepoRef,
        number: u64,
        run_id: &str,
        body: &Redacted,
    ) -> Result<CommentRef> {
        let marker = progress_marker(run_id);
        let text = fit_body(&format!("{marker}\n{body}"));
        let key = (repo.to_string(), number, run_id.to_string());
        let known = self.progress.lock().ok().and_then(|m| m.get(&key).copied());
        let found = match known {
            Some(id) => Some(id),
            None => {
                // Newest first, a bot's (our App's or Actions') before anyone's: a person who
                // pastes the marker must not capture the progress comment.
                let marked: Vec<(u64, bool)> = self
                    .comments(repo, number)
                    .await?
                    .into_iter()
                    .rev()
                    .filter(|c| c.body.as_deref().is_some_and(|b| b.contains(&marker)))
                    .map(|c| (c.id, User::from(c.user).is_bot))
                    .collect();
                marked
                    .iter()
                    .find(|(_, bot)| *bot)
                    .or(marked.first())
                    .map(|(id, _)| *id)
            }
        };
        let written = match found {
            Some(id) => self.edit_comment(repo, id, &text).await?,
            None => None,
        };
        let comment = match written {
            Some(c) => c,
            None => self.create_comment(repo, number, &text).await?,
        };
        if let Ok(mut m) = self.progress.lock() {
            m.insert(key, comment.id);
        }
        Ok(comment)
    }

    async fn react_eyes(&self, repo: &RepoRef, target: CommentTarget) -> Result<()> {
        let path = match target {
            CommentTarget::IssueComment(id) => {
                format!("{}/issues/comments/{id}/reactions", repo_path(repo))
            }
            CommentTarget::ReviewComment(id) => {
                format!("{}/pulls/comments/{id}/reactions", repo_path(repo))
            }
        };
        self.call(Method::POST, &path, Some(&json!({ "content": "eyes" })))
            .await?;
        Ok(())
    }

    async fn permission(&self, repo: &RepoRef, login: &str) -> Result<Permission> {
        let path = format!(
            "{}/collaborators/{}/permission",
            repo_path(repo),
            enc(login)
        );
        let resp = self.request(Method::GET, &path, None).await?;
        if resp.status == 404 {
            return Ok(Permission::None);
        }
        if !(200..300).contains(&resp.status) {
            return Err(http_error(&Method::GET, &path, &resp));
        }
        let p: PermissionJson = decode(&resp.body, "collaborator permission")?;
        // `role_name` tells maintain and triage apart; `permission` folds them into
        // write and read. Unknown (custom) role names fall back to `permission`.
        let parsed = p
            .role_name
            .as_deref()
            .and_then(Permission::parse)
            .or_else(|| Permission::parse(&p.permission))
            .unwrap_or(Permission::None);
        Ok(parsed)
    }

    async fn failed_jobs(&self, repo: &RepoRef, workflow_run_id: u64) -> Result<Vec<FailedJob>> {
        let path = format!(
            "{}/actions/runs/{workflow_run_id}/jobs?filter=latest&per_page=100",
            repo_path(repo)
        );
        let jobs: JobsJson = self.get_json(&path, "workflow run jobs").await?;
        Ok(jobs
            .jobs
            .into_iter()
            .filter(|j| {
                matches!(
                    j.conclusion.as_deref(),
                    Some("failure" | "timed_out" | "startup_failure")
                )
            })
            .map(|j| FailedJob {
                id: j.id,
                name: j.name,
                conclusion: j.conclusion.unwrap_or_default(),
                failed_steps: j
                    .steps
                    .into_iter()
                    .filter(|s| matches!(s.conclusion.as_deref(), Some("failure" | "timed_out")))
                    .map(|s| s.name)
                    .collect(),
            })
            .collect())
    }

    async fn failed_workflow_runs(&self, repo: &RepoRef, branch: &str) -> Result<Vec<WorkflowRun>> {
        let path = format!(
            "{}/actions/runs?branch={}&status=failure&per_page=100",
            repo_path(repo),
            enc(branch)
        );
        let runs: RunsJson = self.get_json(&path, "workflow runs").await?;
        Ok(runs
            .workflow_runs
            .into_iter()
            .map(|r| WorkflowRun {
                id: r.id,
                name: r.name.unwrap_or_default(),
                head_sha: r.head_sha,
                conclusion: r.conclusion,
            })
            .collect())
    }

    async fn job_log(&self, repo: &RepoRef, job_id: u64) -> Result<String> {
        let path = format!("{}/actions/jobs/{job_id}/logs", repo_path(repo));
        let resp = self.request(Method::GET, &path, None).await?;
        let body = match resp.status {
            200 => resp.body,
            301 | 302 | 303 | 307 | 308 => {
                let location = resp
                    .headers
                    .get(http::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| Error::Http {
                        method: "GET".into(),
                        path: path.clone(),
                        status: resp.status,
                        message: "redirect without a location".into(),
                    })?
                    .to_string();
                // The log lives in blob storage behind a signed URL: fetch it without our
                // token, so the token never leaves for another host.
                let mut r = self
                    .blobs
                    .get(&location)
                    .send()
                    .await
                    .map_err(|e| transport(&Method::GET, &path, e))?;
                if !r.status().is_success() {
                    return Err(Error::Http {
                        method: "GET".into(),
                        path: "job log download".into(),
                        status: r.status().as_u16(),
                        message: "log download failed".into(),
                    });
                }
                let mut buf = Vec::new();
                while let Some(chunk) = r
                    .chunk()
                    .await
                    .map_err(|e| transport(&Method::GET, &path, e))?
                {
                    buf.extend_from_slice(&chunk);
                    if buf.len() > MAX_LOG_BYTES {
                        // Keep the tail: the failure is at the end of a log.
                        let cut = buf.len() - MAX_LOG_BYTES;
                        buf.drain(..cut);
                    }
                }
                buf
            }
            _ => return Err(http_error(&Method::GET, &path, &resp)),
        };
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn retry_after_is_honoured() {
        let p = RetryPolicy::default();
        let w = rate_limit_wait(
            429,
            &headers(&[("retry-after", "7")]),
            b"",
            SystemTime::now(),
            0,
            0,
            &p,
        );
        assert_eq!(w, Wait::For(Duration::from_secs(7)));
    }

    #[test]
    fn exhausted_primary_limit_waits_until_reset() {
        let p = RetryPolicy::default();
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let w = rate_limit_wait(
            403,
            &headers(&[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", "1000042"),
            ]),
            b"{\"message\":\"API rate limit exceeded\"}",
            now,
            0,
            0,
            &p,
        );
        assert_eq!(w, Wait::For(Duration::from_secs(43)));
    }

    #[test]
    fn secondary_limit_waits_a_minute_then_doubles() {
        let p = RetryPolicy::default();
        let body = b"{\"message\":\"You have exceeded a secondary rate limit.\"}";
        let first = rate_limit_wait(403, &HeaderMap::new(), body, SystemTime::now(), 0, 0, &p);
        let third = rate_limit_wait(403, &HeaderMap::new(), body, SystemTime::now(), 2, 0, &p);
        assert_eq!(first, Wait::Secondary(Duration::from_secs(60)));
        assert_eq!(third, Wait::Secondary(Duration::from_secs(240)));
    }

    #[test]
    fn plain_forbidden_is_not_a_limit() {
        let p = RetryPolicy::default();
        let w = rate_limit_wait(
            403,
            &headers(&[("x-ratelimit-remaining", "4999")]),
            b"{\"message\":\"Resource not accessible by integration\"}",
            SystemTime::now(),
            0,
            0,
            &p,
        );
        assert_eq!(w, Wait::No);
    }

    #[test]
    fn long_bodies_are_cut_to_the_limit() {
        let long = "x".repeat(BODY_LIMIT + 10);
        let cut = fit_body(&long);
        assert_eq!(cut.chars().count(), BODY_LIMIT);
        assert!(cut.ends_with("in the run record)"));
        assert_eq!(fit_body("short"), "short");
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(enc("me:agent/42-x"), "me%3Aagent%2F42-x");
        assert_eq!(enc("dependabot[bot]"), "dependabot%5Bbot%5D");
    }

    #[test]
    fn auth_never_prints_secrets() {
        let a = Auth::App {
            app_id: 1,
            private_key_pem: "-----BEGIN RSA PRIVATE KEY----- secret".into(),
            installation_id: 2,
        };
        assert!(!format!("{a:?}").contains("secret"));
        assert!(!format!("{:?}", Auth::Token("ghp_x".into())).contains("ghp_x"));
    }
}
