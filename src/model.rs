//! The neutral event model: what the readers produce and the writers consume.
//!
//! Readers (`crate::nsys`) turn table rows into [`Event`]s addressed to a [`GroupKey`] (a logical
//! track such as "stream 7 of GPU 0" or "NVTX domain 1 on thread 42"). Layout (`crate::layout`)
//! splits each group into strictly nested lanes; writers (`crate::output`) encode the result.

/// Where an event's name comes from. `Str` is an id into the export's `StringIds` table, which
/// lets writers intern names by id without touching the text on every row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Name<'a> {
    Str(i64),
    Text(&'a str),
    Static(&'static str),
}

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
}

impl Category {
    pub const ALL: [Category; 10] = [
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
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// A typed argument value. Strings borrow from the row being converted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArgValue<'a> {
    Int(i64),
    Double(f64),
    Bool(bool),
    Str(&'a str),
    /// A value that repeats across rows (a label, a launch shape): writers intern it.
    Label(&'a str),
    /// An id into `StringIds`, resolved by the writer (interned where the format allows).
    StrId(i64),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arg<'a> {
    pub key: &'static str,
    pub value: ArgValue<'a>,
}

impl<'a> Arg<'a> {
    pub fn int(key: &'static str, v: i64) -> Self {
        Arg {
            key,
            value: ArgValue::Int(v),
        }
    }
    pub fn str(key: &'static str, v: &'a str) -> Self {
        Arg {
            key,
            value: ArgValue::Str(v),
        }
    }
}

/// A fixed-size argument list: no allocation per row.
pub struct ArgList<'a> {
    args: [Arg<'a>; 16],
    n: usize,
}

impl<'a> ArgList<'a> {
    pub fn new() -> Self {
        ArgList {
            args: [Arg::int("", 0); 16],
            n: 0,
        }
    }
    pub fn push(&mut self, key: &'static str, value: ArgValue<'a>) {
        if self.n < self.args.len() {
            self.args[self.n] = Arg { key, value };
            self.n += 1;
        }
    }
    pub fn int(&mut self, key: &'static str, v: Option<i64>) {
        if let Some(v) = v {
            self.push(key, ArgValue::Int(v));
        }
    }
    pub fn label(&mut self, key: &'static str, v: Option<&'a str>) {
        if let Some(v) = v {
            self.push(key, ArgValue::Label(v));
        }
    }
    pub fn as_slice(&self) -> &[Arg<'a>] {
        &self.args[..self.n]
    }
}

impl Default for ArgList<'_> {
    fn default() -> Self {
        Self::new()
    }
}

/// Flow arrows: a launch (CUDA API call) starts one flow per GPU row it caused (`out`); each
/// GPU row terminates exactly one (`terminating`). Ids are unique in the whole trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flows<'a> {
    pub out: &'a [u64],
    pub terminating: Option<u64>,
}

/// One slice (`end = Some`) or instant (`end = None`).
#[derive(Debug, Clone, PartialEq)]
pub struct Event<'a> {
    pub start: i64,
    pub end: Option<i64>,
    pub name: Name<'a>,
    pub category: Category,
    pub args: &'a [Arg<'a>],
    pub flows: Flows<'a>,
}

/// The logical track an event belongs to. Layout may split one group into several lanes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupKey {
    /// CUDA runtime/driver API calls on a CPU thread (the thread's own track).
    ThreadApi { global_tid: i64 },
    /// NVTX push/pop ranges and marks of one domain on one thread.
    ThreadNvtx { global_tid: i64, domain: i64 },
    /// NVTX start/end ranges of one domain in one process.
    ProcessNvtx { global_pid: i64, domain: i64 },
    /// GPU work of one stream.
    GpuStream {
        device: i64,
        global_pid: i64,
        stream: i64,
    },
    /// OS runtime calls of a thread.
    ThreadOsrt { global_tid: i64 },
    /// CUDA synchronization waits of one stream.
    GpuSync {
        device: i64,
        global_pid: i64,
        stream: i64,
    },
    /// Threads running on one CPU.
    Cpu { cpu: i64 },
    /// NVTX ranges of one CPU thread projected onto one GPU.
    GpuNvtx { device: i64, global_tid: i64 },
}

impl GroupKey {
    /// Whether slices of this group may nest (call stacks, push/pop ranges and their GPU
    /// projection) or must never overlap (GPU work and NVTX start/end ranges, which are
    /// independent intervals).
    pub fn nests(&self) -> bool {
        matches!(
            self,
            GroupKey::ThreadApi { .. }
                | GroupKey::ThreadNvtx { .. }
                | GroupKey::ThreadOsrt { .. }
                | GroupKey::GpuNvtx { .. }
        )
    }
}

/// nsys packs ids: PID = (globalTid >> 24) & 0xFFFFFF, TID = globalTid & 0xFFFFFF; the bits above
/// the PID name the machine/VM. `global_pid` keeps those high bits so PIDs of two machines differ.
pub fn global_pid_of(global_tid: i64) -> i64 {
    global_tid & !0xFF_FFFF
}
pub fn pid_of(global_id: i64) -> i64 {
    (global_id >> 24) & 0xFF_FFFF
}
pub fn tid_of(global_tid: i64) -> i64 {
    global_tid & 0xFF_FFFF
}
