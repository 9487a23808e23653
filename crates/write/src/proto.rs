//! Rust types for the subset of the Perfetto trace protobuf schema that this
//! converter writes.
//!
//! The schema lives in `proto/perfetto/...` (a field-for-field subset of
//! upstream Perfetto's `protos/perfetto/...`, checked by
//! `tests/proto_schema.rs`) and is compiled by the crate's `build.rs` with `prost-build`
//! (fed by `protox`, so no system `protoc` is needed).
//!
//! Everything is re-exported at this level, e.g. `proto::Trace`,
//! `proto::TracePacket`, `proto::trace_packet::Data`,
//! `proto::track_event::Type`.

/// Generated code, namespaced like the protobuf package `perfetto.protos`.
/// Lint attributes here are inherited by the generated module.
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::nursery,
    dead_code,
    missing_docs,
    rustdoc::all,
    unreachable_pub
)]
pub mod perfetto {
    pub mod protos {
        include!(concat!(env!("OUT_DIR"), "/perfetto.protos.rs"));
    }
}

pub use perfetto::protos::*;

/// Field numbers of every message of the schema, generated from it by `build.rs`: one module a
/// message (`field::track_event::NAME_IID`, nested messages nested:
/// `field::clock_snapshot::clock::TIMESTAMP`), for the packets written by hand.
#[allow(dead_code)]
pub mod field {
    include!(concat!(env!("OUT_DIR"), "/perfetto_fields.rs"));
}
