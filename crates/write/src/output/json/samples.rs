//! Counters and CPU samples in the JSON output.
//!
//! - A counter value is a `C` event on its owner's (pseudo-)process, named after the counter,
//!   with one arg keyed by the unit ("%", "Hz", "bytes"; "value" without one): importers name
//!   the series "NAME UNIT".
//! - JSON has no call stacks: a CPU sample is a thread-scoped instant (`i`) on its thread named
//!   after the leaf function, with the whole stack (leaf first, one "function (module)" a line)
//!   as the `stack` arg, and the CPU and thread state where recorded.

use super::{JsonCounter, JsonWriter, gpu_pid, push_int, push_pid_tid, push_str, push_us};
use crate::output::{CounterTrack, WellKnown};
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::model::{CounterValue, CpuSample, tid_of, trace_pid_of};
use std::io::Write as _;

impl JsonWriter {
    pub(super) fn write_counter_track(&mut self, track: &CounterTrack) {
        let pid = match WellKnown::from_uuid(track.parent) {
            Some(WellKnown::Gpu(d) | WellKnown::GpuContext { device: d, .. }) => {
                gpu_pid(d, &self.info)
            }
            Some(WellKnown::Process(gp) | WellKnown::Thread(gp)) => trace_pid_of(gp) as u32,
            // Under a custom track (a GPU's "GPU metrics" group): on that track's process.
            None => match self.tracks.get(&track.parent) {
                Some(t) => t.pid,
                None => super::pseudo_pid(track.parent),
            },
        };
        let key = if track.unit.is_empty() {
            "value".to_string()
        } else {
            track.unit.clone()
        };
        self.counters.insert(
            track.uuid,
            JsonCounter {
                pid,
                name: track.name.clone(),
                key,
                category: track.category,
            },
        );
    }

    pub(super) fn write_counter(&mut self, track: u64, ts: i64, value: CounterValue) {
        let Some(c) = self.counters.get(&track) else {
            return;
        };
        let b = &mut self.out.data;
        b.extend_from_slice(b",\n{\"ph\":\"C\",\"cat\":\"");
        b.extend_from_slice(c.category.as_str().as_bytes());
        b.extend_from_slice(b"\",\"name\":");
        push_str(b, &c.name);
        b.extend_from_slice(b",\"pid\":");
        push_int(b, c.pid as i64);
        b.extend_from_slice(b",\"ts\":");
        push_us(b, ts);
        b.extend_from_slice(b",\"args\":{");
        push_str(b, &c.key);
        b.push(b':');
        match value {
            CounterValue::Int(v) => push_int(b, v),
            CounterValue::Double(v) if v.is_finite() => {
                let _ = write!(b, "{v:?}");
            }
            CounterValue::Double(_) => b.extend_from_slice(b"null"),
        }
        b.extend_from_slice(b"}}");
    }

    pub(super) fn write_cpu_sample(&mut self, s: &CpuSample<'_>) {
        let info = &*self.info;
        let pid = trace_pid_of(s.global_tid) as u32;
        let tid = tid_of(s.global_tid) as u32;
        let b = &mut self.out.data;
        b.extend_from_slice(b",\n{\"ph\":\"i\",\"cat\":\"");
        b.extend_from_slice(Category::CpuSample.as_str().as_bytes());
        b.extend_from_slice(b"\",\"name\":");
        match s.frames.first() {
            Some(f) => push_str(b, &info.string_or_id(f.symbol)),
            None => push_str(b, "(no call stack)"),
        }
        push_pid_tid(b, pid, tid);
        b.extend_from_slice(b",\"ts\":");
        push_us(b, s.ts);
        b.extend_from_slice(b",\"s\":\"t\",\"args\":{\"stack\":");
        let mut stack = String::new();
        for (i, f) in s.frames.iter().enumerate() {
            if i > 0 {
                stack.push('\n');
            }
            stack.push_str(&info.string_or_id(f.symbol));
            stack.push_str(" (");
            stack.push_str(&info.string_or_id(f.module));
            stack.push(')');
        }
        push_str(b, &stack);
        b.extend_from_slice(b",\"frames\":");
        push_int(b, s.frames.len() as i64);
        if let Some(cpu) = s.cpu {
            b.extend_from_slice(b",\"cpu\":");
            push_int(b, cpu);
        }
        if let Some(state) = s.state {
            b.extend_from_slice(b",\"state\":");
            push_str(b, state);
        }
        b.extend_from_slice(b"}}");
    }
}
