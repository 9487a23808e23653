//! `nsys-perfetto stats PROFILE`: the top events of each kind by total time.
//!
//! Per name: count, total, mean, median (the mean of the two middle durations when the count is
//! even), min and max, all in ns, and a percentage:
//! - kernels and memory operations: of all GPU time, the sum of the durations of every kernel,
//!   memcpy and memset row (busy time summed over streams and devices, not wall time);
//! - API calls, NVTX ranges and NVTX GPU projections: of their own kind's total (ranges nest, so
//!   NVTX totals count nested time once per level).

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
    /// Distinct names (rows beyond `top` included).
    pub names: u64,
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
    /// Unified memory CPU page faults per process (most first); empty without faults.
    pub page_faults: Vec<PageFaults>,
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
}

impl Default for StatsOptions {
    fn default() -> Self {
        StatsOptions { top: 10 }
    }
}

/// Compute the statistics of one profile.
pub fn stats(path: &Path, opts: &StatsOptions) -> Result<Stats> {
    let ex = Export::open(path)?;
    stats_of(&ex, path, opts)
}

pub fn stats_of(ex: &Export, path: &Path, opts: &StatsOptions) -> Result<Stats> {
    let mut totals = Vec::new();
    for kind in Kind::ALL {
        if let Some(d) = ex.durations(kind) {
            let (count, total, names): (i64, i64, i64) = ex.conn.query_row(
                &format!("SELECT count(*), coalesce(sum(dur), 0), count(DISTINCT key) FROM ({d})"),
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            totals.push((kind, d, count as u64, total, names as u64));
        }
    }
    let gpu_time: i64 = totals.iter().filter(|t| t.0.is_gpu()).map(|t| t.3).sum();
    let mut sections = Vec::new();
    for (kind, d, count, total, names) in totals {
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
            rows: out,
        });
    }
    Ok(Stats {
        file: path.to_path_buf(),
        gpu_time,
        sections,
        page_faults: page_faults(ex)?,
    })
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
        for sec in &self.sections {
            s.push_str(&format!(
                "\n{}: {} events, {} names, total {} {u}; % of {}\n",
                sec.kind.title(),
                super::group_digits(&sec.count.to_string()),
                super::group_digits(&sec.names.to_string()),
                unit.fmt_int(sec.total),
                sec.basis_label(),
            ));
            if sec.rows.is_empty() {
                s.push_str("  (none)\n");
                continue;
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
        }
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
        s
    }

    fn csv(&self) -> String {
        let mut s = csv_line(&[
            "kind",
            "name",
            "count",
            "total_ns",
            "mean_ns",
            "median_ns",
            "min_ns",
            "max_ns",
            "percent",
            "percent_of",
        ]);
        for sec in &self.sections {
            for r in &sec.rows {
                s.push_str(&csv_line(&[
                    sec.kind.as_str().to_string(),
                    r.name.clone(),
                    r.count.to_string(),
                    r.total.to_string(),
                    plain_f64(r.mean),
                    plain_f64(r.median),
                    r.min.to_string(),
                    r.max.to_string(),
                    plain_f64(r.percent),
                    sec.basis_label().to_string(),
                ]));
            }
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
            "um_cpu_page_faults": self.page_faults.iter().map(|p| json!({
                "pid": p.pid,
                "process": p.process,
                "faults": p.faults,
                "addresses": p.addresses,
            })).collect::<Vec<_>>(),
        })
    }
}

/// `nsys-perfetto stats PROFILE`.
#[derive(clap::Args, Debug, Clone)]
pub struct StatsArgs {
    /// An nsys SQLite export (.sqlite) or report (.nsys-rep, .qdrep).
    #[arg(value_name = "PROFILE")]
    pub profile: PathBuf,
    /// Names per kind of event (0: all).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    #[command(flatten)]
    pub out: super::OutputArgs,
}

impl StatsArgs {
    pub fn run(&self) -> std::process::ExitCode {
        let result = (|| -> Result<()> {
            let ex = Export::open_with(&self.profile, &self.out.export_options())?;
            let st = stats_of(&ex, &self.profile, &StatsOptions { top: self.top })?;
            self.out.emit(&st.render(self.out.format(), self.out.unit))
        })();
        match result {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                crate::say!("error: {}: {e:#}", self.profile.display());
                std::process::ExitCode::FAILURE
            }
        }
    }
}
