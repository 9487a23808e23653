//! nsys-perfetto: convert NVIDIA Nsight Systems profiles into Perfetto traces.
//!
//! Pipeline: [`nsys`] reads export tables as a stream of [`model`] events, [`layout`] places them
//! on tracks and lanes, [`output`] encodes them; [`convert`] runs it all in parallel.

pub mod about;
pub mod batch;
pub mod cli;
pub mod convert;
pub mod flows;
pub mod layout;
pub mod model;
pub mod nsys;
pub mod output;
pub mod progress;
pub mod projection;
pub mod proto;
pub mod report;
pub mod select;
pub mod summary;
pub mod workflow;
