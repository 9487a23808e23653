//! The neutral event model: what the readers produce and the writers consume.
//!
//! A source (one nsys report, read by the reading crate) yields two things in these terms:
//! - its [`Description`]: the names of its processes, threads and GPUs, its interned strings,
//!   its clock (the session's wall-clock start), a label when several reports are merged;
//! - a stream of [`Event`]s, each addressed to a [`GroupKey`] (a logical track such as "stream 7
//!   of GPU 0" or "NVTX domain 1 on thread 42"), pushed into an [`EventSink`].
//!
//! Layout (in the writing crate) is the sink: it splits each group into strictly nested lanes
//! and hands the result to a writer (an output format). Readers know nothing of layout or formats;
//! writers know nothing of nsys.

use crate::category::{Category, TrackKind};
use anyhow::Result;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::mem::MaybeUninit;

/// Where an event's name comes from. `Str` is an id into the export's `StringIds` table, which
/// lets writers intern names by id without touching the text on every row; `Numbered` is a
/// text a reader has already looked up in a dictionary of its own (see [`TextNo`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Name<'a> {
    Str(i64),
    Text(&'a str),
    Static(&'static str),
    Numbered(TextNo, &'a str),
}

/// The number a reader's dictionary gave a text: equal numbers are equal texts, so a writer
/// interns the text by its number instead of hashing and comparing it again (an NVTX-heavy
/// profile repeats a few thousand range names over millions of rows). Each dictionary takes a
/// set of its own from [`TextNo::new_set`], so numbers of two dictionaries never meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TextNo(u64);

impl TextNo {
    /// A set no other dictionary in this process has.
    pub fn new_set() -> u32 {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    pub fn new(set: u32, no: u32) -> TextNo {
        TextNo(u64::from(set) << 32 | u64::from(no))
    }

    /// One integer for the set and the number.
    pub fn key(self) -> u64 {
        self.0
    }

    /// The number [`TextNo::key`] gave.
    pub fn of_key(key: u64) -> TextNo {
        TextNo(key)
    }

    /// The dictionary's set.
    pub fn set(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The text's number in its set.
    pub fn number(self) -> u32 {
        self.0 as u32
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
    /// A repeating value a reader has numbered (see [`TextNo`]).
    Numbered(TextNo, &'a str),
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

/// A fixed-size argument list: no allocation per row, and nothing written but the args pushed
/// (a reader builds one per row; filling all its slots cost more than most rows' args).
pub struct ArgList<'a> {
    args: [MaybeUninit<Arg<'a>>; MAX_ARGS],
    n: usize,
}

/// Args an [`ArgList`] holds; further ones are left out.
const MAX_ARGS: usize = 16;

impl<'a> ArgList<'a> {
    pub fn new() -> Self {
        ArgList {
            args: [const { MaybeUninit::uninit() }; MAX_ARGS],
            n: 0,
        }
    }
    pub fn push(&mut self, key: &'static str, value: ArgValue<'a>) {
        if self.n < MAX_ARGS {
            self.args[self.n].write(Arg { key, value });
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
        let pushed = &self.args[..self.n];
        // SAFETY: `push` initializes `args[n]` before counting it, so the first `n` are
        // initialized; `MaybeUninit<Arg>` has `Arg`'s layout, and `Arg` is `Copy` (nothing to
        // drop).
        unsafe { std::slice::from_raw_parts(pushed.as_ptr().cast::<Arg<'a>>(), pushed.len()) }
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

impl Flows<'_> {
    /// Whether flow `id` ends on GPU work (a kernel, memcpy or memset) rather than on an
    /// analysis finding: readers give GPU rows ids whose two low bits are their table (0 to 2),
    /// and findings ids whose two low bits are 3.
    pub fn ends_on_gpu_work(id: u64) -> bool {
        id & 3 != 3
    }
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

/// One stream of one CUDA context on one GPU (`context` as the rows name it; stream ids repeat
/// across contexts and processes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    pub device: i64,
    pub global_pid: i64,
    pub context: i64,
    pub stream: i64,
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
    GpuStream(StreamKey),
    /// OS runtime calls of a thread.
    ThreadOsrt { global_tid: i64 },
    /// CUDA synchronization waits of one stream.
    GpuSync(StreamKey),
    /// Threads running on one CPU.
    Cpu { cpu: i64 },
    /// NVTX ranges of one CPU thread projected onto one GPU.
    GpuNvtx { device: i64, global_tid: i64 },
    /// GPU memory allocations and frees of one process on one GPU (instants).
    GpuMemory { device: i64, global_pid: i64 },
    /// A library's or runtime's calls on one thread ("cuDNN", "OpenMP", "Profiler overhead").
    ThreadTrack { global_tid: i64, kind: TrackKind },
    /// Events of one process that belong to no thread ("Unified memory", "Diagnostics").
    ProcessTrack { global_pid: i64, kind: TrackKind },
    /// Events of one GPU outside its streams ("Unified memory", graphics work), of one CUDA
    /// context where the rows name one (`global_pid` and `context` 0 where they do not).
    GpuTrack {
        device: i64,
        global_pid: i64,
        context: i64,
        kind: TrackKind,
    },
    /// Events of a whole machine or of the profiler (diagnostics without a process, CPU
    /// counters, network metrics). `source` is 0 from readers; layout folds in the source index.
    GlobalTrack { kind: TrackKind, source: i64 },
    /// Findings of one of nsys' expert rules (`--analyze`), on the top-level "Analysis" group:
    /// `rule` is the rule's place in nsys' order (the tracks' order), `track` the track's name.
    /// `source` as for `GlobalTrack`.
    Analysis {
        rule: u8,
        track: &'static str,
        source: i64,
    },
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
                | GroupKey::ThreadTrack { .. }
        )
    }
}

/// The model's process and thread ids: one `i64` each, TID in bits 0..23, PID in bits 24..47,
/// the machine (host or VM) in bits 48..55 (a process id has TID 0), and the source index above
/// ([`with_source`]). A reader maps its profiler's ids into this; nsys' `globalTid` already has
/// this layout (the reading crate's `global_tid_of` takes it as is). `global_pid_of` keeps the
/// machine bits, so PIDs of two machines differ.
pub fn global_pid_of(global_tid: i64) -> i64 {
    global_tid & !0xFF_FFFF
}
pub fn pid_of(global_id: i64) -> i64 {
    (global_id >> 24) & 0xFF_FFFF
}
pub fn tid_of(global_tid: i64) -> i64 {
    global_tid & 0xFF_FFFF
}

/// Where one source's ids live once several sources share a trace: its index goes into bits
/// 56..61 of every global process/thread id (above the machine), so the processes of two
/// reports never merge, even when their pids are equal.
pub const SOURCE_SHIFT: u32 = 56;
pub const MAX_SOURCES: usize = 64;

/// The source index folded into a global id by [`with_source`].
pub fn source_of(global_id: i64) -> usize {
    ((global_id >> SOURCE_SHIFT) & 0x3F) as usize
}

pub fn with_source(global_id: i64, source: usize) -> i64 {
    global_id | ((source as i64) << SOURCE_SHIFT)
}

/// The id as its source knows it.
pub fn without_source(global_id: i64) -> i64 {
    global_id & !(0x3F << SOURCE_SHIFT)
}

/// (table, reason) a row is counted under when it lies before the trace's time zero: earlier
/// than the first rows of its table said (a table out of time order), so it cannot be placed.
pub const EARLY_ROWS: (&str, &str) = (
    "events",
    "earlier than the trace's time zero (table out of time order)",
);

/// The pid a JSON trace shows for a global id: unique across merged sources (the source index
/// sits above the 24-bit pid), equal to the real pid for a single report. (A protobuf merge
/// puts each source on a machine of its own instead, with its real pids.)
pub fn trace_pid_of(global_id: i64) -> i64 {
    pid_of(global_id) | (source_of(global_id) as i64) << 24
}

/// The tid a JSON trace shows for a global thread id: unique across merged sources like
/// [`trace_pid_of`], the real tid for a single report.
pub fn trace_tid_of(global_tid: i64) -> i64 {
    tid_of(global_tid) | (source_of(global_tid) as i64) << 24
}

/// Everything a writer needs to know about one source besides its events: names of processes,
/// threads, GPUs and NVTX domains, the strings that [`Name::Str`] and [`ArgValue::StrId`] refer
/// to, and its clock. Keys are the source's own global ids (no source bits).
/// Where a source's interned strings come from: looked up when first needed, so memory follows
/// the strings a trace uses, not the size of the source's string table.
pub trait StringTable: Send + Sync {
    fn get(&self, id: i64) -> Option<Box<str>>;
}

/// Strings held in memory (small sources, tests).
impl StringTable for HashMap<i64, Box<str>> {
    fn get(&self, id: i64) -> Option<Box<str>> {
        HashMap::get(self, &id).cloned()
    }
}

/// What a source records of a GPU besides its name (each where recorded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuFacts {
    /// The compute capability as CUDA names an architecture: "sm_90".
    pub arch: Option<String>,
    /// The chip ("GH100").
    pub chip: Option<String>,
    /// The device's UUID as 16 bytes.
    pub uuid: Option<[u8; 16]>,
    /// Its PCI bus location ("0000:01:00.0").
    pub pci_bdf: Option<String>,
    /// What bounds the blocks resident on one of its SMs, where recorded.
    pub sm: Option<SmLimits>,
}

/// A GPU's per-SM and per-block limits as nsys records them (`TARGET_INFO_GPU`): what the CUDA
/// occupancy calculator needs beside a launch's own figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmLimits {
    /// The compute capability (major, minor).
    pub compute: (i64, i64),
    pub warp_size: i64,
    pub max_warps_per_sm: i64,
    pub max_blocks_per_sm: i64,
    pub max_registers_per_sm: i64,
    pub max_registers_per_block: i64,
    /// Bytes.
    pub max_shared_memory_per_sm: i64,
    /// Bytes, the most a block can opt in to.
    pub max_shared_memory_per_block: i64,
}

impl GpuFacts {
    /// A UUID's 16 bytes from its text, with or without dashes and a "GPU-" prefix.
    pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
        let hex: Vec<u8> = text
            .trim_start_matches("GPU-")
            .bytes()
            .filter(|&b| b != b'-')
            .collect();
        if hex.len() != 32 {
            return None;
        }
        let mut out = [0; 16];
        for (i, pair) in hex.chunks(2).enumerate() {
            out[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
        }
        Some(out)
    }
}

#[derive(Default)]
pub struct Description {
    /// The strings that [`Name::Str`] and [`ArgValue::StrId`] refer to.
    pub strings: Option<Box<dyn StringTable>>,
    /// globalTid -> thread name.
    pub thread_names: HashMap<i64, String>,
    /// globalPid -> process name.
    pub process_names: HashMap<i64, String>,
    /// CUDA device -> GPU model name.
    pub gpu_names: BTreeMap<i64, String>,
    /// CUDA device -> what else the source records of it, where it does.
    pub gpu_facts: BTreeMap<i64, GpuFacts>,
    /// CUDA device -> the CUDA contexts with GPU-side rows on it, as (globalPid, contextId),
    /// sorted. A device with several gets a level per context between the GPU and its streams
    /// (see [`Description::context_index`]). Context id 0 names no context (nsys writes it on
    /// unified-memory migrations) and is never listed.
    pub gpu_contexts: BTreeMap<i64, Vec<(i64, i64)>>,
    /// (globalPid, domainId) -> NVTX domain name.
    pub nvtx_domains: HashMap<(i64, i64), String>,
    /// Key/value facts about the source (export version, schema...), written where a format can.
    pub metadata: BTreeMap<String, String>,
    /// Wall-clock time (ns since the Unix epoch) of the source's time zero, when recorded.
    pub session_start_utc_ns: Option<i64>,
    /// The earliest event time of the source when it precedes its time zero (rows recorded
    /// while the session started): the trace shifts the whole source so that they fit.
    pub earliest_ns: Option<i64>,
    /// Names this source among several ("rank 3 · host-a"); `None` for a single source.
    pub label: Option<String>,
    /// Host the source was recorded on, when known.
    pub host: Option<String>,
    /// The recorded machine's kernel release (`uname -r`), when known.
    pub kernel_release: Option<String>,
    /// The recorded machine's architecture as `uname -m` names it ("x86_64", "aarch64"), from
    /// what nsys recorded of its CPU, else from the kernel release where that names it.
    pub machine: Option<String>,
}

impl std::fmt::Debug for Description {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Description")
            .field("processes", &self.process_names.len())
            .field("threads", &self.thread_names.len())
            .field("gpus", &self.gpu_names)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl Description {
    pub fn string(&self, id: i64) -> Option<Box<str>> {
        self.strings.as_ref()?.get(id)
    }

    /// A string id's text, or "(string N)" when the source does not hold it (a dangling id is
    /// shown, not dropped).
    pub fn string_or_id(&self, id: i64) -> Cow<'_, str> {
        match self.string(id) {
            Some(s) => Cow::Owned(s.into()),
            None => Cow::Owned(format!("(string {id})")),
        }
    }

    pub fn thread_name(&self, global_tid: i64) -> String {
        let gt = without_source(global_tid);
        match self.thread_names.get(&gt) {
            Some(n) => n.clone(),
            None => format!("Thread {}", tid_of(gt)),
        }
    }

    /// The process's own name (as the source names it), without the merge label.
    pub fn bare_process_name(&self, global_pid: i64) -> String {
        let gp = global_pid_of(without_source(global_pid));
        if let Some(n) = self.process_names.get(&gp) {
            return n.clone();
        }
        let main_thread = gp | pid_of(gp);
        if let Some(n) = self.thread_names.get(&main_thread) {
            return n.clone();
        }
        format!("Process {}", pid_of(gp))
    }

    /// "python", or "rank 3 · host-a · pid 4242" among several sources (the label, then the
    /// pid the process had on its host: pids repeat across hosts; its threads keep their names).
    pub fn process_name(&self, global_pid: i64) -> String {
        match &self.label {
            Some(l) => format!("{l} · pid {}", pid_of(global_pid)),
            None => self.bare_process_name(global_pid),
        }
    }

    /// "GPU 0 · NVIDIA H100 80GB HBM3", or "GPU 0" when the source does not describe it;
    /// prefixed by the host among several sources.
    pub fn gpu_label(&self, device: i64) -> String {
        let own = match self.gpu_names.get(&device) {
            Some(n) => format!("GPU {device} · {n}"),
            None => format!("GPU {device}"),
        };
        match self.source_tag() {
            Some(tag) => format!("{tag} · {own}"),
            None => own,
        }
    }

    /// The contexts of a device that has several (`None`: one or none, the flat layout).
    fn multi_contexts(&self, device: i64) -> Option<&[(i64, i64)]> {
        let list = self.gpu_contexts.get(&without_source(device))?;
        (list.len() > 1).then_some(list.as_slice())
    }

    /// Where a device has GPU work of several CUDA contexts (of one process or several), the
    /// index of this one among them: its tracks go in a group of their own under the GPU. `None`
    /// where the device has one context (streams directly under the GPU, as ever) or the rows
    /// name no listed context. Ids may carry a source index (a merge).
    pub fn context_index(&self, device: i64, global_pid: i64, context: i64) -> Option<u32> {
        let list = self.multi_contexts(device)?;
        let gp = global_pid_of(without_source(global_pid));
        list.binary_search(&(gp, context)).ok().map(|i| i as u32)
    }

    /// On a device with several contexts, the one context a process has there: where that
    /// process's GPU tracks that belong to no context in particular go (NVTX projected from
    /// its threads, its memory). `None` when the process has several there, or none.
    pub fn process_context_index(&self, device: i64, global_pid: i64) -> Option<u32> {
        let list = self.multi_contexts(device)?;
        let gp = global_pid_of(without_source(global_pid));
        let mut mine = list.iter().enumerate().filter(|(_, (p, _))| *p == gp);
        match (mine.next(), mine.next()) {
            (Some((i, _)), None) => Some(i as u32),
            _ => None,
        }
    }

    /// The context at `index` of a device with several ([`Description::context_index`]):
    /// "Context 2" as nsys names it, or "Context 2 · python (pid 4242)" where the device has
    /// contexts of several processes.
    pub fn gpu_context_label(&self, device: i64, index: u32) -> String {
        let Some(&(gp, ctx)) = self
            .gpu_contexts
            .get(&without_source(device))
            .and_then(|l| l.get(index as usize))
        else {
            return format!("Context (#{index})");
        };
        let list = &self.gpu_contexts[&without_source(device)];
        if list.iter().all(|(p, _)| *p == gp) {
            format!("Context {ctx}")
        } else {
            format!(
                "Context {ctx} · {} (pid {})",
                self.bare_process_name(gp),
                pid_of(gp)
            )
        }
    }

    /// What tells this source's machine-wide tracks apart among several sources: its host,
    /// else its label; `None` for a single source.
    fn source_tag(&self) -> Option<&str> {
        self.label.as_ref()?;
        self.host.as_deref().or(self.label.as_deref())
    }

    /// A machine-wide track's name ("CPUs", "Diagnostics"), with the source's host or label
    /// among several sources ("CPUs · host-a").
    pub fn per_source(&self, name: &str) -> String {
        match self.source_tag() {
            Some(tag) => format!("{name} · {tag}"),
            None => name.to_string(),
        }
    }

    /// Default domain 0 is "NVTX", as nsys shows it.
    pub fn nvtx_domain_name(&self, global_pid: i64, domain: i64) -> String {
        if domain == 0 {
            return "NVTX".to_string();
        }
        let gp = global_pid_of(without_source(global_pid));
        match self.nvtx_domains.get(&(gp, domain)) {
            Some(n) => n.clone(),
            None => format!("NVTX domain {domain}"),
        }
    }
}

/// Where readers put what they read: events, and the rows they could not or need not convert.
/// Implemented by layout; a reader never sees tracks, lanes or formats.
pub trait EventSink {
    fn event(&mut self, key: GroupKey, ev: &Event<'_>) -> Result<()>;
    /// A row that could not be converted: counted by table and reason, never silently lost.
    fn skip(&mut self, table: &'static str, reason: &'static str);
    /// Something left out that is not a source row of its own (an arrow whose GPU row starts
    /// before its launch): counted, not a row for progress.
    fn note(&mut self, what: &'static str, reason: &'static str);
    /// A row that names something (an NVTX domain, category or thread) instead of being an event.
    fn naming_row(&mut self, table: &'static str);
    /// A source row that went into an event with another (a sched-in paired with its sched-out).
    fn extra_row(&mut self);
    /// One value of a counter (GPU metrics, bytes allocated): one track per key.
    fn counter(&mut self, key: &CounterKey<'_>, sample: CounterSample) -> Result<()>;
    /// One CPU sample with its call stack, on its thread.
    fn cpu_sample(&mut self, sample: &CpuSample<'_>) -> Result<()>;
    /// A thread's time on a CPU (scheduling). Slices of one CPU come in time order and do not
    /// overlap, as far as the source's rows are in order (layout copes with any order).
    fn cpu_slice(&mut self, slice: &CpuSlice) -> Result<()>;
    /// Everything read: close what is open, and say what was converted and what was not.
    fn finish(self) -> Result<crate::summary::Summary>
    where
        Self: Sized;

    /// The (start, end) of a row that must be a slice, or `None` after counting why it cannot
    /// be one: no timestamps (readers read a time no trace can hold, past 2^62 ns, as none),
    /// an end before its start. Times before the session start are kept: nsys records
    /// scheduling and metrics while a session starts.
    fn interval(
        &mut self,
        table: &'static str,
        start: Option<i64>,
        end: Option<i64>,
    ) -> Option<(i64, i64)> {
        let reason = match (start, end) {
            (Some(s), Some(e)) if e >= s => return Some((s, e)),
            (Some(_), Some(_)) => "ends before it starts",
            _ => "no start or end timestamp (missing, or past 2^62 ns)",
        };
        self.skip(table, reason);
        None
    }
}

/// What a sink in front of another changes: each hook gets a row and the sink behind, and by
/// default passes the row on. [`Filtered`] puts one in front of a sink; the counts and the
/// finish go straight through.
pub trait SinkFilter<S: EventSink> {
    fn event(&mut self, sink: &mut S, key: GroupKey, ev: &Event<'_>) -> Result<()> {
        sink.event(key, ev)
    }
    fn counter(&mut self, sink: &mut S, key: &CounterKey<'_>, sample: CounterSample) -> Result<()> {
        sink.counter(key, sample)
    }
    fn cpu_sample(&mut self, sink: &mut S, sample: &CpuSample<'_>) -> Result<()> {
        sink.cpu_sample(sample)
    }
    fn cpu_slice(&mut self, sink: &mut S, slice: &CpuSlice) -> Result<()> {
        sink.cpu_slice(slice)
    }
}

/// `sink` behind `filter` (see [`SinkFilter`]).
pub struct Filtered<S, F> {
    pub sink: S,
    pub filter: F,
}

impl<S: EventSink, F: SinkFilter<S>> EventSink for Filtered<S, F> {
    fn event(&mut self, key: GroupKey, ev: &Event<'_>) -> Result<()> {
        self.filter.event(&mut self.sink, key, ev)
    }
    fn skip(&mut self, table: &'static str, reason: &'static str) {
        self.sink.skip(table, reason)
    }
    fn note(&mut self, what: &'static str, reason: &'static str) {
        self.sink.note(what, reason)
    }
    fn naming_row(&mut self, table: &'static str) {
        self.sink.naming_row(table)
    }
    fn extra_row(&mut self) {
        self.sink.extra_row()
    }
    fn counter(&mut self, key: &CounterKey<'_>, sample: CounterSample) -> Result<()> {
        self.filter.counter(&mut self.sink, key, sample)
    }
    fn cpu_sample(&mut self, sample: &CpuSample<'_>) -> Result<()> {
        self.filter.cpu_sample(&mut self.sink, sample)
    }
    fn cpu_slice(&mut self, slice: &CpuSlice) -> Result<()> {
        self.filter.cpu_slice(&mut self.sink, slice)
    }
    fn finish(self) -> Result<crate::summary::Summary> {
        self.sink.finish()
    }
}

/// Why a thread left its CPU, as far as the profiler recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffCpu {
    /// Not recorded: most exports say only that the thread stopped running.
    Unknown,
    /// Preempted: still runnable, waiting for a CPU.
    Preempted,
    /// Gave its CPU up (a yield) and stayed runnable.
    Runnable,
    /// Blocked in an interruptible wait (a lock, a condition, I/O readiness, a sleep).
    Sleeping,
    /// Blocked in an uninterruptible wait (paging).
    Uninterruptible,
    /// Stopped or suspended.
    Stopped,
    /// The thread exited: its last time on a CPU.
    Exited,
}

/// A thread's time on one CPU, from its sched-in to its sched-out. A reader yields one per
/// pair of rows; layout decides how a format shows them (Perfetto's own CPU and thread-state
/// tracks, or slices on one track per CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSlice {
    pub cpu: i64,
    pub global_tid: i64,
    pub start: i64,
    pub end: i64,
    /// How it left the CPU at `end`.
    pub off: OffCpu,
}

/// What a counter track belongs to: a GPU (metrics, memory of all its processes), a process
/// (its own GPU memory) or the report's analysis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CounterOwner {
    Gpu {
        device: i64,
    },
    Process {
        global_pid: i64,
    },
    /// The report's own "Analysis" group (a merge's pictures, `merge --util-map`), first in it.
    Analysis,
}

/// One counter track: its owner, its name as the profiler names it, and its unit ("%", "Hz",
/// "bytes"; "" when the profiler gives none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CounterKey<'a> {
    pub owner: CounterOwner,
    pub name: &'a str,
    pub unit: &'a str,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CounterValue {
    Int(i64),
    Double(f64),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterSample {
    pub ts: i64,
    pub value: CounterValue,
    pub category: Category,
}

/// One frame of a sampled call stack: function and module as ids into `StringIds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame {
    pub symbol: i64,
    pub module: i64,
}

/// A periodic CPU sample: a thread's call stack (leaf first) at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuSample<'a> {
    pub ts: i64,
    pub global_tid: i64,
    pub cpu: Option<i64>,
    /// The thread's state as the profiler labels it ("Running"), when recorded.
    pub state: Option<&'a str>,
    /// Leaf first (`stackDepth` 0).
    pub frames: &'a [Frame],
}

/// A fast hasher for the converter's own integer-keyed maps (group keys, string ids): one
/// multiply per word, where the default SipHash costs a dozen rounds. Keys are not attacker-chosen
/// in a way that matters here (a slow map at worst).
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl std::hash::Hasher for FxHasher {
    /// Rotated so that the multiply's well-mixed high bits pick the bucket: hashbrown takes the
    /// low bits, which a multiply fills only from the input's low bits (as rustc-hash 2 does).
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
    /// Eight bytes per multiply, the last few as one zero-padded word (the length, which `Hash`
    /// writes first for slices and strings, tells the padding apart).
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // By shifts: a copy of a variable length is a call to memcpy.
            let word = rest
                .iter()
                .enumerate()
                .fold(0u64, |w, (i, &b)| w | u64::from(b) << (8 * i));
            self.write_u64(word);
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(FX_SEED);
    }
    fn write_i64(&mut self, v: i64) {
        self.write_u64(v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// `HashMap<K, V, FastHash>`: see [`FxHasher`].
pub type FastHash = std::hash::BuildHasherDefault<FxHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    const P1: i64 = 0x1_0000_6F00_0000; // machine 1, pid 111
    const P2: i64 = 0x1_0000_7000_0000; // pid 112

    fn desc(contexts: &[(i64, &[(i64, i64)])]) -> Description {
        let mut d = Description::default();
        d.process_names.insert(P1, "python3".into());
        for (device, list) in contexts {
            d.gpu_contexts.insert(*device, list.to_vec());
        }
        d
    }

    /// An arg list holds what was pushed, in order, up to its bound.
    #[test]
    fn arg_list_holds_what_was_pushed() {
        let mut args = ArgList::new();
        assert!(args.as_slice().is_empty());
        args.int("a", Some(1));
        args.int("none", None);
        args.label("b", Some("x"));
        assert_eq!(
            args.as_slice(),
            &[
                Arg::int("a", 1),
                Arg {
                    key: "b",
                    value: ArgValue::Label("x")
                }
            ]
        );
        for i in 0..20 {
            args.int("n", Some(i));
        }
        assert_eq!(args.as_slice().len(), MAX_ARGS);
        assert_eq!(args.as_slice()[MAX_ARGS - 1], Arg::int("n", 13));
    }

    #[test]
    fn context_level_only_where_a_device_has_several() {
        let d = desc(&[(0, &[(P1, 1), (P2, 2)]), (1, &[(P1, 3)])]);
        assert_eq!(d.context_index(0, P1, 1), Some(0));
        assert_eq!(d.context_index(0, P2 | 0x42, 2), Some(1));
        // Ids of a merged source carry its index: the description knows them without it.
        assert_eq!(
            d.context_index(with_source(0, 5), with_source(P2, 5), 2),
            Some(1)
        );
        assert_eq!(d.context_index(0, P1, 0), None, "context 0 is none");
        assert_eq!(d.context_index(1, P1, 3), None, "one context: flat");
        assert_eq!(d.context_index(2, P1, 1), None, "a device without contexts");
        assert_eq!(d.process_context_index(0, P2 | 7), Some(1));
        assert_eq!(d.process_context_index(1, P1), None);
        assert_eq!(d.gpu_context_label(0, 0), "Context 1 · python3 (pid 111)");
        assert_eq!(
            d.gpu_context_label(0, 1),
            "Context 2 · Process 112 (pid 112)"
        );
        let one = desc(&[(0, &[(P1, 1), (P1, 2)])]);
        assert_eq!(one.gpu_context_label(0, 1), "Context 2");
        assert_eq!(
            one.process_context_index(0, P1),
            None,
            "two contexts: neither"
        );
    }
}

#[cfg(test)]
mod gpu_facts_tests {
    use super::GpuFacts;

    #[test]
    fn uuids_read_as_nsys_writes_them() {
        let want = [
            0x4b, 0x0f, 0x96, 0xc9, 0x7b, 0xc3, 0x36, 0x64, 0xd8, 0xeb, 0x09, 0x98, 0xd6, 0x30,
            0x43, 0x9e,
        ];
        for text in [
            "4b0f96c9-7bc3-3664-d8eb-0998d630439e",
            "GPU-4b0f96c9-7bc3-3664-d8eb-0998d630439e",
            "4b0f96c97bc33664d8eb0998d630439e",
        ] {
            assert_eq!(GpuFacts::parse_uuid(text), Some(want), "{text}");
        }
        assert_eq!(GpuFacts::parse_uuid("4b0f96c9"), None);
        assert_eq!(
            GpuFacts::parse_uuid("zz0f96c9-7bc3-3664-d8eb-0998d630439e"),
            None
        );
    }
}
