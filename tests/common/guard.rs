//! What the tests must leave alone: `../shared` (the corpus, tools and documents beside the
//! repository) and the repository's own files (all but `target/`). Every test binary that
//! includes `common` records every file there, with its size and modification time, as it
//! starts, before any test runs, and compares when it exits, after all of them: any file created,
//! changed or removed meanwhile fails the binary (see `common::at_start`). Tests write only under
//! temporary directories. The order cargo runs the binaries in plays no part.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The folders guarded, as (label, path).
pub fn guarded() -> Vec<(&'static str, PathBuf)> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let shared = std::env::var_os("NSYS_PERFETTO_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("../shared"));
    vec![("repo", repo), ("shared", shared)]
}

/// Every file under `root` (not following links), with size and modification time; `target`
/// and `.git` at the top are left out.
fn walk(root: &Path, rel: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(rd) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let path = rel.join(&name);
        if rel.as_os_str().is_empty() && (name == "target" || name == ".git") {
            continue;
        }
        let Ok(m) = std::fs::symlink_metadata(root.join(&path)) else {
            continue;
        };
        if m.is_dir() {
            walk(root, &path, out);
        } else {
            let t = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            out.insert(
                path.display().to_string(),
                format!("{} bytes, mtime {t}", m.len()),
            );
        }
    }
}

/// The state of every guarded folder: "label/path" -> "size, mtime".
pub fn state() -> BTreeMap<String, String> {
    state_of(&guarded())
}

/// The state of the folders `dirs`, as (label, path): "label/path" -> "size, mtime".
pub fn state_of(dirs: &[(&str, PathBuf)]) -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    for (label, dir) in dirs {
        let mut files = BTreeMap::new();
        walk(dir, Path::new(""), &mut files);
        all.extend(files.into_iter().map(|(k, v)| (format!("{label}/{k}"), v)));
    }
    all
}

/// What changed from `before` to `after`, one line per file.
pub fn changes(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in after {
        match before.get(k) {
            None => out.push(format!("created: {k} ({v})")),
            Some(w) if w != v => out.push(format!("changed: {k} ({w} -> {v})")),
            _ => {}
        }
    }
    for k in before.keys().filter(|k| !after.contains_key(*k)) {
        out.push(format!("removed: {k}"));
    }
    out
}
