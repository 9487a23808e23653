//! The statistics as a table, CSV or JSON.

use super::{Section, Stats};
use crate::workflow::reports;
use crate::workflow::{Output, Table, Unit, json_f64};
use nsys_perfetto_model::category::Kind;
use nsys_perfetto_read::reports::ReportTable;
use serde_json::json;

/// One nsys report in our table look: its title, its columns with units, `top` rows (0: all).
pub fn report_table(r: &ReportTable, unit: Unit, top: usize) -> String {
    let mut s = format!(
        "\n{} ({}): {} rows\n",
        r.title,
        r.name,
        crate::workflow::group_digits(&r.rows.len().to_string())
    );
    if r.rows.is_empty() {
        s.push_str("  (none)\n");
        return s;
    }
    let headers: Vec<(String, bool)> = r
        .columns
        .iter()
        .map(|c| (reports::header(c, unit), reports::numeric(c)))
        .collect();
    let mut t = Table::new(
        &headers
            .iter()
            .map(|(h, n)| (h.as_str(), *n))
            .collect::<Vec<_>>(),
    );
    let shown = if top == 0 {
        r.rows.len()
    } else {
        top.min(r.rows.len())
    };
    for row in &r.rows[..shown] {
        t.rows.push(
            row.iter()
                .zip(&r.columns)
                .map(|(v, c)| reports::cell_table(v, c.unit, unit))
                .collect(),
        );
    }
    s.push_str(&t.render());
    if shown < r.rows.len() {
        s.push_str(&format!(
            "  ... {} more rows (--top 0 shows all)\n",
            crate::workflow::group_digits(&(r.rows.len() - shown).to_string())
        ));
    }
    s
}

impl Stats {
    pub fn render(&self, output: Output, unit: Unit) -> String {
        output.print(|| self.table(unit), || self.csv(), || self.json())
    }

    fn table(&self, unit: Unit) -> String {
        let u = unit.as_str();
        let mut s = format!(
            "{}\nGPU time (kernels + memory operations): {} {u}\n",
            self.file.display(),
            unit.fmt_int(self.gpu_time)
        );
        for r in &self.reports {
            s.push_str(&report_table(r, unit, self.top));
        }
        // The NVTX projection onto the GPU has no nsys report of this form: our own section.
        for sec in self.sections.iter().filter(|s| s.kind == Kind::NvtxGpu) {
            s.push_str(&self.section_table(sec, unit));
        }
        s.push_str(&self.extras_table());
        s
    }

    fn section_table(&self, sec: &Section, unit: Unit) -> String {
        let u = unit.as_str();
        let mut s = format!(
            "\n{}: {} events, {} names, total {} {u}; % of {}\n",
            sec.kind.title(),
            crate::workflow::group_digits(&sec.count.to_string()),
            crate::workflow::group_digits(&sec.names.to_string()),
            unit.fmt_int(sec.total),
            sec.basis_label(),
        );
        if sec.raw_names != sec.names {
            s.push_str(&format!(
                "  ({} distinct names grouped by removing counters like ', seq = N', ', op_id = N'; --raw-names keeps them)\n",
                crate::workflow::group_digits(&sec.raw_names.to_string())
            ));
        }
        if sec.rows.is_empty() {
            s.push_str("  (none)\n");
            return s;
        }
        let (total_h, mean_h, med_h, min_h, max_h) = (
            format!("Total ({u})"),
            format!("Mean ({u})"),
            format!("Median ({u})"),
            format!("Min ({u})"),
            format!("Max ({u})"),
        );
        let mut t = Table::new(&[
            ("Time %", true),
            (&total_h, true),
            ("Count", true),
            (&mean_h, true),
            (&med_h, true),
            (&min_h, true),
            (&max_h, true),
            ("Name", false),
        ]);
        for r in &sec.rows {
            t.rows.push(vec![
                format!("{:.1}", r.percent),
                unit.fmt_int(r.total),
                crate::workflow::group_digits(&r.count.to_string()),
                unit.fmt_f64(r.mean),
                unit.fmt_f64(r.median),
                unit.fmt_int(r.min),
                unit.fmt_int(r.max),
                r.name.clone(),
            ]);
        }
        s.push_str(&t.render());
        s.push_str(&more_names(sec.rows.len(), sec.names));
        s
    }

    fn extras_table(&self) -> String {
        let mut s = String::new();
        if !self.page_faults.is_empty() {
            let total: u64 = self.page_faults.iter().map(|p| p.faults).sum();
            let title = format!(
                "Unified memory CPU page faults: {} in {} process{}",
                crate::workflow::group_digits(&total.to_string()),
                self.page_faults.len(),
                if self.page_faults.len() == 1 {
                    ""
                } else {
                    "es"
                }
            );
            let rows = self.page_faults.iter().map(|p| {
                vec![
                    crate::workflow::group_digits(&p.faults.to_string()),
                    crate::workflow::group_digits(&p.addresses.to_string()),
                    p.pid.to_string(),
                    p.process.clone().unwrap_or_default(),
                ]
            });
            let (numbers, texts) = (["Faults", "Addresses", "PID"], ["Process"]);
            s.push_str(&titled_table(&title, &numbers, &texts, rows));
        }
        if !self.sampled_functions.is_empty() {
            let rows = self.sampled_functions.iter().map(|f| {
                vec![
                    crate::workflow::group_digits(&f.samples.to_string()),
                    crate::workflow::fmt_decimals(f.percent, 1),
                    f.function.clone(),
                    f.module.clone().unwrap_or_default(),
                ]
            });
            let title = "Top sampled functions (CPU samples by their leaf frame)";
            let (numbers, texts) = (["Samples", "%"], ["Function", "Module"]);
            s.push_str(&titled_table(title, &numbers, &texts, rows));
        }
        if !self.gpu_metrics.is_empty() {
            let rows = self.gpu_metrics.iter().map(|m| {
                vec![
                    m.gpu.to_string(),
                    crate::workflow::group_digits(&m.samples.to_string()),
                    crate::workflow::fmt_decimals(m.mean, 2),
                    crate::workflow::fmt_decimals(m.min, 2),
                    crate::workflow::fmt_decimals(m.max, 2),
                    m.unit.to_string(),
                    m.metric.clone(),
                ]
            });
            let title = "GPU metrics per GPU (mean, min, max over the capture)";
            let numbers = ["GPU", "Samples", "Mean", "Min", "Max"];
            let texts = ["Unit", "Metric"];
            s.push_str(&titled_table(title, &numbers, &texts, rows));
        }
        s
    }

    /// nsys' CSV: one report asked for is exactly what `nsys stats --report NAME --format csv`
    /// prints (nothing when the export lacks its tables); otherwise each report is preceded by
    /// a line `### NAME`.
    fn csv(&self) -> String {
        if self.single_report {
            return self.reports.iter().map(reports::csv).collect();
        }
        let mut s = String::new();
        for r in &self.reports {
            s.push_str(&format!("### {}\n", r.name));
            s.push_str(&reports::csv(r));
        }
        s
    }

    pub fn json(&self) -> serde_json::Value {
        json!({
            "file": self.file.to_string_lossy(),
            "gpu_time_ns": self.gpu_time,
            "sections": self.sections.iter().map(|sec| json!({
                "kind": sec.kind.as_str(),
                "count": sec.count,
                "total_ns": sec.total,
                "names": sec.names,
                "raw_names": sec.raw_names,
                "percent_of": sec.basis_label(),
                "percent_basis_ns": sec.basis,
                "rows": sec.rows.iter().map(|r| json!({
                    "name": r.name,
                    "count": r.count,
                    "total_ns": r.total,
                    "mean_ns": json_f64(r.mean),
                    "median_ns": json_f64(r.median),
                    "min_ns": r.min,
                    "max_ns": r.max,
                    "percent": json_f64(r.percent),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "reports": self.reports.iter().map(|r| json!({
                "report": r.name,
                "title": r.title,
                "columns": r.columns.iter().map(reports::csv_header).collect::<Vec<_>>(),
                "rows": r.rows.iter().map(|row| row.iter().map(reports::cell_json).collect::<Vec<_>>()).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "um_cpu_page_faults": self.page_faults.iter().map(|p| json!({
                "pid": p.pid,
                "process": p.process,
                "faults": p.faults,
                "addresses": p.addresses,
            })).collect::<Vec<_>>(),
            "sampled_functions": self.sampled_functions.iter().map(|f| json!({
                "function": f.function,
                "module": f.module,
                "samples": f.samples,
                "percent": json_f64(f.percent),
            })).collect::<Vec<_>>(),
            "gpu_metrics": self.gpu_metrics.iter().map(|m| json!({
                "gpu": m.gpu,
                "metric": m.metric,
                "samples": m.samples,
                "mean": json_f64(m.mean),
                "min": json_f64(m.min),
                "max": json_f64(m.max),
                "unit": m.unit,
            })).collect::<Vec<_>>(),
        })
    }
}

/// A table under its title line (after a blank line), as each extra section prints: its number
/// columns (right-aligned) first, then its text columns.
fn titled_table(
    title: &str,
    numbers: &[&str],
    texts: &[&str],
    rows: impl Iterator<Item = Vec<String>>,
) -> String {
    let columns: Vec<(&str, bool)> = numbers
        .iter()
        .map(|h| (*h, true))
        .chain(texts.iter().map(|h| (*h, false)))
        .collect();
    let mut t = Table::new(&columns);
    t.rows.extend(rows);
    format!("\n{title}\n{}", t.render())
}

/// The line under a table cut to `--top`: how many of its `names` the `shown` rows left out
/// (nothing when none were).
pub(super) fn more_names(shown: usize, names: u64) -> String {
    match names.checked_sub(shown as u64) {
        Some(more) if more > 0 => format!(
            "  ... {} more names (--top 0 shows all)\n",
            crate::workflow::group_digits(&more.to_string())
        ),
        _ => String::new(),
    }
}
