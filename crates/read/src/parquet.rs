//! nsys' Parquet export (`nsys export --type parquetdir`: one Parquet file a table, the SQLite
//! export's tables and columns, in many row groups): a table's layout (`RowGroups`) and its
//! rows in order, a batch at a time (`Batches`). [`crate::arrow`]'s tables read a Parquet
//! table through these as they read an Arrow stream's batches, so every reader, workflow and
//! scan serves Parquet unchanged, and a reader holds a batch of a table, not the table.
//!
//! parquet's decoders assert what a well-formed file holds, and some damage (a dictionary page
//! where the footer says data starts) trips them: every call into them here is `caught`, a
//! panic the damaged file's error.

use anyhow::{Result, anyhow};
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader,
    ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::file::metadata::{ParquetMetaDataReader, ParquetStatisticsPolicy};
use std::fs::File;
use std::sync::Arc;

mod footer;

/// The file extension nsys gives a table of a Parquet export.
pub const EXTENSION: &str = "parquet";

/// What nsys appends to a report's name for its Parquet export's directory.
pub const NSYS_DIR_SUFFIX: &str = "_pqtdir";

/// Rows of a batch a reader is given (a run of row groups' last batch fewer): the memory a
/// reader of a table holds.
pub(crate) const BATCH_ROWS: usize = 1 << 12;

/// A Parquet table's layout: its footer a run of row groups at a time (see [`footer`]) and
/// each run's rows. Its batches are [`RowGroups::batch_lengths`]; [`Batches`] reads them.
pub(crate) struct RowGroups {
    /// `None`: the footer is not what the walk over it expects, and is decoded whole (then
    /// parquet's own decoding says what is wrong).
    pieces: Option<footer::Pieces>,
    /// Rows of each run.
    rows: Vec<usize>,
    /// The file's length, which every column chunk must lie within.
    len: u64,
}

/// parquet's reading options: the footer's statistics, a good part of it, are not needed to
/// read the rows.
fn options() -> ArrowReaderOptions {
    ArrowReaderOptions::new()
        .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll)
}

/// The footer `bytes` decoded.
fn decode(bytes: &[u8]) -> Result<ArrowReaderMetadata> {
    let options = options();
    let metadata = ParquetMetaDataReader::decode_metadata_with_options(
        bytes,
        Some(options.metadata_options()),
    )
    .map_err(|e| damaged(&e))?;
    ArrowReaderMetadata::try_new(Arc::new(metadata), options).map_err(|e| damaged(&e))
}

impl RowGroups {
    /// The layout of the table in `file`, and its schema: each run's footer is decoded once,
    /// to count its rows and check that its column chunks lie within the file.
    pub(crate) fn open(file: &File) -> Result<(SchemaRef, RowGroups)> {
        RowGroups::open_in_pieces(file, Some(footer::PIECE_BYTES))
    }

    /// [`RowGroups::open`], the footer in runs of at most `piece_bytes`, or whole (`None`).
    fn open_in_pieces(file: &File, piece_bytes: Option<u64>) -> Result<(SchemaRef, RowGroups)> {
        caught(|| {
            let len = file
                .metadata()
                .map_err(|e| anyhow!("cannot read: {e}"))?
                .len();
            let mut groups = RowGroups {
                pieces: piece_bytes.and_then(|b| footer::pieces(file, b)),
                rows: Vec::new(),
                len,
            };
            let mut schema = None;
            for run in 0..groups.runs() {
                let metadata = groups.metadata(file, run)?;
                let mut rows = 0usize;
                for group in metadata.metadata().row_groups() {
                    rows = usize::try_from(group.num_rows())
                        .ok()
                        .and_then(|n| rows.checked_add(n))
                        .ok_or_else(|| damaged(&"a row group of a negative number of rows"))?;
                }
                groups.rows.push(rows);
                schema.get_or_insert_with(|| metadata.schema().clone());
            }
            let schema = schema.ok_or_else(|| damaged(&"a footer without its schema"))?;
            Ok((schema, groups))
        })
    }

    /// How many runs of row groups the footer has.
    fn runs(&self) -> usize {
        self.pieces.as_ref().map_or(1, footer::Pieces::len)
    }

    /// The footer of run `run`, decoded and checked.
    fn metadata(&self, file: &File, run: usize) -> Result<ArrowReaderMetadata> {
        let metadata = match &self.pieces {
            Some(pieces) => decode(
                &pieces
                    .footer(file, run)
                    .map_err(|e| anyhow!("cannot read: {e}"))?,
            )?,
            None => ArrowReaderMetadata::load(file, options()).map_err(|e| damaged(&e))?,
        };
        check_chunks(metadata.metadata(), self.len).map_err(|e| damaged(&e))?;
        Ok(metadata)
    }

    /// The rows of each batch [`Batches`] gives: [`BATCH_ROWS`] at a time, a run's last fewer
    /// (parquet's reader fills a batch across the run's row groups).
    pub(crate) fn batch_lengths(&self) -> Vec<usize> {
        self.rows
            .iter()
            .flat_map(|&n| {
                let last = (n % BATCH_ROWS > 0).then_some(n % BATCH_ROWS);
                std::iter::repeat_n(BATCH_ROWS, n / BATCH_ROWS).chain(last)
            })
            .collect()
    }
}

/// The schema of the table in `file`, from its footer without its row groups (which hold most
/// of it).
pub(crate) fn schema(file: &File) -> Result<SchemaRef> {
    caught(|| {
        let metadata = match footer::pieces(file, footer::PIECE_BYTES) {
            Some(pieces) => decode(&pieces.without_row_groups())?,
            None => ArrowReaderMetadata::load(file, options()).map_err(|e| damaged(&e))?,
        };
        Ok(metadata.schema().clone())
    })
}

/// A reader's walk over a table's rows, in order, a batch at a time ([`RowGroups::batch_lengths`]),
/// decoding only the columns it reads: each run of row groups' footer is decoded as the walk
/// reaches it.
pub(crate) struct Batches {
    file: File,
    /// The columns read (by their place in the table, rising).
    columns: Vec<usize>,
    /// The next run of row groups, and the reader of the run being read.
    run: usize,
    reader: Option<ParquetRecordBatchReader>,
    /// Rows of the next run not read (the batches before the first asked).
    skip: usize,
}

impl Batches {
    /// A walk over the columns `columns` (rising) of the table in `file` (whose layout is
    /// `groups`) from its batch `b` on: the runs of row groups before it are not read, and its
    /// run's rows before it are skipped.
    pub(crate) fn from_batch(
        file: File,
        columns: Vec<usize>,
        groups: &RowGroups,
        b: usize,
    ) -> Batches {
        let (mut run, mut first) = (0, 0);
        while let Some(&rows) = groups.rows.get(run) {
            let batches = rows.div_ceil(BATCH_ROWS);
            if b < first + batches {
                break;
            }
            (run, first) = (run + 1, first + batches);
        }
        Batches {
            file,
            columns,
            run,
            reader: None,
            skip: b.saturating_sub(first) * BATCH_ROWS,
        }
    }

    /// The next batch, its columns those the walk reads, in order; `None` after the last.
    pub(crate) fn next(&mut self, groups: &RowGroups) -> Result<Option<RecordBatch>> {
        caught(|| {
            loop {
                if let Some(reader) = &mut self.reader {
                    match reader.next() {
                        Some(batch) => return batch.map(Some).map_err(|e| damaged(&e)),
                        None => self.reader = None,
                    }
                }
                if self.run >= groups.runs() {
                    return Ok(None);
                }
                let metadata = groups.metadata(&self.file, self.run)?;
                self.run += 1;
                let mask =
                    ProjectionMask::roots(metadata.parquet_schema(), self.columns.iter().copied());
                let source = self
                    .file
                    .try_clone()
                    .map_err(|e| anyhow!("cannot read: {e}"))?;
                let mut builder =
                    ParquetRecordBatchReaderBuilder::new_with_metadata(source, metadata)
                        .with_projection(mask)
                        .with_batch_size(BATCH_ROWS);
                let skip = std::mem::take(&mut self.skip);
                if skip > 0 {
                    let rest = groups.rows[self.run - 1].saturating_sub(skip);
                    builder = builder.with_row_selection(RowSelection::from(vec![
                        RowSelector::skip(skip),
                        RowSelector::select(rest),
                    ]));
                }
                let reader = builder.build().map_err(|e| damaged(&e))?;
                self.reader = Some(reader);
            }
        })
    }
}

/// `read`, where a panic of parquet's is the damaged file's error (its own message is not
/// printed).
fn caught<T>(read: impl FnOnce() -> Result<T>) -> Result<T> {
    thread_local!(static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(std::cell::Cell::get) {
                previous(info)
            }
        }));
    });
    QUIET.with(|q| q.set(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read));
    QUIET.with(|q| q.set(false));
    result.unwrap_or_else(|_| Err(damaged(&"its decoder failed")))
}

/// The error of a table that parquet cannot read.
pub(crate) fn damaged(e: &dyn std::fmt::Display) -> anyhow::Error {
    anyhow!(
        "not a readable Parquet file ({}): a damaged or truncated file; export the report again",
        nsys_perfetto_model::errors::error_line(&anyhow!("{e}"))
    )
}

/// Whether every column chunk the footer describes lies within the file: parquet's reader
/// panics on a negative offset or length.
fn check_chunks(metadata: &parquet::file::metadata::ParquetMetaData, len: u64) -> Result<()> {
    for group in metadata.row_groups() {
        for column in group.columns() {
            let start = column
                .dictionary_page_offset()
                .unwrap_or(column.data_page_offset());
            let size = column.compressed_size();
            let end = u64::try_from(start)
                .ok()
                .zip(u64::try_from(size).ok())
                .and_then(|(s, n)| s.checked_add(n));
            if end.is_none_or(|end| end > len) {
                return Err(anyhow!(
                    "a column chunk of {} at {start}, {size} bytes, is not within the file",
                    column.column_path()
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, Int64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;
    use std::path::Path;

    /// 5 000 rows (a text column, a nullable one, an integer one) in row groups of 64 rows,
    /// with the statistics parquet writes by default.
    fn table() -> RecordBatch {
        table_of(5_000)
    }

    fn table_of(n: i64) -> RecordBatch {
        RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from_iter_values(0..n)) as _),
            (
                "name",
                Arc::new(StringArray::from_iter_values(
                    (0..n).map(|i| format!("kernel_{}", i % 37)),
                )) as _,
            ),
            (
                "stream",
                Arc::new(Int32Array::from_iter(
                    (0..n).map(|i| (i % 5 != 0).then_some((i % 7) as i32)),
                )) as _,
            ),
        ])
        .unwrap()
    }

    fn write_parquet(path: &Path, batch: &RecordBatch) {
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(64))
            .build();
        let f = std::fs::File::create(path).unwrap();
        let mut w = ArrowWriter::try_new(f, batch.schema(), Some(props)).unwrap();
        w.write(batch).unwrap();
        w.close().unwrap();
    }

    /// `batch` as `T.parquet` in a new temporary folder.
    fn written(batch: &RecordBatch) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("T.parquet");
        write_parquet(&src, batch);
        (dir, src)
    }

    /// What [`read_all`] says of batches other than the layout's.
    const LAYOUT: &str = "other rows than the footer says";

    /// Every row of the table in `src`, every column, its footer read in runs of at most
    /// `piece_bytes` (or whole): the batches a walk gives, checked against the layout's.
    fn read_all(src: &Path, piece_bytes: Option<u64>) -> Result<Vec<RecordBatch>> {
        let f = std::fs::File::open(src).unwrap();
        let (schema, groups) = RowGroups::open_in_pieces(&f, piece_bytes)?;
        let mut batches = Batches::from_batch(f, (0..schema.fields().len()).collect(), &groups, 0);
        let mut out = Vec::new();
        while let Some(batch) = batches.next(&groups)? {
            out.push(batch);
        }
        // As a table's walk refuses them (see `arrow::walk`).
        let lengths: Vec<usize> = out.iter().map(RecordBatch::num_rows).collect();
        if lengths != groups.batch_lengths() || out.iter().any(|b| b.schema() != schema) {
            return Err(damaged(&LAYOUT));
        }
        Ok(out)
    }

    /// A table read in runs of its row groups holds what the whole table holds, in the same
    /// order and with the same schema, however small the runs, in batches of at most
    /// [`BATCH_ROWS`] that fill across row groups.
    #[test]
    fn runs_of_row_groups_read_the_whole_table() {
        let want = table_of(40_000);
        let (_dir, src) = written(&want);
        let f = std::fs::File::open(&src).unwrap();
        for (piece_bytes, runs) in [(u64::MAX, 1), (1, 625), (20_000, 0)] {
            let pieces = footer::pieces(&f, piece_bytes).expect("a footer the walk reads");
            if runs > 0 {
                assert_eq!(pieces.len(), runs, "runs of at most {piece_bytes} bytes");
            } else {
                assert!(pieces.len() > 1 && pieces.len() < 625, "{}", pieces.len());
            }
            let got = read_all(&src, Some(piece_bytes)).unwrap();
            if runs == 1 {
                assert_eq!(got.len(), 40_000usize.div_ceil(BATCH_ROWS));
            }
            let mut at = 0;
            for batch in &got {
                let n = batch.num_rows();
                assert!(n > 0 && n <= BATCH_ROWS);
                assert_eq!(
                    batch,
                    &want.slice(at, n),
                    "rows from {at}, runs of {piece_bytes} B"
                );
                at += n;
            }
            assert_eq!(at, want.num_rows(), "runs of at most {piece_bytes} bytes");
        }
    }

    /// A walk from a batch on gives the batches a walk from the first gives from there, the
    /// runs before it not read and its run's rows before it skipped.
    #[test]
    fn a_walk_from_a_batch_reads_from_there() {
        let (_dir, src) = written(&table_of(40_000));
        let all = read_all(&src, Some(20_000)).unwrap();
        let f = std::fs::File::open(&src).unwrap();
        let (_, groups) = RowGroups::open_in_pieces(&f, Some(20_000)).unwrap();
        assert!(groups.runs() > 2, "{} runs", groups.runs());
        for b in [0, 1, 2, all.len() - 1, all.len()] {
            let f = f.try_clone().unwrap();
            let mut batches = Batches::from_batch(f, vec![0, 1, 2], &groups, b);
            let mut got = Vec::new();
            while let Some(batch) = batches.next(&groups).unwrap() {
                got.push(batch);
            }
            assert_eq!(got, all[b..], "from batch {b}");
        }
    }

    /// A walk decodes only the columns it reads, in the table's order.
    #[test]
    fn a_walk_reads_the_columns_asked() {
        let want = table();
        let (_dir, src) = written(&want);
        let f = std::fs::File::open(&src).unwrap();
        let (_, groups) = RowGroups::open(&f).unwrap();
        let want = want.project(&[0, 2]).unwrap();
        let mut batches = Batches::from_batch(f, vec![0, 2], &groups, 0);
        let mut at = 0;
        while let Some(batch) = batches.next(&groups).unwrap() {
            assert_eq!(batch, want.slice(at, batch.num_rows()), "rows from {at}");
            at += batch.num_rows();
        }
        assert_eq!(at, want.num_rows());
    }

    /// Write `good` to `path` with byte `at` damaged: all its bits, the lowest or the fifth
    /// flipped, by turns; returns the bits flipped.
    fn write_damaged(path: &Path, good: &[u8], at: usize) -> u8 {
        let flip = [0xffu8, 0x01, 0x10][at % 3];
        let mut bytes = good.to_vec();
        bytes[at] ^= flip;
        std::fs::write(path, &bytes).unwrap();
        flip
    }

    /// Every byte of a footer damaged in turn ([`write_damaged`]): the reading in runs of row
    /// groups never reads what the whole footer's decoding refuses, reads the same rows where
    /// both read, and meets no decoder panic where the whole footer's reading does not. It
    /// refuses some damage the whole decoding lets through: the walk reads a damaged field by
    /// its Thrift type, where parquet reads some fields by what they should be.
    #[test]
    fn damaged_footers_fail_as_whole_ones() {
        let (_dir, src) = written(&table_of(600));
        let good = std::fs::read(&src).unwrap();
        let tail = &good[good.len() - 8..good.len() - 4];
        let start = good.len() - 8 - u32::from_le_bytes(tail.try_into().unwrap()) as usize;
        let panicked = |r: &Result<Vec<RecordBatch>>| {
            r.as_ref()
                .is_err_and(|e| e.to_string().contains("its decoder failed"))
        };
        let (mut refused, mut read, mut stricter, mut parquet_panics) = (0, 0, 0, 0);
        for at in start..good.len() {
            let flip = write_damaged(&src, &good, at);
            let case = format!("footer byte {} ^ {flip:#x}", at - start);
            let w = read_all(&src, None);
            if panicked(&w) {
                // Parquet's own decoding panics on some damage (a dictionary page the
                // footer misplaces): the reading in runs is only asked not to add any.
                parquet_panics += 1;
                continue;
            }
            let r = read_all(&src, Some(200));
            assert!(!panicked(&r), "{case}: a panic the whole footer has not");
            match (w, r) {
                (Err(_), Err(_)) => refused += 1,
                (Ok(w), Ok(r)) => {
                    read += 1;
                    assert!(same_rows(&w, &r), "{case}");
                }
                (Ok(_), Err(_)) => stricter += 1,
                // Damage that makes parquet's reader end a batch at a row group where the
                // layout says it fills across: either reading may meet it.
                (Err(e), Ok(_)) if e.to_string().contains(LAYOUT) => stricter += 1,
                (Err(e), Ok(_)) => panic!("{case}: read in runs, refused whole: {e:#}"),
            }
        }
        let cases = good.len() - start;
        assert!(
            refused > cases / 4 && read > cases / 4,
            "{refused} refused, {read} read"
        );
        assert!(
            stricter < cases / 20,
            "{stricter} of {cases} refused in runs only"
        );
        assert!(parquet_panics < 10, "{parquet_panics} panics");
    }

    /// Every byte of a table damaged in turn ([`write_damaged`], footer, pages and all): the
    /// table is read or refused with the one-line error, and no panic escapes, where parquet's
    /// decoders panic on some of these files.
    #[test]
    fn damaged_tables_are_refused_not_panics() {
        let (_dir, src) = written(&table_of(600));
        let good = std::fs::read(&src).unwrap();
        let (mut refused, mut read) = (0, 0);
        for at in 0..good.len() {
            let flip = write_damaged(&src, &good, at);
            match std::panic::catch_unwind(|| read_all(&src, Some(footer::PIECE_BYTES))) {
                Ok(Ok(_)) => read += 1,
                Ok(Err(e)) => {
                    refused += 1;
                    let e = format!("{e:#}");
                    assert!(!e.contains('\n'), "byte {at}: {e}");
                }
                Err(_) => panic!("byte {at} ^ {flip:#x}: a panic escaped"),
            }
        }
        assert!(refused > 0 && read > 0, "{refused} refused, {read} read");
    }

    /// Whether two runs of batches hold the same rows, wherever their batches end.
    fn same_rows(a: &[RecordBatch], b: &[RecordBatch]) -> bool {
        let rows = |x: &[RecordBatch]| x.iter().map(RecordBatch::num_rows).sum::<usize>();
        if rows(a) != rows(b) || a.first().map(|x| x.schema()) != b.first().map(|x| x.schema()) {
            return false;
        }
        let (mut a, mut b) = (a.iter(), b.iter());
        let (mut x, mut y) = (a.next().cloned(), b.next().cloned());
        while let (Some(p), Some(q)) = (&x, &y) {
            let n = p.num_rows().min(q.num_rows());
            if p.slice(0, n) != q.slice(0, n) {
                return false;
            }
            let (p, q) = (p.slice(n, p.num_rows() - n), q.slice(n, q.num_rows() - n));
            x = if p.num_rows() == 0 {
                a.next().cloned()
            } else {
                Some(p)
            };
            y = if q.num_rows() == 0 {
                b.next().cloned()
            } else {
                Some(q)
            };
        }
        true
    }

    /// A column chunk placed before the file's start, or past its end, is refused (parquet's
    /// reader panics on a negative offset or length).
    #[test]
    fn column_chunks_outside_the_file_are_refused() {
        let (_dir, src) = written(&table_of(600));
        let f = std::fs::File::open(&src).unwrap();
        let len = f.metadata().unwrap().len();
        let good = ParquetMetaDataReader::new().parse_and_finish(&f).unwrap();
        check_chunks(&good, len).unwrap();
        let moved = |offset: i64, size: i64| {
            let mut metadata = good.clone().into_builder();
            let mut groups = metadata.take_row_groups();
            let mut columns = groups[3].columns().to_vec();
            columns[1] = columns[1]
                .clone()
                .into_builder()
                .set_dictionary_page_offset(None)
                .set_data_page_offset(offset)
                .set_total_compressed_size(size)
                .build()
                .unwrap();
            groups[3] = groups[3]
                .clone()
                .into_builder()
                .set_column_metadata(columns)
                .build()
                .unwrap();
            metadata.set_row_groups(groups).build()
        };
        check_chunks(&moved(4, 100), len).unwrap();
        for (offset, size) in [(-8, 100), (4, -1), (len as i64 - 50, 51), (i64::MAX, 2)] {
            let e = check_chunks(&moved(offset, size), len).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "a column chunk of \"name\" at {offset}, {size} bytes, is not within the file"
                )
            );
        }
    }
}
