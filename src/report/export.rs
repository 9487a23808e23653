//! Exporting a report with nsys (Arrow or SQLite), cached beside it or in the cache folder,
//! locked against a second conversion of the same report, and atomic.

use super::finding::INSTALL_HINT;
use super::finding::{Nsys, nsys_for_report};
use super::process::{nsys_message, run_bounded};
use super::version::{Version, capture_version};
use crate::provenance::{
    EXPORT_APPLICATION_ID, EXPORT_RECORD_FILE, EXPORT_RECORD_TABLE, owns_export, recorded_report,
};
use anyhow::{Context, Result, anyhow, bail};
use nsys_perfetto_read::source::Export;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How [`export_report`] gets the export of a report (see the module doc).
#[derive(Debug, Clone, Default)]
pub struct ExportOptions {
    /// The nsys to use (a binary or an install directory); default: searched.
    pub nsys: Option<PathBuf>,
    /// Neither reuse a cached export nor leave one behind (unless `keep_sqlite`).
    pub no_cache: bool,
    /// With `no_cache`: export afresh, then keep the result in the cache place.
    pub keep_sqlite: bool,
    /// The cache directory for reports in read-only folders; default
    /// `$XDG_CACHE_HOME/nsys-perfetto`, else `~/.cache/nsys-perfetto`.
    pub cache_dir: Option<PathBuf>,
    /// Print nothing (the "waiting for another conversion" line, nsys progress).
    pub quiet: bool,
    /// Stop `nsys export` after this long (`--export-timeout`); default: no limit.
    pub timeout: Option<Duration>,
    /// The export's format (`--export`).
    pub format: ExportFormat,
}

/// The format reports are exported to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ExportFormat {
    /// Arrow (`nsys export --type arrowdir`) where the nsys found writes it, else SQLite: the
    /// Arrow export costs nsys less and reads faster.
    #[default]
    Auto,
    Sqlite,
    Arrow,
}

impl ExportFormat {
    /// The formats whose exports may stand for a report, in the order they are looked for.
    fn reusable(self) -> &'static [Format] {
        match self {
            ExportFormat::Auto => &[Format::Arrow, Format::Sqlite],
            ExportFormat::Sqlite => &[Format::Sqlite],
            ExportFormat::Arrow => &[Format::Arrow],
        }
    }
}

/// A format an export is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Sqlite,
    Arrow,
}

impl Format {
    fn nsys_type(self) -> &'static str {
        match self {
            Format::Sqlite => "sqlite",
            Format::Arrow => "arrowdir",
        }
    }

    /// What follows the report's name in the export's name.
    fn suffix(self) -> &'static str {
        match self {
            Format::Sqlite => ".sqlite",
            Format::Arrow => nsys_perfetto_read::arrow::NSYS_DIR_SUFFIX,
        }
    }

    /// The format of the export at `path`: a directory is an Arrow export.
    fn of(path: &Path) -> Format {
        if fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            Format::Arrow
        } else {
            Format::Sqlite
        }
    }
}

/// Whether `nsys` may write Arrow exports: nsys 2022 and older cannot (a version it does not
/// say is tried, and falls back to SQLite when it refuses).
fn writes_arrow(nsys: &Nsys) -> bool {
    nsys.version.as_ref().is_none_or(|v| v.year >= 2023)
}

/// How the export came about.
#[derive(Debug, Clone, PartialEq)]
pub enum ExportKind {
    /// An existing export made from the report's content was used.
    Reused,
    /// nsys exported it now, in this many seconds.
    Exported { seconds: f64 },
}

/// A report's export. With `no_cache`, it lives in a temporary directory that is deleted when
/// this is dropped.
#[derive(Debug)]
pub struct Exported {
    path: PathBuf,
    pub kind: ExportKind,
    /// The nsys that exported it (None when reused).
    pub nsys: Option<Nsys>,
    /// The nsys version that captured the report, when known.
    pub capture: Option<Version>,
    /// Whether the file stays after this is dropped.
    pub kept: bool,
    /// Why the export is not where it would usually be (a user's own `X.sqlite` beside the
    /// report, left untouched).
    pub note: Option<String>,
    /// A reused export as its validity check opened it, for [`export_and_open`]: its reader
    /// takes it rather than opening every table file again.
    opened: Option<(rusqlite::Connection, nsys_perfetto_read::schema::Schema)>,
    _temp: Option<tempfile::TempDir>,
}

impl Exported {
    /// The export: an SQLite file or an Arrow directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One line for the user: where the export is and how it came about.
    pub fn describe(&self) -> String {
        let what = match (&self.kind, &self.nsys) {
            (ExportKind::Reused, _) => "reused: exported from this report's content".to_string(),
            (ExportKind::Exported { seconds }, Some(n)) => {
                format!("exported by {} in {seconds:.1} s", n.describe())
            }
            (ExportKind::Exported { seconds }, None) => format!("exported in {seconds:.1} s"),
        };
        let note = self
            .note
            .as_ref()
            .map(|n| format!("; {n}"))
            .unwrap_or_default();
        let format = Format::of(&self.path).nsys_type();
        if self.kept {
            format!("{format}: {} ({what}{note})", self.path.display())
        } else {
            format!("{format}: temporary, deleted after conversion ({what}{note})")
        }
    }
}

/// The default cache directory: `$XDG_CACHE_HOME/nsys-perfetto`, else `~/.cache/nsys-perfetto`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| Path::new(x).is_absolute()) {
        return Some(PathBuf::from(x).join("nsys-perfetto"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cache/nsys-perfetto"))
}

/// FNV-1a: a stable hash for cache names (std's hasher may change between Rust releases).
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn stem_of(report: &Path) -> String {
    report
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "report".into())
}

/// Where the SQLite export of `report` lives beside it: `DIR/X.sqlite`.
pub fn sibling_export(report: &Path) -> PathBuf {
    sibling(report, Format::Sqlite)
}

/// Where the export of `report` in `format` lives beside it: `DIR/X.sqlite`, `DIR/X_arwdir`.
fn sibling(report: &Path, format: Format) -> PathBuf {
    report.with_file_name(format!("{}{}", stem_of(report), format.suffix()))
}

/// Where the SQLite export of `report` lives in `cache_dir`: `X-<hash of the absolute
/// path>.sqlite`.
pub fn cached_export(report: &Path, cache_dir: &Path) -> PathBuf {
    cached(report, cache_dir, Format::Sqlite)
}

fn cached(report: &Path, cache_dir: &Path, format: Format) -> PathBuf {
    let abs = fs::canonicalize(report).unwrap_or_else(|_| {
        std::env::current_dir()
            .map(|d| d.join(report))
            .unwrap_or_else(|_| report.to_path_buf())
    });
    let hash = fnv1a(abs.as_os_str().as_encoded_bytes());
    cache_dir.join(format!(
        "{}-{hash:016x}{}",
        stem_of(report),
        format.suffix()
    ))
}

/// Whether `dir` was made read-only: its permission bits let nobody write. Root could write
/// anyway; nsys-perfetto does not, in such a folder.
pub fn read_only_dir(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(dir).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o222 == 0)
}

/// Whether files may be created in `dir` (and it is not [`read_only_dir`]).
fn writable_dir(dir: &Path) -> bool {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() && !read_only_dir(dir) => tempfile::Builder::new()
            .prefix(".nsys-perfetto-probe-")
            .tempfile_in(dir)
            .is_ok(),
        _ => false,
    }
}

/// What an export was made from, as recorded in it.
#[derive(Debug, Clone)]
struct ExportRecord {
    report: Option<crate::provenance::FileId>,
    report_name: String,
    nsys: Option<Version>,
}

/// The record of an export this tool wrote (`None` for an export of the user's, or one that
/// records nothing).
fn read_record(export: &Path) -> Option<ExportRecord> {
    let values = crate::provenance::export_record(export)?;
    Some(ExportRecord {
        report: crate::provenance::FileId::from_text(values.get("report")?),
        report_name: values.get("report_name").cloned().unwrap_or_default(),
        nsys: values.get("nsys").and_then(|v| Version::parse(v)),
    })
}

/// For an export this tool wrote: whether it records being exported from `report`'s present
/// content (`None` for a file of the user's, which records nothing).
pub fn export_is_of(export: &Path, report: &Path) -> Option<bool> {
    if !owns_export(export) {
        return None;
    }
    Some(recorded_report(export).is_some_and(|id| id.matches(report)))
}

/// Whether the export at `path` stands for `report`'s content: `Ok` (the export, opened) when
/// it may be reused, `Err(None)` when there is none or it is a file of the user's (said
/// elsewhere), `Err(reason)` when an export of this tool's must be made again.
fn reusable_export(
    path: &Path,
    report: &Path,
    capture: Option<&Version>,
) -> std::result::Result<(rusqlite::Connection, nsys_perfetto_read::schema::Schema), Option<String>>
{
    if !owns_export(path) {
        return Err(None);
    }
    let record = read_record(path).filter(|r| r.report.is_some());
    let shown = path.display();
    let Some(record) = record else {
        return Err(Some(format!(
            "{shown} records no report it was exported from (an earlier nsys-perfetto wrote it)"
        )));
    };
    if !record.report.as_ref().is_some_and(|id| id.matches(report)) {
        let name = report.file_name().map(|n| n.to_string_lossy().to_string());
        return Err(Some(
            if name.as_deref() == Some(record.report_name.as_str()) {
                format!(
                    "{} changed since {shown} was exported from it",
                    report.display()
                )
            } else {
                format!(
                    "{shown} was exported from another report ({})",
                    record.report_name
                )
            },
        ));
    }
    if let (Some(c), Some(v)) = (capture, &record.nsys)
        && !v.can_read(c)
    {
        return Err(Some(format!(
            "{shown} was exported by nsys {v}, which cannot read reports of nsys {c}"
        )));
    }
    nsys_perfetto_read::schema::open_schema(path)
        .map_err(|_| Some(format!("{shown} does not open as an nsys export")))
}

fn parent_dir(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Mark an export this tool just wrote (still under its temporary name) as its own, and record
/// what it was made from (see [`EXPORT_RECORD_TABLE`]; nothing when the report's identity could
/// not be taken, so it is not reused).
fn mark_owned(export: &Path, record: &ExportRecord) -> Result<()> {
    let rows = record.report.as_ref().map(|id| {
        [
            ("tool", crate::provenance::TOOL.to_string()),
            ("report", id.to_text()),
            ("report_name", record.report_name.clone()),
            (
                "nsys",
                record.nsys.map(|v| v.to_string()).unwrap_or_default(),
            ),
        ]
    });
    if Format::of(export) == Format::Arrow {
        let values: std::collections::HashMap<&str, String> = rows.into_iter().flatten().collect();
        fs::write(
            export.join(EXPORT_RECORD_FILE),
            serde_json::to_string(&values)?,
        )?;
        return Ok(());
    }
    let conn = rusqlite::Connection::open_with_flags(
        export,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.execute_batch(&format!(
        "PRAGMA application_id = {}",
        EXPORT_APPLICATION_ID as i32
    ))?;
    if let Some(rows) = rows {
        conn.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS {EXPORT_RECORD_TABLE} (key TEXT PRIMARY KEY, value TEXT \
             NOT NULL)"
        ))?;
        for (k, v) in rows {
            conn.execute(
                &format!("INSERT OR REPLACE INTO {EXPORT_RECORD_TABLE} VALUES (?1, ?2)"),
                [k, v.as_str()],
            )?;
        }
    }
    Ok(())
}

/// Whether a file the tool did not write is at `sibling`.
fn is_users_file(sibling: &Path) -> bool {
    fs::symlink_metadata(sibling).is_ok() && !owns_export(sibling)
}

/// Why the user's own `X.sqlite` beside the report is passed over; `how` the cache is used.
fn users_file_note(sibling: &Path, how: &str) -> String {
    format!(
        "{} was not written by nsys-perfetto, so nothing says which report content it was \
         exported from: left untouched, {how} the cache instead",
        sibling.display()
    )
}

/// Where an export of `report` may be written: beside it when the folder is writable and no
/// file the user made is there, else in the cache directory. The note says why, when the user's
/// own `X.sqlite` is passed over.
fn export_target(
    report: &Path,
    sibling: &Path,
    cached: Option<&PathBuf>,
) -> Result<(PathBuf, Option<String>)> {
    let user_file = is_users_file(sibling);
    if writable_dir(&parent_dir(report)) && !user_file {
        return Ok((sibling.to_path_buf(), None));
    }
    let note = user_file.then(|| users_file_note(sibling, "exported into"));
    let Some(c) = cached else {
        bail!(
            "{} cannot be used for the export ({}) and there is no cache directory (set \
             XDG_CACHE_HOME or HOME)",
            sibling.display(),
            if user_file {
                "a file this tool did not write is there"
            } else {
                "the folder is read-only"
            }
        );
    };
    let dir = parent_dir(c);
    fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create cache directory {}", dir.display()))?;
    Ok((c.clone(), note))
}

/// The export of `report`, reused from the cache when it records this report's content, else
/// exported by nsys: as Arrow where that nsys writes it (unless `opts.format` says SQLite), else
/// as SQLite. Errors are one line that says what to do (see [`nsys_for_report`]).
///
/// An export beside the report that this tool did not write (no marker, see [`owns_export`])
/// is never used and left untouched: the export then goes to the cache directory.
pub fn export_report(report: &Path, opts: &ExportOptions) -> Result<Exported> {
    let mut exported = export_keeping_open(report, opts)?;
    // Its reader opens it by its path: not held open (table files mapped) meanwhile.
    exported.opened = None;
    Ok(exported)
}

/// [`export_report`], and the export opened (see [`Export::open`]): a reused export as the check
/// that it may be reused opened it.
pub fn export_and_open(report: &Path, opts: &ExportOptions) -> Result<(Exported, Export)> {
    let mut exported = export_keeping_open(report, opts)?;
    let export = match exported.opened.take() {
        Some((conn, schema)) => Export::opened(conn, schema),
        None => Export::open(&exported.path)?,
    };
    Ok((exported, export))
}

/// [`export_report`], keeping a reused export opened by its check in `opened`.
fn export_keeping_open(report: &Path, opts: &ExportOptions) -> Result<Exported> {
    let meta = fs::metadata(report).map_err(|e| anyhow!("cannot read: {e}"))?;
    if meta.is_dir() {
        bail!("is a directory, not a report");
    }
    if !meta.is_file() {
        bail!("not a regular file (a FIFO, device or socket): give a report file");
    }
    let capture = capture_version(report)?;
    let cache_dir = opts.cache_dir.clone().or_else(default_cache_dir);
    let reused = |p: &Path, note: Option<String>, opened| Exported {
        path: p.to_path_buf(),
        kind: ExportKind::Reused,
        nsys: None,
        capture,
        kept: true,
        note,
        opened: Some(opened),
        _temp: None,
    };

    // Why an export of this tool's was not reused: said with the new export.
    let mut again: Option<String> = None;
    if !opts.no_cache {
        for &format in opts.format.reusable() {
            let sibling = sibling(report, format);
            let cached = cache_dir.as_deref().map(|d| cached(report, d, format));
            for p in std::iter::once(&sibling).chain(cached.iter()) {
                match reusable_export(p, report, capture.as_ref()) {
                    Ok(opened) => {
                        let note = (p != &sibling && is_users_file(&sibling))
                            .then(|| users_file_note(&sibling, "the export reused from"));
                        return Ok(reused(p, note, opened));
                    }
                    Err(Some(why)) => {
                        again.get_or_insert(why);
                    }
                    Err(None) => {}
                }
            }
        }
    }

    let nsys = nsys_for_report(opts.nsys.as_deref(), capture.as_ref(), Some(report))?;
    // Taken before nsys reads the report: a report changed meanwhile is not recorded as read.
    let record = ExportRecord {
        report: crate::provenance::FileId::of(report),
        report_name: report
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        nsys: nsys.version,
    };
    let format = match opts.format {
        ExportFormat::Sqlite => Format::Sqlite,
        ExportFormat::Arrow => Format::Arrow,
        ExportFormat::Auto if writes_arrow(&nsys) => Format::Arrow,
        ExportFormat::Auto => Format::Sqlite,
    };
    let exported = export_as(report, opts, &nsys, &record, capture, format, again.clone());
    match exported {
        // An nsys that cannot write Arrow after all: SQLite, as it always could.
        // (Not for want of room: a SQLite export would not fit either.)
        Err(e)
            if opts.format == ExportFormat::Auto
                && format == Format::Arrow
                && e.downcast_ref::<FolderFull>().is_none() =>
        {
            let why = nsys_perfetto_model::errors::error_line(&e);
            let mut sqlite =
                export_as(report, opts, &nsys, &record, capture, Format::Sqlite, again)?;
            let note = format!("the Arrow export failed ({why}): exported as SQLite");
            sqlite.note = Some(match sqlite.note.take() {
                Some(n) => format!("{note}; {n}"),
                None => note,
            });
            Ok(sqlite)
        }
        e => e,
    }
}

/// Export `report` in `format` (see [`export_report`]), in its cache place or, with
/// `no_cache`, in a temporary directory.
fn export_as(
    report: &Path,
    opts: &ExportOptions,
    nsys: &Nsys,
    record: &ExportRecord,
    capture: Option<Version>,
    format: Format,
    again: Option<String>,
) -> Result<Exported> {
    let export_to =
        |target: &Path| run_export(nsys, report, target, capture.as_ref(), record, opts, format);
    if opts.no_cache && !opts.keep_sqlite {
        let temp = nsys_perfetto_model::cleanup::temp_dir("nsys-perfetto-export-")
            .context("cannot create a temporary directory")?;
        let target = temp
            .path()
            .join(format!("{}{}", stem_of(report), format.suffix()));
        let seconds = export_to(&target)?;
        return Ok(Exported {
            path: target,
            kind: ExportKind::Exported { seconds },
            nsys: Some(nsys.clone()),
            capture,
            kept: false,
            note: None,
            opened: None,
            _temp: Some(temp),
        });
    }

    let sibling = sibling(report, format);
    let cache_dir = opts.cache_dir.clone().or_else(default_cache_dir);
    let cached = cache_dir.as_deref().map(|d| cached(report, d, format));
    let (target, note) = export_target(report, &sibling, cached.as_ref())?;
    if let Some(n) = &note
        && !opts.quiet
    {
        nsys_perfetto_model::say!("note: {}: {n}", report.display());
    }
    let _lock = ExportLock::acquire(&target, report, opts.quiet)?;
    // Another conversion may have exported it while we waited.
    let reused = match opts.no_cache {
        true => None,
        false => reusable_export(&target, report, capture.as_ref()).ok(),
    };
    let (kind, nsys, note, opened) = if let Some(opened) = reused {
        (ExportKind::Reused, None, note, Some(opened))
    } else {
        let note = match (note, again) {
            (Some(n), Some(a)) => Some(format!("{n}; exporting again: {a}")),
            (n, None) => n,
            (None, Some(a)) => Some(format!("exporting again: {a}")),
        };
        let seconds = export_to(&target)?;
        (
            ExportKind::Exported { seconds },
            Some(nsys.clone()),
            note,
            None,
        )
    };
    Ok(Exported {
        path: target,
        kind,
        nsys,
        capture,
        kept: true,
        note,
        opened,
        _temp: None,
    })
}

/// `nsys export` into a hidden temporary beside `target`, renamed into place when nsys
/// succeeded and the result opens as an nsys export, then marked as this tool's. Nothing is left
/// behind on failure, timeout or interrupt. Never replaces a file the tool did not write.
fn run_export(
    nsys: &Nsys,
    report: &Path,
    target: &Path,
    capture: Option<&Version>,
    record: &ExportRecord,
    opts: &ExportOptions,
    format: Format,
) -> Result<f64> {
    let started = Instant::now();
    let dir = parent_dir(target);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    if fs::symlink_metadata(target).is_ok() && !owns_export(target) {
        bail!(
            "{} exists and was not written by nsys-perfetto: not replacing it",
            target.display()
        );
    }
    remove_stale_parts(&dir, &name);
    // The temporary: a file for SQLite; for Arrow, a directory nsys writes its files into.
    let prefix = format!(".{name}.{}.", std::process::id());
    let builder = || {
        let mut b = tempfile::Builder::new();
        b.prefix(&prefix).suffix(".part");
        b
    };
    let tmp: Part = match format {
        Format::Sqlite => Part::File(
            nsys_perfetto_model::cleanup::create(
                || builder().tempfile_in(&dir).map(|t| t.into_temp_path()),
                |t| t.to_path_buf(),
            )
            .map_err(|e| nsys_perfetto_model::errors::write_error(&dir, &e))?,
        ),
        Format::Arrow => Part::Dir(
            nsys_perfetto_model::cleanup::create(
                || builder().tempdir_in(&dir),
                |t| t.path().to_path_buf(),
            )
            .map_err(|e| nsys_perfetto_model::errors::write_error(&dir, &e))?,
        ),
    };
    let tmp_path = tmp.path().to_path_buf();
    let out = run_bounded(
        Command::new(&nsys.path)
            .args([
                "export",
                "--type",
                format.nsys_type(),
                "--force-overwrite",
                "true",
                "--output",
            ])
            .arg(&tmp_path)
            .arg(report),
        &format!("nsys export ({})", nsys.path.display()),
        opts.timeout,
        opts.quiet,
    );
    // nsys says at most that a write failed, and 2023.4 can even exit 0 on a full disk: the
    // folder its export filled says why (the part it wrote is still there).
    let no_room = |what: &str| -> Option<anyhow::Error> {
        if !nsys_perfetto_model::errors::is_full_dir(&dir) {
            return None;
        }
        // A temporary export's own folder means nothing to the user: its TMPDIR does.
        let (folder, elsewhere) = match opts.no_cache && !opts.keep_sqlite {
            true => (
                std::env::temp_dir(),
                "set TMPDIR to a folder with room".to_string(),
            ),
            false => (
                dir.clone(),
                format!(
                    "pass --no-cache to export into TMPDIR ({}) for this run only",
                    std::env::temp_dir().display()
                ),
            ),
        };
        Some(anyhow::Error::new(FolderFull(format!(
            "no room left in {} for the report's export: free space there, or {elsewhere} \
             ({what})",
            folder.display()
        ))))
    };
    let done = (|| -> Result<()> {
        let out = out?;
        if !out.status.success() {
            let msg = nsys_message(&out.stderr, &out.stdout);
            if let Some(e) = no_room(&format!("nsys export failed: {msg}")) {
                return Err(e);
            }
            let mut text = format!(
                "nsys export failed ({}, {}): {msg}",
                nsys.describe(),
                out.status
            );
            let readable = match (capture, &nsys.version) {
                (Some(c), Some(v)) => v.can_read(c),
                _ => false,
            };
            if readable {
                text.push_str(&format!(
                    "; the report looks damaged: it names nsys {} as its capture version, which \
                     this nsys reads",
                    capture.expect("known")
                ));
            } else if msg.contains("Version number is invalid")
                || msg.contains("ProtobufParseException")
            {
                text.push_str(&format!(
                    "; the report may come from a newer nsys: {INSTALL_HINT}"
                ));
            }
            bail!(text);
        }
        let checked = nsys_perfetto_read::schema::open_schema(&tmp_path)
            .map_err(|e| {
                anyhow!(
                    "nsys export ({}) reported success but wrote no usable export: {e}",
                    nsys.describe()
                )
            })
            .and_then(|_| {
                mark_owned(&tmp_path, record)
                    .map_err(|e| anyhow!("cannot mark the export as this tool's: {e}"))
            });
        // An export that opens may still have been cut short by the full disk nsys did not
        // report: it is not kept.
        let why = match &checked {
            Err(e) => format!("{e:#}"),
            Ok(()) => "nsys exited 0, but does not report a full disk".to_string(),
        };
        no_room(&why).map_or(checked, Err)
    })();
    let result = done.and_then(|()| tmp.persist(target));
    nsys_perfetto_model::cleanup::forget(&tmp_path);
    result?;
    Ok(started.elapsed().as_secs_f64())
}

/// An export failed for want of room in its folder.
#[derive(Debug)]
struct FolderFull(String);

impl std::fmt::Display for FolderFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FolderFull {}

/// An export being written, removed when dropped unless persisted.
enum Part {
    File(tempfile::TempPath),
    Dir(tempfile::TempDir),
}

impl Part {
    fn path(&self) -> &Path {
        match self {
            Part::File(p) => p,
            Part::Dir(d) => d.path(),
        }
    }

    /// Move it to `target`, replacing the export of this tool's there (checked by the caller).
    fn persist(self, target: &Path) -> Result<()> {
        let cannot = |e: std::io::Error| anyhow!("cannot create {}: {e}", target.display());
        match self {
            Part::File(p) => p.persist(target).map_err(|e| cannot(e.error)),
            Part::Dir(d) => {
                if fs::symlink_metadata(target).is_ok_and(|m| m.is_dir()) {
                    fs::remove_dir_all(target).map_err(cannot)?;
                }
                fs::rename(d.path(), target).map_err(cannot)?;
                // Renamed away: nothing is left for the guard to delete.
                let _ = d.keep();
                Ok(())
            }
        }
    }
}

/// Temporaries of exports that died (killed, power cut). Called with the lock held, or for a
/// private temporary directory, so no live export is writing them.
fn remove_stale_parts(dir: &Path, name: &str) {
    let prefix = format!(".{name}.");
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().to_string();
            if n.starts_with(&prefix) && n.ends_with(".part") {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let _ = fs::remove_dir_all(e.path());
                } else {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
    }
}

/// An exclusive `flock` on `.X.sqlite.lock` beside the export. The kernel drops it when the
/// process dies, so a lock is never stale. The holder removes the file before unlocking; a
/// waiter that then gets a lock on the removed file notices (different inode) and retries.
struct ExportLock {
    path: PathBuf,
    _file: File,
}

impl ExportLock {
    fn acquire(target: &Path, report: &Path, quiet: bool) -> Result<ExportLock> {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let path = parent_dir(target).join(format!(".{name}.lock"));
        let mut said = false;
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
                .with_context(|| format!("cannot create lock file {}", path.display()))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => {
                    if !quiet && !said {
                        nsys_perfetto_model::say!(
                            "{}: waiting for another conversion exporting it (lock {})",
                            report.display(),
                            path.display()
                        );
                        said = true;
                    }
                    file.lock()
                        .with_context(|| format!("cannot lock {}", path.display()))?;
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(anyhow!("cannot lock {}: {e}", path.display()));
                }
            }
            let held = file.metadata()?;
            match fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    nsys_perfetto_model::cleanup::register(&path);
                    return Ok(ExportLock { path, _file: file });
                }
                _ => continue,
            }
        }
    }
}

impl Drop for ExportLock {
    fn drop(&mut self) {
        // Remove while still holding the lock; closing the file then unlocks.
        let _ = fs::remove_file(&self.path);
        nsys_perfetto_model::cleanup::forget(&self.path);
    }
}
