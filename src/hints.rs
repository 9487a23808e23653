//! Messages that say what went wrong and what to do next, where the plain error would not: a
//! trace given as input, a damaged or truncated export, a selection that matches nothing.

use nsys_perfetto_model::category::EventType;
use nsys_perfetto_model::select::{NameFilter, Selection};
use nsys_perfetto_read::inputs::{Input, classify_name};
use std::path::Path;

/// A path as the user would type it in a shell.
fn shell_word(path: &Path) -> String {
    let s = path.display().to_string();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+@%:,=".contains(c))
    {
        s
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Whether a file starts as an SQLite database does.
fn is_sqlite(path: &Path) -> bool {
    use std::io::Read;
    let mut header = [0u8; 16];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .is_ok()
        && &header == b"SQLite format 3\0"
}

/// When `path` is a trace (a `.pftrace` or `.json` output, say) rather than a profile: the
/// message that points to `open`.
pub fn already_a_trace(path: &Path) -> Option<String> {
    if classify_name(path) != Input::Trace || is_sqlite(path) {
        return None;
    }
    Some(format!(
        "{} is already a Perfetto trace, not an nsys profile: open it with `nsys-perfetto open \
         {}`",
        path.display(),
        shell_word(path)
    ))
}

/// A time in seconds as a person writes it: `2.31s`, `0.0042s`, `50s`.
pub fn secs(ns: i64) -> String {
    secs_in(ns, ns)
}

/// Seconds with as many decimals as `scale` (the larger of several times shown together) needs.
fn secs_in(ns: i64, scale: i64) -> String {
    let digits = if scale.unsigned_abs() >= 100_000_000 || scale == 0 {
        3
    } else {
        6
    };
    let mut s = format!("{:.digits$}", ns as f64 / 1e9);
    if ns != 0
        && s.trim_start_matches('-')
            .trim_matches(['0', '.'])
            .is_empty()
    {
        // Too small for the scale's decimals: its own.
        s = format!("{:.6}", ns as f64 / 1e9);
    }
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s}s")
}

/// The first and last time of the events an export holds (session time, ns), from every table
/// a conversion reads; `None` when it holds no timed event.
pub fn capture_span(path: &Path) -> Option<(i64, i64)> {
    let (conn, schema) = nsys_perfetto_read::schema::open_schema(path).ok()?;
    let columns = nsys_perfetto_read::source::EVENT_TABLES
        .iter()
        .map(|t| (*t, "start", "1".to_string()))
        .chain(nsys_perfetto_read::metrics::time_columns(&schema))
        .chain(nsys_perfetto_read::tables::present(&schema).map(|(t, c)| (t, c, "1".to_string())));
    let mut span: Option<(i64, i64)> = None;
    for (table, col, cond) in columns {
        if !schema.has_column(table, col) {
            continue;
        }
        let end = if schema.has_column(table, "end") {
            format!("coalesce(\"end\", \"{col}\")")
        } else {
            format!("\"{col}\"")
        };
        let sql = format!(
            "SELECT min(\"{col}\"), max({end}) FROM {} WHERE {cond}",
            nsys_perfetto_read::query::quote_ident(table)
        );
        let Ok((Some(a), Some(b))) = conn.query_row(&sql, [], |r| {
            Ok((
                nsys_perfetto_read::cells::time_at(r, 0),
                nsys_perfetto_read::cells::time_at(r, 1),
            ))
        }) else {
            continue;
        };
        span = Some(span.map_or((a, b.max(a)), |(x, y)| (x.min(a), y.max(b))));
    }
    span
}

/// The filters of a selection other than its time window, as a person would list them.
fn filters(sel: &Selection) -> Vec<String> {
    let mut out = Vec::new();
    if sel.types != EventType::defaults() {
        let names: Vec<&str> = sel.types.iter().map(|t| t.name()).collect();
        out.push(format!("--types {}", names.join(",")));
    }
    match &sel.nvtx_filter {
        Some(NameFilter::Prefix(p)) => out.push(format!("NVTX names starting with '{p}'")),
        Some(NameFilter::Regex(r)) => out.push(format!("NVTX names matching /{r}/")),
        None => {}
    }
    if !sel.pids.is_empty() {
        let pids: Vec<String> = sel.pids.iter().map(i64::to_string).collect();
        out.push(format!("--pid {}", pids.join(",")));
    }
    if !sel.devices.is_empty() {
        let d: Vec<String> = sel.devices.iter().map(i64::to_string).collect();
        out.push(format!("--device {}", d.join(",")));
    }
    out
}

/// Why nothing was written when a selection matched no event of `inputs`: the selection, and
/// the time the capture's events span (the first input's; each one's in a merge).
pub fn empty_selection(sel: &Selection, inputs: &[&Path]) -> String {
    let spans: Vec<String> = inputs
        .iter()
        .map(|p| {
            let span = match capture_span(p) {
                Some((a, b)) => {
                    let scale = a.abs().max(b.abs());
                    format!("{}..{}", secs_in(a, scale), secs_in(b, scale))
                }
                None => "no timed events".to_string(),
            };
            if inputs.len() > 1 {
                format!("{}: {span}", p.display())
            } else {
                span
            }
        })
        .collect();
    let spans = spans.join(", ");
    let others = filters(sel);
    let with = if others.is_empty() {
        String::new()
    } else {
        format!(" with {}", others.join(", "))
    };
    let others = if others.is_empty() {
        "everything".to_string()
    } else {
        others.join(", ")
    };
    match sel.time {
        Some(t) => format!(
            "no events in {}..{}{with}: the capture spans {spans} (--time-range counts from the \
             capture start); nothing written",
            t.start.map(secs).unwrap_or_default(),
            t.end.map(secs).unwrap_or_default(),
        ),
        None => format!(
            "the selection ({others}) matches no events: nothing written (the capture spans \
             {spans})"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_as_written() {
        let cases = [
            (0, "0s"),
            (5_000_000_000, "5s"),
            (2_310_000_000, "2.31s"),
            (630_846_976, "0.631s"),
            (4_200_000, "0.0042s"),
        ];
        for (ns, text) in cases {
            assert_eq!(secs(ns), text);
        }
        assert_eq!(secs_in(-38_000, 609_000_000), "-0.000038s");
    }
}
