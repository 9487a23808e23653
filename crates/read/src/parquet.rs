//! nsys' Parquet export (`nsys export --type parquetdir`: one Parquet file a table, the SQLite
//! export's tables and columns, in many row groups), read by rewriting it as an Arrow export in a
//! private temporary directory, row group by row group (memory stays one batch), which
//! [`super::arrow`] then reads as it reads nsys' own Arrow exports: every reader, workflow and
//! its bounded, memory-mapped scans serve Parquet unchanged.

use anyhow::{Context as _, Result, anyhow};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::ParquetStatisticsPolicy;
use std::path::Path;

/// The file extension nsys gives a table of a Parquet export.
pub const EXTENSION: &str = "parquet";

/// What nsys appends to a report's name for its Parquet export's directory.
pub const NSYS_DIR_SUFFIX: &str = "_pqtdir";

/// Rows a rewritten record batch holds: the memory a table's rewriting needs.
const BATCH_ROWS: usize = 1 << 14;

/// Rewrite the Parquet export `dir` as an Arrow export in a new temporary directory (removed
/// when dropped, or on an interrupt). Errors name the table's file and the problem in one line.
pub fn to_arrow(dir: &Path) -> Result<tempfile::TempDir> {
    let out = crate::cleanup::create(
        || {
            tempfile::Builder::new()
                .prefix(&crate::cleanup::prefix("nsys-perfetto-parquet-"))
                .tempdir()
        },
        |d| d.path().to_path_buf(),
    )
    .context("cannot create a temporary directory")?;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| anyhow!("cannot read the directory: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == EXTENSION) && p.is_file())
        .collect();
    files.sort();
    for file in files {
        let Some(table) = file.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let target = out
            .path()
            .join(format!("{table}.{}", super::arrow::EXTENSION));
        rewrite(&file, &target).map_err(|e| anyhow!("{}: {e:#}", file.display()))?;
        // The table's footer, freed, was many small blocks the allocator would keep for the
        // rest of the conversion: give them back to the system.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim only returns free memory of glibc's allocator to the system.
        unsafe {
            libc::malloc_trim(0);
        }
    }
    Ok(out)
}

/// One table: its Parquet row groups as the record batches of an Arrow IPC stream.
fn rewrite(file: &Path, target: &Path) -> Result<()> {
    let damaged = |e: &dyn std::fmt::Display| {
        anyhow!(
            "not a readable Parquet file ({e}): a damaged or truncated file; export the report again"
        )
    };
    let f = std::fs::File::open(file).map_err(|e| anyhow!("cannot read: {e}"))?;
    // The footer describes every row group's column chunks; their statistics, a good part of
    // it, are not needed to read the rows (nsys writes small row groups: at 100x a table has
    // thousands, and their statistics held tens of MB while the table was rewritten).
    let options = ArrowReaderOptions::new()
        .with_encoding_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_column_stats_policy(ParquetStatisticsPolicy::SkipAll)
        .with_size_stats_policy(ParquetStatisticsPolicy::SkipAll);
    let reader = ParquetRecordBatchReaderBuilder::try_new_with_options(f, options)
        .map_err(|e| damaged(&e))?
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| damaged(&e))?;
    let schema = arrow_array::RecordBatchReader::schema(&reader);
    let out = std::fs::File::create(target).map_err(|e| crate::errors::write_error(target, &e))?;
    let mut writer =
        arrow_ipc::writer::StreamWriter::try_new(std::io::BufWriter::new(out), &schema)
            .map_err(|e| anyhow!("cannot write {}: {e}", target.display()))?;
    for batch in reader {
        let batch = batch.map_err(|e| damaged(&e))?;
        writer
            .write(&batch)
            .map_err(|e| anyhow!("cannot write {}: {e}", target.display()))?;
    }
    writer
        .finish()
        .map_err(|e| anyhow!("cannot write {}: {e}", target.display()))?;
    Ok(())
}
