//! `nsys-perfetto completions SHELL`: print a shell completion script.

use crate::outcome::Outcome;
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `cli` describes the whole command line (the completions cover every command).
pub fn run(args: &CompletionsArgs, cli: fn() -> clap::Command) -> Result<Outcome> {
    let mut cmd = cli();
    clap_complete::generate(
        args.shell,
        &mut cmd,
        "nsys-perfetto",
        &mut std::io::stdout(),
    );
    Ok(Outcome::Done)
}
