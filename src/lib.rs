//! nsys-perfetto: convert NVIDIA Nsight Systems profiles into Perfetto traces.
//!
//! Pipeline: [`nsys`] reads an export as its [`model::Description`] and a stream of [`model`]
//! events; [`layout`] places the events on tracks and lanes; [`output`] encodes them in one
//! format, knowing nothing of nsys; [`convert`] wires one or several sources (a merge) to one
//! output file.
//!
//! The layers below this crate are crates of their own (`crates/`): `nsys-perfetto-model`
//! (base and the neutral model), `nsys-perfetto-read` (the sources, [`nsys`]) and
//! `nsys-perfetto-write` (layout and the writers). Their modules are re-exported here under
//! the names the code base and the tests use. This crate holds one conversion, the workflows
//! and the CLI.

pub use nsys_perfetto_model::{
    cleanup, errors, model, parallel, progress, put, say, say_part, select, summary, term,
};
pub use nsys_perfetto_read as nsys;
pub use nsys_perfetto_write::{layout, output, proto};

pub mod about;
pub mod batch;
pub mod cli;
pub mod convert;
pub mod hints;
pub mod merge;
pub mod open;
pub mod pictures;
pub mod provenance;
pub mod report;
pub mod serve;
pub mod workflow;

/// The NVTX-on-GPU projection, an nsys-side analysis (kept at the crate root for callers).
pub use nsys::projection;
