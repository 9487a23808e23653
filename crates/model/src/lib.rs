//! The two lowest layers of nsys-perfetto, below everything that shares them:
//! - base: errors as one line ([`errors`]), messages that survive a closed pipe ([`term`]),
//!   the progress bar ([`progress`]), signals and temporaries ([`cleanup`]), work over threads
//!   ([`parallel`]);
//! - the neutral model every stage speaks ([`model`]), what to convert ([`select`]) and what
//!   was converted ([`summary`]).
//!
//! Nothing here knows nsys' tables or an output format: the reading crate
//! (`nsys-perfetto-read`) and the writing crate (`nsys-perfetto-write`) depend on this one,
//! never the other way, and the compiler holds them to it.

#[macro_use]
pub mod term;
pub mod category;
pub mod cleanup;
pub mod errors;
pub mod model;
pub mod parallel;
pub mod progress;
pub mod select;
pub mod summary;
