//! The statistics of one profile, read from its export.

use super::{
    MetricSummary, PageFaults, ReportChoice, SampledFunction, Section, StatRow, Stats,
    StatsOptions, metric_unit,
};
use crate::input;
use crate::workflow::name_at;
use anyhow::Result;
use nsys_perfetto_model::category::Kind;
use nsys_perfetto_read::reports::functions::{register_functions, register_group_name};
use nsys_perfetto_read::reports::totals;
use nsys_perfetto_read::reports::{self, ReportName, ReportOptions};
use nsys_perfetto_read::source::Export;
use std::path::Path;

/// Leaf frames of `SAMPLING_CALLCHAINS` (`stackDepth` 0) by function, most first.
fn sampled_functions(ex: &Export, top: usize) -> Result<Vec<SampledFunction>> {
    let Some((count, by_function)) = totals::sampled_functions(&ex.schema, top) else {
        return Ok(Vec::new());
    };
    let total: i64 = ex.conn.query_row(&count, [], |r| r.get(0))?;
    let mut stmt = ex.conn.prepare(&by_function)?;
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
    nsys_perfetto_read::metrics::read(
        &ex.conn,
        &ex.schema,
        &nsys_perfetto_model::select::Selection::default(),
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

impl nsys_perfetto_model::model::EventSink for MetricStats {
    fn event(
        &mut self,
        _: nsys_perfetto_model::model::GroupKey,
        _: &nsys_perfetto_model::model::Event<'_>,
    ) -> Result<()> {
        Ok(())
    }
    fn skip(&mut self, _: &'static str, _: &'static str) {}
    fn note(&mut self, _: &'static str, _: &'static str) {}
    fn naming_row(&mut self, _: &'static str) {}
    fn extra_row(&mut self) {}
    fn counter(
        &mut self,
        key: &nsys_perfetto_model::model::CounterKey<'_>,
        sample: nsys_perfetto_model::model::CounterSample,
    ) -> Result<()> {
        let nsys_perfetto_model::model::CounterOwner::Gpu { device } = key.owner else {
            return Ok(());
        };
        let v = match sample.value {
            nsys_perfetto_model::model::CounterValue::Int(i) => i as f64,
            nsys_perfetto_model::model::CounterValue::Double(d) => d,
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
    fn cpu_sample(&mut self, _: &nsys_perfetto_model::model::CpuSample<'_>) -> Result<()> {
        Ok(())
    }
    fn cpu_slice(&mut self, _: &nsys_perfetto_model::model::CpuSlice) -> Result<()> {
        Ok(())
    }
    fn finish(self) -> Result<nsys_perfetto_model::summary::Summary> {
        Ok(nsys_perfetto_model::summary::Summary::default())
    }
}

/// Faults per process, most first (ties by pid).
fn page_faults(ex: &Export) -> Result<Vec<PageFaults>> {
    let Some(sql) = totals::page_faults(&ex.schema) else {
        return Ok(Vec::new());
    };
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

/// Compute the statistics of one profile.
pub fn stats(path: &Path, opts: &StatsOptions) -> Result<Stats> {
    let quiet = crate::report::export::ExportOptions {
        quiet: true,
        ..Default::default()
    };
    let opened = input::open(path, &quiet, true)?;
    stats_of(&opened.export, path, opts)
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
        if let Some(mut d) = ex.events().durations(kind) {
            let grouped = group && matches!(kind, Kind::Nvtx | Kind::NvtxGpu);
            let raw_d = d.clone();
            if grouped {
                d = totals::grouped(&d);
            }
            let (count, total, names): (i64, i64, i64) =
                ex.conn.query_row(&totals::count_total_names(&d), [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?;
            let raw_names: i64 = if grouped {
                ex.conn
                    .query_row(&totals::names(&raw_d), [], |r| r.get(0))?
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
            if let Some(d) = ex.events().durations(kind) {
                let t: i64 = ex.conn.query_row(&totals::total(&d), [], |r| r.get(0))?;
                gpu_time += t;
            }
        }
    }
    let mut sections = Vec::new();
    for (kind, d, count, total, names, raw_names) in totals {
        let basis = if kind.is_gpu() { gpu_time } else { total };
        let limit = if opts.top == 0 { -1 } else { opts.top as i64 };
        let sql = ex.events().by_name(kind, &d);
        let mut stmt = ex.conn.prepare(&sql)?;
        let mut rows = stmt.query([limit])?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let count: i64 = r.get(1)?;
            let total: i64 = r.get(2)?;
            out.push(StatRow {
                name: name_at(r, 0),
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
            register_functions(&ex.conn)?;
            let ropts = ReportOptions {
                kernel_names: choice.kernel_names,
                group_nvtx: group,
                quartiles: false,
            };
            let names: Vec<ReportName> = if choice.reports.is_empty() {
                reports::REPORTS
                    .iter()
                    .copied()
                    .filter(|r| r.default)
                    .collect()
            } else {
                choice.reports.clone()
            };
            let mut out = Vec::new();
            for r in names {
                if let Some(t) = reports::report(&ex.conn, &ex.schema, r, &ropts)? {
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

fn percent(part: i64, whole: i64) -> f64 {
    if whole > 0 {
        part as f64 * 100.0 / whole as f64
    } else {
        0.0
    }
}
