//! The checks of a stream before anything of it is decoded: its layout, its schema and each
//! record batch (a damaged or hostile file is an error naming the problem, never a panic).

use super::column::Column;
use anyhow::{Result, bail};
use arrow_array::RecordBatch;
use arrow_schema::DataType;

/// What [`check_layout`] found of a stream whose first message is a schema.
pub(super) struct Layout {
    pub(super) schema: arrow_schema::Schema,
    pub(super) version: arrow_ipc::MetadataVersion,
    /// Each record batch: where its message starts (its length prefix) and the length of its
    /// prefix and metadata, the body following.
    pub(super) batches: Vec<(usize, usize)>,
}

/// Check that every message of an Arrow IPC stream lies inside the file and every buffer of a
/// record batch inside its message's body. Arrow's decoder trusts the offsets and lengths a
/// message gives: in a damaged file they make it panic (inside SQLite's call into a virtual
/// table, an abort) rather than fail. Where the stream's first message is a schema whose
/// columns all have types nsys writes, also check that each record batch's columns have the
/// rows and buffers their types need (see [`check_batch`]) and that the stream ends cleanly, and
/// return where the batches are: they can be decoded without the decoder's checks.
/// `walked(pos)` is told after each message that everything before `pos` has been read.
pub(super) fn check_layout(
    bytes: &[u8],
    mut walked: impl FnMut(usize),
) -> std::result::Result<Option<Layout>, String> {
    let word = |at: usize| -> Option<i32> {
        Some(i32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let mut pos = 0usize;
    let mut layout: Option<Layout> = None;
    let mut first = true;
    loop {
        let start = pos;
        let Some(mut len) = word(pos) else {
            break;
        };
        pos += 4;
        if len == -1 {
            // The continuation marker, then the metadata's length.
            let Some(l) = word(pos) else {
                break;
            };
            len = l;
            pos += 4;
        }
        if len == 0 {
            return Ok(layout);
        }
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| pos.checked_add(l))
            .filter(|&e| e <= bytes.len())
            .ok_or("a message runs past the end of the file")?;
        let message = arrow_ipc::root_as_message(&bytes[pos..end])
            .map_err(|e| format!("a message's header is damaged: {e}"))?;
        pos = end;
        let body = usize::try_from(message.bodyLength())
            .ok()
            .filter(|&b| pos.checked_add(b).is_some_and(|e| e <= bytes.len()))
            .ok_or("a message's body runs past the end of the file")?;
        if std::mem::take(&mut first)
            && let Some(s) = message.header_as_schema()
        {
            let schema = arrow_ipc::convert::try_fb_to_schema(s)
                .map_err(|e| format!("the schema is damaged: {e}"))?;
            layout = supported(&schema).then(|| Layout {
                schema,
                version: message.version(),
                batches: Vec::new(),
            });
            pos += body;
            continue;
        }
        let dictionary = message.header_as_dictionary_batch();
        let batch = message
            .header_as_record_batch()
            .or_else(|| dictionary.and_then(|d| d.data()));
        for b in batch.and_then(|b| b.buffers()).iter().flatten() {
            let inside = u64::try_from(b.offset())
                .ok()
                .zip(u64::try_from(b.length()).ok())
                .and_then(|(o, l)| o.checked_add(l))
                .is_some_and(|e| e <= body as u64);
            if !inside {
                return Err("a buffer lies outside its message".into());
            }
        }
        if let Some(layout) = &mut layout {
            let Some(batch) = message.header_as_record_batch() else {
                return Err("a message other than a record batch after the schema".into());
            };
            if message.version() != layout.version {
                return Err("messages of different versions".into());
            }
            check_batch(&layout.schema, batch)?;
            layout.batches.push((start, end - start));
        }
        pos += body;
        walked(pos);
    }
    // The file ends without the end-of-stream marker: only where a message does.
    if layout.is_some() && pos < bytes.len() {
        return Err("the stream is truncated".into());
    }
    Ok(layout)
}

/// The schema and record batches of the Arrow IPC stream in `buffer`, through Arrow's stream
/// decoder and its checks.
pub(super) fn stream(
    mut buffer: arrow_buffer::Buffer,
) -> Result<(arrow_schema::SchemaRef, Vec<RecordBatch>)> {
    let mut decoder = arrow_ipc::reader::StreamDecoder::new();
    let mut batches: Vec<RecordBatch> = Vec::new();
    let mut schema = None;
    while !buffer.is_empty() {
        if let Some(batch) = decoder.decode(&mut buffer)? {
            schema.get_or_insert_with(|| batch.schema());
            batches.push(batch);
        }
    }
    decoder.finish()?;
    if schema.is_none() {
        // A stream with a schema and no batch: an empty table.
        schema = decoder.schema();
    }
    let Some(schema) = schema else {
        bail!("no Arrow schema");
    };
    Ok((schema, batches))
}

/// Whether every column of `schema` has a type nsys' Arrow export uses (see [`Column::sql_type`]).
pub(super) fn supported(schema: &arrow_schema::Schema) -> bool {
    schema
        .fields()
        .iter()
        .all(|f| Column::sql_type(f.data_type()).is_some())
}

/// The columns of `schema` with their SQLite types; an error names a column of a type nsys'
/// Arrow export does not use.
pub(super) fn sql_columns(schema: &arrow_schema::Schema) -> Result<Vec<(String, &'static str)>> {
    let mut columns = Vec::new();
    for field in schema.fields() {
        let Some(t) = Column::sql_type(field.data_type()) else {
            bail!(
                "column {} has type {}, which nsys' Arrow export does not use",
                field.name(),
                field.data_type()
            );
        };
        columns.push((field.name().clone(), t));
    }
    Ok(columns)
}

/// Check that each column of a record batch of `schema` (whose types are all [`supported`]) has
/// the batch's rows and buffers long enough for them: what the decoder would check before
/// building its arrays, which are built without those checks (see [`Table::load`]). The values
/// themselves (offsets, UTF-8, null counts) are checked after decoding, a slice at a time.
pub(super) fn check_batch(
    schema: &arrow_schema::Schema,
    batch: arrow_ipc::RecordBatch<'_>,
) -> std::result::Result<(), String> {
    if batch.compression().is_some() {
        return Err("a compressed record batch, which nsys does not write".into());
    }
    let rows = usize::try_from(batch.length()).map_err(|_| "a negative row count")?;
    let nodes = batch
        .nodes()
        .ok_or("a record batch without its columns' lengths")?;
    let buffers = batch.buffers().ok_or("a record batch without buffers")?;
    if nodes.len() < schema.fields().len() {
        return Err("a record batch with fewer columns than its schema".into());
    }
    let mut next = buffers.iter();
    let too_long = || "a column too long for its buffers".to_string();
    for (k, field) in schema.fields().iter().enumerate() {
        let node = nodes.get(k);
        if node.length() != batch.length() {
            return Err("a column's length is not its record batch's".into());
        }
        if !(0..=node.length()).contains(&node.null_count()) {
            return Err("a column's null count is not within its rows".into());
        }
        let bits = if node.null_count() > 0 {
            rows.div_ceil(8)
        } else {
            0
        };
        let t = field.data_type();
        let offsets = |width: usize| rows.checked_add(1).and_then(|n| n.checked_mul(width));
        let needs: Vec<Option<usize>> = match t {
            DataType::Null => Vec::new(),
            DataType::Utf8 | DataType::Binary => vec![Some(bits), offsets(4), Some(0)],
            DataType::LargeUtf8 => vec![Some(bits), offsets(8), Some(0)],
            DataType::Boolean => vec![Some(bits), Some(rows.div_ceil(8))],
            _ => vec![
                Some(bits),
                t.primitive_width().and_then(|w| rows.checked_mul(w)),
            ],
        };
        for (i, need) in needs.into_iter().enumerate() {
            let b = next
                .next()
                .ok_or("a record batch with fewer buffers than its columns")?;
            let have = usize::try_from(b.length()).map_err(|_| too_long())?;
            // An empty variable-width column may leave out its offsets.
            if i == 1 && rows == 0 && have == 0 {
                continue;
            }
            if need.is_none_or(|n| have < n) {
                return Err(too_long());
            }
        }
    }
    Ok(())
}
