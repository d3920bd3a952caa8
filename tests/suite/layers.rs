//! The module map, enforced: a module may use the modules of its own layer and of the layers
//! below it, never one above. The layers are those `docs/ARCHITECTURE.md` draws:
//!
//! `cli → server → run → {tools, trigger} → {policy, exec, model, index, forge}
//!  → {config, store, verify, audit, workspace, task, failpoint, fsutil, tls}`
//!
//! A new top-level module must be placed in a layer here before it can be used.

use std::collections::{BTreeMap, BTreeSet};
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
    named_after(code, "crate::")
}

/// Every name `code` reaches right after `prefix` (`prefix` ending in `::`): `prefix name`
/// and each top-level name of `prefix {a, b::c}`. A `prefix` that continues an identifier
/// or a path (`mycrate::`, `super::super::` for `super::`) is not one.
fn named_after(code: &str, prefix: &str) -> Vec<String> {
    let mut used = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find(prefix) {
        let at = from + found;
        from = at + prefix.len();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // `mycrate::`, or deeper in a path: not ours
        }
        let rest = &code[from..];
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
    // `prefix super::…` climbs further, `prefix self` is the parent: neither is a name.
    used.retain(|n| n != "super" && n != "self");
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

/// The modules of the folder `src/<folder>` (files and subfolders, not counting test-only
/// ones) and, for each, the others its code outside tests names: through
/// `crate::<folder>::`, or `super::` (`super::super::` one folder down).
fn sibling_graph(folder: &str) -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(folder);
    let mut files = Vec::new();
    walk(&root, &root, &mut files);
    let module_of = |rel: &str| {
        rel.split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_string()
    };
    let root_text = files
        .iter()
        .find(|(rel, _)| rel == "mod.rs")
        .map_or(String::new(), |(_, t)| t.clone());
    let test_only: BTreeSet<String> = root_text
        .split("#[cfg(test)]")
        .skip(1)
        .filter_map(|after| {
            let decl = after.trim_start().strip_prefix("mod ")?;
            Some(
                decl.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()?
                    .to_string(),
            )
        })
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = files
        .iter()
        .map(|(rel, _)| module_of(rel))
        .filter(|m| m != "mod" && !test_only.contains(m))
        .map(|m| (m, BTreeSet::new()))
        .collect();
    for (rel, text) in &files {
        let module = module_of(rel);
        if !graph.contains_key(&module) {
            continue;
        }
        let parts: Vec<&str> = rel.split('/').collect();
        let levels = parts.len() - usize::from(parts.last() == Some(&"mod.rs"));
        let up = "super::".repeat(levels);
        let full = code_of(text);
        let code = full.split("#[cfg(test)]").next().unwrap_or_default();
        let mut named = named_after(code, &format!("crate::{folder}::"));
        named.extend(named_after(code, &up));
        for n in named {
            if n != module && graph.contains_key(&n) {
                graph.get_mut(&module).unwrap().insert(n);
            }
        }
    }
    graph
}

/// A circle in `graph`, as the modules along it (the first again at the end), if there is one.
fn a_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        at: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut circle = path[i..].to_vec();
            circle.push(at.to_string());
            return Some(circle);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_string());
        for next in g.get(at).into_iter().flatten() {
            if let Some(c) = visit(g, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(at.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(graph, m, &mut Vec::new(), &mut done))
}

// Issue 42 point 3: inside a folder the modules form a tree, not a knot: the engine on top of
// the run's steps, the steps on the shared types, nothing importing back up.
#[test]
fn the_modules_of_a_folder_import_each_other_in_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut folders: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir() && e.file_name() != "bin")
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    assert!(folders.iter().any(|f| f == "run"), "{folders:?}");
    let mut found = Vec::new();
    for folder in &folders {
        if let Some(c) = a_cycle(&sibling_graph(folder)) {
            found.push(format!("src/{folder}: {}", c.join(" → ")));
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
    // The engine sits on top: no other module of the run names it.
    let run = sibling_graph("run");
    let up: Vec<&String> = run
        .iter()
        .filter(|(m, uses)| *m != "publish" && uses.contains("engine"))
        .map(|(m, _)| m)
        .collect();
    assert!(up.is_empty(), "run modules that import the engine: {up:?}");
    assert!(run["engine"].contains("final_check") || run["engine"].contains("verification"));
}

#[test]
fn the_circle_finder_sees_a_circle_and_only_a_circle() {
    let g = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    let circle = a_cycle(&g(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])).unwrap();
    assert_eq!(circle.first(), circle.last());
    assert_eq!(circle.len(), 4, "{circle:?}");
    assert_eq!(
        a_cycle(&g(&[("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")])),
        None
    );
    // Each way of naming a sibling counts.
    assert_eq!(named_after("use super::{a, b::c};", "super::"), ["a", "b"]);
    assert_eq!(named_after("super::super::x; super::y", "super::"), ["y"]);
    assert_eq!(
        named_after("use super::super::{p, q};", "super::super::"),
        ["p", "q"]
    );
}
