//! The rules of `analyze` run on an export: each rule's SQL, as nsys' recipe of the rule writes
//! it (the filtered views of `--start`, `--end` and `--nvtx`, the GPU APIs of a schema), and the
//! queries that find each rule's rows.

use super::gpu_ops::{CHUNKS, chunks, gaps, read_ops, whole};
use super::{
    Blame, CHUNK_COUNTS, Finding, Options, Outcome, PROFILER_OVERHEAD, Rule, RuleReport, Value,
};
use crate::names::nvtx_type::{
    DOMAIN_CREATE, NVTXT_PUSH_POP, NVTXT_START_END, PUSH_POP, START_END,
};
use crate::names::{KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME};
use crate::schema::Schema;
use anyhow::{Result, bail};
use rusqlite::Connection;
use rusqlite::types::ValueRef;
use std::path::Path;

/// Run the rules of `opts` on an nsys export (SQLite, Arrow or Parquet).
pub fn analyze_export(path: &Path, opts: &Options) -> Result<Vec<RuleReport>> {
    let export = crate::source::Export::open(path)?;
    let reports = analyze(&export.conn, &export.schema, opts);
    export.schema.read_through(reports)
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
pub(super) fn sql_problem(e: &anyhow::Error) -> String {
    match e.downcast_ref::<rusqlite::Error>() {
        Some(rusqlite::Error::SqlInputError { msg, .. }) => msg.clone(),
        Some(rusqlite::Error::SqliteFailure(_, Some(msg))) => msg.clone(),
        _ => format!("{e:#}"),
    }
}

/// The tables a rule needs and nsys' message when one is missing.
pub(super) fn missing(schema: &Schema, rule: Rule) -> Option<String> {
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
pub(super) fn filtered_tables(schema: &Schema) -> Vec<&'static str> {
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

pub(super) fn drop_views(conn: &Connection, schema: &Schema) -> Result<()> {
    for t in filtered_tables(schema) {
        drop_temp_view(conn, t)?;
    }
    conn.execute_batch(&format!("DROP TABLE IF EXISTS temp.{CHUNKS}"))?;
    Ok(())
}

/// nsys' `filter_time_range`: temporary views named as the tables, holding only the rows in the
/// window (and of the process/thread, or of the NVTX range's thread or process).
pub(super) fn filter(conn: &Connection, schema: &Schema, rule: Rule, opts: &Options) -> Result<()> {
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
pub(super) fn drop_temp_view(conn: &Connection, t: &str) -> Result<()> {
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
pub(super) fn nvtx_range(
    conn: &Connection,
    schema: &Schema,
    range: &str,
) -> Result<(i64, i64, i64)> {
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
pub(super) fn gpu_apis(schema: &Schema) -> Vec<(&'static str, String)> {
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
pub(super) fn with_overhead(schema: &Schema, ops: &str, condition: &str) -> String {
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
pub(super) fn run(
    conn: &Connection,
    schema: &Schema,
    rule: Rule,
    opts: &Options,
) -> Result<Vec<Finding>> {
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
pub(super) fn sort(rule: Rule, findings: &mut [Finding]) {
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
