//! Where an export's tables are (a file a table, or the streams of an `.arrows` file), and the
//! stamps that tell whether a file changed while it was read.

use anyhow::{Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The file extension nsys gives a table of an Arrow export.
pub const EXTENSION: &str = "arrow";

/// The error of a table whose file changed while it was read (`how`: truncated, removed...),
/// for the caller to prefix with the table's [`Place`].
pub(crate) fn changed(how: &str) -> anyhow::Error {
    anyhow!(
        "changed while it was read: {how} (was it still being written?); read it again once it is complete"
    )
}

/// The error of a stream that cannot be read as Arrow IPC (`what`: the decoder's or a check's
/// words).
pub(super) fn damaged(what: &str) -> anyhow::Error {
    anyhow!(
        "not a readable Arrow IPC stream ({}): a damaged or truncated file; export the report again",
        one_line(what)
    )
}

/// `text` on one line: the flatbuffer verifier's report of a damaged header runs over several,
/// each indented.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The file extension of nsys' single-file Arrow export (`nsys export --type arrow`): each
/// table's Arrow IPC stream, one after another, named by its schema's `table_name`.
pub(super) const STREAMS_EXTENSION: &str = "arrows";

/// Whether `path` is named as nsys names its single-file Arrow export (`.arrows`).
pub fn is_streams_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(STREAMS_EXTENSION))
}

/// Where a table's Arrow IPC stream lies: a whole `.arrow` file of an export directory, or a
/// run of the bytes of an `.arrows` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Place {
    pub(super) file: PathBuf,
    /// `None`: the whole file.
    pub(super) bytes: Option<std::ops::Range<u64>>,
    pub(super) table: String,
    /// The stamp of the file whose walk found `bytes`: they are the table's in that file only.
    pub(super) walked: Option<Stamp>,
}

impl std::fmt::Display for Place {
    /// The table's file by its name in the export's folder, or the table where its file holds
    /// several: the caller names the export, so that each line names each file once.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.bytes, self.file.file_name()) {
            (None, Some(name)) => write!(f, "{}", Path::new(name).display()),
            (None, None) => write!(f, "{}", self.file.display()),
            (Some(_), _) => write!(f, "table {}", self.table),
        }
    }
}

impl Place {
    /// The error of a table whose file changed while it was read: naming its file in an
    /// export's folder; in an `.arrows` file, where the change is the whole file's, nothing
    /// (the caller names the file).
    pub(super) fn changed(&self, how: &str) -> anyhow::Error {
        match self.bytes {
            None => anyhow!("{self}: {:#}", changed(how)),
            Some(_) => changed(how),
        }
    }
}

/// The tables of the Arrow or Parquet export `export` (a directory, or an `.arrows` file), by
/// name.
pub(super) fn places(export: &Path) -> Result<Vec<Place>> {
    if let Ok(m) = std::fs::metadata(export)
        && m.is_file()
    {
        return walked_streams(export, &m);
    }
    Ok(table_files(export)?
        .into_iter()
        .map(|(table, file)| Place {
            file,
            bytes: None,
            table,
            walked: None,
        })
        .collect())
}

/// A file's size, modification time and inode: what tells that it was rewritten.
pub(crate) type Stamp = (u64, i64, u64);

/// The [`Stamp`] of a file, from its metadata.
pub(crate) fn stamp(m: &std::fs::Metadata) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    (m.len(), m.mtime() * 1_000_000_000 + m.mtime_nsec(), m.ino())
}

/// The [`Stamp`] of the file at `path`, `None` where it cannot be read.
pub(crate) fn stamp_of(path: &Path) -> Option<Stamp> {
    std::fs::metadata(path).ok().map(|m| stamp(&m))
}

/// How the file at `path` changed since its stamp was `before` (removed, replaced, truncated
/// or rewritten), if it did.
pub(crate) fn change_since(path: &Path, before: Stamp) -> Option<&'static str> {
    match stamp_of(path) {
        None => Some("removed"),
        Some(now) => change(before, now),
    }
}

/// How a file whose stamp was `before` and is `now` changed (replaced, truncated or
/// rewritten), if it did.
pub(super) fn change(before: Stamp, now: Stamp) -> Option<&'static str> {
    match now {
        _ if now.2 != before.2 => Some("replaced"),
        _ if now.0 < before.0 => Some("truncated"),
        _ if now != before => Some("rewritten"),
        _ => None,
    }
}

/// An `.arrows` file walked: the file, its stamp, its streams.
pub(super) type Walked = (PathBuf, Stamp, Vec<Place>);

/// The last `.arrows` files walked by this process: each of a conversion's connections, scans
/// and row estimates asks for the tables of its export.
pub(super) static WALKED: Mutex<Vec<Walked>> = Mutex::new(Vec::new());

/// [`streams`] of `file` (whose metadata is `m`), walked once while the file is unchanged.
pub(super) fn walked_streams(file: &Path, m: &std::fs::Metadata) -> Result<Vec<Place>> {
    /// Files remembered: a batch converts a few at once.
    pub(super) const KEEP: usize = 16;
    let stamp = stamp(m);
    let found = |walked: &[Walked]| {
        walked
            .iter()
            .find(|(p, s, _)| *s == stamp && p == file)
            .map(|(_, _, places)| places.clone())
    };
    if let Some(places) = found(&WALKED.lock().unwrap_or_else(|e| e.into_inner())) {
        return Ok(places);
    }
    let places = streams(file)?;
    let mut walked = WALKED.lock().unwrap_or_else(|e| e.into_inner());
    if found(&walked).is_none() {
        if walked.len() == KEEP {
            walked.remove(0);
        }
        walked.push((file.to_path_buf(), stamp, places.clone()));
    }
    Ok(places)
}

/// Far above any message header nsys writes (a schema with every column's description is a few
/// kB): a larger one is a damaged length, not worth reading into memory.
pub(super) const MAX_HEADER: usize = 16 << 20;

/// The streams of an `.arrows` file: each one's table name and bytes, found by reading the
/// messages' headers (their bodies are skipped, not read; nothing is mapped, so a large file's
/// page-cache folios are not mapped whole around each header). The streams are checked as
/// tables when they are loaded; here, that each lies inside the file and ends with the
/// end-of-stream marker.
pub(super) fn streams(file: &Path) -> Result<Vec<Place>> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(file).map_err(|e| anyhow!("cannot read: {e}"))?;
    let walked = stamp(&f.metadata().map_err(|e| anyhow!("cannot read: {e}"))?);
    let size = usize::try_from(walked.0).map_err(|_| anyhow!("a file too large to read"))?;
    let read = |at: usize, buf: &mut [u8]| -> Result<()> {
        f.read_exact_at(buf, at as u64)
            .map_err(|e| anyhow!("cannot read: {e}"))
    };
    let word = |at: usize| -> Result<Option<i32>> {
        if at.checked_add(4).is_none_or(|end| end > size) {
            return Ok(None);
        }
        let mut w = [0u8; 4];
        read(at, &mut w)?;
        Ok(Some(i32::from_le_bytes(w)))
    };
    if size == 0 {
        bail!("an empty file, not an Arrow export");
    }
    let mut places: Vec<Place> = Vec::new();
    let mut header = Vec::new();
    let mut pos = 0usize;
    while pos < size {
        let start = pos;
        let mut table: Option<String> = None;
        // A damaged stream is named by its table once its schema has named it.
        let named = |table: &Option<String>, e: anyhow::Error| match table {
            Some(t) => anyhow!("table {t}: {e}"),
            None => e,
        };
        loop {
            let truncated = || named(&table, damaged("the stream is truncated"));
            let mut len = word(pos)?.ok_or_else(truncated)?;
            pos += 4;
            if len == -1 {
                len = word(pos)?.ok_or_else(truncated)?;
                pos += 4;
            }
            if len == 0 {
                break;
            }
            let end = usize::try_from(len)
                .ok()
                .and_then(|l| pos.checked_add(l))
                .filter(|&e| e <= size)
                .ok_or_else(|| named(&table, damaged("a message runs past the end of the file")))?;
            if end - pos > MAX_HEADER {
                return Err(named(&table, damaged("a message's header is too long")));
            }
            header.resize(end - pos, 0);
            read(pos, &mut header)?;
            let message = arrow_ipc::root_as_message(&header).map_err(|e| {
                named(
                    &table,
                    damaged(&format!("a message's header is damaged: {e}")),
                )
            })?;
            if table.is_none() {
                let schema = message
                    .header_as_schema()
                    .ok_or_else(|| damaged("a stream that does not begin with a schema"))?;
                let name = schema
                    .custom_metadata()
                    .and_then(|kvs| kvs.iter().find(|kv| kv.key() == Some("table_name")))
                    .and_then(|kv| kv.value())
                    .ok_or_else(|| damaged("a stream without its table's name"))?;
                table = Some(name.to_string());
            }
            pos = usize::try_from(message.bodyLength())
                .ok()
                .and_then(|b| end.checked_add(b))
                .filter(|&e| e <= size)
                .ok_or_else(|| {
                    named(
                        &table,
                        damaged("a message's body runs past the end of the file"),
                    )
                })?;
        }
        let table = table.ok_or_else(|| damaged("an empty stream"))?;
        if places.iter().any(|p| p.table == table) {
            bail!("two streams of table {table}");
        }
        places.push(Place {
            file: file.to_path_buf(),
            bytes: Some(start as u64..pos as u64),
            table,
            walked: Some(walked),
        });
    }
    places.sort_by(|a, b| a.table.cmp(&b.table));
    Ok(places)
}

/// The tables of an export directory: (table name, file), by name, its `.arrow` files, or where
/// it has none its `.parquet` files (as `inputs::classify` tells the two). A table is
/// named by its file, as nsys names the files.
pub(super) fn table_files(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let (mut tables, mut parquet) = (Vec::new(), Vec::new());
    for entry in std::fs::read_dir(dir).map_err(|e| anyhow!("cannot read the directory: {e}"))? {
        let entry = entry.map_err(|e| anyhow!("cannot read the directory: {e}"))?;
        let path = entry.path();
        // The directory's listing tells a file's type (no stat a table, each time an export is
        // listed); a link is followed.
        let is_file = |t: std::fs::FileType| {
            t.is_file() || t.is_symlink() && std::fs::metadata(&path).is_ok_and(|m| m.is_file())
        };
        let Some(extension) = path.extension() else {
            continue;
        };
        let of = if extension == EXTENSION {
            &mut tables
        } else if extension == crate::parquet::EXTENSION {
            &mut parquet
        } else {
            continue;
        };
        if entry.file_type().is_ok_and(is_file)
            && let Some(name) = path.file_stem().and_then(|s| s.to_str())
        {
            of.push((name.to_string(), path));
        }
    }
    if tables.is_empty() {
        tables = parquet;
    }
    tables.sort();
    Ok(tables)
}
