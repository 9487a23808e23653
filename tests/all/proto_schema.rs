//! Checks that our trimmed Perfetto schema in `proto/` is a faithful subset of upstream
//! Perfetto's schema, without compiling upstream's (the `perfetto_protos` crate and its
//! rust-protobuf code generator took most of a cold `cargo test`).
//!
//! The reference is `tests/data/perfetto_protos-0.51.1.schema`, a table derived from the
//! `.proto` files of the `perfetto_protos` 0.51.1 crate (Perfetto v51.1): for every message and
//! enum that `proto/` defines, upstream's file, every upstream field (name, number, label, type,
//! type name, oneof, default, packed) and every upstream enum value. It was written by this test
//! (`NSYS_PERFETTO_BLESS_SCHEMA=1 cargo test --release --test all proto_schema`) with the crate's
//! sources in `~/.cargo/registry/src/*/perfetto_protos-0.51.1/` (a `cargo fetch` of a project
//! depending on it), parsing them with `protox`, the compiler `crates/write/build.rs` uses.
//!
//! - `proto_subset_matches_upstream_table`: every file, message, enum, field and value of ours
//!   has the same signature in the table (fields by number, values by number). Upstream
//!   fields/values we dropped are fine (we are a subset). Always runs.
//! - `upstream_table_is_derived_from_perfetto_protos`: when upstream's sources are on this
//!   machine (`$PERFETTO_PROTOS_DIR`, else the cargo registry), the table is derived afresh and
//!   must equal the committed one; otherwise the check is recorded as a skip (requirement
//!   `upstream-protos`).

use crate::common::skip;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use prost_types::{DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorSet};

const UPSTREAM_VERSION: &str = "0.51.1";

/// Imports in upstream's .proto files look like "protos/perfetto/trace/...", so upstream's
/// include root is the crate root; ours is `proto/` and imports look like "perfetto/trace/...".
/// Our file `X` corresponds to upstream's `protos/X`.
const UPSTREAM_PREFIX: &str = "protos/";

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn table_path() -> PathBuf {
    manifest_dir().join(format!(
        "tests/data/perfetto_protos-{UPSTREAM_VERSION}.schema"
    ))
}

fn is_upstream_root(dir: &Path) -> bool {
    let Ok(toml) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
        return false;
    };
    dir.join("protos/perfetto/trace/trace_packet.proto")
        .is_file()
        && toml.contains("name = \"perfetto_protos\"")
        && toml.contains(&format!("version = \"{UPSTREAM_VERSION}\""))
}

/// The `perfetto_protos` 0.51.1 source directory (its crate root), when on this machine.
fn upstream_root() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("PERFETTO_PROTOS_DIR") {
        let dir = PathBuf::from(dir);
        return if is_upstream_root(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "PERFETTO_PROTOS_DIR={} is not a perfetto_protos {UPSTREAM_VERSION} crate root",
                dir.display()
            ))
        };
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let src = cargo_home.join("registry/src");
    if let Ok(entries) = std::fs::read_dir(&src) {
        for entry in entries.flatten() {
            let dir = entry
                .path()
                .join(format!("perfetto_protos-{UPSTREAM_VERSION}"));
            if is_upstream_root(&dir) {
                return Ok(dir);
            }
        }
    }
    Err(format!(
        "perfetto_protos {UPSTREAM_VERSION} sources are not under {}/*/ (set PERFETTO_PROTOS_DIR)",
        src.display()
    ))
}

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_protos(&path, out);
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
}

/// A message or enum definition, keyed by fully-qualified name (".a.b.C").
struct Defs<'a> {
    messages: BTreeMap<String, (&'a str, &'a DescriptorProto)>,
    enums: BTreeMap<String, (&'a str, &'a EnumDescriptorProto)>,
}

fn index(fds: &FileDescriptorSet) -> Defs<'_> {
    fn add_enum<'a>(defs: &mut Defs<'a>, file: &'a str, scope: &str, e: &'a EnumDescriptorProto) {
        let name = format!("{scope}.{}", e.name());
        assert!(
            defs.enums.insert(name.clone(), (file, e)).is_none(),
            "duplicate {name}"
        );
    }
    fn add_msg<'a>(defs: &mut Defs<'a>, file: &'a str, scope: &str, m: &'a DescriptorProto) {
        let name = format!("{scope}.{}", m.name());
        for nested in &m.nested_type {
            add_msg(defs, file, &name, nested);
        }
        for e in &m.enum_type {
            add_enum(defs, file, &name, e);
        }
        assert!(
            defs.messages.insert(name.clone(), (file, m)).is_none(),
            "duplicate {name}"
        );
    }
    let mut defs = Defs {
        messages: BTreeMap::new(),
        enums: BTreeMap::new(),
    };
    for f in &fds.file {
        let scope = if f.package().is_empty() {
            String::new()
        } else {
            format!(".{}", f.package())
        };
        for m in &f.message_type {
            add_msg(&mut defs, f.name(), &scope, m);
        }
        for e in &f.enum_type {
            add_enum(&mut defs, f.name(), &scope, e);
        }
    }
    defs
}

fn oneof_name(m: &DescriptorProto, f: &FieldDescriptorProto) -> Option<String> {
    f.oneof_index.map(|i| {
        m.oneof_decl
            .get(i as usize)
            .map_or_else(|| format!("<bad oneof index {i}>"), |o| o.name().to_owned())
    })
}

/// Everything about a field that affects the wire format / generated API.
fn field_sig(m: &DescriptorProto, f: &FieldDescriptorProto) -> String {
    format!(
        "{} = {} [{:?} {:?}{}{}{}{}]",
        f.name(),
        f.number(),
        f.label(),
        f.r#type(),
        f.type_name
            .as_deref()
            .map(|t| format!(" {t}"))
            .unwrap_or_default(),
        oneof_name(m, f)
            .map(|o| format!(" oneof {o}"))
            .unwrap_or_default(),
        f.default_value
            .as_deref()
            .map(|d| format!(" default={d}"))
            .unwrap_or_default(),
        f.options
            .as_ref()
            .and_then(|o| o.packed)
            .map(|p| format!(" packed={p}"))
            .unwrap_or_default(),
    )
}

fn ours() -> FileDescriptorSet {
    let root = manifest_dir().join("proto");
    let mut files = Vec::new();
    collect_protos(&root, &mut files);
    files.sort();
    assert!(
        !files.is_empty(),
        "no .proto files under {}",
        root.display()
    );
    protox::compile(&files, [&root]).unwrap_or_else(|e| panic!("compiling our proto/ tree: {e:?}"))
}

/// The table lines of `fds`, for the files, messages and enums named in `scope` (all of them
/// when `None`). File names lose `strip` (upstream's `protos/`) so that both sides compare.
fn table_of(fds: &FileDescriptorSet, strip: &str, scope: Option<&Scope>) -> BTreeSet<String> {
    let defs = index(fds);
    let file = |f: &str| f.strip_prefix(strip).unwrap_or(f).to_string();
    let mut lines = BTreeSet::new();
    for f in &fds.file {
        let name = file(f.name());
        if scope.is_none_or(|s| s.files.contains(&name)) {
            lines.insert(format!(
                "file {name} package={} syntax={}",
                f.package(),
                f.syntax()
            ));
        }
    }
    for (name, (f, m)) in &defs.messages {
        if scope.is_some_and(|s| !s.messages.contains(name)) {
            continue;
        }
        lines.insert(format!("message {name} in {}", file(f)));
        for fld in &m.field {
            lines.insert(format!("field {name} {}", field_sig(m, fld)));
        }
    }
    for (name, (f, e)) in &defs.enums {
        if scope.is_some_and(|s| !s.enums.contains(name)) {
            continue;
        }
        lines.insert(format!("enum {name} in {}", file(f)));
        for v in &e.value {
            lines.insert(format!("value {name} {} = {}", v.name(), v.number()));
        }
    }
    lines
}

/// What `proto/` defines.
struct Scope {
    files: BTreeSet<String>,
    messages: BTreeSet<String>,
    enums: BTreeSet<String>,
}

fn scope_of(fds: &FileDescriptorSet) -> Scope {
    let defs = index(fds);
    Scope {
        files: fds.file.iter().map(|f| f.name().to_string()).collect(),
        messages: defs.messages.keys().cloned().collect(),
        enums: defs.enums.keys().cloned().collect(),
    }
}

fn read_table() -> BTreeSet<String> {
    let p = table_path();
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The key a line is compared by: fields by message and number, values by enum and number,
/// anything else by its first three words.
fn key(line: &str) -> String {
    let w: Vec<&str> = line.split_whitespace().collect();
    match w.first() {
        Some(&"field") => format!("field {} {}", w[1], w.get(4).unwrap_or(&"")),
        Some(&"value") => format!("value {} {}", w[1], w.get(4).unwrap_or(&"")),
        _ => w.iter().take(2).copied().collect::<Vec<_>>().join(" "),
    }
}

#[test]
fn proto_subset_matches_upstream_table() {
    let ours = ours();
    let defs = index(&ours);
    // Guard against a vacuous pass.
    for required in [
        ".perfetto.protos.Trace",
        ".perfetto.protos.TracePacket",
        ".perfetto.protos.TracePacketDefaults",
        ".perfetto.protos.ClockSnapshot",
        ".perfetto.protos.ClockSnapshot.Clock",
        ".perfetto.protos.InternedData",
        ".perfetto.protos.InternedString",
        ".perfetto.protos.TrackEvent",
        ".perfetto.protos.TrackEventDefaults",
        ".perfetto.protos.EventCategory",
        ".perfetto.protos.EventName",
        ".perfetto.protos.DebugAnnotation",
        ".perfetto.protos.DebugAnnotationName",
        ".perfetto.protos.TrackDescriptor",
        ".perfetto.protos.ProcessDescriptor",
        ".perfetto.protos.ThreadDescriptor",
        ".perfetto.protos.CounterDescriptor",
    ] {
        assert!(
            defs.messages.contains_key(required),
            "proto/ lacks message {required}"
        );
    }
    let table = read_table();
    let upstream: BTreeMap<String, &String> = table.iter().map(|l| (key(l), l)).collect();
    assert_eq!(upstream.len(), table.len(), "the table has duplicate keys");
    let mine = table_of(&ours, "", None);
    let mut diffs = Vec::new();
    for line in &mine {
        match upstream.get(&key(line)) {
            Some(u) if *u == line => {}
            Some(u) => diffs.push(format!("ours: {line}\n    upstream: {u}")),
            None => diffs.push(format!(
                "ours: {line}\n    upstream: nothing with this {} (a message or enum new to proto/ \
                 needs the table re-derived: see the top of tests/all/proto_schema.rs)",
                if line.starts_with("field") || line.starts_with("value") {
                    "number"
                } else {
                    "name"
                }
            )),
        }
    }
    let n_fields = mine.iter().filter(|l| l.starts_with("field ")).count();
    let n_values = mine.iter().filter(|l| l.starts_with("value ")).count();
    assert!(
        diffs.is_empty(),
        "proto/ differs from upstream perfetto_protos {UPSTREAM_VERSION} ({}) in {} place(s):\n  - {}",
        table_path().display(),
        diffs.len(),
        diffs.join("\n  - ")
    );
    assert!(
        n_fields > 100 && n_values > 10,
        "{n_fields} fields, {n_values} values"
    );
}

#[test]
fn upstream_table_is_derived_from_perfetto_protos() {
    let up_root = match upstream_root() {
        Ok(d) => d,
        Err(why) => {
            skip("upstream-protos", &why);
            return;
        }
    };
    let ours = ours();
    let scope = scope_of(&ours);
    let up_files: Vec<String> = ours
        .file
        .iter()
        .map(|f| format!("{UPSTREAM_PREFIX}{}", f.name()))
        .collect();
    let upstream = protox::Compiler::new([&up_root])
        .and_then(|mut c| {
            c.include_imports(true).open_files(&up_files)?;
            Ok(c.file_descriptor_set())
        })
        .unwrap_or_else(|e| panic!("compiling upstream protos in {}: {e:?}", up_root.display()));
    let derived = table_of(&upstream, UPSTREAM_PREFIX, Some(&scope));
    let mut text = format!(
        "# Perfetto's schema (perfetto_protos {UPSTREAM_VERSION} crate, protos/ = Perfetto v51.1), \
         restricted to the files, messages\n# and enums that proto/ defines: every upstream field \
         and enum value of those. Derived by tests/all/proto_schema.rs\n\
         # (NSYS_PERFETTO_BLESS_SCHEMA=1) with protox; do not edit by hand.\n"
    );
    for l in &derived {
        let _ = writeln!(text, "{l}");
    }
    if std::env::var_os("NSYS_PERFETTO_BLESS_SCHEMA").is_some() {
        std::fs::create_dir_all(table_path().parent().unwrap()).unwrap();
        std::fs::write(table_path(), &text).unwrap();
    }
    let committed = read_table();
    let missing: Vec<&String> = derived.difference(&committed).collect();
    let extra: Vec<&String> = committed.difference(&derived).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{} is not what {} gives (NSYS_PERFETTO_BLESS_SCHEMA=1 rewrites it):\n  upstream only: {missing:?}\n  table only: {extra:?}",
        table_path().display(),
        up_root.display()
    );
}
