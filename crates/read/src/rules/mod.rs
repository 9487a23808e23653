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

pub mod analyze;
mod gpu_ops;
pub mod trace;

use anyhow::Result;
use rusqlite::types::ValueRef;

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
            Rule::CudaMemcpySync | Rule::CudaMemcpyAsync => &MEMCPY_COLUMNS,
            Rule::CudaMemsetSync => &MEMSET_COLUMNS,
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

/// The memory rules' columns: the operation's kind(s), then what they all report of it.
const MEMORY_OP_COLUMNS: [&str; 7] = [
    "Bytes",
    "PID",
    "Device ID",
    "Context ID",
    "Green Context ID",
    "Stream ID",
    "API Name",
];
const MEMCPY_COLUMNS: [&str; 9] = concat(["Src Kind", "Dst Kind"], MEMORY_OP_COLUMNS);
const MEMSET_COLUMNS: [&str; 8] = concat(["Memory Kind"], MEMORY_OP_COLUMNS);

/// `a` then `b`, as a constant.
const fn concat<const A: usize, const B: usize, const N: usize>(
    a: [&'static str; A],
    b: [&'static str; B],
) -> [&'static str; N] {
    assert!(A + B == N, "the lengths add up");
    let mut out = [""; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < A { a[i] } else { b[i - A] };
        i += 1;
    }
    out
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
