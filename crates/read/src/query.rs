//! Scanning a query's rows with fewer calls into SQLite per value than rusqlite's
//! `Row::get_ref` makes.
//!
//! `get_ref` asks for the column count, then the value's type, then the value: three calls
//! into SQLite per value, the last two each taking (and leaving) the connection's mutex slot
//! and checking for a failed allocation. Reading a value here is one such call
//! (`sqlite3_column_value`) and two plain reads of the value it returns. Column access is a large
//! share of a conversion's instructions (docs/performance.md), so the readers' big scans use
//! [`Query`]; everything else keeps rusqlite's API, and both are read through [`Fetch`].
//!
//! The unsafe code is confined to this module: a statement prepared on the connection's
//! handle, stepped and finalized here, whose values are borrowed no longer than until the
//! next step (the borrow checker holds [`Values`] to its `&mut Query`).
//!
//! SQLite calls the value `sqlite3_column_value` returns "unprotected": reading it with
//! `sqlite3_value_*` is defined but not thread-safe. It is safe here because only one thread
//! uses the connection while a query borrows it: `Connection` is not `Sync`, and `Query` and
//! `Values` (raw pointers) are neither `Send` nor `Sync`.

use rusqlite::Connection;
use rusqlite::ffi;
use rusqlite::types::ValueRef;
use std::ffi::c_int;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// Quote an SQL identifier (a table or column name), doubling any `"` in it.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A row's values by column number.
pub trait Fetch {
    /// The value of column `i` (NULL where there is no such column).
    fn fetch(&self, i: usize) -> ValueRef<'_>;

    /// The value of column `i` as an integer (see [`int_of`]). Most columns are read this
    /// way; a source with typed columns answers it without building a value.
    #[inline]
    fn int(&self, i: usize) -> Option<i64> {
        int_of(self.fetch(i))
    }
}

/// A value read as an integer: integers as they are, reals truncated, anything else `None`.
#[inline]
pub fn int_of(v: ValueRef<'_>) -> Option<i64> {
    match v {
        ValueRef::Integer(v) => Some(v),
        ValueRef::Real(v) => Some(v as i64),
        _ => None,
    }
}

impl Fetch for rusqlite::Row<'_> {
    #[inline]
    fn fetch(&self, i: usize) -> ValueRef<'_> {
        self.get_ref(i).unwrap_or(ValueRef::Null)
    }
}

/// A prepared statement being scanned.
pub struct Query<'c> {
    stmt: NonNull<ffi::sqlite3_stmt>,
    db: *mut ffi::sqlite3,
    columns: usize,
    done: bool,
    _conn: PhantomData<&'c Connection>,
}

impl<'c> Query<'c> {
    /// Prepare `sql` (one statement, no parameters) on `conn`.
    pub fn new(conn: &'c Connection, sql: &str) -> rusqlite::Result<Query<'c>> {
        let len = c_int::try_from(sql.len()).map_err(|_| rusqlite::Error::InvalidQuery)?;
        // SAFETY: the handle is the open connection's, which outlives `'c`; SQLite reads `len`
        // bytes of `sql` and writes the statement pointer (NULL for an empty statement).
        let db = unsafe { conn.handle() };
        let mut stmt = std::ptr::null_mut();
        let rc = unsafe {
            ffi::sqlite3_prepare_v2(
                db,
                sql.as_ptr().cast(),
                len,
                &mut stmt,
                std::ptr::null_mut(),
            )
        };
        if rc != ffi::SQLITE_OK {
            return Err(error(db, rc));
        }
        let stmt = NonNull::new(stmt).ok_or(rusqlite::Error::InvalidQuery)?;
        // SAFETY: a prepared statement.
        let columns = unsafe { ffi::sqlite3_column_count(stmt.as_ptr()) }.max(0) as usize;
        Ok(Query {
            stmt,
            db,
            columns,
            done: false,
            _conn: PhantomData,
        })
    }

    /// The next row, `None` after the last.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> rusqlite::Result<Option<Values<'_>>> {
        if self.done {
            return Ok(None);
        }
        // SAFETY: a prepared statement, not finalized; no `Values` of the previous row is
        // alive (they borrow `self`).
        match unsafe { ffi::sqlite3_step(self.stmt.as_ptr()) } {
            ffi::SQLITE_ROW => Ok(Some(Values {
                stmt: self.stmt,
                columns: self.columns,
                _row: PhantomData,
            })),
            ffi::SQLITE_DONE => {
                self.done = true;
                Ok(None)
            }
            rc => {
                self.done = true;
                Err(error(self.db, rc))
            }
        }
    }
}

impl Drop for Query<'_> {
    fn drop(&mut self) {
        // SAFETY: finalized once, here; nothing borrows it any more.
        unsafe {
            ffi::sqlite3_finalize(self.stmt.as_ptr());
        }
    }
}

/// The error SQLite reports for `rc` on `db`, as rusqlite words it.
fn error(db: *mut ffi::sqlite3, rc: c_int) -> rusqlite::Error {
    // SAFETY: `db` is an open connection; the message is copied before any other call.
    let msg = unsafe {
        let p = ffi::sqlite3_errmsg(db);
        (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
    };
    rusqlite::Error::SqliteFailure(ffi::Error::new(rc), msg)
}

/// The current row of a [`Query`].
pub struct Values<'q> {
    stmt: NonNull<ffi::sqlite3_stmt>,
    columns: usize,
    _row: PhantomData<&'q mut ()>,
}

impl Fetch for Values<'_> {
    #[inline]
    fn fetch(&self, i: usize) -> ValueRef<'_> {
        if i >= self.columns {
            return ValueRef::Null;
        }
        // SAFETY: the statement has a current row (this borrow ends before the next step) and
        // `i` is one of its columns; the value and the bytes it points to stay valid until the
        // next step, which the borrow of `self` forbids while they are used. For text and blobs
        // the pointer is read before the length, as SQLite asks.
        unsafe {
            let v = ffi::sqlite3_column_value(self.stmt.as_ptr(), i as c_int);
            match ffi::sqlite3_value_type(v) {
                ffi::SQLITE_INTEGER => ValueRef::Integer(ffi::sqlite3_value_int64(v)),
                ffi::SQLITE_FLOAT => ValueRef::Real(ffi::sqlite3_value_double(v)),
                ffi::SQLITE_TEXT => {
                    let p = ffi::sqlite3_value_text(v);
                    let n = ffi::sqlite3_value_bytes(v).max(0) as usize;
                    if p.is_null() {
                        ValueRef::Text(&[])
                    } else {
                        ValueRef::Text(std::slice::from_raw_parts(p, n))
                    }
                }
                ffi::SQLITE_BLOB => {
                    let p = ffi::sqlite3_value_blob(v);
                    let n = ffi::sqlite3_value_bytes(v).max(0) as usize;
                    if p.is_null() || n == 0 {
                        ValueRef::Blob(&[])
                    } else {
                        ValueRef::Blob(std::slice::from_raw_parts(p.cast::<u8>(), n))
                    }
                }
                _ => ValueRef::Null,
            }
        }
    }
}
