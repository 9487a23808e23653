//! GPU activity: kernels, memcpys and memsets, merged in start order into per-stream groups.

use super::cells::int_at;
use super::query::Fetch;
use super::reader::ReadContext;
use super::scan::{Rows, Scan};
use super::schema::Schema;
use crate::flows::GPU_TABLES;
use crate::projection::KernelNames;
use crate::runs::Lookup;
use anyhow::Result;
use nsys_perfetto_model::category::{Category, EventType};
use nsys_perfetto_model::model::EventSink;
use nsys_perfetto_model::model::{
    ArgList, ArgValue, Event, FastHash, Flows, GroupKey, Name, StreamKey, TextNo,
};
use std::collections::HashMap;

/// A GPU table, numbered as in [`GPU_TABLES`] (its `src` number), which names its table and the
/// type of its events.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Kernel,
    Memcpy,
    Memset,
}

impl Kind {
    const ALL: [Kind; GPU_TABLES.len()] = [Kind::Kernel, Kind::Memcpy, Kind::Memset];

    fn table(self) -> &'static str {
        GPU_TABLES[self as usize].1
    }

    fn event_type(self) -> EventType {
        GPU_TABLES[self as usize].0
    }

    /// The `src` number the flow tables use for this table.
    fn src(self) -> i64 {
        self as i64
    }
}

/// Common columns first, then up to `EXTRA` kind-specific ones (a sync row starts with the
/// same columns).
pub(crate) const COMMON: [&str; 7] = [
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
        0 | 1 => super::cells::time_at(r, i),
        2 => super::cells::device_at(r, i),
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
    let kinds: Vec<Kind> = Kind::ALL
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
    let mut fmt = Formatter::new();
    // Per cursor: the last rowid, when the table has real ones (flow ids are built from them).
    let mut last: Vec<Option<Option<i64>>> = kinds
        .iter()
        .map(|k| schema.rowid(k.table()).map(|_| None))
        .collect();
    super::order::merge_by_start(
        cursors.len(),
        |i| {
            let row = cursors[i].next()?;
            if let (Some(row), Some(l)) = (row.as_ref(), last[i].as_mut()) {
                super::cells::check_rowid_order(row.kind.table(), l, row.rowid)?;
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

/// The texts of a row's args that repeat (launch shapes, enum labels), each distinct one made
/// once and numbered (a [`TextNo`] of a set of its own): the writer interns them by number, and
/// a row costs a lookup, not a formatting. Kernels repeat a few launch shapes.
struct Formatter {
    set: u32,
    /// Each text by its number; one number per distinct text.
    texts: Vec<Box<str>>,
    numbers: HashMap<Box<str>, u32, FastHash>,
    /// (slot, value) -> label's number; slots: 0 launch type, 1 copy kind, 2 memory kind,
    /// 3 memcpy name.
    labels: HashMap<(u8, i64), u32, FastHash>,
    /// A kernel's grid and block dims -> their texts' numbers. At most [`Formatter::SHAPES`]
    /// pairs are kept (memory stays bounded); the shapes of further ones are formatted per row
    /// into `spare` and passed as plain labels.
    shapes: HashMap<[i64; 6], [u32; 2], FastHash>,
    spare: [String; 2],
}

/// A kernel's grid or block text: numbered in [`Formatter::texts`], or in [`Formatter::spare`].
#[derive(Clone, Copy)]
enum Shape {
    Numbered(u32),
    Spare(usize),
}

impl Formatter {
    const SHAPES: usize = 1 << 12;

    fn new() -> Formatter {
        Formatter {
            set: TextNo::new_set(),
            texts: Vec::new(),
            numbers: HashMap::default(),
            labels: HashMap::default(),
            shapes: HashMap::default(),
            spare: Default::default(),
        }
    }

    /// The number of `text`, given one if new.
    fn number(&mut self, text: String) -> u32 {
        if let Some(&no) = self.numbers.get(text.as_str()) {
            return no;
        }
        let no = u32::try_from(self.texts.len()).expect("fewer than 2^32 texts");
        let text = text.into_boxed_str();
        self.texts.push(text.clone());
        self.numbers.insert(text, no);
        no
    }

    /// The number of the label of `v` in `slot`.
    fn label(&mut self, slot: u8, v: Option<i64>, enums: &crate::enums::Enums) -> Option<u32> {
        let v = v?;
        if let Some(&no) = self.labels.get(&(slot, v)) {
            return Some(no);
        }
        let text = match slot {
            0 => enums.launch_type(v).into_owned(),
            1 => enums.copy_kind(v).into_owned(),
            2 => enums.mem_kind(v).into_owned(),
            _ => format!("Memcpy {}", enums.copy_kind(v)),
        };
        let no = self.number(text);
        self.labels.insert((slot, v), no);
        Some(no)
    }

    /// A kernel's grid and block (a missing value reads 0).
    fn shapes(&mut self, dims6: [Option<i64>; 6]) -> [Shape; 2] {
        let key = dims6.map(|v| v.unwrap_or(0));
        if let Some(&[grid, block]) = self.shapes.get(&key) {
            return [Shape::Numbered(grid), Shape::Numbered(block)];
        }
        let [x, y, z, bx, by, bz] = key;
        if self.shapes.len() >= Self::SHAPES {
            dims(&mut self.spare[0], [x, y, z]);
            dims(&mut self.spare[1], [bx, by, bz]);
            return [Shape::Spare(0), Shape::Spare(1)];
        }
        let mut text = |xyz| {
            let mut buf = String::new();
            dims(&mut buf, xyz);
            self.number(buf)
        };
        let pair = [text([x, y, z]), text([bx, by, bz])];
        self.shapes.insert(key, pair);
        pair.map(Shape::Numbered)
    }

    /// A numbered text: its number among all numbered texts, and the text.
    fn numbered(&self, no: u32) -> (TextNo, &str) {
        (TextNo::new(self.set, no), &self.texts[no as usize])
    }

    /// The arg value of a numbered text.
    fn text(&self, no: u32) -> ArgValue<'_> {
        let (no, text) = self.numbered(no);
        ArgValue::Numbered(no, text)
    }

    fn shape(&self, shape: Shape) -> ArgValue<'_> {
        match shape {
            Shape::Numbered(no) => self.text(no),
            Shape::Spare(i) => ArgValue::Label(&self.spare[i]),
        }
    }
}

/// `buf` becomes `"(x, y, z)"`. By hand with `itoa`: `write!` cost more than the rest of a
/// kernel's args together.
fn dims(buf: &mut String, xyz: [i64; 3]) {
    buf.clear();
    buf.push('(');
    for (i, v) in xyz.into_iter().enumerate() {
        if i > 0 {
            buf.push_str(", ");
        }
        buf.push_str(itoa::Buffer::new().format(v));
    }
    buf.push(')');
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
    let key = GroupKey::GpuStream(StreamKey {
        device,
        global_pid: gpid.unwrap_or(0) & !0xFF_FFFF,
        context: ctx.unwrap_or(0),
        stream,
    });
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
    let enums = &cx.info.enums;
    let mut args = ArgList::new();
    let (name, category) = match row.kind {
        Kind::Kernel => {
            let launch_type = f.label(0, x[11], enums);
            let [grid, block] = f.shapes([x[2], x[3], x[4], x[5], x[6], x[7]]);
            args.push("grid", f.shape(grid));
            args.push("block", f.shape(block));
            args.int("registers_per_thread", x[8]);
            args.int("shared_memory_static_bytes", x[9]);
            args.int("shared_memory_dynamic_bytes", x[10]);
            if let Some(no) = launch_type {
                args.push("launch_type", f.text(no));
            }
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
            let labels = [
                f.label(1, x[1], enums),
                f.label(2, x[2], enums),
                f.label(2, x[3], enums),
                f.label(3, x[1], enums),
            ];
            let [copy_kind, src_kind, dst_kind, memcpy_name] = labels;
            let f = &*f;
            args.int("bytes", x[0]);
            for (key, no) in [
                ("copy_kind", copy_kind),
                ("src_kind", src_kind),
                ("dst_kind", dst_kind),
            ] {
                if let Some(no) = no {
                    args.push(key, f.text(no));
                }
            }
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
            let name = memcpy_name.map_or(Name::Static("Memcpy"), |no| {
                let (no, text) = f.numbered(no);
                Name::Numbered(no, text)
            });
            (name, Category::Memcpy)
        }
        Kind::Memset => {
            let mem_kind = f.label(2, x[2], enums);
            args.int("bytes", x[0]);
            args.int("value", x[1]);
            if let Some(no) = mem_kind {
                args.push("mem_kind", f.text(no));
            }
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
    use super::{Formatter, Shape, dims};
    use nsys_perfetto_model::model::ArgValue;

    #[test]
    fn dims_read_as_write_would_print_them() {
        let mut buf = String::from("stale");
        for xyz in [[1, 2, 3], [0, 0, -7], [i64::MIN, i64::MAX, 1_000_000]] {
            dims(&mut buf, xyz);
            let [x, y, z] = xyz;
            assert_eq!(buf, format!("({x}, {y}, {z})"));
        }
    }

    /// One text, one number (a grid and a block of one shape share it); past the bound,
    /// shapes come as plain labels with the same texts, and known ones stay numbered.
    #[test]
    fn shapes_numbered_then_labels_past_the_bound() {
        let mut f = Formatter::new();
        let text = |f: &Formatter, s: Shape| match f.shape(s) {
            ArgValue::Numbered(_, t) | ArgValue::Label(t) => t.to_string(),
            _ => panic!("a shape is text"),
        };
        let first = f.shapes([Some(2), None, Some(1), Some(2), Some(0), Some(1)]);
        assert_eq!(text(&f, first[0]), "(2, 0, 1)");
        assert!(f.shape(first[0]) == f.shape(first[1]));
        for i in 1..Formatter::SHAPES as i64 {
            f.shapes([Some(i), Some(1), Some(1), Some(1), Some(1), Some(1)]);
        }
        let past = f.shapes([Some(-1), Some(1), Some(1), Some(3), Some(1), Some(1)]);
        assert!(matches!(f.shape(past[0]), ArgValue::Label("(-1, 1, 1)")));
        assert!(matches!(f.shape(past[1]), ArgValue::Label("(3, 1, 1)")));
        let again = f.shapes([Some(2), Some(0), Some(1), Some(2), Some(0), Some(1)]);
        assert!(f.shape(again[1]) == f.shape(first[1]));
    }
}
