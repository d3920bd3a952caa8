//! The Chat Completions client against a loopback server speaking OpenAI's documented format.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use git_agent::config::ModelNetConfig;
use git_agent::model::openai::{OpenAiClient, OpenAiOptions};
use git_agent::model::{
    CallContext, Error, Message, ModelClient, Progress, Request, Role, StopReason, ToolCall,
    ToolChoice, ToolSpec,
};
use serde_json::{Value, json};

use super::server::{Canned, Server, data_events};

pub fn net() -> ModelNetConfig {
    ModelNetConfig {
        connect_timeout_s: 2.0,
        chunk_timeout_s: 5.0,
        request_timeout_s: 20.0,
        max_retries: 2,
        backoff_base_s: 0.01,
        backoff_max_s: 0.05,
    }
}

pub fn client(url: &str, model: &str, stream: bool, net: ModelNetConfig) -> OpenAiClient {
    OpenAiClient::new(OpenAiOptions {
        provider: "openai".into(),
        base_url: url.into(),
        model: model.into(),
        api_key: Some("sk-test-123".into()),
        key_var: "OPENAI_API_KEY".into(),
        net,
        stream,
    })
    .unwrap()
}

fn chunk(delta: Value, finish: Value) -> Value {
    json!({"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
           "model": "gpt-4o-mini-2024-07-18", "system_fingerprint": "fp_44709d6fcb",
           "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
}

fn usage_chunk(prompt: u64, completion: u64, cached: u64) -> Value {
    json!({"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1694268190,
           "model": "gpt-4o-mini-2024-07-18", "choices": [],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion,
                     "prompt_tokens_details": {"cached_tokens": cached}}})
}

fn done(mut events: Vec<String>) -> Vec<String> {
    events.push("data: [DONE]\n\n".into());
    events
}

/// A text stream as OpenAI documents it: role delta, content deltas, finish, usage, [DONE].
pub fn text_stream(words: &[&str], prompt: u64, completion: u64) -> Canned {
    let mut ev = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for w in words {
        ev.push(chunk(json!({"content": w}), Value::Null));
    }
    ev.push(chunk(json!({}), json!("stop")));
    ev.push(usage_chunk(prompt, completion, 0));
    Canned::sse(done(data_events(&ev)))
}

/// Tool calls streamed the way OpenAI does: id and name first, arguments in small pieces.
pub fn tool_stream(calls: &[(&str, &str, Value)], prompt: u64, completion: u64) -> Canned {
    let mut ev = vec![chunk(
        json!({"role": "assistant", "content": null}),
        Value::Null,
    )];
    for (i, (id, name, args)) in calls.iter().enumerate() {
        ev.push(chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                                  "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        let text = args.to_string();
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(3) {
            let s: String = piece.iter().collect();
            ev.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": s}}]}),
                Value::Null,
            ));
        }
    }
    ev.push(chunk(json!({}), json!("tool_calls")));
    ev.push(usage_chunk(prompt, completion, 0));
    Canned::sse(done(data_events(&ev)))
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Current weather in a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}),
    }
}

fn collect_progress() -> (Arc<Mutex<Vec<Progress>>>, CallContext) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let mut ctx = CallContext::new(Role::Coder);
    ctx.progress = Some(Arc::new(move |p| s.lock().unwrap().push(p)));
    (seen, ctx)
}

#[tokio::test]
async fn non_streaming_reply_is_parsed_and_the_request_is_well_formed() {
    let server = Server::start(vec![Canned::json(
        200,
        json!({"id": "chatcmpl-abc123", "object": "chat.completion", "created": 1699896916,
               "model": "gpt-4o-mini", "choices": [{"index": 0, "message": {
                   "role": "assistant", "content": null, "tool_calls": [{
                       "id": "call_abc123", "type": "function", "function": {
                           "name": "get_weather", "arguments": "{\n\"city\": \"Boston\"\n}"}}]},
                   "logprobs": null, "finish_reason": "tool_calls"}],
               "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99,
                         "prompt_tokens_details": {"cached_tokens": 64}}}),
    )])
    .await;
    let c = client(&server.url(), "gpt-4o-mini", false, net());
    let mut req = Request::new(vec![Message::user("Weather in Boston?")], 256);
    req.system = Some("You are terse.".into());
    let mut other = weather_tool();
    other.name = "get_time".into();
    req.tools = vec![weather_tool(), other];
    req.tool_choice = ToolChoice::Tool("get_weather".into());
    req.temperature = Some(0.2);
    let reply = c
        .complete(&req, &CallContext::new(Role::Coder))
        .await
        .unwrap();
    assert_eq!(
        reply.tool_calls,
        vec![ToolCall {
            id: "call_abc123".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Boston"}),
        }]
    );
    assert_eq!(reply.stop, StopReason::ToolUse);
    assert_eq!(reply.usage.input_tokens, 82);
    assert_eq!(reply.usage.cached_input_tokens, 64);
    assert!(!reply.usage.estimated);

    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.headers["authorization"], "Bearer sk-test-123");
    assert_eq!(r.headers["content-type"], "application/json");
    assert_eq!(r.body["model"], "gpt-4o-mini");
    assert_eq!(r.body["stream"], false);
    assert_eq!(r.body["max_tokens"], 256);
    assert!((r.body["temperature"].as_f64().unwrap() - 0.2).abs() < 1e-6);
    assert_eq!(
        r.body["messages"][0],
        json!({"role": "system", "content": "You are terse."})
    );
    assert_eq!(
        r.body["messages"][1],
        json!({"role": "user", "content": "Weather in Boston?"})
    );
    assert_eq!(
        r.body["tools"],
        json!([{"type": "function", "function": {"name": "get_weather",
                "description": "Current weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                               "required": ["city"]}}}])
    );
    // A compatible server gets the forced tool as "required" with only that tool on offer.
    assert_eq!(r.body["tool_choice"], "required");
}

#[tokio::test]
async fn streamed_text_reports_progress_and_usage() {
    let server = Server::start(vec![text_stream(&["Hel", "lo", ", world"], 12, 4)]).await;
    let c = client(&server.url(), "gpt-4o-mini", true, net());
    let (seen, ctx) = collect_progress();
    let reply = c
        .complete(&Request::new(vec![Message::user("hi")], 50), &ctx)
        .await
        .unwrap();
    assert_eq!(reply.content, "Hello, world");
    assert_eq!(reply.stop, StopReason::EndTurn);
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (12, 4)
    );
    assert_eq!(reply.model, "gpt-4o-mini-2024-07-18");
    let texts: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|p| match p {
            Progress::Text(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, vec!["Hel", "lo", ", world"]);
    let body = &server.requests()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(server.requests()[0].headers["accept"], "text/event-stream");
}

#[tokio::test]
async fn parallel_tool_calls_split_over_many_chunks_and_results_thread_back_in_order() {
    let server = Server::start(vec![tool_stream(
        &[
            (
                "call_1",
                "read_file",
                json!({"path": "src/lib.rs", "start_line": 1}),
            ),
            (
                "call_2",
                "search",
                json!({"pattern": "fn main\\(", "glob": "*.rs"}),
            ),
        ],
        100,
        40,
    )])
    .await;
    let c = client(&server.url(), "gpt-4o", true, net());
    let (seen, ctx) = collect_progress();
    // The request threads back an earlier turn: two calls and their two results, in order.
    let earlier = vec![
        ToolCall {
            id: "call_a".into(),
            name: "list_files".into(),
            arguments: json!({}),
        },
        ToolCall {
            id: "call_b".into(),
            name: "read_file".into(),
            arguments: json!({"path": "README.md"}),
        },
    ];
    let req = Request::new(
        vec![
            Message::user("fix it"),
            Message::Assistant {
                content: Some("Looking.".into()),
                tool_calls: earlier,
            },
            Message::ToolResult {
                call_id: "call_a".into(),
                name: "list_files".into(),
                content: "src/\nREADME.md".into(),
                is_error: false,
            },
            Message::ToolResult {
                call_id: "call_b".into(),
                name: "read_file".into(),
                content: "no such file".into(),
                is_error: true,
            },
        ],
        500,
    );
    let reply = c.complete(&req, &ctx).await.unwrap();
    assert_eq!(reply.stop, StopReason::ToolUse);
    assert_eq!(reply.tool_calls.len(), 2);
    assert_eq!(reply.tool_calls[0].id, "call_1");
    assert_eq!(
        reply.tool_calls[0].arguments,
        json!({"path": "src/lib.rs", "start_line": 1})
    );
    assert_eq!(reply.tool_calls[1].name, "search");
    assert_eq!(
        reply.tool_calls[1].arguments,
        json!({"pattern": "fn main\\(", "glob": "*.rs"})
    );
    let names: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|p| match p {
            Progress::ToolCall { name } => Some(name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(names, vec!["read_file", "search"]);

    let m = &server.requests()[0].body["messages"];
    assert_eq!(m[1]["role"], "assistant");
    assert_eq!(m[1]["content"], "Looking.");
    assert_eq!(m[1]["tool_calls"][0]["id"], "call_a");
    assert_eq!(m[1]["tool_calls"][0]["function"]["arguments"], "{}");
    assert_eq!(m[1]["tool_calls"][1]["function"]["name"], "read_file");
    assert_eq!(
        m[1]["tool_calls"][1]["function"]["arguments"],
        "{\"path\":\"README.md\"}"
    );
    assert_eq!(
        m[2],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "src/\nREADME.md"})
    );
    assert_eq!(m[3]["tool_call_id"], "call_b");
    assert_eq!(m[3]["content"], "error: no such file");
}

/// Compatible servers (vLLM, Ollama, llama.cpp) differ from OpenAI: no usage, `stop` with
/// tool calls, no index, arguments as an object, no `[DONE]`.
#[tokio::test]
async fn compatible_server_quirks_are_tolerated() {
    let ev = data_events(&[
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "thinking"}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"id": "a1", "function": {"name": "write_file", "arguments": "{\"path\":"}}]}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {"arguments": "\"x.txt\",\"content\":\"hi\"}"}}]}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"id": "b2", "function": {"name": "finish", "arguments": {"summary": "ok"}}}]}, "finish_reason": null}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ]);
    let server = Server::start(vec![Canned::sse(ev)]).await;
    let c = client(&server.url(), "local", true, net());
    let req = Request::new(vec![Message::user("go")], 100);
    let reply = c
        .complete(&req, &CallContext::new(Role::Coder))
        .await
        .unwrap();
    assert_eq!(reply.content, "", "reasoning is not part of the answer");
    assert_eq!(reply.stop, StopReason::ToolUse);
    assert_eq!(reply.tool_calls.len(), 2);
    assert_eq!(
        reply.tool_calls[0].arguments,
        json!({"path": "x.txt", "content": "hi"})
    );
    assert_eq!(reply.tool_calls[1].id, "b2");
    assert_eq!(reply.tool_calls[1].arguments, json!({"summary": "ok"}));
    assert!(reply.usage.estimated);
    assert!(reply.usage.input_tokens >= req.estimate_prompt_tokens());
    // Not the official endpoint: `max_tokens`, not `max_completion_tokens`; no key header
    // is still a Bearer here because the test client has a key.
    assert_eq!(server.requests()[0].body["max_tokens"], 100);
}

#[tokio::test]
async fn text_when_a_tool_was_expected_is_returned_as_text() {
    let server = Server::start(vec![text_stream(&["I would call get_weather."], 5, 5)]).await;
    let c = client(&server.url(), "m", true, net());
    let mut req = Request::new(vec![Message::user("weather?")], 50);
    req.tools = vec![weather_tool()];
    req.tool_choice = ToolChoice::Required;
    let reply = c
        .complete(&req, &CallContext::new(Role::Coder))
        .await
        .unwrap();
    assert!(reply.tool_calls.is_empty());
    assert_eq!(reply.stop, StopReason::EndTurn);
    assert_eq!(reply.content, "I would call get_weather.");
    assert_eq!(server.requests()[0].body["tool_choice"], "required");
}

/// A compatible server that answers a forced tool with text gets a second request for the
/// arguments as JSON constrained to the tool's schema; the JSON comes back as the call, with
/// both requests' usage. When that is not JSON either, the text reply stands.
#[tokio::test]
async fn forced_tool_answered_with_text_is_asked_again_under_the_schema() {
    let server = Server::start(vec![
        text_stream(&["Let me think about Paris."], 5, 7),
        text_stream(&["{\"city\": ", "\"Paris\"}"], 11, 13),
    ])
    .await;
    let c = client(&server.url(), "m", true, net());
    let mut req = Request::new(vec![Message::user("weather?")], 50);
    req.tools = vec![weather_tool()];
    req.tool_choice = ToolChoice::Tool("get_weather".into());
    let reply = c
        .complete(&req, &CallContext::new(Role::Coder))
        .await
        .unwrap();
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(reply.tool_calls[0].name, "get_weather");
    assert_eq!(reply.tool_calls[0].arguments, json!({"city": "Paris"}));
    assert_eq!(reply.stop, StopReason::ToolUse);
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (16, 20)
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body["tool_choice"], "required");
    let second = &reqs[1].body;
    assert!(second.get("tools").is_none(), "{second}");
    assert_eq!(second["response_format"]["type"], "json_schema");
    assert_eq!(
        second["response_format"]["json_schema"]["schema"],
        weather_tool().parameters
    );
    assert_eq!(c.requests_per_call(&req), 2, "the budget reserves both");

    // Not JSON the second time either: the first answer stands, nothing invented.
    let server = Server::start(vec![
        text_stream(&["Prose."], 5, 5),
        text_stream(&["still prose"], 5, 5),
    ])
    .await;
    let c = client(&server.url(), "m", true, net());
    let reply = c
        .complete(&req, &CallContext::new(Role::Coder))
        .await
        .unwrap();
    assert!(reply.tool_calls.is_empty());
    assert_eq!(reply.content, "Prose.");
}

#[tokio::test]
async fn rate_limit_honours_retry_after() {
    let server = Server::start(vec![
        Canned::json(429, json!({"error": {"message": "Rate limit reached for gpt-4o", "type": "requests", "code": "rate_limit_exceeded"}}))
            .header("retry-after", "1"),
        text_stream(&["ok"], 1, 1),
    ])
    .await;
    let c = client(&server.url(), "gpt-4o", true, net());
    let (seen, ctx) = collect_progress();
    let t0 = Instant::now();
    let reply = c
        .complete(&Request::new(vec![Message::user("x")], 10), &ctx)
        .await
        .unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(reply.content, "ok");
    assert_eq!(server.requests().len(), 2);
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .any(|p| matches!(p, Progress::Retry { wait, .. } if *wait == Duration::from_secs(1)))
    );
}

#[tokio::test]
async fn stream_cut_mid_way_is_retried_and_bounded() {
    let cut = || {
        let mut c = text_stream(&["par", "tial"], 1, 1);
        if let super::server::Body::Chunks(p) = &mut c.body {
            p.truncate(2);
        }
        c.cut()
    };
    let server = Server::start(vec![cut(), text_stream(&["whole"], 1, 1)]).await;
    let c = client(&server.url(), "gpt-4o", true, net());
    let reply = c
        .complete(
            &Request::new(vec![Message::user("x")], 10),
            &CallContext::new(Role::Coder),
        )
        .await
        .unwrap();
    assert_eq!(reply.content, "whole");
    assert_eq!(server.requests().len(), 2);

    // Cut every time: max_retries + 1 attempts, then a clear error.
    let server = Server::start(vec![cut(), cut(), cut(), cut()]).await;
    let c = client(&server.url(), "gpt-4o", true, net());
    let e = c
        .complete(
            &Request::new(vec![Message::user("x")], 10),
            &CallContext::new(Role::Coder),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::RetriesExhausted { attempts: 3, .. }),
        "{e}"
    );
    assert_eq!(server.requests().len(), 3);
}

#[tokio::test]
async fn stalled_stream_hits_the_chunk_timeout() {
    let mut n = net();
    n.chunk_timeout_s = 0.3;
    n.max_retries = 0;
    let mut stalled = text_stream(&["a"], 1, 1);
    if let super::server::Body::Chunks(p) = &mut stalled.body {
        p.truncate(1);
    }
    let server = Server::start(vec![stalled.stall()]).await;
    let c = client(&server.url(), "gpt-4o", true, n);
    let t0 = Instant::now();
    let e = c
        .complete(
            &Request::new(vec![Message::user("x")], 10),
            &CallContext::new(Role::Coder),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("per-chunk time-out"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn auth_and_spend_limit_errors_are_not_retried_and_name_the_key_variable() {
    let server = Server::start(vec![Canned::json(
        401,
        json!({"error": {"message": "Incorrect API key provided: sk-test***123.", "type": "invalid_request_error", "code": "invalid_api_key"}}),
    )])
    .await;
    let c = client(&server.url(), "gpt-4o", true, net());
    let e = c
        .complete(
            &Request::new(vec![Message::user("x")], 10),
            &CallContext::new(Role::Coder),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Auth { status: 401, .. }), "{e}");
    assert!(
        e.to_string().contains("OPENAI_API_KEY") && e.to_string().contains("openai"),
        "{e}"
    );
    assert_eq!(server.requests().len(), 1);

    let server = Server::start(vec![Canned::json(
        429,
        json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "code": "insufficient_quota"}}),
    )])
    .await;
    let c = client(&server.url(), "gpt-4o", true, net());
    let e = c
        .complete(
            &Request::new(vec![Message::user("x")], 10),
            &CallContext::new(Role::Coder),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::SpendLimit { .. }), "{e}");
    assert!(e.to_string().contains("OPENAI_API_KEY"), "{e}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn server_errors_back_off_and_succeed() {
    let server = Server::start(vec![
        Canned::json(
            500,
            json!({"error": {"message": "The server had an error"}}),
        ),
        Canned::json(503, json!({"error": {"message": "unavailable"}})),
        text_stream(&["fine"], 1, 1),
    ])
    .await;
    let c = client(&server.url(), "gpt-4o", true, net());
    let reply = c
        .complete(
            &Request::new(vec![Message::user("x")], 10),
            &CallContext::new(Role::Coder),
        )
        .await
        .unwrap();
    assert_eq!(reply.content, "fine");
    assert_eq!(server.requests().len(), 3);
}
