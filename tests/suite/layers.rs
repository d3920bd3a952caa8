//! The module map, enforced: a module may use the modules of its own layer and of the layers
//! below it, never one above. The layers are those `docs/ARCHITECTURE.md` draws:
//!
//! `cli → server → run → {tools, trigger} → {policy, exec, model, index, forge}
//!  → {config, store, verify, audit, workspace, task, failpoint, fsutil, tls}`
//!
//! A new top-level module must be placed in a layer here before it can be used.

use std::path::Path;

/// The layers, top first.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["server"],
    &["run"],
    &["tools", "trigger"],
    &["policy", "exec", "model", "index", "forge"],
    &[
        "config",
        "store",
        "verify",
        "audit",
        "workspace",
        "task",
        "failpoint",
        "fsutil",
        "tls",
    ],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// `text` without its comments (line, doc and block) and string literals, so that a module
/// named in prose or in a message is not a dependency.
fn code_of(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            b'r' if raw_string_at(b, i).is_some() => {
                let hashes = raw_string_at(b, i).unwrap_or(0);
                i += 2 + hashes; // r, the hashes, the quote
                let end: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                while i < b.len() && !b[i..].starts_with(&end) {
                    i += 1;
                }
                i += end.len();
                out.push_str("\"\"");
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                // A char literal ('x', '\n', '\''); lifetimes fall through below.
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            c => {
                out.push(c as char);
                i += 1;
            }
        }
    }
    out
}

/// The number of hashes of a raw string literal starting at `i` (`r"`, `r#"`, …), if one does
/// and `r` does not end an identifier.
fn raw_string_at(b: &[u8], i: usize) -> Option<usize> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
    (b.get(i + 1 + hashes) == Some(&b'"')).then_some(hashes)
}

/// Every top-level module `code` names through `crate::…` (including `crate::{a, b::c}`).
fn used_modules(code: &str) -> Vec<String> {
    let mut used = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `mycrate::`, not ours
        }
        let rest_trim = rest.trim_start();
        if let Some(group) = rest_trim.strip_prefix('{') {
            // Top-level names of the group: those at brace depth 0.
            let mut depth = 0;
            let mut name = String::new();
            let mut at_start = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        if !name.is_empty() {
                            used.push(std::mem::take(&mut name));
                        }
                        at_start = true;
                    }
                    c if depth == 0 && at_start && (c.is_alphanumeric() || c == '_') => {
                        name.push(c);
                    }
                    _ if depth == 0 && !name.is_empty() => {
                        used.push(std::mem::take(&mut name));
                        at_start = false;
                    }
                    _ => {}
                }
            }
            if !name.is_empty() {
                used.push(name);
            }
        } else {
            let name: String = rest_trim
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            used.push(name);
        }
    }
    used
}

/// The violations in the file at `rel` (relative to `src/`) with `text`: "`from` uses `to`".
fn violations(rel: &str, text: &str) -> Vec<String> {
    let top = rel
        .split('/')
        .next()
        .unwrap_or(rel)
        .trim_end_matches(".rs")
        .to_string();
    let Some(own) = layer_of(&top) else {
        return Vec::new(); // lib.rs, main.rs, bin/: the crate's roots may use anything
    };
    let mut out = Vec::new();
    for m in used_modules(&code_of(text)) {
        match layer_of(&m) {
            Some(l) if l < own => out.push(format!("{rel}: `{top}` uses `{m}`, a layer above it")),
            _ => {}
        }
    }
    out
}

fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.push((rel, std::fs::read_to_string(&p).unwrap()));
        }
    }
}

#[test]
fn no_module_uses_a_layer_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    let mut tops: Vec<String> = files
        .iter()
        .filter(|(rel, _)| !rel.starts_with("bin/") && rel != "lib.rs" && rel != "main.rs")
        .map(|(rel, _)| {
            rel.split('/')
                .next()
                .unwrap()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    tops.sort();
    tops.dedup();
    let unplaced: Vec<_> = tops.iter().filter(|t| layer_of(t).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules in no layer (place them in tests/suite/layers.rs and docs/ARCHITECTURE.md): {unplaced:?}"
    );
    let found: Vec<String> = files
        .iter()
        .flat_map(|(rel, text)| violations(rel, text))
        .collect();
    assert!(
        found.is_empty(),
        "imports up the layers:\n{}",
        found.join("\n")
    );
    assert!(files.len() > 50, "the walk found the sources");
}

#[test]
fn the_checker_sees_each_way_of_naming_a_module() {
    // Each of these is a violation in `tools` (run and server are above it).
    for text in [
        "use crate::run::engine::Services;",
        "use crate::{audit, run::publish};",
        "fn f() { crate::server::serve(); }",
        "use crate::{\n    config::Config,\n    run::{self, engine},\n};",
    ] {
        assert_eq!(
            violations("tools/x.rs", text).len(),
            1,
            "not caught: {text}"
        );
    }
    // And these are not: the same layer, a layer below, prose, strings, another crate.
    for text in [
        "use crate::trigger::Directive;",
        "use crate::{config, exec::ExecOptions};",
        "// see crate::run::engine\n/* crate::cli */ fn f() {}",
        "const S: &str = \"crate::run::x\"; let c = '\"'; let d = crate::task::Task::default();",
        "let s = r#\"a \" crate::run \"#; let t = br\"crate::cli\";",
        "use othercrate::run::x;",
    ] {
        assert_eq!(
            violations("tools/x.rs", text),
            Vec::<String>::new(),
            "{text}"
        );
    }
    // The roots may use anything; a new module must be placed first.
    assert!(violations("lib.rs", "use crate::cli::x;").is_empty());
    assert_eq!(layer_of("newthing"), None);
}
