//! The command line: `nsys-perfetto INPUT...` converts; subcommands cover the workflows.

use crate::commands::{self, Command, convert::ConvertArgs};
use crate::outcome::{Outcome, Usage};
use clap::{CommandFactory, Parser};
use std::process::ExitCode;

/// Convert NVIDIA Nsight Systems profiles into Perfetto traces (ui.perfetto.dev).
#[derive(Parser, Debug)]
#[command(
    version,
    about,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub convert: ConvertArgs,
}

pub fn main() -> ExitCode {
    // `--version` alone also lists the nsys installs found (each probed with a timeout); the
    // probe runs only then, not on every command.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.len() == 2 && (args[1] == "--version" || args[1] == "-V") {
        print!(
            "{}",
            crate::about::long_version(crate::about::PROBE_TIMEOUT)
        );
        return ExitCode::SUCCESS;
    }
    if args.len() == 1 {
        nsys_perfetto_model::say_part!("{}", bare_usage());
        return ExitCode::from(2);
    }
    if asks_types_help(&args[1..]) {
        nsys_perfetto_model::term::out(format_args!(
            "{}",
            nsys_perfetto_model::category::EventType::help()
        ));
        return ExitCode::SUCCESS;
    }
    let cli = {
        use clap::{CommandFactory, FromArgMatches};
        let matches = short_abouts(Cli::command()).get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    };
    // Ctrl-C and SIGTERM stop child processes and remove temporaries (see `cleanup`).
    nsys_perfetto_model::cleanup::install();
    exit_code(match &cli.command {
        None => commands::convert::run(&cli.convert),
        Some(command) => commands::run(command, Cli::command),
    })
}

/// The one mapping of how a command ended to the process's exit code; an error is said here.
fn exit_code(ended: anyhow::Result<Outcome>) -> ExitCode {
    match ended {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::SomeFailed) => ExitCode::FAILURE,
        Ok(Outcome::Interrupted) => ExitCode::from(130),
        Ok(Outcome::Status(code)) => ExitCode::from(code),
        Err(e) => {
            nsys_perfetto_model::say!("error: {e:#}");
            if e.is::<Usage>() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Each subcommand listed by its first clause (`--help`, a bare call); its own `--help` keeps
/// the whole description.
pub fn short_abouts(mut cmd: clap::Command) -> clap::Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, |c| {
            let Some(about) = c.get_about().map(|a| a.to_string()) else {
                return c;
            };
            let long = c
                .get_long_about()
                .map_or_else(|| about.clone(), |l| l.to_string());
            c.about(first_clause(&about)).long_about(long)
        });
    }
    cmd
}

/// What a bare `nsys-perfetto` prints: the usage and the subcommands, one line each.
pub fn bare_usage() -> String {
    use clap::CommandFactory;
    let cmd = short_abouts(Cli::command());
    let mut s = format!(
        "nsys-perfetto {}: convert NVIDIA Nsight Systems profiles into Perfetto traces\n\n\
         Usage: nsys-perfetto [OPTIONS] <INPUT>...   convert reports (.nsys-rep, .qdrep) or exports\n                                                    (.sqlite, .arrows, _arwdir, _pqtdir)\n       \
         nsys-perfetto <COMMAND> [ARGS]\n\nCommands:\n",
        env!("CARGO_PKG_VERSION")
    );
    let subs: Vec<(String, String)> = cmd
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| {
            let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
            (c.get_name().to_string(), about)
        })
        .collect();
    let width = subs.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    for (name, about) in subs {
        s.push_str(&format!("  {name:width$}  {about}\n"));
    }
    s.push_str(
        "\nnsys-perfetto --help lists the options; nsys-perfetto COMMAND --help, a command's.\n",
    );
    s
}

/// A command's description cut to its first clause, without parentheses: one short line.
fn first_clause(about: &str) -> String {
    let mut plain = String::new();
    let mut depth = 0usize;
    for c in about.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let plain = plain.split_whitespace().collect::<Vec<_>>().join(" ");
    let plain = plain.replace(" ,", ",");
    let end = [": ", ". ", "; "]
        .iter()
        .filter_map(|sep| plain.find(sep))
        .min()
        .unwrap_or(plain.len());
    let mut clause = plain[..end].trim_end_matches('.');
    // Long ones lose their trailing list items.
    while clause.len() > 80 {
        match clause.rfind(", ") {
            Some(i) => clause = &clause[..i],
            None => break,
        }
    }
    clause.to_string()
}

/// Whether the command line asks for the list of event types (`--types help`, before any `--`).
fn asks_types_help(args: &[std::ffi::OsString]) -> bool {
    let mut prev_types = false;
    for a in args {
        if a == "--" {
            return false;
        }
        if (prev_types && a == "help") || a == "--types=help" {
            return true;
        }
        prev_types = a == "--types";
    }
    false
}
