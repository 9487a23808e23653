//! `nsys-perfetto stats PROFILE`: the top events of each kind by total time.
//!
//! Per name: count, total, mean, median (the mean of the two middle durations when the count is
//! even), min and max, all in ns, and a percentage:
//! - kernels and memory operations: of all GPU time, the sum of the durations of every kernel,
//!   memcpy and memset row (busy time summed over streams and devices, not wall time);
//! - API calls, NVTX ranges and NVTX GPU projections: of their own kind's total (ranges nest, so
//!   NVTX totals count nested time once per level).
//!
//! NVTX names that differ only in counters are grouped by default ([`super::reports::group_name`]): PyTorch
//! names every range `aten::mul, seq = 45328, op_id = 990726`, so a profile of 19 k ranges had
//! 18 k distinct names and the top of the table taught nothing. `--raw-names` keeps them apart.
//!
//! `stats A B` compares two profiles name by name ([`compare`]): count and total of each, and the
//! change from A to B.

use super::reports::{
    GROUP_NAME_FN, KernelNames, ReportName, ReportOptions, ReportTable, register_group_name,
};
use super::{Export, Kind, Output, Table, Unit, csv_line, json_f64, plain_f64};
use anyhow::Result;
use serde_json::json;
use std::path::{Path, PathBuf};

/// One name's durations.
#[derive(Debug, Clone, PartialEq)]
pub struct StatRow {
    pub name: String,
    pub count: u64,
    pub total: i64,
    pub mean: f64,
    pub median: f64,
    pub min: i64,
    pub max: i64,
    /// Percent of [`Section::basis`].
    pub percent: f64,
}

/// One kind of event: its top names and its totals over all names.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub kind: Kind,
    /// Events of this kind (all names).
    pub count: u64,
    /// Their summed duration, ns.
    pub total: i64,
    /// What percentages are of, in ns: all GPU time for GPU kinds, else [`Section::total`].
    pub basis: i64,
    /// Distinct names (rows beyond `top` included), after grouping.
    pub names: u64,
    /// Distinct names before grouping (= `names` with `--raw-names` and for kinds not grouped).
    pub raw_names: u64,
    /// The top names by total time (ties: more events first, then by name).
    pub rows: Vec<StatRow>,
}

impl Section {
    pub fn basis_label(&self) -> &'static str {
        match self.kind {
            Kind::Kernel | Kind::Memory => "GPU time",
            Kind::Api => "API time",
            Kind::Nvtx => "NVTX time",
            Kind::NvtxGpu => "NVTX GPU time",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub file: PathBuf,
    /// Sum of all kernel, memcpy and memset durations, ns.
    pub gpu_time: i64,
    /// One section per kind the export has (kinds with no table are left out).
    pub sections: Vec<Section>,
    /// nsys' summary reports, as `nsys stats` computes them ([`super::reports`]): those asked
    /// for, or nsys' default ones; reports whose tables the export lacks are left out.
    pub reports: Vec<ReportTable>,
    /// Rows shown per report in a table (0: all); CSV and JSON hold every row.
    pub top: usize,
    /// One report was asked for: CSV prints it alone, as `nsys stats --report NAME` does.
    pub single_report: bool,
    /// Unified memory CPU page faults per process (most first); empty without faults.
    pub page_faults: Vec<PageFaults>,
    /// The functions CPU samples caught running (leaf frames), most first; empty without
    /// samples.
    pub sampled_functions: Vec<SampledFunction>,
    /// Mean, min and max of each GPU metric per GPU (`GPU_METRICS`); empty without metrics.
    pub gpu_metrics: Vec<MetricSummary>,
}

/// A function and how many CPU samples caught it running (the sample's leaf frame).
#[derive(Debug, Clone, PartialEq)]
pub struct SampledFunction {
    pub function: String,
    pub module: Option<String>,
    pub samples: u64,
    /// Of all samples with a call stack.
    pub percent: f64,
}

/// One GPU metric on one GPU over the capture.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSummary {
    pub gpu: i64,
    pub metric: String,
    pub samples: u64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// The unit of its values ([`metric_unit`]).
    pub unit: &'static str,
}

/// The unit a GPU metric's values are shown with: the trace's unit
/// ([`crate::nsys::metrics::metric_unit`]), "count" for plain counts.
pub fn metric_unit(name: &str) -> &'static str {
    match crate::nsys::metrics::metric_unit(name) {
        "" => "count",
        u => u,
    }
}

/// Leaf frames of `SAMPLING_CALLCHAINS` (`stackDepth` 0) by function, most first.
fn sampled_functions(ex: &Export, top: usize) -> Result<Vec<SampledFunction>> {
    const T: &str = "SAMPLING_CALLCHAINS";
    if !ex.schema.has_columns(T, &["id", "symbol", "stackDepth"]) {
        return Ok(Vec::new());
    }
    let total: i64 = ex.conn.query_row(
        &format!("SELECT count(*) FROM {T} WHERE stackDepth = 0"),
        [],
        |r| r.get(0),
    )?;
    let strings = ex.schema.has_columns("StringIds", &["id", "value"]);
    let (name, module) = if strings {
        (
            "coalesce((SELECT value FROM StringIds WHERE id = f.symbol), '(unknown)')",
            "(SELECT value FROM StringIds WHERE id = f.module)",
        )
    } else {
        ("'(unknown)'", "NULL")
    };
    let module_col = if ex.schema.has_column(T, "module") {
        "module"
    } else {
        "NULL"
    };
    let limit = if top == 0 { -1 } else { top as i64 };
    let sql = format!(
        "SELECT {name}, {module}, f.n FROM (SELECT symbol, {module_col} AS module, count(*) AS n \
         FROM {T} WHERE stackDepth = 0 GROUP BY symbol, module) f \
         ORDER BY f.n DESC, f.symbol LIMIT {limit}"
    );
    let mut stmt = ex.conn.prepare(&sql)?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let n: i64 = r.get(2)?;
        out.push(SampledFunction {
            function: r.get(0)?,
            module: r.get(1)?,
            samples: n as u64,
            percent: percent(n, total),
        });
    }
    Ok(out)
}

/// Each GPU metric per GPU, read by the converter's own metrics reader (so `GPU_METRICS` of
/// nsys 2023+ and the "GpuMetrics" `GENERIC_EVENTS` of nsys 2022 both count, the same samples
/// once, wrapped values restored and named as in the trace), aggregated as it streams.
fn gpu_metrics(ex: &Export) -> Result<Vec<MetricSummary>> {
    let mut sink = MetricStats::default();
    crate::nsys::metrics::read(
        &ex.conn,
        &ex.schema,
        &crate::select::Selection::default(),
        &mut sink,
    )?;
    let mut out: Vec<MetricSummary> = sink
        .per_metric
        .into_iter()
        .map(|((gpu, metric), a)| MetricSummary {
            gpu,
            samples: a.n,
            mean: a.sum / a.n as f64,
            min: a.min,
            max: a.max,
            unit: metric_unit(&metric),
            metric,
        })
        .collect();
    out.sort_by(|a, b| (a.gpu, &a.metric).cmp(&(b.gpu, &b.metric)));
    Ok(out)
}

#[derive(Default)]
struct Aggregate {
    n: u64,
    sum: f64,
    min: f64,
    max: f64,
}

/// A sink that keeps count, sum, min and max of each GPU's counters and ignores the rest.
#[derive(Default)]
struct MetricStats {
    per_metric: std::collections::HashMap<(i64, String), Aggregate>,
}

impl crate::model::EventSink for MetricStats {
    fn event(&mut self, _: crate::model::GroupKey, _: &crate::model::Event<'_>) -> Result<()> {
        Ok(())
    }
    fn skip(&mut self, _: &'static str, _: &'static str) {}
    fn note(&mut self, _: &'static str, _: &'static str) {}
    fn naming_row(&mut self, _: &'static str) {}
    fn extra_row(&mut self) {}
    fn counter(
        &mut self,
        key: &crate::model::CounterKey<'_>,
        sample: crate::model::CounterSample,
    ) -> Result<()> {
        let crate::model::CounterOwner::Gpu { device } = key.owner else {
            return Ok(());
        };
        let v = match sample.value {
            crate::model::CounterValue::Int(i) => i as f64,
            crate::model::CounterValue::Double(d) => d,
        };
        let a = match self.per_metric.get_mut(&(device, key.name.to_string())) {
            Some(a) => a,
            None => self
                .per_metric
                .entry((device, key.name.to_string()))
                .or_insert(Aggregate {
                    n: 0,
                    sum: 0.0,
                    min: f64::INFINITY,
                    max: f64::NEG_INFINITY,
                }),
        };
        a.n += 1;
        a.sum += v;
        a.min = a.min.min(v);
        a.max = a.max.max(v);
        Ok(())
    }
    fn cpu_sample(&mut self, _: &crate::model::CpuSample<'_>) -> Result<()> {
        Ok(())
    }
    fn cpu_slice(&mut self, _: &crate::model::CpuSlice) -> Result<()> {
        Ok(())
    }
    fn finish(self) -> Result<crate::summary::Summary> {
        Ok(crate::summary::Summary::default())
    }
}

/// A process's unified memory CPU page faults (`CUDA_UM_CPU_PAGE_FAULT_EVENTS`).
#[derive(Debug, Clone, PartialEq)]
pub struct PageFaults {
    pub pid: i64,
    /// The process's name, as the export names it (`PROCESSES`), when it does.
    pub process: Option<String>,
    pub faults: u64,
    /// Distinct faulting addresses.
    pub addresses: u64,
}

/// Faults per process, most first (ties by pid).
fn page_faults(ex: &Export) -> Result<Vec<PageFaults>> {
    const T: &str = "CUDA_UM_CPU_PAGE_FAULT_EVENTS";
    if !ex.schema.has_columns(T, &["globalPid", "address"]) {
        return Ok(Vec::new());
    }
    let name = if ex.schema.has_columns("PROCESSES", &["globalPid", "name"]) {
        "(SELECT name FROM PROCESSES p WHERE (p.globalPid >> 24) & 16777215 = f.pid \
         AND p.name <> 'nsys-launcher' LIMIT 1)"
    } else {
        "NULL"
    };
    let sql = format!(
        "SELECT f.pid, {name}, f.n, f.a FROM (SELECT (globalPid >> 24) & 16777215 AS pid, \
         count(*) AS n, count(DISTINCT address) AS a FROM {T} GROUP BY pid) f \
         ORDER BY f.n DESC, f.pid"
    );
    let mut stmt = ex.conn.prepare(&sql)?;
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(PageFaults {
            pid: r.get(0)?,
            process: r.get(1)?,
            faults: r.get::<_, i64>(2)? as u64,
            addresses: r.get::<_, i64>(3)? as u64,
        });
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy)]
pub struct StatsOptions {
    /// Rows per section; 0 = all.
    pub top: usize,
    /// Keep NVTX names that differ only in counters apart (no [`super::reports::group_name`]).
    pub raw_names: bool,
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions {
            top: 10,
            raw_names: false,
        }
    }
}

/// Which of nsys' reports `stats` computes, and how.
#[derive(Debug, Clone, Default)]
pub struct ReportChoice {
    /// nsys reports to compute, by name; empty: nsys' default ones.
    pub reports: Vec<ReportName>,
    /// How kernels are named in the kernel reports.
    pub kernel_names: KernelNames,
    /// The kinds of [`Stats::sections`] to compute; `None`: all (the reports need none).
    pub kinds: Option<Vec<Kind>>,
}

/// Compute the statistics of one profile.
pub fn stats(path: &Path, opts: &StatsOptions) -> Result<Stats> {
    let ex = Export::open(path)?;
    stats_of(&ex, path, opts)
}

pub fn stats_of(ex: &Export, path: &Path, opts: &StatsOptions) -> Result<Stats> {
    stats_with(ex, path, opts, &ReportChoice::default())
}

/// [`stats_of`] with a choice of nsys reports.
pub fn stats_with(
    ex: &Export,
    path: &Path,
    opts: &StatsOptions,
    choice: &ReportChoice,
) -> Result<Stats> {
    let mut totals = Vec::new();
    let group = !opts.raw_names;
    if group {
        register_group_name(&ex.conn)?;
    }
    let wanted = |k: &Kind| choice.kinds.as_ref().is_none_or(|v| v.contains(k));
    for kind in Kind::ALL.into_iter().filter(wanted) {
        if let Some(mut d) = ex.durations(kind) {
            let grouped = group && matches!(kind, Kind::Nvtx | Kind::NvtxGpu);
            let raw_d = d.clone();
            if grouped {
                d = format!("SELECT {GROUP_NAME_FN}(key) AS key, alt, dur FROM ({d})");
            }
            let (count, total, names): (i64, i64, i64) = ex.conn.query_row(
                &format!("SELECT count(*), coalesce(sum(dur), 0), count(DISTINCT key) FROM ({d})"),
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            let raw_names: i64 = if grouped {
                ex.conn.query_row(
                    &format!("SELECT count(DISTINCT key) FROM ({raw_d})"),
                    [],
                    |r| r.get(0),
                )?
            } else {
                names
            };
            totals.push((kind, d, count as u64, total, names as u64, raw_names as u64));
        }
    }
    let mut gpu_time: i64 = totals.iter().filter(|t| t.0.is_gpu()).map(|t| t.3).sum();
    if !wanted(&Kind::Kernel) || !wanted(&Kind::Memory) {
        // The sections that sum it were not asked for: sum it alone.
        gpu_time = 0;
        for kind in [Kind::Kernel, Kind::Memory] {
            if let Some(d) = ex.durations(kind) {
                let t: i64 = ex.conn.query_row(
                    &format!("SELECT coalesce(sum(dur), 0) FROM ({d})"),
                    [],
                    |r| r.get(0),
                )?;
                gpu_time += t;
            }
        }
    }
    let mut sections = Vec::new();
    for (kind, d, count, total, names, raw_names) in totals {
        let basis = if kind.is_gpu() { gpu_time } else { total };
        let (join, name, _) = ex.key_names(kind);
        let limit = if opts.top == 0 { -1 } else { opts.top as i64 };
        // Median: number the durations of each name in order; average the middle one or two.
        let sql = format!(
            "WITH r AS (SELECT key, dur, row_number() OVER (PARTITION BY key ORDER BY dur) AS rn, \
               count(*) OVER (PARTITION BY key) AS n FROM ({d})), \
             g AS (SELECT key, NULL AS alt, count(*) AS cnt, sum(dur) AS total, min(dur) AS mn, max(dur) AS mx, \
               avg(CASE WHEN rn IN ((n + 1) / 2, (n + 2) / 2) THEN dur END) AS med \
               FROM r GROUP BY key) \
             SELECT {name}, a.cnt, a.total, a.mn, a.mx, a.med FROM g a{join} \
             ORDER BY a.total DESC, a.cnt DESC, a.key LIMIT ?1"
        );
        let mut stmt = ex.conn.prepare(&sql)?;
        let mut rows = stmt.query([limit])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let count: i64 = r.get(1)?;
            let total: i64 = r.get(2)?;
            out.push(StatRow {
                name: ex.name_at(kind, r, 0),
                count: count as u64,
                total,
                mean: total as f64 / count as f64,
                median: r.get(5)?,
                min: r.get(3)?,
                max: r.get(4)?,
                percent: percent(total, basis),
            });
        }
        sections.push(Section {
            kind,
            count,
            total,
            basis,
            names,
            raw_names,
            rows: out,
        });
    }
    Ok(Stats {
        file: path.to_path_buf(),
        gpu_time,
        sections,
        reports: {
            super::reports::register_functions(&ex.conn)?;
            let ropts = ReportOptions {
                kernel_names: choice.kernel_names,
                group_nvtx: group,
            };
            let names: Vec<ReportName> = if choice.reports.is_empty() {
                super::reports::REPORTS
                    .iter()
                    .copied()
                    .filter(|r| r.default)
                    .collect()
            } else {
                choice.reports.clone()
            };
            let mut out = Vec::new();
            for r in names {
                if let Some(t) = super::reports::report(ex, r, &ropts)? {
                    out.push(t);
                }
            }
            out
        },
        top: opts.top,
        single_report: choice.reports.len() == 1,
        page_faults: page_faults(ex)?,
        sampled_functions: sampled_functions(ex, opts.top)?,
        gpu_metrics: gpu_metrics(ex)?,
    })
}

/// One nsys report in our table look: its title, its columns with units, `top` rows (0: all).
pub fn report_table(r: &ReportTable, unit: Unit, top: usize) -> String {
    let mut s = format!(
        "\n{} ({}): {} rows\n",
        r.title,
        r.name,
        super::group_digits(&r.rows.len().to_string())
    );
    if r.rows.is_empty() {
        s.push_str("  (none)\n");
        return s;
    }
    let headers: Vec<(String, bool)> = r
        .columns
        .iter()
        .map(|c| (c.header(unit), c.numeric()))
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
                .map(|(v, c)| v.table(c.unit, unit))
                .collect(),
        );
    }
    s.push_str(&t.render());
    if shown < r.rows.len() {
        s.push_str(&format!(
            "  ... {} more rows (--top 0 shows all)\n",
            super::group_digits(&(r.rows.len() - shown).to_string())
        ));
    }
    s
}

fn percent(part: i64, whole: i64) -> f64 {
    if whole > 0 {
        part as f64 * 100.0 / whole as f64
    } else {
        0.0
    }
}

impl Stats {
    pub fn render(&self, output: Output, unit: Unit) -> String {
        match output {
            Output::Table => self.table(unit),
            Output::Csv => self.csv(),
            Output::Json => serde_json::to_string_pretty(&self.json()).expect("JSON") + "\n",
        }
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
            super::group_digits(&sec.count.to_string()),
            super::group_digits(&sec.names.to_string()),
            unit.fmt_int(sec.total),
            sec.basis_label(),
        );
        if sec.raw_names != sec.names {
            s.push_str(&format!(
                "  ({} distinct names grouped by removing counters like ', seq = N', ', op_id = N'; --raw-names keeps them)\n",
                super::group_digits(&sec.raw_names.to_string())
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
                super::group_digits(&r.count.to_string()),
                unit.fmt_f64(r.mean),
                unit.fmt_f64(r.median),
                unit.fmt_int(r.min),
                unit.fmt_int(r.max),
                r.name.clone(),
            ]);
        }
        s.push_str(&t.render());
        if (sec.rows.len() as u64) < sec.names {
            s.push_str(&format!(
                "  ... {} more names (--top 0 shows all)\n",
                super::group_digits(&(sec.names - sec.rows.len() as u64).to_string())
            ));
        }
        s
    }

    fn extras_table(&self) -> String {
        let mut s = String::new();
        if !self.page_faults.is_empty() {
            let total: u64 = self.page_faults.iter().map(|p| p.faults).sum();
            s.push_str(&format!(
                "\nUnified memory CPU page faults: {} in {} process{}\n",
                super::group_digits(&total.to_string()),
                self.page_faults.len(),
                if self.page_faults.len() == 1 {
                    ""
                } else {
                    "es"
                }
            ));
            let mut t = Table::new(&[
                ("Faults", true),
                ("Addresses", true),
                ("PID", true),
                ("Process", false),
            ]);
            for p in &self.page_faults {
                t.rows.push(vec![
                    super::group_digits(&p.faults.to_string()),
                    super::group_digits(&p.addresses.to_string()),
                    p.pid.to_string(),
                    p.process.clone().unwrap_or_default(),
                ]);
            }
            s.push_str(&t.render());
        }
        if !self.sampled_functions.is_empty() {
            s.push_str("\nTop sampled functions (CPU samples by their leaf frame)\n");
            let mut t = Table::new(&[
                ("Samples", true),
                ("%", true),
                ("Function", false),
                ("Module", false),
            ]);
            for f in &self.sampled_functions {
                t.rows.push(vec![
                    super::group_digits(&f.samples.to_string()),
                    super::fmt_decimals(f.percent, 1),
                    f.function.clone(),
                    f.module.clone().unwrap_or_default(),
                ]);
            }
            s.push_str(&t.render());
        }
        if !self.gpu_metrics.is_empty() {
            s.push_str("\nGPU metrics per GPU (mean, min, max over the capture)\n");
            let mut t = Table::new(&[
                ("GPU", true),
                ("Samples", true),
                ("Mean", true),
                ("Min", true),
                ("Max", true),
                ("Unit", false),
                ("Metric", false),
            ]);
            for m in &self.gpu_metrics {
                t.rows.push(vec![
                    m.gpu.to_string(),
                    super::group_digits(&m.samples.to_string()),
                    super::fmt_decimals(m.mean, 2),
                    super::fmt_decimals(m.min, 2),
                    super::fmt_decimals(m.max, 2),
                    m.unit.to_string(),
                    m.metric.clone(),
                ]);
            }
            s.push_str(&t.render());
        }
        s
    }

    /// nsys' CSV: one report asked for is exactly what `nsys stats --report NAME --format csv`
    /// prints (nothing when the export lacks its tables); otherwise each report is preceded by
    /// a line `### NAME`.
    fn csv(&self) -> String {
        if self.single_report {
            return self.reports.iter().map(ReportTable::csv).collect();
        }
        let mut s = String::new();
        for r in &self.reports {
            s.push_str(&format!("### {}\n", r.name));
            s.push_str(&r.csv());
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
                "columns": r.columns.iter().map(|c| c.csv_header()).collect::<Vec<_>>(),
                "rows": r.rows.iter().map(|row| row.iter().map(|c| c.json()).collect::<Vec<_>>()).collect::<Vec<_>>(),
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
        match output {
            Output::Table => self.table(unit),
            Output::Csv => self.csv(),
            Output::Json => serde_json::to_string_pretty(&self.json()).expect("JSON") + "\n",
        }
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
                super::group_digits(&sec.a.0.to_string()),
                unit.fmt_int(sec.a.1),
                super::group_digits(&sec.b.0.to_string()),
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
                Some((c, _)) if count => super::group_digits(&c.to_string()),
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
            if (sec.rows.len() as u64) < sec.names {
                s.push_str(&format!(
                    "  ... {} more names (--top 0 shows all)\n",
                    super::group_digits(&(sec.names - sec.rows.len() as u64).to_string())
                ));
            }
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

/// `nsys-perfetto stats PROFILE [PROFILE_B]`.
#[derive(clap::Args, Debug, Clone)]
pub struct StatsArgs {
    /// An nsys SQLite export (.sqlite) or report (.nsys-rep, .qdrep); with a second one, the
    /// two are compared side by side (count, total and change per name, B against A).
    #[arg(value_name = "PROFILE", required = true, num_args = 1..=2)]
    pub profiles: Vec<PathBuf>,
    /// Rows per report in a table, names per kind of event in a comparison (0: all; default
    /// 10). CSV and JSON hold every row unless --top is given.
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// nsys reports to print, by nsys' names (`nsys stats --report`), comma-separated:
    /// cuda_gpu_kern_sum, cuda_api_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum,
    /// nvtx_sum, osrt_sum, um_sum, um_total_sum, um_cpu_page_faults_sum, openacc_sum,
    /// openmp_sum, cuda_gpu_kern_gb_sum, cuda_kern_exec_sum. A kernel report may end in
    /// `:base` or `:mangled`, as in nsys. Default: the ones nsys prints by default.
    #[arg(
        long = "report",
        short = 'r',
        value_name = "NAME[,NAME]",
        value_delimiter = ','
    )]
    pub reports: Vec<String>,
    /// Kernels under their base name (`shortName`, as the trace names their slices) instead of
    /// the demangled one, as nsys' `:base`.
    #[arg(long, conflicts_with = "mangled")]
    pub base: bool,
    /// Kernels under their mangled name where the export has it, as nsys' `:mangled`.
    #[arg(long)]
    pub mangled: bool,
    /// Also show the NVTX ranges projected onto the GPU (the span of the GPU work launched
    /// inside each range; no nsys report has it) in the table. JSON always holds it.
    #[arg(long)]
    pub nvtx_gpu: bool,
    /// Keep NVTX names that differ only in counters (', seq = N', ', op_id = N') apart; by
    /// default they are grouped under the name without them.
    #[arg(long)]
    pub raw_names: bool,
    #[command(flatten)]
    pub out: super::OutputArgs,
}

impl StatsArgs {
    /// The reports asked for, and how kernels are named.
    pub fn choice(&self) -> Result<ReportChoice> {
        let mut kernel_names = if self.base {
            KernelNames::Base
        } else if self.mangled {
            KernelNames::Mangled
        } else {
            KernelNames::Demangled
        };
        let mut reports = Vec::new();
        for r in &self.reports {
            let (name, option) = match r.trim().split_once(':') {
                Some((n, o)) => (n, Some(o)),
                None => (r.trim(), None),
            };
            let Some(rep) = super::reports::report_name(name) else {
                let known: Vec<&str> = super::reports::REPORTS.iter().map(|r| r.name).collect();
                anyhow::bail!("unknown report {name:?} (known: {})", known.join(", "));
            };
            match option {
                None => {}
                Some("base") if super::reports::names_kernels(name) => {
                    kernel_names = KernelNames::Base
                }
                Some("mangled") if super::reports::names_kernels(name) => {
                    kernel_names = KernelNames::Mangled
                }
                Some(o) => anyhow::bail!("report {name}: unknown option {o:?}"),
            }
            if !reports.contains(&rep) {
                reports.push(rep);
            }
        }
        // A table shows the reports (and our own NVTX-on-GPU section when asked), CSV the
        // reports alone; JSON and comparisons hold every section.
        let kinds = match self.out.format() {
            _ if self.profiles.len() > 1 => None,
            Output::Table if self.nvtx_gpu => Some(vec![Kind::NvtxGpu]),
            Output::Table => Some(Vec::new()),
            Output::Csv => Some(Vec::new()),
            Output::Json => None,
        };
        Ok(ReportChoice {
            reports,
            kernel_names,
            kinds,
        })
    }

    pub fn run(&self) -> std::process::ExitCode {
        let table = self.out.format() == Output::Table;
        let top = self.top.unwrap_or(if table { 10 } else { 0 });
        let one = |path: &Path, top: usize, choice: &ReportChoice| -> Result<Stats> {
            let ex = Export::open_with(path, &self.out.export_options()).map_err(|e| {
                anyhow::anyhow!("{}: {}", path.display(), crate::errors::error_line(&e))
            })?;
            stats_with(
                &ex,
                path,
                &StatsOptions {
                    top,
                    raw_names: self.raw_names,
                },
                choice,
            )
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), crate::errors::error_line(&e)))
        };
        let result = (|| -> Result<()> {
            let choice = self.choice()?;
            let text = match self.profiles.as_slice() {
                [a, b] => compare(
                    &one(a, 0, &choice)?,
                    &one(b, 0, &choice)?,
                    self.top.unwrap_or(10),
                )
                .render(self.out.format(), self.out.unit),
                [a] => one(a, top, &choice)?.render(self.out.format(), self.out.unit),
                _ => anyhow::bail!("one or two profiles"),
            };
            self.out.emit(&text)
        })();
        match result {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                crate::say!("error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        }
    }
}
