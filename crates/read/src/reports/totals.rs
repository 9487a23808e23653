//! The SQL of the workflows' totals (`stats`, `extract`, `sweep`): the events of each [`Kind`]
//! with their durations, named as nsys' own reports name them (`docs/names.md`), with a second
//! name, the one the trace shows, that patterns also match:
//! - `kernel`: `CUPTI_ACTIVITY_KIND_KERNEL` by demangled name (second: the base `shortName`);
//! - `memory`: `CUPTI_ACTIVITY_KIND_MEMCPY` by copy kind (`[CUDA memcpy Host-to-Device]`;
//!   second: `Memcpy HtoD`) and `CUPTI_ACTIVITY_KIND_MEMSET` (`[CUDA memset]`; `Memset`);
//! - `api`: `CUPTI_ACTIVITY_KIND_RUNTIME` and `_DRIVER` calls, by `cuda_api_sum`'s name (a
//!   six-character `_vNNNN` suffix dropped; second: the symbol as recorded);
//! - `nvtx`: NVTX push/pop (59) and start/end (60) ranges, CPU time, named `Domain:text` in a
//!   named domain (second: the text);
//! - `nvtx-gpu`: the same ranges projected onto the GPU ([`crate::projection`]): per range, from
//!   the earliest start to the latest end of the GPU rows launched inside it, over all devices;
//!   only ranges that launched GPU work count.
//!
//! Durations are `end - start` in nanoseconds, over rows whose `end >= start`. Each function
//! returns a query (the app runs it and renders its rows), `None` when the export lacks the
//! tables it reads.

use super::functions::GROUP_NAME_FN;
use super::{api_name_sql, memcpy_label};
use crate::enums::Enums;
use crate::names::nvtx_type::{DOMAIN_CREATE, PUSH_POP, START_END};
use crate::names::{DRIVER, KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME};
use crate::projection::{NVTX_GPU, PROJ_DB};
use crate::schema::Schema;
use nsys_perfetto_model::category::Kind;

/// The events of an export, as the workflows total them: its schema, its enum labels and
/// whether the NVTX-to-GPU projection is attached (as [`PROJ_DB`]).
pub struct Events<'a> {
    pub schema: &'a Schema,
    pub enums: &'a Enums,
    pub projected: bool,
}

impl Events<'_> {
    /// The durations of one kind of event: `SELECT key, alt, dur` where `key` groups events
    /// under one name, `alt` is a second name patterns may match (kernels' demangled name), and
    /// `dur` is in ns. `None` when the export has no such events.
    pub fn durations(&self, kind: Kind) -> Option<String> {
        let s = &self.schema;
        let ok = |t: &str| s.has_columns(t, &["start", "end"]);
        match kind {
            Kind::Kernel => {
                if !ok(KERNEL) {
                    return None;
                }
                let short = s.col(KERNEL, "shortName");
                let long = s.col(KERNEL, "demangledName");
                Some(format!(
                    "SELECT coalesce({long}, {short}) AS key, {short} AS alt, \"end\" - start AS dur \
                     FROM main.\"{KERNEL}\" WHERE \"end\" >= start"
                ))
            }
            Kind::Memory => {
                let mut parts = Vec::new();
                if ok(MEMCPY) {
                    // nsys' report name, and the trace's ("Memcpy HtoD") as the second name.
                    let kind = s.col(MEMCPY, "copyKind");
                    let (mut long, mut short) = (String::new(), String::new());
                    for k in 0..=13 {
                        long.push_str(&format!(" WHEN {k} THEN '{}'", memcpy_label(k)));
                        short.push_str(&format!(
                            " WHEN {k} THEN '{}'",
                            self.enums.copy_kind(k).replace('\'', "''")
                        ));
                    }
                    parts.push(format!(
                        "SELECT '[CUDA memcpy ' || (CASE {kind}{long} ELSE 'Unknown' END) || ']' AS key, \
                         'Memcpy ' || (CASE {kind}{short} ELSE coalesce({kind}, '?') END) AS alt, \
                         \"end\" - start AS dur FROM main.\"{MEMCPY}\" WHERE \"end\" >= start"
                    ));
                }
                if ok(MEMSET) {
                    parts.push(format!(
                        "SELECT '[CUDA memset]' AS key, 'Memset' AS alt, \"end\" - start AS dur \
                         FROM main.\"{MEMSET}\" WHERE \"end\" >= start"
                    ));
                }
                (!parts.is_empty()).then(|| parts.join(" UNION ALL "))
            }
            Kind::Api => {
                let parts: Vec<String> = [RUNTIME, DRIVER]
                    .iter()
                    .filter(|t| ok(t))
                    .map(|t| {
                        // nsys' `cuda_api_sum` name; the symbol as recorded is the second name.
                        if self.has_strings() {
                            format!(
                                "SELECT coalesce({}, '(unnamed API call)') AS key, s.value AS alt, \
                                 a.\"end\" - a.start AS dur FROM main.\"{t}\" a \
                                 LEFT JOIN main.StringIds s ON s.id = {} WHERE a.\"end\" >= a.start",
                                api_name_sql("s.value"),
                                s.col_of(t, "a", "nameId")
                            )
                        } else {
                            format!(
                                "SELECT '(unnamed API call)' AS key, NULL AS alt, \
                                 \"end\" - start AS dur FROM main.\"{t}\" WHERE \"end\" >= start"
                            )
                        }
                    })
                    .collect();
                (!parts.is_empty()).then(|| parts.join(" UNION ALL "))
            }
            Kind::Nvtx => {
                if !s.has_columns(NVTX, &["start", "end", "eventType"]) {
                    return None;
                }
                let text = s.col_of(NVTX, "r", "text");
                let (join, name, bare) = self.nvtx_name(&text, &s.col_of(NVTX, "r", "textId"), "r");
                Some(format!(
                    "SELECT {name} AS key, {bare} AS alt, r.\"end\" - r.start AS dur \
                     FROM main.\"{NVTX}\" r{join} \
                     WHERE r.eventType IN ({PUSH_POP}, {START_END}) AND r.\"end\" >= r.start"
                ))
            }
            Kind::NvtxGpu => {
                self.projected.then_some(())?;
                let (join, name, bare) = self.nvtx_name("r.name_text", "r.name_id", "c");
                let row = if self.nvtx_domains() {
                    format!(" JOIN main.\"{NVTX}\" c ON c.rowid = r.nvtx_rid")
                } else {
                    String::new()
                };
                Some(format!(
                    "SELECT {name} AS key, {bare} AS alt, max(r.gpu_end) - min(r.gpu_start) AS dur \
                     FROM {PROJ_DB}.{NVTX_GPU} r{row}{join} GROUP BY r.nvtx_rid"
                ))
            }
        }
    }

    /// Every NVTX range of `kind` (`Nvtx`: CPU time; `NvtxGpu`: the span of the GPU work it
    /// launched, ranges without GPU work left out): `SELECT key, tid, s, e, dur`, where `s`/`e`
    /// are the range's CPU start and end (what nesting is judged by), ordered by thread, start,
    /// then longest first, so that a range comes after every range of its thread containing it.
    pub fn nvtx_ranges(&self, kind: Kind) -> Option<String> {
        let s = &self.schema;
        if !s.has_columns(NVTX, &["start", "end", "eventType"]) {
            return None;
        }
        let tid = s.col_of(NVTX, "c", "globalTid");
        let sql = match kind {
            Kind::Nvtx => {
                let text = s.col_of(NVTX, "r", "text");
                let (join, name, bare) = self.nvtx_name(&text, &s.col_of(NVTX, "r", "textId"), "r");
                let tid = s.col_of(NVTX, "r", "globalTid");
                format!(
                    "SELECT {name} AS key, {tid} AS tid, r.start AS s, r.\"end\" AS e, \
                     r.\"end\" - r.start AS dur, {bare} AS alt FROM main.\"{NVTX}\" r{join} \
                     WHERE r.eventType IN ({PUSH_POP}, {START_END}) AND r.\"end\" >= r.start"
                )
            }
            Kind::NvtxGpu => {
                self.projected.then_some(())?;
                let (join, name, bare) = self.nvtx_name("r.name_text", "r.name_id", "c");
                format!(
                    "SELECT {name} AS key, {tid} AS tid, c.start AS s, c.\"end\" AS e, \
                     max(r.gpu_end) - min(r.gpu_start) AS dur, {bare} AS alt \
                     FROM {PROJ_DB}.{NVTX_GPU} r JOIN main.\"{NVTX}\" c ON c.rowid = r.nvtx_rid{join} \
                     GROUP BY r.nvtx_rid"
                )
            }
            _ => return None,
        };
        Some(format!(
            "SELECT key, tid, s, e, dur, alt FROM ({sql}) ORDER BY tid, s, e DESC"
        ))
    }

    fn has_strings(&self) -> bool {
        self.schema.has_columns("StringIds", &["id", "value"])
    }

    /// Whether NVTX ranges can be named by their domain (the export records domains).
    fn nvtx_domains(&self) -> bool {
        self.schema
            .has_columns(NVTX, &["domainId", "globalTid", "eventType", "text"])
    }

    /// (join, name, bare name) of an NVTX range from its text and text id columns and the alias
    /// of its `NVTX_EVENTS` row: the name is nsys' `Domain:text` for a range of a named domain
    /// (the domain's creation, event type 75, in the range's process names it, as in nsys'
    /// `nvtx_sum`), else the text, which is the bare name.
    fn nvtx_name(&self, text: &str, text_id: &str, row: &str) -> (String, String, String) {
        let (mut join, bare) = if self.has_strings() && text_id != "NULL" {
            (
                format!(" LEFT JOIN main.StringIds s ON s.id = {text_id}"),
                format!("coalesce({text}, s.value, '(unnamed range)')"),
            )
        } else {
            (
                String::new(),
                format!("coalesce({text}, '(unnamed range)')"),
            )
        };
        if !self.nvtx_domains() {
            return (join, bare.clone(), bare);
        }
        join.push_str(&format!(
            " LEFT JOIN (SELECT domainId AS id, globalTid & 0x0000FFFFFF000000 AS pid, \
             text AS name, min(start) FROM main.\"{NVTX}\" WHERE eventType = {DOMAIN_CREATE} \
             GROUP BY 1, 2) dom ON dom.id = {row}.domainId \
             AND dom.pid = ({row}.globalTid & 0x0000FFFFFF000000)"
        ));
        (
            join,
            format!("coalesce(dom.name || ':', '') || {bare}"),
            bare,
        )
    }

    /// (join, expression) turning an aggregated `a.key` (and `a.alt`) into display names.
    pub fn key_names(&self, kind: Kind) -> (String, String, String) {
        let strings = self.has_strings();
        match kind {
            Kind::Kernel if strings => (
                " LEFT JOIN main.StringIds s ON s.id = a.key LEFT JOIN main.StringIds s2 ON s2.id = a.alt"
                    .into(),
                "coalesce(s.value, '(unnamed kernel)')".into(),
                "s2.value".into(),
            ),
            Kind::Kernel => (String::new(), "'(unnamed kernel)'".into(), "NULL".into()),
            // API, memory and NVTX keys are names already.
            Kind::Api | Kind::Memory | Kind::Nvtx | Kind::NvtxGpu => {
                (String::new(), "a.key".into(), "a.alt".into())
            }
        }
    }

    /// One row per name of [`Events::durations`]'s `d` (of `kind`), the most total time first:
    /// `(name, count, total, min, max, median)`, at most `?1` rows (-1: all). The median is
    /// the middle duration, or the mean of the middle two.
    pub fn by_name(&self, kind: Kind, d: &str) -> String {
        let (join, name, _) = self.key_names(kind);
        format!(
            "WITH r AS (SELECT key, dur, row_number() OVER (PARTITION BY key ORDER BY dur) AS rn, \
               count(*) OVER (PARTITION BY key) AS n FROM ({d})), \
             g AS (SELECT key, NULL AS alt, count(*) AS cnt, sum(dur) AS total, min(dur) AS mn, max(dur) AS mx, \
               avg(CASE WHEN rn IN ((n + 1) / 2, (n + 2) / 2) THEN dur END) AS med \
               FROM r GROUP BY key) \
             SELECT {name}, a.cnt, a.total, a.mn, a.mx, a.med FROM g a{join} \
             ORDER BY a.total DESC, a.cnt DESC, a.key LIMIT ?1"
        )
    }

    /// One row per distinct (name, second name) of [`Events::durations`]'s `d` (of `kind`):
    /// `(name, second name, count, total)`.
    pub fn by_names(&self, kind: Kind, d: &str) -> String {
        let (join, name, alt) = self.key_names(kind);
        format!(
            "SELECT {name}, {alt}, a.cnt, a.total FROM \
             (SELECT key, alt, count(*) AS cnt, sum(dur) AS total FROM ({d}) GROUP BY key, alt) a{join}"
        )
    }
}

/// [`Events::durations`]' `d` with its names grouped by nsys' NVTX grouping function
/// ([`GROUP_NAME_FN`], registered on the connection).
pub fn grouped(d: &str) -> String {
    format!("SELECT {GROUP_NAME_FN}(key) AS key, alt, dur FROM ({d})")
}

/// `(count, total, distinct names)` of [`Events::durations`]' `d`.
pub fn count_total_names(d: &str) -> String {
    format!("SELECT count(*), coalesce(sum(dur), 0), count(DISTINCT key) FROM ({d})")
}

/// The number of distinct names of [`Events::durations`]' `d`.
pub fn names(d: &str) -> String {
    format!("SELECT count(DISTINCT key) FROM ({d})")
}

/// The total duration of [`Events::durations`]' `d`.
pub fn total(d: &str) -> String {
    format!("SELECT coalesce(sum(dur), 0) FROM ({d})")
}

/// The CPU samples' leaf frames (`SAMPLING_CALLCHAINS`, `stackDepth` 0): the query of their
/// count, and the query of `(function, module, samples)` by function, most first, at most `top`
/// rows (0: all). `None` when the export has no samples table.
pub fn sampled_functions(s: &Schema, top: usize) -> Option<(String, String)> {
    const T: &str = "SAMPLING_CALLCHAINS";
    if !s.has_columns(T, &["id", "symbol", "stackDepth"]) {
        return None;
    }
    let strings = s.has_columns("StringIds", &["id", "value"]);
    let (name, module) = if strings {
        (
            "coalesce((SELECT value FROM StringIds WHERE id = f.symbol), '(unknown)')",
            "(SELECT value FROM StringIds WHERE id = f.module)",
        )
    } else {
        ("'(unknown)'", "NULL")
    };
    let module_col = if s.has_column(T, "module") {
        "module"
    } else {
        "NULL"
    };
    let limit = if top == 0 { -1 } else { top as i64 };
    Some((
        format!("SELECT count(*) FROM {T} WHERE stackDepth = 0"),
        format!(
            "SELECT {name}, {module}, f.n FROM (SELECT symbol, {module_col} AS module, count(*) AS n \
             FROM {T} WHERE stackDepth = 0 GROUP BY symbol, module) f \
             ORDER BY f.n DESC, f.symbol LIMIT {limit}"
        ),
    ))
}

/// Unified memory CPU page faults per process, most first (ties by pid): `(pid, process name,
/// faults, distinct addresses)`. `None` when the export has no such table.
pub fn page_faults(s: &Schema) -> Option<String> {
    const T: &str = "CUDA_UM_CPU_PAGE_FAULT_EVENTS";
    if !s.has_columns(T, &["globalPid", "address"]) {
        return None;
    }
    let name = if s.has_columns("PROCESSES", &["globalPid", "name"]) {
        "(SELECT name FROM PROCESSES p WHERE (p.globalPid >> 24) & 16777215 = f.pid \
         AND p.name <> 'nsys-launcher' LIMIT 1)"
    } else {
        "NULL"
    };
    Some(format!(
        "SELECT f.pid, {name}, f.n, f.a FROM (SELECT (globalPid >> 24) & 16777215 AS pid, \
         count(*) AS n, count(DISTINCT address) AS a FROM {T} GROUP BY pid) f \
         ORDER BY f.n DESC, f.pid"
    ))
}
