//! Scripted replies (`scripted:PATH`) and the recorder that writes any session in the same
//! format (`--record PATH`), so a run against a real model replays offline.
//!
//! A script is JSON Lines, one reply per line:
//! `{"role"?, "expect"?, "content"?, "tool_calls"?: [{"id"?, "name", "arguments"}], "usage"?}`.
//! Lines are consumed in order; a line with a `role` is only taken by a call of that role
//! (lines for other roles wait their turn), so interleaved planner and coder calls replay in
//! each role's order. `expect` is a substring the request must contain. A call that finds no
//! line left fails with `script exhausted`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::ModelClient;
use super::error::{Error, Result};
use super::types::{CallContext, Progress, Reply, Request, Role, StopReason, ToolCall, Usage};

/// One tool call in a script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// Call id; generated from the line number when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Arguments object.
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// Token counts in a script line (the recorder writes them so a replay costs the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Prompt tokens read from a cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
}

/// One line of a script: one model reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptLine {
    /// Only a call of this role takes the line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// A substring the request must contain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect: Option<String>,
    /// Reply text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptToolCall>,
    /// Token counts to report; estimated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ScriptUsage>,
}

impl ScriptLine {
    /// The line that replays `reply` for `role`.
    pub fn from_reply(role: Role, reply: &Reply) -> Self {
        Self {
            role: Some(role),
            expect: None,
            content: (!reply.content.is_empty()).then(|| reply.content.clone()),
            tool_calls: reply
                .tool_calls
                .iter()
                .map(|c| ScriptToolCall {
                    id: Some(c.id.clone()),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect(),
            usage: (!reply.usage.estimated).then_some(ScriptUsage {
                input_tokens: reply.usage.input_tokens,
                output_tokens: reply.usage.output_tokens,
                cached_input_tokens: reply.usage.cached_input_tokens,
            }),
        }
    }
}

/// Parse a script's text; `path` names it in errors.
pub fn parse_script(path: &Path, text: &str) -> Result<Vec<(usize, ScriptLine)>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        let parsed: ScriptLine = serde_json::from_str(t).map_err(|e| Error::Script {
            path: path.to_path_buf(),
            line: i + 1,
            message: e.to_string(),
        })?;
        out.push((i + 1, parsed));
    }
    Ok(out)
}

/// A client that replays a script.
#[derive(Debug)]
pub struct ScriptedClient {
    path: PathBuf,
    model: String,
    lines: Vec<(usize, ScriptLine)>,
    used: Mutex<Vec<bool>>,
}

impl ScriptedClient {
    /// Read the script at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            context: "cannot read script",
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_text(path, &text)
    }

    /// A client over a script's text; `path` names it in errors.
    pub fn from_text(path: &Path, text: &str) -> Result<Self> {
        let lines = parse_script(path, text)?;
        Ok(Self {
            path: path.to_path_buf(),
            model: path.display().to_string(),
            used: Mutex::new(vec![false; lines.len()]),
            lines,
        })
    }

    /// Lines not yet consumed.
    pub fn remaining(&self) -> usize {
        self.used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|u| !**u)
            .count()
    }

    fn next(&self, req: &Request, ctx: &CallContext) -> Result<Reply> {
        let (lineno, line) = {
            let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
            let found = self
                .lines
                .iter()
                .enumerate()
                .find(|(i, (_, l))| !used[*i] && l.role.is_none_or(|r| r == ctx.role));
            let Some((i, (lineno, line))) = found else {
                return Err(Error::ScriptExhausted {
                    path: self.path.clone(),
                    role: ctx.role.to_string(),
                });
            };
            used[i] = true;
            (*lineno, line)
        };
        if let Some(expect) = &line.expect
            && !req.text().contains(expect.as_str())
        {
            return Err(Error::ScriptExpect {
                path: self.path.clone(),
                line: lineno,
                expect: expect.clone(),
            });
        }
        let content = line.content.clone().unwrap_or_default();
        if !content.is_empty() {
            ctx.report(Progress::Text(content.clone()));
        }
        let tool_calls: Vec<ToolCall> = line
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                ctx.report(Progress::ToolCall {
                    name: c.name.clone(),
                });
                ToolCall {
                    id: c.id.clone().unwrap_or_else(|| format!("call_{lineno}_{i}")),
                    name: c.name.clone(),
                    arguments: if c.arguments.is_null() {
                        serde_json::json!({})
                    } else {
                        c.arguments.clone()
                    },
                }
            })
            .collect();
        let usage = match line.usage {
            Some(u) => Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cached_input_tokens: u.cached_input_tokens,
                cache_write_tokens: 0,
                estimated: false,
            },
            None => Usage {
                input_tokens: req.estimate_prompt_tokens(),
                output_tokens: (content.len() as u64
                    + tool_calls
                        .iter()
                        .map(|c| c.arguments.to_string().len() as u64)
                        .sum::<u64>())
                .div_ceil(3),
                cached_input_tokens: 0,
                cache_write_tokens: 0,
                estimated: true,
            },
        };
        Ok(Reply {
            stop: if tool_calls.is_empty() {
                StopReason::EndTurn
            } else {
                StopReason::ToolUse
            },
            content,
            tool_calls,
            usage,
            model: self.model.clone(),
        })
    }
}

impl ModelClient for ScriptedClient {
    fn provider(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn skip_replayed(&self, role: Role) {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = self
            .lines
            .iter()
            .enumerate()
            .position(|(i, (_, l))| !used[i] && l.role.is_none_or(|r| r == role))
        {
            used[i] = true;
        }
    }

    fn complete<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Reply>> {
        Box::pin(async move { self.next(req, ctx) })
    }
}

/// Appends every reply to a script file, flushed per line so a killed run keeps its record.
#[derive(Debug)]
pub struct Recorder {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl Recorder {
    /// Create (or truncate) the recording at `path`.
    pub fn create(path: &Path) -> Result<Self> {
        let file = std::fs::File::create(path).map_err(|source| Error::Io {
            context: "cannot create recording",
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Append the line that replays `reply` for `role`.
    pub fn record(&self, role: Role, reply: &Reply) -> Result<()> {
        let line = ScriptLine::from_reply(role, reply);
        let mut text = serde_json::to_string(&line).map_err(|e| Error::Io {
            context: "cannot encode recording line for",
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        text.push('\n');
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f.write_all(text.as_bytes())
            .and_then(|()| f.flush())
            .map_err(|source| Error::Io {
                context: "cannot write recording",
                path: self.path.clone(),
                source,
            })
    }
}

/// A client that records every reply of the client it wraps.
#[derive(Debug)]
pub struct RecordingClient {
    inner: Arc<dyn ModelClient>,
    recorder: Arc<Recorder>,
}

impl RecordingClient {
    /// Wrap `inner`, writing to `recorder`.
    pub fn new(inner: Arc<dyn ModelClient>, recorder: Arc<Recorder>) -> Self {
        Self { inner, recorder }
    }
}

impl ModelClient for RecordingClient {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn skip_replayed(&self, role: Role) {
        self.inner.skip_replayed(role);
    }

    fn complete<'a>(
        &'a self,
        req: &'a Request,
        ctx: &'a CallContext,
    ) -> BoxFuture<'a, Result<Reply>> {
        Box::pin(async move {
            let reply = self.inner.complete(req, ctx).await?;
            self.recorder.record(ctx.role, &reply)?;
            Ok(reply)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::types::Message;

    fn req(text: &str) -> Request {
        Request::new(vec![Message::user(text)], 100)
    }

    #[tokio::test]
    async fn lines_replay_in_order_per_role_then_exhaust() {
        let script = r#"
{"role": "planner", "tool_calls": [{"name": "update_plan", "arguments": {"steps": [{"title": "t"}]}}]}
{"content": "hello", "tool_calls": [{"name": "read_file", "arguments": {"path": "src/lib.rs"}}]}
{"expect": "assertion failed", "tool_calls": [{"name": "finish", "arguments": {"summary": "done"}}]}
"#;
        let c = ScriptedClient::from_text(Path::new("s.jsonl"), script).unwrap();
        // The coder's first call skips the planner's line.
        let r = c
            .complete(&req("go"), &CallContext::new(Role::Coder))
            .await
            .unwrap();
        assert_eq!(r.content, "hello");
        assert_eq!(r.tool_calls[0].name, "read_file");
        assert_eq!(r.tool_calls[0].id, "call_3_0");
        assert_eq!(r.stop, StopReason::ToolUse);
        let r = c
            .complete(&req("plan"), &CallContext::new(Role::Planner))
            .await
            .unwrap();
        assert_eq!(r.tool_calls[0].name, "update_plan");
        let e = c
            .complete(&req("tests pass"), &CallContext::new(Role::Coder))
            .await
            .unwrap_err();
        assert!(matches!(e, Error::ScriptExpect { line: 4, .. }), "{e}");
        let e = c
            .complete(&req("x"), &CallContext::new(Role::Coder))
            .await
            .unwrap_err();
        assert!(e.to_string().starts_with("script exhausted"), "{e}");
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let e = ScriptedClient::from_text(
            Path::new("s.jsonl"),
            "{\"content\": \"a\"}\n{\"tool_call\": []}\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("s.jsonl line 2"), "{e}");
    }
}
