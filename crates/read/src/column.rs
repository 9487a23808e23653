//! What a scan selects of a table, named apart from the scan so a source can answer it
//! without knowing the scan ([`super::scan`], [`super::arrow`]).

/// A column of a scan's rows.
#[derive(Debug, Clone, PartialEq)]
pub enum Col {
    /// A column of the table (a column the export lacks is a [`Col::Null`]).
    Column(String),
    /// The row's rowid (`NULL` where the table has none).
    Rowid,
    Null,
    /// The first of these columns that is not NULL.
    Coalesce(Vec<String>),
    /// A constant.
    Int(i64),
    /// Any other SQL expression over the table, aliased `t`.
    Sql(String),
}
