//! A recipe's tables as text, as CSV (pandas' `to_csv`: the index first, floats as Python
//! prints them, NaN empty) and as Parquet (one file per table, as the recipe writes them).

use super::{ColumnType, Table};
use crate::workflow::{csv_line, fmt_decimals, group_digits};
use anyhow::{Context, Result};
use nsys_perfetto_read::reports::Cell;
use std::path::Path;

/// A float as Python's `repr` writes it, which pandas' `to_csv` uses: a whole number keeps its
/// `.0`; NaN is empty.
fn python_float(v: f64) -> String {
    if v.is_nan() {
        String::new()
    } else if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e16 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

fn csv_value(v: &Cell) -> String {
    match v {
        Cell::Null => String::new(),
        Cell::Int(i) => i.to_string(),
        Cell::Real(f) => python_float(*f),
        Cell::Text(t) => t.clone(),
    }
}

/// The table as pandas' `DataFrame.to_csv` writes it.
pub fn csv(t: &Table) -> String {
    let header: Vec<&str> = t.columns.iter().map(|(n, _)| n.as_str()).collect();
    let mut s = csv_line(&header);
    for r in &t.rows {
        s.push_str(&csv_line(&r.iter().map(csv_value).collect::<Vec<_>>()));
    }
    s
}

/// The table for a terminal: digits grouped, floats with one decimal.
pub fn table_text(t: &Table) -> String {
    let headers: Vec<(&str, bool)> = t
        .columns
        .iter()
        .map(|(n, ty)| (n.as_str(), *ty != ColumnType::Text))
        .collect();
    let mut out = crate::workflow::Table::new(&headers);
    for r in &t.rows {
        out.rows.push(
            r.iter()
                .map(|v| match v {
                    Cell::Null => "-".into(),
                    Cell::Int(i) => group_digits(&i.to_string()),
                    Cell::Real(f) => fmt_decimals(*f, 1),
                    Cell::Text(s) => s.clone(),
                })
                .collect(),
        );
    }
    out.render()
}

/// Write the table as Parquet to `path` (written to a temporary name, then renamed: no partial
/// file on failure), as pandas' `to_parquet` writes the recipe's DataFrame: the columns with
/// their types, then the index (`__index_level_0__` when unnamed), and the `pandas` schema
/// metadata that makes `pandas.read_parquet` restore the index.
pub fn write_parquet(t: &Table, path: &Path) -> Result<()> {
    use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;
    // Columns in file order: the data columns, then the index (column 0).
    let order: Vec<usize> = (1..t.columns.len()).chain(std::iter::once(0)).collect();
    let field_name = |i: usize| match t.columns[i].0.as_str() {
        "" if i == 0 => "__index_level_0__".to_string(),
        n => n.to_string(),
    };
    let fields: Vec<Field> = order
        .iter()
        .map(|&i| {
            let dt = match t.columns[i].1 {
                ColumnType::Int => DataType::Int64,
                ColumnType::Float => DataType::Float64,
                ColumnType::Text => DataType::Utf8,
            };
            Field::new(field_name(i), dt, true)
        })
        .collect();
    let pandas_columns: Vec<serde_json::Value> = order
        .iter()
        .map(|&i| {
            let (pandas_type, numpy_type) = match t.columns[i].1 {
                ColumnType::Int => ("int64", "int64"),
                ColumnType::Float => ("float64", "float64"),
                ColumnType::Text => ("unicode", "object"),
            };
            let name = &t.columns[i].0;
            serde_json::json!({
                "name": if i == 0 && name.is_empty() { serde_json::Value::Null } else { name.clone().into() },
                "field_name": field_name(i),
                "pandas_type": pandas_type,
                "numpy_type": numpy_type,
                "metadata": null,
            })
        })
        .collect();
    let pandas = serde_json::json!({
        "index_columns": [field_name(0)],
        "column_indexes": [{"name": null, "field_name": null, "pandas_type": "unicode",
            "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
        "columns": pandas_columns,
        "creator": {"library": "nsys-perfetto", "version": env!("CARGO_PKG_VERSION")},
    });
    let arrays: Vec<ArrayRef> = order
        .iter()
        .map(|&i| -> ArrayRef {
            let cells = t.rows.iter().map(|r| &r[i]);
            match t.columns[i].1 {
                ColumnType::Int => Arc::new(Int64Array::from_iter(cells.map(|v| match v {
                    Cell::Int(i) => Some(*i),
                    _ => None,
                }))),
                ColumnType::Float => Arc::new(Float64Array::from_iter(cells.map(|v| match v {
                    Cell::Null => None,
                    v => v.as_f64().filter(|f| !f.is_nan()),
                }))),
                ColumnType::Text => Arc::new(StringArray::from_iter(cells.map(|v| match v {
                    Cell::Text(s) => Some(s.clone()),
                    _ => None,
                }))),
            }
        })
        .collect();
    let metadata: std::collections::HashMap<String, String> =
        [("pandas".to_string(), pandas.to_string())].into();
    let schema = Schema::new(fields).with_metadata(metadata);
    let batch = RecordBatch::try_new(Arc::new(schema), arrays)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    let mut w = parquet::arrow::ArrowWriter::try_new(tmp.as_file(), batch.schema(), None)?;
    w.write(&batch)?;
    w.close()?;
    tmp.persist(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
