//! Perfetto protobuf (TrackEvent) output.
//!
//! Each group of events is its own packet sequence: it clears incremental state once, declares a
//! sequence-scoped incremental clock so every later packet carries a small delta timestamp, sets
//! its first lane as the default track (events on it omit `track_uuid`), and interns names, arg
//! keys and repeating string values on first use.
//!
//! The writer's state is declared here; `events.rs` writes the track events, `interning.rs`
//! holds what each sequence interned, `file.rs` the file's own packets (descriptors, machines,
//! the record), `samples.rs` CPU samples and counters, `sched.rs` context switches, `wire.rs`
//! the wire format.

mod events;
pub mod file;
mod gpu;
mod interning;
mod kernel;
mod occupancy;
mod samples;
mod sched;
pub mod wire;

use super::{Chunk, ChunkBuffer, CounterTrack, CustomTrack, EventWriter, WellKnown};
use crate::proto::{TracePacket, TrackDescriptor, trace_packet, track_descriptor, track_event};
use interning::{Interning, Sequences};
use nsys_perfetto_model::model::{
    CounterValue, CpuSample, CpuSlice, Description, Event, FastHash, Frame,
};
use prost::Message;
use std::collections::HashMap;
use std::sync::Arc;
use wire::TRACE_PACKET_BYTE;
use wire::tag::{self};
use wire::{field_len, put_field, put_varint, read_varint};

/// Sequence-scoped clock ids are 64..=127; each sequence declares its own incremental clock.
const INCREMENTAL_CLOCK: u32 = 64;
const BOOTTIME: u32 = 6;
const REALTIME: u32 = 1;
/// The sequence of the session-start marker, apart from the counter-allocated ones.
const SESSION_SEQUENCE: u32 = 0x7FFF_FFF0;
/// The track of the session-start marker: a uuid apart from counters and well-known ones.
pub const SESSION_TRACK_UUID: u64 = (1 << 40) + 1;
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
/// Interned names and values one sequence holds before it starts over (see `bound_interning`).
pub const MAX_INTERNED: usize = 1 << 16;
/// The file writer's own sequence, for process and thread descriptors.
const DESCRIPTOR_SEQUENCE: u32 = 1;

pub struct ProtoWriter {
    desc: Arc<Description>,
    out: ChunkBuffer,
    seqs: Sequences,
    interning: Interning,
    /// Scratch: an event packet's header, when its lengths take more than a byte.
    scratch: Vec<u8>,
    /// What the event interns (InternedData fields), empty when it interns nothing.
    interned: Vec<u8>,
    /// Interning state of CPU sample sequences (see `samples`).
    samples: HashMap<u32, SampleSeq, FastHash>,
    /// Context switches not yet written, per CPU (see `sched`).
    sched: SchedState,
    /// How `prev_state` is written for the trace's kernel.
    state_codes: kernel::StateCodes,
    /// The machine this writer's source is on (a merge), 0 for the host.
    machine: u32,
    /// Whether GPU work goes in Perfetto's GPU model (`--gpu perfetto`).
    native_gpu: bool,
    /// Its queues, contexts and kernels (see `gpu`).
    gpu: GpuState,
}

/// What a writer knows of its GPU queues (written by `gpu.rs`).
#[derive(Default)]
struct GpuState {
    queues: HashMap<u32, GpuQueueState, FastHash>,
    /// (placed global pid, context) -> its `InternedGraphicsContext` iid.
    contexts: HashMap<(i64, i64), u64, FastHash>,
    /// Kernels interned on each sequence: their iids there.
    kernels: HashMap<KernelKey, u64, FastHash>,
    /// Launch shapes the reader numbered, parsed once: by [`nsys_perfetto_model::model::TextNo::key`].
    shapes: HashMap<u64, Option<[u64; 3]>, FastHash>,
    /// GPU metrics as GPU counters: by counter track uuid.
    counters: HashMap<u64, GpuCounter, FastHash>,
    /// Each GPU's counter sequence: by GPU (as its source numbers it).
    counter_seqs: HashMap<i64, CounterSeq, FastHash>,
    /// Event ids given to GPU rows without an arrow so far.
    unlinked: u64,
    /// The highest GPU number `GpuInfo` has described so far.
    described: Option<i64>,
    /// Scratch: the event's fields, its launch, a nested message.
    body: Vec<u8>,
    launch: Vec<u8>,
    nested: Vec<u8>,
}

/// A GPU metric written as a GPU counter: its GPU (as its source numbers it), name and unit,
/// and once a descriptor holds it, its id and that descriptor's iid.
struct GpuCounter {
    device: i64,
    name: String,
    unit: String,
    id: u64,
    descriptor: Option<u64>,
}

/// One GPU's counters: their sequence, the descriptors interned there so far, the ids given,
/// and the values of one time not yet written (one `GpuCounterEvent` holds them all).
struct CounterSeq {
    group: u32,
    descriptors: u64,
    counters: u64,
    pending_ts: i64,
    pending: Vec<(u64, CounterValue)>,
}

/// What makes a kernel's interned entry on a sequence: its names (string ids), the args its
/// compilation fixes, and the launch figures its occupancy depends on.
/// Args a compiled kernel fixes (the same on every launch of it): on its interned
/// `InternedComputeKernel`, not on each launch. A kernel is interned once per value of these.
const KERNEL_ARGS: [&str; 2] = ["registers_per_thread", "shared_memory_static_bytes"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct KernelKey {
    group: u32,
    name: i64,
    demangled: i64,
    args: [Option<i64>; KERNEL_ARGS.len()],
    block: Option<[u64; 3]>,
    dynamic_shared_memory: Option<i64>,
}

struct GpuQueueState {
    /// The source's index in a merge (event ids of unlinked rows keep sources apart).
    source: u64,
    device: i64,
    pid: i64,
    context_iid: u64,
    name: String,
    kernels: u64,
}

/// Context switches not yet written, per CPU (written by `sched.rs`).
#[derive(Default)]
struct SchedState {
    /// The sequence of this writer's scheduling packets.
    seq: u32,
    /// By CPU number (below [`crate::output::MAX_CPUS`]); `None` until the CPU's first slice.
    cpus: Vec<Option<Cpu>>,
}

/// One CPU's switches not yet written: the bundle's packed arrays, varint-encoded as they grow
/// (written by hand like the other hot packets: no message is built, nothing is encoded twice).
#[derive(Default)]
struct Cpu {
    /// The switch away from the thread last placed here: (time, its prev_state), written once
    /// the next slice (or the end) says what follows.
    pending: (i64, i64),
    switches: usize,
    timestamps: Vec<u8>,
    prev_states: Vec<u8>,
    next_pids: Vec<u8>,
    next_prios: Vec<u8>,
    comm_indices: Vec<u8>,
    /// The bundle's intern table, as its encoded `intern_table` entries.
    intern: Vec<u8>,
    interned: u32,
    /// Absolute time of the bundle's last switch (the next one is a delta from it).
    last_ts: i64,
    /// pid -> its comm's index in the bundle's intern table.
    comms: HashMap<i32, u32, FastHash>,
    /// The idle task's (pid 0) comm index in the bundle's intern table, once it has one.
    idle_comm: Option<u32>,
}

/// Interning state of one sample sequence (one generation).
#[derive(Default)]
struct SampleSeq {
    /// Whether this generation's first packet (which clears the incremental state) is written.
    started: bool,
    functions: IdMap<i64, u64>,
    mappings: IdMap<i64, u64>,
    frames: IdMap<Frame, u64>,
    /// Callstacks whose frames' ids all fit 32 bits, by those ids packed (root first): a
    /// sample of a known stack is found without looking up each of its frames.
    by_frames: IdMap<Box<[u64]>, u64>,
    /// The other callstacks, by their frames' iids (root first).
    callstacks: IdMap<Box<[u64]>, u64>,
    callstack_frames: usize,
    /// Scratch: the callstack being looked up, root first.
    stack: Vec<u64>,
}

/// The sample sequences' interning maps: the model's fast hasher (keys are ids and frames).
type IdMap<K, V> = HashMap<K, V, FastHash>;

fn descriptor_packet(desc: TrackDescriptor) -> TracePacket {
    TracePacket {
        data: Some(trace_packet::Data::TrackDescriptor(desc)),
        optional_trusted_packet_sequence_id: Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(
                DESCRIPTOR_SEQUENCE,
            ),
        ),
        ..Default::default()
    }
}

/// Every packet of `data` (framed `Trace.packet`s, as a writer's chunk holds them) with
/// `machine_id` added: a merged report's packets all go on its machine.
fn on_machine(data: &[u8], machine: u32) -> Vec<u8> {
    let extra = field_len(tag::PACKET_MACHINE_ID, u64::from(machine));
    let mut out = Vec::with_capacity(data.len() + data.len() / 16 + 64);
    let mut rest = data;
    while let Some((&TRACE_PACKET_BYTE, after)) = rest.split_first() {
        let (len, n) = read_varint(after);
        let (packet, next) = after[n..].split_at(len as usize);
        out.push(TRACE_PACKET_BYTE);
        put_varint(&mut out, len + extra as u64);
        out.extend_from_slice(packet);
        put_field(&mut out, tag::PACKET_MACHINE_ID, u64::from(machine));
        rest = next;
    }
    debug_assert!(rest.is_empty(), "a chunk holds framed packets only");
    out
}

/// Copy a stream of framed packets (a part of a merge, as this writer writes it) from `from`
/// to `to`, each put on `machine` (none added for 0, the host) and `delta` nanoseconds later.
/// Returns the bytes written.
///
/// What is moved is every absolute time the writer writes: clock snapshots (each sequence's
/// incremental clock starts at one, its events are deltas from it), CPU samples and scheduling
/// bundles. Only those packets are decoded and encoded again; the others are copied as they
/// are. The input is read and the output written a block at a time, packets taken in place from
/// the block: samples-heavy parts are millions of small packets, and a read and a write call for
/// each cost more than the copy. Memory is a block, or one packet when it is larger.
pub fn copy_on_machine(
    from: &mut impl std::io::Read,
    to: &mut dyn std::io::Write,
    machine: u32,
    delta: u64,
) -> std::io::Result<u64> {
    use std::io::{Error, ErrorKind};
    const BLOCK: usize = 1 << 20;
    // Far above any packet this writer makes: a larger length is damage, not a packet to
    // allocate room for.
    const MAX_PACKET: u64 = 1 << 30;
    let extra = if machine == 0 {
        0
    } else {
        field_len(tag::PACKET_MACHINE_ID, u64::from(machine))
    };
    let mut machine_field = Vec::with_capacity(16);
    if machine != 0 {
        put_field(
            &mut machine_field,
            tag::PACKET_MACHINE_ID,
            u64::from(machine),
        );
    }
    // Unread input is `input[at..filled]`.
    let mut input: Vec<u8> = vec![0; BLOCK];
    let (mut at, mut filled) = (0, 0);
    let mut eof = false;
    let mut out: Vec<u8> = Vec::with_capacity(BLOCK + BLOCK / 8);
    let mut moved = Vec::new();
    let mut written = 0u64;
    loop {
        let rest = &input[at..filled];
        // A packet's frame: its tag byte, its length (a varint of at most 10 bytes), its bytes.
        let framed = match rest.first() {
            None => None,
            Some(&b) if b != TRACE_PACKET_BYTE => {
                return Err(Error::new(ErrorKind::InvalidData, "not a trace packet"));
            }
            Some(_) => match rest[1..].iter().take(10).position(|b| *b < 0x80) {
                Some(last) => {
                    let start = last + 2;
                    let (len, _) = read_varint(&rest[1..start]);
                    if len > MAX_PACKET {
                        return Err(Error::new(
                            ErrorKind::InvalidData,
                            "a damaged packet length",
                        ));
                    }
                    Some((start, start + len as usize))
                }
                None if rest.len() > 11 => {
                    return Err(Error::new(
                        ErrorKind::InvalidData,
                        "a damaged packet length",
                    ));
                }
                None => None,
            },
        };
        let (start, end) = match framed {
            Some((start, end)) if end <= rest.len() => (start, end),
            _ if eof => {
                if !rest.is_empty() {
                    return Err(Error::new(ErrorKind::UnexpectedEof, "a packet cut short"));
                }
                to.write_all(&out)?;
                return Ok(written);
            }
            // Read on: the rest of this packet, at least a block.
            _ => {
                input.copy_within(at..filled, 0);
                filled -= at;
                at = 0;
                // Room for the whole packet, and for more than a packet's head.
                let need = framed.map_or(filled + 16, |(_, end)| end);
                if input.len() < need {
                    input.resize(need.max(input.len() * 2), 0);
                }
                let n = loop {
                    match from.read(&mut input[filled..]) {
                        Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                        r => break r?,
                    }
                };
                filled += n;
                eof = n == 0;
                continue;
            }
        };
        let packet = &rest[start..end];
        let body: &[u8] = match (delta, absolute_time(packet)) {
            (0, _) | (_, Absolute::None) => packet,
            // The most numerous: only the packet's timestamp field is written again.
            (_, Absolute::PacketTimestamp) => {
                moved.clear();
                move_timestamp_field(packet, delta, &mut moved);
                &moved
            }
            (_, Absolute::Inside) => {
                let mut p = TracePacket::decode(packet)
                    .map_err(|e| Error::new(ErrorKind::InvalidData, e))?;
                move_packet(&mut p, delta);
                moved.clear();
                p.encode(&mut moved).expect("Vec<u8> grows as needed");
                &moved
            }
        };
        let before = out.len();
        out.push(TRACE_PACKET_BYTE);
        put_varint(&mut out, (body.len() + extra) as u64);
        out.extend_from_slice(body);
        out.extend_from_slice(&machine_field);
        written += (out.len() - before) as u64;
        at += end;
        if out.len() >= BLOCK {
            to.write_all(&out)?;
            out.clear();
        }
    }
}

/// Where a packet's absolute times are (see [`copy_on_machine`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Absolute {
    None,
    /// A CPU sample: its `TracePacket.timestamp`.
    PacketTimestamp,
    /// A clock snapshot or a scheduling bundle: inside its message.
    Inside,
}

/// Which absolute times a packet holds, from its top-level fields (nothing decoded).
fn absolute_time(packet: &[u8]) -> Absolute {
    let mut found = Absolute::None;
    for_each_field(packet, |key, _| match key {
        tag::PACKET_CLOCK_SNAPSHOT | tag::PACKET_FTRACE_EVENTS => found = Absolute::Inside,
        tag::PACKET_PERF_SAMPLE if found == Absolute::None => found = Absolute::PacketTimestamp,
        _ => {}
    });
    found
}

/// Call `f(key, field bytes with their key)` for each top-level field of a message.
fn for_each_field(message: &[u8], mut f: impl FnMut(u64, &[u8])) {
    let mut at = 0;
    while at < message.len() {
        let (key, n) = read_varint(&message[at..]);
        let body = at + n;
        let rest = &message[body.min(message.len())..];
        let len = match key & 7 {
            0 => read_varint(rest).1,
            1 => 8,
            2 => {
                let (l, n) = read_varint(rest);
                n + l as usize
            }
            5 => 4,
            // Groups are not written by this writer: the rest is one field.
            _ => rest.len(),
        };
        // At least a byte on: a damaged message ends the walk, never stalls it.
        let end = (body + len).clamp(at + 1, message.len());
        f(key, &message[at..end]);
        at = end;
    }
}

/// `packet` with its `timestamp` field `delta` later, into `out`.
fn move_timestamp_field(packet: &[u8], delta: u64, out: &mut Vec<u8>) {
    for_each_field(packet, |key, field| {
        if key == tag::PACKET_TIMESTAMP {
            let (_, key_len) = read_varint(field);
            let (ts, _) = read_varint(&field[key_len..]);
            put_field(out, tag::PACKET_TIMESTAMP, ts + delta);
        } else {
            out.extend_from_slice(field);
        }
    });
}

/// Every absolute time of a packet `delta` later (see [`copy_on_machine`]).
fn move_packet(p: &mut TracePacket, delta: u64) {
    match &mut p.data {
        Some(trace_packet::Data::ClockSnapshot(snapshot)) => {
            for c in &mut snapshot.clocks {
                // BOOTTIME and the sequences' own clocks (64..=127); REALTIME is the wall clock.
                if c.clock_id == Some(BOOTTIME) || c.clock_id.is_some_and(|id| id >= 64) {
                    c.timestamp = c.timestamp.map(|t| t + delta);
                }
            }
        }
        Some(trace_packet::Data::PerfSample(_)) => {
            p.timestamp = p.timestamp.map(|t| t + delta);
        }
        Some(trace_packet::Data::FtraceEvents(bundle)) => {
            for e in &mut bundle.event {
                e.timestamp = e.timestamp.map(|t| t + delta);
            }
            if let Some(first) = bundle
                .compact_sched
                .as_mut()
                .and_then(|c| c.switch_timestamp.first_mut())
            {
                *first += delta;
            }
        }
        _ => {}
    }
}

/// `Trace.packet` framing: field 1, length-delimited. Any concatenation is a valid trace.
fn frame(packet: &TracePacket, out: &mut Vec<u8>) {
    out.push(TRACE_PACKET_BYTE);
    packet
        .encode_length_delimited(out)
        .expect("Vec<u8> grows as needed");
}

impl EventWriter for ProtoWriter {
    fn describe(&mut self, track: &CustomTrack) {
        let desc = TrackDescriptor {
            uuid: Some(track.uuid),
            parent_uuid: track.parent,
            static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                track.name.clone(),
            )),
            child_ordering: track
                .explicit_child_order
                .then_some(track_descriptor::ChildTracksOrdering::Explicit as i32),
            sibling_order_rank: track
                .rank
                .map(|r| r.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
            ..Default::default()
        };
        frame(&descriptor_packet(desc), &mut self.out.data);
    }

    fn require(&mut self, track: WellKnown) {
        self.out.require(track);
    }

    fn open_group(&mut self, group: u32, lane0_uuid: u64, first_ts: i64) {
        if self.gpu.counters.contains_key(&lane0_uuid) {
            self.open_gpu_counter(group, lane0_uuid, first_ts);
        } else {
            self.clear_state(group, lane0_uuid, first_ts, true);
        }
    }

    fn begin(&mut self, group: u32, lane_uuid: u64, lane0: bool, ev: &Event<'_>) {
        self.event_packet(group, track_event::Type::SliceBegin, lane_uuid, lane0, ev);
    }

    #[inline]
    fn end(&mut self, group: u32, lane_uuid: u64, lane0: bool, ts: i64) {
        self.end_packet(group, lane_uuid, lane0, ts);
    }

    fn instant(&mut self, group: u32, lane_uuid: u64, lane0: bool, ev: &Event<'_>) {
        self.event_packet(group, track_event::Type::Instant, lane_uuid, lane0, ev);
    }

    fn describe_counter(&mut self, track: &CounterTrack) {
        match track.gpu {
            Some(device) => {
                let counter = GpuCounter {
                    device,
                    name: track.name.clone(),
                    unit: track.unit.clone(),
                    id: 0,
                    descriptor: None,
                };
                self.gpu.counters.insert(track.uuid, counter);
            }
            None => self.write_counter_track(track),
        }
    }

    fn counter(&mut self, group: u32, track: u64, ts: i64, value: CounterValue) {
        if self.gpu.counters.contains_key(&track) {
            self.gpu_counter(track, ts, value);
        } else {
            self.write_counter(group, ts, value);
        }
    }

    fn cpu_sample(&mut self, group: u32, sample: &CpuSample<'_>) {
        self.write_cpu_sample(group, sample);
    }

    fn native_sched(&self) -> bool {
        true
    }

    fn cpu_slice(&mut self, group: u32, slice: &CpuSlice) {
        self.write_cpu_slice(group, slice);
    }

    fn native_gpu(&self) -> bool {
        self.native_gpu
    }

    fn open_gpu_queue(&mut self, group: u32, queue: &super::GpuQueue, first_ts: i64) {
        self.open_queue(group, queue, first_ts);
    }

    fn gpu_work(&mut self, group: u32, ev: &Event<'_>) {
        self.gpu_packet(group, ev);
    }

    fn finish(&mut self) {
        self.finish_gpu_counters();
        self.finish_sched();
    }

    fn buffered(&self) -> usize {
        self.out.data.len()
    }

    fn take_chunk(&mut self) -> Option<Chunk> {
        let mut chunk = self.out.take()?;
        if self.machine != 0 {
            chunk.data = on_machine(&chunk.data, self.machine);
        }
        Some(chunk)
    }
}
