//! A local Perfetto UI build served by our own HTTP server, for sites whose browsers cannot reach
//! ui.perfetto.dev (air-gapped clusters): `open --ui DIR` serves the UI at `/` and the trace
//! beside it, `serve --ui DIR` serves the UI under `/perfetto/` next to its page.
//!
//! A UI build is the directory holding Perfetto's `index.html` and its versioned folder
//! (`v52.0-6b9586def/`, `v58.2/`...): what `ui/build.mjs` writes to `out/ui/ui/dist`, what
//! Perfetto's release tarballs hold, or the copy `../shared/tools/perfetto-ui/setup.sh` fetches.
//! Files are served read-only, only from inside that directory.

use super::http::{self, Response};
use anyhow::{Context, Result, anyhow, bail};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where `open --ui` serves the trace, beside the UI's own files.
pub const TRACE_PREFIX: &str = "/nsys-perfetto/";
/// Where `serve --ui` serves the UI, beside its page and API.
pub const SERVE_PREFIX: &str = "/perfetto";

/// How to get a UI build, for messages.
pub const HOW_TO_GET: &str = "a Perfetto UI build is a directory with Perfetto's index.html and \
its version folder: unpack a release's ui.zip, build one (ui/build.mjs in Perfetto's source), or \
run ../shared/tools/perfetto-ui/setup.sh (docs/serve.md, \"Offline\")";

/// A Perfetto UI build on disk.
#[derive(Debug, Clone)]
pub struct UiDir {
    root: PathBuf,
}

impl UiDir {
    /// Check that `dir` looks like a Perfetto UI build; one clear line otherwise.
    pub fn open(dir: &Path) -> Result<UiDir> {
        if !dir.is_dir() {
            bail!("--ui {}: no such directory; {HOW_TO_GET}", dir.display());
        }
        let root = dir
            .canonicalize()
            .with_context(|| format!("--ui {}", dir.display()))?;
        let index = root.join("index.html");
        let text = std::fs::read_to_string(&index).unwrap_or_default();
        if !text.contains("perfetto") && !text.contains("Perfetto") {
            bail!(
                "--ui {}: not a Perfetto UI build (no Perfetto index.html in it); {HOW_TO_GET}",
                dir.display()
            );
        }
        Ok(UiDir { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file a request path (percent-decoded, relative to where the UI is mounted) names,
    /// if it is a file inside the build: `""` and `"/"` are `index.html`; `..`, absolute paths
    /// and links leading outside are refused.
    pub fn file(&self, rel: &str) -> Option<PathBuf> {
        let rel = rel.trim_start_matches('/');
        let rel = if rel.is_empty() { "index.html" } else { rel };
        let p = Path::new(rel);
        if p.components().any(|c| !matches!(c, Component::Normal(_))) || rel.contains('\\') {
            return None;
        }
        let full = self.root.join(p).canonicalize().ok()?;
        (full.starts_with(&self.root) && full.is_file()).then_some(full)
    }

    /// The answer to a GET or HEAD of `rel`.
    pub fn respond(&self, rel: &str) -> Response {
        let Some(path) = self.file(rel) else {
            return Response::text(404, "not found in the Perfetto UI build");
        };
        match std::fs::File::open(&path).and_then(|f| Response::file(content_type(&path), f)) {
            Ok(r) => r
                .header("X-Content-Type-Options", "nosniff")
                .header("Cache-Control", "no-cache"),
            Err(e) => Response::text(500, &format!("cannot read {}: {e}", path.display())),
        }
    }
}

/// The content type of a UI file, by its extension (the UI's engine needs `application/wasm`).
pub fn content_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "wasm" => "application/wasm",
        "json" | "map" => "application/json",
        "png" => "image/png",
        "svg" => "image/svg+xml",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "ttf" => "font/ttf",
        "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// A UI build served alone in the background (for `open --native --ui`: the trace is in the
/// native trace processor, the UI only needs its files). Stops when dropped.
pub struct Background {
    pub origin: String,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    pub fn start(ui: &UiDir, port: u16) -> Result<Background> {
        let listener = super::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .map_err(|e| anyhow!("{e:#} (the local UI for --native --ui needs it)"))?;
        let origin = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
        let stop = Arc::new(AtomicBool::new(false));
        let handler: Arc<http::Handler> = {
            let ui = ui.clone();
            Arc::new(move |req: &mut http::Request| {
                if !req.header("host").is_some_and(super::loopback_host) {
                    return Response::text(403, "only for 127.0.0.1");
                }
                if !matches!(req.method.as_str(), "GET" | "HEAD") {
                    return Response::text(405, "read-only");
                }
                ui.respond(&req.path)
            })
        };
        let thread =
            http::run_in_background(listener, handler, stop.clone(), "the local UI's server");
        Ok(Background {
            origin,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_stay_inside_the_build() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("ui");
        std::fs::create_dir_all(d.join("v1")).unwrap();
        std::fs::write(d.join("index.html"), "<title>Perfetto UI</title>").unwrap();
        std::fs::write(d.join("v1/a.wasm"), "x").unwrap();
        std::fs::write(t.path().join("outside.txt"), "x").unwrap();
        let ui = UiDir::open(&d).unwrap();
        assert!(ui.file("").unwrap().ends_with("index.html"));
        assert!(ui.file("/").unwrap().ends_with("index.html"));
        assert!(ui.file("/v1/a.wasm").unwrap().ends_with("a.wasm"));
        assert_eq!(
            content_type(&ui.file("v1/a.wasm").unwrap()),
            "application/wasm"
        );
        for bad in [
            "/../outside.txt",
            "/v1/../../outside.txt",
            "/v1",
            "/nope",
            "//etc/passwd",
        ] {
            assert!(ui.file(bad).is_none(), "{bad} served");
        }
        let e = UiDir::open(&d.join("v1")).unwrap_err().to_string();
        assert!(e.contains("not a Perfetto UI build"), "{e}");
    }
}
