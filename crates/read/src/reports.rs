//! nsys' own summary reports (`nsys stats -r NAME`), computed the way nsys 2023.4 computes them:
//! the same SQL over the same tables (its report scripts, `target-linux-x64/reports/*.py`), with
//! nsys' SQL functions ([`functions`]). Each report gives the same rows under the same names, in
//! the same order, with the same columns as `nsys stats --format csv`: a column's unit comes from
//! its name's suffix in nsys' SQL (`:dur_ns` a time, `:ratio_%` a percentage, `:mem_B` a size).
//! The app renders them.
//!
//! A report whose tables the export lacks is left out, as nsys skips it.

pub mod functions;
pub mod totals;

use crate::names::nvtx_type::{
    DOMAIN_CREATE, NVTXT_PUSH_POP, NVTXT_START_END, PUSH_POP, START_END,
};
use crate::names::{KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME};
use crate::schema::Schema;
use anyhow::Result;
use functions::{GROUP_NAME_FN, MEDIAN_FN, QUARTILE_FN, ROUND_FN, STDEV_FN};
use rusqlite::Connection;

/// A report nsys knows, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportName {
    pub name: &'static str,
    /// nsys' title of the report (`display_name`).
    pub title: &'static str,
    /// Printed by `nsys stats` without `--report`.
    pub default: bool,
}

/// Every report computed here, in the order nsys prints its default ones.
pub const REPORTS: [ReportName; 15] = [
    ReportName {
        name: "nvtx_sum",
        title: "NVTX Range Summary",
        default: true,
    },
    ReportName {
        name: "osrt_sum",
        title: "OS Runtime Summary",
        default: true,
    },
    ReportName {
        name: "cuda_api_sum",
        title: "CUDA API Summary",
        default: true,
    },
    ReportName {
        name: "cuda_gpu_kern_sum",
        title: "CUDA GPU Kernel Summary",
        default: true,
    },
    ReportName {
        name: "cuda_gpu_mem_time_sum",
        title: "CUDA GPU MemOps Summary (by Time)",
        default: true,
    },
    ReportName {
        name: "cuda_gpu_mem_size_sum",
        title: "CUDA GPU MemOps Summary (by Size)",
        default: true,
    },
    ReportName {
        name: "openmp_sum",
        title: "OpenMP Summary",
        default: true,
    },
    ReportName {
        name: "um_sum",
        title: "Unified Memory Analysis Summary",
        default: true,
    },
    ReportName {
        name: "um_total_sum",
        title: "Unified Memory Totals Summary",
        default: true,
    },
    ReportName {
        name: "um_cpu_page_faults_sum",
        title: "Unified Memory CPU Page Faults Summary",
        default: true,
    },
    ReportName {
        name: "openacc_sum",
        title: "OpenACC Summary",
        default: true,
    },
    ReportName {
        name: "cuda_gpu_kern_gb_sum",
        title: "CUDA GPU Kernel/Grid/Block Summary",
        default: false,
    },
    ReportName {
        name: "cuda_kern_exec_sum",
        title: "CUDA Kernel Launch & Exec Time Summary",
        default: false,
    },
    ReportName {
        name: "nvtx_gpu_proj_sum",
        title: "NVTX GPU Projection Summary",
        default: false,
    },
    ReportName {
        name: "nvtx_kern_sum",
        title: "NVTX Range Kernel Summary",
        default: false,
    },
];

/// Whether a report lists kernels (and takes nsys' `:base` and `:mangled` options).
pub fn names_kernels(name: &str) -> bool {
    matches!(
        name,
        "cuda_gpu_kern_sum" | "cuda_gpu_kern_gb_sum" | "cuda_kern_exec_sum" | "nvtx_kern_sum"
    )
}

/// Look a report up by its nsys name.
pub fn report_name(name: &str) -> Option<ReportName> {
    REPORTS.iter().copied().find(|r| r.name == name)
}

/// Which name a kernel is listed under (nsys' `:base` and `:mangled` report options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelNames {
    /// The demangled name with its template arguments and parameters (nsys' default).
    #[default]
    Demangled,
    /// The function's base name (`shortName`), as the trace names kernel slices.
    Base,
    /// The mangled name, where the export has it (else the demangled one, as nsys).
    Mangled,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct ReportOptions {
    pub kernel_names: KernelNames,
    /// Group NVTX names that differ only in counters ([`functions::group_name`]).
    pub group_nvtx: bool,
    /// Add the quartiles nsys computes but `nsys stats` hides (`_Q1`, `_Q3`), as columns `Q1`
    /// and `Q3` after the others: `nsys recipe` reads them.
    pub quartiles: bool,
}

/// What a column holds, from the suffix of its name in nsys' SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnUnit {
    Plain,
    /// `:ratio_%`, printed with one decimal.
    Percent,
    /// `:dur_ns`, a time in ns.
    Ns,
    /// `:mem_B`, bytes, printed in MB (10^6 bytes) with three decimals.
    Bytes,
    /// `:thru_B`, bytes per second, printed in MB/s with three decimals.
    BytesPerSecond,
    /// `:addr_uint`, an address.
    Address,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// The name without its unit ("Total Time").
    pub name: String,
    pub unit: ColumnUnit,
}

impl Column {
    fn parse(alias: &str) -> Column {
        let (name, unit) = match alias.rsplit_once(':') {
            Some((n, "ratio_%")) => (n, ColumnUnit::Percent),
            Some((n, "dur_ns")) => (n, ColumnUnit::Ns),
            Some((n, "mem_B")) => (n, ColumnUnit::Bytes),
            Some((n, "thru_B")) => (n, ColumnUnit::BytesPerSecond),
            Some((n, "addr_uint")) => (n, ColumnUnit::Address),
            _ => (alias, ColumnUnit::Plain),
        };
        Column {
            name: name.to_string(),
            unit,
        }
    }
}

/// One value of a report.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl Cell {
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Cell::Int(i) => Some(*i as f64),
            Cell::Real(r) => Some(*r),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Cell::Text(t) => Some(t),
            _ => None,
        }
    }
}

/// One report's result.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportTable {
    /// nsys' name of the report (`cuda_gpu_kern_sum`).
    pub name: &'static str,
    pub title: &'static str,
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Cell>>,
}

impl ReportTable {
    /// The index of the column named `name` (without unit).
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

/// The SQL expression naming a memcpy row `m` by its copy kind, as nsys does.
fn memcpy_name_sql(s: &Schema) -> (String, String) {
    let kind = s.col_of(MEMCPY, "m", "copyKind");
    if s.has_columns("ENUM_CUDA_MEMCPY_OPER", &["id", "label"]) {
        (
            format!(" JOIN main.ENUM_CUDA_MEMCPY_OPER mos ON mos.id = {kind}"),
            "'[CUDA memcpy ' || mos.label || ']'".into(),
        )
    } else {
        let cases: String = (0..=13)
            .map(|k| format!(" WHEN {k} THEN '{}'", memcpy_label(k)))
            .collect();
        (
            String::new(),
            format!("'[CUDA memcpy ' || (CASE {kind}{cases} ELSE 'Unknown' END) || ']'"),
        )
    }
}

/// Columns and rows of one query whose column names carry nsys' unit suffixes; columns whose
/// name starts with `_` are left out, as nsys does.
fn run_query(
    conn: &Connection,
    name: &'static str,
    title: &'static str,
    sql: &str,
) -> Result<ReportTable> {
    let mut stmt = conn.prepare(sql)?;
    let keep: Vec<usize> = (0..stmt.column_count())
        .filter(|&i| !stmt.column_name(i).is_ok_and(|n| n.starts_with('_')))
        .collect();
    let columns = keep
        .iter()
        .map(|&i| Column::parse(stmt.column_name(i).unwrap_or("")))
        .collect();
    let mut rows = Vec::new();
    let mut q = stmt.query([])?;
    while let Some(r) = q.next()? {
        let mut row = Vec::with_capacity(keep.len());
        for &i in &keep {
            use rusqlite::types::ValueRef;
            row.push(match r.get_ref(i)? {
                ValueRef::Null => Cell::Null,
                ValueRef::Integer(v) => Cell::Int(v),
                ValueRef::Real(v) => Cell::Real(v),
                ValueRef::Text(t) | ValueRef::Blob(t) => {
                    Cell::Text(crate::cells::utf8(t).into_owned())
                }
            });
        }
        rows.push(row);
    }
    Ok(ReportTable {
        name,
        title,
        columns,
        rows,
    })
}

/// The summary columns nsys' duration reports share, over `{expr}` grouped rows (with the
/// quartiles `q1` and `q3` when asked for).
fn dur_aggregates(opts: &ReportOptions, expr: &str) -> String {
    let quartiles = if opts.quartiles {
        format!(", {QUARTILE_FN}({expr}, 1) AS q1, {QUARTILE_FN}({expr}, 3) AS q3")
    } else {
        String::new()
    };
    format!(
        "sum({expr}) AS total, count(*) AS num, avg({expr}) AS avg, {MEDIAN_FN}({expr}) AS med, \
         min({expr}) AS min, max({expr}) AS max, {STDEV_FN}({expr}) AS stddev{quartiles}"
    )
}

/// The output columns of a duration summary: percentage, total, count (named `count`), mean,
/// median, min, max, standard deviation.
fn dur_columns(opts: &ReportOptions, count: &str) -> String {
    let quartiles = if opts.quartiles {
        ", summary.q1 AS \"Q1:dur_ns\", summary.q3 AS \"Q3:dur_ns\""
    } else {
        ""
    };
    format!(
        "{ROUND_FN}(summary.total * 100.0 / (SELECT total FROM totals), 1) AS \"Time:ratio_%\", \
         summary.total AS \"Total Time:dur_ns\", summary.num AS \"{count}\", \
         {ROUND_FN}(summary.avg, 1) AS \"Avg:dur_ns\", {ROUND_FN}(summary.med, 1) AS \"Med:dur_ns\", \
         summary.min AS \"Min:dur_ns\", summary.max AS \"Max:dur_ns\", \
         {ROUND_FN}(summary.stddev, 1) AS \"StdDev:dur_ns\"{quartiles}"
    )
}

/// One `SELECT` (`rows` of the table's name) over every table whose name is `prefix` and more,
/// as one `UNION ALL`; `None` when the export has no such table.
fn union_of_tables(s: &Schema, prefix: &str, rows: impl Fn(&str) -> String) -> Option<String> {
    let tables = s.tables_named(prefix);
    (!tables.is_empty()).then(|| {
        tables
            .into_iter()
            .map(rows)
            .collect::<Vec<_>>()
            .join(" UNION ALL ")
    })
}

const TOTALS: &str = "totals AS (SELECT sum(total) AS total FROM summary)";

/// `CUPTI_ACTIVITY_KIND_KERNEL` rows with their name: `SELECT k.*, name`.
fn kernels_named(s: &Schema, names: KernelNames) -> String {
    let col = match names {
        KernelNames::Demangled => "demangledName",
        KernelNames::Base => "shortName",
        KernelNames::Mangled if s.has_column(KERNEL, "mangledName") => "mangledName",
        KernelNames::Mangled => "demangledName",
    };
    let c = s.col_of(KERNEL, "k", col);
    let d = s.col_of(KERNEL, "k", "demangledName");
    format!(
        "SELECT k.*, sid.value AS name FROM main.\"{KERNEL}\" k \
         LEFT JOIN main.StringIds sid ON sid.id = coalesce({c}, {d})"
    )
}

/// An NVTX row's name as nsys' NVTX reports write it, `Domain:text` (grouped by
/// [`GROUP_NAME_FN`] with `--group-nvtx`), over `d` (the row's domain) and `sid` (its text id's
/// string); `text` is the row's own text column.
fn nvtx_name_sql(text: &str, group_nvtx: bool) -> String {
    let name = format!(
        "CASE WHEN d.name NOT NULL AND sid.value IS NOT NULL THEN d.name || ':' || sid.value \
         WHEN d.name NOT NULL AND sid.value IS NULL THEN d.name || ':' || {text} \
         WHEN d.name IS NULL AND sid.value NOT NULL THEN sid.value ELSE {text} END"
    );
    if group_nvtx {
        format!("{GROUP_NAME_FN}({name})")
    } else {
        name
    }
}

/// The NVTX domains, as rows `(min(start), id, globalTid, name)`.
fn nvtx_domains_sql(s: &Schema) -> String {
    let col = |c: &str| s.col(NVTX, c);
    format!(
        "SELECT min(start), {} AS id, {} AS globalTid, {} AS name FROM main.\"{NVTX}\" \
         WHERE eventType = {DOMAIN_CREATE} GROUP BY 2, 3",
        col("domainId"),
        col("globalTid"),
        col("text"),
    )
}

/// An NVTX row's range style ('PushPop', 'StartEnd'), from its `eventType` column `event_type`.
fn nvtx_style_sql(event_type: &str) -> String {
    format!(
        "CASE {event_type} WHEN {PUSH_POP} THEN 'PushPop' WHEN {START_END} THEN 'StartEnd' \
         WHEN {NVTXT_PUSH_POP} THEN 'PushPop' WHEN {NVTXT_START_END} THEN 'StartEnd' \
         ELSE 'Unknown' END"
    )
}

/// The CTEs `nvtx_minmax(min, max)` and `nvtx_ranges(rangeId, startNS, endNS, tid, name,
/// style)` of nsys' NVTX projection reports (their `NVTX_EVENTS_MINMAXTS` and
/// `NVTX_EVENTS_RIDX` temporary tables): every push/pop and start/end range that ends on the
/// thread it started on, an open range ending at the last NVTX time, named `Domain:text` as in
/// `nvtx_sum`. nsys' R*Tree over the ranges only speeds up the exact comparisons of `startNS`,
/// `endNS` and `tid` that its queries make too, so it is left out.
fn nvtx_ranges_sql(s: &Schema, group_nvtx: bool) -> Option<String> {
    if !s.has_columns("StringIds", &["id", "value"])
        || !s.has_columns(NVTX, &["start", "end", "eventType", "globalTid"])
    {
        return None;
    }
    let rowid = s.rowid(NVTX)?;
    let col = |c: &str| s.col_of(NVTX, "e", c);
    Some(format!(
        "nvtx_minmax AS MATERIALIZED (SELECT min(min(start), min(\"end\")) AS min, \
           max(max(start), max(\"end\")) AS max FROM main.\"{NVTX}\" \
           WHERE eventType IN ({PUSH_POP}, {START_END}, {NVTXT_PUSH_POP}, {NVTXT_START_END})), \
         nvtx_domains AS ({domains}), \
         nvtx_ranges AS MATERIALIZED (SELECT e.{rowid} AS rangeId, e.start AS startNS, \
           ifnull(e.\"end\", (SELECT max FROM nvtx_minmax)) AS endNS, e.globalTid AS tid, \
           {name} AS name, \
           {style} AS style \
           FROM main.\"{NVTX}\" e \
           LEFT JOIN nvtx_domains d ON {edom} = d.id \
             AND (e.globalTid & 0x0000FFFFFF000000) = (d.globalTid & 0x0000FFFFFF000000) \
           LEFT JOIN main.StringIds sid ON {etext_id} = sid.id \
           WHERE e.eventType IN ({PUSH_POP}, {START_END}, {NVTXT_PUSH_POP}, {NVTXT_START_END}) AND {end_tid} IS NULL)",
        domains = nvtx_domains_sql(s),
        name = nvtx_name_sql(&col("text"), group_nvtx),
        style = nvtx_style_sql("e.eventType"),
        edom = col("domainId"),
        etext_id = col("textId"),
        end_tid = col("endGlobalTid"),
    ))
}

/// nsys' R*Tree index of the NVTX ranges (its `NVTX_EVENTS_RIDX`), as temporary table
/// [`NVTX_RIDX`]: each range of [`nvtx_ranges_sql`] with its start and end scaled onto [0, 1]
/// (`startTS`, `endTS`; stored as 32-bit floats rounded outwards, so a comparison of scaled
/// times never rules out a range that the exact comparisons of `startNS` and `endNS` keep).
/// Returns the SQL expression that scales a time as the index does, `None` when the export
/// lacks the NVTX tables.
fn nvtx_index(
    conn: &Connection,
    s: &Schema,
    group_nvtx: bool,
) -> Result<Option<impl Fn(&str) -> String>> {
    let Some(ranges) = nvtx_ranges_sql(s, group_nvtx) else {
        return Ok(None);
    };
    let (min, max): (Option<i64>, Option<i64>) = conn.query_row(
        &format!(
            "SELECT min(min(start), min(\"end\")), max(max(start), max(\"end\")) \
             FROM main.\"{NVTX}\" WHERE eventType IN ({PUSH_POP}, {START_END}, {NVTXT_PUSH_POP}, {NVTXT_START_END})"
        ),
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let min = min.unwrap_or(0);
    let span = (max.unwrap_or(min) - min).max(1);
    let scale = move |x: &str| format!("((({x}) - {min}) / {span}.0)");
    conn.execute_batch(&format!(
        "DROP TABLE IF EXISTS temp.{NVTX_RIDX}; \
         CREATE VIRTUAL TABLE temp.{NVTX_RIDX} USING rtree(rangeId, startTS, endTS, \
           +startNS INTEGER, +endNS INTEGER, +tid INTEGER, +name TEXT, +style TEXT); \
         INSERT INTO temp.{NVTX_RIDX} WITH {ranges} SELECT rangeId, {s}, {e}, startNS, endNS, \
           tid, name, style FROM nvtx_ranges;",
        s = scale("startNS"),
        e = scale("endNS"),
    ))?;
    Ok(Some(scale))
}

/// The temporary table of [`nvtx_index`].
const NVTX_RIDX: &str = "nsys_perfetto_nvtx_ridx";

/// Compute one report; `None` when the export lacks its tables (nsys skips it then).
pub fn report(
    conn: &Connection,
    s: &Schema,
    r: ReportName,
    opts: &ReportOptions,
) -> Result<Option<ReportTable>> {
    let strings = s.has_columns("StringIds", &["id", "value"]);
    let timed = |t: &str| s.has_columns(t, &["start", "end"]);
    // Whether the query reads nsys' temporary NVTX range index, dropped after it.
    let mut indexed = false;
    // Builds that index for the NVTX reports: `None` without NVTX ranges.
    let mut index_nvtx = || {
        let scale = nvtx_index(conn, s, opts.group_nvtx)
            .map_err(|e| e.context(format!("report {}", r.name)))?;
        indexed |= scale.is_some();
        anyhow::Ok(scale)
    };
    let sql = match r.name {
        "cuda_gpu_kern_sum" | "cuda_gpu_kern_gb_sum" => {
            if !strings || !timed(KERNEL) {
                return Ok(None);
            }
            let gb = r.name == "cuda_gpu_kern_gb_sum";
            let dims: Vec<String> = ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]
                .iter()
                .map(|c| format!("{} AS {c}", s.col(KERNEL, c)))
                .collect();
            let (group_sel, group, cols) = if gb {
                (
                    format!(", {}", dims.join(", ")),
                    ", gridX, gridY, gridZ, blockX, blockY, blockZ",
                    ", printf('%4d %4d %4d', gridX, gridY, gridZ) AS \"GridXYZ\", \
                     printf('%4d %4d %4d', blockX, blockY, blockZ) AS \"BlockXYZ\"",
                )
            } else {
                (String::new(), "", "")
            };
            let dur = "\"end\" - start";
            format!(
                "WITH summary AS (SELECT name, {agg}{group_sel} FROM ({k}) GROUP BY 1{group}), \
                 {TOTALS} SELECT {cols_d}{cols}, summary.name AS \"Name\" FROM summary \
                 ORDER BY 2 DESC, 3, \"Name\"",
                agg = dur_aggregates(opts, dur),
                k = kernels_named(s, opts.kernel_names),
                cols_d = dur_columns(opts, "Instances"),
            )
        }
        "cuda_api_sum" => {
            if !strings || !timed(RUNTIME) {
                return Ok(None);
            }
            format!(
                "WITH summary AS (SELECT {name_id} AS nameId, {agg} FROM main.\"{RUNTIME}\" \
                 GROUP BY 1), {TOTALS} SELECT {cols}, {name} AS \"Name\" FROM summary \
                 LEFT JOIN main.StringIds ids ON ids.id = summary.nameId ORDER BY 2 DESC",
                name_id = s.col(RUNTIME, "nameId"),
                agg = dur_aggregates(opts, "\"end\" - start"),
                cols = dur_columns(opts, "Num Calls"),
                name = api_name_sql("ids.value"),
            )
        }
        "osrt_sum" => {
            if !strings || !timed("OSRT_API") {
                return Ok(None);
            }
            format!(
                "WITH summary AS (SELECT {name_id} AS nameId, {agg} FROM main.OSRT_API \
                 WHERE {class} = 27 GROUP BY 1), {TOTALS} SELECT {cols}, ids.value AS \"Name\" \
                 FROM summary LEFT JOIN main.StringIds ids ON ids.id = summary.nameId \
                 ORDER BY 2 DESC",
                name_id = s.col("OSRT_API", "nameId"),
                class = s.col("OSRT_API", "eventClass"),
                agg = dur_aggregates(opts, "\"end\" - start"),
                cols = dur_columns(opts, "Num Calls"),
            )
        }
        "cuda_gpu_mem_time_sum" | "cuda_gpu_mem_size_sum" => {
            let by_size = r.name == "cuda_gpu_mem_size_sum";
            let mut parts = Vec::new();
            let value = |t: &str, alias: &str| {
                if by_size {
                    s.col_of(t, alias, "bytes")
                } else {
                    format!("{alias}.\"end\" - {alias}.start")
                }
            };
            if timed(MEMCPY) {
                let (join, name) = memcpy_name_sql(s);
                parts.push(format!(
                    "SELECT {name} AS name, {v} AS v FROM main.\"{MEMCPY}\" m{join}",
                    v = value(MEMCPY, "m")
                ));
            }
            if timed(MEMSET) {
                parts.push(format!(
                    "SELECT '[CUDA memset]' AS name, {v} AS v FROM main.\"{MEMSET}\" m",
                    v = value(MEMSET, "m")
                ));
            }
            if parts.is_empty() {
                return Ok(None);
            }
            let summary = format!(
                "WITH memops AS ({}), summary AS (SELECT name, {} FROM memops GROUP BY 1), \
                 {TOTALS}",
                parts.join(" UNION ALL "),
                dur_aggregates(opts, "v")
            );
            if by_size {
                format!(
                    "{summary} SELECT summary.total AS \"Total:mem_B\", summary.num AS \"Count\", \
                     summary.avg AS \"Avg:mem_B\", summary.med AS \"Med:mem_B\", \
                     summary.min AS \"Min:mem_B\", summary.max AS \"Max:mem_B\", \
                     summary.stddev AS \"StdDev:mem_B\", summary.name AS \"Operation\" \
                     FROM summary ORDER BY 1 DESC"
                )
            } else {
                format!(
                    "{summary} SELECT {}, summary.name AS \"Operation\" FROM summary \
                     ORDER BY 2 DESC",
                    dur_columns(opts, "Count")
                )
            }
        }
        "nvtx_sum" => {
            if !strings || !s.has_columns(NVTX, &["start", "end", "eventType"]) {
                return Ok(None);
            }
            let col = |c: &str| s.col_of(NVTX, "ne", c);
            format!(
                "WITH domains AS ({domains}), \
                 maxts AS (SELECT max(max(start), max(\"end\")) AS m FROM main.\"{NVTX}\"), \
                 nvtx AS (SELECT coalesce(ne.\"end\", (SELECT m FROM maxts)) - ne.start AS duration, \
                   {tag} AS tag, \
                   {style} AS style \
                   FROM main.\"{NVTX}\" ne \
                   LEFT JOIN domains d ON {ndom} = d.id \
                     AND ({ntid} & 0x0000FFFFFF000000) = (d.globalTid & 0x0000FFFFFF000000) \
                   LEFT JOIN main.StringIds sid ON {ntext_id} = sid.id \
                   WHERE ne.eventType IN ({PUSH_POP}, {START_END}, {NVTXT_PUSH_POP}, {NVTXT_START_END})), \
                 summary AS (SELECT tag AS name, style, {agg} FROM nvtx GROUP BY 1, 2), \
                 {TOTALS} \
                 SELECT {cols}, style AS \"Style\", name AS \"Range\" FROM summary ORDER BY 2 DESC",
                domains = nvtx_domains_sql(s),
                tag = nvtx_name_sql(&col("text"), opts.group_nvtx),
                style = nvtx_style_sql("ne.eventType"),
                ndom = col("domainId"),
                ntid = col("globalTid"),
                ntext_id = col("textId"),
                agg = dur_aggregates(opts, "duration"),
                cols = dur_columns(opts, "Instances"),
            )
        }
        "um_sum" | "um_total_sum" => {
            let cpu = "CUDA_UM_CPU_PAGE_FAULT_EVENTS";
            let gpu = "CUDA_UM_GPU_PAGE_FAULT_EVENTS";
            if !timed(MEMCPY)
                || !s.has_columns(cpu, &["address"])
                || !s.has_columns(gpu, &["address", "numberOfPageFaults"])
            {
                return Ok(None);
            }
            let va = s.col(MEMCPY, "virtualAddress");
            let kind = s.col(MEMCPY, "copyKind");
            let bytes = s.col(MEMCPY, "bytes");
            if r.name == "um_sum" {
                format!(
                    "WITH cpuSummary AS (SELECT address AS virtualAddress, count(*) AS num \
                       FROM main.{cpu} GROUP BY 1), \
                     gpuSummary AS (SELECT address AS virtualAddress, sum(numberOfPageFaults) AS num \
                       FROM main.{gpu} GROUP BY 1), \
                     d2hTransferSummary AS (SELECT {va} AS virtualAddress, \
                       sum(\"end\" - start) AS transferDuration, sum({bytes}) AS D2H \
                       FROM main.\"{MEMCPY}\" WHERE {kind} = 12 GROUP BY 1), \
                     h2dTransferSummary AS (SELECT {va} AS virtualAddress, \
                       sum(\"end\" - start) AS transferDuration, sum({bytes}) AS H2D \
                       FROM main.\"{MEMCPY}\" WHERE {kind} = 11 GROUP BY 1), \
                     PageFaults AS (SELECT cpuSummary.virtualAddress AS address, \
                       cpuSummary.num AS cpuPageFaults, gpuSummary.num AS gpuPageFaults \
                       FROM cpuSummary LEFT JOIN gpuSummary USING (virtualAddress) \
                       UNION ALL SELECT gpuSummary.virtualAddress AS address, \
                       cpuSummary.num AS cpuPageFaults, gpuSummary.num AS gpuPageFaults \
                       FROM gpuSummary LEFT JOIN cpuSummary USING (virtualAddress) \
                       WHERE cpuSummary.virtualAddress IS NULL), \
                     Migrations AS (SELECT d2h.virtualAddress AS address, d2h.D2H AS d2h, \
                       h2d.H2D AS h2d, (ifnull(d2h.D2H, 0) + ifnull(h2d.H2D, 0)) * \
                       (1000000000 / (ifnull(d2h.transferDuration, 0) + ifnull(h2d.transferDuration, 0))) AS tput \
                       FROM d2hTransferSummary d2h LEFT JOIN h2dTransferSummary h2d USING (virtualAddress) \
                       UNION ALL SELECT h2d.virtualAddress AS address, d2h.D2H AS d2h, \
                       h2d.H2D AS h2d, (ifnull(d2h.D2H, 0) + ifnull(h2d.H2D, 0)) * \
                       (1000000000 / (ifnull(d2h.transferDuration, 0) + ifnull(h2d.transferDuration, 0))) AS tput \
                       FROM h2dTransferSummary h2d LEFT JOIN d2hTransferSummary d2h USING (virtualAddress) \
                       WHERE d2h.virtualAddress IS NULL) \
                     SELECT PageFaults.address AS \"Virtual Address:addr_uint\", \
                       Migrations.h2d AS \"HtoD Migration size:mem_B\", \
                       Migrations.d2h AS \"DtoH Migration size:mem_B\", \
                       PageFaults.cpuPageFaults AS \"CPU Page Faults\", \
                       PageFaults.gpuPageFaults AS \" GPU Page Faults\", \
                       Migrations.tput AS \"Migration Throughput:thru_B\" \
                     FROM PageFaults LEFT JOIN Migrations USING (address) \
                     UNION ALL SELECT Migrations.address, Migrations.h2d, Migrations.d2h, \
                       PageFaults.cpuPageFaults, PageFaults.gpuPageFaults, Migrations.tput \
                     FROM Migrations LEFT JOIN PageFaults USING (address) \
                     WHERE PageFaults.address IS NULL \
                     ORDER BY 6 DESC LIMIT 10"
                )
            } else {
                format!(
                    "WITH cpuSummary AS (SELECT min(address) AS minVirtualAddress, \
                       max(address) AS maxVirtualAddress, count(*) AS num FROM main.{cpu}), \
                     gpuSummary AS (SELECT min(address) AS minVirtualAddress, \
                       max(address) AS maxVirtualAddress, sum(numberOfPageFaults) AS num \
                       FROM main.{gpu}), \
                     d2hTransferSummary AS (SELECT min({va}) AS minVirtualAddress, \
                       max({va}) AS maxVirtualAddress, sum(\"end\" - start) AS transferDuration, \
                       sum({bytes}) AS D2H FROM main.\"{MEMCPY}\" WHERE {kind} = 12), \
                     h2dTransferSummary AS (SELECT min({va}) AS minVirtualAddress, \
                       max({va}) AS maxVirtualAddress, sum(\"end\" - start) AS transferDuration, \
                       sum({bytes}) AS H2D FROM main.\"{MEMCPY}\" WHERE {kind} = 11), \
                     ranges AS (SELECT min(cpu.minVirtualAddress, gpu.minVirtualAddress, \
                       h2d.minVirtualAddress, d2h.minVirtualAddress) AS minAddr, \
                       max(cpu.maxVirtualAddress, gpu.maxVirtualAddress, h2d.maxVirtualAddress, \
                       d2h.maxVirtualAddress) AS maxAddr \
                       FROM cpuSummary cpu, gpuSummary gpu, h2dTransferSummary h2d, \
                       d2hTransferSummary d2h) \
                     SELECT h2dTransferSummary.h2d AS \"Total HtoD Migration Size:mem_B\", \
                       d2hTransferSummary.d2h AS \"Total DtoH Migration Size:mem_B\", \
                       cpuSummary.num AS \"Total CPU Page Faults\", \
                       gpuSummary.num AS \"Total GPU PageFaults\", \
                       ranges.minAddr AS \"Minimum Virtual Address:addr_uint\", \
                       ranges.maxAddr AS \"Maximum Virtual Address:addr_uint\" \
                     FROM ranges, cpuSummary, gpuSummary, d2hTransferSummary, h2dTransferSummary"
                )
            }
        }
        "um_cpu_page_faults_sum" => {
            let cpu = "CUDA_UM_CPU_PAGE_FAULT_EVENTS";
            if !strings || !s.has_table(cpu) {
                return Ok(None);
            }
            format!(
                "WITH summary AS (SELECT {ins} AS sourceId, count(*) AS num FROM main.{cpu} \
                 GROUP BY 1) SELECT summary.num AS \"CPU Page Faults\", \
                 ids.value AS \"CPU Instruction Address\" FROM summary \
                 LEFT JOIN main.StringIds ids ON ids.id = summary.sourceId ORDER BY 1 DESC",
                ins = s.col(cpu, "CpuInstruction"),
            )
        }
        // The unions of a family of tables, named through the string table.
        "openacc_sum" | "openmp_sum" if !strings => return Ok(None),
        "openacc_sum" => {
            let rows = |t: &str| {
                format!(
                    "SELECT start, \"end\", {}, {}, {} FROM main.\"{t}\"",
                    s.col(t, "nameId"),
                    s.col(t, "lineNo"),
                    s.col(t, "srcFile")
                )
            };
            let Some(openacc) = union_of_tables(s, "CUPTI_ACTIVITY_KIND_OPENACC_", rows) else {
                return Ok(None);
            };
            format!(
                "WITH openacc(start, \"end\", nameId, lineNo, srcFile) AS ({}), \
                 summary AS (SELECT CASE WHEN srcFile NOT NULL \
                   THEN nameIds.value || '@' || srcFileIds.value || ':' || lineNo \
                   ELSE nameIds.value END AS name, {} FROM openacc \
                   LEFT JOIN main.StringIds srcFileIds ON srcFileIds.id = srcFile \
                   LEFT JOIN main.StringIds nameIds ON nameIds.id = nameId GROUP BY 1), \
                 {TOTALS} SELECT {}, name AS \"Name\" FROM summary ORDER BY 2 DESC",
                openacc,
                dur_aggregates(opts, "\"end\" - start"),
                dur_columns(opts, "Num Calls"),
            )
        }
        "openmp_sum" => {
            let rows = |t: &str| {
                format!(
                    "SELECT {} AS nameId, {} FROM main.\"{t}\" GROUP BY 1",
                    s.col(t, "nameId"),
                    dur_aggregates(opts, "\"end\" - start")
                )
            };
            let Some(summary) = union_of_tables(s, "OPENMP_EVENT_KIND_", rows) else {
                return Ok(None);
            };
            format!(
                "WITH summary AS ({summary}), {TOTALS} SELECT {}, ids.value AS \"Name\" FROM summary \
                 LEFT JOIN main.StringIds ids ON ids.id = summary.nameId ORDER BY 2 DESC",
                dur_columns(opts, "Count"),
            )
        }
        "cuda_kern_exec_sum" => {
            if !strings
                || !s.has_columns(
                    KERNEL,
                    &["start", "end", "correlationId", "globalPid", "deviceId"],
                )
                || !s.has_columns(
                    RUNTIME,
                    &["start", "end", "correlationId", "globalTid", "nameId"],
                )
            {
                return Ok(None);
            }
            let k = kernels_named(s, opts.kernel_names);
            let agg = |p: &str, v: &str| {
                format!(
                    "{ROUND_FN}(avg({v}), 1) AS \"{p}Avg:dur_ns\", {ROUND_FN}({MEDIAN_FN}({v}), 1) AS \"{p}Med:dur_ns\", \
                     min({v}) AS \"{p}Min:dur_ns\", max({v}) AS \"{p}Max:dur_ns\", \
                     {ROUND_FN}({STDEV_FN}({v}), 1) AS \"{p}StdDev:dur_ns\""
                )
            };
            format!(
                "WITH runkern AS (SELECT (r.globalTid >> 24) & 0x00FFFFFF AS pid, \
                   r.globalTid & 0x00FFFFFF AS tid, k.deviceId AS deviceId, \
                   r.\"end\" - r.start AS ApiDur, \
                   iif(k.start - r.\"end\" >= 0, k.start - r.\"end\", NULL) AS QueDur, \
                   k.\"end\" - k.start AS KernDur, \
                   max(r.\"end\", k.\"end\") - r.start AS totalDur, \
                   {api} AS apiName, k.name AS kernName \
                   FROM ({k}) k JOIN main.\"{RUNTIME}\" r ON k.correlationId = r.correlationId \
                     AND k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000) \
                   LEFT JOIN main.StringIds rname ON r.nameId = rname.id) \
                 SELECT pid AS PID, tid AS TID, deviceId AS DevId, count(*) AS Count, \
                   count(QueDur) AS QCount, {t}, {a}, {q}, {kd}, apiName AS \"API Name\", \
                   kernName AS \"Kernel Name\" FROM runkern GROUP BY 1, 2, 3, 26, 27 \
                   ORDER BY 6 DESC",
                api = api_name_sql("rname.value"),
                t = agg("T", "totalDur"),
                a = agg("A", "ApiDur"),
                q = agg("Q", "QueDur"),
                kd = agg("K", "KernDur"),
            )
        }
        "nvtx_kern_sum" => {
            if !s.has_columns(KERNEL, &["start", "end", "correlationId", "globalPid"])
                || !s.has_columns(RUNTIME, &["start", "end", "correlationId", "globalTid"])
            {
                return Ok(None);
            }
            let Some(krowid) = s.rowid(KERNEL) else {
                return Ok(None);
            };
            let Some(scale) = index_nvtx()? else {
                return Ok(None);
            };
            let k = kernels_named(s, opts.kernel_names).replacen(
                "SELECT k.*,",
                &format!("SELECT k.{krowid} AS kernid, k.*,"),
                1,
            );
            format!(
                "WITH combo AS (SELECT rt.name AS name, rt.style AS style, rt.rangeId AS nvtxid, \
                   k.kernid AS kernid, k.\"end\" - k.start AS kduration, \
                   (r.globalTid >> 24) & 0x00FFFFFF AS pid, r.globalTid & 0x00FFFFFF AS tid, \
                   k.name AS kernName \
                   FROM ({k}) k \
                   LEFT JOIN main.\"{RUNTIME}\" r ON k.correlationId = r.correlationId \
                     AND k.globalPid = (r.globalTid & 0xFFFFFFFFFF000000) \
                   LEFT JOIN temp.{NVTX_RIDX} rt ON rt.startTS <= {rs} AND rt.endTS >= {re} \
                     AND rt.startNS <= r.start AND rt.endNS >= r.\"end\" \
                     AND rt.tid = r.globalTid) \
                 SELECT name AS \"NVTX Range\", style AS \"Style\", pid AS \"PID\", tid AS \"TID\", \
                   count(DISTINCT nvtxid) AS \"NVTX Inst\", count(DISTINCT kernid) AS \"Kern Inst\", \
                   sum(kduration) AS \"Total Time:dur_ns\", \
                   {ROUND_FN}(avg(kduration), 1) AS \"Avg:dur_ns\", \
                   {ROUND_FN}({MEDIAN_FN}(kduration), 1) AS \"Med:dur_ns\", \
                   min(kduration) AS \"Min:dur_ns\", max(kduration) AS \"Max:dur_ns\", \
                   {ROUND_FN}({STDEV_FN}(kduration), 1) AS \"StdDev:dur_ns\", \
                   kernName AS \"Kernel Name\" \
                 FROM combo GROUP BY 3, 4, 1, 2, 13 ORDER BY 1, 3, 4, 7 DESC",
                rs = scale("r.start"),
                re = scale("r.\"end\""),
            )
        }
        "nvtx_gpu_proj_sum" => {
            if !s.has_columns(RUNTIME, &["start", "end", "correlationId", "globalTid"]) {
                return Ok(None);
            }
            if nvtx_ranges_sql(s, opts.group_nvtx).is_none() {
                return Ok(None);
            }
            let ops: Vec<String> = [KERNEL, MEMCPY, MEMSET]
                .into_iter()
                .filter(|t| s.has_columns(t, &["start", "end", "correlationId", "globalPid"]))
                .map(|t| {
                    format!("SELECT start, \"end\", correlationId, globalPid FROM main.\"{t}\"")
                })
                .collect();
            if ops.is_empty() {
                return Ok(None);
            }
            let Some(scale) = index_nvtx()? else {
                return Ok(None);
            };
            format!(
                "WITH RECURSIVE gpuops AS ({ops}), \
                 nvtx_parent AS MATERIALIZED (SELECT cr.rangeId AS rangeId, pr.rangeId AS parentId, \
                   min((cr.startNS - pr.startNS) + (pr.endNS - cr.endNS)) AS tightness \
                   FROM temp.{NVTX_RIDX} cr LEFT JOIN temp.{NVTX_RIDX} pr \
                     ON pr.rangeId != cr.rangeId AND pr.startTS <= cr.startTS \
                     AND pr.endTS >= cr.endTS AND pr.startNS <= cr.startNS AND pr.endNS >= cr.endNS AND pr.tid = cr.tid \
                   GROUP BY cr.rangeId), \
                 tree AS (SELECT p.rangeId AS rangeId, p.parentId AS parentId, 0 AS level \
                   FROM nvtx_parent p WHERE p.parentId IS NULL \
                   UNION ALL SELECT p.rangeId, p.parentId, tree.level + 1 \
                   FROM tree JOIN nvtx_parent p ON p.parentId = tree.rangeId), \
                 projection AS MATERIALIZED (SELECT rt.name AS name, rt.style AS style, \
                   rt.rangeId AS rangeId, rt.endNS - rt.startNS AS nvtxDuration, \
                   max(op.\"end\") - min(op.start) AS projDuration, \
                   count(DISTINCT r.correlationId) AS opNb \
                   FROM gpuops op JOIN main.\"{RUNTIME}\" r ON op.correlationId = r.correlationId \
                     AND op.globalPid = (r.globalTid & 0xFFFFFFFFFF000000) \
                   LEFT JOIN temp.{NVTX_RIDX} rt ON rt.startTS <= {rs} AND rt.endTS >= {re} \
                     AND rt.startNS <= r.start AND rt.endNS >= r.\"end\" \
                     AND rt.tid = r.globalTid \
                   GROUP BY rt.rangeId), \
                 child AS (SELECT parentId, count(parentId) AS childNb FROM projection proj \
                   JOIN nvtx_parent parent ON parent.rangeId = proj.rangeId GROUP BY parentId), \
                 trace AS (SELECT p.name AS name, p.projDuration AS projDuration, \
                   p.nvtxDuration AS nvtxDuration, p.style AS style, p.opNb AS opNb, \
                   t.level AS level, ifnull(c.childNb, 0) AS childNb \
                   FROM projection p LEFT JOIN tree t ON t.rangeId = p.rangeId \
                   LEFT JOIN child c ON c.parentId = p.rangeId) \
                 SELECT name AS \"Range\", style AS \"Style\", \
                   sum(projDuration) AS \"Total Proj Time:dur_ns\", \
                   sum(nvtxDuration) AS \"Total Range Time:dur_ns\", \
                   count(*) AS \"Range Instances\", \
                   {ROUND_FN}(avg(projDuration), 1) AS \"Proj Avg:dur_ns\", \
                   {ROUND_FN}({MEDIAN_FN}(projDuration), 1) AS \"Proj Med:dur_ns\", \
                   min(projDuration) AS \"Proj Min:dur_ns\", max(projDuration) AS \"Proj Max:dur_ns\", \
                   {ROUND_FN}({STDEV_FN}(projDuration), 1) AS \"Proj StdDev:dur_ns\", \
                   sum(opNb) AS \"Total GPU Ops\", {ROUND_FN}(avg(opNb), 1) AS \"Avg GPU Ops\", \
                   {ROUND_FN}(avg(level), 1) AS \"Avg Range Lvl\", \
                   {ROUND_FN}(avg(childNb), 1) AS \"Avg Num Child\" \
                 FROM trace WHERE name IS NOT NULL GROUP BY 1, 2 ORDER BY 3 DESC",
                ops = ops.join(" UNION ALL "),
                rs = scale("r.start"),
                re = scale("r.\"end\""),
            )
        }
        _ => anyhow::bail!("unknown report {:?}", r.name),
    };
    let out = run_query(conn, r.name, r.title, &sql)
        .map(Some)
        .map_err(|e| e.context(format!("report {}", r.name)));
    if indexed {
        conn.execute_batch(&format!("DROP TABLE IF EXISTS temp.{NVTX_RIDX}"))?;
    }
    out
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
