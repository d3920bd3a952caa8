//! Per-language extraction with tree-sitter: definitions, references and imports, plus the
//! term bag every file gets (parsed or not).

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use tree_sitter::{Language, Parser, Query, QueryCursor, StreamingIterator as _};

use super::error::{Error, Result};
use super::summary::{Def, FileSummary, Lang, Skip};
use super::text;

/// Files larger than this are indexed by path only.
pub const MAX_FILE_BYTES: usize = 1 << 20;

const PYTHON: &str = r#"
(class_definition name: (identifier) @name) @def.class
(function_definition name: (identifier) @name) @def.function
(module (expression_statement (assignment left: (identifier) @name) @def.variable))
(call function: (identifier) @ref)
(attribute attribute: (identifier) @ref)
(import_statement name: (dotted_name) @import)
(import_statement name: (aliased_import name: (dotted_name) @import))
(import_from_statement module_name: (_) @import)
(import_from_statement module_name: (_) name: (dotted_name) @import.member)
(import_from_statement module_name: (_) name: (aliased_import name: (dotted_name) @import.member))
"#;

const RUST: &str = r#"
(struct_item name: (_) @name) @def.struct
(enum_item name: (_) @name) @def.enum
(union_item name: (_) @name) @def.union
(type_item name: (_) @name) @def.type
(function_item name: (_) @name) @def.fn
(function_signature_item name: (_) @name) @def.fn
(trait_item name: (_) @name) @def.trait
(mod_item name: (_) @name) @def.mod
(macro_definition name: (_) @name) @def.macro
(const_item name: (_) @name) @def.const
(static_item name: (_) @name) @def.static
(impl_item type: (_) @name) @def.impl
(call_expression function: (identifier) @ref)
(call_expression function: (field_expression field: (field_identifier) @ref))
(call_expression function: (scoped_identifier name: (identifier) @ref))
(macro_invocation macro: (identifier) @ref)
(type_identifier) @ref
(use_declaration argument: (_) @import)
"#;

const JAVASCRIPT: &str = r#"
(class_declaration name: (_) @name) @def.class
(function_declaration name: (_) @name) @def.function
(generator_function_declaration name: (_) @name) @def.function
(method_definition name: (_) @name) @def.method
(variable_declarator name: (identifier) @name value: [(arrow_function) (function_expression)]) @def.function
(call_expression function: (identifier) @ref)
(call_expression function: (member_expression property: (property_identifier) @ref))
(new_expression constructor: (identifier) @ref)
(import_statement source: (string) @import)
(export_statement source: (string) @import)
(call_expression function: (identifier) @_f arguments: (arguments (string) @import) (#eq? @_f "require"))
"#;

const TYPESCRIPT_EXTRA: &str = r#"
(interface_declaration name: (_) @name) @def.interface
(type_alias_declaration name: (_) @name) @def.type
(enum_declaration name: (_) @name) @def.enum
(abstract_class_declaration name: (_) @name) @def.class
(function_signature name: (_) @name) @def.function
(method_signature name: (_) @name) @def.method
(abstract_method_signature name: (_) @name) @def.method
(module name: (_) @name) @def.module
(type_identifier) @ref
"#;

const GO: &str = r#"
(function_declaration name: (identifier) @name) @def.func
(method_declaration name: (field_identifier) @name) @def.method
(type_spec name: (type_identifier) @name) @def.type
(source_file (const_declaration (const_spec name: (identifier) @name) @def.const))
(source_file (var_declaration (var_spec name: (identifier) @name) @def.var))
(call_expression function: (identifier) @ref)
(call_expression function: (selector_expression field: (field_identifier) @ref))
(type_identifier) @ref
(import_spec path: (_) @import)
"#;

const JAVA: &str = r#"
(class_declaration name: (identifier) @name) @def.class
(interface_declaration name: (identifier) @name) @def.interface
(enum_declaration name: (identifier) @name) @def.enum
(record_declaration name: (identifier) @name) @def.record
(method_declaration name: (identifier) @name) @def.method
(constructor_declaration name: (identifier) @name) @def.constructor
(method_invocation name: (identifier) @ref)
(type_identifier) @ref
(import_declaration (scoped_identifier) @import)
"#;

const C: &str = r#"
(function_declarator declarator: (identifier) @name) @def.function
(struct_specifier name: (type_identifier) @name body: (_)) @def.struct
(union_specifier name: (type_identifier) @name body: (_)) @def.union
(enum_specifier name: (type_identifier) @name body: (_)) @def.enum
(type_definition declarator: (type_identifier) @name) @def.typedef
(preproc_def name: (identifier) @name) @def.macro
(preproc_function_def name: (identifier) @name) @def.macro
(call_expression function: (identifier) @ref)
(call_expression function: (field_expression field: (field_identifier) @ref))
(type_identifier) @ref
(preproc_include path: (_) @import)
"#;

const CPP_EXTRA: &str = r#"
(function_declarator declarator: (field_identifier) @name) @def.function
(function_declarator declarator: (qualified_identifier) @name) @def.method
(function_declarator declarator: (destructor_name) @name) @def.method
(class_specifier name: (type_identifier) @name body: (_)) @def.class
(namespace_definition name: (_) @name) @def.namespace
(template_function name: (identifier) @ref)
"#;

const RUBY: &str = r#"
(method name: (_) @name) @def.method
(singleton_method name: (_) @name) @def.method
(class name: (_) @name) @def.class
(module name: (_) @name) @def.module
(call method: (identifier) @ref)
(constant) @ref
(call method: (identifier) @_f arguments: (argument_list (string) @import) (#match? @_f "^require"))
"#;

fn grammar(lang: Lang) -> (Language, String) {
    match lang {
        Lang::Rust => (tree_sitter_rust::LANGUAGE.into(), RUST.to_string()),
        Lang::Python => (tree_sitter_python::LANGUAGE.into(), PYTHON.to_string()),
        Lang::JavaScript => (
            tree_sitter_javascript::LANGUAGE.into(),
            JAVASCRIPT.to_string(),
        ),
        Lang::TypeScript => (
            tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            format!("{JAVASCRIPT}{TYPESCRIPT_EXTRA}"),
        ),
        Lang::Tsx => (
            tree_sitter_typescript::LANGUAGE_TSX.into(),
            format!("{JAVASCRIPT}{TYPESCRIPT_EXTRA}"),
        ),
        Lang::Go => (tree_sitter_go::LANGUAGE.into(), GO.to_string()),
        Lang::Java => (tree_sitter_java::LANGUAGE.into(), JAVA.to_string()),
        Lang::C => (tree_sitter_c::LANGUAGE.into(), C.to_string()),
        Lang::Cpp => (tree_sitter_cpp::LANGUAGE.into(), format!("{C}{CPP_EXTRA}")),
        Lang::Ruby => (tree_sitter_ruby::LANGUAGE.into(), RUBY.to_string()),
    }
}

enum Role {
    Name,
    Def(String),
    Ref,
    Import,
    ImportMember,
    Other,
}

struct Compiled {
    language: Language,
    query: Query,
    roles: Vec<Role>,
}

/// Compiled queries, one per language, compiled on first use and shared by worker threads.
#[derive(Default)]
pub struct Extractor {
    compiled:
        [OnceLock<std::result::Result<Compiled, std::sync::Arc<tree_sitter::QueryError>>>; 10],
}

/// One worker's tree-sitter parsers (a parser is not shareable between threads).
#[derive(Default)]
pub struct Parsers {
    by_lang: HashMap<Lang, Parser>,
}

impl std::fmt::Debug for Extractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Extractor")
    }
}

fn compile(lang: Lang) -> std::result::Result<Compiled, tree_sitter::QueryError> {
    let (language, source) = grammar(lang);
    let query = Query::new(&language, &source)?;
    let roles = query
        .capture_names()
        .iter()
        .map(|n| match *n {
            "name" => Role::Name,
            "ref" => Role::Ref,
            "import" => Role::Import,
            "import.member" => Role::ImportMember,
            other => match other.strip_prefix("def.") {
                Some(kind) => Role::Def(kind.to_string()),
                None => Role::Other,
            },
        })
        .collect();
    Ok(Compiled {
        language,
        query,
        roles,
    })
}

/// Why content is skipped, judged from the bytes alone.
pub fn skip_reason(data: &[u8]) -> Option<Skip> {
    if data.len() > MAX_FILE_BYTES {
        return Some(Skip::TooLarge);
    }
    if data[..data.len().min(8000)].contains(&0) || std::str::from_utf8(data).is_err() {
        return Some(Skip::Binary);
    }
    let head = &data[..data.len().min(1024)];
    let head = String::from_utf8_lossy(head);
    if [
        "@generated",
        "DO NOT EDIT",
        "Code generated by",
        "autogenerated",
        "auto-generated",
    ]
    .iter()
    .any(|m| head.contains(m))
    {
        return Some(Skip::Generated);
    }
    let lines = data.iter().filter(|&&b| b == b'\n').count() + 1;
    if data.len() > 4096 && data.len() / lines > 400 {
        return Some(Skip::Minified);
    }
    None
}

fn signature(src: &str, node: tree_sitter::Node<'_>) -> String {
    let line_start = src[..node.start_byte()].rfind('\n').map_or(0, |i| i + 1);
    let mut end = node.end_byte();
    if let Some(body) = node.child_by_field_name("body") {
        end = end.min(body.start_byte());
    }
    // At most three lines of header.
    let mut nl = 0;
    for (i, b) in src[line_start..end].bytes().enumerate() {
        if b == b'\n' {
            nl += 1;
            if nl == 3 {
                end = line_start + i;
                break;
            }
        }
    }
    let mut sig = String::new();
    for word in src[line_start..end].split_whitespace() {
        if !sig.is_empty() {
            sig.push(' ');
        }
        sig.push_str(word);
        if sig.len() > 160 {
            break;
        }
    }
    if sig.len() > 160 {
        let mut cut = 160;
        while !sig.is_char_boundary(cut) {
            cut -= 1;
        }
        sig.truncate(cut);
        sig.push('…');
    }
    sig.trim_end_matches(['{', ' ']).to_string()
}

fn last_segment(name: &str) -> &str {
    let name = name.rsplit("::").next().unwrap_or(name);
    name.rsplit('.').next().unwrap_or(name)
}

impl Extractor {
    /// A fresh extractor (queries compile lazily).
    pub fn new() -> Self {
        Self::default()
    }

    fn compiled(&self, lang: Lang) -> Result<&Compiled> {
        let slot = &self.compiled[usize::from(lang.tag() - 1)];
        slot.get_or_init(|| compile(lang).map_err(std::sync::Arc::new))
            .as_ref()
            .map_err(|e| Error::Query {
                language: lang.name(),
                source: e.clone(),
            })
    }

    /// Summarize a file's content; `lang` is `None` for files indexed as text.
    pub fn summarize(
        &self,
        parsers: &mut Parsers,
        lang: Option<Lang>,
        data: &[u8],
    ) -> Result<FileSummary> {
        let mut summary = FileSummary {
            lang,
            ..FileSummary::default()
        };
        if let Some(skip) = skip_reason(data) {
            summary.skip = Some(skip);
            return Ok(summary);
        }
        let src = std::str::from_utf8(data).unwrap_or_default();
        summary.lines = src.lines().count() as u32;
        let spans = match lang {
            Some(lang) => self.extract(parsers, lang, src, &mut summary)?,
            None => Vec::new(),
        };
        bag_terms(src, &spans, &mut summary);
        Ok(summary)
    }

    /// Fill `summary`'s definitions, references and imports; returns each definition's byte
    /// span, in `summary.defs` order (sorted by start, outer before inner).
    fn extract(
        &self,
        parsers: &mut Parsers,
        lang: Lang,
        src: &str,
        summary: &mut FileSummary,
    ) -> Result<Vec<(usize, usize)>> {
        let compiled = self.compiled(lang)?;
        let parser = match parsers.by_lang.entry(lang) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let mut p = Parser::new();
                p.set_language(&compiled.language)
                    .map_err(|e| Error::Grammar {
                        language: lang.name(),
                        source: e,
                    })?;
                v.insert(p)
            }
        };
        let Some(tree) = parser.parse(src, None) else {
            return Ok(Vec::new());
        };
        let mut cursor = QueryCursor::new();
        let mut matches = cursor.matches(&compiled.query, tree.root_node(), src.as_bytes());
        // (start byte, end byte, def) so nesting can be worked out after sorting.
        let mut defs: Vec<(usize, usize, Def)> = Vec::new();
        let mut seen_defs: HashSet<(usize, usize)> = HashSet::new();
        let mut refs: HashSet<&str> = HashSet::new();
        let mut imports: Vec<String> = Vec::new();
        let mut module: Option<String> = None;
        while let Some(m) = matches.next() {
            let mut name = None;
            let mut def = None;
            for cap in m.captures() {
                let text = cap.node.utf8_text(src.as_bytes()).unwrap_or_default();
                match &compiled.roles[cap.index as usize] {
                    Role::Name => name = Some(text),
                    Role::Def(kind) => def = Some((cap.node, kind)),
                    Role::Ref => {
                        refs.insert(last_segment(text));
                    }
                    Role::Import => {
                        let t = text.trim_matches(['"', '\'', '<', '>', '`']).to_string();
                        module = Some(t.clone());
                        if !imports.contains(&t) {
                            imports.push(t);
                        }
                    }
                    Role::ImportMember => {
                        if let Some(module) = &module {
                            let sep = if module.ends_with('.') { "" } else { "." };
                            let t = format!("{module}{sep}{text}");
                            if !imports.contains(&t) {
                                imports.push(t);
                            }
                        }
                    }
                    Role::Other => {}
                }
            }
            if let (Some(name), Some((node, kind))) = (name, def) {
                let key = (node.start_byte(), node.end_byte());
                if seen_defs.insert(key) {
                    let name = last_segment(name).to_string();
                    defs.push((
                        key.0,
                        key.1,
                        Def {
                            name,
                            kind: kind.clone(),
                            line: node.start_position().row as u32 + 1,
                            signature: signature(src, node),
                            parent: None,
                            terms: Vec::new(),
                        },
                    ));
                }
            }
        }
        defs.sort_by_key(|(s, e, _)| (*s, std::cmp::Reverse(*e)));
        let mut stack: Vec<(usize, u32)> = Vec::new();
        for (i, (start, end, def)) in defs.iter_mut().enumerate() {
            while stack.last().is_some_and(|(e, _)| *e <= *start) {
                stack.pop();
            }
            def.parent = stack.last().map(|(_, p)| *p);
            stack.push((*end, i as u32));
        }
        let spans = defs.iter().map(|(s, e, _)| (*s, *e)).collect();
        summary.defs = defs.into_iter().map(|(_, _, d)| d).collect();
        let mut refs: Vec<String> = refs
            .into_iter()
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .collect();
        refs.sort_unstable();
        summary.refs = refs;
        summary.imports = imports;
        Ok(spans)
    }
}

/// The file's term bag, and each definition's own share of it: a term belongs to the innermost
/// definition whose span holds it (`spans` sorted by start, outer before inner, as properly
/// nested tree-sitter nodes are).
fn bag_terms(src: &str, spans: &[(usize, usize)], summary: &mut FileSummary) {
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut counts: Vec<u32> = Vec::new();
    // (definition, term id) for every term inside a definition.
    let mut owned: Vec<(u32, u32)> = Vec::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut next = 0;
    let mut last_at = usize::MAX;
    let mut owner: Option<usize> = None;
    text::terms_at(src, |at, t| {
        if at != last_at {
            last_at = at;
            while next < spans.len() && spans[next].0 <= at {
                while stack.last().is_some_and(|&d| spans[d].1 <= spans[next].0) {
                    stack.pop();
                }
                stack.push(next);
                next += 1;
            }
            while stack.last().is_some_and(|&d| spans[d].1 <= at) {
                stack.pop();
            }
            owner = stack.last().copied();
        }
        let id = match ids.get(t) {
            Some(&id) => id,
            None => {
                let id = counts.len() as u32;
                ids.insert(t.to_string(), id);
                counts.push(0);
                id
            }
        };
        counts[id as usize] += 1;
        if let Some(d) = owner {
            owned.push((d as u32, id));
        }
    });
    let mut terms: Vec<(String, u32)> = ids.into_iter().collect();
    terms.sort_unstable();
    // First-seen id → position in the sorted bag.
    let mut rank = vec![0u32; terms.len()];
    for (pos, (_, id)) in terms.iter_mut().enumerate() {
        rank[*id as usize] = pos as u32;
        *id = counts[*id as usize];
    }
    summary.terms = terms;
    for p in &mut owned {
        p.1 = rank[p.1 as usize];
    }
    owned.sort_unstable();
    for chunk in owned.chunk_by(|a, b| a == b) {
        let (d, t) = chunk[0];
        if let Some(def) = summary.defs.get_mut(d as usize) {
            def.terms.push((t, chunk.len() as u32));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summarize(lang: Lang, src: &str) -> FileSummary {
        Extractor::new()
            .summarize(&mut Parsers::default(), Some(lang), src.as_bytes())
            .unwrap()
    }

    fn def_names(s: &FileSummary) -> Vec<(&str, &str)> {
        s.defs
            .iter()
            .map(|d| (d.name.as_str(), d.kind.as_str()))
            .collect()
    }

    #[test]
    fn every_query_compiles() {
        let x = Extractor::new();
        for lang in Lang::ALL {
            x.compiled(lang).unwrap();
        }
    }

    #[test]
    fn python_defs_refs_imports_and_nesting() {
        let s = summarize(
            Lang::Python,
            "import os.path\nfrom .utils import helper as h\nLIMIT = 3\n\nclass PairGrid(Grid):\n    \"\"\"A grid of pairs.\"\"\"\n    def map(self, func,\n            **kws):\n        return helper(func).draw()\n",
        );
        assert_eq!(
            def_names(&s),
            [
                ("LIMIT", "variable"),
                ("PairGrid", "class"),
                ("map", "function")
            ]
        );
        assert_eq!(s.defs[2].parent, Some(1));
        assert_eq!(s.defs[2].signature, "def map(self, func, **kws):");
        assert_eq!(s.defs[1].line, 5);
        assert!(s.refs.contains(&"helper".to_string()) && s.refs.contains(&"draw".to_string()));
        assert_eq!(s.imports, ["os.path", ".utils", ".utils.helper"]);
        assert!(s.terms.iter().any(|(t, _)| t == "pair"));
        assert!(s.terms.iter().any(|(t, _)| t == "grid"));
    }

    /// Each definition owns the terms of its span outside nested definitions; terms outside
    /// every definition belong to the file only.
    #[test]
    fn definitions_own_the_terms_of_their_spans() {
        let s = summarize(
            Lang::Python,
            "import zebra\n\nclass PairGrid:\n    \"\"\"Draws legends.\"\"\"\n    def map(self):\n        return marker + marker\n\nTAIL = walrus\n",
        );
        let own = |d: usize| -> Vec<(&str, u32)> {
            s.defs[d]
                .terms
                .iter()
                .map(|&(t, n)| (s.terms[t as usize].0.as_str(), n))
                .collect()
        };
        assert_eq!(def_names(&s)[1], ("map", "function"));
        let class = own(0);
        assert!(class.contains(&("legend", 1)), "{class:?}");
        assert!(!class.iter().any(|(t, _)| *t == "marker"), "{class:?}");
        let method = own(1);
        assert!(method.contains(&("marker", 2)), "{method:?}");
        assert!(!method.iter().any(|(t, _)| *t == "legend"), "{method:?}");
        assert!(
            own(2).contains(&("walru", 1)) || own(2).contains(&("walrus", 1)),
            "{:?}",
            own(2)
        );
        assert!(s.defs.iter().all(|d| {
            !d.terms
                .iter()
                .any(|&(t, _)| s.terms[t as usize].0 == "zebra")
        }));
        assert!(s.terms.iter().any(|(t, n)| t == "zebra" && *n == 1));
    }

    #[test]
    fn rust_defs_and_refs() {
        let s = summarize(
            Lang::Rust,
            "use crate::workspace::Repo;\npub struct Index { files: Vec<File> }\nimpl Index {\n    pub fn build(repo: &Repo) -> Self { todo!() }\n}\ntrait Rank {}\n",
        );
        assert_eq!(
            def_names(&s),
            [
                ("Index", "struct"),
                ("Index", "impl"),
                ("build", "fn"),
                ("Rank", "trait")
            ]
        );
        assert_eq!(s.defs[2].parent, Some(1));
        assert_eq!(s.defs[2].signature, "pub fn build(repo: &Repo) -> Self");
        assert!(s.refs.contains(&"Repo".to_string()) && s.refs.contains(&"todo".to_string()));
        assert_eq!(s.imports, ["crate::workspace::Repo"]);
    }

    #[test]
    fn javascript_and_typescript() {
        let s = summarize(
            Lang::JavaScript,
            "import x from './x.js';\nconst y = require('y');\nclass A { run() { return go(); } }\nconst f = () => 1;\nfunction g() {}\n",
        );
        assert_eq!(
            def_names(&s),
            [
                ("A", "class"),
                ("run", "method"),
                ("f", "function"),
                ("g", "function")
            ]
        );
        assert_eq!(s.imports, ["./x.js", "y"]);
        assert!(s.refs.contains(&"go".to_string()));
        let s = summarize(
            Lang::TypeScript,
            "interface Shape { area(): number }\ntype Id = string;\nexport function make(s: Shape): Id { return new Circle(); }\n",
        );
        assert_eq!(
            def_names(&s),
            [
                ("Shape", "interface"),
                ("area", "method"),
                ("Id", "type"),
                ("make", "function")
            ]
        );
        assert!(s.refs.contains(&"Circle".to_string()) && s.refs.contains(&"Shape".to_string()));
        let s = summarize(Lang::Tsx, "export const App = () => <div/>;\n");
        assert_eq!(def_names(&s), [("App", "function")]);
    }

    #[test]
    fn go_java_c_cpp_ruby() {
        let s = summarize(
            Lang::Go,
            "package main\nimport \"fmt\"\ntype Server struct{}\nfunc (s *Server) Serve() { fmt.Println(1) }\nfunc main() {}\n",
        );
        assert_eq!(
            def_names(&s),
            [("Server", "type"), ("Serve", "method"), ("main", "func")]
        );
        assert_eq!(s.imports, ["fmt"]);
        assert!(s.refs.contains(&"Println".to_string()));

        let s = summarize(
            Lang::Java,
            "import java.util.List;\nclass Foo { Foo() {} void bar() { baz(); } }\n",
        );
        assert_eq!(
            def_names(&s),
            [("Foo", "class"), ("Foo", "constructor"), ("bar", "method")]
        );
        assert_eq!(s.imports, ["java.util.List"]);
        assert!(s.refs.contains(&"baz".to_string()));

        let s = summarize(
            Lang::C,
            "#include <stdio.h>\n#define MAX 3\nstruct point { int x; };\nstatic int add(int a) { return helper(a); }\n",
        );
        assert_eq!(
            def_names(&s),
            [("MAX", "macro"), ("point", "struct"), ("add", "function")]
        );
        assert_eq!(s.defs[2].signature, "static int add(int a)");
        assert_eq!(s.imports, ["stdio.h"]);
        assert!(s.refs.contains(&"helper".to_string()));

        let s = summarize(
            Lang::Cpp,
            "namespace ns { class Widget { void draw(); }; }\nvoid ns::Widget::draw() { paint(); }\n",
        );
        let names = def_names(&s);
        assert!(names.contains(&("ns", "namespace")), "{names:?}");
        assert!(names.contains(&("Widget", "class")), "{names:?}");
        assert!(names.contains(&("draw", "method")), "{names:?}");

        let s = summarize(
            Lang::Ruby,
            "require 'json'\nmodule Shop\n  class Cart\n    def total\n      items.sum\n    end\n  end\nend\n",
        );
        assert_eq!(
            def_names(&s),
            [("Shop", "module"), ("Cart", "class"), ("total", "method")]
        );
        assert_eq!(s.imports, ["json"]);
        assert!(s.refs.contains(&"sum".to_string()));
    }

    #[test]
    fn skips_binary_generated_and_minified() {
        assert_eq!(skip_reason(b"abc\0def"), Some(Skip::Binary));
        assert_eq!(
            skip_reason(b"// Code generated by protoc. DO NOT EDIT.\npackage x\n"),
            Some(Skip::Generated)
        );
        let minified = format!("var a={};\n", "x".repeat(10_000));
        assert_eq!(skip_reason(minified.as_bytes()), Some(Skip::Minified));
        assert_eq!(skip_reason(b"fn main() {}\n"), None);
        let s = Extractor::new()
            .summarize(
                &mut Parsers::default(),
                None,
                b"Just some notes about parsing.\n",
            )
            .unwrap();
        assert_eq!(s.lang, None);
        assert!(s.terms.iter().any(|(t, _)| t == "note"));
    }
}
