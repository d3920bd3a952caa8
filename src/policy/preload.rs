//! Files the test runner loads before or around the tests because its configuration names
//! them (issue 40, point 2): mocha's `require`, jest's and vitest's `setupFiles`,
//! `globalSetup` and `transform`, `node --require`/`--import` in the test script or
//! `NODE_OPTIONS`, a Cargo `runner`, pytest's `-p` plugins and `pytest_plugins`.
//!
//! Such a file is not a test and often not in a test directory (`support/setup.js`), so
//! neither the held-out run nor the runner-file list covers it, yet it runs in the tests'
//! process first and can patch the code under test: a changed preload made a wrong
//! `add` pass. [`preloaded_by`] names the configuration that loads a path; the commit gate
//! then treats a change to it as runner configuration (a person approves it).
//!
//! Configuration is looked for in the path's directory and every directory above it (a
//! package's own `.mocharc.yml` in a monorepo); a nested configuration that names a file
//! outside its own directory (`../../shared/hook.js`) is not found.
//!
//! The configuration is read as the base has it (a change to the configuration itself is
//! runner configuration already). Reading is by token, not by each runner's schema: any
//! token of a runner's settings that resolves to the path counts, so a key we never heard of
//! is covered too. Only the runner's part of a mixed file is read (`package.json`'s
//! `scripts`/`jest`/`mocha`/…, `pyproject.toml`'s `[tool.pytest…]`), so `"main":
//! "lib/index.js"` does not make the project's entry point a preload. Not read: `vite.config.*`
//! and `karma.conf.js`, which name the project's own sources as build entries (vitest's
//! `setupFiles` there are missed; its own `vitest.config.*` is read).

/// Configuration files read whole, in the directory of the path or any directory above it.
const WHOLE: &[&str] = &[
    ".mocharc",
    ".mocharc.js",
    ".mocharc.cjs",
    ".mocharc.mjs",
    ".mocharc.json",
    ".mocharc.jsonc",
    ".mocharc.yml",
    ".mocharc.yaml",
    "jest.config.js",
    "jest.config.cjs",
    "jest.config.mjs",
    "jest.config.ts",
    "jest.config.json",
    "vitest.config.js",
    "vitest.config.mjs",
    "vitest.config.cjs",
    "vitest.config.ts",
    "vitest.config.mts",
    "vitest.workspace.ts",
    "vitest.workspace.js",
    "ava.config.js",
    "ava.config.cjs",
    "ava.config.mjs",
    ".taprc",
    ".npmrc",
    ".cargo/config.toml",
    ".cargo/config",
    "pytest.ini",
    ".pytest.ini",
    "tox.ini",
];

/// `package.json` keys that configure the runners (the rest — `main`, `exports`, `files` —
/// names the project's own code).
const PACKAGE_JSON_KEYS: &[&str] = &[
    "scripts", "jest", "mocha", "ava", "tap", "vitest", "c8", "nyc",
];

/// Extensions a JavaScript specifier may leave out.
const JS_EXTENSIONS: &[&str] = &["js", "cjs", "mjs", "ts", "cts", "mts", "jsx", "tsx", "json"];

/// Why the runner loads `rela` (repository-relative) before or around the tests, by the
/// configuration `read` returns (repository-relative path → content, as the base has it) and
/// the test command; `None` when nothing names it.
pub fn preloaded_by(
    rela: &str,
    read: &dyn Fn(&str) -> Option<Vec<u8>>,
    test_command: &str,
) -> Option<String> {
    if names_file(&tokens(test_command), "", rela) || python_plugin(test_command, rela) {
        return Some(format!(
            "`{rela}` is loaded before the tests by the test command `{}`",
            test_command.trim()
        ));
    }
    let text_of = |config: &str| read(config).map(|b| String::from_utf8_lossy(&b).into_owned());
    for dir in ancestors(rela) {
        let at = |name: &str| {
            if dir.is_empty() {
                name.to_string()
            } else {
                format!("{dir}/{name}")
            }
        };
        for name in WHOLE {
            let config = at(name);
            let Some(text) = text_of(&config) else {
                continue;
            };
            // pytest's settings name test files (`python_files`, `testpaths`), which the
            // held-out run covers; what they load first is a `-p` plugin.
            let loads = if matches!(*name, "pytest.ini" | ".pytest.ini" | "tox.ini") {
                python_plugin(&text, rela)
            } else {
                names_file(&tokens(&text), dir, rela)
            };
            if loads {
                return Some(loaded_by(rela, &config));
            }
        }
        let config = at("package.json");
        if let Some(text) = text_of(&config)
            && names_file(&tokens(&package_json_part(&text)), dir, rela)
        {
            return Some(loaded_by(rela, &config));
        }
        for (name, part) in [
            ("pyproject.toml", pyproject_part as fn(&str) -> String),
            ("setup.cfg", setup_cfg_part),
        ] {
            let config = at(name);
            if let Some(text) = text_of(&config)
                && python_plugin(&part(&text), rela)
            {
                return Some(loaded_by(rela, &config));
            }
        }
        let conftest = at("conftest.py");
        if let Some(text) = text_of(&conftest)
            && pytest_plugins(&text).iter().any(|m| module_is(m, rela))
        {
            return Some(loaded_by(rela, &conftest));
        }
    }
    None
}

fn loaded_by(rela: &str, config: &str) -> String {
    format!("`{rela}` is loaded before the tests because `{config}` names it (a preload)")
}

/// `a/b/c.js` → `a/b`, `a`, `` (the directories a configuration that names it may sit in).
fn ancestors(rela: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut cur = rela;
    while let Some((parent, _)) = cur.rsplit_once('/') {
        out.push(parent);
        cur = parent;
    }
    out.push("");
    out
}

/// The words of a configuration, split where no file name goes on: blanks, quotes, brackets,
/// commas, `=` and `;`.
fn tokens(text: &str) -> Vec<&str> {
    text.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '"' | '\'' | '`' | '[' | ']' | '{' | '}' | '(' | ')' | ',' | '=' | ';'
            )
    })
    .filter(|t| !t.is_empty())
    .collect()
}

/// Whether one of `tokens`, read as a path relative to `dir` (the configuration's directory;
/// `<rootDir>` is that too), is `rela`, with or without its extension. (A directory's
/// `index` is not resolved: `roots: ['<rootDir>/src']` would make `src/index.js` a preload.)
fn names_file(tokens: &[&str], dir: &str, rela: &str) -> bool {
    let stem = rela
        .rsplit_once('.')
        .filter(|(s, ext)| !s.ends_with('/') && JS_EXTENSIONS.contains(ext))
        .map(|(s, _)| s);
    tokens.iter().any(|t| {
        let t = t.strip_prefix("<rootDir>/").unwrap_or(t);
        let t = t.strip_prefix("file:").unwrap_or(t);
        if t.starts_with('/') || t.contains('*') || !(t.contains('/') || t.contains('.')) {
            return false;
        }
        let Some(path) = join(dir, t) else {
            return false;
        };
        path == rela || stem.is_some_and(|s| path == s)
    })
}

/// `dir` joined with the relative path `t`, `.` and `..` resolved; `None` when it leaves the
/// repository.
fn join(dir: &str, t: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for p in t.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// Whether `text` loads `rela` as a pytest plugin: `-p module` (not `-p no:…`).
fn python_plugin(text: &str, rela: &str) -> bool {
    let words = tokens(text);
    words
        .windows(2)
        .any(|w| w[0] == "-p" && module_is(w[1], rela))
        || words
            .iter()
            .filter_map(|w| w.strip_prefix("-p"))
            .any(|m| !m.is_empty() && module_is(m, rela))
}

/// The module names a `conftest.py` lists in `pytest_plugins`.
fn pytest_plugins(text: &str) -> Vec<String> {
    let Some(at) = text.find("pytest_plugins") else {
        return Vec::new();
    };
    let rest = &text[at + "pytest_plugins".len()..];
    let Some(rest) = rest.trim_start().strip_prefix('=') else {
        return Vec::new();
    };
    // The value: a string, or a list or tuple up to its closing bracket.
    let rest = rest.trim_start();
    let end = match rest.chars().next() {
        Some('[') => rest.find(']'),
        Some('(') => rest.find(')'),
        _ => rest.find('\n'),
    }
    .unwrap_or(rest.len());
    tokens(&rest[..end])
        .into_iter()
        .filter(|t| {
            t.chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
        })
        .map(str::to_string)
        .collect()
}

/// Whether the dotted module name `m` is the file `rela` (at the root or under `src/`).
fn module_is(m: &str, rela: &str) -> bool {
    if m.starts_with("no:") || m.is_empty() {
        return false;
    }
    let path = m.replace('.', "/");
    let rela = rela.strip_prefix("src/").unwrap_or(rela);
    rela == format!("{path}.py") || rela == format!("{path}/__init__.py")
}

/// The runner's part of a `package.json`, as text.
fn package_json_part(text: &str) -> String {
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(text) else {
        return String::new();
    };
    PACKAGE_JSON_KEYS
        .iter()
        .filter_map(|k| doc.get(*k))
        .map(|v| v.to_string().replace("\\\"", "\""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// pytest's part of a `pyproject.toml`, as text.
fn pyproject_part(text: &str) -> String {
    let Ok(doc) = text.parse::<toml::Table>() else {
        return String::new();
    };
    doc.get("tool")
        .and_then(|t| t.get("pytest"))
        .map(|p| p.to_string())
        .unwrap_or_default()
}

/// pytest's sections of a `setup.cfg`, as text.
fn setup_cfg_part(text: &str) -> String {
    let mut inside = false;
    let mut out = String::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with('[') && l.ends_with(']') {
            inside = matches!(&l[1..l.len() - 1], "tool:pytest" | "pytest");
            continue;
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration files (path, content), the test command, and the path judged.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

    fn by(files: &[(&str, &str)], cmd: &str, rela: &str) -> Option<String> {
        let files: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
            .collect();
        let read = move |p: &str| files.iter().find(|(q, _)| q == p).map(|(_, c)| c.clone());
        preloaded_by(rela, &read, cmd)
    }

    /// Each way a runner is told to load a file first, with the file it names.
    #[test]
    fn each_runner_s_preload_is_named() {
        let cases: &[Case] = &[
            (
                &[(".mocharc.yml", "require:\n  - support/setup.js\n")],
                "npm test",
                "support/setup.js",
            ),
            (
                &[(".mocharc.json", r#"{"require": ["./support/setup"]}"#)],
                "npm test",
                "support/setup.js",
            ),
            (
                &[(
                    "package.json",
                    r#"{"scripts": {"test": "mocha -r ./support/hook.js"}}"#,
                )],
                "npm test",
                "support/hook.js",
            ),
            (
                &[(
                    "package.json",
                    r#"{"scripts": {"test": "NODE_OPTIONS='--import ./support/patch.mjs' node --test"}}"#,
                )],
                "npm test",
                "support/patch.mjs",
            ),
            (
                &[(
                    "package.json",
                    r#"{"jest": {"setupFiles": ["<rootDir>/support/env.js"]}}"#,
                )],
                "npm test",
                "support/env.js",
            ),
            (
                &[(
                    "jest.config.js",
                    "module.exports = { transform: { '^.+\\\\.js$': './tools/transform.js' } };",
                )],
                "npx jest",
                "tools/transform.js",
            ),
            (
                &[(
                    "vitest.config.ts",
                    "export default defineConfig({ test: { setupFiles: ['./support/setup.ts'] } })",
                )],
                "npx vitest",
                "support/setup.ts",
            ),
            (
                &[("packages/a/.mocharc.yml", "require: ./lib/hook.js\n")],
                "npm test",
                "packages/a/lib/hook.js",
            ),
            (
                &[(
                    ".cargo/config.toml",
                    "[target.x86_64-unknown-linux-gnu]\nrunner = \"tools/runner.sh\"\n",
                )],
                "cargo test",
                "tools/runner.sh",
            ),
            (
                &[(
                    "pyproject.toml",
                    "[tool.pytest.ini_options]\naddopts = \"-p support.plugin\"\n",
                )],
                "python -m pytest",
                "support/plugin.py",
            ),
            (
                &[("setup.cfg", "[tool:pytest]\naddopts = -psupport.plugin\n")],
                "python -m pytest",
                "src/support/plugin.py",
            ),
            (
                &[(
                    "conftest.py",
                    "pytest_plugins = [\n    \"support.fixtures\",\n]\n",
                )],
                "python -m pytest",
                "support/fixtures/__init__.py",
            ),
            (
                &[],
                "node --require ./support/first.js --test",
                "support/first.js",
            ),
            (
                &[],
                "python -m pytest -p support.plugin",
                "support/plugin.py",
            ),
        ];
        for (files, cmd, rela) in cases {
            let why = by(files, cmd, rela);
            assert!(why.is_some(), "{rela} by {files:?} / {cmd}");
            assert!(why.unwrap().contains(rela));
        }
    }

    /// What names the project's own code, a package, a glob or a directory is no preload.
    #[test]
    fn the_project_s_own_code_is_no_preload() {
        let cases: &[Case] = &[
            (
                &[(
                    "package.json",
                    r#"{"main": "lib/index.js", "exports": "./lib/add.js", "scripts": {"test": "mocha"}}"#,
                )],
                "npm test",
                "lib/index.js",
            ),
            (
                &[("package.json", r#"{"scripts": {"test": "mocha"}}"#)],
                "npm test",
                "lib/add.js",
            ),
            (
                &[(
                    ".mocharc.yml",
                    "require: ts-node/register\nspec: test/**/*.js\n",
                )],
                "npm test",
                "test/a.js",
            ),
            (
                &[(
                    "jest.config.js",
                    "module.exports = { roots: ['<rootDir>/src'] };",
                )],
                "npx jest",
                "src/add.js",
            ),
            (
                &[(
                    "pyproject.toml",
                    "[project]\nname = \"support\"\n[tool.pytest.ini_options]\naddopts = \"-p no:cacheprovider\"\n",
                )],
                "python -m pytest",
                "cacheprovider.py",
            ),
            (
                &[("conftest.py", "import support.plugin\n")],
                "python -m pytest",
                "support/plugin.py",
            ),
            (
                &[(".mocharc.yml", "require: ../../outside.js\n")],
                "npm test",
                "outside.js",
            ),
            (
                &[(
                    "pyproject.toml",
                    "[tool.pytest.ini_options]\npython_files = [\"checks.py\"]\n",
                )],
                "python -m pytest",
                "checks.py",
            ),
            (
                &[("pytest.ini", "[pytest]\ntestpaths = support/checks.py\n")],
                "python -m pytest",
                "support/checks.py",
            ),
        ];
        for (files, cmd, rela) in cases {
            assert_eq!(by(files, cmd, rela), None, "{rela} by {files:?} / {cmd}");
        }
    }
}
