//! Protobuf's wire format for the packets written by hand, field by field, as Perfetto's
//! protozero does: the schema is `proto/` (prost types decode these bytes in the tests), the
//! field numbers are generated from it (`crate::proto::field`), the varints are prost's
//! encoding.
//!
//! A tag is `(field number << 3) | wire type`.

use crate::proto::field;
use prost::encoding::WireType;
use std::mem::MaybeUninit;

const fn key(field: u32, wire: WireType) -> u64 {
    (field as u64) << 3 | wire as u64
}

const VARINT: WireType = WireType::Varint;
const LEN: WireType = WireType::LengthDelimited;
const I64: WireType = WireType::SixtyFourBit;

/// The tags of the fields written by hand.
pub mod tag {
    use super::{I64, LEN, VARINT, field, key};
    use field::{
        clock_snapshot, debug_annotation, ftrace_event_bundle, interned_data, interned_string,
        perf_sample, trace_packet, trace_packet_defaults, track_event, track_event_defaults,
    };

    // Trace
    pub const TRACE_PACKET: u64 = key(field::trace::PACKET, LEN);
    // TracePacket
    pub const PACKET_CLOCK_SNAPSHOT: u64 = key(trace_packet::CLOCK_SNAPSHOT, LEN);
    pub const PACKET_TIMESTAMP: u64 = key(trace_packet::TIMESTAMP, VARINT);
    pub const PACKET_SEQUENCE_ID: u64 = key(trace_packet::TRUSTED_PACKET_SEQUENCE_ID, VARINT);
    pub const PACKET_TRACK_EVENT: u64 = key(trace_packet::TRACK_EVENT, LEN);
    pub const PACKET_INTERNED_DATA: u64 = key(trace_packet::INTERNED_DATA, LEN);
    pub const PACKET_SEQUENCE_FLAGS: u64 = key(trace_packet::SEQUENCE_FLAGS, VARINT);
    pub const PACKET_DEFAULTS: u64 = key(trace_packet::TRACE_PACKET_DEFAULTS, LEN);
    pub const PACKET_FIRST_ON_SEQUENCE: u64 = key(trace_packet::FIRST_PACKET_ON_SEQUENCE, VARINT);
    pub const PACKET_MACHINE_ID: u64 = key(trace_packet::MACHINE_ID, VARINT);
    pub const PACKET_TRACK_DESCRIPTOR: u64 = key(trace_packet::TRACK_DESCRIPTOR, LEN);
    pub const PACKET_SYSTEM_INFO: u64 = key(trace_packet::SYSTEM_INFO, LEN);
    pub const PACKET_PERF_SAMPLE: u64 = key(trace_packet::PERF_SAMPLE, LEN);
    pub const PACKET_FTRACE_EVENTS: u64 = key(trace_packet::FTRACE_EVENTS, LEN);
    // ClockSnapshot, its Clock
    pub const SNAPSHOT_CLOCKS: u64 = key(clock_snapshot::CLOCKS, LEN);
    pub const CLOCK_ID: u64 = key(clock_snapshot::clock::CLOCK_ID, VARINT);
    pub const CLOCK_TIMESTAMP: u64 = key(clock_snapshot::clock::TIMESTAMP, VARINT);
    pub const CLOCK_IS_INCREMENTAL: u64 = key(clock_snapshot::clock::IS_INCREMENTAL, VARINT);
    // TracePacketDefaults, its TrackEventDefaults
    pub const DEFAULTS_TRACK_EVENT: u64 = key(trace_packet_defaults::TRACK_EVENT_DEFAULTS, LEN);
    pub const DEFAULTS_CLOCK_ID: u64 = key(trace_packet_defaults::TIMESTAMP_CLOCK_ID, VARINT);
    pub const DEFAULT_TRACK_UUID: u64 = key(track_event_defaults::TRACK_UUID, VARINT);
    // TrackDescriptor
    pub const TRACK_UUID_OF_DESCRIPTOR: u64 = key(field::track_descriptor::UUID, VARINT);
    // TrackEvent
    pub const CATEGORY_IIDS: u64 = key(track_event::CATEGORY_IIDS, VARINT);
    pub const DEBUG_ANNOTATIONS: u64 = key(track_event::DEBUG_ANNOTATIONS, LEN);
    pub const TYPE: u64 = key(track_event::TYPE, VARINT);
    pub const NAME_IID: u64 = key(track_event::NAME_IID, VARINT);
    pub const TRACK_UUID: u64 = key(track_event::TRACK_UUID, VARINT);
    pub const FLOW_IDS_OLD: u64 = key(track_event::FLOW_IDS_OLD, VARINT);
    pub const TERMINATING_FLOW_IDS_OLD: u64 = key(track_event::TERMINATING_FLOW_IDS_OLD, VARINT);
    // DebugAnnotation
    pub const ANNOTATION_NAME_IID: u64 = key(debug_annotation::NAME_IID, VARINT);
    pub const BOOL_VALUE: u64 = key(debug_annotation::BOOL_VALUE, VARINT);
    pub const INT_VALUE: u64 = key(debug_annotation::INT_VALUE, VARINT);
    pub const DOUBLE_VALUE: u64 = key(debug_annotation::DOUBLE_VALUE, I64);
    pub const STRING_VALUE: u64 = key(debug_annotation::STRING_VALUE, LEN);
    pub const STRING_VALUE_IID: u64 = key(debug_annotation::STRING_VALUE_IID, VARINT);
    // InternedData; each entry is an InternedString-shaped {iid, name/str}
    pub const EVENT_CATEGORIES: u64 = key(interned_data::EVENT_CATEGORIES, LEN);
    pub const EVENT_NAMES: u64 = key(interned_data::EVENT_NAMES, LEN);
    pub const DEBUG_ANNOTATION_NAMES: u64 = key(interned_data::DEBUG_ANNOTATION_NAMES, LEN);
    pub const DEBUG_ANNOTATION_STRING_VALUES: u64 =
        key(interned_data::DEBUG_ANNOTATION_STRING_VALUES, LEN);
    pub const ENTRY_IID: u64 = key(interned_string::IID, VARINT);
    pub const ENTRY_NAME: u64 = key(interned_string::STR, LEN);
    // PerfSample
    pub const SAMPLE_CPU: u64 = key(perf_sample::CPU, VARINT);
    pub const SAMPLE_PID: u64 = key(perf_sample::PID, VARINT);
    pub const SAMPLE_TID: u64 = key(perf_sample::TID, VARINT);
    pub const SAMPLE_CALLSTACK_IID: u64 = key(perf_sample::CALLSTACK_IID, VARINT);
    // FtraceEventBundle, its CompactSched (packed arrays)
    pub const BUNDLE_CPU: u64 = key(ftrace_event_bundle::CPU, VARINT);
    pub const BUNDLE_COMPACT_SCHED: u64 = key(ftrace_event_bundle::COMPACT_SCHED, LEN);
    pub const SWITCH_TIMESTAMP: u64 =
        key(ftrace_event_bundle::compact_sched::SWITCH_TIMESTAMP, LEN);
    pub const SWITCH_PREV_STATE: u64 =
        key(ftrace_event_bundle::compact_sched::SWITCH_PREV_STATE, LEN);
    pub const SWITCH_NEXT_PID: u64 = key(ftrace_event_bundle::compact_sched::SWITCH_NEXT_PID, LEN);
    pub const SWITCH_NEXT_PRIO: u64 =
        key(ftrace_event_bundle::compact_sched::SWITCH_NEXT_PRIO, LEN);
    pub const INTERN_TABLE: u64 = key(ftrace_event_bundle::compact_sched::INTERN_TABLE, LEN);
    pub const SWITCH_NEXT_COMM_INDEX: u64 = key(
        ftrace_event_bundle::compact_sched::SWITCH_NEXT_COMM_INDEX,
        LEN,
    );

    /// Fields newer than the schema in `proto/` (or of messages it leaves out): the only
    /// numbers typed by hand, each with the upstream message it belongs to.
    pub mod beyond_schema {
        use super::{LEN, VARINT, key};
        /// `TrackDescriptor.process_ordering` (PROCESS_ORDERING_EXPLICIT = 1).
        pub const TRACK_PROCESS_ORDERING: u64 = key(19, VARINT);
        /// `SystemInfo.machine_name`.
        pub const SYSTEM_INFO_MACHINE_NAME: u64 = key(17, LEN);
        /// `TracePacket.chrome_events`: a `ChromeEventBundle`.
        pub const PACKET_CHROME_EVENTS: u64 = key(5, LEN);
        /// `ChromeEventBundle.metadata`: a `ChromeMetadata`.
        pub const BUNDLE_METADATA: u64 = key(2, LEN);
        /// `ChromeMetadata.name`.
        pub const METADATA_NAME: u64 = key(1, LEN);
        /// `ChromeMetadata.string_value`.
        pub const METADATA_STRING_VALUE: u64 = key(2, LEN);
    }

    /// Perfetto's GPU model (`protos/perfetto/trace/gpu/gpu_render_stage_event.proto`,
    /// `gpu_track_event.proto`, `gpu_interned_data.proto`, `system_info/gpu_info.proto`): newer
    /// than the schema in `proto/` (its compute-kernel fields came in v55), so typed by hand with
    /// upstream's numbers.
    pub mod gpu {
        use super::{I64, LEN, VARINT, key};
        /// `TracePacket.gpu_render_stage_event`: a `GpuRenderStageEvent`.
        pub const PACKET_RENDER_STAGE: u64 = key(53, LEN);
        /// `TracePacket.timestamp_clock_id`.
        pub const PACKET_CLOCK_ID: u64 = key(58, VARINT);
        /// `TracePacket.gpu_info`: a `GpuInfo`.
        pub const PACKET_GPU_INFO: u64 = key(128, LEN);
        // GpuRenderStageEvent
        pub const EVENT_ID: u64 = key(1, VARINT);
        pub const DURATION: u64 = key(2, VARINT);
        pub const CONTEXT: u64 = key(5, VARINT);
        pub const GPU_ID: u64 = key(11, VARINT);
        pub const HW_QUEUE_IID: u64 = key(13, VARINT);
        pub const STAGE_IID: u64 = key(14, VARINT);
        pub const KERNEL_IID: u64 = key(19, VARINT);
        pub const NAME_IID: u64 = key(20, VARINT);
        pub const LAUNCH: u64 = key(21, LEN);
        // GpuRenderStageEvent.ComputeKernelLaunch and its Dim3
        pub const GRID_SIZE: u64 = key(1, LEN);
        pub const WORKGROUP_SIZE: u64 = key(2, LEN);
        pub const LAUNCH_ARGS: u64 = key(3, LEN);
        pub const DIM_X: u64 = key(1, VARINT);
        pub const DIM_Y: u64 = key(2, VARINT);
        pub const DIM_Z: u64 = key(3, VARINT);
        // GpuRenderStageEvent.ExtraComputeArg
        pub const ARG_NAME_IID: u64 = key(1, VARINT);
        pub const ARG_INT: u64 = key(3, VARINT);
        pub const ARG_DOUBLE: u64 = key(5, I64);
        pub const ARG_STRING: u64 = key(6, LEN);
        pub const ARG_STRING_IID: u64 = key(7, VARINT);
        // InternedData
        pub const INTERNED_GRAPHICS_CONTEXTS: u64 = key(23, LEN);
        pub const INTERNED_SPECIFICATIONS: u64 = key(24, LEN);
        /// `GpuInternedData.compute_kernels`, an `InternedData` extension.
        pub const INTERNED_KERNELS: u64 = key(1000, LEN);
        /// `GpuInternedData.compute_arg_names`, an `InternedData` extension.
        pub const INTERNED_ARG_NAMES: u64 = key(1001, LEN);
        // InternedGpuRenderStageSpecification, InternedGraphicsContext, InternedComputeKernel
        // (each `iid` is field 1, `name` field 2)
        pub const IID: u64 = key(1, VARINT);
        pub const NAME: u64 = key(2, LEN);
        pub const SPEC_CATEGORY: u64 = key(4, VARINT);
        pub const CONTEXT_PID: u64 = key(2, VARINT);
        pub const CONTEXT_API: u64 = key(3, VARINT);
        pub const KERNEL_DEMANGLED_NAME: u64 = key(3, LEN);
        pub const KERNEL_ARCH: u64 = key(4, LEN);
        /// `InternedComputeKernel.args`: `ExtraComputeArg`s every launch of the kernel shares.
        pub const KERNEL_ARGS: u64 = key(5, LEN);
        /// `GpuTrackEvent.gpu_correlation`, a `TrackEvent` extension: a `GpuCorrelation`.
        pub const TRACK_EVENT_CORRELATION: u64 = key(3000, LEN);
        /// `GpuTrackEvent.gpu_api`, a `TrackEvent` extension.
        pub const TRACK_EVENT_API: u64 = key(3001, VARINT);
        /// `GpuCorrelation.render_stage_submission_event_ids`.
        pub const SUBMISSION_EVENT_IDS: u64 = key(1, VARINT);
        // GpuInfo and GpuInfo.Gpu
        pub const GPU_INFO_GPUS: u64 = key(1, LEN);
        pub const GPU_NAME: u64 = key(1, LEN);
        pub const GPU_VENDOR: u64 = key(2, LEN);
        pub const GPU_MODEL: u64 = key(3, LEN);
        pub const GPU_ARCHITECTURE: u64 = key(4, LEN);
        pub const GPU_UUID: u64 = key(5, LEN);
        pub const GPU_PCI_BDF: u64 = key(7, LEN);
        // GPU counters (`gpu_counter_event.proto`, `common/gpu_counter_descriptor.proto`)
        /// `TracePacket.gpu_counter_event`: a `GpuCounterEvent`.
        pub const PACKET_COUNTER_EVENT: u64 = key(52, LEN);
        /// `InternedData.gpu_counter_descriptors`: `InternedGpuCounterDescriptor`s.
        pub const INTERNED_COUNTER_DESCRIPTORS: u64 = key(47, LEN);
        // GpuCounterEvent and its GpuCounter
        pub const COUNTER_DESCRIPTOR_IID: u64 = key(4, VARINT);
        pub const COUNTERS: u64 = key(2, LEN);
        pub const COUNTER_ID: u64 = key(1, VARINT);
        pub const COUNTER_INT: u64 = key(2, VARINT);
        pub const COUNTER_DOUBLE: u64 = key(3, I64);
        // InternedGpuCounterDescriptor (`iid` is `IID`), GpuCounterDescriptor, its GpuCounterSpec
        // (`counter_id` is `COUNTER_ID`, `name` is `NAME`)
        pub const DESCRIPTOR: u64 = key(2, LEN);
        pub const DESCRIPTOR_GPU_ID: u64 = key(3, VARINT);
        pub const DESCRIPTOR_SPECS: u64 = key(1, LEN);
        pub const SPEC_NUMERATOR_UNITS: u64 = key(7, VARINT);
        pub const SPEC_GROUPS: u64 = key(10, VARINT);
        pub const SPEC_VALUE_DIRECTION: u64 = key(11, VARINT);
        /// `GpuCounterSpec.VALUE_DIRECTION_FORWARDS_LOOKING`: a value holds from its time on.
        pub const FORWARDS_LOOKING: u64 = 2;
        /// `TracePacket.extension_descriptor`: an `ExtensionDescriptor`, whose field 1 is a
        /// `FileDescriptorSet` (`google/protobuf/descriptor.proto`) of extensions to add.
        pub const PACKET_EXTENSION_DESCRIPTOR: u64 = key(72, LEN);
        /// `InternedGraphicsContext.Api.CUDA` and `GpuApi.GPU_API_CUDA`.
        pub const API_CUDA: u64 = 4;
        /// `InternedGpuRenderStageSpecification.RenderStageCategory.COMPUTE`.
        pub const CATEGORY_COMPUTE: u64 = 2;
    }
}

/// The first byte of every framed packet (`Trace.packet`): a one-byte tag.
pub const TRACE_PACKET_BYTE: u8 = tag::TRACE_PACKET as u8;
const _: () = assert!(tag::TRACE_PACKET < 0x80);

/// `v` as a varint, inlined: prost's own is a call that grows the vector byte by byte, and
/// most values here (tags, small ids) are one byte.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    with_room(out, 10, |r| r.varint(v));
}

/// Room reserved at the end of a vector, written front to back: the hot packets check the
/// vector's capacity once for a run of fields, not once a byte, and the position stays in a
/// register instead of the vector's length being stored after every byte.
pub struct Room<'a> {
    buf: &'a mut [MaybeUninit<u8>],
    at: usize,
}

impl Room<'_> {
    #[inline(always)]
    pub fn byte(&mut self, b: u8) {
        self.buf[self.at] = MaybeUninit::new(b);
        self.at += 1;
    }

    #[inline(always)]
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    #[inline(always)]
    pub fn field(&mut self, tag: u64, v: u64) {
        self.varint(tag);
        self.varint(v);
    }

    /// Set a byte already written (a length once what it measures is written).
    #[inline(always)]
    pub fn set(&mut self, at: usize, b: u8) {
        assert!(at < self.at, "only a written byte is set");
        self.buf[at] = MaybeUninit::new(b);
    }

    /// Bytes written so far.
    #[inline(always)]
    pub fn written(&self) -> usize {
        self.at
    }
}

/// Let `f` write at most `max` bytes at the end of `out` (more is a bug, and panics).
#[inline(always)]
pub fn with_room<R>(out: &mut Vec<u8>, max: usize, f: impl FnOnce(&mut Room<'_>) -> R) -> R {
    out.reserve(max);
    let len = out.len();
    let mut room = Room {
        buf: &mut out.spare_capacity_mut()[..max],
        at: 0,
    };
    let r = f(&mut room);
    let n = room.at;
    // SAFETY: `Room` writes only through `byte`, which initializes `buf[at]` before moving
    // `at` past it, so the first `n` bytes of the spare capacity are initialized.
    unsafe { out.set_len(len + n) };
    r
}

#[inline]
pub const fn varint_len(v: u64) -> usize {
    prost::encoding::encoded_len_varint(v)
}

/// A varint at the start of `data`: its value and length (what is there, if it is cut short).
pub fn read_varint(data: &[u8]) -> (u64, usize) {
    let mut rest = data;
    let v = prost::encoding::decode_varint(&mut rest).unwrap_or(0);
    (v, data.len() - rest.len())
}

#[inline]
pub fn put_field(out: &mut Vec<u8>, tag: u64, v: u64) {
    with_room(out, 20, |r| r.field(tag, v));
}

#[inline]
pub fn put_bytes(out: &mut Vec<u8>, tag: u64, bytes: &[u8]) {
    with_room(out, 20, |r| r.field(tag, bytes.len() as u64));
    out.extend_from_slice(bytes);
}

/// Bytes of a varint field.
pub fn field_len(tag: u64, v: u64) -> usize {
    varint_len(tag) + varint_len(v)
}

/// Bytes of a length-delimited field of `len` bytes.
pub fn bytes_len(tag: u64, len: usize) -> usize {
    varint_len(tag) + varint_len(len as u64) + len
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated numbers are the schema's (a few, checked against prost's encoding).
    #[test]
    fn tags_are_the_schemas() {
        use crate::proto::{TracePacket, trace_packet};
        let p = TracePacket {
            timestamp: Some(5),
            optional_trusted_packet_sequence_id: Some(
                trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(7),
            ),
            machine_id: Some(3),
            ..Default::default()
        };
        let mut ours = Vec::new();
        put_field(&mut ours, tag::PACKET_TIMESTAMP, 5);
        put_field(&mut ours, tag::PACKET_SEQUENCE_ID, 7);
        put_field(&mut ours, tag::PACKET_MACHINE_ID, 3);
        assert_eq!(ours, prost::Message::encode_to_vec(&p));
        assert_eq!(TRACE_PACKET_BYTE, 0x0A);
        for v in (0..64)
            .flat_map(|s| [1u64 << s, (1u64 << s) - 1, (1u64 << s) + 1])
            .chain([0, 300, u64::MAX])
        {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            let mut theirs = Vec::new();
            prost::encoding::encode_varint(v, &mut theirs);
            assert_eq!(b, theirs, "{v}");
            assert_eq!(b.len(), varint_len(v));
            assert_eq!(read_varint(&b), (v, b.len()));
        }
    }
}
