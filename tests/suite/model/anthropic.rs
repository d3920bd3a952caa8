//! The Messages API client against a loopback server speaking Anthropic's documented format.

use std::sync::{Arc, Mutex};

use git_agent::model::anthropic::{API_VERSION, AnthropicClient, AnthropicOptions};
use git_agent::model::{
    CallContext, Error, Message, ModelClient, Progress, Request, Role, StopReason, ToolCall,
    ToolChoice, ToolSpec,
};
use serde_json::{Value, json};

use super::openai::net;
use super::server::{Canned, Server, typed_events};

fn client(base: &str) -> AnthropicClient {
    AnthropicClient::new(AnthropicOptions {
        base_url: base.into(),
        model: "claude-sonnet-4-5".into(),
        api_key: Some("sk-ant-test".into()),
        key_var: "ANTHROPIC_API_KEY".into(),
        net: net(),
        stream: true,
    })
    .unwrap()
}

fn message_start(input: u64, cache_read: u64, cache_write: u64) -> Value {
    json!({"type": "message_start", "message": {"id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
        "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5-20250929",
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input, "cache_creation_input_tokens": cache_write,
                  "cache_read_input_tokens": cache_read, "output_tokens": 1}}})
}

/// Text then a tool_use whose input arrives in many `input_json_delta` pieces, with pings,
/// as in Anthropic's streaming documentation.
fn text_and_tool_stream() -> Canned {
    let args = json!({"location": "San Francisco, CA", "unit": "fahrenheit"}).to_string();
    let mut ev = vec![
        message_start(472, 2000, 100),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Okay, let me"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " check."}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use",
               "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}}),
    ];
    let chars: Vec<char> = args.chars().collect();
    for piece in chars.chunks(5) {
        let s: String = piece.iter().collect();
        ev.push(json!({"type": "content_block_delta", "index": 1,
                       "delta": {"type": "input_json_delta", "partial_json": s}}));
    }
    ev.extend([
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
               "usage": {"output_tokens": 89}}),
        json!({"type": "message_stop"}),
    ]);
    Canned::sse(typed_events(&ev))
}

fn text_stream(text: &str) -> Canned {
    Canned::sse(typed_events(&[
        message_start(10, 0, 0),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 3}}),
        json!({"type": "message_stop"}),
    ]))
}

fn overloaded() -> Value {
    json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
}

#[tokio::test]
async fn streamed_text_and_tool_use_with_cache_usage_and_a_well_formed_request() {
    let server = Server::start(vec![text_and_tool_stream()]).await;
    // ANTHROPIC_BASE_URL is written without /v1.
    let c = client(&format!("http://{}", server.addr));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let mut ctx = CallContext::new(Role::Coder);
    ctx.progress = Some(Arc::new(move |p| s.lock().unwrap().push(p)));
    let earlier = vec![
        ToolCall {
            id: "toolu_a".into(),
            name: "read_file".into(),
            arguments: json!({"path": "a.rs"}),
        },
        ToolCall {
            id: "toolu_b".into(),
            name: "read_file".into(),
            arguments: json!({"path": "b.rs"}),
        },
    ];
    let mut req = Request::new(
        vec![
            Message::user("What's the weather?"),
            Message::Assistant {
                content: None,
                tool_calls: earlier,
            },
            Message::ToolResult {
                call_id: "toolu_a".into(),
                name: "read_file".into(),
                content: "fn a() {}".into(),
                is_error: false,
            },
            Message::ToolResult {
                call_id: "toolu_b".into(),
                name: "read_file".into(),
                content: "not found".into(),
                is_error: true,
            },
            Message::user("Now the weather, please."),
        ],
        1024,
    );
    req.system = Some("You are a coding agent.".into());
    req.tools = vec![ToolSpec {
        name: "get_weather".into(),
        description: "Get the current weather in a given location".into(),
        parameters: json!({"type": "object", "properties": {"location": {"type": "string"},
                                                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                           "required": ["location"]}),
    }];
    req.tool_choice = ToolChoice::Required;
    let reply = c.complete(&req, &ctx).await.unwrap();
    assert_eq!(reply.content, "Okay, let me check.");
    assert_eq!(reply.stop, StopReason::ToolUse);
    assert_eq!(
        reply.tool_calls,
        vec![ToolCall {
            id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
            name: "get_weather".into(),
            arguments: json!({"location": "San Francisco, CA", "unit": "fahrenheit"}),
        }]
    );
    assert_eq!(reply.usage.input_tokens, 472 + 2000 + 100);
    assert_eq!(reply.usage.cached_input_tokens, 2000);
    assert_eq!(reply.usage.cache_write_tokens, 100);
    assert_eq!(reply.usage.output_tokens, 89);
    assert_eq!(reply.model, "claude-sonnet-4-5-20250929");
    assert!(seen.lock().unwrap().contains(&Progress::ToolCall {
        name: "get_weather".into()
    }));

    let r = &server.requests()[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.headers["x-api-key"], "sk-ant-test");
    assert_eq!(r.headers["anthropic-version"], API_VERSION);
    assert!(!r.headers.contains_key("authorization"));
    let b = &r.body;
    assert_eq!(b["model"], "claude-sonnet-4-5");
    assert_eq!(b["max_tokens"], 1024);
    assert_eq!(b["stream"], true);
    assert_eq!(
        b["system"],
        json!([{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(b["tools"][0]["input_schema"], req.tools[0].parameters);
    assert_eq!(b["tools"][0]["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(b["tool_choice"], json!({"type": "any"}));
    let m = b["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3, "{m:?}");
    assert_eq!(m[1]["role"], "assistant");
    assert_eq!(
        m[1]["content"][0],
        json!({"type": "tool_use", "id": "toolu_a", "name": "read_file", "input": {"path": "a.rs"}})
    );
    assert_eq!(m[1]["content"][1]["id"], "toolu_b");
    // Both results, in call order, then the text, merged into one user message.
    assert_eq!(m[2]["role"], "user");
    assert_eq!(
        m[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_a", "content": "fn a() {}", "is_error": false})
    );
    assert_eq!(m[2]["content"][1]["tool_use_id"], "toolu_b");
    assert_eq!(m[2]["content"][1]["is_error"], true);
    assert_eq!(m[2]["content"][2]["type"], "text");
    assert_eq!(
        m[2]["content"][2]["cache_control"],
        json!({"type": "ephemeral"})
    );
}

#[tokio::test]
async fn overloaded_529_is_retried() {
    let server = Server::start(vec![Canned::json(529, overloaded()), text_stream("hello")]).await;
    let c = client(&server.url());
    let reply = c
        .complete(
            &Request::new(vec![Message::user("hi")], 10),
            &CallContext::new(Role::Planner),
        )
        .await
        .unwrap();
    assert_eq!(reply.content, "hello");
    assert_eq!(server.requests().len(), 2);
    // A base URL given with /v1 is not doubled.
    assert_eq!(server.requests()[0].path, "/v1/messages");
}

#[tokio::test]
async fn overloaded_error_event_inside_the_stream_is_retried() {
    let mid = Canned::sse(typed_events(&[
        message_start(10, 0, 0),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "par"}}),
        overloaded(),
    ]));
    let server = Server::start(vec![mid, text_stream("whole")]).await;
    let c = client(&server.url());
    let reply = c
        .complete(
            &Request::new(vec![Message::user("hi")], 10),
            &CallContext::new(Role::Planner),
        )
        .await
        .unwrap();
    assert_eq!(reply.content, "whole");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn stream_cut_before_message_stop_is_retried() {
    let mut cut = text_stream("lost");
    if let super::server::Body::Chunks(p) = &mut cut.body {
        p.truncate(3);
    }
    let server = Server::start(vec![cut.cut(), text_stream("kept")]).await;
    let c = client(&server.url());
    let reply = c
        .complete(
            &Request::new(vec![Message::user("hi")], 10),
            &CallContext::new(Role::Planner),
        )
        .await
        .unwrap();
    assert_eq!(reply.content, "kept");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn non_streaming_message_is_parsed() {
    let server = Server::start(vec![Canned::json(200, json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": "I'll read it."},
                    {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {"path": "src/lib.rs"}}],
        "stop_reason": "tool_use", "stop_sequence": null,
        "usage": {"input_tokens": 50, "output_tokens": 20, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}))])
    .await;
    let c = client(&server.url());
    let mut req = Request::new(vec![Message::user("hi")], 10);
    req.tools = ["read_file", "write_file"]
        .into_iter()
        .map(|n| ToolSpec {
            name: n.into(),
            description: n.into(),
            parameters: json!({"type": "object"}),
        })
        .collect();
    req.tool_choice = ToolChoice::Tool("read_file".into());
    let reply = c
        .complete(&req, &CallContext::new(Role::Coder))
        .await
        .unwrap();
    // Not Anthropic's own endpoint: the forced tool is the only one offered.
    let body = &server.requests()[0].body;
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "read_file"})
    );
    assert_eq!(body["tools"].as_array().unwrap().len(), 1);
    assert_eq!(body["tools"][0]["name"], "read_file");
    assert_eq!(reply.content, "I'll read it.");
    assert_eq!(reply.tool_calls[0].arguments, json!({"path": "src/lib.rs"}));
    assert_eq!(reply.usage.input_tokens, 50);
    assert_eq!(reply.stop, StopReason::ToolUse);
}

#[tokio::test]
async fn auth_error_names_the_key_variable_and_credit_errors_do_not_retry() {
    let server = Server::start(vec![Canned::json(401, json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}))]).await;
    let e = client(&server.url())
        .complete(
            &Request::new(vec![Message::user("hi")], 10),
            &CallContext::new(Role::Coder),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Auth { .. }));
    assert!(
        e.to_string().contains("ANTHROPIC_API_KEY") && e.to_string().contains("anthropic"),
        "{e}"
    );
    assert_eq!(server.requests().len(), 1);

    let server = Server::start(vec![Canned::json(400, json!({"type": "error", "error": {"type": "invalid_request_error", "message": "Your credit balance is too low to access the Anthropic API."}}))]).await;
    let e = client(&server.url())
        .complete(
            &Request::new(vec![Message::user("hi")], 10),
            &CallContext::new(Role::Coder),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::SpendLimit { .. }), "{e}");
    assert_eq!(server.requests().len(), 1);
}
