//! nsys-perfetto's layout and writers, over the neutral model of `nsys-perfetto-model`:
//! [`layout`] places events on tracks and lanes, [`output`] encodes them as Perfetto protobuf
//! ([`proto`] is Perfetto's schema subset) or Chrome JSON. Nothing here knows nsys: this crate
//! does not depend on the reading crate, and the compiler holds it to that.

pub mod layout;
pub mod output;
pub mod proto;
