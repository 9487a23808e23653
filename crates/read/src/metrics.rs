//! GPU metrics as counters, one track per metric per GPU under that GPU's group track, named
//! as nsys names them.
//!
//! - nsys 2023 and later: `GPU_METRICS(timestamp, typeId, metricId, value)`, the metrics named
//!   by `TARGET_INFO_GPU_METRICS(typeId, metricId, metricName)`. The GPU is `typeId & 0xFF`, as
//!   nsys' own `gpu_metric_util_map` recipe reads it.
//! - nsys 2022: the same samples as `GENERIC_EVENTS` rows of the "GpuMetrics" source
//!   (`GENERIC_EVENT_SOURCES`, `GENERIC_EVENT_TYPES`), one row per sampling instant whose `data`
//!   is a JSON object {metric name: value as a string}.
//!
//! Exports by nsys 2023.4 can carry both for the same samples: GPU_METRICS is converted, and
//! the GENERIC_EVENTS rows that fall in the time GPU_METRICS covers for that GPU are counted
//! as "same samples as GPU_METRICS". Rows outside that time are converted from GENERIC_EVENTS.

use super::cells::{int_at, text_at};
use super::query::Fetch;
use super::reader::{Notes, ReadContext};
use super::scan::Scan;
use super::schema::Schema;
use anyhow::Result;
use nsys_perfetto_model::category::{Category, EventType};
use nsys_perfetto_model::model::{
    CounterKey, CounterOwner, CounterSample, CounterValue, EventSink,
};
use nsys_perfetto_model::select::Selection;
use rusqlite::Connection;
use std::collections::HashMap;

pub const GPU_METRICS: &str = "GPU_METRICS";
pub const GENERIC_EVENTS: &str = "GENERIC_EVENTS";
const METRIC_NAMES: &str = "TARGET_INFO_GPU_METRICS";
/// The note for GPU_METRICS values the export wrapped to 32 bits (corrected).
pub const WRAPPED: &str = "value wrapped to a negative 32-bit integer by the export: 2^32 added";
/// What the summary says of GENERIC_EVENTS rows that GPU_METRICS also holds.
pub const DUPLICATE: &str = "same samples as GPU_METRICS (converted once, from there)";

/// Where metric times are, for finding rows before the session start: (table, time column,
/// condition). Only GENERIC_EVENTS rows of the GpuMetrics source count: other generic sources
/// may keep times on other clocks.
pub fn time_columns(schema: &Schema) -> Vec<(&'static str, &'static str, String)> {
    let mut out = Vec::new();
    if schema.has_column(GPU_METRICS, "timestamp") {
        out.push((GPU_METRICS, "timestamp", "1".to_string()));
    }
    if schema.has_columns(GENERIC_EVENTS, &["rawTimestamp", "typeId"])
        && schema.has_columns("GENERIC_EVENT_SOURCES", &["sourceId", "data"])
        && schema.has_columns("GENERIC_EVENT_TYPES", &["typeId", "sourceId"])
    {
        out.push((
            GENERIC_EVENTS,
            "rawTimestamp",
            "typeId IN (SELECT typeId FROM GENERIC_EVENT_TYPES WHERE sourceId IN \
             (SELECT sourceId FROM GENERIC_EVENT_SOURCES WHERE data LIKE '%\"GpuMetrics\"%' \
              AND data LIKE '%SessionNs%'))"
                .to_string(),
        ));
    }
    out
}

/// The GPU a metrics `typeId` samples.
pub fn device_of_type(type_id: i64) -> i64 {
    type_id & 0xFF
}

/// The unit of a metric, from its name: nsys names newer metrics with the unit in brackets
/// ("SMs Active [Throughput %]"); older names say it in words ("GPC Clock Frequency" in Hz, the
/// rest percentages of peak). Counts of requests carry no unit.
pub fn metric_unit(name: &str) -> &'static str {
    let lower = name.to_ascii_lowercase();
    if let Some(open) = lower.rfind('[') {
        let inner = &lower[open..];
        return if inner.contains('%') {
            "%"
        } else if inner.contains("mhz") {
            "MHz"
        } else if inner.contains("hz") {
            "Hz"
        } else if inner.contains("byte") {
            "bytes"
        } else {
            ""
        };
    }
    if lower.contains("frequency") || lower.contains("clock") {
        "Hz"
    } else if lower.contains("request") {
        ""
    } else {
        "%"
    }
}

/// SQL condition keeping `column` inside the selection's time window.
fn time_filter(selection: &Selection, column: &str) -> String {
    let mut conds = vec!["1".to_string()];
    if let Some(t) = selection.time {
        if let Some(s) = t.start {
            conds.push(format!("{column} >= {s}"));
        }
        if let Some(e) = t.end {
            conds.push(format!("{column} <= {e}"));
        }
    }
    conds.join(" AND ")
}

fn wants_device(selection: &Selection, device: i64) -> bool {
    selection.devices.is_empty() || selection.devices.contains(&device)
}

fn value_of(row: &(impl Fetch + ?Sized), idx: usize) -> Option<CounterValue> {
    match row.fetch(idx) {
        rusqlite::types::ValueRef::Integer(v) => Some(CounterValue::Int(v)),
        rusqlite::types::ValueRef::Real(v) => Some(CounterValue::Double(v)),
        _ => None,
    }
}

pub fn read<S: EventSink>(
    conn: &Connection,
    schema: &Schema,
    selection: &Selection,
    sink: &mut S,
) -> Result<()> {
    read_counted(conn, schema, selection, sink).map(|_| ())
}

/// What the GENERIC_EVENTS reader did with the table's rows.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GenericCount {
    /// GPU metrics rows read (those of the "GpuMetrics" source, in the time window).
    pub read: u64,
    /// Rows that became counter values.
    pub converted: u64,
    /// Counter values written from them.
    pub values: u64,
}

/// [`read`], saying what became of the GENERIC_EVENTS rows.
pub fn read_counted<S: EventSink>(
    conn: &Connection,
    schema: &Schema,
    selection: &Selection,
    sink: &mut S,
) -> Result<GenericCount> {
    if !selection.wants(EventType::GpuMetrics) {
        return Ok(GenericCount::default());
    }
    let covered = read_gpu_metrics(conn, schema, selection, sink)?;
    read_generic(conn, schema, selection, &covered, sink)
}

/// The GPU metrics reader: [`read_counted`], then [`generic_note`] for the summary.
pub fn read_noting<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<Notes> {
    let generic = read_counted(cx.conn, cx.schema, cx.selection, sink)?;
    Ok(generic_note(cx.conn, cx.schema, cx.selection, generic)?
        .into_iter()
        .collect())
}

/// The summary's note on GENERIC_EVENTS: how many rows became how many GPU metric values, and
/// how many rows no reader converts (other generic sources). `None` when there is nothing to
/// say (no rows, or only twins of GPU_METRICS, which the skipped rows count).
pub fn generic_note(
    conn: &Connection,
    schema: &Schema,
    selection: &Selection,
    count: GenericCount,
) -> Result<Option<String>> {
    if !schema.has_table(GENERIC_EVENTS) {
        return Ok(None);
    }
    let total: i64 =
        conn.query_row(&format!("SELECT count(*) FROM {GENERIC_EVENTS}"), [], |r| {
            r.get(0)
        })?;
    let total = total.max(0) as u64;
    let g = nsys_perfetto_model::summary::grouped;
    let mut parts = Vec::new();
    if !selection.wants(EventType::GpuMetrics) {
        parts.push(format!(
            "{} rows not converted (GPU metrics and other generic sources; --types leaves out \
             gpu-metrics)",
            g(total)
        ));
    } else {
        if count.converted > 0 {
            parts.push(format!(
                "{} rows -> {} GPU metric values",
                g(count.converted),
                g(count.values)
            ));
        }
        let rest = total.saturating_sub(count.read);
        if rest > 0 {
            parts.push(if selection.time.is_some() {
                format!(
                    "{} rows outside --time-range or of other generic sources not converted",
                    g(rest)
                )
            } else {
                format!(
                    "{} rows of other generic sources not converted (not supported yet)",
                    g(rest)
                )
            });
        }
    }
    Ok((!parts.is_empty()).then(|| format!("{GENERIC_EVENTS}: {}", parts.join("; "))))
}

/// GPU_METRICS; returns, per typeId, the time range it covers.
fn read_gpu_metrics<S: EventSink>(
    conn: &Connection,
    schema: &Schema,
    selection: &Selection,
    sink: &mut S,
) -> Result<HashMap<i64, (i64, i64)>> {
    let mut covered: HashMap<i64, (i64, i64)> = HashMap::new();
    if !schema.has_columns(GPU_METRICS, &["timestamp", "typeId", "metricId", "value"]) {
        return Ok(covered);
    }
    let mut names: HashMap<(i64, i64), (String, &'static str)> = HashMap::new();
    if schema.has_columns(METRIC_NAMES, &["typeId", "metricId", "metricName"]) {
        let mut stmt = conn.prepare(&format!(
            "SELECT typeId, metricId, metricName FROM {METRIC_NAMES}"
        ))?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            if let (Some(t), Some(m), Some(n)) = (int_at(r, 0), int_at(r, 1), text_at(r, 2)) {
                let unit = metric_unit(&n);
                names.insert((t, m), (n.into_owned(), unit));
            }
        }
    }
    // One pass over every row, in storage order (an Arrow export's typed columns, no SQL):
    // the time the table covers per GPU, whatever the window (duplicates are told by it), and
    // the values inside the window.
    let mut rows = Scan::new(schema, GPU_METRICS)
        .cols(schema, &["timestamp", "typeId", "metricId", "value"])
        .by_rowid()
        .open(conn, schema)?;
    let mut fallback: HashMap<i64, String> = HashMap::new();
    while let Some(r) = rows.next()? {
        let (ts, type_id) = (int_at(&r, 0), int_at(&r, 1));
        if let (Some(t), Some(ts)) = (type_id, ts) {
            let c = covered.entry(t).or_insert((ts, ts));
            *c = (c.0.min(ts), c.1.max(ts));
        }
        // Outside the window (a row without a time is outside any window) is not read.
        match ts {
            Some(ts) if !selection.time.is_none_or(|w| w.contains(ts)) => continue,
            None if selection.time.is_some() => continue,
            _ => {}
        }
        let (Some(ts), Some(type_id), Some(metric)) = (ts, type_id, int_at(&r, 2)) else {
            sink.skip(GPU_METRICS, "no timestamp, type or metric");
            continue;
        };
        let value = match value_of(&r, 3) {
            // GPU metrics are never negative (percentages, clocks, counts): a negative integer
            // is a value above 2^31 that the export wrapped to 32 bits (a 2.33 GHz clock stored
            // as -1964454041; the same sample's GENERIC_EVENTS twin holds 2330513255).
            Some(CounterValue::Int(v)) if v < 0 && v >= i32::MIN as i64 => {
                sink.note(GPU_METRICS, WRAPPED);
                CounterValue::Int(v + (1 << 32))
            }
            Some(v) => v,
            None => {
                sink.skip(GPU_METRICS, "no value");
                continue;
            }
        };
        let device = device_of_type(type_id);
        if !wants_device(selection, device) {
            sink.extra_row();
            continue;
        }
        let (name, unit) = match names.get(&(type_id, metric)) {
            Some((n, u)) => (n.as_str(), *u),
            None => (
                fallback
                    .entry(metric)
                    .or_insert_with(|| format!("Metric {metric}"))
                    .as_str(),
                "",
            ),
        };
        let key = CounterKey {
            owner: CounterOwner::Gpu { device },
            name,
            unit,
        };
        sink.counter(
            &key,
            CounterSample {
                ts,
                value,
                category: Category::GpuMetric,
            },
        )?;
    }
    Ok(covered)
}

/// The typeIds of the "GpuMetrics" generic source, with whether its times are session times.
fn gpu_metric_types(conn: &Connection, schema: &Schema) -> Result<HashMap<i64, bool>> {
    let mut out = HashMap::new();
    if !schema.has_columns("GENERIC_EVENT_SOURCES", &["sourceId", "data"])
        || !schema.has_columns("GENERIC_EVENT_TYPES", &["typeId", "sourceId"])
    {
        return Ok(out);
    }
    let mut sources: HashMap<i64, bool> = HashMap::new();
    let mut stmt = conn.prepare("SELECT sourceId, data FROM GENERIC_EVENT_SOURCES")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (Some(id), Some(data)) = (int_at(r, 0), text_at(r, 1)) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&data) else {
            continue;
        };
        if v.get("Name").and_then(|n| n.as_str()) == Some("GpuMetrics") {
            let session = v
                .get("TimeSource")
                .and_then(|t| t.as_str())
                .is_none_or(|t| t == "SessionNs");
            sources.insert(id, session);
        }
    }
    let mut stmt = conn.prepare("SELECT typeId, sourceId FROM GENERIC_EVENT_TYPES")?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        if let (Some(t), Some(s)) = (int_at(r, 0), int_at(r, 1))
            && let Some(&session) = sources.get(&s)
        {
            out.insert(t, session);
        }
    }
    Ok(out)
}

fn read_generic<S: EventSink>(
    conn: &Connection,
    schema: &Schema,
    selection: &Selection,
    covered: &HashMap<i64, (i64, i64)>,
    sink: &mut S,
) -> Result<GenericCount> {
    let mut count = GenericCount::default();
    if !schema.has_columns(GENERIC_EVENTS, &["typeId", "data"]) {
        return Ok(count);
    }
    let types = gpu_metric_types(conn, schema)?;
    if types.is_empty() {
        return Ok(count);
    }
    let ts_col = match (
        schema.has_column(GENERIC_EVENTS, "timestamp"),
        schema.has_column(GENERIC_EVENTS, "rawTimestamp"),
    ) {
        (true, true) => "coalesce(timestamp, rawTimestamp)",
        (true, false) => "timestamp",
        (false, true) => "rawTimestamp",
        (false, false) => return Ok(count),
    };
    let list: Vec<String> = types.keys().map(|t| t.to_string()).collect();
    let sql = format!(
        "SELECT {ts_col}, typeId, data FROM {GENERIC_EVENTS} WHERE typeId IN ({}) AND {} ORDER BY rowid",
        list.join(","),
        time_filter(selection, ts_col)
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query([])?;
    let mut units: HashMap<String, &'static str> = HashMap::new();
    while let Some(r) = rows.next()? {
        count.read += 1;
        let (Some(ts), Some(type_id)) = (int_at(r, 0), int_at(r, 1)) else {
            sink.skip(GENERIC_EVENTS, "GPU metrics row without timestamp or type");
            continue;
        };
        if let Some(&(a, b)) = covered.get(&type_id)
            && (a..=b).contains(&ts)
        {
            sink.skip(GENERIC_EVENTS, DUPLICATE);
            continue;
        }
        if types.get(&type_id) == Some(&false) {
            sink.skip(
                GENERIC_EVENTS,
                "GPU metrics on a clock other than the session's (not supported)",
            );
            continue;
        }
        let device = device_of_type(type_id);
        if !wants_device(selection, device) {
            sink.extra_row();
            continue;
        }
        let data = text_at(r, 2);
        let Some(obj) = data
            .as_deref()
            .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        else {
            sink.skip(GENERIC_EVENTS, "GPU metrics data is not JSON");
            continue;
        };
        let Some(obj) = obj.as_object() else {
            sink.skip(GENERIC_EVENTS, "GPU metrics data is not a JSON object");
            continue;
        };
        count.converted += 1;
        for (name, v) in obj {
            let value = match v {
                serde_json::Value::String(s) => parse_value(s),
                serde_json::Value::Number(n) => n
                    .as_i64()
                    .map(CounterValue::Int)
                    .or_else(|| n.as_f64().map(CounterValue::Double)),
                _ => None,
            };
            let Some(value) = value else {
                sink.note(GENERIC_EVENTS, "GPU metric value that is not a number");
                continue;
            };
            let unit = match units.get(name.as_str()) {
                Some(u) => *u,
                None => {
                    let u = metric_unit(name);
                    units.insert(name.clone(), u);
                    u
                }
            };
            sink.counter(
                &CounterKey {
                    owner: CounterOwner::Gpu { device },
                    name,
                    unit,
                },
                CounterSample {
                    ts,
                    value,
                    category: Category::GpuMetric,
                },
            )?;
            count.values += 1;
        }
    }
    Ok(count)
}

/// A value nsys wrote as a string: an integer when it is one, else a float.
fn parse_value(s: &str) -> Option<CounterValue> {
    let s = s.trim();
    s.parse::<i64>()
        .map(CounterValue::Int)
        .ok()
        .or_else(|| s.parse::<f64>().ok().map(CounterValue::Double))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_from_names() {
        assert_eq!(metric_unit("SM Active"), "%");
        assert_eq!(metric_unit("GPC Clock Frequency"), "Hz");
        assert_eq!(metric_unit("PCIe Read Requests to BAR1"), "");
        assert_eq!(metric_unit("SMs Active [Throughput %]"), "%");
        assert_eq!(metric_unit("GPC Clock Frequency [MHz]"), "MHz");
        assert_eq!(device_of_type(0x1_0001_0000_0000), 0);
        assert_eq!(device_of_type(0x1_0001_0000_0003), 3);
        assert_eq!(parse_value("12"), Some(CounterValue::Int(12)));
        assert_eq!(parse_value("1.5"), Some(CounterValue::Double(1.5)));
    }
}
