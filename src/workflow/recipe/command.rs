//! `nsys-perfetto recipe`: the command, over `cli::args::RecipeArgs`.

use super::ranks::run;
use super::{RECIPES, Recipe, RecipeOptions, csv, table_text, write_parquet};
use crate::cli::args::RecipeArgs;
use anyhow::{Result, bail};

impl RecipeArgs {
    pub fn run(&self) -> std::process::ExitCode {
        match self.run_recipe() {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                nsys_perfetto_model::say!("error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        }
    }

    fn run_recipe(&self) -> Result<()> {
        let Some(recipe) = Recipe::parse(&self.name) else {
            let known: Vec<&str> = RECIPES.iter().map(|(n, _)| *n).collect();
            bail!(
                "unknown recipe {:?} (known: {})",
                self.name,
                known.join(", ")
            );
        };
        let expanded = crate::batch::expand(&self.inputs);
        if let Some((arg, e)) = expanded.errors.first() {
            bail!("{arg}: {e}");
        }
        if expanded.files.is_empty() {
            bail!("no inputs ({})", nsys_perfetto_read::inputs::INPUTS);
        }
        let jobs = nsys_perfetto_model::parallel::default_jobs(self.jobs);
        let Some(outcome) = run(
            recipe,
            &expanded.files,
            &self.nsys.export_options(true),
            jobs,
            &RecipeOptions {
                bins: usize::from(self.bins),
            },
        )?
        else {
            nsys_perfetto_model::say!(
                "{}: no data in the {} inputs; nothing written",
                recipe.name(),
                expanded.files.len()
            );
            return Ok(());
        };
        let tables: Vec<_> = match &self.table {
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
        if let Some(dir) = &self.output {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("{}: cannot create: {e}", dir.display()))?;
            for t in &tables {
                write_parquet(t, &dir.join(format!("{}.parquet", t.name)))?;
                if self.csv {
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
            return Ok(());
        }
        let mut text = String::new();
        for (i, t) in tables.iter().enumerate() {
            if self.csv {
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
        Ok(())
    }
}
