//! Reading Nsight Systems exports (SQLite, Arrow, Parquet) into the neutral model of
//! `nsys-perfetto-model`: nsys-perfetto's sources. This crate knows nothing of layout or the
//! output formats (it does not depend on the writing crate), and the compiler holds it to that.
//!
//! Every table is optional and every column is looked up by name: exports from nsys 2020.3 to
//! 2026.2 (schemas 2.9 to 3.25) differ in both. Readers stream rows and never hold a whole table.

pub mod api;
pub mod arrow;
pub mod callchains;
pub mod cells;
pub mod column;
pub mod connection;
pub mod contexts;
pub mod enums;
pub mod flows;
pub mod gpu;
pub mod gpu_memory;
pub mod info;
pub mod inputs;
mod mapped;
pub mod metrics;
pub mod names;
pub mod nvtx;
pub mod order;
pub mod osrt;
pub mod parquet;
pub mod projection;
pub mod query;
pub mod reader;
pub mod recipes;
pub mod rules;
pub mod runs;
pub mod samples;
pub mod scan;
pub mod sched;
pub mod schema;
pub mod scratch;
pub mod source;
pub mod sync;
pub mod tables;
