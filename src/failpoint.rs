//! Test failpoints: kill this process at a named point, as `kill -9` would.
//!
//! The crash tests' way to stop a run, a publish or the webhook receiver exactly there. It
//! sits at the bottom of the crate so every layer may call it without importing a layer
//! above it.

/// Kill this process with SIGKILL at `name` when `GIT_AGENT_TEST_KILL_AT` names it. The
/// variable is read once per process (the receiver passes a point on every delivery); the
/// tests set it when they spawn the process.
#[allow(unsafe_code)]
pub(crate) fn failpoint(name: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| std::env::var("GIT_AGENT_TEST_KILL_AT").ok());
    if at.as_deref() == Some(name) {
        // SAFETY: getpid and kill are async-signal-safe libc calls with valid arguments.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}
