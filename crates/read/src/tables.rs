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

const fn spec(
    table: &'static str,
    category: Category,
    place: Place,
    name: NameFrom,
    fallback: &'static str,
) -> Spec {
    Spec {
        table,
        category,
        place,
        name,
        fallback,
        instants: false,
    }
}

const fn samples(
    table: &'static str,
    category: Category,
    place: Place,
    fallback: &'static str,
) -> Spec {
    Spec {
        table,
        category,
        place,
        name: NameFrom::Fixed,
        fallback,
        instants: true,
    }
}

use Category as C;
use NameFrom as N;
use Place as P;
use TrackKind as K;

const OPENMP_NAME: NameFrom = N::StringId("nameId");

/// Every table this reader converts. Column names follow NVIDIA's SQLite export schema
/// reference; tables marked "(not yet seen)" in docs/tables.md have no rows in the corpus.
pub const SPECS: &[Spec] = &[
    // Unified memory.
    spec(
        "CUDA_UM_CPU_PAGE_FAULT_EVENTS",
        C::UmCpuFault,
        P::Process(K::UnifiedMemory),
        N::Fixed,
        "CPU page fault",
    ),
    spec(
        "CUDA_UM_GPU_PAGE_FAULT_EVENTS",
        C::UmGpuFault,
        P::Gpu(K::UnifiedMemory, "deviceId"),
        N::Fixed,
        "GPU page fault",
    ),
    // CUDA graphs.
    spec(
        "CUDA_GRAPH_EVENTS",
        C::CudaGraph,
        P::Thread(K::CudaGraphs),
        N::StringId("nameId"),
        "(CUDA graph event)",
    ),
    spec(
        "CUDA_GRAPH_NODE_EVENTS",
        C::CudaGraph,
        P::Thread(K::CudaGraphs),
        N::StringId("nameId"),
        "(CUDA graph node event)",
    ),
    spec(
        "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
        C::CudaGraph,
        P::Gpu(K::CudaGraphs, "deviceId"),
        N::Fixed,
        "CUDA graph execution",
    ),
    spec(
        "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
        C::CudaEvent,
        P::Gpu(K::CudaEvents, "deviceId"),
        N::Fixed,
        "CUDA event record",
    ),
    // Libraries and runtimes.
    spec(
        "CUDNN_EVENTS",
        C::Cudnn,
        P::Thread(K::Cudnn),
        N::StringId("nameId"),
        "(cuDNN call)",
    ),
    spec(
        "CUBLAS_EVENTS",
        C::Cublas,
        P::Thread(K::Cublas),
        N::StringId("nameId"),
        "(cuBLAS call)",
    ),
    spec(
        "CUPTI_ACTIVITY_KIND_OPENACC_DATA",
        C::OpenAcc,
        P::Thread(K::OpenAcc),
        N::StringId("nameId"),
        "(OpenACC data event)",
    ),
    spec(
        "CUPTI_ACTIVITY_KIND_OPENACC_LAUNCH",
        C::OpenAcc,
        P::Thread(K::OpenAcc),
        N::StringId("nameId"),
        "(OpenACC launch)",
    ),
    spec(
        "CUPTI_ACTIVITY_KIND_OPENACC_OTHER",
        C::OpenAcc,
        P::Thread(K::OpenAcc),
        N::StringId("nameId"),
        "(OpenACC event)",
    ),
    spec(
        "OPENMP_EVENT_KIND_THREAD",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP thread",
    ),
    spec(
        "OPENMP_EVENT_KIND_PARALLEL",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP parallel",
    ),
    spec(
        "OPENMP_EVENT_KIND_SYNC_REGION_WAIT",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP sync region wait",
    ),
    spec(
        "OPENMP_EVENT_KIND_SYNC_REGION",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP sync region",
    ),
    spec(
        "OPENMP_EVENT_KIND_TASK",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP task",
    ),
    spec(
        "OPENMP_EVENT_KIND_MASTER",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP master",
    ),
    spec(
        "OPENMP_EVENT_KIND_REDUCTION",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP reduction",
    ),
    spec(
        "OPENMP_EVENT_KIND_TASK_CREATE",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP task create",
    ),
    spec(
        "OPENMP_EVENT_KIND_TASK_SCHEDULE",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP task schedule",
    ),
    spec(
        "OPENMP_EVENT_KIND_CANCEL",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP cancel",
    ),
    spec(
        "OPENMP_EVENT_KIND_MUTEX_WAIT",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP mutex wait",
    ),
    spec(
        "OPENMP_EVENT_KIND_CRITICAL_SECTION",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP critical section",
    ),
    spec(
        "OPENMP_EVENT_KIND_MUTEX_RELEASED",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP mutex released",
    ),
    spec(
        "OPENMP_EVENT_KIND_LOCK_INIT",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP lock init",
    ),
    spec(
        "OPENMP_EVENT_KIND_LOCK_DESTROY",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP lock destroy",
    ),
    spec(
        "OPENMP_EVENT_KIND_WORKSHARE",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP workshare",
    ),
    spec(
        "OPENMP_EVENT_KIND_DISPATCH",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP dispatch",
    ),
    spec(
        "OPENMP_EVENT_KIND_FLUSH",
        C::OpenMp,
        P::Thread(K::OpenMp),
        OPENMP_NAME,
        "OpenMP flush",
    ),
    spec(
        "MPI_P2P_EVENTS",
        C::Mpi,
        P::Thread(K::Mpi),
        N::StringId("textId"),
        "(MPI call)",
    ),
    spec(
        "MPI_COLLECTIVES_EVENTS",
        C::Mpi,
        P::Thread(K::Mpi),
        N::StringId("textId"),
        "(MPI collective)",
    ),
    spec(
        "MPI_START_WAIT_EVENTS",
        C::Mpi,
        P::Thread(K::Mpi),
        N::StringId("textId"),
        "(MPI start/wait)",
    ),
    spec(
        "MPI_OTHER_EVENTS",
        C::Mpi,
        P::Thread(K::Mpi),
        N::StringId("textId"),
        "(MPI call)",
    ),
    spec(
        "UCP_SUBMIT_EVENTS",
        C::Ucx,
        P::Thread(K::Ucx),
        N::StringId("textId"),
        "(UCP submit)",
    ),
    spec(
        "UCP_PROGRESS_EVENTS",
        C::Ucx,
        P::Thread(K::Ucx),
        N::StringId("textId"),
        "(UCP progress)",
    ),
    spec(
        "UCP_EVENTS",
        C::Ucx,
        P::Thread(K::Ucx),
        N::StringId("textId"),
        "(UCP call)",
    ),
    // Samples of counters, until the model has counter tracks: instants with their values.
    samples(
        "PERF_EVENT_CPU_RAW_EVENT",
        C::CpuCounters,
        P::Global(K::CpuCounters),
        "CPU counter sample",
    ),
    samples(
        "PERF_EVENT_CPU_METRIC_EVENT",
        C::CpuCounters,
        P::Global(K::CpuCounters),
        "CPU metric sample",
    ),
    samples(
        "PMU_EVENTS",
        C::CpuCounters,
        P::Global(K::CpuCounters),
        "PMU event",
    ),
    samples(
        "UNCORE_PMU_EVENTS",
        C::CpuCounters,
        P::Global(K::CpuCounters),
        "Uncore PMU event",
    ),
    samples(
        "NET_NIC_METRIC",
        C::Network,
        P::Global(K::Network),
        "NIC metric sample",
    ),
    samples(
        "NET_IB_SWITCH_METRIC",
        C::Network,
        P::Global(K::Network),
        "InfiniBand switch metric sample",
    ),
    // Video codecs.
    spec(
        "NVVIDEO_ENCODER_API",
        C::Video,
        P::Thread(K::Video),
        N::StringId("nameId"),
        "(NVENC call)",
    ),
    spec(
        "NVVIDEO_DECODER_API",
        C::Video,
        P::Thread(K::Video),
        N::StringId("nameId"),
        "(NVDEC call)",
    ),
    spec(
        "NVVIDEO_JPEG_API",
        C::Video,
        P::Thread(K::Video),
        N::StringId("nameId"),
        "(NVJPEG call)",
    ),
    spec(
        "TRACE_PROCESS_EVENT_NVMEDIA",
        C::Video,
        P::Thread(K::Video),
        N::StringId("nameId"),
        "(NvMedia call)",
    ),
    // Graphics APIs on their thread, their work on the GPU.
    spec(
        "VULKAN_API",
        C::GraphicsApi,
        P::Thread(K::Vulkan),
        N::StringId("nameId"),
        "(Vulkan call)",
    ),
    spec(
        "VULKAN_DEBUG_API",
        C::GraphicsApi,
        P::Thread(K::Vulkan),
        N::StringId("nameId"),
        "(Vulkan debug marker)",
    ),
    spec(
        "VULKAN_WORKLOAD",
        C::GraphicsGpu,
        P::Gpu(K::Vulkan, "gpu"),
        N::StringId("nameId"),
        "(Vulkan workload)",
    ),
    spec(
        "OPENGL_API",
        C::GraphicsApi,
        P::Thread(K::OpenGl),
        N::StringId("nameId"),
        "(OpenGL call)",
    ),
    spec(
        "OPENGL_WORKLOAD",
        C::GraphicsGpu,
        P::Gpu(K::OpenGl, "gpu"),
        N::StringId("nameId"),
        "(OpenGL workload)",
    ),
    spec(
        "KHR_DEBUG_EVENTS",
        C::GraphicsApi,
        P::Thread(K::OpenGl),
        N::StringId("textId"),
        "(KHR debug event)",
    ),
    spec(
        "DX12_API",
        C::GraphicsApi,
        P::Thread(K::DirectX),
        N::StringId("nameId"),
        "(DX12 call)",
    ),
    spec(
        "DX12_WORKLOAD",
        C::GraphicsGpu,
        P::Gpu(K::DirectX, "gpu"),
        N::StringId("nameId"),
        "(DX12 workload)",
    ),
    spec(
        "D3D11_PIX_DEBUG_API",
        C::GraphicsApi,
        P::Thread(K::DirectX),
        N::StringId("nameId"),
        "(PIX marker)",
    ),
    spec(
        "D3D12_PIX_DEBUG_API",
        C::GraphicsApi,
        P::Thread(K::DirectX),
        N::StringId("nameId"),
        "(PIX marker)",
    ),
    spec(
        "WDDM_EVICT_ALLOCATION_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM evict allocation",
    ),
    spec(
        "WDDM_PAGING_QUEUE_PACKET_START_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM paging queue packet start",
    ),
    spec(
        "WDDM_PAGING_QUEUE_PACKET_STOP_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM paging queue packet stop",
    ),
    spec(
        "WDDM_PAGING_QUEUE_PACKET_INFO_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM paging queue packet info",
    ),
    spec(
        "WDDM_QUEUE_PACKET_START_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM queue packet start",
    ),
    spec(
        "WDDM_QUEUE_PACKET_STOP_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM queue packet stop",
    ),
    spec(
        "WDDM_QUEUE_PACKET_INFO_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM queue packet info",
    ),
    spec(
        "WDDM_DMA_PACKET_START_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM DMA packet start",
    ),
    spec(
        "WDDM_DMA_PACKET_STOP_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM DMA packet stop",
    ),
    spec(
        "WDDM_DMA_PACKET_INFO_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM DMA packet info",
    ),
    spec(
        "WDDM_HW_QUEUE_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "WDDM hardware queue",
    ),
    spec(
        "MEMORY_TRANSFER_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::Wddm, "gpu"),
        N::Fixed,
        "Memory transfer",
    ),
    spec(
        "SLI_QUERIES",
        C::GraphicsGpu,
        P::Gpu(K::Sli, "gpu"),
        N::Fixed,
        "SLI query",
    ),
    spec(
        "SLI_P2P",
        C::GraphicsGpu,
        P::Gpu(K::Sli, "gpu"),
        N::Fixed,
        "SLI peer-to-peer transfer",
    ),
    spec(
        "SLI_STATS",
        C::GraphicsGpu,
        P::Gpu(K::Sli, "gpu"),
        N::Fixed,
        "SLI statistics",
    ),
    spec(
        "NV_LOAD_BALANCE_MASTER_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::LoadBalance, "gpu"),
        N::Fixed,
        "Load balance (master)",
    ),
    spec(
        "NV_LOAD_BALANCE_EVENTS",
        C::GraphicsGpu,
        P::Gpu(K::LoadBalance, "gpu"),
        N::Fixed,
        "Load balance",
    ),
    spec(
        "FECS_EVENTS",
        C::GpuContextSwitch,
        P::Gpu(K::ContextSwitches, "gpuId"),
        N::Enum("tag"),
        "GPU context switch",
    ),
    spec(
        "GPU_CONTEXT_SWITCH_EVENTS",
        C::GpuContextSwitch,
        P::Gpu(K::ContextSwitches, "gpuId"),
        N::Enum("tag"),
        "GPU context switch",
    ),
    // The profiler itself.
    spec(
        "DIAGNOSTIC_EVENT",
        C::Diagnostic,
        P::ProcessOrGlobal(K::Diagnostics),
        N::Text("text"),
        "(diagnostic)",
    ),
    spec(
        "PROFILER_OVERHEAD",
        C::Overhead,
        P::Thread(K::ProfilerOverhead),
        N::StringId("nameId"),
        "(profiler overhead)",
    ),
    spec(
        "CUPTI_ACTIVITY_KIND_OVERHEAD",
        C::Overhead,
        P::Thread(K::CuptiOverhead),
        N::StringId("nameId"),
        "(CUPTI overhead)",
    ),
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

/// The column a table's rows are timed by: `start`, else `timestamp`.
pub fn time_column(schema: &Schema, table: &str) -> Option<&'static str> {
    ["start", "timestamp"]
        .into_iter()
        .find(|c| schema.has_column(table, c))
}

/// Tables this reader will read in this export.
pub fn present(schema: &Schema) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
    SPECS
        .iter()
        .filter_map(|s| time_column(schema, s.table).map(|c| (s.table, c)))
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
pub fn read<S: EventSink>(
    conn: &Connection,
    schema: &Schema,
    selection: &Selection,
    sink: &mut S,
) -> Result<()> {
    let tables: Vec<(&'static Spec, &'static str)> = SPECS
        .iter()
        .filter(|s| selection.wants_category(s.category))
        .filter_map(|s| time_column(schema, s.table).map(|c| (s, c)))
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
        assert_eq!(arg_key("numberOfPageFaults"), "number_of_page_faults");
        assert_eq!(arg_key("CpuInstruction"), "cpu_instruction");
        assert_eq!(arg_key("originalFaultPc"), "original_fault_pc");
        assert_eq!(arg_key("DeviceType"), "device_type");
        assert_eq!(arg_key("cuDeviceId"), "cu_device_id");
        assert_eq!(arg_key("address"), "address");
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
