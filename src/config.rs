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
}

impl Default for VerifyConfig {
    fn default() -> Self {
        Self {
            test: None,
            timeout_minutes: 15,
        }
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
    /// Permission policy.
    pub policy: PolicyConfig,
    /// Sandbox (user-only).
    pub sandbox: SandboxConfig,
    /// Commit identity and branch naming.
    pub git: GitConfig,
}

/// Keys (dotted, with `*` for any one segment) that the repository layer may not set.
const REPO_FORBIDDEN: &[(&str, &str)] = &[
    (
        "providers.*.base_url",
        "a provider URL decides where prompts and keys are sent",
    ),
    (
        "providers.*.api_key_env",
        "an API-key variable name decides which secret is sent",
    ),
    (
        "sandbox.mode",
        "the sandbox protects the machine running the agent",
    ),
    (
        "sandbox",
        "the sandbox protects the machine running the agent",
    ),
    (
        "providers",
        "provider settings decide where prompts and keys are sent",
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
            let (table, origin) = layer_table(layer)?;
            if let Source::Repo { .. } = origin {
                check_repo_layer(&table, "", &origin)?;
            }
            // Validate the layer on its own so an unknown key names this layer's origin.
            validate(&table, &origin)?;
            record_origins(&table, "", &origin, &mut origins);
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

fn check_repo_layer(table: &toml::Table, prefix: &str, origin: &Source) -> Result<()> {
    for (k, v) in table {
        let key = join(prefix, k);
        for (pattern, why) in REPO_FORBIDDEN {
            let is_leaf_rule = pattern.contains('.');
            let matches = glob_key(pattern, &key);
            // A whole-section rule (`sandbox`) only fires when the section is not a table
            // we can look into; leaf rules fire on the leaf.
            if matches && (is_leaf_rule || !v.is_table()) {
                return Err(Error::Forbidden {
                    origin: origin.clone(),
                    key,
                    why,
                });
            }
        }
        if let toml::Value::Table(sub) = v {
            check_repo_layer(sub, &key, origin)?;
        }
    }
    Ok(())
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
            repo("[verify]\ntest = \"make test\"\n[budget]\nmax_turns = 20\n"),
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
        assert_eq!(c.settings.budget.max_turns, 20);
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
            "[models]\ncoder = \"anthropic:claude-sonnet-4-5\"\n[policy]\nnetwork = \"allowlist\"\nnetwork_allow = [\"index.crates.io\"]\n[[policy.commands]]\nprefix = [\"cargo\", \"test\"]\ndecision = \"allow\"\n",
        )])
        .unwrap();
        assert_eq!(c.settings.policy.network, NetworkMode::Allowlist);
        assert_eq!(c.settings.policy.commands.len(), 1);
        assert!(matches!(
            c.origin("policy.commands"),
            Some(Source::Repo { .. })
        ));
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
