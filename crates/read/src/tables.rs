//! Every other timed table an export can hold, read by one table-driven reader: unified memory
//! page faults, CUDA graph creation, library and runtime calls (cuDNN, cuBLAS, OpenACC,
//! OpenMP, MPI, UCX, video codecs, graphics APIs), samples of CPU counters and network metrics,
//! GPU-side graphics work, and the profiler itself (its diagnostics and overhead).
//!
//! Each table is described by a [`Spec`]: nsys' facts (the table, the column that places its
//! rows on a thread, process or GPU, or none for a track of the whole machine, and where their
//! names come from) and which kind of event its rows are, in the model's vocabulary
//! (`nsys_perfetto_model::model::category`: the category and the track kind, which say the `--types` name
//! that selects them). Every other column of a row becomes an arg,
//! named in snake_case after the column: string ids (`nameId`, `srcFile`, `module`...) are
//! resolved to their text, enum columns to nsys' label, other values are kept as they are.
//! Column sets are read from the export, so rows of any schema version convert the same way.
//!
//! Rows whose name is a profiler marker ("cuDNN profiling started") are instants in category
//! `nsys.marker` on the table's track, not calls.

use super::reader::ReadContext;
use super::schema::Schema;
use anyhow::Result;
use nsys_perfetto_model::category::{Category, TrackKind};
use nsys_perfetto_model::model::{
    Arg, ArgValue, Event, EventSink, FastHash, Flows, GroupKey, Name, global_pid_of, pid_of,
};
use nsys_perfetto_model::select::Selection;
use rusqlite::Connection;
use rusqlite::types::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

/// Where a table's rows go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A track of the row's thread (`globalTid`).
    Thread(TrackKind),
    /// A track of the row's process (`globalPid`, or the process of `globalTid`).
    Process(TrackKind),
    /// A track of the GPU in the named column, below its streams.
    Gpu(TrackKind, &'static str),
    /// A top-level track (machine-wide samples).
    Global(TrackKind),
    /// The process's track when the row names a process, else a top-level track (nsys' own
    /// messages carry pid 0).
    ProcessOrGlobal(TrackKind),
}

/// Where a row's name comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameFrom {
    /// A column holding a `StringIds` id.
    StringId(&'static str),
    /// A text column.
    Text(&'static str),
    /// An enum column, named by its label.
    Enum(&'static str),
    Fixed,
}

#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub table: &'static str,
    /// The kind of event its rows are: the vocabulary (`nsys_perfetto_model::model::category`) says which
    /// `--types` entry selects it.
    pub category: Category,
    pub place: Place,
    pub name: NameFrom,
    /// The name when the name column is missing or NULL.
    pub fallback: &'static str,
    /// Samples with an interval (`start`, `end`) that would overlap each other on one track:
    /// written as instants at `start` with `end` as an arg.
    pub instants: bool,
}

/// Columns holding `StringIds` ids, in any table.
const STRING_COLUMNS: [&str; 10] = [
    "nameId",
    "textId",
    "endNameId",
    "srcFile",
    "funcName",
    "varName",
    "kernelName",
    "module",
    "CpuInstruction",
    "objectNameId",
];

/// Enum columns and the `ENUM_*` table that labels them, per table prefix ("" = any table).
const ENUM_COLUMNS: [(&str, &str, &str); 14] = [
    (
        "CUPTI_ACTIVITY_KIND_OPENACC",
        "eventKind",
        "ENUM_OPENACC_EVENT_KIND",
    ),
    (
        "CUPTI_ACTIVITY_KIND_OPENACC",
        "DeviceType",
        "ENUM_OPENACC_DEVICE",
    ),
    ("OPENMP_EVENT_KIND", "eventKind", "ENUM_OPENMP_EVENT_KIND"),
    (
        "OPENMP_EVENT_KIND_THREAD",
        "threadType",
        "ENUM_OPENMP_THREAD",
    ),
    (
        "OPENMP_EVENT_KIND_SYNC_REGION",
        "kind",
        "ENUM_OPENMP_SYNC_REGION",
    ),
    ("OPENMP_EVENT_KIND_WORKSHARE", "kind", "ENUM_OPENMP_WORK"),
    ("OPENMP_EVENT_KIND_DISPATCH", "kind", "ENUM_OPENMP_DISPATCH"),
    ("OPENMP_EVENT_KIND_MUTEX", "kind", "ENUM_OPENMP_MUTEX"),
    (
        "CUDA_UM_GPU_PAGE_FAULT_EVENTS",
        "faultAccessType",
        "ENUM_CUDA_UNIF_MEM_ACCESS_TYPE",
    ),
    (
        "DIAGNOSTIC_EVENT",
        "severity",
        "ENUM_DIAGNOSTIC_SEVERITY_LEVEL",
    ),
    ("DIAGNOSTIC_EVENT", "source", "ENUM_DIAGNOSTIC_SOURCE_TYPE"),
    (
        "DIAGNOSTIC_EVENT",
        "timestampType",
        "ENUM_DIAGNOSTIC_TIMESTAMP_SOURCE",
    ),
    (
        "CUPTI_ACTIVITY_KIND_OVERHEAD",
        "overheadType",
        "ENUM_CUPTI_OVERHEAD_TYPE",
    ),
    ("", "tag", "ENUM_GPU_CTX_SWITCH"),
];

/// Columns that say nothing a row's category and track do not already say.
const DROPPED: [&str; 1] = ["eventClass"];

/// What the tables of one family share: the kind of event their rows are, where they go and
/// where their names come from.
#[derive(Clone, Copy)]
struct Family {
    category: Category,
    place: Place,
    name: NameFrom,
    instants: bool,
}

impl Family {
    /// Calls, operations or messages: slices where the table has an `end`.
    const fn rows(category: Category, place: Place, name: NameFrom) -> Family {
        Family {
            category,
            place,
            name,
            instants: false,
        }
    }

    /// Samples of counters, until the model has counter tracks: instants with their values.
    const fn samples(category: Category, place: Place) -> Family {
        Family {
            category,
            place,
            name: NameFrom::Fixed,
            instants: true,
        }
    }

    /// One table of the family, with the name of rows that have none.
    const fn table(self, table: &'static str, fallback: &'static str) -> Spec {
        Spec {
            table,
            category: self.category,
            place: self.place,
            name: self.name,
            fallback,
            instants: self.instants,
        }
    }
}

use Category as C;
use NameFrom as N;
use Place as P;
use TrackKind as K;

const NAME_ID: NameFrom = N::StringId("nameId");
const TEXT_ID: NameFrom = N::StringId("textId");

// The families of [`SPECS`], in its order.
const UM_CPU: Family = Family::rows(C::UmCpuFault, P::Process(K::UnifiedMemory), N::Fixed);
const UM_GPU: Family = Family::rows(
    C::UmGpuFault,
    P::Gpu(K::UnifiedMemory, "deviceId"),
    N::Fixed,
);
const GRAPHS: Family = Family::rows(C::CudaGraph, P::Thread(K::CudaGraphs), NAME_ID);
const GRAPH_TRACE: Family = Family::rows(C::CudaGraph, P::Gpu(K::CudaGraphs, "deviceId"), N::Fixed);
const CUDA_EVENTS: Family = Family::rows(C::CudaEvent, P::Gpu(K::CudaEvents, "deviceId"), N::Fixed);
const CUDNN: Family = Family::rows(C::Cudnn, P::Thread(K::Cudnn), NAME_ID);
const CUBLAS: Family = Family::rows(C::Cublas, P::Thread(K::Cublas), NAME_ID);
const OPENACC: Family = Family::rows(C::OpenAcc, P::Thread(K::OpenAcc), NAME_ID);
const OPENMP: Family = Family::rows(C::OpenMp, P::Thread(K::OpenMp), NAME_ID);
const MPI: Family = Family::rows(C::Mpi, P::Thread(K::Mpi), TEXT_ID);
const UCX: Family = Family::rows(C::Ucx, P::Thread(K::Ucx), TEXT_ID);
const CPU_COUNTERS: Family = Family::samples(C::CpuCounters, P::Global(K::CpuCounters));
const NETWORK: Family = Family::samples(C::Network, P::Global(K::Network));
const VIDEO: Family = Family::rows(C::Video, P::Thread(K::Video), NAME_ID);
const VULKAN: Family = Family::rows(C::GraphicsApi, P::Thread(K::Vulkan), NAME_ID);
const VULKAN_GPU: Family = Family::rows(C::GraphicsGpu, P::Gpu(K::Vulkan, "gpu"), NAME_ID);
const OPENGL: Family = Family::rows(C::GraphicsApi, P::Thread(K::OpenGl), NAME_ID);
const OPENGL_GPU: Family = Family::rows(C::GraphicsGpu, P::Gpu(K::OpenGl, "gpu"), NAME_ID);
const KHR_DEBUG: Family = Family::rows(C::GraphicsApi, P::Thread(K::OpenGl), TEXT_ID);
const DIRECTX: Family = Family::rows(C::GraphicsApi, P::Thread(K::DirectX), NAME_ID);
const DIRECTX_GPU: Family = Family::rows(C::GraphicsGpu, P::Gpu(K::DirectX, "gpu"), NAME_ID);
const WDDM: Family = Family::rows(C::GraphicsGpu, P::Gpu(K::Wddm, "gpu"), N::Fixed);
const SLI: Family = Family::rows(C::GraphicsGpu, P::Gpu(K::Sli, "gpu"), N::Fixed);
const LOAD_BALANCE: Family = Family::rows(C::GraphicsGpu, P::Gpu(K::LoadBalance, "gpu"), N::Fixed);
const CONTEXT_SWITCHES: Family = Family::rows(
    C::GpuContextSwitch,
    P::Gpu(K::ContextSwitches, "gpuId"),
    N::Enum("tag"),
);
const DIAGNOSTICS: Family = Family::rows(
    C::Diagnostic,
    P::ProcessOrGlobal(K::Diagnostics),
    N::Text("text"),
);
const PROFILER_OVERHEAD: Family =
    Family::rows(C::Overhead, P::Thread(K::ProfilerOverhead), NAME_ID);
const CUPTI_OVERHEAD: Family = Family::rows(C::Overhead, P::Thread(K::CuptiOverhead), NAME_ID);

/// Every table this reader converts. Column names follow NVIDIA's SQLite export schema
/// reference; tables marked "(not yet seen)" in docs/tables.md have no rows in the corpus.
// One line a table, however long its name: a table of tables.
#[rustfmt::skip]
pub const SPECS: &[Spec] = &[
    // Unified memory.
    UM_CPU.table("CUDA_UM_CPU_PAGE_FAULT_EVENTS", "CPU page fault"),
    UM_GPU.table("CUDA_UM_GPU_PAGE_FAULT_EVENTS", "GPU page fault"),
    // CUDA graphs.
    GRAPHS.table("CUDA_GRAPH_EVENTS", "(CUDA graph event)"),
    GRAPHS.table("CUDA_GRAPH_NODE_EVENTS", "(CUDA graph node event)"),
    GRAPH_TRACE.table("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "CUDA graph execution"),
    CUDA_EVENTS.table("CUPTI_ACTIVITY_KIND_CUDA_EVENT", "CUDA event record"),
    // Libraries and runtimes.
    CUDNN.table("CUDNN_EVENTS", "(cuDNN call)"),
    CUBLAS.table("CUBLAS_EVENTS", "(cuBLAS call)"),
    OPENACC.table("CUPTI_ACTIVITY_KIND_OPENACC_DATA", "(OpenACC data event)"),
    OPENACC.table("CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH", "(OpenACC launch)"),
    OPENACC.table("CUPTI_ACTIVITY_KIND_OPENACC_OTHER", "(OpenACC event)"),
    OPENMP.table("OPENMP_EVENT_KIND_THREAD", "OpenMP thread"),
    OPENMP.table("OPENMP_EVENT_KIND_PARALLEL", "OpenMP parallel"),
    OPENMP.table("OPENMP_EVENT_KIND_SYNC_REGION_WAIT", "OpenMP sync region wait"),
    OPENMP.table("OPENMP_EVENT_KIND_SYNC_REGION", "OpenMP sync region"),
    OPENMP.table("OPENMP_EVENT_KIND_TASK", "OpenMP task"),
    OPENMP.table("OPENMP_EVENT_KIND_MASTER", "OpenMP master"),
    OPENMP.table("OPENMP_EVENT_KIND_REDUCTION", "OpenMP reduction"),
    OPENMP.table("OPENMP_EVENT_KIND_TASK_CREATE", "OpenMP task create"),
    OPENMP.table("OPENMP_EVENT_KIND_TASK_SCHEDULE", "OpenMP task schedule"),
    OPENMP.table("OPENMP_EVENT_KIND_CANCEL", "OpenMP cancel"),
    OPENMP.table("OPENMP_EVENT_KIND_MUTEX_WAIT", "OpenMP mutex wait"),
    OPENMP.table("OPENMP_EVENT_KIND_CRITICAL_SECTION", "OpenMP critical section"),
    OPENMP.table("OPENMP_EVENT_KIND_MUTEX_RELEASED", "OpenMP mutex released"),
    OPENMP.table("OPENMP_EVENT_KIND_LOCK_INIT", "OpenMP lock init"),
    OPENMP.table("OPENMP_EVENT_KIND_LOCK_DESTROY", "OpenMP lock destroy"),
    OPENMP.table("OPENMP_EVENT_KIND_WORKSHARE", "OpenMP workshare"),
    OPENMP.table("OPENMP_EVENT_KIND_DISPATCH", "OpenMP dispatch"),
    OPENMP.table("OPENMP_EVENT_KIND_FLUSH", "OpenMP flush"),
    MPI.table("MPI_P2P_EVENTS", "(MPI call)"),
    MPI.table("MPI_COLLECTIVES_EVENTS", "(MPI collective)"),
    MPI.table("MPI_START_WAIT_EVENTS", "(MPI start/wait)"),
    MPI.table("MPI_OTHER_EVENTS", "(MPI call)"),
    UCX.table("UCP_SUBMIT_EVENTS", "(UCP submit)"),
    UCX.table("UCP_PROGRESS_EVENTS", "(UCP progress)"),
    UCX.table("UCP_EVENTS", "(UCP call)"),
    // Samples of counters, until the model has counter tracks: instants with their values.
    CPU_COUNTERS.table("PERF_EVENT_CPU_RAW_EVENT", "CPU counter sample"),
    CPU_COUNTERS.table("PERF_EVENT_CPU_METRIC_EVENT", "CPU metric sample"),
    CPU_COUNTERS.table("PMU_EVENTS", "PMU event"),
    CPU_COUNTERS.table("UNCORE_PMU_EVENTS", "Uncore PMU event"),
    NETWORK.table("NET_NIC_METRIC", "NIC metric sample"),
    NETWORK.table("NET_IB_SWITCH_METRIC", "InfiniBand switch metric sample"),
    // Video codecs.
    VIDEO.table("NVVIDEO_ENCODER_API", "(NVENC call)"),
    VIDEO.table("NVVIDEO_DECODER_API", "(NVDEC call)"),
    VIDEO.table("NVVIDEO_JPEG_API", "(NVJPEG call)"),
    VIDEO.table("TRACE_PROCESS_EVENT_NVMEDIA", "(NvMedia call)"),
    // Graphics APIs on their thread, their work on the GPU.
    VULKAN.table("VULKAN_API", "(Vulkan call)"),
    VULKAN.table("VULKAN_DEBUG_API", "(Vulkan debug marker)"),
    VULKAN_GPU.table("VULKAN_WORKLOAD", "(Vulkan workload)"),
    OPENGL.table("OPENGL_API", "(OpenGL call)"),
    OPENGL_GPU.table("OPENGL_WORKLOAD", "(OpenGL workload)"),
    KHR_DEBUG.table("KHR_DEBUG_EVENTS", "(KHR debug event)"),
    DIRECTX.table("DX12_API", "(DX12 call)"),
    DIRECTX_GPU.table("DX12_WORKLOAD", "(DX12 workload)"),
    DIRECTX.table("D3D11_PIX_DEBUG_API", "(PIX marker)"),
    DIRECTX.table("D3D12_PIX_DEBUG_API", "(PIX marker)"),
    WDDM.table("WDDM_EVICT_ALLOCATION_EVENTS", "WDDM evict allocation"),
    WDDM.table("WDDM_PAGING_QUEUE_PACKET_START_EVENTS", "WDDM paging queue packet start"),
    WDDM.table("WDDM_PAGING_QUEUE_PACKET_STOP_EVENTS", "WDDM paging queue packet stop"),
    WDDM.table("WDDM_PAGING_QUEUE_PACKET_INFO_EVENTS", "WDDM paging queue packet info"),
    WDDM.table("WDDM_QUEUE_PACKET_START_EVENTS", "WDDM queue packet start"),
    WDDM.table("WDDM_QUEUE_PACKET_STOP_EVENTS", "WDDM queue packet stop"),
    WDDM.table("WDDM_QUEUE_PACKET_INFO_EVENTS", "WDDM queue packet info"),
    WDDM.table("WDDM_DMA_PACKET_START_EVENTS", "WDDM DMA packet start"),
    WDDM.table("WDDM_DMA_PACKET_STOP_EVENTS", "WDDM DMA packet stop"),
    WDDM.table("WDDM_DMA_PACKET_INFO_EVENTS", "WDDM DMA packet info"),
    WDDM.table("WDDM_HW_QUEUE_EVENTS", "WDDM hardware queue"),
    WDDM.table("MEMORY_TRANSFER_EVENTS", "Memory transfer"),
    SLI.table("SLI_QUERIES", "SLI query"),
    SLI.table("SLI_P2P", "SLI peer-to-peer transfer"),
    SLI.table("SLI_STATS", "SLI statistics"),
    LOAD_BALANCE.table("NV_LOAD_BALANCE_MASTER_EVENTS", "Load balance (master)"),
    LOAD_BALANCE.table("NV_LOAD_BALANCE_EVENTS", "Load balance"),
    CONTEXT_SWITCHES.table("FECS_EVENTS", "GPU context switch"),
    CONTEXT_SWITCHES.table("GPU_CONTEXT_SWITCH_EVENTS", "GPU context switch"),
    // The profiler itself.
    DIAGNOSTICS.table("DIAGNOSTIC_EVENT", "(diagnostic)"),
    PROFILER_OVERHEAD.table("PROFILER_OVERHEAD", "(profiler overhead)"),
    CUPTI_OVERHEAD.table("CUPTI_ACTIVITY_KIND_OVERHEAD", "(CUPTI overhead)"),
];

/// Timed tables deliberately not converted here, with the reason (printed in the summary,
/// checked by the corpus test): derived copies, and tables other readers own.
pub const EXCLUDED: &[(&str, &str)] = &[
    (
        "NvtxPushPopRanges",
        "written by `nsys stats`: a copy of NVTX_EVENTS' push/pop ranges, converted from there",
    ),
    (
        "COMPOSITE_EVENTS",
        "CPU samples: converted by the samples/metrics readers",
    ),
    (
        "SAMPLING_CALLCHAINS",
        "CPU sample stacks: converted by the samples/metrics readers",
    ),
    (
        "GPU_METRICS",
        "GPU metrics: converted by the samples/metrics readers",
    ),
    (
        "GENERIC_EVENTS",
        "GPU metrics of nsys 2022 and other generic sources: converted by the samples/metrics readers",
    ),
    (
        "CUDA_GPU_MEMORY_USAGE_EVENTS",
        "GPU memory: converted by the samples/metrics readers",
    ),
    (
        "CUDA_GPU_MEMORY_POOL_EVENTS",
        "GPU memory pools: belongs with GPU memory (samples/metrics readers)",
    ),
    (
        "GPU_MEMORY_USAGE_EVENTS",
        "Windows GPU memory counters: belong with GPU memory (samples/metrics readers)",
    ),
    (
        "GPU_MEMORY_BUDGET_EVENTS",
        "Windows GPU memory counters: belong with GPU memory (samples/metrics readers)",
    ),
    (
        "DEMOTED_BYTES_EVENTS",
        "Windows GPU memory counters: belong with GPU memory (samples/metrics readers)",
    ),
    (
        "TOTAL_BYTES_RESIDENT_IN_SEGMENT_EVENTS",
        "Windows GPU memory counters: belong with GPU memory (samples/metrics readers)",
    ),
    (
        "ETW_EVENTS",
        "raw Windows ETW records (JSON payloads): not converted; no Windows profile to check against",
    ),
    (
        "ETW_EVENTS_DEPRECATED_TABLE",
        "raw Windows ETW records of old exports: not converted; no Windows profile to check against",
    ),
];

/// The spec of a table, if this reader converts it.
pub fn spec_of(table: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.table == table)
}

/// Tables this reader will read in this export.
pub fn present(schema: &Schema) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
    SPECS
        .iter()
        .filter_map(|s| schema.time_column(s.table).map(|c| (s.table, c)))
}

/// A column name in snake_case, interned for the life of the program (arg keys are static;
/// there are a few hundred column names in all).
pub fn arg_key(column: &str) -> &'static str {
    static KEYS: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut snake = String::with_capacity(column.len() + 4);
    let chars: Vec<char> = column.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower =
                i > 0 && (chars[i - 1].is_ascii_lowercase() || chars[i - 1].is_ascii_digit());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_ascii_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                snake.push('_');
            }
            snake.push(c.to_ascii_lowercase());
        } else {
            snake.push(c);
        }
    }
    let mut keys = KEYS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(k) = keys.get(snake.as_str()) {
        return k;
    }
    let k: &'static str = Box::leak(snake.into_boxed_str());
    keys.insert(k);
    k
}

/// Names that mark the profiler starting or stopping a library's tracing, not a call.
pub fn is_marker_name(name: &str) -> bool {
    let n = name.trim_end();
    n.ends_with("profiling started")
        || n.ends_with("profiling finished")
        || n.ends_with("profiling stopped")
}

/// String ids whose text is a profiler marker.
pub fn marker_ids(conn: &Connection, schema: &Schema) -> Result<HashSet<i64, FastHash>> {
    let mut out = HashSet::default();
    if !schema.has_columns("StringIds", &["id", "value"]) {
        return Ok(out);
    }
    // Every string, tested here (from Arrow, without SQLite).
    let mut rows = super::scan::Scan::new(schema, "StringIds")
        .cols(schema, &["id", "value"])
        .open(conn, schema)?;
    while let Some(r) = rows.next()? {
        if let (Some(id), Some(v)) = (super::cells::int_at(&r, 0), super::cells::text_at(&r, 1))
            && is_marker_name(&v)
        {
            out.insert(id);
        }
    }
    Ok(out)
}

fn read_enum(conn: &Connection, schema: &Schema, table: &str) -> HashMap<i64, String> {
    let mut out = HashMap::new();
    let label = if schema.has_column(table, "label") {
        "label"
    } else if schema.has_column(table, "name") {
        "name"
    } else {
        return out;
    };
    if !schema.has_column(table, "id") {
        return out;
    }
    if let Ok(mut stmt) = conn.prepare(&format!("SELECT id, \"{label}\" FROM \"{table}\""))
        && let Ok(mut rows) = stmt.query([])
    {
        while let Ok(Some(r)) = rows.next() {
            if let (Some(id), Some(l)) = (super::cells::int_at(r, 0), super::cells::text_at(r, 1)) {
                out.insert(id, l.into_owned());
            }
        }
    }
    out
}

/// What one column of a table is used for.
enum Role {
    Arg(&'static str),
    StrArg(&'static str),
    EnumArg(&'static str, usize),
}

/// A table's columns, resolved once.
struct Plan {
    spec: &'static Spec,
    /// Index (among the other columns) of the thread, process or GPU id.
    place_col: Option<usize>,
    /// For rows on a GPU: the indexes of `globalPid` and `contextId`, where the table has
    /// both (the row's CUDA context, which layout shows where a device has several).
    context_cols: Option<(usize, usize)>,
    name_col: Option<usize>,
    roles: Vec<Role>,
    enums: Vec<HashMap<i64, String>>,
    /// Whether rows are slices (`end` read as their end).
    slices: bool,
}

struct Row {
    /// Index of the table's plan.
    plan: usize,
    start: Option<i64>,
    end: Option<i64>,
    /// Whether the start, the end is a number past 2^62 ns either way.
    impossible: [bool; 2],
    vals: Vec<Value>,
}

fn plan(
    conn: &Connection,
    schema: &Schema,
    spec: &'static Spec,
    time: &str,
) -> (Plan, Vec<String>) {
    let table = spec.table;
    let slices = !spec.instants && time == "start" && schema.has_column(table, "end");
    let columns: Vec<String> = schema
        .columns(table)
        .iter()
        .filter(|c| c.as_str() != time && !(slices && c.as_str() == "end"))
        .filter(|c| !DROPPED.contains(&c.as_str()))
        .cloned()
        .collect();
    let idx = |name: &str| columns.iter().position(|c| c == name);
    // A process is named by `globalPid`, or by the process bits of `globalTid`.
    let place_col = match spec.place {
        Place::Thread(_) => idx("globalTid"),
        Place::Process(_) | Place::ProcessOrGlobal(_) => {
            idx("globalPid").or_else(|| idx("globalTid"))
        }
        Place::Gpu(_, col) => idx(col),
        Place::Global(_) => None,
    };
    let context_cols = match spec.place {
        Place::Gpu(..) => idx("globalPid").zip(idx("contextId")),
        _ => None,
    };
    let name_col = match spec.name {
        NameFrom::StringId(c) | NameFrom::Text(c) | NameFrom::Enum(c) => idx(c),
        NameFrom::Fixed => None,
    };
    let mut enums = Vec::new();
    let roles = columns
        .iter()
        .map(|c| {
            let key = arg_key(c);
            if STRING_COLUMNS.contains(&c.as_str()) {
                return Role::StrArg(key);
            }
            let e = ENUM_COLUMNS.iter().find(|(prefix, col, _)| {
                col == c && table.starts_with(prefix) && !prefix.is_empty()
            });
            let e = e.or_else(|| {
                ENUM_COLUMNS
                    .iter()
                    .find(|(prefix, col, _)| col == c && prefix.is_empty())
            });
            match e {
                Some((_, _, enum_table)) if schema.has_table(enum_table) => {
                    enums.push(read_enum(conn, schema, enum_table));
                    Role::EnumArg(key, enums.len() - 1)
                }
                _ => Role::Arg(key),
            }
        })
        .collect();
    (
        Plan {
            spec,
            place_col,
            context_cols,
            name_col,
            roles,
            enums,
            slices,
        },
        columns,
    )
}

/// Read every table of [`SPECS`] the export has and the selection wants, merged in start
/// order: tables that share a track (OpenACC data and other events, the OpenMP tables) are
/// written as one time-ordered stream.
pub fn read<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<()> {
    let (conn, schema, selection) = (cx.conn, cx.schema, cx.selection);
    let tables: Vec<(&'static Spec, &'static str)> = SPECS
        .iter()
        .filter(|s| selection.wants_category(s.category))
        .filter_map(|s| schema.time_column(s.table).map(|c| (s, c)))
        .collect();
    if tables.is_empty() {
        return Ok(());
    }
    let markers = marker_ids(conn, schema)?;
    let mut plans = Vec::new();
    let mut cursors = Vec::new();
    for (spec, time) in tables {
        let (plan, columns) = plan(conn, schema, spec, time);
        cursors.push(super::query::Query::new(
            conn,
            &query(schema, selection, &plan, &columns, time),
        )?);
        plans.push((plan, columns.len()));
    }
    super::order::merge_by_start(
        cursors.len(),
        |i| next_row(&mut cursors[i], i, plans[i].1),
        |row| row.start.unwrap_or(i64::MIN),
        // Outer calls first at equal starts, so nested calls nest.
        |row| (row.start.unwrap_or(i64::MIN), -row.end.unwrap_or(0)),
        |row| emit(&plans[row.plan].0, &row, &markers, sink),
    )
}

/// One table's rows in rowid order: `start`, `end` (NULL unless rows are slices), then every
/// other column. Rows keep their own columns; `start` is whatever the table times rows by.
fn query(
    schema: &Schema,
    selection: &Selection,
    plan: &Plan,
    columns: &[String],
    time: &str,
) -> String {
    let table = plan.spec.table;
    let id_col = ["globalTid", "globalPid"]
        .into_iter()
        .find(|c| schema.has_column(table, c));
    let device_col = match plan.spec.place {
        Place::Gpu(_, c) if schema.has_column(table, c) => Some(c),
        _ => None,
    };
    let filter = selection.sql("t", plan.slices, id_col, device_col);
    let others: String = columns.iter().map(|c| format!(", \"{c}\"")).collect();
    let (outer_end, inner_end) = if plan.slices {
        ("\"end\"", ", \"end\"")
    } else {
        ("NULL", "")
    };
    format!(
        "SELECT start, {outer_end}{others} FROM (SELECT rowid AS nsys_rowid, \"{time}\" AS start\
         {inner_end}{others} FROM \"{table}\") t WHERE {filter} ORDER BY nsys_rowid"
    )
}

fn next_row(rows: &mut super::query::Query<'_>, plan: usize, n: usize) -> Result<Option<Row>> {
    let Some(r) = rows.next()? else {
        return Ok(None);
    };
    let r = &r;
    Ok(Some(Row {
        plan,
        start: super::cells::int_at(r, 0),
        end: super::cells::int_at(r, 1),
        impossible: [0, 1]
            .map(|i| super::cells::int_at(r, i).is_some() && super::cells::time_at(r, i).is_none()),
        vals: (0..n)
            .map(|i| Value::try_from(super::query::Fetch::fetch(r, i + 2)).unwrap_or(Value::Null))
            .collect(),
    }))
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Integer(i) => Some(*i),
        Value::Real(f) => Some(*f as i64),
        _ => None,
    }
}

fn emit<S: EventSink>(
    plan: &Plan,
    row: &Row,
    markers: &HashSet<i64, FastHash>,
    sink: &mut S,
) -> Result<()> {
    let spec = plan.spec;
    let table = spec.table;
    let name_id = match spec.name {
        NameFrom::StringId(_) => plan.name_col.and_then(|i| int(&row.vals[i])),
        _ => None,
    };
    let marker = name_id.is_some_and(|id| markers.contains(&id));
    if row.impossible[0] || plan.slices && !marker && row.impossible[1] {
        // A start (or a slice's end) past 2^62 ns, such as a real 1e300: no trace can place it.
        sink.skip(
            table,
            "no start or end timestamp (missing, or past 2^62 ns)",
        );
        return Ok(());
    }
    let (start, end) = if plan.slices && row.end.is_some() && !marker {
        match sink.interval(table, row.start, row.end) {
            Some((s, e)) => (s, Some(e)),
            None => return Ok(()),
        }
    } else {
        match row.start {
            Some(s) => (s, None),
            None => {
                sink.skip(table, "no timestamp");
                return Ok(());
            }
        }
    };
    let place_id = plan.place_col.and_then(|i| int(&row.vals[i]));
    let key = match spec.place {
        Place::Thread(kind) => match place_id {
            Some(global_tid) => GroupKey::ThreadTrack { global_tid, kind },
            None => {
                sink.skip(table, "no thread id");
                return Ok(());
            }
        },
        Place::Process(kind) => match place_id {
            Some(id) => GroupKey::ProcessTrack {
                global_pid: global_pid_of(id),
                kind,
            },
            None => {
                sink.skip(table, "no process id");
                return Ok(());
            }
        },
        Place::ProcessOrGlobal(kind) => match place_id {
            Some(id) if pid_of(id) != 0 => GroupKey::ProcessTrack {
                global_pid: global_pid_of(id),
                kind,
            },
            _ => GroupKey::GlobalTrack { kind, source: 0 },
        },
        Place::Gpu(kind, _) => match place_id {
            Some(device) => {
                let (global_pid, context) = plan
                    .context_cols
                    .and_then(|(p, c)| Some((int(&row.vals[p]), int(&row.vals[c])?)))
                    .map_or((0, 0), |(p, c)| (global_pid_of(p.unwrap_or(0)), c));
                GroupKey::GpuTrack {
                    device,
                    global_pid,
                    context,
                    kind,
                }
            }
            None => {
                sink.skip(table, "no GPU id");
                return Ok(());
            }
        },
        Place::Global(kind) => GroupKey::GlobalTrack { kind, source: 0 },
    };
    let mut args: Vec<Arg<'_>> = Vec::with_capacity(plan.roles.len());
    for (i, role) in plan.roles.iter().enumerate() {
        if Some(i) == plan.name_col && !matches!(spec.name, NameFrom::Enum(_)) {
            continue;
        }
        let v = &row.vals[i];
        let value = match (role, v) {
            (_, Value::Null) => continue,
            (Role::StrArg(_), Value::Integer(id)) => ArgValue::StrId(*id),
            (Role::EnumArg(_, e), Value::Integer(id)) => match plan.enums[*e].get(id) {
                Some(l) => ArgValue::Label(l),
                None => ArgValue::Int(*id),
            },
            (_, Value::Integer(x)) => ArgValue::Int(*x),
            (_, Value::Real(x)) => ArgValue::Double(*x),
            (_, Value::Text(s)) => ArgValue::Str(s),
            (_, Value::Blob(_)) => continue,
        };
        let key = match role {
            Role::Arg(k) | Role::StrArg(k) | Role::EnumArg(k, _) => *k,
        };
        args.push(Arg { key, value });
    }
    let name = match (spec.name, plan.name_col.map(|i| &row.vals[i])) {
        (NameFrom::StringId(_), Some(Value::Integer(id))) => Name::Str(*id),
        (NameFrom::Text(_), Some(Value::Text(t))) => Name::Text(t),
        (NameFrom::Enum(_), Some(Value::Integer(id))) => {
            match plan.roles.get(plan.name_col.unwrap_or(usize::MAX)) {
                Some(Role::EnumArg(_, e)) => match plan.enums[*e].get(id) {
                    Some(l) => Name::Text(l),
                    None => Name::Static(spec.fallback),
                },
                _ => Name::Static(spec.fallback),
            }
        }
        _ => Name::Static(spec.fallback),
    };
    let ev = Event {
        start,
        end,
        name,
        category: if marker {
            Category::NsysMarker
        } else {
            spec.category
        },
        args: &args,
        flows: Flows::default(),
    };
    sink.event(key, &ev)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arg_keys_are_snake_case() {
        let columns = [
            "numberOfPageFaults",
            "CpuInstruction",
            "originalFaultPc",
            "DeviceType",
            "cuDeviceId",
            "address",
        ];
        assert_eq!(
            columns.map(arg_key).join(" "),
            "number_of_page_faults cpu_instruction original_fault_pc device_type cu_device_id \
             address"
        );
        assert!(std::ptr::eq(arg_key("graphId"), arg_key("graphId")));
    }

    #[test]
    fn markers() {
        assert!(is_marker_name("OS runtime libraries profiling started"));
        assert!(is_marker_name("cuDNN profiling started"));
        assert!(!is_marker_name("cudnnConvolutionForward"));
    }

    /// A table's track holds events of the `--types` entry that selects its rows, so one
    /// `--types` word shows or hides a whole track.
    #[test]
    fn each_spec_sits_on_a_track_of_its_type() {
        for s in SPECS {
            let (Place::Thread(k)
            | Place::Process(k)
            | Place::Gpu(k, _)
            | Place::Global(k)
            | Place::ProcessOrGlobal(k)) = s.place;
            assert_eq!(
                Some(k.event_type()),
                s.category.event_type(),
                "{}: {k:?} and {:?}",
                s.table,
                s.category
            );
        }
    }

    #[test]
    fn specs_are_unique_and_not_excluded() {
        let mut seen = HashSet::new();
        for s in SPECS {
            assert!(seen.insert(s.table), "{} twice", s.table);
            assert!(!EXCLUDED.iter().any(|(t, _)| *t == s.table));
            assert!(!super::super::source::EVENT_TABLES.contains(&s.table));
        }
    }
}
