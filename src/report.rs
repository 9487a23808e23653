//! Nsight Systems reports (`.nsys-rep`, `.qdrep`) and the `nsys` tool itself: find `nsys`, read
//! which nsys version captured a report, export the report (cached, locked, atomic),
//! and capture new reports with `nsys profile`.
//!
//! The converter reads exports (SQLite, Arrow, Parquet); everything here exists to get one from a
//! report. One concern a file: `version` (which nsys captured a report), `process` (bounded
//! child processes), `finding` (which nsys to run), `export` (the cached, locked, atomic
//! export) and `profile` (capturing new reports).
//!
//! # Library API
//!
//! * [`find_nsys`](finding::find_nsys) / [`nsys_for_report`](finding::nsys_for_report): the `nsys` to use, found from an explicit path, then
//!   the `NSYS` environment variable, then `PATH`, then the usual install places
//!   (`/opt/nvidia/nsight-systems/*/bin`, `/opt/nvidia/nsight-systems-cli/*/bin`,
//!   `/usr/local/cuda*/bin`, `/usr/lib/nsight-systems/bin`). [`find_nsys`](finding::find_nsys) takes the first;
//!   [`nsys_for_report`](finding::nsys_for_report) the newest that can read the report (the first among equals).
//! * [`capture_version`](version::capture_version): the nsys version that captured a report, from the file alone.
//! * [`export_report`](export::export_report): the export of a report (Arrow where the nsys found writes it, else
//!   SQLite), reusing a cached one (see below).
//! * [`profile`]: run a command under `nsys profile` and return the `.nsys-rep` it produced,
//!   importing the `.qdstrm` with `QdstrmImporter` when nsys could not do it itself.
//!
//! A full "profile and convert" is
//! ```no_run
//! # use nsys_perfetto::{convert, report};
//! # use std::ffi::OsString;
//! # fn main() -> anyhow::Result<()> {
//! let popts = report::profile::ProfileOptions { output: Some("/tmp/run".into()), ..Default::default() };
//! let rep = report::profile::profile(&popts, &[OsString::from("./app")])?;
//! let exported = report::export::export_report(&rep, &report::export::ExportOptions::default())?;
//! let opts = convert::Options::default();
//! let out = convert::default_output(&rep, opts.format);
//! convert::convert_export(exported.path(), &out, &opts)?;
//! # Ok(()) }
//! ```
//!
//! # The export cache
//!
//! By default the export of `DIR/X.nsys-rep` is `DIR/X.sqlite`, the name `nsys export` and
//! `nsys stats` use, so all three share it. When `DIR` cannot be written (no write permission
//! bit on it, even for root, or creating a file there fails), the export goes to
//! `$XDG_CACHE_HOME/nsys-perfetto/` (else `~/.cache/nsys-perfetto/`), named after the report and
//! a hash of its absolute path. The same happens when `DIR/X.sqlite` exists but was not written
//! by this tool (its SQLite `application_id` is not ours, see [`owns_export`](crate::provenance::owns_export)): a user's file is
//! left alone, never replaced nor reused (nothing says which report content it was exported
//! from). An export is reused only when it records (table [`EXPORT_RECORD_TABLE`](crate::provenance::EXPORT_RECORD_TABLE)) that it was
//! made from this report's content (see [`crate::provenance::FileId`]: a report rewritten with
//! its old modification time is exported again) by an nsys that reads reports of the report's
//! capture version, and it opens as an nsys SQLite export; otherwise it is exported again and
//! the line describing the export says why. nsys writes to a hidden temporary name that is renamed into
//! place only when nsys succeeded and the file opens as an export, so a failed or interrupted
//! export never leaves a half-written `X.sqlite`. A lock file (`.X.sqlite.lock`, an advisory
//! `flock`, released by the kernel if the process dies) makes a second conversion of the same
//! report wait for the first and then reuse its export.
//!
//! [`ExportOptions::no_cache`](export::ExportOptions::no_cache) neither reuses nor leaves an export: nsys exports into a temporary
//! directory that is deleted when the [`Exported`](export::Exported) is dropped. [`ExportOptions::keep_sqlite`](export::ExportOptions::keep_sqlite)
//! with `no_cache` exports afresh and then stores the result in the cache place.
//!
//! # Known nsys problems handled here
//!
//! * Debian's packaged nsys cannot find its importer: `nsys profile` leaves `NAME.qdstrm` and no
//!   report. [`profile::profile`] then runs `QdstrmImporter` from nsys's `host-linux-x64` directory.
//! * nsys 2022.4's agent can spin forever after the program exits when it collects CPU context
//!   switches or CPU samples through perf events (seen on this project's CI kernel: every capture
//!   with the default `--cpuctxsw=process-tree` hung, with or without fork+exec in the program;
//!   with context switches and sampling off, captures finish in seconds, fork+exec included).
//!   [`profile::ProfileOptions`] turns both off by default and offers a timeout, after which nsys, its
//!   agent and the profiled program are killed.

pub mod export;
pub mod finding;
pub mod process;
pub mod profile;
pub mod version;

#[cfg(test)]
mod tests {
    use super::{export::*, profile::*, version::*};
    use std::ffi::OsString;
    use std::path::{Path, PathBuf};

    #[test]
    fn versions() {
        let v = Version::parse("NVIDIA Nsight Systems version 2022.4.2.1-df9881f").unwrap();
        assert_eq!(v.to_string(), "2022.4.2.1");
        let h = Version::parse_at(b"2025@5@1@121-255136380782v0.").unwrap();
        assert_eq!(h.to_string(), "2025.5.1.121");
        assert!(!v.can_read(&h));
        assert!(h.can_read(&v));
        let same = Version::parse("2022.4.1").unwrap();
        assert!(v.can_read(&same) && same.can_read(&v));
        assert_eq!(
            Version::parse("nsight-systems/2020.3.2")
                .unwrap()
                .to_string(),
            "2020.3.2"
        );
        assert!(Version::parse("1.2.3").is_none());
        assert!(Version::parse_at(b"1.\n").is_none());
    }

    #[test]
    fn build_strings() {
        let b = b"xx\x122020.3.2.6-87e152c:\x122020.3.2.6-87e152c\xa2\x01(87e1";
        assert_eq!(find_build_version(b).unwrap().to_string(), "2020.3.2.6");
        assert!(find_build_version(b"2020.3.2 and 12020.1.1.1-abcdefg").is_none());
    }

    #[test]
    fn profile_names() {
        let cmd = [OsString::from("./bin/app"), OsString::from("-x")];
        assert_eq!(
            profile_base(Some(Path::new("/tmp/wl.nsys-rep")), &cmd),
            PathBuf::from("/tmp/wl")
        );
        assert_eq!(
            profile_base(Some(Path::new("/tmp/wl")), &cmd),
            PathBuf::from("/tmp/wl")
        );
        assert_eq!(
            profile_base(Some(Path::new("run.v2")), &cmd),
            PathBuf::from("run.v2")
        );
    }

    #[test]
    fn cache_names_are_stable() {
        let p = cached_export(Path::new("/nonexistent/dir/r.nsys-rep"), Path::new("/c"));
        assert_eq!(
            p,
            PathBuf::from(format!(
                "/c/r-{:016x}.sqlite",
                fnv1a(b"/nonexistent/dir/r.nsys-rep")
            ))
        );
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
