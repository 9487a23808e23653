//! Messages on stderr and stdout that never panic: `eprintln!` and `println!` panic when the
//! stream is closed (`nsys-perfetto dir/ 2>&1 | head -3`). These ignore write errors, so a broken
//! pipe only silences the messages; the work goes on.

use std::io::Write;

/// Write `args` to stderr, ignoring errors (EPIPE, a closed descriptor).
pub fn err(args: std::fmt::Arguments<'_>) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_fmt(args);
    let _ = e.flush();
}

/// Write `args` to stdout, ignoring errors.
pub fn out(args: std::fmt::Arguments<'_>) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_fmt(args);
}

/// `eprintln!` that ignores a closed stderr.
#[macro_export]
macro_rules! say {
    () => { $crate::term::err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::term::err(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` that ignores a closed stderr.
#[macro_export]
macro_rules! say_part {
    ($($arg:tt)*) => { $crate::term::err(format_args!($($arg)*)) };
}

/// `println!` that ignores a closed stdout.
#[macro_export]
macro_rules! put {
    () => { $crate::term::out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::term::out(format_args!("{}\n", format_args!($($arg)*))) };
}
