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

use super::wire::{TRACE_PACKET_BYTE, bytes_len, field_len, put_field, tag, with_room};
use super::{IdMap, ProtoWriter, SampleSeq, frame};
use crate::output::CounterTrack;
use crate::proto::{
    Callstack, CounterDescriptor, InternedData, InternedString, Mapping, PerfSample, TracePacket,
    TrackDescriptor, TrackEvent, counter_descriptor, trace_packet, track_descriptor, track_event,
};
use nsys_perfetto_model::model::{CounterValue, CpuSample, Description, Frame, pid_of, tid_of};
use prost::Message;

const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;
/// Interned entries (functions, mappings, frames, callstacks) a sample sequence keeps before it
/// clears its state and starts a new generation.
const MAX_INTERNED: usize = 100_000;
/// Frame ids held in callstack keys before the same happens (8 bytes each).
const MAX_CALLSTACK_FRAMES: usize = 1_000_000;

impl SampleSeq {
    fn entries(&self) -> usize {
        self.functions.len() + self.mappings.len() + self.frames.len() + self.stacks()
    }

    fn stacks(&self) -> usize {
        self.by_frames.len() + self.callstacks.len()
    }

    fn reset(&mut self) {
        self.started = false;
        self.functions.clear();
        self.mappings.clear();
        self.frames.clear();
        self.by_frames.clear();
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
            sibling_order_rank: track
                .rank
                .map(|r| r.clamp(i32::MIN as i64, i32::MAX as i64) as i32),
            ..Default::default()
        };
        frame(&super::descriptor_packet(desc), &mut self.out.data);
    }

    pub(super) fn write_counter(&mut self, group: u32, ts: i64, value: CounterValue) {
        let seq = self.seqs.get_mut(group).expect("group opened before use");
        let delta = seq.advance(ts);
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
        let mut stack = std::mem::take(&mut seq.stack);
        stack.clear();
        // A known stack is one lookup, its frames unread: by its frames' ids, root first.
        // Each id plus one (`-1`, no string, is 0); they pack when none needs more than 32
        // bits, which their union tells in the same pass.
        let mut union = 0;
        stack.extend(s.frames.iter().rev().map(|f| {
            let (symbol, module) = (
                f.symbol.wrapping_add(1) as u64,
                f.module.wrapping_add(1) as u64,
            );
            union |= symbol | module;
            symbol << 32 | module
        }));
        let packable = union >> 32 == 0;
        let known = match packable && !stack.is_empty() {
            true => seq.by_frames.get(stack.as_slice()).copied(),
            false => None,
        };
        let mut interned = None;
        let callstack_iid = if known.is_some() || s.frames.is_empty() {
            known
        } else {
            let key = packable.then(|| stack.as_slice().into());
            let mut new = InternedData::default();
            let iid = seq.resolve(info, s.frames, key, &mut stack, &mut new);
            let has_interned = !new.function_names.is_empty()
                || !new.mappings.is_empty()
                || !new.frames.is_empty()
                || !new.callstacks.is_empty();
            interned = has_interned.then_some(new);
            Some(iid)
        };
        seq.stack = stack;
        let flags = if std::mem::replace(&mut seq.started, true) {
            SEQ_NEEDS_INCREMENTAL_STATE
        } else {
            SEQ_INCREMENTAL_STATE_CLEARED
        };
        let sample = PerfSample {
            cpu: s.cpu.map(|c| c.clamp(0, u32::MAX as i64) as u32),
            pid: Some(pid_of(s.global_tid) as u32),
            tid: Some(tid_of(s.global_tid) as u32),
            callstack_iid,
        };
        put_sample_packet(
            &mut self.out.data,
            s.ts.max(0) as u64,
            group,
            flags,
            interned.as_ref(),
            &sample,
        );
    }
}

impl SampleSeq {
    /// The iid of the callstack of `frames` (leaf first), interning into `interned` what it
    /// needs that the sequence has not seen; `key` is its packed frames, when they pack.
    /// `stack` is scratch.
    fn resolve(
        &mut self,
        info: &Description,
        frames: &[Frame],
        key: Option<Box<[u64]>>,
        stack: &mut Vec<u64>,
        interned: &mut InternedData,
    ) -> u64 {
        let seq = self;
        stack.clear();
        // Root first, as Perfetto builds callsites from the bottom of the stack up.
        for f in frames.iter().rev() {
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
                        // The symbol id: a stable, distinct address per function of a
                        // module, so two functions never share a frame.
                        rel_pc: Some(f.symbol as u64),
                    });
                    next
                }
            };
            stack.push(iid);
        }
        let next = seq.stacks() as u64 + 1;
        let iid = match key {
            // Not found by its frames above: new.
            Some(key) => {
                seq.by_frames.insert(key, next);
                next
            }
            None => match seq.callstacks.get(stack.as_slice()) {
                Some(&iid) => iid,
                None => {
                    seq.callstacks.insert(stack.as_slice().into(), next);
                    next
                }
            },
        };
        if iid == next {
            seq.callstack_frames += stack.len();
            interned.callstacks.push(Callstack {
                iid: Some(iid),
                frame_ids: stack.clone(),
            });
        }
        iid
    }
}

/// A `TracePacket` holding `sample`, written by hand (a sample packet per CPU sample: building
/// and encoding prost messages cost more than the rest of a sample); the interned data, when a
/// sample adds some, through prost.
fn put_sample_packet(
    out: &mut Vec<u8>,
    ts: u64,
    seq: u32,
    flags: u32,
    interned: Option<&InternedData>,
    sample: &PerfSample,
) {
    let fields = [
        (tag::SAMPLE_CPU, sample.cpu.map(u64::from)),
        (tag::SAMPLE_PID, sample.pid.map(u64::from)),
        (tag::SAMPLE_TID, sample.tid.map(u64::from)),
        (tag::SAMPLE_CALLSTACK_IID, sample.callstack_iid),
    ];
    let sample_len: usize = fields
        .iter()
        .filter_map(|&(tag, v)| v.map(|v| field_len(tag, v)))
        .sum();
    let interned_len = interned.map(|i| i.encoded_len());
    let packet_len = field_len(tag::PACKET_TIMESTAMP, ts)
        + field_len(tag::PACKET_SEQUENCE_ID, u64::from(seq))
        + field_len(tag::PACKET_SEQUENCE_FLAGS, u64::from(flags))
        + interned_len.map_or(0, |n| bytes_len(tag::PACKET_INTERNED_DATA, n))
        + bytes_len(tag::PACKET_PERF_SAMPLE, sample_len);
    with_room(out, 1 + 10 + 11 + 6, |r| {
        r.byte(TRACE_PACKET_BYTE);
        r.varint(packet_len as u64);
        r.field(tag::PACKET_TIMESTAMP, ts);
        r.field(tag::PACKET_SEQUENCE_ID, u64::from(seq));
    });
    if let (Some(interned), Some(n)) = (interned, interned_len) {
        put_field(out, tag::PACKET_INTERNED_DATA, n as u64);
        interned.encode_raw(out);
    }
    with_room(out, 6 + 1 + 10 + 4 * 11, |r| {
        r.field(tag::PACKET_SEQUENCE_FLAGS, u64::from(flags));
        r.field(tag::PACKET_PERF_SAMPLE, sample_len as u64);
        for (tag, v) in fields {
            if let Some(v) = v {
                r.field(tag, v);
            }
        }
    });
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-written sample packet is the `TracePacket` prost would write: same fields.
    #[test]
    fn sample_packet_decodes_as_prost_writes_it() {
        let interned = InternedData {
            function_names: vec![InternedString {
                iid: Some(1),
                str: Some(b"main".to_vec()),
            }],
            callstacks: vec![Callstack {
                iid: Some(1),
                frame_ids: vec![1, 2, 3],
            }],
            ..Default::default()
        };
        for (ts, seq, flags, with_interned, cpu, iid) in [
            (0, 2, SEQ_INCREMENTAL_STATE_CLEARED, true, Some(0), Some(1)),
            (1 << 40, 300, SEQ_NEEDS_INCREMENTAL_STATE, false, None, None),
            (u64::MAX, u32::MAX, 2, true, Some(u32::MAX), Some(u64::MAX)),
        ] {
            let sample = PerfSample {
                cpu,
                pid: Some(4242),
                tid: Some(4243),
                callstack_iid: iid,
            };
            let want = TracePacket {
                timestamp: Some(ts),
                optional_trusted_packet_sequence_id: Some(
                    trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
                ),
                sequence_flags: Some(flags),
                interned_data: with_interned.then(|| interned.clone()),
                data: Some(trace_packet::Data::PerfSample(sample)),
                ..Default::default()
            };
            let mut got = Vec::new();
            put_sample_packet(
                &mut got,
                ts,
                seq,
                flags,
                with_interned.then_some(&interned),
                &sample,
            );
            let trace = crate::proto::Trace::decode(got.as_slice()).expect("decodes");
            assert_eq!(trace.packet, vec![want.clone()]);
            let mut prost_bytes = Vec::new();
            frame(&want, &mut prost_bytes);
            assert_eq!(got.len(), prost_bytes.len(), "same size as prost's");
        }
    }

    /// Stacks found by their packed frames and stacks whose ids do not pack (past 32 bits)
    /// resolve alike: each sample's callstack is its own frames, and no iid is given twice.
    #[test]
    fn packed_and_unpacked_stacks_resolve() {
        use crate::output::{EventWriter, Format};
        use crate::proto::Trace;
        use nsys_perfetto_model::model::Frame;
        use std::collections::HashMap;
        use std::sync::Arc;
        let far = 1i64 << 40;
        let stacks: [&[(i64, i64)]; 5] = [
            &[(1, 2), (3, 2), (5, -1)],
            &[(far, 2), (3, 2)],
            &[(3, 2), (1, 2)],
            &[(far, 2), (3, 2)],
            &[],
        ];
        let mut w =
            super::super::file::Protobuf::default().writer(0, Arc::new(Description::default()));
        let mut want = Vec::new();
        for i in 0..20usize {
            let frames: Vec<Frame> = stacks[i % 5]
                .iter()
                .map(|&(symbol, module)| Frame { symbol, module })
                .collect();
            w.cpu_sample(
                3,
                &CpuSample {
                    ts: i as i64,
                    global_tid: 7,
                    cpu: None,
                    state: None,
                    frames: &frames,
                },
            );
            want.push(frames.iter().rev().map(|f| f.symbol).collect::<Vec<_>>());
        }
        let bytes = w.take_chunk().unwrap().data;
        let (mut frames, mut stacks) = (HashMap::new(), HashMap::new());
        let mut got = Vec::new();
        for p in Trace::decode(&bytes[..]).unwrap().packet {
            if let Some(d) = p.interned_data {
                for f in d.frames {
                    assert!(frames.insert(f.iid(), f.rel_pc() as i64).is_none());
                }
                for c in d.callstacks {
                    assert!(stacks.insert(c.iid(), c.frame_ids).is_none());
                }
            }
            let Some(trace_packet::Data::PerfSample(s)) = p.data else {
                panic!("a sample");
            };
            got.push(match s.callstack_iid {
                Some(iid) => stacks[&iid].iter().map(|f| frames[f]).collect(),
                None => Vec::new(),
            });
        }
        assert_eq!(got, want);
        assert_eq!(stacks.len(), 3);
    }
}
