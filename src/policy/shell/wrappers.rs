//! What a command really runs: the commands behind wrappers (`env`, `nohup`, `timeout`,
//! `xargs`, `find -exec`, `sh -c`, …), read with each wrapper's own option grammar, and the
//! canonical form of tools whose global options come before the subcommand (`git -C . push`
//! is `git push`, `python3 -m pip install` is `pip install`), so that the rules, which match
//! argv prefixes, see the command that runs.
//!
//! Every inner or canonical command is judged beside the command as written, and the strictest
//! judgment wins; reading more commands than really run only ever makes a line stricter.

use super::{
    MAX_DEPTH, ParseError, SimpleCommand, base_name, is_assignment, join_dir, parse_depth,
};

/// An option grammar as `getopt_long` reads it with a leading `+`: options end at the first
/// operand or at `--`.
#[derive(Debug, Clone, Copy)]
pub(in crate::policy) struct Grammar {
    /// Short options that take a value, attached (`-n10`) or in the next word (`-n 10`).
    pub short: &'static str,
    /// Long options that take a value (`--name=v` or `--name v`).
    pub long: &'static [&'static str],
    /// Whether an unambiguous prefix of a long option counts as the option (`--sig` for
    /// `--signal`), as in `getopt_long`; not in git, cargo or uv.
    pub abbrev: bool,
}

/// An option read: its name (a letter or a long name) and its value.
pub(in crate::policy) type Opt = (String, Option<String>);

const NO_OPTIONS: Grammar = Grammar {
    short: "",
    long: &[],
    abbrev: true,
};

/// The options of the word at `i` (and the value it takes from the next word): the index of
/// the word after them, and what was read. `i` must hold an option.
fn getopt_one(argv: &[String], i: usize, g: &Grammar) -> (usize, Vec<Opt>) {
    let a = &argv[i];
    if let Some(long) = a.strip_prefix("--") {
        let (name, value) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (long, None),
        };
        let known = g
            .long
            .iter()
            .find(|l| **l == name || (g.abbrev && !name.is_empty() && l.starts_with(name)));
        return match (known, value) {
            (Some(full), None) => (i + 2, vec![(full.to_string(), argv.get(i + 1).cloned())]),
            (Some(full), value) => (i + 1, vec![(full.to_string(), value)]),
            (None, value) => (i + 1, vec![(name.to_string(), value)]),
        };
    }
    let chars: Vec<char> = a.chars().skip(1).collect();
    let mut opts = Vec::new();
    for (j, &c) in chars.iter().enumerate() {
        if g.short.contains(c) {
            let rest: String = chars[j + 1..].iter().collect();
            if rest.is_empty() {
                opts.push((c.to_string(), argv.get(i + 1).cloned()));
                return (i + 2, opts);
            }
            opts.push((c.to_string(), Some(rest)));
            return (i + 1, opts);
        }
        opts.push((c.to_string(), None));
    }
    (i + 1, opts)
}

fn is_option(word: &str) -> bool {
    word.len() > 1 && word.starts_with('-')
}

/// Read options from `start`: the index of the first operand (past a `--`) and the options.
pub(in crate::policy) fn getopt(argv: &[String], start: usize, g: &Grammar) -> (usize, Vec<Opt>) {
    let mut i = start;
    let mut opts = Vec::new();
    while i < argv.len() && is_option(&argv[i]) {
        if argv[i] == "--" {
            return (i + 1, opts);
        }
        let (next, mut read) = getopt_one(argv, i, g);
        opts.append(&mut read);
        i = next;
    }
    (i.min(argv.len()), opts)
}

fn has(opts: &[Opt], names: &[&str]) -> bool {
    opts.iter().any(|(n, _)| names.contains(&n.as_str()))
}

/// Wrappers that run the rest of their arguments as a command: their grammar, and how many
/// operands come before the command (`timeout DURATION cmd`).
const WRAPPERS: &[(&str, Grammar, usize)] = &[
    ("nohup", NO_OPTIONS, 0),
    ("setsid", NO_OPTIONS, 0),
    ("chronic", NO_OPTIONS, 0),
    ("eatmydata", NO_OPTIONS, 0),
    ("unbuffer", NO_OPTIONS, 0),
    ("busybox", NO_OPTIONS, 0),
    ("toybox", NO_OPTIONS, 0),
    ("builtin", NO_OPTIONS, 0),
    ("exec", grammar("a", &[]), 0),
    (
        "time",
        Grammar {
            short: "fo",
            long: &["format", "output"],
            abbrev: true,
        },
        0,
    ),
    ("nice", grammar("n", &["adjustment"]), 0),
    (
        "ionice",
        grammar("cnpPu", &["class", "classdata", "pid", "pgid", "uid"]),
        0,
    ),
    ("timeout", grammar("ks", &["kill-after", "signal"]), 1),
    ("stdbuf", grammar("ioe", &["input", "output", "error"]), 0),
    ("taskset", NO_OPTIONS, 1),
    (
        "chrt",
        grammar("TPD", &["sched-runtime", "sched-period", "sched-deadline"]),
        1,
    ),
    (
        "chroot",
        grammar("", &["userspec", "groups", "skip-chdir"]),
        1,
    ),
    (
        "strace",
        grammar("abeEIoOpPsSuUX", &["output", "trace", "signal", "user"]),
        0,
    ),
    (
        "sudo",
        grammar(
            "ugCDprtTUR",
            &[
                "user",
                "group",
                "close-from",
                "chdir",
                "prompt",
                "role",
                "type",
                "command-timeout",
                "other-user",
                "chroot",
                "host",
            ],
        ),
        0,
    ),
    ("doas", grammar("uC", &[]), 0),
];

const fn grammar(short: &'static str, long: &'static [&'static str]) -> Grammar {
    Grammar {
        short,
        long,
        abbrev: true,
    }
}

/// Shells whose `-c` script is parsed as a command line.
pub(in crate::policy) const SHELLS: &[&str] =
    &["sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "fish"];

/// What a shell runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::policy) enum ShellProgram {
    /// `sh -c SCRIPT` (the script, or `None` when it is missing).
    Inline(Option<String>),
    /// `sh FILE`: a script file the policy cannot see.
    File(String),
    /// `sh`, `sh -s`: commands from standard input.
    Stdin,
}

/// What a shell invocation runs, if `argv` runs a shell.
pub(in crate::policy) fn shell_program(argv: &[String]) -> Option<ShellProgram> {
    if !SHELLS.contains(&base_name(argv.first()?)) {
        return None;
    }
    let (mut inline, mut stdin) = (false, false);
    let mut i = 1;
    while let Some(a) = argv.get(i) {
        if a == "--" || a == "-" {
            i += 1;
            break;
        }
        if a.starts_with("--") {
            i += if matches!(a.as_str(), "--rcfile" | "--init-file") {
                2
            } else {
                1
            };
            continue;
        }
        if a.len() > 1 && (a.starts_with('-') || a.starts_with('+')) {
            if a.starts_with('-') {
                inline |= a.contains('c');
                stdin |= a.contains('s');
            }
            i += if a.contains(['o', 'O']) { 2 } else { 1 };
            continue;
        }
        break;
    }
    Some(if inline {
        ShellProgram::Inline(argv.get(i).cloned())
    } else if stdin || i >= argv.len() {
        ShellProgram::Stdin
    } else {
        ShellProgram::File(argv[i].clone())
    })
}

/// How an interpreter takes a program on its command line.
struct Inline {
    names: &'static [&'static str],
    /// Short options whose presence means the program is inline (`-c`, `-e`).
    flags: &'static str,
    /// Long options that mean the same (`--eval`).
    long: &'static [&'static str],
    /// Short options whose value is the rest of the word or the next word.
    value: &'static str,
    /// Short options whose value can only be attached (`perl -Mstrict`).
    attached: &'static str,
    /// A first operand that is a subcommand running inline code (`deno eval`).
    subcommand: Option<&'static str>,
}

const INTERPRETERS: &[Inline] = &[
    Inline {
        names: &["python", "python2", "python3", "pypy", "pypy3"],
        flags: "c",
        long: &[],
        value: "WXm",
        attached: "",
        subcommand: None,
    },
    Inline {
        names: &["node", "nodejs", "bun"],
        flags: "ep",
        long: &["eval", "print"],
        value: "r",
        attached: "",
        subcommand: None,
    },
    Inline {
        names: &["deno"],
        flags: "",
        long: &[],
        value: "",
        attached: "",
        subcommand: Some("eval"),
    },
    Inline {
        names: &["perl", "perl5"],
        flags: "eE",
        long: &[],
        value: "",
        attached: "IMmixdDCV",
        subcommand: None,
    },
    Inline {
        names: &["ruby", "jruby"],
        flags: "e",
        long: &[],
        value: "rICE",
        attached: "TxKWF0i",
        subcommand: None,
    },
    Inline {
        names: &["php"],
        flags: "rBRFE",
        long: &[],
        value: "cdzftS",
        attached: "",
        subcommand: None,
    },
    Inline {
        names: &["lua", "luajit"],
        flags: "e",
        long: &[],
        value: "l",
        attached: "",
        subcommand: None,
    },
    Inline {
        names: &["Rscript", "osascript", "tclsh", "julia"],
        flags: "e",
        long: &["eval"],
        value: "",
        attached: "",
        subcommand: None,
    },
];

/// Whether `name` is an interpreter (versioned names such as `python3.12` included).
fn interpreter(name: &str) -> Option<&'static Inline> {
    let plain = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS
        .iter()
        .find(|i| i.names.contains(&name) || i.names.contains(&plain))
}

/// The option by which an interpreter (other than a shell) is given its program inline
/// (`python3 -c`, `node -e`, `perl -e`, `deno eval`), if it is.
pub(in crate::policy) fn inline_program(argv: &[String]) -> Option<String> {
    let spec = interpreter(base_name(argv.first()?))?;
    let mut i = 1;
    while let Some(a) = argv.get(i) {
        if a == "--" || !is_option(a) {
            return match spec.subcommand {
                Some(sub) if a == sub => Some(sub.to_string()),
                _ => None,
            };
        }
        if let Some(long) = a.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            if spec.long.contains(&name) {
                return Some(a.clone());
            }
            i += 1;
            continue;
        }
        i += 1;
        for (j, c) in a.chars().skip(1).enumerate() {
            if spec.flags.contains(c) {
                return Some(format!("-{c}"));
            }
            if spec.attached.contains(c) {
                break;
            }
            if spec.value.contains(c) {
                if c == 'm' && spec.names.contains(&"python") {
                    // `python -m module` runs a module; what follows is its arguments.
                    return None;
                }
                if j + 2 == a.chars().count() {
                    i += 1;
                }
                break;
            }
        }
    }
    None
}

/// Variables whose value is a command line that a program runs.
const COMMAND_VARIABLES: &[&str] = &[
    "GIT_PAGER",
    "PAGER",
    "MANPAGER",
    "GIT_EDITOR",
    "EDITOR",
    "VISUAL",
    "GIT_SEQUENCE_EDITOR",
    "GIT_SSH_COMMAND",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_SSH",
    "GIT_PROXY_COMMAND",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "PROMPT_COMMAND",
];

/// Variables that make programs load code or configuration the line does not show.
pub(in crate::policy) const LOADER_VARIABLES: &[&str] = &[
    "LD_PRELOAD",
    "LD_AUDIT",
    "LD_LIBRARY_PATH",
    "BASH_ENV",
    "ENV",
    "GIT_EXEC_PATH",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_DIR",
    "GIT_WORK_TREE",
];

/// The commands an assignment (`NAME=value`, as a prefix, in `env` or `export`) makes
/// programs run: the value of a command variable is parsed as a command line; a loader
/// variable is kept as a one-word command (the assignment itself) for the policy to ask about.
pub(in crate::policy) fn assignment(
    word: &str,
    depth: usize,
    dirs: &[String],
) -> Result<Vec<SimpleCommand>, ParseError> {
    let Some((name, value)) = word.split_once('=') else {
        return Ok(Vec::new());
    };
    let name = name.strip_suffix('+').unwrap_or(name);
    if COMMAND_VARIABLES.contains(&name) && !value.trim().is_empty() {
        return Ok(parse_depth(value, depth + 1, dirs)?
            .into_iter()
            .map(|mut c| {
                c.nested = true;
                c
            })
            .collect());
    }
    if LOADER_VARIABLES.contains(&name) || name.starts_with("GIT_CONFIG_KEY_") {
        return Ok(vec![SimpleCommand {
            argv: vec![word.to_string()],
            nested: true,
            dirs: dirs.to_vec(),
            ..SimpleCommand::default()
        }]);
    }
    Ok(Vec::new())
}

/// awk's options (POSIX and gawk): `-F`, `-v`, `-f` and gawk's `-e` take a value.
pub(in crate::policy) const AWK: Grammar = grammar(
    "Fvfe",
    &[
        "field-separator",
        "assign",
        "file",
        "source",
        "include",
        "load",
    ],
);

/// git's options before the subcommand.
pub(in crate::policy) const GIT_GLOBALS: Grammar = Grammar {
    short: "Cc",
    long: &[
        "git-dir",
        "work-tree",
        "namespace",
        "config-env",
        "super-prefix",
        "attr-source",
    ],
    abbrev: false,
};

/// The index of git's subcommand and the global options before it.
pub(in crate::policy) fn git_subcommand(argv: &[String]) -> (usize, Vec<Opt>) {
    getopt(argv, 1, &GIT_GLOBALS)
}

/// The directories `find` starts from (`.` when none is named).
pub(in crate::policy) fn find_roots(argv: &[String]) -> Vec<String> {
    let mut i = 1;
    while let Some(a) = argv.get(i) {
        match a.as_str() {
            "-H" | "-L" | "-P" => i += 1,
            "-D" => i += 2,
            a if a.starts_with("-O") => i += 1,
            _ => break,
        }
    }
    let roots: Vec<String> = argv[i.min(argv.len())..]
        .iter()
        .take_while(|a| !is_option(a) && !matches!(a.as_str(), "(" | "!" | ","))
        .cloned()
        .collect();
    if roots.is_empty() {
        vec![".".into()]
    } else {
        roots
    }
}

/// The path a `{}` placeholder stands for under `root`.
fn under_root(root: &str, word: &str, placeholders: &[&str]) -> String {
    if placeholders.iter().any(|p| word.starts_with(p)) {
        join_dir(root, word)
    } else {
        word.to_string()
    }
}

/// A package manager's subcommands that fetch and install code, with the canonical name each
/// is judged as.
const INSTALL_VERBS: &[(&str, &[(&str, &str)])] = &[
    (
        "npm",
        &[
            ("install", "install"),
            ("i", "install"),
            ("in", "install"),
            ("ins", "install"),
            ("inst", "install"),
            ("insta", "install"),
            ("instal", "install"),
            ("isnt", "install"),
            ("isnta", "install"),
            ("isntal", "install"),
            ("isntall", "install"),
            ("add", "install"),
            ("install-test", "install"),
            ("it", "install"),
            ("ci", "ci"),
            ("clean-install", "ci"),
            ("ic", "ci"),
            ("install-clean", "ci"),
            ("isntall-clean", "ci"),
            ("install-ci-test", "ci"),
            ("cit", "ci"),
            ("clean-install-test", "ci"),
            ("sit", "ci"),
            ("update", "update"),
            ("up", "update"),
            ("upgrade", "update"),
            ("udpate", "update"),
            ("exec", "exec"),
            ("x", "exec"),
        ],
    ),
    (
        "pnpm",
        &[
            ("install", "install"),
            ("i", "install"),
            ("add", "add"),
            ("update", "update"),
            ("up", "update"),
            ("upgrade", "update"),
            ("dlx", "dlx"),
        ],
    ),
    (
        "yarn",
        &[
            ("install", "install"),
            ("add", "add"),
            ("up", "up"),
            ("upgrade", "up"),
            ("dlx", "dlx"),
        ],
    ),
    (
        "bun",
        &[
            ("install", "install"),
            ("i", "install"),
            ("add", "add"),
            ("a", "add"),
            ("update", "update"),
            ("x", "x"),
        ],
    ),
];

/// The same command with the options that do not change what it does set aside, when that
/// differs from `argv`: `git -C . push` → `git push`, `python3 -m pip install x` → `pip
/// install x`, `npm --prefix . ci` → `npm ci`.
fn canonical(argv: &[String]) -> Option<Vec<String>> {
    let name = base_name(argv.first()?);
    let with = |head: &[&str], rest: &[String]| -> Vec<String> {
        head.iter()
            .map(|s| s.to_string())
            .chain(rest.iter().cloned())
            .collect()
    };
    let plain = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    match plain {
        "git" => {
            let (k, _) = git_subcommand(argv);
            (k > 1 && k < argv.len()).then(|| with(&["git"], &argv[k..]))
        }
        "python" | "pypy" => {
            // `python3 -m pip …` is pip.
            let mut i = 1;
            while let Some(a) = argv.get(i) {
                if !is_option(a) || a == "--" {
                    return None;
                }
                let (next, opts) = getopt_one(argv, i, &grammar("WXmc", &[]));
                if let Some((n, v)) = opts.last()
                    && matches!(n.as_str(), "m" | "c")
                {
                    return match (n.as_str(), v.as_deref()) {
                        ("m", Some("pip" | "pip3")) => Some(with(&["pip"], &argv[next..])),
                        _ => None,
                    };
                }
                i = next;
            }
            None
        }
        "pip" => {
            let (k, _) = getopt(argv, 1, &PIP_GLOBALS);
            (name != "pip" || k > 1).then(|| with(&["pip"], &argv[k.min(argv.len())..]))
        }
        "uv" => {
            let (k, _) = getopt(argv, 1, &UV_GLOBALS);
            match argv.get(k).map(String::as_str) {
                Some("pip") => {
                    let (j, _) = getopt(argv, k + 1, &PIP_GLOBALS);
                    Some(with(&["pip"], &argv[j.min(argv.len())..]))
                }
                Some(_) if k > 1 => Some(with(&["uv"], &argv[k..])),
                _ => None,
            }
        }
        "cargo" => {
            let mut k = 1;
            if argv.get(1).is_some_and(|a| a.starts_with('+')) {
                k = 2;
            }
            let (k, _) = getopt(argv, k, &CARGO_GLOBALS);
            (k > 1 && k < argv.len()).then(|| with(&["cargo"], &argv[k..]))
        }
        "npm" | "pnpm" | "yarn" | "bun" => {
            let verbs = INSTALL_VERBS.iter().find(|(pm, _)| *pm == plain)?.1;
            let words = argv[1..]
                .iter()
                .take_while(|a| a.as_str() != "--")
                .enumerate();
            let mut operands = 0;
            let mut after_value = false;
            for (i, a) in words {
                if is_option(a) {
                    after_value = a == "--cwd" || a == "--prefix" || a == "-C";
                    continue;
                }
                if std::mem::take(&mut after_value) {
                    continue;
                }
                operands += 1;
                if let Some((_, canon)) = verbs.iter().find(|pair| pair.0 == a.as_str()) {
                    return Some(with(&[plain, canon], &argv[i + 2..]));
                }
            }
            // A bare `yarn` installs.
            (plain == "yarn" && operands == 0).then(|| with(&["yarn", "install"], &argv[1..]))
        }
        _ => None,
    }
}

const PIP_GLOBALS: Grammar = grammar(
    "",
    &[
        "log",
        "log-file",
        "proxy",
        "retries",
        "timeout",
        "exists-action",
        "trusted-host",
        "cert",
        "client-cert",
        "cache-dir",
        "python",
        "keyring-provider",
        "use-feature",
        "use-deprecated",
        "resume-retries",
    ],
);

const UV_GLOBALS: Grammar = Grammar {
    short: "",
    long: &[
        "cache-dir",
        "directory",
        "project",
        "config-file",
        "color",
        "allow-insecure-host",
        "python-preference",
        "python",
    ],
    abbrev: false,
};

const CARGO_GLOBALS: Grammar = Grammar {
    short: "ZC",
    long: &["color", "config", "explain"],
    abbrev: false,
};

/// `env`'s options (GNU coreutils).
const ENV: Grammar = grammar(
    "uCS",
    &[
        "unset",
        "chdir",
        "split-string",
        "block-signal",
        "default-signal",
        "ignore-signal",
    ],
);

/// The commands `cmd` runs besides itself: behind a wrapper, inside `sh -c`, `find -exec` or
/// `xargs`, or its canonical form.
pub(in crate::policy) fn unwrap(
    cmd: &SimpleCommand,
    depth: usize,
) -> Result<Vec<SimpleCommand>, ParseError> {
    if depth > MAX_DEPTH {
        return Err(ParseError("commands nested too deeply to judge".into()));
    }
    let argv = &cmd.argv;
    let Some(first) = argv.first() else {
        return Ok(Vec::new());
    };
    let name = base_name(first);
    let mut out = Vec::new();
    if let Some(canon) = canonical(argv)
        && &canon != argv
    {
        follow(&mut out, cmd.inner(canon), depth)?;
    }
    if let Some((_, g, operands)) = WRAPPERS.iter().find(|(n, _, _)| *n == name) {
        let (k, opts) = getopt(argv, 1, g);
        let k = k + operands;
        let look_only = name == "command" && has(&opts, &["v", "V"]);
        if k < argv.len() && !look_only {
            follow(&mut out, cmd.inner(argv[k..].to_vec()), depth)?;
        }
        return Ok(out);
    }
    match name {
        "command" => {
            let (k, opts) = getopt(argv, 1, &NO_OPTIONS);
            // `command -v NAME` only looks a name up.
            if k < argv.len() && !has(&opts, &["v", "V"]) {
                follow(&mut out, cmd.inner(argv[k..].to_vec()), depth)?;
            }
        }
        "env" => env(cmd, depth, &mut out)?,
        "export" | "declare" | "typeset" | "local" | "readonly" => {
            for a in argv[1..].iter().filter(|a| is_assignment(a)) {
                out.extend(assignment(a, depth, &cmd.dirs)?);
            }
        }
        "xargs" => {
            let g = grammar(
                "aEIdLnPs",
                &[
                    "arg-file",
                    "delimiter",
                    "max-lines",
                    "max-args",
                    "max-procs",
                    "max-chars",
                    "process-slot-var",
                ],
            );
            let (k, _) = getopt(argv, 1, &g);
            let mut inner = if k < argv.len() {
                cmd.inner(argv[k..].to_vec())
            } else {
                cmd.inner(vec!["echo".into()])
            };
            inner.args_from_stdin = true;
            follow(&mut out, inner, depth)?;
        }
        "flock" => {
            let (k, _) = getopt(argv, 1, &grammar("wE", &["timeout", "conflict-exit-code"]));
            match argv.get(k + 1).map(String::as_str) {
                Some("-c" | "--command") => {
                    if let Some(script) = argv.get(k + 2) {
                        script_of(cmd, script, depth, &mut out)?;
                    }
                }
                Some(_) => follow(&mut out, cmd.inner(argv[k + 1..].to_vec()), depth)?,
                None => {}
            }
        }
        "watch" => {
            let (k, opts) = getopt(argv, 1, &grammar("nq", &["interval", "equexit"]));
            if k < argv.len() {
                if has(&opts, &["x", "exec"]) {
                    follow(&mut out, cmd.inner(argv[k..].to_vec()), depth)?;
                } else {
                    script_of(cmd, &argv[k..].join(" "), depth, &mut out)?;
                }
            }
        }
        "script" => {
            let g = grammar(
                "cEIOBTmo",
                &[
                    "command",
                    "echo",
                    "log-in",
                    "log-out",
                    "log-io",
                    "log-timing",
                    "logging-format",
                    "output-limit",
                ],
            );
            let (_, opts) = getopt(argv, 1, &g);
            for (n, v) in opts {
                if let ("c" | "command", Some(script)) = (n.as_str(), v) {
                    script_of(cmd, &script, depth, &mut out)?;
                }
            }
        }
        "su" | "runuser" => {
            if let Some(p) = argv.iter().position(|a| a == "-c" || a == "--command")
                && let Some(script) = argv.get(p + 1)
            {
                script_of(cmd, script, depth, &mut out)?;
            }
        }
        "git" => git(cmd, depth, &mut out)?,
        // `eval` joins its arguments and runs them as a command line.
        "eval" if argv.len() > 1 => script_of(cmd, &argv[1..].join(" "), depth, &mut out)?,
        "find" => {
            let roots = find_roots(argv);
            let mut i = 1;
            while i < argv.len() {
                let execdir = matches!(argv[i].as_str(), "-execdir" | "-okdir");
                if execdir || matches!(argv[i].as_str(), "-exec" | "-ok") {
                    let end = exec_end(argv, i);
                    for root in &roots {
                        let words = &argv[i + 1..end];
                        if words.is_empty() {
                            continue;
                        }
                        let mut inner = if execdir {
                            cmd.inner(words.to_vec())
                        } else {
                            cmd.inner(words.iter().map(|w| under_root(root, w, &["{}"])).collect())
                        };
                        if execdir {
                            // It runs in the directory of each file found, anywhere below.
                            inner.dirs = cmd
                                .dirs()
                                .iter()
                                .map(|d| format!("{}/$FOUND_DIR", join_dir(d, root)))
                                .collect();
                        }
                        follow(&mut out, inner, depth)?;
                    }
                    i = end;
                }
                i += 1;
            }
        }
        "fd" | "fdfind" => {
            let mut i = 1;
            let mut roots = vec![".".to_string()];
            while i < argv.len() {
                let a = argv[i].as_str();
                if matches!(a, "-x" | "--exec" | "-X" | "--exec-batch") {
                    let end = exec_end(argv, i);
                    for root in &roots {
                        let words = &argv[i + 1..end];
                        if !words.is_empty() {
                            let words = words
                                .iter()
                                .map(|w| under_root(root, w, &["{}", "{.}", "{//}"]))
                                .collect();
                            follow(&mut out, cmd.inner(words), depth)?;
                        }
                    }
                    i = end;
                } else if !is_option(a) {
                    // The pattern or a search path: taking every operand as a path only adds
                    // judgments.
                    roots.push(a.to_string());
                }
                i += 1;
            }
        }
        _ => {
            if let Some(program) = shell_program(argv) {
                match program {
                    ShellProgram::Inline(Some(script)) => {
                        script_of(cmd, &script, depth, &mut out)?;
                    }
                    ShellProgram::Inline(None) => {
                        return Err(ParseError(format!("`{first} -c` without a script")));
                    }
                    ShellProgram::File(_) | ShellProgram::Stdin => {}
                }
            }
        }
    }
    Ok(out)
}

/// Where the command of `-exec`/`-x` at `i` ends (its `;` or `+`, or the end).
fn exec_end(argv: &[String], i: usize) -> usize {
    argv[i + 1..]
        .iter()
        .position(|a| a == ";" || a == "+")
        .map_or(argv.len(), |p| i + 1 + p)
}

/// Add `inner` and what it runs in turn.
fn follow(
    out: &mut Vec<SimpleCommand>,
    inner: SimpleCommand,
    depth: usize,
) -> Result<(), ParseError> {
    let deeper = unwrap(&inner, depth + 1)?;
    out.push(inner);
    out.extend(deeper);
    Ok(())
}

/// Add the commands of a shell script given on `cmd`'s command line, run where `cmd` runs.
fn script_of(
    cmd: &SimpleCommand,
    script: &str,
    depth: usize,
    out: &mut Vec<SimpleCommand>,
) -> Result<(), ParseError> {
    let dirs = if cmd.dirs.is_empty() {
        vec![".".to_string()]
    } else {
        cmd.dirs.clone()
    };
    out.extend(
        parse_depth(script, depth + 1, &dirs)?
            .into_iter()
            .map(|mut c| {
                c.nested = true;
                c.stdin_piped |= cmd.stdin_piped;
                c.args_from_stdin |= cmd.args_from_stdin;
                c
            }),
    );
    Ok(())
}

/// `env [OPTION]… [NAME=VALUE]… [COMMAND [ARG]…]`: `-S` splits its value into more
/// arguments read in place, `-C` changes directory, assignments may name command variables.
fn env(cmd: &SimpleCommand, depth: usize, out: &mut Vec<SimpleCommand>) -> Result<(), ParseError> {
    let mut words: Vec<String> = cmd.argv.clone();
    let mut dirs: Vec<String> = cmd.dirs().iter().map(|d| d.to_string()).collect();
    let mut splits = 0;
    let mut i = 1;
    while let Some(w) = words.get(i) {
        if w == "--" {
            i += 1;
            break;
        }
        if w == "-" {
            i += 1;
            continue;
        }
        if !is_option(w) {
            break;
        }
        let (next, opts) = getopt_one(&words, i, &ENV);
        let mut split = None;
        for (n, v) in opts {
            match (n.as_str(), v) {
                ("C" | "chdir", Some(dir)) => {
                    dirs = dirs.iter().map(|d| join_dir(d, &dir)).collect();
                }
                ("S" | "split-string", Some(text)) => split = Some(split_string(&text)?),
                ("C" | "chdir" | "S" | "split-string", None) => {
                    return Err(ParseError(format!("`env -{n}` without its value")));
                }
                _ => {}
            }
        }
        if let Some(more) = split {
            splits += 1;
            if splits > MAX_DEPTH {
                return Err(ParseError("`env -S` nested too deeply to judge".into()));
            }
            words.splice(i..next.min(words.len()), more);
        } else {
            i = next;
        }
    }
    while let Some(w) = words.get(i)
        && is_assignment(w)
    {
        out.extend(assignment(w, depth, &dirs)?);
        i += 1;
    }
    if i < words.len() {
        let mut inner = cmd.inner(words[i..].to_vec());
        inner.dirs = dirs;
        follow(out, inner, depth)?;
    }
    Ok(())
}

/// GNU `env -S`: split a string into arguments. Whitespace separates; `'…'` is literal but
/// for `\\` and `\'`; `"…"` and bare text take backslash escapes; `\_` is a separator outside
/// quotes and a space inside; `\c` ends the string; `#` at the start of an argument starts a
/// comment; `${NAME}` is kept as written (known only at run time).
fn split_string(text: &str) -> Result<Vec<String>, ParseError> {
    let bad = |why: &str| ParseError(format!("`env -S` string {why}"));
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match (quote, c) {
            (None, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c') => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, '#') if !in_word => break,
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (Some('\''), '\\') if matches!(chars.get(i + 1), Some('\\' | '\'')) => {
                word.push(chars[i + 1]);
                i += 1;
            }
            (Some('\''), c) => word.push(c),
            (_, '\\') => {
                let Some(&e) = chars.get(i + 1) else {
                    return Err(bad("ends with a backslash"));
                };
                i += 1;
                match e {
                    '_' if quote.is_none() => {
                        if in_word {
                            out.push(std::mem::take(&mut word));
                            in_word = false;
                        }
                    }
                    '_' => word.push(' '),
                    'c' if quote.is_some() => return Err(bad("has `\\c` inside quotes")),
                    'c' => break,
                    'f' => word.push('\x0c'),
                    'n' => word.push('\n'),
                    'r' => word.push('\r'),
                    't' => word.push('\t'),
                    'v' => word.push('\x0b'),
                    '#' | '$' | '"' | '\'' | '\\' => {
                        word.push(e);
                        in_word = true;
                    }
                    other => return Err(bad(&format!("has an invalid escape `\\{other}`"))),
                }
            }
            (_, '$') => {
                if chars.get(i + 1) != Some(&'{') {
                    return Err(bad("has a `$` that is not `${NAME}`"));
                }
                let end = chars[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .ok_or_else(|| bad("has an unclosed `${`"))?;
                word.extend(&chars[i..i + end + 1]);
                in_word = true;
                i += end;
            }
            (_, c) => {
                word.push(c);
                in_word = true;
            }
        }
        i += 1;
    }
    if quote.is_some() {
        return Err(bad("has an unbalanced quote"));
    }
    if in_word {
        out.push(word);
    }
    Ok(out)
}

/// Commands git itself runs from its arguments: `rebase --exec`, `bisect run`,
/// `submodule foreach`, `difftool --extcmd`.
fn git(cmd: &SimpleCommand, depth: usize, out: &mut Vec<SimpleCommand>) -> Result<(), ParseError> {
    let argv = &cmd.argv;
    let (k, _) = git_subcommand(argv);
    let Some(sub) = argv.get(k) else {
        return Ok(());
    };
    let rest = &argv[k + 1..];
    match sub.as_str() {
        "rebase" | "difftool" => {
            let long = if sub == "rebase" {
                "--exec"
            } else {
                "--extcmd"
            };
            let mut i = 0;
            while i < rest.len() {
                let a = &rest[i];
                let script = if a == "-x" || a == long {
                    i += 1;
                    rest.get(i).cloned()
                } else if let Some(v) = a.strip_prefix(&format!("{long}=")) {
                    Some(v.to_string())
                } else if let Some(v) = a.strip_prefix("-x")
                    && !v.is_empty()
                {
                    Some(v.to_string())
                } else {
                    None
                };
                if let Some(s) = script {
                    script_of(cmd, &s, depth, out)?;
                }
                i += 1;
            }
        }
        "bisect" if rest.first().is_some_and(|r| r == "run") && rest.len() > 1 => {
            follow(out, cmd.inner(rest[1..].to_vec()), depth)?;
        }
        "submodule" => {
            if let Some(p) = rest.iter().position(|r| r == "foreach") {
                let words: Vec<&String> =
                    rest[p + 1..].iter().skip_while(|a| is_option(a)).collect();
                if !words.is_empty() {
                    let script = words
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(" ");
                    script_of(cmd, &script, depth, out)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn getopt_reads_values_attached_separate_and_abbreviated() {
        let g = grammar("ks", &["kill-after", "signal"]);
        let (k, opts) = getopt(&words(&["timeout", "-s", "KILL", "5", "x"]), 1, &g);
        assert_eq!((k, opts[0].1.as_deref()), (3, Some("KILL")));
        let (k, _) = getopt(&words(&["timeout", "-sKILL", "--sig", "9", "5"]), 1, &g);
        assert_eq!(k, 4);
        let (k, _) = getopt(&words(&["timeout", "--", "-5"]), 1, &g);
        assert_eq!(k, 2);
    }

    #[test]
    fn env_split_string_follows_gnu_rules() {
        assert_eq!(
            split_string(r#"git  'push' "a b" c\_d # comment"#).unwrap(),
            ["git", "push", "a b", "c", "d"]
        );
        assert_eq!(split_string(r"sudo\_ls").unwrap(), ["sudo", "ls"]);
        assert_eq!(split_string(r#""x\_y""#).unwrap(), ["x y"]);
        assert_eq!(split_string(r"a \c b").unwrap(), ["a"]);
        assert_eq!(split_string("${HOME}/x").unwrap(), ["${HOME}/x"]);
        for bad in ["'open", r"\q", "$HOME", "a\\"] {
            assert!(split_string(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn canonical_forms() {
        let c = |s: &str| canonical(&words(&s.split(' ').collect::<Vec<_>>())).map(|v| v.join(" "));
        assert_eq!(
            c("git -C . push origin").as_deref(),
            Some("git push origin")
        );
        assert_eq!(c("git -c a=b --no-pager push").as_deref(), Some("git push"));
        assert_eq!(c("git --git-dir=.git push").as_deref(), Some("git push"));
        assert_eq!(c("git push"), None);
        assert_eq!(
            c("python3 -m pip install x").as_deref(),
            Some("pip install x")
        );
        assert_eq!(
            c("python3.12 -Im pip install x").as_deref(),
            Some("pip install x")
        );
        assert_eq!(c("python3 -c pip"), None);
        assert_eq!(c("pip3 -q install x").as_deref(), Some("pip install x"));
        assert_eq!(c("uv pip install x").as_deref(), Some("pip install x"));
        assert_eq!(c("npm --prefix sub ci").as_deref(), Some("npm ci"));
        assert_eq!(c("npm isntall x").as_deref(), Some("npm install x"));
        assert_eq!(c("npm run build"), None);
        assert_eq!(c("yarn").as_deref(), Some("yarn install"));
        assert_eq!(
            c("yarn --frozen-lockfile").as_deref(),
            Some("yarn install --frozen-lockfile")
        );
        assert_eq!(c("yarn test"), None);
        assert_eq!(
            c("cargo +nightly install x").as_deref(),
            Some("cargo install x")
        );
    }

    #[test]
    fn interpreters_with_inline_programs() {
        let i = |s: &str| inline_program(&words(&s.split(' ').collect::<Vec<_>>()));
        assert_eq!(i("python3 -c x").as_deref(), Some("-c"));
        assert_eq!(i("python3 -Bc x").as_deref(), Some("-c"));
        assert_eq!(i("python3 script.py -c x"), None);
        assert_eq!(i("python3 -m pytest -c x"), None);
        assert_eq!(i("python3 -W ignore -c x").as_deref(), Some("-c"));
        assert_eq!(i("node -e x").as_deref(), Some("-e"));
        assert_eq!(i("node --eval=x").as_deref(), Some("--eval=x"));
        assert_eq!(i("perl -lne x").as_deref(), Some("-e"));
        assert_eq!(i("perl -Mstrict script.pl"), None);
        assert_eq!(i("ruby -r json -e x").as_deref(), Some("-e"));
        assert_eq!(i("deno eval x").as_deref(), Some("eval"));
        assert_eq!(i("deno run x.ts"), None);
        assert_eq!(i("cargo -e x"), None);
    }

    #[test]
    fn shell_programs() {
        let p = |s: &str| shell_program(&words(&s.split(' ').collect::<Vec<_>>()));
        assert_eq!(
            p("bash -ce x"),
            Some(ShellProgram::Inline(Some("x".into())))
        );
        assert_eq!(
            p("bash -c -e x"),
            Some(ShellProgram::Inline(Some("x".into())))
        );
        assert_eq!(
            p("sh -o errexit -c x"),
            Some(ShellProgram::Inline(Some("x".into())))
        );
        assert_eq!(p("bash run.sh"), Some(ShellProgram::File("run.sh".into())));
        assert_eq!(
            p("bash -x run.sh"),
            Some(ShellProgram::File("run.sh".into()))
        );
        assert_eq!(p("bash"), Some(ShellProgram::Stdin));
        assert_eq!(p("sh -s a"), Some(ShellProgram::Stdin));
        assert_eq!(p("ls -c"), None);
    }
}
