//! The lanes of a group: an event goes on the first lane where it nests (or, on a track that
//! does not nest, where nothing is open), a new lane where none has room.

use crate::output::{CustomTrack, EventWriter, Ids};
use nsys_perfetto_model::model::Event;
use nsys_perfetto_model::summary::Summary;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

/// Nesting groups look for room in their first lanes before taking the first free one.
pub(super) const NEST_SEARCH: usize = 4;

pub(super) struct Lane {
    pub(super) uuid: u64,
    /// End timestamps of the open slices, innermost last.
    pub(super) open: Vec<i64>,
}

pub(super) struct Group {
    pub(super) id: u32,
    /// The last timestamp written on this group's sequence; later events may not go back.
    pub(super) emitted_ts: i64,
    pub(super) nests: bool,
    pub(super) lanes: Vec<Lane>,
    /// With several lanes: each open slice's (end, lane, depth), earliest end first; entries of
    /// closed slices are skipped when they surface (a lane's top is checked against them).
    pub(super) ends: BinaryHeap<Reverse<(i64, u32, Reverse<u32>)>>,
    /// Lanes 1.. with no open slice, lowest first.
    pub(super) free: BTreeSet<u32>,
    pub(super) place: LanePlace,
}

/// Where a group's first lane sits, which its further lanes follow.
pub(super) struct LanePlace {
    pub(super) name: String,
    pub(super) parent: Option<u64>,
    pub(super) rank: Option<i64>,
    /// Whether extra lanes are custom tracks under `parent` (false) or under lane 0 (true, for
    /// thread tracks, which cannot have same-level custom siblings).
    pub(super) lanes_under_lane0: bool,
}

impl Group {
    /// A group on sequence `id` whose one lane, the track `lane0`, sits where `place` says.
    pub(super) fn new(id: u32, first_ts: i64, nests: bool, lane0: u64, place: LanePlace) -> Group {
        Group {
            id,
            emitted_ts: first_ts,
            nests,
            lanes: vec![Lane {
                uuid: lane0,
                open: Vec::new(),
            }],
            ends: BinaryHeap::new(),
            free: BTreeSet::new(),
            place,
        }
    }

    /// The parent and name of a further track of the group (`what` it holds: "overlap 2",
    /// "late rows"): under lane 0 where lanes go there, else beside it with the same name.
    pub(super) fn further_track(&self, what: &str) -> (Option<u64>, String) {
        if self.place.lanes_under_lane0 {
            let name = format!("{} ({what})", self.place.name);
            (Some(self.lanes[0].uuid), name)
        } else {
            (self.place.parent, self.place.name.clone())
        }
    }
}

/// How deep slices may nest on one track. trace_processor stops nesting somewhere above 500
/// levels, and the slices beyond load as never finished with no import error: deeper ones go
/// to an extra lane (where they nest again from depth 0).
pub const MAX_DEPTH: usize = 256;

/// A slice ending at `end` may go on this lane when, after closing what ended, the lane is free,
/// or (for call stacks) the innermost open slice contains it and the stack is not too deep.
pub(super) fn fits(lane: &Lane, end: i64, nests: bool) -> bool {
    match lane.open.last() {
        None => true,
        Some(&outer_end) => nests && outer_end >= end && lane.open.len() < MAX_DEPTH,
    }
}

/// Put one event on its group: close what ended before it, then find it a lane. Inlined, as
/// are the ENDs it writes: once an event, in a chain of small calls.
#[inline(always)]
pub(super) fn place_in<W: EventWriter>(
    writer: &mut W,
    ids: &Ids,
    summary: &mut Summary,
    group: &mut Group,
    ev: &Event<'_>,
) {
    summary.trace_events += flush_ends(writer, group, ev.start);
    group.emitted_ts = ev.start;
    summary.trace_events += 1;
    let Some(end) = ev.end else {
        writer.instant(group.id, group.lanes[0].uuid, true, ev);
        return;
    };
    let lane_idx = match find_lane(group, end) {
        Some(i) => i,
        None => {
            let uuid = ids.next_uuid();
            let n = group.lanes.len();
            let (parent, name) = group.further_track(&format!("overlap {n}"));
            writer.describe(&CustomTrack {
                uuid,
                parent,
                name,
                rank: group.place.rank,
                explicit_child_order: false,
                number: None,
            });
            group.lanes.push(Lane {
                uuid,
                open: Vec::new(),
            });
            if n == 1 {
                // From now on ends are found through the heap: enter lane 0's open slices.
                for (d, &e) in group.lanes[0].open.iter().enumerate() {
                    group.ends.push(Reverse((e, 0, Reverse(d as u32 + 1))));
                }
            }
            summary.extra_lanes += 1;
            n
        }
    };
    let multi = group.lanes.len() > 1;
    let lane = &mut group.lanes[lane_idx];
    writer.begin(group.id, lane.uuid, lane_idx == 0, ev);
    lane.open.push(end);
    if multi {
        if lane_idx > 0 && lane.open.len() == 1 {
            group.free.remove(&(lane_idx as u32));
        }
        group.ends.push(Reverse((
            end,
            lane_idx as u32,
            Reverse(lane.open.len() as u32),
        )));
    }
}

/// The first lane a slice ending at `end` may go on: lane 0 or one of the next few when it is
/// free or (for call stacks) its innermost open slice contains it; else the first free lane.
pub(super) fn find_lane(group: &Group, end: i64) -> Option<usize> {
    let search = if group.nests { NEST_SEARCH } else { 1 };
    if let Some(i) = group
        .lanes
        .iter()
        .take(search)
        .position(|l| fits(l, end, group.nests))
    {
        return Some(i);
    }
    group
        .free
        .first()
        .map(|&i| i as usize)
        .filter(|&i| i >= search)
}

/// Emit, in time order across lanes, the ENDs of every slice that ended at or before `ts`.
/// ENDs at `ts` come before a BEGIN at `ts`, as Perfetto expects. Returns how many.
#[inline(always)]
pub(super) fn flush_ends<W: EventWriter>(writer: &mut W, group: &mut Group, ts: i64) -> u64 {
    let mut n = 0;
    if group.lanes.len() == 1 {
        let lane = &mut group.lanes[0];
        while let Some(&e) = lane.open.last()
            && e <= ts
        {
            lane.open.pop();
            writer.end(group.id, lane.uuid, true, e);
            group.emitted_ts = e;
            n += 1;
        }
        return n;
    }
    while let Some(&Reverse((e, i, Reverse(depth)))) = group.ends.peek()
        && e <= ts
    {
        group.ends.pop();
        let lane = &mut group.lanes[i as usize];
        if lane.open.len() != depth as usize || lane.open.last() != Some(&e) {
            continue; // a slice already closed
        }
        lane.open.pop();
        if i > 0 && lane.open.is_empty() {
            group.free.insert(i);
        }
        writer.end(group.id, lane.uuid, i == 0, e);
        group.emitted_ts = e;
        n += 1;
    }
    n
}
