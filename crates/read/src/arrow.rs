//! nsys' Arrow export (`nsys export --type arrowdir`: one Arrow IPC stream file a table, with the
//! SQLite export's tables and columns, typed; or `--type arrow`: the same streams one after
//! another in one `.arrows` file) read as SQLite virtual tables: every reader and workflow reads
//! it with the very SQL that reads an SQLite export, so both give the same rows.
//!
//! Each table's stream is memory-mapped and decoded in place (Arrow's buffers point into the
//! mapping; nothing is copied), and a virtual table's cursor hands SQLite one value at a time
//! from the typed columns. What SQLite asks of a table that a plain scan cannot answer cheaply
//! is answered here: `rowid = ?` (and `id = ?` where `id` is the key, as in `StringIds`) by a
//! binary search, and `ORDER BY` on columns the rows are already sorted by without a sort.

use anyhow::{Result, anyhow, bail};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrowPrimitiveType, BinaryArray, LargeStringArray, RecordBatch, StringArray,
};
use arrow_buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use arrow_schema::DataType;
use rusqlite::types::ValueRef;
use rusqlite::vtab::{
    Context, Filters, IndexConstraintOp, IndexFlags, IndexInfo, Module, VTab, VTabConnection,
    VTabCursor,
};
use rusqlite::{Connection, ffi};
use std::borrow::Cow;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_int};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// What [`check_layout`] found of a stream whose first message is a schema.
struct Layout {
    schema: arrow_schema::Schema,
    version: arrow_ipc::MetadataVersion,
    /// Each record batch: where its message starts (its length prefix) and the length of its
    /// prefix and metadata, the body following.
    batches: Vec<(usize, usize)>,
}

/// Check that every message of an Arrow IPC stream lies inside the file and every buffer of a
/// record batch inside its message's body. Arrow's decoder trusts the offsets and lengths a
/// message gives: in a damaged file they make it panic (inside SQLite's call into a virtual
/// table, an abort) rather than fail. Where the stream's first message is a schema whose
/// columns all have types nsys writes, also check that each record batch's columns have the
/// rows and buffers their types need (see [`check_batch`]) and that the stream ends cleanly, and
/// return where the batches are: they can be decoded without the decoder's checks.
/// `walked(pos)` is told after each message that everything before `pos` has been read.
fn check_layout(
    bytes: &[u8],
    mut walked: impl FnMut(usize),
) -> std::result::Result<Option<Layout>, String> {
    let word = |at: usize| -> Option<i32> {
        Some(i32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let mut pos = 0usize;
    let mut layout: Option<Layout> = None;
    let mut first = true;
    loop {
        let start = pos;
        let Some(mut len) = word(pos) else {
            break;
        };
        pos += 4;
        if len == -1 {
            // The continuation marker, then the metadata's length.
            let Some(l) = word(pos) else {
                break;
            };
            len = l;
            pos += 4;
        }
        if len == 0 {
            return Ok(layout);
        }
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| pos.checked_add(l))
            .filter(|&e| e <= bytes.len())
            .ok_or("a message runs past the end of the file")?;
        let message = arrow_ipc::root_as_message(&bytes[pos..end])
            .map_err(|e| format!("a message's header is damaged: {e}"))?;
        pos = end;
        let body = usize::try_from(message.bodyLength())
            .ok()
            .filter(|&b| pos.checked_add(b).is_some_and(|e| e <= bytes.len()))
            .ok_or("a message's body runs past the end of the file")?;
        if std::mem::take(&mut first)
            && let Some(s) = message.header_as_schema()
        {
            let schema = arrow_ipc::convert::try_fb_to_schema(s)
                .map_err(|e| format!("the schema is damaged: {e}"))?;
            layout = supported(&schema).then(|| Layout {
                schema,
                version: message.version(),
                batches: Vec::new(),
            });
            pos += body;
            continue;
        }
        let dictionary = message.header_as_dictionary_batch();
        let batch = message
            .header_as_record_batch()
            .or_else(|| dictionary.and_then(|d| d.data()));
        for b in batch.and_then(|b| b.buffers()).iter().flatten() {
            let inside = u64::try_from(b.offset())
                .ok()
                .zip(u64::try_from(b.length()).ok())
                .and_then(|(o, l)| o.checked_add(l))
                .is_some_and(|e| e <= body as u64);
            if !inside {
                return Err("a buffer lies outside its message".into());
            }
        }
        if let Some(layout) = &mut layout {
            let Some(batch) = message.header_as_record_batch() else {
                return Err("a message other than a record batch after the schema".into());
            };
            if message.version() != layout.version {
                return Err("messages of different versions".into());
            }
            check_batch(&layout.schema, batch)?;
            layout.batches.push((start, end - start));
        }
        pos += body;
        walked(pos);
    }
    // The file ends without the end-of-stream marker: only where a message does.
    if layout.is_some() && pos < bytes.len() {
        return Err("the stream is truncated".into());
    }
    Ok(layout)
}

/// The schema and record batches of the Arrow IPC stream in `buffer`, through Arrow's stream
/// decoder and its checks.
fn stream(mut buffer: arrow_buffer::Buffer) -> Result<(arrow_schema::SchemaRef, Vec<RecordBatch>)> {
    let mut decoder = arrow_ipc::reader::StreamDecoder::new();
    let mut batches: Vec<RecordBatch> = Vec::new();
    let mut schema = None;
    while !buffer.is_empty() {
        if let Some(batch) = decoder.decode(&mut buffer)? {
            schema.get_or_insert_with(|| batch.schema());
            batches.push(batch);
        }
    }
    decoder.finish()?;
    if schema.is_none() {
        // A stream with a schema and no batch: an empty table.
        schema = decoder.schema();
    }
    let Some(schema) = schema else {
        bail!("no Arrow schema");
    };
    Ok((schema, batches))
}

/// Whether every column of `schema` has a type nsys' Arrow export uses (see [`Column::sql_type`]).
fn supported(schema: &arrow_schema::Schema) -> bool {
    schema
        .fields()
        .iter()
        .all(|f| Column::sql_type(f.data_type()).is_some())
}

/// The columns of `schema` with their SQLite types; an error names a column of a type nsys'
/// Arrow export does not use.
fn sql_columns(schema: &arrow_schema::Schema) -> Result<Vec<(String, &'static str)>> {
    let mut columns = Vec::new();
    for field in schema.fields() {
        let Some(t) = Column::sql_type(field.data_type()) else {
            bail!(
                "column {} has type {}, which nsys' Arrow export does not use",
                field.name(),
                field.data_type()
            );
        };
        columns.push((field.name().clone(), t));
    }
    Ok(columns)
}

/// Check that each column of a record batch of `schema` (whose types are all [`supported`]) has
/// the batch's rows and buffers long enough for them: what the decoder would check before
/// building its arrays, which are built without those checks (see [`Table::load`]). The values
/// themselves (offsets, UTF-8, null counts) are checked after decoding, a slice at a time.
fn check_batch(
    schema: &arrow_schema::Schema,
    batch: arrow_ipc::RecordBatch<'_>,
) -> std::result::Result<(), String> {
    if batch.compression().is_some() {
        return Err("a compressed record batch, which nsys does not write".into());
    }
    let rows = usize::try_from(batch.length()).map_err(|_| "a negative row count")?;
    let nodes = batch
        .nodes()
        .ok_or("a record batch without its columns' lengths")?;
    let buffers = batch.buffers().ok_or("a record batch without buffers")?;
    if nodes.len() < schema.fields().len() {
        return Err("a record batch with fewer columns than its schema".into());
    }
    let mut next = buffers.iter();
    let too_long = || "a column too long for its buffers".to_string();
    for (k, field) in schema.fields().iter().enumerate() {
        let node = nodes.get(k);
        if node.length() != batch.length() {
            return Err("a column's length is not its record batch's".into());
        }
        if !(0..=node.length()).contains(&node.null_count()) {
            return Err("a column's null count is not within its rows".into());
        }
        let bits = if node.null_count() > 0 {
            rows.div_ceil(8)
        } else {
            0
        };
        let t = field.data_type();
        let offsets = |width: usize| rows.checked_add(1).and_then(|n| n.checked_mul(width));
        let needs: Vec<Option<usize>> = match t {
            DataType::Null => Vec::new(),
            DataType::Utf8 | DataType::Binary => vec![Some(bits), offsets(4), Some(0)],
            DataType::LargeUtf8 => vec![Some(bits), offsets(8), Some(0)],
            DataType::Boolean => vec![Some(bits), Some(rows.div_ceil(8))],
            _ => vec![
                Some(bits),
                t.primitive_width().and_then(|w| rows.checked_mul(w)),
            ],
        };
        for (i, need) in needs.into_iter().enumerate() {
            let b = next
                .next()
                .ok_or("a record batch with fewer buffers than its columns")?;
            let have = usize::try_from(b.length()).map_err(|_| too_long())?;
            // An empty variable-width column may leave out its offsets.
            if i == 1 && rows == 0 && have == 0 {
                continue;
            }
            if need.is_none_or(|n| have < n) {
                return Err(too_long());
            }
        }
    }
    Ok(())
}

/// The file extension nsys gives a table of an Arrow export.
pub const EXTENSION: &str = "arrow";

/// What nsys appends to a report's name for its Arrow export's directory.
pub const NSYS_DIR_SUFFIX: &str = "_arwdir";

/// `text` on one line: the flatbuffer verifier's report of a damaged header runs over several,
/// each indented.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The file extension of nsys' single-file Arrow export (`nsys export --type arrow`): each
/// table's Arrow IPC stream, one after another, named by its schema's `table_name`.
const STREAMS_EXTENSION: &str = "arrows";

/// Whether `path` is named as nsys names its single-file Arrow export (`.arrows`).
pub fn is_streams_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case(STREAMS_EXTENSION))
}

/// Where a table's Arrow IPC stream lies: a whole `.arrow` file of an export directory, or a
/// run of the bytes of an `.arrows` file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Place {
    file: PathBuf,
    /// `None`: the whole file.
    bytes: Option<std::ops::Range<u64>>,
    table: String,
    /// The stamp of the file whose walk found `bytes`: they are the table's in that file only.
    walked: Option<Stamp>,
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
    fn changed(&self, how: &str) -> anyhow::Error {
        match self.bytes {
            None => anyhow!("{self}: {:#}", changed(how)),
            Some(_) => changed(how),
        }
    }
}

/// The tables of the Arrow export `export` (a directory, or an `.arrows` file), by name.
fn places(export: &Path) -> Result<Vec<Place>> {
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

/// Where `table` of the Arrow export `export` lies (see [`places`]).
fn place(export: &Path, table: &str) -> Result<Place> {
    if let Ok(m) = std::fs::metadata(export)
        && m.is_file()
    {
        return walked_streams(export, &m)
            .map_err(|e| changed_in_use(export, table).unwrap_or(e))?
            .into_iter()
            .find(|p| p.table == table)
            .ok_or_else(|| anyhow!("{}: no table {table}", export.display()));
    }
    Ok(Place {
        file: export.join(format!("{table}.{EXTENSION}")),
        bytes: None,
        table: table.to_string(),
        walked: None,
    })
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
fn change(before: Stamp, now: Stamp) -> Option<&'static str> {
    match now {
        _ if now.2 != before.2 => Some("replaced"),
        _ if now.0 < before.0 => Some("truncated"),
        _ if now != before => Some("rewritten"),
        _ => None,
    }
}

/// An `.arrows` file walked: the file, its stamp, its streams.
type Walked = (PathBuf, Stamp, Vec<Place>);

/// The last `.arrows` files walked by this process: each of a conversion's connections, scans
/// and row estimates asks for the tables of its export.
static WALKED: Mutex<Vec<Walked>> = Mutex::new(Vec::new());

/// [`streams`] of `file` (whose metadata is `m`), walked once while the file is unchanged.
fn walked_streams(file: &Path, m: &std::fs::Metadata) -> Result<Vec<Place>> {
    /// Files remembered: a batch converts a few at once.
    const KEEP: usize = 16;
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

/// The streams of an `.arrows` file: each one's table name and bytes, found by reading the
/// messages' headers (their bodies are skipped, not read; nothing is mapped, so a large file's
/// page-cache folios are not mapped whole around each header). The streams are checked as
/// tables when they are loaded; here, that each lies inside the file and ends with the
/// end-of-stream marker.
fn streams(file: &Path) -> Result<Vec<Place>> {
    use std::os::unix::fs::FileExt;
    /// Far above any header nsys writes (a schema with every column's description is a few
    /// kB): a larger one is a damaged length, not worth reading into memory.
    const MAX_HEADER: usize = 16 << 20;
    let f = std::fs::File::open(file).map_err(|e| anyhow!("cannot read: {e}"))?;
    let walked = stamp(&f.metadata().map_err(|e| anyhow!("cannot read: {e}"))?);
    let size = usize::try_from(walked.0).map_err(|_| anyhow!("a file too large to read"))?;
    let damaged = |what: &str| {
        anyhow!(
            "not a readable Arrow IPC stream ({}): a damaged or truncated file; export the report again",
            one_line(what)
        )
    };
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

/// The tables of an Arrow export directory: (table name, file), by name. A table is named by
/// its file, as nsys names the files.
fn table_files(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut tables = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| anyhow!("cannot read the directory: {e}"))? {
        let path = entry
            .map_err(|e| anyhow!("cannot read the directory: {e}"))?
            .path();
        if path.extension().is_some_and(|e| e == EXTENSION)
            && std::fs::metadata(&path).is_ok_and(|m| m.is_file())
            && let Some(name) = path.file_stem().and_then(|s| s.to_str())
        {
            tables.push((name.to_string(), path));
        }
    }
    tables.sort();
    Ok(tables)
}

/// The largest rowid of `table` in the Arrow export `export` (its last key, or its row count
/// where rowids are row numbers), without reading its rows; `None` for an empty table.
pub fn max_rowid(export: &Path, table: &str) -> Result<Option<i64>> {
    let t = Table::shared(&place(export, table)?)?;
    Ok(t.rows.checked_sub(1).map(|last| {
        let (b, i) = t.locate(last);
        t.rowid(b, i, last)
    }))
}

/// Every table of an Arrow export, loaded (each file checked) once: while this is held, the
/// connections and scans of a conversion find each table loaded (`Table::shared`).
pub struct Tables(Vec<(String, Arc<Table>)>);

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(n, _)| n))
            .finish()
    }
}

impl Tables {
    /// Load every table of the export `export` (a directory, or an `.arrows` file). Errors
    /// name the file (and the table, in an `.arrows` file) and the problem in one line.
    pub fn load(export: &Path) -> Result<Tables> {
        let mut tables = Vec::new();
        for place in places(export)? {
            let t = Table::shared(&place).map_err(|e| anyhow!("{place}: {e:#}"))?;
            tables.push((place.table, t));
        }
        Ok(Tables(tables))
    }

    /// An error naming the first table whose file changed since it was loaded (see
    /// `Table::change`): what was read of it may not be the file's.
    pub fn unchanged(&self) -> Result<()> {
        self.0.iter().try_for_each(|(_, t)| t.unchanged())
    }

    /// Each table's name and column names.
    pub fn columns(&self) -> impl Iterator<Item = (&str, impl Iterator<Item = &str>)> {
        self.0
            .iter()
            .map(|(n, t)| (n.as_str(), t.columns.iter().map(|(c, _)| c.as_str())))
    }
}

/// Make every table of the Arrow export `export` readable by its name on `conn`, in any of its
/// databases: each is an eponymous virtual table, declared by SQLite on a statement's first
/// use of it. (A conversion opens a connection a reader; most read a few tables, and most of
/// those with direct scans that need no SQL: declaring every table on every connection would
/// cost more than the reading of many of them.)
pub fn register(conn: &Connection, export: &Path) -> Result<()> {
    const MODULE: Module<ArrowTable> = Module::eponymous_only_module();
    for place in places(export)? {
        conn.create_module(place.table.clone().as_str(), &MODULE, Some(place))?;
    }
    Ok(())
}

/// One column of one record batch: its validity and its typed values, read in place.
#[derive(Clone)]
struct Column {
    nulls: Option<NullBuffer>,
    data: Data,
}

#[derive(Clone)]
enum Data {
    I64(ScalarBuffer<i64>),
    I32(ScalarBuffer<i32>),
    I16(ScalarBuffer<i16>),
    I8(ScalarBuffer<i8>),
    U64(ScalarBuffer<u64>),
    U32(ScalarBuffer<u32>),
    U16(ScalarBuffer<u16>),
    U8(ScalarBuffer<u8>),
    F64(ScalarBuffer<f64>),
    F32(ScalarBuffer<f32>),
    Bool(BooleanBuffer),
    Text(StringArray),
    LargeText(LargeStringArray),
    Blob(BinaryArray),
    Null,
    /// What a direct scan reads in place of a table's column (see [`TableScan`]), never a
    /// table's own: a constant,
    Const(i64),
    /// the row's number in the batch from this value on (the rowid of a table without a key),
    Count(i64),
    /// the first non-NULL value of these columns.
    Coalesce(Box<[Column]>),
}

impl Column {
    fn new(array: &dyn Array) -> Option<Column> {
        fn values<T: ArrowPrimitiveType>(a: &dyn Array) -> ScalarBuffer<T::Native> {
            a.as_primitive::<T>().values().clone()
        }
        let data = match array.data_type() {
            DataType::Int64 => Data::I64(values::<Int64Type>(array)),
            DataType::Int32 => Data::I32(values::<Int32Type>(array)),
            DataType::Int16 => Data::I16(values::<Int16Type>(array)),
            DataType::Int8 => Data::I8(values::<Int8Type>(array)),
            DataType::UInt64 => Data::U64(values::<UInt64Type>(array)),
            DataType::UInt32 => Data::U32(values::<UInt32Type>(array)),
            DataType::UInt16 => Data::U16(values::<UInt16Type>(array)),
            DataType::UInt8 => Data::U8(values::<UInt8Type>(array)),
            DataType::Float64 => Data::F64(values::<Float64Type>(array)),
            DataType::Float32 => Data::F32(values::<Float32Type>(array)),
            DataType::Boolean => Data::Bool(array.as_boolean().values().clone()),
            DataType::Utf8 => Data::Text(array.as_string().clone()),
            DataType::LargeUtf8 => Data::LargeText(array.as_string().clone()),
            DataType::Binary => Data::Blob(array.as_binary().clone()),
            DataType::Null => Data::Null,
            _ => return None,
        };
        Some(Column {
            nulls: array.logical_nulls().filter(|n| n.null_count() > 0),
            data,
        })
    }

    /// The SQLite type a column of `t` is declared with (as the SQLite export declares it).
    fn sql_type(t: &DataType) -> Option<&'static str> {
        Some(match t {
            DataType::Int64
            | DataType::Int32
            | DataType::Int16
            | DataType::Int8
            | DataType::UInt64
            | DataType::UInt32
            | DataType::UInt16
            | DataType::UInt8
            | DataType::Boolean => "INTEGER",
            DataType::Float64 | DataType::Float32 => "REAL",
            DataType::Utf8 | DataType::LargeUtf8 => "TEXT",
            DataType::Binary => "BLOB",
            DataType::Null => "",
            _ => return None,
        })
    }

    /// Each buffer the column reads (its validity bits, its values, a text's offsets and bytes)
    /// with how many of its bytes hold rows before row `i` (`i` at most the column's rows):
    /// `f(k, buffer, bytes)`, `k` the buffer's place (0 validity, 1 values or offsets, 2 bytes).
    fn behind(&self, i: usize, mut f: impl FnMut(usize, &[u8], usize)) {
        if let Some(n) = &self.nulls {
            f(0, n.buffer().as_slice(), (n.offset() + i) / 8);
        }
        fn fixed<T: arrow_buffer::ArrowNativeType>(
            v: &ScalarBuffer<T>,
            i: usize,
        ) -> (&[u8], usize) {
            (v.inner().as_slice(), i * std::mem::size_of::<T>())
        }
        let (values, bytes) = match &self.data {
            Data::Text(a) => {
                f(2, a.values().as_slice(), a.value_offsets()[i] as usize);
                fixed(a.offsets().inner(), i)
            }
            Data::LargeText(a) => {
                f(2, a.values().as_slice(), a.value_offsets()[i] as usize);
                fixed(a.offsets().inner(), i)
            }
            Data::Blob(a) => {
                f(2, a.values().as_slice(), a.value_offsets()[i] as usize);
                fixed(a.offsets().inner(), i)
            }
            Data::I64(v) => fixed(v, i),
            Data::I32(v) => fixed(v, i),
            Data::I16(v) => fixed(v, i),
            Data::I8(v) => fixed(v, i),
            Data::U64(v) => fixed(v, i),
            Data::U32(v) => fixed(v, i),
            Data::U16(v) => fixed(v, i),
            Data::U8(v) => fixed(v, i),
            Data::F64(v) => fixed(v, i),
            Data::F32(v) => fixed(v, i),
            Data::Bool(v) => (v.inner().as_slice(), (v.offset() + i) / 8),
            Data::Null | Data::Const(_) | Data::Count(_) | Data::Coalesce(_) => return,
        };
        f(1, values, bytes);
    }

    /// Row `i`'s value as an integer (NULL and non-integer columns: `None`). Unsigned 64-bit
    /// values keep their bits, as the SQLite export stores them.
    #[inline]
    fn int(&self, i: usize) -> Option<i64> {
        if self.nulls.as_ref().is_some_and(|n| n.is_null(i)) {
            return None;
        }
        self.stored_int(i)
    }

    /// Row `i`'s value where the column stores integers (its validity not looked at): the one
    /// dispatch on the integer types that [`Column::int`], [`Column::number`] and
    /// [`Column::value`] share.
    #[inline(always)]
    fn stored_int(&self, i: usize) -> Option<i64> {
        Some(match &self.data {
            Data::I64(v) => v[i],
            Data::I32(v) => v[i].into(),
            Data::I16(v) => v[i].into(),
            Data::I8(v) => v[i].into(),
            Data::U64(v) => v[i] as i64,
            Data::U32(v) => v[i].into(),
            Data::U16(v) => v[i].into(),
            Data::U8(v) => v[i].into(),
            Data::Bool(v) => v.value(i).into(),
            _ => return None,
        })
    }

    /// Row `i`'s value as [`super::query::int_of`] reads it: integers as they are, reals
    /// truncated.
    #[inline]
    fn number(&self, i: usize) -> Option<i64> {
        if self.nulls.as_ref().is_some_and(|n| n.is_null(i)) {
            return None;
        }
        match &self.data {
            Data::F64(v) => Some(v[i] as i64),
            Data::F32(v) => Some(f64::from(v[i]) as i64),
            Data::Const(n) => Some(*n),
            Data::Count(first) => Some(first + i as i64),
            Data::Coalesce(_) => super::query::int_of(self.value(i)),
            Data::Text(_) | Data::LargeText(_) | Data::Blob(_) | Data::Null => None,
            _ => self.stored_int(i),
        }
    }

    /// The values of rows `rows`, appended to `out`, where the column holds integers (of a type
    /// nsys uses for them) and no NULL; false (and `out` partly filled) otherwise.
    fn plain_ints(&self, rows: std::ops::Range<usize>, out: &mut Vec<i64>) -> bool {
        if self.nulls.is_some() {
            return false;
        }
        match &self.data {
            Data::I64(v) => out.extend_from_slice(&v[rows]),
            Data::I32(v) => out.extend(v[rows].iter().map(|&x| i64::from(x))),
            Data::U64(v) => out.extend(v[rows].iter().map(|&x| x as i64)),
            Data::U32(v) => out.extend(v[rows].iter().map(|&x| i64::from(x))),
            _ => return false,
        }
        true
    }

    /// The values of rows `rows` (at most [`CHUNK`]) as [`Column::number`] reads them, into
    /// `lane`.
    fn numbers(&self, rows: std::ops::Range<usize>, lane: &mut Lane) {
        fn each<T: Copy>(v: &[T], out: &mut [i64], f: impl Fn(T) -> i64) {
            for (o, &x) in out.iter_mut().zip(v) {
                *o = f(x);
            }
        }
        let n = rows.len();
        let (some, out) = (&mut lane.some[..n], &mut lane.values[..n]);
        some.fill(true);
        match &self.data {
            Data::I64(v) => out.copy_from_slice(&v[rows.clone()]),
            Data::I32(v) => each(&v[rows.clone()], out, i64::from),
            Data::I16(v) => each(&v[rows.clone()], out, i64::from),
            Data::I8(v) => each(&v[rows.clone()], out, i64::from),
            Data::U64(v) => each(&v[rows.clone()], out, |x| x as i64),
            Data::U32(v) => each(&v[rows.clone()], out, i64::from),
            Data::U16(v) => each(&v[rows.clone()], out, i64::from),
            Data::U8(v) => each(&v[rows.clone()], out, i64::from),
            Data::F64(v) => each(&v[rows.clone()], out, |x| x as i64),
            Data::F32(v) => each(&v[rows.clone()], out, |x| f64::from(x) as i64),
            Data::Bool(v) => {
                out.fill(1);
                each_clear(v, rows.clone(), |j| out[j] = 0);
            }
            Data::Const(c) => out.fill(*c),
            Data::Count(first) => {
                for (o, i) in out.iter_mut().zip(rows.clone()) {
                    *o = first + i as i64;
                }
            }
            Data::Text(_) | Data::LargeText(_) | Data::Blob(_) | Data::Null => some.fill(false),
            Data::Coalesce(cs) => {
                // Each row's value is its first column's that is not NULL (a column of NULLs
                // has none), a word of 64 rows at a time: most rows of nsys' coalesced
                // columns are NULL in all of them.
                some.fill(false);
                let mut taken = [0u64; CHUNK / 64];
                for c in cs.iter().filter(|c| !matches!(c.data, Data::Null)) {
                    let mut valid = [u64::MAX; CHUNK / 64];
                    if let Some(nulls) = &c.nulls {
                        let bits = nulls.inner().slice(rows.start, n);
                        for (v, word) in valid.iter_mut().zip(bits.bit_chunks().iter_padded()) {
                            *v = word;
                        }
                    }
                    for (w, (valid, taken)) in valid.iter().zip(&mut taken).enumerate() {
                        let mut new = valid & !*taken;
                        *taken |= new;
                        while new != 0 {
                            let j = w * 64 + new.trailing_zeros() as usize;
                            if j >= n {
                                break;
                            }
                            if let Some(x) = c.number(rows.start + j) {
                                (out[j], some[j]) = (x, true);
                            }
                            new &= new - 1;
                        }
                    }
                }
            }
        }
        if let Some(nulls) = &self.nulls {
            each_clear(nulls.inner(), rows, |j| some[j] = false);
        }
    }

    /// Whether [`Column::value`] is an integer or NULL: then it is [`Column::number`]'s.
    fn integral(&self) -> bool {
        !matches!(
            self.data,
            Data::F64(_)
                | Data::F32(_)
                | Data::Text(_)
                | Data::LargeText(_)
                | Data::Blob(_)
                | Data::Coalesce(_)
        )
    }

    /// The values of rows `rows` as [`Column::int`] reads them, appended to `out`.
    fn ints(&self, rows: std::ops::Range<usize>, out: &mut Vec<Option<i64>>) {
        let from = out.len();
        match &self.data {
            Data::I64(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x))),
            Data::I32(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            Data::I16(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            Data::I8(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            Data::U64(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x as i64))),
            Data::U32(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            Data::U16(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            Data::U8(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            _ => out.extend(rows.clone().map(|i| self.int(i))),
        }
        if let Some(nulls) = &self.nulls {
            for (v, i) in out[from..].iter_mut().zip(rows) {
                if nulls.is_null(i) {
                    *v = None;
                }
            }
        }
    }

    /// Row `i`'s value.
    #[inline]
    fn value(&self, i: usize) -> ValueRef<'_> {
        if self.nulls.as_ref().is_some_and(|n| n.is_null(i)) {
            return ValueRef::Null;
        }
        match &self.data {
            Data::Const(n) => ValueRef::Integer(*n),
            Data::Count(first) => ValueRef::Integer(first + i as i64),
            Data::F64(v) => ValueRef::Real(v[i]),
            Data::F32(v) => ValueRef::Real(v[i].into()),
            Data::Text(a) => ValueRef::Text(bytes_at(a.value_offsets(), a.values(), i)),
            Data::LargeText(a) => ValueRef::Text(bytes_at(a.value_offsets(), a.values(), i)),
            Data::Blob(a) => ValueRef::Blob(bytes_at(a.value_offsets(), a.values(), i)),
            Data::Null => ValueRef::Null,
            Data::Coalesce(cs) => {
                // Most of the columns are NULL: their validity bits are read, not their values.
                cs.iter()
                    .filter(|c| c.nulls.as_ref().is_none_or(|n| n.is_valid(i)))
                    .map(|c| c.value(i))
                    .find(|v| *v != ValueRef::Null)
                    .unwrap_or(ValueRef::Null)
            }
            _ => self.stored_int(i).map_or(ValueRef::Null, ValueRef::Integer),
        }
    }
}

/// One table: its record batches, decoded in place from the mapped file.
struct Table {
    /// Column names and declared SQLite types.
    columns: Vec<(String, &'static str)>,
    batches: Vec<Vec<Column>>,
    /// Rows of each batch.
    lengths: Vec<usize>,
    rows: usize,
    /// The column SQLite's rowid is an alias of: an integer `id` whose values rise strictly
    /// (as `StringIds.id` and `COMPOSITE_EVENTS.id`, each the table's `INTEGER PRIMARY KEY`).
    /// Without one, the rowid is the row's number from 1, as in the SQLite export.
    key: Option<usize>,
    /// Whether the rows are in the order of these columns (ascending), found once per list.
    sorted: Mutex<HashMap<Vec<c_int>, bool>>,
    /// The addresses of the file's mapping: only its pages are given back (a buffer the
    /// decoder copied to align it, or a validity bitmap Arrow made, is heap memory). Empty
    /// where the bytes were read into memory.
    mapped: std::ops::Range<usize>,
    /// The file read, to tell whether it changed while it was read.
    source: Source,
}

/// The file a [`Table`] was read from, as it was when it was read.
/// (No file is kept open: an export has tens of tables, and `merge` opens many exports.)
struct Source {
    place: Place,
    stamp: Stamp,
    /// The watched mapping (`None` where the bytes were read into memory).
    mapping: Option<Arc<crate::mapped::Mapping>>,
}

/// A [`crate::mapped::Mapping`] shared by a table and the buffers decoded from it.
struct SharedMapping(Arc<crate::mapped::Mapping>);

impl AsRef<[u8]> for SharedMapping {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// The error of a table whose file changed while it was read (`how`: truncated, removed...),
/// for the caller to prefix with the table's [`Place`].
pub(crate) fn changed(how: &str) -> anyhow::Error {
    anyhow!(
        "changed while it was read: {how} (was it still being written?); read it again once it is complete"
    )
}

/// The error of a table of `file` in use (loaded, not yet dropped) whose file changed since it
/// was loaded, `table` first: what went wrong where `file` no longer reads as an export.
fn changed_in_use(file: &Path, table: &str) -> Option<anyhow::Error> {
    let loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    let mut in_use: Vec<_> = loaded.iter().filter(|(p, _, _)| p.file == file).collect();
    in_use.sort_by_key(|(p, _, _)| p.table != table);
    in_use
        .into_iter()
        .find_map(|(p, _, t)| Some(p.changed(t.upgrade()?.change()?)))
}

/// Tables loaded by this process and still in use, by place: the readers' connections and
/// scans of one conversion share one decoding of each table (and what was learnt of its
/// order). A table is loaded again when its file's size, time or inode differ.
static LOADED: Mutex<Vec<(Place, Stamp, std::sync::Weak<Table>)>> = Mutex::new(Vec::new());

impl Table {
    /// The table at `place`, shared with any other user of the same table.
    fn shared(place: &Place) -> Result<Arc<Table>> {
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        loaded.retain(|(_, _, t)| t.strong_count() > 0);
        let m = match std::fs::metadata(&place.file) {
            Ok(m) => m,
            // Gone while a reader of this process reads it.
            Err(_) if loaded.iter().any(|(p, _, _)| p == place) => {
                return Err(changed("removed"));
            }
            Err(e) => bail!("cannot read: {e}"),
        };
        let stamp = stamp(&m);
        // The stamp first: comparing paths compares their components.
        if let Some(t) = loaded
            .iter()
            .find(|(p, s, _)| *s == stamp && p == place)
            .and_then(|(_, _, t)| t.upgrade())
        {
            return Ok(t);
        }
        let t = match Table::load(place) {
            Ok(t) => Arc::new(t),
            // A table of this file in use, whose file changed since it was loaded: what went
            // wrong is the change, not damage. (One that loads is read anew; the conversion's
            // check at its end tells the change.)
            Err(e) => {
                let mut in_use = loaded.iter().filter(|(p, _, _)| p == place);
                return Err(in_use
                    .find_map(|(_, _, t)| t.upgrade()?.change())
                    .map_or(e, changed));
            }
        };
        loaded.push((place.clone(), stamp, Arc::downgrade(&t)));
        Ok(t)
    }

    /// Give back the pages of the buffers of batch `b` marked in `cols` (for each column, a bit
    /// for each buffer [`Column::behind`] names: [`ALL`] for a column read) that lie wholly
    /// before row `i` and that `behind` has not given back yet, in runs of at least `min` bytes a
    /// buffer: a reader reads each column front to back, so the memory it maps stays a window,
    /// not the table. (The pages stay in the page cache; a later read maps them again.) Each
    /// call to the kernel costs a flush of the other threads' address translations: a run is
    /// given back at once, not page by page.
    fn give_back(&self, b: usize, i: usize, cols: &[Cell<u8>], behind: &mut Behind, min: usize) {
        let Some(batch) = self.batches.get(b) else {
            return;
        };
        if behind.batch != b || behind.marks.len() != batch.len() {
            behind.batch = b;
            behind.marks.clear();
            behind.marks.resize(batch.len(), [0; 3]);
        }
        let i = i.min(self.lengths[b]);
        if i == self.lengths[b] && self.lengths.len() > 1 {
            // A batch of many read to its end: one call gives back the span of all its
            // buffers, partly used pages and the columns not read included, which the kernel
            // maps around a page that is read (fault-around): small batches would otherwise
            // each keep tens of kilobytes. The span starts at the batch before, whose last
            // pages the first reads of this one mapped again the same way. A neighbour still
            // being read maps its page again. (A table of one batch, as nsys writes them, is
            // given back column by column.)
            let span = |b: usize| {
                let (mut lo, mut hi) = (usize::MAX, 0);
                for c in &self.batches[b] {
                    c.behind(self.lengths[b], |_, buffer, _| {
                        let ptr = buffer.as_ptr() as usize;
                        if self.mapped.contains(&ptr) {
                            lo = lo.min(ptr);
                            hi = hi.max(ptr + buffer.len());
                        }
                    });
                }
                (lo, hi)
            };
            let (mut lo, hi) = span(b);
            if let Some(before) = b.checked_sub(1) {
                lo = lo.min(span(before).0);
            }
            // SAFETY: `mapped` is this table's file mapping, alive as long as the table.
            unsafe { drop_pages(&self.mapped, lo / PAGE * PAGE, hi.next_multiple_of(PAGE)) };
            return;
        }
        for ((c, on), marks) in batch
            .iter()
            .zip(cols)
            .zip(&mut behind.marks)
            .filter(|((_, on), _)| on.get() != 0)
        {
            let on = on.get();
            c.behind(i, |k, buffer, bytes| {
                if on & (1 << k) == 0 {
                    return;
                }
                let ptr = buffer.as_ptr() as usize;
                if !self.mapped.contains(&ptr) {
                    return;
                }
                let start = marks[k].max(ptr.next_multiple_of(PAGE));
                let end = ((ptr + bytes.min(buffer.len())).min(self.mapped.end)) / PAGE * PAGE;
                if end > start && end - start >= min {
                    // SAFETY: `mapped` is this table's file mapping, alive as long as the table.
                    unsafe { drop_pages(&self.mapped, start, end) };
                    marks[k] = end;
                }
            });
        }
    }

    /// Load the table at `place`. A file truncated while it is read is told as such, not as
    /// damage (what was read of it may be zeros).
    fn load(place: &Place) -> Result<Table> {
        use std::os::unix::fs::FileExt;
        let file = std::fs::File::open(&place.file).map_err(|e| anyhow!("cannot read: {e}"))?;
        let stamp = stamp(&file.metadata().map_err(|e| anyhow!("cannot read: {e}"))?);
        if let Some(how) = place.walked.and_then(|w| change(w, stamp)) {
            return Err(changed(how));
        }
        let (offset, end) = match &place.bytes {
            Some(bytes) => (bytes.start, bytes.end),
            None => (0, stamp.0),
        };
        let len = usize::try_from(end - offset).map_err(|_| anyhow!("a stream too long to map"))?;
        let mapping =
            crate::mapped::Mapping::new(&file, place.bytes.as_ref().map(|_| (offset, len)))
                .map_err(|e| anyhow!("cannot map: {e}"))?
                .map(Arc::new);
        let (whole, mapped) = match &mapping {
            Some(map) => {
                // The page cache holds a large file in folios of up to 2 MB, which the kernel
                // would map whole where they are aligned: the pages a reader touches would be 2
                // MB a column, not the window it keeps (see `Table::give_back`). Only an advice:
                // without it the conversion is the same.
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::NoHugePage);
                let mapped = map.as_ptr() as usize..map.as_ptr() as usize + map.len();
                let owner = SharedMapping(map.clone());
                (
                    arrow_buffer::Buffer::from(bytes::Bytes::from_owner(owner)),
                    mapped,
                )
            }
            // Every watch slot taken (many exports open at once): read into memory.
            None => {
                let mut bytes = vec![0u8; len];
                file.read_exact_at(&mut bytes, offset)
                    .map_err(|e| anyhow!("cannot read: {e}"))?;
                (arrow_buffer::Buffer::from_vec(bytes), 0..0)
            }
        };
        let source = Source {
            place: place.clone(),
            stamp,
            mapping,
        };
        let loaded = Table::decode(whole, mapped, source);
        match loaded {
            Ok(t) => match t.change() {
                Some(how) => Err(changed(how)),
                None => Ok(t),
            },
            Err(e) => Err(e),
        }
    }

    /// Decode and check the table whose stream is `whole` (mapped at `mapped`).
    fn decode(
        whole: arrow_buffer::Buffer,
        mapped: std::ops::Range<usize>,
        source: Source,
    ) -> Result<Table> {
        let watch = source.mapping.clone();
        let lost = |e: anyhow::Error| match &watch {
            Some(m) if m.lost_pages() => changed("truncated"),
            _ => e,
        };
        let damaged = |e: &dyn std::fmt::Display| {
            anyhow!(
                "not a readable Arrow IPC stream ({}): a damaged or truncated file; export the report again",
                one_line(&e.to_string())
            )
        };
        // Walking the messages maps the pages around each header read (the kernel's
        // fault-around): a table of many batches would have most of its file mapped at once.
        // Both walks (the check, then the decoding) give back what they have read as they go,
        // a megabyte at a time.
        let walker = || {
            let mut released = mapped.start;
            let mapped = mapped.clone();
            move |pos: usize| {
                let end = (mapped.start + pos) / PAGE * PAGE;
                if end >= released + (1 << 20) {
                    // SAFETY: `mapped` is the file's mapping, alive for the whole load (it
                    // moves into the table's buffer, not away).
                    unsafe { drop_pages(&mapped, released, end) };
                    released = end;
                }
            }
        };
        let layout = check_layout(&whole, walker()).map_err(|e| lost(damaged(&e)))?;
        let checked = layout.is_some();
        let (schema, batches) = match layout {
            Some(layout) => {
                // The stream decoder's checks read every value of a text column at once,
                // mapping the whole column: the batches are decoded without them, and their
                // values checked by `validate` below, a slice of rows at a time, giving back
                // what it read.
                let schema = Arc::new(layout.schema);
                // SAFETY: `check_layout` checked what building the arrays relies on (each
                // column's rows and its buffers' lengths, for the types `Column::new` takes);
                // no value is read before `validate` has checked it.
                let decoder = unsafe {
                    arrow_ipc::reader::FileDecoder::new(schema.clone(), layout.version)
                        .with_skip_validation(true)
                };
                let mut batches = Vec::with_capacity(layout.batches.len());
                let mut walked = walker();
                for (start, meta) in layout.batches {
                    walked(start);
                    let meta = i32::try_from(meta).map_err(|_| damaged(&"a message too long"))?;
                    let block = arrow_ipc::Block::new(0, meta, 0);
                    let batch = decoder
                        .read_record_batch(&block, &whole.slice(start))
                        .map_err(|e| lost(damaged(&e)))?;
                    batches.extend(batch);
                }
                (schema, batches)
            }
            None => stream(whole).map_err(|e| lost(damaged(&e)))?,
        };
        let columns = sql_columns(&schema)?;
        let mut decoded = Vec::with_capacity(batches.len());
        let mut lengths = Vec::with_capacity(batches.len());
        for batch in &batches {
            if batch.schema().fields() != schema.fields() {
                bail!("record batches of different schemas");
            }
            let cols = batch
                .columns()
                .iter()
                .map(|a| Column::new(a.as_ref()).expect("types checked above"))
                .collect();
            decoded.push(cols);
            lengths.push(batch.num_rows());
        }
        let mut table = Table {
            rows: lengths.iter().sum(),
            columns,
            batches: decoded,
            lengths,
            key: None,
            sorted: Mutex::default(),
            mapped,
            source,
        };
        if checked {
            table.validate(&batches).map_err(|e| lost(damaged(&e)))?;
        }
        table.key = table
            .columns
            .iter()
            .position(|(n, t)| n == "id" && *t == "INTEGER")
            .filter(|&c| table.rises_strictly(c));
        Ok(table)
    }

    /// Whether a page of the table's mapping was lost (its file truncated): what was read of
    /// it since may be zeros. A reader looks before it trusts what it read.
    #[inline]
    fn lost(&self) -> bool {
        self.source.mapping.as_ref().is_some_and(|m| m.lost_pages())
    }

    /// How the table's file changed since it was loaded (truncated, rewritten, replaced or
    /// removed), if it did. A file cut inside a page loses no page (the rest of the page reads
    /// as zeros): its size tells.
    fn change(&self) -> Option<&'static str> {
        if self.lost() {
            return Some("truncated");
        }
        change_since(&self.source.place.file, self.source.stamp)
    }

    /// An error naming the table's file where it changed since it was loaded.
    fn unchanged(&self) -> Result<()> {
        match self.change() {
            Some(how) => Err(self.source.place.changed(how)),
            None => Ok(()),
        }
    }

    /// Check the values of the decoded `batches` (this table's) as the decoder would have:
    /// offsets within their bytes and rising, text in UTF-8, null counts as declared. A slice
    /// of rows at a time, giving back the pages read behind it.
    fn validate(&self, batches: &[RecordBatch]) -> std::result::Result<(), String> {
        const SLICE: usize = 1 << 16;
        let mut behind = Behind::default();
        for (b, batch) in batches.iter().enumerate() {
            let rows = batch.num_rows();
            for (c, a) in batch.columns().iter().enumerate() {
                let data = a.to_data();
                // Only validity bits and variable-width values are read.
                let only = vec![Cell::new(0); batch.num_columns()];
                only[c].set(match a.data_type() {
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary => ALL,
                    _ => 1,
                });
                let mut nulls = 0;
                for start in (0..rows).step_by(SLICE) {
                    let end = rows.min(start + SLICE);
                    let slice = data.slice(start, end - start);
                    slice.validate_full().map_err(|e| e.to_string())?;
                    nulls += slice.null_count();
                    let min = if end == rows { 0 } else { RELEASE_BYTES };
                    self.give_back(b, end, &only, &mut behind, min);
                }
                if nulls != data.null_count() {
                    return Err("a column's null count is not its nulls'".into());
                }
            }
        }
        Ok(())
    }

    /// Give back what a walk that may have stopped early (at the first row out of order) read
    /// of the batch it stopped in.
    fn give_back_stopped(&self, cols: &[Cell<u8>], behind: &mut Behind) {
        let b = behind.batch;
        if let Some(&n) = self.lengths.get(b) {
            self.give_back(b, n, cols, behind, 0);
        }
    }

    /// `ALL` for the columns in `cols` (a rowid, `-1`, reads the key), for [`Table::give_back`].
    fn reading(&self, cols: impl IntoIterator<Item = c_int>) -> Vec<Cell<u8>> {
        let mask = vec![Cell::new(0); self.columns.len()];
        for c in cols {
            if let Some(m) = usize::try_from(c)
                .ok()
                .or(self.key)
                .and_then(|c| mask.get(c))
            {
                m.set(ALL);
            }
        }
        mask
    }

    fn rises_strictly(&self, col: usize) -> bool {
        let mask = self.reading([col as c_int]);
        let mut behind = Behind::default();
        let mut last = None;
        let rising = 'rows: {
            for (b, n) in self.lengths.iter().enumerate() {
                let c = &self.batches[b][col];
                if let (Data::I64(v), None) = (&c.data, &c.nulls) {
                    for (k, part) in v.chunks(RELEASE_EVERY).enumerate() {
                        if last.zip(part.first()).is_some_and(|(l, f)| l >= *f)
                            || part.windows(2).any(|w| w[0] >= w[1])
                        {
                            break 'rows false;
                        }
                        last = part.last().copied();
                        self.give_back(
                            b,
                            (k + 1) * RELEASE_EVERY,
                            &mask,
                            &mut behind,
                            RELEASE_BYTES,
                        );
                    }
                } else {
                    for i in 0..*n {
                        if i.is_multiple_of(RELEASE_EVERY) {
                            self.give_back(b, i, &mask, &mut behind, RELEASE_BYTES);
                        }
                        let Some(v) = c.int(i) else {
                            break 'rows false;
                        };
                        if last.is_some_and(|l| v <= l) {
                            break 'rows false;
                        }
                        last = Some(v);
                    }
                }
                self.give_back(b, *n, &mask, &mut behind, 0);
            }
            true
        };
        self.give_back_stopped(&mask, &mut behind);
        rising
    }

    /// Whether the rows come in ascending order of these columns (SQLite's order: NULL first;
    /// integer columns only).
    fn sorted_by(&self, cols: &[c_int]) -> bool {
        let mut memo = self.sorted.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&s) = memo.get(cols) {
            return s;
        }
        let integer = |c: c_int| {
            c < 0
                || self
                    .columns
                    .get(c as usize)
                    .is_some_and(|t| t.1 == "INTEGER")
        };
        let sorted = cols.iter().all(|&c| integer(c)) && self.rows_sorted(cols);
        memo.insert(cols.to_vec(), sorted);
        sorted
    }

    fn rows_sorted(&self, cols: &[c_int]) -> bool {
        // Read a chunk of rows' keys at a time, column by column (each a typed loop), and
        // compare each row's key with the one before (NULL sorts first): as plain integers
        // where no key column of the batch has a NULL (nsys' tables), else as options.
        let mask = self.reading(cols.iter().copied());
        let mut behind = Behind::default();
        let mut plain: Vec<Vec<i64>> = vec![Vec::with_capacity(RELEASE_EVERY); cols.len()];
        let mut keys: Vec<Vec<Option<i64>>> = vec![Vec::with_capacity(RELEASE_EVERY); cols.len()];
        // The key of the last row compared (empty before the first).
        let mut last: Vec<Option<i64>> = Vec::with_capacity(cols.len());
        let mut row = 0;
        let sorted = 'rows: {
            for (b, &n) in self.lengths.iter().enumerate() {
                let batch = &self.batches[b];
                let column = |c: c_int| match (c, self.key) {
                    (c, _) if c >= 0 => Some(&batch[c as usize]),
                    (_, Some(key)) => Some(&batch[key]),
                    // Row numbers.
                    (_, None) => None,
                };
                for start in (0..n).step_by(RELEASE_EVERY) {
                    self.give_back(b, start, &mask, &mut behind, RELEASE_BYTES);
                    let rows = start..(start + RELEASE_EVERY).min(n);
                    let numbers = || (row + rows.start..row + rows.end).map(|r| r as i64 + 1);
                    let is_plain = cols.iter().zip(&mut plain).all(|(&c, out)| {
                        out.clear();
                        match column(c) {
                            Some(col) => col.plain_ints(rows.clone(), out),
                            None => {
                                out.extend(numbers());
                                true
                            }
                        }
                    });
                    let first: Vec<Option<i64>>;
                    if is_plain {
                        first = plain.iter().map(|k| k.first().copied()).collect();
                        if !ascending(&plain) {
                            break 'rows false;
                        }
                    } else {
                        for (&c, out) in cols.iter().zip(&mut keys) {
                            out.clear();
                            match column(c) {
                                Some(col) => col.ints(rows.clone(), out),
                                None => out.extend(numbers().map(Some)),
                            }
                        }
                        first = keys.iter().map(|k| k.first().copied().flatten()).collect();
                        for j in 1..keys.first().map_or(0, Vec::len) {
                            let before = keys.iter().map(|k| k[j - 1]);
                            if before.gt(keys.iter().map(|k| k[j])) {
                                break 'rows false;
                            }
                        }
                    }
                    // The chunk's first row against the last row before it.
                    if !last.is_empty() && last > first {
                        break 'rows false;
                    }
                    last.clear();
                    if is_plain {
                        last.extend(plain.iter().map(|k| k.last().copied()));
                    } else {
                        last.extend(keys.iter().map(|k| k.last().copied().flatten()));
                    }
                }
                row += n;
                self.give_back(b, n, &mask, &mut behind, 0);
            }
            true
        };
        self.give_back_stopped(&mask, &mut behind);
        sorted
    }

    /// SQLite's rowid of row `i` of batch `b`, row `row` of the table.
    #[inline]
    fn rowid(&self, b: usize, i: usize, row: usize) -> i64 {
        match self.key {
            Some(k) => self.batches[b][k].int(i).unwrap_or_default(),
            None => row as i64 + 1,
        }
    }

    /// Column `col` of row `row` of the table, as an integer (NULL sorts first: `i64::MIN`).
    fn int_at(&self, col: usize, row: usize) -> i64 {
        match self.locate(row) {
            (b, i) if b < self.lengths.len() => self.batches[b][col].int(i).unwrap_or(i64::MIN),
            _ => i64::MAX,
        }
    }

    /// Row `row` of the table as (batch, row in it); past the end, (number of batches, 0).
    fn locate(&self, mut row: usize) -> (usize, usize) {
        for (b, n) in self.lengths.iter().enumerate() {
            if row < *n {
                return (b, row);
            }
            row -= n;
        }
        (self.lengths.len(), 0)
    }

    /// Move a scan at (`batch`, `in_batch`) past the batches it has read to their end, and
    /// with `release`, give back the pages behind it of the columns it reads (see
    /// [`Table::give_back`]).
    #[inline]
    fn step(
        &self,
        batch: &mut usize,
        in_batch: &mut usize,
        release: Option<(&[Cell<u8>], &mut Behind)>,
    ) {
        let mut release = release;
        while *batch < self.lengths.len() && *in_batch >= self.lengths[*batch] {
            // A batch read to its end is all behind the scan.
            if let Some((cols, behind)) = release.as_mut() {
                self.give_back(*batch, self.lengths[*batch], cols, behind, 0);
            }
            *in_batch = 0;
            *batch += 1;
        }
        if let Some((cols, behind)) = release
            && *in_batch > 0
            && in_batch.is_multiple_of(RELEASE_EVERY)
        {
            self.give_back(*batch, *in_batch, cols, behind, RELEASE_BYTES);
        }
    }

    /// The rows `[first, end)` whose column `col`, which the rows are sorted by, equals `v`.
    fn equal_range(&self, col: usize, v: i64) -> (usize, usize) {
        let bound = |strict: bool| {
            let (mut lo, mut hi) = (0, self.rows);
            while lo < hi {
                let mid = (lo + hi) / 2;
                let x = self.int_at(col, mid);
                if x < v || (strict && x == v) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let range = (bound(false), bound(true));
        self.forget_probes(col);
        range
    }

    /// Give back the pages a binary search over column `col` mapped, where the column is large:
    /// each probe maps the page-cache folio it lands in (up to 2 MB on recent kernels), which
    /// no scan would give back until it passed them. (The rows found are mapped again when read.)
    fn forget_probes(&self, col: usize) {
        for batch in &self.batches {
            batch[col].behind(0, |k, buffer, _| {
                let ptr = buffer.as_ptr() as usize;
                if k == 1 && buffer.len() >= PROBED_BYTES && self.mapped.contains(&ptr) {
                    // SAFETY: `mapped` is this table's file mapping, alive as long as the table.
                    unsafe { drop_pages(&self.mapped, ptr, ptr + buffer.len()) };
                }
            });
        }
    }

    /// The row whose rowid is `rowid`, if any.
    fn find(&self, rowid: i64) -> Option<usize> {
        let Some(k) = self.key else {
            return usize::try_from(rowid)
                .ok()
                .filter(|r| (1..=self.rows).contains(r))
                .map(|r| r - 1);
        };
        // The key rises strictly: at most one row holds it.
        let (first, end) = self.equal_range(k, rowid);
        (end > first).then_some(first)
    }
}

/// Whether the rows whose key columns are `keys` (each the same length) come in ascending
/// order of their keys. Without branches or early exits per row, which would keep the
/// compiler from comparing many rows at once.
fn ascending(keys: &[Vec<i64>]) -> bool {
    fn after(k: &[i64]) -> &[i64] {
        k.get(1..).unwrap_or_default()
    }
    match keys {
        [] => true,
        [a] => a
            .iter()
            .zip(after(a))
            .fold(true, |ok, (x, y)| ok & (x <= y)),
        [a, b] => {
            let pairs = a.iter().zip(after(a)).zip(b.iter().zip(after(b)));
            pairs.fold(true, |ok, ((a0, a1), (b0, b1))| {
                ok & ((a0 < a1) | ((a0 == a1) & (b0 <= b1)))
            })
        }
        _ => (1..keys[0].len()).all(|j| {
            let before = keys.iter().map(|k| k[j - 1]);
            before.le(keys.iter().map(|k| k[j]))
        }),
    }
}

/// The bytes of row `i` of a text or binary column, its offsets checked (no bytes where they do
/// not hold): they were checked when the table was loaded, but a page read again after its file
/// was truncated reads as zeros (see `Table::lost`), and the reader fails only after the
/// chunk.
#[inline]
fn bytes_at<'v, O: arrow_array::OffsetSizeTrait>(
    offsets: &[O],
    values: &'v [u8],
    i: usize,
) -> &'v [u8] {
    let (start, end) = (offsets[i].as_usize(), offsets[i + 1].as_usize());
    values.get(start..end).unwrap_or_default()
}

/// Call `f(j)` for each of rows `rows` of `bits` whose bit is clear, `j` counted from
/// `rows.start`: a word of 64 rows at a time, most of them all set.
fn each_clear(bits: &BooleanBuffer, rows: std::ops::Range<usize>, mut f: impl FnMut(usize)) {
    let len = rows.len();
    let words = bits.slice(rows.start, len);
    for (w, word) in words.bit_chunks().iter_padded().enumerate() {
        let mut clear = !word;
        while clear != 0 {
            let j = w * 64 + clear.trailing_zeros() as usize;
            if j >= len {
                break;
            }
            f(j);
            clear &= clear - 1;
        }
    }
}

/// Memory pages, for releasing mapped columns behind a scan.
const PAGE: usize = 4096;

/// Drop this process's copy of the whole pages of `[start, end)` that lie inside `mapped` (the
/// page cache keeps them; a later read maps them again).
///
/// # Safety
/// `mapped` must be a live read-only file mapping: on heap memory MADV_DONTNEED would zero it.
unsafe fn drop_pages(mapped: &std::ops::Range<usize>, start: usize, end: usize) {
    // The mapping's last page is mapped whole.
    let start = start.max(mapped.start).next_multiple_of(PAGE);
    let end = end.min(mapped.end.next_multiple_of(PAGE)) / PAGE * PAGE;
    if end > start {
        // SAFETY: a page range inside the mapping, as the caller promises.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
}

/// How many rows a reader reads between looks at what it can give back.
const RELEASE_EVERY: usize = 1 << 12;

/// The least a reader gives back of a buffer at once (but at a batch's end): few calls to the
/// kernel, each for a run of pages, while the pages a reader maps stay a window of this size a
/// column. Each call also flushes the other threads' address translations, which costs more
/// than the pages it keeps mapped: half a megabyte, not less.
const RELEASE_BYTES: usize = 1 << 19;

/// The least size of a column's values in a batch (nsys writes a table as one batch) whose
/// pages a binary search gives back (see [`Table::forget_probes`]): smaller columns (a string
/// table's ids) are looked up often, and what their probes map is small.
const PROBED_BYTES: usize = 4 << 20;

/// Every buffer of a column, for [`Table::give_back`].
const ALL: u8 = 0b111;

/// What a reader of a table has given back of the batch it reads: for each column, for each
/// of its buffers (see [`Column::behind`]), the address below which its pages are given back.
#[derive(Default)]
struct Behind {
    batch: usize,
    marks: Vec<[usize; 3]>,
}

/// A column of a direct scan, resolved to the table's columns.
enum Pick {
    Column(usize),
    Rowid,
    Null,
    Coalesce(Vec<usize>),
    Int(i64),
}

/// A scan (see `nsys::scan`) read straight from a table's columns, without SQLite.
pub struct TableScan {
    table: Arc<Table>,
    picks: Vec<Pick>,
    /// The picks resolved against batch `batch` (see [`TableScan::resolve`]): a row's values
    /// are read from them without looking the column up again for each value.
    slots: Vec<Column>,
    /// Each pick's values as integers ([`Column::number`]) for the rows of the chunk being
    /// read. Most values are read as integers: a typed loop over each column per chunk, then
    /// a load per value, costs less than finding each value's type.
    lanes: Vec<Lane>,
    /// Whether each pick's values are integers (or NULL): then fetched from `lanes`.
    integral: Vec<bool>,
    /// The columns the picks read, and what of them is given back (see [`Table::give_back`]).
    reads: Vec<Cell<u8>>,
    behind: Behind,
    /// The batch being read, and the table's row number of its first row.
    batch: usize,
    first: usize,
    /// The chunk being read: the batch's row it starts at, its rows, and the current row in
    /// it (`usize::MAX` before the first).
    chunk: usize,
    rows: usize,
    at: usize,
}

/// A pick's values as integers for the rows of a [`TableScan`]'s chunk.
#[derive(Clone)]
struct Lane {
    /// Whether the row's value is an integer (not NULL, nor of another type).
    some: [bool; CHUNK],
    values: [i64; CHUNK],
}

impl Lane {
    /// Row `r` of the chunk.
    #[inline(always)]
    fn get(&self, r: usize) -> Option<i64> {
        // A row of the chunk: no bounds check.
        let r = r % CHUNK;
        self.some[r].then_some(self.values[r])
    }
}

/// Rows of a [`TableScan`]'s chunk: a divisor of [`RELEASE_EVERY`], so that a chunk starts
/// wherever the scan looks at what to give back.
const CHUNK: usize = 256;

impl TableScan {
    /// The direct reading of `cols` of `table` in the export `dir`, in `order`: `None` when the
    /// scan needs SQL (an expression, or an order the rows do not have).
    pub fn open(
        dir: &Path,
        table: &str,
        cols: &[super::column::Col],
        order: &[super::column::Col],
    ) -> Result<Option<TableScan>> {
        use super::column::Col;
        let place = place(dir, table)?;
        let t = Table::shared(&place).map_err(|e| anyhow!("{place}: {e:#}"))?;
        let index = |n: &str| t.columns.iter().position(|(c, _)| c == n);
        let mut picks = Vec::with_capacity(cols.len());
        for c in cols {
            picks.push(match c {
                Col::Column(n) => index(n).map_or(Pick::Null, Pick::Column),
                Col::Rowid => Pick::Rowid,
                Col::Null => Pick::Null,
                Col::Int(n) => Pick::Int(*n),
                Col::Coalesce(ns) => Pick::Coalesce(ns.iter().filter_map(|n| index(n)).collect()),
                Col::Sql(_) => return Ok(None),
            });
        }
        let mut keys = Vec::with_capacity(order.len());
        for o in order {
            keys.push(match o {
                Col::Rowid => -1,
                Col::Column(n) => match index(n) {
                    Some(i) => i as c_int,
                    None => return Ok(None),
                },
                _ => return Ok(None),
            });
        }
        let is_key = |c: c_int| c < 0 || t.key.is_some_and(|k| k as c_int == c);
        if !keys.is_empty() && !keys.iter().all(|&c| is_key(c)) && !t.sorted_by(&keys) {
            return Ok(None);
        }
        let reads = t.reading(picks.iter().flat_map(|p| match p {
            Pick::Column(c) => vec![*c as c_int],
            Pick::Coalesce(cs) => cs.iter().map(|&c| c as c_int).collect(),
            Pick::Rowid => vec![-1],
            Pick::Null | Pick::Int(_) => Vec::new(),
        }));
        Ok(Some(TableScan {
            table: t,
            picks,
            slots: Vec::new(),
            lanes: Vec::new(),
            integral: Vec::new(),
            reads,
            behind: Behind::default(),
            batch: 0,
            first: 0,
            chunk: 0,
            rows: 0,
            at: usize::MAX,
        }))
    }

    /// The next row, `None` after the last (or where the file changed: see
    /// [`TableScan::unchanged`]).
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> Option<RowRef<'_>> {
        self.step().then_some(RowRef { scan: self })
    }

    /// Move to the next row: false after the last, or where the table's file lost a page (see
    /// `Table::lost`), looked at as each chunk is read: a reader is given no integer a lost
    /// page read as (a text is read as it is fetched: at most a chunk of them).
    #[inline]
    pub fn step(&mut self) -> bool {
        let at = self.at.wrapping_add(1);
        if at < self.rows {
            self.at = at;
            true
        } else {
            self.advance()
        }
    }

    /// The current row (after [`TableScan::step`] said there is one).
    #[inline]
    pub fn row(&self) -> RowRef<'_> {
        RowRef { scan: self }
    }

    /// After the last row: an error naming the table's file where it changed while it was read
    /// (what the scan gave may not be the file's).
    pub fn unchanged(&self) -> Result<()> {
        self.table.unchanged()
    }

    /// Move to the next chunk: past the batches read to their end, giving back what is behind
    /// the scan (see [`Table::step`]); false after the last row, or where the table lost a
    /// page.
    #[inline(never)]
    fn advance(&mut self) -> bool {
        let (from, mut i) = (self.batch, self.chunk + self.rows);
        let release = Some((&self.reads[..], &mut self.behind));
        self.table.step(&mut self.batch, &mut i, release);
        let Some(&n) = self.table.lengths.get(self.batch) else {
            (self.chunk, self.rows, self.at) = (0, 0, usize::MAX);
            return false;
        };
        if self.batch != from || self.slots.len() != self.picks.len() {
            self.first += self.table.lengths[from..self.batch].iter().sum::<usize>();
            self.resolve();
        }
        let rows = i..n.min(i + CHUNK);
        if self.lanes.len() != self.slots.len() {
            let empty = Lane {
                some: [false; CHUNK],
                values: [0; CHUNK],
            };
            self.lanes = vec![empty; self.slots.len()];
        }
        for (c, lane) in self.slots.iter().zip(&mut self.lanes) {
            c.numbers(rows.clone(), lane);
        }
        // The chunk's integers are read: none of them is given where a page was lost.
        if self.table.lost() {
            (self.chunk, self.rows, self.at) = (0, 0, usize::MAX);
            return false;
        }
        (self.chunk, self.rows, self.at) = (i, rows.len(), 0);
        true
    }

    /// Resolve the picks against batch `batch`.
    fn resolve(&mut self) {
        let t = &self.table;
        let cols = &t.batches[self.batch];
        let computed = |data| Column { nulls: None, data };
        self.slots = self
            .picks
            .iter()
            .map(|p| match p {
                Pick::Column(c) => cols[*c].clone(),
                // A key has no NULL (see `Table::rises_strictly`).
                Pick::Rowid => match t.key {
                    Some(k) => computed(cols[k].data.clone()),
                    None => computed(Data::Count(self.first as i64 + 1)),
                },
                Pick::Null => computed(Data::Null),
                Pick::Coalesce(cs) => computed(Data::Coalesce(
                    cs.iter().map(|&c| cols[c].clone()).collect(),
                )),
                Pick::Int(n) => computed(Data::Const(*n)),
            })
            .collect();
        self.integral = self.slots.iter().map(Column::integral).collect();
    }
}

/// The current row of a [`TableScan`].
pub struct RowRef<'s> {
    scan: &'s TableScan,
}

impl super::query::Fetch for RowRef<'_> {
    #[inline(always)]
    fn fetch(&self, k: usize) -> ValueRef<'_> {
        let s = self.scan;
        match s.integral.get(k) {
            Some(true) => s.lanes[k]
                .get(s.at)
                .map_or(ValueRef::Null, ValueRef::Integer),
            Some(false) => s.slots[k].value(s.chunk + s.at),
            None => ValueRef::Null,
        }
    }

    #[inline(always)]
    fn int(&self, k: usize) -> Option<i64> {
        let s = self.scan;
        s.lanes.get(k).and_then(|l| l.get(s.at))
    }
}

/// The virtual table: one `.arrow` file of the export.
#[repr(C)]
struct ArrowTable {
    /// SQLite's part; must come first.
    base: ffi::sqlite3_vtab,
    table: Arc<Table>,
}

/// `xFilter`'s plans: a scan, the row of a rowid, or (`SORTED_EQ + c`) the rows whose column `c`,
/// which the rows are sorted by, equals a value.
const SCAN: c_int = 0;
const BY_ROWID: c_int = 1;
const SORTED_EQ: c_int = 2;

unsafe impl<'vtab> VTab<'vtab> for ArrowTable {
    /// Where the table lies.
    type Aux = Place;
    type Cursor = Cursor<'vtab>;

    fn connect(
        _db: &mut VTabConnection,
        place: Option<&Place>,
        _module: &[u8],
        _database: &[u8],
        _table: &[u8],
        _args: &[&[u8]],
    ) -> rusqlite::Result<(Cow<'static, CStr>, ArrowTable)> {
        let module_error = |m: String| rusqlite::Error::ModuleError(m);
        let place = place.ok_or_else(|| module_error("an Arrow table without its file".into()))?;
        let table = Table::shared(place).map_err(|e| module_error(format!("{place}: {e:#}")))?;
        // The key is declared as the SQLite export declares it (readers check for it).
        let columns: Vec<String> = table
            .columns
            .iter()
            .enumerate()
            .map(|(i, (n, t))| {
                let key = if table.key == Some(i) {
                    " PRIMARY KEY"
                } else {
                    ""
                };
                format!("{} {t}{key}", super::query::quote_ident(n))
            })
            .collect();
        let sql = CString::new(format!("CREATE TABLE x({})", columns.join(", ")))
            .map_err(|_| module_error("a column name holds a NUL character".into()))?;
        Ok((
            Cow::Owned(sql),
            ArrowTable {
                base: ffi::sqlite3_vtab::default(),
                table,
            },
        ))
    }

    fn best_index(&self, info: &mut IndexInfo) -> rusqlite::Result<bool> {
        let t = &self.table;
        let is_key = |c: c_int| c < 0 || t.key.is_some_and(|k| k as c_int == c);
        let mut by_rowid = None;
        let mut sorted_eq = None;
        for (i, c) in info.constraints().enumerate() {
            if !c.is_usable() || c.operator() != IndexConstraintOp::SQLITE_INDEX_CONSTRAINT_EQ {
                continue;
            }
            if is_key(c.column()) {
                by_rowid = Some(i);
                break;
            }
            if sorted_eq.is_none() && c.column() >= 0 && t.sorted_by(&[c.column()]) {
                sorted_eq = Some((i, c.column()));
            }
        }
        let order: Vec<(c_int, bool)> = info
            .order_bys()
            .map(|o| (o.column(), o.is_order_by_desc()))
            .collect();
        let cols: Vec<c_int> = order.iter().map(|o| o.0).collect();
        let ascending = order.iter().all(|o| !o.1);
        if let Some((i, c)) = sorted_eq.filter(|_| by_rowid.is_none()) {
            let mut usage = info.constraint_usage(i);
            usage.set_argv_index(1);
            usage.set_omit(true);
            info.set_idx_num(SORTED_EQ + c);
            info.set_estimated_cost(((t.rows + 2) as f64).log2() + 10.0);
            info.set_estimated_rows(10);
            // Rows of one value of `c` keep the table's order.
            let mut rest = cols.clone();
            rest.retain(|&o| o != c);
            if !order.is_empty()
                && ascending
                && (rest.is_empty() || t.sorted_by(&[&[c][..], &rest[..]].concat()))
            {
                info.set_order_by_consumed(true);
            }
        } else if let Some(i) = by_rowid {
            let mut usage = info.constraint_usage(i);
            usage.set_argv_index(1);
            usage.set_omit(true);
            info.set_idx_num(BY_ROWID);
            info.set_estimated_cost(1.0);
            info.set_estimated_rows(1);
            info.set_idx_flags(IndexFlags::SQLITE_INDEX_SCAN_UNIQUE);
            info.set_order_by_consumed(true);
        } else {
            info.set_idx_num(SCAN);
            info.set_estimated_cost(t.rows as f64 + 1.0);
            info.set_estimated_rows(t.rows as i64);
            if !order.is_empty()
                && ascending
                && (cols.iter().all(|&c| is_key(c)) || t.sorted_by(&cols))
            {
                info.set_order_by_consumed(true);
            }
        }
        Ok(true)
    }

    fn open(&'vtab mut self) -> rusqlite::Result<Cursor<'vtab>> {
        Ok(Cursor {
            base: ffi::sqlite3_vtab_cursor::default(),
            table: &self.table,
            row: 0,
            end: 0,
            batch: 0,
            in_batch: 0,
            reads: vec![Cell::new(0); self.table.columns.len()],
            behind: Behind::default(),
        })
    }
}

/// A scan of a table, or the one row a rowid names.
#[repr(C)]
struct Cursor<'vtab> {
    /// SQLite's part; must come first.
    base: ffi::sqlite3_vtab_cursor,
    table: &'vtab Table,
    /// The current row of the table, and the row to stop at.
    row: usize,
    end: usize,
    /// The current row as a batch and a row in it.
    batch: usize,
    in_batch: usize,
    /// The columns SQLite has read, and what of them is given back (see [`Table::give_back`]).
    reads: Vec<Cell<u8>>,
    behind: Behind,
}

impl Cursor<'_> {
    /// Move to row `row` of the table.
    fn seek(&mut self, row: usize) {
        self.row = row;
        (self.batch, self.in_batch) = self.table.locate(row);
    }
}

unsafe impl VTabCursor for Cursor<'_> {
    fn filter(&mut self, plan: c_int, _: Option<&str>, args: &Filters<'_>) -> rusqlite::Result<()> {
        if plan >= SORTED_EQ {
            let col = (plan - SORTED_EQ) as usize;
            let value = match args.iter().next() {
                Some(ValueRef::Integer(v)) => Some(v),
                Some(ValueRef::Real(f)) if f.fract() == 0.0 => Some(f as i64),
                _ => None,
            };
            let (first, end) = value.map_or((0, 0), |v| self.table.equal_range(col, v));
            self.seek(first);
            self.end = end;
        } else if plan == BY_ROWID {
            let row = match args.iter().next() {
                Some(ValueRef::Integer(id)) => self.table.find(id),
                Some(ValueRef::Real(f)) if f.fract() == 0.0 => self.table.find(f as i64),
                _ => None,
            };
            match row {
                Some(r) => {
                    self.seek(r);
                    self.end = r + 1;
                }
                None => {
                    self.seek(0);
                    self.end = 0;
                }
            }
        } else {
            self.seek(0);
            self.end = self.table.rows;
        }
        Ok(())
    }

    fn next(&mut self) -> rusqlite::Result<()> {
        if self.table.lost() {
            let e = self.table.source.place.changed("truncated");
            return Err(rusqlite::Error::ModuleError(format!("{e:#}")));
        }
        self.row += 1;
        self.in_batch += 1;
        // Only a scan of the whole table leaves pages behind it for good.
        let whole = self.end == self.table.rows;
        let release = whole.then_some((&self.reads[..], &mut self.behind));
        self.table
            .step(&mut self.batch, &mut self.in_batch, release);
        Ok(())
    }

    fn eof(&self) -> bool {
        self.row >= self.end
    }

    fn column(&self, ctx: &mut Context, i: c_int) -> rusqlite::Result<()> {
        if let Some(r) = self.reads.get(i as usize) {
            r.set(ALL);
        }
        let value = self.table.batches[self.batch]
            .get(i as usize)
            .map_or(ValueRef::Null, |c| c.value(self.in_batch));
        ctx.set_result(rusqlite::types::ToSqlOutput::Borrowed(value))
    }

    fn rowid(&self) -> rusqlite::Result<i64> {
        if let Some(r) = self.table.key.and_then(|k| self.reads.get(k)) {
            r.set(ALL);
        }
        Ok(self.table.rowid(self.batch, self.in_batch, self.row))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};

    /// A stream of one batch: `name` (text) and `n` (integers, one NULL).
    fn stream() -> Vec<u8> {
        let batch = RecordBatch::try_from_iter([
            (
                "name",
                Arc::new(StringArray::from(vec!["alpha", "beta", "gamma"])) as _,
            ),
            (
                "n",
                Arc::new(Int64Array::from(vec![Some(7), None, Some(9)])) as _,
            ),
        ])
        .unwrap();
        let mut out = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &batch.schema()).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        drop(w);
        out
    }

    fn load(bytes: &[u8]) -> Result<Table> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("T.arrow");
        std::fs::write(&path, bytes).unwrap();
        Table::load(&Place {
            file: path,
            bytes: None,
            table: "T".into(),
            walked: None,
        })
    }

    /// `bytes` with the first run of `from` replaced by `to`.
    fn patched(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
        let at = bytes
            .windows(from.len())
            .position(|w| w == from)
            .expect("pattern in the stream");
        let mut out = bytes.to_vec();
        out[at..at + to.len()].copy_from_slice(to);
        out
    }

    fn le(words: &[i64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn reads_what_was_written() {
        let t = load(&stream()).unwrap();
        assert_eq!(t.rows, 3);
        let names: Vec<_> = (0..3).map(|i| t.batches[0][0].value(i)).collect();
        assert_eq!(
            names,
            [b"alpha" as &[u8], b"beta", b"gamma"].map(ValueRef::Text)
        );
        let n: Vec<_> = (0..3).map(|i| t.batches[0][1].int(i)).collect();
        assert_eq!(n, [Some(7), None, Some(9)]);
    }

    /// What the decoder's own checks caught, now checked after decoding: one error, no panic.
    #[test]
    fn damaged_values_are_errors() {
        let good = stream();
        let offsets: Vec<u8> = [0i32, 5, 9, 14]
            .iter()
            .flat_map(|o| o.to_le_bytes())
            .collect();
        let past_end: Vec<u8> = [0i32, 5, 9, 99]
            .iter()
            .flat_map(|o| o.to_le_bytes())
            .collect();
        let falling: Vec<u8> = [0i32, 9, 5, 14]
            .iter()
            .flat_map(|o| o.to_le_bytes())
            .collect();
        let cases = [
            ("not UTF-8", patched(&good, b"beta", b"\xffeta")),
            (
                "an offset past the bytes",
                patched(&good, &offsets, &past_end),
            ),
            ("falling offsets", patched(&good, &offsets, &falling)),
            // The field node of `n`: 3 rows, 1 NULL (said to be 2, or 0 of 3 rows in a
            // 1-byte bitmap said to be 300 rows).
            (
                "a wrong null count",
                patched(&good, &le(&[3, 1]), &le(&[3, 2])),
            ),
            (
                "rows past the buffers",
                patched(&good, &le(&[3, 1]), &le(&[300, 1])),
            ),
        ];
        for (what, bytes) in cases {
            let e = load(&bytes)
                .err()
                .unwrap_or_else(|| panic!("{what}: loaded"));
            assert!(e.to_string().contains("damaged"), "{what}: {e}");
        }
    }

    /// A direct scan reads what the columns hold, across batches of any size, chunk ends and
    /// NULLs, as integers and as values alike.
    #[test]
    fn a_scan_reads_every_row_as_the_columns_hold_it() {
        use super::super::column::Col;
        use super::super::query::Fetch;
        use arrow_array::{BooleanArray, Float64Array, Int32Array, UInt32Array};
        let sizes = [300usize, 0, 5000, 1];
        let mut out = Vec::new();
        let mut w = None;
        let mut total = 0;
        let mut expected: Vec<[ValueRef<'static>; 6]> = Vec::new();
        for n in sizes {
            let a: Vec<Option<i64>> = (0..n)
                .map(|i| (i % 7 != 3).then_some((total + i) as i64 * 3 - 50))
                .collect();
            let b: Vec<u32> = (0..n).map(|i| u32::MAX - i as u32).collect();
            let c: Vec<Option<bool>> = (0..n).map(|i| (i % 5 != 0).then_some(i % 3 == 0)).collect();
            let d: Vec<f64> = (0..n).map(|i| i as f64 * -1.75).collect();
            let e: Vec<Option<&str>> = (0..n).map(|i| (i % 2 == 0).then_some("x")).collect();
            let f: Vec<Option<i32>> = (0..n)
                .map(|i| (i % 4 == 0).then_some(-(i as i32)))
                .collect();
            for i in 0..n {
                expected.push([
                    a[i].map_or(ValueRef::Null, ValueRef::Integer),
                    ValueRef::Integer(b[i].into()),
                    c[i].map_or(ValueRef::Null, |v| ValueRef::Integer(v.into())),
                    ValueRef::Real(d[i]),
                    e[i].map_or(ValueRef::Null, |_| ValueRef::Text(b"x")),
                    a[i].or(f[i].map(i64::from))
                        .map_or(ValueRef::Null, ValueRef::Integer),
                ]);
            }
            total += n;
            let batch = RecordBatch::try_from_iter([
                ("a", Arc::new(Int64Array::from(a)) as _),
                ("b", Arc::new(UInt32Array::from(b)) as _),
                ("c", Arc::new(BooleanArray::from(c)) as _),
                ("d", Arc::new(Float64Array::from(d)) as _),
                ("e", Arc::new(StringArray::from(e)) as _),
                ("f", Arc::new(Int32Array::from(f)) as _),
            ])
            .unwrap();
            let w = w.get_or_insert_with(|| {
                arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &batch.schema()).unwrap()
            });
            w.write(&batch).unwrap();
        }
        out.extend(w.unwrap().into_inner().unwrap());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("T.arrow"), &out).unwrap();
        let col = |n: &str| Col::Column(n.to_string());
        let cols = [
            col("a"),
            col("b"),
            col("c"),
            col("d"),
            col("e"),
            Col::Coalesce(vec!["a".into(), "f".into()]),
            Col::Rowid,
            Col::Int(5),
            Col::Null,
            col("missing"),
        ];
        let mut scan = TableScan::open(dir.path(), "T", &cols, &[])
            .unwrap()
            .unwrap();
        let mut row = 0;
        while let Some(r) = scan.next() {
            let want = &expected[row];
            for (k, &want) in want.iter().enumerate() {
                assert_eq!(r.fetch(k), want, "row {row}, column {k}");
                let int = match want {
                    ValueRef::Integer(v) => Some(v),
                    ValueRef::Real(v) => Some(v as i64),
                    _ => None,
                };
                assert_eq!(r.int(k), int, "row {row}, column {k}");
            }
            assert_eq!(r.fetch(6), ValueRef::Integer(row as i64 + 1));
            assert_eq!(r.int(6), Some(row as i64 + 1));
            assert_eq!((r.fetch(7), r.int(7)), (ValueRef::Integer(5), Some(5)));
            for k in [8, 9, 10] {
                assert_eq!((r.fetch(k), r.int(k)), (ValueRef::Null, None));
            }
            row += 1;
        }
        assert_eq!(row, total);
        assert!(scan.next().is_none());
    }

    /// Cut anywhere, the stream fails to load, or loads whole where it is cut between messages
    /// (after the schema: an empty table).
    #[test]
    fn cut_streams_are_errors() {
        let good = stream();
        for len in 0..good.len() {
            if let Ok(t) = load(&good[..len]) {
                assert!(t.rows == 0 || t.rows == 3, "cut at {len}: {} rows", t.rows);
            }
        }
    }
}
