//! The output formats, listed once: `output_formats!` names each format's [`Format`] (the
//! writer's module describes it) and builds from the list what chooses, names and recognizes a
//! format ([`OutputFormat`], [`FORMATS`]) and what runs its writer
//! ([`OutputFormat::write_with`]). A new format is its writer's module (declared in
//! [`crate::output`]) and its line in the list below.

use super::{Format, FormatOptions, Placed};
use std::path::Path;

/// Builds, from the list, [`OutputFormat`] (a variant per format), [`FORMATS`] (what each
/// format's [`Format`] says of it) and [`OutputFormat::write_with`] (the dispatch to its writer). An entry is `Variant =>
/// path::Type`: `Type` is the [`Format`] of the writer's module `path` in [`crate::output`].
macro_rules! output_formats {
    ($($variant:ident => $($path:ident)::+),+ $(,)?) => {
        /// An output format: one variant per entry of the list; the first is the default.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum OutputFormat {
            $($variant),+
        }

        /// Every output format, in the order of the list; the first is the default.
        pub const FORMATS: &[FormatSpec] = &[$(FormatSpec {
            format: OutputFormat::$variant,
            name: <$($path)::+ as Format>::NAME,
            aliases: <$($path)::+ as Format>::ALIASES,
            help: <$($path)::+ as Format>::HELP,
            extension: <$($path)::+ as Format>::EXTENSION,
            served_gzipped: <$($path)::+ as Format>::SERVED_GZIPPED,
            read_record: <$($path)::+ as Format>::read_record,
        }),+];

        impl OutputFormat {
            /// Run `with` with this format's writer, made for `with`'s sources.
            pub fn write_with<W: WithFormat>(self, options: &FormatOptions, with: W) -> W::Output {
                match self {
                    $(OutputFormat::$variant => {
                        let format = <$($path)::+ as Format>::made(with.placed(), options);
                        with.write(&format)
                    })+
                }
            }
        }
    };
}

// Every output format, the default first.
output_formats! {
    Protobuf => super::pftrace::file::Protobuf,
    Json => super::json::Json,
}

/// What the tool knows of one output format: what its [`Format`] says.
#[derive(Debug)]
pub struct FormatSpec {
    pub format: OutputFormat,
    /// [`Format::NAME`].
    pub name: &'static str,
    /// [`Format::ALIASES`].
    pub aliases: &'static [&'static str],
    /// [`Format::HELP`].
    pub help: &'static str,
    /// [`Format::EXTENSION`].
    pub extension: &'static str,
    /// [`Format::SERVED_GZIPPED`].
    pub served_gzipped: bool,
    /// [`Format::read_record`].
    pub read_record: fn(tail: &[u8]) -> Option<String>,
}

/// A conversion run with one format's writer: [`OutputFormat::write_with`] makes the writer and
/// hands it to [`WithFormat::write`], whose code is generic over the format.
pub trait WithFormat {
    type Output;
    /// The sources of the trace, as their writer's header and preamble describe them.
    fn placed(&self) -> &[Placed];
    fn write<F: Format>(self, format: &F) -> Self::Output;
}

impl Default for OutputFormat {
    fn default() -> Self {
        FORMATS[0].format
    }
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
}

#[cfg(test)]
mod tests {
    use super::{FORMATS, OutputFormat};
    use std::path::Path;

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
