//! Thread scheduling (`SCHED_EVENTS`): when each thread ran on each CPU. A sched-in and the next
//! sched-out of the same thread on that CPU make one [`CpuSlice`], with why the thread left
//! (`threadState`, `threadBlock` of the sched-out row, where the export records them). Layout
//! decides how a format shows them.

use super::cells::int_at;
use super::enums::read_enum;
use super::order::{REORDER_WINDOW, Reorder};
use super::reader::ReadContext;
use super::scan::Scan;
use super::schema::Schema;
use anyhow::Result;
use nsys_perfetto_model::category::EventType;
use nsys_perfetto_model::model::{CpuSlice, EventSink, FastHash, OffCpu};
use rusqlite::Connection;
use std::collections::HashMap;

pub const SCHED: &str = "SCHED_EVENTS";

/// `ENUM_SAMPLING_THREAD_STATE` as nsys has always numbered it (exports without the table).
const THREAD_STATES: &[&str] = &[
    "Unknown",
    "Running",
    "Interruptible",
    "Uninterruptible",
    "Stopped",
    "Terminated",
    "Unscheduled",
    "Waiting",
    "OSRuntime",
    "Initialized",
    "Transition",
];

/// `ENUM_SCHEDULING_THREAD_BLOCK` as nsys numbers it (Linux waits first, then Windows' wait
/// reasons), for exports without the table.
const THREAD_BLOCKS: &[&str] = &[
    "NonBlocked",
    "Unknown",
    "SigSuspend",
    "Stopped",
    "Nanosleep",
    "Intr",
    "Mutex",
    "CondVar",
    "Sem",
    "Join",
    "SigWaitInfo",
    "WaitCtx",
    "Send",
    "Receive",
    "Reply",
    "Stack",
    "WaitThread",
    "WaitPage",
    "NetSend",
    "NetReply",
    "FreePage",
    "PageIn",
    "PoolAllocation",
    "DelayExecution",
    "Suspended",
    "UserRequest",
    "EventPair",
    "Queue",
    "LPCReceive",
    "LPCReply",
    "VirtualMemory",
    "PageOut",
    "Rendezvous",
    "KeyedEvent",
    "Terminated",
    "ProcessInSwap",
    "CPURateControl",
    "WrCalloutStack",
    "Kernel",
    "Resource",
    "PushLock",
    "WindowsMutex",
    "QuantumEnd",
    "DispatchInt",
    "Preempted",
    "YieldExecution",
    "FastMutex",
    "GuardedMutex",
    "Rundown",
    "ReadyToRun",
    "AlertByThreadId",
    "DeferredPreempt",
    "PhysicalFault",
];

/// What a thread state of the sched-out row says about why the thread left its CPU; `None`
/// when it says nothing (Unknown, and the states a sched-out cannot mean).
fn off_by_state(label: &str) -> Option<OffCpu> {
    Some(match label {
        "Running" => OffCpu::Preempted,
        "Interruptible" | "Waiting" => OffCpu::Sleeping,
        "Uninterruptible" => OffCpu::Uninterruptible,
        "Stopped" => OffCpu::Stopped,
        "Terminated" => OffCpu::Exited,
        _ => return None,
    })
}

/// What a block reason says; `None` for NonBlocked and Unknown. Every other reason is a wait.
fn off_by_block(label: &str) -> Option<OffCpu> {
    Some(match label {
        "NonBlocked" | "Unknown" => return None,
        "Preempted" | "QuantumEnd" | "DeferredPreempt" | "DispatchInt" => OffCpu::Preempted,
        "YieldExecution" | "ReadyToRun" => OffCpu::Runnable,
        "Stopped" | "Suspended" => OffCpu::Stopped,
        "Terminated" => OffCpu::Exited,
        "WaitPage" | "FreePage" | "PageIn" | "PageOut" | "VirtualMemory" | "PhysicalFault"
        | "ProcessInSwap" => OffCpu::Uninterruptible,
        _ => OffCpu::Sleeping,
    })
}

/// The export's labels for a numeric column's values (its `ENUM_*` table, else nsys' built-in
/// numbering), mapped to what they say about leaving a CPU.
fn off_table(
    conn: &Connection,
    schema: &Schema,
    table: &str,
    builtin: &[&str],
    meaning: fn(&str) -> Option<OffCpu>,
) -> HashMap<i64, OffCpu, FastHash> {
    let mut labels = read_enum(conn, schema, table);
    if labels.is_empty() {
        labels = builtin
            .iter()
            .enumerate()
            .map(|(i, l)| (i as i64, l.to_string()))
            .collect();
    }
    labels
        .into_iter()
        .filter_map(|(id, l)| Some((id, meaning(&l)?)))
        .collect()
}

pub fn read<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<()> {
    if !cx.wants(
        EventType::Sched,
        SCHED,
        &["start", "cpu", "isSchedIn", "globalTid"],
    ) {
        return Ok(());
    }
    let (conn, schema, selection) = (cx.conn, cx.schema, cx.selection);
    // A point event: the time window keeps switches inside it.
    let filter = selection.sql("t", false, Some("globalTid"), None);
    // Why threads left their CPUs, where the export records it (read only then: two columns
    // fewer per row otherwise).
    let why: Vec<&str> = ["threadState", "threadBlock"]
        .into_iter()
        .filter(|c| schema.has_column(SCHED, c))
        .collect();
    let scan = Scan::new(schema, SCHED)
        .cols(schema, &["start", "cpu", "isSchedIn", "globalTid"])
        .cols(schema, &why)
        .filter(filter)
        .by_rowid();
    let at = |c: &str| why.iter().position(|w| *w == c).map(|i| 4 + i);
    let (state_at, block_at) = (at("threadState"), at("threadBlock"));
    let mut state = State {
        running: HashMap::default(),
        by_state: off_table(
            conn,
            schema,
            "ENUM_SAMPLING_THREAD_STATE",
            THREAD_STATES,
            off_by_state,
        ),
        by_block: off_table(
            conn,
            schema,
            "ENUM_SCHEDULING_THREAD_BLOCK",
            THREAD_BLOCKS,
            off_by_block,
        ),
    };
    let mut rows = scan.open(conn, schema)?;
    let mut window = Reorder::new(REORDER_WINDOW);
    while let Some(r) = rows.next()? {
        let r = &r;
        let row: [Option<i64>; 6] = [
            super::cells::time_at(r, 0),
            int_at(r, 1),
            int_at(r, 2),
            super::cells::tid_at(r, 3),
            state_at.and_then(|i| int_at(r, i)),
            block_at.and_then(|i| int_at(r, i)),
        ];
        // Outs before ins at one instant: a switch closes the old thread first.
        let key = (row[0].unwrap_or(i64::MIN), row[2].unwrap_or(0).min(1));
        if let Some((_, row)) = window.push(key, row) {
            state.switch(&row, sink)?;
        }
    }
    while let Some((_, row)) = window.pop() {
        state.switch(&row, sink)?;
    }
    for _ in state.running.drain() {
        sink.skip(
            SCHED,
            "thread still on its CPU when the capture ended (no sched-out)",
        );
    }
    Ok(())
}

struct State {
    /// cpu -> (thread, sched-in time) of the thread running there.
    running: HashMap<i64, (i64, i64), FastHash>,
    /// `threadState` and `threadBlock` values that tell why a thread left its CPU.
    by_state: HashMap<i64, OffCpu, FastHash>,
    by_block: HashMap<i64, OffCpu, FastHash>,
}

impl State {
    fn switch<S: EventSink>(&mut self, row: &[Option<i64>; 6], sink: &mut S) -> Result<()> {
        let [
            Some(ts),
            Some(cpu),
            Some(is_in),
            Some(gtid),
            thread_state,
            block,
        ] = *row
        else {
            sink.skip(SCHED, "no time, CPU or thread");
            return Ok(());
        };
        if is_in != 0 {
            if self.running.insert(cpu, (gtid, ts)).is_some() {
                sink.skip(
                    SCHED,
                    "sched-in while another thread ran (its sched-out is missing)",
                );
            }
            return Ok(());
        }
        match self.running.remove(&cpu) {
            Some((running, start)) if running == gtid => {
                // The thread state says most (Terminated); a block reason refines an unknown one.
                let off = thread_state
                    .and_then(|s| self.by_state.get(&s))
                    .or_else(|| block.and_then(|b| self.by_block.get(&b)))
                    .copied()
                    .unwrap_or(OffCpu::Unknown);
                // The sched-in row was the other half of this slice.
                sink.extra_row();
                sink.cpu_slice(&CpuSlice {
                    cpu,
                    global_tid: gtid,
                    start,
                    end: ts,
                    off,
                })?;
            }
            Some(other) => {
                // Keep the running thread: this out belongs to nobody we saw come in.
                self.running.insert(cpu, other);
                sink.skip(SCHED, "sched-out of a thread that was not running there");
            }
            None => sink.skip(
                SCHED,
                "sched-out without a sched-in (capture started mid-run)",
            ),
        }
        Ok(())
    }
}
