//! The command line: clap commands, terminal output and exit codes.
//!
//! This is the only module that prints. Everything below it returns values or emits
//! `tracing` events; `cli` turns them into text for a person or JSON for a program. Every
//! byte it writes goes through [`output`], which redacts secrets.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit codes of DESIGN.md.
pub mod exit {
    /// The run succeeded.
    pub const SUCCEEDED: u8 = 0;
    /// The run failed (tests still failing).
    pub const FAILED: u8 = 1;
    /// Usage or configuration error.
    pub const USAGE: u8 = 2;
    /// A budget was exhausted.
    pub const BUDGET: u8 = 3;
    /// The run awaits approval.
    pub const AWAITING_APPROVAL: u8 = 4;
    /// Refused by policy.
    pub const POLICY: u8 = 5;
    /// The project's tests could not run at all before any change (the run's
    /// `environment_failed`): set-up or the test command needs fixing, not the code.
    pub const ENVIRONMENT: u8 = 6;
    /// A fault of git-agent itself, not of the request, the configuration or the
    /// environment: its own state could not be read or written (run directory, audit log,
    /// worktree), a command could not be started or waited for, or it panicked. Worth a bug
    /// report with the log.
    pub const INTERNAL: u8 = 7;
}

/// The exit code of an error: [`exit::INTERNAL`] when a cause in its chain is a fault of the
/// harness itself, else [`exit::USAGE`] (a request, configuration or environment the user can
/// fix: a missing secret, a repository that loosens the policy, a sandbox this machine cannot
/// give, a model that cannot be reached).
fn error_exit_code(e: &anyhow::Error) -> u8 {
    use crate::{audit, exec, run, workspace};
    for cause in e.chain() {
        if let Some(e) = cause.downcast_ref::<run::Error>() {
            return if e.is_internal() {
                exit::INTERNAL
            } else {
                exit::USAGE
            };
        }
        let internal = match (
            cause.downcast_ref::<workspace::Error>(),
            cause.downcast_ref::<exec::Error>(),
        ) {
            (Some(e), _) => Some(e.is_internal()),
            (_, Some(e)) => Some(e.is_internal()),
            _ => None,
        };
        if let Some(internal) = internal {
            return if internal {
                exit::INTERNAL
            } else {
                exit::USAGE
            };
        }
        if cause.downcast_ref::<audit::chain::Error>().is_some() {
            return exit::INTERNAL;
        }
    }
    exit::USAGE
}

/// git-agent: turns a request into a branch of verified commits and a pull request.
#[derive(Debug, Parser)]
#[command(name = "git-agent", bin_name = "git agent", version, about, long_about = None)]
pub struct Cli {
    /// Log filter (also `GIT_AGENT_LOG`), e.g. `debug` or `git_agent=trace`.
    #[arg(long, global = true, env = "GIT_AGENT_LOG", default_value = "warn")]
    pub log: String,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands. Each appears here when it works end to end.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the resolved configuration and where each value came from.
    Config(config_cmd::Args),
    /// List runs, or show one run's state.
    Status(runs_cmd::StatusArgs),
    /// Print the pull request description of a run.
    Show(runs_cmd::RunArg),
    /// Print the audit trail of a run.
    Log(runs_cmd::RunArg),
    /// Audit-log tools.
    #[command(subcommand)]
    Audit(runs_cmd::AuditCommand),
    /// Print the effective permission policy; `--explain` says where each rule came from.
    Policy(policy_cmd::Args),
    /// Turn a request into a branch of verified commits and a pull request.
    Fix(fix_cmd::FixArgs),
    /// Make a plan for a request and stop (read-only).
    Plan(fix_cmd::FixArgs),
    /// Continue a stopped run (approving its pending request with --approve).
    Resume(fix_cmd::ResumeArgs),
    /// Run the whole loop on a sample repository with a scripted model.
    Demo(demo_cmd::Args),
    /// Print the project map: the most relevant files and their key signatures.
    Map(map_cmd::Args),
    /// Rank the files most relevant to a goal, issue text or CI log.
    Locate(locate_cmd::Args),
    /// Run inside GitHub Actions: the event becomes a run, a branch and a draft PR.
    Action(action_cmd::ActionArgs),
    /// Run the webhook bot: receive GitHub App deliveries, queue them, run them.
    Serve(serve_cmd::Args),
    /// Explain the sandbox a command gets here (`--explain`).
    Sandbox(doctor_cmd::SandboxArgs),
    /// Check what this machine gives a run: the sandbox first.
    Doctor(doctor_cmd::DoctorArgs),
    /// Remove old pooled worktrees and those of finished runs (`--older-than`, `--max-size`).
    Gc(gc_cmd::Args),
    /// Print the manual page, or write every page with `--dir` (`git agent --help` opens it
    /// once installed: `git agent man --dir ~/.local/share/man/man1`).
    Man(man_cmd::Args),
}

mod action_cmd;
mod config_cmd;
pub mod context;
mod demo_cmd;
mod doctor_cmd;
mod fix_cmd;
mod gc_cmd;
mod locate_cmd;
mod man_cmd;
mod map_cmd;
mod output;
mod policy_cmd;
mod runs_cmd;
mod serve_cmd;

/// Parse the command line, run it and map the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // `serve` sets up its own logging (it has a JSON format).
    if !matches!(cli.command, Command::Serve(_)) {
        init_tracing(&cli.log);
    }
    // A panic is a fault of git-agent: exit INTERNAL, with its message redacted like every
    // other line we print.
    std::panic::set_hook(Box::new(|info| {
        let _ = output::warn(format_args!(
            "internal error (please report it with the log): {info}"
        ));
    }));
    let command = cli.command;
    let log = cli.log;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dispatch(command, &log)));
    let result = match result {
        Ok(r) => r,
        Err(_) => return ExitCode::from(exit::INTERNAL),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // An error may quote a command line, a URL or a model's words: redacted too.
            let _ = output::warn(format_args!("error: {e:#}"));
            ExitCode::from(error_exit_code(&e))
        }
    }
}

/// Run one command.
fn dispatch(command: Command, log: &str) -> anyhow::Result<u8> {
    match command {
        Command::Config(args) => config_cmd::run(args),
        Command::Status(args) => runs_cmd::status(args),
        Command::Show(args) => runs_cmd::show(args),
        Command::Log(args) => runs_cmd::log(args),
        Command::Audit(cmd) => runs_cmd::audit(cmd),
        Command::Policy(args) => policy_cmd::run(args),
        Command::Fix(args) => fix_cmd::fix(args, crate::task::Mode::Fix),
        Command::Plan(args) => fix_cmd::fix(args, crate::task::Mode::Plan),
        Command::Resume(args) => fix_cmd::resume(args),
        Command::Demo(args) => demo_cmd::run(args),
        Command::Map(args) => map_cmd::run(args),
        Command::Locate(args) => locate_cmd::run(args),
        Command::Action(args) => action_cmd::run(args),
        Command::Serve(args) => serve_cmd::run(args, log),
        Command::Sandbox(args) => doctor_cmd::sandbox(args),
        Command::Doctor(args) => doctor_cmd::doctor(args),
        Command::Gc(args) => gc_cmd::run(args),
        Command::Man(args) => man_cmd::run(args),
    }
}

fn init_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Without a redactor there is no log line that is safe to write.
    let Ok(redactor) = output::process_redactor() else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(output::LogWriter::new(redactor))
        .try_init();
}
