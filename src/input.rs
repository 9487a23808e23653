//! One way in: a profile a command takes (a report, or an SQLite, Arrow or Parquet export) made
//! readable. A report is read through its export, reused or made by nsys
//! ([`crate::report::export::export_report`]: the cache, the nsys choice, the waiting line); an
//! export is read as it is. What a path is comes from [`nsys_perfetto_read::inputs::classify`].

use crate::report::export::{ExportOptions, Exported, export_and_open, export_report};
use anyhow::Result;
use nsys_perfetto_read::enums::Enums;
use nsys_perfetto_read::inputs::{Input, classify};
use nsys_perfetto_read::projection::tables::Projection;
use nsys_perfetto_read::reports::totals::Events;
use nsys_perfetto_read::schema::Schema;
use rusqlite::Connection;
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

/// A profile opened for the workflows' queries: its export's connection, schema and enum labels
/// and, when asked for and the export has NVTX ranges and GPU work, the NVTX-to-GPU projection
/// attached as [`nsys_perfetto_read::projection::PROJ_DB`].
pub struct Opened {
    pub conn: Connection,
    pub schema: Schema,
    pub enums: Enums,
    pub projection: Option<Projection>,
    /// The export read, kept alive while this is.
    pub profile: Profile,
}

impl Opened {
    /// The events the workflows total, for their queries.
    pub fn events(&self) -> Events<'_> {
        Events {
            schema: &self.schema,
            enums: &self.enums,
            projected: self.projection.is_some(),
        }
    }
}

/// [`prepare`], and the export opened (see [`nsys_perfetto_read::schema::open_schema`]; a reused export
/// as the check that it may be reused opened it), with the NVTX-to-GPU projection when `project`
/// (it reads every NVTX range and GPU row: work a caller that never reads it should not pay).
pub fn open(input: &Path, opts: &ExportOptions, project: bool) -> Result<Opened> {
    let (profile, conn, schema) = if classify(input) == Input::Report {
        let (exported, conn, schema) = export_and_open(input, opts)?;
        (Profile::of(input, Some(exported)), conn, schema)
    } else {
        let (conn, schema) = nsys_perfetto_read::schema::open_schema(input)?;
        (Profile::of(input, None), conn, schema)
    };
    let enums = Enums::load(&conn, &schema);
    let projection = if project {
        schema.read_through(Projection::build(&schema))?
    } else {
        None
    };
    if let Some(p) = &projection {
        p.attach(&conn)?;
    }
    Ok(Opened {
        conn,
        schema,
        enums,
        projection,
        profile,
    })
}
