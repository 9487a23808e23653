//! GPU work in Perfetto's own GPU model (`--gpu perfetto`): one `GpuRenderStageEvent` packet
//! per kernel, memcpy or memset, on a hardware queue per stream of its GPU (`gpu_id`), with its
//! CUDA context (pid, API), its stage (compute for kernels, other for memory operations), an
//! interned compute kernel (names, and the args its compilation fixes: registers, static shared
//! memory) and its launch (grid, block and every other arg, typed). Fields at their default
//! (GPU 0) are left out: each GPU operation is one packet, at most the bytes of the default
//! layout's two.
//! The CUDA calls that launched them name them in `gpu_correlation` (see `events.rs`), from
//! which trace_processor draws the arrows; `GpuInfo` names the GPUs.
//!
//! Each queue is a sequence of its own, as a stream's track is in the default layout: the
//! queue, its stages and its context are interned once per sequence, names, arg names and
//! string values as the track events intern theirs.

use super::events::intern;
use super::interning::Key;
use super::wire::tag::{self, gpu};
use super::wire::{TRACE_PACKET_BYTE, bytes_len, field_len, put_bytes, put_field, put_varint};
use super::{BOOTTIME, CounterSeq, GpuQueueState, KERNEL_ARGS, MAX_INTERNED, ProtoWriter};
use crate::output::GpuQueue;
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::model::{ArgValue, CounterValue, Event, Name, source_of};

/// Stage iids on every queue's sequence (its hardware queue is iid 1, in the same namespace).
const QUEUE_IID: u64 = 1;
const COMPUTE_STAGE_IID: u64 = 2;
const MEMORY_STAGE_IID: u64 = 3;

/// Event ids of GPU rows no call launched (no arrow): apart from the flow ids readers give
/// (below 2^52 with a merge's source bits), unique in the trace.
const UNLINKED_EVENT_IDS: u64 = 1 << 62;

// Launch and kernel args are written in place with a one-byte tag.
const _: () = assert!(gpu::LAUNCH_ARGS < 0x80 && gpu::KERNEL_ARGS < 0x80);

/// A framed `TracePacket` declaring upstream's `gpu_track_event.proto` (the `GpuApi` enum, the
/// `GpuCorrelation` message and `GpuTrackEvent`'s `TrackEvent` extensions `gpu_correlation`,
/// 3000, and `gpu_api`, 3001) as an `ExtensionDescriptor`. trace_processor v55 and later know
/// them already; older ones (the v52 UI's) learn them from it, so they read the launching
/// calls' two fields as args instead of counting them as unknown extension fields (an import
/// error). Each writer of `--gpu perfetto` puts it first in its output.
pub(super) fn gpu_track_event_extensions() -> Vec<u8> {
    // google.protobuf's FileDescriptorProto, DescriptorProto, FieldDescriptorProto,
    // EnumDescriptorProto and EnumValueDescriptorProto fields, by number.
    const LEN: u64 = 2;
    const VARINT: u64 = 0;
    let key = |field: u64, wire: u64| field << 3 | wire;
    let message =
        |out: &mut Vec<u8>, field: u64, body: &[u8]| put_bytes(out, key(field, LEN), body);
    let field =
        |name: &str, number: u64, label: u64, kind: u64, type_name: &str, extendee: &str| {
            let mut f = Vec::new();
            put_bytes(&mut f, key(1, LEN), name.as_bytes());
            if !extendee.is_empty() {
                put_bytes(&mut f, key(2, LEN), extendee.as_bytes());
            }
            put_field(&mut f, key(3, VARINT), number);
            put_field(&mut f, key(4, VARINT), label);
            put_field(&mut f, key(5, VARINT), kind);
            if !type_name.is_empty() {
                put_bytes(&mut f, key(6, LEN), type_name.as_bytes());
            }
            f
        };
    const OPTIONAL: u64 = 1;
    const REPEATED: u64 = 3;
    const UINT64: u64 = 4;
    const MESSAGE: u64 = 11;
    const ENUM: u64 = 14;
    const TRACK_EVENT: &str = ".perfetto.protos.TrackEvent";

    let mut api = Vec::new();
    put_bytes(&mut api, key(1, LEN), b"GpuApi");
    for (number, name) in ["UNDEFINED", "OPEN_GL", "VULKAN", "OPEN_CL", "CUDA", "HIP"]
        .iter()
        .enumerate()
    {
        let mut value = Vec::new();
        put_bytes(
            &mut value,
            key(1, LEN),
            format!("GPU_API_{name}").as_bytes(),
        );
        put_field(&mut value, key(2, VARINT), number as u64);
        message(&mut api, 2, &value);
    }
    let mut correlation = Vec::new();
    put_bytes(&mut correlation, key(1, LEN), b"GpuCorrelation");
    for (number, name) in [
        (1, "render_stage_submission_event_ids"),
        (2, "render_stage_wait_event_ids"),
    ] {
        message(
            &mut correlation,
            2,
            &field(name, number, REPEATED, UINT64, "", ""),
        );
    }
    let mut track_event = Vec::new();
    put_bytes(&mut track_event, key(1, LEN), b"GpuTrackEvent");
    let extensions = [
        field(
            "gpu_correlation",
            3000,
            OPTIONAL,
            MESSAGE,
            ".perfetto.protos.GpuCorrelation",
            TRACK_EVENT,
        ),
        field(
            "gpu_api",
            3001,
            OPTIONAL,
            ENUM,
            ".perfetto.protos.GpuApi",
            TRACK_EVENT,
        ),
    ];
    for e in &extensions {
        message(&mut track_event, 6, e);
    }
    let mut file = Vec::new();
    put_bytes(
        &mut file,
        key(1, LEN),
        b"protos/perfetto/trace/gpu/gpu_track_event.proto",
    );
    put_bytes(&mut file, key(2, LEN), b"perfetto.protos");
    message(&mut file, 4, &correlation);
    message(&mut file, 4, &track_event);
    message(&mut file, 5, &api);
    put_bytes(&mut file, key(12, LEN), b"proto2");

    let mut set = Vec::new();
    message(&mut set, 1, &file);
    let mut descriptor = Vec::new();
    message(&mut descriptor, 1, &set);
    let mut packet = Vec::new();
    put_bytes(&mut packet, gpu::PACKET_EXTENSION_DESCRIPTOR, &descriptor);
    let mut out = Vec::new();
    put_bytes(&mut out, tag::TRACE_PACKET, &packet);
    out
}

/// `(x, y, z)` from a launch shape as the reader prints it ("(128, 1, 1)").
fn dims(label: &str) -> Option<[u64; 3]> {
    let inner = label.strip_prefix('(')?.strip_suffix(')')?;
    let mut it = inner.split(',').map(|p| p.trim().parse::<u64>().ok());
    let d = [it.next()??, it.next()??, it.next()??];
    it.next().is_none().then_some(d)
}

/// The iid of a compute arg's name on `seq`, written to `interned` when new there (`hint` as
/// for [`super::interning::Interning::arg_key`]).
fn compute_arg_name(
    interning: &mut super::interning::Interning,
    interned: &mut Vec<u8>,
    seq: &mut super::interning::Sequence,
    key: &'static str,
    hint: u64,
) -> u64 {
    let (iid, new) = interning.arg_key(seq, key, hint);
    if new {
        let len = field_len(gpu::IID, iid) + bytes_len(gpu::NAME, key.len());
        put_varint(interned, gpu::INTERNED_ARG_NAMES);
        put_varint(interned, len as u64);
        put_field(interned, gpu::IID, iid);
        put_bytes(interned, gpu::NAME, key.as_bytes());
    }
    iid
}

/// An `ExtraComputeArg` (its one-byte tag already in `out`): its length, its name and the
/// value `put_value` writes, in place with a length byte fixed up when longer.
fn put_compute_arg(out: &mut Vec<u8>, name_iid: u64, put_value: impl FnOnce(&mut Vec<u8>)) {
    let len_at = out.len();
    out.push(0);
    put_field(out, gpu::ARG_NAME_IID, name_iid);
    put_value(out);
    let n = out.len() - len_at - 1;
    if n < 0x80 {
        out[len_at] = n as u8;
    } else {
        let value = out.split_off(len_at + 1);
        out.truncate(len_at);
        put_varint(out, n as u64);
        out.extend_from_slice(&value);
    }
}

fn put_dims(out: &mut Vec<u8>, tag: u64, d: [u64; 3]) {
    let len =
        field_len(gpu::DIM_X, d[0]) + field_len(gpu::DIM_Y, d[1]) + field_len(gpu::DIM_Z, d[2]);
    put_varint(out, tag);
    put_varint(out, len as u64);
    put_field(out, gpu::DIM_X, d[0]);
    put_field(out, gpu::DIM_Y, d[1]);
    put_field(out, gpu::DIM_Z, d[2]);
}

impl ProtoWriter {
    pub(super) fn open_queue(&mut self, group: u32, queue: &GpuQueue, first_ts: i64) {
        self.clear_state(group, 0, first_ts, true);
        let source = source_of(queue.global_pid) as u64;
        let n = self.gpu.contexts.len() as u64;
        let context_iid = *self
            .gpu
            .contexts
            .entry((queue.global_pid, queue.context))
            .or_insert(source << 32 | (n + 1));
        self.gpu.queues.insert(
            group,
            GpuQueueState {
                source,
                device: queue.device,
                pid: nsys_perfetto_model::model::pid_of(queue.global_pid),
                context_iid,
                name: queue.name.clone(),
                kernels: 0,
            },
        );
        if self.gpu.described.is_none_or(|d| d < queue.device) {
            self.gpu_info(group, queue.device);
        }
    }

    /// A `GpuInfo` naming GPUs 0 to `upto` at least (entries are by position: entry N is GPU
    /// N), as the source names them.
    fn gpu_info(&mut self, group: u32, upto: i64) {
        let last = self
            .desc
            .gpu_names
            .keys()
            .copied()
            .max()
            .unwrap_or(0)
            .max(upto);
        let mut info = Vec::new();
        let mut gpu_entry = Vec::new();
        for i in 0..=last.max(0) {
            let name = match self.desc.gpu_names.get(&i) {
                Some(n) => n.clone(),
                None => format!("GPU {i}"),
            };
            gpu_entry.clear();
            put_bytes(&mut gpu_entry, gpu::GPU_NAME, name.as_bytes());
            put_bytes(&mut gpu_entry, gpu::GPU_VENDOR, b"NVIDIA");
            if let Some(f) = self.desc.gpu_facts.get(&i) {
                let texts = [
                    (gpu::GPU_MODEL, &f.chip),
                    (gpu::GPU_ARCHITECTURE, &f.arch),
                    (gpu::GPU_PCI_BDF, &f.pci_bdf),
                ];
                for (tag, text) in texts {
                    if let Some(t) = text {
                        put_bytes(&mut gpu_entry, tag, t.as_bytes());
                    }
                }
                if let Some(u) = &f.uuid {
                    put_bytes(&mut gpu_entry, gpu::GPU_UUID, u);
                }
            }
            put_bytes(&mut info, gpu::GPU_INFO_GPUS, &gpu_entry);
        }
        let out = &mut self.out.data;
        let len = bytes_len(gpu::PACKET_GPU_INFO, info.len())
            + field_len(tag::PACKET_SEQUENCE_ID, group.into());
        out.push(TRACE_PACKET_BYTE);
        put_varint(out, len as u64);
        put_field(out, tag::PACKET_SEQUENCE_ID, group.into());
        put_bytes(out, gpu::PACKET_GPU_INFO, &info);
        self.gpu.described = Some(last);
    }

    /// One GPU operation as a `GpuRenderStageEvent` on its queue's sequence.
    pub(super) fn gpu_packet(&mut self, group: u32, ev: &Event<'_>) {
        let at = self.seqs.index(group).expect("queue opened before use");
        let seq = &self.seqs.list[at];
        let kernels = self.gpu.queues.get(&group).map_or(0, |q| q.kernels);
        if (seq.names + seq.values) as usize + kernels as usize >= MAX_INTERNED {
            let ts = seq.last_ts;
            self.clear_state(group, 0, ts, false);
            self.gpu.kernels.retain(|k, _| k.group != group);
            if let Some(q) = self.gpu.queues.get_mut(&group) {
                q.kernels = 0;
            }
        }
        let seq = &mut self.seqs.list[at];
        let queue = self.gpu.queues.get_mut(&group).expect("queue opened");
        let info = &*self.desc;
        let interned = &mut self.interned;
        let interning = &mut self.interning;
        interned.clear();
        if !seq.gpu_specs {
            seq.gpu_specs = true;
            let spec = |out: &mut Vec<u8>, iid: u64, name: &str, category: u64| {
                let len = field_len(gpu::IID, iid)
                    + bytes_len(gpu::NAME, name.len())
                    + if category != 0 {
                        field_len(gpu::SPEC_CATEGORY, category)
                    } else {
                        0
                    };
                put_varint(out, gpu::INTERNED_SPECIFICATIONS);
                put_varint(out, len as u64);
                put_field(out, gpu::IID, iid);
                put_bytes(out, gpu::NAME, name.as_bytes());
                if category != 0 {
                    put_field(out, gpu::SPEC_CATEGORY, category);
                }
            };
            spec(interned, QUEUE_IID, &queue.name, 0);
            spec(
                interned,
                COMPUTE_STAGE_IID,
                "Compute",
                gpu::CATEGORY_COMPUTE,
            );
            spec(interned, MEMORY_STAGE_IID, "Memory", 0);
            let len = field_len(gpu::IID, queue.context_iid)
                + field_len(gpu::CONTEXT_PID, queue.pid as u64)
                + field_len(gpu::CONTEXT_API, gpu::API_CUDA);
            put_varint(interned, gpu::INTERNED_GRAPHICS_CONTEXTS);
            put_varint(interned, len as u64);
            put_field(interned, gpu::IID, queue.context_iid);
            put_field(interned, gpu::CONTEXT_PID, queue.pid as u64);
            put_field(interned, gpu::CONTEXT_API, gpu::API_CUDA);
        }

        let kernel = ev.category == Category::Kernel;
        let body = &mut self.gpu.body;
        let launch = &mut self.gpu.launch;
        body.clear();
        launch.clear();
        let event_id = match ev.flows.terminating {
            Some(id) => id,
            None => {
                self.gpu.unlinked += 1;
                UNLINKED_EVENT_IDS | queue.source << 40 | self.gpu.unlinked
            }
        };
        put_field(body, gpu::EVENT_ID, event_id);
        let dur = ev.end.map_or(0, |e| (e - ev.start).max(0)) as u64;
        put_field(body, gpu::DURATION, dur);
        put_field(body, gpu::CONTEXT, queue.context_iid);
        // GPU 0 is what trace_processor reads where the field is absent.
        if queue.device != 0 {
            put_field(body, gpu::GPU_ID, queue.device as u64);
        }
        put_field(body, gpu::HW_QUEUE_IID, QUEUE_IID);
        let stage = if kernel {
            COMPUTE_STAGE_IID
        } else {
            MEMORY_STAGE_IID
        };
        put_field(body, gpu::STAGE_IID, stage);

        let name_iid = intern(interning, interned, seq, info, false, ev.name.into());
        put_field(body, gpu::NAME_IID, name_iid);

        let mut demangled = None;
        let mut kernel_args = [None; KERNEL_ARGS.len()];
        let (mut block, mut dynamic_shared_memory) = (None, None);
        let mut key_iid = 0;
        for arg in ev.args {
            match (kernel, arg.key, arg.value) {
                (true, "demangled_name", ArgValue::StrId(sid)) => {
                    demangled = Some(sid);
                    continue;
                }
                (true, "grid" | "block", ArgValue::Label(_) | ArgValue::Numbered(..)) => {
                    let shape = match arg.value {
                        ArgValue::Numbered(no, t) => {
                            *self.gpu.shapes.entry(no.key()).or_insert_with(|| dims(t))
                        }
                        ArgValue::Label(t) => dims(t),
                        _ => None,
                    };
                    if let Some(d) = shape {
                        let tag = if arg.key == "grid" {
                            gpu::GRID_SIZE
                        } else {
                            block = Some(d);
                            gpu::WORKGROUP_SIZE
                        };
                        put_dims(launch, tag, d);
                        continue;
                    }
                }
                (true, "shared_memory_dynamic_bytes", ArgValue::Int(v)) => {
                    dynamic_shared_memory = Some(v);
                }
                _ => {}
            }
            // Perfetto reads a GPU slice's `correlation_id` arg as text, and colours slices
            // by it (an integer crashes its GPU tracks; unique texts colour every kernel
            // apart): nsys' correlation id goes under a name of its own.
            let key = match arg.key {
                "correlation_id" => "cuda_correlation_id",
                k => k,
            };
            if let (true, ArgValue::Int(v)) = (kernel, arg.value)
                && let Some(i) = KERNEL_ARGS.iter().position(|k| *k == key)
            {
                kernel_args[i] = Some(v);
                continue;
            }
            key_iid = compute_arg_name(interning, interned, seq, key, key_iid);
            launch.push(gpu::LAUNCH_ARGS as u8);
            put_compute_arg(launch, key_iid, |launch| match arg.value {
                ArgValue::Int(v) => put_field(launch, gpu::ARG_INT, v as u64),
                ArgValue::Bool(v) => put_field(launch, gpu::ARG_INT, v as u64),
                ArgValue::Double(v) => {
                    put_varint(launch, gpu::ARG_DOUBLE);
                    launch.extend_from_slice(&v.to_le_bytes());
                }
                ArgValue::Str(s) => put_bytes(launch, gpu::ARG_STRING, s.as_bytes()),
                ArgValue::Label(s) => {
                    let iid = intern(interning, interned, seq, info, true, Key::Text(s));
                    put_field(launch, gpu::ARG_STRING_IID, iid);
                }
                ArgValue::StrId(sid) => {
                    let iid = intern(interning, interned, seq, info, true, Key::Sid(sid));
                    put_field(launch, gpu::ARG_STRING_IID, iid);
                }
                ArgValue::Numbered(no, s) => {
                    let iid = intern(interning, interned, seq, info, true, Key::No(no, s));
                    put_field(launch, gpu::ARG_STRING_IID, iid);
                }
            });
        }

        if kernel {
            let name_sid = match ev.name {
                Name::Str(sid) => sid,
                _ => -1,
            };
            let key = super::KernelKey {
                group,
                name: name_sid,
                demangled: demangled.unwrap_or(-1),
                args: kernel_args,
                block,
                dynamic_shared_memory,
            };
            let kernel_iid = match self.gpu.kernels.get(&key) {
                Some(&iid) => iid,
                None => {
                    queue.kernels += 1;
                    let iid = queue.kernels;
                    self.gpu.kernels.insert(key, iid);
                    let short = match ev.name {
                        Name::Str(sid) => info.string_or_id(sid),
                        Name::Text(t) | Name::Static(t) | Name::Numbered(_, t) => t.into(),
                    };
                    let long = demangled.map(|d| info.string_or_id(d));
                    let facts = info.gpu_facts.get(&queue.device);
                    let arch = facts.and_then(|f| f.arch.as_deref());
                    let nested = &mut self.gpu.nested;
                    nested.clear();
                    put_field(nested, gpu::IID, iid);
                    put_bytes(nested, gpu::NAME, short.as_bytes());
                    if let Some(l) = &long {
                        put_bytes(nested, gpu::KERNEL_DEMANGLED_NAME, l.as_bytes());
                    }
                    if let Some(a) = arch {
                        put_bytes(nested, gpu::KERNEL_ARCH, a.as_bytes());
                    }
                    let mut ints: Vec<(&'static str, i64)> = KERNEL_ARGS
                        .iter()
                        .zip(kernel_args)
                        .filter_map(|(k, v)| Some((*k, v?)))
                        .collect();
                    let occupancy = match (facts.and_then(|f| f.sm), block, kernel_args) {
                        (Some(sm), Some([x, y, z]), [Some(registers), static_shared_memory]) => {
                            let shared_memory = static_shared_memory
                                .unwrap_or(0)
                                .saturating_add(dynamic_shared_memory.unwrap_or(0));
                            let threads = x
                                .checked_mul(y)
                                .and_then(|xy| xy.checked_mul(z))
                                .and_then(|t| i64::try_from(t).ok())
                                .unwrap_or(-1);
                            super::occupancy::occupancy(&sm, threads, registers, shared_memory)
                        }
                        _ => None,
                    };
                    if let Some(o) = occupancy {
                        use super::occupancy as occ;
                        ints.push((occ::LIMIT_BLOCKS, o.blocks));
                        ints.extend(o.registers.map(|v| (occ::LIMIT_REGISTERS, v)));
                        ints.extend(o.shared_memory.map(|v| (occ::LIMIT_SHARED_MEMORY, v)));
                        ints.push((occ::LIMIT_WARPS, o.warps));
                        ints.push((occ::ACTIVE_WARPS, o.active_warps));
                    }
                    let mut key_iid = 0;
                    for (key, v) in ints {
                        key_iid = compute_arg_name(interning, interned, seq, key, key_iid);
                        nested.push(gpu::KERNEL_ARGS as u8);
                        put_compute_arg(nested, key_iid, |arg| {
                            put_field(arg, gpu::ARG_INT, v as u64)
                        });
                    }
                    if let Some(o) = occupancy {
                        let key = super::occupancy::PERCENT;
                        key_iid = compute_arg_name(interning, interned, seq, key, key_iid);
                        nested.push(gpu::KERNEL_ARGS as u8);
                        put_compute_arg(nested, key_iid, |arg| {
                            put_varint(arg, gpu::ARG_DOUBLE);
                            arg.extend_from_slice(&o.percent.to_le_bytes());
                        });
                    }
                    put_bytes(interned, gpu::INTERNED_KERNELS, nested);
                    iid
                }
            };
            put_field(body, gpu::KERNEL_IID, kernel_iid);
        }
        if !launch.is_empty() {
            put_bytes(body, gpu::LAUNCH, launch);
        }

        let out = &mut self.out.data;
        timed_packet(
            out,
            group,
            &mut seq.last_ts,
            ev.start,
            gpu::PACKET_RENDER_STAGE,
            body,
            interned,
        );
    }
}

/// One framed `TracePacket` of sequence `group` at `ts`, holding `body` as its field `field`
/// and, when not empty, the sequence's new `interned` data (then cleared). A time in order on
/// the sequence takes a delta of its incremental clock (`last_ts` moves on); an earlier one (rows
/// out of order) an absolute time on the clock that clock counts from.
fn timed_packet(
    out: &mut Vec<u8>,
    group: u32,
    last_ts: &mut i64,
    ts: i64,
    field: u64,
    body: &[u8],
    interned: &mut Vec<u8>,
) {
    let (time, clock) = if ts >= *last_ts {
        let delta = (ts - *last_ts) as u64;
        *last_ts = ts;
        (delta, None)
    } else {
        (ts.max(0) as u64, Some(u64::from(BOOTTIME)))
    };
    let len = field_len(tag::PACKET_TIMESTAMP, time)
        + clock.map_or(0, |c| field_len(gpu::PACKET_CLOCK_ID, c))
        + field_len(tag::PACKET_SEQUENCE_ID, group.into())
        + bytes_len(field, body.len())
        + if interned.is_empty() {
            0
        } else {
            bytes_len(tag::PACKET_INTERNED_DATA, interned.len())
        };
    out.push(TRACE_PACKET_BYTE);
    put_varint(out, len as u64);
    put_field(out, tag::PACKET_TIMESTAMP, time);
    if let Some(c) = clock {
        put_field(out, gpu::PACKET_CLOCK_ID, c);
    }
    put_field(out, tag::PACKET_SEQUENCE_ID, group.into());
    put_bytes(out, field, body);
    if !interned.is_empty() {
        put_bytes(out, tag::PACKET_INTERNED_DATA, interned);
        interned.clear();
    }
}

/// `GpuCounterDescriptor.GpuCounterGroup` of an nsys GPU metric, from its name: memory traffic
/// (DRAM, PCIe, NVLink), clocks (system), graphics warps (vertices, fragments), the rest
/// (SMs, tensor cores, compute warps) compute.
fn counter_group(name: &str) -> u64 {
    const SYSTEM: u64 = 1;
    const VERTICES: u64 = 2;
    const FRAGMENTS: u64 = 3;
    const MEMORY: u64 = 5;
    const COMPUTE: u64 = 6;
    let lower = name.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if has(&["dram", "pcie", "nvlink", "memory", "bar1", "c2c"]) {
        MEMORY
    } else if has(&["clock", "frequency"]) {
        SYSTEM
    } else if has(&["vertex", "geometry"]) {
        VERTICES
    } else if has(&["pixel"]) {
        FRAGMENTS
    } else {
        COMPUTE
    }
}

/// `GpuCounterDescriptor.MeasureUnit` of a counter's unit as the reader gives it.
fn counter_unit(unit: &str) -> Option<u64> {
    match unit {
        "%" => Some(37),
        "Hz" => Some(13),
        "MHz" => Some(15),
        "bytes" => Some(7),
        _ => None,
    }
}

impl ProtoWriter {
    /// A GPU metric's counter track opens: its GPU's counter sequence is the first such
    /// track's (the others, and those layout opens for rows out of time order, stay unused).
    pub(super) fn open_gpu_counter(&mut self, group: u32, track: u64, first_ts: i64) {
        let device = self.gpu.counters[&track].device;
        if self.gpu.counter_seqs.contains_key(&device) {
            return;
        }
        let seq = CounterSeq {
            group,
            descriptors: 0,
            counters: 0,
            pending_ts: first_ts,
            pending: Vec::new(),
        };
        self.gpu.counter_seqs.insert(device, seq);
        self.clear_state(group, 0, first_ts, true);
    }

    /// One value of a GPU metric: held until its GPU's values of that time are all in, then
    /// written with them as one `GpuCounterEvent`.
    pub(super) fn gpu_counter(&mut self, track: u64, ts: i64, value: CounterValue) {
        let device = self.gpu.counters[&track].device;
        let seq = &self.gpu.counter_seqs[&device];
        if !seq.pending.is_empty()
            && (seq.pending_ts != ts || seq.pending.iter().any(|(t, _)| *t == track))
        {
            self.flush_gpu_counters(device);
        }
        let seq = self
            .gpu
            .counter_seqs
            .get_mut(&device)
            .expect("opened before use");
        seq.pending_ts = ts;
        seq.pending.push((track, value));
    }

    pub(super) fn finish_gpu_counters(&mut self) {
        let mut devices: Vec<i64> = self.gpu.counter_seqs.keys().copied().collect();
        devices.sort_unstable();
        for device in devices {
            self.flush_gpu_counters(device);
        }
    }

    /// A GPU's held values as `GpuCounterEvent`s, one per descriptor they are in. Counters new
    /// on the sequence get a descriptor of their own first (its GPU, and each counter's name,
    /// unit and group; read from its time on, as a track event counter's value).
    fn flush_gpu_counters(&mut self, device: i64) {
        let seq = self
            .gpu
            .counter_seqs
            .get_mut(&device)
            .expect("opened before use");
        if seq.pending.is_empty() {
            return;
        }
        let (group, ts) = (seq.group, seq.pending_ts);
        let mut pending = std::mem::take(&mut seq.pending);
        if self.gpu.described.is_none_or(|d| d < device) {
            self.gpu_info(group, device);
        }
        let seq = self.gpu.counter_seqs.get_mut(&device).expect("opened");
        let interned = &mut self.interned;
        interned.clear();
        let specs = &mut self.gpu.nested;
        specs.clear();
        let mut new_iid = None;
        for (track, _) in &pending {
            let counter = self.gpu.counters.get_mut(track).expect("described");
            if counter.descriptor.is_some() {
                continue;
            }
            let iid = *new_iid.get_or_insert_with(|| {
                seq.descriptors += 1;
                seq.descriptors
            });
            counter.descriptor = Some(iid);
            counter.id = seq.counters;
            seq.counters += 1;
            let unit = counter_unit(&counter.unit);
            let kind = counter_group(&counter.name);
            let len = field_len(gpu::COUNTER_ID, counter.id)
                + bytes_len(gpu::NAME, counter.name.len())
                + unit.map_or(0, |u| field_len(gpu::SPEC_NUMERATOR_UNITS, u))
                + field_len(gpu::SPEC_GROUPS, kind)
                + field_len(gpu::SPEC_VALUE_DIRECTION, gpu::FORWARDS_LOOKING);
            put_varint(specs, gpu::DESCRIPTOR_SPECS);
            put_varint(specs, len as u64);
            put_field(specs, gpu::COUNTER_ID, counter.id);
            put_bytes(specs, gpu::NAME, counter.name.as_bytes());
            if let Some(u) = unit {
                put_field(specs, gpu::SPEC_NUMERATOR_UNITS, u);
            }
            put_field(specs, gpu::SPEC_GROUPS, kind);
            put_field(specs, gpu::SPEC_VALUE_DIRECTION, gpu::FORWARDS_LOOKING);
        }
        if let Some(iid) = new_iid {
            let len = field_len(gpu::IID, iid)
                + bytes_len(gpu::DESCRIPTOR, specs.len())
                + field_len(gpu::DESCRIPTOR_GPU_ID, device as u64);
            put_varint(interned, gpu::INTERNED_COUNTER_DESCRIPTORS);
            put_varint(interned, len as u64);
            put_field(interned, gpu::IID, iid);
            put_bytes(interned, gpu::DESCRIPTOR, specs);
            put_field(interned, gpu::DESCRIPTOR_GPU_ID, device as u64);
        }

        // Values by descriptor (nearly always one), each descriptor's in one event.
        pending.sort_by_key(|(track, _)| self.gpu.counters[track].descriptor);
        let state = self.seqs.get_mut(group).expect("opened before use");
        let mut at = 0;
        while at < pending.len() {
            let iid = self.gpu.counters[&pending[at].0].descriptor;
            let body = &mut self.gpu.body;
            body.clear();
            put_field(body, gpu::COUNTER_DESCRIPTOR_IID, iid.expect("given above"));
            while at < pending.len() && self.gpu.counters[&pending[at].0].descriptor == iid {
                let (track, value) = pending[at];
                let id = self.gpu.counters[&track].id;
                let len = field_len(gpu::COUNTER_ID, id)
                    + match value {
                        CounterValue::Int(v) => field_len(gpu::COUNTER_INT, v as u64),
                        CounterValue::Double(_) => 9,
                    };
                put_varint(body, gpu::COUNTERS);
                put_varint(body, len as u64);
                put_field(body, gpu::COUNTER_ID, id);
                match value {
                    CounterValue::Int(v) => put_field(body, gpu::COUNTER_INT, v as u64),
                    CounterValue::Double(v) => {
                        put_varint(body, gpu::COUNTER_DOUBLE);
                        body.extend_from_slice(&v.to_le_bytes());
                    }
                }
                at += 1;
            }
            let out = &mut self.out.data;
            timed_packet(
                out,
                group,
                &mut state.last_ts,
                ts,
                gpu::PACKET_COUNTER_EVENT,
                body,
                interned,
            );
        }
        pending.clear();
        self.gpu
            .counter_seqs
            .get_mut(&device)
            .expect("opened")
            .pending = pending;
    }
}

#[cfg(test)]
mod tests {
    use super::dims;

    #[test]
    fn launch_shapes_read_as_the_reader_prints_them() {
        assert_eq!(dims("(128, 1, 1)"), Some([128, 1, 1]));
        assert_eq!(dims("(65535,2,3)"), Some([65535, 2, 3]));
        assert_eq!(dims("(-1, 1, 1)"), None);
        assert_eq!(dims("(1, 2)"), None);
        assert_eq!(dims("(1, 2, 3, 4)"), None);
    }
}
