//! One way for a reader to read a table: a [`Scan`] says which table, which columns, which rows
//! and in what order; the export answers it. An SQLite export runs the statement the scan
//! renders; an Arrow export hands out its typed columns directly when the scan needs nothing
//! but the table's own columns in an order the rows already have (every reader's big scan of a
//! conversion without a selection), and otherwise runs the same statement over its virtual
//! tables ([`super::arrow`]). Either way the reader sees rows through [`Fetch`].

use super::column::Col;
use super::query::{Fetch, Query, Values};
use super::{arrow, schema::Schema};
use anyhow::Result;
use rusqlite::Connection;
use rusqlite::types::ValueRef;

/// A read of one table: `SELECT cols FROM table t WHERE filter ORDER BY order`.
#[derive(Debug, Clone)]
pub struct Scan {
    table: String,
    cols: Vec<Col>,
    /// SQL over the table aliased `t`; `None` for every row.
    filter: Option<String>,
    /// Only rows whose column (one of `cols`, by index) holds one of these integers.
    only: Option<(usize, Vec<i64>)>,
    /// Columns the rows come ordered by ([`Col::Column`] or [`Col::Rowid`]), ascending.
    order: Vec<Col>,
    /// The table's rowid as it can be selected, if it has one.
    rowid: Option<&'static str>,
}

impl Scan {
    pub fn new(schema: &Schema, table: &str) -> Scan {
        Scan {
            table: table.to_string(),
            cols: Vec::new(),
            filter: None,
            only: None,
            order: Vec::new(),
            rowid: schema.rowid(table),
        }
    }

    /// A column of the table, by name; NULL where the export lacks it.
    pub fn col(mut self, schema: &Schema, name: &str) -> Scan {
        let c = if schema.has_column(&self.table, name) {
            Col::Column(name.to_string())
        } else {
            Col::Null
        };
        self.cols.push(c);
        self
    }

    /// Several columns, in order (see [`Scan::col`]).
    pub fn cols(self, schema: &Schema, names: &[&str]) -> Scan {
        names.iter().fold(self, |s, n| s.col(schema, n))
    }

    pub fn rowid(mut self) -> Scan {
        self.cols.push(if self.rowid.is_some() {
            Col::Rowid
        } else {
            Col::Null
        });
        self
    }

    pub fn null(mut self) -> Scan {
        self.cols.push(Col::Null);
        self
    }

    /// The first non-NULL of the columns the export has among `names` (NULL if none).
    pub fn coalesce(mut self, schema: &Schema, names: &[&str]) -> Scan {
        let present: Vec<String> = names
            .iter()
            .filter(|n| schema.has_column(&self.table, n))
            .map(|n| n.to_string())
            .collect();
        self.cols.push(match present.len() {
            0 => Col::Null,
            1 => Col::Column(present[0].clone()),
            _ => Col::Coalesce(present),
        });
        self
    }

    /// An SQL expression over the table aliased `t` (`NULL` and constants included).
    pub fn expr(mut self, sql: impl Into<String>) -> Scan {
        let sql = sql.into();
        self.cols.push(if sql == "NULL" {
            Col::Null
        } else if let Ok(n) = sql.trim().trim_matches(['(', ')']).parse() {
            Col::Int(n)
        } else {
            Col::Sql(sql)
        });
        self
    }

    /// Only rows where `sql` (over the table aliased `t`) holds; `1` keeps every row.
    pub fn filter(mut self, sql: String) -> Scan {
        self.filter = (sql.trim() != "1").then_some(sql);
        self
    }

    /// Only rows whose column `name`, selected before, holds one of `values` (no row where
    /// the export lacks the column). From Arrow the column is compared as each row is read.
    pub fn only(mut self, name: &str, values: &[i64]) -> Scan {
        let at = self
            .cols
            .iter()
            .position(|c| matches!(c, Col::Column(n) if n == name));
        // A column the export lacks is NULL: no row holds a value.
        self.only = Some((at.unwrap_or(usize::MAX), values.to_vec()));
        self
    }

    /// Rows in rowid order (storage order: what the readers' reorder windows expect).
    pub fn by_rowid(mut self) -> Scan {
        if self.rowid.is_some() {
            self.order = vec![Col::Rowid];
        }
        self
    }

    /// Rows in the order of these columns.
    pub fn order_by(mut self, names: &[&str]) -> Scan {
        self.order = names.iter().map(|n| Col::Column(n.to_string())).collect();
        self
    }

    /// Rows in the order of these columns, then of their rowids.
    pub fn order_by_then_rowid(self, names: &[&str]) -> Scan {
        let mut s = self.order_by(names);
        if s.rowid.is_some() {
            s.order.push(Col::Rowid);
        }
        s
    }

    /// The statement this scan is in SQL.
    pub fn sql(&self) -> String {
        let render = |c: &Col| match c {
            Col::Column(n) => format!("t.{}", super::query::quote_ident(n)),
            Col::Rowid => format!("t.{}", self.rowid.unwrap_or("rowid")),
            Col::Null => "NULL".to_string(),
            Col::Coalesce(ns) => format!(
                "coalesce({})",
                ns.iter()
                    .map(|n| format!("t.{}", super::query::quote_ident(n)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Col::Int(n) => n.to_string(),
            Col::Sql(s) => s.clone(),
        };
        let cols: Vec<String> = self.cols.iter().map(render).collect();
        let mut sql = format!(
            "SELECT {} FROM main.{} t",
            if cols.is_empty() {
                "1".to_string()
            } else {
                cols.join(", ")
            },
            super::query::quote_ident(&self.table)
        );
        let only = self
            .only
            .as_ref()
            .map(|(at, values)| match self.cols.get(*at) {
                Some(c) => values
                    .iter()
                    .map(|v| format!("{} = {v}", render(c)))
                    .collect::<Vec<_>>()
                    .join(" OR "),
                None => "0".to_string(),
            });
        let only = only.map(|o| {
            if self.filter.is_some() {
                format!("({o})")
            } else {
                o
            }
        });
        match (&self.filter, only) {
            (Some(f), Some(o)) => sql.push_str(&format!(" WHERE ({f}) AND {o}")),
            (Some(f), None) => sql.push_str(&format!(" WHERE {f}")),
            (None, Some(o)) => sql.push_str(&format!(" WHERE {o}")),
            (None, None) => {}
        }
        if !self.order.is_empty() {
            let order: Vec<String> = self.order.iter().map(render).collect();
            sql.push_str(&format!(" ORDER BY {}", order.join(", ")));
        }
        sql
    }

    /// Start reading the rows, on `conn` (a connection to the export `schema` describes).
    pub fn open<'c>(&self, conn: &'c Connection, schema: &Schema) -> Result<Rows<'c>> {
        if schema.is_arrow()
            && self.filter.is_none()
            && let Some(direct) =
                arrow::scan::TableScan::open(&schema.path, &self.table, &self.cols, &self.order)?
        {
            return Ok(Rows::Arrow(Box::new(direct), self.only.clone()));
        }
        Ok(Rows::Sql(Query::new(conn, &self.sql())?))
    }

    /// Look the table's rows up by the value of its integer column `key`, one value at a time
    /// (see [`Lookup::each`]), in storage order.
    pub fn lookup<'c>(
        &self,
        conn: &'c Connection,
        schema: &Schema,
        key: &str,
    ) -> Result<Lookup<'c>> {
        if let Some(direct) = self.key_scan(schema, key)? {
            return Ok(Lookup::Arrow(direct));
        }
        let mut by_key = self.clone();
        let equal = format!("t.{} = ?1", super::query::quote_ident(key));
        by_key.filter = Some(match &self.filter {
            Some(f) => format!("({f}) AND {equal}"),
            None => equal,
        });
        Ok(Lookup::Sql(conn.prepare(&by_key.sql())?))
    }

    /// The direct lookup [`Scan::lookup`] makes of an Arrow export's table: `None` where the
    /// export is not Arrow or the lookup needs SQL. It needs no connection, so it can outlive
    /// one (a string table shared by the conversion's threads).
    pub fn key_scan(&self, schema: &Schema, key: &str) -> Result<Option<arrow::scan::KeyScan>> {
        if !schema.is_arrow() || self.filter.is_some() {
            return Ok(None);
        }
        arrow::scan::KeyScan::open(&schema.path, &self.table, &self.cols, key)
    }
}

/// The rows of a [`Scan`] by key (see [`Scan::lookup`]).
pub enum Lookup<'c> {
    Sql(rusqlite::Statement<'c>),
    Arrow(arrow::scan::KeyScan),
}

impl Lookup<'_> {
    /// Call `f` with each row whose key is `v`.
    pub fn each(&mut self, v: i64, mut f: impl FnMut(&dyn Fetch)) -> Result<()> {
        match self {
            Lookup::Sql(stmt) => {
                let mut rows = stmt.query([v])?;
                while let Some(r) = rows.next()? {
                    f(r);
                }
            }
            Lookup::Arrow(k) => {
                for row in k.rows(v)? {
                    f(&k.row(row));
                }
            }
        }
        Ok(())
    }
}

/// The rows of a [`Scan`] being read.
pub enum Rows<'c> {
    Sql(Query<'c>),
    /// With the rows to keep (see [`Scan::only`]).
    Arrow(Box<arrow::scan::TableScan>, Option<(usize, Vec<i64>)>),
}

impl Rows<'_> {
    /// The next row, `None` after the last.
    #[allow(clippy::should_implement_trait)]
    #[inline]
    pub fn next(&mut self) -> Result<Option<Row<'_>>> {
        Ok(match self {
            Rows::Sql(q) => q.next()?.map(Row::Sql),
            Rows::Arrow(a, only) => loop {
                if !a.step() {
                    a.unchanged()?;
                    return Ok(None);
                }
                let row = a.row();
                if only
                    .as_ref()
                    .is_none_or(|(at, values)| row.int(*at).is_some_and(|v| values.contains(&v)))
                {
                    break Some(Row::Arrow(a.row()));
                }
            },
        })
    }
}

/// The current row of [`Rows`].
pub enum Row<'r> {
    Sql(Values<'r>),
    Arrow(arrow::scan::RowRef<'r>),
}

impl Fetch for Row<'_> {
    #[inline(always)]
    fn fetch(&self, i: usize) -> ValueRef<'_> {
        match self {
            Row::Sql(v) => sql_fetch(v, i),
            Row::Arrow(a) => a.fetch(i),
        }
    }

    /// Inlined into the readers: from Arrow, an integer is a load (see `arrow::scan::TableScan`).
    #[inline(always)]
    fn int(&self, i: usize) -> Option<i64> {
        match self {
            Row::Sql(v) => sql_int(v, i),
            Row::Arrow(a) => a.int(i),
        }
    }
}

/// [`Fetch::fetch`] of an SQLite row, kept out of the readers' code.
#[inline(never)]
fn sql_fetch<'v>(v: &'v Values<'_>, i: usize) -> ValueRef<'v> {
    v.fetch(i)
}

/// [`Fetch::int`] of an SQLite row, kept out of the readers' code.
#[inline(never)]
fn sql_int(v: &Values<'_>, i: usize) -> Option<i64> {
    v.int(i)
}
