//! One nsys export, opened ([`Export`]: what every command reads, the workflows' queries on its
//! connection), described in the neutral model ([`Description`]), and read by its readers in
//! parallel threads into sinks the caller provides. Nothing here knows about tracks, lanes or
//! output formats.

use super::connection::open_readonly;
use super::enums::Enums;
use super::flows::{self, FlowDb};
use super::info::ProfileInfo;
use super::names::{DRIVER, KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME, SYNC};
use super::projection::Projected;
use super::projection::feed::FeedRows;
use super::projection::tables::Projection;
use super::reader::{Notes, ReadContext, Reader};
use super::reports::totals::Events;
use super::scan::Scan;
use super::schema::{Schema, open_schema};
use anyhow::{Result, anyhow};
use nsys_perfetto_model::category::EventType;
use nsys_perfetto_model::model::{Description, EventSink};
use nsys_perfetto_model::progress::timing;
use nsys_perfetto_model::select::Selection;
use nsys_perfetto_model::summary::Summary;
use rusqlite::Connection;
use std::cell::{OnceCell, RefCell};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The event tables the readers convert (rows counted for the progress bar).
pub const EVENT_TABLES: [&str; 12] = [
    KERNEL,
    MEMCPY,
    MEMSET,
    RUNTIME,
    DRIVER,
    NVTX,
    super::osrt::OSRT,
    SYNC,
    super::sched::SCHED,
    super::samples::COMPOSITE,
    super::metrics::GPU_METRICS,
    super::gpu_memory::GPU_MEMORY,
];

/// An opened export, what every command reads: its tables, the connection that opened them, its
/// enum labels, and what it says about itself ([`Export::info`]), read when first asked for (a
/// conversion reads it; the workflows' queries need only the connection). A report is read
/// through its export, which the app finds or makes first.
pub struct Export {
    /// The connection that opened the export: the workflows' queries run on it (each reader of
    /// a conversion opens its own, one a thread).
    pub conn: Connection,
    pub schema: Schema,
    pub enums: Enums,
    /// The NVTX-to-GPU projection, attached to `conn` as [`crate::projection::PROJ_DB`]
    /// ([`Export::project`]).
    pub projection: Option<Projection>,
    info: OnceCell<ProfileInfo>,
    /// The earliest time an earlier opening found ([`Export::open_placed`]).
    earliest_ns: Option<i64>,
    /// Removes the `-shm` file SQLite creates to read a WAL-mode export, when we made it.
    _shm: super::connection::ShmGuard,
}

impl Export {
    /// Check the file and read its schema (see [`open_schema`]). Errors are one line.
    pub fn open(path: &Path) -> Result<Export> {
        // Before the connection: it may make the `-shm` file.
        let shm = super::connection::ShmGuard::new(path);
        let (conn, schema) = open_schema(path)?;
        Ok(Export::guarded(conn, schema, shm))
    }

    /// The export that `conn` and `schema` opened (see [`open_schema`]: a check that read it
    /// first, which need not open it again).
    pub fn opened(conn: Connection, schema: Schema) -> Export {
        let shm = super::connection::ShmGuard::new(&schema.path);
        Export::guarded(conn, schema, shm)
    }

    fn guarded(conn: Connection, schema: Schema, shm: super::connection::ShmGuard) -> Export {
        let enums = Enums::load(&conn, &schema);
        Export {
            conn,
            schema,
            enums,
            projection: None,
            info: OnceCell::new(),
            earliest_ns: None,
            _shm: shm,
        }
    }

    /// [`Export::open`] for a conversion: with `check`, SQLite's `PRAGMA quick_check` runs first
    /// and a damaged file is refused; what the export says about itself is read now, so that
    /// its errors come before any output.
    pub fn open_described(path: &Path, check: bool) -> Result<Export> {
        Export::open_describing(path, check, None)
    }

    /// [`Export::open_described`] of an export whose earliest time (relative to its session
    /// start, at most 0) an earlier opening found: a merge opens each report for its clock, then
    /// again to convert it, and the second opening need not look for the earliest rows again.
    pub fn open_placed(path: &Path, check: bool, earliest_ns: i64) -> Result<Export> {
        Export::open_describing(path, check, Some(earliest_ns))
    }

    fn open_describing(path: &Path, check: bool, earliest_ns: Option<i64>) -> Result<Export> {
        let mut export = Export::open(path)?;
        export.earliest_ns = earliest_ns;
        if check {
            let checked = crate::connection::quick_check(&export.conn);
            export.schema.read_through(checked)?;
        }
        export.info()?;
        Ok(export)
    }

    /// What the export says about itself: names, GPUs, its clock, its earliest time (read the
    /// first time it is asked for).
    pub fn info(&self) -> Result<&ProfileInfo> {
        if let Some(info) = self.info.get() {
            return Ok(info);
        }
        let (conn, schema) = (&self.conn, &self.schema);
        let described = (|| {
            let mut info = ProfileInfo::load(conn, schema, self.enums.clone())
                .map_err(|e| anyhow!("damaged SQLite database: {e}"))?;
            let earliest = match self.earliest_ns {
                Some(known) => Some(known),
                None => earliest_time(conn, schema)?,
            };
            if let Some(desc) = Arc::get_mut(&mut info.desc) {
                desc.earliest_ns = earliest.filter(|t| *t < 0);
            }
            Ok(info)
        })();
        let info = schema.read_through(described)?;
        Ok(self.info.get_or_init(|| info))
    }

    pub fn description(&self) -> Result<Arc<Description>> {
        Ok(self.info()?.desc.clone())
    }

    /// Build the NVTX-to-GPU projection and attach it to `conn` as
    /// [`crate::projection::PROJ_DB`], where the export has NVTX ranges and GPU work (it reads
    /// every NVTX range and GPU row: a caller that never queries it should not ask).
    pub fn project(&mut self) -> Result<()> {
        let projection = self.schema.read_through(Projection::build(&self.schema))?;
        if let Some(p) = &projection {
            p.attach(&self.conn)?;
        }
        self.projection = projection;
        Ok(())
    }

    /// The events the workflows total, for their queries.
    pub fn events(&self) -> Events<'_> {
        Events {
            schema: &self.schema,
            enums: &self.enums,
            projected: self.projection.is_some(),
        }
    }

    /// How many CPU numbers its scheduling rows use (the highest CPU plus one; 0 without
    /// scheduling rows).
    pub fn sched_cpus(&self) -> i64 {
        let table = super::sched::SCHED;
        if !self.schema.has_columns(table, &["cpu"]) {
            return 0;
        }
        self.conn
            .query_row(&format!("SELECT max(cpu) FROM {table}"), [], |r| {
                r.get::<_, Option<i64>>(0)
            })
            .ok()
            .flatten()
            .map_or(0, |c| c.clamp(-1, 1 << 20) + 1)
    }

    /// Name this export among several (a merge).
    pub fn set_label(&mut self, label: String) -> Result<()> {
        self.info()?;
        if let Some(desc) = self.info.get_mut().and_then(|i| Arc::get_mut(&mut i.desc)) {
            desc.label = Some(label);
        }
        Ok(())
    }

    /// Rows the readers will visit, for a progress bar: `max(rowid)` is instant where
    /// `count(*)` would scan the table (in SQLite; an Arrow table knows its last rowid, where
    /// SQLite would scan the virtual table for it).
    pub fn estimated_rows(&self) -> u64 {
        EVENT_TABLES
            .iter()
            .copied()
            .chain(super::tables::present(&self.schema).map(|(t, _)| t))
            .filter(|t| self.schema.has_table(t))
            .filter_map(|t| {
                if self.schema.is_arrow() {
                    return super::arrow::max_rowid(&self.schema.path, t).ok().flatten();
                }
                let rowid = self.schema.rowid(t)?;
                self.conn
                    .query_row(
                        &format!("SELECT max({rowid}) FROM {}", super::query::quote_ident(t)),
                        [],
                        |r| r.get::<_, Option<i64>>(0),
                    )
                    .ok()
                    .flatten()
            })
            .map(|n| n.max(0) as u64)
            .sum()
    }

    /// Run every reader of `readers`, on threads, each thread with its own sink from
    /// `make_sink`, and add up what they converted and skipped. Tables nothing reads are named
    /// in the summary's notes.
    ///
    /// The flow links (and the launches the NVTX projection needs) are computed first; then the
    /// readers that need them start, and the NVTX reader, which feeds the projection as it reads
    /// the NVTX table and hands it over when done; the GPU reader waits for the projection (each
    /// kernel lists its enclosing NVTX ranges), and the projected ranges are written meanwhile.
    pub fn read<S, M>(&self, selection: &Selection, make_sink: &M) -> Result<Summary>
    where
        S: EventSink,
        M: Fn() -> S + Sync,
    {
        let schema = &self.schema;
        let info = self.info()?;
        let readers = readers::<S>();
        let readers = &readers;
        // A thread's readers in turn, on a connection of their own, into one sink.
        let run =
            move |list: &[Reader<S>], flows: Option<&FlowDb>, projected: Option<&Projected>| {
                let conn = open_readonly(&schema.path)?;
                let mut cx = ReadContext::new(&conn, schema, selection, info);
                cx.flows = flows;
                cx.projected = projected;
                let mut sink = make_sink();
                let notes = run_all(list, &cx, &mut sink)?;
                let mut part = sink.finish()?;
                part.notes.extend(notes);
                Ok::<_, anyhow::Error>(part)
            };
        std::thread::scope(|s| {
            let independent: Vec<_> = readers
                .independent
                .iter()
                .map(|list| s.spawn(move || run(list, None, None)))
                .collect();
            let unconverted = s.spawn(move || -> Result<_> {
                Ok((
                    unconverted_tables(schema)?,
                    incomplete_tables(schema, selection)?,
                ))
            });
            let t = Instant::now();
            // The calling thread's readers read on the export's own connection.
            let conn = &self.conn;
            let (flow_db, launches) =
                flows::prepare(conn, schema, selection, selection.wants(EventType::NvtxGpu))
                    .map_err(nsys_perfetto_model::errors::scratch_error)?;
            let flow_db: Arc<Option<FlowDb>> = Arc::new(flow_db);
            timing("flow links", t);
            let with_flows: Vec<_> = readers
                .with_flows
                .iter()
                .map(|reader| {
                    let flow_db = flow_db.clone();
                    s.spawn(move || {
                        run(
                            std::slice::from_ref(reader),
                            flow_db.as_ref().as_ref(),
                            None,
                        )
                    })
                })
                .collect();
            let (projected_tx, projected_rx) = std::sync::mpsc::channel();
            let nvtx = s.spawn(move || -> Result<Summary> {
                let conn = open_readonly(&schema.path)?;
                let mut sink = make_sink();
                let feed = match &launches {
                    Some(l) => {
                        super::projection::feed::Feed::new(&conn, schema, l)?.map(RefCell::new)
                    }
                    None => None,
                };
                let mut notes = {
                    let mut cx = ReadContext::new(&conn, schema, selection, info);
                    cx.feed = feed.as_ref().map(|f| f as &RefCell<dyn FeedRows>);
                    readers.nvtx.run(&cx, &mut sink)?
                };
                let t = Instant::now();
                let projected = match feed {
                    Some(f) => f
                        .into_inner()
                        .finish()
                        .map_err(nsys_perfetto_model::errors::scratch_error)?,
                    None => None,
                };
                // Not fed (NVTX not converted) or not suited to the feed: on its own.
                let projected = match (projected, &launches) {
                    (Some(p), _) => Some(p),
                    (None, Some(l)) => Projected::build(&conn, schema, l)
                        .map_err(nsys_perfetto_model::errors::scratch_error)?,
                    (None, None) => None,
                };
                timing("nvtx-gpu projection", t);
                let _ = projected_tx.send(projected);
                drop(launches);
                let cx = ReadContext::new(&conn, schema, selection, info);
                notes.extend(run_all(&readers.after_nvtx, &cx, &mut sink)?);
                let mut part = sink.finish()?;
                part.notes.extend(notes);
                Ok(part)
            });
            let projected: Arc<Option<Projected>> = match projected_rx.recv() {
                Ok(p) => Arc::new(p),
                // The NVTX reader stopped before: its error is the conversion's.
                Err(_) => {
                    return Err(match nvtx.join() {
                        Ok(Err(e)) => anyhow!("{}", sqlite_problem(&e)),
                        _ => anyhow!("NVTX reader panicked"),
                    });
                }
            };
            let with_projection: Vec<_> = readers
                .with_projection
                .iter()
                .map(|reader| {
                    let flow_db = flow_db.clone();
                    let projected = projected.clone();
                    s.spawn(move || {
                        run(
                            std::slice::from_ref(reader),
                            flow_db.as_ref().as_ref(),
                            projected.as_ref().as_ref(),
                        )
                    })
                })
                .collect();
            let gpu = (|| -> Result<Summary> {
                let mut cx = ReadContext::new(conn, schema, selection, info);
                cx.flows = flow_db.as_ref().as_ref();
                cx.projected = projected.as_ref().as_ref();
                let mut sink = make_sink();
                let notes = readers.gpu.run(&cx, &mut sink)?;
                let mut part = sink.finish()?;
                part.notes.extend(notes);
                Ok(part)
            })();
            let joined = |h: std::thread::ScopedJoinHandle<'_, Result<Summary>>,
                          list: &[Reader<S>]| {
                h.join().map_err(|_| {
                    let names: Vec<&str> = list.iter().map(|r| r.name).collect();
                    anyhow!("reader panicked: {}", names.join(", "))
                })
            };
            let mut parts = vec![gpu];
            for (h, r) in with_flows.into_iter().zip(&readers.with_flows) {
                parts.push(joined(h, std::slice::from_ref(r))?);
            }
            parts.push(joined(nvtx, std::slice::from_ref(&readers.nvtx))?);
            for (h, r) in with_projection.into_iter().zip(&readers.with_projection) {
                parts.push(joined(h, std::slice::from_ref(r))?);
            }
            for (h, list) in independent.into_iter().zip(&readers.independent) {
                parts.push(joined(h, list)?);
            }
            let mut summary = Summary::default();
            for part in parts {
                summary.merge(part.map_err(|e| anyhow!("{}", sqlite_problem(&e)))?);
            }
            if !selection.is_everything() {
                summary.notes.push(format!("selection: {selection}"));
            }
            let (unconverted, incomplete) = unconverted
                .join()
                .map_err(|_| anyhow!("table listing panicked"))??;
            summary.notes.extend(unconverted);
            for (key, n) in incomplete {
                *summary.skipped.entry(key).or_default() += n;
            }
            Ok(summary)
        })
    }
}

/// Every reader of an export, by the stage it waits for: a new reader is one entry here.
struct Readers<S> {
    /// Need nothing but the export: a thread per list, which runs its readers in turn.
    independent: Vec<Vec<Reader<S>>>,
    /// Need the flow links: a thread each.
    with_flows: Vec<Reader<S>>,
    /// Reads the NVTX table and feeds the projection as it goes.
    nvtx: Reader<S>,
    /// On the NVTX reader's thread, once the projection is handed over.
    after_nvtx: Vec<Reader<S>>,
    /// Need the projection: a thread each.
    with_projection: Vec<Reader<S>>,
    /// Needs the flow links and the projection: on the calling thread, the last to start.
    gpu: Reader<S>,
}

fn readers<S: EventSink>() -> Readers<S> {
    Readers {
        independent: vec![
            // CPU samples after scheduling, on the same thread: one SQLite cache and one
            // chunk buffer fewer at a time (peak memory), and 2 cores are busy anyway.
            vec![
                Reader::new("sched", super::sched::read),
                Reader::noting("gpu metrics", super::metrics::read_noting),
                Reader::new("gpu memory", super::gpu_memory::read),
                Reader::new("cpu samples", super::samples::read),
            ],
            vec![Reader::new("other tables", super::tables::read)],
        ],
        with_flows: vec![Reader::new("cuda api", super::api::read)],
        nvtx: Reader::new("nvtx", super::nvtx::read),
        after_nvtx: vec![
            Reader::new("osrt", super::osrt::read),
            Reader::new("sync", super::sync::read),
        ],
        with_projection: vec![Reader::new("nvtx-gpu", super::nvtx::read_projection)],
        gpu: Reader::new("gpu", super::gpu::read),
    }
}

/// Run `list` in turn into `sink`; the notes they add.
fn run_all<S: EventSink>(list: &[Reader<S>], cx: &ReadContext<'_>, sink: &mut S) -> Result<Notes> {
    let mut notes = Notes::new();
    for reader in list {
        notes.extend(reader.run(cx, sink)?);
    }
    Ok(notes)
}

/// The earliest time the event tables hold: rows can precede the session start (scheduling,
/// metrics and diagnostics recorded while it starts), and the trace shifts to keep them. nsys
/// writes each table in time order, so the first rows of each tell; reading whole tables would
/// cost a third of a conversion. A row found later that is earlier still is counted as skipped
/// by layout, never written at a wrong time.
fn earliest_time(conn: &rusqlite::Connection, schema: &Schema) -> Result<Option<i64>> {
    let mut earliest: Option<i64> = None;
    let columns = EVENT_TABLES
        .iter()
        .map(|t| (*t, "start", "1".to_string()))
        .chain(super::metrics::time_columns(schema))
        .chain(super::tables::present(schema).map(|(t, c)| (t, c, "1".to_string())));
    for (t, col, cond) in columns {
        if !schema.has_column(t, col) {
            continue;
        }
        // Damaged rows may hold text or reals: what the readers cannot read as a time (and
        // count as skipped) does not place the trace either.
        let damaged = |e: anyhow::Error| anyhow!("damaged SQLite database: {e:#}");
        let mut rows = Scan::new(schema, t)
            .col(schema, col)
            .filter(cond)
            .open(conn, schema)
            .map_err(damaged)?;
        for _ in 0..super::order::REORDER_WINDOW * 2 {
            let Some(r) = rows.next().map_err(damaged)? else {
                break;
            };
            if let Some(m) = super::cells::time_at(&r, 0) {
                earliest = Some(earliest.map_or(m, |e| e.min(m)));
            }
        }
    }
    Ok(earliest)
}

/// Whether a table is one a conversion reads (or leaves to a reader that does, for a reason
/// listed in [`super::tables::EXCLUDED`]).
pub fn is_converted(table: &str) -> bool {
    EVENT_TABLES.contains(&table) || super::tables::spec_of(table).is_some()
}

/// A table whose rows are timed: it has a `start` or `timestamp` column.
pub fn is_timed(schema: &Schema, table: &str) -> bool {
    schema.time_column(table).is_some()
}

/// Timed tables this version does not convert, with their row counts: nothing a profile
/// holds is dropped without saying so. Tables on the exclusion list say why.
fn unconverted_tables(schema: &Schema) -> Result<Vec<String>> {
    // GENERIC_EVENTS: the metrics reader says what its rows became.
    let mut tables: Vec<&str> = schema
        .tables()
        .filter(|t| is_timed(schema, t) && !is_converted(t) && *t != super::metrics::GENERIC_EVENTS)
        .collect();
    tables.sort_unstable();
    if tables.is_empty() {
        return Ok(Vec::new());
    }
    let conn = open_readonly(&schema.path)?;
    let mut notes = Vec::new();
    for t in tables {
        let n: i64 = conn.query_row(
            &format!("SELECT count(*) FROM {}", super::query::quote_ident(t)),
            [],
            |r| r.get(0),
        )?;
        if n > 0 {
            match super::tables::EXCLUDED.iter().find(|(e, _)| *e == t) {
                Some((_, why)) => notes.push(format!("{t}: {n} rows not converted here ({why})")),
                None => notes.push(format!("{t}: {n} rows not converted (not supported yet)")),
            }
        }
    }
    Ok(notes)
}

/// The columns each event reader needs, by table, and the event type it writes: a table that
/// lacks one is not converted, and its rows are counted as skipped (naming the column).
const REQUIRED: [(&str, &[&str], EventType); 9] = [
    (super::names::KERNEL, &["start", "end"], EventType::Kernel),
    (super::names::MEMCPY, &["start", "end"], EventType::Memcpy),
    (super::names::MEMSET, &["start", "end"], EventType::Memset),
    (super::names::RUNTIME, &["start", "end"], EventType::CudaApi),
    (super::names::DRIVER, &["start", "end"], EventType::CudaApi),
    (super::names::NVTX, &["start", "eventType"], EventType::Nvtx),
    (super::osrt::OSRT, &["start", "end"], EventType::Osrt),
    (super::names::SYNC, &["start", "end"], EventType::Sync),
    (
        super::sched::SCHED,
        &["start", "cpu", "isSchedIn", "globalTid"],
        EventType::Sched,
    ),
];

/// Event tables the selection wants that miss a column their reader needs: ((table, reason),
/// rows), for the skipped-row accounting.
fn incomplete_tables(schema: &Schema, sel: &Selection) -> Result<Vec<((String, String), u64)>> {
    let mut out = Vec::new();
    let mut conn = None;
    for (table, cols, ty) in REQUIRED {
        if !schema.has_table(table) || !sel.wants(ty) {
            continue;
        }
        let missing: Vec<&str> = cols
            .iter()
            .copied()
            .filter(|c| !schema.has_column(table, c))
            .collect();
        if missing.is_empty() {
            continue;
        }
        if conn.is_none() {
            conn = Some(open_readonly(&schema.path)?);
        }
        let n: i64 = conn.as_ref().expect("opened").query_row(
            &format!("SELECT count(*) FROM {}", super::query::quote_ident(table)),
            [],
            |r| r.get(0),
        )?;
        if n > 0 {
            let reason = format!(
                "table not converted: no {} column",
                missing
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            out.push(((table.to_string(), reason), n as u64));
        }
    }
    Ok(out)
}

/// SQLite errors from a damaged file read better with a hint.
fn sqlite_problem(e: &anyhow::Error) -> String {
    let msg = e.to_string();
    if msg.contains("malformed") || msg.contains("not a database") || msg.contains("disk I/O") {
        format!("damaged SQLite database: {msg}")
    } else {
        msg
    }
}
