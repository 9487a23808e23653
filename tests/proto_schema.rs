//! Checks that our trimmed Perfetto schema in `proto/` is a faithful subset of
//! upstream Perfetto's schema, as shipped by the `perfetto_protos` 0.51.1
//! dev-dependency (`<crate root>/protos/perfetto/...`).
//!
//! For every message (nested ones included) and enum defined in `proto/`, the
//! same fully-qualified name must exist upstream, defined in the file with the
//! same path (ours: `perfetto/x/y.proto`, upstream: `protos/perfetto/x/y.proto`).
//! Every field we keep must match upstream's field of the same number in name,
//! type, type name, label, oneof membership and default value; every enum value
//! we keep must match upstream's value of the same number by name. Upstream
//! fields/values we dropped are fine (we are a subset).
//!
//! The upstream tree is located via `$PERFETTO_PROTOS_DIR` (override), else
//! `cargo metadata`, else `$CARGO_HOME/registry/src/*/perfetto_protos-0.51.1`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use prost_types::{DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorSet};

const UPSTREAM_VERSION: &str = "0.51.1";

/// Imports in upstream's .proto files look like "protos/perfetto/trace/...",
/// so upstream's include root is the crate root; ours is `proto/` and imports
/// look like "perfetto/trace/...". Our file `X` corresponds to upstream's
/// `protos/X`.
const UPSTREAM_PREFIX: &str = "protos/";

fn our_proto_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("proto")
}

fn is_upstream_root(dir: &Path) -> bool {
    let toml = match std::fs::read_to_string(dir.join("Cargo.toml")) {
        Ok(s) => s,
        Err(_) => return false,
    };
    dir.join("protos/perfetto/trace/trace_packet.proto")
        .is_file()
        && toml.contains("name = \"perfetto_protos\"")
        && toml.contains(&format!("version = \"{UPSTREAM_VERSION}\""))
}

/// Finds the `perfetto_protos` 0.51.1 source directory (its crate root).
fn upstream_root() -> PathBuf {
    let mut tried = Vec::new();

    if let Ok(dir) = std::env::var("PERFETTO_PROTOS_DIR") {
        let dir = PathBuf::from(dir);
        assert!(
            is_upstream_root(&dir),
            "PERFETTO_PROTOS_DIR={} is not a perfetto_protos {UPSTREAM_VERSION} crate root",
            dir.display()
        );
        return dir;
    }

    // 1. Ask cargo where the dev-dependency's sources are.
    let cargo = std::env::var("CARGO")
        .ok()
        .or_else(|| option_env!("CARGO").map(str::to_owned))
        .unwrap_or_else(|| "cargo".to_owned());
    match Command::new(&cargo)
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
    {
        Ok(out) if out.status.success() => {
            let json = String::from_utf8_lossy(&out.stdout);
            // Minimal scan for "manifest_path":"<path>" (no JSON dependency).
            const KEY: &str = "\"manifest_path\":\"";
            let mut rest = &json[..];
            while let Some(pos) = rest.find(KEY) {
                rest = &rest[pos + KEY.len()..];
                let end = rest.find('"').unwrap_or(rest.len());
                let manifest = rest[..end].replace("\\\\", "\\");
                rest = &rest[end..];
                if let Some(dir) = Path::new(&manifest).parent()
                    && is_upstream_root(dir)
                {
                    return dir.to_owned();
                }
            }
            tried.push(format!(
                "`{cargo} metadata` listed no perfetto_protos {UPSTREAM_VERSION}"
            ));
        }
        Ok(out) => tried.push(format!(
            "`{cargo} metadata` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => tried.push(format!("could not run `{cargo} metadata`: {e}")),
    }

    // 2. Look in cargo's registry source cache.
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    if let Some(cargo_home) = cargo_home {
        let src = cargo_home.join("registry/src");
        if let Ok(entries) = std::fs::read_dir(&src) {
            for entry in entries.flatten() {
                let dir = entry
                    .path()
                    .join(format!("perfetto_protos-{UPSTREAM_VERSION}"));
                if is_upstream_root(&dir) {
                    return dir;
                }
            }
        }
        tried.push(format!("nothing under {}", src.display()));
    }

    panic!(
        "cannot locate perfetto_protos {UPSTREAM_VERSION} sources (set PERFETTO_PROTOS_DIR):\n  {}",
        tried.join("\n  ")
    );
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

fn compare(ours: &FileDescriptorSet, upstream: &FileDescriptorSet) -> Vec<String> {
    let ours_defs = index(ours);
    let up_defs = index(upstream);
    let mut diffs = Vec::new();

    for f in &ours.file {
        let up_name = format!("{UPSTREAM_PREFIX}{}", f.name());
        match upstream.file.iter().find(|u| u.name() == up_name) {
            None => diffs.push(format!("file {}: no upstream file {up_name}", f.name())),
            Some(u) => {
                if u.package() != f.package() {
                    diffs.push(format!(
                        "file {}: package {:?}, upstream {:?}",
                        f.name(),
                        f.package(),
                        u.package()
                    ));
                }
                if u.syntax() != f.syntax() {
                    diffs.push(format!(
                        "file {}: syntax {:?}, upstream {:?}",
                        f.name(),
                        f.syntax(),
                        u.syntax()
                    ));
                }
            }
        }
    }

    for (name, (file, m)) in &ours_defs.messages {
        let Some((up_file, um)) = up_defs.messages.get(name) else {
            diffs.push(format!("message {name} ({file}): not found upstream"));
            continue;
        };
        if *up_file != format!("{UPSTREAM_PREFIX}{file}") {
            diffs.push(format!(
                "message {name}: defined in {file}, upstream in {up_file}"
            ));
        }
        for f in &m.field {
            let ours_sig = field_sig(m, f);
            match um.field.iter().find(|u| u.number() == f.number()) {
                None => diffs.push(format!(
                    "message {name}: field {ours_sig}: no upstream field number {}{}",
                    f.number(),
                    um.field
                        .iter()
                        .find(|u| u.name() == f.name())
                        .map(|u| format!(" (upstream has {})", field_sig(um, u)))
                        .unwrap_or_default()
                )),
                Some(u) => {
                    let up_sig = field_sig(um, u);
                    if ours_sig != up_sig {
                        diffs.push(format!(
                            "message {name}: field {ours_sig} != upstream {up_sig}"
                        ));
                    }
                }
            }
        }
    }

    for (name, (file, e)) in &ours_defs.enums {
        let Some((up_file, ue)) = up_defs.enums.get(name) else {
            diffs.push(format!("enum {name} ({file}): not found upstream"));
            continue;
        };
        if *up_file != format!("{UPSTREAM_PREFIX}{file}") {
            diffs.push(format!(
                "enum {name}: defined in {file}, upstream in {up_file}"
            ));
        }
        for v in &e.value {
            match ue.value.iter().find(|u| u.number() == v.number()) {
                Some(u) if u.name() == v.name() => {}
                Some(u) => diffs.push(format!(
                    "enum {name}: value {} = {} != upstream {} = {}",
                    v.name(),
                    v.number(),
                    u.name(),
                    u.number()
                )),
                None => diffs.push(format!(
                    "enum {name}: value {} = {}: no upstream value with that number",
                    v.name(),
                    v.number()
                )),
            }
        }
    }
    diffs
}

#[test]
fn proto_subset_matches_upstream_perfetto() {
    let ours_root = our_proto_root();
    let mut files = Vec::new();
    collect_protos(&ours_root, &mut files);
    files.sort();
    assert!(
        !files.is_empty(),
        "no .proto files under {}",
        ours_root.display()
    );

    let ours = protox::compile(&files, [&ours_root])
        .unwrap_or_else(|e| panic!("compiling our proto/ tree: {e:?}"));

    // Compile only the upstream counterparts of our files (plus whatever they
    // import, which protox resolves from the crate root).
    let up_root = upstream_root();
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

    // Guard against a vacuous pass.
    let defs = index(&ours);
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
    let n_fields: usize = defs.messages.values().map(|(_, m)| m.field.len()).sum();
    let n_values: usize = defs.enums.values().map(|(_, e)| e.value.len()).sum();

    let diffs = compare(&ours, &upstream);
    if !diffs.is_empty() {
        let mut msg = format!(
            "proto/ differs from upstream perfetto_protos {UPSTREAM_VERSION} ({}) in {} place(s):\n",
            up_root.display(),
            diffs.len()
        );
        for d in &diffs {
            let _ = writeln!(msg, "  - {d}");
        }
        panic!("{msg}");
    }
    eprintln!(
        "proto/ matches upstream ({}): {} files, {} messages ({n_fields} fields), {} enums ({n_values} values)",
        up_root.display(),
        ours.file.len(),
        defs.messages.len(),
        defs.enums.len()
    );
}
