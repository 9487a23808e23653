//! The workflows users script today, as library functions returning plain data:
//! [`stats`] (top kernels, API calls, memory operations and NVTX ranges by total time),
//! [`extract`] (time of the events whose names match patterns) and [`sweep`] (profile a command
//! once per parameter value and tabulate the extracted times).
//!
//! Every number comes from SQL aggregates over the export (memory stays bounded: SQLite sorts
//! and groups on disk); rendering to an aligned table, CSV or JSON is separate.
//!
//! Event durations are `end - start` in nanoseconds, over rows whose `end >= start`. Events are
//! named as nsys' own reports name them (`docs/names.md`), with a second name, the one the trace
//! shows, that patterns also match ([`Export::matches`]):
//! - `kernel`: `CUPTI_ACTIVITY_KIND_KERNEL` by demangled name (second: the base `shortName`);
//! - `memory`: `CUPTI_ACTIVITY_KIND_MEMCPY` by copy kind (`[CUDA memcpy Host-to-Device]`;
//!   second: `Memcpy HtoD`) and `CUPTI_ACTIVITY_KIND_MEMSET` (`[CUDA memset]`; `Memset`);
//! - `api`: `CUPTI_ACTIVITY_KIND_RUNTIME` and `_DRIVER` calls, by `cuda_api_sum`'s name (a
//!   six-character `_vNNNN` suffix dropped; second: the symbol as recorded);
//! - `nvtx`: NVTX push/pop (59) and start/end (60) ranges, CPU time, named `Domain:text` in a
//!   named domain (second: the text);
//! - `nvtx-gpu`: the same ranges projected onto the GPU ([`nsys_perfetto_read::projection`]): per range, from
//!   the earliest start to the latest end of the GPU rows launched inside it, over all devices;
//!   only ranges that launched GPU work count.
//!
//! [`reports`] computes nsys' own summary reports exactly as `nsys stats` does.

pub mod analyze;
pub mod extract;
pub mod pictures;
pub mod recipe;
pub mod reports;
pub mod stats;
pub mod sweep;

use crate::cli::args::OutputArgs;
use crate::report::{self, export::ExportOptions};
use anyhow::Result;
use nsys_perfetto_read::enums::Enums;
use nsys_perfetto_read::inputs::{Input, classify};
use nsys_perfetto_read::names::nvtx_type::{DOMAIN_CREATE, PUSH_POP, START_END};
use nsys_perfetto_read::names::{DRIVER, KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME};
use nsys_perfetto_read::projection::tables::Projection;
use nsys_perfetto_read::projection::{NVTX_GPU, PROJ_DB};
use nsys_perfetto_read::schema::Schema;
use regex::Regex;
use rusqlite::Connection;
use std::path::Path;

/// The kinds of events the workflows report on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Kernel,
    Memory,
    Api,
    Nvtx,
    NvtxGpu,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Kernel,
        Kind::Memory,
        Kind::Api,
        Kind::Nvtx,
        Kind::NvtxGpu,
    ];

    /// Short name used in CSV/JSON and tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Kernel => "kernel",
            Kind::Memory => "memory",
            Kind::Api => "api",
            Kind::Nvtx => "nvtx",
            Kind::NvtxGpu => "nvtx-gpu",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Kind::Kernel => "CUDA kernels",
            Kind::Memory => "GPU memory operations (memcpy by kind, memset)",
            Kind::Api => "CUDA API calls (runtime and driver)",
            Kind::Nvtx => "NVTX ranges (CPU time)",
            Kind::NvtxGpu => {
                "NVTX ranges projected onto the GPU (span of the GPU work launched inside)"
            }
        }
    }

    /// GPU work (kernels and memory operations) shares one percentage basis: all GPU time.
    pub fn is_gpu(self) -> bool {
        matches!(self, Kind::Kernel | Kind::Memory)
    }
}

pub use crate::cli::args::Unit;

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::Us => "us",
            Unit::Ms => "ms",
            Unit::S => "s",
        }
    }
    fn divisor(self) -> f64 {
        match self {
            Unit::Ns => 1.0,
            Unit::Us => 1e3,
            Unit::Ms => 1e6,
            Unit::S => 1e9,
        }
    }
    /// A time in ns, for a table: whole numbers of ns stay whole; other units get 3 decimals.
    pub fn fmt_int(self, ns: i64) -> String {
        match self {
            Unit::Ns => group_digits(&ns.to_string()),
            _ => fmt_decimals(ns as f64 / self.divisor(), 3),
        }
    }
    /// A fractional time (a mean, a median) in ns, for a table.
    pub fn fmt_f64(self, ns: f64) -> String {
        match self {
            Unit::Ns => fmt_decimals(ns, 1),
            _ => fmt_decimals(ns / self.divisor(), 3),
        }
    }
}

/// How a command prints its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    #[default]
    Table,
    Csv,
    Json,
}

/// `1234567` -> `1,234,567` (a sign and decimals are kept).
pub fn group_digits(s: &str) -> String {
    let (sign, rest) = match s.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", s),
    };
    let (int, frac) = match rest.find('.') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let mut out = String::with_capacity(s.len() + int.len() / 3);
    out.push_str(sign);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out.push_str(frac);
    out
}

/// A number with `d` decimals and grouped digits; non-finite values print as `-`.
pub fn fmt_decimals(v: f64, d: usize) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    group_digits(&format!("{v:.d$}"))
}

/// A plain-text table with aligned columns.
#[derive(Debug, Clone, Default)]
pub struct Table {
    pub headers: Vec<String>,
    /// Right-align this column (numbers).
    pub right: Vec<bool>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[(&str, bool)]) -> Table {
        Table {
            headers: headers.iter().map(|(h, _)| h.to_string()).collect(),
            right: headers.iter().map(|(_, r)| *r).collect(),
            rows: Vec::new(),
        }
    }

    pub fn render(&self) -> String {
        let n = self.headers.len();
        let mut width: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate().take(n) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut s = String::new();
        let line = |s: &mut String, cells: &[String]| {
            let mut l = String::new();
            for (i, c) in cells.iter().enumerate().take(n) {
                if i > 0 {
                    l.push_str("  ");
                }
                let pad = width[i].saturating_sub(c.chars().count());
                let last = i + 1 == n;
                if self.right[i] {
                    l.extend(std::iter::repeat_n(' ', pad));
                    l.push_str(c);
                } else {
                    l.push_str(c);
                    if !last {
                        l.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            s.push_str(l.trim_end());
            s.push('\n');
        };
        line(&mut s, &self.headers);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        line(&mut s, &rule);
        for r in &self.rows {
            line(&mut s, r);
        }
        s
    }
}

/// One CSV field, quoted when needed (RFC 4180).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) || s.starts_with(' ') || s.ends_with(' ') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

pub fn csv_line<S: AsRef<str>>(fields: &[S]) -> String {
    let mut s = fields
        .iter()
        .map(|f| csv_field(f.as_ref()))
        .collect::<Vec<_>>()
        .join(",");
    s.push('\n');
    s
}

/// A float for CSV/JSON: shortest round-trip form; empty when not finite.
pub fn plain_f64(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        String::new()
    }
}

/// A float for JSON: `null` when not finite.
pub fn json_f64(v: f64) -> serde_json::Value {
    serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// An event-name pattern: a substring by default, a regular expression with the `re:` prefix
/// (or when every pattern is a regex), or an exact name.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// The pattern as the user wrote it (how it is shown in results).
    pub text: String,
    matcher: Matcher,
}

#[derive(Debug, Clone)]
enum Matcher {
    Substring(String),
    Regex(Regex),
    Exact(String),
}

impl Pattern {
    /// Parse a user pattern: `re:EXPR` is a regex, anything else a substring (or a regex when
    /// `all_regex`). Matching is case-sensitive.
    pub fn parse(text: &str, all_regex: bool) -> Result<Pattern> {
        let matcher = match text.strip_prefix("re:") {
            Some(expr) => Matcher::Regex(
                Regex::new(expr).map_err(|e| anyhow::anyhow!("bad regex {expr:?}: {e}"))?,
            ),
            None if all_regex => Matcher::Regex(
                Regex::new(text).map_err(|e| anyhow::anyhow!("bad regex {text:?}: {e}"))?,
            ),
            None => Matcher::Substring(text.to_string()),
        };
        Ok(Pattern {
            text: text.to_string(),
            matcher,
        })
    }

    /// A pattern matching exactly one name.
    pub fn exact(name: &str) -> Pattern {
        Pattern {
            text: name.to_string(),
            matcher: Matcher::Exact(name.to_string()),
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        match &self.matcher {
            Matcher::Substring(s) => name.contains(s.as_str()),
            Matcher::Regex(r) => r.is_match(name),
            Matcher::Exact(s) => name == s,
        }
    }
}

/// An export opened for the workflows: its schema, the enum labels and, when the export has NVTX
/// ranges and GPU work, the NVTX-to-GPU projection attached as [`PROJ_DB`].
pub struct Export {
    pub conn: Connection,
    pub schema: Schema,
    pub enums: Enums,
    pub projection: Option<Projection>,
    /// The SQLite export read (the report's export for a report).
    pub sqlite: std::path::PathBuf,
    /// Keeps a temporary export (made from a report) alive.
    _exported: Option<report::export::Exported>,
}

impl Export {
    /// Open an nsys SQLite export, or a report (`.nsys-rep`, `.qdrep`) through its SQLite
    /// export (made by nsys, or reused, see [`crate::report::export::export_report`]).
    pub fn open(path: &Path) -> Result<Export> {
        Export::open_with(
            path,
            &ExportOptions {
                quiet: true,
                ..Default::default()
            },
        )
    }

    pub fn open_with(path: &Path, opts: &ExportOptions) -> Result<Export> {
        Export::open_projecting(path, opts, true)
    }

    /// [`Export::open_with`], computing the NVTX-to-GPU projection only when `project` (it
    /// reads every NVTX range and GPU row: work a caller that never reads it should not pay).
    pub fn open_projecting(path: &Path, opts: &ExportOptions, project: bool) -> Result<Export> {
        let (exported, conn, schema) = if classify(path) == Input::Report {
            let (exported, conn, schema) = report::export::export_and_open(path, opts)?;
            (Some(exported), conn, schema)
        } else {
            let (conn, schema) = nsys_perfetto_read::schema::open_schema(path)?;
            (None, conn, schema)
        };
        let sqlite = exported.as_ref().map_or(path, |e| e.path());
        let enums = Enums::load(&conn, &schema);
        let projection = if project {
            schema.read_through(Projection::build(&schema))?
        } else {
            None
        };
        if let Some(p) = &projection {
            p.attach(&conn)?;
        }
        Ok(Export {
            conn,
            schema,
            enums,
            projection,
            sqlite: sqlite.to_path_buf(),
            _exported: exported,
        })
    }

    /// The durations of one kind of event: `SELECT key, alt, dur` where `key` groups events
    /// under one name, `alt` is a second name patterns may match (kernels' demangled name), and
    /// `dur` is in ns. `None` when the export has no such events.
    fn durations(&self, kind: Kind) -> Option<String> {
        let s = &self.schema;
        let ok = |t: &str| s.has_columns(t, &["start", "end"]);
        match kind {
            Kind::Kernel => {
                if !ok(KERNEL) {
                    return None;
                }
                let short = s.col(KERNEL, "shortName");
                let long = s.col(KERNEL, "demangledName");
                Some(format!(
                    "SELECT coalesce({long}, {short}) AS key, {short} AS alt, \"end\" - start AS dur \
                     FROM main.\"{KERNEL}\" WHERE \"end\" >= start"
                ))
            }
            Kind::Memory => {
                let mut parts = Vec::new();
                if ok(MEMCPY) {
                    // nsys' report name, and the trace's ("Memcpy HtoD") as the second name.
                    let kind = s.col(MEMCPY, "copyKind");
                    let (mut long, mut short) = (String::new(), String::new());
                    for k in 0..=13 {
                        long.push_str(&format!(" WHEN {k} THEN '{}'", memcpy_label(k)));
                        short.push_str(&format!(
                            " WHEN {k} THEN '{}'",
                            self.enums.copy_kind(k).replace('\'', "''")
                        ));
                    }
                    parts.push(format!(
                        "SELECT '[CUDA memcpy ' || (CASE {kind}{long} ELSE 'Unknown' END) || ']' AS key, \
                         'Memcpy ' || (CASE {kind}{short} ELSE coalesce({kind}, '?') END) AS alt, \
                         \"end\" - start AS dur FROM main.\"{MEMCPY}\" WHERE \"end\" >= start"
                    ));
                }
                if ok(MEMSET) {
                    parts.push(format!(
                        "SELECT '[CUDA memset]' AS key, 'Memset' AS alt, \"end\" - start AS dur \
                         FROM main.\"{MEMSET}\" WHERE \"end\" >= start"
                    ));
                }
                (!parts.is_empty()).then(|| parts.join(" UNION ALL "))
            }
            Kind::Api => {
                let parts: Vec<String> = [RUNTIME, DRIVER]
                    .iter()
                    .filter(|t| ok(t))
                    .map(|t| {
                        // nsys' `cuda_api_sum` name; the symbol as recorded is the second name.
                        if self.has_strings() {
                            format!(
                                "SELECT coalesce({}, '(unnamed API call)') AS key, s.value AS alt, \
                                 a.\"end\" - a.start AS dur FROM main.\"{t}\" a \
                                 LEFT JOIN main.StringIds s ON s.id = {} WHERE a.\"end\" >= a.start",
                                api_name_sql("s.value"),
                                s.col_of(t, "a", "nameId")
                            )
                        } else {
                            format!(
                                "SELECT '(unnamed API call)' AS key, NULL AS alt, \
                                 \"end\" - start AS dur FROM main.\"{t}\" WHERE \"end\" >= start"
                            )
                        }
                    })
                    .collect();
                (!parts.is_empty()).then(|| parts.join(" UNION ALL "))
            }
            Kind::Nvtx => {
                if !s.has_columns(NVTX, &["start", "end", "eventType"]) {
                    return None;
                }
                let text = s.col_of(NVTX, "r", "text");
                let (join, name, bare) = self.nvtx_name(&text, &s.col_of(NVTX, "r", "textId"), "r");
                Some(format!(
                    "SELECT {name} AS key, {bare} AS alt, r.\"end\" - r.start AS dur \
                     FROM main.\"{NVTX}\" r{join} \
                     WHERE r.eventType IN ({PUSH_POP}, {START_END}) AND r.\"end\" >= r.start"
                ))
            }
            Kind::NvtxGpu => {
                self.projection.as_ref()?;
                let (join, name, bare) = self.nvtx_name("r.name_text", "r.name_id", "c");
                let row = if self.nvtx_domains() {
                    format!(" JOIN main.\"{NVTX}\" c ON c.rowid = r.nvtx_rid")
                } else {
                    String::new()
                };
                Some(format!(
                    "SELECT {name} AS key, {bare} AS alt, max(r.gpu_end) - min(r.gpu_start) AS dur \
                     FROM {PROJ_DB}.{NVTX_GPU} r{row}{join} GROUP BY r.nvtx_rid"
                ))
            }
        }
    }

    /// Every NVTX range of `kind` (`Nvtx`: CPU time; `NvtxGpu`: the span of the GPU work it
    /// launched, ranges without GPU work left out): `SELECT key, tid, s, e, dur`, where `s`/`e`
    /// are the range's CPU start and end (what nesting is judged by), ordered by thread, start,
    /// then longest first, so that a range comes after every range of its thread containing it.
    fn nvtx_ranges(&self, kind: Kind) -> Option<String> {
        let s = &self.schema;
        if !s.has_columns(NVTX, &["start", "end", "eventType"]) {
            return None;
        }
        let tid = s.col_of(NVTX, "c", "globalTid");
        let sql = match kind {
            Kind::Nvtx => {
                let text = s.col_of(NVTX, "r", "text");
                let (join, name, bare) = self.nvtx_name(&text, &s.col_of(NVTX, "r", "textId"), "r");
                let tid = s.col_of(NVTX, "r", "globalTid");
                format!(
                    "SELECT {name} AS key, {tid} AS tid, r.start AS s, r.\"end\" AS e, \
                     r.\"end\" - r.start AS dur, {bare} AS alt FROM main.\"{NVTX}\" r{join} \
                     WHERE r.eventType IN ({PUSH_POP}, {START_END}) AND r.\"end\" >= r.start"
                )
            }
            Kind::NvtxGpu => {
                self.projection.as_ref()?;
                let (join, name, bare) = self.nvtx_name("r.name_text", "r.name_id", "c");
                format!(
                    "SELECT {name} AS key, {tid} AS tid, c.start AS s, c.\"end\" AS e, \
                     max(r.gpu_end) - min(r.gpu_start) AS dur, {bare} AS alt \
                     FROM {PROJ_DB}.{NVTX_GPU} r JOIN main.\"{NVTX}\" c ON c.rowid = r.nvtx_rid{join} \
                     GROUP BY r.nvtx_rid"
                )
            }
            _ => return None,
        };
        Some(format!(
            "SELECT key, tid, s, e, dur, alt FROM ({sql}) ORDER BY tid, s, e DESC"
        ))
    }

    fn has_strings(&self) -> bool {
        self.schema.has_columns("StringIds", &["id", "value"])
    }

    /// Whether NVTX ranges can be named by their domain (the export records domains).
    fn nvtx_domains(&self) -> bool {
        self.schema
            .has_columns(NVTX, &["domainId", "globalTid", "eventType", "text"])
    }

    /// (join, name, bare name) of an NVTX range from its text and text id columns and the alias
    /// of its `NVTX_EVENTS` row: the name is nsys' `Domain:text` for a range of a named domain
    /// (the domain's creation, event type 75, in the range's process names it, as in nsys'
    /// `nvtx_sum`), else the text, which is the bare name.
    fn nvtx_name(&self, text: &str, text_id: &str, row: &str) -> (String, String, String) {
        let (mut join, bare) = if self.has_strings() && text_id != "NULL" {
            (
                format!(" LEFT JOIN main.StringIds s ON s.id = {text_id}"),
                format!("coalesce({text}, s.value, '(unnamed range)')"),
            )
        } else {
            (
                String::new(),
                format!("coalesce({text}, '(unnamed range)')"),
            )
        };
        if !self.nvtx_domains() {
            return (join, bare.clone(), bare);
        }
        join.push_str(&format!(
            " LEFT JOIN (SELECT domainId AS id, globalTid & 0x0000FFFFFF000000 AS pid, \
             text AS name, min(start) FROM main.\"{NVTX}\" WHERE eventType = {DOMAIN_CREATE} \
             GROUP BY 1, 2) dom ON dom.id = {row}.domainId \
             AND dom.pid = ({row}.globalTid & 0x0000FFFFFF000000)"
        ));
        (
            join,
            format!("coalesce(dom.name || ':', '') || {bare}"),
            bare,
        )
    }

    /// (join, expression) turning an aggregated `a.key` (and `a.alt`) into display names.
    fn key_names(&self, kind: Kind) -> (String, String, String) {
        let strings = self.has_strings();
        match kind {
            Kind::Kernel if strings => (
                " LEFT JOIN main.StringIds s ON s.id = a.key LEFT JOIN main.StringIds s2 ON s2.id = a.alt"
                    .into(),
                "coalesce(s.value, '(unnamed kernel)')".into(),
                "s2.value".into(),
            ),
            Kind::Kernel => (String::new(), "'(unnamed kernel)'".into(), "NULL".into()),
            // API, memory and NVTX keys are names already.
            Kind::Api | Kind::Memory | Kind::Nvtx | Kind::NvtxGpu => {
                (String::new(), "a.key".into(), "a.alt".into())
            }
        }
    }

    /// Whether `p` matches an event of `kind` named `name` (with its second name `alt`), under
    /// any of the names it goes by (`Export::durations`): a kernel's demangled or base name;
    /// a memory operation's nsys or trace name; an API call's nsys name, its symbol, or the
    /// trace's name (every `_vNNNN` suffix dropped); an NVTX range's `Domain:name` or name.
    pub fn matches(&self, kind: Kind, p: &Pattern, name: &str, alt: Option<&str>) -> bool {
        p.matches(name)
            || alt.is_some_and(|a| p.matches(a))
            || (kind == Kind::Api
                && nsys_perfetto_read::api::display_name(name).is_some_and(|d| p.matches(d)))
    }

    /// Read a name column of an aggregate row.
    fn name_at(&self, _kind: Kind, row: &rusqlite::Row<'_>, idx: usize) -> String {
        match row.get_ref(idx) {
            Ok(rusqlite::types::ValueRef::Integer(v)) => v.to_string(),
            _ => nsys_perfetto_read::cells::text_at(row, idx)
                .map_or_else(String::new, |s| s.into_owned()),
        }
    }
}

/// Write `text` to `path`, naming the file in errors.
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

impl OutputArgs {
    pub fn format(&self) -> Output {
        if self.csv {
            Output::Csv
        } else if self.json {
            Output::Json
        } else {
            Output::Table
        }
    }

    pub fn export_options(&self) -> ExportOptions {
        ExportOptions {
            nsys: self.nsys.clone(),
            quiet: true,
            ..Default::default()
        }
    }

    /// Print or write the rendered result.
    pub fn emit(&self, text: &str) -> Result<()> {
        match &self.output {
            Some(p) => write_file(p, text),
            None => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                // A closed pipe (`| head`) is not an error worth reporting.
                let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
                Ok(())
            }
        }
    }
}

/// The label nsys gives a CUDA memcpy kind (`ENUM_CUDA_MEMCPY_OPER.label`), for exports without
/// that table.
pub fn memcpy_label(kind: i64) -> &'static str {
    match kind {
        1 => "Host-to-Device",
        2 => "Device-to-Host",
        3 => "Host-to-Array",
        4 => "Array-to-Host",
        5 => "Array-to-Array",
        6 => "Array-to-Device",
        7 => "Device-to-Array",
        8 => "Device-to-Device",
        9 => "Host-to-Host",
        10 => "Peer-to-Peer",
        11 => "Unified Host-to-Device",
        12 => "Unified Device-to-Host",
        13 => "Unified Device-to-Device",
        _ => "Unknown",
    }
}

/// The SQL expression of an API name as `cuda_api_sum` shows it: a `_vNNNN` suffix of exactly
/// six characters dropped (so `cudaLaunchKernel_v7000` becomes `cudaLaunchKernel`, while
/// `cudaStreamIsCapturing_v10000` stays).
pub fn api_name_sql(value: &str) -> String {
    format!(
        "CASE substr({value}, -6, 2) WHEN '_v' THEN substr({value}, 1, length({value}) - 6) \
         ELSE {value} END"
    )
}
