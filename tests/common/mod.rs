//! Shared test support: a Perfetto trace validator and small helpers.
//!
//! [`validate`] decodes a `.pftrace` packet by packet (with the crate's own prost types) and
//! replays it the way Perfetto's trace_processor imports it:
//! - per-sequence incremental state: `SEQ_INCREMENTAL_STATE_CLEARED` starts a new generation of
//!   interned data (event names, categories, debug annotation names and string values) and of
//!   `trace_packet_defaults` (timestamp clock, default track);
//! - clocks: sequence-scoped clock ids 64..=127 are defined by a `ClockSnapshot` on the same
//!   sequence; an incremental one turns each packet timestamp into a delta, converted here to
//!   absolute BOOTTIME nanoseconds;
//! - slices: all track events are sorted by time (stably, file order breaking ties) and BEGIN/END
//!   are matched per track with a stack, as the importer does;
//! - scheduling: ftrace `sched_switch` events (full ones and `compact_sched` arrays) are sorted by
//!   time (stably: file order, a bundle's compact switches before its full events) and replayed
//!   per CPU as trace_processor fills its `sched` table: each switch ends the CPU's running row
//!   with its `prev_state` and starts one for `next_pid`.
//!
//! It checks the rules whose violation the importer punishes silently or with a stat the UI does
//! not show, and reports every violation with the rule it breaks:
//! every TrackEvent packet has a trusted_packet_sequence_id; interned ids are defined on their
//! sequence before use; incremental state is cleared before it is needed; BEGIN/END are balanced
//! per track (so slices nest strictly); delta-encoded timestamps never wrap (non-decreasing);
//! each flow id has exactly one source and one destination, the destination later in time;
//! every track uuid used is described before use, parents before children.
//!
//! The result is a decoded model for assertions: slices and instants with their track, name,
//! category, times, nesting depth, args and flows; track descriptors; flows.

#![allow(dead_code)]

pub mod guard;

use nsys_perfetto_write::proto::{
    DebugAnnotation, TracePacket, TrackDescriptor, TrackEvent, debug_annotation, trace_packet,
    track_descriptor, track_event,
};
use prost::Message;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub type Str = Arc<str>;

// ---------------------------------------------------------------------------------------------
// Rules

pub const R_FRAMING: &str = "a trace is a sequence of well-formed field-1 TracePacket records";
pub const R_SEQUENCE_ID: &str = "every TrackEvent packet has a trusted_packet_sequence_id";
pub const R_INCREMENTAL: &str =
    "a sequence clears its incremental state (SEQ_INCREMENTAL_STATE_CLEARED) before relying on it";
pub const R_INTERNED: &str = "interned ids are defined on their sequence before use";
pub const R_CLOCK: &str =
    "a sequence-scoped clock is defined by a ClockSnapshot on the same sequence before use";
pub const R_DELTA: &str = "timestamps are non-decreasing where delta-encoded (no wrapped delta)";
pub const R_TIMESTAMP: &str = "every TrackEvent has a timestamp that resolves to a time >= 0";
pub const R_TRACK: &str = "every track uuid used is described before use, parents first";
pub const R_NESTING: &str = "BEGIN/END are balanced and strictly nested per track";
pub const R_FLOW: &str =
    "each flow id has exactly one source and one destination, the destination starting later";
pub const R_UTF8: &str = "strings are valid UTF-8";
pub const R_SAMPLE: &str = "every PerfSample names its pid and tid, and its callstack, frames, mappings and names are interned on its sequence";
pub const R_COUNTER: &str = "every counter value has a value, on a track with a CounterDescriptor";
pub const R_EVENT_TYPE: &str = "every TrackEvent has a known type (BEGIN, END, INSTANT, COUNTER)";
pub const R_SCHED: &str = "scheduling (ftrace sched_switch) replays as trace_processor's: each CPU's first switch is a full sched_switch (a compact one is discarded), full switches name the task they switch from, a bundle's compact arrays have equal lengths and comm indices inside its intern table, every thread's time on a CPU ends, prev_state decodes for the kernel release";
pub const R_SCHED_THREAD: &str = "every thread a sched_switch names is described by exactly one ThreadDescriptor with that tid (Perfetto puts it under its process)";

const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;
const BOOTTIME: u32 = 6;

/// One broken rule, with enough detail to find the offending packet.
#[derive(Debug, Clone)]
pub struct Violation {
    pub rule: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[rule: {}] {}", self.rule, self.detail)
    }
}

/// All violations found (the first `MAX_KEPT` in full, the rest counted per rule).
#[derive(Debug, Default)]
pub struct Violations {
    pub kept: Vec<Violation>,
    pub per_rule: BTreeMap<&'static str, u64>,
}

const MAX_KEPT: usize = 40;

impl Violations {
    fn push(&mut self, rule: &'static str, detail: String) {
        *self.per_rule.entry(rule).or_default() += 1;
        if self.kept.len() < MAX_KEPT {
            self.kept.push(Violation { rule, detail });
        }
    }
    pub fn is_empty(&self) -> bool {
        self.per_rule.is_empty()
    }
    pub fn total(&self) -> u64 {
        self.per_rule.values().sum()
    }
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} violation(s) of Perfetto import rules:", self.total())?;
        for (rule, n) in &self.per_rule {
            writeln!(f, "  {n} x {rule}")?;
        }
        writeln!(f, "first {}:", self.kept.len())?;
        for v in &self.kept {
            writeln!(f, "  {v}")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Decoded model

#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Int(i64),
    Uint(u64),
    Double(f64),
    Bool(bool),
    Str(Str),
}

impl Arg {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Arg::Int(v) => Some(*v),
            Arg::Uint(v) => i64::try_from(*v).ok(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Arg::Double(v) => Some(*v),
            Arg::Int(v) => Some(*v as f64),
            Arg::Uint(v) => Some(*v as f64),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Arg::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Int(v) => write!(f, "{v}"),
            Arg::Uint(v) => write!(f, "{v}"),
            Arg::Double(v) => write!(f, "{v}"),
            Arg::Bool(v) => write!(f, "{v}"),
            Arg::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// A slice (BEGIN..END) or an instant (`instant`, `end == start`).
#[derive(Debug, Clone)]
pub struct Slice {
    pub track: u64,
    pub sequence: u32,
    pub name: Str,
    /// Category names joined with ",".
    pub category: Str,
    pub start: i64,
    pub end: i64,
    pub instant: bool,
    /// Nesting depth on its track (0 = top level), as trace_processor computes it.
    pub depth: u32,
    pub args: Vec<(Str, Arg)>,
    /// Flow ids this slice starts (`flow_ids`) and terminates (`terminating_flow_ids`).
    pub flow_out: Vec<u64>,
    pub flow_in: Vec<u64>,
    /// Index of its BEGIN/INSTANT packet in the file.
    pub packet: usize,
}

impl Slice {
    pub fn dur(&self) -> i64 {
        self.end - self.start
    }
    pub fn arg(&self, key: &str) -> Option<&Arg> {
        self.args.iter().find(|(k, _)| &**k == key).map(|(_, v)| v)
    }
    pub fn arg_int(&self, key: &str) -> Option<i64> {
        self.arg(key).and_then(Arg::as_int)
    }
    pub fn arg_str(&self, key: &str) -> Option<&str> {
        self.arg(key).and_then(Arg::as_str)
    }
    pub fn arg_f64(&self, key: &str) -> Option<f64> {
        self.arg(key).and_then(Arg::as_f64)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProcessInfo {
    pub pid: i32,
    pub name: Option<String>,
    /// The packet's `machine_id` (0: the host; a merge puts each report on its own).
    pub machine: u32,
    /// `legacy_sort_index` of its ProcessDescriptor.
    pub sort_index: Option<i32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ThreadInfo {
    pub pid: i32,
    pub tid: i32,
    pub name: Option<String>,
    /// The packet's `machine_id`, as [`ProcessInfo::machine`].
    pub machine: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Track {
    pub uuid: u64,
    pub parent: Option<u64>,
    pub name: Option<String>,
    pub process: Option<ProcessInfo>,
    pub thread: Option<ThreadInfo>,
    pub counter: bool,
    pub child_ordering: Option<i32>,
    pub sibling_order_rank: Option<i32>,
    /// Index of the packet that first described it.
    pub packet: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    pub id: u64,
    /// Indices into [`Trace::slices`].
    pub source: usize,
    pub destination: usize,
}

#[derive(Debug, Default)]
pub struct Trace {
    /// Slices and instants, in the order trace_processor would create them (by start time).
    pub slices: Vec<Slice>,
    /// The "Session start" instant of each source, in trace time. With one source, every other
    /// time is in session time (the marker's time subtracted); with several (a merge: markers
    /// "Session start · LABEL"), times stay in trace time: see [`Trace::session_start`].
    pub session_starts: Vec<Slice>,
    pub tracks: BTreeMap<u64, Track>,
    pub flows: Vec<Flow>,
    pub packets: usize,
    pub sequences: usize,
    pub counter_values: usize,
    /// Counter values in time order per track (session time, like slices).
    pub counters: Vec<CounterPoint>,
    /// Counter tracks: unit and categories from their CounterDescriptor.
    pub counter_tracks: BTreeMap<u64, CounterInfo>,
    /// CPU samples (PerfSample), in file order.
    pub samples: Vec<Sample>,
    /// Rows of trace_processor's `sched` table (idle rows, tid 0, included), by CPU then time,
    /// in session time like slices.
    pub sched: Vec<SchedRow>,
    /// `SystemInfo.utsname.release`, when written (the host's, machine 0, in a merge).
    pub kernel_release: Option<String>,
    /// Per machine (`TracePacket.machine_id`), its `SystemInfo.machine_name`, when written.
    pub machine_names: BTreeMap<u32, String>,
    /// Machines whose root track (uuid 0) asks for explicit process ordering.
    pub explicit_process_order: Vec<u32>,
}

/// One row of trace_processor's `sched` table: a task's time on a CPU, from one sched_switch to
/// the next on that CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedRow {
    /// The machine of the CPU (each numbers its own CPUs; 0 the host).
    pub machine: u32,
    pub cpu: u32,
    pub ts: i64,
    /// `None` while open: the CPU's last row (the idle task after the capture's last thread).
    pub end: Option<i64>,
    /// The task's tid (0: the idle task, "swapper").
    pub tid: i32,
    pub comm: Str,
    pub prio: i32,
    /// How the task left the CPU, as trace_processor decodes `prev_state` ("S", "R+", "X").
    pub end_state: Option<Str>,
}

impl SchedRow {
    pub fn dur(&self) -> Option<i64> {
        self.end.map(|e| e - self.ts)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct CounterPoint {
    pub track: u64,
    pub ts: i64,
    pub value: f64,
    /// Whether it was written as an integer (`counter_value`).
    pub int: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct CounterInfo {
    pub unit: Option<i32>,
    pub unit_name: Option<String>,
    pub categories: Vec<String>,
}

/// A PerfSample with its call stack resolved, leaf first: (function, mapping path).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub machine: u32,
    pub ts: i64,
    pub pid: u32,
    pub tid: u32,
    pub cpu: Option<u32>,
    pub frames: Vec<(Str, Str)>,
}

/// What the replay collects besides slices.
#[derive(Default)]
struct Collected {
    counter_values: usize,
    counters: Vec<CounterPoint>,
    samples: Vec<Sample>,
    counter_tracks: BTreeMap<u64, CounterInfo>,
    switches: Vec<Switch>,
    /// Per machine, (major, minor) of `SystemInfo.utsname.release`, and the release itself.
    kernel: BTreeMap<u32, ((u32, u32), String)>,
    machine_names: BTreeMap<u32, String>,
    explicit_process_order: Vec<u32>,
}

/// One sched_switch as the importer tokenizes it.
struct Switch {
    packet: usize,
    machine: u32,
    cpu: u32,
    ts: i64,
    /// A full `sched_switch` names the task it switches from; a compact one does not.
    prev_pid: Option<i32>,
    prev_state: i64,
    next_pid: i32,
    next_comm: Str,
    next_prio: i32,
}

impl Trace {
    pub fn instants(&self) -> impl Iterator<Item = &Slice> {
        self.slices.iter().filter(|s| s.instant)
    }
    pub fn ranges(&self) -> impl Iterator<Item = &Slice> {
        self.slices.iter().filter(|s| !s.instant)
    }
    pub fn of_category<'a>(&'a self, cat: &'a str) -> impl Iterator<Item = &'a Slice> + 'a {
        self.slices.iter().filter(move |s| &*s.category == cat)
    }
    /// Slices and instants by category, with counter values (by their track's category) and
    /// CPU samples ("cpu.sample").
    pub fn count_by_category(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for s in &self.slices {
            *m.entry(s.category.to_string()).or_default() += 1;
        }
        for c in &self.counters {
            let cat = self
                .counter_tracks
                .get(&c.track)
                .and_then(|i| i.categories.first().cloned())
                .unwrap_or_default();
            *m.entry(cat).or_default() += 1;
        }
        if !self.samples.is_empty() {
            *m.entry("cpu.sample".to_string()).or_default() += self.samples.len() as u64;
        }
        // Scheduling written as Perfetto's own: a thread's time on a CPU is a `sched` row.
        let threads_on_cpus = self.sched_rows().count() as u64;
        if threads_on_cpus > 0 {
            *m.entry("sched".to_string()).or_default() += threads_on_cpus;
        }
        m
    }

    /// `sched` rows of threads (the idle task's rows left out).
    pub fn sched_rows(&self) -> impl Iterator<Item = &SchedRow> {
        self.sched.iter().filter(|r| r.tid != 0)
    }

    /// The thread descriptor of a tid that a sched_switch names.
    pub fn thread_with_tid(&self, tid: i32) -> Option<&ThreadInfo> {
        self.tracks
            .values()
            .filter_map(|t| t.thread.as_ref())
            .find(|th| th.tid == tid)
    }

    /// The thread descriptor of a tid on a machine (a merge: each report is one).
    pub fn thread_on(&self, machine: u32, tid: i32) -> Option<&ThreadInfo> {
        self.tracks
            .values()
            .filter_map(|t| t.thread.as_ref())
            .find(|th| th.tid == tid && th.machine == machine)
    }

    /// Counter values of the counter track named `name` under the track `parent`.
    pub fn counter_values(&self, parent: u64, name: &str) -> Vec<&CounterPoint> {
        let Some(track) = self
            .tracks
            .values()
            .find(|t| t.counter && t.parent == Some(parent) && t.name.as_deref() == Some(name))
        else {
            return Vec::new();
        };
        self.counters
            .iter()
            .filter(|c| c.track == track.uuid)
            .collect()
    }
    pub fn track(&self, uuid: u64) -> &Track {
        self.tracks
            .get(&uuid)
            .unwrap_or_else(|| panic!("track {uuid} not described"))
    }
    pub fn track_name(&self, uuid: u64) -> String {
        let t = self.track(uuid);
        if let Some(n) = &t.name {
            return n.clone();
        }
        if let Some(th) = &t.thread {
            return th.name.clone().unwrap_or_default();
        }
        if let Some(p) = &t.process {
            return p.name.clone().unwrap_or_default();
        }
        String::new()
    }
    /// The track and its ancestors, innermost first.
    pub fn ancestry(&self, uuid: u64) -> Vec<&Track> {
        let mut out = Vec::new();
        let mut cur = Some(uuid);
        while let Some(u) = cur {
            let t = self.track(u);
            out.push(t);
            cur = t.parent;
            assert!(out.len() < 64, "track parent chain too long at {uuid}");
        }
        out
    }
    /// The nearest thread track at or above `uuid`.
    pub fn thread_of(&self, uuid: u64) -> Option<&ThreadInfo> {
        self.ancestry(uuid)
            .into_iter()
            .find_map(|t| t.thread.as_ref())
    }
    /// The nearest process track at or above `uuid`.
    pub fn process_of(&self, uuid: u64) -> Option<&ProcessInfo> {
        self.ancestry(uuid)
            .into_iter()
            .find_map(|t| t.process.as_ref())
    }
    /// The pid a track belongs to: from its thread or process ancestor.
    pub fn pid_of(&self, uuid: u64) -> Option<i32> {
        self.ancestry(uuid).into_iter().find_map(|t| {
            t.thread
                .as_ref()
                .map(|th| th.pid)
                .or(t.process.as_ref().map(|p| p.pid))
        })
    }
    pub fn children(&self, uuid: u64) -> Vec<&Track> {
        self.tracks
            .values()
            .filter(|t| t.parent == Some(uuid))
            .collect()
    }
    pub fn process_tracks(&self) -> impl Iterator<Item = &Track> {
        self.tracks.values().filter(|t| t.process.is_some())
    }
    pub fn thread_tracks(&self) -> impl Iterator<Item = &Track> {
        self.tracks.values().filter(|t| t.thread.is_some())
    }
    /// Trace time of the session start of the merged source labelled `label` (its marker is
    /// "Session start · LABEL"); a missing label panics.
    pub fn session_start(&self, label: &str) -> i64 {
        let name = format!("Session start · {label}");
        self.session_starts
            .iter()
            .find(|s| *s.name == *name)
            .unwrap_or_else(|| panic!("no marker '{name}'"))
            .start
    }
    /// The flow ending at slice `i`, if any.
    pub fn flow_into(&self, i: usize) -> Option<&Flow> {
        self.flows.iter().find(|f| f.destination == i)
    }
}

// ---------------------------------------------------------------------------------------------
// Replay

#[derive(Default)]
struct Interned {
    names: HashMap<u64, Str>,
    categories: HashMap<u64, Str>,
    arg_names: HashMap<u64, Str>,
    string_values: HashMap<u64, Str>,
    function_names: HashMap<u64, Str>,
    mapping_paths: HashMap<u64, Str>,
    /// Mapping iid -> its path component iids.
    mappings: HashMap<u64, Vec<u64>>,
    /// Frame iid -> (function name iid, mapping iid).
    frames: HashMap<u64, (u64, u64)>,
    /// Callstack iid -> frame iids, root first.
    callstacks: HashMap<u64, Vec<u64>>,
}

struct SeqClock {
    incremental: bool,
    unit: u64,
    /// The clock's current value (for incremental clocks, the last absolute value).
    value: u64,
    /// (clock value, BOOTTIME value) at the snapshot.
    snapshot: (u64, u64),
}

#[derive(Default)]
struct SeqState {
    /// Whether SEQ_INCREMENTAL_STATE_CLEARED was seen.
    valid: bool,
    interned: Interned,
    default_clock: Option<u32>,
    default_track: Option<u64>,
    clocks: HashMap<u32, SeqClock>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Begin,
    End,
    Instant,
}

struct RawEvent {
    packet: usize,
    ts: i64,
    track: u64,
    kind: Kind,
    /// For BEGIN/INSTANT: the slice as far as known (end filled at its END).
    slice: Option<Slice>,
    /// Flows and args carried by an END (bound to the slice it closes).
    end_flows: (Vec<u64>, Vec<u64>),
    end_args: Vec<(Str, Arg)>,
}

/// Validate a file; panics with every violation (and the rule broken) when there is one.
pub fn validate_file(path: &Path) -> Trace {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    match validate(&bytes) {
        Ok(t) => t,
        Err(v) => panic!("{}: {v}", path.display()),
    }
}

/// Decode and check a trace; the decoded model, or every violation found.
pub fn validate(bytes: &[u8]) -> Result<Trace, Violations> {
    let mut v = Violations::default();
    let mut seqs: HashMap<(u32, u32), SeqState> = HashMap::new();
    let mut tracks: BTreeMap<u64, Track> = BTreeMap::new();
    let mut raw: Vec<RawEvent> = Vec::new();
    let mut collected = Collected::default();
    let mut pos = 0usize;
    let mut index = 0usize;

    while pos < bytes.len() {
        let at = pos;
        let tag = bytes[pos];
        pos += 1;
        if tag != 0x0A {
            v.push(
                R_FRAMING,
                format!("byte {at}: tag 0x{tag:02x} where a TracePacket (0x0a) was expected"),
            );
            break;
        }
        let Some((len, n)) = varint(&bytes[pos..]) else {
            v.push(
                R_FRAMING,
                format!("byte {at}: packet length varint cut off"),
            );
            break;
        };
        pos += n;
        let len = len as usize;
        if bytes.len() - pos < len {
            v.push(
                R_FRAMING,
                format!(
                    "byte {at}: packet #{index} of {len} bytes cut off after {} bytes (file truncated mid-packet)",
                    bytes.len() - pos
                ),
            );
            break;
        }
        let body = &bytes[pos..pos + len];
        pos += len;
        let packet = match TracePacket::decode(body) {
            Ok(p) => p,
            Err(e) => {
                v.push(
                    R_FRAMING,
                    format!("byte {at}: packet #{index} does not decode ({e}); invalid UTF-8 in a string field also lands here"),
                );
                index += 1;
                continue;
            }
        };
        raw_extras(body, packet.machine_id.unwrap_or(0), &mut collected);
        replay_packet(
            index,
            packet,
            &mut seqs,
            &mut tracks,
            &mut raw,
            &mut collected,
            &mut v,
        );
        index += 1;
    }

    let mut slices = match_slices(raw, &tracks, &mut v);
    // The "Session start" markers (category "session") stand at each source's time zero: kept
    // apart, and every other time is read back in session time, as nsys shows it, by
    // subtracting the first marker's time (the trace shifts a source with rows before its start).
    let session_starts: Vec<Slice> = slices
        .iter()
        .filter(|s| &*s.category == "session")
        .cloned()
        .collect();
    slices.retain(|s| &*s.category != "session");
    // Several markers: one per merged source, each named after its source, never twice.
    if session_starts.len() > 1 {
        let mut names: Vec<&str> = session_starts.iter().map(|s| &*s.name).collect();
        names.sort_unstable();
        for w in names.windows(2) {
            if w[0] == w[1] || !w[0].starts_with("Session start · ") {
                v.push(
                    R_TRACK,
                    format!(
                        "session markers of a merge must name distinct sources: '{}'",
                        w[0]
                    ),
                );
            }
        }
    }
    let zero = session_starts.first().map_or(0, |s| s.start);
    if zero != 0 && session_starts.len() == 1 {
        for s in &mut slices {
            s.start -= zero;
            s.end -= zero;
        }
        for c in &mut collected.counters {
            c.ts -= zero;
        }
        for s in &mut collected.samples {
            s.ts -= zero;
        }
        for s in &mut collected.switches {
            s.ts -= zero;
        }
    }
    let flows = match_flows(&slices, &mut v);
    let kernel_version: BTreeMap<u32, (u32, u32)> =
        collected.kernel.iter().map(|(m, k)| (*m, k.0)).collect();
    let sched = replay_sched(
        std::mem::take(&mut collected.switches),
        &kernel_version,
        &tracks,
        &mut v,
    );
    if !v.is_empty() {
        return Err(v);
    }
    Ok(Trace {
        slices,
        session_starts,
        tracks,
        flows,
        packets: index,
        sequences: seqs.len(),
        counter_values: collected.counter_values,
        counters: collected.counters,
        counter_tracks: collected.counter_tracks,
        samples: collected.samples,
        sched,
        kernel_release: collected.kernel.remove(&0).map(|k| k.1),
        machine_names: collected.machine_names,
        explicit_process_order: collected.explicit_process_order,
    })
}

/// A raw field's value: a varint, or a length-delimited body.
#[derive(PartialEq)]
enum RawValue<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

/// The fields of a message: (number, value), in order, fixed-size ones left out; `None` where
/// it does not parse (the prost decode reports that).
fn raw_fields(mut b: &[u8]) -> Option<Vec<(u64, RawValue<'_>)>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let (key, n) = varint(b)?;
        b = &b[n..];
        match key & 7 {
            0 => {
                let (x, n) = varint(b)?;
                b = &b[n..];
                out.push((key >> 3, RawValue::Int(x)));
            }
            1 => b = b.get(8..)?,
            5 => b = b.get(4..)?,
            2 => {
                let (len, n) = varint(b)?;
                let body = b.get(n..n + len as usize)?;
                b = &b[n + len as usize..];
                out.push((key >> 3, RawValue::Bytes(body)));
            }
            _ => return None,
        }
    }
    Some(out)
}

/// What a packet holds in fields newer than the crate's schema (prost drops them):
/// `SystemInfo.machine_name` (17) and the root track's `process_ordering` (19).
fn raw_extras(packet: &[u8], machine: u32, collected: &mut Collected) {
    let Some(fields) = raw_fields(packet) else {
        return;
    };
    for (number, value) in fields {
        let RawValue::Bytes(body) = value else {
            continue;
        };
        let Some(inner) = raw_fields(body) else {
            continue;
        };
        match number {
            45 => {
                for (n, v) in &inner {
                    if let (17, RawValue::Bytes(name)) = (n, v) {
                        collected
                            .machine_names
                            .insert(machine, String::from_utf8_lossy(name).into_owned());
                    }
                }
            }
            60 if inner.contains(&(1, RawValue::Int(0)))
                && inner.contains(&(19, RawValue::Int(1))) =>
            {
                collected.explicit_process_order.push(machine);
            }
            _ => {}
        }
    }
}

fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut out = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        out |= u64::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((out, i + 1));
        }
    }
    None
}

fn seq_id_of(p: &TracePacket) -> Option<u32> {
    p.optional_trusted_packet_sequence_id
        .map(|trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(id)| id)
}

fn replay_packet(
    index: usize,
    packet: TracePacket,
    seqs: &mut HashMap<(u32, u32), SeqState>,
    tracks: &mut BTreeMap<u64, Track>,
    raw: &mut Vec<RawEvent>,
    collected: &mut Collected,
    v: &mut Violations,
) {
    let seq_id = seq_id_of(&packet);
    let is_track_event = matches!(packet.data, Some(trace_packet::Data::TrackEvent(_)));
    if is_track_event && seq_id.is_none() {
        v.push(
            R_SEQUENCE_ID,
            format!("packet #{index}: TrackEvent without trusted_packet_sequence_id (dropped by the importer)"),
        );
        return;
    }
    let sid = seq_id.unwrap_or(0);
    // Each machine (a merged report) has sequences of its own, as trace_processor reads them.
    let machine = packet.machine_id.unwrap_or(0);
    let state = seqs.entry((machine, sid)).or_default();
    let flags = packet.sequence_flags.unwrap_or(0);
    if flags & SEQ_INCREMENTAL_STATE_CLEARED != 0 || packet.incremental_state_cleared == Some(true)
    {
        state.valid = true;
        state.interned = Interned::default();
        state.default_clock = None;
        state.default_track = None;
    }
    if flags & SEQ_NEEDS_INCREMENTAL_STATE != 0 && !state.valid {
        v.push(
            R_INCREMENTAL,
            format!("packet #{index} on sequence {sid}: SEQ_NEEDS_INCREMENTAL_STATE but the sequence never cleared its state (the importer drops it)"),
        );
        return;
    }
    if let Some(interned) = &packet.interned_data {
        if !state.valid {
            v.push(
                R_INCREMENTAL,
                format!("packet #{index} on sequence {sid}: interned_data on a sequence whose incremental state was never cleared"),
            );
        }
        let i = &mut state.interned;
        for e in &interned.event_names {
            define(
                &mut i.names,
                e.iid,
                e.name.as_deref(),
                "event_names",
                index,
                sid,
                v,
            );
        }
        for e in &interned.event_categories {
            define(
                &mut i.categories,
                e.iid,
                e.name.as_deref(),
                "event_categories",
                index,
                sid,
                v,
            );
        }
        for e in &interned.debug_annotation_names {
            define(
                &mut i.arg_names,
                e.iid,
                e.name.as_deref(),
                "debug_annotation_names",
                index,
                sid,
                v,
            );
        }
        for e in &interned.debug_annotation_string_values {
            let s = e.str.as_deref().map(|b| match std::str::from_utf8(b) {
                Ok(s) => s.to_string(),
                Err(_) => {
                    v.push(
                        R_UTF8,
                        format!("packet #{index} on sequence {sid}: interned debug_annotation_string_values iid {:?} is not UTF-8: {:?}", e.iid, String::from_utf8_lossy(b)),
                    );
                    String::from_utf8_lossy(b).into_owned()
                }
            });
            define(
                &mut i.string_values,
                e.iid,
                s.as_deref(),
                "debug_annotation_string_values",
                index,
                sid,
                v,
            );
        }
    }
    if let Some(interned) = &packet.interned_data {
        let i = &mut state.interned;
        for (what, list, map) in [
            (
                "function_names",
                &interned.function_names,
                &mut i.function_names,
            ),
            (
                "mapping_paths",
                &interned.mapping_paths,
                &mut i.mapping_paths,
            ),
        ] {
            for e in list {
                let s = e.str.as_deref().map(|b| match std::str::from_utf8(b) {
                    Ok(s) => s.to_string(),
                    Err(_) => {
                        v.push(
                            R_UTF8,
                            format!("packet #{index} on sequence {sid}: interned {what} iid {:?} is not UTF-8", e.iid),
                        );
                        String::from_utf8_lossy(b).into_owned()
                    }
                });
                define(map, e.iid, s.as_deref(), what, index, sid, v);
            }
        }
        for m in &interned.mappings {
            let iid = m.iid.unwrap_or(0);
            if iid == 0 || i.mappings.insert(iid, m.path_string_ids.clone()).is_some() {
                v.push(
                    R_INTERNED,
                    format!(
                        "packet #{index} on sequence {sid}: mapping iid {iid} zero or defined twice"
                    ),
                );
            }
        }
        for f in &interned.frames {
            let iid = f.iid.unwrap_or(0);
            let entry = (f.function_name_id.unwrap_or(0), f.mapping_id.unwrap_or(0));
            if iid == 0 || i.frames.insert(iid, entry).is_some() {
                v.push(
                    R_INTERNED,
                    format!(
                        "packet #{index} on sequence {sid}: frame iid {iid} zero or defined twice"
                    ),
                );
            }
        }
        for c in &interned.callstacks {
            let iid = c.iid.unwrap_or(0);
            if iid == 0 || i.callstacks.insert(iid, c.frame_ids.clone()).is_some() {
                v.push(R_INTERNED, format!("packet #{index} on sequence {sid}: callstack iid {iid} zero or defined twice"));
            }
        }
    }
    if let Some(d) = &packet.trace_packet_defaults {
        state.default_clock = d.timestamp_clock_id;
        state.default_track = d.track_event_defaults.as_ref().and_then(|t| t.track_uuid);
    }

    match packet.data {
        Some(trace_packet::Data::ClockSnapshot(cs)) => {
            let boot = cs
                .clocks
                .iter()
                .find(|c| c.clock_id == Some(BOOTTIME))
                .and_then(|c| c.timestamp);
            for c in &cs.clocks {
                let Some(id) = c.clock_id else {
                    v.push(
                        R_CLOCK,
                        format!("packet #{index}: ClockSnapshot clock without clock_id"),
                    );
                    continue;
                };
                if (64..=127).contains(&id) {
                    if seq_id.is_none() {
                        v.push(R_CLOCK, format!("packet #{index}: sequence-scoped clock {id} in a snapshot without a sequence id"));
                        continue;
                    }
                    let Some(boot) = boot else {
                        v.push(R_CLOCK, format!("packet #{index} on sequence {sid}: snapshot of clock {id} has no BOOTTIME clock to relate it to (validator supports BOOTTIME as the trace clock)"));
                        continue;
                    };
                    let value = c.timestamp.unwrap_or(0);
                    state.clocks.insert(
                        id,
                        SeqClock {
                            incremental: c.is_incremental.unwrap_or(false),
                            unit: c.unit_multiplier_ns.unwrap_or(1).max(1),
                            value,
                            snapshot: (value, boot),
                        },
                    );
                }
            }
        }
        Some(trace_packet::Data::TrackDescriptor(td)) => {
            if let (Some(uuid), Some(c)) = (td.uuid, &td.counter) {
                collected.counter_tracks.insert(
                    uuid,
                    CounterInfo {
                        unit: c.unit,
                        unit_name: c.unit_name.clone(),
                        categories: c.categories.clone(),
                    },
                );
            }
            describe(index, machine, td, tracks, v)
        }
        Some(trace_packet::Data::PerfSample(ps)) => {
            if !state.valid {
                v.push(R_INCREMENTAL, format!("packet #{index} on sequence {sid}: PerfSample on a sequence whose incremental state was never cleared"));
                return;
            }
            let Some(ts) = resolve_ts(
                index,
                sid,
                &packet.timestamp,
                packet.timestamp_clock_id,
                state,
                v,
            ) else {
                return;
            };
            let (Some(pid), Some(tid)) = (ps.pid, ps.tid) else {
                v.push(
                    R_SAMPLE,
                    format!("packet #{index}: PerfSample without pid or tid"),
                );
                return;
            };
            let i = &state.interned;
            let mut frames = Vec::new();
            if let Some(cs) = ps.callstack_iid {
                match i.callstacks.get(&cs) {
                    None => v.push(
                        R_SAMPLE,
                        format!(
                            "packet #{index} on sequence {sid}: callstack iid {cs} not defined"
                        ),
                    ),
                    Some(ids) => {
                        for fid in ids.iter().rev() {
                            let Some(&(func, map)) = i.frames.get(fid) else {
                                v.push(R_SAMPLE, format!("packet #{index} on sequence {sid}: frame iid {fid} not defined"));
                                continue;
                            };
                            let name = i.function_names.get(&func).cloned();
                            let path = i.mappings.get(&map).map(|parts| {
                                parts
                                    .iter()
                                    .map(|p| i.mapping_paths.get(p).map(|s| s.to_string()))
                                    .collect::<Option<Vec<_>>>()
                            });
                            match (name, path) {
                                (Some(n), Some(Some(p))) => frames.push((n, Str::from(p.join("/").as_str()))),
                                _ => v.push(R_SAMPLE, format!("packet #{index} on sequence {sid}: frame {fid}'s function {func} or mapping {map} (or its path) not defined")),
                            }
                        }
                    }
                }
            }
            collected.samples.push(Sample {
                machine,
                ts,
                pid,
                tid,
                cpu: ps.cpu,
                frames,
            });
        }
        Some(trace_packet::Data::TrackEvent(te)) => {
            let Some(ts) = resolve_ts(
                index,
                sid,
                &packet.timestamp,
                packet.timestamp_clock_id,
                state,
                v,
            ) else {
                return;
            };
            let track = te.track_uuid.or(state.default_track);
            let Some(track) = track else {
                v.push(R_TRACK, format!("packet #{index} on sequence {sid}: TrackEvent with no track_uuid and no default track"));
                return;
            };
            if !tracks.contains_key(&track) {
                v.push(R_TRACK, format!("packet #{index} on sequence {sid}: TrackEvent at {ts} on track uuid {track}, which no earlier TrackDescriptor described"));
                return;
            }
            let kind = match te.r#type.and_then(|t| track_event::Type::try_from(t).ok()) {
                Some(track_event::Type::SliceBegin) => Kind::Begin,
                Some(track_event::Type::SliceEnd) => Kind::End,
                Some(track_event::Type::Instant) => Kind::Instant,
                Some(track_event::Type::Counter) => {
                    if !tracks[&track].counter {
                        v.push(R_TRACK, format!("packet #{index}: COUNTER event on track {track} which has no CounterDescriptor"));
                    }
                    collected.counter_values += 1;
                    use nsys_perfetto_write::proto::track_event::CounterValueField;
                    let (value, int) = match te.counter_value_field {
                        Some(CounterValueField::CounterValue(x)) => (x as f64, true),
                        Some(CounterValueField::DoubleCounterValue(x)) => (x, false),
                        None => {
                            v.push(
                                R_COUNTER,
                                format!("packet #{index}: COUNTER event without a value"),
                            );
                            return;
                        }
                    };
                    collected.counters.push(CounterPoint {
                        track,
                        ts,
                        value,
                        int,
                    });
                    return;
                }
                _ => {
                    v.push(
                        R_EVENT_TYPE,
                        format!(
                            "packet #{index} on sequence {sid}: TrackEvent type {:?}",
                            te.r#type
                        ),
                    );
                    return;
                }
            };
            let (args, flow_out, flow_in) = event_payload(index, sid, &te, &state.interned, v);
            if kind == Kind::End {
                raw.push(RawEvent {
                    packet: index,
                    ts,
                    track,
                    kind,
                    slice: None,
                    end_flows: (flow_out, flow_in),
                    end_args: args,
                });
                return;
            }
            let name: Str = match &te.name_field {
                Some(track_event::NameField::NameIid(iid)) => match state.interned.names.get(iid) {
                    Some(n) => n.clone(),
                    None => {
                        v.push(R_INTERNED, format!("packet #{index} on sequence {sid}: name_iid {iid} not defined on the sequence"));
                        Str::from("")
                    }
                },
                Some(track_event::NameField::Name(n)) => Str::from(n.as_str()),
                None => Str::from(""),
            };
            let mut cats: Vec<Str> = Vec::new();
            for iid in &te.category_iids {
                match state.interned.categories.get(iid) {
                    Some(c) => cats.push(c.clone()),
                    None => v.push(R_INTERNED, format!("packet #{index} on sequence {sid}: category iid {iid} not defined on the sequence")),
                }
            }
            cats.extend(te.categories.iter().map(|c| Str::from(c.as_str())));
            let category: Str = if cats.len() == 1 {
                cats.pop().unwrap()
            } else {
                Str::from(cats.iter().map(|c| &**c).collect::<Vec<_>>().join(","))
            };
            raw.push(RawEvent {
                packet: index,
                ts,
                track,
                kind,
                slice: Some(Slice {
                    track,
                    sequence: sid,
                    name,
                    category,
                    start: ts,
                    end: ts,
                    instant: kind == Kind::Instant,
                    depth: 0,
                    args,
                    flow_out,
                    flow_in,
                    packet: index,
                }),
                end_flows: (Vec::new(), Vec::new()),
                end_args: Vec::new(),
            });
        }
        Some(trace_packet::Data::SystemInfo(si)) => {
            let release = si.utsname.as_ref().and_then(|u| {
                (u.sysname.as_deref() == Some("Linux")).then_some(u.release.clone())?
            });
            if let Some(r) = release {
                let mut parts = r.split('.');
                let major = parts.next().and_then(|p| p.parse().ok());
                let minor = parts.next().and_then(|p| p.parse().ok());
                match (major, minor) {
                    (Some(a), Some(b)) => {
                        collected.kernel.insert(machine, ((a, b), r));
                    }
                    _ => v.push(
                        R_SCHED,
                        format!("packet #{index}: SystemInfo release {r:?} is not MAJOR.MINOR"),
                    ),
                }
            }
        }
        Some(trace_packet::Data::FtraceEvents(bundle)) => {
            collect_switches(index, machine, &bundle, &mut collected.switches, v);
        }
        None => {}
    }
}

/// The sched_switch events of one bundle, in the order the importer pushes them: the compact
/// ones first, then the full ones.
fn collect_switches(
    index: usize,
    machine: u32,
    bundle: &nsys_perfetto_write::proto::FtraceEventBundle,
    out: &mut Vec<Switch>,
    v: &mut Violations,
) {
    let Some(cpu) = bundle.cpu else {
        v.push(
            R_SCHED,
            format!("packet #{index}: FtraceEventBundle without cpu"),
        );
        return;
    };
    if cpu >= 1024 {
        v.push(
            R_SCHED,
            format!("packet #{index}: CPU {cpu}: trace_processor refuses CPUs from 1024"),
        );
        return;
    }
    if let Some(c) = &bundle.compact_sched {
        let n = c.switch_timestamp.len();
        if [
            c.switch_prev_state.len(),
            c.switch_next_pid.len(),
            c.switch_next_prio.len(),
            c.switch_next_comm_index.len(),
        ]
        .iter()
        .any(|&l| l != n)
        {
            v.push(
                R_SCHED,
                format!("packet #{index}: compact_sched arrays of different lengths"),
            );
            return;
        }
        let mut ts: u64 = 0;
        for i in 0..n {
            ts = ts.wrapping_add(c.switch_timestamp[i]);
            let comm = match c.intern_table.get(c.switch_next_comm_index[i] as usize) {
                Some(s) => Str::from(s.as_str()),
                None => {
                    v.push(
                        R_SCHED,
                        format!(
                            "packet #{index}: comm index {} outside the intern table ({} strings)",
                            c.switch_next_comm_index[i],
                            c.intern_table.len()
                        ),
                    );
                    return;
                }
            };
            out.push(Switch {
                packet: index,
                machine,
                cpu,
                ts: ts as i64,
                prev_pid: None,
                prev_state: c.switch_prev_state[i],
                next_pid: c.switch_next_pid[i],
                next_comm: comm,
                next_prio: c.switch_next_prio[i],
            });
        }
    }
    use nsys_perfetto_write::proto::ftrace_event::Event;
    for e in &bundle.event {
        let Some(Event::SchedSwitch(s)) = &e.event else {
            continue;
        };
        out.push(Switch {
            packet: index,
            machine,
            cpu,
            ts: e.timestamp.unwrap_or(0) as i64,
            prev_pid: Some(s.prev_pid.unwrap_or(0)),
            prev_state: s.prev_state.unwrap_or(0),
            next_pid: s.next_pid.unwrap_or(0),
            next_comm: Str::from(s.next_comm.as_deref().unwrap_or("")),
            next_prio: s.next_prio.unwrap_or(0),
        });
    }
}

/// `prev_state` as trace_processor's TaskState decodes it for a kernel (4.4 when the trace
/// names none), for the states a converter writes; `None` where it would not decode.
pub fn decode_prev_state(raw: i64, kernel: Option<(u32, u32)>) -> Option<&'static str> {
    let version = kernel.unwrap_or((4, 4));
    let preempted = if version >= (4, 14) {
        0x100
    } else if version >= (4, 8) {
        0x1000
    } else {
        0x800
    };
    Some(match raw {
        0 => "R",
        r if r == preempted => "R+",
        1 => "S",
        2 => "D",
        4 => "T",
        0x10 => "X",
        0x20 => "Z",
        _ => return None,
    })
}

/// Replay the switches per CPU, as trace_processor fills `sched`.
fn replay_sched(
    mut switches: Vec<Switch>,
    kernels: &BTreeMap<u32, (u32, u32)>,
    tracks: &BTreeMap<u64, Track>,
    v: &mut Violations,
) -> Vec<SchedRow> {
    // Stable: file order (then a bundle's compact switches before its full ones) breaks ties.
    switches.sort_by_key(|s| s.ts);
    let mut rows: Vec<SchedRow> = Vec::new();
    // (machine, CPU) -> index of its open row.
    let mut open: HashMap<(u32, u32), usize> = HashMap::new();
    for s in switches {
        let kernel = kernels.get(&s.machine).copied();
        match (open.get(&(s.machine, s.cpu)).copied(), s.prev_pid) {
            (None, None) => {
                v.push(
                    R_SCHED,
                    format!(
                        "packet #{}: the first switch of CPU {} (at {}) is a compact one: the importer discards it (compact_sched_switch_skipped)",
                        s.packet, s.cpu, s.ts
                    ),
                );
                continue;
            }
            (Some(i), prev) => {
                if let Some(p) = prev
                    && p != rows[i].tid
                {
                    v.push(R_SCHED, format!("packet #{}: full sched_switch on CPU {} from pid {p}, but {} was running (mismatched_sched_switch_tids)", s.packet, s.cpu, rows[i].tid));
                }
                let state = decode_prev_state(s.prev_state, kernel);
                if state.is_none() {
                    v.push(
                        R_SCHED,
                        format!(
                            "packet #{}: prev_state {:#x} does not decode for kernel {kernel:?} (task_state_invalid)",
                            s.packet, s.prev_state
                        ),
                    );
                }
                rows[i].end = Some(s.ts);
                rows[i].end_state = state.map(Str::from);
            }
            (None, Some(_)) => {}
        }
        open.insert((s.machine, s.cpu), rows.len());
        rows.push(SchedRow {
            machine: s.machine,
            cpu: s.cpu,
            ts: s.ts,
            end: None,
            tid: s.next_pid,
            comm: s.next_comm,
            prio: s.next_prio,
            end_state: None,
        });
    }
    let mut described: HashMap<(u32, i32), Vec<(i32, i32)>> = HashMap::new();
    for th in tracks.values().filter_map(|t| t.thread.as_ref()) {
        let e = described.entry((th.machine, th.tid)).or_default();
        if !e.contains(&(th.pid, th.tid)) {
            e.push((th.pid, th.tid));
        }
    }
    let mut checked: HashMap<(u32, i32), ()> = HashMap::new();
    for r in rows.iter().filter(|r| r.tid != 0) {
        if r.end.is_none() {
            v.push(
                R_SCHED,
                format!(
                    "thread {} on CPU {} from {}: no later switch ends its time there",
                    r.tid, r.cpu, r.ts
                ),
            );
        }
        if checked.insert((r.machine, r.tid), ()).is_none() {
            match described.get(&(r.machine, r.tid)).map(Vec::len) {
                Some(1) => {}
                n => v.push(
                    R_SCHED_THREAD,
                    format!(
                        "tid {} ({}) has {} thread descriptors",
                        r.tid,
                        r.comm,
                        n.unwrap_or(0)
                    ),
                ),
            }
        }
    }
    rows.sort_by_key(|r| (r.machine, r.cpu, r.ts));
    rows
}

fn define(
    map: &mut HashMap<u64, Str>,
    iid: Option<u64>,
    value: Option<&str>,
    what: &str,
    index: usize,
    sid: u32,
    v: &mut Violations,
) {
    let Some(iid) = iid.filter(|i| *i != 0) else {
        v.push(
            R_INTERNED,
            format!("packet #{index} on sequence {sid}: {what} entry without a non-zero iid"),
        );
        return;
    };
    let value = value.unwrap_or("");
    match map.get(&iid) {
        Some(old) if &**old != value => v.push(
            R_INTERNED,
            format!("packet #{index} on sequence {sid}: {what} iid {iid} redefined from {old:?} to {value:?} in one generation"),
        ),
        Some(_) => {}
        None => {
            map.insert(iid, Str::from(value));
        }
    }
}

fn resolve_ts(
    index: usize,
    sid: u32,
    timestamp: &Option<u64>,
    packet_clock: Option<u32>,
    state: &mut SeqState,
    v: &mut Violations,
) -> Option<i64> {
    let Some(raw) = *timestamp else {
        v.push(
            R_TIMESTAMP,
            format!("packet #{index} on sequence {sid}: TrackEvent without timestamp"),
        );
        return None;
    };
    let clock = packet_clock.or(state.default_clock).unwrap_or(BOOTTIME);
    let abs: i128 = if (64..=127).contains(&clock) {
        let Some(c) = state.clocks.get_mut(&clock) else {
            v.push(R_CLOCK, format!("packet #{index} on sequence {sid}: timestamp on clock {clock}, which no ClockSnapshot on this sequence defined"));
            return None;
        };
        let value = if c.incremental {
            if raw > (i64::MAX as u64) / 2 {
                v.push(R_DELTA, format!("packet #{index} on sequence {sid}: delta timestamp {raw} is a negative delta cast to unsigned (time goes backwards)"));
                return None;
            }
            c.value = c.value.wrapping_add(raw.wrapping_mul(c.unit));
            c.value
        } else {
            raw.wrapping_mul(c.unit)
        };
        i128::from(c.snapshot.1) + (i128::from(value) - i128::from(c.snapshot.0))
    } else if clock == BOOTTIME {
        i128::from(raw)
    } else {
        v.push(R_CLOCK, format!("packet #{index} on sequence {sid}: timestamp on global clock {clock}; the validator only resolves BOOTTIME and sequence-scoped clocks"));
        return None;
    };
    if abs < 0 || abs > i128::from(i64::MAX) {
        v.push(
            R_TIMESTAMP,
            format!("packet #{index} on sequence {sid}: timestamp resolves to {abs}"),
        );
        return None;
    }
    Some(abs as i64)
}

#[allow(deprecated)] // flow_ids_old / terminating_flow_ids_old: varint forms the importer reads
fn event_payload(
    index: usize,
    sid: u32,
    te: &TrackEvent,
    interned: &Interned,
    v: &mut Violations,
) -> (Vec<(Str, Arg)>, Vec<u64>, Vec<u64>) {
    let mut args = Vec::with_capacity(te.debug_annotations.len());
    for a in &te.debug_annotations {
        args.push(annotation(index, sid, a, interned, v));
    }
    let mut out: Vec<u64> = te.flow_ids.clone();
    out.extend_from_slice(&te.flow_ids_old);
    let mut inn: Vec<u64> = te.terminating_flow_ids.clone();
    inn.extend_from_slice(&te.terminating_flow_ids_old);
    (args, out, inn)
}

fn annotation(
    index: usize,
    sid: u32,
    a: &DebugAnnotation,
    interned: &Interned,
    v: &mut Violations,
) -> (Str, Arg) {
    let key: Str = match &a.name_field {
        Some(debug_annotation::NameField::NameIid(iid)) => match interned.arg_names.get(iid) {
            Some(n) => n.clone(),
            None => {
                v.push(R_INTERNED, format!("packet #{index} on sequence {sid}: debug annotation name iid {iid} not defined on the sequence"));
                Str::from("")
            }
        },
        Some(debug_annotation::NameField::Name(n)) => Str::from(n.as_str()),
        None => Str::from(""),
    };
    use debug_annotation::Value;
    let value = match &a.value {
        Some(Value::IntValue(x)) => Arg::Int(*x),
        Some(Value::UintValue(x)) | Some(Value::PointerValue(x)) => Arg::Uint(*x),
        Some(Value::DoubleValue(x)) => Arg::Double(*x),
        Some(Value::BoolValue(x)) => Arg::Bool(*x),
        Some(Value::StringValue(s)) | Some(Value::LegacyJsonValue(s)) => {
            Arg::Str(Str::from(s.as_str()))
        }
        Some(Value::StringValueIid(iid)) => match interned.string_values.get(iid) {
            Some(s) => Arg::Str(s.clone()),
            None => {
                v.push(R_INTERNED, format!("packet #{index} on sequence {sid}: string_value_iid {iid} (arg {key:?}) not defined on the sequence"));
                Arg::Str(Str::from(""))
            }
        },
        Some(Value::NestedValue(n)) => Arg::Str(Str::from(format!("{n:?}"))),
        None => Arg::Str(Str::from("")),
    };
    (key, value)
}

fn describe(
    index: usize,
    machine: u32,
    td: TrackDescriptor,
    tracks: &mut BTreeMap<u64, Track>,
    v: &mut Violations,
) {
    // The root track (uuid 0) of a machine, which only configures the order of processes (a
    // merge; its `process_ordering` is read from the raw packet, see `raw_extras`).
    if td.uuid == Some(0)
        && td.process.is_none()
        && td.thread.is_none()
        && td.static_or_dynamic_name.is_none()
        && td.parent_uuid.is_none()
    {
        return;
    }
    let Some(uuid) = td.uuid.filter(|u| *u != 0) else {
        v.push(
            R_TRACK,
            format!("packet #{index}: TrackDescriptor without a non-zero uuid"),
        );
        return;
    };
    if let Some(p) = td.parent_uuid
        && !tracks.contains_key(&p)
    {
        v.push(
            R_TRACK,
            format!(
                "packet #{index}: track {uuid} names parent {p}, which is not described before it"
            ),
        );
    }
    let name = match td.static_or_dynamic_name {
        Some(track_descriptor::StaticOrDynamicName::Name(n))
        | Some(track_descriptor::StaticOrDynamicName::StaticName(n))
        | Some(track_descriptor::StaticOrDynamicName::AtraceName(n)) => Some(n),
        None => None,
    };
    let process = td.process.as_ref().map(|p| ProcessInfo {
        pid: p.pid.unwrap_or(0),
        name: p.process_name.clone(),
        machine,
        sort_index: p.legacy_sort_index,
    });
    if td.process.as_ref().is_some_and(|p| p.pid.is_none()) {
        v.push(
            R_TRACK,
            format!("packet #{index}: process track {uuid} without pid"),
        );
    }
    let thread = td.thread.as_ref().map(|t| ThreadInfo {
        pid: t.pid.unwrap_or(0),
        tid: t.tid.unwrap_or(0),
        name: t.thread_name.clone(),
        machine,
    });
    if td
        .thread
        .as_ref()
        .is_some_and(|t| t.pid.is_none() || t.tid.is_none())
    {
        v.push(
            R_TRACK,
            format!("packet #{index}: thread track {uuid} without pid or tid"),
        );
    }
    let track = Track {
        uuid,
        parent: td.parent_uuid,
        name,
        process,
        thread,
        counter: td.counter.is_some(),
        child_ordering: td.child_ordering,
        sibling_order_rank: td.sibling_order_rank,
        packet: index,
    };
    match tracks.get(&uuid) {
        Some(old) => {
            let same = Track {
                packet: old.packet,
                ..track.clone()
            };
            if *old != same {
                v.push(R_TRACK, format!("packet #{index}: track {uuid} described again differently: {old:?} then {track:?}"));
            }
        }
        None => {
            tracks.insert(uuid, track);
        }
    }
}

/// Sort events by time (file order breaks ties) and match BEGIN/END per track.
fn match_slices(
    mut raw: Vec<RawEvent>,
    tracks: &BTreeMap<u64, Track>,
    v: &mut Violations,
) -> Vec<Slice> {
    raw.sort_by_key(|e| (e.ts, e.packet));
    let mut slices: Vec<Slice> = Vec::with_capacity(raw.len() / 2 + 1);
    let mut stacks: HashMap<u64, Vec<usize>> = HashMap::new();
    for e in raw {
        let stack = stacks.entry(e.track).or_default();
        match e.kind {
            Kind::Begin | Kind::Instant => {
                let mut s = e.slice.expect("begin carries its slice");
                s.depth = stack.len() as u32;
                let i = slices.len();
                if e.kind == Kind::Begin {
                    stack.push(i);
                }
                slices.push(s);
            }
            Kind::End => match stack.pop() {
                Some(i) => {
                    let s = &mut slices[i];
                    s.end = e.ts;
                    s.flow_out.extend(e.end_flows.0);
                    s.flow_in.extend(e.end_flows.1);
                    s.args.extend(e.end_args);
                }
                None => v.push(
                    R_NESTING,
                    format!(
                        "packet #{}: END at {} on track {} ({:?}) with no open slice",
                        e.packet,
                        e.ts,
                        e.track,
                        tracks.get(&e.track).and_then(|t| t.name.clone())
                    ),
                ),
            },
        }
    }
    let mut open: Vec<(u64, usize)> = stacks
        .into_iter()
        .flat_map(|(t, st)| st.into_iter().map(move |i| (t, i)))
        .collect();
    open.sort_unstable();
    for (t, i) in open {
        let s = &slices[i];
        v.push(
            R_NESTING,
            format!(
                "packet #{}: slice {:?} ({}) begun at {} on track {} ({:?}) never ends",
                s.packet,
                s.name,
                s.category,
                s.start,
                t,
                tracks.get(&t).and_then(|t| t.name.clone())
            ),
        );
    }
    slices
}

fn match_flows(slices: &[Slice], v: &mut Violations) -> Vec<Flow> {
    let mut src: HashMap<u64, usize> = HashMap::new();
    let mut dst: HashMap<u64, usize> = HashMap::new();
    for (i, s) in slices.iter().enumerate() {
        for &id in &s.flow_out {
            if let Some(&j) = src.get(&id) {
                v.push(
                    R_FLOW,
                    format!(
                        "flow id {id} starts on two slices: {:?} at {} and {:?} at {}",
                        slices[j].name, slices[j].start, s.name, s.start
                    ),
                );
            } else {
                src.insert(id, i);
            }
        }
        for &id in &s.flow_in {
            if let Some(&j) = dst.get(&id) {
                v.push(
                    R_FLOW,
                    format!(
                        "flow id {id} terminates on two slices: {:?} at {} and {:?} at {}",
                        slices[j].name, slices[j].start, s.name, s.start
                    ),
                );
            } else {
                dst.insert(id, i);
            }
        }
    }
    let mut flows = Vec::with_capacity(src.len());
    for (&id, &i) in &src {
        match dst.get(&id) {
            Some(&j) => {
                let (a, b) = (&slices[i], &slices[j]);
                if b.start <= a.start {
                    v.push(R_FLOW, format!("flow id {id} goes backwards or nowhere in time: source {:?} ({}) starts at {}, destination {:?} ({}) at {}", a.name, a.category, a.start, b.name, b.category, b.start));
                }
                flows.push(Flow {
                    id,
                    source: i,
                    destination: j,
                });
            }
            None => v.push(
                R_FLOW,
                format!(
                    "flow id {id} from {:?} ({}) at {} has no destination",
                    slices[i].name, slices[i].category, slices[i].start
                ),
            ),
        }
    }
    for (&id, &j) in &dst {
        if !src.contains_key(&id) {
            v.push(
                R_FLOW,
                format!(
                    "flow id {id} into {:?} ({}) at {} has no source",
                    slices[j].name, slices[j].category, slices[j].start
                ),
            );
        }
    }
    flows.sort_unstable_by_key(|f| f.destination);
    flows
}

// ---------------------------------------------------------------------------------------------
// Helpers

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn fixture(name: &str) -> PathBuf {
    manifest_dir().join("tests/fixtures").join(name)
}

/// `../shared/corpus` (or `$NSYS_CORPUS`), when present.
pub fn corpus_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("NSYS_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../shared/corpus"));
    dir.is_dir().then_some(dir)
}

/// A file of the corpus, or `None` after recording the skip (listed, and a failure under
/// `NSYS_PERFETTO_REQUIRE=corpus`) when the corpus or the file is absent.
pub fn corpus_file(name: &str) -> Option<PathBuf> {
    let Some(dir) = corpus_dir() else {
        skip(
            "corpus",
            &format!("../shared/corpus not found (set NSYS_CORPUS) for {name}"),
        );
        return None;
    };
    let p = dir.join(name);
    if p.is_file() {
        Some(p)
    } else {
        skip("corpus", &format!("{} is absent", p.display()));
        None
    }
}

/// Convert with the library into `dir`, with the default options; returns the summary and the
/// output path.
pub fn convert(input: &Path, dir: &Path) -> (nsys_perfetto_model::summary::Summary, PathBuf) {
    convert_with(input, dir, &nsys_perfetto::convert::Options::default())
}

/// [`convert`] with options of its own.
pub fn convert_with(
    input: &Path,
    dir: &Path,
    opts: &nsys_perfetto::convert::Options,
) -> (nsys_perfetto_model::summary::Summary, PathBuf) {
    let out = dir.join(
        input
            .file_name()
            .map(|n| Path::new(n).with_extension("pftrace"))
            .expect("input has a file name"),
    );
    let summary = convert_to(input, &out, opts);
    (summary, out)
}

/// The trace of `input` converted with `opts`, made once for the whole test binary: the tests
/// that only read a conversion share it. It lies in a folder of this binary's, removed when the
/// binary exits ([`at_exit`]); callers must not change it.
pub fn converted(input: &Path, opts: &nsys_perfetto::convert::Options) -> PathBuf {
    type Made = std::sync::Arc<std::sync::OnceLock<PathBuf>>;
    static MADE: std::sync::Mutex<Vec<((PathBuf, String), Made)>> =
        std::sync::Mutex::new(Vec::new());
    let key = (input.to_path_buf(), format!("{opts:?}"));
    let (n, slot) = {
        let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
        let n = made.len();
        match made.iter().position(|(k, _)| *k == key) {
            Some(i) => (i, made[i].1.clone()),
            None => {
                made.push((key, Made::default()));
                (n, made[n].1.clone())
            }
        }
    };
    // Another test converting the same input waits here for the one conversion.
    slot.get_or_init(|| {
        let dir = shared_out_dir().join(n.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        convert_with(input, &dir, opts).1
    })
    .clone()
}

/// The folder of [`converted`]'s traces, removed when the test binary exits.
fn shared_out_dir() -> &'static Path {
    SHARED_OUT.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("nsys-perfetto-tests-")
            .tempdir()
            .unwrap()
            .keep()
    })
}

static SHARED_OUT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The default options but for the output format, Chrome JSON.
pub fn json_options() -> nsys_perfetto::convert::Options {
    nsys_perfetto::convert::Options {
        format: nsys_perfetto_write::output::formats::OutputFormat::Json,
        ..Default::default()
    }
}

/// Convert with the library into `out` with `opts`; a failure panics naming the input.
pub fn convert_to(
    input: &Path,
    out: &Path,
    opts: &nsys_perfetto::convert::Options,
) -> nsys_perfetto_model::summary::Summary {
    nsys_perfetto::convert::convert_export(input, out, opts)
        .unwrap_or_else(|e| panic!("converting {}: {e:#}", input.display()))
}

/// Run `../shared/tools/perfetto/tpcheck --strict` on a trace when the tool (and Python with the
/// `perfetto` package) is available: `Some(Ok(report))`, `Some(Err(report))` on failure, or
/// `None` (with the reason printed) when it cannot run here.
pub fn tpcheck(trace: &Path) -> Option<Result<String, String>> {
    tpcheck_with(trace, None)
}

/// [`tpcheck`] with another trace_processor (`--tp`), e.g. the v56 one beside v58.2's.
pub fn tpcheck_with(trace: &Path, shell: Option<&Path>) -> Option<Result<String, String>> {
    if let Some(shell) = shell
        && !shell.is_file()
    {
        skip("tpcheck", &format!("{} not found", shell.display()));
        return None;
    }
    let tool = std::env::var_os("TPCHECK")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../shared/tools/perfetto/tpcheck"));
    if !tool.is_file() {
        skip("tpcheck", &format!("{} not found", tool.display()));
        return None;
    }
    let mut command = std::process::Command::new("python3");
    command.arg(&tool).arg("--strict");
    if let Some(shell) = shell {
        command.arg("--tp").arg(shell);
    }
    let out = match command.arg(trace).output() {
        Ok(o) => o,
        Err(e) => {
            skip("tpcheck", &format!("cannot run python3: {e}"));
            return None;
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.code() {
        Some(0) => Some(Ok(text)),
        Some(1) => Some(Err(text)),
        _ if text.contains("No module named")
            || text.contains("trace_processor_shell") && text.contains("not found") =>
        {
            skip(
                "tpcheck",
                &format!(
                    "environment not ready: {}",
                    text.lines().last().unwrap_or("")
                ),
            );
            None
        }
        _ => Some(Err(text)),
    }
}

/// Rows of a query on a trace, as Perfetto's trace_processor (`../shared/tools/perfetto/bin/
/// trace_processor_shell`, or `$TRACE_PROCESSOR_SHELL`) answers it: each row's values as text
/// ("[NULL]" for NULL), header left out. `None` (a recorded skip) when the shell is absent.
pub fn tp_query(trace: &Path, sql: &str) -> Option<Vec<Vec<String>>> {
    let shell = std::env::var_os("TRACE_PROCESSOR_SHELL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            manifest_dir().join("../shared/tools/perfetto/bin/trace_processor_shell")
        });
    if !shell.is_file() {
        skip("tpcheck", &format!("{} not found", shell.display()));
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let query = dir.path().join("q.sql");
    std::fs::write(&query, sql).unwrap();
    let out = std::process::Command::new(&shell)
        .arg("-q")
        .arg(&query)
        .arg(trace)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", shell.display()));
    assert!(
        out.status.success(),
        "{} -q failed on {}: {}",
        shell.display(),
        trace.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rows: Vec<Vec<String>> = text.lines().map(csv_fields).collect();
    if !rows.is_empty() {
        rows.remove(0);
    }
    Some(rows)
}

/// The environment a test's headless Chromium runs in: GLib settings in memory, so the
/// browser writes nothing into the home's caches (its dconf database, `~/.cache/dconf/user`).
pub const BROWSER_ENV: [(&str, &str); 1] = [("GSETTINGS_BACKEND", "memory")];

/// A port free right now on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `f` over `items`, several at a time, its results in `items`' order. The corpus-wide checks
/// spend much of their time waiting on other programs (trace_processor, nsys, a browser): a few
/// items at once keep the cores busy meanwhile. Each worker thread is named as the calling test
/// (so [`skip`] names it), and a panic in `f` is raised again here with its own message.
pub fn par_map<'a, T: Sync, R: Send>(items: &'a [T], f: impl Fn(&'a T) -> R + Sync) -> Vec<R> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let workers = (2 * cores).clamp(1, items.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let name = std::thread::current().name().map(str::to_owned);
    let mut done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let mut builder = std::thread::Builder::new();
                if let Some(name) = &name {
                    builder = builder.name(name.clone());
                }
                builder
                    .spawn_scoped(scope, || {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(item) = items.get(i) else { break };
                            mine.push((i, f(item)));
                        }
                        mine
                    })
                    .expect("cannot start a test worker thread")
            })
            .collect();
        let mut all = Vec::with_capacity(items.len());
        let mut panicked = None;
        for h in handles {
            match h.join() {
                Ok(mine) => all.extend(mine),
                Err(payload) => panicked = panicked.or(Some(payload)),
            }
        }
        if let Some(payload) = panicked {
            std::panic::resume_unwind(payload);
        }
        all
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// The fields of one CSV line (strings in double quotes, `""` inside them), as
/// trace_processor_shell and nsys write it.
pub fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}

// ---------------------------------------------------------------------------------------------
// Skips

/// The requirements named by `NSYS_PERFETTO_REQUIRE` (comma-separated; `all` = every one).
fn required(requirement: &str) -> bool {
    std::env::var("NSYS_PERFETTO_REQUIRE").is_ok_and(|v| {
        v.split(',')
            .map(str::trim)
            .any(|r| r == requirement || r == "all")
    })
}

/// The checks this test binary skipped, one line each, listed when it exits.
static SKIPPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Record that the running test (named after its thread, as libtest names it) skipped a check
/// because `requirement` (`corpus`, `nsys`, `tpcheck`, `gcc`, `upstream-protos`, `browser`:
/// chromium and chromedriver, `root`: mounting file systems, `nsys-capture`: an nsys that can
/// profile here, `older-nsys`) is missing here, and `why`. Every check that does not run goes
/// through here, so the binary lists them all when it exits ([`at_exit`]). The line also goes
/// to the real standard error at once (past libtest's capture, so every run shows it), once per
/// test and reason. When `NSYS_PERFETTO_REQUIRE` names the requirement (CI, which has it), this
/// panics instead: there a skip is a failure.
pub fn skip(requirement: &str, why: &str) {
    use std::io::Write as _;
    let thread = std::thread::current();
    let check = thread.name().unwrap_or("(unnamed test)");
    let line = format!("SKIPPED [{requirement}] {check}: {why}");
    if required(requirement) {
        panic!("{line}; NSYS_PERFETTO_REQUIRE asks for {requirement}");
    }
    {
        let mut skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
        if skipped.contains(&line) {
            return;
        }
        skipped.push(line.clone());
    }
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// What the guarded folders held when this test binary started ([`guard`]).
pub static FILES_AT_START: std::sync::OnceLock<std::collections::BTreeMap<String, String>> =
    std::sync::OnceLock::new();

/// Runs when the test binary starts, before libtest runs any test (the loader calls what
/// `.init_array` lists): records the guarded files and has [`at_exit`] run when the binary
/// exits, after every test, whatever their order and whichever binaries cargo runs.
#[used]
#[unsafe(link_section = ".init_array")]
static AT_START: extern "C" fn() = at_start;

extern "C" fn at_start() {
    let _ = FILES_AT_START.set(guard::state());
    // Many tests mostly wait (on trace_processor, nsys, a browser, a lock on the UI's ports):
    // twice as many at once as there are cores keeps them busy. `--test-threads` and a
    // RUST_TEST_THREADS of the caller's still decide; libtest reads it after this has run.
    if std::env::var_os("RUST_TEST_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: the loader runs this before main, on the only thread there is yet.
        unsafe { std::env::set_var("RUST_TEST_THREADS", (2 * cores).to_string()) };
    }
    // SAFETY: `at_exit` is the `extern "C" fn()` atexit takes; it panics nowhere.
    unsafe {
        libc::atexit(at_exit);
    }
}

/// When the test binary exits (libtest has reported every test): lists the checks it skipped,
/// and fails it, exit status 1, when a test created, changed or removed a guarded file. Nothing
/// when it only listed its tests.
extern "C" fn at_exit() {
    use std::io::Write as _;
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Some(dir) = SHARED_OUT.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
    let mut err = std::io::stderr().lock();
    let skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    if skipped.is_empty() {
        let _ = writeln!(err, "\nskipped checks: none");
    } else {
        let _ = writeln!(
            err,
            "\nskipped checks: {} (NSYS_PERFETTO_REQUIRE=corpus,nsys,tpcheck,... makes them failures)",
            skipped.len()
        );
        for l in skipped.iter() {
            let _ = writeln!(err, "  {l}");
        }
    }
    let Some(before) = FILES_AT_START.get() else {
        return;
    };
    let mut found = guard::changes(before, &guard::state());
    // Blessing the schema table rewrites it on purpose.
    if std::env::var_os("NSYS_PERFETTO_BLESS_SCHEMA").is_some() {
        found.retain(|l| !l.contains("repo/tests/data/"));
    }
    if !found.is_empty() {
        let n = found.len();
        found.truncate(30);
        let _ = writeln!(
            err,
            "\nfiles guard: {n} file(s) in ../shared or the repository changed during the tests \
             (tests must write only under temporary directories; copy inputs there and point \
             XDG_CACHE_HOME or ExportOptions::cache_dir there):\n  {}",
            found.join("\n  ")
        );
        // SAFETY: ends the process at once, as `exit` may not be called again from here.
        unsafe { libc::_exit(1) };
    }
}

/// Run `f` with a tmpfs mounted (`mount -o OPTIONS`, e.g. `size=64k`) on `dir`, made if
/// missing, and unmounted after, whether `f` passed or panicked. Needs root: skips (requirement
/// `root`) where the mount fails.
pub fn with_tmpfs(dir: &Path, options: &str, f: impl FnOnce()) {
    use std::process::{Command, Stdio};
    std::fs::create_dir_all(dir).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", options, "tmpfs"])
        .arg(dir)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        skip(
            "root",
            &format!("cannot mount a tmpfs ({options}): not root?"),
        );
        return;
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let _ = Command::new("umount").arg(dir).status();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// What a trace holds as trace_processor reads it, one fact a line (`bench/content.py`: per
/// category count, sums of ts and dur, names, args, flows, tracks, threads, processes, sched,
/// thread states, counters, samples): two traces with equal digests have the same content.
/// `None` (a recorded skip) when Python's `perfetto` package or `trace_processor_shell` is
/// absent.
pub fn content_digest(trace: &Path) -> Option<Vec<String>> {
    let script = manifest_dir().join("bench/content.py");
    // Its own temporary folder, which must be empty after: the digest leaves nothing behind.
    let tmp = tempfile::tempdir().unwrap();
    let out = match std::process::Command::new("python3")
        .arg(&script)
        .arg(trace)
        .env("TMPDIR", tmp.path())
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            skip("tpcheck", &format!("cannot run python3: {e}"));
            return None;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success()
        && (stderr.contains("No module named") || stderr.contains("trace_processor_shell"))
    {
        skip(
            "tpcheck",
            &format!(
                "bench/content.py cannot run: {}",
                stderr.lines().last().unwrap_or("")
            ),
        );
        return None;
    }
    assert!(
        out.status.success(),
        "bench/content.py {} failed: {stderr}",
        trace.display()
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "bench/content.py left {left:?} in TMPDIR");
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
    )
}
