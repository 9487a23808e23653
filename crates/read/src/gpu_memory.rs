//! GPU memory (`CUDA_GPU_MEMORY_USAGE_EVENTS`, written when the capture tracked CUDA memory
//! usage): each allocation and free is an instant on a "Memory" track of its process under its
//! GPU, carrying its size and address, and the bytes allocated after it are two counters: per
//! GPU (all processes) and per process on that GPU.
//!
//! Columns, from NVIDIA's export schema: start, globalPid, deviceId, contextId, address, pc,
//! bytes, memKind (CUPTI's memory kind: written as its number, since nsys documents another enum
//! for it than for memcpys), memoryOperationType (0 allocated, 1 deallocated;
//! ENUM_CUDA_DEV_MEM_EVENT_OPER where the export has it), name, correlationId. A free whose `bytes` is 0 frees what was
//! allocated at its address.

use super::cells::{int_at, text_at};
use super::reader::ReadContext;
use super::scan::Scan;
use anyhow::Result;
use nsys_perfetto_model::category::{Category, EventType};
use nsys_perfetto_model::model::{
    ArgList, ArgValue, CounterKey, CounterOwner, CounterSample, CounterValue, Event, EventSink,
    Flows, GroupKey, Name,
};
use std::collections::HashMap;

pub const GPU_MEMORY: &str = "CUDA_GPU_MEMORY_USAGE_EVENTS";
/// The counter of bytes allocated on a GPU (under the GPU) and by a process (under it).
pub const GPU_COUNTER: &str = "Memory allocated";

pub fn process_counter_name(device: i64) -> String {
    format!("GPU {device} memory allocated")
}

pub fn read<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<()> {
    if !cx.wants(
        EventType::GpuMemory,
        GPU_MEMORY,
        &[
            "start",
            "globalPid",
            "deviceId",
            "bytes",
            "memoryOperationType",
        ],
    ) {
        return Ok(());
    }
    let (conn, schema, selection) = (cx.conn, cx.schema, cx.selection);
    // Which operation ids free memory: from the export's enum when it has one.
    let ops = super::enums::read_enum(conn, schema, "ENUM_CUDA_DEV_MEM_EVENT_OPER");
    let is_free = |op: i64| match ops.get(&op) {
        Some(label) => {
            let l = label.to_ascii_lowercase();
            l.contains("dealloc") || l.contains("free") || l.contains("release")
        }
        // nsys' enum lists allocation (0) before deallocation (1).
        None => op == 1,
    };
    // Totals need every row from the start of the capture: the time window applies when
    // writing, processes and devices in SQL.
    let mut unwindowed = selection.clone();
    unwindowed.time = None;
    let filter = unwindowed.sql("t", false, Some("globalPid"), Some("deviceId"));
    // In time order; from Arrow without SQLite where the rows have it (nsys writes them so).
    let mut rows = Scan::new(schema, GPU_MEMORY)
        .cols(
            schema,
            &[
                "start",
                "globalPid",
                "deviceId",
                "bytes",
                "memoryOperationType",
                "address",
                "memKind",
                "correlationId",
                "name",
            ],
        )
        .filter(filter)
        .order_by_then_rowid(&["start"])
        .open(conn, schema)?;
    let window = selection.time;
    let mut per_gpu: HashMap<i64, i64> = HashMap::new();
    let mut per_process: HashMap<(i64, i64), i64> = HashMap::new();
    // Live allocations: (device, pid, address) -> bytes, for frees that do not say their size.
    let mut live: HashMap<(i64, i64, i64), i64> = HashMap::new();
    let mut names: HashMap<i64, String> = HashMap::new();
    while let Some(r) = rows.next()? {
        let r = &r;
        let (Some(ts), Some(gpid), Some(device), Some(op)) =
            (int_at(r, 0), int_at(r, 1), int_at(r, 2), int_at(r, 4))
        else {
            sink.skip(GPU_MEMORY, "no time, process, device or operation");
            continue;
        };
        let address = int_at(r, 5);
        let free = is_free(op);
        let mut bytes = int_at(r, 3).unwrap_or(0);
        if let Some(a) = address {
            if free {
                let known = live.remove(&(device, gpid, a));
                if bytes == 0 {
                    bytes = known.unwrap_or(0);
                }
            } else {
                live.insert((device, gpid, a), bytes);
            }
        }
        let delta = if free { -bytes } else { bytes };
        let gpu_total = per_gpu.entry(device).or_default();
        *gpu_total += delta;
        let gpu_total = *gpu_total;
        let proc_total = per_process.entry((device, gpid)).or_default();
        *proc_total += delta;
        let proc_total = *proc_total;
        let inside = window.is_none_or(|w| w.contains(ts));
        if !inside {
            sink.extra_row();
            continue;
        }
        let name_text = text_at(r, 8);
        let mut args = ArgList::new();
        args.int("bytes", Some(bytes));
        args.push(
            "operation",
            ArgValue::Label(if free { "free" } else { "allocation" }),
        );
        let hex = address.map(|a| format!("0x{a:x}"));
        if let Some(h) = &hex {
            args.push("address", ArgValue::Str(h));
        }
        args.int("memKind", int_at(r, 6));
        args.int("correlationId", int_at(r, 7));
        if let Some(n) = name_text.as_deref()
            && !n.is_empty()
        {
            args.push("name", ArgValue::Str(n));
        }
        let ev = Event {
            start: ts,
            end: None,
            name: Name::Static(if free { "cudaFree" } else { "cudaMalloc" }),
            category: Category::GpuMemory,
            args: args.as_slice(),
            flows: Flows::default(),
        };
        sink.event(
            GroupKey::GpuMemory {
                device,
                global_pid: gpid,
            },
            &ev,
        )?;
        let sample = |v: i64| CounterSample {
            ts,
            value: CounterValue::Int(v),
            category: Category::GpuMemory,
        };
        // The counters are part of the same row: they do not count as rows of their own.
        sink.counter(
            &CounterKey {
                owner: CounterOwner::Gpu { device },
                name: GPU_COUNTER,
                unit: "bytes",
            },
            sample(gpu_total),
        )?;
        let pname = names
            .entry(device)
            .or_insert_with(|| process_counter_name(device));
        sink.counter(
            &CounterKey {
                owner: CounterOwner::Process { global_pid: gpid },
                name: pname,
                unit: "bytes",
            },
            sample(proc_total),
        )?;
    }
    Ok(())
}
