//! bench-exec: how much latency the sandbox adds to spawning a command.
//!
//! Spawns and waits for `true` N times (default 200) each way, in one process: a plain
//! `std::process::Command` (the peer), and the executor with the sandbox off, with the view
//! (the sandbox helper exec'd fresh: namespaces, a pivot_root'ed view, Landlock, seccomp),
//! the same without the spawner (each command joins a fresh pids cgroup), with bubblewrap,
//! and bubblewrap's own command line building a comparable view (`bwrap --ro-bind /usr …
//! --proc --dev --tmpfs … --unshare-all true`) spawned plainly. Reports medians and the added
//! latency over the peer. Target: at most 8 ms added for the view.
//!
//! Every sample is measured cold-comparably: it is preceded by an idle gap (default 60 ms,
//! longer than the RCU grace periods a cgroup move waits for, so no sample profits from a
//! move just made by another one), and the order of the configurations rotates each round.
//!
//! `cargo run --release --features bench --bin bench-exec [-- ITERATIONS [GAP_MS]]`
#![allow(clippy::disallowed_methods)] // a benchmark prints its figures; nothing secret

use std::io::Write;
use std::time::{Duration, Instant};

use git_agent::config::{NetworkMode, SandboxMode};
use git_agent::exec::{ExecOptions, ExecRequest, Executor, LocalExecutor};

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200);
    let gap = Duration::from_millis(
        std::env::args()
            .nth(2)
            .map(|s| s.parse())
            .transpose()?
            .unwrap_or(60),
    );
    let dir = tempfile::tempdir()?;
    let wt = dir.path().join("wt");
    std::fs::create_dir(&wt)?;
    let st = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&wt)
        .status()?;
    if !st.success() {
        return Err("git init failed".into());
    }
    std::fs::write(wt.join("README"), "bench\n")?;

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mk = |mode: SandboxMode, spawner: bool| {
        LocalExecutor::new(
            &wt,
            ExecOptions {
                sandbox: mode,
                network: NetworkMode::Off,
                spawner,
                ..ExecOptions::default()
            },
        )
    };
    let mut variants: Vec<(&str, LocalExecutor)> = vec![
        ("executor, sandbox off", mk(SandboxMode::Off, true)?),
        ("executor, view (helper)", mk(SandboxMode::Landlock, true)?),
        (
            "  same, cgroup move per command",
            mk(SandboxMode::Landlock, false)?,
        ),
    ];
    match mk(SandboxMode::Bwrap, true) {
        Ok(e) => variants.push(("executor, bwrap", e)),
        Err(e) => {
            writeln!(std::io::stderr(), "bwrap variant skipped: {e}")?;
        }
    }

    // A comparable view from bubblewrap's own command line, spawned plainly.
    let mut bwrap_view: Vec<String> = Vec::new();
    if let Some(bwrap) = which("bwrap") {
        bwrap_view.push(bwrap);
        for a in [
            "--unshare-all",
            "--die-with-parent",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ] {
            bwrap_view.push(a.into());
        }
        for d in ["/usr", "/etc"] {
            bwrap_view.extend(["--ro-bind".into(), d.into(), d.into()]);
        }
        for d in ["/bin", "/sbin", "/lib", "/lib64"] {
            let p = std::path::Path::new(d);
            match std::fs::read_link(p) {
                Ok(t) => bwrap_view.extend(["--symlink".into(), t.display().to_string(), d.into()]),
                Err(_) if p.is_dir() => bwrap_view.extend(["--ro-bind".into(), d.into(), d.into()]),
                Err(_) => {}
            }
        }
        for d in ["/tmp", "/home/sandbox"] {
            bwrap_view.extend(["--tmpfs".into(), d.into()]);
        }
        let w = wt.display().to_string();
        bwrap_view.extend(["--bind".into(), w.clone(), w.clone(), "--chdir".into(), w]);
        bwrap_view.push("true".into());
    }
    // Slot 0 is the plain spawn, 1.. the executors, then bwrap's own view.
    let slots = variants.len() + 1 + usize::from(!bwrap_view.is_empty());
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); slots];
    // Warm-up: page cache, binaries, first namespace.
    for (_, e) in &variants {
        rt.block_on(e.run(ExecRequest::argv(["true"])))?;
    }
    for round in 0..n {
        for k in 0..slots {
            let slot = (round + k) % slots;
            std::thread::sleep(gap);
            let t = Instant::now();
            if slot == 0 {
                let s = std::process::Command::new("true").status()?;
                times[0].push(t.elapsed());
                if !s.success() {
                    return Err("plain true failed".into());
                }
            } else if slot > variants.len() {
                let s = std::process::Command::new(&bwrap_view[0])
                    .args(&bwrap_view[1..])
                    .status()?;
                times[slot].push(t.elapsed());
                if !s.success() {
                    return Err("bwrap's view failed".into());
                }
            } else {
                let out = rt.block_on(variants[slot - 1].1.run(ExecRequest::argv(["true"])))?;
                times[slot].push(t.elapsed());
                if !out.status.success() {
                    return Err(format!("sandboxed true failed: {:?}", out.status).into());
                }
            }
        }
    }
    let mut plain = std::mem::take(&mut times[0]);
    let peer = median(&mut plain);
    let mut o = std::io::stdout().lock();
    writeln!(
        o,
        "bench-exec: spawn and wait for `true`, medians of {n}, each sample after {} ms idle, order rotated",
        gap.as_millis()
    )?;
    writeln!(
        o,
        "{:<34} {:>9.3} ms",
        "plain std::process::Command",
        ms(peer)
    )?;
    let mut names: Vec<&str> = variants.iter().map(|(n, _)| *n).collect();
    if !bwrap_view.is_empty() {
        names.push("bwrap CLI, comparable view");
    }
    for (name, t) in names.iter().zip(times.iter_mut().skip(1)) {
        let m = median(t);
        writeln!(
            o,
            "{:<34} {:>9.3} ms   added {:>7.3} ms   ratio {:>5.2}x",
            name,
            ms(m),
            ms(m.saturating_sub(peer)),
            m.as_secs_f64() / peer.as_secs_f64()
        )?;
    }
    writeln!(o, "target: the view added <= 8 ms")?;
    Ok(())
}

fn which(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}
