//! Scheduling as Perfetto's own: ftrace `sched_switch` events, the form Linux kernel traces
//! take, so trace_processor fills its `sched` and `thread_state` tables and the UI draws its CPU
//! tracks and a thread-state track (Running, Runnable, Sleeping...) under each thread.
//!
//! Each CPU's slices become context switches: to the thread at its start; at its end to the
//! next thread when it starts then, else to the idle task (pid 0, "swapper") until it does.
//! `prev_state`, how the switched-out thread left, comes from the slice
//! ([`OffCpu`](nsys_perfetto_model::model::OffCpu)).
//!
//! - Switches go in `FtraceEventBundle.compact_sched` (one bundle per CPU holds up to
//!   [`BUNDLE_SWITCHES`]: arrays of delta timestamps, prev_state, next pid, prio and comm, with
//!   an intern table of comms per bundle), written when full and at the end: memory stays
//!   bounded by CPUs, not by switches.
//! - The compact form has no previous pid: trace_processor takes it from the CPU's previous
//!   switch, and discards the first compact switch of every CPU (with the stat
//!   `compact_sched_switch_skipped`). So each CPU starts with one full `sched_switch` event from
//!   the idle task, in a packet of its own written before the CPU's first bundle (at equal times
//!   the importer keeps file order; inside one bundle, compact switches go before full events).
//! - Times are the trace's BOOTTIME nanoseconds, the clock trace_processor assumes for ftrace
//!   and the one every TrackEvent resolves to, so a switch lands where the slice began.
//! - pid is the thread's own tid (in a merge, each report is a machine of its own, see
//!   [`super::Protobuf`]); its process and name come from the thread's TrackDescriptor, which
//!   outranks ftrace's comm (written anyway: the thread's name).
//! - Nothing marks where tracing started (`tracing_started`, `previous_bundle_end_timestamp`):
//!   trace_processor would drop every event before such a mark.

use super::wire::{TRACE_PACKET_BYTE, bytes_len, field_len, put_bytes, put_field, put_varint, tag};
use super::{Cpu, ProtoWriter, frame};
use crate::proto::{
    FtraceEvent, FtraceEventBundle, SchedSwitchFtraceEvent, TracePacket, ftrace_event, trace_packet,
};
use nsys_perfetto_model::model::{CpuSlice, tid_of};

/// Switches one CPU's bundle holds before it is written.
pub const BUNDLE_SWITCHES: usize = 512;
/// The idle task, as Linux names it.
const IDLE_COMM: &str = "swapper";
/// Linux's priority of a normal task (nice 0): the model carries none.
const PRIO: i32 = 120;

impl Cpu {
    /// Append a switch to `next_pid`; `comm` names it when the bundle has not yet.
    fn push(&mut self, ts: i64, prev_state: i64, next_pid: i32, comm: impl FnOnce() -> String) {
        let delta = if self.switches == 0 {
            ts
        } else {
            ts - self.last_ts
        };
        self.last_ts = ts;
        self.switches += 1;
        put_varint(&mut self.timestamps, delta.max(0) as u64);
        put_varint(&mut self.prev_states, prev_state as u64);
        put_varint(&mut self.next_pids, i64::from(next_pid) as u64);
        put_varint(&mut self.next_prios, i64::from(PRIO) as u64);
        let (intern, interned) = (&mut self.intern, &mut self.interned);
        let add = || {
            put_bytes(intern, tag::INTERN_TABLE, comm().as_bytes());
            *interned += 1;
            *interned - 1
        };
        // The idle task comes between most slices: its index is kept apart from the map.
        let index = match next_pid {
            0 => *self.idle_comm.get_or_insert_with(add),
            _ => *self.comms.entry(next_pid).or_insert_with(add),
        };
        put_varint(&mut self.comm_indices, u64::from(index));
    }

    /// Write the bundle, if it holds switches.
    fn flush(&mut self, cpu: u32, seq: u32, out: &mut Vec<u8>) {
        if self.switches == 0 {
            return;
        }
        let packed = [
            (tag::SWITCH_TIMESTAMP, &self.timestamps),
            (tag::SWITCH_PREV_STATE, &self.prev_states),
            (tag::SWITCH_NEXT_PID, &self.next_pids),
            (tag::SWITCH_NEXT_PRIO, &self.next_prios),
            (tag::SWITCH_NEXT_COMM_INDEX, &self.comm_indices),
        ];
        let compact = self.intern.len()
            + packed
                .iter()
                .map(|&(t, b)| bytes_len(t, b.len()))
                .sum::<usize>();
        let bundle = field_len(tag::BUNDLE_CPU, u64::from(cpu))
            + bytes_len(tag::BUNDLE_COMPACT_SCHED, compact);
        let packet = bytes_len(tag::PACKET_FTRACE_EVENTS, bundle)
            + field_len(tag::PACKET_SEQUENCE_ID, u64::from(seq));
        out.reserve(packet + 6);
        out.push(TRACE_PACKET_BYTE);
        put_varint(out, packet as u64);
        put_varint(out, tag::PACKET_FTRACE_EVENTS);
        put_varint(out, bundle as u64);
        put_field(out, tag::BUNDLE_CPU, u64::from(cpu));
        put_varint(out, tag::BUNDLE_COMPACT_SCHED);
        put_varint(out, compact as u64);
        out.extend_from_slice(&self.intern);
        for (t, b) in packed {
            put_bytes(out, t, b);
        }
        put_field(out, tag::PACKET_SEQUENCE_ID, u64::from(seq));
        for b in [
            &mut self.timestamps,
            &mut self.prev_states,
            &mut self.next_pids,
            &mut self.next_prios,
            &mut self.comm_indices,
            &mut self.intern,
        ] {
            b.clear();
        }
        self.switches = 0;
        self.interned = 0;
        self.comms.clear();
        self.idle_comm = None;
    }
}

fn bundle_packet(seq: u32, bundle: FtraceEventBundle) -> TracePacket {
    TracePacket {
        data: Some(trace_packet::Data::FtraceEvents(bundle)),
        optional_trusted_packet_sequence_id: Some(
            trace_packet::OptionalTrustedPacketSequenceId::TrustedPacketSequenceId(seq),
        ),
        ..Default::default()
    }
}

impl ProtoWriter {
    pub(super) fn write_cpu_slice(&mut self, group: u32, s: &CpuSlice) {
        let cpu = s.cpu as u32;
        let pid = tid_of(s.global_tid) as i32;
        let prev_state = self.state_codes.prev_state(s.off);
        let desc = &self.desc;
        let comm = || desc.thread_name(s.global_tid);
        let sched = &mut self.sched;
        sched.seq = group;
        debug_assert!(
            i64::from(cpu) < crate::output::MAX_CPUS,
            "layout bounds CPUs"
        );
        if sched.cpus.len() <= cpu as usize {
            sched.cpus.resize_with(cpu as usize + 1, || None);
        }
        match &mut sched.cpus[cpu as usize] {
            None => {
                // The CPU's first switch: a full one, from the idle task.
                let event = FtraceEvent {
                    timestamp: Some(s.start.max(0) as u64),
                    pid: Some(0),
                    event: Some(ftrace_event::Event::SchedSwitch(SchedSwitchFtraceEvent {
                        prev_comm: Some(IDLE_COMM.to_string()),
                        prev_pid: Some(0),
                        prev_prio: Some(PRIO),
                        prev_state: Some(0),
                        next_comm: Some(comm()),
                        next_pid: Some(pid),
                        next_prio: Some(PRIO),
                    })),
                };
                let packet = bundle_packet(
                    group,
                    FtraceEventBundle {
                        cpu: Some(cpu),
                        event: vec![event],
                        ..Default::default()
                    },
                );
                frame(&packet, &mut self.out.data);
                sched.cpus[cpu as usize] = Some(Cpu {
                    pending: (s.end, prev_state),
                    ..Default::default()
                });
            }
            Some(c) => {
                let (end, state) = c.pending;
                if end < s.start {
                    // Nothing of the capture's ran in between: the idle task did (it stays
                    // runnable, "R").
                    c.push(end, state, 0, || IDLE_COMM.to_string());
                    c.push(s.start, 0, pid, comm);
                } else {
                    c.push(s.start, state, pid, comm);
                }
                c.pending = (s.end, prev_state);
                if c.switches >= BUNDLE_SWITCHES {
                    c.flush(cpu, group, &mut self.out.data);
                }
            }
        }
    }

    /// Every CPU's last thread switches to the idle task; the bundles are written, by CPU.
    pub(super) fn finish_sched(&mut self) {
        let seq = self.sched.seq;
        for (cpu, c) in self.sched.cpus.iter_mut().enumerate() {
            if let Some(c) = c {
                let (end, state) = c.pending;
                c.push(end, state, 0, || IDLE_COMM.to_string());
                c.flush(cpu as u32, seq, &mut self.out.data);
            }
        }
        self.sched.cpus.clear();
    }
}
