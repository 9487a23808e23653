//! GPU activity: kernels, memcpys and memsets, merged in start order into per-stream groups.

use super::reader::ReadContext;
use super::scan::{Rows, Scan};
use super::{Fetch, KERNEL, MEMCPY, MEMSET, Schema, int_at};
use crate::model::EventSink;
use crate::model::{ArgList, ArgValue, Category, Event, FastHash, Flows, GroupKey, Name};
use crate::projection::KernelNames;
use crate::runs::Lookup;
use crate::select::EventType;
use anyhow::Result;
use std::collections::HashMap;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Kernel,
    Memcpy,
    Memset,
}

impl Kind {
    fn table(self) -> &'static str {
        match self {
            Kind::Kernel => KERNEL,
            Kind::Memcpy => MEMCPY,
            Kind::Memset => MEMSET,
        }
    }
    fn event_type(self) -> EventType {
        match self {
            Kind::Kernel => EventType::Kernel,
            Kind::Memcpy => EventType::Memcpy,
            Kind::Memset => EventType::Memset,
        }
    }

    /// The `src` number the flow tables use for this table.
    pub fn src(self) -> i64 {
        match self {
            Kind::Kernel => 0,
            Kind::Memcpy => 1,
            Kind::Memset => 2,
        }
    }
}

/// Common columns first, then up to `EXTRA` kind-specific ones.
const COMMON: [&str; 7] = [
    "start",
    "end",
    "deviceId",
    "globalPid",
    "streamId",
    "contextId",
    "correlationId",
];
const KERNEL_COLS: [&str; 14] = [
    "shortName",
    "demangledName",
    "gridX",
    "gridY",
    "gridZ",
    "blockX",
    "blockY",
    "blockZ",
    "registersPerThread",
    "staticSharedMemory",
    "dynamicSharedMemory",
    "launchType",
    "graphNodeId",
    "graphId",
];
const MEMCPY_COLS: [&str; 6] = [
    "bytes",
    "copyKind",
    "srcKind",
    "dstKind",
    "srcDeviceId",
    "dstDeviceId",
];
const MEMSET_COLS: [&str; 3] = ["bytes", "value", "memKind"];

const EXTRA: usize = 14;

#[derive(Clone)]
struct Row {
    kind: Kind,
    common: Values<7>,
    launch_start: Option<i64>,
    rowid: i64,
    extra: Values<EXTRA>,
    /// Enclosing NVTX ranges of the launch, outermost first (with their number, where the
    /// projection numbered them).
    nvtx: Option<crate::projection::RangeNames>,
}

/// Integer columns, some NULL: half the size of `[Option<i64>; N]`, which matters as rows are
/// moved through the reordering window.
#[derive(Clone)]
struct Values<const N: usize> {
    values: [i64; N],
    /// Bit `i` set: column `i` is NULL.
    nulls: u32,
}

impl<const N: usize> Values<N> {
    fn new(values: [Option<i64>; N]) -> Values<N> {
        let mut nulls = 0;
        for (i, v) in values.iter().enumerate() {
            nulls |= u32::from(v.is_none()) << i;
        }
        Values {
            values: values.map(|v| v.unwrap_or(0)),
            nulls,
        }
    }

    fn at(&self, i: usize) -> Option<i64> {
        (self.nulls >> i & 1 == 0).then_some(self.values[i])
    }

    fn get(&self) -> [Option<i64>; N] {
        std::array::from_fn(|i| self.at(i))
    }
}

fn extra_cols(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Kernel => &KERNEL_COLS,
        Kind::Memcpy => &MEMCPY_COLS,
        Kind::Memset => &MEMSET_COLS,
    }
}

fn scan(schema: &Schema, kind: Kind, cx: &ReadContext<'_>) -> Scan {
    let t = kind.table();
    // The launching call's start comes from the flow links, merged by rowid in `read`; the
    // row's own rowid names its flow.
    Scan::new(schema, t)
        .cols(schema, &COMMON)
        .null()
        .rowid()
        .cols(schema, extra_cols(kind))
        .filter(cx.selection.sql(
            "t",
            true,
            schema.has_column(t, "globalPid").then_some("globalPid"),
            schema.has_column(t, "deviceId").then_some("deviceId"),
        ))
        .by_rowid()
}

fn decode(kind: Kind, r: &impl Fetch) -> Row {
    let common = std::array::from_fn(|i| match i {
        0 | 1 => super::time_at(r, i),
        2 => super::device_at(r, i),
        _ => int_at(r, i),
    });
    let n = extra_cols(kind).len();
    let extra = std::array::from_fn(|i| if i < n { int_at(r, 9 + i) } else { None });
    Row {
        kind,
        common: Values::new(common),
        launch_start: int_at(r, 7),
        rowid: int_at(r, 8).unwrap_or(0),
        extra: Values::new(extra),
        nvtx: None,
    }
}

impl Row {
    fn start(&self) -> Option<i64> {
        self.common.at(0)
    }
}

/// Stream all GPU rows in start order into the sink.
///
/// The context's `flows` (each row's launching call, when API calls are converted too) and
/// `projected` (each row lists the push/pop ranges around its launch) are joined.
pub fn read<S: EventSink>(cx: &ReadContext<'_>, sink: &mut S) -> Result<()> {
    let &ReadContext { conn, schema, .. } = cx;
    let kinds: Vec<Kind> = [Kind::Kernel, Kind::Memcpy, Kind::Memset]
        .into_iter()
        .filter(|k| schema.has_columns(k.table(), &["start", "end"]))
        .filter(|k| cx.selection.wants(k.event_type()))
        .collect();
    let mut cursors = Vec::new();
    for &k in &kinds {
        let launches = match cx.flows {
            Some(f) => f.launches(k.src())?,
            None => None,
        };
        let nvtx = match cx.projected {
            Some(p) => Some(p.kernel_names(k.src())?),
            None => None,
        };
        cursors.push(Cursor {
            kind: k,
            rows: scan(schema, k, cx).open(conn, schema)?,
            launches,
            nvtx,
        });
    }
    let mut fmt = Formatter::default();
    // Per cursor: the last rowid, when the table has real ones (flow ids are built from them).
    let mut last: Vec<Option<Option<i64>>> = kinds
        .iter()
        .map(|k| schema.rowid(k.table()).map(|_| None))
        .collect();
    super::merge_by_start(
        cursors.len(),
        |i| {
            let row = cursors[i].next()?;
            if let (Some(row), Some(l)) = (row.as_ref(), last[i].as_mut()) {
                super::check_rowid_order(row.kind.table(), l, row.rowid)?;
            }
            Ok(row)
        },
        |row| row.start().unwrap_or(i64::MIN),
        |row| (row.start().unwrap_or(i64::MIN), 0),
        |row| emit(&row, cx, sink, &mut fmt),
    )
}

/// One GPU table in rowid order, merged with its rows' launches (also in rowid order).
struct Cursor<'s> {
    kind: Kind,
    rows: Rows<'s>,
    /// `[gpu rowid, launch start]` of the rows whose launching call was found.
    launches: Option<Lookup<'s, [i64; 2]>>,
    /// The names of the push/pop ranges around each row's launch, by rowid.
    nvtx: Option<KernelNames<'s>>,
}

impl Cursor<'_> {
    fn next(&mut self) -> Result<Option<Row>> {
        let Some(r) = self.rows.next()? else {
            return Ok(None);
        };
        let mut row = decode(self.kind, &r);
        if let Some(launches) = self.launches.as_mut() {
            launches.matching(row.rowid, |[_, start]| row.launch_start = Some(start))?;
        }
        if let Some(nvtx) = self.nvtx.as_mut() {
            row.nvtx = nvtx.of(row.rowid)?;
        }
        Ok(Some(row))
    }
}

/// Reusable text buffers for args built per row.
#[derive(Default)]
struct Formatter {
    grid: String,
    block: String,
    /// (slot, value) -> label; slots: 0 launch type, 1 copy kind, 2 memory kind, 3 memcpy name.
    labels: HashMap<(u8, i64), String, FastHash>,
}

impl Formatter {
    fn prepare(&mut self, slot: u8, v: Option<i64>, enums: &crate::enums::Enums) {
        if let Some(v) = v {
            self.labels.entry((slot, v)).or_insert_with(|| match slot {
                0 => enums.launch_type(v).into_owned(),
                1 => enums.copy_kind(v).into_owned(),
                2 => enums.mem_kind(v).into_owned(),
                _ => format!("Memcpy {}", enums.copy_kind(v)),
            });
        }
    }
}

/// `buf` becomes `"(x, y, z)"` (a missing value reads 0). By hand with `itoa`: `write!` cost
/// more than the rest of a kernel's args together (two per kernel).
fn dims(buf: &mut String, xyz: [Option<i64>; 3]) {
    buf.clear();
    buf.push('(');
    for (i, v) in xyz.into_iter().enumerate() {
        if i > 0 {
            buf.push_str(", ");
        }
        buf.push_str(itoa::Buffer::new().format(v.unwrap_or(0)));
    }
    buf.push(')');
}

fn label(labels: &HashMap<(u8, i64), String, FastHash>, slot: u8, v: Option<i64>) -> Option<&str> {
    v.and_then(|v| labels.get(&(slot, v)).map(String::as_str))
}

fn emit<S: EventSink>(
    row: &Row,
    cx: &ReadContext<'_>,
    sink: &mut S,
    f: &mut Formatter,
) -> Result<()> {
    let table = row.kind.table();
    let [start, end, device, gpid, stream, ctx, corr] = row.common.get();
    let Some((start, end)) = sink.interval(table, start, end) else {
        return Ok(());
    };
    let (Some(device), Some(stream)) = (device, stream) else {
        sink.skip(table, "no device or stream id");
        return Ok(());
    };
    let key = GroupKey::GpuStream {
        device,
        global_pid: gpid.unwrap_or(0) & !0xFF_FFFF,
        context: ctx.unwrap_or(0),
        stream,
    };
    let linked = crate::flows::links(start, row.launch_start);
    if row.launch_start.is_some() && !linked {
        // The row itself is converted; only its arrow is left out (and counted).
        sink.note(
            "flow arrows",
            "GPU row starts before its launching call (no arrow drawn)",
        );
    }
    let flows = Flows {
        terminating: linked.then(|| crate::flows::flow_id(row.kind.src(), row.rowid)),
        ..Default::default()
    };
    let x = &row.extra.get();
    {
        let enums = &cx.info.enums;
        match row.kind {
            Kind::Kernel => {
                f.prepare(0, x[11], enums);
                dims(&mut f.grid, [x[2], x[3], x[4]]);
                dims(&mut f.block, [x[5], x[6], x[7]]);
            }
            Kind::Memcpy => {
                f.prepare(1, x[1], enums);
                f.prepare(3, x[1], enums);
                f.prepare(2, x[2], enums);
                f.prepare(2, x[3], enums);
            }
            Kind::Memset => f.prepare(2, x[2], enums),
        }
    }
    let labels = &f.labels;
    let mut args = ArgList::new();
    let (name, category) = match row.kind {
        Kind::Kernel => {
            args.push("grid", ArgValue::Label(&f.grid));
            args.push("block", ArgValue::Label(&f.block));
            args.int("registers_per_thread", x[8]);
            args.int("shared_memory_static_bytes", x[9]);
            args.int("shared_memory_dynamic_bytes", x[10]);
            args.label("launch_type", label(labels, 0, x[11]));
            args.int("graph_node_id", x[12]);
            args.int("graph_id", x[13]);
            if let Some(d) = x[1] {
                args.push("demangled_name", ArgValue::StrId(d));
            }
            let name = match (x[0], x[1]) {
                (Some(s), _) | (None, Some(s)) => Name::Str(s),
                _ => Name::Static("(unnamed kernel)"),
            };
            (name, Category::Kernel)
        }
        Kind::Memcpy => {
            args.int("bytes", x[0]);
            args.label("copy_kind", label(labels, 1, x[1]));
            args.label("src_kind", label(labels, 2, x[2]));
            args.label("dst_kind", label(labels, 2, x[3]));
            args.int("src_device", x[4]);
            args.int("dst_device", x[5]);
            if let Some(b) = x[0]
                && end > start
            {
                // bytes per ns = GB/s
                let gbps = b as f64 / (end - start) as f64;
                args.push(
                    "throughput_gbps",
                    ArgValue::Double((gbps * 1000.0).round() / 1000.0),
                );
            }
            let name = label(labels, 3, x[1]).map_or(Name::Static("Memcpy"), Name::Text);
            (name, Category::Memcpy)
        }
        Kind::Memset => {
            args.int("bytes", x[0]);
            args.int("value", x[1]);
            args.label("mem_kind", label(labels, 2, x[2]));
            (Name::Static("Memset"), Category::Memset)
        }
    };
    match row
        .nvtx
        .as_ref()
        .zip(cx.projected)
        .map(|(n, p)| p.range_names(n))
    {
        Some((Some(no), n)) => args.push("nvtx_ranges", ArgValue::Numbered(no, n)),
        Some((None, n)) => args.push("nvtx_ranges", ArgValue::Label(n)),
        None => {}
    }
    args.int("device", Some(device));
    args.int("context", ctx);
    args.int("stream", Some(stream));
    args.int("correlation_id", corr);
    // How long the GPU took to start the work after the call that launched it.
    if linked && let Some(launch) = row.launch_start {
        args.int("launch_latency_ns", Some(start - launch));
    }
    let ev = Event {
        start,
        end: Some(end),
        name,
        category,
        args: args.as_slice(),
        flows,
    };
    sink.event(key, &ev)
}

#[cfg(test)]
mod tests {
    use super::dims;

    #[test]
    fn dims_read_as_write_would_print_them() {
        let mut buf = String::from("stale");
        for xyz in [
            [Some(1), Some(2), Some(3)],
            [Some(0), None, Some(-7)],
            [Some(i64::MIN), Some(i64::MAX), Some(1_000_000)],
        ] {
            dims(&mut buf, xyz);
            let [x, y, z] = xyz.map(|v| v.unwrap_or(0));
            assert_eq!(buf, format!("({x}, {y}, {z})"));
        }
    }
}
