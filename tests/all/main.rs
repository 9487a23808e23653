//! The integration tests, in one binary: each `tests/*.rs` file is a test binary that links the
//! whole library and its dependencies again, which cost more than the tests themselves on a
//! small machine. A new test file goes here as a module (`tests/all/NAME.rs` plus a `mod NAME;`
//! line below) and reaches the shared helpers as `crate::common`; `cargo test --release --test
//! all NAME::` runs one module.
//!
//! Checks that cannot run here (no corpus, no nsys...) call [`common::skip`]: the reason is
//! printed past libtest's output capture, listed again when the binary exits, and is a failure
//! when `NSYS_PERFETTO_REQUIRE` names the requirement. The binary also fails when a test wrote
//! into `../shared` or the repository (`common::guard`).
//!
//! Tests run twice as many at a time as there are cores (set when the binary starts; most of
//! them wait on other programs): `--test-threads N` or `RUST_TEST_THREADS` choose otherwise.

#[path = "../common/mod.rs"]
mod common;

mod analyze;
mod arrow;
mod bad_input;
mod batch;
mod cli_messages;
mod contexts;
mod corpus;
mod fidelity;
mod files_guard;
mod fixture;
mod gpu_model;
mod install;
mod json_output;
mod layers;
mod memory;
mod merge;
mod nsys_e2e;
mod nsys_stats;
mod open_serve;
mod pictures;
mod projection_perf_check;
mod proto_schema;
mod recipe;
mod reuse;
mod robustness;
mod safety;
mod samples_metrics;
mod sched;
mod selection;
mod tables;
mod ui;
mod ui_view;
mod workflow;
