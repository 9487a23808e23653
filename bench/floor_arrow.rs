//! The Arrow floor: read the columns a conversion reads (those of `bench/floor.rs`) from nsys'
//! Arrow export with arrow-ipc and do nothing else: each `.arrow` file memory-mapped and decoded
//! in place, as the converter reads it, every integer summed, every string's length added.
//! `bench/arrow.sh` compares the converter's CPU time on an arrowdir with this program's.
//!
//! usage: floor_arrow REPORT_arwdir

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrowPrimitiveType, RecordBatch};
use arrow_schema::DataType;
use std::path::Path;

#[path = "floor_tables.rs"]
mod floor_tables;
use floor_tables::DEFAULT;

/// The sum of a column's values (wrapping; strings and blobs by length), so that reading it
/// cannot be skipped.
fn touch(a: &dyn Array) -> u64 {
    fn sum<T: ArrowPrimitiveType>(a: &dyn Array, f: impl Fn(T::Native) -> u64) -> u64 {
        a.as_primitive::<T>()
            .values()
            .iter()
            .fold(0u64, |s, &v| s.wrapping_add(f(v)))
    }
    match a.data_type() {
        DataType::Int64 => sum::<Int64Type>(a, |v| v as u64),
        DataType::Int32 => sum::<Int32Type>(a, |v| v as u64),
        DataType::Int16 => sum::<Int16Type>(a, |v| v as u64),
        DataType::Int8 => sum::<Int8Type>(a, |v| v as u64),
        DataType::UInt64 => sum::<UInt64Type>(a, |v| v),
        DataType::UInt32 => sum::<UInt32Type>(a, u64::from),
        DataType::UInt16 => sum::<UInt16Type>(a, u64::from),
        DataType::UInt8 => sum::<UInt8Type>(a, u64::from),
        DataType::Float64 => sum::<Float64Type>(a, |v| v as u64),
        DataType::Float32 => sum::<Float32Type>(a, |v| v as u64),
        DataType::Boolean => a.as_boolean().true_count() as u64,
        DataType::Utf8 => a
            .as_string::<i32>()
            .iter()
            .fold(0u64, |s, v| s.wrapping_add(v.map_or(1, |t| t.len() as u64))),
        DataType::LargeUtf8 => a
            .as_string::<i64>()
            .iter()
            .fold(0u64, |s, v| s.wrapping_add(v.map_or(1, |t| t.len() as u64))),
        DataType::Binary => a
            .as_binary::<i32>()
            .iter()
            .fold(0u64, |s, v| s.wrapping_add(v.map_or(1, |t| t.len() as u64))),
        _ => 0,
    }
}

/// The record batches of one `.arrow` file, decoded in place from its memory mapping.
fn batches(path: &Path) -> Vec<RecordBatch> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // SAFETY: read-only mapping of a file nobody writes while the floor runs.
    let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
    let mut buffer = arrow_buffer::Buffer::from(bytes::Bytes::from_owner(map));
    let mut decoder = arrow_ipc::reader::StreamDecoder::new();
    let mut out = Vec::new();
    while !buffer.is_empty() {
        match decoder.decode(&mut buffer) {
            Ok(Some(b)) => out.push(b),
            Ok(None) => {}
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
    out
}

fn main() {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: floor_arrow REPORT_arwdir");
    let (mut rows_read, mut check) = (0u64, 0u64);
    for (table, cols) in DEFAULT {
        let path = Path::new(&dir).join(format!("{table}.arrow"));
        if !path.is_file() {
            continue;
        }
        for batch in batches(&path) {
            let mut any = false;
            for col in cols.split(',').map(str::trim) {
                if let Some(a) = batch.column_by_name(col) {
                    check = check.wrapping_add(touch(a.as_ref()));
                    any = true;
                }
            }
            if any {
                rows_read += batch.num_rows() as u64;
            }
        }
    }
    eprintln!("floor_arrow: {rows_read} rows read (check {check})");
}
