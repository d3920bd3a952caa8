//! `git agent man`: the manual pages, generated from the command line's own definition.
//!
//! `git agent --help` is turned by git into `git help agent`, which opens the manual page
//! `git-agent(1)`; without one installed, git says "No manual entry for git-agent". The pages
//! come from the same clap definition as `-h`, so they cannot drift from the flags.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

/// Arguments of `git agent man`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Write every page (`git-agent.1` and one per command, `git-agent-fix.1`, …) into DIR
    /// (e.g. `~/.local/share/man/man1`) instead of printing `git-agent.1`.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The command line as the pages describe it: without clap's `help` subcommand, which has no
/// page of its own (`generate_to` leaves it out too).
fn command() -> clap::Command {
    use clap::CommandFactory as _;
    super::Cli::command().disable_help_subcommand(true)
}

/// `git agent man`: print `git-agent(1)`, or write all the pages into `--dir`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    if let Some(dir) = args.dir {
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        clap_mangen::generate_to(command(), &dir)
            .with_context(|| format!("cannot write the manual pages to {}", dir.display()))?;
        return Ok(super::exit::SUCCEEDED);
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(command()).render(&mut page)?;
    super::output::stdout(&super::output::process_redactor()?).write_all(&page)?;
    Ok(super::exit::SUCCEEDED)
}
