//! One way in: a profile a command takes (a report, or an SQLite, Arrow or Parquet export) made
//! readable. A report is read through its export, reused or made by nsys
//! ([`crate::report::export::export_report`]: the cache, the nsys choice, the waiting line); an
//! export is read as it is. What a path is comes from [`nsys_perfetto_read::inputs::classify`].

use crate::report::export::{ExportOptions, Exported, export_and_open, export_report};
use anyhow::Result;
use nsys_perfetto_read::inputs::{Input, classify};
use nsys_perfetto_read::source::Export;
use std::path::{Path, PathBuf};

/// A profile ready to read: the export that stands for it.
#[derive(Debug)]
pub struct Profile {
    /// What is read: the input itself, or the report's export.
    export: PathBuf,
    /// A report's export, kept with it: a temporary export (`no_cache`) is deleted when dropped.
    pub exported: Option<Exported>,
}

impl Profile {
    /// The export to read (an SQLite file, an Arrow or Parquet export).
    pub fn export(&self) -> &Path {
        &self.export
    }

    /// For a report, the line saying where its export is and how it came about.
    pub fn describe(&self) -> Option<String> {
        self.exported.as_ref().map(Exported::describe)
    }

    fn of(input: &Path, exported: Option<Exported>) -> Profile {
        Profile {
            export: exported.as_ref().map_or(input, |e| e.path()).to_path_buf(),
            exported,
        }
    }
}

/// The export that stands for `input`: a report's (reused, or exported by nsys with `opts`),
/// or `input` itself. Errors are one line; the caller names the file.
pub fn prepare(input: &Path, opts: &ExportOptions) -> Result<Profile> {
    let exported = match classify(input) {
        Input::Report => Some(export_report(input, opts)?),
        _ => None,
    };
    Ok(Profile::of(input, exported))
}

/// A profile opened for the workflows' queries: its export, opened, and the profile it stands
/// for, kept while the export is read (the fields drop in order: a temporary export is removed
/// once closed).
pub struct Opened {
    pub export: Export,
    pub profile: Profile,
}

/// [`prepare`], and the export opened (see [`Export::open`]; a reused export as the check that
/// it may be reused opened it), with the NVTX-to-GPU projection attached when `project` (see
/// [`Export::project`]).
pub fn open(input: &Path, opts: &ExportOptions, project: bool) -> Result<Opened> {
    let (profile, mut export) = if classify(input) == Input::Report {
        let (exported, export) = export_and_open(input, opts)?;
        (Profile::of(input, Some(exported)), export)
    } else {
        (Profile::of(input, None), Export::open(input)?)
    };
    if project {
        export.project()?;
    }
    Ok(Opened { export, profile })
}
