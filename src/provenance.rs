//! What a trace or a cached export was made from, recorded inside it and checked before it is
//! reused.
//!
//! A trace written by a conversion carries a [`Record`]: the tool and its version, the identity
//! of the input the user named (the report, or the SQLite export) and the options that shape
//! the content (types, filters, time range, processes, devices, colours, format). A later run
//! reuses the trace only when all three match what it was asked; otherwise it converts again
//! and says why. A file without a record (not written by this tool, or by a version that did
//! not record one) is never reused.
//!
//! Where the record lives (each format's entry in [`nsys_perfetto_write::output::formats::FORMATS`] reads it):
//! * `.pftrace`: the last packet of the file, a `ChromeEventBundle` with one `ChromeMetadata`
//!   entry named `nsys-perfetto` (trace_processor keeps it as metadata and draws nothing). It is
//!   found by reading the file's last 64 KiB, not the whole trace.
//! * `.json`: the last key of the top-level `otherData` object, `nsys-perfetto-provenance`.
//! * Compressed outputs (`.gz`) and standard output carry none (it could not be read back
//!   cheaply): they are always converted.
//!
//! The input's identity ([`FileId`]) is its size and a CRC-32 of its whole content, with the
//! file's device, inode, modification and status-change times. While those stat fields are all
//! unchanged the content cannot have changed (the kernel sets the status-change time on every
//! write, and no call sets it back), so the check is one `stat`. When any differs (the file was
//! touched, copied, restored with its old modification time, or rewritten), the content is
//! read and its CRC compared: a copy with the same bytes is still recognised, and a file
//! changed in place with its old size and modification time is not mistaken for the original.
//! The CRC reads the input at about memory speed; a conversion reads all of it anyway.
use nsys_perfetto_write::output::formats::OutputFormat;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The tool and version that wrote a record.
pub const TOOL: &str = concat!("nsys-perfetto ", env!("CARGO_PKG_VERSION"));

/// How much of an output's end is read to find its record.
const TAIL: u64 = 64 << 10;

/// A file's content identity, with the stat fields that let an unchanged file be recognised
/// without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileId {
    pub size: u64,
    pub crc32: u32,
    pub dev: u64,
    pub ino: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// The stat fields of a [`FileId`]: (size, dev, ino, mtime, ctime).
fn stat_of(m: &std::fs::Metadata) -> (u64, u64, u64, i64, i64) {
    (
        m.len(),
        m.dev(),
        m.ino(),
        m.mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(m.mtime_nsec()),
        m.ctime()
            .saturating_mul(1_000_000_000)
            .saturating_add(m.ctime_nsec()),
    )
}

/// The files an identity covers: the file itself, or the files of a directory export (an
/// Arrow export is a directory of one file a table), by name.
fn files_of(path: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    if !std::fs::metadata(path)?.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let p = entry.path();
        // The listing tells a file's type without a stat; a link is followed.
        let t = entry.file_type()?;
        if t.is_file() || t.is_symlink() && std::fs::metadata(&p).is_ok_and(|m| m.is_file()) {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// The stat fields of a file, or of a directory export as a whole: its files' total size, the
/// directory's device and inode, and the latest change of any of its files or itself (a file
/// rewritten in place changes its own times, not the directory's).
fn stat_at(path: &Path) -> Option<(u64, u64, u64, i64, i64)> {
    let m = std::fs::metadata(path).ok()?;
    if m.is_file() {
        return Some(stat_of(&m));
    }
    if !m.is_dir() {
        return None;
    }
    let (_, dev, ino, mut mtime, mut ctime) = stat_of(&m);
    let mut size = 0u64;
    for f in files_of(path).ok()? {
        let (s, _, _, mt, ct) = stat_of(&std::fs::metadata(&f).ok()?);
        size += s;
        mtime = mtime.max(mt);
        ctime = ctime.max(ct);
    }
    Some((size, dev, ino, mtime, ctime))
}

/// CRC-32 of a whole file, or of a directory export's files (names and contents) in name order.
fn crc_of(path: &Path) -> std::io::Result<u32> {
    let mut crc = flate2::Crc::new();
    // One buffer for all the files: a fresh one per file would be mapped and faulted in anew.
    let mut buf = vec![0u8; 1 << 20];
    let files = files_of(path)?;
    let named = files.len() > 1 || files.first().is_some_and(|f| f != path);
    for file in files {
        if named {
            crc.update(file.file_name().unwrap_or_default().as_encoded_bytes());
        }
        crc_update(&mut crc, &file, &mut buf)?;
    }
    Ok(crc.sum())
}

fn crc_update(crc: &mut flate2::Crc, path: &Path, buf: &mut [u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::open(path)?;
    loop {
        let n = match f.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        crc.update(&buf[..n]);
    }
    Ok(())
}

impl FileId {
    /// The identity of a regular file. `None` for anything else, or when it cannot be read, or
    /// when it changed while being read.
    pub fn of(path: &Path) -> Option<FileId> {
        let before = stat_at(path)?;
        let crc32 = crc_of(path).ok()?;
        let (size, dev, ino, mtime_ns, ctime_ns) = before;
        (stat_at(path)? == before).then_some(FileId {
            size,
            crc32,
            dev,
            ino,
            mtime_ns,
            ctime_ns,
        })
    }

    /// Whether `path` holds the content this identity was taken of: unchanged stat fields, or
    /// the same size and CRC.
    pub fn matches(&self, path: &Path) -> bool {
        let Some(stat) = stat_at(path) else {
            return false;
        };
        if stat.0 != self.size {
            return false;
        }
        if stat == (self.size, self.dev, self.ino, self.mtime_ns, self.ctime_ns) {
            return true;
        }
        crc_of(path).is_ok_and(|c| c == self.crc32)
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "size": self.size,
            "crc32": format!("{:08x}", self.crc32),
            "dev": self.dev,
            "ino": self.ino,
            "mtime_ns": self.mtime_ns,
            "ctime_ns": self.ctime_ns,
        })
    }

    fn from_json(v: &serde_json::Value) -> Option<FileId> {
        Some(FileId {
            size: v.get("size")?.as_u64()?,
            crc32: u32::from_str_radix(v.get("crc32")?.as_str()?, 16).ok()?,
            dev: v.get("dev")?.as_u64()?,
            ino: v.get("ino")?.as_u64()?,
            mtime_ns: v.get("mtime_ns")?.as_i64()?,
            ctime_ns: v.get("ctime_ns")?.as_i64()?,
        })
    }

    /// As text, for records kept elsewhere (the export cache).
    pub fn to_text(&self) -> String {
        self.to_json().to_string()
    }

    pub fn from_text(text: &str) -> Option<FileId> {
        FileId::from_json(&serde_json::from_str(text).ok()?)
    }
}

/// What a trace was made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// [`TOOL`] of the writer.
    pub tool: String,
    /// The input's file name, for messages.
    pub input_name: String,
    pub input: FileId,
    /// The conversion's options ([`crate::convert::Options::content_text`]).
    pub options: String,
}

impl Record {
    /// The record of converting `origin` (what the user named: a report or an export) with
    /// `options` (their content text); `None` when `origin` cannot be read as a regular file.
    pub fn new(origin: &Path, options: String) -> Option<Record> {
        Some(Record {
            tool: TOOL.to_string(),
            input_name: origin
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_default(),
            input: FileId::of(origin)?,
            options,
        })
    }

    pub fn to_text(&self) -> String {
        serde_json::json!({
            "tool": self.tool,
            "input_name": self.input_name,
            "input": self.input.to_json(),
            "options": self.options,
        })
        .to_string()
    }

    pub fn parse(text: &str) -> Option<Record> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        Some(Record {
            tool: v.get("tool")?.as_str()?.to_string(),
            input_name: v.get("input_name")?.as_str()?.to_string(),
            input: FileId::from_json(v.get("input")?)?,
            options: v.get("options")?.as_str()?.to_string(),
        })
    }
}

/// The options text for messages: "the default options" when empty.
pub fn shown(options: &str) -> &str {
    if options.is_empty() {
        "the default options"
    } else {
        options
    }
}

// ---------------------------------------------------------------------------------------------
// In the file

fn read_tail(path: &Path) -> Option<Vec<u8>> {
    let mut f = std::fs::File::open(path).ok()?;
    let m = f.metadata().ok()?;
    if !m.is_file() {
        return None;
    }
    let from = m.len().saturating_sub(TAIL);
    f.seek(SeekFrom::Start(from)).ok()?;
    let mut tail = Vec::with_capacity((m.len() - from) as usize);
    f.read_to_end(&mut tail).ok()?;
    Some(tail)
}

/// Whether a record in `output` can be read back: an uncompressed trace of one of the formats
/// (not a `.gz`, whose end is compressed, nor standard output). Only those carry one.
pub fn readable(output: &Path) -> bool {
    OutputFormat::of_file(output).is_some_and(|(_, gzipped)| !gzipped)
}

/// The record a trace carries, if it is a trace this tool wrote and can read back.
pub fn read(output: &Path) -> Option<Record> {
    let (format, false) = OutputFormat::of_file(output)? else {
        return None;
    };
    let tail = read_tail(output)?;
    Record::parse(&(format.spec().read_record)(&tail)?)
}

/// Whether an existing output may stand for converting `origin` with `opts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reuse {
    /// No output there.
    Missing,
    /// Made by this version from the same input content with the same options.
    Same,
    /// Must be converted again, because of this.
    Differs(String),
}

/// Check the output `output` against converting `origin` with `options` (their content text).
pub fn check(output: &Path, origin: &Path, options: &str) -> Reuse {
    if std::fs::symlink_metadata(output).is_err() {
        return Reuse::Missing;
    }
    let Some(rec) = read(output) else {
        return Reuse::Differs(format!(
            "{} carries no record of what it was made from (not written by this version of \
             nsys-perfetto)",
            output.display()
        ));
    };
    if rec.tool != TOOL {
        return Reuse::Differs(format!("made by {}, this is {TOOL}", rec.tool));
    }
    if rec.options != options {
        return Reuse::Differs(format!(
            "made with other options ({}; now {})",
            shown(&rec.options),
            shown(options)
        ));
    }
    // A trace made from a report stands for the export this tool made of that report's content
    // (a folder's pair: the export is converted in place of its report).
    let of_report = || {
        recorded_report(origin)
            .is_some_and(|r| (r.size, r.crc32) == (rec.input.size, rec.input.crc32))
    };
    if !rec.input.matches(origin) && !of_report() {
        return Reuse::Differs(format!(
            "made from other content ({} changed since)",
            origin.display()
        ));
    }
    Reuse::Same
}

/// The table in which an export this tool wrote records what it was made from: rows (key,
/// value) with `report` (the report's [`FileId`] as text), `report_name`,
/// `nsys` (the version that exported it) and `tool`. It has no time column, so conversions
/// pass over it.
pub const EXPORT_RECORD_TABLE: &str = "nsys_perfetto_export";

/// The file in an Arrow export this tool wrote that records what it was made from (the rows of
/// [`EXPORT_RECORD_TABLE`] as a JSON object): nsys writes no such file, so its presence marks
/// the directory as this tool's, as [`EXPORT_APPLICATION_ID`] marks an SQLite file.
pub const EXPORT_RECORD_FILE: &str = ".nsys-perfetto-export.json";

/// The rows (key, value) an export this tool wrote records; `None` for an export of the user's,
/// or one that records nothing.
pub fn export_record(export: &Path) -> Option<std::collections::HashMap<String, String>> {
    if !owns_export(export) {
        return None;
    }
    if std::fs::metadata(export).is_ok_and(|m| m.is_dir()) {
        let text = fs::read_to_string(export.join(EXPORT_RECORD_FILE)).ok()?;
        return serde_json::from_str(&text).ok();
    }
    let _shm = nsys_perfetto_read::connection::ShmGuard::new(export);
    let conn = nsys_perfetto_read::connection::open_readonly(export).ok()?;
    let mut stmt = conn
        .prepare(&format!("SELECT key, value FROM {EXPORT_RECORD_TABLE}"))
        .ok()?;
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .ok()?
        .collect::<rusqlite::Result<_>>()
        .ok()
}

/// The identity of the report an export this tool wrote was exported from, as it records it
/// (`None` for a file of the user's, or one that records none).
pub fn recorded_report(export: &Path) -> Option<FileId> {
    FileId::from_text(export_record(export)?.get("report")?)
}

/// The SQLite `application_id` nsys-perfetto sets in the exports it writes ("nspf"): how a
/// later run knows which `X.sqlite` files are its own. nsys leaves it 0. Set on the temporary
/// before it is renamed into place, so no file of the user's is ever written.
pub const EXPORT_APPLICATION_ID: u32 = u32::from_be_bytes(*b"nspf");

/// Whether nsys-perfetto wrote the export at `export`: an SQLite file whose header carries
/// [`EXPORT_APPLICATION_ID`] (bytes 68..72), or an Arrow export directory holding
/// [`EXPORT_RECORD_FILE`]. An export the tool did not write is never modified, replaced or
/// deleted.
pub fn owns_export(export: &Path) -> bool {
    if fs::metadata(export).is_ok_and(|m| m.is_dir()) {
        return fs::metadata(export.join(EXPORT_RECORD_FILE)).is_ok_and(|m| m.is_file());
    }
    let mut header = [0u8; 72];
    fs::metadata(export).is_ok_and(|m| m.is_file())
        && File::open(export)
            .and_then(|mut f| f.read_exact(&mut header))
            .is_ok()
        && header.starts_with(b"SQLite format 3\0")
        && u32::from_be_bytes(header[68..72].try_into().expect("4 bytes")) == EXPORT_APPLICATION_ID
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_id_sees_a_rewrite_with_the_old_size_and_time() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, b"aaaa").unwrap();
        let id = FileId::of(&p).unwrap();
        assert!(id.matches(&p));
        let t = std::fs::metadata(&p).unwrap().modified().unwrap();
        std::fs::write(&p, b"aaab").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
        assert!(!id.matches(&p));
        // A copy elsewhere with the same bytes is the same content.
        std::fs::write(&p, b"aaaa").unwrap();
        let q = d.path().join("g");
        std::fs::copy(&p, &q).unwrap();
        assert!(id.matches(&q));
    }
}
