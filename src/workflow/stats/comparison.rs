//! `stats A B`: two profiles compared name by name (count and total of each, the change).

use super::{Section, Stats};
use crate::workflow::{Output, Table, Unit, csv_line, json_f64, plain_f64};
use nsys_perfetto_model::category::Kind;
use serde_json::json;
use std::path::PathBuf;

/// One name in two profiles: (count, total ns) in each, `None` where the profile lacks it.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareRow {
    pub name: String,
    pub a: Option<(u64, i64)>,
    pub b: Option<(u64, i64)>,
}

impl CompareRow {
    pub fn total_a(&self) -> i64 {
        self.a.map_or(0, |x| x.1)
    }
    pub fn total_b(&self) -> i64 {
        self.b.map_or(0, |x| x.1)
    }
    /// Total of B minus total of A, ns.
    pub fn change(&self) -> i64 {
        self.total_b() - self.total_a()
    }
    /// The change in percent of A's total (NaN when A has none).
    pub fn change_percent(&self) -> f64 {
        change_percent(self.total_a(), self.total_b())
    }
}

fn change_percent(a: i64, b: i64) -> f64 {
    if a > 0 {
        (b - a) as f64 * 100.0 / a as f64
    } else {
        f64::NAN
    }
}

/// One kind of event in two profiles.
#[derive(Debug, Clone, PartialEq)]
pub struct CompareSection {
    pub kind: Kind,
    /// (count, total ns) of all events of this kind in A and in B.
    pub a: (u64, i64),
    pub b: (u64, i64),
    /// Distinct names in A or B.
    pub names: u64,
    /// The names with the largest total in A or B, largest first (ties by name).
    pub rows: Vec<CompareRow>,
}

/// `stats A B`: two profiles side by side.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub a: PathBuf,
    pub b: PathBuf,
    pub gpu_time_a: i64,
    pub gpu_time_b: i64,
    pub sections: Vec<CompareSection>,
}

/// Compare two profiles' statistics, computed with `top: 0` (every name); keep `top` names per
/// kind (0: all).
pub fn compare(a: &Stats, b: &Stats, top: usize) -> Comparison {
    let mut sections = Vec::new();
    for kind in Kind::ALL {
        let sa = a.sections.iter().find(|s| s.kind == kind);
        let sb = b.sections.iter().find(|s| s.kind == kind);
        if sa.is_none() && sb.is_none() {
            continue;
        }
        let mut by_name: std::collections::BTreeMap<&str, CompareRow> = Default::default();
        for (sec, is_a) in [(sa, true), (sb, false)] {
            for r in sec.map(|s| s.rows.as_slice()).unwrap_or_default() {
                let e = by_name.entry(&r.name).or_insert_with(|| CompareRow {
                    name: r.name.clone(),
                    a: None,
                    b: None,
                });
                let v = Some((r.count, r.total));
                if is_a { e.a = v } else { e.b = v }
            }
        }
        let names = by_name.len() as u64;
        let mut rows: Vec<CompareRow> = by_name.into_values().collect();
        rows.sort_by(|x, y| {
            let kx = x.total_a().max(x.total_b());
            let ky = y.total_a().max(y.total_b());
            ky.cmp(&kx).then_with(|| x.name.cmp(&y.name))
        });
        if top > 0 {
            rows.truncate(top);
        }
        let totals = |s: Option<&Section>| s.map_or((0, 0), |s| (s.count, s.total));
        sections.push(CompareSection {
            kind,
            a: totals(sa),
            b: totals(sb),
            names,
            rows,
        });
    }
    Comparison {
        a: a.file.clone(),
        b: b.file.clone(),
        gpu_time_a: a.gpu_time,
        gpu_time_b: b.gpu_time,
        sections,
    }
}

/// A change in percent for a table: `+12.5%`, `-3.0%`, `new` (A had none).
fn fmt_change_percent(a: i64, b: i64) -> String {
    let p = change_percent(a, b);
    if p.is_finite() {
        format!("{p:+.1}%")
    } else if b > 0 {
        "new".into()
    } else {
        "-".into()
    }
}

impl Comparison {
    pub fn render(&self, output: Output, unit: Unit) -> String {
        output.print(|| self.table(unit), || self.csv(), || self.json())
    }

    fn table(&self, unit: Unit) -> String {
        let u = unit.as_str();
        let signed = |ns: i64| {
            let v = unit.fmt_int(ns);
            if ns > 0 { format!("+{v}") } else { v }
        };
        let mut s = format!(
            "A: {}\nB: {}\nGPU time (kernels + memory operations): A {} {u}, B {} {u}, change {} {u} ({})\n",
            self.a.display(),
            self.b.display(),
            unit.fmt_int(self.gpu_time_a),
            unit.fmt_int(self.gpu_time_b),
            signed(self.gpu_time_b - self.gpu_time_a),
            fmt_change_percent(self.gpu_time_a, self.gpu_time_b),
        );
        for sec in &self.sections {
            s.push_str(&format!(
                "\n{}: A {} events, {} {u}; B {} events, {} {u}; change {} {u} ({})\n",
                sec.kind.title(),
                crate::workflow::group_digits(&sec.a.0.to_string()),
                unit.fmt_int(sec.a.1),
                crate::workflow::group_digits(&sec.b.0.to_string()),
                unit.fmt_int(sec.b.1),
                signed(sec.b.1 - sec.a.1),
                fmt_change_percent(sec.a.1, sec.b.1),
            ));
            if sec.rows.is_empty() {
                s.push_str("  (none)\n");
                continue;
            }
            let (ta, tb, ch) = (
                format!("Total A ({u})"),
                format!("Total B ({u})"),
                format!("Change ({u})"),
            );
            let mut t = Table::new(&[
                ("Count A", true),
                ("Count B", true),
                (&ta, true),
                (&tb, true),
                (&ch, true),
                ("Change %", true),
                ("Name", false),
            ]);
            let cell = |v: Option<(u64, i64)>, count: bool| match v {
                None => "-".to_string(),
                Some((c, _)) if count => crate::workflow::group_digits(&c.to_string()),
                Some((_, t)) => unit.fmt_int(t),
            };
            for r in &sec.rows {
                t.rows.push(vec![
                    cell(r.a, true),
                    cell(r.b, true),
                    cell(r.a, false),
                    cell(r.b, false),
                    signed(r.change()),
                    match (r.a, r.b) {
                        (Some(_), None) => "gone".into(),
                        _ => fmt_change_percent(r.total_a(), r.total_b()),
                    },
                    r.name.clone(),
                ]);
            }
            s.push_str(&t.render());
            s.push_str(&super::render::more_names(sec.rows.len(), sec.names));
        }
        s
    }

    fn csv(&self) -> String {
        let mut s = csv_line(&[
            "kind",
            "name",
            "count_a",
            "count_b",
            "total_a_ns",
            "total_b_ns",
            "change_ns",
            "change_percent",
        ]);
        let opt = |v: Option<u64>| v.map_or_else(String::new, |x| x.to_string());
        let opt_i = |v: Option<i64>| v.map_or_else(String::new, |x| x.to_string());
        for sec in &self.sections {
            for r in &sec.rows {
                s.push_str(&csv_line(&[
                    sec.kind.as_str().to_string(),
                    r.name.clone(),
                    opt(r.a.map(|x| x.0)),
                    opt(r.b.map(|x| x.0)),
                    opt_i(r.a.map(|x| x.1)),
                    opt_i(r.b.map(|x| x.1)),
                    r.change().to_string(),
                    plain_f64(r.change_percent()),
                ]));
            }
        }
        s
    }

    pub fn json(&self) -> serde_json::Value {
        let side = |v: Option<(u64, i64)>| {
            v.map_or(
                serde_json::Value::Null,
                |(c, t)| json!({"count": c, "total_ns": t}),
            )
        };
        json!({
            "a": self.a.to_string_lossy(),
            "b": self.b.to_string_lossy(),
            "gpu_time_a_ns": self.gpu_time_a,
            "gpu_time_b_ns": self.gpu_time_b,
            "sections": self.sections.iter().map(|sec| json!({
                "kind": sec.kind.as_str(),
                "a": {"count": sec.a.0, "total_ns": sec.a.1},
                "b": {"count": sec.b.0, "total_ns": sec.b.1},
                "names": sec.names,
                "rows": sec.rows.iter().map(|r| json!({
                    "name": r.name,
                    "a": side(r.a),
                    "b": side(r.b),
                    "change_ns": r.change(),
                    "change_percent": json_f64(r.change_percent()),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}
