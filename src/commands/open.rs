//! `nsys-perfetto open INPUT`: show a trace (or a profile, converted first) in the Perfetto UI
//! ([`crate::open`] serves it).

use crate::args::OpenArgs;
use crate::outcome::Outcome;
use anyhow::Result;

pub fn run(args: &OpenArgs) -> Result<Outcome> {
    args.open()
}
