//! `nsys-perfetto open INPUT`: show a trace (or a profile, converted first) in the Perfetto UI
//! ([`crate::open`] serves it).

use super::outcome::Outcome;
use crate::cli::args::OpenArgs;
use anyhow::Result;

pub fn run(args: &OpenArgs) -> Result<Outcome> {
    args.open()
}
