//! File tools: `read_file`, `list_files`, `edit_file`, `write_file`, `delete_file`.

use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::json;

use super::confine::ConfineError;
use super::edit::{self, MatchKind};
use super::output::{clip_line, fit};
use super::plan::ChangeAction;
use super::{Result, Tool, ToolContext, ToolError, ToolEvent, ToolFuture, ToolOutput, parse_args};
use crate::config::Decision;
use crate::policy::PolicyEvent;

/// Most lines one `read_file` call returns.
const MAX_READ_LINES: usize = 2000;
/// Most entries `list_files` returns.
const MAX_LIST_ENTRIES: usize = 1000;

fn confine_err(tool: &str, e: ConfineError) -> ToolError {
    match e {
        ConfineError::Refused(m) => ToolError::ToModel(m),
        ConfineError::NotFound(p) => ToolError::ToModel(format!(
            "{p} does not exist; use list_files or search to find the right path"
        )),
        ConfineError::Io { path, source } => match source.kind() {
            std::io::ErrorKind::PermissionDenied => {
                ToolError::ToModel(format!("{path}: permission denied"))
            }
            _ => ToolError::fatal(tool, format!("{path}: {source}")),
        },
    }
}

/// Judge writing `path`; a forbidden path goes back to the model naming the rule.
fn check_write(ctx: &ToolContext, tool: &str, path: &str) -> Result<String> {
    let rel = super::confine::check_relative(path).map_err(|e| confine_err(tool, e))?;
    let rel = rel.as_str();
    if rel.is_empty() {
        return Err(ToolError::ToModel(format!(
            "{path}: names the repository root; give a file path"
        )));
    }
    if let Some(ro) = ctx.read_only_at(&rel) {
        return Err(read_only_refusal(&rel, &ro));
    }
    let verdict = ctx.policy.judge_path(&rel);
    let allowed = verdict.decision == Decision::Allow;
    let msg = format!(
        "{rel}: writing this path is forbidden by policy rule {} ({}); leave it unchanged",
        verdict.rule.rule, verdict.rule.origin
    );
    ctx.record(ToolEvent::Policy(PolicyEvent::Path(verdict)));
    if allowed {
        Ok(rel)
    } else {
        Err(ToolError::ToModel(msg))
    }
}

/// What the model is told when it writes into the set-up's read-only output `ro`.
fn read_only_refusal(rel: &str, ro: &str) -> ToolError {
    ToolError::ToModel(format!(
        "{rel}: `{ro}` is made by the project's set-up and every command sees it read-only (a file written here would be hidden from the tests); change what the set-up reads (the manifest, the lockfile) instead"
    ))
}

/// The policy asked again about the real path a write lands on, which differs from the
/// given one when a parent directory is an in-tree symlink.
fn real_path_guard<'a>(
    ctx: &'a ToolContext,
    given: &'a str,
) -> impl Fn(&super::confine::RelPath) -> std::result::Result<(), ConfineError> + 'a {
    move |real| {
        let real = real.as_str();
        if real == given {
            return Ok(());
        }
        if let Some(ro) = ctx.read_only_at(&real) {
            return Err(ConfineError::Refused(format!(
                "{given}: resolves to {real}, inside `{ro}`, which the project's set-up makes and every command sees read-only; change what the set-up reads instead"
            )));
        }
        let verdict = ctx.policy.judge_path(&real);
        let allowed = verdict.decision == Decision::Allow;
        let msg = format!(
            "{given}: resolves to {real}, and writing that path is forbidden by policy rule {} ({}); leave it unchanged",
            verdict.rule.rule, verdict.rule.origin
        );
        ctx.record(ToolEvent::Policy(PolicyEvent::Path(verdict)));
        if allowed {
            Ok(())
        } else {
            Err(ConfineError::Refused(msg))
        }
    }
}

fn record_change(ctx: &ToolContext, path: &str, action: ChangeAction) -> bool {
    let change = ctx.with_plan(|p| p.record_change(path, action));
    let planned = change.planned;
    ctx.record(ToolEvent::FileChanged(change));
    planned
}

/// Said when a write touches the test runner's configuration by name: the change is allowed
/// here, but it will need a person's approval (or be refused) before the run can be verified.
fn runner_note(ctx: &ToolContext, rel: &str) -> String {
    if ctx.policy.runner_config.0 == Decision::Allow {
        return String::new();
    }
    if let Some(why) = crate::policy::runner_config_by_name(rel) {
        return format!(
            " (note: {why}, the test runner's configuration; a change to it needs a person's approval before the run can be verified — change the code instead if you can)"
        );
    }
    match crate::verify::setup_input(rel) {
        Some(why) => format!(
            " (note: {why}; a change to what the project's set-up reads needs a person's approval before the run can be verified, which then sets the committed tree up afresh — change the code instead if you can)"
        ),
        None => String::new(),
    }
}

fn unplanned_note(planned: bool) -> &'static str {
    if planned {
        ""
    } else {
        " (note: the plan does not name this file; it is reported as an unplanned change — update_plan if it belongs to a step)"
    }
}

/// `read_file`: a file's lines with line numbers.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadFile;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    start_line: Option<usize>,
    end_line: Option<usize>,
}

impl Tool for ReadFile {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a file of the repository. Lines are numbered (number, tab, text). Long files are returned in parts: pass start_line/end_line (1-based, inclusive) to read further."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the repository root."},
                "start_line": {"type": "integer", "minimum": 1, "description": "First line to show (1-based)."},
                "end_line": {"type": "integer", "minimum": 1, "description": "Last line to show (inclusive)."}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        false
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: serde_json::Value) -> ToolFuture<'a> {
        Box::pin(async move { read_file(ctx, args) })
    }
}

fn read_file(ctx: &ToolContext, args: serde_json::Value) -> Result<ToolOutput> {
    let a: ReadArgs = parse_args("read_file", args)?;
    let (rel, bytes) = ctx
        .root()
        .read(&a.path)
        .map_err(|e| confine_err("read_file", e))?;
    if bytes.iter().take(8192).any(|&b| b == 0) {
        return Err(ToolError::ToModel(format!(
            "{}: binary file ({} bytes); not shown",
            rel.as_str(),
            bytes.len()
        )));
    }
    let (text, lossy) = match String::from_utf8(bytes) {
        Ok(t) => (t, false),
        Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
    };
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    let start = a.start_line.unwrap_or(1).max(1);
    if total == 0 {
        return Ok(ToolOutput::text(format!("{}: empty file", rel.as_str())));
    }
    if start > total {
        return Err(ToolError::ToModel(format!(
            "{}: start_line {start} is past the end (the file has {total} lines)",
            rel.as_str()
        )));
    }
    let end = a.end_line.unwrap_or(total).clamp(start, total);
    let mut out = String::new();
    let budget = ctx.limits.max_bytes;
    let mut last = start - 1;
    for (i, line) in lines.iter().enumerate().take(end).skip(start - 1) {
        let shown = clip_line(line, ctx.limits.max_line_chars);
        if out.len() + shown.len() + 8 > budget || i + 1 - start >= MAX_READ_LINES {
            break;
        }
        let _ = writeln!(out, "{:>6}\t{shown}", i + 1);
        last = i + 1;
    }
    if last < end {
        let _ = writeln!(
            out,
            "[… shown lines {start}-{last} of {total}; call read_file with start_line={} to continue …]",
            last + 1
        );
    } else if start > 1 || end < total {
        let _ = writeln!(out, "[lines {start}-{end} of {total}]");
    }
    if lossy {
        out.push_str("[note: the file is not valid UTF-8; invalid bytes are shown as U+FFFD and edit_file will refuse it]\n");
    }
    Ok(ToolOutput::text(out))
}

/// `list_files`: the tree under a directory, respecting `.gitignore`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListFiles;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    path: Option<String>,
    depth: Option<usize>,
}

impl Tool for ListFiles {
    fn name(&self) -> &str {
        "list_files"
    }

    fn description(&self) -> &str {
        "List files and directories (directories end in /) under a directory of the repository, skipping what .gitignore ignores."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory relative to the repository root (default: the root)."},
                "depth": {"type": "integer", "minimum": 1, "maximum": 8, "description": "How many levels deep to list (default 2)."}
            },
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        false
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: serde_json::Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let a: ListArgs = parse_args("list_files", args)?;
            let path = a.path.unwrap_or_else(|| ".".into());
            let (rel, abs) = ctx
                .root()
                .resolve_existing(&path)
                .map_err(|e| confine_err("list_files", e))?;
            if !abs.is_dir() {
                return Err(ToolError::ToModel(format!(
                    "{path}: is a file, not a directory; use read_file to read it"
                )));
            }
            let depth = a.depth.unwrap_or(2).clamp(1, 8);
            let root = ctx.root().path().to_path_buf();
            let limit = ctx.limits.max_bytes;
            let listing = tokio::task::spawn_blocking(move || list(&root, &abs, depth))
                .await
                .map_err(|e| ToolError::fatal("list_files", e))?;
            let header = if rel.is_root() {
                String::new()
            } else {
                format!("{}/:\n", rel.as_str())
            };
            Ok(ToolOutput::text(fit(&format!("{header}{listing}"), limit)))
        })
    }
}

fn list(root: &std::path::Path, dir: &std::path::Path, depth: usize) -> String {
    let mut entries: Vec<String> = Vec::new();
    let mut more = 0usize;
    let walker = ignore::WalkBuilder::new(dir)
        .hidden(false)
        .require_git(false)
        .max_depth(Some(depth))
        .filter_entry(|e| {
            !e.file_name()
                .as_encoded_bytes()
                .eq_ignore_ascii_case(b".git")
        })
        .build();
    for entry in walker.flatten() {
        if entry.depth() == 0 {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        if entries.len() >= MAX_LIST_ENTRIES {
            more += 1;
            continue;
        }
        let mut s = rel.to_string_lossy().into_owned();
        if entry.file_type().is_some_and(|t| t.is_dir()) {
            s.push('/');
        }
        entries.push(s);
    }
    entries.sort();
    let mut out = entries.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    if entries.is_empty() {
        out.push_str("(empty)\n");
    }
    if more > 0 {
        let _ = writeln!(
            out,
            "[… {more} more entries not shown; list a subdirectory …]"
        );
    }
    out
}

/// `edit_file`: search/replace with the tolerant, never-ambiguous edit engine.
#[derive(Debug, Clone, Copy, Default)]
pub struct EditFile;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old_text: String,
    new_text: String,
}

impl Tool for EditFile {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Replace old_text with new_text in a file. old_text must match exactly one place; copy it from read_file output without the line numbers, with two or three lines of context. Small whitespace or indentation differences are tolerated; if it matches several places or none, nothing changes and you are told where the candidates or the closest text are."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File relative to the repository root."},
                "old_text": {"type": "string", "description": "The exact text to replace (whole lines, with some context)."},
                "new_text": {"type": "string", "description": "The text to put in its place."}
            },
            "required": ["path", "old_text", "new_text"],
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: serde_json::Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let a: EditArgs = parse_args("edit_file", args)?;
            let rel = check_write(ctx, "edit_file", &a.path)?;
            let (real, before) = ctx
                .root()
                .read_for_edit(&rel)
                .map_err(|e| confine_err("edit_file", e))?;
            let applied = edit::apply_edit(&before, &a.old_text, &a.new_text)
                .map_err(|r| ToolError::ToModel(format!("{}: {}", real.as_str(), r.message)))?;
            let (written, _) = ctx
                .root()
                .write(&rel, &applied.content, &real_path_guard(ctx, &rel))
                .map_err(|e| confine_err("edit_file", e))?;
            let planned = record_change(ctx, &written.as_str(), ChangeAction::Modified);
            let how = match applied.kind {
                MatchKind::Exact => String::new(),
                k => format!(
                    " (old_text did not match exactly; matched with tolerance: {})",
                    serde_json::to_value(k)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                        .replace('_', " ")
                ),
            };
            let mut out = format!(
                "edited {rel}: replaced {} line(s) at line {} with {} line(s){how}{}{}\n",
                applied.old_lines,
                applied.start_line,
                applied.new_lines,
                unplanned_note(planned),
                runner_note(ctx, &rel)
            );
            out.push_str(&excerpt(
                &applied.content,
                applied.start_line,
                applied.new_lines,
                ctx,
            ));
            Ok(ToolOutput::text(out))
        })
    }
}

/// The edited region with two lines of context, numbered, so the model sees the result.
fn excerpt(content: &[u8], start: usize, lines: usize, ctx: &ToolContext) -> String {
    let text = String::from_utf8_lossy(content);
    let from = start.saturating_sub(2).max(1);
    let to = start + lines.max(1) + 1;
    let mut out = String::new();
    for (i, l) in text
        .lines()
        .enumerate()
        .skip(from - 1)
        .take(to + 1 - from)
        .take(60)
    {
        let _ = writeln!(
            out,
            "{:>6}\t{}",
            i + 1,
            clip_line(l, ctx.limits.max_line_chars)
        );
    }
    fit(&out, ctx.limits.max_bytes / 4)
}

/// `write_file`: create or overwrite a whole file.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteFile;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Create a file, or replace a file's whole content. Missing directories are created. Prefer edit_file for changing part of an existing file."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File relative to the repository root."},
                "content": {"type": "string", "description": "The complete new content."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: serde_json::Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let a: WriteArgs = parse_args("write_file", args)?;
            let rel = check_write(ctx, "write_file", &a.path)?;
            let (written, existed) = ctx
                .root()
                .write(&rel, a.content.as_bytes(), &real_path_guard(ctx, &rel))
                .map_err(|e| confine_err("write_file", e))?;
            let action = if existed {
                ChangeAction::Modified
            } else {
                ChangeAction::Created
            };
            let planned = record_change(ctx, &written.as_str(), action);
            Ok(ToolOutput::text(format!(
                "{} {rel} ({} bytes, {} lines){}{}",
                if existed { "wrote" } else { "created" },
                a.content.len(),
                a.content.lines().count(),
                unplanned_note(planned),
                runner_note(ctx, &rel)
            )))
        })
    }
}

/// `delete_file`: remove a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteFile;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteArgs {
    path: String,
}

impl Tool for DeleteFile {
    fn name(&self) -> &str {
        "delete_file"
    }

    fn description(&self) -> &str {
        "Delete a file of the repository (not a directory)."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File relative to the repository root."}
            },
            "required": ["path"],
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        true
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: serde_json::Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let a: DeleteArgs = parse_args("delete_file", args)?;
            let rel = check_write(ctx, "delete_file", &a.path)?;
            let deleted = ctx
                .root()
                .delete(&rel, &real_path_guard(ctx, &rel))
                .map_err(|e| confine_err("delete_file", e))?;
            let planned = record_change(ctx, &deleted.as_str(), ChangeAction::Deleted);
            Ok(ToolOutput::text(format!(
                "deleted {rel}{}{}",
                unplanned_note(planned),
                runner_note(ctx, &rel)
            )))
        })
    }
}
