//! Perfetto protobuf (TrackEvent) output.
//!
//! Each group of events is its own packet sequence: it clears incremental state once, declares a
//! sequence-scoped incremental clock so every later packet carries a small delta timestamp, sets
//! its first lane as the default track (events on it omit `track_uuid`), and interns names, arg
//! keys and repeating string values on first use.

mod samples;

use super::{
    Chunk, ChunkBuffer, CounterTrack, CustomTrack, EventWriter, Format, Placed, WellKnown,
};
use crate::model::{
    ArgValue, Category, CounterValue, CpuSample, Description, Event, Name, source_of,
    without_source,
};
use crate::proto::{
    ClockSnapshot, DebugAnnotation, DebugAnnotationName, EventCategory, EventName, InternedData,
    InternedString, ProcessDescriptor, ThreadDescriptor, TracePacket, TracePacketDefaults,
    TrackDescriptor, TrackEvent, TrackEventDefaults, clock_snapshot, debug_annotation,
    trace_packet, track_descriptor, track_event,
};
use prost::Message;
use std::collections::HashMap;
use std::sync::Arc;

/// Sequence-scoped clock ids are 64..=127; each sequence declares its own incremental clock.
const INCREMENTAL_CLOCK: u32 = 64;
const BOOTTIME: u32 = 6;
const REALTIME: u32 = 1;
/// The sequence of the session-start marker, apart from the counter-allocated ones.
const SESSION_SEQUENCE: u32 = 0x7FFF_FFF0;
/// The track of the session-start marker: a uuid apart from counters and well-known ones.
pub const SESSION_TRACK_UUID: u64 = (1 << 40) + 1;
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
/// The file writer's own sequence, for process and thread descriptors.
const DESCRIPTOR_SEQUENCE: u32 = 1;

pub struct Protobuf;

impl Format for Protobuf {
    type Writer = ProtoWriter;

    fn writer(&self, desc: Arc<Description>) -> ProtoWriter {
        ProtoWriter {
            desc,
            out: ChunkBuffer::default(),
            seqs: HashMap::new(),
            event: TrackEvent::default(),
            interned: InternedData::default(),
            samples: HashMap::new(),
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
        let desc = match track {
            WellKnown::Process(gp) => TrackDescriptor {
                uuid: Some(track.uuid()),
                process: Some(ProcessDescriptor {
                    pid: Some(track.pid() as i32),
                    process_name: Some(info.process_name(gp)),
                    ..Default::default()
                }),
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
            WellKnown::Thread(gt) => TrackDescriptor {
                uuid: Some(track.uuid()),
                thread: Some(ThreadDescriptor {
                    pid: Some(track.pid() as i32),
                    tid: track.tid().map(|t| t as i32),
                    thread_name: Some(info.thread_name(gt)),
                    ..Default::default()
                }),
                ..Default::default()
            },
        };
        let mut out = Vec::new();
        frame(&descriptor_packet(desc), &mut out);
        out
    }

    fn footer(&self, _sources: &[Placed]) -> Vec<u8> {
        Vec::new()
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

/// `Trace.packet` framing: field 1, length-delimited. Any concatenation is a valid trace.
fn frame(packet: &TracePacket, out: &mut Vec<u8>) {
    out.push(0x0A);
    packet
        .encode_length_delimited(out)
        .expect("Vec<u8> grows as needed");
}

/// Interning state of one sequence. Ids are per kind of interned data, starting at 1.
#[derive(Default)]
struct Sequence {
    last_ts: i64,
    names_by_sid: HashMap<i64, u64>,
    names_by_text: HashMap<Box<str>, u64>,
    arg_names: HashMap<&'static str, u64>,
    values_by_sid: HashMap<i64, u64>,
    values_by_text: HashMap<Box<str>, u64>,
    categories: [u64; Category::ALL.len()],
    next_name: u64,
    next_arg_name: u64,
    next_value: u64,
    next_category: u64,
}

pub struct ProtoWriter {
    desc: Arc<Description>,
    out: ChunkBuffer,
    seqs: HashMap<u32, Sequence>,
    /// Reused between events so the hot path does not allocate.
    event: TrackEvent,
    interned: InternedData,
    /// Interning state of CPU sample sequences (see `samples`).
    samples: HashMap<u32, samples::SampleSeq>,
}

impl ProtoWriter {
    fn write_event(&mut self, seq_id: u32, ts: i64, extra_interning: bool) {
        let seq = self.seqs.get_mut(&seq_id).expect("group opened before use");
        debug_assert!(
            ts >= seq.last_ts,
            "layout keeps each sequence in time order"
        );
        let delta = (ts - seq.last_ts).max(0) as u64;
        seq.last_ts = ts;
        let has_interned = extra_interning
            && (!self.interned.event_names.is_empty()
                || !self.interned.event_categories.is_empty()
                || !self.interned.debug_annotation_names.is_empty()
                || !self.interned.debug_annotation_string_values.is_empty());
        let mut packet = TracePacket {
            timestamp: Some(delta),
            optional_trusted_packet_sequence_id: Some(
                trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq_id),
            ),
            // Only the sequence's first packet carries flags (it clears the incremental state);
            // later packets use that state without restating SEQ_NEEDS_INCREMENTAL_STATE, which
            // trace_processor does not require: 2 bytes saved on every packet.
            sequence_flags: None,
            interned_data: if has_interned {
                Some(std::mem::take(&mut self.interned))
            } else {
                None
            },
            data: Some(trace_packet::Data::TrackEvent(std::mem::take(
                &mut self.event,
            ))),
            ..Default::default()
        };
        frame(&packet, &mut self.out.data);
        // Take the reusable buffers back, emptied but with their capacity.
        if let Some(trace_packet::Data::TrackEvent(ev)) = packet.data.take() {
            self.event = ev;
        }
        reset_event(&mut self.event);
        if let Some(mut i) = packet.interned_data.take() {
            i.event_names.clear();
            i.event_categories.clear();
            i.debug_annotation_names.clear();
            i.debug_annotation_string_values.clear();
            self.interned = i;
        }
    }

    /// Fill `self.event` for a BEGIN or INSTANT, interning what the sequence has not seen.
    #[allow(deprecated)] // flow_ids_old: see the note on flows below
    fn fill(
        &mut self,
        seq_id: u32,
        kind: track_event::Type,
        lane: u64,
        lane0: bool,
        ev: &Event<'_>,
    ) {
        let info = &*self.desc;
        let seq = self.seqs.get_mut(&seq_id).expect("group opened before use");
        let interned = &mut self.interned;
        let e = &mut self.event;
        e.r#type = Some(kind as i32);
        e.track_uuid = if lane0 { None } else { Some(lane) };

        let name_iid = match ev.name {
            Name::Str(sid) => match seq.names_by_sid.get(&sid) {
                Some(&iid) => iid,
                None => {
                    seq.next_name += 1;
                    let iid = seq.next_name;
                    seq.names_by_sid.insert(sid, iid);
                    interned.event_names.push(EventName {
                        iid: Some(iid),
                        name: Some(info.string_or_id(sid).into_owned()),
                    });
                    iid
                }
            },
            Name::Text(t) | Name::Static(t) => match seq.names_by_text.get(t) {
                Some(&iid) => iid,
                None => {
                    seq.next_name += 1;
                    let iid = seq.next_name;
                    seq.names_by_text.insert(t.into(), iid);
                    interned.event_names.push(EventName {
                        iid: Some(iid),
                        name: Some(t.to_string()),
                    });
                    iid
                }
            },
        };
        e.name_field = Some(track_event::NameField::NameIid(name_iid));

        let ci = ev.category.index();
        if seq.categories[ci] == 0 {
            seq.next_category += 1;
            seq.categories[ci] = seq.next_category;
            interned.event_categories.push(EventCategory {
                iid: Some(seq.next_category),
                name: Some(ev.category.as_str().to_string()),
            });
        }
        e.category_iids.push(seq.categories[ci]);

        for arg in ev.args {
            let key_iid = match seq.arg_names.get(arg.key) {
                Some(&iid) => iid,
                None => {
                    seq.next_arg_name += 1;
                    let iid = seq.next_arg_name;
                    seq.arg_names.insert(arg.key, iid);
                    interned.debug_annotation_names.push(DebugAnnotationName {
                        iid: Some(iid),
                        name: Some(arg.key.to_string()),
                    });
                    iid
                }
            };
            use debug_annotation::Value;
            let value = match arg.value {
                ArgValue::Int(v) => Value::IntValue(v),
                ArgValue::Double(v) => Value::DoubleValue(v),
                ArgValue::Bool(v) => Value::BoolValue(v),
                ArgValue::Str(s) => Value::StringValue(s.to_string()),
                ArgValue::Label(s) => Value::StringValueIid(match seq.values_by_text.get(s) {
                    Some(&iid) => iid,
                    None => {
                        seq.next_value += 1;
                        let iid = seq.next_value;
                        seq.values_by_text.insert(s.into(), iid);
                        interned
                            .debug_annotation_string_values
                            .push(InternedString {
                                iid: Some(iid),
                                str: Some(s.as_bytes().to_vec()),
                            });
                        iid
                    }
                }),
                ArgValue::StrId(sid) => Value::StringValueIid(match seq.values_by_sid.get(&sid) {
                    Some(&iid) => iid,
                    None => {
                        seq.next_value += 1;
                        let iid = seq.next_value;
                        seq.values_by_sid.insert(sid, iid);
                        interned
                            .debug_annotation_string_values
                            .push(InternedString {
                                iid: Some(iid),
                                str: Some(info.string_or_id(sid).as_bytes().to_vec()),
                            });
                        iid
                    }
                }),
            };
            e.debug_annotations.push(DebugAnnotation {
                name_field: Some(debug_annotation::NameField::NameIid(key_iid)),
                value: Some(value),
                ..Default::default()
            });
        }

        // `flow_ids_old` is the varint form of `flow_ids` (fixed64): 5 bytes less per arrow end,
        // about 2 MB on a 200k-kernel profile; trace_processor reads either.
        let f = ev.flows;
        e.flow_ids_old.extend_from_slice(f.out);
        if let Some(t) = f.terminating {
            e.terminating_flow_ids_old.push(t);
        }
    }
}

#[allow(deprecated)] // flow_ids_old
fn reset_event(e: &mut TrackEvent) {
    e.r#type = None;
    e.track_uuid = None;
    e.name_field = None;
    e.category_iids.clear();
    e.debug_annotations.clear();
    e.flow_ids_old.clear();
    e.terminating_flow_ids_old.clear();
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
        let packet = TracePacket {
            optional_trusted_packet_sequence_id: Some(
                trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(group),
            ),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            first_packet_on_sequence: Some(true),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(INCREMENTAL_CLOCK),
                track_event_defaults: Some(TrackEventDefaults {
                    track_uuid: Some(lane0_uuid),
                    ..Default::default()
                }),
            }),
            data: Some(trace_packet::Data::ClockSnapshot(ClockSnapshot {
                clocks: vec![
                    clock_snapshot::Clock {
                        clock_id: Some(BOOTTIME),
                        timestamp: Some(first_ts.max(0) as u64),
                        ..Default::default()
                    },
                    clock_snapshot::Clock {
                        clock_id: Some(INCREMENTAL_CLOCK),
                        timestamp: Some(first_ts.max(0) as u64),
                        is_incremental: Some(true),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            })),
            ..Default::default()
        };
        frame(&packet, &mut self.out.data);
        self.seqs.insert(
            group,
            Sequence {
                last_ts: first_ts.max(0),
                ..Default::default()
            },
        );
    }

    fn begin(&mut self, group: u32, lane_uuid: u64, lane0: bool, ev: &Event<'_>) {
        self.fill(group, track_event::Type::SliceBegin, lane_uuid, lane0, ev);
        self.write_event(group, ev.start, true);
    }

    fn end(&mut self, group: u32, lane_uuid: u64, lane0: bool, ts: i64) {
        self.event.r#type = Some(track_event::Type::SliceEnd as i32);
        self.event.track_uuid = if lane0 { None } else { Some(lane_uuid) };
        self.write_event(group, ts, false);
    }

    fn instant(&mut self, group: u32, lane_uuid: u64, lane0: bool, ev: &Event<'_>) {
        self.fill(group, track_event::Type::Instant, lane_uuid, lane0, ev);
        self.write_event(group, ev.start, true);
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

    fn buffered(&self) -> usize {
        self.out.data.len()
    }

    fn take_chunk(&mut self) -> Option<Chunk> {
        self.out.take()
    }
}
