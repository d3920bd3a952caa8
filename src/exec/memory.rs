//! A command's memory where no cgroup bounds it: the unprivileged path (issue 41 point 3).
//!
//! With a memory cgroup the kernel's OOM killer stops a command past its limit and the
//! executor reports it. Without one, `RLIMIT_DATA` alone would make the hog's allocation fail
//! and the program die of its own `MemoryError` — which the model reads as a bug in the code.
//! Here the executor watches instead: every [`POLL`] it sums the memory of the command's
//! processes (the tree under its init, which every process of its pid namespace descends
//! from) — per process its private writable memory (`VmData`, what `RLIMIT_DATA` counts) and
//! its shared memory in use (`RssShmem`) — and past the limit the command is killed and
//! reported out of memory, as the cgroup path reports it. `RLIMIT_DATA` stays as a backstop
//! at [`BACKSTOP`] times the limit, for a single allocation larger than that.
//!
//! It must not kill anything itself (the executor does) nor look outside the command's tree.

use std::time::Duration;

/// How often the command's memory is read.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// `RLIMIT_DATA` per process, as a multiple of the limit the watch enforces.
pub(crate) const BACKSTOP: u64 = 4;

/// Resolves with the memory seen once the processes under `root` (a host pid) use more than
/// `limit` bytes together; never when `root` cannot be read.
pub(crate) async fn watch(root: i32, limit: u64) -> u64 {
    loop {
        tokio::time::sleep(POLL).await;
        let Some(used) = tree_memory(root) else {
            return std::future::pending().await;
        };
        if used > limit {
            return used;
        }
    }
}

/// The memory of `root` and its descendants, bytes; `None` when `root` is gone.
fn tree_memory(root: i32) -> Option<u64> {
    let mut total = process_memory(root)?;
    let mut stack = children(root);
    let mut seen = 0usize;
    while let Some(pid) = stack.pop() {
        // A pid namespace holds at most RLIMIT_NPROC processes; a loop in what /proc says
        // (a pid reused mid-walk) ends here.
        seen += 1;
        if seen > 1 << 16 {
            break;
        }
        total = total.saturating_add(process_memory(pid).unwrap_or(0));
        stack.extend(children(pid));
    }
    Some(total)
}

/// The children of every thread of `pid`.
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// `VmData` + `RssShmem` of `pid`, bytes.
fn process_memory(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(status_memory(&status))
}

fn status_memory(status: &str) -> u64 {
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    (kib("VmData:") + kib("RssShmem:")) * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_shared_memory_count() {
        let status = "Name:\tpython3\nVmPeak:\t 9000 kB\nVmData:\t  2048 kB\nVmRSS:\t 500 kB\nRssShmem:\t  1024 kB\n";
        assert_eq!(status_memory(status), 3 << 20);
        assert_eq!(status_memory("Name:\tkthread\n"), 0);
    }

    #[test]
    fn the_tree_of_this_process_is_read() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        assert!(children(me).contains(&(child.id() as i32)));
        let sleeping = child.id() as i32;
        // Read once it has exec'd `sleep` (mid-exec its memory reads as none).
        // Until then it may read as none, or as the spawning process's memory.
        let mut mem = 0;
        for _ in 0..200 {
            let comm = std::fs::read_to_string(format!("/proc/{sleeping}/comm"));
            let now = process_memory(sleeping).unwrap_or(0);
            if comm.is_ok_and(|c| c.trim() == "sleep") && now > 0 && now == mem {
                break;
            }
            mem = now;
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(mem > 0);
        assert_eq!(tree_memory(sleeping), Some(mem));
        assert!(tree_memory(i32::MAX).is_none());
        let _ = child.kill();
        let _ = child.wait();
    }
}
