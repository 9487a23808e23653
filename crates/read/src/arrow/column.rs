//! One column of one record batch, read in place, and the helpers that read its buffers.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrowPrimitiveType, BinaryArray, LargeStringArray, StringArray};
use arrow_buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use arrow_schema::DataType;
use rusqlite::types::ValueRef;

/// Rows of a [`TableScan`]'s chunk: a divisor of [`RELEASE_EVERY`], so that a chunk starts
/// wherever the scan looks at what to give back.
pub(super) const CHUNK: usize = 256;

/// A pick's values as integers for the rows of a [`TableScan`]'s chunk.
#[derive(Clone)]
pub(super) struct Lane {
    /// Whether the row's value is an integer (not NULL, nor of another type).
    pub(super) some: [bool; CHUNK],
    pub(super) values: [i64; CHUNK],
}

impl Lane {
    /// Row `r` of the chunk.
    #[inline(always)]
    pub(super) fn get(&self, r: usize) -> Option<i64> {
        // A row of the chunk: no bounds check.
        let r = r % CHUNK;
        self.some[r].then_some(self.values[r])
    }
}

/// One column of one record batch: its validity and its typed values, read in place.
#[derive(Clone)]
pub(super) struct Column {
    pub(super) nulls: Option<NullBuffer>,
    pub(super) data: Data,
}

#[derive(Clone)]
pub(super) enum Data {
    I64(ScalarBuffer<i64>),
    I32(ScalarBuffer<i32>),
    I16(ScalarBuffer<i16>),
    I8(ScalarBuffer<i8>),
    U64(ScalarBuffer<u64>),
    U32(ScalarBuffer<u32>),
    U16(ScalarBuffer<u16>),
    U8(ScalarBuffer<u8>),
    F64(ScalarBuffer<f64>),
    F32(ScalarBuffer<f32>),
    Bool(BooleanBuffer),
    Text(StringArray),
    LargeText(LargeStringArray),
    Blob(BinaryArray),
    Null,
    /// What a direct scan reads in place of a table's column (see [`TableScan`]), never a
    /// table's own: a constant,
    Const(i64),
    /// the row's number in the batch from this value on (the rowid of a table without a key),
    Count(i64),
    /// the first non-NULL value of these columns.
    Coalesce(Box<[Column]>),
}

impl Column {
    pub(super) fn new(array: &dyn Array) -> Option<Column> {
        fn values<T: ArrowPrimitiveType>(a: &dyn Array) -> ScalarBuffer<T::Native> {
            a.as_primitive::<T>().values().clone()
        }
        let data = match array.data_type() {
            DataType::Int64 => Data::I64(values::<Int64Type>(array)),
            DataType::Int32 => Data::I32(values::<Int32Type>(array)),
            DataType::Int16 => Data::I16(values::<Int16Type>(array)),
            DataType::Int8 => Data::I8(values::<Int8Type>(array)),
            DataType::UInt64 => Data::U64(values::<UInt64Type>(array)),
            DataType::UInt32 => Data::U32(values::<UInt32Type>(array)),
            DataType::UInt16 => Data::U16(values::<UInt16Type>(array)),
            DataType::UInt8 => Data::U8(values::<UInt8Type>(array)),
            DataType::Float64 => Data::F64(values::<Float64Type>(array)),
            DataType::Float32 => Data::F32(values::<Float32Type>(array)),
            DataType::Boolean => Data::Bool(array.as_boolean().values().clone()),
            DataType::Utf8 => Data::Text(array.as_string().clone()),
            DataType::LargeUtf8 => Data::LargeText(array.as_string().clone()),
            DataType::Binary => Data::Blob(array.as_binary().clone()),
            DataType::Null => Data::Null,
            _ => return None,
        };
        Some(Column {
            nulls: array.logical_nulls().filter(|n| n.null_count() > 0),
            data,
        })
    }

    /// The SQLite type a column of `t` is declared with (as the SQLite export declares it).
    pub(super) fn sql_type(t: &DataType) -> Option<&'static str> {
        Some(match t {
            DataType::Int64
            | DataType::Int32
            | DataType::Int16
            | DataType::Int8
            | DataType::UInt64
            | DataType::UInt32
            | DataType::UInt16
            | DataType::UInt8
            | DataType::Boolean => "INTEGER",
            DataType::Float64 | DataType::Float32 => "REAL",
            DataType::Utf8 | DataType::LargeUtf8 => "TEXT",
            DataType::Binary => "BLOB",
            DataType::Null => "",
            _ => return None,
        })
    }

    /// Each buffer the column reads (its validity bits, its values, a text's offsets and bytes)
    /// with how many of its bytes hold rows before row `i` (`i` at most the column's rows):
    /// `f(k, buffer, bytes)`, `k` the buffer's place (0 validity, 1 values or offsets, 2 bytes).
    pub(super) fn behind(&self, i: usize, mut f: impl FnMut(usize, &[u8], usize)) {
        if let Some(n) = &self.nulls {
            f(0, n.buffer().as_slice(), (n.offset() + i) / 8);
        }
        fn fixed<T: arrow_buffer::ArrowNativeType>(
            v: &ScalarBuffer<T>,
            i: usize,
        ) -> (&[u8], usize) {
            (v.inner().as_slice(), i * std::mem::size_of::<T>())
        }
        let (values, bytes) = match &self.data {
            Data::Text(a) => {
                f(2, a.values().as_slice(), a.value_offsets()[i] as usize);
                fixed(a.offsets().inner(), i)
            }
            Data::LargeText(a) => {
                f(2, a.values().as_slice(), a.value_offsets()[i] as usize);
                fixed(a.offsets().inner(), i)
            }
            Data::Blob(a) => {
                f(2, a.values().as_slice(), a.value_offsets()[i] as usize);
                fixed(a.offsets().inner(), i)
            }
            Data::I64(v) => fixed(v, i),
            Data::I32(v) => fixed(v, i),
            Data::I16(v) => fixed(v, i),
            Data::I8(v) => fixed(v, i),
            Data::U64(v) => fixed(v, i),
            Data::U32(v) => fixed(v, i),
            Data::U16(v) => fixed(v, i),
            Data::U8(v) => fixed(v, i),
            Data::F64(v) => fixed(v, i),
            Data::F32(v) => fixed(v, i),
            Data::Bool(v) => (v.inner().as_slice(), (v.offset() + i) / 8),
            Data::Null | Data::Const(_) | Data::Count(_) | Data::Coalesce(_) => return,
        };
        f(1, values, bytes);
    }

    /// Row `i`'s value as an integer (NULL and non-integer columns: `None`). Unsigned 64-bit
    /// values keep their bits, as the SQLite export stores them.
    #[inline]
    pub(super) fn int(&self, i: usize) -> Option<i64> {
        if self.nulls.as_ref().is_some_and(|n| n.is_null(i)) {
            return None;
        }
        self.stored_int(i)
    }

    /// Row `i`'s value where the column stores integers (its validity not looked at): the one
    /// dispatch on the integer types that [`Column::int`], [`Column::number`] and
    /// [`Column::value`] share.
    #[inline(always)]
    pub(super) fn stored_int(&self, i: usize) -> Option<i64> {
        Some(match &self.data {
            Data::I64(v) => v[i],
            Data::I32(v) => v[i].into(),
            Data::I16(v) => v[i].into(),
            Data::I8(v) => v[i].into(),
            Data::U64(v) => v[i] as i64,
            Data::U32(v) => v[i].into(),
            Data::U16(v) => v[i].into(),
            Data::U8(v) => v[i].into(),
            Data::Bool(v) => v.value(i).into(),
            _ => return None,
        })
    }

    /// Row `i`'s value as [`crate::query::int_of`] reads it: integers as they are, reals
    /// truncated.
    #[inline]
    pub(super) fn number(&self, i: usize) -> Option<i64> {
        if self.nulls.as_ref().is_some_and(|n| n.is_null(i)) {
            return None;
        }
        match &self.data {
            Data::F64(v) => Some(v[i] as i64),
            Data::F32(v) => Some(f64::from(v[i]) as i64),
            Data::Const(n) => Some(*n),
            Data::Count(first) => Some(first + i as i64),
            Data::Coalesce(_) => crate::query::int_of(self.value(i)),
            Data::Text(_) | Data::LargeText(_) | Data::Blob(_) | Data::Null => None,
            _ => self.stored_int(i),
        }
    }

    /// The values of rows `rows`, appended to `out`, where the column holds integers (of a type
    /// nsys uses for them) and no NULL; false (and `out` partly filled) otherwise.
    pub(super) fn plain_ints(&self, rows: std::ops::Range<usize>, out: &mut Vec<i64>) -> bool {
        if self.nulls.is_some() {
            return false;
        }
        match &self.data {
            Data::I64(v) => out.extend_from_slice(&v[rows]),
            Data::I32(v) => out.extend(v[rows].iter().map(|&x| i64::from(x))),
            Data::U64(v) => out.extend(v[rows].iter().map(|&x| x as i64)),
            Data::U32(v) => out.extend(v[rows].iter().map(|&x| i64::from(x))),
            _ => return false,
        }
        true
    }

    /// The values of rows `rows` (at most [`CHUNK`]) as [`Column::number`] reads them, into
    /// `lane`.
    pub(super) fn numbers(&self, rows: std::ops::Range<usize>, lane: &mut Lane) {
        fn each<T: Copy>(v: &[T], out: &mut [i64], f: impl Fn(T) -> i64) {
            for (o, &x) in out.iter_mut().zip(v) {
                *o = f(x);
            }
        }
        let n = rows.len();
        let (some, out) = (&mut lane.some[..n], &mut lane.values[..n]);
        some.fill(true);
        match &self.data {
            Data::I64(v) => out.copy_from_slice(&v[rows.clone()]),
            Data::I32(v) => each(&v[rows.clone()], out, i64::from),
            Data::I16(v) => each(&v[rows.clone()], out, i64::from),
            Data::I8(v) => each(&v[rows.clone()], out, i64::from),
            Data::U64(v) => each(&v[rows.clone()], out, |x| x as i64),
            Data::U32(v) => each(&v[rows.clone()], out, i64::from),
            Data::U16(v) => each(&v[rows.clone()], out, i64::from),
            Data::U8(v) => each(&v[rows.clone()], out, i64::from),
            Data::F64(v) => each(&v[rows.clone()], out, |x| x as i64),
            Data::F32(v) => each(&v[rows.clone()], out, |x| f64::from(x) as i64),
            Data::Bool(v) => {
                out.fill(1);
                each_clear(v, rows.clone(), |j| out[j] = 0);
            }
            Data::Const(c) => out.fill(*c),
            Data::Count(first) => {
                for (o, i) in out.iter_mut().zip(rows.clone()) {
                    *o = first + i as i64;
                }
            }
            Data::Text(_) | Data::LargeText(_) | Data::Blob(_) | Data::Null => some.fill(false),
            Data::Coalesce(cs) => {
                // Each row's value is its first column's that is not NULL (a column of NULLs
                // has none), a word of 64 rows at a time: most rows of nsys' coalesced
                // columns are NULL in all of them.
                some.fill(false);
                let mut taken = [0u64; CHUNK / 64];
                for c in cs.iter().filter(|c| !matches!(c.data, Data::Null)) {
                    let mut valid = [u64::MAX; CHUNK / 64];
                    if let Some(nulls) = &c.nulls {
                        let bits = nulls.inner().slice(rows.start, n);
                        for (v, word) in valid.iter_mut().zip(bits.bit_chunks().iter_padded()) {
                            *v = word;
                        }
                    }
                    for (w, (valid, taken)) in valid.iter().zip(&mut taken).enumerate() {
                        let mut new = valid & !*taken;
                        *taken |= new;
                        while new != 0 {
                            let j = w * 64 + new.trailing_zeros() as usize;
                            if j >= n {
                                break;
                            }
                            if let Some(x) = c.number(rows.start + j) {
                                (out[j], some[j]) = (x, true);
                            }
                            new &= new - 1;
                        }
                    }
                }
            }
        }
        if let Some(nulls) = &self.nulls {
            each_clear(nulls.inner(), rows, |j| some[j] = false);
        }
    }

    /// Whether [`Column::value`] is an integer or NULL: then it is [`Column::number`]'s.
    pub(super) fn integral(&self) -> bool {
        !matches!(
            self.data,
            Data::F64(_)
                | Data::F32(_)
                | Data::Text(_)
                | Data::LargeText(_)
                | Data::Blob(_)
                | Data::Coalesce(_)
        )
    }

    /// The values of rows `rows` as [`Column::int`] reads them, appended to `out`.
    pub(super) fn ints(&self, rows: std::ops::Range<usize>, out: &mut Vec<Option<i64>>) {
        let from = out.len();
        match &self.data {
            Data::I64(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x))),
            Data::I32(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            Data::I16(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            Data::I8(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            Data::U64(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x as i64))),
            Data::U32(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            Data::U16(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            Data::U8(v) => out.extend(v[rows.clone()].iter().map(|&x| Some(x.into()))),
            _ => out.extend(rows.clone().map(|i| self.int(i))),
        }
        if let Some(nulls) = &self.nulls {
            for (v, i) in out[from..].iter_mut().zip(rows) {
                if nulls.is_null(i) {
                    *v = None;
                }
            }
        }
    }

    /// Row `i`'s value.
    #[inline]
    pub(super) fn value(&self, i: usize) -> ValueRef<'_> {
        if self.nulls.as_ref().is_some_and(|n| n.is_null(i)) {
            return ValueRef::Null;
        }
        match &self.data {
            Data::Const(n) => ValueRef::Integer(*n),
            Data::Count(first) => ValueRef::Integer(first + i as i64),
            Data::F64(v) => ValueRef::Real(v[i]),
            Data::F32(v) => ValueRef::Real(v[i].into()),
            Data::Text(a) => ValueRef::Text(bytes_at(a.value_offsets(), a.values(), i)),
            Data::LargeText(a) => ValueRef::Text(bytes_at(a.value_offsets(), a.values(), i)),
            Data::Blob(a) => ValueRef::Blob(bytes_at(a.value_offsets(), a.values(), i)),
            Data::Null => ValueRef::Null,
            Data::Coalesce(cs) => {
                // Most of the columns are NULL: their validity bits are read, not their values.
                cs.iter()
                    .filter(|c| c.nulls.as_ref().is_none_or(|n| n.is_valid(i)))
                    .map(|c| c.value(i))
                    .find(|v| *v != ValueRef::Null)
                    .unwrap_or(ValueRef::Null)
            }
            _ => self.stored_int(i).map_or(ValueRef::Null, ValueRef::Integer),
        }
    }
}

/// Whether the rows whose key columns are `keys` (each the same length) come in ascending
/// order of their keys. Without branches or early exits per row, which would keep the
/// compiler from comparing many rows at once.
pub(super) fn ascending(keys: &[Vec<i64>]) -> bool {
    pub(super) fn after(k: &[i64]) -> &[i64] {
        k.get(1..).unwrap_or_default()
    }
    match keys {
        [] => true,
        [a] => a
            .iter()
            .zip(after(a))
            .fold(true, |ok, (x, y)| ok & (x <= y)),
        [a, b] => {
            let pairs = a.iter().zip(after(a)).zip(b.iter().zip(after(b)));
            pairs.fold(true, |ok, ((a0, a1), (b0, b1))| {
                ok & ((a0 < a1) | ((a0 == a1) & (b0 <= b1)))
            })
        }
        _ => (1..keys[0].len()).all(|j| {
            let before = keys.iter().map(|k| k[j - 1]);
            before.le(keys.iter().map(|k| k[j]))
        }),
    }
}

/// The bytes of row `i` of a text or binary column, its offsets checked (no bytes where they do
/// not hold): they were checked when the table was loaded, but a page read again after its file
/// was truncated reads as zeros (see `Table::lost`), and the reader fails only after the
/// chunk.
#[inline]
pub(super) fn bytes_at<'v, O: arrow_array::OffsetSizeTrait>(
    offsets: &[O],
    values: &'v [u8],
    i: usize,
) -> &'v [u8] {
    let (start, end) = (offsets[i].as_usize(), offsets[i + 1].as_usize());
    values.get(start..end).unwrap_or_default()
}

/// Call `f(j)` for each of rows `rows` of `bits` whose bit is clear, `j` counted from
/// `rows.start`: a word of 64 rows at a time, most of them all set.
pub(super) fn each_clear(
    bits: &BooleanBuffer,
    rows: std::ops::Range<usize>,
    mut f: impl FnMut(usize),
) {
    let len = rows.len();
    let words = bits.slice(rows.start, len);
    for (w, word) in words.bit_chunks().iter_padded().enumerate() {
        let mut clear = !word;
        while clear != 0 {
            let j = w * 64 + clear.trailing_zeros() as usize;
            if j >= len {
                break;
            }
            f(j);
            clear &= clear - 1;
        }
    }
}
