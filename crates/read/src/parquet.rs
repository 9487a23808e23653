//! nsys' Parquet export (`nsys export --type parquetdir`: one Parquet file a table, the SQLite
//! export's tables and columns, in many row groups), read by rewriting it as an Arrow export in a
//! private temporary directory, row group by row group (memory stays one batch), which
//! [`crate::arrow`] then reads as it reads nsys' own Arrow exports: every reader, workflow and
//! its bounded, memory-mapped scans serve Parquet unchanged.

use anyhow::{Context as _, Result, anyhow};
use arrow_schema::ArrowError;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::file::metadata::{ParquetMetaDataReader, ParquetStatisticsPolicy};
use std::path::Path;
use std::sync::Arc;

mod footer;

/// The file extension nsys gives a table of a Parquet export.
pub const EXTENSION: &str = "parquet";

/// What nsys appends to a report's name for its Parquet export's directory.
pub const NSYS_DIR_SUFFIX: &str = "_pqtdir";

/// Rows a rewritten record batch holds: the memory a table's rewriting needs.
const BATCH_ROWS: usize = 1 << 14;

/// Rewrite the Parquet export `dir` as an Arrow export in a new temporary directory (removed
/// when dropped, or on an interrupt), with each table's file as it was read (see
/// [`crate::schema::Schema::unchanged`]). Errors name the table's file and the problem in one line.
#[allow(clippy::type_complexity)]
pub fn to_arrow(
    dir: &Path,
) -> Result<(
    tempfile::TempDir,
    Vec<(std::path::PathBuf, crate::arrow::files::Stamp)>,
)> {
    let out = nsys_perfetto_model::cleanup::temp_dir("nsys-perfetto-parquet-")
        .context("cannot create a temporary directory")?;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| anyhow!("cannot read the directory: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == EXTENSION) && p.is_file())
        .collect();
    files.sort();
    let mut read = Vec::with_capacity(files.len());
    for file in files {
        let Some(table) = file.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let target = out
            .path()
            .join(format!("{table}.{}", crate::arrow::files::EXTENSION));
        let stamp =
            rewrite_caught(&file, &target).map_err(|e| match e.downcast_ref::<NoRoom>() {
                Some(full) => full.explain(out.path()),
                // The caller names the export: the table's file by its name in it.
                None => anyhow!(
                    "{}: {e:#}",
                    Path::new(file.file_name().unwrap_or(file.as_os_str())).display()
                ),
            })?;
        read.push((file.clone(), stamp));
        // The table's footer, freed, was many small blocks the allocator would keep for the
        // rest of the conversion: give them back to the system.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free memory of glibc's allocator to the system.
        unsafe {
            libc::malloc_trim(0);
        }
    }
    Ok((out, read))
}

/// [`rewrite`], where a panic of parquet's is the damaged file's error: its decoders assert
/// what a well-formed file holds, and some damage (a dictionary page where the footer says
/// data starts) trips them. The panic's own message is not printed.
/// Returns the file's stamp as it was read.
fn rewrite_caught(file: &Path, target: &Path) -> Result<crate::arrow::files::Stamp> {
    use crate::arrow::files::changed;
    use crate::arrow::files::{change_since, stamp_of};
    let before = stamp_of(file).ok_or_else(|| anyhow!("cannot read: the file is gone"))?;
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
    let result = std::panic::catch_unwind(|| rewrite(file, target));
    QUIET.with(|q| q.set(false));
    let rewritten = result.unwrap_or_else(|_| Err(damaged(&"its decoder failed")));
    // A file changed while it was read reads as damaged, or as another table: the change is
    // what went wrong.
    match change_since(file, before) {
        Some(how) => Err(changed(how)),
        None => rewritten.map(|()| before),
    }
}

/// The error of a table that parquet cannot read.
fn damaged(e: &dyn std::fmt::Display) -> anyhow::Error {
    anyhow!(
        "not a readable Parquet file ({}): a damaged or truncated file; export the report again",
        crate::arrow::files::one_line(&e.to_string())
    )
}

/// One table: its Parquet row groups as the record batches of an Arrow IPC stream, read a run
/// of row groups at a time ([`footer`]), or whole where its footer is not what the walk over
/// it expects (then parquet's own decoding says what is wrong).
fn rewrite(file: &Path, target: &Path) -> Result<()> {
    rewrite_in_pieces(file, target, Some(footer::PIECE_BYTES))
}

/// [`rewrite`], in runs of row groups of at most `piece_bytes` of footer, or whole (`None`).
fn rewrite_in_pieces(file: &Path, target: &Path, piece_bytes: Option<u64>) -> Result<()> {
    let cannot_write = |e: ArrowError| match e {
        ArrowError::IoError(_, e) if nsys_perfetto_model::errors::is_full(&e) => {
            anyhow::Error::new(NoRoom(e))
        }
        e => anyhow!("cannot write {}: {e}", target.display()),
    };
    let f = std::fs::File::open(file).map_err(|e| anyhow!("cannot read: {e}"))?;
    // The footer describes every row group's column chunks; their statistics, a good part of
    // it, are not needed to read the rows.
    let options = ArrowReaderOptions::new()
        .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll);
    let len = f.metadata().map_err(|e| anyhow!("cannot read: {e}"))?.len();
    let pieces = piece_bytes.and_then(|b| footer::pieces(&f, b));
    let count = pieces.as_ref().map_or(1, footer::Pieces::len);
    let mut writer = None;
    for i in 0..count {
        let source = f.try_clone().map_err(|e| anyhow!("cannot read: {e}"))?;
        let builder = match &pieces {
            Some(pieces) => {
                let bytes = pieces
                    .footer(&f, i)
                    .map_err(|e| anyhow!("cannot read: {e}"))?;
                let metadata = ParquetMetaDataReader::decode_metadata_with_options(
                    &bytes,
                    Some(options.metadata_options()),
                )
                .map_err(|e| damaged(&e))?;
                drop(bytes);
                let metadata = ArrowReaderMetadata::try_new(Arc::new(metadata), options.clone())
                    .map_err(|e| damaged(&e))?;
                ParquetRecordBatchReaderBuilder::new_with_metadata(source, metadata)
            }
            None => ParquetRecordBatchReaderBuilder::try_new_with_options(source, options.clone())
                .map_err(|e| damaged(&e))?,
        };
        check_chunks(builder.metadata(), len).map_err(|e| damaged(&e))?;
        let reader = builder
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(|e| damaged(&e))?;
        let writer = match &mut writer {
            Some(w) => w,
            None => {
                let schema = arrow_array::RecordBatchReader::schema(&reader);
                let out = std::fs::File::create(target).map_err(|e| match e {
                    e if nsys_perfetto_model::errors::is_full(&e) => anyhow::Error::new(NoRoom(e)),
                    e => nsys_perfetto_model::errors::write_error(target, &e),
                })?;
                writer.insert(
                    arrow_ipc::writer::StreamWriter::try_new(std::io::BufWriter::new(out), &schema)
                        .map_err(cannot_write)?,
                )
            }
        };
        for batch in reader {
            let batch = batch.map_err(|e| damaged(&e))?;
            writer.write(&batch).map_err(cannot_write)?;
        }
    }
    if let Some(mut writer) = writer {
        writer.finish().map_err(cannot_write)?;
    }
    Ok(())
}

/// A table's rewriting stopped for want of room in the temporary folder.
#[derive(Debug)]
struct NoRoom(std::io::Error);

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&nsys_perfetto_model::errors::os_error(&self.0))
    }
}

impl std::error::Error for NoRoom {}

impl NoRoom {
    /// The error for the user: the folder, and how much of the rewriting `written` (its
    /// temporary folder) had taken, which tells how much room to make.
    fn explain(&self, written: &Path) -> anyhow::Error {
        let bytes: u64 = std::fs::read_dir(written)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.metadata().ok())
            .map(|m| m.len())
            .sum();
        nsys_perfetto_model::errors::temp_full(&format!(
            "{self} after {:.1} MB of the Parquet export rewritten as Arrow; the rewriting takes \
             about the size of nsys' Arrow export of the report",
            bytes as f64 / 1e6
        ))
    }
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

    fn read_arrow(path: &Path) -> Vec<RecordBatch> {
        let f = std::fs::File::open(path).unwrap();
        arrow_ipc::reader::StreamReader::try_new(f, None)
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// A table's rewriting in runs of its row groups holds what the whole table holds, in the
    /// same order and with the same schema, however small the runs.
    #[test]
    fn runs_of_row_groups_rewrite_the_whole_table() {
        let want = table();
        let (dir, src) = written(&want);
        let f = std::fs::File::open(&src).unwrap();
        for (piece_bytes, runs) in [(u64::MAX, 1), (footer::PIECE_BYTES, 1), (1, 79), (2_000, 0)] {
            let pieces = footer::pieces(&f, piece_bytes).expect("a footer the walk reads");
            if runs > 0 {
                assert_eq!(pieces.len(), runs, "runs of at most {piece_bytes} bytes");
            } else {
                assert!(pieces.len() > 1 && pieces.len() < 79, "{}", pieces.len());
            }
            let target = dir.path().join(format!("T{piece_bytes}.arrow"));
            rewrite_in_pieces(&src, &target, Some(piece_bytes)).unwrap();
            let got = read_arrow(&target);
            let mut at = 0;
            for batch in &got {
                assert_eq!(batch.schema(), want.schema());
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

    /// Write `good` to `path` with byte `at` damaged: all its bits, the lowest or the fifth
    /// flipped, by turns; returns the bits flipped.
    fn write_damaged(path: &Path, good: &[u8], at: usize) -> u8 {
        let flip = [0xffu8, 0x01, 0x10][at % 3];
        let mut bytes = good.to_vec();
        bytes[at] ^= flip;
        std::fs::write(path, &bytes).unwrap();
        flip
    }

    /// Every byte of a footer damaged in turn ([`write_damaged`]): the rewriting in runs of row
    /// groups never reads what the whole footer's decoding refuses, reads the same rows where
    /// both read, and does not panic where the whole footer's reading does not. It refuses some
    /// damage the whole decoding lets through: the walk reads a damaged field by its Thrift
    /// type, where parquet reads some fields by what they should be.
    #[test]
    fn damaged_footers_fail_as_whole_ones() {
        let (dir, src) = written(&table_of(600));
        let good = std::fs::read(&src).unwrap();
        let tail = &good[good.len() - 8..good.len() - 4];
        let start = good.len() - 8 - u32::from_le_bytes(tail.try_into().unwrap()) as usize;
        let (whole, runs) = (dir.path().join("w.arrow"), dir.path().join("r.arrow"));
        let (mut refused, mut read, mut stricter, mut parquet_panics) = (0, 0, 0, 0);
        for at in start..good.len() {
            let flip = write_damaged(&src, &good, at);
            let case = format!("footer byte {} ^ {flip:#x}", at - start);
            let Ok(w) = std::panic::catch_unwind(|| rewrite_in_pieces(&src, &whole, None)) else {
                // Parquet's own decoding panics on some damage (a dictionary page the
                // footer misplaces): the rewriting in runs is only asked not to add any.
                parquet_panics += 1;
                continue;
            };
            let r = std::panic::catch_unwind(|| rewrite_in_pieces(&src, &runs, Some(200)))
                .unwrap_or_else(|_| panic!("{case}: a panic the whole footer has not"));
            match (w, r) {
                (Err(_), Err(_)) => refused += 1,
                (Ok(()), Ok(())) => {
                    read += 1;
                    assert!(same_rows(&read_arrow(&whole), &read_arrow(&runs)), "{case}");
                }
                (Ok(()), Err(_)) => stricter += 1,
                (Err(e), Ok(())) => panic!("{case}: read in runs, refused whole: {e:#}"),
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
    /// rewriting reads the table or refuses it with the one-line error, and never panics, where
    /// parquet's decoders do on some of these files.
    #[test]
    fn damaged_tables_are_refused_not_panics() {
        let (dir, src) = written(&table_of(600));
        let good = std::fs::read(&src).unwrap();
        let target = dir.path().join("T.arrow");
        let (mut refused, mut read) = (0, 0);
        for at in 0..good.len() {
            let flip = write_damaged(&src, &good, at);
            match std::panic::catch_unwind(|| rewrite_caught(&src, &target)) {
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
