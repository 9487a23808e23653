//! `nsys-perfetto recipe NAME INPUT...`: nsys' per-rank analyses, as `nsys recipe` computes
//! them ([`crate::workflow::recipe`] runs them).

use crate::args::NsysArgs;
use crate::outcome::Outcome;
use crate::workflow::recipe::render::{csv, table_text, write_parquet};
use crate::workflow::recipe::{RECIPES, Recipe, RecipeOptions};
use anyhow::{Result, bail};
use std::path::PathBuf;

/// `nsys-perfetto recipe NAME INPUT...`.
#[derive(clap::Args, Debug, Clone)]
pub struct RecipeArgs {
    /// The recipe, by nsys' name: cuda_gpu_kern_sum, cuda_api_sum, cuda_gpu_mem_time_sum,
    /// nvtx_sum, nvtx_gpu_proj_sum, mpi_sum, gpu_time_util, cuda_gpu_time_util_map.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// One report or export per rank (.nsys-rep, .qdrep, .sqlite, .arrows, _arwdir, _pqtdir),
    /// directories of them, glob patterns. A rank is named by its file's stem.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Print (or, with --output, also write) CSV as the recipe's --csv writes it: the
    /// DataFrame's index first, times in ns.
    #[arg(long)]
    pub csv: bool,
    /// Write the recipe's tables into the directory DIR (created if needed): DIR/TABLE.parquet,
    /// as the recipe does, and DIR/TABLE.csv with --csv.
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Print or write only this table (rank_stats, all_stats; analysis for the utilization
    /// recipes); default: all of them.
    #[arg(long, value_name = "TABLE")]
    pub table: Option<String>,
    /// cuda_gpu_time_util_map: the number of equal time bins over the longest session.
    #[arg(long, value_name = "N", default_value_t = 30, value_parser = clap::value_parser!(u16).range(1..))]
    pub bins: u16,
    /// Ranks read at the same time (default: all cores).
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    pub jobs: Option<usize>,
    #[command(flatten)]
    pub nsys: NsysArgs,
}

pub fn run(args: &RecipeArgs) -> Result<Outcome> {
    let Some(recipe) = Recipe::parse(&args.name) else {
        let known: Vec<&str> = RECIPES.iter().map(|(n, _)| *n).collect();
        bail!(
            "unknown recipe {:?} (known: {})",
            args.name,
            known.join(", ")
        );
    };
    let expanded = crate::batch::expand(&args.inputs);
    if let Some((arg, e)) = expanded.errors.first() {
        bail!("{arg}: {e}");
    }
    if expanded.files.is_empty() {
        bail!("no inputs ({})", nsys_perfetto_read::inputs::INPUTS);
    }
    let jobs = nsys_perfetto_model::parallel::default_jobs(args.jobs);
    let Some(outcome) = crate::workflow::recipe::ranks::run(
        recipe,
        &expanded.files,
        &args.nsys.export_options(true),
        jobs,
        &RecipeOptions {
            bins: usize::from(args.bins),
        },
    )?
    else {
        nsys_perfetto_model::say!(
            "{}: no data in the {} inputs; nothing written",
            recipe.name(),
            expanded.files.len()
        );
        return Ok(Outcome::Done);
    };
    let tables: Vec<_> = match &args.table {
        Some(name) => {
            let t: Vec<_> = outcome.tables.iter().filter(|t| t.name == name).collect();
            if t.is_empty() {
                let known: Vec<&str> = outcome.tables.iter().map(|t| t.name).collect();
                bail!(
                    "{} has no table {name:?} (tables: {})",
                    recipe.name(),
                    known.join(", ")
                );
            }
            t
        }
        None => outcome.tables.iter().collect(),
    };
    if let Some(dir) = &args.output {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("{}: cannot create: {e}", dir.display()))?;
        for t in &tables {
            write_parquet(t, &dir.join(format!("{}.parquet", t.name)))?;
            if args.csv {
                crate::workflow::write_file(&dir.join(format!("{}.csv", t.name)), &csv(t))?;
            }
        }
        nsys_perfetto_model::say!(
            "{}: {} ranks; wrote {} in {}",
            recipe.name(),
            outcome.files.len(),
            tables
                .iter()
                .map(|t| format!("{}.parquet", t.name))
                .collect::<Vec<_>>()
                .join(", "),
            dir.display()
        );
        return Ok(Outcome::Done);
    }
    let mut text = String::new();
    for (i, t) in tables.iter().enumerate() {
        if args.csv {
            if tables.len() > 1 {
                text.push_str(&format!("# {}\n", t.name));
            }
            text.push_str(&csv(t));
        } else {
            if i > 0 {
                text.push('\n');
            }
            text.push_str(&format!(
                "{} ({}, {} ranks)\n",
                t.name,
                recipe.name(),
                outcome.files.len()
            ));
            text.push_str(&table_text(t));
        }
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth reporting.
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    Ok(Outcome::Done)
}
