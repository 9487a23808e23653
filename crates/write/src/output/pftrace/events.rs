//! Track events: each sequence's clear packet, then every slice, instant and its args, with
//! what it interns, as one packet written by hand.

use super::interning::{Key, Sequence};
use super::wire::tag::{self};
use super::wire::{
    TRACE_PACKET_BYTE, bytes_len, field_len, put_bytes, put_field, put_varint, varint_len,
};
use super::{
    BOOTTIME, INCREMENTAL_CLOCK, MAX_INTERNED, ProtoWriter, SEQ_INCREMENTAL_STATE_CLEARED,
};
use crate::model::{ArgValue, Event, Name};
use crate::proto::track_event;

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

    /// Interning stays bounded: past [`MAX_INTERNED`] names and values on one sequence, its
    /// incremental state is cleared and interning starts over (Perfetto's way to let a
    /// long-running writer forget), so memory does not grow with distinct names.
    pub(super) fn bound_interning(&mut self, group: u32) {
        let Some(seq) = self.seqs.get(group) else {
            return;
        };
        if (seq.names + seq.values) as usize >= MAX_INTERNED {
            let (track, ts) = (seq.default_track, seq.last_ts);
            self.clear_state(group, track, ts, false);
        }
    }

    /// Frame `self.event` (and `self.interned`) as one packet of the sequence at `ts`.
    pub(super) fn write_event(&mut self, seq_id: u32, ts: i64) {
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
    pub(super) fn fill(
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

#[cfg(test)]
mod tests {
    use super::super::interning::SMALL;
    use super::super::{Protobuf, frame};
    use super::*;
    use crate::model::{Category, Description, TextNo};
    use crate::output::{EventWriter, Format};
    use crate::proto::{ClockSnapshot, TracePacket, clock_snapshot, trace_packet};
    use crate::proto::{TracePacketDefaults, TrackEventDefaults};
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
}
