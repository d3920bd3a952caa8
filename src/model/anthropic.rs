//! Anthropic's Messages API: `tool_use`/`tool_result` blocks, the `anthropic-version` header,
//! prompt caching (breakpoints on the tools, the system prompt and the newest message; the
//! usage's `cache_read_input_tokens`/`cache_creation_input_tokens`), and `overloaded_error`
//! (HTTP 529, or an `error` event inside the stream), which is retried.

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

/// The public Anthropic endpoint (without `/v1`, as `ANTHROPIC_BASE_URL` is written).
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The API version this client speaks.
pub const API_VERSION: &str = "2023-06-01";

/// Settings of one Anthropic client.
#[derive(Clone, Debug)]
pub struct AnthropicOptions {
    /// Base URL, with or without a trailing `/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// API key (sent as `x-api-key`; `None` sends none, for local compatible servers). A
    /// secret: its `Debug` is `[REDACTED]`.
    pub api_key: Option<SecretString>,
    /// The environment variable the key comes from, for error messages.
    pub key_var: String,
    /// Time-outs and retries.
    pub net: ModelNetConfig,
    /// Ask for a streamed reply (default).
    pub stream: bool,
}

/// A Messages API client.
#[derive(Debug)]
pub struct AnthropicClient {
    opts: AnthropicOptions,
    http: reqwest::Client,
    caller: Caller,
    /// Anthropic's own endpoint (not a compatible proxy or server).
    official: bool,
}

impl AnthropicClient {
    /// Build a client.
    pub fn new(opts: AnthropicOptions) -> Result<Self> {
        let http = http::client(&opts.net, "anthropic")?;
        let base = opts.base_url.trim_end_matches('/');
        let url = if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        };
        let caller = Caller {
            provider: "anthropic".into(),
            model: opts.model.clone(),
            key_var: opts.key_var.clone(),
            url,
        };
        let official = base.starts_with(DEFAULT_BASE_URL);
        Ok(Self {
            opts,
            http,
            caller,
            official,
        })
    }

    /// The JSON body for `req`.
    pub fn body(&self, req: &Request) -> Value {
        let cache = json!({"type": "ephemeral"});
        // Consecutive messages of one role merge into one message of blocks, as the API wants.
        let mut messages: Vec<(&str, Vec<Value>)> = Vec::new();
        for m in &req.messages {
            let (role, blocks): (&str, Vec<Value>) = match m {
                Message::User { content } if content.is_empty() => continue,
                Message::User { content } => {
                    ("user", vec![json!({"type": "text", "text": content})])
                }
                Message::ToolResult {
                    call_id,
                    content,
                    is_error,
                    ..
                } => (
                    "user",
                    vec![json!({"type": "tool_result", "tool_use_id": call_id,
                                "content": content, "is_error": is_error})],
                ),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut b = Vec::new();
                    if let Some(t) = content.as_ref().filter(|t| !t.is_empty()) {
                        b.push(json!({"type": "text", "text": t}));
                    }
                    for c in tool_calls {
                        // `input` must be an object; unparsed argument text cannot be one.
                        let input = if c.arguments.is_object() {
                            c.arguments.clone()
                        } else {
                            json!({})
                        };
                        b.push(
                            json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                        );
                    }
                    if b.is_empty() {
                        continue;
                    }
                    ("assistant", b)
                }
            };
            match messages.last_mut() {
                Some((r, bs)) if *r == role => bs.extend(blocks),
                _ => messages.push((role, blocks)),
            }
        }
        // In a user message, tool results come before any text.
        for (role, blocks) in &mut messages {
            if *role == "user" {
                blocks.sort_by_key(|b| b["type"] != "tool_result");
            }
        }
        if let Some(last) = messages.last_mut().and_then(|(_, b)| b.last_mut()) {
            last["cache_control"] = cache.clone();
        }
        let messages: Vec<Value> = messages
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect();
        let mut body = json!({
            "model": self.opts.model,
            "max_tokens": req.max_tokens,
            "messages": messages,
            "stream": self.opts.stream,
        });
        if let Some(s) = req.system.as_ref().filter(|s| !s.is_empty()) {
            body["system"] = json!([{"type": "text", "text": s, "cache_control": cache}]);
        }
        if let Some(t) = req.temperature {
            body["temperature"] = json!(t);
        }
        if !req.tools.is_empty() {
            // Compatible servers (llama-server's /v1/messages) read `{"type":"tool"}` as "any
            // tool"; offering only the forced tool makes that mean the same everywhere.
            let forced = match &req.tool_choice {
                ToolChoice::Tool(name) if !self.official => Some(name.as_str()),
                _ => None,
            };
            let mut tools: Vec<Value> = req
                .tools
                .iter()
                .filter(|t| forced.is_none_or(|f| f == t.name))
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
            if let Some(last) = tools.last_mut() {
                last["cache_control"] = cache;
            }
            body["tools"] = Value::Array(tools);
            body["tool_choice"] = match &req.tool_choice {
                ToolChoice::Auto => json!({"type": "auto"}),
                ToolChoice::None => json!({"type": "none"}),
                ToolChoice::Required => json!({"type": "any"}),
                ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
            };
        }
        body
    }

    async fn attempt(&self, req: &Request, ctx: &CallContext) -> Result<Reply> {
        let rb = self
            .http
            .post(&self.caller.url)
            .header("content-type", "application/json")
            .header("anthropic-version", API_VERSION)
            .body(self.body(req).to_string());
        let rb = if let Some(key) = &self.opts.api_key {
            rb.header("x-api-key", key.expose_secret())
        } else {
            rb
        };
        let resp = self.caller.send(rb).await?;
        if !http::is_event_stream(&resp) {
            let text = resp.text().await.map_err(|e| self.caller.transport(&e))?;
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| self.caller.protocol(format!("reply is not JSON: {e}")))?;
            return self.read_document(&v);
        }
        let chunk_timeout = http::secs(self.opts.net.chunk_timeout_s, 120.0);
        let mut stream = resp.bytes_stream();
        let mut parser = SseParser::default();
        let mut acc = Accumulator::default();
        while let Some(bytes) = http::next_chunk(&mut stream, chunk_timeout, &self.caller).await? {
            for ev in parser.feed(&bytes) {
                if acc.event(&ev.data, ctx, &self.caller)? {
                    return acc.finish(&self.opts.model, &self.caller);
                }
            }
        }
        if let Some(ev) = parser.finish()
            && acc.event(&ev.data, ctx, &self.caller)?
        {
            return acc.finish(&self.opts.model, &self.caller);
        }
        if acc.stop_reason.is_some() {
            return acc.finish(&self.opts.model, &self.caller);
        }
        Err(self.caller.transient(format!(
            "stream from {} ended before message_stop",
            self.caller.url
        )))
    }

    fn read_document(&self, v: &Value) -> Result<Reply> {
        if v["type"] == "error" {
            return Err(self.caller.transient(http::error_message(&v.to_string())));
        }
        let mut acc = Accumulator {
            stop_reason: v["stop_reason"].as_str().map(str::to_string),
            model: v["model"].as_str().map(str::to_string),
            ..Accumulator::default()
        };
        acc.usage(&v["usage"]);
        for b in v["content"].as_array().into_iter().flatten() {
            acc.blocks.push(match b["type"].as_str() {
                Some("text") => Block::Text(b["text"].as_str().unwrap_or_default().to_string()),
                Some("tool_use") => Block::Tool {
                    id: b["id"].as_str().unwrap_or_default().to_string(),
                    name: b["name"].as_str().unwrap_or_default().to_string(),
                    json: b["input"].to_string(),
                },
                _ => Block::Other,
            });
        }
        acc.finish(&self.opts.model, &self.caller)
    }
}

impl ModelClient for AnthropicClient {
    fn provider(&self) -> &str {
        "anthropic"
    }

    fn model(&self) -> &str {
        &self.opts.model
    }

    fn complete<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Reply>> {
        Box::pin(http::with_retries(
            &self.opts.net,
            &self.caller,
            ctx,
            move || self.attempt(req, ctx),
        ))
    }
}

#[derive(Debug)]
enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

#[derive(Debug, Default)]
struct Accumulator {
    blocks: Vec<Block>,
    stop_reason: Option<String>,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    saw_usage: bool,
    model: Option<String>,
}

impl Accumulator {
    fn usage(&mut self, u: &Value) {
        if !u.is_object() {
            return;
        }
        self.saw_usage = true;
        // Counts are cumulative; a later event's value replaces an earlier one.
        if let Some(n) = u["input_tokens"].as_u64().filter(|n| *n > 0) {
            self.input = n;
        }
        if let Some(n) = u["output_tokens"].as_u64() {
            self.output = self.output.max(n);
        }
        if let Some(n) = u["cache_read_input_tokens"].as_u64().filter(|n| *n > 0) {
            self.cache_read = n;
        }
        if let Some(n) = u["cache_creation_input_tokens"].as_u64().filter(|n| *n > 0) {
            self.cache_write = n;
        }
    }

    /// Take one event; `true` at `message_stop`.
    fn event(&mut self, data: &str, ctx: &CallContext, caller: &Caller) -> Result<bool> {
        let v: Value = serde_json::from_str(data.trim())
            .map_err(|e| caller.protocol(format!("stream event is not JSON ({e}): {data}")))?;
        match v["type"].as_str() {
            Some("message_start") => {
                let m = &v["message"];
                self.model = m["model"].as_str().map(str::to_string);
                self.usage(&m["usage"]);
            }
            Some("content_block_start") => {
                let i = v["index"].as_u64().unwrap_or(self.blocks.len() as u64) as usize;
                let b = &v["content_block"];
                let block = match b["type"].as_str() {
                    Some("text") => Block::Text(b["text"].as_str().unwrap_or_default().to_string()),
                    Some("tool_use") => {
                        let name = b["name"].as_str().unwrap_or_default().to_string();
                        ctx.report(Progress::ToolCall { name: name.clone() });
                        Block::Tool {
                            id: b["id"].as_str().unwrap_or_default().to_string(),
                            name,
                            json: String::new(),
                        }
                    }
                    _ => Block::Other,
                };
                while self.blocks.len() < i {
                    self.blocks.push(Block::Other);
                }
                if i < self.blocks.len() {
                    self.blocks[i] = block;
                } else {
                    self.blocks.push(block);
                }
            }
            Some("content_block_delta") => {
                let i = v["index"].as_u64().unwrap_or(0) as usize;
                let d = &v["delta"];
                match (self.blocks.get_mut(i), d["type"].as_str()) {
                    (Some(Block::Text(t)), Some("text_delta")) => {
                        let piece = d["text"].as_str().unwrap_or_default();
                        t.push_str(piece);
                        ctx.report(Progress::Text(piece.to_string()));
                    }
                    (Some(Block::Tool { json, .. }), Some("input_json_delta")) => {
                        json.push_str(d["partial_json"].as_str().unwrap_or_default());
                    }
                    (None, _) => {
                        return Err(caller.protocol(format!("delta for unknown content block {i}")));
                    }
                    _ => {}
                }
            }
            Some("message_delta") => {
                if let Some(s) = v["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(s.to_string());
                }
                self.usage(&v["usage"]);
            }
            Some("message_stop") => return Ok(true),
            Some("error") => {
                return Err(caller.transient(format!(
                    "error inside the stream: {}",
                    http::error_message(data)
                )));
            }
            _ => {} // ping, content_block_stop, future event types
        }
        Ok(false)
    }

    fn finish(self, model: &str, caller: &Caller) -> Result<Reply> {
        let mut content = String::new();
        let mut tool_calls = Vec::new();
        for b in self.blocks {
            match b {
                Block::Text(t) => content.push_str(&t),
                Block::Tool { id, name, json } => {
                    if name.is_empty() {
                        return Err(caller.protocol("tool_use block without a name"));
                    }
                    tool_calls.push(ToolCall {
                        id,
                        name,
                        arguments: http::parse_arguments(&json),
                    });
                }
                Block::Other => {}
            }
        }
        let stop = match self.stop_reason.as_deref() {
            Some("end_turn") => StopReason::EndTurn,
            Some("tool_use") => StopReason::ToolUse,
            Some("max_tokens") => StopReason::MaxTokens,
            Some("stop_sequence") => StopReason::StopSequence,
            Some("refusal") => StopReason::ContentFilter,
            Some(other) => StopReason::Other(other.to_string()),
            None => StopReason::Unknown,
        };
        Ok(Reply {
            content,
            tool_calls,
            usage: Usage {
                input_tokens: self.input + self.cache_read + self.cache_write,
                output_tokens: self.output,
                cached_input_tokens: self.cache_read,
                cache_write_tokens: self.cache_write,
                estimated: !self.saw_usage,
            },
            stop,
            model: self.model.unwrap_or_else(|| model.to_string()),
        })
    }
}
