//! `nsys-perfetto analyze PROFILE`: the findings of nsys' expert rules
//! ([`crate::workflow::analyze`] runs and renders them).

use crate::args::OutputArgs;
use crate::outcome::{Outcome, usage};
use crate::workflow::analyze::{analyze_profile, render};
use anyhow::{Result, bail};
use nsys_perfetto_read::rules::{CHUNK_COUNTS, Options, RULES, Rule};

/// `nsys-perfetto analyze PROFILE`.
#[derive(clap::Args, Debug, Clone)]
pub struct AnalyzeArgs {
    /// An nsys report (.nsys-rep, .qdrep) or export (.sqlite, .arrows, _arwdir, _pqtdir).
    #[arg(value_name = "PROFILE")]
    pub profile: std::path::PathBuf,
    /// Rules to run, comma-separated (default: all): cuda_api_sync, cuda_memcpy_async,
    /// cuda_memcpy_sync, cuda_memset_sync, gpu_gaps, gpu_time_util.
    #[arg(long, short = 'r', value_delimiter = ',', value_name = "RULE")]
    pub rule: Vec<String>,
    /// Findings shown per rule (0: all), the longest first (gpu_time_util: the least used).
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub top: usize,
    /// Only rows from this time on (ns, the export's time as nsys shows it).
    #[arg(long, value_name = "NS")]
    pub start: Option<i64>,
    /// Only rows before this time (ns).
    #[arg(long, value_name = "NS")]
    pub end: Option<i64>,
    /// Only the time (and thread or process) of the first NVTX range of this name:
    /// `NAME[@DOMAIN]`, `NAME/N` for the Nth. --start/--end override its times.
    #[arg(long, value_name = "RANGE")]
    pub nvtx: Option<String>,
    /// cuda_api_sync: only calls of this process id.
    #[arg(long, value_name = "PID")]
    pub process: Option<i64>,
    /// cuda_api_sync: only calls of this thread id.
    #[arg(long, value_name = "TID")]
    pub thread: Option<i64>,
    /// gpu_gaps: report gaps longer than this, ms.
    #[arg(long, default_value_t = 500, value_name = "MS")]
    pub gap: i64,
    /// gpu_time_util: report chunks used less than this, percent.
    #[arg(long, default_value_t = 50, value_name = "PERCENT")]
    pub threshold: i64,
    /// gpu_time_util: chunks per process and GPU (1 to 1000).
    #[arg(long, default_value_t = 30, value_name = "N")]
    pub chunks: i64,
    #[command(flatten)]
    pub out: OutputArgs,
}

impl AnalyzeArgs {
    pub fn options(&self) -> Result<Options> {
        let rules = if self.rule.is_empty() {
            RULES.to_vec()
        } else {
            let mut v = Vec::new();
            for r in &self.rule {
                let r = Rule::parse(r)?;
                if !v.contains(&r) {
                    v.push(r);
                }
            }
            v
        };
        if !CHUNK_COUNTS.contains(&self.chunks) {
            bail!(
                "--chunks: value must be between {} and {}",
                CHUNK_COUNTS.start(),
                CHUNK_COUNTS.end()
            );
        }
        Ok(Options {
            rules,
            start: self.start,
            end: self.end,
            nvtx: self.nvtx.clone(),
            process: self.process,
            thread: self.thread,
            gap_ms: self.gap,
            threshold: self.threshold,
            chunks: self.chunks,
        })
    }
}

pub fn run(args: &AnalyzeArgs) -> Result<Outcome> {
    let opts = args.options().map_err(usage)?;
    let path = &args.profile;
    let reports = analyze_profile(path, &args.out.export_options(), &opts).map_err(|e| {
        anyhow::anyhow!(
            "{}: {}",
            path.display(),
            nsys_perfetto_model::errors::error_line(&e)
        )
    })?;
    args.out.emit(&render(
        &reports,
        &opts,
        args.top,
        args.out.format(),
        args.out.unit(),
    ))?;
    Ok(Outcome::Done)
}
