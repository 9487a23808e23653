//! The output formats, described once: each one's name on the command line and in the API, the
//! extension of its files, how `serve` hands it out, how its trace carries the conversion's
//! record ([`crate::provenance`]) and which writer encodes it. Everything that chooses, names or
//! recognizes a format reads [`FORMATS`]; a new format is its writer (`nsys_perfetto_write::
//! output`) and its entry here.

use nsys_perfetto_model::select::GpuModel;
use nsys_perfetto_write::output::json::{Json, RECORD_KEY as JSON_KEY};
use nsys_perfetto_write::output::pftrace::file::{Protobuf, record_packet, record_text_prefix};
use nsys_perfetto_write::output::{Format, Placed};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    #[default]
    Protobuf,
    /// Chrome JSON trace format.
    Json,
}

/// What the tool knows of one output format.
#[derive(Debug)]
pub struct FormatSpec {
    pub format: OutputFormat,
    /// Its name: `--format NAME`, the API's `format=NAME`, the record of options.
    pub name: &'static str,
    /// Other names the API accepts.
    pub aliases: &'static [&'static str],
    /// What `--help` says of it.
    pub help: &'static str,
    /// The extension of its files, without the dot; `.EXT.gz` is the same, gzip-compressed.
    pub extension: &'static str,
    /// `serve` gzips it (`.EXT.gz`): text that compresses well.
    pub served_gzipped: bool,
    /// The record text at the end of an uncompressed trace of it (the end of the file, `tail`),
    /// as its writer's footer writes it.
    pub read_record: fn(tail: &[u8]) -> Option<String>,
}

/// Every output format; the first is the default.
pub const FORMATS: &[FormatSpec] = &[
    FormatSpec {
        format: OutputFormat::Protobuf,
        name: "protobuf",
        aliases: &["pftrace"],
        help: "Perfetto protobuf (.pftrace)",
        extension: "pftrace",
        served_gzipped: false,
        read_record: pftrace_record,
    },
    FormatSpec {
        format: OutputFormat::Json,
        name: "json",
        aliases: &[],
        help: "Chrome JSON trace (.json), for tools that read only that",
        extension: "json",
        served_gzipped: true,
        read_record: json_record,
    },
];

/// A conversion run with one format's writer: [`OutputFormat::write_with`] makes the writer and
/// hands it to [`WithFormat::write`], whose code is generic over the format.
pub trait WithFormat {
    type Output;
    /// The sources of the trace, as their writer's header and preamble describe them.
    fn placed(&self) -> &[Placed];
    fn write<F: Format>(self, format: &F) -> Self::Output;
}

impl OutputFormat {
    pub fn spec(self) -> &'static FormatSpec {
        FORMATS
            .iter()
            .find(|s| s.format == self)
            .expect("every format has its entry in FORMATS")
    }

    pub fn name(self) -> &'static str {
        self.spec().name
    }

    pub fn extension(self) -> &'static str {
        self.spec().extension
    }

    /// The format of a name or alias (`protobuf`, `pftrace`, `json`).
    pub fn named(name: &str) -> Option<OutputFormat> {
        FORMATS
            .iter()
            .find(|s| s.name == name || s.aliases.contains(&name))
            .map(|s| s.format)
    }

    /// The format a file's name implies (`x.json`, `x.json.gz`), and whether it is gzipped.
    pub fn of_file(path: &Path) -> Option<(OutputFormat, bool)> {
        let name = path.to_string_lossy().to_lowercase();
        let (plain, gzipped) = match name.strip_suffix(".gz") {
            Some(p) => (p, true),
            None => (name.as_str(), false),
        };
        FORMATS
            .iter()
            .find(|s| {
                plain
                    .strip_suffix(s.extension)
                    .is_some_and(|stem| stem.ends_with('.'))
            })
            .map(|s| (s.format, gzipped))
    }

    /// The format asked for (`--format`), else the one the output's name implies, else the
    /// default. A name that implies another format than the one asked for is an error.
    pub fn chosen(asked: Option<OutputFormat>, output: Option<&Path>) -> anyhow::Result<Self> {
        let named = output.and_then(Self::of_file).map(|(f, _)| f);
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

    /// Run `with` with this format's writer, made for `with`'s sources.
    pub fn write_with<W: WithFormat>(self, gpu: GpuModel, json_colors: bool, with: W) -> W::Output {
        match self {
            OutputFormat::Protobuf => {
                let format = Protobuf::new(with.placed()).with_gpu_model(gpu);
                with.write(&format)
            }
            OutputFormat::Json => with.write(&Json {
                colors: json_colors,
            }),
        }
    }
}

/// The last places `needle` stands in `hay`, the last first.
fn find_last(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    let mut at: Vec<usize> = hay
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    at.reverse();
    at
}

/// The record text at the end of a `.pftrace`: the trailer that ends the file exactly.
fn pftrace_record(tail: &[u8]) -> Option<String> {
    let needle = record_text_prefix();
    for at in find_last(tail, &needle) {
        let text = &tail[at + needle.len()..];
        // Skip the length varint; the text runs to the end of the file.
        let Some(n) = text.iter().position(|b| b & 0x80 == 0) else {
            continue;
        };
        let Ok(text) = std::str::from_utf8(&text[n + 1..]) else {
            continue;
        };
        if tail.ends_with(&record_packet(text)) {
            return Some(text.to_string());
        }
    }
    None
}

/// The record text at the end of a JSON trace: the last `otherData` key, then `}}`.
fn json_record(tail: &[u8]) -> Option<String> {
    let needle = format!("\"{JSON_KEY}\":");
    for at in find_last(tail, needle.as_bytes()) {
        let Ok(rest) = std::str::from_utf8(&tail[at + needle.len()..]) else {
            continue;
        };
        let mut de = serde_json::Deserializer::from_str(rest).into_iter::<String>();
        let Some(Ok(text)) = de.next() else { continue };
        if rest[de.byte_offset()..].trim_end() == "}}" {
            return Some(text);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsys_perfetto_write::output::pftrace::wire::TRACE_PACKET_BYTE;

    #[test]
    fn trailer_round_trips_and_needs_the_end_of_the_file() {
        let rec = r#"{"a":"b \u00e9"}"#.repeat(20);
        let mut file = vec![TRACE_PACKET_BYTE, 3, 1, 2, 3];
        file.extend(record_packet(&rec));
        assert_eq!(pftrace_record(&file).as_deref(), Some(rec.as_str()));
        // Anything after it (another packet) and it is not the record of this file.
        file.extend([TRACE_PACKET_BYTE, 1, 0]);
        assert_eq!(pftrace_record(&file), None);
    }

    #[test]
    fn json_record_is_the_last_key() {
        let text = "{\"x\":\"a\\\"b\"}";
        let mut out = b"{\"traceEvents\":[\n],\"otherData\":{\"converter\":\"c\",".to_vec();
        nsys_perfetto_write::output::json::push_str(&mut out, JSON_KEY);
        out.push(b':');
        nsys_perfetto_write::output::json::push_str(&mut out, text);
        out.extend_from_slice(b"}}\n");
        assert_eq!(json_record(&out).as_deref(), Some(text));
        out.extend_from_slice(b"{}");
        assert_eq!(json_record(&out), None);
    }

    #[test]
    fn names_and_files_choose_one_format() {
        assert_eq!(OutputFormat::default(), FORMATS[0].format);
        for s in FORMATS {
            assert_eq!(s.format.spec().name, s.name);
            assert_eq!(OutputFormat::named(s.name), Some(s.format));
            let file = format!("t.{}", s.extension.to_uppercase());
            assert_eq!(
                OutputFormat::of_file(Path::new(&file)),
                Some((s.format, false))
            );
            let gz = format!("t.{}.gz", s.extension);
            assert_eq!(
                OutputFormat::of_file(Path::new(&gz)),
                Some((s.format, true))
            );
        }
        assert_eq!(OutputFormat::named("pftrace"), Some(OutputFormat::Protobuf));
        assert_eq!(OutputFormat::of_file(Path::new("t.sqlite")), None);
        assert_eq!(OutputFormat::of_file(Path::new("json")), None);
    }
}
