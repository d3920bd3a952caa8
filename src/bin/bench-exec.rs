//! bench-exec: how much latency the sandbox adds to spawning a command.
//!
//! Runs `true` 200 times each way, interleaved, in one process: a plain
//! `std::process::Command` spawn-and-wait (the peer), and the executor with the sandbox off,
//! with Landlock + seccomp + namespaces, and with bubblewrap when installed. Reports medians
//! and the added latency over the peer. Target: at most 5 ms added for the sandboxed spawn.
//!
//! `cargo run --release --bin bench-exec [-- ITERATIONS]`

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
    let mk = |mode: SandboxMode| {
        LocalExecutor::new(
            &wt,
            ExecOptions {
                sandbox: mode,
                network: NetworkMode::Off,
                ..ExecOptions::default()
            },
        )
    };
    let mut variants: Vec<(&str, LocalExecutor)> = vec![
        ("executor, sandbox off", mk(SandboxMode::Off)?),
        ("executor, landlock+seccomp+ns", mk(SandboxMode::Landlock)?),
    ];
    match mk(SandboxMode::Bwrap) {
        Ok(e) => variants.push(("executor, bwrap", e)),
        Err(e) => {
            writeln!(std::io::stderr(), "bwrap variant skipped: {e}")?;
        }
    }

    let mut plain = Vec::with_capacity(n);
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(n); variants.len()];
    // Warm-up: page cache, first cgroup, first namespace.
    for (_, e) in &variants {
        rt.block_on(e.run(ExecRequest::argv(["true"])))?;
    }
    for _ in 0..n {
        let t = Instant::now();
        let s = std::process::Command::new("true").status()?;
        plain.push(t.elapsed());
        if !s.success() {
            return Err("plain true failed".into());
        }
        for (i, (_, e)) in variants.iter().enumerate() {
            let t = Instant::now();
            let out = rt.block_on(e.run(ExecRequest::argv(["true"])))?;
            times[i].push(t.elapsed());
            if !out.status.success() {
                return Err(format!("sandboxed true failed: {:?}", out.status).into());
            }
        }
    }
    let peer = median(&mut plain);
    let mut o = std::io::stdout().lock();
    writeln!(
        o,
        "bench-exec: spawn and wait for `true`, medians of {n}, interleaved"
    )?;
    writeln!(
        o,
        "{:<34} {:>9.3} ms",
        "plain std::process::Command",
        ms(peer)
    )?;
    for ((name, _), t) in variants.iter().zip(times.iter_mut()) {
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
    writeln!(o, "target: landlock added <= 5 ms")?;
    Ok(())
}
