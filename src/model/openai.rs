//! The OpenAI Chat Completions wire format, for OpenAI itself and compatible servers
//! (vLLM, llama.cpp's `llama-server`, Ollama, OpenRouter, LiteLLM).
//!
//! Compatibility handled here: `usage` missing from streams (estimated instead), tool-call
//! arguments split over many chunks, chunks without a tool-call `index` (matched by `id`),
//! arguments sent as a JSON object instead of a string, parallel tool calls, `finish_reason`
//! variants (`stop` with tool calls present, `eos`, `function_call`), a stream that ends after
//! its `finish_reason` without `[DONE]`, a server that ignores `stream: true` and answers with
//! one JSON document, `error` objects inside a stream, `reasoning_content` deltas (not part
//! of the answer), and servers that do not honour a tool forced by name (llama-server reads
//! the object form of `tool_choice` as "auto"), which get `"required"` with only that tool.

use futures_util::future::BoxFuture;
use secrecy::{ExposeSecret as _, SecretString};
use serde_json::{Value, json};

use super::ModelClient;
use super::error::Result;
use super::http::{self, Caller, SseParser};
use super::types::{
    CallContext, Message, Progress, Reply, Request, StopReason, ToolCall, ToolChoice, Usage,
};
use crate::config::ModelNetConfig;

/// The public OpenAI endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Settings of one OpenAI-compatible client.
#[derive(Clone, Debug)]
pub struct OpenAiOptions {
    /// Provider label for messages and records (`openai`, `ollama`).
    pub provider: String,
    /// Base URL up to and including `/v1`.
    pub base_url: String,
    /// Model name sent in each request.
    pub model: String,
    /// API key; `None` sends no `Authorization` header (local servers). A secret: its
    /// `Debug` is `[REDACTED]`.
    pub api_key: Option<SecretString>,
    /// The environment variable the key comes from, for error messages.
    pub key_var: String,
    /// Time-outs and retries.
    pub net: ModelNetConfig,
    /// Ask for a streamed reply (default); `false` asks for one JSON document.
    pub stream: bool,
}

/// A Chat Completions client.
#[derive(Debug)]
pub struct OpenAiClient {
    opts: OpenAiOptions,
    http: reqwest::Client,
    caller: Caller,
    /// The official endpoint: uses `max_completion_tokens` and omits `temperature` for
    /// reasoning models, which reject it.
    official: bool,
}

impl OpenAiClient {
    /// Build a client.
    pub fn new(opts: OpenAiOptions) -> Result<Self> {
        let http = http::client(&opts.net, &opts.provider)?;
        let base = opts.base_url.trim_end_matches('/');
        let caller = Caller {
            provider: opts.provider.clone(),
            model: opts.model.clone(),
            key_var: opts.key_var.clone(),
            url: format!("{base}/chat/completions"),
        };
        let official = base.starts_with("https://api.openai.com");
        Ok(Self {
            opts,
            http,
            caller,
            official,
        })
    }

    /// The JSON body for `req`.
    pub fn body(&self, req: &Request) -> Value {
        let mut messages = Vec::new();
        if let Some(s) = &req.system {
            messages.push(json!({"role": "system", "content": s}));
        }
        for m in &req.messages {
            messages.push(match m {
                Message::User { content } => json!({"role": "user", "content": content}),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut v = json!({"role": "assistant", "content": content});
                    if !tool_calls.is_empty() {
                        v["tool_calls"] = tool_calls
                            .iter()
                            .map(|c| {
                                json!({"id": c.id, "type": "function", "function": {
                                    "name": c.name, "arguments": arguments_text(&c.arguments)}})
                            })
                            .collect();
                    }
                    v
                }
                Message::ToolResult {
                    call_id,
                    content,
                    is_error,
                    ..
                } => {
                    // Chat Completions has no error flag on tool results; say it in the text.
                    let content = if *is_error {
                        format!("error: {content}")
                    } else {
                        content.clone()
                    };
                    json!({"role": "tool", "tool_call_id": call_id, "content": content})
                }
            });
        }
        let mut body = json!({
            "model": self.opts.model,
            "messages": messages,
            "stream": self.opts.stream,
        });
        if self.opts.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        let reasoning = self.official && is_reasoning_model(&self.opts.model);
        if self.official {
            body["max_completion_tokens"] = json!(req.max_tokens);
        } else {
            body["max_tokens"] = json!(req.max_tokens);
        }
        if let Some(t) = req.temperature.filter(|_| !reasoning) {
            body["temperature"] = json!(t);
        }
        if let Some((name, schema)) = &req.json_schema {
            body["response_format"] = json!({"type": "json_schema", "json_schema": {
                "name": name, "schema": schema, "strict": true}});
        }
        if !req.tools.is_empty() {
            // Forcing one tool by name (`{"type":"function",…}`) is OpenAI's form; llama-server
            // silently reads it as "auto" and other servers vary. "required" with only that
            // tool on offer means the same everywhere, so compatible servers get that.
            let forced = match &req.tool_choice {
                ToolChoice::Tool(name) if !self.official => Some(name.as_str()),
                _ => None,
            };
            body["tools"] = req
                .tools
                .iter()
                .filter(|t| forced.is_none_or(|f| f == t.name))
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
            body["tool_choice"] = match &req.tool_choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(_) if forced.is_some() => json!("required"),
                ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
            };
        }
        body
    }

    async fn attempt(&self, req: &Request, ctx: &CallContext) -> Result<Reply> {
        let mut rb = self
            .http
            .post(&self.caller.url)
            .header("content-type", "application/json")
            .header(
                "accept",
                if self.opts.stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .body(self.body(req).to_string());
        if let Some(k) = &self.opts.api_key {
            rb = rb.bearer_auth(k.expose_secret());
        }
        let resp = self.caller.send(rb).await?;
        if !http::is_event_stream(&resp) {
            let text = resp.text().await.map_err(|e| self.caller.transport(&e))?;
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| self.caller.protocol(format!("reply is not JSON: {e}")))?;
            return self.read_document(&v, req);
        }
        let chunk_timeout = http::secs(self.opts.net.chunk_timeout_s, 120.0);
        let mut stream = resp.bytes_stream();
        let mut parser = SseParser::default();
        let mut acc = Accumulator::default();
        while let Some(bytes) = http::next_chunk(&mut stream, chunk_timeout, &self.caller).await? {
            for ev in parser.feed(&bytes) {
                if acc.event(&ev.data, ctx, &self.caller)? {
                    return Ok(acc.finish(req, &self.opts.model));
                }
            }
        }
        if let Some(ev) = parser.finish()
            && acc.event(&ev.data, ctx, &self.caller)?
        {
            return Ok(acc.finish(req, &self.opts.model));
        }
        if acc.finish_reason.is_some() {
            // Some servers close the stream after the final chunk without `[DONE]`.
            tracing::debug!(url = %self.caller.url, "stream ended without [DONE] after finish_reason");
            return Ok(acc.finish(req, &self.opts.model));
        }
        Err(self.caller.transient(format!(
            "stream from {} ended before the reply was complete",
            self.caller.url
        )))
    }

    fn read_document(&self, v: &Value, req: &Request) -> Result<Reply> {
        if v.get("error").is_some() {
            return Err(self.caller.transient(format!(
                "error in reply: {}",
                http::error_message(&v.to_string())
            )));
        }
        let choice = v["choices"]
            .get(0)
            .ok_or_else(|| self.caller.protocol("reply has no choices"))?;
        let msg = &choice["message"];
        let mut acc = Accumulator {
            text: msg["content"].as_str().unwrap_or_default().to_string(),
            finish_reason: choice["finish_reason"].as_str().map(str::to_string),
            usage: parse_usage(&v["usage"]),
            model: v["model"].as_str().map(str::to_string),
            ..Accumulator::default()
        };
        for c in msg["tool_calls"].as_array().into_iter().flatten() {
            acc.calls.push(Partial {
                id: c["id"].as_str().unwrap_or_default().to_string(),
                name: c["function"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                args: arguments_of(&c["function"]["arguments"]),
            });
        }
        Ok(acc.finish(req, &self.opts.model))
    }
}

impl ModelClient for OpenAiClient {
    fn provider(&self) -> &str {
        &self.opts.provider
    }

    fn model(&self) -> &str {
        &self.opts.model
    }

    fn complete<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Reply>> {
        Box::pin(async move {
            let reply = http::with_retries(&self.opts.net, &self.caller, ctx, move || {
                self.attempt(req, ctx)
            })
            .await?;
            match self.forced_tool(req) {
                Some(tool) if reply.tool_calls.is_empty() => {
                    self.forced_by_schema(req, ctx, tool, reply).await
                }
                _ => Ok(reply),
            }
        })
    }

    fn requests_per_call(&self, req: &Request) -> u32 {
        if self.forced_tool(req).is_some() {
            2
        } else {
            1
        }
    }
}

impl OpenAiClient {
    /// The tool a request forces, when a compatible server (not OpenAI itself, which honours
    /// the named form) is asked.
    fn forced_tool<'r>(&self, req: &'r Request) -> Option<&'r crate::model::ToolSpec> {
        match &req.tool_choice {
            ToolChoice::Tool(name) if !self.official && req.json_schema.is_none() => {
                req.tools.iter().find(|t| t.name == *name)
            }
            _ => None,
        }
    }

    /// A compatible server answered a forced tool with text (llama.cpp's forcing grammar lets
    /// a model write prose first; others ignore `tool_choice`): ask once more for the tool's
    /// arguments as JSON constrained to its schema (`response_format`, which such servers
    /// enforce with a grammar) and return them as the call. Usage adds up both requests.
    /// When the second answer is not that JSON either, the first reply stands.
    async fn forced_by_schema(
        &self,
        req: &Request,
        ctx: &CallContext,
        tool: &crate::model::ToolSpec,
        first: Reply,
    ) -> Result<Reply> {
        let mut again = req.clone();
        again.tools.clear();
        again.tool_choice = ToolChoice::Auto;
        again.json_schema = Some((tool.name.clone(), tool.parameters.clone()));
        again.messages.push(Message::user(format!(
            "Answer with only the JSON arguments for the tool `{}`.",
            tool.name
        )));
        let again_ref = &again;
        let second = http::with_retries(&self.opts.net, &self.caller, ctx, move || {
            self.attempt(again_ref, ctx)
        })
        .await?;
        let mut usage = first.usage;
        usage.input_tokens += second.usage.input_tokens;
        usage.output_tokens += second.usage.output_tokens;
        usage.cached_input_tokens += second.usage.cached_input_tokens;
        usage.estimated |= second.usage.estimated;
        match serde_json::from_str::<Value>(second.content.trim()) {
            Ok(args @ Value::Object(_)) => {
                tracing::debug!(tool = %tool.name, "forced tool answered by schema-constrained JSON");
                Ok(Reply {
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: format!("call_{}", ulid::Ulid::generate()),
                        name: tool.name.clone(),
                        arguments: args,
                    }],
                    usage,
                    stop: StopReason::ToolUse,
                    model: second.model,
                })
            }
            _ => Ok(Reply { usage, ..first }),
        }
    }
}

/// o-series and gpt-5 models reject `temperature` other than the default.
fn is_reasoning_model(model: &str) -> bool {
    let m = model.rsplit('/').next().unwrap_or(model);
    m.starts_with("o1") || m.starts_with("o3") || m.starts_with("o4") || m.starts_with("gpt-5")
}

/// Arguments as the wire wants them: a JSON text. Unparsed text stays as it was.
fn arguments_text(v: &Value) -> String {
    match v {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// Argument text from a chunk: normally a string; some servers send the object itself.
fn arguments_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn parse_usage(u: &Value) -> Option<Usage> {
    let input = u["prompt_tokens"].as_u64()?;
    Some(Usage {
        input_tokens: input,
        output_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
        cached_input_tokens: u["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0),
        cache_write_tokens: 0,
        estimated: false,
    })
}

#[derive(Debug, Default)]
struct Partial {
    id: String,
    name: String,
    args: String,
}

/// The reply as it streams in.
#[derive(Debug, Default)]
struct Accumulator {
    text: String,
    calls: Vec<Partial>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
}

impl Accumulator {
    /// Take one event's data; `true` at `[DONE]`.
    fn event(&mut self, data: &str, ctx: &CallContext, caller: &Caller) -> Result<bool> {
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| caller.protocol(format!("stream chunk is not JSON ({e}): {data}")))?;
        if v.get("error").is_some() {
            // OpenRouter and llama-server report failures inside the stream.
            return Err(caller.transient(format!(
                "error inside the stream: {}",
                http::error_message(data)
            )));
        }
        if let Some(m) = v["model"].as_str().filter(|m| !m.is_empty()) {
            self.model = Some(m.to_string());
        }
        if let Some(u) = parse_usage(&v["usage"]) {
            self.usage = Some(u);
        }
        for choice in v["choices"].as_array().into_iter().flatten() {
            if choice["index"].as_u64().unwrap_or(0) != 0 {
                continue;
            }
            let delta = &choice["delta"];
            if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
                self.text.push_str(t);
                ctx.report(Progress::Text(t.to_string()));
            }
            for tc in delta["tool_calls"].as_array().into_iter().flatten() {
                self.tool_delta(tc, ctx);
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                self.finish_reason = Some(f.to_string());
            }
        }
        Ok(false)
    }

    fn tool_delta(&mut self, tc: &Value, ctx: &CallContext) {
        let id = tc["id"].as_str().filter(|s| !s.is_empty());
        let index = match tc["index"].as_u64() {
            Some(i) => i as usize,
            // No index (some servers): a new id starts a new call, else continue the last.
            None => match (id, self.calls.last()) {
                (Some(id), Some(last)) if last.id == id => self.calls.len() - 1,
                (None, Some(_)) => self.calls.len() - 1,
                _ => self.calls.len(),
            },
        };
        while self.calls.len() <= index {
            self.calls.push(Partial::default());
        }
        let call = &mut self.calls[index];
        if let Some(id) = id
            && call.id.is_empty()
        {
            call.id = id.to_string();
        }
        let f = &tc["function"];
        if let Some(name) = f["name"].as_str().filter(|s| !s.is_empty())
            && call.name.is_empty()
        {
            call.name = name.to_string();
            ctx.report(Progress::ToolCall {
                name: name.to_string(),
            });
        }
        match &f["arguments"] {
            Value::String(s) => call.args.push_str(s),
            Value::Null => {}
            // A whole object in one chunk replaces what came before.
            other => call.args = other.to_string(),
        }
    }

    fn finish(self, req: &Request, model: &str) -> Reply {
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .filter(|c| !c.name.is_empty())
            .enumerate()
            .map(|(i, c)| ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{i}")
                } else {
                    c.id
                },
                name: c.name,
                arguments: http::parse_arguments(&c.args),
            })
            .collect();
        let mut stop = match self.finish_reason.as_deref() {
            Some("stop") | Some("eos") | Some("end_turn") => StopReason::EndTurn,
            Some("tool_calls") | Some("function_call") | Some("tool_use") => StopReason::ToolUse,
            Some("length") | Some("max_tokens") => StopReason::MaxTokens,
            Some("content_filter") => StopReason::ContentFilter,
            Some(other) => StopReason::Other(other.to_string()),
            None => StopReason::Unknown,
        };
        if !tool_calls.is_empty() && matches!(stop, StopReason::EndTurn | StopReason::Unknown) {
            // vLLM and Ollama report `stop` even when the reply is tool calls.
            stop = StopReason::ToolUse;
        }
        let usage = self.usage.unwrap_or_else(|| {
            let out_bytes = self.text.len()
                + tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.to_string().len())
                    .sum::<usize>();
            Usage {
                input_tokens: req.estimate_prompt_tokens(),
                output_tokens: (out_bytes as u64).div_ceil(3),
                cached_input_tokens: 0,
                cache_write_tokens: 0,
                estimated: true,
            }
        });
        Reply {
            content: self.text,
            tool_calls,
            usage,
            stop,
            model: self.model.unwrap_or_else(|| model.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::types::ToolSpec;

    fn client(base: &str, model: &str) -> OpenAiClient {
        OpenAiClient::new(OpenAiOptions {
            provider: "openai".into(),
            base_url: base.into(),
            model: model.into(),
            api_key: Some("k".into()),
            key_var: "OPENAI_API_KEY".into(),
            net: ModelNetConfig::default(),
            stream: true,
        })
        .unwrap()
    }

    fn req() -> Request {
        let mut r = Request::new(vec![Message::user("hi")], 77);
        r.temperature = Some(0.3);
        r.tools = ["a", "b"]
            .into_iter()
            .map(|n| ToolSpec {
                name: n.into(),
                description: n.into(),
                parameters: json!({"type": "object"}),
            })
            .collect();
        r.tool_choice = ToolChoice::Tool("b".into());
        r
    }

    #[test]
    fn official_endpoint_gets_openai_forms() {
        let b = client(DEFAULT_BASE_URL, "gpt-5-mini").body(&req());
        assert_eq!(b["max_completion_tokens"], 77);
        assert!(b.get("max_tokens").is_none());
        assert!(b.get("temperature").is_none(), "reasoning models reject it");
        assert_eq!(
            b["tool_choice"],
            json!({"type": "function", "function": {"name": "b"}})
        );
        assert_eq!(b["tools"].as_array().map(Vec::len), Some(2));
        let b = client(DEFAULT_BASE_URL, "gpt-4o").body(&req());
        assert!((b["temperature"].as_f64().unwrap_or_default() - 0.3).abs() < 1e-6);
    }

    #[test]
    fn compatible_server_gets_portable_forms() {
        let b = client("http://127.0.0.1:8080/v1", "gpt-5-mini").body(&req());
        assert_eq!(b["max_tokens"], 77);
        assert!(b.get("temperature").is_some());
        assert_eq!(b["tool_choice"], "required");
        assert_eq!(b["tools"].as_array().map(Vec::len), Some(1));
        assert_eq!(b["tools"][0]["function"]["name"], "b");
    }
}
