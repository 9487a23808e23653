//! `nsys-perfetto profile -- COMMAND...`: run a command under `nsys profile` and convert the
//! report ([`crate::report::profile`] runs nsys).

use crate::args::{NsysArgs, SelectArgs};
use crate::convert::Options;
use crate::outcome::{Outcome, usage};
use anyhow::Result;
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleArg {
    /// CPU sampling (perf events)
    Cpu,
    /// No CPU sampling
    None,
}

#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// Base name of the results (NAME.nsys-rep, its export NAME_arwdir or NAME.sqlite,
    /// NAME.pftrace). Default: the command's name in the current directory, numbered if taken.
    #[arg(short, long, value_name = "NAME")]
    pub output: Option<PathBuf>,
    /// APIs to trace (nsys profile --trace), comma-separated, e.g. cuda,nvtx,osrt,cublas.
    #[arg(short, long, value_name = "LIST", default_value = "cuda,nvtx,osrt")]
    pub trace: String,
    /// CPU sampling. Off by default: with it, nsys 2022.4 hangs after the program exits on
    /// some kernels (use --timeout).
    #[arg(short, long, value_enum, default_value = "none")]
    pub sample: SampleArg,
    /// Collect CPU context switches (nsys --cpuctxsw=process-tree; off by default, for the
    /// same reason as --sample).
    #[arg(long)]
    pub cpuctxsw: bool,
    /// Stop nsys, its agent and the program after SECS seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// One more argument for `nsys profile` (repeat), e.g. --nsys-arg=--duration=30.
    #[arg(long = "nsys-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub nsys_args: Vec<std::ffi::OsString>,
    #[command(flatten)]
    pub nsys: NsysArgs,
    /// What to convert from the report (the conversion options: --types, --pid, ...).
    #[command(flatten)]
    pub select: SelectArgs,
    /// Print nothing but errors (nsys's and the program's output are shown only on failure).
    #[arg(short, long)]
    pub quiet: bool,
    /// The command to profile, with its arguments (after `--` when they start with `-`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<std::ffi::OsString>,
}

pub fn run(args: &ProfileArgs) -> Result<Outcome> {
    use crate::report::{
        self,
        profile::{ProfileOptions, Sample},
    };
    // Checked before profiling: a typo must not cost a capture.
    let selection = args.select.selection().map_err(usage)?;
    let popts = ProfileOptions {
        nsys: args.nsys.nsys.clone(),
        output: args.output.clone(),
        trace: args.trace.clone(),
        sample: match args.sample {
            SampleArg::Cpu => Sample::Cpu,
            SampleArg::None => Sample::None,
        },
        cpuctxsw: args.cpuctxsw,
        nsys_args: args.nsys_args.clone(),
        timeout: args.timeout.map(std::time::Duration::from_secs),
        quiet: args.quiet,
    };
    // An interrupt while profiling is handled here: nsys writes its report, which is kept.
    let defer = nsys_perfetto_model::cleanup::defer();
    let profiled = report::profile::profile_run(&popts, &args.command);
    if let Some(sig) = nsys_perfetto_model::cleanup::interrupted() {
        if let Ok(p) = &profiled {
            nsys_perfetto_model::say!(
                "interrupted while profiling; nsys wrote {} (not converted)",
                p.report.display()
            );
        }
        nsys_perfetto_model::cleanup::clean_up_and_exit(sig);
    }
    drop(defer);
    let profiled = profiled?;
    // nsys passes on the program's exit status: a failing program fails this command too,
    // after what was captured is converted.
    let failed = (!profiled.status.success()).then(|| {
        use std::os::unix::process::ExitStatusExt;
        match (profiled.status.code(), profiled.status.signal()) {
            (Some(c), _) => (c & 0xff).max(1) as u8,
            (None, Some(sig)) => (128 + sig).min(255) as u8,
            _ => 1,
        }
    });
    if failed.is_some() {
        nsys_perfetto_model::say!(
            "note: the profiled program failed: nsys profile exited with {} (nsys passes on \
             the program's exit status); converting what was captured",
            profiled.status
        );
    }
    if !args.quiet {
        nsys_perfetto_model::say!("report: {}", profiled.report.display());
    }
    let batch = crate::batch::BatchOptions {
        output: None,
        force: true,
        quiet: args.quiet,
        export: args.nsys.export_options(args.quiet),
        jobs: 1,
    };
    let opts = Options {
        json_colors: args.select.nvtx_color_scheme.is_some(),
        progress: !args.quiet,
        selection,
        ..Options::default()
    };
    let converted = crate::batch::run(&[profiled.report], &batch, &opts).ok();
    Ok(match (failed, converted) {
        (Some(code), _) => Outcome::Status(code),
        (None, true) => Outcome::Done,
        (None, false) => Outcome::SomeFailed,
    })
}
