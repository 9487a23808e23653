//! The rendering of nsys' own summary reports, which [`nsys_perfetto_read::reports`] computes:
//! as `nsys stats --format csv` prints them (sizes in MB), or for a table (digits grouped, times
//! in the chosen unit) or JSON.

use super::Unit;
use nsys_perfetto_read::reports::{Cell, Column, ColumnUnit, ReportTable};

/// The header `nsys stats --format csv` prints ("Total Time (ns)", "Total (MB)").
pub fn csv_header(column: &Column) -> String {
    header(column, Unit::Ns)
}

/// The header with times in `unit`.
pub fn header(column: &Column, unit: Unit) -> String {
    let name = &column.name;
    match column.unit {
        ColumnUnit::Plain | ColumnUnit::Address => name.clone(),
        ColumnUnit::Percent => format!("{name} (%)"),
        ColumnUnit::Ns => format!("{name} ({})", unit.as_str()),
        ColumnUnit::Bytes => format!("{name} (MB)"),
        ColumnUnit::BytesPerSecond => format!("{name} (MB/s)"),
    }
}

/// Whether a table right-aligns the column.
pub fn numeric(column: &Column) -> bool {
    column.unit != ColumnUnit::Plain
        || !matches!(column.name.as_str(), |"Name"| "Operation"
            | "Range"
            | "NVTX Range"
            | "Style"
            | "API Name"
            | "Kernel Name"
            | "GridXYZ"
            | "BlockXYZ"
            | "CPU Instruction Address")
}

/// A cell as `nsys stats --format csv` prints it in a column of this unit.
pub fn cell_csv(cell: &Cell, unit: ColumnUnit) -> String {
    match (cell, unit) {
        (Cell::Null, _) => String::new(),
        (Cell::Text(t), _) => t.clone(),
        (v, ColumnUnit::Bytes | ColumnUnit::BytesPerSecond) => {
            format!("{:.3}", v.as_f64().unwrap_or(0.0) / 1e6)
        }
        (Cell::Int(i), _) => i.to_string(),
        (Cell::Real(r), _) => format!("{r:.1}"),
    }
}

/// A cell for a table: digits grouped, times in `unit`.
pub fn cell_table(cell: &Cell, col: ColumnUnit, unit: Unit) -> String {
    match (cell, col) {
        (Cell::Null, _) => String::new(),
        (Cell::Text(t), _) => t.clone(),
        (Cell::Int(i), ColumnUnit::Ns) => unit.fmt_int(*i),
        (Cell::Real(r), ColumnUnit::Ns) => unit.fmt_f64(*r),
        (v, ColumnUnit::Bytes | ColumnUnit::BytesPerSecond) => {
            super::fmt_decimals(v.as_f64().unwrap_or(0.0) / 1e6, 3)
        }
        (Cell::Int(i), ColumnUnit::Address) => format!("{i:#x}"),
        (Cell::Int(i), _) => super::group_digits(&i.to_string()),
        (Cell::Real(r), _) => super::fmt_decimals(*r, 1),
    }
}

pub fn cell_json(cell: &Cell) -> serde_json::Value {
    match cell {
        Cell::Null => serde_json::Value::Null,
        Cell::Int(i) => (*i).into(),
        Cell::Real(r) => super::json_f64(*r),
        Cell::Text(t) => t.clone().into(),
    }
}

/// The report as `nsys stats --format csv` writes it: a header, then one line per row; a field
/// is quoted only when it holds a comma, a quote or a line break.
pub fn csv(report: &ReportTable) -> String {
    let line = |fields: Vec<String>| {
        let mut l = fields
            .iter()
            .map(|f| {
                if f.contains([',', '"', '\n', '\r']) {
                    format!("\"{}\"", f.replace('"', "\"\""))
                } else {
                    f.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(",");
        l.push('\n');
        l
    };
    let mut s = line(report.columns.iter().map(csv_header).collect());
    for r in &report.rows {
        s.push_str(&line(
            r.iter()
                .zip(&report.columns)
                .map(|(v, c)| cell_csv(v, c.unit))
                .collect(),
        ));
    }
    s
}
