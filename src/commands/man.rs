//! `nsys-perfetto man [--dir DIR]`: print the man page, or write one per command.

use crate::outcome::Outcome;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct ManArgs {
    /// Write nsys-perfetto.1 and a page per subcommand (nsys-perfetto-stats.1...) into DIR.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `cli` describes the whole command line (the pages cover every command).
pub fn run(args: &ManArgs, cli: fn() -> clap::Command) -> Result<Outcome> {
    let cmd = cli();
    match &args.dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).and_then(|_| clap_mangen::generate_to(cmd, dir))?;
            nsys_perfetto_model::say!("man pages written to {}", dir.display());
        }
        None => {
            let mut out = Vec::new();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .and_then(|_| std::io::Write::write_all(&mut std::io::stdout(), &out))?;
        }
    }
    Ok(Outcome::Done)
}
