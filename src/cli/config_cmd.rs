//! `git agent config`: the resolved configuration and where each value came from.

use std::io::Write as _;
use std::path::PathBuf;

use super::context;

/// Arguments of `git agent config`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Repository to read `.github/agent.toml` from (default: the current directory's).
    #[arg(long)]
    pub repo: Option<PathBuf>,
    /// Ref whose `.github/agent.toml` is the repository layer (default: HEAD).
    #[arg(long)]
    pub base: Option<String>,
    /// Print JSON: `{"settings": …, "origins": {key: source}}`.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let repo = context::open_repo(args.repo.as_deref()).ok();
    let base = match (&repo, args.base) {
        (_, Some(b)) => Some(b),
        (Some(_), None) => Some(context::DEFAULT_BASE.to_string()),
        (None, None) => None,
    };
    let cfg = context::load_config(repo.as_ref().zip(base.as_deref()), None, Vec::new())?;
    let mut out = super::output::stdout(&super::output::process_redactor()?);
    if args.json {
        let origins: serde_json::Map<String, serde_json::Value> = cfg
            .origins()
            .map(|(k, s)| (k.to_string(), serde_json::to_value(s).unwrap_or_default()))
            .collect();
        let v = serde_json::json!({"settings": cfg.settings, "origins": origins});
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        for (key, source) in cfg.origins() {
            writeln!(out, "{key:<40} {source}")?;
        }
        writeln!(out)?;
        write!(out, "{}", toml::to_string_pretty(&cfg.settings)?)?;
    }
    Ok(super::exit::SUCCEEDED)
}
