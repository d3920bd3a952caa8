//! `git agent sandbox --explain` and `git agent doctor` in a real repository: the view a
//! command gets, as the executor builds it (issue 17).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

struct Setup {
    _dir: tempfile::TempDir,
    repo: std::path::PathBuf,
    config: std::path::PathBuf,
    tool: std::path::PathBuf,
    extra: std::path::PathBuf,
}

/// A repository, a toolchain directory outside `$HOME` (`…/mytool/bin`, put on `PATH`), a
/// directory the user binds and a file under it the user hides.
fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let st = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&repo)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(repo.join("README"), "hello\n").unwrap();
    let st = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(["commit", "-qm", "init", "--allow-empty"])
        .current_dir(&repo)
        .status()
        .unwrap();
    assert!(st.success());
    let tool = root.join("opt/mytool");
    std::fs::create_dir_all(tool.join("bin")).unwrap();
    let extra = root.join("shared/cache");
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(extra.join("key.pem"), "secret\n").unwrap();
    std::fs::write(extra.join("data.txt"), "not a secret\n").unwrap();
    let config = root.join("config");
    std::fs::create_dir_all(config.join("git-agent")).unwrap();
    std::fs::write(
        config.join("git-agent/config.toml"),
        format!(
            "[sandbox]\nbind = [\"{}\"]\nhide = [\"{}\"]\nmemory_mb = 512\ntmp_mb = 64\n",
            extra.display(),
            extra.join("key.pem").display()
        ),
    )
    .unwrap();
    Setup {
        _dir: dir,
        repo,
        config,
        tool,
        extra,
    }
}

fn agent(s: &Setup, args: &[&str], cwd: &Path) -> (i32, String, String) {
    agent_env(s, args, cwd, &[])
}

fn agent_env(s: &Setup, args: &[&str], cwd: &Path, env: &[(&str, &Path)]) -> (i32, String, String) {
    let path = format!(
        "{}:{}",
        s.tool.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_git-agent"))
        .args(args)
        .current_dir(cwd)
        .env("XDG_CONFIG_HOME", &s.config)
        .env("PATH", path)
        .env("GIT_AGENT_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn line_of<'a>(out: &'a str, target: &str) -> &'a str {
    out.lines()
        .find(|l| l.trim_start().starts_with(&format!("{target} ")))
        .unwrap_or_else(|| panic!("no line for {target} in:\n{out}"))
}

// Issue 41 point 2: secrets named by the bot's variables and by git's configuration are
// listed as hidden with the setting that named each, inside a bound directory or not.
#[test]
fn sandbox_explain_lists_the_secrets_settings_name() {
    let s = setup();
    let keys = s.extra.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    for f in ["app.pem", "status.token", "store", "id_deploy"] {
        std::fs::write(keys.join(f), "secret\n").unwrap();
    }
    std::fs::write(keys.join("README"), "keys live here\n").unwrap();
    let gitconfig = s.extra.join("gitconfig");
    std::fs::write(
        &gitconfig,
        format!(
            "[credential]\n\thelper = store --file {}\n[core]\n\tsshCommand = ssh -i '{}'\n",
            keys.join("store").display(),
            keys.join("id_deploy").display()
        ),
    )
    .unwrap();
    let (code, out, err) = agent_env(
        &s,
        &["sandbox", "--explain"],
        &s.repo,
        &[
            ("GIT_AGENT_APP_KEY_FILE", &keys.join("app.pem")),
            ("GIT_AGENT_STATUS_TOKEN_FILE", &keys.join("status.token")),
            ("GIT_CONFIG_GLOBAL", &gitconfig),
        ],
    );
    assert_eq!(code, 0, "{out}\n{err}");
    for (file, setting) in [
        ("app.pem", "GIT_AGENT_APP_KEY_FILE"),
        ("status.token", "GIT_AGENT_STATUS_TOKEN_FILE"),
        ("store", "credential.helper (git config)"),
        ("id_deploy", "core.sshCommand (git config)"),
    ] {
        let line = line_of(&out, &keys.join(file).display().to_string());
        assert!(
            line.contains(&format!(
                "hidden (covered with an empty read-only one)  (secret named by {setting})"
            )),
            "{line}\n{out}"
        );
    }
    assert!(
        !out.contains(&keys.join("README").display().to_string()),
        "{out}"
    );
}

// Guards `--explain`: each bind with its source, access and reason (system, toolchain from
// PATH, configured), the worktree rw and its .git ro, what is hidden, tmpfs sizes, limits with
// the memory mechanism in force, namespaces, Landlock, seccomp and network, from a
// subdirectory of the repository.
#[test]
fn sandbox_explain_prints_the_view_of_the_repository() {
    let s = setup();
    let sub = s.repo.join("src");
    std::fs::create_dir_all(&sub).unwrap();
    let (code, out, err) = agent(&s, &["sandbox", "--explain"], &sub);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(&format!("worktree: {}", s.repo.display())),
        "{out}"
    );
    assert!(out.contains("mechanism: landlock"), "{out}");
    assert!(
        line_of(&out, "/usr").contains("ro bind  (system directory)"),
        "{out}"
    );
    assert!(
        line_of(&out, &s.tool.display().to_string()).contains(&format!(
            "toolchain: {} is on the agent's PATH",
            s.tool.join("bin").display()
        )),
        "{out}"
    );
    assert!(
        line_of(&out, &s.extra.display().to_string())
            .contains("ro bind  (configured: sandbox.bind)"),
        "{out}"
    );
    assert!(
        line_of(&out, &s.extra.join("key.pem").display().to_string()).contains(
            "hidden (covered with an empty read-only one)  (secret named by sandbox.hide)"
        ),
        "{out}"
    );
    assert!(
        line_of(&out, &s.repo.display().to_string()).contains("rw bind  (the worktree)"),
        "{out}"
    );
    assert!(
        line_of(&out, &s.repo.join(".git").display().to_string()).contains("ro bind"),
        "{out}"
    );
    assert!(line_of(&out, "/etc/shadow").contains("hidden"), "{out}");
    assert!(line_of(&out, "/tmp").contains("at most 64 MiB"), "{out}");
    assert!(line_of(&out, "/proc").contains("own /proc"), "{out}");
    // Nothing of the agent's home or state is in the view.
    let home = std::env::var("HOME").unwrap();
    assert!(
        !out.lines()
            .any(|l| l.trim_start().starts_with(&format!("{home} "))),
        "{out}"
    );
    assert!(
        out.contains("namespaces: user, mount, pid, ipc, uts, network"),
        "{out}"
    );
    assert!(out.contains("landlock: kernel ABI "), "{out}");
    assert!(out.contains("seccomp: yes"), "{out}");
    assert!(out.contains("limits: memory 512 MiB (cgroup v"), "{out}");
    assert!(out.contains("network: off"), "{out}");
    assert!(out.contains("fallbacks taken"), "{out}");
}

// Guards `--json` and the doctor's structure: the same explanation as data, the sandbox as
// the doctor's first section.
#[test]
fn sandbox_explain_json_and_doctor_agree() {
    let s = setup();
    let (code, out, err) = agent(&s, &["sandbox", "--explain", "--json"], &s.repo);
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let view = v["view"].as_array().unwrap();
    let find = |t: &Path| {
        view.iter()
            .find(|e| e["target"] == t.display().to_string())
            .unwrap_or_else(|| panic!("{} not in {v:#}", t.display()))
    };
    let usr = find(Path::new("/usr"));
    assert_eq!(usr["kind"], "bind");
    assert_eq!(usr["access"], "ro");
    assert_eq!(usr["why"], "system directory");
    assert_eq!(find(&s.repo)["access"], "rw");
    assert_eq!(find(&s.repo.join(".git"))["access"], "ro");
    assert_eq!(find(&s.extra)["why"], "configured: sandbox.bind");
    assert_eq!(find(Path::new("/tmp"))["size_mib"], 64);
    assert_eq!(v["report"]["mechanism"], "landlock");
    assert!(v["unavailable"].is_null());

    let (code, out, err) = agent(&s, &["doctor", "--json"], &s.repo);
    assert_eq!(code, 0, "{out}\n{err}");
    let d: Value = serde_json::from_str(&out).unwrap();
    let first = &d["sections"][0];
    assert_eq!(first["name"], "sandbox");
    assert_eq!(first["ok"], true);
    assert_eq!(first["detail"]["view"], v["view"]);
    let (code, out, _) = agent(&s, &["doctor"], &s.repo);
    assert_eq!(code, 0);
    assert!(out.starts_with("== sandbox: ok\n"), "{out}");
}

// Guards the fail-closed explanation: where the sandbox cannot be had (bubblewrap asked for
// with the egress allowlist, which it cannot do), `--explain` and the doctor say so and fail.
#[test]
fn sandbox_explain_says_when_no_command_could_run() {
    let s = setup();
    std::fs::write(
        s.config.join("git-agent/config.toml"),
        "[sandbox]\nmode = \"bwrap\"\n[policy]\nnetwork = \"allowlist\"\n",
    )
    .unwrap();
    let (code, out, err) = agent(&s, &["sandbox", "--explain"], &s.repo);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("UNAVAILABLE: no command can run"), "{out}");
    assert!(out.contains("egress proxy"), "{out}");
    let (code, out, _) = agent(&s, &["doctor"], &s.repo);
    assert_eq!(code, 1);
    assert!(out.starts_with("== sandbox: FAILED\n"), "{out}");
}
