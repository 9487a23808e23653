//! `merge --util-map` and `merge --stragglers`: pictures of the whole job on the timeline.
//!
//! * Utilization map: per rank, process and GPU, a counter track "GPU time utilization · pid P ·
//!   GPU N" (%) first in the rank's "Analysis · LABEL" group (the groups in rank order, at the
//!   top: together they are the heat map), one value per time bin of nsys' `cuda_gpu_time_util_map`
//!   recipe, computed by the recipe's own code (in `workflow::pictures`): the bins lie on
//!   one wall-clock axis for all ranks, so a bin is the same moment on every rank.
//! * Stragglers: for each NVTX range name and MPI call, its k-th occurrence on every rank that
//!   has one: the rank that starts it last gets a slice "late: NAME" on its "Stragglers" track
//!   (in the same group), from the earliest rank's start to its own (the lag).
//!
//! Both need every rank before any is written (one axis, one earliest start), so they are
//! computed first, from small queries, and each rank's share is written after its events.

use anyhow::Result;
use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::model::{
    Arg, ArgValue, CounterKey, CounterOwner, CounterSample, CounterValue, Event, EventSink, Flows,
    GroupKey, Name,
};

/// What to draw (`merge --util-map [--bins N] --stragglers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PictureOptions {
    /// The utilization map's number of bins, when drawn.
    pub util_bins: Option<usize>,
    pub stragglers: bool,
}

impl PictureOptions {
    pub fn any(&self) -> bool {
        self.util_bins.is_some() || self.stragglers
    }

    /// As the command line gives them (a trace's record of its options).
    pub fn text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(b) = self.util_bins {
            parts.push(format!("--util-map --bins {b}"));
        }
        if self.stragglers {
            parts.push("--stragglers".to_string());
        }
        parts.join(" ")
    }
}

/// What one rank's pictures hold, in its own time (ns from its session start).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankPictures {
    pub util: Vec<Utilization>,
    pub stragglers: Vec<Straggler>,
}

/// One process's utilization of one GPU: (bin start, percent) for every bin the rank's
/// session covers, then the end of its last bin.
#[derive(Debug, Clone, PartialEq)]
pub struct Utilization {
    pub pid: i64,
    pub device: i64,
    pub bins: Vec<(i64, f64)>,
    pub end: i64,
}

/// A rank that started an NVTX range or MPI call last among the ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Straggler {
    pub name: String,
    /// Which occurrence of the name (0: each rank's first).
    pub occurrence: usize,
    /// Its start on this rank.
    pub start: i64,
    /// Its start minus the earliest rank's start.
    pub lag: i64,
    /// The rank that started it first, and how many ranks have this occurrence.
    pub earliest: String,
    pub ranks: usize,
}

/// Every rank's pictures, by its place in the merge.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pictures {
    pub options: PictureOptions,
    pub ranks: Vec<RankPictures>,
}

/// Write one rank's pictures into `sink` (a router of its source, after its events). A
/// selection's time window keeps the bins and the straggler slices that overlap it.
pub fn write<S: EventSink>(
    pictures: &RankPictures,
    selection: &nsys_perfetto_model::select::Selection,
    mut sink: S,
) -> Result<nsys_perfetto_model::summary::Summary> {
    let overlaps = |start: i64, end: i64| {
        selection
            .time
            .is_none_or(|t| t.start.is_none_or(|s| end >= s) && t.end.is_none_or(|e| start <= e))
    };
    for u in &pictures.util {
        let name = format!("GPU time utilization · pid {} · GPU {}", u.pid, u.device);
        let key = CounterKey {
            owner: CounterOwner::Analysis,
            name: &name,
            unit: "%",
        };
        let closing = (u.end > u.bins.last().map_or(0, |b| b.0)).then_some((u.end, 0.0));
        let points: Vec<(i64, f64)> = u.bins.iter().chain(closing.iter()).copied().collect();
        for (i, &(ts, pct)) in points.iter().enumerate() {
            // A bin lasts until the next value (the closing 0 is a moment).
            let until = points.get(i + 1).map_or(ts, |p| p.0);
            if !overlaps(ts, until) {
                continue;
            }
            sink.counter(
                &key,
                CounterSample {
                    ts,
                    value: CounterValue::Double(pct),
                    category: Category::Analysis,
                },
            )?;
        }
    }
    for s in pictures
        .stragglers
        .iter()
        .filter(|s| overlaps(s.start - s.lag, s.start))
    {
        let name = format!("late: {}", s.name);
        let args = [
            Arg::str("range", &s.name),
            Arg::int("occurrence", s.occurrence as i64),
            Arg::int("lag_ns", s.lag),
            Arg::str("earliest_rank", &s.earliest),
            Arg::int("ranks", s.ranks as i64),
            Arg {
                key: "lag_ms",
                value: ArgValue::Double(s.lag as f64 / 1e6),
            },
        ];
        sink.event(
            GroupKey::Analysis {
                rule: u8::MAX,
                track: "Stragglers",
                source: 0,
            },
            &Event {
                // From the earliest rank's start, or from this rank's session start when that
                // was earlier still (the lag stays in the args).
                start: (s.start - s.lag).max(0.min(s.start)),
                end: Some(s.start),
                name: Name::Text(&name),
                category: Category::Analysis,
                args: &args,
                flows: Flows::default(),
            },
        )?;
    }
    sink.finish()
}
