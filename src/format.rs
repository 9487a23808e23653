//! Which output format a command writes: `--format`, else the output's name, else the default.
//! The formats themselves are described once, by their writers
//! ([`nsys_perfetto_write::output::formats::FORMATS`]).

use nsys_perfetto_write::output::formats::OutputFormat;
use std::path::Path;

/// The format asked for (`--format`), else the one the output's name implies, else the
/// default. A name that implies another format than the one asked for is an error.
pub fn chosen(asked: Option<OutputFormat>, output: Option<&Path>) -> anyhow::Result<OutputFormat> {
    let named = output.and_then(OutputFormat::of_file).map(|(f, _)| f);
    match (asked, named) {
        (Some(a), Some(n)) if a != n => anyhow::bail!(
            "--format {} contradicts the output name {} (a .{} file): change one",
            a.name(),
            output.expect("named").display(),
            n.extension()
        ),
        (Some(a), _) => Ok(a),
        (None, Some(n)) => Ok(n),
        (None, None) => Ok(OutputFormat::default()),
    }
}
