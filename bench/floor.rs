//! The SQLite floor: read the tables and columns a conversion reads, with rusqlite, and do
//! nothing else (each value is touched so nothing is skipped). `bench/run.sh` compares the
//! converter's CPU time with this program's.
//!
//! usage: floor EXPORT.sqlite [TABLE:COL,COL,... ...]
//! Without table arguments it reads the tables and columns of the default conversion (as
//! `NSYS_PERFETTO_SQL=1 nsys-perfetto ...` lists them); columns missing from an export are
//! left out. `FLOOR_READER=query` reads through the converter's own `nsys::Query` (one SQLite
//! call per value) instead of rusqlite's `Row::get_ref` (three): the tighter floor.

use nsys_perfetto_read::query::{Fetch, Query};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};

/// What a value adds to the check sum (so that reading it cannot be skipped).
fn touch(v: ValueRef<'_>) -> u64 {
    match v {
        ValueRef::Integer(v) => v as u64,
        ValueRef::Text(t) | ValueRef::Blob(t) => t.len() as u64,
        ValueRef::Real(v) => v as u64,
        ValueRef::Null => 1,
    }
}

#[path = "floor_tables.rs"]
mod floor_tables;
use floor_tables::DEFAULT;

fn main() -> rusqlite::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = args
        .first()
        .expect("usage: floor EXPORT.sqlite [TABLE:COLS ...]");
    let tables: Vec<(String, String)> = if args.len() > 1 {
        args[1..]
            .iter()
            .map(|a| {
                let (t, c) = a.split_once(':').expect("TABLE:COL,COL");
                (t.to_string(), c.to_string())
            })
            .collect()
    } else {
        DEFAULT
            .iter()
            .map(|(t, c)| (t.to_string(), c.to_string()))
            .collect()
    };
    let conn = Connection::open_with_flags(
        format!("file:{path}?mode=ro&immutable=1"),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
    )?;
    conn.execute_batch("PRAGMA cache_size = -8192;")?;
    let raw = std::env::var("FLOOR_READER").is_ok_and(|r| r == "query");
    let (mut rows_read, mut check) = (0u64, 0u64);
    for (table, cols) in &tables {
        let have: Vec<String> = conn
            .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let cols: Vec<&str> = cols
            .split(',')
            .map(str::trim)
            .filter(|c| have.iter().any(|h| h == c))
            .collect();
        if cols.is_empty() {
            continue;
        }
        let quoted: Vec<String> = cols.iter().map(|c| format!("\"{c}\"")).collect();
        let sql = format!(
            "SELECT {} FROM \"{table}\" ORDER BY rowid",
            quoted.join(",")
        );
        if raw {
            let mut rows = Query::new(&conn, &sql)?;
            while let Some(r) = rows.next()? {
                rows_read += 1;
                for i in 0..cols.len() {
                    check = check.wrapping_add(touch(r.fetch(i)));
                }
            }
            continue;
        }
        let mut stmt = conn.prepare(&sql)?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            rows_read += 1;
            for i in 0..cols.len() {
                check = check.wrapping_add(touch(r.get_ref(i)?));
            }
        }
    }
    eprintln!("floor: {rows_read} rows read (check {check})");
    Ok(())
}
