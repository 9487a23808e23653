//! Chrome JSON trace output (`{"traceEvents": [...]}`), for tools that read nothing else.
//!
//! The same content as the protobuf output as far as the format carries it:
//! - slices are complete (`X`) events and NVTX marks thread-scoped instants (`i`), with the same
//!   names, categories and args. Timestamps are microseconds written from integer nanoseconds as
//!   `{ns / 1000}.{ns % 1000:03}`, so they keep nanosecond precision (never via `f64`);
//! - JSON has no custom tracks, so a GPU becomes a named pseudo-process and each of its streams
//!   (and each overlap lane) a named pseudo-thread; NVTX domains and overlap lanes of a thread
//!   become pseudo-threads of its process. Every lane is strictly nested, since JSON importers
//!   drop or move partly overlapping `X` events of one thread. Metadata (`M`) events name and
//!   order processes and threads;
//! - flow arrows are v1 flow events: `s` at the launching call's start on its thread, `f` with
//!   `"bp":"e"` at the GPU row's start on its stream. Each is written right after its slice, so
//!   importers that sort by (timestamp, duration) see the slice first. Flow ids are the model's
//!   ids, unique in the whole trace, with one fixed category and name.
//!
//! The file is streamed: the header opens the event array with one inert first object and every
//! later event is written as `,\n{...}`, so chunks of different writers concatenate in any order.

mod samples;

/// The `otherData` key under which a trace carries what it was made from
/// (the app's `provenance` reads it back).
pub const RECORD_KEY: &str = "nsys-perfetto-provenance";

use super::{
    Chunk, ChunkBuffer, CounterTrack, CustomTrack, EventWriter, Format, FormatOptions, Placed,
    WellKnown, find_last,
};
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::model::{
    ArgValue, CounterValue, CpuSample, Description, Event, FastHash, Name, source_of, tid_of,
    trace_pid_of, without_source,
};
use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Arc;

/// Pseudo-processes (GPUs) and pseudo-threads get ids above the 24 bits the model gives real pids and
/// tids, so they never collide with them or with each other (custom uuids are small counters).
const PSEUDO_PID_BASE: u32 = 0x7000_0000;
const PSEUDO_TID_BASE: u32 = 0x4000_0000;
const PSEUDO_MASK: u64 = 0x0FFF_FFFF;
/// The pseudo-process holding the session-start markers.
const SESSION_PID: u32 = PSEUDO_PID_BASE - 1;
/// Real processes sort after the GPUs, by pid; threads by tid, their pseudo-threads beside them.
const PROCESS_SORT_BASE: i64 = 0x100_0000;
const THREAD_SORT_STRIDE: i64 = 16;
/// Flow events share one category and name: v1 flows are matched by (id, cat, name).
const FLOW_CAT_NAME: &[u8] = b"\"cat\":\"flow\",\"name\":\"launch\"";

/// Chrome JSON output. `colors`: map NVTX colours to the nearest Chrome colour name (`cname`).
pub struct Json {
    pub colors: bool,
}

impl Format for Json {
    const NAME: &'static str = "json";
    const HELP: &'static str = "Chrome JSON trace (.json), for tools that read only that";
    const EXTENSION: &'static str = "json";
    const SERVED_GZIPPED: bool = true;
    type Writer = JsonWriter;

    fn made(_sources: &[Placed], options: &FormatOptions) -> Json {
        Json {
            colors: options.json_colors,
        }
    }

    /// The last `otherData` key ([`RECORD_KEY`]), then `}}`.
    fn read_record(tail: &[u8]) -> Option<String> {
        let needle = format!("\"{RECORD_KEY}\":");
        for at in find_last(tail, needle.as_bytes()) {
            let Ok(rest) = std::str::from_utf8(&tail[at + needle.len()..]) else {
                continue;
            };
            let mut de = serde_json::Deserializer::from_str(rest).into_iter::<String>();
            let Some(Ok(text)) = de.next() else { continue };
            if rest[de.byte_offset()..].trim_end() == "}}" {
                return Some(text);
            }
        }
        None
    }

    fn writer(&self, _source: usize, desc: Arc<Description>) -> JsonWriter {
        JsonWriter {
            info: desc,
            colors: self.colors,
            out: ChunkBuffer::default(),
            tracks: HashMap::default(),
            groups: HashMap::default(),
            group_names: HashMap::default(),
            children: HashMap::default(),
            cnames: HashMap::default(),
            strings: HashMap::default(),
            event_pseudo_pids: Default::default(),
            counters: HashMap::default(),
            natural_tids: Default::default(),
        }
    }

    fn header(&self) -> Vec<u8> {
        // Every event is written as ",\n{...}"; the file writer drops the first comma.
        b"{\"traceEvents\":[".to_vec()
    }

    fn preamble(&self, sources: &[Placed]) -> Vec<u8> {
        let mut out = Vec::new();
        // A "Session start" instant at each source's time zero, as in the protobuf output.
        if !sources.is_empty() {
            metadata_name(&mut out, "process_name", SESSION_PID, None, "Session");
            metadata_sort(&mut out, "process_sort_index", SESSION_PID, None, -1);
            metadata_name(
                &mut out,
                "thread_name",
                SESSION_PID,
                Some(SESSION_PID),
                "Session",
            );
        }
        for src in sources {
            let name = match &src.label {
                Some(l) => format!("Session start · {l}"),
                None => "Session start".to_string(),
            };
            out.extend_from_slice(b",\n{\"ph\":\"i\",\"cat\":\"session\",\"name\":");
            push_str(&mut out, &name);
            push_pid_tid(&mut out, SESSION_PID, SESSION_PID);
            out.extend_from_slice(b",\"ts\":");
            push_us(&mut out, src.offset);
            out.extend_from_slice(b",\"s\":\"t\"}");
        }
        out
    }

    fn record_separator(&self) -> Option<&'static [u8]> {
        Some(b",")
    }

    fn describe_well_known(&self, track: WellKnown, info: &Description) -> Vec<u8> {
        let mut out = Vec::new();
        let pid = track.pid() as u32;
        match track {
            WellKnown::Gpu(device) => {
                // A pseudo-process; GPUs sort before real processes, by device number.
                let pid = gpu_pid(device, info);
                metadata_name(
                    &mut out,
                    "process_name",
                    pid,
                    None,
                    &gpu_process_name(device, info),
                );
                metadata_sort(
                    &mut out,
                    "process_sort_index",
                    pid,
                    None,
                    (source_of(device) as i64) << 8 | (without_source(device) & 0xFF),
                );
            }
            // No record of its own: JSON has no level between a process and its threads, so
            // the context names the streams under it (see `describe`).
            WellKnown::GpuContext { .. } => {}
            WellKnown::Process(gp) => {
                metadata_name(&mut out, "process_name", pid, None, &info.process_name(gp));
                metadata_sort(
                    &mut out,
                    "process_sort_index",
                    pid,
                    None,
                    PROCESS_SORT_BASE + pid as i64,
                );
            }
            WellKnown::Thread(gt) => {
                let tid = tid_of(gt) as u32;
                metadata_name(
                    &mut out,
                    "thread_name",
                    pid,
                    Some(tid),
                    &info.thread_name(gt),
                );
                metadata_sort(
                    &mut out,
                    "thread_sort_index",
                    pid,
                    Some(tid),
                    tid as i64 * THREAD_SORT_STRIDE,
                );
            }
        }
        out
    }

    /// `otherData`: the converter, the report's metadata, and the record as the last key.
    fn footer(&self, sources: &[Placed], record: Option<&str>) -> Vec<u8> {
        let mut out = b"\n],\"otherData\":{\"converter\":".to_vec();
        push_str(
            &mut out,
            concat!("nsys-perfetto ", env!("CARGO_PKG_VERSION")),
        );
        let metadata = sources.iter().take(1).flat_map(|s| s.metadata.iter());
        for (k, v) in metadata {
            out.push(b',');
            push_str(&mut out, k);
            out.push(b':');
            push_str(&mut out, v);
        }
        if let Some(r) = record {
            out.push(b',');
            push_str(&mut out, RECORD_KEY);
            out.push(b':');
            push_str(&mut out, r);
        }
        out.extend_from_slice(b"}}\n");
        out
    }
}

/// Where a track's events go, and how it is named once first used.
struct Track {
    pid: u32,
    /// `None` for a pseudo-process (a GPU), which holds no events itself.
    tid: Option<u32>,
    name: String,
    /// Appended to the name: tells apart tracks that share a parent and a name.
    suffix: String,
    parent: Option<u64>,
    /// The real thread a pseudo-thread belongs to (its name is appended to the track's).
    thread: Option<i64>,
    sort_index: i64,
    /// Whether its metadata events have been written.
    named: bool,
    /// Whether its tid is the number its name ends with (the name is written without it).
    natural: bool,
}

struct GroupLanes {
    lane0: u64,
    /// Extra lanes named so far.
    extra: u32,
}

pub struct JsonWriter {
    info: Arc<Description>,
    colors: bool,
    out: ChunkBuffer,
    /// Custom tracks described to this writer, and well-known thread lanes once used.
    tracks: HashMap<u64, Track, FastHash>,
    groups: HashMap<u32, GroupLanes, FastHash>,
    /// Groups opened per (parent, name) of their first track.
    group_names: HashMap<(Option<u64>, String), u32, FastHash>,
    /// Pseudo-threads created per parent uuid, to order them after their thread.
    children: HashMap<u64, i64, FastHash>,
    /// NVTX colour (0xRRGGBB) -> Chrome colour name.
    cnames: HashMap<u32, &'static str, FastHash>,
    /// Strings by id, looked up once each (JSON repeats names on every event).
    strings: HashMap<i64, Box<str>, FastHash>,
    /// Top-level pseudo-processes whose own pseudo-thread holds events (named once).
    event_pseudo_pids: std::collections::HashSet<u32, FastHash>,
    /// Counter tracks by uuid (see `samples`).
    counters: HashMap<u64, JsonCounter, FastHash>,
    /// (pid, tid) taken by tracks whose tid is their number ([`natural_number`]).
    natural_tids: std::collections::HashSet<(u32, u32), FastHash>,
}

/// What a counter's `C` events say besides their value (written by `samples.rs`).
struct JsonCounter {
    pid: u32,
    name: String,
    key: String,
    category: Category,
}

/// A string id's text through a writer's cache; the cache starts over past 64k names.
fn cached<'c>(
    cache: &'c mut HashMap<i64, Box<str>, FastHash>,
    desc: &Description,
    sid: i64,
) -> &'c str {
    if !cache.contains_key(&sid) && cache.len() >= 1 << 16 {
        cache.clear();
    }
    cache
        .entry(sid)
        .or_insert_with(|| desc.string_or_id(sid).into())
}

impl JsonWriter {
    /// The (pid, tid) of a lane, writing its metadata events on first use.
    fn lane(&mut self, group: u32, lane: u64, lane0: bool) -> (u32, u32) {
        match self.tracks.get(&lane) {
            Some(t) if t.named => {
                let (pid, tid) = (t.pid, t.tid.unwrap_or(t.pid));
                if t.tid.is_none() && !self.event_pseudo_pids.contains(&pid) {
                    // A top-level track that holds events itself (diagnostics, counter
                    // samples): its events go on one pseudo-thread named like the track.
                    let name = t.name.clone();
                    metadata_name(&mut self.out.data, "thread_name", pid, Some(tid), &name);
                    self.event_pseudo_pids.insert(pid);
                }
                return (pid, tid);
            }
            Some(_) => {}
            None => {
                // A process or thread track: its descriptor comes from the file writer.
                let (pid, tid) = match WellKnown::from_uuid(lane) {
                    Some(WellKnown::Thread(gt)) => (trace_pid_of(gt) as u32, tid_of(gt) as u32),
                    Some(WellKnown::Process(gp)) => {
                        (trace_pid_of(gp) as u32, trace_pid_of(gp) as u32)
                    }
                    Some(WellKnown::Gpu(d) | WellKnown::GpuContext { device: d, .. }) => {
                        (gpu_pid(d, &self.info), gpu_pid(d, &self.info))
                    }
                    // Never described (not expected): a named lane of its own all the same.
                    None => {
                        let (pid, tid) = (pseudo_pid(lane), pseudo_tid(lane));
                        let name = format!("Track {lane}");
                        metadata_name(&mut self.out.data, "process_name", pid, None, &name);
                        metadata_name(&mut self.out.data, "thread_name", pid, Some(tid), &name);
                        (pid, tid)
                    }
                };
                let track = Track {
                    pid,
                    tid: Some(tid),
                    name: String::new(),
                    suffix: String::new(),
                    parent: None,
                    thread: None,
                    sort_index: 0,
                    named: true,
                    natural: false,
                };
                self.tracks.insert(lane, track);
                return (pid, tid);
            }
        }
        // An extra lane with its group's name: tell it apart, as JSON does not merge lanes.
        let mut suffix = None;
        if !lane0
            && let Some(g) = self.groups.get_mut(&group)
            && let Some(first) = self.tracks.get(&g.lane0)
            && Some(&first.name) == self.tracks.get(&lane).map(|t| &t.name)
        {
            g.extra += 1;
            suffix = Some(format!("{} (overlap {})", first.suffix, g.extra));
        }
        let t = self.tracks.get_mut(&lane).expect("checked above");
        t.named = true;
        if let Some(s) = suffix {
            t.suffix = s;
        }
        let (pid, tid) = (t.pid, t.tid.unwrap_or(t.pid));
        let mut name = format!("{}{}", t.name, t.suffix);
        if t.natural && t.suffix.is_empty() && name.ends_with(&format!(" {tid}")) {
            // "Stream 7" as "Stream" with tid 7: the UI appends the tid.
            name.truncate(name.len() - format!(" {tid}").len());
        }
        if let Some(gt) = t.thread {
            name.push_str(" · ");
            name.push_str(&self.info.thread_name(gt));
        }
        let sort = t.sort_index;
        metadata_name(&mut self.out.data, "thread_name", pid, Some(tid), &name);
        metadata_sort(
            &mut self.out.data,
            "thread_sort_index",
            pid,
            Some(tid),
            sort,
        );
        (pid, tid)
    }

    /// `,\n{"ph":"X","cat":..,"name":..,"pid":..,"tid":..,"ts":..[,"dur":..][,"cname":..][,"args":{..}]}`
    fn event(&mut self, ph: u8, pid: u32, tid: u32, ev: &Event<'_>) {
        let b = &mut self.out.data;
        b.extend_from_slice(b",\n{\"ph\":\"");
        b.push(ph);
        b.extend_from_slice(b"\",\"cat\":\"");
        b.extend_from_slice(ev.category.as_str().as_bytes());
        b.extend_from_slice(b"\",\"name\":");
        match ev.name {
            Name::Str(sid) => push_str(b, cached(&mut self.strings, &self.info, sid)),
            Name::Text(t) | Name::Static(t) | Name::Numbered(_, t) => push_str(b, t),
        }
        push_pid_tid(b, pid, tid);
        b.extend_from_slice(b",\"ts\":");
        push_us(b, ev.start);
        match ev.end {
            Some(end) => {
                b.extend_from_slice(b",\"dur\":");
                push_us(b, end - ev.start);
            }
            None => b.extend_from_slice(b",\"s\":\"t\""),
        }
        if self.colors
            && matches!(ev.category, Category::Nvtx | Category::NvtxMark)
            && let Some(cname) = nvtx_color(ev)
                .map(|rgb| *self.cnames.entry(rgb).or_insert_with(|| nearest_cname(rgb)))
        {
            let b = &mut self.out.data;
            b.extend_from_slice(b",\"cname\":\"");
            b.extend_from_slice(cname.as_bytes());
            b.push(b'"');
        }
        let b = &mut self.out.data;
        if !ev.args.is_empty() {
            b.extend_from_slice(b",\"args\":{");
            for (i, arg) in ev.args.iter().enumerate() {
                if i > 0 {
                    b.push(b',');
                }
                push_str(b, arg.key);
                b.push(b':');
                match arg.value {
                    ArgValue::Int(v) => push_int(b, v),
                    ArgValue::Double(v) if v.is_finite() => {
                        // Debug keeps a float a float ("3.0") and is the shortest exact form.
                        let _ = write!(b, "{v:?}");
                    }
                    ArgValue::Double(_) => b.extend_from_slice(b"null"),
                    ArgValue::Bool(v) => b.extend_from_slice(if v { b"true" } else { b"false" }),
                    ArgValue::Str(s) | ArgValue::Label(s) | ArgValue::Numbered(_, s) => {
                        push_str(b, s)
                    }
                    ArgValue::StrId(sid) => push_str(b, cached(&mut self.strings, &self.info, sid)),
                }
            }
            b.push(b'}');
        }
        b.push(b'}');
    }

    /// v1 flow events: `s` (start) on the launching slice, `f` (end) on the launched one.
    fn flows(&mut self, pid: u32, tid: u32, ev: &Event<'_>) {
        let b = &mut self.out.data;
        for &id in ev.flows.out {
            flow_event(b, b's', id, pid, tid, ev.start);
        }
        if let Some(id) = ev.flows.terminating {
            flow_event(b, b'f', id, pid, tid, ev.start);
        }
    }
}

impl EventWriter for JsonWriter {
    fn describe(&mut self, track: &CustomTrack) {
        let uuid = track.uuid;
        let Some(parent) = track.parent else {
            // A GPU: a pseudo-process, named now; its streams become its pseudo-threads.
            let pid = pseudo_pid(uuid);
            let sort = track.rank.unwrap_or(0).clamp(0, PROCESS_SORT_BASE - 1);
            metadata_name(&mut self.out.data, "process_name", pid, None, &track.name);
            metadata_sort(&mut self.out.data, "process_sort_index", pid, None, sort);
            self.tracks.insert(
                uuid,
                Track {
                    pid,
                    tid: None,
                    name: track.name.clone(),
                    suffix: String::new(),
                    parent: None,
                    thread: None,
                    sort_index: sort,
                    named: true,
                    natural: false,
                },
            );
            return;
        };
        let nth = {
            let n = self.children.entry(parent).or_insert(0);
            *n += 1;
            (*n).min(THREAD_SORT_STRIDE - 1)
        };
        let mut name = track.name.clone();
        let (pid, thread, sort_index) = match WellKnown::from_uuid(parent) {
            Some(WellKnown::Thread(gt)) => (
                trace_pid_of(gt) as u32,
                Some(gt),
                tid_of(gt) * THREAD_SORT_STRIDE + nth,
            ),
            Some(WellKnown::Process(gp)) => (trace_pid_of(gp) as u32, None, nth),
            // A stream (or its lane) of a GPU, ordered by its rank (the stream id).
            Some(WellKnown::Gpu(d)) => (gpu_pid(d, &self.info), None, track.rank.unwrap_or(0)),
            // A stream (or its lane) of one context of a GPU that has several: a thread of the
            // GPU named after its context ("Context 2 · Stream 7"), as JSON has no level
            // between a process and its threads; ordered by context, then by rank, after the
            // GPU's own tracks of low rank.
            Some(WellKnown::GpuContext { device, index }) => {
                name = format!(
                    "{} · {}",
                    self.info.gpu_context_label(device, index),
                    track.name
                );
                let rank = track.rank.unwrap_or(0).clamp(-1, (1 << 24) - 2);
                (
                    gpu_pid(device, &self.info),
                    None,
                    ((i64::from(index) + 1) << 24) + rank,
                )
            }
            None => match self.tracks.get(&parent) {
                // A stream (or its lane) of a GPU, ordered by its rank (the stream id).
                Some(p) if p.tid.is_none() => (p.pid, None, track.rank.unwrap_or(0)),
                // Under a pseudo-thread: beside it, in the same process.
                Some(p) => (p.pid, p.thread, p.sort_index),
                None => (pseudo_pid(parent), None, track.rank.unwrap_or(0)),
            },
        };
        // A stream directly under its GPU, a CPU under "CPUs", a GPU's NVTX track of a thread:
        // its number as its tid, once per process.
        let natural = match WellKnown::from_uuid(parent) {
            Some(WellKnown::Gpu(_)) => true,
            None => self.tracks.get(&parent).is_some_and(|p| p.tid.is_none()),
            Some(_) => false,
        }
        .then(|| match track.number {
            Some(n) => (1..i64::from(PSEUDO_TID_BASE))
                .contains(&n)
                .then_some(n as u32),
            None => natural_number(&name, track.rank),
        })
        .flatten()
        .filter(|&n| self.natural_tids.insert((pid, n)));
        self.tracks.insert(
            uuid,
            Track {
                pid,
                tid: Some(natural.unwrap_or_else(|| pseudo_tid(uuid))),
                name,
                suffix: String::new(),
                parent: Some(parent),
                thread,
                sort_index: sort_index.clamp(i32::MIN as i64, i32::MAX as i64),
                named: false,
                natural: natural.is_some(),
            },
        );
    }

    fn require(&mut self, track: WellKnown) {
        self.out.require(track);
    }

    fn open_group(&mut self, group: u32, lane0_uuid: u64, _first_ts: i64) {
        // A further group on a track of the same name and parent (rows that came late, or two
        // NVTX domains of one name): numbered, as JSON does not merge same-named threads.
        if let Some(t) = self.tracks.get_mut(&lane0_uuid)
            && !t.named
        {
            let n = self
                .group_names
                .entry((t.parent, t.name.clone()))
                .or_insert(0);
            *n += 1;
            if *n > 1 {
                t.suffix = format!(" ({n})");
            }
        }
        self.groups.insert(
            group,
            GroupLanes {
                lane0: lane0_uuid,
                extra: 0,
            },
        );
    }

    fn begin(&mut self, group: u32, lane_uuid: u64, lane0: bool, ev: &Event<'_>) {
        let (pid, tid) = self.lane(group, lane_uuid, lane0);
        self.event(b'X', pid, tid, ev);
        self.flows(pid, tid, ev);
    }

    fn end(&mut self, _group: u32, _lane_uuid: u64, _lane0: bool, _ts: i64) {
        // Complete events carry their duration.
    }

    fn instant(&mut self, group: u32, lane_uuid: u64, lane0: bool, ev: &Event<'_>) {
        let (pid, tid) = self.lane(group, lane_uuid, lane0);
        self.event(b'i', pid, tid, ev);
        self.flows(pid, tid, ev);
    }

    fn describe_counter(&mut self, track: &CounterTrack) {
        self.write_counter_track(track);
    }

    fn counter(&mut self, _group: u32, track: u64, ts: i64, value: CounterValue) {
        self.write_counter(track, ts, value);
    }

    fn cpu_sample(&mut self, _group: u32, sample: &CpuSample<'_>) {
        self.write_cpu_sample(sample);
    }

    fn buffered(&self) -> usize {
        self.out.data.len()
    }

    fn take_chunk(&mut self) -> Option<Chunk> {
        self.out.take()
    }
}

/// A GPU's pseudo-process. Perfetto's UI shows a process as "NAME PID": where it can, the pid
/// is the device number itself, so "NVIDIA H100 · GPU" reads "NVIDIA H100 · GPU 0" there; that
/// is, in a single report whose processes have no such pid. Otherwise (a merge, a real process
/// 3 beside a GPU 3) a pseudo pid below the custom tracks' ones, apart from real pids.
fn gpu_pid(device: i64, info: &Description) -> u32 {
    match natural_gpu_pid(device, info) {
        Some(pid) => pid,
        None => {
            PSEUDO_PID_BASE
                - 2
                - ((source_of(device) as u32) << 8 | (without_source(device) as u32 & 0xFF))
        }
    }
}

fn natural_gpu_pid(device: i64, info: &Description) -> Option<u32> {
    if info.label.is_some() || source_of(device) != 0 || !(0..1 << 16).contains(&device) {
        return None;
    }
    let taken = info
        .process_names
        .keys()
        .chain(info.thread_names.keys())
        .any(|&g| nsys_perfetto_model::model::pid_of(g) == device);
    (!taken).then_some(device as u32)
}

/// The GPU's process name: "GPU 0 · NVIDIA H100", or with the device number as its pid,
/// "NVIDIA H100 · GPU" (the UI appends the pid).
fn gpu_process_name(device: i64, info: &Description) -> String {
    if natural_gpu_pid(device, info).is_none() {
        return info.gpu_label(without_source(device));
    }
    match info.gpu_names.get(&without_source(device)) {
        Some(n) => format!("{n} · GPU"),
        None => "GPU".to_string(),
    }
}

/// Where Perfetto's UI would append an id to a track's name ("Stream 7 1073741849"), the id is
/// the track's own number when its name ends in one that is free in its process: the thread is
/// then named "Stream" with tid 7, and the UI shows "Stream 7". (Tid 0 reads as the process's
/// main thread in Perfetto's JSON importer: never natural.)
fn natural_number(name: &str, rank: Option<i64>) -> Option<u32> {
    let rank = rank?;
    let (_, n) = name.rsplit_once(' ')?;
    (n.parse::<i64>().ok() == Some(rank) && (1..i64::from(PSEUDO_TID_BASE)).contains(&rank))
        .then_some(rank as u32)
}

fn pseudo_pid(uuid: u64) -> u32 {
    PSEUDO_PID_BASE + (uuid & PSEUDO_MASK) as u32
}

fn pseudo_tid(uuid: u64) -> u32 {
    PSEUDO_TID_BASE + (uuid & PSEUDO_MASK) as u32
}

fn push_pid_tid(b: &mut Vec<u8>, pid: u32, tid: u32) {
    let mut n = itoa::Buffer::new();
    b.extend_from_slice(b",\"pid\":");
    b.extend_from_slice(n.format(pid).as_bytes());
    b.extend_from_slice(b",\"tid\":");
    b.extend_from_slice(n.format(tid).as_bytes());
}

fn flow_event(b: &mut Vec<u8>, ph: u8, id: u64, pid: u32, tid: u32, ts: i64) {
    b.extend_from_slice(b",\n{\"ph\":\"");
    b.push(ph);
    b.extend_from_slice(b"\",");
    b.extend_from_slice(FLOW_CAT_NAME);
    b.extend_from_slice(b",\"id\":");
    b.extend_from_slice(itoa::Buffer::new().format(id).as_bytes());
    push_pid_tid(b, pid, tid);
    b.extend_from_slice(b",\"ts\":");
    push_us(b, ts);
    b.extend_from_slice(b",\"bp\":\"e\"}");
}

/// `,\n{"ph":"M","name":<what>,"pid":..[,"tid":..],"args":{"name":<name>}}`
fn metadata_name(b: &mut Vec<u8>, what: &str, pid: u32, tid: Option<u32>, name: &str) {
    metadata_head(b, what, pid, tid);
    b.extend_from_slice(b",\"args\":{\"name\":");
    push_str(b, name);
    b.extend_from_slice(b"}}");
}

fn metadata_sort(b: &mut Vec<u8>, what: &str, pid: u32, tid: Option<u32>, index: i64) {
    metadata_head(b, what, pid, tid);
    b.extend_from_slice(b",\"args\":{\"sort_index\":");
    push_int(b, index);
    b.extend_from_slice(b"}}");
}

fn metadata_head(b: &mut Vec<u8>, what: &str, pid: u32, tid: Option<u32>) {
    b.extend_from_slice(b",\n{\"ph\":\"M\",\"name\":\"");
    b.extend_from_slice(what.as_bytes());
    b.extend_from_slice(b"\",\"pid\":");
    let mut n = itoa::Buffer::new();
    b.extend_from_slice(n.format(pid).as_bytes());
    if let Some(tid) = tid {
        b.extend_from_slice(b",\"tid\":");
        b.extend_from_slice(n.format(tid).as_bytes());
    }
}

fn push_int(b: &mut Vec<u8>, v: i64) {
    b.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Integer nanoseconds as microseconds with exactly three decimals: 1234567 -> `1234.567`.
pub fn push_us(b: &mut Vec<u8>, ns: i64) {
    if ns < 0 {
        b.push(b'-');
    }
    let ns = ns.unsigned_abs();
    b.extend_from_slice(itoa::Buffer::new().format(ns / 1000).as_bytes());
    let frac = (ns % 1000) as u16;
    b.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// A JSON string literal. Input is valid UTF-8 (export text is made lossy when read), so only
/// quotes, backslashes and control characters need escaping.
pub fn push_str(b: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    b.push(b'"');
    let bytes = s.as_bytes();
    let mut from = 0;
    for (i, &c) in bytes.iter().enumerate() {
        let esc: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(c >> 4) as usize],
                HEX[(c & 0xf) as usize],
            ],
            _ => continue,
        };
        b.extend_from_slice(&bytes[from..i]);
        b.extend_from_slice(esc);
        from = i + 1;
    }
    b.extend_from_slice(&bytes[from..]);
    b.push(b'"');
}

/// The NVTX colour of an event, from its `color` arg (`#rrggbb`).
fn nvtx_color(ev: &Event<'_>) -> Option<u32> {
    ev.args.iter().find_map(|a| match (a.key, a.value) {
        ("color", ArgValue::Label(s) | ArgValue::Str(s) | ArgValue::Numbered(_, s)) => {
            let hex = s.strip_prefix('#').filter(|h| h.len() == 6)?;
            u32::from_str_radix(hex, 16).ok()
        }
        _ => None,
    })
}

/// Chrome's trace viewer accepts only its reserved colour names as `cname`
/// (catapult `tracing/base/color_scheme.html`), with these RGB values.
const CNAMES: [(&str, [u8; 3]); 34] = [
    ("thread_state_uninterruptible", [182, 125, 143]),
    ("thread_state_iowait", [255, 140, 0]),
    ("thread_state_running", [126, 200, 148]),
    ("thread_state_runnable", [133, 160, 210]),
    ("thread_state_sleeping", [240, 240, 240]),
    ("thread_state_unknown", [199, 155, 125]),
    ("background_memory_dump", [0, 180, 180]),
    ("light_memory_dump", [0, 0, 180]),
    ("detailed_memory_dump", [180, 0, 180]),
    ("vsync_highlight_color", [0, 0, 255]),
    ("generic_work", [125, 125, 125]),
    ("good", [0, 125, 0]),
    ("bad", [180, 125, 0]),
    ("terrible", [180, 0, 0]),
    ("black", [0, 0, 0]),
    ("grey", [221, 221, 221]),
    ("white", [255, 255, 255]),
    ("yellow", [255, 255, 0]),
    ("olive", [100, 100, 0]),
    ("rail_response", [67, 135, 253]),
    ("rail_animation", [244, 74, 63]),
    ("rail_idle", [238, 142, 0]),
    ("rail_load", [13, 168, 97]),
    ("startup", [230, 230, 0]),
    ("heap_dump_stack_frame", [128, 128, 128]),
    ("heap_dump_object_type", [0, 0, 255]),
    ("heap_dump_child_node_arrow", [204, 102, 0]),
    ("cq_build_running", [255, 255, 119]),
    ("cq_build_passed", [153, 238, 102]),
    ("cq_build_failed", [238, 136, 136]),
    ("cq_build_abandoned", [187, 187, 187]),
    ("cq_build_attempt_runnig", [222, 222, 75]),
    ("cq_build_attempt_passed", [103, 218, 35]),
    ("cq_build_attempt_failed", [197, 81, 81]),
];

/// The reserved colour name nearest to `rgb` (0xRRGGBB), by squared RGB distance.
pub fn nearest_cname(rgb: u32) -> &'static str {
    let c = [(rgb >> 16) as u8, (rgb >> 8) as u8, rgb as u8];
    CNAMES
        .iter()
        .min_by_key(|(_, v)| {
            (0..3)
                .map(|i| (c[i] as i32 - v[i] as i32).pow(2))
                .sum::<i32>()
        })
        .map(|(n, _)| *n)
        .expect("non-empty table")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_record_is_the_last_key() {
        let text = "{\"x\":\"a\\\"b\"}";
        let mut out = b"{\"traceEvents\":[\n],\"otherData\":{\"converter\":\"c\",".to_vec();
        push_str(&mut out, RECORD_KEY);
        out.push(b':');
        push_str(&mut out, text);
        out.extend_from_slice(b"}}\n");
        assert_eq!(Json::read_record(&out).as_deref(), Some(text));
        out.extend_from_slice(b"{}");
        assert_eq!(Json::read_record(&out), None);
    }

    fn us(ns: i64) -> String {
        let mut b = Vec::new();
        push_us(&mut b, ns);
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn microseconds_keep_nanoseconds() {
        let texts = [1_234_567, 0, 5, 1_000, -1_500, i64::MAX, i64::MIN].map(us);
        assert_eq!(
            texts.join(" "),
            "1234.567 0.000 0.005 1.000 -1.500 9223372036854775.807 -9223372036854775.808"
        );
    }

    #[test]
    fn strings_escape() {
        let mut b = Vec::new();
        push_str(&mut b, "a\"b\\c\nd\u{1}e\u{7f}é\u{fffd}");
        let s = String::from_utf8(b).unwrap();
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\u0001e\u{7f}é\u{fffd}\"");
    }

    #[test]
    fn colours_map_to_nearest_name() {
        let colours = [
            0xFF0000, 0xF44A3F, 0x00FF00, 0x0000FF, 0x000000, 0xFFFFFF, 0x7D7D7D,
        ];
        assert_eq!(
            colours.map(nearest_cname).join(" "),
            "terrible rail_animation cq_build_attempt_passed vsync_highlight_color black white \
             generic_work"
        );
    }
}
