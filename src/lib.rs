//! nsys-perfetto: convert NVIDIA Nsight Systems profiles into Perfetto traces.
//!
//! Pipeline: [`nsys`] reads an export as its [`model::Description`] and a stream of [`model`]
//! events; [`layout`] places the events on tracks and lanes; [`output`] encodes them in one
//! format, knowing nothing of nsys; [`convert`] wires one or several sources (a merge) to one
//! output file.

pub mod about;
#[macro_use]
pub mod term;
pub mod batch;
pub mod cleanup;
pub mod cli;
pub mod convert;
pub mod errors;
pub mod file_kind;
pub mod hints;
pub mod layout;
pub mod merge;
pub mod model;
pub mod nsys;
pub mod open;
pub mod output;
pub mod parallel;
pub mod progress;
pub mod proto;
pub mod provenance;
pub mod report;
pub mod select;
pub mod serve;
pub mod summary;
pub mod workflow;

/// The NVTX-on-GPU projection, an nsys-side analysis (kept at the crate root for callers).
pub use nsys::projection;
