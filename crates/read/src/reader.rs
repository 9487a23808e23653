//! One way to read an export: every reader is a [`Reader`], a name and a function from a
//! [`ReadContext`] into a sink, and [`crate::source`] runs the list of them. The context
//! holds what every reader reads (the export's connection and schema, what it says about itself,
//! the selection) and what an earlier stage computed for the readers that wait for it (the
//! flow links, the NVTX projection and its feed); a reader takes what it needs from it.

use super::flows::FlowDb;
use super::info::ProfileInfo;
use super::projection::Projected;
use super::projection::feed::FeedRows;
use super::schema::Schema;
use anyhow::Result;
use nsys_perfetto_model::category::EventType;
use nsys_perfetto_model::model::EventSink;
use nsys_perfetto_model::select::Selection;
use rusqlite::Connection;
use std::cell::RefCell;
use std::time::Instant;

/// What a reader reads from.
pub struct ReadContext<'a> {
    /// This reader's connection to the export (one per thread).
    pub conn: &'a Connection,
    pub schema: &'a Schema,
    pub selection: &'a Selection,
    pub info: &'a ProfileInfo,
    /// Which API call launched each GPU row: set for the readers that run after the flow links
    /// are computed (`None` there too when the export has nothing to link).
    pub flows: Option<&'a FlowDb>,
    /// NVTX projected onto the GPU: set for the readers that run after the projection.
    pub projected: Option<&'a Projected>,
    /// The projection's feed, for the reader of the NVTX table (one read serves both).
    pub feed: Option<&'a RefCell<dyn FeedRows + 'a>>,
}

impl<'a> ReadContext<'a> {
    /// The context of a reader that needs nothing an earlier stage computes.
    pub fn new(
        conn: &'a Connection,
        schema: &'a Schema,
        selection: &'a Selection,
        info: &'a ProfileInfo,
    ) -> ReadContext<'a> {
        ReadContext {
            conn,
            schema,
            selection,
            info,
            flows: None,
            projected: None,
            feed: None,
        }
    }

    /// Whether the selection wants events of `wanted` and `table` has `columns`: a reader
    /// with nothing to read returns at once.
    pub fn wants(&self, wanted: EventType, table: &str, columns: &[&str]) -> bool {
        self.selection.wants(wanted) && self.schema.has_columns(table, columns)
    }
}

/// The summary's notes a reader adds (most add none).
pub type Notes = Vec<String>;

/// A reader: what it is called (in the phase timings) and how it reads.
pub struct Reader<S> {
    pub name: &'static str,
    read: Read<S>,
}

enum Read<S> {
    Events(fn(&ReadContext<'_>, &mut S) -> Result<()>),
    Noting(fn(&ReadContext<'_>, &mut S) -> Result<Notes>),
}

impl<S: EventSink> Reader<S> {
    /// A reader that writes events into the sink.
    pub const fn new(name: &'static str, read: fn(&ReadContext<'_>, &mut S) -> Result<()>) -> Self {
        Reader {
            name,
            read: Read::Events(read),
        }
    }

    /// A reader that also has something to say in the summary.
    pub const fn noting(
        name: &'static str,
        read: fn(&ReadContext<'_>, &mut S) -> Result<Notes>,
    ) -> Self {
        Reader {
            name,
            read: Read::Noting(read),
        }
    }

    /// Read into `sink`, timed under the reader's name; the notes it adds.
    pub fn run(&self, cx: &ReadContext<'_>, sink: &mut S) -> Result<Notes> {
        let t = Instant::now();
        let notes = match self.read {
            Read::Events(read) => read(cx, sink).map(|()| Notes::new()),
            Read::Noting(read) => read(cx, sink),
        }?;
        nsys_perfetto_model::progress::timing(self.name, t);
        Ok(notes)
    }
}
