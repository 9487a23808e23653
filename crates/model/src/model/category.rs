//! The event categories: below the model and the summary, which both count by them.

/// Every slice carries one category naming its source, so users can filter in Perfetto.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    Kernel,
    Memcpy,
    Memset,
    CudaApi,
    Nvtx,
    NvtxMark,
    /// NVTX ranges projected onto the GPU work they launched.
    NvtxGpu,
    /// OS runtime library calls.
    Osrt,
    /// CUDA stream, event and context synchronization.
    Sync,
    /// A thread running on a CPU.
    Sched,
    /// Unified memory: CPU page faults (instants on their process).
    UmCpuFault,
    /// Unified memory: GPU page faults (on the GPU).
    UmGpuFault,
    /// CUDA graph and graph node creation, cloning, destruction (on the creating thread).
    CudaGraph,
    Cudnn,
    Cublas,
    OpenAcc,
    OpenMp,
    Mpi,
    /// UCX (UCP) communication calls.
    Ucx,
    /// CPU performance counter and PMU samples.
    CpuCounters,
    /// NIC and InfiniBand switch metrics.
    Network,
    /// NVIDIA video codec (encoder, decoder, JPEG) API calls.
    Video,
    /// Graphics API calls (Vulkan, OpenGL, DirectX, PIX, KHR debug) on their thread.
    GraphicsApi,
    /// Graphics work on the GPU (Vulkan, OpenGL, DirectX workloads, WDDM queues, SLI,
    /// GPU context switches).
    GraphicsGpu,
    /// The profiler's own messages (`DIAGNOSTIC_EVENT`).
    Diagnostic,
    /// Time the profiler itself took on a thread (`PROFILER_OVERHEAD`, CUPTI overhead).
    Overhead,
    /// Profiler markers recorded among a library's calls ("OS runtime libraries profiling
    /// started", "cuDNN profiling started").
    NsysMarker,
    /// CUDA event records on the GPU (`CUPTI_ACTIVITY_KIND_CUDA_EVENT` with timestamps).
    CudaEvent,
    /// GPU context switches (`FECS_EVENTS`, `GPU_CONTEXT_SWITCH_EVENTS`).
    GpuContextSwitch,
    /// A periodic CPU sample with its call stack (`COMPOSITE_EVENTS`).
    CpuSample,
    /// A GPU metric sample (`GPU_METRICS`, or `GENERIC_EVENTS` of nsys 2022).
    GpuMetric,
    /// A GPU memory allocation or free, and the bytes allocated after it.
    GpuMemory,
    /// A finding of nsys' expert rules (`--analyze`): the time it covers.
    Analysis,
}

impl Category {
    pub const ALL: [Category; 33] = [
        Category::Kernel,
        Category::Memcpy,
        Category::Memset,
        Category::CudaApi,
        Category::Nvtx,
        Category::NvtxMark,
        Category::NvtxGpu,
        Category::Osrt,
        Category::Sync,
        Category::Sched,
        Category::UmCpuFault,
        Category::UmGpuFault,
        Category::CudaGraph,
        Category::Cudnn,
        Category::Cublas,
        Category::OpenAcc,
        Category::OpenMp,
        Category::Mpi,
        Category::Ucx,
        Category::CpuCounters,
        Category::Network,
        Category::Video,
        Category::GraphicsApi,
        Category::GraphicsGpu,
        Category::Diagnostic,
        Category::Overhead,
        Category::NsysMarker,
        Category::CudaEvent,
        Category::GpuContextSwitch,
        Category::CpuSample,
        Category::GpuMetric,
        Category::GpuMemory,
        Category::Analysis,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Kernel => "cuda.kernel",
            Category::Memcpy => "cuda.memcpy",
            Category::Memset => "cuda.memset",
            Category::CudaApi => "cuda.api",
            Category::Nvtx => "nvtx",
            Category::NvtxMark => "nvtx.mark",
            Category::NvtxGpu => "nvtx.gpu",
            Category::Osrt => "osrt",
            Category::Sync => "cuda.sync",
            Category::Sched => "sched",
            Category::UmCpuFault => "cuda.um.cpu_fault",
            Category::UmGpuFault => "cuda.um.gpu_fault",
            Category::CudaGraph => "cuda.graph",
            Category::Cudnn => "cudnn",
            Category::Cublas => "cublas",
            Category::OpenAcc => "openacc",
            Category::OpenMp => "openmp",
            Category::Mpi => "mpi",
            Category::Ucx => "ucx",
            Category::CpuCounters => "cpu.counters",
            Category::Network => "network",
            Category::Video => "nvvideo",
            Category::GraphicsApi => "graphics.api",
            Category::GraphicsGpu => "graphics.gpu",
            Category::Diagnostic => "nsys.diagnostic",
            Category::Overhead => "nsys.overhead",
            Category::NsysMarker => "nsys.marker",
            Category::CudaEvent => "cuda.event",
            Category::GpuContextSwitch => "gpu.context_switch",
            Category::CpuSample => "cpu.sample",
            Category::GpuMetric => "gpu.metric",
            Category::GpuMemory => "cuda.memory",
            Category::Analysis => "analysis",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}
