//! Command rules: judging every command a shell line would run.

use serde::Serialize;

use super::shell::wrappers::{self, ShellProgram};
use super::shell::{self, SimpleCommand};
use super::{
    Approval, IgnoredRule, Policy, RiskTier, RuleRef, SourcedRule, decision_name, rule_text,
    strictest,
};
use crate::config::{CommandRule, Decision, NetworkMode, Source};

/// Built-in command rules: `(argv prefix, decision, risk, why)`. Configured rules with a
/// longer prefix (or the same prefix, from the user) take precedence; the repository's
/// configuration may only make them stricter.
pub const BUILTIN_RULES: &[(&[&str], Decision, RiskTier, &str)] = &[
    (
        &["sudo"],
        Decision::Forbid,
        RiskTier::Critical,
        "privilege escalation",
    ),
    (
        &["su"],
        Decision::Forbid,
        RiskTier::Critical,
        "privilege escalation",
    ),
    (
        &["doas"],
        Decision::Forbid,
        RiskTier::Critical,
        "privilege escalation",
    ),
    (
        &["pkexec"],
        Decision::Forbid,
        RiskTier::Critical,
        "privilege escalation",
    ),
    (
        &["dd"],
        Decision::Forbid,
        RiskTier::Critical,
        "raw disk writes",
    ),
    (
        &["mkfs"],
        Decision::Forbid,
        RiskTier::Critical,
        "formats disks",
    ),
    (
        &["mount"],
        Decision::Forbid,
        RiskTier::Critical,
        "changes mounts",
    ),
    (
        &["umount"],
        Decision::Forbid,
        RiskTier::Critical,
        "changes mounts",
    ),
    (
        &["shutdown"],
        Decision::Forbid,
        RiskTier::Critical,
        "stops the machine",
    ),
    (
        &["reboot"],
        Decision::Forbid,
        RiskTier::Critical,
        "stops the machine",
    ),
    (
        &["chown"],
        Decision::Forbid,
        RiskTier::Critical,
        "changes ownership",
    ),
    (
        &["git", "push"],
        Decision::Forbid,
        RiskTier::Critical,
        "the harness pushes, only to agent/* branches",
    ),
    (
        &["git", "config"],
        Decision::Forbid,
        RiskTier::High,
        "git config can plant hooks and filters that run on the host",
    ),
    (
        &["git", "remote"],
        Decision::Ask,
        RiskTier::High,
        "changes where the repository fetches and pushes",
    ),
    (
        &["git", "submodule"],
        Decision::Ask,
        RiskTier::High,
        "fetches other repositories",
    ),
    (
        &["eval"],
        Decision::Ask,
        RiskTier::High,
        "runs text only known at run time",
    ),
    (
        &["docker"],
        Decision::Ask,
        RiskTier::High,
        "containers reach outside the sandbox",
    ),
    (
        &["podman"],
        Decision::Ask,
        RiskTier::High,
        "containers reach outside the sandbox",
    ),
    (
        &["rm", "-rf", "/"],
        Decision::Forbid,
        RiskTier::Critical,
        "deletes the machine's files",
    ),
];

const PYPI: &[&str] = &["pypi.org", "files.pythonhosted.org"];
const NPM: &[&str] = &["registry.npmjs.org", "registry.yarnpkg.com"];
const CRATES: &[&str] = &["index.crates.io", "static.crates.io", "crates.io"];
const RUBYGEMS: &[&str] = &["rubygems.org", "index.rubygems.org"];

/// Commands that fetch and install code from a package registry, and the registry's hosts.
/// Each is a built-in `ask` rule, `allow` when the network policy reaches one of the hosts
/// (`network = "on"`, or `"allowlist"` naming one). Wrapped and optioned forms reach these
/// through their canonical form (`python3 -m pip install` is `pip install`).
pub const INSTALLERS: &[(&[&str], &[&str])] = &[
    (&["pip", "install"], PYPI),
    (&["pip", "download"], PYPI),
    (&["pip", "wheel"], PYPI),
    (&["uv", "add"], PYPI),
    (&["uv", "sync"], PYPI),
    (&["uv", "tool", "install"], PYPI),
    (&["uvx"], PYPI),
    (&["pipx", "install"], PYPI),
    (&["pipx", "run"], PYPI),
    (&["poetry", "add"], PYPI),
    (&["poetry", "install"], PYPI),
    (&["pipenv", "install"], PYPI),
    (&["npm", "install"], NPM),
    (&["npm", "ci"], NPM),
    (&["npm", "update"], NPM),
    (&["npm", "exec"], NPM),
    (&["npx"], NPM),
    (&["pnpm", "install"], NPM),
    (&["pnpm", "add"], NPM),
    (&["pnpm", "update"], NPM),
    (&["pnpm", "dlx"], NPM),
    (&["pnpx"], NPM),
    (&["yarn", "install"], NPM),
    (&["yarn", "add"], NPM),
    (&["yarn", "up"], NPM),
    (&["yarn", "dlx"], NPM),
    (&["bun", "install"], NPM),
    (&["bun", "add"], NPM),
    (&["bun", "update"], NPM),
    (&["bun", "x"], NPM),
    (&["bunx"], NPM),
    (&["cargo", "install"], CRATES),
    (&["cargo", "add"], CRATES),
    (&["cargo", "binstall"], CRATES),
    (&["gem", "install"], RUBYGEMS),
    (&["bundle", "install"], RUBYGEMS),
    (&["bundle", "add"], RUBYGEMS),
    (&["bundle", "update"], RUBYGEMS),
    (&["go", "install"], &["proxy.golang.org"]),
    (&["go", "get"], &["proxy.golang.org"]),
    (&["go", "mod", "download"], &["proxy.golang.org"]),
    (&["composer", "install"], &["repo.packagist.org"]),
    (&["composer", "require"], &["repo.packagist.org"]),
    (&["composer", "update"], &["repo.packagist.org"]),
    (&["conda", "install"], &["conda.anaconda.org"]),
    (&["apt-get", "install"], &[]),
    (&["apt", "install"], &[]),
    (&["brew", "install"], &[]),
];

/// Why an installer is asked about.
const INSTALLS: &str = "installs code from a package registry";

/// Programs whose purpose is to talk to the network; the network mode judges them.
const NETWORK_CLIENTS: &[&str] = &[
    "curl", "wget", "nc", "ncat", "netcat", "ssh", "scp", "sftp", "rsync", "telnet", "ftp",
    "socat", "aria2c", "http", "https", "xh",
];

/// Shells and interpreters that run whatever arrives on standard input.
const STDIN_RUNNERS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "ash", "fish", "python", "python3", "perl", "ruby", "node",
    "php",
];

/// The judgment of one command of a line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartVerdict {
    /// The command's words.
    pub argv: Vec<String>,
    /// Its decision.
    pub decision: Decision,
    /// Its risk.
    pub risk: RiskTier,
    /// The rule that decided.
    pub rule: RuleRef,
}

/// The judgment of a whole command line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandVerdict {
    /// The line as given.
    pub command: String,
    /// The strictest decision of its parts (`ask` if it could not be parsed).
    pub decision: Decision,
    /// The highest risk of its parts.
    pub risk: RiskTier,
    /// Every command judged.
    pub parts: Vec<PartVerdict>,
    /// Indexes into `parts` of the commands that decided.
    pub deciding: Vec<usize>,
    /// Why the line could not be parsed, if it could not.
    pub parse_error: Option<String>,
    /// The approval that turned an `ask` into `allow`, if any.
    pub approved_by: Option<String>,
}

impl CommandVerdict {
    /// The rules that decided.
    pub fn deciding_rules(&self) -> Vec<RuleRef> {
        self.deciding
            .iter()
            .map(|&i| self.parts[i].rule.clone())
            .collect()
    }

    /// A message for the model explaining a refusal or a pause.
    pub fn message(&self) -> String {
        let mut why: Vec<String> = self
            .deciding
            .iter()
            .map(|&i| {
                let p = &self.parts[i];
                format!(
                    "`{}`: {} ({})",
                    p.argv.join(" "),
                    p.rule.rule,
                    p.rule.origin
                )
            })
            .collect();
        if let Some(e) = &self.parse_error {
            why.push(format!("the command line could not be parsed: {e}"));
        }
        match self.decision {
            Decision::Allow => format!("allowed: {}", self.command),
            Decision::Ask => format!(
                "`{}` needs a human's approval; the run pauses until someone approves it. Because: {}",
                self.command,
                why.join("; ")
            ),
            Decision::Forbid => format!(
                "`{}` is forbidden by policy; do not retry it, find another way. Because: {}",
                self.command,
                why.join("; ")
            ),
        }
    }

    /// A pending approval for this verdict, for the run to persist.
    pub fn approval_request(&self, tool: &str) -> Approval {
        Approval::pending(tool, &self.command, self.risk, self.deciding_rules())
    }
}

fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

fn prefix_matches(prefix: &[String], argv: &[String]) -> bool {
    prefix.len() <= argv.len()
        && prefix.iter().zip(argv).enumerate().all(
            |(i, (p, a))| {
                if i == 0 { base(p) == base(a) } else { p == a }
            },
        )
}

fn builtin_rules() -> Vec<SourcedRule> {
    let installers = INSTALLERS
        .iter()
        .map(|(prefix, _)| (*prefix, Decision::Ask, RiskTier::High, INSTALLS));
    BUILTIN_RULES
        .iter()
        .copied()
        .chain(installers)
        .map(|(prefix, decision, risk, why)| SourcedRule {
            prefix: prefix.iter().map(|s| s.to_string()).collect(),
            decision,
            risk,
            rule: RuleRef::builtin(format!(
                "commands: {:?} => {} ({why})",
                prefix,
                decision_name(decision)
            )),
        })
        .collect()
}

fn default_risk(argv: &[String]) -> RiskTier {
    match argv.first().map(|a| base(a)) {
        Some("rm" | "mv" | "cp" | "chmod" | "ln" | "git" | "sed" | "tee" | "truncate") => {
            RiskTier::Medium
        }
        _ => RiskTier::Low,
    }
}

/// Configured rules (first) and built-ins, with repository rules that would loosen a built-in
/// dropped.
pub(super) fn merge_rules(
    configured: &[(CommandRule, Source)],
) -> (Vec<SourcedRule>, Vec<IgnoredRule>) {
    let builtins = builtin_rules();
    let mut rules: Vec<SourcedRule> = Vec::new();
    // Parallel to `rules`: whether each came from the repository's file.
    let mut from_repo: Vec<bool> = Vec::new();
    let mut ignored = Vec::new();
    for (r, origin) in configured {
        let rule = RuleRef::new(rule_text(r), origin);
        if r.prefix.is_empty() {
            ignored.push(IgnoredRule {
                rule,
                why: "an empty prefix matches nothing".into(),
            });
            continue;
        }
        let shadowed = builtins
            .iter()
            .filter(|b| prefix_matches(&b.prefix, &r.prefix))
            .max_by_key(|b| b.prefix.len());
        if let (Source::Repo { .. }, Some(b)) = (origin, shadowed)
            && strictest(r.decision, b.decision) != r.decision
        {
            ignored.push(IgnoredRule {
                rule,
                why: format!(
                    "the repository's configuration may not loosen the built-in rule {}",
                    b.rule.rule
                ),
            });
            continue;
        }
        // Nor a rule of the user's own configuration (a longer prefix would win over it).
        let user_shadowed = (rules.iter().zip(&from_repo))
            .filter(|(u, repo)| !**repo && prefix_matches(&u.prefix, &r.prefix))
            .map(|(u, _)| u)
            .max_by_key(|u| u.prefix.len());
        if let (Source::Repo { .. }, Some(u)) = (origin, user_shadowed)
            && strictest(r.decision, u.decision) != r.decision
        {
            ignored.push(IgnoredRule {
                rule,
                why: format!(
                    "the repository's configuration may not loosen the rule {} of {}",
                    u.rule.rule, u.rule.origin
                ),
            });
            continue;
        }
        let risk = shadowed.map_or_else(|| default_risk(&r.prefix), |b| b.risk);
        from_repo.push(matches!(origin, Source::Repo { .. }));
        rules.push(SourcedRule {
            prefix: r.prefix.clone(),
            decision: r.decision,
            risk,
            rule,
        });
    }
    rules.extend(builtins);
    (rules, ignored)
}

/// Judge a whole line.
pub(super) fn judge(policy: &Policy, line: &str) -> CommandVerdict {
    let cmds = match shell::parse(line) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            return finish(line, Vec::new(), Some("the command line is empty".into()));
        }
        Err(e) => return finish(line, Vec::new(), Some(e.0)),
    };
    let parts = cmds.iter().map(|c| judge_one(policy, c)).collect();
    finish(line, parts, None)
}

fn finish(line: &str, parts: Vec<PartVerdict>, parse_error: Option<String>) -> CommandVerdict {
    let mut decision = parts
        .iter()
        .fold(Decision::Allow, |d, p| strictest(d, p.decision));
    let mut risk = parts.iter().map(|p| p.risk).max().unwrap_or(RiskTier::Low);
    if parse_error.is_some() {
        decision = strictest(decision, Decision::Ask);
        risk = risk.max(RiskTier::High);
    }
    let deciding = if parse_error.is_some() && decision == Decision::Ask {
        parts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.decision == Decision::Ask)
            .map(|(i, _)| i)
            .collect()
    } else {
        parts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.decision == decision && decision != Decision::Allow)
            .map(|(i, _)| i)
            .collect()
    };
    CommandVerdict {
        command: line.to_string(),
        decision,
        risk,
        parts,
        deciding,
        parse_error,
        approved_by: None,
    }
}

/// A stricter-or-equal candidate replaces the current judgment.
fn tighten(cur: &mut (Decision, RiskTier, RuleRef), d: Decision, risk: RiskTier, rule: RuleRef) {
    cur.1 = cur.1.max(risk);
    if strictest(cur.0, d) != cur.0 {
        cur.0 = d;
        cur.2 = rule;
    }
}

/// Commands that write the paths they are given as operands.
const PATH_WRITERS: &[&str] = &[
    "rm", "mv", "cp", "tee", "truncate", "touch", "chmod", "mkdir", "rmdir", "shred", "unlink",
];

/// `git -c` keys that only change presentation or identity, never what git runs.
const SAFE_GIT_CONFIG: &[&str] = &[
    "user.name",
    "user.email",
    "core.quotepath",
    "core.autocrlf",
    "core.safecrlf",
    "commit.gpgsign",
    "tag.gpgsign",
    "init.defaultbranch",
    "pull.rebase",
    "merge.conflictstyle",
    "rerere.enabled",
    "gc.auto",
    "maintenance.auto",
    "log.showsignature",
    "status.showuntrackedfiles",
    "safe.directory",
];

fn judge_one(policy: &Policy, cmd: &SimpleCommand) -> PartVerdict {
    let argv = &cmd.argv;
    let mut cur = if cmd.dynamic_name {
        (
            Decision::Ask,
            RiskTier::High,
            RuleRef::builtin("a command whose name is computed at run time is asked"),
        )
    } else if argv.is_empty() {
        (
            Decision::Allow,
            RiskTier::Low,
            RuleRef::builtin("redirection only"),
        )
    } else {
        // Longest prefix wins; on a tie the configured rule (listed first) wins.
        let best = policy
            .rules
            .iter()
            .filter(|r| prefix_matches(&r.prefix, argv))
            .fold(None::<&SourcedRule>, |best, r| match best {
                Some(b) if b.prefix.len() >= r.prefix.len() => Some(b),
                _ => Some(r),
            });
        match best {
            Some(r) => match installer_registry(policy, r) {
                Some(rule) => (Decision::Allow, r.risk, rule),
                None => (r.decision, r.risk, r.rule.clone()),
            },
            None => (
                policy.default_command.0,
                default_risk(argv),
                policy.default_command.1.clone(),
            ),
        }
    };
    let name = argv.first().map(|a| base(a)).unwrap_or("");
    if NETWORK_CLIENTS.contains(&name) {
        let (mode, rule) = &policy.network;
        let d = match mode {
            NetworkMode::Off => Decision::Forbid,
            NetworkMode::On => Decision::Allow,
            NetworkMode::Allowlist => {
                let hosts = hosts_of(argv);
                let allowed = &policy.network_allow.0;
                if !hosts.is_empty() && hosts.iter().all(|h| allowed.iter().any(|a| a == h)) {
                    Decision::Allow
                } else {
                    Decision::Forbid
                }
            }
        };
        let rule = RuleRef {
            rule: format!("{} (`{name}` is a network client)", rule.rule),
            origin: rule.origin.clone(),
        };
        tighten(&mut cur, d, RiskTier::High, rule);
    }
    judge_hidden_code(cmd, name, &mut cur);
    for r in cmd.redirects.iter().filter(|r| r.writes()) {
        judge_write(policy, cmd, &r.target, "a redirection", &mut cur);
    }
    let operands = || argv[1..].iter().filter(|a| !a.starts_with('-'));
    if (PATH_WRITERS.contains(&name) || name == "ln") && cmd.args_from_stdin {
        {
            tighten(
                &mut cur,
                Decision::Ask,
                RiskTier::High,
                RuleRef::builtin(format!(
                    "`{name}` behind `xargs` writes paths that arrive only at run time"
                )),
            );
        }
    }
    match name {
        n if PATH_WRITERS.contains(&n) => {
            let recursive = n == "rm"
                && argv[1..].iter().any(|a| {
                    a == "--recursive"
                        || (a.starts_with('-') && !a.starts_with("--") && a.contains(['r', 'R']))
                });
            for a in operands() {
                judge_write(policy, cmd, a, &format!("`{name}`"), &mut cur);
                if recursive {
                    judge_tree_delete(cmd, a, &mut cur);
                }
            }
        }
        "ln" => {
            let words: Vec<&String> = operands().collect();
            let symbolic = argv[1..].iter().any(|a| {
                a == "--symbolic" || (a.starts_with('-') && !a.starts_with("--") && a.contains('s'))
            });
            if symbolic && let [target, link] = words.as_slice() {
                if !super::paths::symlink_target_is_confined(link, target) {
                    tighten(
                        &mut cur,
                        Decision::Forbid,
                        RiskTier::High,
                        RuleRef::builtin(format!(
                            "a symbolic link to `{target}` would lead outside the worktree or into .git"
                        )),
                    );
                }
            } else if symbolic {
                tighten(
                    &mut cur,
                    Decision::Ask,
                    RiskTier::High,
                    RuleRef::builtin("a symbolic link whose target cannot be told is asked"),
                );
            }
        }
        "find" => {
            if argv.iter().any(|a| a == "-delete") {
                // With no test to select files, `-delete` takes everything below the roots.
                let roots = wrappers::find_roots(argv);
                let mut expression = argv[1..].iter().skip_while(|a| !a.starts_with('-'));
                let mut everything = true;
                while let Some(a) = expression.next() {
                    match a.as_str() {
                        "-delete" | "-depth" | "-xdev" | "-mount" | "-noleaf" | "-H" | "-L"
                        | "-P" => {}
                        "-mindepth" | "-maxdepth" => {
                            expression.next();
                        }
                        _ => everything = false,
                    }
                }
                for root in roots {
                    judge_write(policy, cmd, &root, "`find -delete`", &mut cur);
                    if everything {
                        judge_tree_delete(cmd, &root, &mut cur);
                    }
                }
            }
            for w in argv.windows(2) {
                if matches!(w[0].as_str(), "-fprint" | "-fprint0" | "-fprintf" | "-fls") {
                    judge_write(policy, cmd, &w[1], &format!("`find {}`", w[0]), &mut cur);
                }
            }
        }
        "time" => {
            let (_, opts) = wrappers::getopt(
                argv,
                1,
                &wrappers::Grammar {
                    short: "fo",
                    long: &["format", "output"],
                    abbrev: true,
                },
            );
            for (n, v) in opts {
                if let ("o" | "output", Some(file)) = (n.as_str(), v) {
                    judge_write(policy, cmd, &file, "`time -o`", &mut cur);
                }
            }
        }
        "sed" => {
            let in_place = argv[1..]
                .iter()
                .any(|a| a.starts_with("--in-place") || (a.starts_with("-i") && a.len() <= 8));
            let script_given = argv[1..].iter().any(|a| {
                matches!(a.as_str(), "-e" | "-f" | "--expression" | "--file")
                    || a.starts_with("--expression=")
                    || a.starts_with("--file=")
            });
            if in_place {
                let files = operands().skip(usize::from(!script_given));
                for f in files {
                    judge_write(policy, cmd, f, "`sed -i`", &mut cur);
                }
            }
        }
        "git" => judge_git_globals(cmd, &mut cur),
        _ => {}
    }
    PartVerdict {
        argv: argv.clone(),
        decision: cur.0,
        risk: cur.1,
        rule: cur.2,
    }
}

/// When `rule` is the built-in rule of an installer and the network policy reaches its
/// registry, the rule that allows it.
fn installer_registry(policy: &Policy, rule: &SourcedRule) -> Option<RuleRef> {
    if rule.rule.origin != RuleRef::builtin("").origin {
        return None;
    }
    let (_, hosts) = INSTALLERS.iter().find(|(prefix, _)| {
        prefix.len() == rule.prefix.len()
            && prefix
                .iter()
                .zip(&rule.prefix)
                .all(|(a, b)| *a == b.as_str())
    })?;
    let (mode, net) = &policy.network;
    let reached = match mode {
        NetworkMode::Off => return None,
        NetworkMode::On => "every host".to_string(),
        NetworkMode::Allowlist => {
            let allowed = &policy.network_allow;
            let host = hosts
                .iter()
                .find(|h| allowed.0.iter().any(|a| a.as_str() == **h))?;
            return Some(RuleRef {
                rule: format!(
                    "{} reaches `{host}`, the registry of `{}`",
                    allowed.1.rule,
                    rule.prefix.join(" ")
                ),
                origin: allowed.1.origin.clone(),
            });
        }
    };
    Some(RuleRef {
        rule: format!(
            "{} reaches {reached}, the registry of `{}` included",
            net.rule,
            rule.prefix.join(" ")
        ),
        origin: net.origin.clone(),
    })
}

/// Code the line does not show: script files run by a shell, programs given inline to an
/// interpreter, code read from standard input, loader variables.
fn judge_hidden_code(cmd: &SimpleCommand, name: &str, cur: &mut (Decision, RiskTier, RuleRef)) {
    let argv = &cmd.argv;
    let ask = |cur: &mut (Decision, RiskTier, RuleRef), why: String| {
        tighten(cur, Decision::Ask, RiskTier::High, RuleRef::builtin(why));
    };
    let input_redirected = cmd
        .redirects
        .iter()
        .any(|r| r.op.trim_start_matches(|c: char| c.is_ascii_digit()) == "<");
    match wrappers::shell_program(argv) {
        Some(ShellProgram::File(file)) => ask(
            cur,
            format!(
                "`{name} {file}` runs a script file whose commands the policy cannot see (the sandbox contains it; a human approves it)"
            ),
        ),
        Some(ShellProgram::Stdin) if cmd.stdin_piped || input_redirected => ask(
            cur,
            format!("`{name}` reading its input runs code that is only known at run time"),
        ),
        Some(_) => {}
        None => {
            if STDIN_RUNNERS.contains(&name)
                && (cmd.stdin_piped || input_redirected)
                && argv[1..].iter().all(|a| a.starts_with('-'))
            {
                ask(
                    cur,
                    format!("`{name}` reading a pipe runs code that is only known at run time"),
                );
            }
        }
    }
    if matches!(name, "source" | ".") && argv.len() > 1 {
        ask(
            cur,
            format!(
                "`{name} {}` runs a script file whose commands the policy cannot see",
                argv[1]
            ),
        );
    }
    if matches!(name, "awk" | "gawk" | "mawk" | "nawk" | "busybox-awk") {
        // awk's `system()`, `print | "cmd"` and `"cmd" | getline` run commands; a program
        // file (`-f`) is not visible at all.
        let (k, opts) = wrappers::getopt(argv, 1, &wrappers::AWK);
        let file = opts.iter().any(|(n, _)| n == "f" || n == "file");
        let inline: Vec<&String> = opts
            .iter()
            .filter(|(n, _)| n == "e" || n == "source")
            .filter_map(|(_, v)| v.as_ref())
            .chain(argv.get(k).filter(|_| !file))
            .collect();
        if file
            || inline
                .iter()
                .any(|p| p.contains("system") || p.contains('|'))
        {
            ask(
                cur,
                format!(
                    "`{name}` with a program that can run commands (`system`, a pipe, or a file)"
                ),
            );
        }
    }
    if let Some(flag) = wrappers::inline_program(argv) {
        ask(
            cur,
            format!("`{name} {flag}` runs a program given inline, which the policy cannot read"),
        );
    }
    if let [only] = argv.as_slice()
        && let Some((var, _)) = only.split_once('=')
        && (wrappers::LOADER_VARIABLES.contains(&var) || var.starts_with("GIT_CONFIG_KEY_"))
    {
        ask(
            cur,
            format!(
                "setting `{var}` makes programs load code or configuration the line does not show"
            ),
        );
    }
}

/// git's global options that change what git runs or where it works.
fn judge_git_globals(cmd: &SimpleCommand, cur: &mut (Decision, RiskTier, RuleRef)) {
    let (_, opts) = wrappers::git_subcommand(&cmd.argv);
    for (n, v) in opts {
        let value = v.unwrap_or_default();
        let why = match n.as_str() {
            "c" => {
                let key = value.split('=').next().unwrap_or("").to_ascii_lowercase();
                let safe = SAFE_GIT_CONFIG.contains(&key.as_str())
                    || key.starts_with("color.")
                    || key.starts_with("advice.");
                (!safe).then(|| {
                    format!("`git -c {key}` can make git run commands or reach other repositories")
                })
            }
            "config-env" => Some(format!(
                "`git --config-env {value}` sets configuration from the environment"
            )),
            "exec-path" if !value.is_empty() => Some(format!(
                "`git --exec-path={value}` runs git's commands from another directory"
            )),
            "C" | "git-dir" | "work-tree" => cmd
                .dirs()
                .iter()
                .map(|d| shell::join_dir(d, &value))
                .find(|p| outside_worktree(p))
                .map(|p| format!("`git --{n} {p}` works on a repository outside the worktree")),
            _ => None,
        };
        if let Some(why) = why {
            tighten(cur, Decision::Ask, RiskTier::High, RuleRef::builtin(why));
        }
    }
}

/// Whether `path` (normalized) lies outside the worktree and its temporary space.
fn outside_worktree(path: &str) -> bool {
    if path.contains('$') {
        return true;
    }
    match super::paths::lexical_relative(path) {
        Ok(_) => false,
        Err(super::paths::PathRefusal::InGit) => false,
        Err(_) => !(path == "/tmp" || path.starts_with("/tmp/")),
    }
}

/// Deleting the whole worktree (`rm -r .`, `find . -delete`) takes `.git` with it.
fn judge_tree_delete(cmd: &SimpleCommand, target: &str, cur: &mut (Decision, RiskTier, RuleRef)) {
    for d in cmd.dirs() {
        let path = shell::join_dir(d, target);
        if path == "." || path == "*" || path == "./*" {
            tighten(
                cur,
                Decision::Forbid,
                RiskTier::Critical,
                RuleRef::builtin(format!(
                    "deleting `{target}` from the worktree root deletes the whole worktree"
                )),
            );
        }
    }
}

/// Judge writing `target` from every directory `cmd` may run in.
fn judge_write(
    policy: &Policy,
    cmd: &SimpleCommand,
    target: &str,
    what: &str,
    cur: &mut (Decision, RiskTier, RuleRef),
) {
    for d in cmd.dirs() {
        let path = shell::join_dir(d, target);
        let shown = if path == target || d == "." {
            what.to_string()
        } else {
            format!("{what} (from `{d}`)")
        };
        judge_write_target(policy, &path, &shown, cur);
    }
}

fn judge_write_target(
    policy: &Policy,
    target: &str,
    what: &str,
    cur: &mut (Decision, RiskTier, RuleRef),
) {
    if target == "/dev/null" || target == "/dev/stdout" || target == "/dev/stderr" {
        return;
    }
    match super::paths::lexical_relative(target) {
        Err(_) if target.starts_with("/tmp/") && shell::normalize(target).starts_with("/tmp/") => {
            tighten(
                cur,
                Decision::Allow,
                RiskTier::Medium,
                RuleRef::builtin("temporary files"),
            );
        }
        Err(_) => tighten(
            cur,
            Decision::Forbid,
            RiskTier::High,
            RuleRef::builtin(format!(
                "{what} writing `{target}` would change files outside the worktree or in .git"
            )),
        ),
        Ok(_) if target.contains('$') => {
            tighten(
                cur,
                Decision::Ask,
                RiskTier::High,
                RuleRef::builtin(format!(
                    "{what} writing `{target}`, a path only known at run time"
                )),
            );
        }
        Ok(rel) => {
            let v = policy.judge_path(&rel.to_string_lossy());
            if v.decision != Decision::Allow {
                tighten(cur, v.decision, RiskTier::High, v.rule);
            } else {
                tighten(cur, Decision::Allow, RiskTier::Medium, v.rule);
            }
        }
    }
}

/// Hosts named in a network client's arguments (URLs and `user@host:` forms).
fn hosts_of(argv: &[String]) -> Vec<String> {
    argv[1..]
        .iter()
        .filter_map(|a| {
            if let Some((_, rest)) = a.split_once("://") {
                let hostport = rest.split(['/', '?', '#']).next().unwrap_or("");
                let host = hostport.rsplit('@').next().unwrap_or(hostport);
                Some(host.split(':').next().unwrap_or(host).to_string())
            } else if !a.starts_with('-') && a.contains('.') {
                let host = a.rsplit('@').next().unwrap_or(a);
                Some(host.split([':', '/']).next().unwrap_or(host).to_string())
            } else {
                None
            }
        })
        .filter(|h| !h.is_empty())
        .collect()
}
