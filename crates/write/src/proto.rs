//! Rust types for the subset of the Perfetto trace protobuf schema that this
//! converter writes.
//!
//! The schema lives in `proto/perfetto/...` (a field-for-field subset of
//! upstream Perfetto's `protos/perfetto/...`, checked by
//! `tests/proto_schema.rs`) and is compiled by the crate's `build.rs` with `prost-build`
//! (fed by `protox`, so no system `protoc` is needed).
//!
//! The generated types are this module's own items, e.g. `proto::Trace`,
//! `proto::TracePacket`, `proto::trace_packet::Data`, `proto::track_event::Type`.

// Generated code (the messages of the protobuf package `perfetto.protos`, and `field`):
// the lints are for hand-written code.
#![allow(
    clippy::all,
    clippy::pedantic,
    clippy::nursery,
    dead_code,
    missing_docs,
    rustdoc::all,
    unreachable_pub
)]

include!(concat!(env!("OUT_DIR"), "/perfetto.protos.rs"));

/// Field numbers of every message of the schema, generated from it by `build.rs`: one module a
/// message (`field::track_event::NAME_IID`, nested messages nested:
/// `field::clock_snapshot::clock::TIMESTAMP`), for the packets written by hand.
pub mod field {
    include!(concat!(env!("OUT_DIR"), "/perfetto_fields.rs"));
}
