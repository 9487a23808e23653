//! The trace file's own packets: the header, the descriptors of processes, threads and
//! well-known tracks, each machine of a merge (its `SystemInfo`, its root track's process
//! order, its packets' `machine_id`), and the record of what the trace was made from.

use super::interning::{Interning, Sequences};
use super::wire::tag::{self, beyond_schema};
use super::wire::{put_bytes, put_field, put_varint};
use super::{
    BOOTTIME, DESCRIPTOR_SEQUENCE, ProtoWriter, REALTIME, SEQ_INCREMENTAL_STATE_CLEARED,
    SESSION_SEQUENCE, SESSION_TRACK_UUID, descriptor_packet, frame, kernel,
};
use crate::output::{ChunkBuffer, Format, FormatOptions, Placed, WellKnown, find_last};
use crate::proto::{
    ClockSnapshot, ProcessDescriptor, SystemInfo, ThreadDescriptor, TracePacket, TrackDescriptor,
    TrackEvent, Utsname, clock_snapshot, trace_packet, track_descriptor, track_event,
};
use nsys_perfetto_model::model::{Description, pid_of, source_of, tid_of, without_source};
use nsys_perfetto_model::select::GpuModel;
use prost::Message;
use std::collections::HashMap;
use std::sync::Arc;

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
    /// The report this format writes, alone, as one part of a merge ([`Protobuf::part`]): its
    /// place, which is its machine and its processes' and GPUs' order.
    part: Option<usize>,
    /// How GPU work is written (`--gpu`).
    gpu: GpuModel,
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
            part: None,
            gpu: GpuModel::default(),
        }
    }

    /// The format of one report of a merge of `sources`, the one at `position`, written on its
    /// own (by any source index): its packets on its machine, its processes and GPUs in its
    /// place, nothing of the file's own (the merge's [`Protobuf::new`] writes those once).
    pub fn part(sources: &[Placed], position: usize) -> Protobuf {
        Protobuf {
            part: Some(position),
            ..Protobuf::new(sources)
        }
    }

    /// GPU work written in `model`.
    pub fn with_gpu_model(self, model: GpuModel) -> Protobuf {
        Protobuf { gpu: model, ..self }
    }

    /// A source's place in the merge: its index, or the part's place.
    fn position_of(&self, source: usize) -> usize {
        self.part.unwrap_or(source)
    }

    /// The machine a source's packets go on: its place in a merge, else none (0).
    fn machine_of(&self, source: usize) -> u32 {
        if self.machines.len() > 1 {
            self.position_of(source) as u32
        } else {
            0
        }
    }
}

impl Format for Protobuf {
    const NAME: &'static str = "protobuf";
    const ALIASES: &'static [&'static str] = &["pftrace"];
    const HELP: &'static str = "Perfetto protobuf (.pftrace)";
    const EXTENSION: &'static str = "pftrace";
    const SERVED_GZIPPED: bool = false;
    type Writer = ProtoWriter;

    fn made(sources: &[Placed], options: &FormatOptions) -> Protobuf {
        Protobuf::new(sources).with_gpu_model(options.gpu)
    }

    /// The trailer that ends the file exactly ([`record_packet`]).
    fn read_record(tail: &[u8]) -> Option<String> {
        let needle = record_text_prefix();
        for at in find_last(tail, &needle) {
            let text = &tail[at + needle.len()..];
            // Skip the length varint; the text runs to the end of the file.
            let Some(n) = text.iter().position(|b| b & 0x80 == 0) else {
                continue;
            };
            let Ok(text) = std::str::from_utf8(&text[n + 1..]) else {
                continue;
            };
            if tail.ends_with(&record_packet(text)) {
                return Some(text.to_string());
            }
        }
        None
    }

    fn writer(&self, source: usize, desc: Arc<Description>) -> ProtoWriter {
        let kernel = match self.machines.get(self.position_of(source)) {
            Some(own) => own.as_ref(),
            None => self.kernel.as_ref(),
        };
        let native_gpu = self.gpu == GpuModel::Perfetto;
        let mut out = ChunkBuffer::default();
        if native_gpu {
            out.data.extend(super::gpu::gpu_track_event_extensions());
        }
        ProtoWriter {
            desc,
            out,
            seqs: Sequences::default(),
            interning: Interning::default(),
            scratch: Vec::new(),
            interned: Vec::new(),
            samples: HashMap::default(),
            sched: Default::default(),
            state_codes: kernel::StateCodes::for_kernel(kernel.map(|k| k.1)),
            machine: self.machine_of(source),
            native_gpu,
            gpu: Default::default(),
        }
    }

    /// The trace's clock and time zero: a REALTIME snapshot at the session start (the UI can then
    /// show wall-clock time, and reports of one job line up), and a "Session start" instant
    /// there, so Perfetto's zero is the source's zero unless rows precede the session start.
    fn header(&self) -> Vec<u8> {
        Vec::new()
    }

    fn preamble(&self, sources: &[Placed]) -> Vec<u8> {
        let mut out = Vec::new();
        let Some(first) = sources.first() else {
            return out;
        };
        if self.part.is_some() {
            return out;
        }
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
        let place = |id: i64| self.position_of(source_of(id)).min(i32::MAX as usize) as i32;
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
                    legacy_sort_index: info.label.is_some().then(|| place(gp)),
                    ..Default::default()
                }),
                // Read as the process's place where the machine's root track asks for
                // explicit process ordering (a merge, see `explicit_process_order`).
                sibling_order_rank: info.label.is_some().then(|| place(gp)),
                ..Default::default()
            },
            WellKnown::Gpu(device) => TrackDescriptor {
                uuid: Some(track.uuid()),
                static_or_dynamic_name: Some(track_descriptor::StaticOrDynamicName::Name(
                    info.gpu_label(without_source(device)),
                )),
                child_ordering: Some(track_descriptor::ChildTracksOrdering::Explicit as i32),
                sibling_order_rank: Some(
                    place(device).min(0x7F_FFFF) << 8 | (without_source(device) & 0xFF) as i32,
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

/// The `ChromeMetadata` name under which a trace carries what it was made from
/// (the app's `provenance` reads it back).
pub const RECORD_KEY: &str = "nsys-perfetto";

/// The last packet of a trace: `TracePacket { chrome_events (5): ChromeEventBundle {
/// metadata (2): ChromeMetadata { name (1): RECORD_KEY, string_value (2): text } } }`, framed
/// as a `Trace.packet` (1). trace_processor keeps it as metadata and draws nothing.
pub fn record_packet(text: &str) -> Vec<u8> {
    metadata_packet(RECORD_KEY, text)
}

/// The `ChromeMetadata` name under which a merge's part carries what a merge needs of its
/// report (the app's `convert::PartHeader`), in the part's first packet.
pub const PART_KEY: &str = "nsys-perfetto-part";

/// A packet that trace_processor keeps as metadata named `key` and draws nothing of, framed as
/// a `Trace.packet`: see [`record_packet`].
pub fn metadata_packet(key: &str, text: &str) -> Vec<u8> {
    let mut meta = Vec::new();
    put_bytes(&mut meta, beyond_schema::METADATA_NAME, key.as_bytes());
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

/// What precedes the text in a [`record_packet`]: its `ChromeMetadata.name` (RECORD_KEY) and
/// the tag of its `string_value`, for a reader to find the record by (the text's length and
/// the text follow).
pub fn record_text_prefix() -> Vec<u8> {
    metadata_text_prefix(RECORD_KEY)
}

/// What precedes the text in a [`metadata_packet`] named `key`.
pub fn metadata_text_prefix(key: &str) -> Vec<u8> {
    let mut out = Vec::new();
    put_bytes(&mut out, beyond_schema::METADATA_NAME, key.as_bytes());
    put_varint(&mut out, beyond_schema::METADATA_STRING_VALUE);
    out
}

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

#[cfg(test)]
mod tests {
    use super::super::on_machine;
    use super::*;
    use crate::output::pftrace::wire::TRACE_PACKET_BYTE;

    #[test]
    fn trailer_round_trips_and_needs_the_end_of_the_file() {
        let rec = r#"{"a":"b \u00e9"}"#.repeat(20);
        let mut file = vec![TRACE_PACKET_BYTE, 3, 1, 2, 3];
        file.extend(record_packet(&rec));
        assert_eq!(Protobuf::read_record(&file).as_deref(), Some(rec.as_str()));
        // Anything after it (another packet) and it is not the record of this file.
        file.extend([TRACE_PACKET_BYTE, 1, 0]);
        assert_eq!(Protobuf::read_record(&file), None);
    }

    /// A part copied into a merge: every packet on its machine, the absolute times (clock
    /// snapshots, CPU samples, scheduling) moved, the rest (a track event's delta on its
    /// sequence's incremental clock) as it was.
    #[test]
    fn a_copied_part_moves_absolute_times_only() {
        use super::super::copy_on_machine;
        use crate::proto::{
            FtraceEvent, FtraceEventBundle, PerfSample, ftrace_event_bundle::CompactSched,
        };
        let packets = vec![
            TracePacket {
                data: Some(trace_packet::Data::ClockSnapshot(ClockSnapshot {
                    clocks: vec![
                        clock_snapshot::Clock {
                            clock_id: Some(BOOTTIME),
                            timestamp: Some(100),
                            ..Default::default()
                        },
                        clock_snapshot::Clock {
                            clock_id: Some(64),
                            timestamp: Some(100),
                            is_incremental: Some(true),
                            ..Default::default()
                        },
                        clock_snapshot::Clock {
                            clock_id: Some(REALTIME),
                            timestamp: Some(7),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                })),
                ..Default::default()
            },
            TracePacket {
                timestamp: Some(5),
                data: Some(trace_packet::Data::TrackEvent(TrackEvent::default())),
                ..Default::default()
            },
            TracePacket {
                timestamp: Some(200),
                data: Some(trace_packet::Data::PerfSample(PerfSample {
                    pid: Some(1),
                    ..Default::default()
                })),
                ..Default::default()
            },
            TracePacket {
                data: Some(trace_packet::Data::FtraceEvents(FtraceEventBundle {
                    cpu: Some(2),
                    event: vec![FtraceEvent {
                        timestamp: Some(300),
                        ..Default::default()
                    }],
                    compact_sched: Some(CompactSched {
                        switch_timestamp: vec![400, 10, 10],
                        ..Default::default()
                    }),
                })),
                ..Default::default()
            },
        ];
        let mut data = Vec::new();
        for p in &packets {
            frame(p, &mut data);
        }
        let mut out = Vec::new();
        copy_on_machine(&mut data.as_slice(), &mut out, 3, 1000).unwrap();
        let got = crate::proto::Trace::decode(out.as_slice()).unwrap().packet;
        assert_eq!(got.len(), packets.len());
        assert!(got.iter().all(|p| p.machine_id == Some(3)));
        let Some(trace_packet::Data::ClockSnapshot(c)) = &got[0].data else {
            panic!("{:?}", got[0]);
        };
        let times: Vec<u64> = c.clocks.iter().map(|c| c.timestamp.unwrap()).collect();
        assert_eq!(times, [1100, 1100, 7]);
        assert_eq!(got[1].timestamp, Some(5));
        assert_eq!(got[2].timestamp, Some(1200));
        assert_eq!(got[2].data, packets[2].data);
        let Some(trace_packet::Data::FtraceEvents(b)) = &got[3].data else {
            panic!("{:?}", got[3]);
        };
        assert_eq!(b.event[0].timestamp, Some(1300));
        assert_eq!(
            b.compact_sched.as_ref().unwrap().switch_timestamp,
            [1400, 10, 10]
        );
        // Nothing moved: the bytes as they were, on the host.
        let mut same = Vec::new();
        copy_on_machine(&mut data.as_slice(), &mut same, 0, 0).unwrap();
        assert_eq!(same, data);
    }

    /// A part as a file gives it, a few bytes a read, with a packet larger than the copy's
    /// block among many small ones: every packet copied whole and in order; a part cut short
    /// inside a packet is an error, not a shorter copy.
    #[test]
    fn a_copied_part_read_in_pieces_keeps_every_packet() {
        use super::super::copy_on_machine;
        struct Dribble<'a>(&'a [u8]);
        impl std::io::Read for Dribble<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(self.0.len()).min(7);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let packet = |ts: u64, name_len: usize| TracePacket {
            timestamp: Some(ts),
            data: Some(trace_packet::Data::TrackEvent(TrackEvent {
                name_field: Some(crate::proto::track_event::NameField::Name(
                    "x".repeat(name_len),
                )),
                ..Default::default()
            })),
            ..Default::default()
        };
        let packets: Vec<TracePacket> = (0..2000)
            .map(|i| packet(i, if i == 1000 { 3 << 20 } else { i as usize % 300 }))
            .collect();
        let mut data = Vec::new();
        for p in &packets {
            frame(p, &mut data);
        }
        let mut out = Vec::new();
        let n = copy_on_machine(&mut Dribble(&data), &mut out, 2, 10).unwrap();
        assert_eq!(n, out.len() as u64);
        let got = crate::proto::Trace::decode(out.as_slice()).unwrap().packet;
        let expected: Vec<TracePacket> = packets
            .iter()
            .map(|p| TracePacket {
                machine_id: Some(2),
                ..p.clone()
            })
            .collect();
        assert!(got == expected, "packets differ");
        let cut = &data[..data.len() - 1];
        let err = copy_on_machine(&mut Dribble(cut), &mut Vec::new(), 2, 10).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
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
