//! The files guard (`common::guard`), which fails a test binary whose tests created, changed or
//! removed a file of `../shared` or of the repository: it recorded them as this binary started,
//! and it tells each kind of change, and nothing else, on a folder made for the purpose.

use crate::common::{FILES_AT_START, guard};

#[test]
fn the_binary_recorded_the_guarded_files_as_it_started() {
    let at_start = FILES_AT_START
        .get()
        .expect("the guard's record, made before any test ran");
    assert!(
        at_start.contains_key("repo/Cargo.toml"),
        "{:?}",
        at_start.keys().take(5).collect::<Vec<_>>()
    );
    assert!(
        !at_start
            .keys()
            .any(|k| k.starts_with("repo/target/") || k.starts_with("repo/.git/")),
        "the build and git's files are not guarded"
    );
}

#[test]
fn the_guard_tells_files_created_changed_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    for d in ["tests/data", "target"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for f in ["README.md", "tests/data/table", "gone.txt"] {
        std::fs::write(root.join(f), "before").unwrap();
    }
    let dirs = [("repo", root.clone())];
    let before = guard::state_of(&dirs);
    assert_eq!(before.len(), 3, "{before:?}");
    assert!(guard::changes(&before, &guard::state_of(&dirs)).is_empty());

    std::fs::write(root.join("tests/data/table"), "after, longer").unwrap();
    std::fs::remove_file(root.join("gone.txt")).unwrap();
    std::fs::write(root.join("new.txt"), "new").unwrap();
    std::fs::write(root.join("target/build-output"), "ignored").unwrap();
    let mut found = guard::changes(&before, &guard::state_of(&dirs));
    found.sort();
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(
        found[0].starts_with("changed: repo/tests/data/table (6 bytes"),
        "{found:?}"
    );
    assert!(
        found[1].starts_with("created: repo/new.txt (3 bytes"),
        "{found:?}"
    );
    assert_eq!(found[2], "removed: repo/gone.txt");
}
