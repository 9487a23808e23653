//! Scheduling: where a thread's time on a CPU goes.
//!
//! A format that shows scheduling natively (Perfetto protobuf: its own CPU tracks, and a
//! thread-state track under each thread) gets each [`CpuSlice`] with the trace's CPU number,
//! thread and times; the writer turns them into context switches. Every other format, and any
//! slice the native form cannot hold, becomes a slice named after its thread on the CPU's own
//! track ("CPU 3" under "CPUs"), as JSON shows scheduling:
//! - CPU numbers from [`MAX_CPUS`] on (trace_processor refuses them);
//! - thread id 0 (the source did not know the thread; to Perfetto it is the idle task), and a
//!   thread whose tid another thread of the source has (Perfetto's scheduling names a thread
//!   by its tid alone: the model's ids carry the pid too, and tids are reused);
//! - a slice starting before the last one written on its CPU ended, or ending before it
//!   starts (rows out of time order beyond the reader's window): a CPU's switches must follow
//!   each other in time.

use super::{Placement, Router};
use crate::output::{EventWriter, MAX_CPUS, WellKnown};
use anyhow::Result;
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::model::{
    ArgList, CpuSlice, Event, EventSink, Flows, GroupKey, Name, pid_of, tid_of, with_source,
};

impl<W: EventWriter> Router<'_, W> {
    pub(super) fn place_cpu_slice(&mut self, s: &CpuSlice) -> Result<()> {
        let Placement { source, offset, .. } = self.placement;
        let (start, end) = (s.start + offset, s.end + offset);
        // In a merge, each source's CPUs keep their numbers: the protobuf writer puts every
        // source on a machine of its own (see `output::pftrace::Protobuf`).
        let cpu = s.cpu;
        let global_tid = with_source(s.global_tid, source);
        let native = self.writer.native_sched()
            && start >= 0
            && end >= start
            && (0..MAX_CPUS).contains(&cpu)
            && self
                .sched
                .cpus
                .get(cpu as usize)
                .copied()
                .flatten()
                .is_none_or(|last| start >= last)
            && self.native_thread(global_tid);
        if !native {
            return self.cpu_slice_as_event(s);
        }
        let seq = match self.sched.seq {
            Some(s) => s,
            None => *self.sched.seq.insert(self.ids.next_sequence()),
        };
        let cpus = &mut self.sched.cpus;
        if cpus.len() <= cpu as usize {
            cpus.resize(cpu as usize + 1, None);
        }
        if cpus[cpu as usize].replace(end).is_none() {
            // Perfetto draws one track per CPU.
            self.summary.tracks += 1;
        }
        self.writer.cpu_slice(
            seq,
            &CpuSlice {
                cpu,
                global_tid,
                start,
                end,
                off: s.off,
            },
        );
        self.summary.trace_events += 1;
        self.summary.count(Category::Sched);
        self.tick();
        self.maybe_send(false)
    }

    /// Whether a thread's scheduling can go natively: its tid is not 0 and no other thread of
    /// the source has it. Decided once per thread; the first time, its descriptor is required
    /// (as for CPU samples: Perfetto puts a thread's scheduling under its process through it).
    fn native_thread(&mut self, global_tid: i64) -> bool {
        if let Some(&ok) = self.sched.threads.get(&global_tid) {
            return ok;
        }
        // The tid the writer shows: the source's own (each source is a machine of its own).
        let tid = tid_of(global_tid);
        let ok = tid != 0 && *self.sched.tids.entry(tid).or_insert(global_tid) == global_tid;
        self.sched.threads.insert(global_tid, ok);
        if ok {
            self.writer.require(WellKnown::Thread(global_tid));
        }
        ok
    }

    /// The slice on its CPU's own track, named after its thread, with the thread's ids and the
    /// CPU as args (as scheduling reads in formats without native scheduling).
    fn cpu_slice_as_event(&mut self, s: &CpuSlice) -> Result<()> {
        let info = self.info;
        // Borrowed out of the map while the event is placed, then put back.
        let name = std::mem::take(self.sched.names.entry(s.global_tid).or_insert_with(|| {
            match info.thread_names.get(&s.global_tid) {
                Some(name) => format!("{name} {}", tid_of(s.global_tid)),
                None => format!("Thread {}", tid_of(s.global_tid)),
            }
        }));
        let mut args = ArgList::new();
        args.int("tid", Some(tid_of(s.global_tid)));
        args.int("pid", Some(pid_of(s.global_tid)));
        args.int("cpu", Some(s.cpu));
        let ev = Event {
            start: s.start,
            end: Some(s.end),
            name: Name::Text(&name),
            category: Category::Sched,
            args: args.as_slice(),
            flows: Flows::default(),
        };
        let placed = self.event(GroupKey::Cpu { cpu: s.cpu }, &ev);
        self.sched.names.insert(s.global_tid, name);
        placed
    }
}
