//! Loading what every command needs: the repository and the layered configuration.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::config::{self, Config, Layer, Source};
use crate::workspace::Repo;

/// Path of the repository's config file inside its tree.
pub const REPO_CONFIG_PATH: &str = ".github/agent.toml";

/// The base ref used when none is given: the remote's default branch if known, else `HEAD`.
pub fn default_base(repo: &Repo) -> String {
    for candidate in ["refs/remotes/origin/HEAD", "HEAD"] {
        if repo.resolve(candidate).is_ok() {
            return candidate.trim_start_matches("refs/remotes/").to_string();
        }
    }
    "HEAD".to_string()
}

/// Open the repository at or above `dir` (the current directory when `None`).
pub fn open_repo(dir: Option<&Path>) -> anyhow::Result<Repo> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    Ok(Repo::discover(&dir)?)
}

/// Resolve the configuration: defaults < user file < the repository file read from `base`
/// (never the work tree) < `GIT_AGENT_*` < `flags`.
pub fn load_config(
    repo: Option<(&Repo, &str)>,
    user_file: Option<PathBuf>,
    flags: Vec<Layer>,
) -> anyhow::Result<Config> {
    let mut layers = Vec::new();
    if let Some(path) = user_file.or_else(config::user_config_path)
        && let Some(layer) = config::user_layer(&path)?
    {
        layers.push(layer);
    }
    if let Some((repo, base)) = repo
        && let Some(bytes) = repo.read_file_at(base, REPO_CONFIG_PATH)?
    {
        let text = String::from_utf8(bytes)
            .with_context(|| format!("{base}:{REPO_CONFIG_PATH} is not UTF-8"))?;
        layers.push(Layer::Toml {
            text,
            origin: Source::Repo {
                rev: base.to_string(),
                path: REPO_CONFIG_PATH.to_string(),
            },
        });
    }
    layers.extend(config::env_layers(std::env::vars()));
    layers.extend(flags);
    Ok(Config::resolve(layers)?)
}
