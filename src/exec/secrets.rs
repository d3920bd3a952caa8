//! Secrets the configuration names, kept out of every command's view (issue 41 point 2).
//!
//! The view hides what it knows to be secret wherever it binds a directory: `/etc`'s secrets
//! and the credential files of toolchain homes ([`super::view`]). This module owns the other
//! half: files that *a setting* names as secret, wherever they live — the bot's App key,
//! webhook-secret and status-token files, `sandbox.hide`, a `credential.helper` store, the SSH
//! keys and client certificates that git's configuration (or `GIT_SSH_COMMAND`) points at.
//! Each is listed once with the setting that named it, so `git agent sandbox --explain` can
//! say why it is hidden.
//!
//! It must not decide what is bound (that is the view) nor read any secret's content: it
//! names paths. Hiding more than needed is harmless (the path is covered with an empty
//! read-only one), so a path named by the repository's own git configuration is hidden too.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// A path a setting names as secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secret {
    /// The path, absolute.
    pub path: PathBuf,
    /// The setting that named it, as a user would look it up: `--app-key-file
    /// (GIT_AGENT_APP_KEY_FILE)`, `sandbox.hide`, `credential.helper (git config)`.
    pub named_by: String,
}

impl Secret {
    /// `path`, named secret by `named_by`.
    pub fn new(path: impl Into<PathBuf>, named_by: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            named_by: named_by.into(),
        }
    }
}

/// Directories never hidden whole, even when every file in them is a secret: hiding them
/// would take the system (or the agent's home) out of the view rather than a secret.
const NEVER_WHOLE: &[&str] = &[
    "/", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/home", "/root", "/tmp",
    "/var", "/srv", "/run", "/mnt", "/media",
];

/// What the view must hide for `secrets`: each absolute path and, when it is a link, what it
/// leads to (the view cannot follow a link, but the command can); then each directory whose
/// entries are all hidden is hidden whole instead (a key directory's listing says which
/// keys exist). Relative paths are dropped: nothing says what they are relative to.
pub fn resolve(secrets: Vec<Secret>, home: Option<&Path>) -> Vec<Secret> {
    let mut out: Vec<Secret> = Vec::new();
    let mut push = |s: Secret| {
        if !out.iter().any(|o| o.path == s.path) {
            out.push(s);
        }
    };
    for s in secrets {
        let path = expand_home(&s.path, home);
        if !path.is_absolute() {
            continue;
        }
        if let Ok(target) = std::fs::canonicalize(&path)
            && target != path
        {
            push(Secret::new(target, s.named_by.clone()));
        }
        push(Secret::new(path, s.named_by));
    }
    whole_directories(out, home)
}

/// `secrets` with each directory holding nothing but hidden entries hidden in their place.
fn whole_directories(secrets: Vec<Secret>, home: Option<&Path>) -> Vec<Secret> {
    let mut parents: Vec<PathBuf> = secrets
        .iter()
        .filter_map(|s| s.path.parent().map(Path::to_path_buf))
        .collect();
    parents.sort();
    parents.dedup();
    let mut out = secrets;
    for dir in parents {
        if NEVER_WHOLE.iter().any(|n| dir == Path::new(n)) || home.is_some_and(|h| dir == h) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        let all_secret =
            !names.is_empty() && names.iter().all(|n| out.iter().any(|s| &s.path == n));
        if all_secret {
            let named_by = out
                .iter()
                .filter(|s| s.path.parent() == Some(&dir))
                .map(|s| s.named_by.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            out.retain(|s| s.path.parent() != Some(&dir));
            out.push(Secret::new(
                dir,
                format!("{named_by} (the directory holds only secrets)"),
            ));
        }
    }
    out
}

/// `~/x` as `$HOME/x`, as git and the shell read it.
fn expand_home(p: &Path, home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix("~"), home) {
        (Ok(rest), Some(h)) => h.join(rest),
        _ => p.to_path_buf(),
    }
}

/// Secrets named by git's configuration as git itself would read it in `dir` (system,
/// global and the repository's own files, includes followed) and by `GIT_SSH_COMMAND`: a
/// `credential.helper` store's file, SSH keys given to `core.sshCommand` (`-i`, `-o
/// IdentityFile=`) and those its `-F` file (or `~/.ssh/config`) names, an SSH signing key
/// (and its private half), `http.sslKey`/`sslCert`/`cookieFile`. Reading configuration runs
/// nothing; a machine without `git` yields only what the environment names.
pub fn from_git(dir: &Path, env: &dyn Fn(&str) -> Option<OsString>) -> Vec<Secret> {
    let entries = git_config_entries(dir);
    let home = env("HOME").map(PathBuf::from);
    let mut out = named_by_git_config(&entries, home.as_deref());
    let ssh_command = env("GIT_SSH_COMMAND").map(|v| v.to_string_lossy().into_owned());
    let mut ssh_configs: Vec<(PathBuf, String)> = Vec::new();
    if let Some(h) = &home {
        ssh_configs.push((h.join(".ssh/config"), "~/.ssh/config".into()));
    }
    ssh_configs.push(("/etc/ssh/ssh_config".into(), "/etc/ssh/ssh_config".into()));
    let commands = entries
        .iter()
        .filter(|(k, _)| k == "core.sshcommand")
        .map(|(_, v)| (v.clone(), "core.sshCommand (git config)".to_string()))
        .chain(ssh_command.map(|c| (c, "GIT_SSH_COMMAND".to_string())));
    for (command, named_by) in commands {
        let (keys, config) = ssh_command_keys(&command);
        out.extend(keys.into_iter().map(|k| Secret::new(k, named_by.clone())));
        if let Some(c) = config {
            ssh_configs.push((c.into(), format!("{named_by}, its -F file")));
        }
    }
    for (file, named_by) in ssh_configs {
        let file = expand_home(&file, home.as_deref());
        if let Ok(text) = std::fs::read_to_string(&file) {
            out.extend(
                identity_files(&text)
                    .into_iter()
                    .map(|k| Secret::new(k, format!("IdentityFile in {named_by}"))),
            );
        }
    }
    out
}

/// `git config --list` in `dir` as (lower-cased key, value) pairs; nothing when git is
/// missing or fails.
fn git_config_entries(dir: &Path) -> Vec<(String, String)> {
    let Ok(out) = std::process::Command::new("git")
        .args(["config", "--list", "--includes", "-z"])
        .current_dir(dir)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    parse_config_list(&out.stdout)
}

/// The NUL-separated `key\nvalue` records of `git config --list -z`.
fn parse_config_list(bytes: &[u8]) -> Vec<(String, String)> {
    bytes
        .split(|b| *b == 0)
        .filter(|r| !r.is_empty())
        .map(|r| {
            let r = String::from_utf8_lossy(r);
            match r.split_once('\n') {
                Some((k, v)) => (k.to_ascii_lowercase(), v.to_string()),
                None => (r.to_ascii_lowercase(), String::new()),
            }
        })
        .collect()
}

/// The secrets that git configuration `entries` name directly.
fn named_by_git_config(entries: &[(String, String)], home: Option<&Path>) -> Vec<Secret> {
    let mut out = Vec::new();
    let ssh_signing = entries
        .iter()
        .any(|(k, v)| k == "gpg.format" && v.eq_ignore_ascii_case("ssh"));
    for (key, value) in entries {
        let (section, name) = section_and_name(key);
        let named_by = |what: &str| format!("{what} (git config)");
        match (section, name) {
            ("credential", "helper") => {
                for f in credential_store_files(value, home) {
                    out.push(Secret::new(f, named_by("credential.helper")));
                }
            }
            ("http", "sslkey" | "sslcert" | "cookiefile") => {
                out.push(Secret::new(value, named_by(&format!("http.{name}"))));
            }
            ("user", "signingkey") if ssh_signing && !value.starts_with("key::") => {
                out.push(Secret::new(value, named_by("user.signingKey")));
                if let Some(private) = value.strip_suffix(".pub") {
                    out.push(Secret::new(private, named_by("user.signingKey")));
                }
            }
            _ => {}
        }
    }
    out
}

/// A key's section and variable name, with any subsection (`credential.https://x.helper`,
/// `http.https://x.sslkey`) left out.
fn section_and_name(key: &str) -> (&str, &str) {
    let section = key.split('.').next().unwrap_or("");
    let name = key.rsplit('.').next().unwrap_or("");
    (section, name)
}

/// The files a `credential.helper` value stores credentials in: `store` (or
/// `git-credential-store`) with `--file`, else git's two default store files.
fn credential_store_files(helper: &str, home: Option<&Path>) -> Vec<PathBuf> {
    let words = shell_words(helper);
    let store = words.first().is_some_and(|w| {
        let w = w.rsplit('/').next().unwrap_or(w);
        w == "store" || w == "git-credential-store"
    });
    if !store {
        return Vec::new();
    }
    let mut files = Vec::new();
    let mut it = words.iter().skip(1);
    while let Some(w) = it.next() {
        if let Some(f) = w.strip_prefix("--file=") {
            files.push(PathBuf::from(f));
        } else if w == "--file"
            && let Some(f) = it.next()
        {
            files.push(PathBuf::from(f));
        }
    }
    if files.is_empty()
        && let Some(h) = home
    {
        files.push(h.join(".git-credentials"));
        files.push(h.join(".config/git/credentials"));
    }
    files
}

/// The key files an `ssh` command line names (`-i KEY`, `-iKEY`, `-o IdentityFile=KEY`) and
/// its `-F` configuration file.
fn ssh_command_keys(command: &str) -> (Vec<PathBuf>, Option<String>) {
    let words = shell_words(command);
    let mut keys = Vec::new();
    let mut config = None;
    let mut it = words.iter();
    while let Some(w) = it.next() {
        let value_of = |flag: &str, it: &mut std::slice::Iter<'_, String>| -> Option<String> {
            match w.strip_prefix(flag) {
                Some("") => it.next().cloned(),
                Some(rest) => Some(rest.to_string()),
                None => None,
            }
        };
        if let Some(k) = value_of("-i", &mut it) {
            keys.push(PathBuf::from(k));
        } else if let Some(f) = value_of("-F", &mut it) {
            config = Some(f);
        } else if let Some(o) = value_of("-o", &mut it) {
            keys.extend(identity_files(&o.replacen('=', " ", 1)));
        }
    }
    (keys, config)
}

/// The `IdentityFile` paths of an ssh configuration text; those with `%` tokens (expanded by
/// ssh per host) are left out.
fn identity_files(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let (key, value) =
                l.split_once(|c: char| c.is_whitespace() || c == '=')
                    .map(|(k, v)| {
                        (
                            k,
                            v.trim_start_matches(|c: char| c.is_whitespace() || c == '='),
                        )
                    })?;
            key.eq_ignore_ascii_case("identityfile")
                .then(|| value.trim().trim_matches('"'))
                .filter(|v| !v.is_empty() && !v.contains('%'))
                .map(PathBuf::from)
        })
        .collect()
}

/// Words of a command line as a POSIX shell splits them (quotes and backslashes), without
/// expansion; a line that does not parse splits on white space.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    cur.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => cur.extend(chars.next()),
                        q => cur.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                cur.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(s: &[Secret]) -> Vec<String> {
        s.iter().map(|s| s.path.display().to_string()).collect()
    }

    #[test]
    fn a_credential_store_names_its_file_or_the_defaults() {
        let home = Path::new("/h");
        assert_eq!(
            credential_store_files("store --file=/etc/creds/store", Some(home)),
            [PathBuf::from("/etc/creds/store")]
        );
        assert_eq!(
            credential_store_files(
                "/usr/lib/git-core/git-credential-store --file '/k/a b'",
                Some(home)
            ),
            [PathBuf::from("/k/a b")]
        );
        assert_eq!(
            credential_store_files("store", Some(home)),
            [
                PathBuf::from("/h/.git-credentials"),
                PathBuf::from("/h/.config/git/credentials")
            ]
        );
        assert!(credential_store_files("cache --timeout=300", Some(home)).is_empty());
    }

    #[test]
    fn an_ssh_command_names_its_keys_and_config() {
        let (keys, config) = ssh_command_keys(
            "ssh -i /k/deploy -i/k/two -o IdentityFile=/k/three -oIdentityFile=/k/4 -F /k/cfg",
        );
        assert_eq!(
            keys,
            ["/k/deploy", "/k/two", "/k/three", "/k/4"].map(PathBuf::from)
        );
        assert_eq!(config.as_deref(), Some("/k/cfg"));
        assert_eq!(
            identity_files(
                "Host x\n  IdentityFile \"/k/a\"\n  identityfile=/k/b\n  IdentityFile ~/.ssh/id_%h\n"
            ),
            ["/k/a", "/k/b"].map(PathBuf::from)
        );
    }

    #[test]
    fn git_configuration_names_keys_certificates_and_cookies() {
        let entries = parse_config_list(
            b"credential.https://corp.example.helper\nstore --file /etc/corp/creds\0\
              http.sslKey\n/etc/pki/client.key\0http.https://x.cookiefile\n~/cookies\0\
              gpg.format\nssh\0user.signingkey\n/keys/sign.pub\0user.name\nMe\0",
        );
        let found = named_by_git_config(&entries, Some(Path::new("/h")));
        assert_eq!(
            paths(&found),
            [
                "/etc/corp/creds",
                "/etc/pki/client.key",
                "~/cookies",
                "/keys/sign.pub",
                "/keys/sign"
            ]
        );
        assert_eq!(found[0].named_by, "credential.helper (git config)");
        // Without gpg.format=ssh a signing key is a GPG key id, not a path.
        let gpg = parse_config_list(b"user.signingkey\n/keys/sign.pub\0");
        assert!(named_by_git_config(&gpg, None).is_empty());
    }

    #[test]
    fn links_are_followed_and_a_directory_of_secrets_goes_whole() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let keys = root.join("keys");
        std::fs::create_dir_all(&keys).unwrap();
        std::fs::write(keys.join("app.pem"), "k").unwrap();
        std::fs::write(keys.join("webhook"), "w").unwrap();
        let mixed = root.join("mixed");
        std::fs::create_dir_all(&mixed).unwrap();
        std::fs::write(mixed.join("key"), "k").unwrap();
        std::fs::write(mixed.join("README"), "r").unwrap();
        std::os::unix::fs::symlink(mixed.join("key"), root.join("link")).unwrap();
        let got = resolve(
            vec![
                Secret::new(keys.join("app.pem"), "--app-key-file"),
                Secret::new(keys.join("webhook"), "--webhook-secret-file"),
                Secret::new(root.join("link"), "sandbox.hide"),
                Secret::new("relative/key", "sandbox.hide"),
            ],
            None,
        );
        let shown = paths(&got);
        assert!(shown.contains(&keys.display().to_string()), "{shown:?}");
        assert!(!shown.contains(&keys.join("app.pem").display().to_string()));
        // A link's target is hidden too; the directory it is in also holds a README.
        assert!(shown.contains(&mixed.join("key").display().to_string()));
        assert!(!shown.contains(&mixed.display().to_string()));
        assert!(!shown.iter().any(|s| s.contains("relative")));
        let whole = got.iter().find(|s| s.path == keys).unwrap();
        assert!(
            whole.named_by.contains("--app-key-file") && whole.named_by.contains("--webhook"),
            "{}",
            whole.named_by
        );
    }
}
