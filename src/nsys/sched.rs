//! Thread scheduling (`SCHED_EVENTS`): when each thread ran on each CPU, as slices on one track
//! per CPU ("CPU 3"), named after the thread. A sched-in and the next sched-out of the same
//! thread on that CPU make one slice.

use super::info::ProfileInfo;
use super::{REORDER_WINDOW, Reorder, Schema, int_at};
use crate::model::EventSink;
use crate::model::{ArgList, Category, Event, Flows, GroupKey, Name, pid_of, tid_of};
use crate::select::{EventType, Selection};
use anyhow::Result;
use rusqlite::Connection;
use std::collections::HashMap;

pub const SCHED: &str = "SCHED_EVENTS";

pub fn read<S: EventSink>(
    conn: &Connection,
    schema: &Schema,
    selection: &Selection,
    info: &ProfileInfo,
    sink: &mut S,
) -> Result<()> {
    if !schema.has_columns(SCHED, &["start", "cpu", "isSchedIn", "globalTid"])
        || !selection.wants(EventType::Sched)
    {
        return Ok(());
    }
    // A point event: the time window keeps switches inside it.
    let filter = selection.sql("t", false, Some("globalTid"), None);
    let rowid = schema.rowid_of(SCHED, "t");
    let sql = format!(
        "SELECT t.start, t.cpu, t.isSchedIn, t.globalTid FROM {SCHED} t WHERE {filter} ORDER BY {rowid}"
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut rows = stmt.query([])?;
    let mut window = Reorder::new(REORDER_WINDOW);
    let mut state = State::default();
    while let Some(r) = rows.next()? {
        let row: [Option<i64>; 4] = std::array::from_fn(|i| match i {
            0 => super::time_at(r, i),
            3 => super::tid_at(r, i),
            _ => int_at(r, i),
        });
        // Outs before ins at one instant: a switch closes the old thread first.
        let key = (row[0].unwrap_or(i64::MIN), row[2].unwrap_or(0).min(1));
        if let Some(row) = window.push_keyed(key.0, key.1, row) {
            state.switch(&row, info, sink)?;
        }
    }
    while let Some(row) = window.pop() {
        state.switch(&row, info, sink)?;
    }
    for _ in state.running.drain() {
        sink.skip(
            SCHED,
            "thread still on its CPU when the capture ended (no sched-out)",
        );
    }
    Ok(())
}

#[derive(Default)]
struct State {
    /// cpu -> (thread, sched-in time) of the thread running there.
    running: HashMap<i64, (i64, i64)>,
    names: HashMap<i64, String>,
}

impl State {
    fn switch<S: EventSink>(
        &mut self,
        row: &[Option<i64>; 4],
        info: &ProfileInfo,
        sink: &mut S,
    ) -> Result<()> {
        let [Some(ts), Some(cpu), Some(is_in), Some(gtid)] = *row else {
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
                let name = self.names.entry(gtid).or_insert_with(|| {
                    match info.desc.thread_names.get(&gtid) {
                        Some(name) => format!("{name} {}", tid_of(gtid)),
                        None => format!("Thread {}", tid_of(gtid)),
                    }
                });
                let mut args = ArgList::new();
                args.int("tid", Some(tid_of(gtid)));
                args.int("pid", Some(pid_of(gtid)));
                args.int("cpu", Some(cpu));
                let ev = Event {
                    start,
                    end: Some(ts),
                    name: Name::Text(name),
                    category: Category::Sched,
                    args: args.as_slice(),
                    flows: Flows::default(),
                };
                // The sched-in row was the other half of this slice.
                sink.extra_row();
                sink.event(GroupKey::Cpu { cpu }, &ev)?;
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
