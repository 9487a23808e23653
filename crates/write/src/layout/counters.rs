//! Counter tracks and CPU samples: the parts of layout that are not slices.
//!
//! A counter track exists per (owner, name, unit): under its GPU's group track (bytes allocated
//! on a GPU), under its process, or in the report's "Analysis" group. A GPU's metrics go in a "GPU metrics" group of their own,
//! below the GPU's streams and in the order the reader gives them, as Nsight Systems shows them. Each counter track is a sequence of its own
//! (one default track, an incremental clock), so its samples cost a few bytes each. A sample
//! earlier than its track's last one (a table out of time order) opens a further sequence on
//! the same track: Perfetto sorts counter values, so nothing moves or drops.
//!
//! CPU samples are not on tracks: each names its thread, which the writer describes, and all
//! samples of one reader share one sequence that interns their frames.

use super::{Counter, Placement, Router};
use crate::output::{CounterTrack, CustomTrack, EventWriter, WellKnown};
use anyhow::Result;
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::model::{CounterKey, CounterOwner, CounterSample, CpuSample, with_source};

impl<W: EventWriter> Router<'_, W> {
    pub(super) fn place_counter(&mut self, key: &CounterKey<'_>, s: CounterSample) -> Result<()> {
        let Placement { source, offset, .. } = self.placement;
        let owner = match key.owner {
            CounterOwner::Gpu { device } => CounterOwner::Gpu {
                device: with_source(device, source),
            },
            CounterOwner::Process { global_pid } => CounterOwner::Process {
                global_pid: with_source(global_pid, source),
            },
            CounterOwner::Analysis => CounterOwner::Analysis,
        };
        let ts = s.ts + offset;
        if ts < 0 {
            self.skip_early();
            return Ok(());
        }
        let tracks = self.counters.entry(owner).or_default();
        let idx = match tracks
            .iter()
            .position(|c| &*c.name == key.name && &*c.unit == key.unit)
        {
            Some(i) => i,
            None => {
                let index = tracks.len() as i64;
                let (parent, rank) = match owner {
                    CounterOwner::Gpu { device } if s.category == Category::GpuMetric => {
                        (self.metrics_group(device), Some(index))
                    }
                    // Below the streams, with the memory tracks.
                    CounterOwner::Gpu { device } => {
                        (self.gpu_track(device), Some(i64::from(i32::MAX) - 1))
                    }
                    CounterOwner::Process { global_pid } => {
                        self.writer.require(WellKnown::Process(global_pid));
                        (WellKnown::Process(global_pid).uuid(), None)
                    }
                    // Above the rules' tracks, in the order they come.
                    CounterOwner::Analysis => {
                        (self.analysis_group(), Some(i64::from(i32::MIN) + index))
                    }
                };
                let uuid = self.ids.next_uuid();
                self.writer.describe_counter(&CounterTrack {
                    uuid,
                    parent,
                    name: key.name.to_string(),
                    unit: key.unit.to_string(),
                    category: s.category,
                    rank,
                });
                let seq = self.ids.next_sequence();
                self.writer.open_group(seq, uuid, ts);
                self.summary.tracks += 1;
                let tracks = self.counters.entry(owner).or_default();
                tracks.push(Counter {
                    name: key.name.into(),
                    unit: key.unit.into(),
                    uuid,
                    seq,
                    last_ts: ts,
                });
                tracks.len() - 1
            }
        };
        let c = &mut self.counters.get_mut(&owner).expect("inserted above")[idx];
        if ts < c.last_ts {
            c.seq = self.ids.next_sequence();
            self.writer.open_group(c.seq, c.uuid, ts);
            self.summary.late_rows += 1;
        }
        c.last_ts = ts;
        let (seq, uuid) = (c.seq, c.uuid);
        self.writer.counter(seq, uuid, ts, s.value);
        self.summary.trace_events += 1;
        self.summary.count(s.category);
        self.tick();
        self.maybe_send(false)
    }

    /// A GPU's "GPU metrics" group: last under the GPU, below its streams, their sync tracks
    /// and its memory, its counter tracks in explicit order.
    fn metrics_group(&mut self, device: i64) -> u64 {
        if let Some(&u) = self.metrics_groups.get(&device) {
            return u;
        }
        let parent = self.gpu_track(device);
        let uuid = self.ids.next_uuid();
        self.writer.describe(&CustomTrack {
            uuid,
            parent: Some(parent),
            name: "GPU metrics".to_string(),
            rank: Some(i64::from(i32::MAX)),
            explicit_child_order: true,
            number: None,
        });
        self.summary.tracks += 1;
        self.metrics_groups.insert(device, uuid);
        uuid
    }

    pub(super) fn place_cpu_sample(&mut self, s: &CpuSample<'_>) -> Result<()> {
        let Placement { source, offset, .. } = self.placement;
        let ts = s.ts + offset;
        if ts < 0 {
            self.skip_early();
            return Ok(());
        }
        let global_tid = with_source(s.global_tid, source);
        // Once per thread and router: this router's chunks reach the file in order, so the
        // descriptor written before its first chunk that needs it precedes all the others.
        if self.sample_threads.insert(global_tid) {
            self.writer.require(WellKnown::Thread(global_tid));
        }
        let seq = match self.samples_seq {
            Some(s) => s,
            None => {
                let s = self.ids.next_sequence();
                self.samples_seq = Some(s);
                s
            }
        };
        let placed = CpuSample {
            ts,
            global_tid,
            cpu: s.cpu,
            state: s.state,
            frames: s.frames,
        };
        self.writer.cpu_sample(seq, &placed);
        self.summary.trace_events += 1;
        self.summary
            .count(nsys_perfetto_model::category::Category::CpuSample);
        self.tick();
        self.maybe_send(false)
    }
}
