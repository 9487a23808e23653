//! nsys-perfetto: convert NVIDIA Nsight Systems profiles into Perfetto traces.
//!
//! Pipeline: `nsys_perfetto_read` reads an export as its `nsys_perfetto_model::model::Description`
//! and a stream of the model's events; `nsys_perfetto_write::layout` places the events on tracks
//! and lanes; `nsys_perfetto_write::output` encodes them in one format, knowing nothing of nsys;
//! [`convert`] wires one or several sources (a merge) to one output file.
//!
//! The layers below this crate are crates of their own (`crates/`), used by their own names:
//! `nsys-perfetto-model` (base and the neutral model), `nsys-perfetto-read` (the sources) and
//! `nsys-perfetto-write` (layout and the writers). This crate holds one conversion, the
//! workflows and the CLI.

pub mod about;
pub mod args;
pub mod batch;
pub mod cli;
pub mod commands;
pub mod convert;
pub mod format;
pub mod hints;
pub mod input;
pub mod merge;
pub mod open;
pub mod outcome;
pub mod pictures;
pub mod provenance;
pub mod report;
pub mod serve;
pub mod workflow;
