//! Dump the NVTX-to-GPU projection's tables of some exports into a folder, one text file per
//! export, to diff two builds by hand (the test suite checks them against their SQL definition:
//! `NSYS_PROJ_CHECK=a.sqlite:b.sqlite cargo test --release --test all projection`).
//!
//! `cargo run --release -p nsys-perfetto-bench --bin dump_projection -- DIR a.sqlite b.sqlite...` writes
//! `DIR/a.sqlite.dump`...: the three counts, the schema, then `nvtx_gpu` in rowid order and
//! `kernel_nvtx` in key order, a row a line. `--time` only times the builds.
use nsys_perfetto_read::projection::tables::Projection;
use nsys_perfetto_read::projection::{KERNEL_NVTX, NVTX_GPU};
use rusqlite::Connection;
use rusqlite::types::Value;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

fn rows(conn: &Connection, sql: &str) -> rusqlite::Result<Vec<Vec<Value>>> {
    let mut st = conn.prepare(sql)?;
    let n = st.column_count();
    st.query_map([], |r| (0..n).map(|i| r.get::<_, Value>(i)).collect())?
        .collect()
}

fn dump(export: &Path, dir: &Path, time_only: bool) -> anyhow::Result<()> {
    let (_c, schema) = nsys_perfetto_read::schema::open_schema(export)?;
    let t = std::time::Instant::now();
    let proj = Projection::build(&schema)?;
    eprintln!("{}: built in {:?}: {proj:?}", export.display(), t.elapsed());
    if time_only {
        return Ok(());
    }
    let name = export.file_name().unwrap_or_default().to_string_lossy();
    let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{name}.dump")))?);
    let Some(proj) = proj else {
        writeln!(out, "none")?;
        return Ok(());
    };
    let conn = Connection::open(proj.path())?;
    writeln!(
        out,
        "counts {:?}",
        [
            proj.range_device_rows,
            proj.ranges_with_gpu_work,
            proj.annotated_gpu_rows
        ]
    )?;
    let schema_sql =
        "SELECT type || ' ' || name || ': ' || sql FROM sqlite_master ORDER BY type, name";
    for r in rows(&conn, schema_sql)? {
        writeln!(out, "schema {r:?}")?;
    }
    let tables = [
        format!("SELECT * FROM {NVTX_GPU} ORDER BY rowid"),
        format!("SELECT * FROM {KERNEL_NVTX} ORDER BY src, rid"),
    ];
    for sql in tables {
        for r in rows(&conn, &sql)? {
            writeln!(out, "{r:?}")?;
        }
    }
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let time_only = args.iter().any(|a| a == "--time");
    args.retain(|a| a != "--time");
    let Some((dir, exports)) = args.split_first() else {
        eprintln!("usage: dump_projection [--time] DIR EXPORT.sqlite...");
        return ExitCode::from(2);
    };
    for e in exports {
        if let Err(err) = dump(Path::new(e), Path::new(dir), time_only) {
            eprintln!("{e}: {err:#}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
