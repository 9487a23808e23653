//! Output formats. Each reader thread owns one [`EventWriter`] that encodes its events into
//! chunks; one file-writer thread concatenates chunks, first writing the descriptors of the
//! processes and threads a chunk needs. Chunks of different readers may interleave freely
//! because every group of events lives on its own sequence (protobuf) or carries its own ids
//! (JSON).
//!
//! Writers see only the neutral model ([`Event`], [`Description`]): nothing here knows where
//! the events came from.
//!
//! Each format is described once, in its writer's module: its [`Format`] implementation says
//! its name, help, extension, how `serve` hands it out, how it is made from the
//! [`FormatOptions`] and how its trace's record is read back. [`formats`] lists them.

pub mod formats;
pub mod json;
pub mod pftrace;

use nsys_perfetto_model::model::{
    CounterValue, CpuSample, CpuSlice, Description, Event, global_pid_of, source_of, trace_pid_of,
    trace_tid_of,
};
use nsys_perfetto_model::select::GpuModel;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The options a format is made with ([`Format::made`]); each format takes what concerns it.
#[derive(Debug, Clone, Copy, Default)]
pub struct FormatOptions {
    /// How GPU work is written (`--gpu`).
    pub gpu: GpuModel,
    /// JSON: colour NVTX ranges with the nearest Chrome colour names (`--json-colors`).
    pub json_colors: bool,
}

/// The last places `needle` stands in `hay`, the last first: where a format's
/// [`Format::read_record`] looks for its record at the end of a file.
fn find_last(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    let mut at: Vec<usize> = hay
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    at.reverse();
    at
}

/// Processes and threads: tracks every format knows how to describe from the profile's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WellKnown {
    Process(i64),
    Thread(i64),
    /// A GPU (CUDA device number): the group holding its streams. Shared by every reader that
    /// puts tracks under it (GPU work, synchronization, NVTX projected onto it).
    Gpu(i64),
    /// One CUDA context of a GPU that has several: the group between the GPU and the context's
    /// streams. `index` is its place among the device's contexts in the source's
    /// [`Description::gpu_contexts`], which names it.
    GpuContext {
        device: i64,
        index: u32,
    },
}

/// Bit 55 of a GPU uuid's id marks a context group; a device id (with its source bits) never
/// sets it (device ids are below 2^32).
const GPU_CONTEXT_BIT: u64 = 1 << 55;
const SOURCE_BITS: u64 = 0x3F << nsys_perfetto_model::model::SOURCE_SHIFT;

impl WellKnown {
    /// Stable uuids: the kind in the top two bits, apart from the small counter-allocated ones
    /// (top bits 0), and the global id (source, machine, pid, tid: 62 bits) below.
    pub fn uuid(self) -> u64 {
        const ID: u64 = (1 << 62) - 1;
        match self {
            WellKnown::Process(gp) => (1 << 62) | ((global_pid_of(gp) as u64 & ID) >> 24),
            WellKnown::Thread(gt) => (2 << 62) | (gt as u64 & ID),
            WellKnown::Gpu(d) => (3 << 62) | (d as u64 & ID),
            WellKnown::GpuContext { device, index } => {
                let d = device as u64;
                (3 << 62)
                    | (d & SOURCE_BITS)
                    | GPU_CONTEXT_BIT
                    | (u64::from(index) & 0x7F_FFFF) << 32
                    | (d & 0xFFFF_FFFF)
            }
        }
    }

    /// The process or thread a [`WellKnown::uuid`] stands for; `None` for any other uuid.
    /// Exact for every id below 2^62 (source, machine, pid and tid bits).
    pub fn from_uuid(uuid: u64) -> Option<WellKnown> {
        const ID: u64 = (1 << 62) - 1;
        let id = uuid & ID;
        match uuid >> 62 {
            1 => Some(WellKnown::Process((id << 24) as i64)),
            2 => Some(WellKnown::Thread(id as i64)),
            3 if id & GPU_CONTEXT_BIT != 0 => Some(WellKnown::GpuContext {
                device: ((id & SOURCE_BITS) | (id & 0xFFFF_FFFF)) as i64,
                index: ((id >> 32) & 0x7F_FFFF) as u32,
            }),
            3 => Some(WellKnown::Gpu(id as i64)),
            _ => None,
        }
    }

    /// The pid a trace without machines shows (unique across merged sources).
    pub fn pid(self) -> i64 {
        match self {
            WellKnown::Process(g) | WellKnown::Thread(g) => trace_pid_of(g),
            WellKnown::Gpu(_) | WellKnown::GpuContext { .. } => 0,
        }
    }

    /// Which source's [`Description`] names it.
    pub fn source(self) -> usize {
        match self {
            WellKnown::Process(g)
            | WellKnown::Thread(g)
            | WellKnown::Gpu(g)
            | WellKnown::GpuContext { device: g, .. } => source_of(g),
        }
    }

    /// The tid a trace without machines shows (unique across merged sources, like the pid).
    pub fn tid(self) -> Option<i64> {
        match self {
            WellKnown::Process(_) | WellKnown::Gpu(_) | WellKnown::GpuContext { .. } => None,
            WellKnown::Thread(g) => Some(trace_tid_of(g)),
        }
    }
}

/// A named track that is not a process or thread: a GPU, a stream, an NVTX domain, a lane.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomTrack {
    pub uuid: u64,
    /// A well-known or custom uuid; `None` for top-level tracks (GPUs).
    pub parent: Option<u64>,
    pub name: String,
    /// Order among siblings when the parent asks for explicit ordering.
    pub rank: Option<i64>,
    /// Children of this track are ordered by `rank` (GPU streams by stream id).
    pub explicit_child_order: bool,
    /// A number that tells the track apart where a format can only show it with a number
    /// (Perfetto's UI draws a JSON thread as "NAME TID"): for a GPU's NVTX track, the tid of
    /// the thread whose ranges it projects. Stream and CPU tracks end their name with theirs.
    pub number: Option<i64>,
}

/// One stream's GPU work where the format writes it in its own GPU model
/// ([`EventWriter::native_gpu`]): a hardware queue of its GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuQueue {
    /// The CUDA device as its source numbers it (no source index).
    pub device: i64,
    /// The process whose context the stream belongs to (placed global pid).
    pub global_pid: i64,
    /// The CUDA context as the rows name it.
    pub context: i64,
    /// The queue's name, unique on its GPU ("Stream 7", "Stream 7 · Context 2").
    pub name: String,
}

/// A counter track (a GPU metric, bytes allocated) under a GPU or process track.
#[derive(Debug, Clone, PartialEq)]
pub struct CounterTrack {
    pub uuid: u64,
    /// The uuid of a [`WellKnown`] GPU or process track.
    pub parent: u64,
    pub name: String,
    /// "%", "Hz", "bytes", or "" when unknown.
    pub unit: String,
    /// The category of its values (JSON writes it on each).
    pub category: nsys_perfetto_model::category::Category,
    /// Order among siblings when the parent asks for explicit ordering.
    pub rank: Option<i64>,
    /// A GPU metric where the format writes GPU work in its own GPU model
    /// ([`EventWriter::native_gpu`]): its GPU as the source numbers it (`parent` and `rank`
    /// then mean nothing).
    pub gpu: Option<i64>,
}

/// What the file's header and footer say of each source: its name among several, where its
/// time zero sits on the trace's timeline, its wall clock, its metadata.
#[derive(Debug, Clone, Default)]
pub struct Placed {
    pub label: Option<String>,
    /// Added to every time of the source.
    pub offset: i64,
    pub session_start_utc_ns: Option<i64>,
    pub metadata: std::collections::BTreeMap<String, String>,
    /// The recorded machine's kernel release, when known.
    pub kernel_release: Option<String>,
    /// The recorded machine's architecture (`uname -m`), when known.
    pub machine: Option<String>,
}

/// Encoded bytes plus the process/thread descriptors that must precede them in the file.
#[derive(Debug, Default)]
pub struct Chunk {
    pub data: Vec<u8>,
    pub requires: Vec<WellKnown>,
}

/// A writer's encoded bytes not yet sent, with the descriptors they need: what every format's
/// [`EventWriter`] keeps between chunks.
#[derive(Debug)]
pub struct ChunkBuffer {
    pub data: Vec<u8>,
    requires: Vec<WellKnown>,
}

impl Default for ChunkBuffer {
    fn default() -> Self {
        // Untouched: a writer that writes little keeps few pages of it.
        ChunkBuffer {
            data: Vec::with_capacity(CHUNK_CAPACITY),
            requires: Vec::new(),
        }
    }
}

/// Chunk buffers the file writer has written out, for the writers that filled a chunk to fill
/// again: a buffer is allocated once, not once a chunk, and its pages are not faulted in and
/// zeroed again.
static SPARE: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// The most buffers [`SPARE`] keeps: spares are resident memory.
const SPARE_MAX: usize = 2;

/// An empty buffer for a chunk, a spare one when there is one.
fn spare_buffer() -> Vec<u8> {
    SPARE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop()
        .unwrap_or_else(|| Vec::with_capacity(CHUNK_CAPACITY))
}

/// Give a written chunk's buffer back for another chunk (kept in `SPARE`, at most `SPARE_MAX`
/// of them).
pub fn recycle(mut data: Vec<u8>) {
    if data.capacity() < CHUNK_CAPACITY {
        return;
    }
    data.clear();
    let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
    if spare.len() < SPARE_MAX {
        spare.push(data);
    }
}

/// Chunks go to the file writer once they reach this size: bounded memory, few channel sends.
pub const CHUNK_BYTES: usize = 1 << 20;
/// A chunk's buffer: room for the event that takes it past [`CHUNK_BYTES`] (a buffer of exactly
/// that size grew, copying the whole megabyte, once per chunk).
const CHUNK_CAPACITY: usize = CHUNK_BYTES + (256 << 10);

impl ChunkBuffer {
    /// A thread needs its process described too, a GPU context its GPU.
    pub fn require(&mut self, track: WellKnown) {
        match track {
            WellKnown::Thread(gt) => self.requires.push(WellKnown::Process(global_pid_of(gt))),
            WellKnown::GpuContext { device, .. } => self.requires.push(WellKnown::Gpu(device)),
            _ => {}
        }
        self.requires.push(track);
    }

    pub fn take(&mut self) -> Option<Chunk> {
        if self.data.is_empty() && self.requires.is_empty() {
            return None;
        }
        Some(Chunk {
            data: std::mem::replace(&mut self.data, spare_buffer()),
            requires: std::mem::take(&mut self.requires),
        })
    }
}

/// Id allocators shared by all writers of one output, so ids never collide across threads.
#[derive(Debug)]
pub struct Ids {
    sequence: AtomicU32,
    uuid: AtomicU64,
}

impl Default for Ids {
    fn default() -> Self {
        // Sequence 1 belongs to the file writer (descriptors); uuids start small for compactness.
        Ids {
            sequence: AtomicU32::new(2),
            uuid: AtomicU64::new(1),
        }
    }
}

impl Ids {
    /// The ids of one part of a merge made apart from the others (`block`: its rank), in a
    /// block of their own: trace_processor keeps each machine's uuids and sequences apart
    /// anyway, but every id of the merged file stays unique, as in a merge made in one go.
    /// Blocks of 2^40 uuids (apart from the session track's, `1 << 40 | 1`) and 2^16 sequences.
    pub fn block(block: u32) -> Ids {
        Ids {
            sequence: AtomicU32::new(2 + ((block & 0x7FFF) << 16)),
            uuid: AtomicU64::new((u64::from(block) + 2) << 40),
        }
    }

    pub fn next_sequence(&self) -> u32 {
        self.sequence.fetch_add(1, Ordering::Relaxed)
    }
    pub fn next_uuid(&self) -> u64 {
        self.uuid.fetch_add(1, Ordering::Relaxed)
    }
}

/// CPU numbers a format's native scheduling takes: trace_processor stops an import at an ftrace
/// bundle of CPU 1024 or above.
pub const MAX_CPUS: i64 = 1024;

/// Encodes one reader's events. Calls for one group arrive in time order; `group` ids are unique
/// per output. `lane0` tells whether the event is on the group's first track (its default).
pub trait EventWriter: Send {
    /// A custom track, described before any event uses it.
    fn describe(&mut self, track: &CustomTrack);
    /// The next chunk must be preceded by this process's or thread's descriptor.
    fn require(&mut self, track: WellKnown);
    /// A group starts: its events go on `lane0_uuid` unless told otherwise.
    fn open_group(&mut self, group: u32, lane0_uuid: u64, first_ts: i64);
    fn begin(&mut self, group: u32, lane_uuid: u64, lane0: bool, ev: &Event<'_>);
    fn end(&mut self, group: u32, lane_uuid: u64, lane0: bool, ts: i64);
    fn instant(&mut self, group: u32, lane_uuid: u64, lane0: bool, ev: &Event<'_>);
    /// A counter track, described before its values; its values come on a group opened with
    /// the counter's uuid as `lane0_uuid`.
    fn describe_counter(&mut self, track: &CounterTrack);
    /// One value of a counter track, in time order per group.
    fn counter(&mut self, group: u32, track: u64, ts: i64, value: CounterValue);
    /// One CPU sample of a thread (already required), with its call stack. `group` is the
    /// reader's sample sequence; samples need not come in time order.
    fn cpu_sample(&mut self, group: u32, sample: &CpuSample<'_>);
    /// Whether the format shows scheduling as its own CPU tracks and thread states
    /// ([`EventWriter::cpu_slice`]); otherwise layout writes a slice per thread on a track per CPU.
    fn native_sched(&self) -> bool {
        false
    }
    /// A thread's time on a CPU, with the trace's CPU number (below [`MAX_CPUS`]) and the placed
    /// thread and times (the thread is already required), in time order per CPU. `group` is the reader's
    /// scheduling sequence.
    fn cpu_slice(&mut self, _group: u32, _slice: &CpuSlice) {}
    /// Whether the format writes GPU work (kernels, memcpys, memsets) in a GPU model of its
    /// own ([`EventWriter::gpu_work`]); otherwise layout puts it on a track per stream.
    fn native_gpu(&self) -> bool {
        false
    }
    /// A stream's GPU work starts: its operations go on sequence `group`, from `first_ts`.
    fn open_gpu_queue(&mut self, _group: u32, _queue: &GpuQueue, _first_ts: i64) {}
    /// One GPU operation of the queue opened as `group` (any time order).
    fn gpu_work(&mut self, _group: u32, _ev: &Event<'_>) {}
    /// Everything was placed: encode what the writer still holds.
    fn finish(&mut self) {}
    /// Bytes encoded since the last chunk was taken.
    fn buffered(&self) -> usize;
    fn take_chunk(&mut self) -> Option<Chunk>;
}

/// A whole output format: how to make writers, describe processes/threads, and frame the file.
/// `sources` are the descriptions of every source in the trace, indexed by source number; a
/// writer is made for one source (its names and strings) and `offset` is what that source's
/// times were shifted by to place it on the trace's timeline.
///
/// It also says what the tool offers of it (gathered in [`formats::FORMATS`]).
pub trait Format: Sync {
    /// Its name: `--format NAME`, the API's `format=NAME`, the record of options.
    const NAME: &'static str;
    /// Other names the API accepts.
    const ALIASES: &'static [&'static str] = &[];
    /// What `--help` says of it.
    const HELP: &'static str;
    /// The extension of its files, without the dot; `.EXT.gz` is the same, gzip-compressed.
    const EXTENSION: &'static str;
    /// `serve` gzips it (`.EXT.gz`): text that compresses well.
    const SERVED_GZIPPED: bool;
    type Writer: EventWriter;
    /// The format as `options` ask for it, for a trace of `sources`.
    fn made(sources: &[Placed], options: &FormatOptions) -> Self;
    /// The record text at the end of an uncompressed trace of it (the end of the file, `tail`),
    /// as its [`Format::footer`] writes it.
    fn read_record(tail: &[u8]) -> Option<String>;
    /// A writer for source number `source` (its index among the trace's sources).
    fn writer(&self, source: usize, desc: Arc<Description>) -> Self::Writer;
    /// What opens the file.
    fn header(&self) -> Vec<u8>;
    /// The first records: the trace's clock and each source's time zero.
    fn preamble(&self, sources: &[Placed]) -> Vec<u8>;
    fn describe_well_known(&self, track: WellKnown, desc: &Description) -> Vec<u8>;
    /// What closes the file, with the conversion's record (`crate::provenance`) when there is
    /// one.
    fn footer(&self, sources: &[Placed], record: Option<&str>) -> Vec<u8>;
    /// The separator every record starts with, dropped from the first record of the file.
    fn record_separator(&self) -> Option<&'static [u8]> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::WellKnown;
    use nsys_perfetto_model::model::with_source;

    #[test]
    fn well_known_uuids_round_trip_and_never_collide() {
        let mut seen = std::collections::HashSet::new();
        for source in [0, 1, 63] {
            for device in [0, 1, 7, 255, 256, u32::MAX as i64] {
                let d = with_source(device, source);
                let mut all = vec![WellKnown::Gpu(d)];
                for index in [0, 1, 2, 1000, 0x7F_FFFF] {
                    all.push(WellKnown::GpuContext { device: d, index });
                }
                for wk in all {
                    assert_eq!(WellKnown::from_uuid(wk.uuid()), Some(wk), "{wk:?}");
                    assert_eq!(wk.source(), source);
                    assert!(seen.insert(wk.uuid()), "{wk:?} collides");
                }
            }
        }
        let gp = with_source(0x1_0000_6F00_0000, 3);
        for wk in [WellKnown::Process(gp), WellKnown::Thread(gp | 0x70)] {
            assert_eq!(WellKnown::from_uuid(wk.uuid()), Some(wk));
            assert!(seen.insert(wk.uuid()));
        }
    }
}
