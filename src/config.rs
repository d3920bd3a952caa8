//! Layered configuration.
//!
//! Layers, later wins: built-in defaults < user file (`~/.config/git-agent/config.toml`) <
//! the repository's `.github/agent.toml` **as it is on the base branch** < `GIT_AGENT_*`
//! environment variables < command-line flags.
//!
//! This module owns parsing, merging, validation and provenance. It does not read git objects
//! (the caller hands it the repository file's text and where it came from) and it never holds
//! secrets: keys are named by environment variable only.
//!
//! The repository layer is untrusted input. It may tighten policy and set tests, labels and
//! model names, but it may not set provider URLs, API-key variable names or the sandbox mode;
//! each attempt is an error naming the file and the key.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Errors from loading configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A layer is not valid TOML or does not fit the schema (unknown key, wrong type).
    #[error("{origin}: {message}")]
    Invalid {
        /// Where the bad value came from.
        origin: Source,
        /// What is wrong with it, naming the key.
        message: String,
    },
    /// The repository file tried to set a key that only the user may set.
    #[error(
        "{origin}: `{key}` may not be set by the repository's configuration ({why}); set it in your user config, the environment or a flag instead"
    )]
    Forbidden {
        /// The repository file.
        origin: Source,
        /// The dotted key it tried to set.
        key: String,
        /// Why this key is reserved to the user.
        why: &'static str,
    },
    /// The repository file set a key in a way that would loosen what the layers below chose.
    #[error(
        "{origin}: `{key}` may only be tightened by the repository's configuration: {message}; change it in your user config, the environment or a flag instead"
    )]
    Loosens {
        /// The repository file.
        origin: Source,
        /// The dotted key.
        key: String,
        /// What the file asked for and what it may do, naming both values.
        message: String,
    },
    /// A file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where a configuration value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "layer", rename_all = "snake_case")]
pub enum Source {
    /// Built into git-agent.
    Default,
    /// The user's config file.
    User {
        /// Path of the file.
        path: PathBuf,
    },
    /// The repository's `.github/agent.toml`, read from a ref.
    Repo {
        /// The ref (or revision) the file was read from, e.g. `origin/main`.
        rev: String,
        /// Path of the file inside the repository.
        path: String,
    },
    /// A `GIT_AGENT_*` environment variable.
    Env {
        /// The variable's name.
        var: String,
    },
    /// A command-line flag.
    Flag {
        /// The flag as typed, e.g. `--max-usd`.
        flag: String,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("built-in default"),
            Source::User { path } => write!(f, "user config {}", path.display()),
            Source::Repo { rev, path } => write!(f, "repository config {rev}:{path}"),
            Source::Env { var } => write!(f, "environment variable {var}"),
            Source::Flag { flag } => write!(f, "flag {flag}"),
        }
    }
}

/// When the agent acts on GitHub events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TriggerConfig {
    /// Issue label that starts a run.
    pub label: String,
    /// Comment prefix of the command grammar (`/agent fix …`).
    pub command: String,
    /// Whether a failed CI run on an agent PR starts a "make CI green" run.
    pub ci_failure: bool,
    /// Bot accounts (`name[bot]`) that may trigger runs.
    pub allowed_bots: Vec<String>,
    /// Repository permissions that may trigger runs (asked of the API, never the payload).
    pub permissions: Vec<String>,
    /// Agent attempts per pull request on CI failure before the loop guard stops.
    pub max_ci_attempts: u32,
}

impl Default for TriggerConfig {
    fn default() -> Self {
        Self {
            label: "agent".into(),
            command: "/agent".into(),
            ci_failure: true,
            allowed_bots: Vec::new(),
            permissions: vec!["admin".into(), "maintain".into(), "write".into()],
            max_ci_attempts: 3,
        }
    }
}

/// Which model serves each role, as `PROVIDER:MODEL` specs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelsConfig {
    /// Writes the plan.
    pub planner: Option<String>,
    /// Edits files and fixes failures.
    pub coder: Option<String>,
    /// Reviews the final diff (optional).
    pub reviewer: Option<String>,
    /// Summarizes long context (optional).
    pub summarizer: Option<String>,
    /// Per-role fallback spec, used once the primary's retries are spent.
    pub fallback: BTreeMap<String, String>,
}

/// Connection settings of one model provider. User-only: the repository may not set these.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProviderConfig {
    /// API base URL (e.g. `http://127.0.0.1:8080/v1`).
    pub base_url: Option<String>,
    /// Name of the environment variable that holds the API key.
    pub api_key_env: Option<String>,
}

/// Model providers' connection settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProvidersConfig {
    /// OpenAI and OpenAI-compatible servers.
    pub openai: ProviderConfig,
    /// Anthropic's Messages API.
    pub anthropic: ProviderConfig,
    /// Ollama (OpenAI-compatible, default `http://localhost:11434/v1`).
    pub ollama: ProviderConfig,
}

/// Time-outs and retries for model calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelNetConfig {
    /// Connect time-out in seconds.
    pub connect_timeout_s: f64,
    /// Longest wait for the next streamed chunk, in seconds.
    pub chunk_timeout_s: f64,
    /// Longest whole call, in seconds.
    pub request_timeout_s: f64,
    /// Retries of a retryable failure before giving up (or falling back).
    pub max_retries: u32,
    /// First back-off delay in seconds; doubles per retry, with jitter.
    pub backoff_base_s: f64,
    /// Cap on one back-off delay in seconds.
    pub backoff_max_s: f64,
}

impl Default for ModelNetConfig {
    fn default() -> Self {
        Self {
            connect_timeout_s: 10.0,
            chunk_timeout_s: 120.0,
            request_timeout_s: 600.0,
            max_retries: 4,
            backoff_base_s: 1.0,
            backoff_max_s: 60.0,
        }
    }
}

/// Price of one model in USD per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Uncached input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Cached input tokens (defaults to `input`).
    #[serde(default)]
    pub cached_input: Option<f64>,
}

/// Hard limits of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// Spend cap in USD.
    pub max_usd: f64,
    /// Token cap (input + output, all roles).
    pub max_tokens: u64,
    /// Model-call cap.
    pub max_turns: u32,
    /// Wall-clock cap in minutes.
    pub max_minutes: u32,
    /// Rounds of test → fix before the run fails.
    pub max_fix_attempts: u32,
    /// Output tokens one model call may write (small local models want less; a model's
    /// own limit may be lower).
    pub max_output_tokens: u32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            max_usd: 5.0,
            max_tokens: 2_000_000,
            max_turns: 60,
            max_minutes: 30,
            max_fix_attempts: 3,
            max_output_tokens: 4096,
        }
    }
}

/// How the run verifies its work.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerifyConfig {
    /// The test command; detected from the project when unset.
    pub test: Option<String>,
    /// Time-out of one test run in minutes.
    pub timeout_minutes: u32,
    /// Whether a fix must show a test that fails before it and passes after it, when the
    /// baseline shows no failing test.
    pub reproduce: Reproduce,
    /// Whether a baseline failure that still fails, unrelated to the change, may stand when
    /// the run fixed what it was for.
    pub preexisting: Preexisting,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        Self {
            test: None,
            timeout_minutes: 15,
            reproduce: Reproduce::Prefer,
            preexisting: Preexisting::Allow,
        }
    }
}

/// `verify.preexisting`: real projects have tests that fail on the base for reasons unrelated
/// to the request (a test that depends on the Python version).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preexisting {
    /// A baseline failure that still fails does not block success when the run fixed at
    /// least one baseline failure, nothing newly fails, and the test is unrelated (the
    /// request does not name it, it is no variant of a fixed test, its file does not import
    /// a changed module). When in doubt it blocks.
    #[default]
    Allow,
    /// Every baseline failure must pass.
    Block,
}

/// `verify.reproduce`: a fix request whose baseline shows no failing test proves nothing by
/// passing afterwards, so the coder is asked to add a test that reproduces the problem first,
/// and the harness checks it fails on the base revision's code and passes after.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reproduce {
    /// Ask for a reproduction; without one the run may succeed, and the report says plainly
    /// that no test showed the problem.
    #[default]
    Prefer,
    /// Without a reproduction the run fails.
    Require,
    /// Do not ask (the report still says when no test showed the problem).
    Off,
}

/// Registries that fetch any origin they are asked for (the Go module proxy and its checksum
/// database): open egress, so set-up reaches them only when a person's own configuration
/// names them, never by detection or by a repository's rule (issue 38).
pub const FETCH_THROUGH: &[&str] = &["go"];

/// The public registries set-up may reach by name, and the hosts each stands for.
pub const REGISTRIES: &[(&str, &[&str])] = &[
    ("pypi", &["pypi.org", "files.pythonhosted.org"]),
    ("npm", &["registry.npmjs.org"]),
    (
        "crates",
        &["index.crates.io", "static.crates.io", "crates.io"],
    ),
    ("go", &["proxy.golang.org", "sum.golang.org"]),
];

/// `[setup]`: what prepares the project's environment before the agent's first turn
/// (issue 19). Read from the base branch like all repository configuration; the commands
/// run sandboxed, with only the network named here, and their outputs are cached and
/// mounted read-only for the agent's commands and for verification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SetupConfig {
    /// `false`: no set-up at all (a repository may only turn it off).
    pub enabled: bool,
    /// Shell command lines, run in order in a fresh checkout of the base. `None`: detected
    /// per ecosystem (`git agent doctor` shows what); `[]`: none. `$GIT_AGENT_ENV` is the
    /// cache directory they may write.
    pub commands: Option<Vec<String>>,
    /// Registries (`pypi`, `npm`, `crates`, `go`) or host names set-up may reach through the
    /// egress proxy. `None`: the detected ecosystems' registries. A repository may only name
    /// registries, or entries of the user's list when the user set one.
    pub network: Option<Vec<String>>,
    /// Files (globs, relative to the project) whose content decides whether a cached set-up
    /// is reused; the commands themselves always count. With `commands` unset, the detected
    /// manifests and lockfiles.
    pub key: Vec<String>,
    /// Project paths the commands make that the tests need (`node_modules`): kept in the
    /// cache and mounted read-only into every worktree and clean checkout.
    pub outputs: Vec<String>,
    /// Directories put before `PATH` for every later command (`$GIT_AGENT_ENV/venv/bin`).
    pub path: Vec<String>,
    /// Variables every later command gets (`$GIT_AGENT_ENV` expands).
    pub env: BTreeMap<String, String>,
    /// Time-out of the whole set-up, in minutes.
    pub timeout_minutes: u32,
    /// Size cap of the set-up cache, in MiB (user-only); least recently used entries go first.
    pub cache_mb: u64,
}

impl Default for SetupConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            commands: None,
            network: None,
            key: Vec::new(),
            outputs: Vec::new(),
            path: Vec::new(),
            env: BTreeMap::new(),
            timeout_minutes: 20,
            cache_mb: 10 * 1024,
        }
    }
}

impl SetupConfig {
    /// The hosts the egress proxy admits for `names` (registries expand, hosts stay).
    pub fn hosts(names: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        for n in names {
            match REGISTRIES.iter().find(|(r, _)| r == n) {
                Some((_, hosts)) => out.extend(hosts.iter().map(|h| h.to_string())),
                None => out.push(n.clone()),
            }
        }
        out.dedup();
        out
    }
}

/// Network access of sandboxed commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// No network at all (Unix sockets only).
    #[default]
    Off,
    /// Only the hosts in `network_allow`, through a filtering proxy.
    Allowlist,
    /// Unrestricted.
    On,
}

/// Decision of a command rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Run it.
    Allow,
    /// Pause the run until a human approves.
    Ask,
    /// Refuse it.
    Forbid,
}

/// A command rule: commands whose argv starts with `prefix` get `decision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandRule {
    /// Leading argv words to match.
    pub prefix: Vec<String>,
    /// What to do with a match.
    pub decision: Decision,
}

/// The permission policy's data; `policy/` gives it meaning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// Globs the agent may write; empty means everything not denied.
    pub allow_paths: Vec<String>,
    /// Globs the agent may never write.
    pub deny_paths: Vec<String>,
    /// Network access of commands.
    pub network: NetworkMode,
    /// Hosts reachable in `allowlist` mode.
    pub network_allow: Vec<String>,
    /// Command rules, first match by longest prefix.
    pub commands: Vec<CommandRule>,
    /// Decision for changes to the test runner's configuration (conftest.py, pytest/tox
    /// sections, package.json scripts, jest/vitest/mocha configs, Cargo test/profile
    /// sections and build.rs, and files that shadow the runner or the interpreter).
    pub runner_config: Decision,
    /// Decision for commands no rule matches.
    pub default_command: Decision,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            allow_paths: Vec::new(),
            deny_paths: vec![
                ".github/workflows/**".into(),
                "**/.env*".into(),
                "**/*.pem".into(),
                "**/id_rsa*".into(),
            ],
            network: NetworkMode::Off,
            network_allow: Vec::new(),
            commands: Vec::new(),
            runner_config: Decision::Ask,
            default_command: Decision::Allow,
        }
    }
}

/// Which sandbox runs the agent's commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// Landlock + seccomp where available, else bubblewrap, else fail closed.
    #[default]
    Auto,
    /// Landlock + seccomp only.
    Landlock,
    /// bubblewrap only.
    Bwrap,
    /// No sandbox: an explicit opt-out, recorded in the audit log.
    Off,
}

/// Sandbox settings. User-only: the repository may not set these.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// The sandbox mechanism.
    pub mode: SandboxMode,
    /// Extra directories bound read-only into every command's view (a toolchain that is not
    /// on the agent's `PATH`, a shared cache). Never the home directory or a parent of it.
    pub bind: Vec<PathBuf>,
    /// Paths covered with an empty read-only file or directory in the view (a key file
    /// under a bound directory).
    pub hide: Vec<PathBuf>,
    /// Memory of one command, in MiB (default 8192).
    pub memory_mb: Option<u64>,
    /// Size of a command's fresh `/tmp`, in MiB (default 4096).
    pub tmp_mb: Option<u64>,
    /// Size of a command's fresh `$HOME`, in MiB (default 1024).
    pub home_mb: Option<u64>,
    /// How much the worktree may grow during one command, in MiB (default 16384).
    pub worktree_growth_mb: Option<u64>,
}

/// Identity and naming for the commits and branches the agent makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GitConfig {
    /// Author and committer name of agent commits.
    pub author_name: String,
    /// Author and committer email of agent commits.
    pub author_email: String,
    /// Remote to push run branches to.
    pub remote: String,
    /// Prefix of run branches; pushes go only to branches under it.
    pub branch_prefix: String,
}

impl Default for GitConfig {
    fn default() -> Self {
        Self {
            author_name: "git-agent".into(),
            author_email: "git-agent@users.noreply.github.com".into(),
            remote: "origin".into(),
            branch_prefix: "agent/".into(),
        }
    }
}

/// The whole resolved configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// GitHub triggers.
    pub trigger: TriggerConfig,
    /// Models per role.
    pub models: ModelsConfig,
    /// Provider connection settings (user-only).
    pub providers: ProvidersConfig,
    /// Model-call time-outs and retries.
    pub model_net: ModelNetConfig,
    /// Price overrides by `PROVIDER:MODEL` (or bare model name).
    pub prices: BTreeMap<String, Price>,
    /// Hard limits.
    pub budget: BudgetConfig,
    /// Verification.
    pub verify: VerifyConfig,
    /// The project's environment set-up.
    pub setup: SetupConfig,
    /// Permission policy.
    pub policy: PolicyConfig,
    /// Sandbox (user-only).
    pub sandbox: SandboxConfig,
    /// Commit identity and branch naming.
    pub git: GitConfig,
}

/// How the repository layer may set a key. The repository's file is untrusted: it may only
/// tighten what the layers below it (built-in defaults and the user's file) chose, so every
/// key it can name has a rule here, and a key without one is refused (a new setting is
/// user-only until someone decides otherwise).
#[derive(Debug, Clone, Copy)]
enum RepoRule {
    /// Free to set: names, labels, model names, the test command.
    Free,
    /// A number that may only go down (budgets, timeouts, attempts).
    Lower,
    /// A switch that may only be turned off.
    OnlyOff,
    /// `policy.network`: only towards `off`.
    Network,
    /// `policy.default_command`: only towards `forbid`.
    Stricter,
    /// A list that may only keep entries of the list below (allowed bots, allowed hosts).
    Subset,
    /// An allow-list where empty means "everything": it may narrow an empty list to any
    /// entries, and otherwise keep only entries of the list below.
    Narrow,
    /// A list the repository adds to; the entries below stay (deny globs, command rules).
    Append,
    /// `setup.network`: entries of the user's list when one is set, else registry names
    /// (`REGISTRIES`, less the fetch-through ones) only: a repository cannot open set-up to
    /// a host of its choosing.
    Registries,
    /// Not settable by the repository, for the reason given.
    Forbidden(&'static str),
}

/// Every key (dotted, `*` for any one segment; a section name covers the whole section) the
/// repository layer may name, with its rule. First match wins.
const REPO_RULES: &[(&str, RepoRule)] = &[
    ("trigger.label", RepoRule::Free),
    ("trigger.command", RepoRule::Free),
    ("trigger.ci_failure", RepoRule::OnlyOff),
    ("trigger.allowed_bots", RepoRule::Subset),
    ("trigger.permissions", RepoRule::Subset),
    ("trigger.max_ci_attempts", RepoRule::Lower),
    ("models.fallback", RepoRule::Free),
    ("models.*", RepoRule::Free),
    (
        "providers.*.base_url",
        RepoRule::Forbidden("a provider URL decides where prompts and keys are sent"),
    ),
    (
        "providers.*.api_key_env",
        RepoRule::Forbidden("an API-key variable name decides which secret is sent"),
    ),
    (
        "providers",
        RepoRule::Forbidden("provider settings decide where prompts and keys are sent"),
    ),
    ("model_net.*", RepoRule::Lower),
    (
        "prices",
        RepoRule::Forbidden("prices decide what the spending cap measures"),
    ),
    ("budget.*", RepoRule::Lower),
    ("verify.test", RepoRule::Free),
    ("verify.timeout_minutes", RepoRule::Lower),
    ("verify.reproduce", RepoRule::Stricter),
    ("verify.preexisting", RepoRule::Stricter),
    // Set-up commands run sandboxed on the base revision, like the tests the repository
    // also decides; what they may reach and how much disk they keep are the user's.
    ("setup.enabled", RepoRule::OnlyOff),
    ("setup.commands", RepoRule::Free),
    ("setup.key", RepoRule::Free),
    ("setup.outputs", RepoRule::Free),
    ("setup.path", RepoRule::Free),
    ("setup.env", RepoRule::Free),
    ("setup.env.*", RepoRule::Free),
    ("setup.timeout_minutes", RepoRule::Lower),
    ("setup.network", RepoRule::Registries),
    (
        "setup.cache_mb",
        RepoRule::Forbidden("the cache's size is the machine's disk"),
    ),
    ("policy.allow_paths", RepoRule::Narrow),
    ("policy.deny_paths", RepoRule::Append),
    ("policy.network", RepoRule::Network),
    ("policy.network_allow", RepoRule::Subset),
    ("policy.commands", RepoRule::Append),
    ("policy.default_command", RepoRule::Stricter),
    ("policy.runner_config", RepoRule::Stricter),
    (
        "sandbox.mode",
        RepoRule::Forbidden("the sandbox protects the machine running the agent"),
    ),
    (
        "sandbox",
        RepoRule::Forbidden("the sandbox protects the machine running the agent"),
    ),
    (
        "git.branch_prefix",
        RepoRule::Forbidden(
            "the push guard and the ownership of pull requests are keyed on the branch prefix",
        ),
    ),
    (
        "git.author_name",
        RepoRule::Forbidden("the commit identity says who made a commit"),
    ),
    (
        "git.author_email",
        RepoRule::Forbidden("the commit identity says who made a commit"),
    ),
    (
        "git.remote",
        RepoRule::Forbidden("the remote decides where the run's branches are pushed"),
    ),
    (
        "git",
        RepoRule::Forbidden("commit identity and branch naming are the operator's"),
    ),
];

/// One layer's input.
#[derive(Debug, Clone)]
pub enum Layer {
    /// A TOML document from a file or a blob, with its origin.
    Toml {
        /// The document.
        text: String,
        /// Where it came from (`User` or `Repo`).
        origin: Source,
    },
    /// One value from the environment or a flag, at a dotted key.
    Value {
        /// Dotted key, e.g. `budget.max_usd`.
        key: String,
        /// The value, parsed as a TOML value where it parses, else taken as a string.
        value: String,
        /// Where it came from (`Env` or `Flag`).
        origin: Source,
    },
}

/// The resolved configuration: settings plus where each value came from.
#[derive(Debug, Clone)]
pub struct Config {
    /// The settings every module reads.
    pub settings: Settings,
    origins: BTreeMap<String, Source>,
}

impl Default for Config {
    fn default() -> Self {
        let mut origins = BTreeMap::new();
        if let Ok(toml::Value::Table(t)) = toml::Value::try_from(Settings::default()) {
            record_origins(&t, "", &Source::Default, &mut origins);
        }
        Self {
            settings: Settings::default(),
            origins,
        }
    }
}

impl Config {
    /// Resolve the layers, in order, over the built-in defaults.
    pub fn resolve(layers: impl IntoIterator<Item = Layer>) -> Result<Self> {
        let mut merged = toml::Value::try_from(Settings::default())
            .ok()
            .and_then(|v| v.as_table().cloned())
            .unwrap_or_default();
        let mut origins = BTreeMap::new();
        record_origins(&merged, "", &Source::Default, &mut origins);
        for layer in layers {
            let (mut table, origin) = layer_table(layer)?;
            let mut appended = Vec::new();
            if let Source::Repo { .. } = origin {
                check_repo_forbidden(&table, "", &origin)?;
                // Validate before the tightening checks so a typo reads as an unknown key.
                validate(&table, &origin)?;
                appended = tighten_repo_layer(&mut table, "", &merged, &origin)?;
            } else {
                // Validate the layer on its own so an unknown key names this layer's origin.
                validate(&table, &origin)?;
            }
            let kept: Vec<(String, Option<Source>)> = appended
                .iter()
                .map(|a| (a.key.clone(), origins.get(&a.key).cloned()))
                .collect();
            record_origins(&table, "", &origin, &mut origins);
            // An appended list keeps its own origin; each added entry names the repository.
            for (a, (key, old)) in appended.iter().zip(kept) {
                if let Some(old) = old {
                    origins.insert(key.clone(), old);
                }
                for i in a.from..a.to {
                    origins.insert(format!("{key}.{i}"), origin.clone());
                }
            }
            merge(&mut merged, table);
        }
        let settings = toml::Value::Table(merged)
            .try_into::<Settings>()
            .map_err(|e| Error::Invalid {
                origin: Source::Default,
                message: e.to_string(),
            })?;
        Ok(Self { settings, origins })
    }

    /// Where the value at a dotted key came from (`None` for keys that do not exist).
    /// Keys inside maps and arrays answer with their nearest recorded ancestor.
    pub fn origin(&self, key: &str) -> Option<&Source> {
        let mut k = key;
        loop {
            if let Some(s) = self.origins.get(k) {
                return Some(s);
            }
            k = k.rsplit_once('.')?.0;
        }
    }

    /// Every recorded key with its origin, in key order.
    pub fn origins(&self) -> impl Iterator<Item = (&str, &Source)> {
        self.origins.iter().map(|(k, s)| (k.as_str(), s))
    }
}

/// The default user config file: `$XDG_CONFIG_HOME/git-agent/config.toml` or
/// `~/.config/git-agent/config.toml`.
pub fn user_config_path() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(x).join("git-agent/config.toml"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/git-agent/config.toml"))
}

/// The user's state directory for git-agent: `$XDG_STATE_HOME/git-agent` or
/// `~/.local/state/git-agent`. Run worktrees, the warm pool and the bot's mirrors live there,
/// outside every repository.
pub fn user_state_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(x).join("git-agent"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state/git-agent"))
}

/// Read the user layer from `path`; a missing file is no layer.
pub fn user_layer(path: &Path) -> Result<Option<Layer>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(Layer::Toml {
            text,
            origin: Source::User {
                path: path.to_path_buf(),
            },
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The environment layers: every `GIT_AGENT_<SECTION>_<KEY>` variable that names a known
/// setting (e.g. `GIT_AGENT_BUDGET_MAX_USD`, `GIT_AGENT_MODELS_CODER`). Other `GIT_AGENT_*`
/// variables (server settings, secrets) are not configuration and are left alone.
pub fn env_layers(vars: impl IntoIterator<Item = (String, String)>) -> Vec<Layer> {
    let known = known_scalar_keys();
    let mut out: Vec<Layer> = vars
        .into_iter()
        .filter_map(|(var, value)| {
            let rest = var.strip_prefix("GIT_AGENT_")?;
            let key = known
                .iter()
                .find(|k| k.replace('.', "_").eq_ignore_ascii_case(rest))?;
            Some(Layer::Value {
                key: key.clone(),
                value,
                origin: Source::Env { var },
            })
        })
        .collect();
    // Deterministic order whatever the environment's order.
    out.sort_by(|a, b| layer_key(a).cmp(layer_key(b)));
    out
}

fn layer_key(l: &Layer) -> &str {
    match l {
        Layer::Value { key, .. } => key,
        Layer::Toml { .. } => "",
    }
}

/// Dotted keys of every leaf setting with a default (maps such as `prices` excluded).
fn known_scalar_keys() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(toml::Value::Table(t)) = toml::Value::try_from(Settings::default()) {
        collect_leaves(&t, "", &mut out);
    }
    // Optional settings have no default value to enumerate; name them here.
    for k in [
        "models.planner",
        "models.coder",
        "models.reviewer",
        "models.summarizer",
        "verify.test",
        "providers.openai.base_url",
        "providers.openai.api_key_env",
        "providers.anthropic.base_url",
        "providers.anthropic.api_key_env",
        "providers.ollama.base_url",
        "providers.ollama.api_key_env",
    ] {
        if !out.iter().any(|o| o == k) {
            out.push(k.to_string());
        }
    }
    out
}

fn collect_leaves(t: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in t {
        let key = join(prefix, k);
        match v {
            toml::Value::Table(sub) => collect_leaves(sub, &key, out),
            _ => out.push(key),
        }
    }
}

fn join(prefix: &str, k: &str) -> String {
    if prefix.is_empty() {
        k.to_string()
    } else {
        format!("{prefix}.{k}")
    }
}

fn layer_table(layer: Layer) -> Result<(toml::Table, Source)> {
    match layer {
        Layer::Toml { text, origin } => {
            let table = text.parse::<toml::Table>().map_err(|e| Error::Invalid {
                origin: origin.clone(),
                message: e.to_string().trim_end().to_string(),
            })?;
            Ok((table, origin))
        }
        Layer::Value { key, value, origin } => {
            let mut value = parse_scalar(&value);
            for part in key.rsplit('.') {
                let mut t = toml::Table::new();
                t.insert(part.to_string(), value);
                value = toml::Value::Table(t);
            }
            let table = match value {
                toml::Value::Table(t) => t,
                _ => toml::Table::new(),
            };
            Ok((table, origin))
        }
    }
}

/// A flag or variable value: a TOML value where it parses as one (`5`, `true`, `["a"]`),
/// else the raw text as a string (`cargo test`, `openai:gpt-5`).
fn parse_scalar(value: &str) -> toml::Value {
    let doc = format!("v = {value}");
    match doc.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(value.into())),
        Err(_) => toml::Value::String(value.into()),
    }
}

fn validate(table: &toml::Table, origin: &Source) -> Result<()> {
    toml::Value::Table(table.clone())
        .try_into::<Settings>()
        .map(|_| ())
        .map_err(|e| Error::Invalid {
            origin: origin.clone(),
            message: e.to_string().trim_end().to_string(),
        })
}

/// A list the repository layer appended to: entries `from..to` of `key` are its own.
struct Appended {
    key: String,
    from: usize,
    to: usize,
}

fn repo_rule(key: &str) -> Option<RepoRule> {
    REPO_RULES
        .iter()
        .find(|(pattern, _)| glob_key(pattern, key))
        .map(|(_, rule)| *rule)
}

/// Refuse user-only keys before anything else looks at the file, so the refusal names the
/// key whatever its value's type.
fn check_repo_forbidden(table: &toml::Table, prefix: &str, origin: &Source) -> Result<()> {
    for (k, v) in table {
        let key = join(prefix, k);
        // A whole-section rule (`sandbox`) only fires when the section is not a table we can
        // look into for a more precise leaf rule.
        if let Some(RepoRule::Forbidden(why)) = repo_rule(&key)
            && !v.as_table().is_some_and(|t| has_rule_below(t, &key))
        {
            return Err(Error::Forbidden {
                origin: origin.clone(),
                key,
                why,
            });
        }
        if let toml::Value::Table(sub) = v {
            check_repo_forbidden(sub, &key, origin)?;
        }
    }
    Ok(())
}

fn has_rule_below(table: &toml::Table, prefix: &str) -> bool {
    table.iter().any(|(k, v)| {
        let key = join(prefix, k);
        repo_rule(&key).is_some() || v.as_table().is_some_and(|t| has_rule_below(t, &key))
    })
}

fn lookup<'t>(table: &'t toml::Table, key: &str) -> Option<&'t toml::Value> {
    let mut parts = key.split('.');
    let mut v = table.get(parts.next()?)?;
    for p in parts {
        v = v.as_table()?.get(p)?;
    }
    Some(v)
}

fn number(v: &toml::Value) -> Option<f64> {
    match v {
        toml::Value::Integer(i) => Some(*i as f64),
        toml::Value::Float(f) => Some(*f),
        _ => None,
    }
}

fn rank(v: &toml::Value, order: &[&str]) -> Option<usize> {
    order.iter().position(|o| v.as_str() == Some(o))
}

/// Check the repository layer against the merged layers below it, key by key, and turn its
/// appended lists into the combined list. Returns the lists it appended to.
fn tighten_repo_layer(
    table: &mut toml::Table,
    prefix: &str,
    below: &toml::Table,
    origin: &Source,
) -> Result<Vec<Appended>> {
    let mut appended = Vec::new();
    for (k, v) in table.iter_mut() {
        let key = join(prefix, k);
        let rule = match repo_rule(&key) {
            Some(rule) => rule,
            None if v.is_table() => {
                if let toml::Value::Table(sub) = v {
                    appended.extend(tighten_repo_layer(sub, &key, below, origin)?);
                }
                continue;
            }
            None => {
                return Err(Error::Forbidden {
                    origin: origin.clone(),
                    key,
                    why: "it is not among the settings a repository may tighten",
                });
            }
        };
        let old = lookup(below, &key);
        let loosens = |message: String| Error::Loosens {
            origin: origin.clone(),
            key: key.clone(),
            message,
        };
        match rule {
            RepoRule::Free => {}
            RepoRule::Forbidden(why) => {
                return Err(Error::Forbidden {
                    origin: origin.clone(),
                    key,
                    why,
                });
            }
            RepoRule::Lower => {
                if let (Some(new), Some(old)) = (number(v), old.and_then(number))
                    && new > old
                {
                    return Err(loosens(format!(
                        "it asks for {new}, above the {old} set below it; it may only lower it"
                    )));
                }
            }
            RepoRule::OnlyOff => {
                if v.as_bool() == Some(true) && old.and_then(toml::Value::as_bool) == Some(false) {
                    return Err(loosens(
                        "it turns on what the layers below turned off; it may only turn it off"
                            .into(),
                    ));
                }
            }
            RepoRule::Network | RepoRule::Stricter => {
                let (order, towards): (&[&str], &str) = match (rule, key.as_str()) {
                    (RepoRule::Network, _) => (&["off", "allowlist", "on"], "off"),
                    (_, "verify.reproduce") => (&["require", "prefer", "off"], "require"),
                    (_, "verify.preexisting") => (&["block", "allow"], "block"),
                    _ => (&["forbid", "ask", "allow"], "forbid"),
                };
                if let (Some(new), Some(old_rank)) =
                    (rank(v, order), old.and_then(|o| rank(o, order)))
                    && new > old_rank
                {
                    return Err(loosens(format!(
                        "it asks for {v}, looser than the {} set below it; it may only move towards \"{towards}\"",
                        order[old_rank]
                    )));
                }
            }
            RepoRule::Subset | RepoRule::Narrow => {
                let old_list = old
                    .and_then(toml::Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                if matches!(rule, RepoRule::Narrow) && old_list.is_empty() {
                    continue;
                }
                if let Some(extra) = v
                    .as_array()
                    .and_then(|new| new.iter().find(|e| !old_list.contains(e)))
                {
                    return Err(loosens(format!(
                        "it adds {extra}, which the list set below it does not hold; it may only remove entries"
                    )));
                }
            }
            RepoRule::Registries => {
                let allowed: Vec<toml::Value> = match old.and_then(toml::Value::as_array) {
                    Some(list) => list.clone(),
                    None => REGISTRIES
                        .iter()
                        .filter(|(r, _)| !FETCH_THROUGH.contains(r))
                        .map(|(r, _)| toml::Value::String(r.to_string()))
                        .collect(),
                };
                if let Some(extra) = v
                    .as_array()
                    .and_then(|new| new.iter().find(|e| !allowed.contains(e)))
                {
                    return Err(loosens(format!(
                        "it adds {extra}; set-up may reach only {} unless your own configuration names more",
                        allowed
                            .iter()
                            .map(|a| a.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
            RepoRule::Append => {
                let mut list = old
                    .and_then(toml::Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let from = list.len();
                if let toml::Value::Array(new) = v {
                    for e in new.drain(..) {
                        if !list.contains(&e) {
                            list.push(e);
                        }
                    }
                }
                let to = list.len();
                *v = toml::Value::Array(list);
                appended.push(Appended { key, from, to });
            }
        }
    }
    Ok(appended)
}

fn glob_key(pattern: &str, key: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let k: Vec<&str> = key.split('.').collect();
    p.len() == k.len() && p.iter().zip(&k).all(|(p, k)| *p == "*" || p == k)
}

fn record_origins(
    table: &toml::Table,
    prefix: &str,
    origin: &Source,
    out: &mut BTreeMap<String, Source>,
) {
    for (k, v) in table {
        let key = join(prefix, k);
        match v {
            toml::Value::Table(sub) if !sub.is_empty() => record_origins(sub, &key, origin, out),
            _ => {
                // A replaced value drops the origins recorded below it.
                out.retain(|old, _| !old.starts_with(&format!("{key}.")));
                out.insert(key, origin.clone());
            }
        }
    }
}

fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(text: &str) -> Layer {
        Layer::Toml {
            text: text.into(),
            origin: Source::Repo {
                rev: "main".into(),
                path: ".github/agent.toml".into(),
            },
        }
    }

    fn user(text: &str) -> Layer {
        Layer::Toml {
            text: text.into(),
            origin: Source::User {
                path: "/home/u/.config/git-agent/config.toml".into(),
            },
        }
    }

    #[test]
    fn defaults_match_design() {
        let c = Config::resolve([]).unwrap();
        assert_eq!(c.settings.budget.max_usd, 5.0);
        assert_eq!(c.settings.budget.max_turns, 60);
        assert_eq!(c.settings.trigger.label, "agent");
        assert_eq!(c.settings.policy.network, NetworkMode::Off);
        assert!(
            c.settings
                .policy
                .deny_paths
                .contains(&".github/workflows/**".to_string())
        );
        assert_eq!(c.origin("budget.max_usd"), Some(&Source::Default));
    }

    #[test]
    fn later_layers_win_and_origins_are_recorded() {
        let env = env_layers([
            ("GIT_AGENT_BUDGET_MAX_USD".to_string(), "2.5".to_string()),
            (
                "GIT_AGENT_WEBHOOK_SECRET".to_string(),
                "not config".to_string(),
            ),
        ]);
        assert_eq!(env.len(), 1);
        let mut layers = vec![
            user("[budget]\nmax_usd = 9.0\nmax_turns = 10\n[models]\ncoder = \"openai:gpt-5\"\n"),
            repo("[verify]\ntest = \"make test\"\n[budget]\nmax_turns = 5\n"),
        ];
        layers.extend(env);
        layers.push(Layer::Value {
            key: "verify.test".into(),
            value: "cargo test --lib".into(),
            origin: Source::Flag {
                flag: "--test-cmd".into(),
            },
        });
        let c = Config::resolve(layers).unwrap();
        assert_eq!(c.settings.budget.max_usd, 2.5);
        assert_eq!(c.settings.budget.max_turns, 5);
        assert_eq!(c.settings.models.coder.as_deref(), Some("openai:gpt-5"));
        assert_eq!(c.settings.verify.test.as_deref(), Some("cargo test --lib"));
        assert!(
            matches!(c.origin("budget.max_usd"), Some(Source::Env { var }) if var == "GIT_AGENT_BUDGET_MAX_USD")
        );
        assert!(matches!(
            c.origin("budget.max_turns"),
            Some(Source::Repo { .. })
        ));
        assert!(matches!(
            c.origin("models.coder"),
            Some(Source::User { .. })
        ));
        assert!(
            matches!(c.origin("verify.test"), Some(Source::Flag { flag }) if flag == "--test-cmd")
        );
        assert_eq!(c.origin("budget.max_minutes"), Some(&Source::Default));
    }

    #[test]
    fn unknown_key_names_file_and_key() {
        let err = Config::resolve([repo("[budget]\nmax_dollars = 3\n")]).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("main:.github/agent.toml"), "{msg}");
        assert!(msg.contains("max_dollars"), "{msg}");
        let err = Config::resolve([user("[nonsense]\nx = 1\n")]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("config.toml") && msg.contains("nonsense"),
            "{msg}"
        );
    }

    #[test]
    fn wrong_type_is_an_error_naming_the_key() {
        let err = Config::resolve([repo("[budget]\nmax_turns = \"many\"\n")]).unwrap_err();
        assert!(err.to_string().contains("max_turns"), "{err}");
    }

    #[test]
    fn repository_may_not_set_provider_urls_keys_or_sandbox() {
        for (text, key) in [
            (
                "[providers.openai]\nbase_url = \"http://evil\"\n",
                "providers.openai.base_url",
            ),
            (
                "[providers.anthropic]\napi_key_env = \"GITHUB_TOKEN\"\n",
                "providers.anthropic.api_key_env",
            ),
            (
                "[providers.ollama]\nbase_url = \"http://evil\"\n",
                "providers.ollama.base_url",
            ),
            ("[sandbox]\nmode = \"off\"\n", "sandbox.mode"),
            ("sandbox = \"off\"\n", "sandbox"),
            ("providers = 1\n", "providers"),
        ] {
            let err = Config::resolve([repo(text)]).unwrap_err();
            match &err {
                Error::Forbidden { key: k, .. } => assert_eq!(k, key),
                other => panic!("{text}: expected Forbidden, got {other}"),
            }
            assert!(err.to_string().contains(".github/agent.toml"), "{err}");
        }
        // The same keys are fine from the user's own file and the environment.
        let c = Config::resolve([user(
            "[providers.openai]\nbase_url = \"http://127.0.0.1:1/v1\"\n[sandbox]\nmode = \"off\"\n",
        )])
        .unwrap();
        assert_eq!(c.settings.sandbox.mode, SandboxMode::Off);
        let env = env_layers([("GIT_AGENT_SANDBOX_MODE".into(), "off".into())]);
        let c = Config::resolve(env).unwrap();
        assert_eq!(c.settings.sandbox.mode, SandboxMode::Off);
    }

    #[test]
    fn repository_may_set_policy_models_and_tests() {
        let c = Config::resolve([repo(
            "[models]\ncoder = \"anthropic:claude-sonnet-4-5\"\n[policy]\nnetwork = \"off\"\n[[policy.commands]]\nprefix = [\"cargo\", \"test\"]\ndecision = \"allow\"\n[verify]\ntest = \"make check\"\n",
        )])
        .unwrap();
        assert_eq!(c.settings.policy.network, NetworkMode::Off);
        assert_eq!(c.settings.policy.commands.len(), 1);
        assert_eq!(c.settings.verify.test.as_deref(), Some("make check"));
        assert!(matches!(
            c.origin("policy.commands.0"),
            Some(Source::Repo { .. })
        ));
    }

    /// The user's file as the operator wrote it, under every loosening test below.
    const OPERATOR: &str = "[budget]\nmax_usd = 2.0\nmax_turns = 30\n[verify]\ntimeout_minutes = 10\n[policy]\nnetwork = \"allowlist\"\nnetwork_allow = [\"index.crates.io\"]\ndefault_command = \"ask\"\nallow_paths = [\"src/**\"]\n[[policy.commands]]\nprefix = [\"make\"]\ndecision = \"ask\"\n[trigger]\nallowed_bots = [\"renovate[bot]\"]\nci_failure = false\n";

    /// Regression (issue 20): each key a hostile repository used to loosen the operator's
    /// settings is refused with an error naming the file and the key.
    #[test]
    fn repository_may_only_tighten_each_key() {
        for (text, key) in [
            ("[policy]\nnetwork = \"on\"\n", "policy.network"),
            (
                "[prices.\"openai:gpt-5\"]\ninput = 0.0\noutput = 0.0\n",
                "prices",
            ),
            ("[budget]\nmax_usd = 50.0\n", "budget.max_usd"),
            ("[budget]\nmax_turns = 600\n", "budget.max_turns"),
            ("[budget]\nmax_minutes = 600\n", "budget.max_minutes"),
            (
                "[budget]\nmax_fix_attempts = 30\n",
                "budget.max_fix_attempts",
            ),
            ("[budget]\nmax_tokens = 900000000\n", "budget.max_tokens"),
            (
                "[verify]\ntimeout_minutes = 600\n",
                "verify.timeout_minutes",
            ),
            ("[git]\nbranch_prefix = \"\"\n", "git.branch_prefix"),
            (
                "[git]\nauthor_name = \"Trusted Maintainer\"\n",
                "git.author_name",
            ),
            (
                "[git]\nauthor_email = \"m@example.com\"\n",
                "git.author_email",
            ),
            ("[git]\nremote = \"evil\"\n", "git.remote"),
            (
                "[trigger]\nallowed_bots = [\"evil[bot]\"]\n",
                "trigger.allowed_bots",
            ),
            (
                "[trigger]\npermissions = [\"read\"]\n",
                "trigger.permissions",
            ),
            ("[trigger]\nci_failure = true\n", "trigger.ci_failure"),
            (
                "[trigger]\nmax_ci_attempts = 99\n",
                "trigger.max_ci_attempts",
            ),
            (
                "[policy]\nnetwork_allow = [\"evil.example\"]\n",
                "policy.network_allow",
            ),
            (
                "[policy]\ndefault_command = \"allow\"\n",
                "policy.default_command",
            ),
            ("[policy]\nallow_paths = [\"**\"]\n", "policy.allow_paths"),
            (
                "[model_net]\nrequest_timeout_s = 99999.0\n",
                "model_net.request_timeout_s",
            ),
            ("[setup]\nnetwork = [\"evil.example\"]\n", "setup.network"),
            ("[setup]\ncache_mb = 999999\n", "setup.cache_mb"),
            ("[setup]\ntimeout_minutes = 999\n", "setup.timeout_minutes"),
        ] {
            let err = Config::resolve([user(OPERATOR), repo(text)]).unwrap_err();
            match &err {
                Error::Forbidden { key: k, .. } | Error::Loosens { key: k, .. } => {
                    assert_eq!(k, key, "{text}")
                }
                other => panic!("{text}: expected a refusal, got {other}"),
            }
            let msg = err.to_string();
            assert!(msg.contains("main:.github/agent.toml"), "{msg}");
            assert!(msg.contains(key), "{msg}");
        }
    }

    /// The same file may tighten each of those keys.
    #[test]
    fn repository_may_tighten_each_key() {
        let c = Config::resolve([
            user(OPERATOR),
            repo(
                "[budget]\nmax_usd = 1.0\nmax_turns = 10\n[verify]\ntimeout_minutes = 5\n[policy]\nnetwork = \"off\"\nnetwork_allow = []\ndefault_command = \"forbid\"\nallow_paths = [\"src/**\"]\n[trigger]\nallowed_bots = []\nci_failure = false\nmax_ci_attempts = 1\n",
            ),
        ])
        .unwrap();
        let s = &c.settings;
        assert_eq!(s.budget.max_usd, 1.0);
        assert_eq!(s.budget.max_turns, 10);
        assert_eq!(s.verify.timeout_minutes, 5);
        assert_eq!(s.policy.network, NetworkMode::Off);
        assert_eq!(s.policy.default_command, Decision::Forbid);
        assert!(s.trigger.allowed_bots.is_empty());
        // An empty allow-list may be narrowed to anything.
        let c = Config::resolve([repo("[policy]\nallow_paths = [\"docs/**\"]\n")]).unwrap();
        assert_eq!(c.settings.policy.allow_paths, vec!["docs/**".to_string()]);
    }

    /// A repository names its set-up commands and the public registries they need; a host
    /// only when the user's configuration lists it; and it may turn set-up off, not on.
    #[test]
    fn repository_set_up_names_registries_not_hosts() {
        let c = Config::resolve([repo(
            "[setup]\ncommands = [\"npm ci\"]\nnetwork = [\"npm\"]\noutputs = [\"node_modules\"]\n[setup.env]\nFOO = \"1\"\n",
        )])
        .unwrap();
        assert_eq!(c.settings.setup.network, Some(vec!["npm".to_string()]));
        assert_eq!(
            SetupConfig::hosts(&["npm".into(), "git.example".into()]),
            vec!["registry.npmjs.org".to_string(), "git.example".to_string()]
        );
        // The Go module proxy fetches any origin: only a person's own list opens it.
        let err = Config::resolve([repo("[setup]\nnetwork = [\"go\"]\n")]).unwrap_err();
        assert!(matches!(err, Error::Loosens { .. }), "{err}");
        let c = Config::resolve([
            user("[setup]\nnetwork = [\"go\"]\n"),
            repo("[setup]\nnetwork = [\"go\"]\n"),
        ]);
        assert_eq!(
            c.unwrap().settings.setup.network,
            Some(vec!["go".to_string()])
        );
        let mine = user("[setup]\nnetwork = [\"pypi\", \"git.example\"]\n");
        let c = Config::resolve([mine.clone(), repo("[setup]\nnetwork = [\"git.example\"]\n")]);
        assert_eq!(
            c.unwrap().settings.setup.network,
            Some(vec!["git.example".to_string()])
        );
        let err = Config::resolve([mine, repo("[setup]\nnetwork = [\"npm\"]\n")]).unwrap_err();
        assert!(matches!(err, Error::Loosens { .. }), "{err}");
        let off = user("[setup]\nenabled = false\n");
        let err = Config::resolve([off, repo("[setup]\nenabled = true\n")]).unwrap_err();
        assert!(matches!(err, Error::Loosens { .. }), "{err}");
    }

    /// Regression (issue 20): `deny_paths = []` in the repository's file removed the built-in
    /// denies; the repository's lists are added to the ones below, never replace them.
    #[test]
    fn repository_lists_add_to_deny_paths_and_command_rules() {
        let c = Config::resolve([user(OPERATOR), repo("[policy]\ndeny_paths = []\n")]).unwrap();
        assert!(
            c.settings
                .policy
                .deny_paths
                .contains(&".github/workflows/**".to_string())
        );
        let c = Config::resolve([
            user(OPERATOR),
            repo(
                "[policy]\ndeny_paths = [\"secrets/**\"]\n[[policy.commands]]\nprefix = [\"make\", \"test\"]\ndecision = \"forbid\"\n",
            ),
        ])
        .unwrap();
        let p = &c.settings.policy;
        assert_eq!(p.deny_paths.len(), 5);
        assert_eq!(p.deny_paths[4], "secrets/**");
        assert_eq!(c.origin("policy.deny_paths.0"), Some(&Source::Default));
        assert!(matches!(
            c.origin("policy.deny_paths.4"),
            Some(Source::Repo { .. })
        ));
        assert_eq!(p.commands.len(), 2);
        assert!(matches!(
            c.origin("policy.commands.0"),
            Some(Source::User { .. })
        ));
        assert!(matches!(
            c.origin("policy.commands.1"),
            Some(Source::Repo { .. })
        ));
    }

    /// Every setting has a decision about the repository layer: a new key cannot be widened
    /// by a repository just because nobody thought about it.
    #[test]
    fn every_key_has_a_repository_rule() {
        let mut keys = known_scalar_keys();
        keys.extend(["prices".to_string(), "policy.commands".to_string()]);
        for key in keys {
            let mut k = key.as_str();
            let found = loop {
                if repo_rule(k).is_some() {
                    break true;
                }
                match k.rsplit_once('.') {
                    Some((parent, _)) => k = parent,
                    None => break false,
                }
            };
            assert!(found, "no repository rule for `{key}`");
        }
    }

    #[test]
    fn flag_values_parse_as_toml_or_string() {
        assert_eq!(parse_scalar("3"), toml::Value::Integer(3));
        assert_eq!(
            parse_scalar("cargo test"),
            toml::Value::String("cargo test".into())
        );
        assert_eq!(
            parse_scalar("openai:gpt-5"),
            toml::Value::String("openai:gpt-5".into())
        );
        let c = Config::resolve([Layer::Value {
            key: "budget.max_usd".into(),
            value: "1".into(),
            origin: Source::Flag {
                flag: "--max-usd".into(),
            },
        }]);
        // An integer where a float is expected is accepted by TOML's data model.
        assert_eq!(c.unwrap().settings.budget.max_usd, 1.0);
    }
}
