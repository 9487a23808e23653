//! The vocabulary of events, declared once: the `--types` selection names ([`EventType`]), the
//! event categories every slice carries ([`Category`]) with the type that selects each, the
//! named tracks of a thread, process, GPU or machine ([`TrackKind`]) with the type whose events
//! they hold, and the kinds of events the workflows total ([`Kind`]) with the types each
//! gathers. Below the model, the selection, the summary and the workflows, which all speak it.
//!
//! A new kind of event is one line in each list of the `vocabulary!` invocation below (only the
//! lists it needs: a new category of an existing type is one line); the enums, their `ALL`
//! arrays, names, `--types` parsing and help, and the category-to-type mapping follow from it.
//! A source then says which tables hold it (for nsys, one entry of the reading crate's `tables::SPECS`).

/// Writes the four enums and their tables from one declaration. Each list keeps its order:
/// `ALL` (and so the summary's lines, `--types help` and the workflows' sections) follow it.
macro_rules! vocabulary {
    (
        types { $( $(#[$tm:meta])* $t:ident = $tname:literal : $tabout:literal, )* }
        categories { $( $(#[$cm:meta])* $c:ident = $cname:literal $(in $ct:ident)?, )* }
        tracks { $( $(#[$km:meta])* $k:ident = $klabel:literal in $kt:ident, )* }
        totals {
            $( $(#[$wm:meta])* $w:ident $(= $wname:literal)? of [$($wt:ident),+] : $wtitle:literal, )*
        }
    ) => {
        vocabulary!(@enum
            /// Event types, as named on the command line (`--types`).
            EventType { $( $(#[$tm])* $t, )* }
        );
        vocabulary!(@map EventType
            /// The name on the command line.
            name -> &'static str { $( $t => $tname, )* }
        );
        vocabulary!(@map EventType
            /// What a type covers, in a few words (`--types help`).
            about -> &'static str { $( $t => $tabout, )* }
        );

        vocabulary!(@enum
            /// Every slice carries one category naming its source, so users can filter in Perfetto.
            Category { $( $(#[$cm])* $c, )* }
        );
        vocabulary!(@map Category
            /// The category as written in traces (`cuda.kernel`).
            as_str -> &'static str { $( $c => $cname, )* }
        );
        vocabulary!(@map Category
            /// The `--types` entry that selects events of this category; `None` for what no
            /// type selects (the findings of `--analyze`, which its own option asks for).
            event_type -> Option<EventType> { $( $c => vocabulary!(@type $($ct)?), )* }
        );

        vocabulary!(@enum
            /// What a [`GroupKey::ThreadTrack`], [`GroupKey::ProcessTrack`], [`GroupKey::GpuTrack`]
            /// or [`GroupKey::GlobalTrack`] holds: names its track.
            ///
            /// [`GroupKey::ThreadTrack`]: crate::model::GroupKey::ThreadTrack
            /// [`GroupKey::ProcessTrack`]: crate::model::GroupKey::ProcessTrack
            /// [`GroupKey::GpuTrack`]: crate::model::GroupKey::GpuTrack
            /// [`GroupKey::GlobalTrack`]: crate::model::GroupKey::GlobalTrack
            TrackKind { $( $(#[$km])* $k, )* }
        );
        vocabulary!(@map TrackKind
            /// The track's name in the trace.
            label -> &'static str { $( $k => $klabel, )* }
        );
        vocabulary!(@map TrackKind
            /// The `--types` entry whose events this track holds.
            event_type -> EventType { $( $k => EventType::$kt, )* }
        );

        vocabulary!(@enum
            /// The kinds of events the workflows total (`stats`, `extract`, `sweep`), each the
            /// events of one or more types.
            Kind { $( $(#[$wm])* $w, )* }
        );
        vocabulary!(@map Kind
            /// The types of events the kind totals.
            event_types -> &'static [EventType] { $( $w => &[$(EventType::$wt),+], )* }
        );
        vocabulary!(@map Kind
            /// The name in CSV, JSON and tables: its type's name where it has one type, else
            /// its own.
            as_str -> &'static str { $( $w => vocabulary!(@name [$($wt),+] $($wname)?), )* }
        );
        vocabulary!(@map Kind
            /// The heading of its section in `stats`.
            title -> &'static str { $( $w => $wtitle, )* }
        );
    };
    // An enum and `ALL`, its variants in order.
    (@enum $(#[$em:meta])* $e:ident { $( $(#[$vm:meta])* $v:ident, )* }) => {
        $(#[$em])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $e {
            $( $(#[$vm])* $v, )*
        }

        impl $e {
            pub const ALL: [$e; [$($e::$v),*].len()] = [$($e::$v),*];
        }
    };
    // A method giving each variant its value.
    (@map $e:ident $(#[$fm:meta])* $f:ident -> $r:ty { $( $v:ident => $val:expr, )* }) => {
        impl $e {
            $(#[$fm])*
            pub fn $f(self) -> $r {
                match self {
                    $( $e::$v => $val, )*
                }
            }
        }

    };
    (@type) => { None };
    (@type $t:ident) => { Some(EventType::$t) };
    (@name [$t:ident]) => { EventType::$t.name() };
    (@name [$($t:ident),+] $name:literal) => { $name };
}

vocabulary! {
    types {
        Kernel = "kernel": "CUDA kernels",
        Memcpy = "memcpy": "CUDA memory copies",
        Memset = "memset": "CUDA memory sets",
        CudaApi = "cuda-api": "CUDA runtime and driver API calls",
        Nvtx = "nvtx": "NVTX ranges and marks",
        NvtxGpu = "nvtx-gpu": "NVTX ranges projected onto the GPU work they launched",
        Osrt = "osrt": "OS runtime calls (pthread, I/O, sleeps...)",
        Sync = "sync": "CUDA synchronization waits",
        Sched = "sched": "threads on CPUs (context switches)",
        /// Unified memory page faults (CPU and GPU).
        Um = "um": "unified memory page faults (CPU and GPU)",
        CudaGraph = "cuda-graph": "CUDA graph launches and graph nodes",
        Cudnn = "cudnn": "cuDNN calls",
        Cublas = "cublas": "cuBLAS calls",
        OpenAcc = "openacc": "OpenACC data, launch and other events",
        OpenMp = "openmp": "OpenMP regions, tasks, locks and waits",
        Mpi = "mpi": "MPI calls (point-to-point, collectives, waits)",
        Ucx = "ucx": "UCX calls",
        CpuCounters = "cpu-counters": "CPU performance counters",
        Network = "network": "network (NIC, InfiniBand) counters and events",
        Video = "video": "video codec and JPEG API calls",
        Graphics = "graphics": "graphics APIs and workloads (OpenGL, Vulkan, DirectX, WDDM)",
        /// The profiler's messages and markers.
        Diagnostics = "diagnostics": "the profiler's messages and markers",
        /// Time the profiler itself took.
        Overhead = "overhead": "the profiler's own time",
        CpuSamples = "cpu-samples": "CPU samples with call stacks",
        GpuMetrics = "gpu-metrics": "GPU metric counters (SM activity, bandwidth, clocks...)",
        GpuMemory = "gpu-memory": "GPU memory allocations and bytes allocated",
    }
    categories {
        Kernel = "cuda.kernel" in Kernel,
        Memcpy = "cuda.memcpy" in Memcpy,
        Memset = "cuda.memset" in Memset,
        CudaApi = "cuda.api" in CudaApi,
        Nvtx = "nvtx" in Nvtx,
        NvtxMark = "nvtx.mark" in Nvtx,
        /// NVTX ranges projected onto the GPU work they launched.
        NvtxGpu = "nvtx.gpu" in NvtxGpu,
        /// OS runtime library calls.
        Osrt = "osrt" in Osrt,
        /// CUDA stream, event and context synchronization.
        Sync = "cuda.sync" in Sync,
        /// A thread running on a CPU.
        Sched = "sched" in Sched,
        /// Unified memory: CPU page faults (instants on their process).
        UmCpuFault = "cuda.um.cpu_fault" in Um,
        /// Unified memory: GPU page faults (on the GPU).
        UmGpuFault = "cuda.um.gpu_fault" in Um,
        /// CUDA graph and graph node creation, cloning, destruction (on the creating thread).
        CudaGraph = "cuda.graph" in CudaGraph,
        Cudnn = "cudnn" in Cudnn,
        Cublas = "cublas" in Cublas,
        OpenAcc = "openacc" in OpenAcc,
        OpenMp = "openmp" in OpenMp,
        Mpi = "mpi" in Mpi,
        /// UCX (UCP) communication calls.
        Ucx = "ucx" in Ucx,
        /// CPU performance counter and PMU samples.
        CpuCounters = "cpu.counters" in CpuCounters,
        /// NIC and InfiniBand switch metrics.
        Network = "network" in Network,
        /// NVIDIA video codec (encoder, decoder, JPEG) API calls.
        Video = "nvvideo" in Video,
        /// Graphics API calls (Vulkan, OpenGL, DirectX, PIX, KHR debug) on their thread.
        GraphicsApi = "graphics.api" in Graphics,
        /// Graphics work on the GPU (Vulkan, OpenGL, DirectX workloads, WDDM queues, SLI,
        /// GPU context switches).
        GraphicsGpu = "graphics.gpu" in Graphics,
        /// The profiler's own messages (`DIAGNOSTIC_EVENT`).
        Diagnostic = "nsys.diagnostic" in Diagnostics,
        /// Time the profiler itself took on a thread (`PROFILER_OVERHEAD`, CUPTI overhead).
        Overhead = "nsys.overhead" in Overhead,
        /// Profiler markers recorded among a library's calls ("OS runtime libraries profiling
        /// started", "cuDNN profiling started"). They ride with the table they are found in, and
        /// so with its type; on their own they are the profiler's messages.
        NsysMarker = "nsys.marker" in Diagnostics,
        /// CUDA event records on the GPU (`CUPTI_ACTIVITY_KIND_CUDA_EVENT` with timestamps).
        CudaEvent = "cuda.event" in Sync,
        /// GPU context switches (`FECS_EVENTS`, `GPU_CONTEXT_SWITCH_EVENTS`).
        GpuContextSwitch = "gpu.context_switch" in Graphics,
        /// A periodic CPU sample with its call stack (`COMPOSITE_EVENTS`).
        CpuSample = "cpu.sample" in CpuSamples,
        /// A GPU metric sample (`GPU_METRICS`, or `GENERIC_EVENTS` of nsys 2022).
        GpuMetric = "gpu.metric" in GpuMetrics,
        /// A GPU memory allocation or free, and the bytes allocated after it.
        GpuMemory = "cuda.memory" in GpuMemory,
        /// A finding of nsys' expert rules (`--analyze`): the time it covers.
        Analysis = "analysis",
    }
    tracks {
        UnifiedMemory = "Unified memory" in Um,
        CudaGraphs = "CUDA graphs" in CudaGraph,
        Cudnn = "cuDNN" in Cudnn,
        Cublas = "cuBLAS" in Cublas,
        OpenAcc = "OpenACC" in OpenAcc,
        OpenMp = "OpenMP" in OpenMp,
        Mpi = "MPI" in Mpi,
        Ucx = "UCX" in Ucx,
        CpuCounters = "CPU performance counters" in CpuCounters,
        Network = "Network" in Network,
        Video = "Video codecs" in Video,
        Vulkan = "Vulkan" in Graphics,
        OpenGl = "OpenGL" in Graphics,
        DirectX = "DirectX" in Graphics,
        Wddm = "WDDM" in Graphics,
        Sli = "SLI" in Graphics,
        ContextSwitches = "GPU context switches" in Graphics,
        Diagnostics = "Diagnostics" in Diagnostics,
        ProfilerOverhead = "Profiler overhead" in Overhead,
        CuptiOverhead = "Profiler overhead (CUPTI)" in Overhead,
        LoadBalance = "Load balance" in Graphics,
        CudaEvents = "CUDA events" in Sync,
    }
    totals {
        Kernel of [Kernel]: "CUDA kernels",
        Memory = "memory" of [Memcpy, Memset]: "GPU memory operations (memcpy by kind, memset)",
        Api = "api" of [CudaApi]: "CUDA API calls (runtime and driver)",
        Nvtx of [Nvtx]: "NVTX ranges (CPU time)",
        NvtxGpu of [NvtxGpu]:
            "NVTX ranges projected onto the GPU (span of the GPU work launched inside)",
    }
}

impl Category {
    pub fn index(self) -> usize {
        self as usize
    }
}

impl Kind {
    /// GPU work (kernels and memory operations) shares one percentage basis: all GPU time.
    pub fn is_gpu(self) -> bool {
        self.event_types()
            .iter()
            .all(|t| matches!(t, EventType::Kernel | EventType::Memcpy | EventType::Memset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words users write and query by (`--types`, `category = '...'` in Perfetto's SQL,
    /// the summary's lines, in this order) and which `--types` word selects each category.
    #[test]
    fn the_words_users_rely_on() {
        let types: Vec<&str> = EventType::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(
            types.join(","),
            "kernel,memcpy,memset,cuda-api,nvtx,nvtx-gpu,osrt,sync,sched,um,cuda-graph,cudnn,\
             cublas,openacc,openmp,mpi,ucx,cpu-counters,network,video,graphics,diagnostics,\
             overhead,cpu-samples,gpu-metrics,gpu-memory"
        );
        let cats: Vec<String> = Category::ALL
            .iter()
            .map(|c| match c.event_type() {
                Some(t) => format!("{}:{}", c.as_str(), t.name()),
                None => c.as_str().to_string(),
            })
            .collect();
        assert_eq!(
            cats.join(","),
            "cuda.kernel:kernel,cuda.memcpy:memcpy,cuda.memset:memset,cuda.api:cuda-api,\
             nvtx:nvtx,nvtx.mark:nvtx,nvtx.gpu:nvtx-gpu,osrt:osrt,cuda.sync:sync,sched:sched,\
             cuda.um.cpu_fault:um,cuda.um.gpu_fault:um,cuda.graph:cuda-graph,cudnn:cudnn,\
             cublas:cublas,openacc:openacc,openmp:openmp,mpi:mpi,ucx:ucx,\
             cpu.counters:cpu-counters,network:network,nvvideo:video,graphics.api:graphics,\
             graphics.gpu:graphics,nsys.diagnostic:diagnostics,nsys.overhead:overhead,\
             nsys.marker:diagnostics,cuda.event:sync,gpu.context_switch:graphics,\
             cpu.sample:cpu-samples,gpu.metric:gpu-metrics,cuda.memory:gpu-memory,analysis"
        );
        let kinds: Vec<String> = Kind::ALL
            .iter()
            .map(|k| {
                let types: Vec<&str> = k.event_types().iter().map(|t| t.name()).collect();
                format!("{}:{}:{}", k.as_str(), types.join("+"), k.is_gpu())
            })
            .collect();
        assert_eq!(
            kinds.join(","),
            "kernel:kernel:true,memory:memcpy+memset:true,api:cuda-api:false,nvtx:nvtx:false,\
             nvtx-gpu:nvtx-gpu:false"
        );
        let tracks: Vec<String> = TrackKind::ALL
            .iter()
            .map(|k| format!("{}:{}", k.label(), k.event_type().name()))
            .collect();
        assert_eq!(
            tracks.join(","),
            "Unified memory:um,CUDA graphs:cuda-graph,cuDNN:cudnn,cuBLAS:cublas,\
             OpenACC:openacc,OpenMP:openmp,MPI:mpi,UCX:ucx,CPU performance counters:cpu-counters,\
             Network:network,Video codecs:video,Vulkan:graphics,OpenGL:graphics,\
             DirectX:graphics,WDDM:graphics,SLI:graphics,GPU context switches:graphics,\
             Diagnostics:diagnostics,Profiler overhead:overhead,\
             Profiler overhead (CUPTI):overhead,Load balance:graphics,CUDA events:sync"
        );
    }

    #[test]
    fn names_are_unique_and_every_type_selects_something() {
        let mut types: Vec<&str> = EventType::ALL.iter().map(|t| t.name()).collect();
        types.sort_unstable();
        types.dedup();
        assert_eq!(types.len(), EventType::ALL.len());
        let mut cats: Vec<&str> = Category::ALL.iter().map(|c| c.as_str()).collect();
        cats.sort_unstable();
        cats.dedup();
        assert_eq!(cats.len(), Category::ALL.len());
        for t in EventType::ALL {
            assert!(
                Category::ALL.iter().any(|c| c.event_type() == Some(t)),
                "{t:?} selects no category"
            );
        }
        for (i, c) in Category::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
    }
}
