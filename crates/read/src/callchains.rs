//! Call stacks of the rows of a table, each looked up once.

use crate::arrow::scan::KeyScan;
use crate::cells::{int_at, text_at};
use crate::query::Fetch;
use crate::scan::Scan;
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
    /// An Arrow export's frames and strings, looked up in their typed columns instead.
    direct: Option<Frames>,
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
        let direct = match stmt {
            Some(_) => Frames::open(schema, chains)?,
            None => None,
        };
        Ok(Callchains {
            stmt,
            direct,
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
                let c = match &self.direct {
                    Some(frames) => frames.stack(id)?,
                    None => lookup(stmt, rusqlite::types::Value::Integer(id))?,
                };
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

/// A table's call stacks in an Arrow export: a stack's frames by `id` (the rows are sorted by
/// it) and their symbols by `StringIds.id`, as the SQL of [`Callchains::new`] joins them.
struct Frames {
    /// `stackDepth`, `symbol` of the frames.
    frames: KeyScan,
    /// `value` of the strings; `None` where the export has no string table.
    strings: Option<KeyScan>,
}

impl Frames {
    fn open(schema: &Schema, chains: &str) -> Result<Option<Frames>> {
        let frames = Scan::new(schema, chains)
            .cols(schema, &["stackDepth", "symbol"])
            .key_scan(schema, "id")?;
        let Some(frames) = frames else {
            return Ok(None);
        };
        let strings = if schema.has_columns("StringIds", &["id", "value"]) {
            match Scan::new(schema, "StringIds")
                .col(schema, "value")
                .key_scan(schema, "id")?
            {
                Some(s) => Some(s),
                None => return Ok(None),
            }
        } else {
            None
        };
        Ok(Some(Frames { frames, strings }))
    }

    /// The stack `id`: its frames by depth, each its symbol's strings (`?` for none), one a
    /// line; `None` for a stack with no frames.
    fn stack(&self, id: i64) -> Result<Option<std::rc::Rc<str>>> {
        let rows = self.frames.rows(id)?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut frames: Vec<(Option<i64>, Option<i64>)> = rows
            .map(|r| {
                let row = self.frames.row(r);
                (int_at(&row, 0), int_at(&row, 1))
            })
            .collect();
        // NULL depths first, as SQL orders them.
        frames.sort_by_key(|&(depth, _)| depth);
        let mut text = String::new();
        for (_, symbol) in frames {
            let mut found = false;
            if let (Some(strings), Some(symbol)) = (&self.strings, symbol) {
                for r in strings.rows(symbol)? {
                    found = true;
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    // A value of the typed column is text or NULL (`coalesce(s.value, '?')`).
                    text.push_str(text_at(&strings.row(r), 0).as_deref().unwrap_or("?"));
                }
            }
            if !found {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push('?');
            }
        }
        Ok(Some(text.into()))
    }
}
