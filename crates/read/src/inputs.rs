//! What an input is: the one answer every command takes, from the file's name and, for a
//! directory, from the nsys tables in it (`open` serves a trace as is, `batch` keeps the
//! profiles of a folder, a report goes through nsys' export first, the sources refuse a trace
//! given as a profile).

use crate::{arrow, parquet};
use std::path::Path;

/// Tables whose presence marks a file or a directory as an Nsight Systems export (the last
/// three are the crate's `NVTX`, `KERNEL` and `RUNTIME`, named here so that this module, which
/// the crate's root uses, imports nothing from it).
pub(crate) const NSYS_MARKERS: &[&str] = &[
    "StringIds",
    "ThreadNames",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_GPU",
    "META_DATA_EXPORT",
    "EXPORT_META_DATA",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
];

/// What the tool takes as input, as messages name it.
pub const INPUTS: &str =
    "reports (.nsys-rep, .qdrep) or exports (.sqlite, .arrows, _arwdir, _pqtdir)";

/// What a path given to the tool is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// An nsys report (`.nsys-rep`, `.qdrep`, in any case), which nsys exports first.
    Report,
    /// Named as nsys' SQLite export (`.sqlite`, in any case).
    Sqlite,
    /// nsys' Arrow export as a directory holding a table every export has as an `.arrow` file
    /// (`nsys export --type arrowdir`).
    ArrowDir,
    /// nsys' Arrow export as one `.arrows` file, every table in it (`--type arrow`).
    ArrowStreams,
    /// nsys' Parquet export: a directory holding a table every export has as a `.parquet` file
    /// (`--type parquetdir`).
    ParquetDir,
    /// A trace Perfetto's UI opens as is (`.pftrace`, `.json`, `.gz`...).
    Trace,
    /// Anything else, a directory of no export among them.
    Other,
}

impl Input {
    /// A report or an export: what the converter takes.
    pub fn is_profile(self) -> bool {
        !matches!(self, Input::Trace | Input::Other)
    }

    /// An export other than an SQLite file, Arrow or Parquet: its tables are read as
    /// [`crate::arrow`]'s (typed scans, and virtual tables for SQL).
    pub fn is_columnar(self) -> bool {
        matches!(
            self,
            Input::ArrowDir | Input::ArrowStreams | Input::ParquetDir
        )
    }
}

/// What `path` is: a directory by the nsys tables in it (Arrow first), a file by its name, an
/// `.arrows` name only when it is a file.
pub fn classify(path: &Path) -> Input {
    let named = classify_name(path);
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => return named,
        Ok(m) if m.is_dir() => {
            if holds_nsys_table(path, arrow::files::EXTENSION) {
                return Input::ArrowDir;
            }
            if holds_nsys_table(path, parquet::EXTENSION) {
                return Input::ParquetDir;
            }
        }
        _ => {}
    }
    if named == Input::ArrowStreams {
        Input::Other
    } else {
        named
    }
}

/// What a file is by its name alone, before it is on disk (an upload's name, say): never an
/// export directory.
pub fn classify_name(path: &Path) -> Input {
    let extension = |e: &str| path.extension().is_some_and(|x| x.eq_ignore_ascii_case(e));
    if extension("nsys-rep") || extension("qdrep") {
        Input::Report
    } else if extension("sqlite") {
        Input::Sqlite
    } else if arrow::files::is_streams_name(path) {
        Input::ArrowStreams
    } else if is_trace_name(path) {
        Input::Trace
    } else {
        Input::Other
    }
}

/// Named as a trace the UI opens as is.
fn is_trace_name(path: &Path) -> bool {
    let name = path.to_string_lossy().to_lowercase();
    [
        ".pftrace",
        ".perfetto-trace",
        ".perfetto",
        ".pb",
        ".trace",
        ".json",
        ".gz",
        ".ctrace",
    ]
    .iter()
    .any(|e| name.ends_with(e))
}

/// Whether directory `dir` holds one of the tables every export has as a file of `extension`.
fn holds_nsys_table(dir: &Path, extension: &str) -> bool {
    NSYS_MARKERS
        .iter()
        .any(|t| dir.join(format!("{t}.{extension}")).is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_name_the_crates_tables() {
        for t in [
            crate::names::NVTX,
            crate::names::KERNEL,
            crate::names::RUNTIME,
        ] {
            assert!(NSYS_MARKERS.contains(&t), "{t}");
        }
    }

    #[test]
    fn files_by_name() {
        for (name, kind) in [
            ("a.nsys-rep", Input::Report),
            ("a.QDREP", Input::Report),
            ("a.SQLite", Input::Sqlite),
            ("a.arrows", Input::ArrowStreams),
            ("a.pftrace", Input::Trace),
            ("a.json.gz", Input::Trace),
            ("a.sqlite.gz", Input::Trace),
            ("a.txt", Input::Other),
            ("sqlite", Input::Other),
        ] {
            assert_eq!(classify_name(Path::new(name)), kind, "{name}");
        }
    }

    #[test]
    fn directories_by_their_tables() {
        let dir = tempfile::tempdir().unwrap();
        let made = |name: &str, file: Option<&str>| {
            let d = dir.path().join(name);
            std::fs::create_dir(&d).unwrap();
            if let Some(f) = file {
                std::fs::write(d.join(f), b"").unwrap();
            }
            d
        };
        let arrow = made("r_arwdir", Some("StringIds.arrow"));
        let parquet = made("r_pqtdir", Some("StringIds.parquet"));
        let neither = made("r.arrows", Some("notes.arrow"));
        let named = made("r.sqlite", None);
        assert_eq!(classify(&arrow), Input::ArrowDir);
        assert_eq!(classify(&parquet), Input::ParquetDir);
        // A directory named as a file keeps its name's kind, but an `.arrows` name only counts
        // for a file.
        assert_eq!(classify(&neither), Input::Other);
        assert_eq!(classify(&named), Input::Sqlite);
        assert_eq!(classify(&dir.path().join("missing.arrows")), Input::Other);
        let file = dir.path().join("f.arrows");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(classify(&file), Input::ArrowStreams);
        assert!(Input::ParquetDir.is_columnar());
        assert!(Input::Sqlite.is_profile() && !Input::Trace.is_profile());
    }
}
