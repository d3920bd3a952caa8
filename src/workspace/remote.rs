//! Pushing run branches and run-record refs, and fetching run records, through hardened `git`.

use base64::Engine as _;
use secrecy::{ExposeSecret as _, SecretString};

use super::error::{Error, Result};
use super::git_cli;
use super::repo::Repo;

/// Credentials for a push, handed to git through its environment only: never in argv, the
/// remote URL, or any file under `.git`.
/// `Debug` never shows the token.
#[derive(Clone, Debug)]
pub enum PushCredentials {
    /// An HTTP token (GitHub: installation or personal token), sent as a Basic
    /// `Authorization` header via `http.extraHeader` set from `GIT_CONFIG_*` variables.
    Token(SecretString),
}

impl PushCredentials {
    fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            PushCredentials::Token(token) => {
                let basic = base64::engine::general_purpose::STANDARD
                    .encode(format!("x-access-token:{}", token.expose_secret()));
                vec![
                    ("GIT_CONFIG_COUNT", "1".to_string()),
                    ("GIT_CONFIG_KEY_0", "http.extraHeader".to_string()),
                    (
                        "GIT_CONFIG_VALUE_0",
                        format!("Authorization: Basic {basic}"),
                    ),
                ]
            }
        }
    }
}

/// What may be pushed: run branches under the prefix and run-record refs.
fn check_push_ref(branch_prefix: &str, local_ref: &str) -> Result<()> {
    let ok = match local_ref.strip_prefix("refs/heads/") {
        Some(branch) => branch.starts_with(branch_prefix) && branch.len() > branch_prefix.len(),
        None => local_ref.starts_with("refs/agent/runs/"),
    };
    if ok && !local_ref.contains("..") {
        Ok(())
    } else {
        Err(Error::PushRefused {
            branch: local_ref.to_string(),
            prefix: branch_prefix.to_string(),
        })
    }
}

impl Repo {
    /// Push full refs (`refs/heads/agent/…`, `refs/agent/runs/…`) to the same names on
    /// `remote` (a remote name or URL). Anything outside `refs/heads/<branch_prefix>` and
    /// `refs/agent/runs/` is refused before git runs, so the default branch is never pushed.
    /// Run branches are pushed with `--force-with-lease`-free fast-forward semantics, except
    /// run records, which only ever grow.
    pub fn push(
        &self,
        remote: &str,
        refs: &[String],
        branch_prefix: &str,
        creds: Option<&PushCredentials>,
    ) -> Result<()> {
        for r in refs {
            check_push_ref(branch_prefix, r)?;
        }
        if remote.starts_with('-') {
            return Err(Error::InvalidName {
                name: remote.to_string(),
                why: "a remote may not start with `-`".into(),
            });
        }
        let mut args = vec![
            "push".to_string(),
            "--porcelain".to_string(),
            // All refs or none: a run whose branch is refused must not leave its record (or
            // anything else) on the remote as if it had been published.
            "--atomic".to_string(),
            // A remote on this host runs receive-pack here: its hooks must not run either.
            "--receive-pack=git -c core.hooksPath=/dev/null receive-pack".to_string(),
            remote.to_string(),
        ];
        args.extend(refs.iter().map(|r| format!("{r}:{r}")));
        let env: Vec<(&str, String)> = creds.map(|c| c.env()).unwrap_or_default();
        let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        match git_cli::run_with_stdout(self.git_dir(), &args, &env_ref) {
            Ok(_) => Ok(()),
            Err((e, stdout)) => {
                // `--porcelain` prints one line per ref: `!\t<src>:<dst>\t[rejected] (why)`.
                let text = String::from_utf8_lossy(&stdout);
                let rejected: Vec<(String, String)> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("!\t"))
                    .filter_map(|l| {
                        let (spec, why) = l.split_once('\t').unwrap_or((l, ""));
                        let dst = spec.rsplit_once(':').map_or(spec, |(_, d)| d);
                        // Under --atomic the refs git did not even try say so; the cause is
                        // the others.
                        (!why.contains("atomic push failed"))
                            .then(|| (dst.to_string(), why.trim().to_string()))
                    })
                    .collect();
                if rejected.is_empty() {
                    return Err(e);
                }
                Err(Error::PushRejected {
                    refs: rejected.iter().map(|(r, _)| r.clone()).collect(),
                    detail: rejected
                        .iter()
                        .map(|(r, w)| format!("{r} {w}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                })
            }
        }
    }

    /// Fetch `refs/heads/<branch>` from `remote` into the same ref here (forced), through the
    /// same hardened git as [`Repo::push`]: the webhook bot's mirror of a repository.
    pub fn fetch_branch(
        &self,
        remote: &str,
        branch: &str,
        creds: Option<&PushCredentials>,
    ) -> Result<()> {
        self.fetch_branch_as(remote, branch, &format!("refs/heads/{branch}"), creds)
    }

    /// Fetch `refs/heads/<branch>` from `remote` into the local ref `dest` (forced), e.g.
    /// `refs/remotes/origin/<branch>` to keep a remote branch beside a local one.
    pub fn fetch_branch_as(
        &self,
        remote: &str,
        branch: &str,
        dest: &str,
        creds: Option<&PushCredentials>,
    ) -> Result<()> {
        let bad = |s: &str| s.starts_with('-') || s.contains("..") || s.contains(':');
        if remote.starts_with('-') || bad(branch) || bad(dest) || !dest.starts_with("refs/") {
            return Err(Error::InvalidName {
                name: format!("{remote} {branch} {dest}"),
                why: "not a remote, branch and destination ref".into(),
            });
        }
        let r = format!("refs/heads/{branch}");
        let args = [
            "fetch".to_string(),
            "--no-tags".to_string(),
            remote.to_string(),
            format!("+{r}:{dest}"),
        ];
        let env: Vec<(&str, String)> = creds.map(|c| c.env()).unwrap_or_default();
        let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        git_cli::run(self.git_dir(), &args, &env_ref)?;
        Ok(())
    }

    /// Fetch `refs/agent/runs/<run_id>` from `remote` into the same local ref.
    pub fn fetch_run_record(
        &self,
        remote: &str,
        run_id: &str,
        creds: Option<&PushCredentials>,
    ) -> Result<()> {
        if remote.starts_with('-') || run_id.contains('/') || run_id.starts_with('-') {
            return Err(Error::InvalidName {
                name: format!("{remote} {run_id}"),
                why: "not a remote and run id".into(),
            });
        }
        let r = format!("refs/agent/runs/{run_id}");
        let args = ["fetch".to_string(), remote.to_string(), format!("+{r}:{r}")];
        let env: Vec<(&str, String)> = creds.map(|c| c.env()).unwrap_or_default();
        let env_ref: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        git_cli::run(self.git_dir(), &args, &env_ref)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_agent_branches_and_run_refs_may_be_pushed() {
        assert!(check_push_ref("agent/", "refs/heads/agent/42-fix").is_ok());
        assert!(check_push_ref("agent/", "refs/agent/runs/01J").is_ok());
        for bad in [
            "refs/heads/main",
            "refs/heads/agent/",
            "refs/heads/agentx/y",
            "refs/tags/v1",
            "main",
            "refs/heads/agent/../main",
        ] {
            assert!(check_push_ref("agent/", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_never_print() {
        let c = PushCredentials::Token("ghs_secret".into());
        assert!(!format!("{c:?}").contains("ghs_secret"));
    }
}
