//! What a conversion did: events per category, tracks, flows and every skipped row with its
//! reason. Printed at the end of a run and returned to library users.

use crate::category::Category;
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Slices and instants written, by category (index = `Category::index`).
    pub events: [u64; Category::ALL.len()],
    /// Trace events written: BEGIN, END and INSTANT (a slice is two).
    pub trace_events: u64,
    pub tracks: u64,
    /// Lanes added beside a track because its work overlapped.
    pub extra_lanes: u64,
    /// Rows that came later than their track's written time (a table not in start order):
    /// placed on a separate lane, never dropped.
    pub late_rows: u64,
    /// Flow arrows (one per GPU row linked to its launch).
    pub flows: u64,
    /// (table, reason) -> rows not converted.
    pub skipped: BTreeMap<(String, String), u64>,
    /// table -> rows that name things (NVTX domains, categories, thread names): applied to the
    /// names of tracks and args rather than drawn as events.
    pub naming_rows: BTreeMap<String, u64>,
    /// Notes on whole tables or features (e.g. a table present but not supported).
    pub notes: Vec<String>,
    pub output_bytes: u64,
    pub seconds: f64,
    /// In a merge: what each source converted, in input order (empty for one source).
    pub per_source: Vec<Summary>,
}

// By hand: arrays of more than 32 elements (one per category) have no derived `Default`.
impl Default for Summary {
    fn default() -> Self {
        Summary {
            events: [0; Category::ALL.len()],
            trace_events: 0,
            tracks: 0,
            extra_lanes: 0,
            late_rows: 0,
            flows: 0,
            skipped: BTreeMap::new(),
            naming_rows: BTreeMap::new(),
            notes: Vec::new(),
            output_bytes: 0,
            seconds: 0.0,
            per_source: Vec::new(),
        }
    }
}

/// "1.234 s", "12.5 ms", "340 us", "15 ns": a duration as a person reads it.
pub fn human_ns(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    if a >= 1e9 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if a >= 1e6 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else if a >= 1e3 {
        format!("{:.0} us", ns as f64 / 1e3)
    } else {
        format!("{ns} ns")
    }
}

impl Summary {
    pub fn count(&mut self, c: Category) {
        self.events[c.index()] += 1;
    }

    pub fn skip(&mut self, table: &str, reason: &str) {
        *self
            .skipped
            .entry((table.to_string(), reason.to_string()))
            .or_default() += 1;
    }

    pub fn events_of(&self, c: Category) -> u64 {
        self.events[c.index()]
    }

    pub fn total_events(&self) -> u64 {
        self.events.iter().sum()
    }

    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }

    pub fn merge(&mut self, other: Summary) {
        for (a, b) in self.events.iter_mut().zip(other.events) {
            *a += b;
        }
        self.trace_events += other.trace_events;
        self.tracks += other.tracks;
        self.extra_lanes += other.extra_lanes;
        self.late_rows += other.late_rows;
        self.flows += other.flows;
        for (k, v) in other.skipped {
            *self.skipped.entry(k).or_default() += v;
        }
        for (k, v) in other.naming_rows {
            *self.naming_rows.entry(k).or_default() += v;
        }
        self.notes.extend(other.notes);
    }

    /// The end-of-run report.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let cats: Vec<String> = Category::ALL
            .iter()
            .filter(|c| self.events_of(**c) > 0)
            .map(|c| format!("{} {}", c.as_str(), self.events_of(*c)))
            .collect();
        let _ = writeln!(
            s,
            "  events: {} ({})",
            self.total_events(),
            if cats.is_empty() {
                "none".to_string()
            } else {
                cats.join(", ")
            }
        );
        let _ = writeln!(
            s,
            "  trace events: {} (slice begins and ends, instants)",
            self.trace_events
        );
        let _ = writeln!(
            s,
            "  tracks: {} ({} overlap lanes), flows: {}",
            self.tracks, self.extra_lanes, self.flows
        );
        if self.late_rows > 0 {
            let _ = writeln!(
                s,
                "  out-of-order rows: {} (placed on separate lanes)",
                self.late_rows
            );
        }
        if self.skipped.is_empty() {
            let _ = writeln!(s, "  skipped rows: 0");
        } else {
            let _ = writeln!(s, "  skipped rows: {}", self.skipped_total());
            for ((table, reason), n) in &self.skipped {
                let _ = writeln!(s, "    {n} in {table}: {reason}");
            }
        }
        for (table, n) in &self.naming_rows {
            let _ = writeln!(
                s,
                "  naming rows: {n} in {table} (domains, categories, thread names) applied as names"
            );
        }
        for n in &self.notes {
            let _ = writeln!(s, "  note: {n}");
        }
        let _ = writeln!(
            s,
            "  output: {} in {:.2} s",
            human_bytes(self.output_bytes),
            self.seconds
        );
        s
    }
}

pub fn human_bytes(n: u64) -> String {
    if n >= 10 * 1024 * 1024 {
        format!("{:.1} MB", n as f64 / 1e6)
    } else if n >= 10 * 1024 {
        format!("{:.1} kB", n as f64 / 1e3)
    } else {
        format!("{n} B")
    }
}

/// `1752345` as `1,752,345`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_grouped() {
        let texts = [0, 999, 79_564, 1_752_345].map(grouped);
        assert_eq!(texts.join(" "), "0 999 79,564 1,752,345");
    }
}
