//! The sandbox as a view (issue 17; SECURITY.md 29–34): each case replays an attack a
//! prompt-injected model made, on the root path (spawner, pids cgroup) and on the unprivileged
//! path (run as `nobody` through `setpriv`: no cgroup, no spawner).
//!
//! Each case is an `#[ignore]`d inner test that this file's outer tests run in a child process
//! of the test binary — with a fake `$HOME` full of canaries, and as `nobody` for the
//! unprivileged path. An inner test run any other way (e.g. `--include-ignored`) returns at
//! once: it needs the set-up its outer test makes.

use std::io::Write;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use git_agent::config::{NetworkMode, SandboxMode};
use git_agent::exec::{ExecOptions, ExecOutput, ExecRequest, Executor, LocalExecutor, Termination};

const INNER: &str = "GIT_AGENT_VIEW_INNER";

/// How the inner test runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path_ {
    /// As root (the spawner, a pids cgroup).
    Root,
    /// As root with the spawner turned off (each command the agent's child).
    RootDirect,
    /// As `nobody`: no cgroup, no spawner.
    Nobody,
    /// In a user namespace whose `user.max_user_namespaces` is 0: no user namespace can be
    /// made, as on a machine that refuses them.
    NoUserns,
}

/// Run the inner test `name` in a child process on `path`; panics with its output unless it
/// passed. Nothing is skipped: a machine without `setpriv` fails the unprivileged cases.
fn outer(name: &str, path: Path_) {
    let exe = std::env::current_exe().unwrap();
    let test = format!("suite::view::{name}");
    let mut cmd = if path == Path_::NoUserns {
        let mut c = Command::new("unshare");
        c.args([
            "-U",
            "-r",
            "--",
            "sh",
            "-c",
            "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"",
            "sh",
        ]);
        c.arg(&exe);
        c
    } else if path == Path_::Nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]);
        c.arg(&exe);
        // nobody cannot read root's toolchains; the system's are enough here.
        c.env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        );
        c
    } else {
        Command::new(&exe)
    };
    cmd.args([
        &test,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(INNER, format!("{path:?}"))
    .env("TMPDIR", "/tmp")
    .current_dir("/");
    let out = cmd
        .output()
        .expect("run the inner test (is setpriv installed?)");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && all.contains("1 passed"),
        "{name} on {path:?}:\n{all}"
    );
}

/// The path this inner test runs on, or `None` when it was not started by its outer test.
fn inner_path() -> Option<Path_> {
    match std::env::var(INNER).ok()?.as_str() {
        "Root" => Some(Path_::Root),
        "RootDirect" => Some(Path_::RootDirect),
        "Nobody" => Some(Path_::Nobody),
        "NoUserns" => Some(Path_::NoUserns),
        _ => None,
    }
}

/// A scratch area laid out like a serving agent's machine: a fake `$HOME` with credentials,
/// the agent's state directory with a job database, a sibling repository, and the worktree.
struct Machine {
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    worktree: PathBuf,
    sibling: PathBuf,
    state_db: PathBuf,
}

const CANARY: &str = "canary-3b1f0e-view";

fn machine() -> Machine {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let home = root.join("home");
    for (f, body) in [
        (
            ".git-credentials",
            format!("https://x:{CANARY}@github.com\n"),
        ),
        (
            ".ssh/id_ed25519",
            format!("-----BEGIN OPENSSH PRIVATE KEY----- {CANARY}\n"),
        ),
        (
            ".config/git-agent/config.toml",
            format!("api_key = \"{CANARY}\"\n"),
        ),
        ("app-key.pem", format!("{CANARY}\n")),
        // A toolchain home on PATH (bound read-only) with a registry token in it.
        (
            ".cargo/bin/cargo-tool",
            "#!/bin/sh\necho tool-ran\n".to_string(),
        ),
        (
            ".cargo/credentials.toml",
            format!("[registry]\ntoken = \"{CANARY}\"\n"),
        ),
    ] {
        let p = home.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body).unwrap();
        let mode = if f.contains("/bin/") { 0o700 } else { 0o600 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let state = root.join("state");
    let sibling = state.join("repos/other/repo.git");
    std::fs::create_dir_all(sibling.join("refs")).unwrap();
    std::fs::write(sibling.join("conversation.jsonl"), CANARY).unwrap();
    let state_db = state.join("jobs.sqlite");
    std::fs::write(&state_db, format!("SQLite format 3\0{CANARY}")).unwrap();
    let worktree = state.join("worktrees/mine");
    std::fs::create_dir_all(&worktree).unwrap();
    let g = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&worktree)
        .status()
        .unwrap();
    assert!(g.success());
    std::fs::write(worktree.join("README"), "hello\n").unwrap();
    Machine {
        _dir: dir,
        root,
        home,
        worktree,
        sibling,
        state_db,
    }
}

fn opts(path: Path_) -> ExecOptions {
    ExecOptions {
        sandbox: SandboxMode::Landlock,
        network: NetworkMode::Off,
        timeout: Duration::from_secs(60),
        spawner: path != Path_::RootDirect,
        ..ExecOptions::default()
    }
}

fn text(out: &ExecOutput) -> String {
    format!(
        "{}{}",
        out.stdout.to_text_lossy(),
        out.stderr.to_text_lossy()
    )
}

/// Run `body` on a fresh runtime after pointing `$HOME` at the machine's fake home (set
/// before any other thread exists).
fn with_home<F, Fut>(m: &Machine, body: F)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    // SAFETY: the inner test runs alone in its process and no thread has started yet.
    unsafe { std::env::set_var("HOME", &m.home) };
    let path = std::env::var("PATH").unwrap_or_default();
    // SAFETY: as above.
    unsafe {
        std::env::set_var(
            "PATH",
            format!("{}:{path}", m.home.join(".cargo/bin").display()),
        )
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(body());
}

async fn sh(exec: &LocalExecutor, script: &str) -> ExecOutput {
    exec.run(ExecRequest::shell(script)).await.unwrap()
}

// --- 29: nothing outside the view -------------------------------------------------------

#[test]
#[ignore = "run by its outer tests"]
fn inner_nothing_outside_the_view_is_readable() {
    let Some(path) = inner_path() else { return };
    let m = machine();
    let mut o = opts(path);
    o.writable = Vec::new();
    with_home(&m, || async {
        let exec = LocalExecutor::new(&m.worktree, o).unwrap();
        let report = exec.sandbox();
        assert!(!report.view.is_empty(), "{report:?}");
        assert!(
            report.summary().contains("namespaces user+mount+pid"),
            "{}",
            report.summary()
        );
        let probe = |p: &Path| {
            format!(
                "if [ -e '{0}' ] || [ -L '{0}' ]; then echo 'present:{0}'; cat '{0}' 2>/dev/null; fi\n",
                p.display()
            )
        };
        let mut script = String::new();
        for p in [
            m.home.join(".git-credentials"),
            m.home.join(".ssh/id_ed25519"),
            m.home.join(".ssh"),
            m.home.join(".config/git-agent/config.toml"),
            m.home.join("app-key.pem"),
            m.sibling.clone(),
            m.sibling.join("conversation.jsonl"),
            m.state_db.clone(),
            m.root.join("state/repos"),
            PathBuf::from("/root/.bashrc"),
            PathBuf::from("/var/run"),
            PathBuf::from("/run"),
            PathBuf::from("/sys"),
        ] {
            script.push_str(&probe(&p));
        }
        script.push_str("ls -a /home /root 2>&1; echo ok-end\n");
        let out = sh(&exec, &script).await;
        let t = text(&out);
        assert!(t.contains("ok-end"), "{t}");
        assert!(
            !t.contains("present:"),
            "something outside the view is present:\n{t}"
        );
        assert!(!t.contains(CANARY), "a canary leaked:\n{t}");
        // The toolchain home is in view and its tools run; its credentials file is empty.
        let out = sh(
            &exec,
            &format!(
                "cargo-tool; cat '{}' 2>&1; echo creds-end",
                m.home.join(".cargo/credentials.toml").display()
            ),
        )
        .await;
        let t = text(&out);
        assert!(t.contains("tool-ran") && t.contains("creds-end"), "{t}");
        assert!(!t.contains(CANARY), "a registry token leaked:\n{t}");
        // Of $HOME, only the toolchain home on PATH is there.
        let out = sh(&exec, &format!("ls -A '{}'", m.home.display())).await;
        assert_eq!(
            out.stdout.to_text_lossy().trim(),
            ".cargo",
            "{}",
            text(&out)
        );
        // The worktree is there, read-write; its .git read-only.
        let out = sh(
            &exec,
            "cat README && echo new > new-file && ! (echo x >> .git/config) 2>/dev/null && echo wt-ok",
        )
        .await;
        assert!(text(&out).contains("wt-ok"), "{}", text(&out));
        assert!(m.worktree.join("new-file").is_file());
    });
}

// Guards 29: a command reads nothing of the agent's $HOME, state directory, other
// repositories' mirrors and records, or the job database — each path is absent.
#[test]
fn nothing_outside_the_view_is_readable_as_root() {
    outer("inner_nothing_outside_the_view_is_readable", Path_::Root);
}

// Guards 29 on the spawner-less root path.
#[test]
fn nothing_outside_the_view_is_readable_as_root_without_spawner() {
    outer(
        "inner_nothing_outside_the_view_is_readable",
        Path_::RootDirect,
    );
}

// Guards 29 on the unprivileged path.
#[test]
fn nothing_outside_the_view_is_readable_unprivileged() {
    outer("inner_nothing_outside_the_view_is_readable", Path_::Nobody);
}

// Guards 29: /etc is in the view without its secrets (as root, uid 0 in the sandbox is the
// kernel's uid 0, so file permissions alone would let it read /etc/shadow).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etc_shadow_is_not_readable_as_root() {
    let m = machine();
    let exec = LocalExecutor::new(&m.worktree, opts(Path_::Root)).unwrap();
    let host = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    let out = sh(
        &exec,
        "cat /etc/shadow /etc/gshadow 2>&1; ls /etc/sudoers.d 2>&1; cat /etc/passwd | head -1; echo end",
    )
    .await;
    let t = text(&out);
    assert!(t.contains("end") && t.contains("root:x:0"), "{t}");
    if let Some(line) = host.lines().find(|l| l.starts_with("root:")) {
        assert!(!t.contains(line), "/etc/shadow was read:\n{t}");
    }
    assert!(!t.contains("root:*:") && !t.contains("root:!"), "{t}");
}

/// Processes of the host whose user namespace is `ns` (a `/proc/PID/ns/user` link's target).
fn in_user_namespace(ns: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/user"))
                .is_ok_and(|l| l.to_string_lossy() == ns)
        })
        .collect()
}

/// Guards the standby helper (the next command's sandbox readied between commands): it is
/// there between two commands, in the spawner's user namespace; each command still gets
/// mount and pid namespaces of its own (a fresh `/tmp`, nothing the one before left
/// running); and nothing of it outlives the executor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_command_gets_fresh_namespaces_from_a_standby_that_dies_with_the_executor_as_root() {
    let m = machine();
    let exec = LocalExecutor::new(&m.worktree, opts(Path_::Root)).unwrap();
    let show = "readlink /proc/self/ns/user";
    let first = text(
        &sh(
            &exec,
            &format!("echo left > /tmp/left; (sleep 300 &); {show}; echo end"),
        )
        .await,
    );
    assert!(first.ends_with("end\n"), "{first}");
    let user = first.lines().next().unwrap().to_string();
    // Between commands, the standby waits in the spawner's user namespace.
    let standby = |user: String| async move {
        for _ in 0..100 {
            let waiting = in_user_namespace(&user);
            if !waiting.is_empty() {
                return waiting;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no standby in {user} between commands");
    };
    standby(user.clone()).await;
    let second = text(
        &sh(
            &exec,
            &format!("cat /tmp/left 2>&1; ps -e -o comm= | grep -c sleep; {show}; echo end"),
        )
        .await,
    );
    let lines: Vec<&str> = second.lines().collect();
    assert!(lines[0].contains("No such file"), "/tmp is fresh: {second}");
    assert_eq!(lines[1], "0", "the first command's sleep is gone: {second}");
    assert_eq!(lines[2], user, "one user namespace per spawner: {second}");
    // (Namespace inode numbers are reused once freed, so they cannot show two commands' apart;
    // the fresh /tmp and the gone sleep do.)
    let waiting = standby(user.clone()).await;
    drop(exec);
    let mut left = Vec::new();
    for _ in 0..200 {
        left = in_user_namespace(&user);
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        left.is_empty(),
        "processes outlive the executor: {left:?} (the standby was {waiting:?})"
    );
}

/// Guards the view's root: once built, the command's mount table holds the view and nothing
/// of the set-up — one root (read-only tmpfs), no host root left stacked beneath it at
/// `/oldroot`, no `/newroot` — so no path, and no mount a `..` could climb, leads out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_is_the_only_tree_in_the_mount_table_as_root() {
    let m = machine();
    let exec = LocalExecutor::new(&m.worktree, opts(Path_::Root)).unwrap();
    let out = sh(&exec, "cat /proc/self/mountinfo; echo end").await;
    let t = text(&out);
    assert!(t.ends_with("end\n"), "{t}");
    let points: Vec<(&str, &str)> = t
        .lines()
        .filter(|l| *l != "end")
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let fstype = l.split(" - ").nth(1).and_then(|r| r.split(' ').next());
            (f[4], fstype.unwrap_or(""))
        })
        .collect();
    let roots: Vec<_> = points.iter().filter(|(p, _)| *p == "/").collect();
    assert_eq!(roots.len(), 1, "one root, nothing stacked under it:\n{t}");
    assert_eq!(roots[0].1, "tmpfs", "{t}");
    let root_line = t
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/"))
        .unwrap();
    assert!(
        root_line.split(' ').nth(5).unwrap().starts_with("ro"),
        "{root_line}"
    );
    for (p, _) in &points {
        assert!(
            !p.starts_with("/oldroot") && !p.starts_with("/newroot"),
            "the set-up's {p} is still mounted:\n{t}"
        );
    }
}

/// Guards 32 against a full disk: on a file system with less free than the growth bound, a
/// command writing without end is stopped while the machine still has its reserve (a quarter
/// of what was free, at most 256 MiB), never left to fill it. A 256 MiB tmpfs stands in for
/// the disk (mounting it needs root).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_stops_before_the_disk_is_full_as_root() {
    let m = machine();
    let disk = m.root.join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256m", "tmpfs"])
        .arg(&disk)
        .status()
        .unwrap();
    assert!(st.success(), "mount a tmpfs (the test runs as root)");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(disk.clone());
    let wt = disk.join("wt");
    std::fs::create_dir_all(&wt).unwrap();
    let g = Command::new("git")
        .args(["init", "-q"])
        .current_dir(&wt)
        .status()
        .unwrap();
    assert!(g.success());
    let exec = LocalExecutor::new(&wt, opts(Path_::Root)).unwrap();
    let req = ExecRequest::shell(
        "for w in 1 2 3 4; do ( i=0; while i=$((i+1)); do head -c 4M /dev/zero > w$w-$i || exit; done ) & done; wait; echo finished",
    )
    .timeout(Duration::from_secs(60));
    let out = exec.run(req).await.unwrap();
    let t = text(&out);
    assert!(
        out.stopped
            .as_deref()
            .is_some_and(|s| s.contains("nearly full")),
        "{out:?}"
    );
    assert!(!t.contains("No space left"), "the disk filled:\n{t}");
    let left = worktree_bytes(&wt);
    assert!(left < 256 << 20, "{} MiB", left >> 20);
}

// --- 30: own processes only, none outlives the command -----------------------------------

#[test]
#[ignore = "run by its outer tests"]
fn inner_only_its_own_processes_and_none_outlives_it() {
    let Some(path) = inner_path() else { return };
    let m = machine();
    let marker = format!("{CANARY}-argv");
    // A host process with a canary in its argv (as `serve --status-token …` would be).
    // Its output goes nowhere: a `sleep` holding the outer test's pipe would keep it waiting.
    let mut host = Command::new("sh")
        .args(["-c", "sleep 60", &marker])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    with_home(&m, || async {
        let exec = LocalExecutor::new(&m.worktree, opts(path)).unwrap();
        let out = sh(
            &exec,
            "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; echo; echo procs-end",
        )
        .await;
        let t = text(&out);
        assert!(t.contains("procs-end"), "{t}");
        assert!(!t.contains(&marker), "a host process is visible:\n{t}");
        assert!(!t.contains("sleep"), "{t}");
        // The real process list, as `ps` reads it from this /proc: the view's init (pid 1),
        // the shell and `ps` itself, nothing of the host.
        let out = sh(&exec, "ps -e -o pid=,comm=").await;
        let t = text(&out);
        assert_eq!(out.status, Termination::Exited(0), "ps failed:\n{t}");
        let procs: Vec<(u32, String)> = t
            .lines()
            .map(|l| {
                let (pid, comm) = l.trim().split_once(char::is_whitespace).expect(&t);
                (pid.parse().expect(&t), comm.trim().to_string())
            })
            .collect();
        assert!(procs.iter().any(|(pid, _)| *pid == 1), "no init:\n{t}");
        assert!(procs.iter().any(|(_, c)| c == "ps"), "no ps:\n{t}");
        assert!((2..=4).contains(&procs.len()), "{procs:?}");
        assert!(procs.iter().all(|(pid, _)| *pid < 10), "{procs:?}");
        // /proc works: the command reads its own status and its init's name.
        let out = sh(&exec, "grep '^PPid' /proc/self/status; cat /proc/1/comm").await;
        let t = text(&out);
        assert_eq!(out.status, Termination::Exited(0), "{t}");
        assert!(t.starts_with("PPid:"), "{t}");

        // Daemons of every kind, each of which would write the worktree later.
        let script = "\
            setsid sh -c 'sleep 2; echo late > setsid.txt' >/dev/null 2>&1 &\n\
            (sh -c 'sleep 2; echo late > double.txt' >/dev/null 2>&1 &) &\n\
            nohup sh -c 'sleep 2; echo late > nohup.txt' >/dev/null 2>&1 &\n\
            unshare -U --fork setsid sh -c 'sleep 2; echo late > unshare.txt' >/dev/null 2>&1 &\n\
            sleep 0.3; echo started";
        let out = sh(&exec, script).await;
        assert!(text(&out).contains("started"), "{}", text(&out));
        std::thread::sleep(Duration::from_secs(3));
        for f in ["setsid.txt", "double.txt", "nohup.txt", "unshare.txt"] {
            assert!(
                !m.worktree.join(f).exists(),
                "a daemon outlived its command and wrote {f}"
            );
        }
        // The next command runs normally.
        let out = sh(&exec, "echo next").await;
        assert_eq!(out.status, Termination::Exited(0), "{}", text(&out));
    });
    let _ = host.kill();
    let _ = host.wait();
}

// Guards 30: /proc shows only the command's processes (no host argv), and setsid, double
// fork, nohup and `unshare -U --fork` daemons die with the command: none writes the worktree
// after it returned.
#[test]
fn only_its_own_processes_and_none_outlives_it_as_root() {
    outer(
        "inner_only_its_own_processes_and_none_outlives_it",
        Path_::Root,
    );
}

// Guards 30 on the spawner-less root path.
#[test]
fn only_its_own_processes_and_none_outlives_it_as_root_without_spawner() {
    outer(
        "inner_only_its_own_processes_and_none_outlives_it",
        Path_::RootDirect,
    );
}

// Guards 30 on the unprivileged path (the 3-of-3 attack of issue 17: a daemon that outlived
// the run put the bug back before the commit).
#[test]
fn only_its_own_processes_and_none_outlives_it_unprivileged() {
    outer(
        "inner_only_its_own_processes_and_none_outlives_it",
        Path_::Nobody,
    );
}

// --- 31: host Unix sockets ---------------------------------------------------------------

#[test]
#[ignore = "run by its outer tests"]
fn inner_host_unix_socket_cannot_be_reached() {
    let Some(path) = inner_path() else { return };
    let m = machine();
    let sock = m.root.join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    listener.set_nonblocking(true).unwrap();
    with_home(&m, || async {
        let exec = LocalExecutor::new(&m.worktree, opts(path)).unwrap();
        let script = format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}'); s.send(b'x'); print('connected')\" 2>&1; echo end",
            sock.display()
        );
        let out = sh(&exec, &script).await;
        let t = text(&out);
        assert!(t.contains("end") && !t.contains("connected"), "{t}");
    });
    assert!(
        listener.accept().is_err(),
        "the host listener saw a connection"
    );
}

// Guards 31: a pathname Unix socket of the host (0600, the agent's uid; docker.sock on a
// runner) is not in the view, so it cannot be connected to with the network off.
#[test]
fn host_unix_socket_cannot_be_reached_as_root() {
    outer("inner_host_unix_socket_cannot_be_reached", Path_::Root);
}

// Guards 31 on the unprivileged path.
#[test]
fn host_unix_socket_cannot_be_reached_unprivileged() {
    outer("inner_host_unix_socket_cannot_be_reached", Path_::Nobody);
}

// --- 33: inherited descriptors -----------------------------------------------------------

#[test]
#[ignore = "run by its outer tests"]
fn inner_inherited_descriptors_do_not_reach_the_command() {
    let Some(path) = inner_path() else { return };
    let m = machine();
    let secret = m.root.join("secret.txt");
    std::fs::write(&secret, CANARY).unwrap();
    let log = m.root.join("append.log");
    // Opened without close-on-exec, as a careless library (or the agent's parent) would.
    let fds: Vec<i32> = [
        (&secret, libc::O_RDONLY),
        (&log, libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND),
    ]
    .iter()
    .map(|(p, flags)| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let fd = unsafe { libc::open(c.as_ptr(), *flags, 0o600) };
        assert!(fd > 2);
        fd
    })
    .collect();
    with_home(&m, || async {
        // The view through the spawner and spawned directly, bubblewrap, and no sandbox:
        // every path closes what it did not open.
        let paths = [
            (SandboxMode::Landlock, true),
            (SandboxMode::Landlock, false),
            (SandboxMode::Bwrap, false),
            (SandboxMode::Off, false),
        ];
        for (mode, spawner) in paths {
            let mut o = opts(path);
            o.sandbox = mode;
            o.spawner = spawner && path == Path_::Root;
            let exec = LocalExecutor::new(&m.worktree, o).unwrap();
            let script = format!(
                "ls /proc/self/fd; cat <&{0} 2>&1; cat /proc/self/fd/{0} 2>&1; echo pwned >&{1}; echo pwned > /proc/self/fd/{1}; echo end",
                fds[0], fds[1]
            );
            let out = sh(&exec, &script).await;
            let t = text(&out);
            assert!(t.contains("end"), "{mode:?}: {t}");
            assert!(
                !t.contains(CANARY),
                "{mode:?}: the inherited secret was read:\n{t}"
            );
            let fd_list: Vec<&str> = t
                .lines()
                .take_while(|l| l.trim().parse::<u32>().is_ok())
                .collect();
            assert!(
                fd_list.iter().all(|f| ["0", "1", "2", "3"].contains(f)),
                "{mode:?}: descriptors beyond the standard streams: {fd_list:?}\n{t}"
            );
        }
    });
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "",
        "the append log was written"
    );
}

// Guards 33: a descriptor the agent holds without close-on-exec (a secret file, an append
// log) is not reachable from the command, through the spawner or spawned directly.
#[test]
fn inherited_descriptors_do_not_reach_the_command_as_root() {
    outer(
        "inner_inherited_descriptors_do_not_reach_the_command",
        Path_::Root,
    );
}

// Guards 33 on the unprivileged path.
#[test]
fn inherited_descriptors_do_not_reach_the_command_unprivileged() {
    outer(
        "inner_inherited_descriptors_do_not_reach_the_command",
        Path_::Nobody,
    );
}

// --- loopback inside, nothing outside ----------------------------------------------------

/// A test suite's own server on 127.0.0.1, and a try at the host's listener.
fn loopback_script(host_port: u16) -> String {
    format!(
        r#"python3 - <<'EOF'
import socket, threading
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]
def serve():
    c, _ = srv.accept(); c.sendall(b"pong"); c.close()
threading.Thread(target=serve).start()
c = socket.create_connection(("127.0.0.1", port), timeout=5)
print("inside:", c.recv(4).decode())
try:
    socket.create_connection(("127.0.0.1", {host_port}), timeout=3)
    print("host:reached")
except OSError as e:
    print("host:unreachable", e)
EOF"#
    )
}

#[test]
#[ignore = "run by its outer tests"]
fn inner_loopback_inside_host_loopback_unreachable() {
    let Some(path) = inner_path() else { return };
    let m = machine();
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let port = host.local_addr().unwrap().port();
    with_home(&m, || async {
        let exec = LocalExecutor::new(&m.worktree, opts(path)).unwrap();
        let out = sh(&exec, &loopback_script(port)).await;
        let t = text(&out);
        assert!(
            t.contains("inside: pong"),
            "the command's own loopback failed:\n{t}"
        );
        assert!(t.contains("host:unreachable"), "{t}");
        // The commands of one spawner share a network namespace: what one leaves in it must
        // not reach the next. A daemon listening there dies with its command, no command can
        // take the loopback down (its capabilities are gone) or change a network sysctl
        // (`/proc/sys` is read-only, and outside Landlock's writable paths).
        let out = sh(&exec, LEAVE_A_LISTENER_AND_TAKE_LO_DOWN).await;
        let t = text(&out);
        assert!(t.contains("daemon:listening"), "{t}");
        assert!(t.contains("lo:refused"), "{t}");
        assert!(t.contains("sysctl:refused"), "{t}");
        let out = sh(
            &exec,
            &format!("{}\n{}", FIND_THE_LISTENER, loopback_script(port)),
        )
        .await;
        let t = text(&out);
        assert!(t.contains("daemon:gone"), "{t}");
        assert!(t.contains("inside: pong"), "{t}");
    });
    assert!(host.accept().is_err(), "the host's loopback was reached");
}

/// A daemon listening on 127.0.0.1:7777 left behind, and tries at setting `lo` down and at
/// changing the namespace's local port range (which uid 0 may do without a capability).
const LEAVE_A_LISTENER_AND_TAKE_LO_DOWN: &str = r#"setsid python3 -c '
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 7777)); s.listen(5); time.sleep(60)' >/dev/null 2>&1 &
python3 - <<'EOF'
import fcntl, socket, struct, time
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", 7777), timeout=1).close()
        print("daemon:listening")
        break
    except OSError:
        time.sleep(0.05)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    fcntl.ioctl(s, 0x8914, struct.pack("16sh", b"lo", 0))  # SIOCSIFFLAGS: lo down
    print("lo:down")
except OSError as e:
    print("lo:refused", e)
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range", "w") as f:
        f.write("40000 40001")
    print("sysctl:written")
except OSError as e:
    print("sysctl:refused", e)
EOF"#;

/// Whether the daemon of [`LEAVE_A_LISTENER_AND_TAKE_LO_DOWN`] still listens.
const FIND_THE_LISTENER: &str = r#"python3 - <<'EOF'
import socket
try:
    socket.create_connection(("127.0.0.1", 7777), timeout=2).close()
    print("daemon:alive")
except OSError as e:
    print("daemon:gone", e)
EOF"#;

// Guards issue 17 point 7: with the network off a test suite that serves on 127.0.0.1 and
// connects to itself passes (its own network namespace has `lo` up), while the host's
// loopback stays unreachable.
#[test]
fn loopback_inside_host_loopback_unreachable_as_root() {
    outer(
        "inner_loopback_inside_host_loopback_unreachable",
        Path_::Root,
    );
}

// Same on the unprivileged path.
#[test]
fn loopback_inside_host_loopback_unreachable_unprivileged() {
    outer(
        "inner_loopback_inside_host_loopback_unreachable",
        Path_::Nobody,
    );
}

// --- 32: memory, temp space, worktree growth ---------------------------------------------

#[test]
#[ignore = "run by its outer tests"]
fn inner_memory_tmp_and_growth_are_bounded() {
    let Some(path) = inner_path() else { return };
    let m = machine();
    let mut o = opts(path);
    o.limits.memory_bytes = 256 << 20;
    o.limits.tmp_bytes = 32 << 20;
    o.limits.worktree_growth_bytes = 64 << 20;
    with_home(&m, || async {
        let exec = LocalExecutor::new(&m.worktree, o).unwrap();
        // A memory hog: 16 MiB more, touched, until something stops it; past a 256 MiB
        // limit it is killed and reported out of memory on every path (its memory cgroup as
        // root, the executor's watch unprivileged), never left to die of a MemoryError.
        let out = sh(
            &exec,
            "python3 -c 'l = []\nwhile True: l.append(b\"x\" * (16 << 20))' 2>&1; echo rc=$?",
        )
        .await;
        let t = text(&out);
        assert!(!t.contains("MemoryError"), "{t}");
        assert!(
            out.stopped
                .as_deref()
                .is_some_and(|s| s.contains("out of memory")),
            "{out:?}"
        );
        if path == Path_::Nobody {
            assert!(
                out.stopped
                    .as_deref()
                    .is_some_and(|s| s.contains("watched")),
                "{out:?}"
            );
        }
        // /tmp is a bounded tmpfs.
        let out = sh(
            &exec,
            "{ head -c 100M /dev/zero > /tmp/fill; } 2>&1; echo rc=$?; du -m /tmp/fill",
        )
        .await;
        let t = text(&out);
        assert!(t.contains("No space left") && !t.contains("rc=0"), "{t}");
        // No single file past the bound, however it is made.
        let out = sh(
            &exec,
            "fallocate -l 20G big 2>&1; echo rc=$?; du -m big 2>/dev/null",
        )
        .await;
        let t = text(&out);
        assert!(
            (t.contains("File too large") || t.contains("File size limit exceeded"))
                && !t.contains("rc=0"),
            "{t}"
        );
        let big = std::fs::metadata(m.worktree.join("big")).map_or(0, |b| b.blocks() * 512);
        assert!(big <= 64 << 20, "{big}");
        let _ = std::fs::remove_file(m.worktree.join("big"));
        // A burst: eight writers at full speed, each file under the per-file bound. The
        // command is stopped, and what it left passes the bound by at most 256 MiB.
        let req = ExecRequest::shell(
            "for w in 1 2 3 4 5 6 7 8; do ( i=0; while i=$((i+1)); do head -c 8M /dev/zero > w$w-$i || exit; done ) & done; wait; echo finished",
        )
        .timeout(Duration::from_secs(60));
        let out = exec.run(req).await.unwrap();
        assert!(
            out.stopped
                .as_deref()
                .is_some_and(|s| s.contains("worktree grew")),
            "{out:?}"
        );
        assert!(!text(&out).contains("finished"), "{}", text(&out));
        let left = worktree_bytes(&m.worktree);
        eprintln!(
            "burst: {} MiB left past a 64 MiB bound ({path:?})",
            left >> 20
        );
        assert!(left <= (64 + 256) << 20, "{} MiB left", left >> 20);
        // Another writer on the same file system, 160 MiB while a quiet command runs, does
        // not count against the command.
        let others = m.root.join("others");
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let chunk = vec![7u8; 1 << 20];
            let mut f = std::fs::File::create(&others).unwrap();
            for _ in 0..160 {
                f.write_all(&chunk).unwrap();
            }
            f.sync_all().unwrap();
        });
        let out = sh(&exec, "sleep 2; echo quiet-done").await;
        writer.join().unwrap();
        assert!(out.stopped.is_none(), "{out:?}");
        assert!(text(&out).contains("quiet-done"), "{}", text(&out));
        // The agent and the next command are fine.
        let out = sh(&exec, "echo next").await;
        assert_eq!(out.status, Termination::Exited(0), "{}", text(&out));
        assert!(out.stopped.is_none());
    });
}

/// Bytes allocated under `dir`, without following links.
fn worktree_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let Ok(m) = e.metadata() else { continue };
        if m.is_dir() {
            total += worktree_bytes(&e.path());
        } else {
            total += m.blocks() * 512;
        }
    }
    total
}

// Guards 32: a memory hog past the limit is killed and reported out of memory (by its memory
// cgroup as root, by the executor's watch unprivileged), writing past the tmpfs size is
// refused, no file passes the growth bound, a burst of writers is stopped within 256 MiB of
// it while another writer's growth does not count; the next command runs.
#[test]
fn memory_tmp_and_growth_are_bounded_as_root() {
    outer("inner_memory_tmp_and_growth_are_bounded", Path_::Root);
}

// Same on the unprivileged path.
#[test]
fn memory_tmp_and_growth_are_bounded_unprivileged() {
    outer("inner_memory_tmp_and_growth_are_bounded", Path_::Nobody);
}

// --- 34 and the report -------------------------------------------------------------------

// Guards 34: the report names the view, namespaces, Landlock ABI, limits and fallbacks, as
// JSON for the audit log and as one line for the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_describes_the_sandbox_in_force() {
    let m = machine();
    let exec = LocalExecutor::new(&m.worktree, opts(Path_::Root)).unwrap();
    let r = exec.sandbox();
    let json = serde_json::to_value(r).unwrap();
    for k in [
        "view",
        "namespaces",
        "limits",
        "fallbacks",
        "toolchains",
        "landlock_abi",
    ] {
        assert!(json.get(k).is_some(), "{k} missing: {json}");
    }
    assert!(
        r.view.iter().any(|l| l.starts_with("/usr read-only")),
        "{:?}",
        r.view
    );
    assert!(
        r.view.iter().any(|l| l.contains("/etc/shadow hidden")),
        "{:?}",
        r.view
    );
    assert!(r.namespaces.contains(&"pid".to_string()));
    let line = r.summary();
    assert!(line.starts_with("landlock: view ("), "{line}");
    assert!(
        line.contains("network off") && line.contains("memory 8192 MiB (cgroup v"),
        "{line}"
    );
    assert!(!line.contains('\n'));
}

// Guards the view's toolchains: `cargo` from the agent's PATH (rustup's proxies and their
// homes bound read-only) builds and tests a crate inside it, with the network off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toolchains_on_path_work_in_the_view() {
    let m = machine();
    let exec = LocalExecutor::new(&m.worktree, opts(Path_::Root)).unwrap();
    let out = sh(
        &exec,
        "cargo --version && rustc --version && python3 --version && git --version",
    )
    .await;
    assert_eq!(out.status, Termination::Exited(0), "{}", text(&out));
    let mut f = std::fs::File::create(m.worktree.join("x.txt")).unwrap();
    f.write_all(b"x").unwrap();
}

// --- fail closed ---------------------------------------------------------------------------

#[test]
#[ignore = "run by its outer tests"]
fn inner_without_user_namespaces_nothing_runs() {
    let Some(_) = inner_path() else { return };
    let m = machine();
    with_home(&m, || async {
        for mode in [SandboxMode::Landlock, SandboxMode::Auto] {
            let mut o = opts(Path_::NoUserns);
            o.sandbox = mode;
            let err = LocalExecutor::new(&m.worktree, o).expect_err("a sandbox without a view");
            let msg = err.to_string();
            assert!(
                msg.contains("create a user namespace") && msg.contains("max_user_namespaces=0"),
                "{mode:?}: the cause is not named: {msg}"
            );
            assert!(
                msg.contains("sandbox.mode = \"off\""),
                "{mode:?}: no way out named: {msg}"
            );
        }
    });
}

// Guards issue 17's last point: where the view cannot be had (no user namespaces), nothing
// runs, and the error names the cause and the fix.
#[test]
fn without_user_namespaces_nothing_runs_and_the_error_names_the_fix() {
    outer(
        "inner_without_user_namespaces_nothing_runs",
        Path_::NoUserns,
    );
}

// --- issue 38: a set-up output never carries a bind out of its entry ----------------------

/// A set-up cache entry under the machine's state directory whose `outputs/node_modules` is
/// a real directory holding one file.
fn entry_with_output(m: &Machine) -> PathBuf {
    let entry = m.root.join("state/setup/repo/k1");
    std::fs::create_dir_all(entry.join("outputs/node_modules")).unwrap();
    std::fs::write(entry.join("outputs/node_modules/ok.js"), "ok\n").unwrap();
    entry
}

fn output_bind(entry: &Path) -> git_agent::exec::ProjectBind {
    git_agent::exec::ProjectBind {
        base: entry.to_path_buf(),
        src: "outputs/node_modules".into(),
        dest: "node_modules".into(),
    }
}

#[test]
#[ignore = "run by its outer tests"]
fn inner_a_set_up_output_link_is_never_followed() {
    let Some(path) = inner_path() else { return };
    let m = machine();
    let entry = entry_with_output(&m);
    with_home(&m, || async {
        // A link left where an output was (a dependency's `postinstall`: `node_modules -> /`),
        // at the end or on the way, is refused when the executor is made.
        let out = entry.join("outputs/node_modules");
        std::fs::rename(&out, entry.join("outputs/real")).unwrap();
        for (link, target) in [
            ("outputs/node_modules", "/"),
            ("outputs/node_modules", "../../../../.."),
        ] {
            std::os::unix::fs::symlink(target, entry.join(link)).unwrap();
            let mut o = opts(path);
            o.project_binds.push(output_bind(&entry));
            let Err(err) = LocalExecutor::new(&m.worktree, o) else {
                panic!("a link at {link} -> {target} was accepted")
            };
            assert!(err.to_string().contains("symbolic link"), "{err}");
            std::fs::remove_file(entry.join(link)).unwrap();
        }
        std::fs::rename(entry.join("outputs/real"), &out).unwrap();
        // Checked and found a directory, then swapped for a link before the command runs:
        // the helper reaches the source without following links, so the command fails
        // rather than see the host.
        let mut o = opts(path);
        o.project_binds.push(output_bind(&entry));
        let exec = LocalExecutor::new(&m.worktree, o).unwrap();
        let t = text(&sh(&exec, "cat node_modules/ok.js").await);
        assert!(t.contains("ok"), "the output is bound: {t}");
        std::fs::rename(&out, entry.join("outputs/was")).unwrap();
        // Relative, as a hostile set-up would write it: resolved while the helper builds the
        // view, it climbs to the helper's root and down into the host's (`/oldroot`).
        let up = "../".repeat(entry.join("outputs").components().count());
        let home = m.home.strip_prefix("/").unwrap();
        std::os::unix::fs::symlink(format!("{up}oldroot/{}", home.display()), &out).unwrap();
        let res = exec
            .run(ExecRequest::shell(
                "cat node_modules/.git-credentials; ls -a node_modules",
            ))
            .await;
        let t = match res {
            Ok(o) => text(&o),
            Err(e) => e.to_string(),
        };
        assert!(
            !t.contains(CANARY),
            "a canary leaked through the output:\n{t}"
        );
        assert!(!t.contains(".ssh"), "the host's home was bound:\n{t}");
    });
}

// Guards issue 38 (1) on the root path.
#[test]
fn a_set_up_output_link_is_never_followed_as_root() {
    outer("inner_a_set_up_output_link_is_never_followed", Path_::Root);
}

// Guards issue 38 (1) on the unprivileged path.
#[test]
fn a_set_up_output_link_is_never_followed_unprivileged() {
    outer(
        "inner_a_set_up_output_link_is_never_followed",
        Path_::Nobody,
    );
}
