//! Errors of the operating system and SQLite as one line each, with what to do where the plain
//! message would not say: a damaged or truncated file, a full temporary folder, a read-only
//! destination. The lowest layer: every other module may use it, it uses none of them.

use anyhow::anyhow;
use std::path::Path;

/// An OS error without the path `tempfile` adds (the internal temporary name means nothing to
/// the user).
pub fn os_error(e: &std::io::Error) -> String {
    match raw_os_error(e) {
        Some(code) => {
            let text = std::io::Error::from_raw_os_error(code).to_string();
            text.split(" (os error").next().unwrap_or(&text).to_string()
        }
        None => e.kind().to_string(),
    }
}

/// The OS error code, also when `tempfile` wrapped the error with its path.
fn raw_os_error(e: &std::io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| {
        e.get_ref()?
            .source()?
            .downcast_ref::<std::io::Error>()?
            .raw_os_error()
    })
}

/// Why a file cannot be created in `dir`, with what to do: a read-only folder or file system
/// (a read-only bind mount) gets the same advice.
pub fn write_error(dir: &Path, e: &std::io::Error) -> anyhow::Error {
    let read_only = matches!(
        raw_os_error(e),
        Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM)
    ) || matches!(
        e.kind(),
        std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied
    );
    match read_only {
        true => anyhow!(
            "{} is read-only ({}), so the output cannot go there: pass -o OUT (a file, or a \
             directory for several inputs) elsewhere",
            dir.display(),
            os_error(e)
        ),
        false => anyhow!("cannot write to {}: {}", dir.display(), os_error(e)),
    }
}

/// Whether an OS error says the file system (or the user's quota there) has no room left.
pub fn is_full(e: &std::io::Error) -> bool {
    matches!(raw_os_error(e), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Whether the file system holding `dir` has (nearly) no room left for an unprivileged writer:
/// what a failed writer that does not say why (nsys) most likely ran into.
pub fn is_full_dir(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path; `st` is written by the call before it is read.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        libc::statvfs(c.as_ptr(), &mut st) == 0
            && (st.f_bavail as u64).saturating_mul(st.f_frsize as u64) < 1 << 20
    }
}

/// The temporary folder ran out of room (`why`): which folder, and what to do.
pub fn temp_full(why: &str) -> anyhow::Error {
    anyhow!(
        "the temporary folder {} (TMPDIR) is full ({why}): free space there or set TMPDIR to a \
         folder with room",
        std::env::temp_dir().display()
    )
}

/// A scratch database that cannot grow says which folder is full.
pub fn scratch_error(e: anyhow::Error) -> anyhow::Error {
    let msg = error_line(&e);
    if msg.contains("disk is full") || msg.contains("No space left") || msg.contains("disk I/O") {
        temp_full(&msg)
    } else {
        e
    }
}

/// An error and its causes on one line, without the repetitions SQLite's error chain carries
/// ("malformed: Error code 11: malformed").
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        let text = match text.strip_prefix("Error code ") {
            Some(rest) => rest.split_once(": ").map_or(text.as_str(), |(_, t)| t),
            None => text.as_str(),
        };
        if text.is_empty() || line.contains(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    explain_damage(line.replace('\n', " "))
}

/// What follows SQLite's own words when a file is damaged.
pub const DAMAGE_HINT: &str = "the file is damaged or truncated (an incomplete copy or an \
interrupted export): copy it again, or export it again from its report (nsys export --type \
sqlite REPORT)";

/// What SQLite (and this tool) say of a damaged file.
const DAMAGE_SIGNS: [&str; 4] = [
    "database disk image is malformed",
    "damaged SQLite database",
    "file is not a database",
    "database corrupt",
];

/// An error line about a damaged file, with what to do; other lines as they are.
pub fn explain_damage(line: String) -> String {
    if DAMAGE_SIGNS.iter().any(|s| line.contains(s)) && !line.contains(DAMAGE_HINT) {
        format!("{line}: {DAMAGE_HINT}")
    } else {
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_gets_its_hint_once() {
        let once = explain_damage("x.sqlite: database disk image is malformed".into());
        assert!(once.ends_with(DAMAGE_HINT), "{once}");
        assert_eq!(explain_damage(once.clone()), once);
        assert_eq!(explain_damage("no such file".into()), "no such file");
    }
}
