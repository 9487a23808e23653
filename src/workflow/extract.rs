//! `nsys-perfetto extract PROFILE... -e PATTERN [-e PATTERN...]`: the time of the events whose names
//! match each pattern, per file and kind of event: count, total and mean, in ns.
//!
//! A pattern is matched against every kind (kernels by short or demangled name, memory
//! operations, API calls, NVTX ranges); each kind with at least one match gets a row. NVTX
//! ranges give two rows: their CPU time (`nvtx`) and their GPU time (`nvtx-gpu`, the span of the
//! GPU work launched inside each range, see [`nsys_perfetto_read::projection`]). A pattern that matches
//! nothing gets one row with no kind and a count of 0.
//!
//! Nested matches count once: an NVTX range that lies within another range matching the same
//! pattern on the same thread (`ncclAllReduce` inside `ncclGroup`, say, for `re:^nccl`) is not
//! counted, only the outermost match is; its time is already in the outer range's (and the
//! GPU work it launched in the outer range's span). [`ExtractRow::nested`] says how many
//! matches were left out that way.

use super::{Output, Pattern, Table, Unit, csv_line, json_f64, matches_event, name_at, plain_f64};
use crate::input;
use anyhow::Result;
use nsys_perfetto_model::category::Kind;
use nsys_perfetto_read::source::Export;
use serde_json::json;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
pub struct ExtractRow {
    /// The pattern as written.
    pub pattern: String,
    /// `None` when the pattern matched no event of any kind.
    pub kind: Option<Kind>,
    pub count: u64,
    /// Summed duration, ns.
    pub total: i64,
    /// NVTX kinds: matching ranges not counted because they lie within another match of the
    /// same pattern on their thread (0 for other kinds).
    pub nested: u64,
}

impl ExtractRow {
    /// Mean duration, ns (NaN when there are no events).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            f64::NAN
        } else {
            self.total as f64 / self.count as f64
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Extract {
    pub file: PathBuf,
    /// Patterns in the order given; within a pattern, kinds in [`Kind::ALL`] order.
    pub rows: Vec<ExtractRow>,
}

/// Extract the times of the events matching `patterns` from one profile.
pub fn extract(path: &Path, patterns: &[Pattern]) -> Result<Extract> {
    let quiet = crate::report::export::ExportOptions {
        quiet: true,
        ..Default::default()
    };
    let opened = input::open(path, &quiet, true)?;
    extract_of(&opened.export, path, patterns)
}

pub fn extract_of(ex: &Export, path: &Path, patterns: &[Pattern]) -> Result<Extract> {
    // acc[pattern][kind] = (count, total, nested)
    let mut acc = vec![[(0u64, 0i64, 0u64); Kind::ALL.len()]; patterns.len()];
    for (ki, kind) in Kind::ALL.into_iter().enumerate() {
        if matches!(kind, Kind::Nvtx | Kind::NvtxGpu) {
            if let Some(sql) = ex.events().nvtx_ranges(kind) {
                outermost(ex, &sql, patterns, &mut |pi, dur, nested| {
                    let slot = &mut acc[pi][ki];
                    if nested {
                        slot.2 += 1;
                    } else {
                        slot.0 += 1;
                        slot.1 += dur;
                    }
                })?;
            }
            continue;
        }
        let Some(d) = ex.events().durations(kind) else {
            continue;
        };
        // One row per distinct (name, alternative name), streamed: the names are matched here.
        let sql = ex.events().by_names(kind, &d);
        let mut stmt = ex.conn.prepare(&sql)?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let name = name_at(r, 0);
            let alt = nsys_perfetto_read::cells::text_at(r, 1);
            let count: i64 = r.get(2)?;
            let total: i64 = r.get(3)?;
            for (pi, p) in patterns.iter().enumerate() {
                if matches_event(kind, p, &name, alt.as_deref()) {
                    let slot = &mut acc[pi][ki];
                    slot.0 += count as u64;
                    slot.1 += total;
                }
            }
        }
    }
    let mut rows = Vec::new();
    for (pi, p) in patterns.iter().enumerate() {
        let before = rows.len();
        for (ki, kind) in Kind::ALL.into_iter().enumerate() {
            let (count, total, nested) = acc[pi][ki];
            if count > 0 {
                rows.push(ExtractRow {
                    pattern: p.text.clone(),
                    kind: Some(kind),
                    count,
                    total,
                    nested,
                });
            }
        }
        if rows.len() == before {
            rows.push(ExtractRow {
                pattern: p.text.clone(),
                kind: None,
                count: 0,
                total: 0,
                nested: 0,
            });
        }
    }
    Ok(Extract {
        file: path.to_path_buf(),
        rows,
    })
}

/// Stream the NVTX ranges of `sql` ([`nsys_perfetto_read::reports::totals::Events::nvtx_ranges`]: thread, start, longest first) and
/// call `hit(pattern, duration, nested)` for each range matching each pattern; `nested` when an
/// earlier range of the same thread matching the same pattern contains it (in this order, an
/// earlier range of the thread starts no later, so it contains the range when it ends no
/// earlier: the running maximum end of the pattern's matches tells). Ranges without a thread
/// are never nested.
fn outermost(
    ex: &Export,
    sql: &str,
    patterns: &[Pattern],
    hit: &mut dyn FnMut(usize, i64, bool),
) -> Result<()> {
    // Per pattern: (thread, latest end) of the matches seen on the current thread.
    let mut open: Vec<Option<(i64, i64)>> = vec![None; patterns.len()];
    let mut matched: std::collections::HashMap<String, Vec<usize>> = Default::default();
    let mut stmt = ex.conn.prepare(sql)?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let name = name_at(r, 0);
        let pats = matched.entry(name).or_insert_with_key(|name| {
            // The bare name (without `Domain:`) is the second name.
            let alt = nsys_perfetto_read::cells::text_at(r, 5);
            (0..patterns.len())
                .filter(|&pi| matches_event(Kind::Nvtx, &patterns[pi], name, alt.as_deref()))
                .collect()
        });
        if pats.is_empty() {
            continue;
        }
        let tid = nsys_perfetto_read::cells::int_at(r, 1);
        let end: i64 = r.get(3)?;
        let dur: i64 = r.get(4)?;
        for &pi in pats.iter() {
            let nested = match (tid, &mut open[pi]) {
                (Some(t), Some((ot, oend))) if *ot == t => {
                    let inside = end <= *oend;
                    *oend = (*oend).max(end);
                    inside
                }
                (Some(t), slot) => {
                    *slot = Some((t, end));
                    false
                }
                (None, _) => false,
            };
            hit(pi, dur, nested);
        }
    }
    Ok(())
}

/// How NVTX matches are counted, printed under tables and carried in JSON.
pub const NESTED_NOTE: &str = "NVTX ranges (nvtx, nvtx-gpu): a match inside another match of the \
same pattern on its thread is counted once, with the outermost; Nested = matches left out so";

/// Render the results of several files together.
pub fn render(results: &[Extract], output: Output, unit: Unit) -> String {
    match output {
        Output::Table => {
            let u = unit.as_str();
            let (total_h, mean_h) = (format!("Total ({u})"), format!("Mean ({u})"));
            let mut t = Table::new(&[
                ("File", false),
                ("Pattern", false),
                ("Kind", false),
                ("Count", true),
                (&total_h, true),
                (&mean_h, true),
                ("Nested", true),
            ]);
            let mut nvtx = false;
            for e in results {
                for r in &e.rows {
                    let is_nvtx = matches!(r.kind, Some(Kind::Nvtx | Kind::NvtxGpu));
                    nvtx |= is_nvtx;
                    t.rows.push(vec![
                        e.file.display().to_string(),
                        r.pattern.clone(),
                        r.kind.map_or("-", Kind::as_str).to_string(),
                        super::group_digits(&r.count.to_string()),
                        unit.fmt_int(r.total),
                        unit.fmt_f64(r.mean()),
                        if is_nvtx {
                            super::group_digits(&r.nested.to_string())
                        } else {
                            "-".into()
                        },
                    ]);
                }
            }
            let mut s = t.render();
            if nvtx {
                s.push_str(NESTED_NOTE);
                s.push('\n');
            }
            s
        }
        Output::Csv => {
            let mut s = csv_line(&[
                "file", "pattern", "kind", "count", "total_ns", "mean_ns", "nested",
            ]);
            for e in results {
                for r in &e.rows {
                    s.push_str(&csv_line(&[
                        e.file.to_string_lossy().into_owned(),
                        r.pattern.clone(),
                        r.kind.map_or("", Kind::as_str).to_string(),
                        r.count.to_string(),
                        r.total.to_string(),
                        plain_f64(r.mean()),
                        r.nested.to_string(),
                    ]));
                }
            }
            s
        }
        Output::Json => {
            let v: Vec<serde_json::Value> = results
                .iter()
                .map(|e| {
                    json!({
                        "file": e.file.to_string_lossy(),
                        "events": e.rows.iter().map(|r| json!({
                            "pattern": r.pattern,
                            "kind": r.kind.map(Kind::as_str),
                            "count": r.count,
                            "total_ns": r.total,
                            "mean_ns": json_f64(r.mean()),
                            "nested": r.nested,
                        })).collect::<Vec<_>>(),
                        "counting": NESTED_NOTE,
                    })
                })
                .collect();
            serde_json::to_string_pretty(&v).expect("JSON") + "\n"
        }
    }
}
