//! CPU samples: `COMPOSITE_EVENTS(id, start, cpu, threadState, globalTid)` is one sample, its
//! frames are the `SAMPLING_CALLCHAINS` rows with the same `id` (`stackDepth` 0 = the leaf;
//! `symbol` and `module` are StringIds).
//!
//! Both tables are read in id order and joined as they stream (a merge join), so memory holds
//! one sample's frames at a time however large the tables are. Each sample goes to its thread
//! with every frame SAMPLING_CALLCHAINS holds for it, and its thread state's label.

use super::cells::int_at;
use super::reader::ReadContext;
use super::scan::{Rows, Scan};
use anyhow::Result;
use nsys_perfetto_model::category::EventType;
use nsys_perfetto_model::model::{CpuSample, EventSink, Frame};

pub const COMPOSITE: &str = "COMPOSITE_EVENTS";
pub const CALLCHAINS: &str = "SAMPLING_CALLCHAINS";

/// The next frame row of `chains`: (id, frame), `None` after the last (and `done` then).
/// Inlined, and returned by value so that the pending row stays in registers: called once a
/// frame row, the most rows a conversion reads.
#[inline(always)]
fn next_frame(chains: Option<&mut Rows<'_>>, done: &mut bool) -> Result<Option<(i64, Frame)>> {
    if *done {
        return Ok(None);
    }
    let Some(rows) = chains else {
        return Ok(None);
    };
    match rows.next()? {
        Some(r) => {
            let r = &r;
            Ok(Some((
                int_at(r, 0).unwrap_or(i64::MIN),
                Frame {
                    symbol: int_at(r, 1).unwrap_or(-1),
                    module: int_at(r, 2).unwrap_or(-1),
                },
            )))
        }
        None => {
            *done = true;
            Ok(None)
        }
    }
}

pub fn read<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<()> {
    if !cx.wants(
        EventType::CpuSamples,
        COMPOSITE,
        &["id", "start", "globalTid"],
    ) {
        return Ok(());
    }
    let (conn, schema, selection) = (cx.conn, cx.schema, cx.selection);
    let states = super::enums::read_enum(conn, schema, "ENUM_SAMPLING_THREAD_STATE");
    let filter = selection.sql("t", false, Some("globalTid"), None);
    let filtered = filter != "1";
    let mut rows = Scan::new(schema, COMPOSITE)
        .cols(schema, &["id", "start", "globalTid", "cpu", "threadState"])
        .filter(filter.clone())
        .order_by(&["id"])
        .open(conn, schema)?;

    let has_chains = schema.has_columns(CALLCHAINS, &["id", "symbol", "module", "stackDepth"]);
    let mut chains = if has_chains {
        Some(
            Scan::new(schema, CALLCHAINS)
                .cols(schema, &["id", "symbol", "module"])
                .order_by(&["id", "stackDepth"])
                .open(conn, schema)?,
        )
    } else {
        None
    };
    // The next frame row not yet used: (id, frame).
    let mut chains_done = chains.is_none();
    let mut pending = next_frame(chains.as_mut(), &mut chains_done)?;

    let mut frames: Vec<Frame> = Vec::new();
    while let Some(r) = rows.next()? {
        let r = &r;
        let id = int_at(r, 0);
        let (Some(id), Some(ts), Some(gtid)) = (id, int_at(r, 1), int_at(r, 2)) else {
            sink.skip(COMPOSITE, "no id, time or thread");
            continue;
        };
        frames.clear();
        while let Some((fid, f)) = pending {
            if fid > id {
                break;
            }
            if fid == id {
                frames.push(f);
            } else if !filtered {
                // Frames of a sample that is not in COMPOSITE_EVENTS.
                sink.note(CALLCHAINS, "frames of no sample in COMPOSITE_EVENTS");
            }
            pending = next_frame(chains.as_mut(), &mut chains_done)?;
        }
        let state = int_at(r, 4)
            .and_then(|s| states.get(&s))
            .map(String::as_str);
        sink.cpu_sample(&CpuSample {
            ts,
            global_tid: gtid,
            cpu: int_at(r, 3),
            state,
            frames: &frames,
        })?;
    }
    if !filtered {
        while pending.is_some() {
            sink.note(CALLCHAINS, "frames of no sample in COMPOSITE_EVENTS");
            pending = next_frame(chains.as_mut(), &mut chains_done)?;
        }
    }
    Ok(())
}
