//! Reading Nsight Systems exports (SQLite, Arrow, Parquet) into the neutral model of
//! `nsys-perfetto-model`: nsys-perfetto's sources. This crate knows nothing of layout or the
//! output formats (it does not depend on the writing crate), and the compiler holds it to that.
//!
//! Every table is optional and every column is looked up by name: exports from nsys 2020.3 to
//! 2026.2 (schemas 2.9 to 3.25) differ in both. Readers stream rows and never hold a whole table.
//!
//! # The public API
//! The public modules are what the app and the tests use; each item has one path. The readers
//! of each kind of event (`gpu`, `nvtx`, `osrt`, `sched`, ...) and their machinery (`order`,
//! `runs`, `flows`, `reader`, `scratch`) are private: a conversion reaches them through
//! [`source`].
//! - Opening: [`source::Export`] (an opened export, what every command reads), [`inputs`] (what
//!   a path is), [`schema`] ([`open_schema`](schema::open_schema),
//!   the export's tables and columns), [`connection`] (read-only connections, SQLite URIs, WAL
//!   files), [`arrow`] and [`parquet`] (those exports' folder names).
//! - Converting: [`source`] (an export as a source of the model's events), [`tables`] (the
//!   table of nsys tables), [`projection`] (NVTX projected onto the GPU), [`metrics`],
//!   [`enums`].
//! - Analysing: [`rules`] (`analyze`'s rules), [`recipes`] (the SQL of nsys' recipes).
//! - Reading rows: [`names`] (nsys' table names), [`cells`] (one cell, checked), [`query`]
//!   and [`scan`] (rows with few calls into SQLite), [`api::display_name`].

pub mod api;
pub mod arrow;
mod callchains;
pub mod cells;
mod column;
pub mod connection;
mod contexts;
pub mod enums;
mod flows;
mod gpu;
mod gpu_memory;
mod info;
pub mod inputs;
mod mapped;
pub mod metrics;
pub mod names;
mod nvtx;
mod order;
mod osrt;
pub mod parquet;
pub mod projection;
pub mod query;
mod reader;
pub mod recipes;
pub mod reports;
pub mod rules;
mod runs;
mod samples;
pub mod scan;
mod sched;
pub mod schema;
mod scratch;
pub mod source;
mod sync;
pub mod tables;
