//! What a file is, by its name: the sources refuse a trace given as a profile, the hints say
//! so, and `open` serves it as is.

use std::path::Path;

/// Whether a path is a trace the UI opens as is.
pub fn is_trace(path: &Path) -> bool {
    let name = path.to_string_lossy().to_lowercase();
    [
        ".pftrace",
        ".perfetto-trace",
        ".perfetto",
        ".pb",
        ".trace",
        ".json",
        ".gz",
        ".ctrace",
    ]
    .iter()
    .any(|e| name.ends_with(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_by_name() {
        assert!(is_trace(Path::new("a.pftrace")) && is_trace(Path::new("a.json.gz")));
        assert!(!is_trace(Path::new("a.sqlite")));
    }
}
