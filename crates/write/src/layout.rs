//! Track layout: turns each logical group (a thread's API calls, a stream's GPU work, an NVTX
//! domain) into lanes on which slices nest strictly, and orders BEGIN/END/INSTANT per group by
//! time. Perfetto closes the most recent open slice on END, so a partial overlap would silently
//! truncate a slice; overlapping work therefore moves to an extra lane beside its track.

mod counters;
mod sched;

pub mod lanes;
mod late;

use crate::output::{CHUNK_BYTES, Chunk, CustomTrack, EventWriter, GpuQueue, Ids, WellKnown};
use anyhow::Result;
use lanes::{Group, LanePlace, flush_ends, place_in};
use late::LateRow;
use nsys_perfetto_model::model::{
    CounterKey, CounterOwner, CounterSample, CpuSample, Description, Event, EventSink, FastHash,
    Flows, GroupKey, StreamKey, pid_of, with_source,
};
use nsys_perfetto_model::summary::Summary;
use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::mpsc::SyncSender;

/// Rows later than their group's written time (a table far out of time order) are held, sorted
/// and written on a "late rows" group once this many are held, or at the end: a bounded number
/// of extra tracks whatever the order, and bounded memory.
const LATE_ROWS: usize = 1 << 14;

/// One counter track of one router.
struct Counter {
    name: Box<str>,
    unit: Box<str>,
    uuid: u64,
    /// The sequence its samples go on, and the last time written there.
    seq: u32,
    last_ts: i64,
}

/// Threads on CPUs so far (see `sched.rs`).
#[derive(Default)]
struct Sched {
    /// The sequence scheduling packets go on, once one came.
    seq: Option<u32>,
    /// By trace CPU number: the end of the last slice written natively there (`None` before
    /// the first).
    cpus: Vec<Option<i64>>,
    /// Threads met on CPUs (placed global tid) -> whether they go natively (their descriptor
    /// was then required).
    threads: HashMap<i64, bool, FastHash>,
    /// Trace tid -> the thread that has it natively.
    tids: HashMap<i64, i64, FastHash>,
    /// Slice names ("name 1234", "Thread 1234") of the slices written as slices, by the
    /// source's own thread id.
    names: HashMap<i64, String, FastHash>,
}

/// Where a source sits in the trace: its index (folded into its process/thread ids so that
/// several sources never share a track), its place among all the trace's sources (folded into
/// its flow ids, so that arrows never join two reports) and what its times are shifted by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placement {
    /// Below [`nsys_perfetto_model::model::MAX_SOURCES`]: a merge of more reports writes each on a machine of
    /// its own, where ids need not differ from another machine's, and reuses indexes.
    pub source: usize,
    /// The report's place in the merge (equal to `source` up to `MAX_SOURCES` reports).
    pub position: usize,
    pub offset: i64,
}

/// Routes events of one reader to groups and lanes, and hands encoded chunks to the file writer.
pub struct Router<'a, W: EventWriter> {
    writer: W,
    ids: &'a Ids,
    info: &'a Description,
    placement: Placement,
    /// Flow ids of the event being placed, tagged with the source.
    flow_scratch: Vec<u64>,
    tx: SyncSender<Chunk>,
    /// Each key's group, at its index in `groups`. A row that arrives later than its group's
    /// written time (a table not in start order) waits in `late` and goes to a further group,
    /// on lanes of their own.
    group_of: HashMap<GroupKey, u32, FastHash>,
    /// The last key placed and its group: a reader's rows come in runs on one group.
    last_group: Option<(GroupKey, u32)>,
    /// The groups in a list, not in the map: a trace can have tens of thousands (one stream per
    /// kernel), which the map would move on every growth and the sort at the end again.
    groups: Vec<Group>,
    late: Vec<LateRow>,
    /// (device, stream) -> (process, context) of the first GPU stream group of that id directly
    /// under its GPU, to name apart a stream id that another process or context also uses there.
    streams: HashMap<(i64, i64), (i64, i64), nsys_perfetto_model::model::FastHash>,
    /// The sequence of each stream's GPU work, where the writer has a GPU model of its own.
    gpu_queues: HashMap<GroupKey, u32, FastHash>,
    /// The "CPUs" group track, once a CPU track exists.
    cpu_group: Option<u64>,
    /// The "Analysis" group track, once a finding of `--analyze` came.
    analysis_group: Option<u64>,
    /// GPUs this router has put tracks under (for the track count).
    gpu_tracks: std::collections::HashSet<i64, FastHash>,
    /// GPU contexts (device, index) this router has put tracks under (for the track count).
    context_tracks: std::collections::HashSet<(i64, u32), FastHash>,
    /// Counter tracks by owner (few per owner: found by a short scan, no allocation per value).
    counters: HashMap<CounterOwner, Vec<Counter>, FastHash>,
    /// Each GPU's "GPU metrics" group track (below its streams), once this router made one.
    metrics_groups: HashMap<i64, u64, FastHash>,
    /// The sequence of this router's CPU samples, once one came.
    samples_seq: Option<u32>,
    /// Threads whose samples this router has written (their descriptors were required).
    sample_threads: std::collections::HashSet<i64, FastHash>,
    /// Threads on CPUs, where the format shows scheduling natively.
    sched: Sched,
    pub summary: Summary,
    progress: Option<&'a nsys_perfetto_model::progress::Progress>,
    /// Rows handled since progress was last reported (reported in batches: less contention).
    unreported: u64,
}

impl<'a, W: EventWriter> Router<'a, W> {
    /// A row that would land before the trace's start: counted as skipped.
    fn skip_early(&mut self) {
        let (table, reason) = nsys_perfetto_model::model::EARLY_ROWS;
        self.skip(table, reason);
    }

    pub fn new(
        writer: W,
        ids: &'a Ids,
        info: &'a Description,
        placement: Placement,
        tx: SyncSender<Chunk>,
    ) -> Self {
        Router {
            writer,
            ids,
            info,
            placement,
            flow_scratch: Vec::new(),
            tx,
            group_of: HashMap::default(),
            last_group: None,
            groups: Vec::new(),
            late: Vec::new(),
            streams: Default::default(),
            gpu_queues: HashMap::default(),
            gpu_tracks: Default::default(),
            context_tracks: Default::default(),
            cpu_group: None,
            analysis_group: None,
            counters: HashMap::default(),
            metrics_groups: HashMap::default(),
            samples_seq: None,
            sample_threads: Default::default(),
            sched: Default::default(),
            summary: Summary::default(),
            progress: None,
            unreported: 0,
        }
    }

    pub fn with_progress(mut self, progress: &'a nsys_perfetto_model::progress::Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    fn tick(&mut self) {
        self.unreported += 1;
        if self.unreported >= 4096 {
            if let Some(p) = self.progress {
                p.add(self.unreported);
            }
            self.unreported = 0;
        }
    }

    /// An event in the trace's terms (ids and times already placed).
    fn place(&mut self, key: GroupKey, ev: &Event<'_>) -> Result<()> {
        if matches!(key, GroupKey::GpuStream { .. }) && self.writer.native_gpu() {
            return self.place_gpu_work(key, ev);
        }
        let i = match self.last_group {
            Some((last, i)) if last == key => i as usize,
            _ => self.group_index(key, ev.start),
        };
        self.summary.count(ev.category);
        self.tick();
        if ev.flows.terminating.is_some() {
            self.summary.flows += 1;
        }
        let group = &mut self.groups[i];
        if ev.start < group.emitted_ts {
            self.summary.late_rows += 1;
            self.late.push(LateRow::new(key, ev));
            if self.late.len() >= LATE_ROWS {
                self.flush_late()?;
            }
            return Ok(());
        }
        place_in(&mut self.writer, self.ids, &mut self.summary, group, ev);
        self.maybe_send(false)
    }

    /// The index of `key`'s group, made (its first event at `start`) if new.
    fn group_index(&mut self, key: GroupKey, start: i64) -> usize {
        let i = match self.group_of.get(&key) {
            Some(&i) => i as usize,
            None => {
                let g = self.new_group(key, start);
                self.groups.push(g);
                let i = self.groups.len() - 1;
                self.group_of
                    .insert(key, u32::try_from(i).expect("fewer than 2^32 groups"));
                i
            }
        };
        self.last_group = Some((key, i as u32));
        i
    }

    /// Write the held late rows, sorted, on one further group per key.
    fn flush_late(&mut self) -> Result<()> {
        let mut rows = std::mem::take(&mut self.late);
        rows.sort_by_key(|r| (r.key, r.start, Reverse(r.end.unwrap_or(r.start))));
        let mut i = 0;
        while i < rows.len() {
            let key = rows[i].key;
            let mut group = self.late_group(key, rows[i].start);
            while i < rows.len() && rows[i].key == key {
                let mut args = Vec::new();
                let ev = rows[i].event(&mut args);
                place_in(
                    &mut self.writer,
                    self.ids,
                    &mut self.summary,
                    &mut group,
                    &ev,
                );
                self.maybe_send(false)?;
                i += 1;
            }
            self.summary.trace_events += flush_ends(&mut self.writer, &mut group, i64::MAX);
            self.summary.tracks += group.lanes.len() as u64;
        }
        rows.clear();
        self.late = rows;
        self.maybe_send(false)
    }

    /// Close every open slice and send what is left.
    fn close(mut self) -> Result<Summary> {
        if let Some(p) = self.progress {
            p.add(self.unreported);
        }
        // Late rows' groups take their names from their key's first group.
        if !self.late.is_empty() {
            self.flush_late()?;
        }
        self.writer.finish();
        // In key order (keys are distinct: the order is total).
        let mut order: Vec<_> = self.group_of.drain().collect();
        order.sort_unstable();
        for (_, i) in order {
            let g = &mut self.groups[i as usize];
            self.summary.trace_events += flush_ends(&mut self.writer, g, i64::MAX);
            self.summary.tracks += g.lanes.len() as u64;
        }
        self.maybe_send(true)?;
        Ok(self.summary)
    }

    fn maybe_send(&mut self, force: bool) -> Result<()> {
        if (force || self.writer.buffered() >= CHUNK_BYTES)
            && let Some(chunk) = self.writer.take_chunk()
        {
            self.tx
                .send(chunk)
                .map_err(|_| anyhow::anyhow!("output writer stopped"))?;
        }
        Ok(())
    }

    fn new_group(&mut self, key: GroupKey, first_ts: i64) -> Group {
        let id = self.ids.next_sequence();
        let info = self.info;
        // Where the group's first track goes: (parent, name, rank among its siblings).
        let (parent, name, rank) = match key {
            // A thread's own track: the calls go on it, not on a track under it.
            GroupKey::ThreadApi { global_tid } => (
                Some(self.thread_track(global_tid)),
                "CUDA API".to_string(),
                None,
            ),
            GroupKey::ThreadNvtx { global_tid, domain } => (
                Some(self.thread_track(global_tid)),
                info.nvtx_domain_name(global_tid, domain),
                None,
            ),
            GroupKey::ProcessNvtx { global_pid, domain } => (
                Some(self.process_track(global_pid)),
                format!("{} (start/end)", info.nvtx_domain_name(global_pid, domain)),
                None,
            ),
            GroupKey::GpuStream(StreamKey {
                device,
                global_pid,
                context,
                stream,
            }) => {
                let (parent, in_context) = self.gpu_parent(device, global_pid, context);
                let name = if in_context {
                    // Under its context's group: the only stream of this id there.
                    format!("Stream {stream}")
                } else {
                    self.stream_name(device, global_pid, context, stream)
                };
                (Some(parent), name, Some(stream))
            }
            // Thread id 0 means the source did not know the thread: keep those calls on the process
            // rather than inventing a "Thread 0".
            GroupKey::ThreadOsrt { global_tid }
                if nsys_perfetto_model::model::tid_of(global_tid) == 0 =>
            {
                (
                    Some(self.process_track(global_tid)),
                    "OS runtime (thread unknown)".to_string(),
                    None,
                )
            }
            GroupKey::ThreadOsrt { global_tid } => (
                Some(self.thread_track(global_tid)),
                "OS runtime".to_string(),
                None,
            ),
            GroupKey::GpuSync(StreamKey {
                device,
                global_pid,
                context,
                stream,
            }) => {
                // Context and event synchronization belong to no stream (id 0xFFFFFFFF).
                let name = if (0..u32::MAX as i64).contains(&stream) {
                    format!("Stream {stream} · sync")
                } else {
                    "Synchronization (no stream)".to_string()
                };
                let (parent, _) = self.gpu_parent(device, global_pid, context);
                // After every stream's, before the GPU's other tracks and its metrics.
                let rank = stream.min(i64::from(i32::MAX) - 3);
                (Some(parent), name, Some(rank))
            }
            GroupKey::Cpu { cpu } => {
                let cpu = nsys_perfetto_model::model::without_source(cpu);
                (Some(self.cpu_group()), format!("CPU {cpu}"), Some(cpu))
            }
            // Above the streams: NVTX explains what the kernels below belong to.
            GroupKey::GpuNvtx { device, global_tid } => (
                Some(self.process_gpu_parent(device, global_tid)),
                format!("NVTX · {}", info.thread_name(global_tid)),
                Some(-1),
            ),
            GroupKey::ThreadTrack { global_tid, kind } => (
                Some(self.thread_track(global_tid)),
                kind.label().to_string(),
                None,
            ),
            GroupKey::ProcessTrack { global_pid, kind } => (
                Some(self.process_track(global_pid)),
                kind.label().to_string(),
                None,
            ),
            // Below the streams.
            GroupKey::GpuTrack {
                device,
                global_pid,
                context,
                kind,
            } => (
                Some(self.gpu_parent(device, global_pid, context).0),
                kind.label().to_string(),
                Some(i64::from(i32::MAX) - 2),
            ),
            GroupKey::GlobalTrack { kind, .. } => (None, info.per_source(kind.label()), None),
            // One track per rule, in nsys' order, under one top-level group.
            GroupKey::Analysis { rule, track, .. } => (
                Some(self.analysis_group()),
                track.to_string(),
                Some(i64::from(rule)),
            ),
            // Below the streams.
            GroupKey::GpuMemory { device, global_pid } => (
                Some(self.process_gpu_parent(device, global_pid)),
                format!(
                    "Memory · {} (pid {})",
                    info.bare_process_name(global_pid),
                    pid_of(global_pid)
                ),
                Some(i64::from(i32::MAX) - 1),
            ),
        };
        // A thread's API calls go on the thread's own track (so its extra lanes hang under
        // it); every other group gets a track of its own under `parent`.
        let (lane0, parent, under_lane0) = match (key, parent) {
            (GroupKey::ThreadApi { .. }, Some(thread)) => (thread, None, true),
            (GroupKey::GpuNvtx { global_tid, .. }, _) => {
                let number = Some(nsys_perfetto_model::model::tid_of(global_tid));
                (
                    self.custom_numbered(parent, &name, rank, number),
                    parent,
                    false,
                )
            }
            _ => (self.custom(parent, &name, rank), parent, false),
        };
        let place = LanePlace {
            name,
            parent,
            rank,
            lanes_under_lane0: under_lane0,
        };
        self.writer.open_group(id, lane0, first_ts);
        Group::new(id, first_ts, key.nests(), lane0, place)
    }

    /// A further group for rows that arrived after their group had moved past them: its own
    /// sequence and its own lane track beside the group's first one.
    fn late_group(&mut self, key: GroupKey, first_ts: i64) -> Group {
        let first = &self.groups[self.group_of[&key] as usize];
        let (parent, name) = first.further_track("late rows");
        let place = LanePlace {
            name,
            parent,
            rank: first.place.rank,
            lanes_under_lane0: false,
        };
        let nests = first.nests;
        let id = self.ids.next_sequence();
        let lane0 = self.custom(place.parent, &place.name, place.rank);
        self.summary.extra_lanes += 1;
        self.writer.open_group(id, lane0, first_ts);
        Group::new(id, first_ts, nests, lane0, place)
    }

    /// The name of a stream directly under its GPU: "Stream 7", with the pid (or context) of
    /// a process (or context) that uses a stream id another one already uses on that GPU.
    fn stream_name(&mut self, device: i64, global_pid: i64, context: i64, stream: i64) -> String {
        match self.streams.get(&(device, stream)) {
            None => {
                self.streams.insert((device, stream), (global_pid, context));
                format!("Stream {stream}")
            }
            Some(&(p, _)) if p != global_pid => {
                format!("Stream {stream} (pid {})", pid_of(global_pid))
            }
            Some(_) => format!("Stream {stream} (context {context})"),
        }
    }

    /// A GPU operation where the writer has a GPU model of its own: on its stream's hardware
    /// queue, one sequence per stream, in any time order (the writer places each operation by
    /// its own time; no lanes, no late rows).
    fn place_gpu_work(&mut self, key: GroupKey, ev: &Event<'_>) -> Result<()> {
        let GroupKey::GpuStream(StreamKey {
            device,
            global_pid,
            context,
            stream,
        }) = key
        else {
            unreachable!("only streams' work goes to GPU queues");
        };
        self.summary.count(ev.category);
        self.tick();
        if ev.flows.terminating.is_some() {
            self.summary.flows += 1;
        }
        let group = match self.gpu_queues.get(&key) {
            Some(&g) => g,
            None => {
                let id = self.ids.next_sequence();
                // Perfetto keys a queue by its GPU and name: names tell a GPU's contexts and
                // processes apart (there is no context level between a GPU and its queues).
                let name = match self.info.context_index(device, global_pid, context) {
                    Some(i) => format!(
                        "Stream {stream} · {}",
                        self.info.gpu_context_label(device, i)
                    ),
                    None => self.stream_name(device, global_pid, context, stream),
                };
                let queue = GpuQueue {
                    device: nsys_perfetto_model::model::without_source(device),
                    global_pid,
                    context,
                    name,
                };
                self.writer.open_gpu_queue(id, &queue, ev.start);
                self.summary.tracks += 1;
                self.gpu_queues.insert(key, id);
                id
            }
        };
        self.writer.gpu_work(group, ev);
        self.summary.trace_events += 1;
        self.maybe_send(false)
    }

    fn custom(&mut self, parent: Option<u64>, name: &str, rank: Option<i64>) -> u64 {
        self.custom_numbered(parent, name, rank, None)
    }

    fn custom_numbered(
        &mut self,
        parent: Option<u64>,
        name: &str,
        rank: Option<i64>,
        number: Option<i64>,
    ) -> u64 {
        let uuid = self.ids.next_uuid();
        self.writer.describe(&CustomTrack {
            uuid,
            parent,
            name: name.to_string(),
            rank,
            explicit_child_order: false,
            number,
        });
        uuid
    }

    /// A thread's own track (described by the file writer, once for every router).
    fn thread_track(&mut self, global_tid: i64) -> u64 {
        self.writer.require(WellKnown::Thread(global_tid));
        WellKnown::Thread(global_tid).uuid()
    }

    /// A process's own track (described by the file writer, once for every router).
    fn process_track(&mut self, global_pid: i64) -> u64 {
        self.writer.require(WellKnown::Process(global_pid));
        WellKnown::Process(global_pid).uuid()
    }

    /// The top-level "CPUs" track holding one track per CPU, ordered by CPU number.
    fn cpu_group(&mut self) -> u64 {
        if let Some(u) = self.cpu_group {
            return u;
        }
        let u = self.top_group(self.info.per_source("CPUs"));
        self.cpu_group = Some(u);
        u
    }

    /// The top-level "Analysis" group (findings of `--analyze`), made on first use.
    fn analysis_group(&mut self) -> u64 {
        if let Some(u) = self.analysis_group {
            return u;
        }
        // A report's own analysis: named by its label in a merge ("Analysis · rank 3 ·
        // host-a"), where a host's name would not tell its ranks apart.
        let name = match &self.info.label {
            Some(label) => format!("Analysis · {label}"),
            None => "Analysis".to_string(),
        };
        let u = self.top_group(name);
        self.analysis_group = Some(u);
        u
    }

    /// A new top-level group named `name`, its children in the order of their ranks.
    fn top_group(&mut self, name: String) -> u64 {
        let uuid = self.ids.next_uuid();
        self.writer.describe(&CustomTrack {
            uuid,
            parent: None,
            name,
            rank: None,
            explicit_child_order: true,
            number: None,
        });
        self.summary.tracks += 1;
        uuid
    }

    /// Where a GPU-side track of one CUDA context goes: under its context's group when the
    /// device has several contexts ("GPU 0" > "Context 2" > "Stream 7"), else directly under
    /// the GPU as ever. The second value tells which.
    fn gpu_parent(&mut self, device: i64, global_pid: i64, context: i64) -> (u64, bool) {
        match self.info.context_index(device, global_pid, context) {
            Some(index) => (self.context_track(device, index), true),
            None => (self.gpu_track(device), false),
        }
    }

    /// Where a GPU-side track of a process (not of one of its contexts) goes: under the
    /// process's context when the device has several and the process one of them, else under
    /// the GPU.
    fn process_gpu_parent(&mut self, device: i64, global_id: i64) -> u64 {
        match self.info.process_context_index(device, global_id) {
            Some(index) => self.context_track(device, index),
            None => self.gpu_track(device),
        }
    }

    /// The group of one context of a GPU with several ("Context 2"), its streams ordered by
    /// stream id; described by the file writer (after its GPU) so every reader shares it.
    fn context_track(&mut self, device: i64, index: u32) -> u64 {
        self.gpu_track(device);
        let wk = WellKnown::GpuContext { device, index };
        self.writer.require(wk);
        if self.context_tracks.insert((device, index)) {
            self.summary.tracks += 1;
        }
        wk.uuid()
    }

    /// The per-device group track ("GPU 0 · NVIDIA H100"), its streams ordered by stream id;
    /// described by the file writer so every reader shares it.
    fn gpu_track(&mut self, device: i64) -> u64 {
        self.writer.require(WellKnown::Gpu(device));
        if self.gpu_tracks.insert(device) {
            self.summary.tracks += 1;
        }
        WellKnown::Gpu(device).uuid()
    }
}

impl<W: EventWriter> EventSink for Router<'_, W> {
    fn event(&mut self, key: GroupKey, ev: &Event<'_>) -> Result<()> {
        let Placement {
            source,
            position,
            offset,
        } = self.placement;
        if ev.start + offset < 0 {
            // Earlier than the first rows of its table told (a table out of time order).
            self.skip_early();
            return Ok(());
        }
        if source == 0 && position == 0 && offset == 0 {
            return self.place(key, ev);
        }
        let mut scratch = std::mem::take(&mut self.flow_scratch);
        scratch.clear();
        scratch.extend(ev.flows.out.iter().map(|&id| tag_flow(id, position)));
        let placed = Event {
            start: ev.start + offset,
            end: ev.end.map(|e| e + offset),
            flows: Flows {
                out: &scratch,
                terminating: ev.flows.terminating.map(|id| tag_flow(id, position)),
            },
            ..ev.clone()
        };
        let result = self.place(key_with_source(key, source), &placed);
        self.flow_scratch = scratch;
        result
    }

    fn skip(&mut self, table: &'static str, reason: &'static str) {
        self.tick();
        self.summary.skip(table, reason);
    }

    fn note(&mut self, what: &'static str, reason: &'static str) {
        self.summary.skip(what, reason);
    }

    fn naming_row(&mut self, table: &'static str) {
        self.tick();
        *self
            .summary
            .naming_rows
            .entry(table.to_string())
            .or_default() += 1;
    }

    fn extra_row(&mut self) {
        self.tick();
    }

    fn counter(&mut self, key: &CounterKey<'_>, sample: CounterSample) -> Result<()> {
        self.place_counter(key, sample)
    }

    fn cpu_sample(&mut self, sample: &CpuSample<'_>) -> Result<()> {
        self.place_cpu_sample(sample)
    }

    fn cpu_slice(&mut self, slice: &nsys_perfetto_model::model::CpuSlice) -> Result<()> {
        self.place_cpu_slice(slice)
    }

    fn finish(self) -> Result<Summary> {
        self.close()
    }
}

/// Flow ids of merged sources: the report's place in bits 46 and up, above the ids of one
/// source (a GPU row's id times 4), so arrows never join two reports. Up to 64 reports (every
/// JSON merge) that stays below 2^53: JSON readers that hold numbers as doubles read every id
/// exactly.
fn tag_flow(id: u64, position: usize) -> u64 {
    id ^ ((position as u64) << 46)
}

/// The key with a source's index folded into its process, thread and device ids.
fn key_with_source(mut key: GroupKey, source: usize) -> GroupKey {
    let fold = |id: &mut i64| *id = with_source(*id, source);
    match &mut key {
        GroupKey::ThreadApi { global_tid }
        | GroupKey::ThreadNvtx { global_tid, .. }
        | GroupKey::ThreadOsrt { global_tid }
        | GroupKey::ThreadTrack { global_tid, .. } => fold(global_tid),
        GroupKey::ProcessNvtx { global_pid, .. } | GroupKey::ProcessTrack { global_pid, .. } => {
            fold(global_pid)
        }
        GroupKey::GpuStream(StreamKey {
            device, global_pid, ..
        })
        | GroupKey::GpuSync(StreamKey {
            device, global_pid, ..
        })
        | GroupKey::GpuMemory { device, global_pid }
        | GroupKey::GpuTrack {
            device, global_pid, ..
        } => {
            fold(device);
            fold(global_pid);
        }
        GroupKey::GpuNvtx { device, global_tid } => {
            fold(device);
            fold(global_tid);
        }
        // CPUs of several hosts stay apart too.
        GroupKey::Cpu { cpu } => fold(cpu),
        GroupKey::GlobalTrack { source: id, .. } | GroupKey::Analysis { source: id, .. } => {
            fold(id)
        }
    }
    key
}
