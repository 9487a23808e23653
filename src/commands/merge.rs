//! `nsys-perfetto merge INPUT... -o job.pftrace`: the reports of one job or of several runs in
//! one trace ([`crate::merge`] merges them).

use crate::args::{AlignArg, MergeArgs};
use crate::convert::Options;
use crate::convert::merge::Align;
use crate::merge::MergeOptions;
use crate::outcome::{Outcome, on_one_line, usage};
use anyhow::Result;
use nsys_perfetto_model::parallel::default_jobs;

pub fn run(args: &MergeArgs) -> Result<Outcome> {
    let format = args.output_format().map_err(usage)?;
    let selection = args.select.selection().map_err(usage)?;
    let conv = Options {
        format,
        json_colors: args.json_colors || args.select.nvtx_color_scheme.is_some(),
        progress: !args.quiet,
        selection,
        check: false,
        analyze: false,
        pictures: None,
    };
    let opts = MergeOptions {
        align: match args.align {
            AlignArg::WallClock => Align::WallClock,
            AlignArg::Start => Align::Start,
        },
        label: args.label.clone(),
        jobs: default_jobs(args.jobs),
        export: args.nsys.export_options(args.quiet),
    };
    let text = args.merge(&opts, &conv).map_err(on_one_line)?;
    if !args.quiet {
        nsys_perfetto_model::say_part!("{text}");
    }
    Ok(Outcome::Done)
}
