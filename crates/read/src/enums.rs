//! Labels for the numeric enums nsys stores. Exports since ~2021 carry `ENUM_*` tables; older ones
//! do not, so the values nsys has always used are built in. Unknown values show as numbers.

use super::schema::Schema;
use nsys_perfetto_model::model::FastHash;
use rusqlite::Connection;
use std::borrow::Cow;
use std::collections::HashMap;

/// Short copy-kind names, as GPU engineers write them (index = nsys `copyKind`).
const COPY_KINDS: &[&str] = &[
    "Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP",
    "UVM HtoD", "UVM DtoH", "UVM DtoD",
];

/// Memory kinds in nsys's numbering (`ENUM_CUDA_MEM_KIND`).
const MEM_KINDS: &[&str] = &[
    "Pageable",
    "Pinned",
    "Device",
    "Array",
    "Managed",
    "Device Static",
    "Managed Static",
    "Unknown",
];

const SYNC_TYPES: &[&str] = &[
    "Unknown",
    "Event sync",
    "Stream wait sync",
    "Stream sync",
    "Context sync",
];

const LAUNCH_TYPES: &[&str] = &[
    "Unknown",
    "Regular",
    "Coop Single Device",
    "Coop Multi Device",
];

#[derive(Debug, Default, Clone)]
pub struct Enums {
    copy_kind: Labels,
    mem_kind: Labels,
    launch_type: Labels,
    sync_type: Labels,
}

/// An enum table's labels by value, looked up per row (hence the fast hasher).
pub type Labels = HashMap<i64, String, FastHash>;

pub fn read_enum(conn: &Connection, schema: &Schema, table: &str) -> Labels {
    let mut out = Labels::default();
    if !schema.has_column(table, "id") {
        return out;
    }
    let label = if schema.has_column(table, "label") {
        "label"
    } else {
        "name"
    };
    let scan = super::scan::Scan::new(schema, table).cols(schema, &["id", label]);
    if let Ok(mut rows) = scan.open(conn, schema) {
        while let Ok(Some(r)) = rows.next() {
            if let (Some(id), Some(l)) = (super::cells::int_at(&r, 0), super::cells::text_at(&r, 1))
            {
                out.insert(id, l.into_owned());
            }
        }
    }
    out
}

/// Built-in labels first, then whatever the export's own table adds.
fn merged(builtin: &[&str], from_export: Labels, export_wins: bool) -> Labels {
    let mut out: Labels = builtin
        .iter()
        .enumerate()
        .map(|(i, s)| (i as i64, s.to_string()))
        .collect();
    for (k, v) in from_export {
        if export_wins || !out.contains_key(&k) {
            out.insert(k, v);
        }
    }
    out
}

fn label(map: &Labels, v: i64) -> Cow<'_, str> {
    match map.get(&v) {
        Some(s) => Cow::Borrowed(s.as_str()),
        None => Cow::Owned(v.to_string()),
    }
}

impl Enums {
    pub fn load(conn: &Connection, schema: &Schema) -> Enums {
        let mut launch_type = read_enum(conn, schema, "ENUM_CUDA_KERNEL_LAUNCH_TYPE");
        if launch_type.is_empty() {
            // nsys 2022-2023 spelled it this way.
            launch_type = read_enum(conn, schema, "ENUM_CUDA_KRENEL_LAUNCH_TYPE");
        }
        Enums {
            // Short names ("HtoD") beat the export's long labels; the table only adds new kinds.
            copy_kind: merged(
                COPY_KINDS,
                read_enum(conn, schema, "ENUM_CUDA_MEMCPY_OPER"),
                false,
            ),
            mem_kind: merged(
                MEM_KINDS,
                read_enum(conn, schema, "ENUM_CUDA_MEM_KIND"),
                true,
            ),
            launch_type: merged(LAUNCH_TYPES, launch_type, true),
            sync_type: merged(
                SYNC_TYPES,
                read_enum(conn, schema, "ENUM_CUPTI_SYNC_TYPE"),
                true,
            ),
        }
    }

    pub fn copy_kind(&self, v: i64) -> Cow<'_, str> {
        label(&self.copy_kind, v)
    }

    pub fn mem_kind(&self, v: i64) -> Cow<'_, str> {
        label(&self.mem_kind, v)
    }

    pub fn sync_type(&self, v: i64) -> Cow<'_, str> {
        label(&self.sync_type, v)
    }

    pub fn launch_type(&self, v: i64) -> Cow<'_, str> {
        label(&self.launch_type, v)
    }
}
