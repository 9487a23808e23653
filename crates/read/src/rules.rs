//! The expert rules of `nsys analyze` (nsys 2023.4), with nsys' names, defaults, options and
//! findings: run by `nsys-perfetto analyze PROFILE` (`workflow::analyze` renders them) and
//! drawn on the timeline by a conversion with `--analyze`.
//!
//! | rule | finds | nsys' options |
//! |---|---|---|
//! | `cuda_api_sync` | `cudaDeviceSynchronize*`/`cudaStreamSynchronize*` calls | window, NVTX, process, thread |
//! | `cuda_memcpy_sync` | memcpys launched by a `cudaMemcpy*` call without `Async`, except H2D of 64 KB or less and copies within one device | window, NVTX |
//! | `cuda_memcpy_async` | memcpys launched by `cudaMemcpy*Async*` from or to pageable memory | window, NVTX |
//! | `cuda_memset_sync` | memsets of pinned or managed memory launched by `cudaMemset*` without `async` | window, NVTX |
//! | `gpu_gaps` | per process and GPU, gaps between GPU work longer than `gap` ms (500) | window, NVTX, gap |
//! | `gpu_time_util` | per process and GPU, runs of the `chunks` (30) equal chunks of its GPU time span whose utilization is below `threshold` % (50), coalesced | window, NVTX, threshold, chunks |
//!
//! Each rule is nsys' own SQL (from `target-linux-x64/rules/*.py` and `python/lib/{nsysstats,
//! gpustats}.py` of nsys 2023.4.4), run on the export as nsys runs it: the time window (`start`,
//! `end`, or the first NVTX range of a name) hides rows outside it behind temporary views of the
//! same names, the GPU rules count the profiler's CUDA overhead as GPU work, and so on. The two
//! GPU rules read their rows with nsys' SQL and then pair starts with ends (`gaps`) and sum
//! each chunk's use (`chunks`) in one pass, with SQLite's arithmetic, where nsys' window
//! queries join every chunk with every row; the coalescing of low chunks is nsys' SQL again. Where
//! nsys refuses an export for a column or label table it only displays (`greenContextId` before
//! nsys 2023.4, `ENUM_CUDA_MEM_KIND` in old exports), the rule runs with that column empty.
//!
//! Findings are sorted as nsys sorts them (longest first; `gpu_time_util` by utilization, then
//! duration). `top` keeps the first N of each rule; nsys' own row limit inside the GPU rules keeps
//! the first N gaps or chunks *found* (unsorted) before sorting, so only the full lists (`rows=-1`,
//! `--top 0`) are the same sets in both tools.

use crate::nvtx_type::{DOMAIN_CREATE, NVTXT_PUSH_POP, NVTXT_START_END, PUSH_POP, START_END};
use crate::{KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME, Schema};
use anyhow::{Result, bail};
use rusqlite::Connection;
use rusqlite::types::ValueRef;
use std::path::Path;

/// One of nsys' expert rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    CudaApiSync,
    CudaMemcpySync,
    CudaMemcpyAsync,
    CudaMemsetSync,
    GpuGaps,
    GpuTimeUtil,
}

/// The `chunks` `gpu_time_util` accepts, as nsys' rule does.
pub const CHUNK_COUNTS: std::ops::RangeInclusive<i64> = 1..=1000;

/// Every rule, in nsys' order of `nsys analyze --help-rules`.
pub const RULES: [Rule; 6] = [
    Rule::CudaApiSync,
    Rule::CudaMemcpyAsync,
    Rule::CudaMemcpySync,
    Rule::CudaMemsetSync,
    Rule::GpuGaps,
    Rule::GpuTimeUtil,
];

const PROFILER_OVERHEAD: &str = "PROFILER_OVERHEAD";

const ADVICE_SYNC: &str = "The following are synchronization APIs that block the host until all \
issued CUDA calls are complete.\n\nSuggestions:\n   1. Avoid excessive use of synchronization.\n   \
2. Use asynchronous CUDA event calls, such as cudaStreamWaitEvent() and cudaEventSynchronize(), to \
prevent host synchronization.";

const ADVICE_GAPS: &str = "Suggestions:\n   1. Use CPU sampling data, OS Runtime blocked state \
backtraces, and/or OS Runtime APIs related to thread synchronization to understand if a sluggish \
or blocked CPU is causing the gaps.\n   2. Add NVTX annotations to CPU code to understand the \
reason behind the gaps.";

impl Rule {
    /// nsys' name of the rule (`nsys analyze -r NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Rule::CudaApiSync => "cuda_api_sync",
            Rule::CudaMemcpySync => "cuda_memcpy_sync",
            Rule::CudaMemcpyAsync => "cuda_memcpy_async",
            Rule::CudaMemsetSync => "cuda_memset_sync",
            Rule::GpuGaps => "gpu_gaps",
            Rule::GpuTimeUtil => "gpu_time_util",
        }
    }

    /// nsys' display name.
    pub fn title(self) -> &'static str {
        match self {
            Rule::CudaApiSync => "CUDA Synchronization APIs",
            Rule::CudaMemcpySync => "CUDA Synchronous Memcpy",
            Rule::CudaMemcpyAsync => "CUDA Async Memcpy with Pageable Memory",
            Rule::CudaMemsetSync => "CUDA Synchronous Memset",
            Rule::GpuGaps => "GPU Gaps",
            Rule::GpuTimeUtil => "GPU Time Utilization",
        }
    }

    pub fn parse(name: &str) -> Result<Rule> {
        let name = name.trim();
        RULES
            .iter()
            .copied()
            .find(|r| r.name() == name)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown rule '{name}': the rules are {}",
                    RULES.map(Rule::name).join(", ")
                )
            })
    }

    /// What the rule finds (nsys' description of the rule).
    pub fn explanation(self) -> &'static str {
        match self {
            Rule::CudaApiSync => {
                "This rule identifies the following synchronization APIs that block the host \
                 until the issued CUDA calls are complete: cudaDeviceSynchronize(), \
                 cudaStreamSynchronize()."
            }
            Rule::CudaMemcpySync => {
                "This rule identifies memory transfers that are synchronous. It does not include \
                 cudaMemcpy*() (no Async suffix) occurred within the same device as well as H2D \
                 copy kind with a memory block of 64 KB or less."
            }
            Rule::CudaMemcpyAsync => {
                "This rule identifies asynchronous memory transfers that end up becoming \
                 synchronous if the memory is pageable."
            }
            Rule::CudaMemsetSync => {
                "This rule identifies synchronous memset operations with pinned host memory or \
                 Unified Memory region."
            }
            Rule::GpuGaps => {
                "This rule identifies time regions where a GPU is idle for longer than a set \
                 threshold. For each process, each GPU device is examined, and gaps are found \
                 within the time range that starts with the beginning of the first GPU operation \
                 on that device and ends with the end of the last GPU operation on that device. \
                 Profiling overheads are taken into account to exclude GPU gaps that cannot be \
                 addressed by the user."
            }
            Rule::GpuTimeUtil => {
                "This rule identifies time regions with low GPU utilization. For each process, \
                 each GPU device is examined, and a time range is created that starts with the \
                 beginning of the first GPU operation on that device and ends with the end of the \
                 last GPU operation on that device. This time range is then divided into equal \
                 chunks, and the GPU utilization is calculated for each chunk. The utilization \
                 includes all GPU operations as well as profiling overheads that the user cannot \
                 address."
            }
        }
    }

    /// nsys' advice for the rule's findings.
    pub fn advice(self, opts: &Options) -> String {
        match self {
            Rule::CudaApiSync | Rule::CudaMemsetSync => ADVICE_SYNC.to_string(),
            Rule::CudaMemcpySync => "The following are synchronous memory transfers that block \
                the host. This does not include host to device transfers of a memory block of 64 \
                KB or less.\n\nSuggestion: Use cudaMemcpy*Async() APIs instead."
                .to_string(),
            Rule::CudaMemcpyAsync => "The following APIs use PAGEABLE memory which causes \
                asynchronous CUDA memcpy operations to block and be executed synchronously. This \
                leads to low GPU utilization.\n\nSuggestion: If applicable, use PINNED memory \
                instead."
                .to_string(),
            Rule::GpuGaps => format!(
                "The following are ranges where a GPU is idle for more than {}ms. Addressing \
                 these gaps might improve application performance.\n\n{ADVICE_GAPS}",
                opts.gap_ms
            ),
            Rule::GpuTimeUtil => format!(
                "The following are time regions with an average GPU utilization below {}%. \
                 Addressing the gaps might improve application performance.\n\n{ADVICE_GAPS}",
                opts.threshold
            ),
        }
    }

    /// nsys' message when the rule finds nothing.
    pub fn no_result(self, opts: &Options) -> String {
        match self {
            Rule::CudaApiSync | Rule::CudaMemsetSync => {
                "There were no problems detected related to synchronization APIs.".into()
            }
            Rule::CudaMemcpySync => {
                "There were no problems detected related to synchronous memcpy operations.".into()
            }
            Rule::CudaMemcpyAsync => "There were no problems detected related to memcpy \
                operations using pageable memory."
                .into(),
            Rule::GpuGaps => format!(
                "There were no problems detected with GPU utilization. GPU was not found to be \
                 idle for more than {}ms.",
                opts.gap_ms
            ),
            Rule::GpuTimeUtil => format!(
                "There were no problems detected with GPU utilization. No time regions have an \
                 average GPU utilization below {}%.",
                opts.threshold
            ),
        }
    }

    /// The rule's columns after start and duration, as nsys names them.
    pub fn columns(self) -> &'static [&'static str] {
        match self {
            Rule::CudaApiSync => &["PID", "TID", "API Name"],
            Rule::CudaMemcpySync | Rule::CudaMemcpyAsync => &[
                "Src Kind",
                "Dst Kind",
                "Bytes",
                "PID",
                "Device ID",
                "Context ID",
                "Green Context ID",
                "Stream ID",
                "API Name",
            ],
            Rule::CudaMemsetSync => &[
                "Memory Kind",
                "Bytes",
                "PID",
                "Device ID",
                "Context ID",
                "Green Context ID",
                "Stream ID",
                "API Name",
            ],
            Rule::GpuGaps => &["PID", "Device ID", "Context ID"],
            Rule::GpuTimeUtil => &["In-Use (%)", "PID", "Device ID", "Context ID"],
        }
    }

    /// The name of the rule's track in a trace's "Analysis" group.
    pub fn track_name(self) -> &'static str {
        // Built once: a group key carries the name, and keys are copied with every event.
        static NAMES: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
            RULES
                .iter()
                .map(|r| format!("{} · {}", r.title(), r.name()))
                .collect()
        });
        let index = RULES.iter().position(|r| *r == self).unwrap_or(0);
        &NAMES[index]
    }

    /// Whether the finding's slice on the timeline is the GPU's time (the memory rules, the GPU
    /// rules) rather than a CPU call's.
    pub fn on_gpu(self) -> bool {
        !matches!(self, Rule::CudaApiSync)
    }
}

/// The rules' options, with nsys' defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The rules to run (default: all six).
    pub rules: Vec<Rule>,
    /// The time window (nsys' `start`/`end`, ns in the export's time); each defaults to the
    /// NVTX range's when `nvtx` is given.
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// nsys' `nvtx=RANGE[@DOMAIN][/N]`: the window of the first (or Nth) range of that name.
    pub nvtx: Option<String>,
    /// `cuda_api_sync` only: calls of this process / thread id.
    pub process: Option<i64>,
    pub thread: Option<i64>,
    /// `gpu_gaps`: the shortest gap reported, ms (nsys reports gaps longer than this).
    pub gap_ms: i64,
    /// `gpu_time_util`: chunks below this utilization (percent) are reported.
    pub threshold: i64,
    /// `gpu_time_util`: chunks per process and GPU (1 to 1000).
    pub chunks: i64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rules: RULES.to_vec(),
            start: None,
            end: None,
            nvtx: None,
            process: None,
            thread: None,
            gap_ms: 500,
            threshold: 50,
            chunks: 30,
        }
    }
}

/// A value of a finding's column.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl Value {
    fn of(v: ValueRef<'_>) -> Value {
        match v {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Int(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(t) | ValueRef::Blob(t) => {
                Value::Text(String::from_utf8_lossy(t).into_owned())
            }
        }
    }

    /// As nsys prints it in CSV.
    pub fn text(&self) -> String {
        match self {
            Value::Null => String::new(),
            Value::Int(i) => i.to_string(),
            Value::Real(f) => format!("{f:.1}"),
            Value::Text(t) => t.clone(),
        }
    }
}

/// The CPU call a finding blames: the synchronizing call itself, or the call that launched the
/// memory operation.
#[derive(Debug, Clone, PartialEq)]
pub struct Blame {
    pub global_tid: i64,
    pub start: i64,
    pub end: i64,
    pub correlation_id: Option<i64>,
}

/// One finding: the time it covers (ns, the export's time) and the rule's columns.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub start: i64,
    pub duration: i64,
    /// In [`Rule::columns`] order.
    pub values: Vec<Value>,
    pub blame: Option<Blame>,
}

impl Finding {
    /// A column's value by nsys' name.
    pub fn value(&self, rule: Rule, column: &str) -> Option<&Value> {
        let i = rule.columns().iter().position(|c| *c == column)?;
        self.values.get(i)
    }
}

/// What one rule found.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Findings in nsys' order; empty when nothing was found.
    Findings(Vec<Finding>),
    /// nsys does not run the rule on this export (the data it reads is not there): why.
    Skipped(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct RuleReport {
    pub rule: Rule,
    pub outcome: Outcome,
}

impl RuleReport {
    pub fn findings(&self) -> &[Finding] {
        match &self.outcome {
            Outcome::Findings(f) => f,
            Outcome::Skipped(_) => &[],
        }
    }
}

/// Run the rules of `opts` on an nsys export (SQLite, Arrow or Parquet).
pub fn analyze_export(path: &Path, opts: &Options) -> Result<Vec<RuleReport>> {
    let (conn, schema) = crate::open_schema(path)?;
    schema.read_through(analyze(&conn, &schema, opts))
}

/// Run the rules of `opts` on an open export (temporary views are made on `conn` and dropped).
pub fn analyze(conn: &Connection, schema: &Schema, opts: &Options) -> Result<Vec<RuleReport>> {
    // The command line words its own message for its flag; this one is for other callers.
    if !CHUNK_COUNTS.contains(&opts.chunks) {
        bail!(
            "gpu_time_util's chunks per process and GPU must be between {} and {}, not {}",
            CHUNK_COUNTS.start(),
            CHUNK_COUNTS.end(),
            opts.chunks
        );
    }
    conn.execute_batch("PRAGMA temp.cache_size = -32768;")?;
    // SQLite's math functions, which nsys' Python has, are not built into ours.
    conn.create_scalar_function(
        "ceil",
        1,
        rusqlite::functions::FunctionFlags::SQLITE_UTF8
            | rusqlite::functions::FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| Ok(ctx.get::<Option<f64>>(0)?.map(f64::ceil)),
    )?;
    let mut out = Vec::new();
    for &rule in &opts.rules {
        let outcome =
            match missing(schema, rule) {
                Some(why) => Outcome::Skipped(why),
                None => {
                    let result = filter(conn, schema, rule, opts)
                        .and_then(|()| run(conn, schema, rule, opts));
                    drop_views(conn, schema)?;
                    Outcome::Findings(result.map_err(|e| {
                        anyhow::anyhow!("rule {}: {}", rule.name(), sql_problem(&e))
                    })?)
                }
            };
        out.push(RuleReport { rule, outcome });
    }
    Ok(out)
}

/// An error in one line: SQLite's message without the statement.
fn sql_problem(e: &anyhow::Error) -> String {
    match e.downcast_ref::<rusqlite::Error>() {
        Some(rusqlite::Error::SqlInputError { msg, .. }) => msg.clone(),
        Some(rusqlite::Error::SqliteFailure(_, Some(msg))) => msg.clone(),
        _ => format!("{e:#}"),
    }
}

/// The tables a rule needs and nsys' message when one is missing.
fn missing(schema: &Schema, rule: Rule) -> Option<String> {
    let runtime = "could not be analyzed because it does not contain the required CUDA data. \
                   Does the application use CUDA runtime APIs?";
    let checks: &[(&str, &str)] = match rule {
        Rule::CudaApiSync => &[
            ("StringIds", "file does not contain StringIds table."),
            (RUNTIME, runtime),
        ],
        Rule::CudaMemcpySync | Rule::CudaMemcpyAsync => &[
            ("StringIds", "file does not contain StringIds table."),
            (RUNTIME, runtime),
            (
                MEMCPY,
                "could not be analyzed because it does not contain the required CUDA data. \
                 Does the application use CUDA memcpy APIs?",
            ),
        ],
        Rule::CudaMemsetSync => &[
            ("StringIds", "file does not contain StringIds table."),
            (RUNTIME, runtime),
            (
                MEMSET,
                "could not be analyzed because it does not contain the required CUDA data. \
                 Does the application use CUDA memset APIs?",
            ),
        ],
        Rule::GpuGaps | Rule::GpuTimeUtil => {
            return gpu_apis(schema).is_empty().then(|| {
                "could not be analyzed because it does not contain the required data. Does \
                 the application launch GPU operations?"
                    .to_string()
            });
        }
    };
    checks
        .iter()
        .find(|(t, _)| !schema.has_table(t))
        .map(|(_, why)| why.to_string())
}

/// The tables nsys' time window filters (every table with `start` and `end`; these are the ones
/// the rules read).
fn filtered_tables(schema: &Schema) -> Vec<&'static str> {
    [
        RUNTIME,
        KERNEL,
        MEMCPY,
        MEMSET,
        PROFILER_OVERHEAD,
        "VULKAN_WORKLOAD",
        "OPENGL_WORKLOAD",
        "DX12_WORKLOAD",
    ]
    .into_iter()
    .filter(|t| schema.has_columns(t, &["start", "end"]))
    .collect()
}

fn drop_views(conn: &Connection, schema: &Schema) -> Result<()> {
    for t in filtered_tables(schema) {
        drop_temp_view(conn, t)?;
    }
    conn.execute_batch(&format!("DROP TABLE IF EXISTS temp.{CHUNKS}"))?;
    Ok(())
}

/// nsys' `filter_time_range`: temporary views named as the tables, holding only the rows in the
/// window (and of the process/thread, or of the NVTX range's thread or process).
fn filter(conn: &Connection, schema: &Schema, rule: Rule, opts: &Options) -> Result<()> {
    let (pid, tid) = if rule == Rule::CudaApiSync {
        (
            opts.process.filter(|&p| p >= 0),
            opts.thread.filter(|&t| t >= 0),
        )
    } else {
        (None, None)
    };
    if opts.start.is_none()
        && opts.end.is_none()
        && opts.nvtx.is_none()
        && pid.is_none()
        && tid.is_none()
    {
        return Ok(());
    }
    let (start, end, nvtx_tid) = match &opts.nvtx {
        None => (opts.start.unwrap_or(0), opts.end.unwrap_or(i64::MAX), None),
        Some(range) => {
            let (s, e, t) = nvtx_range(conn, schema, range)?;
            (opts.start.unwrap_or(s), opts.end.unwrap_or(e), Some(t))
        }
    };
    if start > end {
        bail!("the start time cannot be greater than the end time");
    }
    if (pid.is_some() || tid.is_some()) && opts.nvtx.is_some() {
        bail!("--nvtx cannot be used with --process or --thread");
    }
    for t in filtered_tables(schema) {
        let mut sql = format!(
            "CREATE TEMP VIEW \"{t}\" AS SELECT rowid, * FROM main.\"{t}\" \
             WHERE ((start >= {start} AND start < {end}) OR (\"end\" >= {start} AND \"end\" < {end}) \
             OR (start < {start} AND \"end\" >= {end}))"
        );
        let thread = schema.has_column(t, "globalTid");
        let process = schema.has_column(t, "globalPid");
        if let Some(p) = pid {
            if thread {
                sql += &format!(" AND (globalTid >> 24) & 0x00FFFFFF == {p}");
            } else if process {
                sql += &format!(" AND (globalPid >> 24) & 0x00FFFFFF == {p}");
            }
        }
        if let Some(t) = tid
            && thread
        {
            sql += &format!(" AND globalTid & 0x00FFFFFF == {t}");
        }
        if let Some(g) = nvtx_tid {
            let (p, t) = ((g >> 24) & 0xFF_FFFF, g & 0xFF_FFFF);
            if thread {
                if p != t {
                    // A push/pop range: its thread.
                    sql += &format!(" AND globalTid == {g}");
                } else {
                    // A start/end range: its process.
                    sql += &format!(" AND globalTid >> 24 == {g} >> 24");
                }
            } else if process {
                sql += &format!(" AND globalPid >> 24 == {g} >> 24");
            }
        }
        drop_temp_view(conn, t)?;
        conn.execute_batch(&sql)?;
    }
    Ok(())
}

/// Drop the temporary view `t` where there is one. Not `DROP VIEW IF EXISTS`: without the
/// view, SQLite would find the export's table of that name instead, which in an Arrow export
/// is a virtual table that cannot be dropped (see `arrow::register`).
fn drop_temp_view(conn: &Connection, t: &str) -> Result<()> {
    let exists: bool = conn.query_row(
        "SELECT count(*) > 0 FROM temp.sqlite_master WHERE type = 'view' AND name = ?1",
        [t],
        |r| r.get(0),
    )?;
    if exists {
        conn.execute_batch(&format!("DROP VIEW temp.\"{t}\""))?;
    }
    Ok(())
}

/// nsys' `_query_nvtx_filter_range`: (start, end, globalTid) of the first range named `range`
/// (`NAME[@DOMAIN]`, `/N` for the Nth), earliest first.
fn nvtx_range(conn: &Connection, schema: &Schema, range: &str) -> Result<(i64, i64, i64)> {
    if !schema.has_table(NVTX) {
        bail!("the export does not contain NV Tools Extension (NVTX) data");
    }
    if !schema.has_table("StringIds") {
        bail!("the export does not contain the StringIds table");
    }
    let (name, index) = match range.rsplit_once('/') {
        Some((n, i)) => match i.parse::<i64>() {
            Ok(i) if i >= 0 => (n, i),
            _ => (range, 0),
        },
        None => (range, 0),
    };
    let text = schema.col_of(NVTX, "nvtx", "text");
    let text_id = schema.col_of(NVTX, "nvtx", "textId");
    let d_text = schema.col(NVTX, "text");
    let sql = format!(
        "WITH domain AS (SELECT domainId, globalTid, {d_text} AS text FROM main.{NVTX} \
         WHERE eventType == {DOMAIN_CREATE}) \
         SELECT nvtx.start, nvtx.\"end\", nvtx.globalTid FROM main.{NVTX} AS nvtx \
         LEFT JOIN domain ON nvtx.domainId == domain.domainId \
         AND nvtx.globalTid >> 24 == domain.globalTid >> 24 \
         LEFT JOIN main.StringIds AS sid ON {text_id} == sid.id \
         WHERE nvtx.eventType IN ({PUSH_POP}, {START_END}, {NVTXT_PUSH_POP}, {NVTXT_START_END}) \
         AND coalesce({text}, sid.value) || coalesce('@' || domain.text, '') == ?1 \
         ORDER BY 1 LIMIT 1 OFFSET ?2"
    );
    let row = conn.query_row(&sql, rusqlite::params![name, index], |r| {
        Ok((
            r.get::<_, Option<i64>>(0)?,
            r.get::<_, Option<i64>>(1)?,
            r.get::<_, Option<i64>>(2)?,
        ))
    });
    match row {
        Ok((Some(s), Some(e), Some(t))) => Ok((s, e, t)),
        Ok(_) | Err(rusqlite::Error::QueryReturnedNoRows) => {
            bail!("NVTX range '{range}' could not be found")
        }
        Err(e) => Err(e.into()),
    }
}

/// The GPU work of each graphics or compute API the export has: (api, the table's rows as
/// `start, end, pid, globalId, deviceId, contextId, api`, with the profiler's overhead), as
/// nsys' `gpustats.GPUOperation` builds them.
fn gpu_apis(schema: &Schema) -> Vec<(&'static str, String)> {
    let select = |table: &str, api: &str, global: &str, device: &str, context: &str| {
        format!(
            "SELECT start, \"end\", ({global} >> 24) & 0x00FFFFFF AS pid, {global} AS globalId, \
             {device} AS deviceId, {context} AS contextId, '{api}' AS api FROM {table} \
             WHERE start > 0"
        )
    };
    let mut out = Vec::new();
    let cuda: Vec<String> = [KERNEL, MEMCPY, MEMSET]
        .into_iter()
        .filter(|t| schema.has_table(t))
        .map(|t| select(t, "cuda", "globalPid", "deviceId", "contextId"))
        .collect();
    if !cuda.is_empty() {
        out.push((
            "cuda",
            with_overhead(
                schema,
                &cuda.join(" UNION ALL "),
                "value == 'CUDA profiling data flush overhead' OR value == 'CUDA profiling stop \
                 overhead' OR value == 'CUDA profiling overhead'",
            ),
        ));
    }
    for (table, api, context, overhead) in [
        (
            "VULKAN_WORKLOAD",
            "vulkan",
            "contextId",
            "Vulkan profiling overhead",
        ),
        (
            "OPENGL_WORKLOAD",
            "opengl",
            "contextId",
            "OpenGL profiling overhead",
        ),
        (
            "DX12_WORKLOAD",
            "dx12",
            "shortContextId",
            "DX12 profiling overhead",
        ),
    ] {
        if schema.has_table(table) {
            let context = schema.col(table, context);
            let ops = select(table, api, "globalTid", "gpu", &context);
            out.push((
                api,
                with_overhead(schema, &ops, &format!("value == '{overhead}'")),
            ));
        }
    }
    out
}

/// nsys' `_add_profiling_overhead`: the profiler's overhead of each process, within the span of
/// each of its GPUs' work, counts as work on that GPU.
fn with_overhead(schema: &Schema, ops: &str, condition: &str) -> String {
    if !schema.has_table(PROFILER_OVERHEAD) || !schema.has_table("StringIds") {
        return ops.to_string();
    }
    format!(
        "WITH gpuops AS ({ops}), \
         range AS (SELECT min(start) AS start, max(\"end\") AS \"end\", pid, globalId, deviceId, \
         contextId, api FROM gpuops GROUP BY deviceId, pid), \
         overheadID AS (SELECT id FROM StringIds WHERE {condition}), \
         overhead AS (SELECT po.start, po.\"end\", (po.globalTid >> 24) & 0x00FFFFFF AS pid \
         FROM {PROFILER_OVERHEAD} AS po JOIN overheadID AS co ON co.id == po.nameId) \
         SELECT co.start, co.\"end\", co.pid, range.globalId, range.deviceId, range.contextId, \
         range.api FROM overhead AS co JOIN range ON co.pid == range.pid \
         AND co.start > range.start AND co.\"end\" < range.\"end\" \
         UNION ALL SELECT * FROM gpuops"
    )
}

/// Run one rule's query (views already in place).
fn run(conn: &Connection, schema: &Schema, rule: Rule, opts: &Options) -> Result<Vec<Finding>> {
    let mem_kind = if schema.has_table("ENUM_CUDA_MEM_KIND") {
        "(SELECT label FROM main.ENUM_CUDA_MEM_KIND WHERE id == {})"
    } else {
        "(CASE {} WHEN 0 THEN 'Pageable' WHEN 1 THEN 'Pinned' WHEN 2 THEN 'Device' WHEN 3 \
         THEN 'Array' WHEN 4 THEN 'Managed' WHEN 5 THEN 'Device Static' WHEN 6 THEN \
         'Managed Static' WHEN 7 THEN 'Unknown' END)"
    };
    let label = |col: &str| mem_kind.replace("{}", col);
    // Columns: duration, start, [blame: globalTid, start, end, correlationId], the rule's own.
    let (sql, blamed) = match rule {
        Rule::CudaApiSync => (
            format!(
                "WITH sid AS (SELECT * FROM StringIds WHERE value LIKE 'cudaDeviceSynchronize%' \
                 OR value LIKE 'cudaStreamSynchronize%') \
                 SELECT runtime.\"end\" - runtime.start, runtime.start, \
                 runtime.globalTid, runtime.start, runtime.\"end\", {corr}, \
                 (runtime.globalTid >> 24) & 0x00FFFFFF, runtime.globalTid & 0xFFFFFF, sid.value \
                 FROM {RUNTIME} AS runtime JOIN sid ON sid.id == runtime.nameId",
                corr = schema.col_of(RUNTIME, "runtime", "correlationId"),
            ),
            true,
        ),
        Rule::CudaMemcpySync | Rule::CudaMemcpyAsync => {
            let (names, which) = if rule == Rule::CudaMemcpySync {
                (
                    "value LIKE 'cudaMemcpy%' AND value NOT LIKE '%Async%'",
                    format!(
                        "NOT (bytes <= 64000 AND copyKind == 1) AND NOT ({src} IS NOT NULL \
                         AND {src} == {dst})",
                        src = schema.col(MEMCPY, "srcDeviceId"),
                        dst = schema.col(MEMCPY, "dstDeviceId"),
                    ),
                )
            } else {
                (
                    "value LIKE 'cudaMemcpy%Async%'",
                    format!(
                        "{} == 0 OR {} == 0",
                        schema.col(MEMCPY, "srcKind"),
                        schema.col(MEMCPY, "dstKind")
                    ),
                )
            };
            (
                format!(
                    "WITH sid AS (SELECT * FROM StringIds WHERE {names}), \
                     memcpy AS (SELECT * FROM {MEMCPY} WHERE {which}) \
                     SELECT memcpy.\"end\" - memcpy.start, memcpy.start, \
                     runtime.globalTid, runtime.start, runtime.\"end\", runtime.correlationId, \
                     {src}, {dst}, memcpy.bytes, (memcpy.globalPid >> 24) & 0x00FFFFFF, \
                     memcpy.deviceId, memcpy.contextId, NULLIF({green}, 0), memcpy.streamId, \
                     sid.value \
                     FROM memcpy JOIN main.{RUNTIME} AS runtime \
                     ON runtime.correlationId == memcpy.correlationId \
                     JOIN sid ON sid.id == runtime.nameId",
                    src = label(&schema.col_of(MEMCPY, "memcpy", "srcKind")),
                    dst = label(&schema.col_of(MEMCPY, "memcpy", "dstKind")),
                    green = schema.col_of(MEMCPY, "memcpy", "greenContextId"),
                ),
                true,
            )
        }
        Rule::CudaMemsetSync => (
            format!(
                "WITH sid AS (SELECT * FROM StringIds WHERE value LIKE 'cudaMemset%' \
                 AND value NOT LIKE '%async%'), \
                 memset AS (SELECT * FROM {MEMSET} WHERE {kind} == 1 OR {kind} == 4) \
                 SELECT memset.\"end\" - memset.start, memset.start, \
                 runtime.globalTid, runtime.start, runtime.\"end\", runtime.correlationId, \
                 {label}, memset.bytes, (memset.globalPid >> 24) & 0x00FFFFFF, \
                 memset.deviceId, memset.contextId, NULLIF({green}, 0), memset.streamId, \
                 sid.value \
                 FROM memset JOIN main.{RUNTIME} AS runtime \
                 ON runtime.correlationId == memset.correlationId \
                 JOIN sid ON sid.id == runtime.nameId",
                kind = schema.col(MEMSET, "memKind"),
                label = label(&schema.col_of(MEMSET, "memset", "memKind")),
                green = schema.col_of(MEMSET, "memset", "greenContextId"),
            ),
            true,
        ),
        Rule::GpuGaps => {
            let mut out = Vec::new();
            for (_, ops) in gpu_apis(schema) {
                gaps(
                    &read_ops(conn, &ops)?,
                    opts.gap_ms.saturating_mul(1_000_000),
                    &mut out,
                );
            }
            sort(rule, &mut out);
            return Ok(out);
        }
        Rule::GpuTimeUtil => {
            conn.execute_batch(&format!(
                "DROP TABLE IF EXISTS temp.{CHUNKS}; CREATE TEMP TABLE {CHUNKS} (rangeId INTEGER, \
                 start REAL, \"end\" REAL, size REAL, timePercentage REAL, pid INTEGER, \
                 globalId INTEGER, deviceId INTEGER, contextId INTEGER, api TEXT)"
            ))?;
            for (api, ops) in gpu_apis(schema) {
                chunks(
                    conn,
                    api,
                    &read_ops(conn, &ops)?,
                    opts.chunks,
                    opts.threshold,
                )?;
            }
            // Consecutive chunks coalesced, with their weighted average, as nsys' SQL does it.
            (
                format!(
                    "WITH chunkgroup AS (SELECT *, rangeId - ROW_NUMBER() OVER (PARTITION BY api, \
                     pid, deviceId ORDER BY rangeId) AS groupId FROM temp.{CHUNKS}) \
                     SELECT max(\"end\") - min(start) AS duration, min(start) AS start, \
                     round(sum(size * timePercentage) / sum(size), 1) AS average, pid, deviceId, \
                     contextId FROM chunkgroup GROUP BY api, groupId, deviceId, pid"
                ),
                false,
            )
        }
    };
    let mut stmt = conn.prepare(&sql)?;
    let n = stmt.column_count();
    let mut rows = stmt.query([])?;
    let mut out = Vec::new();
    let own = if blamed { 6 } else { 2 };
    while let Some(r) = rows.next()? {
        let (Some(duration), Some(start)) = (whole(r.get_ref(0)?), whole(r.get_ref(1)?)) else {
            continue;
        };
        let blame = if blamed {
            match (
                whole(r.get_ref(2)?),
                whole(r.get_ref(3)?),
                whole(r.get_ref(4)?),
            ) {
                (Some(global_tid), Some(start), Some(end)) => Some(Blame {
                    global_tid,
                    start,
                    end,
                    correlation_id: whole(r.get_ref(5)?),
                }),
                _ => None,
            }
        } else {
            None
        };
        let mut values = Vec::with_capacity(n - own);
        for i in own..n {
            values.push(match (rule, i - own) {
                // nsys rounds the weighted average to one decimal.
                (Rule::GpuTimeUtil, 0) => match r.get_ref(i)? {
                    ValueRef::Integer(v) => Value::Real(v as f64),
                    v => Value::of(v),
                },
                // Shown as the trace and nsys' reports show calls: without the runtime's version
                // suffix (`cudaStreamSynchronize_v3020`).
                _ if rule.columns()[i - own] == "API Name" => match Value::of(r.get_ref(i)?) {
                    Value::Text(t) => {
                        Value::Text(crate::api::display_name(&t).map_or(t.clone(), str::to_string))
                    }
                    v => v,
                },
                _ => Value::of(r.get_ref(i)?),
            });
        }
        out.push(Finding {
            start,
            duration,
            values,
            blame,
        });
    }
    sort(rule, &mut out);
    Ok(out)
}

/// nsys' order: longest first (gaps: then earliest); utilization: lowest, then shortest.
fn sort(rule: Rule, findings: &mut [Finding]) {
    match rule {
        Rule::GpuTimeUtil => findings.sort_by(|a, b| {
            let u = |f: &Finding| match f.values.first() {
                Some(Value::Real(v)) => *v,
                Some(Value::Int(v)) => *v as f64,
                _ => f64::INFINITY,
            };
            u(a).total_cmp(&u(b))
                .then(a.duration.cmp(&b.duration))
                .then(a.start.cmp(&b.start))
        }),
        _ => findings.sort_by(|a, b| {
            b.duration
                .cmp(&a.duration)
                .then(a.start.cmp(&b.start))
                .then_with(|| {
                    let k = |f: &Finding| f.blame.as_ref().map(|b| (b.global_tid, b.start));
                    k(a).cmp(&k(b))
                })
        }),
    }
}

/// A time SQLite computed as an integer or as a whole real.
fn whole(v: ValueRef<'_>) -> Option<i64> {
    match v {
        ValueRef::Integer(i) => Some(i),
        ValueRef::Real(f) if f.is_finite() => Some(f.round() as i64),
        _ => None,
    }
}

/// The temporary table of the chunks below the threshold (`gpu_time_util`).
const CHUNKS: &str = "analyze_low_chunks";

/// A row of GPU work (or profiler overhead) as nsys' GPU rules see it.
struct GpuOp {
    start: i64,
    end: i64,
    pid: Option<i64>,
    device: Option<i64>,
    global: Option<i64>,
    context: Option<i64>,
}

/// GPU work by (process, device), in SQL's order (NULL first).
type OpGroups = std::collections::BTreeMap<(Option<i64>, Option<i64>), Vec<GpuOp>>;

/// The rows of one API's GPU work (`gpu_apis`), grouped by (process, device), each group in
/// the query's row order.
fn read_ops(conn: &Connection, ops: &str) -> Result<OpGroups> {
    let mut stmt = conn.prepare(&format!(
        "SELECT start, \"end\", pid, deviceId, globalId, contextId FROM ({ops})"
    ))?;
    let mut rows = stmt.query([])?;
    let mut out = OpGroups::new();
    while let Some(r) = rows.next()? {
        let (Some(start), Some(end)) = (whole(r.get_ref(0)?), whole(r.get_ref(1)?)) else {
            continue;
        };
        let op = GpuOp {
            start,
            end,
            pid: whole(r.get_ref(2)?),
            device: whole(r.get_ref(3)?),
            global: whole(r.get_ref(4)?),
            context: whole(r.get_ref(5)?),
        };
        out.entry((op.pid, op.device)).or_default().push(op);
    }
    Ok(out)
}

fn int_or_null(v: Option<i64>) -> Value {
    v.map_or(Value::Null, Value::Int)
}

/// nsys' gap query: per process and device, the k-th earliest start against the (k-1)-th
/// earliest end (both numbered in one order over every process and device, joined on the same
/// process and device); a gap where that end precedes that start by more than the threshold.
fn gaps(groups: &OpGroups, threshold_ns: i64, out: &mut Vec<Finding>) {
    for (&(pid, device), ops) in groups {
        // SQL's `==` never joins NULLs.
        if pid.is_none() || device.is_none() {
            continue;
        }
        let mut starts: Vec<i64> = ops.iter().map(|o| o.start).collect();
        starts.sort_unstable();
        let mut ends: Vec<&GpuOp> = ops.iter().collect();
        ends.sort_by_key(|o| o.end);
        for k in 1..starts.len() {
            let (start, before) = (starts[k], ends[k - 1]);
            let duration = start - before.end;
            if duration > threshold_ns && before.end < start {
                out.push(Finding {
                    start: before.end,
                    duration,
                    values: vec![
                        int_or_null(pid),
                        int_or_null(device),
                        int_or_null(before.context),
                    ],
                    blame: None,
                });
            }
        }
    }
}

/// nsys' chunk query up to the chunks below the threshold, into the temporary table [`CHUNKS`]:
/// each process's and device's span of GPU work in `chunks` equal chunks (their size rounded
/// up to whole ns, the last one cut at the span's end), and each chunk's use, the summed overlap
/// of the work with it as a percentage of its size. The arithmetic is SQLite's: doubles for
/// chunk bounds and sums (whole numbers of ns, so exact), compared with the integer times.
fn chunks(
    conn: &Connection,
    api: &str,
    groups: &OpGroups,
    chunks: i64,
    threshold: i64,
) -> Result<()> {
    let mut insert = conn.prepare(&format!(
        "INSERT INTO temp.{CHUNKS} VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
    ))?;
    for (&(pid, device), ops) in groups {
        let (Some(lo), Some(hi)) = (
            ops.iter().map(|o| o.start).min(),
            ops.iter().map(|o| o.end).max(),
        ) else {
            continue;
        };
        // The range's other columns: one row of the group (SQLite's bare columns).
        let first = ops.iter().min_by_key(|o| o.start).expect("a row");
        let size = ((hi - lo) as f64 / chunks as f64).ceil();
        let bounds = |i: i64| {
            let cstart = i as f64 * size + lo as f64;
            (cstart, (cstart + size).min(hi as f64))
        };
        let n = usize::try_from(chunks).unwrap_or(0);
        let mut used = vec![0.0f64; n];
        // NULL process or device: no work joins its chunks (SQL's `==`).
        if pid.is_some() && device.is_some() && size > 0.0 {
            for op in ops {
                // The chunks it overlaps: from the one before its start's, while they start
                // before its end.
                let from = (((op.start - lo) as f64 / size).floor() as i64 - 1).max(0);
                for i in from..chunks {
                    let (cstart, cend) = bounds(i);
                    if cstart >= op.end as f64 {
                        break;
                    }
                    if (op.start as f64) < cend && (op.end as f64) > cstart {
                        used[i as usize] +=
                            (op.end as f64).min(cend) - (op.start as f64).max(cstart);
                    }
                }
            }
        }
        for (i, used) in used.iter().enumerate() {
            let (cstart, cend) = bounds(i as i64);
            if cstart >= cend {
                continue;
            }
            let pct = used / (cend - cstart) * 100.0;
            if pct < threshold as f64 {
                insert.execute(rusqlite::params![
                    i as i64,
                    cstart,
                    cend,
                    cend - cstart,
                    pct,
                    pid,
                    first.global,
                    device,
                    first.context,
                    api
                ])?;
            }
        }
    }
    Ok(())
}

/// The columns of `--csv`: rule, time, then every rule's own columns (blank where a rule has
/// none), named as nsys names them in snake case.
pub const CSV_COLUMNS: [(&str, &str); 15] = [
    ("rule", ""),
    ("start_ns", ""),
    ("duration_ns", ""),
    ("pid", "PID"),
    ("tid", "TID"),
    ("device_id", "Device ID"),
    ("context_id", "Context ID"),
    ("green_context_id", "Green Context ID"),
    ("stream_id", "Stream ID"),
    ("api_name", "API Name"),
    ("src_kind", "Src Kind"),
    ("dst_kind", "Dst Kind"),
    ("memory_kind", "Memory Kind"),
    ("bytes", "Bytes"),
    ("in_use_pct", "In-Use (%)"),
];

// ---------------------------------------------------------------------------------------------
// Findings on the timeline (`--analyze`)

/// The findings a conversion draws: every rule with nsys' defaults, each finding with the flow
/// id that links it to the CUDA call it blames.
#[derive(Debug, Default)]
pub struct TraceFindings {
    items: Vec<(Rule, Finding, Option<u64>)>,
    /// (thread, start) of each blamed call -> the flow ids it starts.
    blamed: std::collections::HashMap<(i64, i64), Vec<u64>, nsys_perfetto_model::model::FastHash>,
    /// The flow ids whose call was written (a selection may leave the call out).
    written: std::sync::Mutex<std::collections::HashSet<u64>>,
}

impl TraceFindings {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Flow ids of findings: `n << 2 | 3`, beside the GPU rows' (`rowid << 2 | table`, tables 0 to
/// 2, see [`crate::flows::flow_id`]), so the two never meet.
fn finding_flow(n: u64) -> u64 {
    n << 2 | 3
}

/// Run every rule (nsys' defaults) on a conversion's export.
pub fn for_trace(schema: &Schema) -> Result<TraceFindings> {
    let conn = crate::open_readonly(&schema.path)?;
    let reports = analyze(&conn, schema, &Options::default())?;
    let mut out = TraceFindings::default();
    let mut n = 0;
    for r in reports {
        let Outcome::Findings(findings) = r.outcome else {
            continue;
        };
        for f in findings {
            // An arrow from the call to the GPU work it waited for. A synchronizing call's
            // finding is the call itself, at the same time: its args name the call instead.
            let linked = f
                .blame
                .as_ref()
                .filter(|b| r.rule.on_gpu() && f.start > b.start);
            let flow = linked.map(|b| {
                n += 1;
                let id = finding_flow(n);
                out.blamed
                    .entry((b.global_tid, b.start))
                    .or_default()
                    .push(id);
                id
            });
            out.items.push((r.rule, f, flow));
        }
    }
    Ok(out)
}

/// A filter that adds, to each CUDA call a finding blames, the arrow to the finding.
pub struct Blamed<'a> {
    pub findings: &'a TraceFindings,
    pub scratch: Vec<u64>,
}

impl<S: nsys_perfetto_model::model::EventSink> nsys_perfetto_model::model::SinkFilter<S>
    for Blamed<'_>
{
    fn event(
        &mut self,
        sink: &mut S,
        key: nsys_perfetto_model::model::GroupKey,
        ev: &nsys_perfetto_model::model::Event<'_>,
    ) -> Result<()> {
        if !self.findings.blamed.is_empty()
            && ev.category == nsys_perfetto_model::model::Category::CudaApi
            && let nsys_perfetto_model::model::GroupKey::ThreadApi { global_tid } = key
            && let Some(ids) = self.findings.blamed.get(&(global_tid, ev.start))
        {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.extend_from_slice(ev.flows.out);
            scratch.extend_from_slice(ids);
            if let Ok(mut w) = self.findings.written.lock() {
                w.extend(ids.iter().copied());
            }
            let linked = nsys_perfetto_model::model::Event {
                flows: nsys_perfetto_model::model::Flows {
                    out: &scratch,
                    terminating: ev.flows.terminating,
                },
                ..ev.clone()
            };
            let result = sink.event(key, &linked);
            self.scratch = scratch;
            return result;
        }
        sink.event(key, ev)
    }
}

/// Write the findings into `sink` (after every reader, so the calls they blame are known): one
/// slice per finding on its rule's track of the "Analysis" group, named by the rule, with the
/// rule's explanation, nsys' advice and the finding's columns as args, and an arrow from the
/// call it blames when that call was written. A selection keeps the findings that overlap its
/// time window and belong to its processes and devices.
pub fn write_findings<S: nsys_perfetto_model::model::EventSink>(
    findings: &TraceFindings,
    selection: &nsys_perfetto_model::select::Selection,
    mut sink: S,
) -> Result<nsys_perfetto_model::summary::Summary> {
    use nsys_perfetto_model::model::{Arg, ArgValue, Category, Event, Flows, GroupKey, Name};
    let written = findings
        .written
        .lock()
        .map(|w| w.clone())
        .unwrap_or_default();
    let opts = Options::default();
    let mut order: Vec<&(Rule, Finding, Option<u64>)> = findings.items.iter().collect();
    order.sort_by_key(|(r, f, _)| (*r, f.start, std::cmp::Reverse(f.duration)));
    let int = |f: &Finding, rule: Rule, col: &str| match f.value(rule, col) {
        Some(Value::Int(v)) => Some(*v),
        _ => None,
    };
    for (rule, f, flow) in order {
        let (rule, end) = (*rule, f.start.saturating_add(f.duration));
        if let Some(t) = selection.time
            && (t.start.is_some_and(|s| end < s) || t.end.is_some_and(|e| f.start > e))
        {
            continue;
        }
        if !selection.pids.is_empty()
            && !int(f, rule, "PID").is_some_and(|p| selection.pids.contains(&p))
        {
            continue;
        }
        if !selection.devices.is_empty()
            && let Some(d) = int(f, rule, "Device ID")
            && !selection.devices.contains(&d)
        {
            continue;
        }
        let advice = rule.advice(&opts);
        let texts: Vec<String> = f.values.iter().map(Value::text).collect();
        let mut args: Vec<Arg<'_>> = vec![
            Arg::str("rule", rule.name()),
            Arg::str("title", rule.title()),
            Arg::str("explanation", rule.explanation()),
            Arg::str("advice", &advice),
        ];
        for (i, v) in f.values.iter().enumerate() {
            let Some((key, _)) = CSV_COLUMNS
                .iter()
                .find(|(_, nsys)| *nsys == rule.columns()[i])
            else {
                continue;
            };
            match v {
                Value::Null => {}
                Value::Int(x) => args.push(Arg::int(key, *x)),
                Value::Real(x) => args.push(Arg {
                    key,
                    value: ArgValue::Double(*x),
                }),
                Value::Text(_) => args.push(Arg::str(key, &texts[i])),
            }
        }
        if let Some(b) = &f.blame {
            args.push(Arg::int(
                "blamed_call_tid",
                nsys_perfetto_model::model::tid_of(b.global_tid),
            ));
            args.push(Arg::int("blamed_call_start_ns", b.start));
            if let Some(c) = b.correlation_id {
                args.push(Arg::int("correlation_id", c));
            }
        }
        let ev = Event {
            start: f.start,
            end: Some(end),
            name: Name::Static(rule.name()),
            category: Category::Analysis,
            args: &args,
            flows: Flows {
                out: &[],
                terminating: flow.filter(|id| written.contains(id)),
            },
        };
        let index = RULES.iter().position(|r| *r == rule).unwrap_or(0) as u8;
        sink.event(
            GroupKey::Analysis {
                rule: index,
                track: rule.track_name(),
                source: 0,
            },
            &ev,
        )?;
    }
    sink.finish()
}
