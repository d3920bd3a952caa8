//! The `git-agent` binary: parse the command line, run it, map the outcome to an exit code.

/// mimalloc: the webhook server allocates request buffers on one thread and frees them on
/// another (the store's writer); glibc's malloc paid ~14% of the server's CPU for that in
/// bench-webhook.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    git_agent::cli::main()
}
