//! `nsys-perfetto serve`: the local web page and HTTP API ([`crate::serve`] serves them) until
//! Ctrl-C.

use crate::args::ServeArgs;
use crate::outcome::Outcome;
use crate::serve::Server;
use anyhow::Result;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub fn run(args: &ServeArgs) -> Result<Outcome> {
    if !args.bind.is_loopback() {
        eprintln!(
            "warning: listening on {}: anyone who can reach this machine can upload files \
             and download the traces. Use the default 127.0.0.1 (with `ssh -L` from another \
             machine) unless this network is trusted.",
            args.bind
        );
    }
    let mut server = Server::start(args)?;
    // Ctrl-C stops the server; then the conversions' children and temporaries go too.
    let interrupts = nsys_perfetto_model::cleanup::stop_on_interrupt(&server.stop_flag());
    let shown = if server.addr.ip().is_unspecified() {
        format!("http://127.0.0.1:{}", server.addr.port())
    } else {
        server.url()
    };
    eprintln!("nsys-perfetto serve: open {shown}/ in a browser (Ctrl-C to stop)");
    eprintln!("  temporary files: {}", server.temp_dir().display());
    eprintln!(
        "  API: curl -T report.nsys-rep '{shown}/api/convert?name=report.nsys-rep' (see docs/serve.md)"
    );
    let stop = server.stop_flag();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    server.stop();
    drop(interrupts);
    let dir = server.temp_dir().to_path_buf();
    drop(server);
    // A conversion still under way holds the state, and with it the folder's owner.
    let _ = std::fs::remove_dir_all(&dir);
    nsys_perfetto_model::cleanup::forget(&dir);
    eprintln!("stopped; removed {}", dir.display());
    Ok(Outcome::Done)
}
