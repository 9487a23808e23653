//! Counters and CPU samples in the protobuf output.
//!
//! - A counter track is a `TrackDescriptor` with a `CounterDescriptor` (bytes as
//!   `UNIT_SIZE_BYTES`, any other unit as `unit_name`); its values are `TYPE_COUNTER` events on
//!   the counter's own sequence (opened by layout like any group: default track, incremental
//!   clock), so each value costs a delta timestamp and the value.
//! - CPU samples are `PerfSample` packets (pid, tid, cpu, `callstack_iid`) with absolute
//!   timestamps. Their call stacks are interned on the reader's sample sequence: function names
//!   (one per symbol), mapping paths and mappings (one per module), frames (one per symbol in a
//!   module) and callstacks (root first). trace_processor loads them into `perf_sample` and
//!   `stack_profile_*`; the UI shows each thread's samples and a flame graph. When the interned
//!   tables pass a bound, the sequence clears its incremental state and starts again, so memory
//!   stays bounded however many distinct frames a profile holds.

use super::{ProtoWriter, frame};
use crate::model::{CounterValue, CpuSample, Frame, trace_pid_of, trace_tid_of};
use crate::output::CounterTrack;
use crate::proto::{
    Callstack, CounterDescriptor, InternedData, InternedString, Mapping, PerfSample, TracePacket,
    TrackDescriptor, TrackEvent, counter_descriptor, trace_packet, track_descriptor, track_event,
};
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Interning keys are small integers (string ids, iids), hashed a few million times per large
/// profile: a multiply-and-rotate hash (FxHash's) instead of SipHash. Nothing here is keyed by
/// untrusted input that could be chosen to collide.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    fn write_i64(&mut self, v: i64) {
        self.add(v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
}

impl IdHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
    }
}

type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;
/// Interned entries (functions, mappings, frames, callstacks) a sample sequence keeps before it
/// clears its state and starts a new generation.
const MAX_INTERNED: usize = 100_000;
/// Frame ids held in callstack keys before the same happens (8 bytes each).
const MAX_CALLSTACK_FRAMES: usize = 1_000_000;

/// Interning state of one sample sequence (one generation).
#[derive(Default)]
pub(super) struct SampleSeq {
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

impl SampleSeq {
    fn entries(&self) -> usize {
        self.functions.len() + self.mappings.len() + self.frames.len() + self.callstacks.len()
    }

    fn reset(&mut self) {
        self.started = false;
        self.functions.clear();
        self.mappings.clear();
        self.frames.clear();
        self.callstacks.clear();
        self.callstack_frames = 0;
    }
}

impl ProtoWriter {
    pub(super) fn write_counter_track(&mut self, track: &CounterTrack) {
        let (unit, unit_name) = match track.unit.as_str() {
            "bytes" => (Some(counter_descriptor::Unit::SizeBytes as i32), None),
            "" => (None, None),
            u => (None, Some(u.to_string())),
        };
        let desc = TrackDescriptor {
            uuid: Some(track.uuid),
            parent_uuid: Some(track.parent),
            static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                track.name.clone(),
            )),
            counter: Some(CounterDescriptor {
                unit,
                unit_name,
                // What the values are (gpu.metric, cuda.memory), as slices carry a category.
                categories: vec![track.category.as_str().to_string()],
                ..Default::default()
            }),
            ..Default::default()
        };
        frame(&super::descriptor_packet(desc), &mut self.out.data);
    }

    pub(super) fn write_counter(&mut self, group: u32, ts: i64, value: CounterValue) {
        let seq = self.seqs.get_mut(group).expect("group opened before use");
        debug_assert!(
            ts >= seq.last_ts,
            "layout keeps each counter sequence in order"
        );
        let delta = (ts - seq.last_ts).max(0) as u64;
        seq.last_ts = ts;
        let value = match value {
            CounterValue::Int(v) => track_event::CounterValueField::CounterValue(v),
            CounterValue::Double(v) => track_event::CounterValueField::DoubleCounterValue(v),
        };
        let packet = TracePacket {
            timestamp: Some(delta),
            optional_trusted_packet_sequence_id: Some(
                trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(group),
            ),
            data: Some(trace_packet::Data::TrackEvent(TrackEvent {
                r#type: Some(track_event::Type::Counter as i32),
                counter_value_field: Some(value),
                ..Default::default()
            })),
            ..Default::default()
        };
        frame(&packet, &mut self.out.data);
    }

    pub(super) fn write_cpu_sample(&mut self, group: u32, s: &CpuSample<'_>) {
        let info = &*self.desc;
        let seq = self.samples.entry(group).or_default();
        if seq.entries() + s.frames.len() * 3 + 1 > MAX_INTERNED
            || seq.callstack_frames + s.frames.len() > MAX_CALLSTACK_FRAMES
        {
            seq.reset();
        }
        let mut interned = InternedData::default();
        let mut stack = std::mem::take(&mut seq.stack);
        stack.clear();
        // Root first, as Perfetto builds callsites from the bottom of the stack up.
        for f in s.frames.iter().rev() {
            let next = seq.frames.len() as u64 + 1;
            let iid = match seq.frames.get(f) {
                Some(&iid) => iid,
                None => {
                    let function = intern_string(
                        &mut seq.functions,
                        f.symbol,
                        &mut interned.function_names,
                        || info.string_or_id(f.symbol).into_owned(),
                    );
                    let mapping = match seq.mappings.get(&f.module) {
                        Some(&m) => m,
                        None => {
                            let m = seq.mappings.len() as u64 + 1;
                            seq.mappings.insert(f.module, m);
                            // The module's path as one component: the importer joins
                            // components with "/", which would double a leading slash.
                            interned.mapping_paths.push(InternedString {
                                iid: Some(m),
                                str: Some(info.string_or_id(f.module).as_bytes().to_vec()),
                            });
                            interned.mappings.push(Mapping {
                                iid: Some(m),
                                path_string_ids: vec![m],
                            });
                            m
                        }
                    };
                    seq.frames.insert(*f, next);
                    interned.frames.push(crate::proto::Frame {
                        iid: Some(next),
                        function_name_id: Some(function),
                        mapping_id: Some(mapping),
                        // The symbol id: a stable, distinct address per function of a module,
                        // so two functions never share a frame.
                        rel_pc: Some(f.symbol as u64),
                    });
                    next
                }
            };
            stack.push(iid);
        }
        let callstack_iid = if stack.is_empty() {
            None
        } else {
            Some(match seq.callstacks.get(stack.as_slice()) {
                Some(&iid) => iid,
                None => {
                    let iid = seq.callstacks.len() as u64 + 1;
                    seq.callstacks.insert(stack.clone().into_boxed_slice(), iid);
                    seq.callstack_frames += stack.len();
                    interned.callstacks.push(Callstack {
                        iid: Some(iid),
                        frame_ids: stack.clone(),
                    });
                    iid
                }
            })
        };
        seq.stack = stack;
        let has_interned = !interned.function_names.is_empty()
            || !interned.mappings.is_empty()
            || !interned.frames.is_empty()
            || !interned.callstacks.is_empty();
        let flags = if std::mem::replace(&mut seq.started, true) {
            SEQ_NEEDS_INCREMENTAL_STATE
        } else {
            SEQ_INCREMENTAL_STATE_CLEARED
        };
        let packet = TracePacket {
            timestamp: Some(s.ts.max(0) as u64),
            optional_trusted_packet_sequence_id: Some(
                trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(group),
            ),
            sequence_flags: Some(flags),
            interned_data: has_interned.then_some(interned),
            data: Some(trace_packet::Data::PerfSample(PerfSample {
                cpu: s.cpu.map(|c| c.clamp(0, u32::MAX as i64) as u32),
                pid: Some(trace_pid_of(s.global_tid) as u32),
                tid: Some(trace_tid_of(s.global_tid) as u32),
                callstack_iid,
            })),
            ..Default::default()
        };
        frame(&packet, &mut self.out.data);
    }
}

/// The iid of a string id in `map`, defining it in `out` on first use.
fn intern_string(
    map: &mut IdMap<i64, u64>,
    id: i64,
    out: &mut Vec<InternedString>,
    text: impl FnOnce() -> String,
) -> u64 {
    if let Some(&iid) = map.get(&id) {
        return iid;
    }
    let iid = map.len() as u64 + 1;
    map.insert(id, iid);
    out.push(InternedString {
        iid: Some(iid),
        str: Some(text().into_bytes()),
    });
    iid
}
