//! Provider-neutral request, reply and progress types.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a model is asked to do in a run. The run asks for a role, never a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Writes the plan.
    Planner,
    /// Edits files and fixes failures.
    Coder,
    /// Reviews the final diff.
    Reviewer,
    /// Summarizes long context.
    Summarizer,
}

impl Role {
    /// Every role, in a fixed order.
    pub const ALL: [Role; 4] = [Role::Planner, Role::Coder, Role::Reviewer, Role::Summarizer];

    /// The role's name as written in config and specs.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Planner => "planner",
            Role::Coder => "coder",
            Role::Reviewer => "reviewer",
            Role::Summarizer => "summarizer",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role `{s}` (planner, coder, reviewer, summarizer)"))
    }
}

/// A tool the model may call, with its arguments as JSON Schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// A call of a tool by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id; tool results refer to it.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Parsed arguments. When the model sent text that is not JSON, this is that text as a
    /// JSON string, so the tool layer can tell the model its arguments were malformed.
    pub arguments: serde_json::Value,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Message {
    /// Text from the harness or the human.
    User {
        /// The text.
        content: String,
    },
    /// An earlier model reply.
    Assistant {
        /// Its text, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// Its tool calls, in order.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call, threaded back in the order of the calls.
    ToolResult {
        /// The id of the call it answers.
        call_id: String,
        /// The tool's name.
        name: String,
        /// The result text.
        content: String,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Message::User {
            content: content.into(),
        }
    }

    /// The assistant message that records `reply` in the conversation.
    pub fn from_reply(reply: &Reply) -> Self {
        Message::Assistant {
            content: (!reply.content.is_empty()).then(|| reply.content.clone()),
            tool_calls: reply.tool_calls.clone(),
        }
    }
}

/// How the model must use tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides.
    #[default]
    Auto,
    /// No tool calls.
    None,
    /// At least one tool call.
    Required,
    /// Exactly this tool.
    Tool(String),
}

/// A provider-neutral request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// System prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools on offer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolSpec>,
    /// Tool use constraint.
    #[serde(default)]
    pub tool_choice: ToolChoice,
    /// Cap on output tokens (also the budget's worst case for this call's output).
    pub max_tokens: u32,
    /// Sampling temperature; `None` leaves the provider's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Constrain the answer to JSON of this schema (`(name, schema)`), where the provider
    /// can (Chat Completions `response_format`). Clients that cannot ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<(String, serde_json::Value)>,
}

impl Request {
    /// A request with a user message and defaults elsewhere.
    pub fn new(messages: Vec<Message>, max_tokens: u32) -> Self {
        Self {
            system: None,
            messages,
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            max_tokens,
            temperature: None,
            json_schema: None,
        }
    }

    /// All text the request carries (system, messages, tool results, tool-call arguments),
    /// joined by newlines: what a script's `expect` is matched against.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Some(s) = &self.system {
            out.push_str(s);
            out.push('\n');
        }
        for m in &self.messages {
            match m {
                Message::User { content } => out.push_str(content),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    if let Some(c) = content {
                        out.push_str(c);
                    }
                    for c in tool_calls {
                        out.push_str(&c.name);
                        out.push(' ');
                        out.push_str(&c.arguments.to_string());
                        out.push('\n');
                    }
                }
                Message::ToolResult { content, .. } => out.push_str(content),
            }
            out.push('\n');
        }
        out
    }

    /// A conservative estimate of the prompt's tokens: one token per three bytes of every
    /// text and schema, plus a few per message. Real tokenizers average about four bytes per
    /// token on English and code, so this over-counts, which is the safe side for budgets.
    pub fn estimate_prompt_tokens(&self) -> u64 {
        let mut bytes = self.text().len();
        for t in &self.tools {
            bytes += t.name.len() + t.description.len() + t.parameters.to_string().len();
        }
        (bytes as u64).div_ceil(3) + 8 * (self.messages.len() as u64 + 1)
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// It finished its answer.
    EndTurn,
    /// It wants tool results.
    ToolUse,
    /// It hit `max_tokens`.
    MaxTokens,
    /// A stop sequence.
    StopSequence,
    /// The provider filtered the output.
    ContentFilter,
    /// The provider reported no reason.
    Unknown,
    /// A reason this client does not know, verbatim.
    Other(String),
}

/// Token counts of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// All prompt tokens, cached or not.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Prompt tokens read from the provider's cache (a subset of `input_tokens`).
    pub cached_input_tokens: u64,
    /// Prompt tokens written to the provider's cache (a subset of `input_tokens`).
    pub cache_write_tokens: u64,
    /// The provider reported no usage, so these counts are our conservative estimate.
    pub estimated: bool,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// A provider-neutral reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The reply's text (empty when it only called tools).
    pub content: String,
    /// Tool calls, in the order the model made them.
    pub tool_calls: Vec<ToolCall>,
    /// Token counts.
    pub usage: Usage,
    /// Why it stopped.
    pub stop: StopReason,
    /// The model that answered, as the provider named it.
    pub model: String,
}

/// Something a call reports while it runs, so the CLI can show progress.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// An attempt starts (1-based).
    Attempt {
        /// Attempt number.
        n: u32,
    },
    /// A piece of streamed text.
    Text(String),
    /// A tool call began streaming.
    ToolCall {
        /// Tool name.
        name: String,
    },
    /// A transient failure; the call waits and retries.
    Retry {
        /// The attempt that failed.
        attempt: u32,
        /// How long it waits.
        wait: Duration,
        /// What failed.
        reason: String,
    },
    /// The router switched to the role's fallback model.
    Fallback {
        /// The fallback's spec.
        spec: String,
    },
}

/// Receiver of [`Progress`] events.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// Per-call context a client needs besides the request.
#[derive(Clone)]
pub struct CallContext {
    /// The role asking (scripts may restrict lines to a role).
    pub role: Role,
    /// Where to report progress.
    pub progress: Option<ProgressFn>,
    /// Latest moment the call may still run (from `max_minutes`); clamps the per-call time-out.
    pub deadline: Option<tokio::time::Instant>,
}

impl CallContext {
    /// A context for `role` with no progress sink and no deadline.
    pub fn new(role: Role) -> Self {
        Self {
            role,
            progress: None,
            deadline: None,
        }
    }

    /// Report a progress event, if anyone listens.
    pub fn report(&self, p: Progress) {
        if let Some(f) = &self.progress {
            f(p);
        }
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("role", &self.role)
            .field("progress", &self.progress.is_some())
            .field("deadline", &self.deadline)
            .finish()
    }
}
