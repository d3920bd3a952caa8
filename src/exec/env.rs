//! The environment a command gets: an allow-list, never a secret.

use std::path::Path;

use crate::audit::redact::is_secret_name;

/// Variables passed through from the parent by default when set. Secret-looking names are
/// dropped even when listed.
pub const DEFAULT_PASS_ENV: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "TZ",
    "USER",
    "LOGNAME",
    "CI",
    "NO_COLOR",
    "CARGO_HOME",
    // A person who set cargo offline meant every cargo, the sandboxed ones too (issue 19).
    "CARGO_NET_OFFLINE",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOROOT",
    "GOPATH",
    "GOFLAGS",
    "JAVA_HOME",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "NODE_PATH",
];

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment of a sandboxed command: `pass` names taken from `parent` (secret-looking
/// names never), `HOME` and `TMPDIR` pointed at the private directory, a default `PATH` and
/// `LANG` when the parent has none, and `extra` on top.
pub fn sandbox_env<I>(
    parent: I,
    pass: &[String],
    home: &Path,
    tmp: &Path,
    extra: &[(String, String)],
) -> Vec<(String, String)>
where
    I: IntoIterator<Item = (String, String)>,
{
    let parent: Vec<(String, String)> = parent.into_iter().collect();
    let real_home = parent
        .iter()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| std::path::PathBuf::from(v));
    let mut env: Vec<(String, String)> = parent
        .into_iter()
        .filter(|(k, _)| pass.iter().any(|p| p == k) && !is_secret_name(k))
        .collect();
    // HOME moves to the private dir, so toolchains found through it (rustup's default
    // ~/.cargo and ~/.rustup) are named explicitly, read-only like everything outside.
    if let Some(h) = real_home {
        for (var, dir) in [("CARGO_HOME", ".cargo"), ("RUSTUP_HOME", ".rustup")] {
            let p = h.join(dir);
            if pass.iter().any(|x| x == var) && !env.iter().any(|(k, _)| k == var) && p.is_dir() {
                env.push((var.to_string(), p.display().to_string()));
            }
        }
    }
    let mut set = |k: &str, v: String, overwrite: bool| {
        if let Some(slot) = env.iter_mut().find(|(n, _)| n == k) {
            if overwrite {
                slot.1 = v;
            }
        } else {
            env.push((k.to_string(), v));
        }
    };
    set("PATH", DEFAULT_PATH.to_string(), false);
    set("LANG", "C.UTF-8".to_string(), false);
    set("HOME", home.display().to_string(), true);
    set("TMPDIR", tmp.display().to_string(), true);
    // Python trusts cached bytecode whose recorded source mtime (whole seconds) and size
    // match: an edit that keeps a file's size, tested again within the same second — what
    // an agent does all the time — would run the old code. No bytecode cache, no stale code
    // (pytest's assertion-rewrite cache honours it too).
    set("PYTHONDONTWRITEBYTECODE", "1".to_string(), false);
    for (k, v) in extra {
        set(k, v.clone(), true);
    }
    env.sort();
    env
}

/// Put `dirs` before the `PATH` of `env` (a set-up's `venv/bin` comes first).
pub(crate) fn prepend_path(env: &mut [(String, String)], dirs: &[std::path::PathBuf]) {
    if dirs.is_empty() {
        return;
    }
    if let Some((_, path)) = env.iter_mut().find(|(k, _)| k == "PATH") {
        let mut parts: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        parts.push(std::mem::take(path));
        *path = parts.join(":");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_up_path_comes_first() {
        let mut env = vec![("PATH".to_string(), "/usr/bin".to_string())];
        prepend_path(&mut env, &["/cache/venv/bin".into()]);
        assert_eq!(env[0].1, "/cache/venv/bin:/usr/bin");
    }

    #[test]
    fn cargo_offline_is_honoured_inside() {
        let parent = vec![("CARGO_NET_OFFLINE".to_string(), "true".to_string())];
        let pass: Vec<String> = DEFAULT_PASS_ENV.iter().map(|s| s.to_string()).collect();
        let env = sandbox_env(parent, &pass, "/p/home".as_ref(), "/p/tmp".as_ref(), &[]);
        assert!(env.contains(&("CARGO_NET_OFFLINE".to_string(), "true".to_string())));
    }

    #[test]
    fn only_allowed_non_secret_names_pass_and_home_is_private() {
        let parent = vec![
            ("PATH".to_string(), "/opt/bin:/usr/bin".to_string()),
            ("GITHUB_TOKEN".to_string(), "ghs_x".to_string()),
            ("OPENAI_API_KEY".to_string(), "sk-x".to_string()),
            ("HOME".to_string(), "/root".to_string()),
            ("RANDOM_THING".to_string(), "x".to_string()),
        ];
        let pass: Vec<String> = ["PATH", "GITHUB_TOKEN", "HOME"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let env = sandbox_env(parent, &pass, "/p/home".as_ref(), "/p/tmp".as_ref(), &[]);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some("/opt/bin:/usr/bin"));
        assert_eq!(get("HOME"), Some("/p/home"));
        assert_eq!(get("TMPDIR"), Some("/p/tmp"));
        assert_eq!(get("LANG"), Some("C.UTF-8"));
        assert_eq!(get("PYTHONDONTWRITEBYTECODE"), Some("1"));
        assert_eq!(get("GITHUB_TOKEN"), None);
        assert_eq!(get("OPENAI_API_KEY"), None);
        assert_eq!(get("RANDOM_THING"), None);
    }
}
