//! One table, from its mapped Arrow stream (decoded in place) or its Parquet file (decoded a
//! batch at a time by each reader: see [`super::walk`]), shared by every user of the same file
//! while it is in use, and checked for changes.

use super::check::{check_layout, sql_columns, stream};
use super::column::Column;
use super::files::{
    EXTENSION, MAX_HEADER, Place, Stamp, change, change_since, changed, damaged, one_line, stamp,
    walked_streams,
};

use anyhow::{Result, anyhow, bail};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_int;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Memory pages, for releasing mapped columns behind a scan.
pub(super) const PAGE: usize = 4096;

/// Drop this process's copy of the whole pages of `[start, end)` that lie inside `mapped` (the
/// page cache keeps them; a later read maps them again).
///
/// # Safety
/// `mapped` must be a live read-only file mapping: on heap memory MADV_DONTNEED would zero it.
pub(super) unsafe fn drop_pages(mapped: &std::ops::Range<usize>, start: usize, end: usize) {
    // The mapping's last page is mapped whole.
    let start = start.max(mapped.start).next_multiple_of(PAGE);
    let end = end.min(mapped.end.next_multiple_of(PAGE)) / PAGE * PAGE;
    if end > start {
        // SAFETY: a page range inside the mapping, as the caller promises.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
}

/// How many rows a reader reads between looks at what it can give back.
pub(super) const RELEASE_EVERY: usize = 1 << 12;

/// The least a reader gives back of a buffer at once (but at a batch's end): few calls to the
/// kernel, each for a run of pages, while the pages a reader maps stay a window of this size a
/// column. Each call also flushes the other threads' address translations, which costs more
/// than the pages it keeps mapped: half a megabyte, not less.
pub(super) const RELEASE_BYTES: usize = 1 << 19;

/// The least size of a column's values in a batch (nsys writes a table as one batch) whose
/// pages a binary search gives back (see [`Table::forget_probes`]): smaller columns (a string
/// table's ids) are looked up often, and what their probes map is small.
pub(super) const PROBED_BYTES: usize = 4 << 20;

/// Every buffer of a column, for [`Table::give_back`].
pub(super) const ALL: u8 = 0b111;

/// What a reader of a table has given back of the batch it reads: for each column, for each
/// of its buffers (see [`Column::behind`]), the address below which its pages are given back.
#[derive(Default)]
pub(super) struct Behind {
    pub(super) batch: usize,
    pub(super) marks: Vec<[usize; 3]>,
}

/// Where `table` of the Arrow export `export` lies (see [`places`]).
pub(super) fn place(export: &Path, table: &str) -> Result<Place> {
    if let Ok(m) = std::fs::metadata(export)
        && m.is_file()
    {
        return walked_streams(export, &m)
            .map_err(|e| changed_in_use(export, table).unwrap_or(e))?
            .into_iter()
            .find(|p| p.table == table)
            .ok_or_else(|| anyhow!("{}: no table {table}", export.display()));
    }
    // The place the export's opening found, else the table's file of either format.
    let open = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    let found = open.iter().filter_map(|o| o.upgrade()).find_map(|tables| {
        let o = tables
            .iter()
            .find(|o| o.place.table == table && o.place.file.parent() == Some(export))?;
        Some(o.place.clone())
    });
    drop(open);
    Ok(found.unwrap_or_else(|| {
        let arrow = export.join(format!("{table}.{EXTENSION}"));
        let parquet = export.join(format!("{table}.{}", crate::parquet::EXTENSION));
        Place {
            file: if !arrow.exists() && parquet.exists() {
                parquet
            } else {
                arrow
            },
            bytes: None,
            table: table.to_string(),
            walked: None,
        }
    }))
}

/// Whether `place` is a table of a Parquet export.
fn is_parquet(place: &Place) -> bool {
    place.bytes.is_none()
        && place
            .file
            .extension()
            .is_some_and(|e| e == crate::parquet::EXTENSION)
}

/// A table of an open export (see [`super::Tables`]): where it lies, its columns (from its
/// schema alone), its file's stamp when the export was opened, and the table itself once a
/// reader has loaded it, held while the export is open. An export has tens of tables and a
/// conversion or recipe reads a few: each is loaded (mapped, decoded, checked) on first use.
pub(super) struct Opened {
    pub(super) place: Place,
    pub(super) columns: Vec<(String, &'static str)>,
    pub(super) stamp: Stamp,
    pub(super) table: std::sync::OnceLock<Arc<Table>>,
}

impl Opened {
    /// The table at `place` as the export's opening finds it: its schema read, its file
    /// stamped.
    pub(super) fn open(place: Place) -> Result<Opened> {
        let (columns, stamp) = schema_of(&place)?;
        Ok(Opened {
            place,
            columns,
            stamp,
            table: Default::default(),
        })
    }

    /// An error naming the table's file where it changed since the export was opened (or, once
    /// loaded, since it was loaded: see [`Table::change`]).
    pub(super) fn unchanged(&self) -> Result<()> {
        match self.table.get() {
            Some(t) => t.unchanged(),
            None => match change_since(&self.place.file, self.stamp) {
                Some(how) => Err(self.place.changed(how)),
                None => Ok(()),
            },
        }
    }
}

/// The exports open in this process (each a [`super::Tables`]'s tables): a table is loaded for
/// the first time only from the file the export's opening stamped.
pub(super) static OPENED: Mutex<Vec<std::sync::Weak<Vec<Opened>>>> = Mutex::new(Vec::new());

/// The open export that holds the table at `place`, and its index there.
fn opened(place: &Place) -> Option<(Arc<Vec<Opened>>, usize)> {
    let mut open = OPENED.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|o| o.strong_count() > 0);
    open.iter().filter_map(|o| o.upgrade()).find_map(|tables| {
        let i = tables
            .iter()
            .position(|o| o.place.table == place.table && o.place == *place)?;
        Some((tables, i))
    })
}

/// The file of the table at `place`, open, with its stamp and where the table's stream lies in
/// it; an error where the file changed since the walk that found the stream.
fn open_stream(place: &Place) -> Result<(std::fs::File, Stamp, std::ops::Range<u64>)> {
    let file = std::fs::File::open(&place.file).map_err(|e| anyhow!("cannot read: {e}"))?;
    let stamp = stamp(&file.metadata().map_err(|e| anyhow!("cannot read: {e}"))?);
    if let Some(how) = place.walked.and_then(|w| change(w, stamp)) {
        return Err(changed(how));
    }
    let bytes = place.bytes.clone().unwrap_or(0..stamp.0);
    Ok((file, stamp, bytes))
}

/// The columns of the table at `place` from its stream's schema (its first message, read
/// alone: the batches are read and checked when the table is loaded) or its Parquet file's
/// footer, and the stamp of its file as it was read.
fn schema_of(place: &Place) -> Result<(Vec<(String, &'static str)>, Stamp)> {
    use std::os::unix::fs::FileExt;
    let (file, stamp, std::ops::Range { start, end }) = open_stream(place)?;
    if is_parquet(place) {
        return Ok((sql_columns(crate::parquet::schema(&file)?.as_ref())?, stamp));
    }
    let read = |at: u64, len: usize| -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, start + at)
            .map_err(|e| anyhow!("cannot read: {e}"))?;
        Ok(buf)
    };
    let size = end.saturating_sub(start);
    let truncated = || damaged("the stream is truncated");
    if size < 8 {
        return Err(truncated());
    }
    // The continuation marker, then the header's length (or, in the format before it, the
    // length alone).
    let prefix = read(0, 8)?;
    let word = |at: usize| i32::from_le_bytes(prefix[at..at + 4].try_into().expect("4 bytes"));
    let (at, len) = match word(0) {
        -1 => (8u64, word(4)),
        len => (4u64, len),
    };
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l > 0)
        .ok_or_else(|| damaged("a stream that does not begin with a schema"))?;
    if len > MAX_HEADER || at + len as u64 > size {
        return Err(damaged("a message runs past the end of the file"));
    }
    let header = read(at, len)?;
    let message = arrow_ipc::root_as_message(&header)
        .map_err(|e| damaged(&format!("a message's header is damaged: {e}")))?;
    let schema = message
        .header_as_schema()
        .ok_or_else(|| damaged("a stream that does not begin with a schema"))?;
    let schema = arrow_ipc::convert::try_fb_to_schema(schema)
        .map_err(|e| damaged(&format!("the schema is damaged: {e}")))?;
    Ok((sql_columns(&schema)?, stamp))
}

/// One table, in record batches, from one of two files: an Arrow IPC stream, whose batches are
/// decoded in place when the table is loaded (`batches`), or a Parquet file, whose batches each
/// reader decodes as it reaches them (`parquet`). Readers reach the rows through a walk (in
/// order: `walk::Walk`) or `Table::at_hand` (at random), whichever the file.
pub(super) struct Table {
    /// Column names and declared SQLite types.
    pub(super) columns: Vec<(String, &'static str)>,
    /// An Arrow stream's batches (a Parquet table's: none).
    pub(super) batches: Vec<Vec<Column>>,
    /// A Parquet table's rows.
    pub(super) parquet: Option<ParquetRows>,
    /// Rows of each batch.
    pub(super) lengths: Vec<usize>,
    pub(super) rows: usize,
    /// The column SQLite's rowid is an alias of: an integer `id` whose values rise strictly
    /// (as `StringIds.id` and `COMPOSITE_EVENTS.id`, each the table's `INTEGER PRIMARY KEY`).
    /// Without one, the rowid is the row's number from 1, as in the SQLite export.
    pub(super) key: Option<usize>,
    /// The last row's rowid (`None` without rows).
    pub(super) last_rowid: Option<i64>,
    /// Whether the rows are in the order of these columns (ascending), found once per list.
    pub(super) sorted: Mutex<HashMap<Vec<c_int>, bool>>,
    /// The addresses of the file's mapping: only its pages are given back (a buffer the
    /// decoder copied to align it, or a validity bitmap Arrow made, is heap memory). Empty
    /// where the bytes were read into memory.
    pub(super) mapped: std::ops::Range<usize>,
    /// The file read, to tell whether it changed while it was read.
    pub(super) source: Source,
    /// What went wrong reading a Parquet table's rows, naming its file (see [`Table::failed`]).
    pub(super) failure: Mutex<Option<String>>,
}

/// A Parquet table's rows (see [`Table`]).
pub(super) struct ParquetRows {
    pub(super) groups: crate::parquet::RowGroups,
    /// Each column of every batch, decoded once a reader needs its rows at random (see
    /// `Table::at_hand`).
    pub(super) whole: Vec<std::sync::OnceLock<Vec<Column>>>,
}

/// The file a [`Table`] was read from, as it was when it was read.
/// (No file is kept open: an export has tens of tables, and `merge` opens many exports.)
pub(super) struct Source {
    pub(super) place: Place,
    pub(super) stamp: Stamp,
    /// The watched mapping (`None` where the bytes were read into memory).
    pub(super) mapping: Option<Arc<crate::mapped::Mapping>>,
}

/// A [`crate::mapped::Mapping`] shared by a table and the buffers decoded from it.
pub(super) struct SharedMapping(Arc<crate::mapped::Mapping>);

impl AsRef<[u8]> for SharedMapping {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// The error of a table of `file` in use (loaded, not yet dropped) whose file changed since it
/// was loaded, `table` first: what went wrong where `file` no longer reads as an export.
pub(super) fn changed_in_use(file: &Path, table: &str) -> Option<anyhow::Error> {
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
pub(super) static LOADED: Mutex<Vec<(Place, Stamp, std::sync::Weak<Table>)>> =
    Mutex::new(Vec::new());

impl Table {
    /// The table at `place`, shared with any other user of the same table.
    /// A table of an open export is loaded from the file its opening stamped, and held while
    /// the export is open.
    pub(super) fn shared(place: &Place) -> Result<Arc<Table>> {
        let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
        loaded.retain(|(_, _, t)| t.strong_count() > 0);
        let opened = opened(place);
        let m = match std::fs::metadata(&place.file) {
            Ok(m) => m,
            // Gone while this process reads its export.
            Err(_) if opened.is_some() || loaded.iter().any(|(p, _, _)| p == place) => {
                return Err(changed("removed"));
            }
            Err(e) => bail!("cannot read: {e}"),
        };
        let stamp = stamp(&m);
        let since_opened = |now: Stamp| {
            let (tables, i) = opened.as_ref()?;
            change(tables[*i].stamp, now)
        };
        if let Some(how) = since_opened(stamp) {
            return Err(changed(how));
        }
        // The stamp first: comparing paths compares their components.
        let found = loaded
            .iter()
            .find(|(p, s, _)| *s == stamp && p == place)
            .and_then(|(_, _, t)| t.upgrade());
        let pin = |t: &Arc<Table>| {
            if let Some((tables, i)) = &opened {
                let _ = tables[*i].table.set(t.clone());
            }
        };
        if let Some(t) = found {
            pin(&t);
            return Ok(t);
        }
        let t = match Table::load(place) {
            Ok(t) => Arc::new(t),
            // A table of this file in use, or of an open export, whose file changed since it
            // was loaded or opened: what went wrong is the change, not damage. (One that loads
            // is read anew; the conversion's check at its end tells the change.)
            Err(e) => {
                if let Some((tables, i)) = &opened
                    && let Some(how) = change_since(&place.file, tables[*i].stamp)
                {
                    return Err(changed(how));
                }
                let mut in_use = loaded.iter().filter(|(p, _, _)| p == place);
                return Err(in_use
                    .find_map(|(_, _, t)| t.upgrade()?.change())
                    .map_or(e, changed));
            }
        };
        // Stamped again as it was loaded: the file may have changed since the look above.
        if let Some(how) = since_opened(t.source.stamp) {
            return Err(changed(how));
        }
        pin(&t);
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
    pub(super) fn give_back(
        &self,
        b: usize,
        i: usize,
        cols: &[Cell<u8>],
        behind: &mut Behind,
        min: usize,
    ) {
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
    pub(super) fn load(place: &Place) -> Result<Table> {
        use std::os::unix::fs::FileExt;
        if is_parquet(place) {
            return Table::load_parquet(place);
        }
        let (file, stamp, std::ops::Range { start: offset, end }) = open_stream(place)?;
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
    pub(super) fn decode(
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
            parquet: None,
            lengths,
            key: None,
            last_rowid: None,
            sorted: Mutex::default(),
            mapped,
            source,
            failure: Mutex::default(),
        };
        if checked {
            table.validate(&batches).map_err(|e| lost(damaged(&e)))?;
        }
        table.find_key()?;
        Ok(table)
    }

    /// Find the table's key (see [`Table::key`]) and its last rowid.
    pub(super) fn find_key(&mut self) -> Result<()> {
        let id = self
            .columns
            .iter()
            .position(|(n, t)| n == "id" && *t == "INTEGER");
        let rising = match id {
            Some(c) => self.rising_to(c)?,
            None => None,
        };
        self.key = id.filter(|_| rising.is_some());
        self.last_rowid = match rising {
            Some(last) => last,
            None => (self.rows > 0).then_some(self.rows as i64),
        };
        Ok(())
    }

    /// Whether a page of the table's mapping was lost (its file truncated): what was read of
    /// it since may be zeros. A reader looks before it trusts what it read.
    #[inline]
    pub(super) fn lost(&self) -> bool {
        self.source.mapping.as_ref().is_some_and(|m| m.lost_pages())
    }

    /// How the table's file changed since it was loaded (truncated, rewritten, replaced or
    /// removed), if it did. A file cut inside a page loses no page (the rest of the page reads
    /// as zeros): its size tells.
    pub(super) fn change(&self) -> Option<&'static str> {
        if self.lost() {
            return Some("truncated");
        }
        change_since(&self.source.place.file, self.source.stamp)
    }

    /// An error naming the table's file where it changed since it was loaded, or where a
    /// reader failed to read its rows (see [`Table::failed`]).
    pub(super) fn unchanged(&self) -> Result<()> {
        if let Some(how) = self.change() {
            return Err(self.source.place.changed(how));
        }
        match &*self.failure.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(failure) => Err(anyhow!("{failure}")),
            None => Ok(()),
        }
    }

    /// Check the values of the decoded `batches` (this table's) as the decoder would have:
    /// offsets within their bytes and rising, text in UTF-8, null counts as declared. A slice
    /// of rows at a time, giving back the pages read behind it.
    pub(super) fn validate(&self, batches: &[RecordBatch]) -> std::result::Result<(), String> {
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
    pub(super) fn give_back_stopped(&self, cols: &[Cell<u8>], behind: &mut Behind) {
        let b = behind.batch;
        if let Some(&n) = self.lengths.get(b) {
            self.give_back(b, n, cols, behind, 0);
        }
    }

    /// `ALL` for the columns in `cols` (a rowid, `-1`, reads the key), for [`Table::give_back`].
    pub(super) fn reading(&self, cols: impl IntoIterator<Item = c_int>) -> Vec<Cell<u8>> {
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

    /// SQLite's rowid of row `i` of `batch` (its columns), row `row` of the table.
    #[inline]
    pub(super) fn rowid(&self, batch: &[Column], i: usize, row: usize) -> i64 {
        match self.key {
            Some(k) => batch[k].int(i).unwrap_or_default(),
            None => row as i64 + 1,
        }
    }

    /// Row `row` of `column` (a column of every batch), as an integer (NULL sorts first:
    /// `i64::MIN`).
    fn int_at(&self, column: &[&Column], row: usize) -> i64 {
        match self.locate(row) {
            (b, i) if b < self.lengths.len() => column[b].int(i).unwrap_or(i64::MIN),
            _ => i64::MAX,
        }
    }

    /// Row `row` of the table as (batch, row in it); past the end, (number of batches, 0).
    pub(super) fn locate(&self, mut row: usize) -> (usize, usize) {
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
    pub(super) fn step(
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
    pub(super) fn equal_range(&self, col: usize, v: i64) -> Result<(usize, usize)> {
        let column = self.at_hand(col)?;
        let bound = |strict: bool| {
            let (mut lo, mut hi) = (0, self.rows);
            while lo < hi {
                let mid = (lo + hi) / 2;
                let x = self.int_at(&column, mid);
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
        Ok(range)
    }

    /// Give back the pages a binary search over column `col` mapped, where the column is large:
    /// each probe maps the page-cache folio it lands in (up to 2 MB on recent kernels), which
    /// no scan would give back until it passed them. (The rows found are mapped again when read.)
    pub(super) fn forget_probes(&self, col: usize) {
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
    pub(super) fn find(&self, rowid: i64) -> Result<Option<usize>> {
        let Some(k) = self.key else {
            return Ok(usize::try_from(rowid)
                .ok()
                .filter(|r| (1..=self.rows).contains(r))
                .map(|r| r - 1));
        };
        // The key rises strictly: at most one row holds it.
        let (first, end) = self.equal_range(k, rowid)?;
        Ok((end > first).then_some(first))
    }
}
