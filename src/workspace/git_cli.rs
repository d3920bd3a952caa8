//! The `git` command line, for what gix cannot do (push, fetch of run refs), always hardened.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};

use super::error::Error;

/// Configuration forced on every host-side `git` call: no hooks, no fsmonitor, no external
/// diff or textconv programs, no credential helpers or ssh command taken from config, and no
/// `ext::` transport. Each `-c` beats anything in the repository's `.git/config`.
const HARDENING: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.sshCommand=ssh",
    "core.askPass=",
    "credential.helper=",
    "diff.external=",
    "protocol.ext.allow=never",
    "protocol.file.allow=always",
    "uploadpack.packObjectsHook=",
    "core.pager=cat",
];

/// Environment variables that would let the caller's environment steer git elsewhere.
const SCRUB_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_EXTERNAL_DIFF",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "GIT_TRACE",
    "GIT_TRACE_PACKET",
    "GIT_TRACE_CURL",
];

/// A hardened `git` invocation in `dir`.
pub(crate) fn git(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null());
    for var in SCRUB_ENV {
        cmd.env_remove(var);
    }
    for c in HARDENING {
        cmd.arg("-c").arg(c);
    }
    cmd
}

/// Run a hardened git command, returning its stdout. The arguments are shown in errors, so
/// callers must never pass credentials as arguments (they go through the environment).
pub(crate) fn run<I, S>(dir: &Path, args: I, env: &[(&str, &str)]) -> Result<Vec<u8>, Error>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_with_stdout(dir, args, env).map_err(|(e, _)| e)
}

/// Run a hardened git command, returning its stdout; a failure keeps what the command
/// printed on stdout (`push --porcelain` reports each refused ref there). The arguments are
/// shown in errors, so callers must never pass credentials as arguments (they go through the
/// environment).
pub(crate) fn run_with_stdout<I, S>(
    dir: &Path,
    args: I,
    env: &[(&str, &str)],
) -> std::result::Result<Vec<u8>, (Error, Vec<u8>)>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let mut cmd = git(dir);
    cmd.args(&args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let shown = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let out = cmd.output().map_err(|e| {
        let e = Error::GitCli {
            args: shown.clone(),
            status: "not started".into(),
            stderr: e.to_string(),
        };
        (e, Vec::new())
    })?;
    if !out.status.success() {
        let e = Error::GitCli {
            args: shown,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        };
        return Err((e, out.stdout));
    }
    Ok(out.stdout)
}
