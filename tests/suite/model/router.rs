//! The router: budgets checked before calls, fallback, records, and record → replay.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use git_agent::config::{ModelNetConfig, Settings};
use git_agent::model::{
    Budget, CallRecord, Error, Limit, Message, ModelClient, PriceTable, Progress, Request, Role,
    Route, Router, RouterOptions, ToolCall, ToolSpec,
};
use serde_json::json;
use sha2::Digest;

use super::openai::{client, net, text_stream, tool_stream};
use super::server::{Canned, Server};

fn settings_for(server: &Server, coder: &str) -> Settings {
    let mut s = Settings::default();
    s.providers.openai.base_url = Some(server.url());
    s.models.coder = Some(coder.into());
    s.model_net = net();
    s
}

fn env(k: &str) -> Option<String> {
    (k == "OPENAI_API_KEY").then(|| "sk-loopback".to_string())
}

#[tokio::test]
async fn max_usd_stops_before_the_call_that_could_cross_it() {
    // gpt-4o-mini: $0.15 in / $0.60 out per million tokens.
    let server = Server::start(vec![
        text_stream(&["one"], 1000, 500),
        text_stream(&["two"], 1000, 500),
    ])
    .await;
    let mut s = settings_for(&server, "openai:gpt-4o-mini");
    s.budget.max_usd = 0.001;
    let router = Router::from_settings(&s, &RouterOptions::default(), &env).unwrap();
    let req = Request::new(vec![Message::user("hi")], 1000);
    let first = router.call(Role::Coder, &req, None).await.unwrap();
    let cost = first.record.cost_usd.unwrap();
    assert!(
        (cost - (1000.0 * 0.15 + 500.0 * 0.60) / 1e6).abs() < 1e-12,
        "{cost}"
    );
    // Spent $0.00045; the next call's worst case adds 1000 output tokens ($0.0006): refused.
    let e = router.call(Role::Coder, &req, None).await.unwrap_err();
    let Error::BudgetExhausted(ex) = &e else {
        panic!("expected budget exhaustion, got {e}");
    };
    assert_eq!(ex.limit, Limit::MaxUsd);
    assert!((ex.spent.usd - cost).abs() < 1e-12);
    assert!(e.is_budget_exhausted());
    assert_eq!(
        server.requests().len(),
        1,
        "the refused call never reached the server"
    );
    assert!(router.spent().usd <= s.budget.max_usd);
    // A smaller call still fits.
    let small = Request::new(vec![Message::user("hi")], 100);
    router.call(Role::Coder, &small, None).await.unwrap();
    assert!(router.spent().usd <= s.budget.max_usd);
}

#[tokio::test]
async fn max_turns_is_never_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.jsonl");
    std::fs::write(&script, "{\"content\": \"a\"}\n".repeat(5)).unwrap();
    let mut s = Settings::default();
    s.models.coder = Some(format!("scripted:{}", script.display()));
    s.budget.max_turns = 2;
    let router = Router::from_settings(&s, &RouterOptions::default(), &|_| None).unwrap();
    let req = Request::new(vec![Message::user("hi")], 10);
    router.call(Role::Coder, &req, None).await.unwrap();
    router.call(Role::Coder, &req, None).await.unwrap();
    let e = router.call(Role::Coder, &req, None).await.unwrap_err();
    assert!(
        matches!(&e, Error::BudgetExhausted(ex) if ex.limit == Limit::MaxTurns),
        "{e}"
    );
    assert_eq!(router.spent().turns, 2);
    // A resumed run keeps its spend: with 2 turns already made, none is left.
    let resumed = Router::from_settings(
        &s,
        &RouterOptions {
            resume: Some(git_agent::model::ResumeState {
                spent: router.spent(),
                elapsed: router.elapsed(),
                ..Default::default()
            }),
            ..RouterOptions::default()
        },
        &|_| None,
    )
    .unwrap();
    let e = resumed.call(Role::Coder, &req, None).await.unwrap_err();
    assert!(
        matches!(&e, Error::BudgetExhausted(ex) if ex.limit == Limit::MaxTurns),
        "{e}"
    );
    // Scripted models have no price: unknown, not zero.
    assert_eq!(router.spent().unpriced_calls, 2);
    let usage = router.usage();
    assert_eq!(usage.len(), 1);
    assert!(usage[0].2.cost_unknown);
}

#[tokio::test]
async fn fallback_answers_after_the_primary_retries_are_spent_but_not_after_auth_errors() {
    let down = Server::start(vec![
        Canned::json(503, json!({"error": {"message": "down"}})),
        Canned::json(503, json!({"error": {"message": "down"}})),
        Canned::json(503, json!({"error": {"message": "down"}})),
    ])
    .await;
    let up = Server::start(vec![text_stream(&["from fallback"], 3, 3)]).await;
    let primary: Arc<dyn ModelClient> = Arc::new(client(&down.url(), "gpt-4o", true, net()));
    let fallback: Arc<dyn ModelClient> = Arc::new(client(&up.url(), "gpt-4o-mini", true, net()));
    let router = Router::new(
        PriceTable::default(),
        Budget::new(&Settings::default().budget),
    )
    .route(
        Role::Reviewer,
        Route {
            spec: "openai:gpt-4o".parse().unwrap(),
            client: primary,
        },
        Some(Route {
            spec: "openai:gpt-4o-mini".parse().unwrap(),
            client: fallback,
        }),
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let out = router
        .call(
            Role::Reviewer,
            &Request::new(vec![Message::user("review")], 10),
            Some(Arc::new(move |p| s2.lock().unwrap().push(p))),
        )
        .await
        .unwrap();
    assert_eq!(out.reply.content, "from fallback");
    assert!(out.record.fallback);
    assert_eq!(out.record.spec, "openai:gpt-4o-mini");
    assert_eq!(down.requests().len(), 3);
    assert!(seen.lock().unwrap().contains(&Progress::Fallback {
        spec: "openai:gpt-4o-mini".into()
    }));
    // No route for the coder: a clear error.
    let e = router
        .call(
            Role::Coder,
            &Request::new(vec![Message::user("x")], 10),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("no model configured for role coder"),
        "{e}"
    );

    let denied = Server::start(vec![Canned::json(
        401,
        json!({"error": {"message": "bad key"}}),
    )])
    .await;
    let up = Server::start(vec![text_stream(&["never"], 1, 1)]).await;
    let router = Router::new(
        PriceTable::default(),
        Budget::new(&Settings::default().budget),
    )
    .route(
        Role::Coder,
        Route {
            spec: "openai:gpt-4o".parse().unwrap(),
            client: Arc::new(client(&denied.url(), "gpt-4o", true, net())),
        },
        Some(Route {
            spec: "openai:gpt-4o-mini".parse().unwrap(),
            client: Arc::new(client(&up.url(), "gpt-4o-mini", true, net())),
        }),
    );
    let e = router
        .call(
            Role::Coder,
            &Request::new(vec![Message::user("x")], 10),
            None,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Auth { .. }), "{e}");
    assert_eq!(up.requests().len(), 0);
}

fn tools() -> Vec<ToolSpec> {
    ["write_file", "read_file", "finish"]
        .into_iter()
        .map(|n| ToolSpec {
            name: n.into(),
            description: format!("{n} tool"),
            parameters: json!({"type": "object"}),
        })
        .collect()
}

/// A toy agent loop: plan once, then let the coder call tools against an in-memory tree.
async fn toy_run(router: &Router) -> (Vec<ToolCall>, BTreeMap<String, String>, Vec<CallRecord>) {
    let mut calls = Vec::new();
    let mut records = Vec::new();
    let mut files = BTreeMap::new();
    let plan = router
        .call(
            Role::Planner,
            &Request::new(vec![Message::user("plan: make hello.txt")], 200),
            None,
        )
        .await
        .unwrap();
    records.push(plan.record);
    let mut msgs = vec![Message::user(format!("do it: {}", plan.reply.content))];
    for _ in 0..10 {
        let mut req = Request::new(msgs.clone(), 500);
        req.tools = tools();
        let out = router.call(Role::Coder, &req, None).await.unwrap();
        records.push(out.record.clone());
        msgs.push(Message::from_reply(&out.reply));
        let mut finished = out.reply.tool_calls.is_empty();
        for c in &out.reply.tool_calls {
            calls.push(c.clone());
            let path = c.arguments["path"].as_str().unwrap_or_default().to_string();
            let result = match c.name.as_str() {
                "write_file" => {
                    files.insert(path, c.arguments["content"].as_str().unwrap().to_string());
                    "written".to_string()
                }
                "read_file" => files
                    .get(&path)
                    .cloned()
                    .unwrap_or_else(|| "missing".into()),
                _ => {
                    finished = true;
                    "ok".into()
                }
            };
            msgs.push(Message::ToolResult {
                call_id: c.id.clone(),
                name: c.name.clone(),
                content: result,
                is_error: false,
            });
        }
        if finished {
            break;
        }
    }
    (calls, files, records)
}

#[tokio::test]
async fn a_recorded_session_replays_offline_with_identical_tool_calls_and_state() {
    let server = Server::start(vec![
        text_stream(&["write hello.txt"], 20, 5),
        tool_stream(
            &[(
                "call_w",
                "write_file",
                json!({"path": "hello.txt", "content": "hi\n"}),
            )],
            50,
            10,
        ),
        tool_stream(
            &[
                ("call_r", "read_file", json!({"path": "hello.txt"})),
                (
                    "call_w2",
                    "write_file",
                    json!({"path": "b.txt", "content": "unicode é ✓"}),
                ),
            ],
            80,
            20,
        ),
        tool_stream(&[("call_f", "finish", json!({"summary": "done"}))], 120, 5),
    ])
    .await;
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("session.jsonl");
    let mut s = settings_for(&server, "openai:gpt-4o-mini");
    s.models.planner = Some("openai:gpt-4o-mini".into());
    let router = Router::from_settings(
        &s,
        &RouterOptions {
            record: Some(rec.clone()),
            ..RouterOptions::default()
        },
        &env,
    )
    .unwrap();
    let (calls, files, records) = toy_run(&router).await;
    assert_eq!(calls.len(), 4);
    assert_eq!(files["hello.txt"], "hi\n");
    assert_eq!(server.requests().len(), 4);
    let text = std::fs::read_to_string(&rec).unwrap();
    assert_eq!(text.lines().count(), 4);
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["role"], "planner");

    // Replay: the same loop against the recording, no server involved.
    let mut s = Settings::default();
    s.models.coder = Some(format!("scripted:{}", rec.display()));
    s.models.planner = s.models.coder.clone();
    let replay = Router::from_settings(&s, &RouterOptions::default(), &|_| None).unwrap();
    let (calls2, files2, records2) = toy_run(&replay).await;
    assert_eq!(calls2, calls);
    assert_eq!(files2, files);
    assert_eq!(server.requests().len(), 4);
    // Same requests (by digest), same token counts.
    let digests = |r: &[CallRecord]| {
        r.iter()
            .map(|r| r.request_sha256.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(digests(&records2), digests(&records));
    let tokens = |r: &[CallRecord]| {
        r.iter()
            .map(|r| (r.tokens_in, r.tokens_out))
            .collect::<Vec<_>>()
    };
    assert_eq!(tokens(&records2), tokens(&records));
    // One more call finds the script exhausted.
    let e = replay
        .call(
            Role::Coder,
            &Request::new(vec![Message::user("more")], 10),
            None,
        )
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("script exhausted"), "{e}");
}

#[tokio::test]
async fn call_records_carry_usage_cost_latency_and_digests() {
    let server = Server::start(vec![text_stream(&["hello"], 30, 7)]).await;
    let s = settings_for(&server, "openai:gpt-4o");
    let router = Router::from_settings(&s, &RouterOptions::default(), &env).unwrap();
    let req = Request::new(vec![Message::user("hi")], 64);
    let out = router.call(Role::Summarizer, &req, None).await.unwrap();
    let r = &out.record;
    assert_eq!(r.role, Role::Summarizer);
    assert_eq!(r.spec, "openai:gpt-4o");
    assert_eq!((r.tokens_in, r.tokens_out), (30, 7));
    assert!(!r.usage_estimated);
    assert!((r.cost_usd.unwrap() - (30.0 * 2.5 + 7.0 * 10.0) / 1e6).abs() < 1e-12);
    let want = hex::encode(sha2::Sha256::digest(serde_json::to_vec(&req).unwrap()));
    assert_eq!(r.request_sha256, want);
    let want = hex::encode(sha2::Sha256::digest(
        serde_json::to_vec(&out.reply).unwrap(),
    ));
    assert_eq!(r.reply_sha256, want);
    assert_eq!(out.transcript.request, req);
    let _unused: ModelNetConfig = net();
}

/// `max_minutes` also bounds a call in flight: a stalled call ends when the time is up, and
/// the run sees budget exhaustion rather than a provider failure.
#[tokio::test]
async fn max_minutes_cuts_a_call_short_as_budget_exhaustion() {
    let mut stalled = text_stream(&["a"], 1, 1);
    if let super::server::Body::Chunks(p) = &mut stalled.body {
        p.truncate(1);
    }
    let server = Server::start(vec![stalled.stall()]).await;
    let limits = Settings::default().budget;
    // A resumed run with one second of its 30 minutes left.
    let budget = Budget::resumed(
        &limits,
        Default::default(),
        std::time::Duration::from_secs(u64::from(limits.max_minutes) * 60 - 1),
    );
    let router = Router::new(PriceTable::default(), budget).route(
        Role::Coder,
        Route {
            spec: "openai:gpt-4o".parse().unwrap(),
            client: Arc::new(client(&server.url(), "gpt-4o", true, net())),
        },
        None,
    );
    let t0 = std::time::Instant::now();
    let e = router
        .call(
            Role::Coder,
            &Request::new(vec![Message::user("x")], 10),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, Error::BudgetExhausted(ex) if ex.limit == Limit::MaxMinutes),
        "{e}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(4),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(router.spent().turns, 0);
}
