//! Perfetto protobuf (TrackEvent) output.
//!
//! Each group of events is its own packet sequence: it clears incremental state once, declares a
//! sequence-scoped incremental clock so every later packet carries a small delta timestamp, sets
//! its first lane as the default track (events on it omit `track_uuid`), and interns names, arg
//! keys and repeating string values on first use.

mod kernel;
mod samples;
mod sched;
mod wire;

use super::{
    Chunk, ChunkBuffer, CounterTrack, CustomTrack, EventWriter, Format, Placed, WellKnown,
};
use crate::model::{
    ArgValue, Category, CounterValue, CpuSample, CpuSlice, Description, Event, FastHash, Frame,
    Name, TextNo, pid_of, source_of, tid_of, without_source,
};
use crate::proto::{
    ClockSnapshot, ProcessDescriptor, SystemInfo, ThreadDescriptor, TracePacket, TrackDescriptor,
    TrackEvent, Utsname, clock_snapshot, trace_packet, track_descriptor, track_event,
};
use prost::Message;
use std::collections::HashMap;
use std::sync::Arc;
use wire::tag::{self, beyond_schema};
use wire::{
    TRACE_PACKET_BYTE, bytes_len, field_len, put_bytes, put_field, put_varint, read_varint,
    varint_len,
};

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

/// The protobuf format. A single report's trace names one kernel (`SystemInfo`), the first
/// that trace_processor can read a version from; `prev_state` of its context switches is
/// written as that kernel's layout (see `sched`).
///
/// A merge puts each report on a machine of its own (`TracePacket.machine_id`, the report's
/// index; the first report is machine 0, Perfetto's host): each machine is its own namespace
/// of pids, tids and CPUs, so every report keeps its real ids, and names its own machine and
/// kernel (one `SystemInfo` per machine, named by the report's label). Every packet of a report
/// carries its machine: the descriptors the file writer writes, and each writer's chunks.
/// Processes come in report order where a UI reads an order: the root track (uuid 0) of every
/// machine asks for explicit process ordering and each process track's `sibling_order_rank`
/// is its report's index (trace_processor v58 turns that into `process_sort_index_hint`, which
/// the UI sorts processes by), as is its `legacy_sort_index` (older and other readers).
#[derive(Debug, Clone, Default)]
pub struct Protobuf {
    kernel: Option<(String, (u32, u32))>,
    /// The architecture (`uname -m`): that source's where the kernel comes from a source,
    /// else the first source's that recorded one. Without it, trace_processor warns that
    /// syscalls cannot be decoded.
    machine: Option<String>,
    /// In a merge (two reports or more), each report's own kernel, as [`Protobuf::kernel`].
    machines: Vec<Option<(String, (u32, u32))>>,
}

impl Protobuf {
    pub fn new(sources: &[Placed]) -> Protobuf {
        let with_kernel = sources.iter().find_map(|p| {
            let r = p.kernel_release.as_deref()?;
            Some((p, r.to_string(), kernel::kernel_version(r)?))
        });
        let machine = match &with_kernel {
            Some((p, _, _)) => p.machine.clone(),
            None => sources.iter().find_map(|p| p.machine.clone()),
        };
        let machines = if sources.len() > 1 {
            sources
                .iter()
                .map(|p| {
                    let r = p.kernel_release.as_deref()?;
                    Some((r.to_string(), kernel::kernel_version(r)?))
                })
                .collect()
        } else {
            Vec::new()
        };
        Protobuf {
            kernel: with_kernel.map(|(_, r, v)| (r, v)),
            machine,
            machines,
        }
    }

    /// The machine a source's packets go on: its index in a merge, else none (0).
    fn machine_of(&self, source: usize) -> u32 {
        if self.machines.len() > 1 {
            source as u32
        } else {
            0
        }
    }
}

impl Format for Protobuf {
    type Writer = ProtoWriter;

    fn writer(&self, source: usize, desc: Arc<Description>) -> ProtoWriter {
        let kernel = match self.machines.get(source) {
            Some(own) => own.as_ref(),
            None => self.kernel.as_ref(),
        };
        ProtoWriter {
            desc,
            out: ChunkBuffer::default(),
            seqs: Sequences::default(),
            interning: Interning::default(),
            event: Vec::with_capacity(256),
            interned: Vec::new(),
            samples: HashMap::default(),
            sched: Default::default(),
            state_codes: kernel::StateCodes::for_kernel(kernel.map(|k| k.1)),
            machine: self.machine_of(source),
        }
    }

    /// The trace's clock and time zero: a REALTIME snapshot at the session start (the UI can then
    /// show wall-clock time, and reports of one job line up), and a "Session start" instant
    /// there, so Perfetto's zero is nsys' zero unless rows precede the session start.
    fn header(&self) -> Vec<u8> {
        Vec::new()
    }

    fn preamble(&self, sources: &[Placed]) -> Vec<u8> {
        let mut out = Vec::new();
        let Some(first) = sources.first() else {
            return out;
        };
        if self.machines.len() > 1 {
            for (i, src) in sources.iter().enumerate() {
                let machine = self.machine_of(i);
                let release = self.machines.get(i).and_then(|k| k.as_ref());
                let name = src.label.as_deref().unwrap_or_default();
                out.extend(system_info(
                    release.map(|k| k.0.as_str()),
                    src.machine.as_deref(),
                    Some((machine, name)),
                ));
                out.extend(explicit_process_order(machine));
            }
        } else {
            let release = self.kernel.as_ref().map(|k| k.0.as_str());
            if release.is_some() || self.machine.is_some() {
                out.extend(system_info(release, self.machine.as_deref(), None));
            }
        }
        let zero = first.offset.max(0) as u64;
        if let Some(utc) = first.session_start_utc_ns {
            let snapshot = TracePacket {
                data: Some(trace_packet::Data::ClockSnapshot(ClockSnapshot {
                    clocks: vec![
                        clock_snapshot::Clock {
                            clock_id: Some(BOOTTIME),
                            timestamp: Some(zero),
                            ..Default::default()
                        },
                        clock_snapshot::Clock {
                            clock_id: Some(REALTIME),
                            timestamp: Some(utc.max(0) as u64),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                })),
                optional_trusted_packet_sequence_id: Some(
                    trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(
                        DESCRIPTOR_SEQUENCE,
                    ),
                ),
                ..Default::default()
            };
            frame(&snapshot, &mut out);
        }
        frame(
            &descriptor_packet(TrackDescriptor {
                uuid: Some(SESSION_TRACK_UUID),
                static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                    "Session".to_string(),
                )),
                sibling_order_rank: Some(i32::MIN),
                ..Default::default()
            }),
            &mut out,
        );
        for (i, src) in sources.iter().enumerate() {
            let name = match &src.label {
                Some(l) => format!("Session start · {l}"),
                None => "Session start".to_string(),
            };
            let marker = TracePacket {
                timestamp: Some(src.offset.max(0) as u64),
                timestamp_clock_id: Some(BOOTTIME),
                sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
                optional_trusted_packet_sequence_id: Some(
                    trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(
                        SESSION_SEQUENCE + i as u32 % 16,
                    ),
                ),
                data: Some(trace_packet::Data::TrackEvent(TrackEvent {
                    r#type: Some(track_event::Type::Instant as i32),
                    track_uuid: Some(SESSION_TRACK_UUID),
                    name_field: Some(track_event::NameField::Name(name)),
                    categories: vec!["session".to_string()],
                    ..Default::default()
                })),
                ..Default::default()
            };
            frame(&marker, &mut out);
        }
        out
    }

    fn describe_well_known(&self, track: WellKnown, info: &Description) -> Vec<u8> {
        let machine = self.machine_of(track.source());
        let desc = match track {
            WellKnown::Process(gp) => TrackDescriptor {
                uuid: Some(track.uuid()),
                process: Some(ProcessDescriptor {
                    pid: Some(pid_of(gp) as i32),
                    // Among several reports the UI appends the pid (and the machine's name
                    // to every machine's but the first's): "rank 1 · vm · jacobi 4242 (rank
                    // 1 · vm)".
                    process_name: Some(match &info.label {
                        Some(l) => format!("{l} · {}", info.bare_process_name(gp)),
                        None => info.process_name(gp),
                    }),
                    // Among several reports (a merge, in rank order), the UI lists processes in
                    // report order, as it does their GPUs, instead of by its activity measures.
                    legacy_sort_index: info.label.is_some().then_some(source_of(gp) as i32),
                    ..Default::default()
                }),
                // Read as the process's place where the machine's root track asks for
                // explicit process ordering (a merge, see `explicit_process_order`).
                sibling_order_rank: info.label.is_some().then_some(source_of(gp) as i32),
                ..Default::default()
            },
            WellKnown::Gpu(device) => TrackDescriptor {
                uuid: Some(track.uuid()),
                static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                    info.gpu_label(without_source(device)),
                )),
                child_ordering: Some(track_descriptor::ChildTracksOrdering::Explicit as i32),
                sibling_order_rank: Some(
                    (source_of(device) as i32) << 8 | (without_source(device) & 0xFF) as i32,
                ),
                ..Default::default()
            },
            // Between the GPU and the context's streams, ordered among the GPU's contexts; its
            // own children (streams by stream id) in explicit order too.
            WellKnown::GpuContext { device, index } => TrackDescriptor {
                uuid: Some(track.uuid()),
                parent_uuid: Some(WellKnown::Gpu(device).uuid()),
                static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                    info.gpu_context_label(device, index),
                )),
                child_ordering: Some(track_descriptor::ChildTracksOrdering::Explicit as i32),
                sibling_order_rank: Some(index.min(i32::MAX as u32) as i32),
                ..Default::default()
            },
            WellKnown::Thread(gt) => TrackDescriptor {
                uuid: Some(track.uuid()),
                thread: Some(ThreadDescriptor {
                    pid: Some(pid_of(gt) as i32),
                    tid: Some(tid_of(gt) as i32),
                    thread_name: Some(info.thread_name(gt)),
                    ..Default::default()
                }),
                ..Default::default()
            },
        };
        let mut packet = descriptor_packet(desc);
        packet.machine_id = (machine != 0).then_some(machine);
        let mut out = Vec::new();
        frame(&packet, &mut out);
        out
    }

    /// The record, as the file's last packet.
    fn footer(&self, _sources: &[Placed], record: Option<&str>) -> Vec<u8> {
        record.map(record_packet).unwrap_or_default()
    }
}

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

/// A machine's root track (uuid 0) asking for explicit process ordering: trace_processor then
/// reads each process track's `sibling_order_rank` as the process's place (v58: the
/// `process_sort_index_hint` the UI sorts processes by). `TrackDescriptor.process_ordering`
/// (field 19, PROCESS_ORDERING_EXPLICIT = 1) is newer than the schema in `proto/`: written by
/// hand.
fn explicit_process_order(machine: u32) -> Vec<u8> {
    let mut desc = Vec::new();
    put_field(&mut desc, tag::TRACK_UUID_OF_DESCRIPTOR, 0);
    put_field(&mut desc, beyond_schema::TRACK_PROCESS_ORDERING, 1);
    let mut packet = Vec::new();
    put_bytes(&mut packet, tag::PACKET_TRACK_DESCRIPTOR, &desc);
    put_field(
        &mut packet,
        tag::PACKET_SEQUENCE_ID,
        u64::from(DESCRIPTOR_SEQUENCE),
    );
    if machine != 0 {
        put_field(&mut packet, tag::PACKET_MACHINE_ID, u64::from(machine));
    }
    let mut out = Vec::new();
    put_bytes(&mut out, tag::TRACE_PACKET, &packet);
    out
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

/// The `ChromeMetadata` name under which a trace carries what it was made from
/// ([`crate::provenance`] reads it back).
pub const RECORD_KEY: &str = "nsys-perfetto";

/// The last packet of a trace: `TracePacket { chrome_events (5): ChromeEventBundle {
/// metadata (2): ChromeMetadata { name (1): RECORD_KEY, string_value (2): text } } }`, framed
/// as a `Trace.packet` (1). trace_processor keeps it as metadata and draws nothing.
pub fn record_packet(text: &str) -> Vec<u8> {
    let mut meta = Vec::new();
    put_bytes(
        &mut meta,
        beyond_schema::METADATA_NAME,
        RECORD_KEY.as_bytes(),
    );
    put_bytes(
        &mut meta,
        beyond_schema::METADATA_STRING_VALUE,
        text.as_bytes(),
    );
    let mut bundle = Vec::new();
    put_bytes(&mut bundle, beyond_schema::BUNDLE_METADATA, &meta);
    let mut packet = Vec::new();
    put_bytes(&mut packet, beyond_schema::PACKET_CHROME_EVENTS, &bundle);
    let mut out = Vec::new();
    put_bytes(&mut out, tag::TRACE_PACKET, &packet);
    out
}

/// `Trace.packet` framing: field 1, length-delimited. Any concatenation is a valid trace.
fn frame(packet: &TracePacket, out: &mut Vec<u8>) {
    out.push(TRACE_PACKET_BYTE);
    packet
        .encode_length_delimited(out)
        .expect("Vec<u8> grows as needed");
}

/// Interning state of one sequence. Ids are per kind of interned data, starting at 1.
///
/// A trace can have a sequence per stream (tens of thousands), most of them with a few events:
/// a sequence's first names and values are a short list in the writer's arena (`Interning`), its
/// arg keys a block in another; maps of its own only once it has more than [`SMALL`] names or
/// values. Allocating and freeing a dozen small maps and lists per sequence cost a quarter of
/// the time of a trace with one stream per kernel.
struct Sequence {
    last_ts: i64,
    /// The sequence's default track, restated when its incremental state is cleared again.
    default_track: u64,
    /// Where the names and values are once there are more than [`SMALL`] of either.
    maps: Option<Box<Maps>>,
    /// Where in `Interning::small` the first [`SMALL`] names are, then the first [`SMALL`]
    /// values (a block taken on first use).
    small_at: Option<u32>,
    /// The arg keys: `keys` of the `keys_cap` slots at `keys_at` in `Interning::arg_keys`.
    keys_at: u32,
    keys: u32,
    keys_cap: u32,
    /// Names and values interned so far; each one's iid is its position.
    names: u32,
    values: u32,
    /// Each category's iid on this sequence (0: not interned yet); fewer than 256 categories.
    categories: [u8; Category::ALL.len()],
    next_category: u8,
}

// By hand: arrays of more than 32 elements (one per category) have no derived `Default`.
impl Default for Sequence {
    fn default() -> Self {
        Sequence {
            last_ts: 0,
            default_track: 0,
            maps: None,
            small_at: None,
            keys_at: 0,
            keys: 0,
            keys_cap: 0,
            names: 0,
            values: 0,
            categories: [0; Category::ALL.len()],
            next_category: 0,
        }
    }
}

// Category iids fit a byte (see `Sequence::categories`).
const _: () = assert!(Category::ALL.len() < 256);

/// Names and values one sequence interns in its short lists, searched in place, before it
/// takes maps.
const SMALL: u32 = 8;

/// Interned names or values of a sequence with many.
#[derive(Default)]
struct ByKey {
    sid: HashMap<i64, u32, FastHash>,
    no: ByNumber,
    text: HashMap<Box<str>, u32, FastHash>,
}

impl ByKey {
    fn get(&self, key: Key<'_>) -> Option<u32> {
        match key {
            Key::Sid(sid) => self.sid.get(&sid).copied(),
            Key::No(no, _) => self.no.get(no),
            Key::Text(t) => self.text.get(t).copied(),
        }
    }

    fn clear(&mut self) {
        self.sid.clear();
        self.no.clear();
        self.text.clear();
    }

    fn insert(&mut self, key: Key<'_>, iid: u32) {
        match key {
            Key::Sid(sid) => {
                self.sid.insert(sid, iid);
            }
            Key::No(no, _) => self.no.insert(no, iid),
            Key::Text(t) => {
                self.text.insert(t.into(), iid);
            }
        }
    }
}

/// Interned numbered texts ([`TextNo`]: a set, and a number from 0 in it). A reader's
/// dictionary numbers densely, so a table of iids indexed by number is a fraction of a hash
/// map's size and its lookups stay in cache (an NVTX-heavy conversion looks one up per range);
/// numbers too far beyond what the sequence holds (at most 16 slots per entry, so memory stays
/// proportional) go to a map.
#[derive(Default)]
struct ByNumber {
    /// Per set: iids by number, 0 where none.
    dense: Vec<(u32, Vec<u32>)>,
    entries: usize,
    sparse: HashMap<u64, u32, FastHash>,
}

impl ByNumber {
    fn get(&self, key: TextNo) -> Option<u32> {
        let (set, no) = (key.set(), key.number() as usize);
        if let Some((_, table)) = self.dense.iter().find(|(s, _)| *s == set)
            && let Some(&iid) = table.get(no)
            && iid != 0
        {
            return Some(iid);
        }
        if self.sparse.is_empty() {
            return None;
        }
        self.sparse.get(&key.key()).copied()
    }

    fn insert(&mut self, key: TextNo, iid: u32) {
        let (set, no) = (key.set(), key.number() as usize);
        self.entries += 1;
        if no >= 16 * self.entries + 64 {
            self.sparse.insert(key.key(), iid);
            return;
        }
        let at = match self.dense.iter().position(|(s, _)| *s == set) {
            Some(at) => at,
            None => {
                self.dense.push((set, Vec::new()));
                self.dense.len() - 1
            }
        };
        let table = &mut self.dense[at].1;
        if table.len() <= no {
            table.resize((no + 1).max(2 * table.len()).min(16 * self.entries + 64), 0);
        }
        table[no] = iid;
    }

    fn clear(&mut self) {
        self.dense.clear();
        self.entries = 0;
        self.sparse.clear();
    }
}

#[derive(Default)]
struct Maps {
    names: ByKey,
    values: ByKey,
}

impl Maps {
    /// The maps of the values (`value`) or the names.
    fn of(&mut self, value: bool) -> &mut ByKey {
        if value {
            &mut self.values
        } else {
            &mut self.names
        }
    }
}

/// A name or value on a short list: a string id, a text's number, or a text (its length) at
/// `key` in `Interning::small_text`.
#[derive(Clone, Copy, Default)]
struct Small {
    key: i64,
    kind: SmallKind,
}

#[derive(Clone, Copy, Default, PartialEq)]
enum SmallKind {
    #[default]
    Sid,
    No,
    Text(u32),
}

/// The writer's sequences by id.
#[derive(Default)]
struct Sequences {
    /// Each sequence's index in `list`.
    index: HashMap<u32, u32, FastHash>,
    /// In a list, not in the map: a new sequence is written where the last one was, not in a
    /// cold slot of a large table (a trace can have one per stream).
    list: Vec<Sequence>,
}

impl Sequences {
    fn get(&self, id: u32) -> Option<&Sequence> {
        let &i = self.index.get(&id)?;
        Some(&self.list[i as usize])
    }

    fn get_mut(&mut self, id: u32) -> Option<&mut Sequence> {
        let &i = self.index.get(&id)?;
        Some(&mut self.list[i as usize])
    }

    /// The sequence `id`, added if new.
    fn open(&mut self, id: u32) -> &mut Sequence {
        let n = self.list.len();
        let i = *self
            .index
            .entry(id)
            .or_insert_with(|| u32::try_from(n).expect("fewer than 2^32 sequences"));
        if i as usize == n {
            self.list.push(Sequence::default());
        }
        &mut self.list[i as usize]
    }
}

/// A name or value to intern.
#[derive(Clone, Copy)]
enum Key<'a> {
    Sid(i64),
    No(TextNo, &'a str),
    Text(&'a str),
}

/// The arenas of the sequences' short lists (see [`Sequence`]).
#[derive(Default)]
struct Interning {
    small: Vec<Small>,
    small_text: String,
    /// Arg keys are few per sequence (a kernel has a dozen) and static: a short list searched
    /// by address first beats hashing the key text on every arg of every event.
    arg_keys: Vec<&'static str>,
}

impl Interning {
    /// The iid of a name (`value` false) or value on `seq`, and whether it is new there.
    fn intern(&mut self, seq: &mut Sequence, value: bool, key: Key<'_>) -> (u32, bool) {
        let count = if value { seq.values } else { seq.names };
        if seq.maps.is_none() {
            let block = match seq.small_at {
                Some(at) => at,
                None => {
                    let at = u32::try_from(self.small.len()).expect("short lists fit u32");
                    self.small
                        .resize(self.small.len() + 2 * SMALL as usize, Small::default());
                    *seq.small_at.insert(at)
                }
            };
            let at = (block + if value { SMALL } else { 0 }) as usize;
            let list = &self.small[at..at + count as usize];
            let text = self.small_text.as_bytes();
            let found = list.iter().position(|e| match (key, e.kind) {
                (Key::Sid(sid), SmallKind::Sid) => e.key == sid,
                (Key::No(no, _), SmallKind::No) => e.key as u64 == no.key(),
                (Key::Text(t), SmallKind::Text(len)) => {
                    len as usize == t.len() && &text[e.key as usize..][..t.len()] == t.as_bytes()
                }
                _ => false,
            });
            if let Some(i) = found {
                return (i as u32 + 1, false);
            }
            if count < SMALL {
                self.small[at + count as usize] = match key {
                    Key::Sid(sid) => Small {
                        key: sid,
                        kind: SmallKind::Sid,
                    },
                    Key::No(no, _) => Small {
                        key: no.key() as i64,
                        kind: SmallKind::No,
                    },
                    Key::Text(t) => {
                        self.small_text.push_str(t);
                        Small {
                            key: (self.small_text.len() - t.len()) as i64,
                            kind: SmallKind::Text(t.len() as u32),
                        }
                    }
                };
                return (seq.next(value), true);
            }
            seq.maps = Some(self.promote(seq));
        }
        let by_key = seq.maps.as_mut().expect("promoted above").of(value);
        if let Some(iid) = by_key.get(key) {
            return (iid, false);
        }
        by_key.insert(key, count + 1);
        (seq.next(value), true)
    }

    /// Maps holding what the sequence's short lists hold.
    fn promote(&self, seq: &Sequence) -> Box<Maps> {
        let mut maps = Box::<Maps>::default();
        let mut add = |from: u32, count: u32, value: bool| {
            let by_key = maps.of(value);
            let at = from as usize;
            for (i, e) in self.small[at..at + count as usize].iter().enumerate() {
                let iid = i as u32 + 1;
                match e.kind {
                    SmallKind::Sid => {
                        by_key.sid.insert(e.key, iid);
                    }
                    SmallKind::No => by_key.no.insert(TextNo::of_key(e.key as u64), iid),
                    SmallKind::Text(len) => {
                        let t = &self.small_text[e.key as usize..][..len as usize];
                        by_key.text.insert(t.into(), iid);
                    }
                }
            }
        };
        let at = seq.small_at.expect("short lists before maps");
        add(at, seq.names, false);
        add(at + SMALL, seq.values, true);
        maps
    }

    /// The iid of an arg key on `seq`, and whether it is new there. `hint` is the iid of the
    /// event's previous arg key (0 before the first): events of one kind list their args in one
    /// order, which is the order their keys were first seen, so the key after it is nearly
    /// always the one asked for.
    fn arg_key(&mut self, seq: &mut Sequence, key: &'static str, hint: u64) -> (u64, bool) {
        let at = seq.keys_at as usize;
        let keys = &self.arg_keys[at..at + seq.keys as usize];
        if keys
            .get(hint as usize)
            .is_some_and(|k| std::ptr::eq(*k, key))
        {
            return (hint + 1, false);
        }
        if let Some(iid) = arg_iid(keys, key) {
            return (iid, false);
        }
        if seq.keys == seq.keys_cap {
            // A block twice as large at the end (16 at first: room for an event's keys); the
            // old one stays unused, smaller than the new.
            let cap = (seq.keys_cap * 2).max(16);
            let to = self.arg_keys.len();
            self.arg_keys.extend_from_within(at..at + seq.keys as usize);
            self.arg_keys.resize(to + cap as usize, "");
            seq.keys_at = u32::try_from(to).expect("arg keys fit u32 indices");
            seq.keys_cap = cap;
        }
        self.arg_keys[(seq.keys_at + seq.keys) as usize] = key;
        seq.keys += 1;
        (u64::from(seq.keys), true)
    }
}

impl Sequence {
    /// Count a new name or value; its iid.
    fn next(&mut self, value: bool) -> u32 {
        let n = if value {
            &mut self.values
        } else {
            &mut self.names
        };
        *n += 1;
        *n
    }
}

pub struct ProtoWriter {
    desc: Arc<Description>,
    out: ChunkBuffer,
    seqs: Sequences,
    interning: Interning,
    /// The TrackEvent being encoded (its fields, without tag and length).
    event: Vec<u8>,
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
}

/// Interning state of one sample sequence (one generation).
#[derive(Default)]
struct SampleSeq {
    /// Whether this generation's first packet (which clears the incremental state) is written.
    started: bool,
    functions: IdMap<i64, u64>,
    mappings: IdMap<i64, u64>,
    frames: IdMap<Frame, u64>,
    callstacks: IdMap<Box<[u64]>, u64>,
    callstack_frames: usize,
    /// Scratch: the callstack being looked up, root first.
    stack: Vec<u64>,
}

/// The sample sequences' interning maps: the model's fast hasher (keys are ids and frames).
type IdMap<K, V> = HashMap<K, V, FastHash>;

/// The SystemInfo packet naming the kernel, so trace_processor decodes `prev_state` as written.
/// In a merge, `machine` is the report's machine (its `TracePacket.machine_id`, 0 the host)
/// and its name (`SystemInfo.machine_name`, field 17, newer than the schema in `proto/`, so
/// written by hand), which the UI shows after the process and CPU names of the machine.
fn system_info(release: Option<&str>, arch: Option<&str>, machine: Option<(u32, &str)>) -> Vec<u8> {
    let info = SystemInfo {
        utsname: (release.is_some() || arch.is_some()).then(|| Utsname {
            sysname: release.map(|_| "Linux".to_string()),
            release: release.map(str::to_string),
            machine: arch.map(str::to_string),
            ..Default::default()
        }),
    };
    let mut info = info.encode_to_vec();
    let mut packet = Vec::new();
    if let Some((id, name)) = machine {
        put_bytes(
            &mut info,
            beyond_schema::SYSTEM_INFO_MACHINE_NAME,
            name.as_bytes(),
        );
        if id != 0 {
            put_field(&mut packet, tag::PACKET_MACHINE_ID, u64::from(id));
        }
    }
    put_bytes(&mut packet, tag::PACKET_SYSTEM_INFO, &info);
    let mut out = Vec::new();
    put_bytes(&mut out, tag::TRACE_PACKET, &packet);
    out
}

/// The packet that clears a sequence's incremental state: a snapshot that starts its
/// incremental clock at `ts`, and its defaults (that clock, its first track). Written by hand
/// (one per sequence, and a trace can have one per stream), byte for byte as prost writes the
/// `TracePacket` (see the test): fields in tag order, the `data` oneof first.
fn put_clear_packet(out: &mut Vec<u8>, group: u32, lane0_uuid: u64, ts: i64, first: bool) {
    let ts = ts.max(0) as u64;
    let clocks = [(BOOTTIME, false), (INCREMENTAL_CLOCK, true)];
    let clock_len = |(id, incremental): (u32, bool)| {
        field_len(tag::CLOCK_ID, id.into())
            + field_len(tag::CLOCK_TIMESTAMP, ts)
            + if incremental {
                field_len(tag::CLOCK_IS_INCREMENTAL, 1)
            } else {
                0
            }
    };
    let snapshot: usize = clocks
        .iter()
        .map(|&c| bytes_len(tag::SNAPSHOT_CLOCKS, clock_len(c)))
        .sum();
    let event_defaults = field_len(tag::DEFAULT_TRACK_UUID, lane0_uuid);
    let defaults = bytes_len(tag::DEFAULTS_TRACK_EVENT, event_defaults)
        + field_len(tag::DEFAULTS_CLOCK_ID, INCREMENTAL_CLOCK.into());
    let len = bytes_len(tag::PACKET_CLOCK_SNAPSHOT, snapshot)
        + field_len(tag::PACKET_SEQUENCE_ID, group.into())
        + field_len(
            tag::PACKET_SEQUENCE_FLAGS,
            SEQ_INCREMENTAL_STATE_CLEARED.into(),
        )
        + bytes_len(tag::PACKET_DEFAULTS, defaults)
        + if first {
            field_len(tag::PACKET_FIRST_ON_SEQUENCE, 1)
        } else {
            0
        };
    out.push(TRACE_PACKET_BYTE);
    put_varint(out, len as u64);
    put_varint(out, tag::PACKET_CLOCK_SNAPSHOT);
    put_varint(out, snapshot as u64);
    for c in clocks {
        put_varint(out, tag::SNAPSHOT_CLOCKS);
        put_varint(out, clock_len(c) as u64);
        put_field(out, tag::CLOCK_ID, c.0.into());
        put_field(out, tag::CLOCK_TIMESTAMP, ts);
        if c.1 {
            put_field(out, tag::CLOCK_IS_INCREMENTAL, 1);
        }
    }
    put_field(out, tag::PACKET_SEQUENCE_ID, group.into());
    put_field(
        out,
        tag::PACKET_SEQUENCE_FLAGS,
        SEQ_INCREMENTAL_STATE_CLEARED.into(),
    );
    put_varint(out, tag::PACKET_DEFAULTS);
    put_varint(out, defaults as u64);
    put_varint(out, tag::DEFAULTS_TRACK_EVENT);
    put_varint(out, event_defaults as u64);
    put_field(out, tag::DEFAULT_TRACK_UUID, lane0_uuid);
    put_field(out, tag::DEFAULTS_CLOCK_ID, INCREMENTAL_CLOCK.into());
    if first {
        put_field(out, tag::PACKET_FIRST_ON_SEQUENCE, 1);
    }
}

/// An interned entry `{iid, name}` under `tag` of InternedData.
fn put_entry(out: &mut Vec<u8>, tag: u64, iid: u64, name: &[u8]) {
    let len = field_len(tag::ENTRY_IID, iid) + bytes_len(tag::ENTRY_NAME, name.len());
    put_varint(out, tag);
    put_varint(out, len as u64);
    put_field(out, tag::ENTRY_IID, iid);
    put_bytes(out, tag::ENTRY_NAME, name);
}

impl ProtoWriter {
    /// Start the sequence's incremental state afresh: interned ids, default track and the
    /// incremental clock (at `ts`, where the sequence is).
    fn clear_state(&mut self, group: u32, lane0_uuid: u64, ts: i64, first: bool) {
        let first_ts = ts;
        put_clear_packet(&mut self.out.data, group, lane0_uuid, first_ts, first);
        let seq = self.seqs.open(group);
        let mut maps = seq.maps.take();
        if let Some(m) = &mut maps {
            // A sequence that needed maps will again: they keep their room.
            m.names.clear();
            m.values.clear();
        }
        // Its arena blocks are kept, empty.
        *seq = Sequence {
            last_ts: first_ts.max(0),
            default_track: lane0_uuid,
            maps,
            small_at: seq.small_at,
            keys_at: seq.keys_at,
            keys_cap: seq.keys_cap,
            ..Default::default()
        };
    }

    /// Interning stays bounded: past [`MAX_INTERNED`] names and values on one sequence, its
    /// incremental state is cleared and interning starts over (Perfetto's way to let a
    /// long-running writer forget), so memory does not grow with distinct names.
    fn bound_interning(&mut self, group: u32) {
        let Some(seq) = self.seqs.get(group) else {
            return;
        };
        if (seq.names + seq.values) as usize >= MAX_INTERNED {
            let (track, ts) = (seq.default_track, seq.last_ts);
            self.clear_state(group, track, ts, false);
        }
    }

    /// Frame `self.event` (and `self.interned`) as one packet of the sequence at `ts`.
    fn write_event(&mut self, seq_id: u32, ts: i64) {
        let seq = self.seqs.get_mut(seq_id).expect("group opened before use");
        debug_assert!(
            ts >= seq.last_ts,
            "layout keeps each sequence in time order"
        );
        let delta = (ts - seq.last_ts).max(0) as u64;
        seq.last_ts = ts;
        // Only the sequence's first packet carries flags (it clears the incremental state);
        // later packets use that state without restating SEQ_NEEDS_INCREMENTAL_STATE, which
        // trace_processor does not require: 2 bytes saved on every packet.
        let ev_len = self.event.len();
        let int_len = self.interned.len();
        let mut len = field_len(tag::PACKET_TIMESTAMP, delta)
            + field_len(tag::PACKET_SEQUENCE_ID, seq_id as u64)
            + bytes_len(tag::PACKET_TRACK_EVENT, ev_len);
        if int_len > 0 {
            len += bytes_len(tag::PACKET_INTERNED_DATA, int_len);
        }
        let out = &mut self.out.data;
        out.reserve(len + 6);
        out.push(TRACE_PACKET_BYTE);
        put_varint(out, len as u64);
        put_field(out, tag::PACKET_TIMESTAMP, delta);
        put_field(out, tag::PACKET_SEQUENCE_ID, seq_id as u64);
        put_bytes(out, tag::PACKET_TRACK_EVENT, &self.event);
        if int_len > 0 {
            put_bytes(out, tag::PACKET_INTERNED_DATA, &self.interned);
            self.interned.clear();
        }
        self.event.clear();
    }

    /// Encode a BEGIN or INSTANT in `self.event`, interning what the sequence has not seen.
    fn fill(
        &mut self,
        seq_id: u32,
        kind: track_event::Type,
        lane: u64,
        lane0: bool,
        ev: &Event<'_>,
    ) {
        let info = &*self.desc;
        let seq = self.seqs.get_mut(seq_id).expect("group opened before use");
        let interning = &mut self.interning;
        let interned = &mut self.interned;
        let e = &mut self.event;

        let ci = ev.category.index();
        if seq.categories[ci] == 0 {
            seq.next_category += 1;
            seq.categories[ci] = seq.next_category;
            put_entry(
                interned,
                tag::EVENT_CATEGORIES,
                u64::from(seq.next_category),
                ev.category.as_str().as_bytes(),
            );
        }
        put_field(e, tag::CATEGORY_IIDS, u64::from(seq.categories[ci]));

        let mut key_iid = 0;
        for arg in ev.args {
            let new;
            (key_iid, new) = interning.arg_key(seq, arg.key, key_iid);
            if new {
                put_entry(
                    interned,
                    tag::DEBUG_ANNOTATION_NAMES,
                    key_iid,
                    arg.key.as_bytes(),
                );
            }
            let name_len = field_len(tag::ANNOTATION_NAME_IID, key_iid);
            let value = match arg.value {
                ArgValue::Int(v) => {
                    put_varint(e, tag::DEBUG_ANNOTATIONS);
                    put_varint(e, (name_len + field_len(tag::INT_VALUE, v as u64)) as u64);
                    put_field(e, tag::ANNOTATION_NAME_IID, key_iid);
                    put_field(e, tag::INT_VALUE, v as u64);
                    continue;
                }
                ArgValue::Double(v) => {
                    put_varint(e, tag::DEBUG_ANNOTATIONS);
                    put_varint(e, (name_len + varint_len(tag::DOUBLE_VALUE) + 8) as u64);
                    put_field(e, tag::ANNOTATION_NAME_IID, key_iid);
                    put_varint(e, tag::DOUBLE_VALUE);
                    e.extend_from_slice(&v.to_le_bytes());
                    continue;
                }
                ArgValue::Bool(v) => {
                    put_varint(e, tag::DEBUG_ANNOTATIONS);
                    put_varint(e, (name_len + field_len(tag::BOOL_VALUE, v as u64)) as u64);
                    put_field(e, tag::ANNOTATION_NAME_IID, key_iid);
                    put_field(e, tag::BOOL_VALUE, v as u64);
                    continue;
                }
                ArgValue::Str(s) => {
                    let n = s.len();
                    put_varint(e, tag::DEBUG_ANNOTATIONS);
                    put_varint(e, (name_len + bytes_len(tag::STRING_VALUE, n)) as u64);
                    put_field(e, tag::ANNOTATION_NAME_IID, key_iid);
                    put_bytes(e, tag::STRING_VALUE, s.as_bytes());
                    continue;
                }
                ArgValue::Label(s) => Key::Text(s),
                ArgValue::StrId(sid) => Key::Sid(sid),
                ArgValue::Numbered(no, s) => Key::No(no, s),
            };
            let (iid, new) = interning.intern(seq, true, value);
            if new {
                let text = match value {
                    Key::Text(s) | Key::No(_, s) => s.into(),
                    Key::Sid(sid) => info.string_or_id(sid),
                };
                put_entry(
                    interned,
                    tag::DEBUG_ANNOTATION_STRING_VALUES,
                    u64::from(iid),
                    text.as_bytes(),
                );
            }
            put_iid_annotation(e, key_iid, u64::from(iid));
        }

        put_field(e, tag::TYPE, kind as u64);

        let name = match ev.name {
            Name::Str(sid) => Key::Sid(sid),
            Name::Text(t) | Name::Static(t) => Key::Text(t),
            Name::Numbered(no, t) => Key::No(no, t),
        };
        let (name_iid, new) = interning.intern(seq, false, name);
        let name_iid = u64::from(name_iid);
        if new {
            let text = match name {
                Key::Text(t) | Key::No(_, t) => t.into(),
                Key::Sid(sid) => info.string_or_id(sid),
            };
            put_entry(interned, tag::EVENT_NAMES, name_iid, text.as_bytes());
        }
        put_field(e, tag::NAME_IID, name_iid);
        if !lane0 {
            put_field(e, tag::TRACK_UUID, lane);
        }

        // `flow_ids_old` is the varint form of `flow_ids` (fixed64): 5 bytes less per arrow end,
        // about 2 MB on a 200k-kernel profile; trace_processor reads either.
        for &id in ev.flows.out {
            put_field(e, tag::FLOW_IDS_OLD, id);
        }
        if let Some(t) = ev.flows.terminating {
            put_field(e, tag::TERMINATING_FLOW_IDS_OLD, t);
        }
    }
}

/// The interned id of an arg key (its position in `keys`, from 1).
#[inline]
fn arg_iid(keys: &[&'static str], key: &'static str) -> Option<u64> {
    if let Some(i) = keys.iter().position(|k| std::ptr::eq(*k, key)) {
        return Some(i as u64 + 1);
    }
    // The same text may sit at several addresses.
    keys.iter().position(|k| *k == key).map(|i| i as u64 + 1)
}

/// A debug annotation whose value is an interned string.
fn put_iid_annotation(e: &mut Vec<u8>, key_iid: u64, iid: u64) {
    put_varint(e, tag::DEBUG_ANNOTATIONS);
    put_varint(
        e,
        (field_len(tag::ANNOTATION_NAME_IID, key_iid) + field_len(tag::STRING_VALUE_IID, iid))
            as u64,
    );
    put_field(e, tag::ANNOTATION_NAME_IID, key_iid);
    put_field(e, tag::STRING_VALUE_IID, iid);
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
        self.clear_state(group, lane0_uuid, first_ts, true);
    }

    fn begin(&mut self, group: u32, lane_uuid: u64, lane0: bool, ev: &Event<'_>) {
        self.bound_interning(group);
        self.fill(group, track_event::Type::SliceBegin, lane_uuid, lane0, ev);
        self.write_event(group, ev.start);
    }

    fn end(&mut self, group: u32, lane_uuid: u64, lane0: bool, ts: i64) {
        put_field(
            &mut self.event,
            tag::TYPE,
            track_event::Type::SliceEnd as u64,
        );
        if !lane0 {
            put_field(&mut self.event, tag::TRACK_UUID, lane_uuid);
        }
        self.write_event(group, ts);
    }

    fn instant(&mut self, group: u32, lane_uuid: u64, lane0: bool, ev: &Event<'_>) {
        self.bound_interning(group);
        self.fill(group, track_event::Type::Instant, lane_uuid, lane0, ev);
        self.write_event(group, ev.start);
    }

    fn describe_counter(&mut self, track: &CounterTrack) {
        self.write_counter_track(track);
    }

    fn counter(&mut self, group: u32, _track: u64, ts: i64, value: CounterValue) {
        self.write_counter(group, ts, value);
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

    fn finish(&mut self) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{TracePacketDefaults, TrackEventDefaults};

    /// The hand-written clear packet is what prost writes for the same `TracePacket`.
    #[test]
    fn clear_packet_matches_prost() {
        for (group, uuid, ts, first) in [
            (2, 1, 0, true),
            (3, 300, -5, false),
            (0x7FFF_FFFF, u64::MAX, i64::MAX, true),
            (130, 1 << 40, 1_700_000_000_000_000_000, false),
        ] {
            let packet = TracePacket {
                optional_trusted_packet_sequence_id: Some(
                    trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(group),
                ),
                sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
                first_packet_on_sequence: first.then_some(true),
                trace_packet_defaults: Some(TracePacketDefaults {
                    timestamp_clock_id: Some(INCREMENTAL_CLOCK),
                    track_event_defaults: Some(TrackEventDefaults {
                        track_uuid: Some(uuid),
                        ..Default::default()
                    }),
                }),
                data: Some(trace_packet::Data::ClockSnapshot(ClockSnapshot {
                    clocks: vec![
                        clock_snapshot::Clock {
                            clock_id: Some(BOOTTIME),
                            timestamp: Some(ts.max(0) as u64),
                            ..Default::default()
                        },
                        clock_snapshot::Clock {
                            clock_id: Some(INCREMENTAL_CLOCK),
                            timestamp: Some(ts.max(0) as u64),
                            is_incremental: Some(true),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                })),
                ..Default::default()
            };
            let (mut want, mut got) = (Vec::new(), Vec::new());
            frame(&packet, &mut want);
            put_clear_packet(&mut got, group, uuid, ts, first);
            assert_eq!(got, want, "group {group} uuid {uuid} ts {ts} first {first}");
        }
    }

    /// Names and values keep their iids when a sequence outgrows its short lists: every event
    /// resolves to its own name and values, and no iid is interned twice.
    #[test]
    fn short_lists_then_maps_resolve_every_event() {
        use crate::model::{Arg, Flows};
        use crate::proto::{Trace, debug_annotation};
        const TEXTS: [&str; 11] = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"];
        // Two dictionaries numbering other texts with the same numbers: a number stands for
        // its text only within its set (set A's numbers are dense, set B's names far apart).
        const SET_A: [&str; 7] = ["a0", "a1", "a2", "a3", "a4", "a5", "a6"];
        const SET_B: [&str; 7] = ["b0", "b1", "b2", "b3", "b4", "b5", "b6"];
        let (a, b) = (TextNo::new_set(), TextNo::new_set());
        let mut w = Protobuf::default().writer(0, Arc::new(Description::default()));
        let mut want = Vec::new();
        w.open_group(2, 7, 0);
        for i in 0..80usize {
            let name = match i % 4 {
                0 => Name::Str(i as i64 % 13),
                1 => Name::Text(TEXTS[i % 11]),
                2 => Name::Numbered(TextNo::new(a, (i % 7) as u32), SET_A[i % 7]),
                // Far apart: past the dense table's bound, these go to the map.
                _ => Name::Numbered(TextNo::new(b, (i % 7) as u32 * 40_000), SET_B[i % 7]),
            };
            let args = [
                Arg {
                    key: "label",
                    value: ArgValue::Label(TEXTS[i % 9]),
                },
                Arg {
                    key: "sid",
                    value: ArgValue::StrId(100 + i as i64 % 10),
                },
                Arg {
                    key: "numbered",
                    value: ArgValue::Numbered(TextNo::new(b, (i % 5) as u32), SET_B[i % 5]),
                },
            ];
            let ev = Event {
                start: 10 * i as i64,
                end: Some(10 * i as i64 + 5),
                name,
                category: Category::Kernel,
                args: &args,
                flows: Flows {
                    out: &[],
                    terminating: None,
                },
            };
            w.begin(2, 7, true, &ev);
            w.end(2, 7, true, ev.start + 5);
            let text = |n: Name<'_>| match n {
                Name::Str(sid) => format!("(string {sid})"),
                Name::Text(t) | Name::Static(t) | Name::Numbered(_, t) => t.to_string(),
            };
            want.push(vec![
                text(name),
                format!("label={}", TEXTS[i % 9]),
                format!("sid=(string {})", 100 + i % 10),
                format!("numbered={}", SET_B[i % 5]),
            ]);
        }
        let bytes = w.take_chunk().unwrap().data;
        let mut names = HashMap::new();
        let mut values = HashMap::new();
        let mut keys = HashMap::new();
        let mut got = Vec::new();
        for p in Trace::decode(&bytes[..]).unwrap().packet {
            if let Some(d) = p.interned_data {
                for e in d.event_names {
                    assert!(names.insert(e.iid(), e.name().to_string()).is_none());
                }
                for e in d.debug_annotation_string_values {
                    let s = String::from_utf8(e.str().to_vec()).unwrap();
                    assert!(values.insert(e.iid(), s).is_none());
                }
                for e in d.debug_annotation_names {
                    assert!(keys.insert(e.iid(), e.name().to_string()).is_none());
                }
            }
            let Some(trace_packet::Data::TrackEvent(ev)) = p.data else {
                continue;
            };
            let Some(track_event::NameField::NameIid(iid)) = ev.name_field else {
                continue;
            };
            let mut row = vec![names[&iid].clone()];
            for a in ev.debug_annotations {
                let Some(debug_annotation::NameField::NameIid(k)) = a.name_field else {
                    panic!("arg key not interned");
                };
                let Some(debug_annotation::Value::StringValueIid(v)) = a.value else {
                    panic!("arg value not interned");
                };
                row.push(format!("{}={}", keys[&k], values[&v]));
            }
            got.push(row);
        }
        assert_eq!(got, want);
        assert!(names.len() > SMALL as usize && values.len() > SMALL as usize);
    }

    /// A merged report's chunk: every packet the same but for its machine, whatever its size
    /// (a length that needs one more varint byte once the field is added), and the root
    /// track's hand-written packet decodes as a TrackDescriptor with uuid 0 on that machine.
    #[test]
    fn every_packet_of_a_chunk_goes_on_its_machine() {
        let mut data = Vec::new();
        let mut want = Vec::new();
        for len in [
            0, 1, 120, 124, 125, 126, 127, 128, 300, 16_380, 16_383, 20_000,
        ] {
            let packet = TracePacket {
                data: Some(trace_packet::Data::TrackDescriptor(TrackDescriptor {
                    uuid: Some(len as u64 + 1),
                    static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                        "x".repeat(len),
                    )),
                    ..Default::default()
                })),
                ..Default::default()
            };
            frame(&packet, &mut data);
            want.push(packet);
        }
        let decode = |bytes: &[u8]| {
            crate::proto::Trace::decode(bytes)
                .expect("a valid trace")
                .packet
        };
        for machine in [1, 63, 300] {
            let got = decode(&on_machine(&data, machine));
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.machine_id, Some(machine));
                assert_eq!(
                    TracePacket {
                        machine_id: None,
                        ..g.clone()
                    },
                    *w
                );
            }
        }
        let root = decode(&explicit_process_order(5));
        assert_eq!(root.len(), 1);
        assert_eq!(root[0].machine_id, Some(5));
        match &root[0].data {
            Some(trace_packet::Data::TrackDescriptor(d)) => assert_eq!(d.uuid, Some(0)),
            other => panic!("{other:?}"),
        }
    }
}
