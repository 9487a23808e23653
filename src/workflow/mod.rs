//! The workflows users script today, as library functions returning plain data:
//! [`stats`] (top kernels, API calls, memory operations and NVTX ranges by total time),
//! [`extract`] (time of the events whose names match patterns) and [`sweep`] (profile a command
//! once per parameter value and tabulate the extracted times).
//!
//! Every number comes from SQL aggregates over the export (memory stays bounded: SQLite sorts
//! and groups on disk); rendering to an aligned table, CSV or JSON is separate.
//!
//! The events are totalled by kind ([`Kind`]), named as nsys' own reports name them, with a
//! second name, the one the trace shows, that patterns also match ([`matches_event`]); their
//! SQL is the reading crate's ([`nsys_perfetto_read::reports::totals`]). The export is opened
//! by [`crate::input::open`].
//!
//! [`reports`] renders nsys' own summary reports, which the reading crate computes exactly as
//! `nsys stats` does.

pub mod analyze;
pub mod extract;
pub mod pictures;
pub mod recipe;
pub mod reports;
pub mod stats;
pub mod sweep;

use anyhow::Result;
use nsys_perfetto_model::category::Kind;
use regex::Regex;
use std::path::Path;

/// Time unit for tables. CSV and JSON always carry nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unit {
    #[default]
    Ns,
    Us,
    Ms,
    S,
}

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

impl Output {
    /// A result as this output prints it: its `table`, its `csv`, or its `json` pretty-printed.
    pub fn print(
        self,
        table: impl FnOnce() -> String,
        csv: impl FnOnce() -> String,
        json: impl FnOnce() -> serde_json::Value,
    ) -> String {
        match self {
            Output::Table => table(),
            Output::Csv => csv(),
            Output::Json => serde_json::to_string_pretty(&json()).expect("JSON") + "\n",
        }
    }
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

/// Whether `p` matches an event of `kind` named `name` (with its second name `alt`), under any of
/// the names it goes by ([`Events::durations`]): a kernel's demangled or base name; a memory
/// operation's nsys or trace name; an API call's nsys name, its symbol, or the trace's name
/// (every `_vNNNN` suffix dropped); an NVTX range's `Domain:name` or name.
///
/// [`Events::durations`]: nsys_perfetto_read::reports::totals::Events::durations
pub fn matches_event(kind: Kind, p: &Pattern, name: &str, alt: Option<&str>) -> bool {
    p.matches(name)
        || alt.is_some_and(|a| p.matches(a))
        || (kind == Kind::Api
            && nsys_perfetto_read::api::display_name(name).is_some_and(|d| p.matches(d)))
}

/// Read a name column of an aggregate row.
fn name_at(row: &rusqlite::Row<'_>, idx: usize) -> String {
    match row.get_ref(idx) {
        Ok(rusqlite::types::ValueRef::Integer(v)) => v.to_string(),
        _ => nsys_perfetto_read::cells::text_at(row, idx)
            .map_or_else(String::new, |s| s.into_owned()),
    }
}

/// Write `text` to `path`, naming the file in errors.
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}
