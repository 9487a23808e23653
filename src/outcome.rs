//! How a command ends: an [`Outcome`] when it ran, an error when it could not; `cli::main`
//! maps both to the process's exit code, in one place.

/// How a command that ran ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything asked was done: exit 0.
    Done,
    /// It ran, but some of its inputs or steps failed, and each failure was said: exit 1.
    SomeFailed,
    /// Ctrl-C stopped it before it was done: exit 130, as a shell reports SIGINT.
    Interrupted,
    /// An exit status passed on from a program it ran (`profile`: the profiled program's).
    Status(u8),
}

/// An error in what the command line asks (a bad pattern, a bad `--types`), found before any
/// work: exit 2, as clap's own usage errors.
#[derive(Debug)]
pub struct Usage(anyhow::Error);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for Usage {}

/// `e` as a usage error (exit 2).
pub fn usage(e: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(Usage(e))
}

/// `e` said on one line without the repetitions of SQLite's error chains
/// ([`nsys_perfetto_model::errors::error_line`]), for commands that read exports.
pub fn on_one_line(e: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!(nsys_perfetto_model::errors::error_line(&e))
}
