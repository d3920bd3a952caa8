//! Command rules: judging every command a shell line would run.

use serde::Serialize;

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
        &["pip", "install"],
        Decision::Ask,
        RiskTier::High,
        "installs code from the network",
    ),
    (
        &["pip3", "install"],
        Decision::Ask,
        RiskTier::High,
        "installs code from the network",
    ),
    (
        &["npm", "install"],
        Decision::Ask,
        RiskTier::High,
        "installs code from the network",
    ),
    (
        &["npm", "i"],
        Decision::Ask,
        RiskTier::High,
        "installs code from the network",
    ),
    (
        &["npx"],
        Decision::Ask,
        RiskTier::High,
        "runs packages fetched from the network",
    ),
    (
        &["yarn", "add"],
        Decision::Ask,
        RiskTier::High,
        "installs code from the network",
    ),
    (
        &["cargo", "install"],
        Decision::Ask,
        RiskTier::High,
        "installs code from the network",
    ),
    (
        &["gem", "install"],
        Decision::Ask,
        RiskTier::High,
        "installs code from the network",
    ),
    (
        &["go", "install"],
        Decision::Ask,
        RiskTier::High,
        "installs code from the network",
    ),
    (
        &["go", "get"],
        Decision::Ask,
        RiskTier::High,
        "installs code from the network",
    ),
    (
        &["rm", "-rf", "/"],
        Decision::Forbid,
        RiskTier::Critical,
        "deletes the machine's files",
    ),
];

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
    BUILTIN_RULES
        .iter()
        .map(|(prefix, decision, risk, why)| SourcedRule {
            prefix: prefix.iter().map(|s| s.to_string()).collect(),
            decision: *decision,
            risk: *risk,
            rule: RuleRef::builtin(format!(
                "commands: {:?} => {} ({why})",
                prefix,
                decision_name(*decision)
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
            Some(r) => (r.decision, r.risk, r.rule.clone()),
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
    if STDIN_RUNNERS.contains(&name)
        && cmd.stdin_piped
        && argv[1..].iter().all(|a| a.starts_with('-') && a != "-c")
    {
        tighten(
            &mut cur,
            Decision::Ask,
            RiskTier::High,
            RuleRef::builtin(format!(
                "`{name}` reading a pipe runs code that is only known at run time"
            )),
        );
    }
    for r in cmd.redirects.iter().filter(|r| r.writes()) {
        judge_write_target(policy, &r.target, "a redirection", &mut cur);
    }
    match name {
        "rm" | "mv" | "cp" | "tee" | "truncate" | "touch" | "chmod" | "mkdir" | "rmdir" => {
            for a in argv[1..].iter().filter(|a| !a.starts_with('-')) {
                judge_write_target(policy, a, &format!("`{name}`"), &mut cur);
            }
        }
        "ln" => {
            let words: Vec<&String> = argv[1..].iter().filter(|a| !a.starts_with('-')).collect();
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
        _ => {}
    }
    PartVerdict {
        argv: argv.clone(),
        decision: cur.0,
        risk: cur.1,
        rule: cur.2,
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
        Err(_) if target.starts_with("/tmp/") => {
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
