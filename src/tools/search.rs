//! `search`: a regex over the worktree that respects `.gitignore`, with paths and line numbers,
//! bounded. Built on ripgrep's `ignore`, `grep-regex` and `grep-searcher`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, SearcherBuilder, sinks::UTF8};
use serde::Deserialize;
use serde_json::json;

use super::output::{clip_line, fit};
use super::{Result, Tool, ToolContext, ToolError, ToolFuture, ToolOutput, parse_args};

/// Default and largest number of matching lines returned.
const DEFAULT_RESULTS: usize = 50;
const MAX_RESULTS: usize = 500;

/// `search`: find lines matching a regex.
#[derive(Debug, Clone, Copy, Default)]
pub struct Search;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    max_results: Option<usize>,
}

impl Tool for Search {
    fn name(&self) -> &str {
        "search"
    }

    fn description(&self) -> &str {
        "Search the repository for lines matching a regular expression (Rust regex syntax). Returns path:line: text, skipping files .gitignore ignores and binary files."
    }

    fn parameters(&self) -> serde_json::Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression."},
                "path": {"type": "string", "description": "File or directory to search, relative to the repository root (default: everything)."},
                "glob": {"type": "string", "description": "Only files whose path matches this glob, e.g. `*.rs` or `src/**/*.py`."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "description": "Most matching lines to return (default 50)."}
            },
            "required": ["pattern"],
            "additionalProperties": false
        })
    }

    fn mutating(&self) -> bool {
        false
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, args: serde_json::Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let a: SearchArgs = parse_args("search", args)?;
            let start = match &a.path {
                Some(p) => {
                    ctx.root()
                        .resolve_existing(p)
                        .map_err(|e| match e {
                            super::confine::ConfineError::Refused(m) => ToolError::ToModel(m),
                            super::confine::ConfineError::NotFound(p) => {
                                ToolError::ToModel(format!("{p} does not exist"))
                            }
                            other => ToolError::fatal("search", other),
                        })?
                        .1
                }
                None => ctx.root().path().to_path_buf(),
            };
            let root = ctx.root().path().to_path_buf();
            let max = a
                .max_results
                .unwrap_or(DEFAULT_RESULTS)
                .clamp(1, MAX_RESULTS);
            let line_chars = ctx.limits.max_line_chars;
            let limit = ctx.limits.max_bytes;
            let out = tokio::task::spawn_blocking(move || {
                search(
                    &root,
                    &start,
                    &a.pattern,
                    a.glob.as_deref(),
                    max,
                    line_chars,
                )
            })
            .await
            .map_err(|e| ToolError::fatal("search", e))??;
            Ok(ToolOutput::text(fit(&out, limit)))
        })
    }
}

fn search(
    root: &Path,
    start: &Path,
    pattern: &str,
    glob: Option<&str>,
    max: usize,
    line_chars: usize,
) -> Result<String> {
    let matcher = RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .build(pattern)
        .map_err(|e| ToolError::ToModel(format!("invalid regex `{pattern}`: {e}")))?;
    let mut walk = ignore::WalkBuilder::new(start);
    walk.hidden(false).require_git(false).filter_entry(|e| {
        !e.file_name()
            .as_encoded_bytes()
            .eq_ignore_ascii_case(b".git")
    });
    if let Some(g) = glob {
        let mut ob = ignore::overrides::OverrideBuilder::new(root);
        ob.add(g)
            .map_err(|e| ToolError::ToModel(format!("invalid glob `{g}`: {e}")))?;
        let ov = ob
            .build()
            .map_err(|e| ToolError::ToModel(format!("invalid glob `{g}`: {e}")))?;
        walk.overrides(ov);
    }
    let mut searcher = SearcherBuilder::new()
        .line_number(true)
        .binary_detection(BinaryDetection::quit(0))
        .build();
    let mut hits: Vec<String> = Vec::new();
    let mut more = false;
    let mut files: Vec<PathBuf> = walk
        .build()
        .flatten()
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(|e| e.into_path())
        .collect();
    files.sort();
    for path in files {
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        let mut stop = false;
        let res = searcher.search_path(
            &matcher,
            &path,
            UTF8(|n, line| {
                if hits.len() >= max {
                    stop = true;
                    return Ok(false);
                }
                hits.push(format!(
                    "{rel}:{n}: {}",
                    clip_line(line.trim_end_matches(['\n', '\r']), line_chars)
                ));
                Ok(true)
            }),
        );
        // Unreadable or non-UTF-8 files are skipped, like ripgrep does.
        let _ = res;
        if stop {
            more = true;
            break;
        }
    }
    let mut out = hits.join("\n");
    if hits.is_empty() {
        out.push_str("no matches");
    }
    out.push('\n');
    if more {
        let _ = writeln!(
            out,
            "[… stopped after {max} matches; narrow the pattern, path or glob to see the rest …]"
        );
    }
    Ok(out)
}
