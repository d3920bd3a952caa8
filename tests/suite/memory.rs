//! A command's memory limit through a memory cgroup (issue 17, SECURITY.md 32): a command
//! past its limit is killed by the kernel's OOM killer inside its own cgroup and reported as
//! such; the agent and the next command are unaffected.
//!
//! These run as root on a machine with a writable memory controller (cgroup v2 with `memory`
//! delegable, or the v1 `memory` hierarchy), as CI does. Where there is none they fail, naming
//! what is missing: nothing here is skipped.

use std::time::Duration;

use git_agent::config::{NetworkMode, SandboxMode};
use git_agent::exec::{
    ExecOptions, ExecOutput, ExecRequest, Executor, LocalExecutor, MemoryMechanism, Termination,
};

fn worktree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(dir.path().join("README"), "hello\n").unwrap();
    dir
}

fn opts(mode: SandboxMode, spawner: bool) -> ExecOptions {
    let mut o = ExecOptions {
        sandbox: mode,
        network: NetworkMode::Off,
        timeout: Duration::from_secs(120),
        spawner,
        ..ExecOptions::default()
    };
    o.limits.memory_bytes = 128 << 20;
    o
}

fn text(out: &ExecOutput) -> String {
    format!(
        "{}{}",
        out.stdout.to_text_lossy(),
        out.stderr.to_text_lossy()
    )
}

/// The executor, which must have a memory cgroup here.
fn executor(wt: &std::path::Path, o: ExecOptions) -> LocalExecutor {
    let exec = LocalExecutor::new(wt, o).unwrap();
    let r = exec.sandbox();
    assert!(
        matches!(
            r.memory,
            MemoryMechanism::CgroupV1 | MemoryMechanism::CgroupV2
        ),
        "no memory cgroup on this machine (these tests need root and a writable memory \
         controller in /sys/fs/cgroup): memory bounded by {:?}; fallbacks: {:?}",
        r.memory,
        r.fallbacks
    );
    // No fallback at all: the memory cgroup, and the spawner where one was asked for.
    assert!(r.fallbacks.is_empty(), "{:?}", r.fallbacks);
    assert!(
        r.summary().contains("memory 128 MiB (cgroup v"),
        "{}",
        r.summary()
    );
    exec
}

/// A hog touching 1 GiB past a 128 MiB limit is OOM-killed, and said to be; the shell that
/// ran it lives on and reports the kill; the next command runs normally and may use memory
/// below the limit.
async fn hog_is_killed_and_reported(exec: &LocalExecutor) {
    let out = exec
        .run(ExecRequest::shell(
            "python3 -c \"b = b'x' * (1 << 30); print('allocated', len(b))\"; echo rc=$?",
        ))
        .await
        .unwrap();
    let t = text(&out);
    assert!(!t.contains("allocated"), "{t}");
    // Not a failed allocation (RLIMIT_DATA's MemoryError): a kill.
    assert!(!t.contains("MemoryError"), "{t}");
    // The hog is the OOM killer's choice (`rc=137` from the shell that ran it), unless the
    // spawner looked bigger (it shares the cgroup, and without CAP_SYS_RESOURCE cannot exempt
    // itself): then the whole command died with it. Either way it is reported.
    assert!(t.contains("rc=137") || t.is_empty(), "{t}");
    let why = out.stopped.as_deref().unwrap_or_default();
    assert!(
        why.contains("out of memory") && why.contains("128 MiB") && why.contains("cgroup"),
        "{out:?}"
    );

    let out = exec
        .run(ExecRequest::shell(
            "python3 -c \"b = b'x' * (32 << 20); print('fine', len(b))\"",
        ))
        .await
        .unwrap();
    assert_eq!(out.status, Termination::Exited(0), "{}", text(&out));
    assert!(text(&out).contains("fine 33554432"), "{}", text(&out));
    assert!(out.stopped.is_none(), "{out:?}");
}

// Guards the memory cgroup on the view path with the spawner (the spawner shares the cgroup
// and must not be the OOM killer's choice: the next command goes through it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_is_oom_killed_in_its_cgroup_and_reported() {
    let wt = worktree();
    let exec = executor(wt.path(), opts(SandboxMode::Landlock, true));
    // Forked by the spawner that shares its cgroup, a command is the OOM killer's first choice.
    let out = exec
        .run(ExecRequest::shell("cat /proc/self/oom_score_adj"))
        .await
        .unwrap();
    assert_eq!(text(&out).trim(), "1000", "{out:?}");
    hog_is_killed_and_reported(&exec).await;
    // Twice: a kill counted for the first command is not counted again for a later one.
    hog_is_killed_and_reported(&exec).await;
}

// Same when every command joins fresh cgroups of its own (no spawner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_is_oom_killed_without_the_spawner() {
    let wt = worktree();
    let exec = executor(wt.path(), opts(SandboxMode::Landlock, false));
    hog_is_killed_and_reported(&exec).await;
}

// Several processes of one command share its limit: four 48 MiB processes (192 MiB together,
// each under the old per-process RLIMIT_DATA of 128 MiB) do not all survive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_binds_all_processes_of_a_command_together() {
    let wt = worktree();
    let exec = executor(wt.path(), opts(SandboxMode::Landlock, true));
    let out = exec
        .run(
            ExecRequest::shell(
                "for i in 1 2 3 4; do python3 -c \"import time; b = b'x' * (48 << 20); time.sleep(3); print('kept')\" & done; wait",
            )
            .timeout(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let kept = text(&out).matches("kept").count();
    assert!(kept < 4, "{}", text(&out));
    assert!(
        out.stopped
            .as_deref()
            .is_some_and(|s| s.contains("out of memory")),
        "{out:?}"
    );
}

// Guards the report when the agent is large: its spawner (forked from it, sharing its
// resident set, in the command's memory cgroup) may be the OOM killer's choice where it
// cannot exempt itself; the command's kill is still reported as out of memory, not as a
// failed wait, and the next command runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_hog_is_reported_when_the_agent_is_large() {
    // 512 MiB touched in this process before the spawner is forked from it.
    let ballast = vec![1u8; 512 << 20];
    let wt = worktree();
    let exec = executor(wt.path(), opts(SandboxMode::Landlock, true));
    hog_is_killed_and_reported(&exec).await;
    assert_eq!(
        ballast
            .iter()
            .step_by(4096)
            .map(|b| *b as usize)
            .sum::<usize>(),
        512 << 8
    );
}

// Issue 41 point 4: the spawner is this binary exec'd fresh — one thread, nothing of the
// agent open but its control socket (standard streams on /dev/null) — not a fork of the
// multithreaded agent. It is looked at while it serves a command (so it is surely alive and
// in the command's cgroups, whatever the pool does afterwards), and again once it is idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spawner_is_exec_d_and_holds_nothing_of_the_agent() {
    let wt = worktree();
    // A descriptor the agent holds without close-on-exec, as a careless library would.
    let leaked = std::fs::File::open("/etc/hostname").unwrap();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&leaked);
    // SAFETY: clears close-on-exec on a descriptor this test owns.
    unsafe { libc::fcntl(raw, libc::F_SETFD, 0) };
    let exec = executor(wt.path(), opts(SandboxMode::Landlock, true));
    let report = exec.sandbox();
    let command = ExecRequest::shell(
        "cat /proc/self/cgroup > cgroups.tmp && mv cgroups.tmp cgroups; \
         while [ ! -e done ]; do sleep 0.02; done",
    );
    let look = async {
        let cgroups = wait_for_file(&wt.path().join("cgroups")).await;
        assert!(cgroups.contains("pids"), "{cgroups}");
        let pid = spawner_in(&cgroups, report);
        // Serving a command, it holds the control socket, the user and network namespaces
        // its commands enter, and the command's pidfd.
        assert_spawner_holds(pid, &["socket:", "user:[", "net:[", "pidfd"]);
        std::fs::write(wt.path().join("done"), "").unwrap();
        pid
    };
    let (out, pid) = tokio::join!(exec.run(command), look);
    let out = out.unwrap();
    assert_eq!(out.status, Termination::Exited(0), "{}", text(&out));
    // Idle, back in the pool: the control socket and the namespaces, and once it has readied
    // the next command's standby helper, that one's socket and status pipe.
    if std::path::Path::new(&format!("/proc/{pid}")).exists() {
        for _ in 0..200 {
            let open = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
            if open == 8 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_spawner_holds(pid, &["socket:", "user:[", "net:[", "socket:", "pipe:"]);
    }
    drop(leaked);
}

/// The file's contents once it exists (the command writes it whole, by a rename).
async fn wait_for_file(path: &std::path::Path) -> String {
    for _ in 0..3000 {
        if let Ok(s) = std::fs::read_to_string(path) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the command never wrote {}", path.display());
}

/// The one spawner of this test process whose cgroups are `cgroups` (the same process runs
/// other tests, each with spawners of its own, in cgroups of their own).
fn spawner_in(cgroups: &str, report: &git_agent::exec::SandboxReport) -> u32 {
    let me = std::process::id();
    let spawners: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            cmdline.starts_with(b"git-agent-spawner\0__git-agent-spawner\0")
                && status.contains(&format!("\nPPid:\t{me}\n"))
                && std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                    .ok()
                    .as_deref()
                    == Some(cgroups)
        })
        .collect();
    assert_eq!(
        spawners.len(),
        1,
        "the spawner serving the command (cgroups {cgroups:?}): {spawners:?}; fallbacks: {:?}",
        report.fallbacks
    );
    spawners[0]
}

/// The spawner `pid` is this binary, one thread, with the standard streams on /dev/null and
/// descriptor 3 onwards exactly `others` (each a prefix or part of the link's target).
fn assert_spawner_holds(pid: u32, others: &[&str]) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .map(|v| v.trim().to_string());
    assert_eq!(threads.as_deref(), Some("1"), "{status}");
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/exe")).unwrap(),
        std::fs::read_link("/proc/self/exe").unwrap()
    );
    let mut fds: Vec<(u32, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .map(|e| {
            let target = std::fs::read_link(e.path()).unwrap_or_default();
            (
                e.file_name().to_string_lossy().parse().unwrap(),
                target.display().to_string(),
            )
        })
        .collect();
    fds.sort();
    assert_eq!(fds.len(), 3 + others.len(), "{fds:?}");
    for (n, target) in &fds[..3] {
        assert!(*n < 3 && target == "/dev/null", "{fds:?}");
    }
    let mut rest: Vec<&str> = fds[3..].iter().map(|(_, t)| t.as_str()).collect();
    for want in others {
        let at = rest.iter().position(|t| t.contains(want));
        assert!(at.is_some(), "no {want} among {fds:?}");
        rest.remove(at.unwrap());
    }
}
