//! The `git-agent` binary: parse the command line, run it, map the outcome to an exit code.

fn main() -> std::process::ExitCode {
    git_agent::cli::main()
}
