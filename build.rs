//! Compiles the Perfetto protobuf schema subset in `proto/` into Rust code.
//!
//! No system `protoc` is needed: `protox` (a pure-Rust protobuf compiler)
//! parses the `.proto` files into a `FileDescriptorSet`, which is handed to
//! `prost_build::Config::compile_fds`. The generated module is written to
//! `$OUT_DIR/perfetto.protos.rs` and included by `crates/write/src/proto.rs`.
//!
//! This is the writing crate's build script (`crates/write/Cargo.toml` names it); the schema
//! stays at the repository's top, in `proto/`.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

fn collect_protos(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_protos(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            out.push(path);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    // The writing crate's folder is crates/write; the schema is two levels up.
    let proto_root = manifest_dir.join("../../proto");

    // A directory path makes cargo rescan everything below it for changes.
    println!("cargo:rerun-if-changed=../../proto");
    println!("cargo:rerun-if-changed=../../build.rs");

    let mut files = Vec::new();
    collect_protos(&proto_root, &mut files)?;
    files.sort(); // deterministic output
    if files.is_empty() {
        return Err(format!("no .proto files found under {}", proto_root.display()).into());
    }

    // Imports inside the .proto files are relative to `proto/`
    // (e.g. "perfetto/trace/trace_packet.proto").
    let fds = protox::compile(&files, [&proto_root])?;

    prost_build::Config::new().compile_fds(fds)?;
    Ok(())
}
