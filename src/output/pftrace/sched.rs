//! Scheduling as Perfetto's own: ftrace `sched_switch` events, the form Linux kernel traces
//! take, so trace_processor fills its `sched` and `thread_state` tables and the UI draws its CPU
//! tracks and a thread-state track (Running, Runnable, Sleeping...) under each thread.
//!
//! Each CPU's slices become context switches: to the thread at its start; at its end to the
//! next thread when it starts then, else to the idle task (pid 0, "swapper") until it does.
//! `prev_state`, how the switched-out thread left, comes from the slice ([`OffCpu`]).
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
//! - pid is the thread's tid in the trace (unique across merged sources, see
//!   [`trace_tid_of`]); its process and name come from the thread's TrackDescriptor, which
//!   outranks ftrace's comm (written anyway: the thread's name).
//! - Nothing marks where tracing started (`tracing_started`, `previous_bundle_end_timestamp`):
//!   trace_processor would drop every event before such a mark.

use super::{ProtoWriter, frame};
use crate::model::{CpuSlice, FastHash, OffCpu, trace_tid_of};
use crate::proto::ftrace_event_bundle::CompactSched;
use crate::proto::{
    FtraceEvent, FtraceEventBundle, SchedSwitchFtraceEvent, SystemInfo, TracePacket, Utsname,
    ftrace_event, trace_packet,
};
use std::collections::HashMap;

/// Switches one CPU's bundle holds before it is written.
pub const BUNDLE_SWITCHES: usize = 512;
/// The idle task, as Linux names it.
const IDLE_COMM: &str = "swapper";
/// Linux's priority of a normal task (nice 0): nsys records none.
const PRIO: i32 = 120;

/// How trace_processor reads `prev_state`: by the kernel release the trace names, with 4.4's
/// layout when it names none. Only the preemption flag moved between releases among the
/// states written here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateCodes {
    preempted: i64,
}

impl StateCodes {
    /// For a kernel release ("6.8.0-generic": 6.8), or 4.4's layout without one.
    pub fn for_kernel(version: Option<(u32, u32)>) -> StateCodes {
        let version = version.unwrap_or((4, 4));
        let preempted = if version >= (4, 14) {
            0x100 // TASK_REPORT_MAX
        } else if version >= (4, 8) {
            0x1000 // TASK_STATE_MAX with TASK_NEW
        } else {
            0x800
        };
        StateCodes { preempted }
    }

    /// `prev_state` of a thread leaving its CPU. A thread that left for a reason the export
    /// does not record (most exports) reads as sleeping ("S"): it was off its CPU, and nothing
    /// says it waited for one (Runnable would claim CPU contention the data does not show).
    pub fn prev_state(self, off: OffCpu) -> i64 {
        match off {
            OffCpu::Unknown | OffCpu::Sleeping => 0x1,
            OffCpu::Preempted => self.preempted,
            OffCpu::Runnable => 0,
            OffCpu::Uninterruptible => 0x2,
            OffCpu::Stopped => 0x4,
            OffCpu::Exited => 0x10, // EXIT_DEAD
        }
    }
}

/// `MAJOR.MINOR` of a kernel release ("6.8.0-generic": 6.8), parsed as trace_processor parses
/// `SystemInfo.utsname.release` (digits up to the first and the second dot); `None` where it
/// would find no version, and then decode `prev_state` as for 4.4.
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.splitn(3, '.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The SystemInfo packet naming the kernel, so trace_processor decodes `prev_state` as written.
pub fn system_info(release: &str) -> Vec<u8> {
    let packet = TracePacket {
        data: Some(trace_packet::Data::SystemInfo(SystemInfo {
            utsname: Some(Utsname {
                sysname: Some("Linux".to_string()),
                release: Some(release.to_string()),
                ..Default::default()
            }),
        })),
        ..Default::default()
    };
    let mut out = Vec::new();
    frame(&packet, &mut out);
    out
}

/// One CPU's switches not yet written.
struct Cpu {
    /// The switch away from the thread last placed here: (time, its prev_state), written once
    /// the next slice (or the end) says what follows.
    pending: (i64, i64),
    bundle: CompactSched,
    /// Absolute time of the bundle's last switch (the next one is a delta from it).
    last_ts: i64,
    /// pid -> its comm's index in the bundle's intern table.
    comms: HashMap<i32, u32, FastHash>,
}

#[derive(Default)]
pub(super) struct SchedState {
    /// The sequence of this writer's scheduling packets.
    seq: u32,
    cpus: HashMap<u32, Cpu, FastHash>,
}

impl Cpu {
    /// Append a switch to `next_pid`; `comm` names it when the bundle has not yet.
    fn push(&mut self, ts: i64, prev_state: i64, next_pid: i32, comm: impl FnOnce() -> String) {
        let delta = if self.bundle.switch_timestamp.is_empty() {
            ts
        } else {
            ts - self.last_ts
        };
        self.last_ts = ts;
        let b = &mut self.bundle;
        b.switch_timestamp.push(delta.max(0) as u64);
        b.switch_prev_state.push(prev_state);
        b.switch_next_pid.push(next_pid);
        b.switch_next_prio.push(PRIO);
        let index = *self.comms.entry(next_pid).or_insert_with(|| {
            b.intern_table.push(comm());
            b.intern_table.len() as u32 - 1
        });
        b.switch_next_comm_index.push(index);
    }

    /// Write the bundle, if it holds switches.
    fn flush(&mut self, cpu: u32, seq: u32, out: &mut Vec<u8>) {
        if self.bundle.switch_timestamp.is_empty() {
            return;
        }
        let packet = bundle_packet(
            seq,
            FtraceEventBundle {
                cpu: Some(cpu),
                compact_sched: Some(std::mem::take(&mut self.bundle)),
                ..Default::default()
            },
        );
        frame(&packet, out);
        self.comms.clear();
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
        let pid = trace_tid_of(s.global_tid) as i32;
        let prev_state = self.state_codes.prev_state(s.off);
        let desc = &self.desc;
        let comm = || desc.thread_name(s.global_tid);
        let sched = &mut self.sched;
        sched.seq = group;
        match sched.cpus.get_mut(&cpu) {
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
                sched.cpus.insert(
                    cpu,
                    Cpu {
                        pending: (s.end, prev_state),
                        bundle: CompactSched::default(),
                        last_ts: 0,
                        comms: HashMap::default(),
                    },
                );
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
                if c.bundle.switch_timestamp.len() >= BUNDLE_SWITCHES {
                    c.flush(cpu, group, &mut self.out.data);
                }
            }
        }
    }

    /// Every CPU's last thread switches to the idle task; the bundles are written, by CPU.
    pub(super) fn finish_sched(&mut self) {
        let sched = &mut self.sched;
        let mut cpus: Vec<u32> = sched.cpus.keys().copied().collect();
        cpus.sort_unstable();
        for cpu in cpus {
            let c = sched.cpus.get_mut(&cpu).expect("listed above");
            let (end, state) = c.pending;
            c.push(end, state, 0, || IDLE_COMM.to_string());
            c.flush(cpu, sched.seq, &mut self.out.data);
        }
        sched.cpus.clear();
    }
}
