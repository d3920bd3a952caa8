//! Role routing: specs (`ROLE=PROVIDER:MODEL`, bare `PROVIDER:MODEL`), building clients from
//! config and environment, per-role fallback, budgets, and a record of every call.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ModelClient;
use super::anthropic::{self, AnthropicClient, AnthropicOptions};
use super::budget::{Budget, Spend, WorstCase};
use super::cost::PriceTable;
use super::error::{Error, Result};
use super::openai::{self, OpenAiClient, OpenAiOptions};
use super::scripted::{Recorder, RecordingClient, ScriptedClient};
use super::types::{CallContext, Progress, ProgressFn, Reply, Request, Role, StopReason};
use crate::config::{ProviderConfig, Settings};

/// A model provider.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// Chat Completions (OpenAI and compatible servers).
    Openai,
    /// Anthropic Messages API.
    Anthropic,
    /// Ollama: Chat Completions at `http://localhost:11434/v1`.
    Ollama,
    /// A script replayed from a file.
    Scripted,
}

impl Provider {
    /// The provider's name in specs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Provider::Openai => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Ollama => "ollama",
            Provider::Scripted => "scripted",
        }
    }
}

/// `PROVIDER:MODEL` (for `scripted`, the model is the script's path).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ModelSpec {
    /// The provider.
    pub provider: Provider,
    /// The model name or script path.
    pub model: String,
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider.as_str(), self.model)
    }
}

impl FromStr for ModelSpec {
    type Err = Error;
    fn from_str(spec: &str) -> Result<Self> {
        let bad = |message: &str| Error::Spec {
            spec: spec.to_string(),
            message: message.to_string(),
        };
        let (p, model) = spec
            .split_once(':')
            .ok_or_else(|| bad("expected PROVIDER:MODEL (openai, anthropic, ollama, scripted)"))?;
        let provider = match p {
            "openai" => Provider::Openai,
            "anthropic" => Provider::Anthropic,
            "ollama" => Provider::Ollama,
            "scripted" => Provider::Scripted,
            _ => {
                return Err(bad(
                    "unknown provider; expected openai, anthropic, ollama or scripted",
                ));
            }
        };
        if model.trim().is_empty() {
            return Err(bad("the model name is empty"));
        }
        Ok(Self {
            provider,
            model: model.to_string(),
        })
    }
}

/// One `--model` argument: `ROLE=PROVIDER:MODEL` for one role, or a bare spec for all roles.
pub fn parse_assignment(arg: &str) -> Result<(Option<Role>, ModelSpec)> {
    if let Some((role, spec)) = arg.split_once('=') {
        if let Ok(role) = role.parse::<Role>() {
            return Ok((Some(role), spec.parse()?));
        }
        if !role.contains(':') {
            return Err(Error::Spec {
                spec: arg.to_string(),
                message: format!("unknown role `{role}` (planner, coder, reviewer, summarizer)"),
            });
        }
    }
    Ok((None, arg.parse()?))
}

/// The spec of each role from config and `--model` flags (later flags win). A role left
/// unset takes the first set one of coder, planner, reviewer, summarizer.
pub fn role_specs(settings: &Settings, flags: &[String]) -> Result<BTreeMap<Role, ModelSpec>> {
    let m = &settings.models;
    let mut specs = BTreeMap::new();
    for (role, v) in [
        (Role::Planner, &m.planner),
        (Role::Coder, &m.coder),
        (Role::Reviewer, &m.reviewer),
        (Role::Summarizer, &m.summarizer),
    ] {
        if let Some(v) = v {
            specs.insert(role, v.parse::<ModelSpec>()?);
        }
    }
    for f in flags {
        match parse_assignment(f)? {
            (Some(role), spec) => {
                specs.insert(role, spec);
            }
            (None, spec) => {
                for role in Role::ALL {
                    specs.insert(role, spec.clone());
                }
            }
        }
    }
    let default = [Role::Coder, Role::Planner, Role::Reviewer, Role::Summarizer]
        .iter()
        .find_map(|r| specs.get(r).cloned());
    if let Some(d) = default {
        for role in Role::ALL {
            specs.entry(role).or_insert_with(|| d.clone());
        }
    }
    Ok(specs)
}

/// Build the client a spec names. `env` looks up environment variables (keys, base URLs).
pub fn build_client(
    spec: &ModelSpec,
    settings: &Settings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn ModelClient>> {
    let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let net = settings.model_net.clone();
    let key_var = |p: &ProviderConfig, default: &str| {
        p.api_key_env.clone().unwrap_or_else(|| default.to_string())
    };
    Ok(match spec.provider {
        Provider::Openai | Provider::Ollama => {
            let (pc, default_key, base_env, default_base) = if spec.provider == Provider::Openai {
                (
                    &settings.providers.openai,
                    "OPENAI_API_KEY",
                    Some("OPENAI_BASE_URL"),
                    openai::DEFAULT_BASE_URL,
                )
            } else {
                (
                    &settings.providers.ollama,
                    "OLLAMA_API_KEY",
                    None,
                    "http://localhost:11434/v1",
                )
            };
            let base_url = pc
                .base_url
                .clone()
                .or_else(|| base_env.and_then(var))
                .unwrap_or_else(|| default_base.to_string());
            let key_var = key_var(pc, default_key);
            let api_key = var(&key_var).map(SecretString::from);
            if api_key.is_none() && base_url.starts_with(openai::DEFAULT_BASE_URL) {
                return Err(Error::MissingKey {
                    provider: spec.provider.as_str().into(),
                    key_var,
                });
            }
            Arc::new(OpenAiClient::new(OpenAiOptions {
                provider: spec.provider.as_str().into(),
                base_url,
                model: spec.model.clone(),
                api_key,
                key_var,
                net,
                stream: true,
            })?)
        }
        Provider::Anthropic => {
            let pc = &settings.providers.anthropic;
            let base_url = pc
                .base_url
                .clone()
                .or_else(|| var("ANTHROPIC_BASE_URL"))
                .unwrap_or_else(|| anthropic::DEFAULT_BASE_URL.to_string());
            let key_var = key_var(pc, "ANTHROPIC_API_KEY");
            let api_key = var(&key_var).map(SecretString::from);
            if api_key.is_none() && base_url.starts_with(anthropic::DEFAULT_BASE_URL) {
                return Err(Error::MissingKey {
                    provider: "anthropic".into(),
                    key_var,
                });
            }
            Arc::new(AnthropicClient::new(AnthropicOptions {
                base_url,
                model: spec.model.clone(),
                api_key,
                key_var,
                net,
                stream: true,
            })?)
        }
        Provider::Scripted => Arc::new(ScriptedClient::open(Path::new(&spec.model))?),
    })
}

/// A model a role is routed to.
#[derive(Clone)]
pub struct Route {
    /// Its spec, as recorded.
    pub spec: ModelSpec,
    /// Its client.
    pub client: Arc<dyn ModelClient>,
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Route({})", self.spec)
    }
}

/// What the run writes as a `model_call` audit event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The role that asked.
    pub role: Role,
    /// The spec that answered (`PROVIDER:MODEL`).
    pub spec: String,
    /// The model as the provider named it in the reply.
    pub served_by: String,
    /// Whether the role's fallback answered.
    pub fallback: bool,
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Output tokens.
    pub tokens_out: u64,
    /// Prompt tokens read from a cache.
    pub tokens_cached: u64,
    /// Whether the token counts are our estimate (the provider reported none).
    pub usage_estimated: bool,
    /// USD, `None` when the model's price is unknown.
    pub cost_usd: Option<f64>,
    /// Wall time of the call, retries included.
    pub latency_ms: u64,
    /// Why the model stopped.
    pub stop: StopReason,
    /// SHA-256 (hex) of the provider-neutral request as JSON.
    pub request_sha256: String,
    /// SHA-256 (hex) of the provider-neutral reply as JSON.
    pub reply_sha256: String,
}

/// One exchange for the run's transcript (the caller redacts it before writing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    /// The role that asked.
    pub role: Role,
    /// The spec that answered.
    pub spec: String,
    /// The request.
    pub request: Request,
    /// The reply.
    pub reply: Reply,
}

/// The result of a routed call.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The reply.
    pub reply: Reply,
    /// The audit record.
    pub record: CallRecord,
    /// The transcript entry.
    pub transcript: TranscriptEntry,
}

/// Usage of one (role, model) pair over a run, for the PR's cost section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageLine {
    /// Completed calls.
    pub calls: u32,
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Output tokens.
    pub tokens_out: u64,
    /// Prompt tokens read from a cache.
    pub tokens_cached: u64,
    /// USD of priced calls.
    pub cost_usd: f64,
    /// Whether any call's price was unknown (then `cost_usd` is a lower bound).
    pub cost_unknown: bool,
}

/// Options of [`Router::from_settings`].
#[derive(Debug, Clone, Default)]
pub struct RouterOptions {
    /// `--model` arguments, in order.
    pub model_flags: Vec<String>,
    /// `--record PATH`: write every reply in the script format.
    pub record: Option<PathBuf>,
    /// Continuing an interrupted run: its spend, time and calls so far.
    pub resume: Option<ResumeState>,
}

/// What a resumed run already used, so budgets stay hard across processes and a replayed
/// script continues where the run stopped.
#[derive(Debug, Clone, Default)]
pub struct ResumeState {
    /// Spend so far.
    pub spent: Spend,
    /// Wall-clock time the run has worked.
    pub elapsed: std::time::Duration,
    /// The role of every model call made so far, in order.
    pub roles: Vec<Role>,
    /// Usage per role and model so far.
    pub usage: Vec<(Role, String, UsageLine)>,
}

/// Routes each role's calls to its model, enforcing the run's budget.
pub struct Router {
    routes: BTreeMap<Role, (Route, Option<Route>)>,
    prices: PriceTable,
    budget: Mutex<Budget>,
    usage: Mutex<BTreeMap<(Role, String), UsageLine>>,
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Router")
            .field("routes", &self.routes)
            .finish_non_exhaustive()
    }
}

fn sha256_json<T: Serialize>(v: &T) -> String {
    let bytes = serde_json::to_vec(v).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

impl Router {
    /// An empty router; add routes with [`Router::route`].
    pub fn new(prices: PriceTable, budget: Budget) -> Self {
        Self {
            routes: BTreeMap::new(),
            prices,
            budget: Mutex::new(budget),
            usage: Mutex::new(BTreeMap::new()),
        }
    }

    /// Route `role` to `primary`, with `fallback` after the primary's retries are spent.
    pub fn route(mut self, role: Role, primary: Route, fallback: Option<Route>) -> Self {
        self.routes.insert(role, (primary, fallback));
        self
    }

    /// Build every role's route from config, `--model` flags and the environment; one client
    /// per distinct spec (so two roles on one script share its cursor). With `record`, every
    /// client's replies are written to that file.
    pub fn from_settings(
        settings: &Settings,
        opts: &RouterOptions,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let specs = role_specs(settings, &opts.model_flags)?;
        let recorder = match &opts.record {
            Some(p) => Some(Arc::new(Recorder::create(p)?)),
            None => None,
        };
        let mut clients: BTreeMap<ModelSpec, Arc<dyn ModelClient>> = BTreeMap::new();
        let mut client = |spec: &ModelSpec| -> Result<Route> {
            if let Some(c) = clients.get(spec) {
                return Ok(Route {
                    spec: spec.clone(),
                    client: c.clone(),
                });
            }
            let mut c = build_client(spec, settings, env)?;
            if let Some(r) = &recorder {
                c = Arc::new(RecordingClient::new(c, r.clone()));
            }
            clients.insert(spec.clone(), c.clone());
            Ok(Route {
                spec: spec.clone(),
                client: c,
            })
        };
        let budget = match &opts.resume {
            Some(r) => Budget::resumed(&settings.budget, r.spent, r.elapsed),
            None => Budget::new(&settings.budget),
        };
        let mut router = Router::new(PriceTable::new(settings.prices.clone()), budget);
        for (role, spec) in &specs {
            let primary = client(spec)?;
            let fallback = match settings.models.fallback.get(role.as_str()) {
                Some(f) => Some(client(&f.parse()?)?),
                None => None,
            };
            router.routes.insert(*role, (primary, fallback));
        }
        for key in settings.models.fallback.keys() {
            if key.parse::<Role>().is_err() {
                return Err(Error::Spec {
                    spec: format!("models.fallback.{key}"),
                    message: format!("unknown role `{key}`"),
                });
            }
        }
        if let Some(r) = &opts.resume {
            for role in &r.roles {
                if let Some((primary, _)) = router.routes.get(role) {
                    primary.client.skip_replayed(*role);
                }
            }
            let mut usage = router.usage.lock().unwrap_or_else(|p| p.into_inner());
            for (role, spec, line) in &r.usage {
                usage.insert((*role, spec.clone()), line.clone());
            }
        }
        Ok(router)
    }

    /// The spec a role is routed to.
    pub fn spec(&self, role: Role) -> Option<&ModelSpec> {
        self.routes.get(&role).map(|(p, _)| &p.spec)
    }

    /// Spend so far.
    pub fn spent(&self) -> Spend {
        self.budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spent()
    }

    /// Time since the run started (including a resumed run's earlier time): persist it with
    /// [`Router::spent`] so a resumed run keeps its budget.
    pub fn elapsed(&self) -> std::time::Duration {
        self.budget
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Usage per role and spec, in role order.
    pub fn usage(&self) -> Vec<(Role, String, UsageLine)> {
        self.usage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|((r, s), u)| (*r, s.clone(), u.clone()))
            .collect()
    }

    /// Ask `role`'s model. Checks every budget against the call's worst case first; falls back
    /// to the role's fallback model once the primary's retries are spent.
    pub async fn call(
        &self,
        role: Role,
        req: &Request,
        progress: Option<ProgressFn>,
    ) -> Result<CallOutcome> {
        let (primary, fallback) = self.routes.get(&role).ok_or_else(|| Error::NoModel {
            role: role.to_string(),
        })?;
        match self
            .call_route(role, primary, false, req, progress.clone())
            .await
        {
            Err(e @ Error::RetriesExhausted { .. }) => match fallback {
                Some(fb) => {
                    tracing::warn!(%role, primary = %primary.spec, fallback = %fb.spec, error = %e, "primary model failed; using the fallback");
                    if let Some(p) = &progress {
                        p(Progress::Fallback {
                            spec: fb.spec.to_string(),
                        });
                    }
                    self.call_route(role, fb, true, req, progress).await
                }
                None => Err(e),
            },
            other => other,
        }
    }

    async fn call_route(
        &self,
        role: Role,
        route: &Route,
        fallback: bool,
        req: &Request,
        progress: Option<ProgressFn>,
    ) -> Result<CallOutcome> {
        let provider = route.client.provider().to_string();
        let model = route.client.model().to_string();
        let prompt = req.estimate_prompt_tokens();
        let max_out = u64::from(req.max_tokens);
        let n = u64::from(route.client.requests_per_call(req).max(1));
        let worst = WorstCase {
            usd: self
                .prices
                .worst_case(&provider, &model, prompt, max_out)
                .map(|u| u * n as f64),
            tokens: (prompt + max_out) * n,
        };
        let (reservation, deadline) = {
            let mut b = self.budget.lock().unwrap_or_else(|p| p.into_inner());
            let r = b.reserve(worst).map_err(Error::BudgetExhausted)?;
            (r, b.deadline())
        };
        if worst.usd.is_none() {
            tracing::debug!(spec = %route.spec, "model has no price; its cost is unknown");
        }
        let ctx = CallContext {
            role,
            progress,
            deadline: Some(deadline),
        };
        let started = tokio::time::Instant::now();
        let result = route.client.complete(req, &ctx).await;
        let latency_ms = started.elapsed().as_millis() as u64;
        let mut budget = self.budget.lock().unwrap_or_else(|p| p.into_inner());
        let reply = match result {
            Ok(r) => r,
            Err(e) => {
                budget.release(reservation);
                // A call cut short by `max_minutes` ends the run as budget_exhausted.
                budget.check_time().map_err(Error::BudgetExhausted)?;
                return Err(e);
            }
        };
        let u = reply.usage;
        let cost = self.prices.cost(&provider, &model, &u);
        budget.settle(
            reservation,
            u.input_tokens,
            u.output_tokens,
            u.cached_input_tokens,
            cost,
        );
        drop(budget);
        let spec = route.spec.to_string();
        {
            let mut usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
            let line = usage.entry((role, spec.clone())).or_default();
            line.calls += 1;
            line.tokens_in += u.input_tokens;
            line.tokens_out += u.output_tokens;
            line.tokens_cached += u.cached_input_tokens;
            match cost {
                Some(c) => line.cost_usd += c,
                None => line.cost_unknown = true,
            }
        }
        let record = CallRecord {
            role,
            spec: spec.clone(),
            served_by: reply.model.clone(),
            fallback,
            tokens_in: u.input_tokens,
            tokens_out: u.output_tokens,
            tokens_cached: u.cached_input_tokens,
            usage_estimated: u.estimated,
            cost_usd: cost,
            latency_ms,
            stop: reply.stop.clone(),
            request_sha256: sha256_json(req),
            reply_sha256: sha256_json(&reply),
        };
        tracing::info!(%role, %spec, tokens_in = u.input_tokens, tokens_out = u.output_tokens, cost_usd = ?cost, latency_ms, "model call");
        Ok(CallOutcome {
            transcript: TranscriptEntry {
                role,
                spec,
                request: req.clone(),
                reply: reply.clone(),
            },
            reply,
            record,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        let s: ModelSpec = "openai:gpt-5".parse().unwrap();
        assert_eq!(s.provider, Provider::Openai);
        assert_eq!(s.to_string(), "openai:gpt-5");
        let s: ModelSpec = "scripted:/tmp/a:b.jsonl".parse().unwrap();
        assert_eq!(s.model, "/tmp/a:b.jsonl");
        assert!("gpt-5".parse::<ModelSpec>().is_err());
        assert!("mistral:x".parse::<ModelSpec>().is_err());
        assert!("openai:".parse::<ModelSpec>().is_err());
        let (r, s) = parse_assignment("planner=anthropic:claude-sonnet-4-5").unwrap();
        assert_eq!(r, Some(Role::Planner));
        assert_eq!(s.provider, Provider::Anthropic);
        let (r, s) = parse_assignment("scripted:/tmp/x=y.jsonl").unwrap();
        assert_eq!(r, None);
        assert_eq!(s.model, "/tmp/x=y.jsonl");
        assert!(parse_assignment("boss=openai:gpt-5").is_err());
    }

    #[test]
    fn flags_override_config_and_unset_roles_default_to_the_coder() {
        let mut s = Settings::default();
        s.models.planner = Some("anthropic:claude-sonnet-4-5".into());
        s.models.coder = Some("openai:gpt-5".into());
        let specs = role_specs(&s, &["reviewer=openai:gpt-5-mini".into()]).unwrap();
        assert_eq!(
            specs[&Role::Planner].to_string(),
            "anthropic:claude-sonnet-4-5"
        );
        assert_eq!(specs[&Role::Reviewer].to_string(), "openai:gpt-5-mini");
        assert_eq!(specs[&Role::Summarizer].to_string(), "openai:gpt-5");
        let specs = role_specs(&s, &["ollama:qwen3".into()]).unwrap();
        assert!(specs.values().all(|v| v.to_string() == "ollama:qwen3"));
    }

    #[test]
    fn missing_key_names_the_variable_and_env_sets_base_urls() {
        let s = Settings::default();
        let none = |_: &str| None;
        let e = build_client(&"openai:gpt-5".parse().unwrap(), &s, &none).unwrap_err();
        assert!(e.to_string().contains("OPENAI_API_KEY"), "{e}");
        let e =
            build_client(&"anthropic:claude-sonnet-4-5".parse().unwrap(), &s, &none).unwrap_err();
        assert!(e.to_string().contains("ANTHROPIC_API_KEY"), "{e}");
        // A compatible server needs no key.
        let env = |k: &str| (k == "OPENAI_BASE_URL").then(|| "http://127.0.0.1:9/v1".to_string());
        assert!(build_client(&"openai:local".parse().unwrap(), &s, &env).is_ok());
        assert!(build_client(&"ollama:qwen3".parse().unwrap(), &s, &none).is_ok());
    }
}
