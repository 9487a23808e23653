//! Track events: each sequence's clear packet, then every slice, instant and its args, with
//! what it interns, as one packet written by hand.

use super::interning::{Interning, Key, Sequence};
use super::wire::tag::{self, gpu};
use super::wire::{
    TRACE_PACKET_BYTE, bytes_len, field_len, put_bytes, put_field, put_varint, with_room,
};
use super::{
    BOOTTIME, INCREMENTAL_CLOCK, MAX_INTERNED, ProtoWriter, SEQ_INCREMENTAL_STATE_CLEARED,
};
use crate::proto::track_event;
use nsys_perfetto_model::model::{ArgValue, Description, Event, Flows};

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
    pub(super) fn clear_state(&mut self, group: u32, lane0_uuid: u64, ts: i64, first: bool) {
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

    /// A BEGIN or INSTANT packet of `ev` on sequence `group`, with what it interns, written
    /// straight into the output: its two lengths are taken to be one byte each (nearly every
    /// packet is under 128 bytes) and the header is rewritten, the event moved, when they are
    /// not.
    pub(super) fn event_packet(
        &mut self,
        group: u32,
        kind: track_event::Type,
        lane: u64,
        lane0: bool,
        ev: &Event<'_>,
    ) {
        let at = self.seqs.index(group).expect("group opened before use");
        // Interning stays bounded: past [`MAX_INTERNED`] names and values on one sequence, its
        // incremental state is cleared and interning starts over (Perfetto's way to let a
        // long-running writer forget), so memory does not grow with distinct names.
        let seq = &self.seqs.list[at];
        if (seq.names + seq.values) as usize >= MAX_INTERNED {
            let (track, ts) = (seq.default_track, seq.last_ts);
            self.clear_state(group, track, ts, false);
        }
        let seq = &mut self.seqs.list[at];
        let delta = seq.advance(ev.start);
        let out = &mut self.out.data;
        let start = out.len();
        // Only the sequence's first packet carries flags (it clears the incremental state);
        // later packets use that state without restating SEQ_NEEDS_INCREMENTAL_STATE, which
        // trace_processor does not require: 2 bytes saved on every packet.
        with_room(out, HEAD_MAX, |r| {
            r.byte(TRACE_PACKET_BYTE);
            r.byte(0);
            r.field(tag::PACKET_TIMESTAMP, delta);
            r.field(tag::PACKET_SEQUENCE_ID, group.into());
            r.byte(tag::PACKET_TRACK_EVENT as u8);
            r.byte(0);
        });
        let body = out.len();
        fill(
            out,
            &mut self.interned,
            &mut self.interning,
            seq,
            &self.desc,
            kind,
            lane,
            lane0,
            ev,
            self.native_gpu,
        );
        let ev_len = out.len() - body;
        let int_len = self.interned.len();
        // The timestamp and sequence fields.
        let head = body - start - 4;
        let mut len = head + bytes_len(tag::PACKET_TRACK_EVENT, ev_len);
        if int_len > 0 {
            len += bytes_len(tag::PACKET_INTERNED_DATA, int_len);
        }
        if len < 0x80 && ev_len < 0x80 {
            out[start + 1] = len as u8;
            out[body - 1] = ev_len as u8;
        } else {
            let hdr = &mut self.scratch;
            hdr.clear();
            hdr.push(TRACE_PACKET_BYTE);
            put_varint(hdr, len as u64);
            hdr.extend_from_slice(&out[start + 2..body - 2]);
            put_varint(hdr, tag::PACKET_TRACK_EVENT);
            put_varint(hdr, ev_len as u64);
            let extra = hdr.len() - (body - start);
            out.resize(out.len() + extra, 0);
            out.copy_within(body..body + ev_len, body + extra);
            out[start..start + hdr.len()].copy_from_slice(hdr);
        }
        if int_len > 0 {
            put_bytes(out, tag::PACKET_INTERNED_DATA, &self.interned);
            self.interned.clear();
        }
    }

    /// A slice's END packet on sequence `group` at `ts`.
    #[inline]
    pub(super) fn end_packet(&mut self, group: u32, lane: u64, lane0: bool, ts: i64) {
        let seq = self.seqs.get_mut(group).expect("group opened before use");
        let delta = seq.advance(ts);
        let ev_len = field_len(tag::TYPE, track_event::Type::SliceEnd as u64)
            + if lane0 {
                0
            } else {
                field_len(tag::TRACK_UUID, lane)
            };
        let len = field_len(tag::PACKET_TIMESTAMP, delta)
            + field_len(tag::PACKET_SEQUENCE_ID, group.into())
            + bytes_len(tag::PACKET_TRACK_EVENT, ev_len);
        with_room(&mut self.out.data, HEAD_MAX + 16, |r| {
            r.byte(TRACE_PACKET_BYTE);
            r.varint(len as u64);
            r.field(tag::PACKET_TIMESTAMP, delta);
            r.field(tag::PACKET_SEQUENCE_ID, group.into());
            r.field(tag::PACKET_TRACK_EVENT, ev_len as u64);
            r.field(tag::TYPE, track_event::Type::SliceEnd as u64);
            if !lane0 {
                r.field(tag::TRACK_UUID, lane);
            }
        });
    }
}

/// Bytes of an event packet's header at most: framing, the timestamp and sequence fields, the
/// event's tag and length.
const HEAD_MAX: usize = 1 + 10 + 11 + 6 + 1 + 10;
// The header is written with one-byte tags.
const _: () = assert!(tag::PACKET_TRACK_EVENT < 0x80 && tag::DEBUG_ANNOTATIONS < 0x80);

/// Bytes of a debug annotation with a varint value, at most.
const ANNOTATION_MAX: usize = 2 + 11 + 11;

/// Encode the fields of a BEGIN or INSTANT at the end of `out`, interning (into `interned`)
/// what the sequence has not seen.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn fill(
    out: &mut Vec<u8>,
    interned: &mut Vec<u8>,
    interning: &mut Interning,
    seq: &mut Sequence,
    info: &Description,
    kind: track_event::Type,
    lane: u64,
    lane0: bool,
    ev: &Event<'_>,
    native_gpu: bool,
) {
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
    let category = u64::from(seq.categories[ci]);
    with_room(out, 11, |r| r.field(tag::CATEGORY_IIDS, category));

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
        // One place writes the annotations with a varint value, so that it is inlined.
        let (value_tag, v) = match arg.value {
            ArgValue::Int(v) => (tag::INT_VALUE, v as u64),
            ArgValue::Bool(v) => (tag::BOOL_VALUE, v as u64),
            ArgValue::Double(v) => {
                with_room(out, ANNOTATION_MAX, |r| {
                    r.byte(tag::DEBUG_ANNOTATIONS as u8);
                    let at = r.written();
                    r.byte(0);
                    r.field(tag::ANNOTATION_NAME_IID, key_iid);
                    r.varint(tag::DOUBLE_VALUE);
                    for b in v.to_le_bytes() {
                        r.byte(b);
                    }
                    let n = r.written() - at - 1;
                    r.set(at, n as u8);
                });
                continue;
            }
            ArgValue::Str(s) => {
                let n = s.len();
                let name_len = field_len(tag::ANNOTATION_NAME_IID, key_iid);
                with_room(out, ANNOTATION_MAX + 20, |r| {
                    r.byte(tag::DEBUG_ANNOTATIONS as u8);
                    r.varint((name_len + bytes_len(tag::STRING_VALUE, n)) as u64);
                    r.field(tag::ANNOTATION_NAME_IID, key_iid);
                    r.field(tag::STRING_VALUE, n as u64);
                });
                out.extend_from_slice(s.as_bytes());
                continue;
            }
            ArgValue::Label(s) => (
                tag::STRING_VALUE_IID,
                intern(interning, interned, seq, info, true, Key::Text(s)),
            ),
            ArgValue::StrId(sid) => (
                tag::STRING_VALUE_IID,
                intern(interning, interned, seq, info, true, Key::Sid(sid)),
            ),
            ArgValue::Numbered(no, s) => (
                tag::STRING_VALUE_IID,
                intern(interning, interned, seq, info, true, Key::No(no, s)),
            ),
        };
        // A debug annotation `{name_iid, <value_tag>: v}`: under 128 bytes, so its length is
        // one byte.
        with_room(out, ANNOTATION_MAX, |r| {
            r.byte(tag::DEBUG_ANNOTATIONS as u8);
            let at = r.written();
            r.byte(0);
            r.field(tag::ANNOTATION_NAME_IID, key_iid);
            r.field(value_tag, v);
            let n = r.written() - at - 1;
            r.set(at, n as u8);
        });
    }

    let name_iid = intern(interning, interned, seq, info, false, ev.name.into());
    let flows = ev.flows.out;
    // `flow_ids_old` is the varint form of `flow_ids` (fixed64): 5 bytes less per arrow end,
    // about 2 MB on a 200k-kernel profile; trace_processor reads either.
    // Rooms of a fixed size (their bounds are checked as they are reserved, not a byte at a
    // time): the flows, few events have, in rooms of their own.
    with_room(out, 2 + 11 + 11, |r| {
        r.field(tag::TYPE, kind as u64);
        r.field(tag::NAME_IID, name_iid);
        if !lane0 {
            r.field(tag::TRACK_UUID, lane);
        }
    });
    if native_gpu && !flows.is_empty() {
        put_gpu_correlation(out, flows);
    } else {
        for &id in flows {
            with_room(out, 11, |r| r.field(tag::FLOW_IDS_OLD, id));
        }
    }
    if let Some(t) = ev.flows.terminating {
        with_room(out, 11, |r| r.field(tag::TERMINATING_FLOW_IDS_OLD, t));
    }
}

/// A launching call's arrows where GPU work is in Perfetto's GPU model: the GPU events it
/// submitted (`gpu_correlation`, from which trace_processor draws the arrows) as a CUDA call
/// (`gpu_api`), and flows of its other arrows (to analysis findings) as ever.
#[cold]
fn put_gpu_correlation(out: &mut Vec<u8>, flows: &[u64]) {
    let gpu_work = |id: &&u64| Flows::ends_on_gpu_work(**id);
    let len: usize = flows
        .iter()
        .filter(gpu_work)
        .map(|&id| field_len(gpu::SUBMISSION_EVENT_IDS, id))
        .sum();
    if len > 0 {
        put_varint(out, gpu::TRACK_EVENT_CORRELATION);
        put_varint(out, len as u64);
        for &id in flows.iter().filter(gpu_work) {
            put_field(out, gpu::SUBMISSION_EVENT_IDS, id);
        }
        put_field(out, gpu::TRACK_EVENT_API, gpu::API_CUDA);
    }
    for &id in flows.iter().filter(|id| !gpu_work(id)) {
        put_field(out, tag::FLOW_IDS_OLD, id);
    }
}

/// The iid of an event's name (`value` false: a slice's and a GPU operation's alike) or of an
/// arg's string value (true), interning it on first use. Inlined at each call site (a kernel
/// interns several values per event); what a first use writes is not.
#[inline(always)]
pub(super) fn intern(
    interning: &mut Interning,
    interned: &mut Vec<u8>,
    seq: &mut Sequence,
    info: &Description,
    value: bool,
    key: Key<'_>,
) -> u64 {
    let (iid, new) = interning.intern(seq, value, key);
    if new {
        let tag = match value {
            false => tag::EVENT_NAMES,
            true => tag::DEBUG_ANNOTATION_STRING_VALUES,
        };
        put_interned(interned, tag, iid, info, key);
    }
    u64::from(iid)
}

/// The entry of a name or value interned on first use, under `tag` of InternedData.
#[cold]
#[inline(never)]
pub(super) fn put_interned(
    interned: &mut Vec<u8>,
    tag: u64,
    iid: u32,
    info: &Description,
    key: Key<'_>,
) {
    let text = match key {
        Key::Text(s) | Key::No(_, s) => s.into(),
        Key::Sid(sid) => info.string_or_id(sid),
    };
    put_entry(interned, tag, u64::from(iid), text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::super::file::Protobuf;
    use super::super::frame;
    use super::super::interning::SMALL;
    use super::*;
    use crate::output::{EventWriter, Format};
    use crate::proto::{ClockSnapshot, TracePacket, clock_snapshot, trace_packet};
    use crate::proto::{TracePacketDefaults, TrackEventDefaults};
    use nsys_perfetto_model::category::Category;
    use nsys_perfetto_model::model::Name;
    use nsys_perfetto_model::model::{Description, TextNo};
    use prost::Message;
    use std::collections::HashMap;
    use std::sync::Arc;

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
        use crate::proto::{Trace, debug_annotation};
        use nsys_perfetto_model::model::{Arg, Flows};
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

    /// Packets whose lengths take more than a byte (a long string arg, a long name interned
    /// with the event) decode to what was written, as do the short ones around them.
    #[test]
    #[allow(deprecated)] // `flow_ids_old`, the field written
    fn long_events_decode() {
        use crate::proto::{Trace, debug_annotation};
        use nsys_perfetto_model::model::{Arg, Flows};
        let long_value = "v".repeat(300);
        let long_name = "n".repeat(200);
        let mut w = Protobuf::default().writer(0, Arc::new(Description::default()));
        w.open_group(2, 7, 0);
        let cases: [(&str, &str, usize); 5] = [
            ("short", "x", 1),
            (&long_name, "x", 1),
            ("short", &long_value, 1),
            (&long_name, &long_value, 40),
            ("short", "y", 0),
        ];
        let mut want = Vec::new();
        for (i, &(name, value, flows)) in cases.iter().enumerate() {
            let args = [
                Arg {
                    key: "text",
                    value: ArgValue::Str(value),
                },
                Arg {
                    key: "int",
                    value: ArgValue::Int(-(i as i64)),
                },
            ];
            let out: Vec<u64> = (0..flows as u64).map(|f| f << 40).collect();
            let ts = 1000 * i as i64;
            let ev = Event {
                start: ts,
                end: Some(ts + 5),
                name: Name::Text(name),
                category: Category::Kernel,
                args: &args,
                flows: Flows {
                    out: &out,
                    terminating: None,
                },
            };
            w.begin(2, 9, false, &ev);
            w.end(2, 9, false, ts + 5);
            want.push((
                ts as u64,
                name.to_string(),
                value.to_string(),
                -(i as i64),
                out,
            ));
        }
        let bytes = w.take_chunk().unwrap().data;
        let mut names = HashMap::new();
        let mut got = Vec::new();
        let mut ts = 0;
        for p in Trace::decode(&bytes[..]).unwrap().packet {
            if let Some(d) = &p.interned_data {
                for e in &d.event_names {
                    names.insert(e.iid(), e.name().to_string());
                }
            }
            let Some(trace_packet::Data::TrackEvent(ev)) = p.data else {
                continue;
            };
            ts += p.timestamp.unwrap_or(0);
            assert_eq!(ev.track_uuid, Some(9));
            let Some(track_event::NameField::NameIid(iid)) = ev.name_field else {
                assert_eq!(ev.r#type, Some(track_event::Type::SliceEnd as i32));
                continue;
            };
            let [text, int] = &ev.debug_annotations[..] else {
                panic!("two args");
            };
            let Some(debug_annotation::Value::StringValue(v)) = &text.value else {
                panic!("a string");
            };
            let Some(debug_annotation::Value::IntValue(n)) = int.value else {
                panic!("an int");
            };
            got.push((ts, names[&iid].clone(), v.clone(), n, ev.flow_ids_old));
        }
        assert_eq!(got, want);
    }
}
