//! The SQL of nsys' recipes (`nsys recipe`, nsys 2023.4): what each recipe reads of one rank's
//! export, as the recipes read it (their pandas code, `nsys_recipe/recipes/*` and
//! `nsys_recipe/lib/*`). Each function returns the query, or `None` when the export lacks the
//! tables the recipe reads (it finds no data there then). The app's `workflow::recipe` runs them
//! and computes the recipes' tables.

use crate::names::{KERNEL, MEMCPY, MEMSET, MPI_TABLES, NVTX, RUNTIME};

use crate::schema::Schema;

/// An NVTX event's name as the recipes name it: its registered string where it has one, else
/// its text (no domain); with the join it needs on `NVTX_EVENTS e`.
fn nvtx_text(s: &Schema) -> (String, String) {
    let text = s.col_of(NVTX, "e", "text");
    if s.has_columns("StringIds", &["id", "value"]) {
        (
            format!(
                " LEFT JOIN main.StringIds sid ON sid.id = {}",
                s.col_of(NVTX, "e", "textId")
            ),
            format!("coalesce(sid.value, {text})"),
        )
    } else {
        (String::new(), text)
    }
}

/// `nvtx_sum`: `(name, duration)` of every NVTX event with a positive duration.
pub fn nvtx_durations(s: &Schema) -> Option<String> {
    if !s.has_columns(NVTX, &["start", "end"]) {
        return None;
    }
    let (join, name) = nvtx_text(s);
    Some(format!(
        "SELECT {name}, e.\"end\" - e.start FROM main.\"{NVTX}\" e{join} \
         WHERE e.\"end\" - e.start > 0"
    ))
}

/// `mpi_sum`: `(name, duration)` of the MPI calls of every MPI table with a positive duration.
pub fn mpi_durations(s: &Schema) -> Option<String> {
    if !s.has_columns("StringIds", &["id", "value"]) {
        return None;
    }
    let parts: Vec<String> = MPI_TABLES
        .iter()
        .filter(|t| s.has_columns(t, &["start", "end", "textId"]))
        .map(|t| {
            format!(
                "SELECT sid.value, m.\"end\" - m.start FROM main.\"{t}\" m \
                 JOIN main.StringIds sid ON sid.id = m.textId WHERE m.\"end\" - m.start > 0"
            )
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(" UNION ALL "))
}

/// `nvtx_gpu_proj_sum`: `(globalTid, start, end, name)` of the NVTX ranges that end on the
/// thread they started on, and `(globalTid, start, end, GPU start, GPU end)` of the CUDA runtime
/// calls with the GPU work (kernels, memcpys, memsets) they launched, matched by correlation id
/// within the process.
pub fn nvtx_projection(s: &Schema) -> Option<(String, String)> {
    if !s.has_columns(NVTX, &["start", "end", "globalTid"])
        || !s.has_columns(RUNTIME, &["start", "end", "globalTid", "correlationId"])
    {
        return None;
    }
    let gpu: Vec<String> = [KERNEL, MEMCPY, MEMSET]
        .iter()
        .filter(|t| s.has_columns(t, &["start", "end", "globalPid", "correlationId"]))
        .map(|t| format!("SELECT correlationId, globalPid, start, \"end\" FROM main.\"{t}\""))
        .collect();
    if gpu.is_empty() {
        return None;
    }
    let (join, name) = nvtx_text(s);
    let end_tid = s.col_of(NVTX, "e", "endGlobalTid");
    let ranges = format!(
        "SELECT e.globalTid, e.start, e.\"end\", {name} FROM main.\"{NVTX}\" e{join} \
         WHERE e.start IS NOT NULL AND e.\"end\" IS NOT NULL AND {end_tid} IS NULL \
         AND e.globalTid IS NOT NULL"
    );
    let calls = format!(
        "SELECT r.globalTid, r.start, r.\"end\", g.start, g.\"end\" FROM main.\"{RUNTIME}\" r \
         JOIN ({}) g ON g.correlationId = r.correlationId \
         AND ((g.globalPid >> 24) & 16777215) = ((r.globalTid >> 24) & 16777215)",
        gpu.join(" UNION ALL ")
    );
    Some((ranges, calls))
}

/// `cuda_gpu_time_util_map`: the session's length (`ANALYSIS_DETAILS.duration`) and its
/// wall-clock start (`TARGET_INFO_SESSION_START_TIME.utcEpochNs`), one row.
pub fn session(s: &Schema) -> Option<String> {
    (s.has_columns("ANALYSIS_DETAILS", &["duration"])
        && s.has_columns("TARGET_INFO_SESSION_START_TIME", &["utcEpochNs"]))
    .then(|| {
        "SELECT (SELECT duration FROM main.ANALYSIS_DETAILS LIMIT 1), \
         (SELECT utcEpochNs FROM main.TARGET_INFO_SESSION_START_TIME LIMIT 1)"
            .to_string()
    })
}

/// `cuda_gpu_time_util_map`: `(pid, deviceId, start, end)` of every kernel, by process, device
/// and start.
pub fn kernels_by_device(s: &Schema) -> Option<String> {
    s.has_columns(KERNEL, &["start", "end", "globalPid", "deviceId"])
        .then(|| {
            format!(
                "SELECT (globalPid >> 24) & 16777215 AS pid, deviceId, start, \"end\" \
                 FROM main.\"{KERNEL}\" ORDER BY 1, 2, 3"
            )
        })
}

/// `merge --stragglers`: `(name, start)` of the rows [`nvtx_durations`] and [`mpi_durations`]
/// read (NVTX ranges and MPI calls with a positive duration), by start.
pub fn range_starts(s: &Schema) -> Option<String> {
    let mut parts = Vec::new();
    if s.has_columns(NVTX, &["start", "end"]) {
        let (join, name) = nvtx_text(s);
        parts.push(format!(
            "SELECT {name}, e.start FROM main.\"{NVTX}\" e{join} WHERE e.\"end\" - e.start > 0"
        ));
    }
    if s.has_columns("StringIds", &["id", "value"]) {
        parts.extend(
            MPI_TABLES
                .iter()
                .filter(|t| s.has_columns(t, &["start", "end", "textId"]))
                .map(|t| {
                    format!(
                        "SELECT sid.value, m.start FROM main.\"{t}\" m \
                         JOIN main.StringIds sid ON sid.id = m.textId WHERE m.\"end\" - m.start > 0"
                    )
                }),
        );
    }
    (!parts.is_empty()).then(|| format!("{} ORDER BY 2", parts.join(" UNION ALL ")))
}
