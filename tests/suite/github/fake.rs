//! A fake GitHub REST API on loopback.
//!
//! Every request is checked against GitHub's published description (npm `@octokit/openapi`,
//! `generated/api.github.com.json`): the path must match a template, the method must exist on
//! it, required query parameters must be present and typed, unknown query parameters are
//! refused, and a JSON body must satisfy the operation's request schema. A request GitHub
//! would reject is recorded as a violation and answered 422; every test ends with
//! [`Fake::assert_clean`]. Responses are the description's own examples, with the few fields
//! that carry state (numbers, bodies, branches) filled in.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use regex::Regex;
use serde_json::{Value, json};

/// Where the npm fixtures are; set by `.ci/setup/github.sh`.
pub fn npm_dir() -> PathBuf {
    let dir = std::env::var("GIT_AGENT_TEST_NPM").expect(
        "GIT_AGENT_TEST_NPM is not set: source .ci/setup/github.sh (it installs \
         @octokit/openapi and @octokit/webhooks-examples and exports the variable)",
    );
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("@octokit/openapi").is_dir() && dir.join("@octokit/webhooks-examples").is_dir(),
        "GIT_AGENT_TEST_NPM={} lacks @octokit/openapi or @octokit/webhooks-examples",
        dir.display()
    );
    dir
}

/// One operation of the description.
pub struct Op {
    pub method: String,
    pub template: String,
    regex: Regex,
    names: Vec<String>,
    literal_len: usize,
    op: Value,
    path_params: Vec<Value>,
}

/// The REST description, indexed.
pub struct Spec {
    root: Value,
    ops: Vec<Op>,
}

impl Spec {
    /// Loaded once per test process.
    pub fn get() -> &'static Spec {
        static SPEC: OnceLock<Spec> = OnceLock::new();
        SPEC.get_or_init(|| {
            let path = npm_dir().join("@octokit/openapi/generated/api.github.com.json");
            let root: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            let mut ops = Vec::new();
            let segments = Regex::new(r"\{[^}]+\}|[^{]+").unwrap();
            for (template, item) in root["paths"].as_object().unwrap() {
                let mut names = Vec::new();
                let mut re = String::from("^");
                let mut literal_len = 0;
                for part in segments.find_iter(template) {
                    let s = part.as_str();
                    if s.starts_with('{') {
                        names.push(s[1..s.len() - 1].to_string());
                        re.push_str("([^/]+)");
                    } else {
                        literal_len += s.len();
                        re.push_str(&regex::escape(s));
                    }
                }
                re.push('$');
                let regex = Regex::new(&re).unwrap();
                let path_params = item
                    .get("parameters")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (method, op) in item.as_object().unwrap() {
                    if method == "parameters" {
                        continue;
                    }
                    ops.push(Op {
                        method: method.to_uppercase(),
                        template: template.clone(),
                        regex: regex.clone(),
                        names: names.clone(),
                        literal_len,
                        op: op.clone(),
                        path_params: path_params.clone(),
                    });
                }
            }
            Spec { root, ops }
        })
    }

    /// Inline `$ref`s (to a depth: recursive schemas end in `{}`).
    pub fn resolve(&self, v: &Value, depth: usize) -> Value {
        if depth > 14 {
            return json!({});
        }
        match v {
            Value::Object(m) => {
                if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                    let target = self
                        .root
                        .pointer(r.trim_start_matches('#'))
                        .unwrap_or_else(|| panic!("dangling $ref {r}"));
                    return self.resolve(target, depth + 1);
                }
                Value::Object(
                    m.iter()
                        .map(|(k, v)| (k.clone(), self.resolve(v, depth + 1)))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(|v| self.resolve(v, depth + 1)).collect()),
            other => other.clone(),
        }
    }

    /// The operation for `method path`, most specific template first.
    pub fn find(&self, method: &str, path: &str) -> Result<(&Op, HashMap<String, String>), String> {
        let mut matching: Vec<&Op> = self.ops.iter().filter(|o| o.regex.is_match(path)).collect();
        if matching.is_empty() {
            return Err(format!("no such path in the REST description: {path}"));
        }
        matching.sort_by_key(|o| std::cmp::Reverse(o.literal_len));
        let best_len = matching[0].literal_len;
        let op = matching
            .iter()
            .filter(|o| o.literal_len == best_len)
            .find(|o| o.method == method)
            .ok_or_else(|| format!("{method} is not an operation of {}", matching[0].template))?;
        let caps = op.regex.captures(path).unwrap();
        let params = op
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), caps[i + 1].to_string()))
            .collect();
        Ok((op, params))
    }

    /// Everything GitHub would reject about this request.
    pub fn check(
        &self,
        op: &Op,
        path_params: &HashMap<String, String>,
        query: &HashMap<String, String>,
        body: &[u8],
    ) -> Vec<String> {
        let mut bad = Vec::new();
        let params: Vec<Value> = op
            .path_params
            .iter()
            .chain(op.op["parameters"].as_array().into_iter().flatten())
            .map(|p| self.resolve(p, 0))
            .collect();
        let mut known = Vec::new();
        for p in &params {
            let name = p["name"].as_str().unwrap_or_default();
            let value = match p["in"].as_str() {
                Some("query") => {
                    known.push(name.to_string());
                    query.get(name)
                }
                Some("path") => path_params.get(name),
                _ => continue,
            };
            let required = p["required"].as_bool().unwrap_or(false) || p["in"] == "path";
            let Some(value) = value else {
                if required {
                    bad.push(format!(
                        "{}: missing required parameter `{name}`",
                        op.template
                    ));
                }
                continue;
            };
            let schema = &p["schema"];
            let ok = match schema["type"].as_str() {
                Some("integer") => value.parse::<i64>().is_ok(),
                Some("boolean") => value == "true" || value == "false",
                _ => true,
            };
            if !ok {
                bad.push(format!(
                    "{}: parameter `{name}`={value} is not a {}",
                    op.template, schema["type"]
                ));
            }
            if let Some(allowed) = schema["enum"].as_array()
                && !allowed.iter().any(|a| a.as_str() == Some(value.as_str()))
            {
                bad.push(format!(
                    "{}: parameter `{name}`={value} not in {allowed:?}",
                    op.template
                ));
            }
        }
        for q in query.keys() {
            if !known.contains(q) {
                bad.push(format!("{}: unknown query parameter `{q}`", op.template));
            }
        }
        let rb = self.resolve(&op.op["requestBody"], 0);
        if rb.is_null() {
            if !body.is_empty() {
                bad.push(format!("{} {}: takes no body", op.method, op.template));
            }
            return bad;
        }
        if body.is_empty() {
            if rb["required"].as_bool().unwrap_or(false) {
                bad.push(format!("{} {}: body required", op.method, op.template));
            }
            return bad;
        }
        let instance: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                bad.push(format!("{}: body is not JSON: {e}", op.template));
                return bad;
            }
        };
        let schema = &rb["content"]["application/json"]["schema"];
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft4)
            .build(schema)
            .unwrap_or_else(|e| panic!("schema of {} does not compile: {e}", op.template));
        for e in validator.iter_errors(&instance) {
            bad.push(format!(
                "{} {}: body {instance}: {e} at {}",
                op.method,
                op.template,
                e.instance_path()
            ));
        }
        bad
    }

    /// The description's example response of `op` for `status`.
    pub fn example(&self, op: &Op, status: &str) -> Value {
        let resp = self.resolve(&op.op["responses"][status], 0);
        let content = &resp["content"]["application/json"];
        if let Some(examples) = content["examples"].as_object()
            && let Some((_, first)) = examples.iter().next()
        {
            return first["value"].clone();
        }
        content["example"].clone()
    }

    /// The example of a named component (`components/examples/NAME`).
    pub fn component_example(&self, name: &str) -> Value {
        self.resolve(&self.root["components"]["examples"][name]["value"], 0)
    }
}

/// A response served before normal handling (rate limits, errors).
#[derive(Debug, Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// One request as the fake saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
    pub body: String,
}

/// Mutable state of the fake forge.
#[derive(Default)]
pub struct World {
    pub violations: Vec<String>,
    pub seen: Vec<Seen>,
    pub canned: VecDeque<Canned>,
    /// login → (permission, role_name)
    pub permissions: HashMap<String, (String, String)>,
    pub issues: HashMap<u64, Value>,
    /// (issue number, comment)
    pub comments: Vec<(u64, Value)>,
    pub pulls: Vec<Value>,
    pub reactions: Vec<(String, String)>,
    /// workflow run id → jobs
    pub jobs: HashMap<u64, Vec<Value>>,
    /// job id → log text
    pub logs: HashMap<u64, String>,
    /// branch → head shas of failed runs
    pub failed_runs: HashMap<String, Vec<String>>,
    pub next_id: u64,
    /// POST /pulls creates the PR and still answers 422, as when another delivery won a race.
    pub pr_race: bool,
    /// The App whose JWTs mint installation tokens: (app id, public key PEM).
    pub app: Option<(u64, String)>,
    pub tokens_minted: u32,
    pub token_lifetime_s: i64,
    /// Authorization headers that reached the log blob store (must stay empty).
    pub blob_auth: Vec<String>,
}

/// A running fake.
pub struct Fake {
    pub world: Mutex<World>,
    pub addr: SocketAddr,
    /// Path prefix of the API (`/api/v3` for Enterprise Server), empty for github.com.
    pub prefix: String,
}

impl Fake {
    /// Start a fake on loopback; `prefix` is `""` or `"/api/v3"`.
    pub async fn start(prefix: &str) -> Arc<Fake> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        Spec::get();
        let fake = Arc::new(Fake {
            world: Mutex::new(World {
                next_id: 1000,
                token_lifetime_s: 3600,
                ..World::default()
            }),
            addr,
            prefix: prefix.to_string(),
        });
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(fake.clone());
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        fake
    }

    /// The API base URL for the client.
    pub fn api_base(&self) -> String {
        format!("http://{}{}", self.addr, self.prefix)
    }

    pub fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().unwrap()
    }

    /// Fail the test if any request broke the description.
    pub fn assert_clean(&self) {
        let w = self.world();
        assert!(
            w.violations.is_empty(),
            "requests GitHub would reject:\n{}",
            w.violations.join("\n")
        );
    }

    pub fn grant(&self, login: &str, permission: &str, role: &str) {
        self.world()
            .permissions
            .insert(login.into(), (permission.into(), role.into()));
    }

    /// An issue from the description's example, with our number, text and author.
    pub fn add_issue(&self, number: u64, title: &str, body: &str, author: &str, is_pr: bool) {
        let mut issue = Spec::get().component_example("issue");
        issue["number"] = json!(number);
        issue["title"] = json!(title);
        issue["body"] = json!(body);
        issue["user"]["login"] = json!(author);
        issue["state"] = json!("open");
        if !is_pr {
            issue.as_object_mut().unwrap().remove("pull_request");
        } else if issue.get("pull_request").is_none() {
            issue["pull_request"] = json!({"url": "https://api.github.com/x"});
        }
        self.world().issues.insert(number, issue);
    }

    pub fn add_comment(&self, issue: u64, author: &str, is_bot: bool, body: &str) -> u64 {
        let mut w = self.world();
        w.next_id += 1;
        let id = w.next_id;
        let mut c = Spec::get().component_example("issue-comment");
        c["id"] = json!(id);
        c["body"] = json!(body);
        c["user"]["login"] = json!(author);
        c["user"]["type"] = json!(if is_bot { "Bot" } else { "User" });
        w.comments.push((issue, c));
        id
    }

    /// A PR from the example, head `head` in `owner/repo`.
    pub fn add_pull(&self, number: u64, head: &str, base: &str, head_repo: &str) {
        let mut p = Spec::get().component_example("pull-request");
        p["number"] = json!(number);
        p["state"] = json!("open");
        p["head"]["ref"] = json!(head);
        p["base"]["ref"] = json!(base);
        p["head"]["repo"]["full_name"] = json!(head_repo);
        self.world().pulls.push(p);
    }

    pub fn requests(&self, method: &str, path_contains: &str) -> Vec<Seen> {
        self.world()
            .seen
            .iter()
            .filter(|s| s.method == method && s.path.contains(path_contains))
            .cloned()
            .collect()
    }
}

fn reply(status: u16, body: Value) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn not_found() -> Response {
    reply(
        404,
        json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}),
    )
}

async fn handle(
    State(fake): State<Arc<Fake>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    if let Some(job) = uri.path().strip_prefix("/_blob/log/") {
        let mut w = fake.world();
        if let Some(a) = &auth {
            w.blob_auth.push(a.clone());
        }
        let log = w.logs.get(&job.parse::<u64>().unwrap_or(0)).cloned();
        return match log {
            Some(text) => (StatusCode::OK, text).into_response(),
            None => not_found(),
        };
    }
    let Some(path) = uri.path().strip_prefix(fake.prefix.as_str()) else {
        fake.world()
            .violations
            .push(format!("request outside the API base: {uri}"));
        return not_found();
    };
    let path = path.to_string();
    let query: HashMap<String, String> = uri
        .query()
        .map(|q| {
            q.split('&')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    (k.to_string(), percent_decode(v))
                })
                .collect()
        })
        .unwrap_or_default();
    let spec = Spec::get();
    let mut w = fake.world();
    w.seen.push(Seen {
        method: method.to_string(),
        path: path.clone(),
        authorization: auth.clone(),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let (op, params) = match spec.find(method.as_str(), &path) {
        Ok(found) => found,
        Err(why) => {
            w.violations.push(why.clone());
            return reply(404, json!({"message": why}));
        }
    };
    let bad = spec.check(op, &params, &query, &body);
    if !bad.is_empty() {
        w.violations.extend(bad.clone());
        return reply(422, json!({"message": "Validation Failed", "errors": bad}));
    }
    if auth.is_none() {
        w.violations
            .push(format!("{method} {path}: no Authorization header"));
    }
    if let Some(c) = w.canned.pop_front() {
        let mut r = (StatusCode::from_u16(c.status).unwrap(), c.body).into_response();
        for (k, v) in c.headers {
            r.headers_mut().insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        return r;
    }
    let body_json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let num = |k: &str| {
        params
            .get(k)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let m = method.as_str();
    match (m, op.template.as_str()) {
        ("GET", "/repos/{owner}/{repo}/collaborators/{username}/permission") => {
            let user = &params["username"];
            match w.permissions.get(&percent_decode(user)) {
                Some((perm, role)) => {
                    let mut ex = spec.example(op, "200");
                    ex["permission"] = json!(perm);
                    ex["role_name"] = json!(role);
                    ex["user"]["login"] = json!(percent_decode(user));
                    reply(200, ex)
                }
                None => not_found(),
            }
        }
        ("GET", "/repos/{owner}/{repo}/issues/{issue_number}") => {
            match w.issues.get(&num("issue_number")) {
                Some(i) => reply(200, i.clone()),
                None => not_found(),
            }
        }
        ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments") => {
            let n = num("issue_number");
            let per_page: usize = query
                .get("per_page")
                .and_then(|v| v.parse().ok())
                .unwrap_or(30);
            let page: usize = query.get("page").and_then(|v| v.parse().ok()).unwrap_or(1);
            let all: Vec<Value> = w
                .comments
                .iter()
                .filter(|(i, _)| *i == n)
                .map(|(_, c)| c.clone())
                .collect();
            let slice: Vec<Value> = all
                .into_iter()
                .skip((page - 1) * per_page)
                .take(per_page)
                .collect();
            reply(200, Value::Array(slice))
        }
        ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments") => {
            let n = num("issue_number");
            w.next_id += 1;
            let mut c = spec.example(op, "201");
            c["id"] = json!(w.next_id);
            c["body"] = body_json["body"].clone();
            c["user"]["login"] = json!("git-agent[bot]");
            c["user"]["type"] = json!("Bot");
            c["html_url"] = json!(format!(
                "https://github.com/o/r/issues/{n}#issuecomment-{}",
                w.next_id
            ));
            w.comments.push((n, c.clone()));
            reply(201, c)
        }
        ("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}") => {
            let id = num("comment_id");
            match w.comments.iter_mut().find(|(_, c)| c["id"] == json!(id)) {
                Some((_, c)) if c["user"]["type"] == "Bot" => {
                    c["body"] = body_json["body"].clone();
                    reply(200, c.clone())
                }
                Some(_) => reply(
                    403,
                    json!({"message": "Must have admin rights to Repository."}),
                ),
                None => not_found(),
            }
        }
        ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}") => {
            let n = num("pull_number");
            match w.pulls.iter().find(|p| p["number"] == json!(n)) {
                Some(p) => reply(200, p.clone()),
                None => not_found(),
            }
        }
        ("GET", "/repos/{owner}/{repo}/pulls") => {
            let head = query.get("head").cloned().unwrap_or_default();
            let branch = head
                .split_once(':')
                .map(|(_, b)| b.to_string())
                .unwrap_or(head);
            let state = query.get("state").cloned().unwrap_or("open".into());
            let list: Vec<Value> = w
                .pulls
                .iter()
                .filter(|p| branch.is_empty() || p["head"]["ref"] == json!(branch))
                .filter(|p| state == "all" || p["state"] == json!(state))
                .cloned()
                .collect();
            reply(200, Value::Array(list))
        }
        ("POST", "/repos/{owner}/{repo}/pulls") => {
            let head = body_json["head"].as_str().unwrap_or_default().to_string();
            let exists = w
                .pulls
                .iter()
                .any(|p| p["head"]["ref"] == json!(head) && p["state"] == "open");
            let make = |w: &mut World| {
                let mut p = spec.example(op, "201");
                let number = w.pulls.len() as u64 + 1;
                p["number"] = json!(number);
                p["state"] = json!("open");
                p["title"] = body_json["title"].clone();
                p["body"] = body_json["body"].clone();
                p["draft"] = body_json["draft"].clone();
                p["head"]["ref"] = json!(head);
                p["base"]["ref"] = body_json["base"].clone();
                p["head"]["repo"]["full_name"] = json!("octocat/Hello-World");
                p["html_url"] = json!(format!(
                    "https://github.com/octocat/Hello-World/pull/{number}"
                ));
                w.pulls.push(p.clone());
                p
            };
            if exists || w.pr_race {
                if w.pr_race && !exists {
                    make(&mut w);
                }
                return reply(
                    422,
                    json!({"message": "Validation Failed", "errors": [{"resource": "PullRequest", "code": "custom", "message": format!("A pull request already exists for octocat:{head}.")}]}),
                );
            }
            let p = make(&mut w);
            reply(201, p)
        }
        ("PATCH", "/repos/{owner}/{repo}/pulls/{pull_number}") => {
            let n = num("pull_number");
            match w.pulls.iter_mut().find(|p| p["number"] == json!(n)) {
                Some(p) => {
                    for k in ["title", "body"] {
                        if !body_json[k].is_null() {
                            p[k] = body_json[k].clone();
                        }
                    }
                    reply(200, p.clone())
                }
                None => not_found(),
            }
        }
        ("POST", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions")
        | ("POST", "/repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions") => {
            let content = body_json["content"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let dup = w.reactions.contains(&(path.clone(), content.clone()));
            w.reactions.push((path.clone(), content));
            reply(if dup { 200 } else { 201 }, spec.example(op, "201"))
        }
        ("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs") => {
            let jobs = w.jobs.get(&num("run_id")).cloned().unwrap_or_default();
            let mut ex = spec.example(op, "200");
            ex["total_count"] = json!(jobs.len());
            ex["jobs"] = Value::Array(jobs);
            reply(200, ex)
        }
        ("GET", "/repos/{owner}/{repo}/actions/jobs/{job_id}/logs") => {
            let location = format!("http://{}/_blob/log/{}", fake.addr, num("job_id"));
            (StatusCode::FOUND, [("location", location)]).into_response()
        }
        ("GET", "/repos/{owner}/{repo}/actions/runs") => {
            let branch = query.get("branch").cloned().unwrap_or_default();
            let shas = w.failed_runs.get(&branch).cloned().unwrap_or_default();
            let mut ex = spec.example(op, "200");
            let template = ex["workflow_runs"][0].clone();
            let runs: Vec<Value> = shas
                .iter()
                .enumerate()
                .map(|(i, sha)| {
                    let mut r = template.clone();
                    r["id"] = json!(5000 + i);
                    r["head_sha"] = json!(sha);
                    r["head_branch"] = json!(branch);
                    r["conclusion"] = json!("failure");
                    r
                })
                .collect();
            ex["total_count"] = json!(runs.len());
            ex["workflow_runs"] = Value::Array(runs);
            reply(200, ex)
        }
        ("POST", "/app/installations/{installation_id}/access_tokens") => {
            let Some((app_id, public_pem)) = w.app.clone() else {
                w.violations
                    .push("installation token requested but no App configured".into());
                return not_found();
            };
            let jwt = auth
                .as_deref()
                .and_then(|a| a.strip_prefix("Bearer "))
                .unwrap_or("");
            let key = jsonwebtoken::DecodingKey::from_rsa_pem(public_pem.as_bytes()).unwrap();
            let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
            // GitHub takes a numeric `iss` (the App id), which jsonwebtoken's own issuer check
            // cannot read; `iss` and `iat` are checked below.
            validation.set_required_spec_claims(&["exp"]);
            validation.validate_aud = false;
            let claims = match jsonwebtoken::decode::<Value>(jwt, &key, &validation) {
                Ok(d) => d.claims,
                Err(e) => {
                    w.violations.push(format!("bad App JWT: {e}"));
                    return reply(
                        401,
                        json!({"message": "A JSON web token could not be decoded"}),
                    );
                }
            };
            if !claims["iat"].is_u64() {
                w.violations
                    .push(format!("JWT without a numeric iat: {claims}"));
            }
            if claims["iss"] != json!(app_id) && claims["iss"] != json!(app_id.to_string()) {
                w.violations
                    .push(format!("JWT iss {} is not the App {app_id}", claims["iss"]));
            }
            w.tokens_minted += 1;
            let mut ex = spec.example(op, "201");
            ex["token"] = json!(format!("ghs_fake_installation_token_{}", w.tokens_minted));
            let expires =
                jiff::Timestamp::now() + jiff::SignedDuration::from_secs(w.token_lifetime_s);
            ex["expires_at"] = json!(expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
            reply(201, ex)
        }
        _ => {
            w.violations
                .push(format!("the fake does not implement {m} {}", op.template));
            reply(501, json!({"message": "not implemented by the fake"}))
        }
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
