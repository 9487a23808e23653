//! `nsys-perfetto analyze PROFILE`: the command line and the rendering (text, CSV, JSON) of
//! the findings of nsys' expert rules, which [`nsys_perfetto_read::rules`] runs.

use anyhow::Result;
use nsys_perfetto_read::rules::analyze::analyze_export;
use nsys_perfetto_read::rules::{CSV_COLUMNS, Options, Outcome, RuleReport, Value};
use std::path::Path;

/// Render reports as text (`top` findings per rule, 0: all), CSV or JSON.
pub fn render(
    reports: &[RuleReport],
    opts: &Options,
    top: usize,
    format: super::Output,
    unit: super::Unit,
) -> String {
    let keep = |n: usize| if top == 0 { n } else { n.min(top) };
    match format {
        super::Output::Csv => {
            let mut s = super::csv_line(&CSV_COLUMNS.map(|(c, _)| c));
            for r in reports {
                let f = r.findings();
                for finding in &f[..keep(f.len())] {
                    let mut line = vec![
                        r.rule.name().to_string(),
                        finding.start.to_string(),
                        finding.duration.to_string(),
                    ];
                    line.extend(CSV_COLUMNS[3..].iter().map(|(_, nsys)| {
                        finding
                            .value(r.rule, nsys)
                            .map_or_else(String::new, Value::text)
                    }));
                    s += &super::csv_line(&line);
                }
            }
            s
        }
        super::Output::Json => {
            use serde_json::json;
            let rules: Vec<_> = reports
                .iter()
                .map(|r| {
                    let mut o = json!({
                        "rule": r.rule.name(),
                        "title": r.rule.title(),
                        "explanation": r.rule.explanation(),
                    });
                    match &r.outcome {
                        Outcome::Skipped(why) => o["skipped"] = json!(why),
                        Outcome::Findings(f) => {
                            o["advice"] = json!(if f.is_empty() {
                                r.rule.no_result(opts)
                            } else {
                                r.rule.advice(opts)
                            });
                            o["count"] = json!(f.len());
                            o["findings"] = f[..keep(f.len())]
                                .iter()
                                .map(|x| {
                                    let mut m = serde_json::Map::new();
                                    m.insert("start_ns".into(), json!(x.start));
                                    m.insert("duration_ns".into(), json!(x.duration));
                                    for (c, v) in r.rule.columns().iter().zip(&x.values) {
                                        m.insert(
                                            (*c).into(),
                                            match v {
                                                Value::Null => serde_json::Value::Null,
                                                Value::Int(i) => json!(i),
                                                Value::Real(f) => super::json_f64(*f),
                                                Value::Text(t) => json!(t),
                                            },
                                        );
                                    }
                                    serde_json::Value::Object(m)
                                })
                                .collect();
                        }
                    }
                    o
                })
                .collect();
            let mut s = serde_json::to_string_pretty(&rules).unwrap_or_default();
            s.push('\n');
            s
        }
        super::Output::Table => {
            let mut s = String::new();
            for r in reports {
                let head = format!("{} ({})", r.rule.name(), r.rule.title());
                match &r.outcome {
                    Outcome::Skipped(why) => {
                        s += &format!("{head}: not run: the export {why}\n\n");
                    }
                    Outcome::Findings(f) if f.is_empty() => {
                        s += &format!("{head}: {}\n\n", r.rule.no_result(opts));
                    }
                    Outcome::Findings(f) => {
                        let shown = keep(f.len());
                        s += &format!(
                            "{head}: {} finding{}{}\n\n",
                            f.len(),
                            if f.len() == 1 { "" } else { "s" },
                            if shown < f.len() {
                                format!(", the top {shown} shown (--top 0 for all)")
                            } else {
                                String::new()
                            }
                        );
                        for line in r.rule.advice(opts).lines() {
                            s += format!("  {line}").trim_end();
                            s.push('\n');
                        }
                        s.push('\n');
                        let start = format!("Start ({})", unit.as_str());
                        let dur = format!("Duration ({})", unit.as_str());
                        let mut headers: Vec<(&str, bool)> = vec![(&start, true), (&dur, true)];
                        headers.extend(
                            r.rule
                                .columns()
                                .iter()
                                .map(|c| (*c, !c.ends_with("Name") && !c.ends_with("Kind"))),
                        );
                        let mut t = super::Table::new(&headers);
                        for x in &f[..shown] {
                            let mut row = vec![unit.fmt_int(x.start), unit.fmt_int(x.duration)];
                            row.extend(x.values.iter().map(Value::text));
                            t.rows.push(row);
                        }
                        for line in t.render().lines() {
                            s += &format!("  {line}\n");
                        }
                        s.push('\n');
                    }
                }
            }
            s
        }
    }
}

/// Run the rules on an export, or on a report through its SQLite export (made by nsys, or
/// reused, as for a conversion).
pub fn analyze_profile(
    path: &Path,
    export: &crate::report::export::ExportOptions,
    opts: &Options,
) -> Result<Vec<RuleReport>> {
    let profile = crate::input::prepare(path, export)?;
    analyze_export(profile.export(), opts)
}
