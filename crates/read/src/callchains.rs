//! Call stacks of the rows of a table, each looked up once.

use crate::cells::text_at;
use crate::query::Fetch;
use crate::schema::Schema;
use anyhow::Result;
use rusqlite::Connection;
use std::collections::HashMap;

/// Call stacks of the rows of a table (CUDA_CALLCHAINS, OSRT_CALLCHAINS by `callchainId`),
/// innermost frame first, one symbol a line (`?` for a symbol missing from StringIds). A
/// profile repeats a few hundred stacks over many calls, so each is looked up once and kept,
/// up to `Callchains::CACHED` of them (a correlated subquery per row costs many times the
/// reading of the table itself).
pub struct Callchains<'c> {
    pub(super) stmt: Option<rusqlite::Statement<'c>>,
    pub(super) cache: HashMap<i64, Option<std::rc::Rc<str>>, nsys_perfetto_model::model::FastHash>,
}

impl<'c> Callchains<'c> {
    pub(super) const CACHED: usize = 1 << 14;

    /// What the reader selects for [`Callchains::get`]: the row's `callchainId`, or `NULL` when
    /// the export has no stacks for `table`.
    pub fn column(schema: &Schema, table: &str, chains: &str) -> String {
        if schema.has_column(table, "callchainId")
            && schema.has_columns(chains, &["id", "symbol", "stackDepth"])
        {
            "t.callchainId".to_string()
        } else {
            "NULL".to_string()
        }
    }

    pub fn new(conn: &'c Connection, schema: &Schema, table: &str, chains: &str) -> Result<Self> {
        let stmt = if Self::column(schema, table, chains) == "NULL" {
            None
        } else if schema.has_columns("StringIds", &["id", "value"]) {
            Some(conn.prepare(&format!(
                "SELECT group_concat(coalesce(s.value, '?'), char(10)) FROM (SELECT symbol FROM {chains} \
                 WHERE id = ?1 ORDER BY stackDepth) cc LEFT JOIN StringIds s ON s.id = cc.symbol"
            ))?)
        } else {
            // No string table: every frame is a dangling id.
            Some(conn.prepare(&format!(
                "SELECT group_concat('?', char(10)) FROM (SELECT symbol FROM {chains} \
                 WHERE id = ?1 ORDER BY stackDepth)"
            ))?)
        };
        Ok(Callchains {
            stmt,
            cache: HashMap::default(),
        })
    }

    /// The stack of the row whose [`Callchains::column`] is column `idx` of `r`.
    pub fn get(
        &mut self,
        r: &(impl Fetch + ?Sized),
        idx: usize,
    ) -> Result<Option<std::rc::Rc<str>>> {
        let Some(stmt) = self.stmt.as_mut() else {
            return Ok(None);
        };
        let lookup = |stmt: &mut rusqlite::Statement<'_>, v: rusqlite::types::Value| {
            stmt.query_row([v], |row| {
                Ok(text_at(row, 0).map(|t| std::rc::Rc::<str>::from(t.as_ref())))
            })
        };
        match r.fetch(idx) {
            rusqlite::types::ValueRef::Null => Ok(None),
            rusqlite::types::ValueRef::Integer(id) => {
                if let Some(c) = self.cache.get(&id) {
                    return Ok(c.clone());
                }
                let c = lookup(stmt, rusqlite::types::Value::Integer(id))?;
                if self.cache.len() >= Self::CACHED {
                    self.cache.clear();
                }
                self.cache.insert(id, c.clone());
                Ok(c)
            }
            // A damaged id: compared as SQLite would, not cached.
            rusqlite::types::ValueRef::Real(v) => {
                Ok(lookup(stmt, rusqlite::types::Value::Real(v))?)
            }
            rusqlite::types::ValueRef::Text(v) => Ok(lookup(
                stmt,
                rusqlite::types::Value::Text(String::from_utf8_lossy(v).into_owned()),
            )?),
            rusqlite::types::ValueRef::Blob(v) => {
                Ok(lookup(stmt, rusqlite::types::Value::Blob(v.to_vec()))?)
            }
        }
    }
}
