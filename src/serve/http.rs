//! A small HTTP/1.1 server on `std::net`, for `serve` and `open`: a thread per connection (with
//! a cap), keep-alive, request bodies by `Content-Length` or `chunked` streamed to the handler
//! (never buffered whole), `Expect: 100-continue`, and responses from memory or from a file.
//!
//! Robustness rules: a request head is at most 16 KiB and 100 headers; every socket read and
//! write has a timeout; a body the handler did not read is drained only when small, else the
//! connection is closed after the response; a malformed request gets a 400 and a close; a
//! panicking handler gets a 500. Nothing here allocates in proportion to what a client sends.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 100;
/// How long a kept-alive connection may stay silent before the next request.
const IDLE: Duration = Duration::from_secs(30);
/// How long one read or write of a request in progress may block.
const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// Unread request bodies up to this size are drained to keep the connection; larger ones close it.
const DRAIN_MAX: u64 = 256 * 1024;

/// A request: its head, and its body as a stream.
pub struct Request<'c> {
    pub method: String,
    /// The path, percent-decoded, without the query.
    pub path: String,
    /// The raw query string (after `?`), empty when none.
    pub query: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub peer: SocketAddr,
    pub body: Body<'c>,
}

impl Request<'_> {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// A query parameter, percent-decoded (`+` is a space).
    pub fn param(&self, name: &str) -> Option<String> {
        query_param(&self.query, name)
    }
}

/// A query parameter of a raw query string, percent-decoded (`+` is a space).
pub fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (percent_decode(&k.replace('+', " ")) == name).then(|| percent_decode(&v.replace('+', " ")))
    })
}

pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Percent-encode everything but RFC 3986's unreserved characters.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || b"-._~".contains(&c) {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    Length(u64),
    /// Bytes left in the current chunk; `None` before the next size line.
    Chunked(Option<u64>),
    Done,
}

/// A request body: read it like any `Read`. A malformed chunked body or a connection closed
/// early is an `io::Error` (`InvalidData` / `UnexpectedEof`).
pub struct Body<'c> {
    reader: &'c mut BufReader<TcpStream>,
    writer: &'c TcpStream,
    framing: Framing,
    /// `Expect: 100-continue` not yet answered: answered at the first read.
    must_continue: bool,
    /// The declared length, when `Content-Length` gave one.
    pub length: Option<u64>,
    /// Bytes of body read so far.
    pub read: u64,
    broken: bool,
}

impl Body<'_> {
    /// Whether every byte of the body has been read.
    pub fn finished(&self) -> bool {
        self.framing == Framing::Done
    }

    fn continue_if_asked(&mut self) -> io::Result<()> {
        if self.must_continue {
            self.must_continue = false;
            let mut w = self.writer;
            w.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            w.flush()?;
        }
        Ok(())
    }

    fn fail(&mut self, kind: io::ErrorKind, msg: &str) -> io::Error {
        self.broken = true;
        io::Error::new(kind, msg.to_string())
    }

    /// Read at most `left` more bytes of the body into `buf`; the connection closing first is
    /// the error `closed`.
    fn read_at_most(&mut self, buf: &mut [u8], left: u64, closed: &str) -> io::Result<usize> {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.reader.read(&mut buf[..want])?;
        if n == 0 {
            return Err(self.fail(io::ErrorKind::UnexpectedEof, closed));
        }
        self.read += n as u64;
        Ok(n)
    }
}

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() || self.framing == Framing::Done {
            return Ok(0);
        }
        if self.broken {
            return Err(io::Error::other("request body already failed"));
        }
        self.continue_if_asked()?;
        loop {
            match self.framing {
                Framing::Done => return Ok(0),
                Framing::Length(0) => {
                    self.framing = Framing::Done;
                    return Ok(0);
                }
                Framing::Length(left) => {
                    let n = self.read_at_most(
                        buf,
                        left,
                        "the connection closed before the whole body was sent",
                    )?;
                    self.framing = Framing::Length(left - n as u64);
                    if left == n as u64 {
                        self.framing = Framing::Done;
                    }
                    return Ok(n);
                }
                Framing::Chunked(None) => {
                    let line = match read_line(self.reader, 1024) {
                        Ok(Some(l)) => l,
                        Ok(None) => {
                            return Err(self.fail(
                                io::ErrorKind::UnexpectedEof,
                                "the connection closed in a chunked body",
                            ));
                        }
                        Err(e) => {
                            self.broken = true;
                            return Err(e);
                        }
                    };
                    let size = line.split(';').next().unwrap_or("").trim();
                    let Ok(size) = u64::from_str_radix(size, 16) else {
                        return Err(self.fail(io::ErrorKind::InvalidData, "bad chunk size"));
                    };
                    if size == 0 {
                        // Trailers, up to the empty line.
                        for _ in 0..MAX_HEADERS {
                            match read_line(self.reader, MAX_HEAD) {
                                Ok(Some(l)) if l.is_empty() => {
                                    self.framing = Framing::Done;
                                    return Ok(0);
                                }
                                Ok(Some(_)) => {}
                                _ => {
                                    return Err(
                                        self.fail(io::ErrorKind::InvalidData, "bad chunk trailer")
                                    );
                                }
                            }
                        }
                        return Err(self.fail(io::ErrorKind::InvalidData, "too many trailers"));
                    }
                    self.framing = Framing::Chunked(Some(size));
                }
                Framing::Chunked(Some(0)) => {
                    match read_line(self.reader, 2) {
                        Ok(Some(l)) if l.is_empty() => {}
                        _ => {
                            return Err(self.fail(
                                io::ErrorKind::InvalidData,
                                "chunk data not followed by CRLF",
                            ));
                        }
                    }
                    self.framing = Framing::Chunked(None);
                }
                Framing::Chunked(Some(left)) => {
                    let n = self.read_at_most(buf, left, "the connection closed in a chunk")?;
                    self.framing = Framing::Chunked(Some(left - n as u64));
                    return Ok(n);
                }
            }
        }
    }
}

/// One line without its CRLF (or bare LF); `None` at EOF before any byte. Longer than `max`:
/// an error, having read at most `max + 2` bytes.
fn read_line(r: &mut BufReader<TcpStream>, max: usize) -> io::Result<Option<String>> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return if line.is_empty() {
                Ok(None)
            } else {
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection closed mid-line",
                ))
            };
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        if line.len() > max + 2 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "line too long"));
        }
        if done {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return String::from_utf8(line)
                .map(Some)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "line is not UTF-8"));
        }
    }
}

/// What a response carries.
pub enum Payload {
    Bytes(Vec<u8>),
    /// A file streamed from disk, of this length.
    File(std::fs::File, u64),
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub payload: Payload,
    /// Called once the whole response has been written and flushed (for `open`: the trace was
    /// fetched).
    pub on_sent: Option<Box<dyn FnOnce() + Send>>,
}

impl Response {
    pub fn bytes(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            payload: Payload::Bytes(body.into()),
            on_sent: None,
        }
    }

    pub fn text(status: u16, body: &str) -> Response {
        Response::bytes(status, "text/plain; charset=utf-8", body)
    }

    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        Response::bytes(status, "application/json", value.to_string())
    }

    pub fn file(content_type: &str, file: std::fs::File) -> io::Result<Response> {
        let len = file.metadata()?.len();
        Ok(Response {
            status: 200,
            headers: vec![("Content-Type".into(), content_type.into())],
            payload: Payload::File(file, len),
            on_sent: None,
        })
    }

    pub fn header(mut self, name: &str, value: &str) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }
}

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        301 => "Moved Permanently",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Content",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// Write a response; true when all of it went out.
fn write_response(
    stream: &TcpStream,
    resp: &mut Response,
    head_only: bool,
    keep_alive: bool,
) -> io::Result<()> {
    let len = match &resp.payload {
        Payload::Bytes(b) => b.len() as u64,
        Payload::File(_, n) => *n,
    };
    let mut head = format!("HTTP/1.1 {} {}\r\n", resp.status, reason(resp.status));
    for (n, v) in &resp.headers {
        // Header values never carry line breaks.
        let v = v.replace(['\r', '\n'], " ");
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {len}\r\n"));
    head.push_str("Cache-Control: no-store\r\n");
    head.push_str(if keep_alive {
        "Connection: keep-alive\r\n\r\n"
    } else {
        "Connection: close\r\n\r\n"
    });
    let mut w = io::BufWriter::with_capacity(256 * 1024, stream);
    w.write_all(head.as_bytes())?;
    if !head_only {
        match &mut resp.payload {
            Payload::Bytes(b) => w.write_all(b)?,
            Payload::File(f, n) => {
                let copied = io::copy(&mut f.take(*n), &mut w)?;
                if copied != *n {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file shrank while it was sent",
                    ));
                }
            }
        }
    }
    w.flush()
}

/// A request head, parsed.
struct Head {
    method: String,
    target: String,
    version: String,
    headers: Vec<(String, String)>,
}

enum HeadError {
    /// The client went away or stayed silent: close without a word.
    Gone,
    Bad(u16, &'static str),
}

fn read_head(r: &mut BufReader<TcpStream>) -> Result<Head, HeadError> {
    let gone_or_bad = |e: io::Error| match e.kind() {
        io::ErrorKind::InvalidData => HeadError::Bad(400, "malformed request"),
        _ => HeadError::Gone,
    };
    // Tolerate empty lines before a request (RFC 9112 2.2).
    let mut line = String::new();
    for _ in 0..4 {
        match read_line(r, MAX_HEAD).map_err(gone_or_bad)? {
            None => return Err(HeadError::Gone),
            Some(l) if l.is_empty() => continue,
            Some(l) => {
                line = l;
                break;
            }
        }
    }
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Bad(400, "malformed request line"));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Err(HeadError::Bad(400, "malformed request line"));
    }
    let mut headers = Vec::new();
    let mut size = line.len();
    loop {
        let l = read_line(r, MAX_HEAD)
            .map_err(gone_or_bad)?
            .ok_or(HeadError::Gone)?;
        if l.is_empty() {
            break;
        }
        size += l.len();
        if size > MAX_HEAD || headers.len() >= MAX_HEADERS {
            return Err(HeadError::Bad(431, "request head too large"));
        }
        let Some((n, v)) = l.split_once(':') else {
            return Err(HeadError::Bad(400, "malformed header"));
        };
        if n.is_empty() || n.contains([' ', '\t']) {
            return Err(HeadError::Bad(400, "malformed header"));
        }
        headers.push((n.to_ascii_lowercase(), v.trim().to_string()));
    }
    Ok(Head {
        method: method.to_string(),
        target: target.to_string(),
        version: version.to_string(),
        headers,
    })
}

/// The handler of every request of a server.
pub type Handler = dyn Fn(&mut Request) -> Response + Send + Sync;

/// Serve requests on one connection until it closes, errs, stays idle or `stop` is set.
pub fn serve_connection(stream: TcpStream, handler: &Handler, stop: &AtomicBool) {
    let peer = match stream.peer_addr() {
        Ok(p) => p,
        Err(_) => return,
    };
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::with_capacity(64 * 1024, read_half);
    while !stop.load(Ordering::Relaxed) {
        let _ = stream.set_read_timeout(Some(IDLE));
        let head = match read_head(&mut reader) {
            Ok(h) => h,
            Err(HeadError::Gone) => return,
            Err(HeadError::Bad(status, msg)) => {
                let mut r = Response::text(status, msg);
                let _ = write_response(&stream, &mut r, false, false);
                linger_close(&stream, &mut reader);
                return;
            }
        };
        let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
        let get = |name: &str| {
            head.headers
                .iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        let te = get("transfer-encoding");
        let cl = get("content-length");
        let framing = if !te.is_empty() {
            if te.last().is_some_and(|v| {
                v.rsplit(',')
                    .next()
                    .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"))
            }) && cl.is_empty()
            {
                Framing::Chunked(None)
            } else {
                let mut r = Response::text(501, "unsupported Transfer-Encoding");
                let _ = write_response(&stream, &mut r, false, false);
                linger_close(&stream, &mut reader);
                return;
            }
        } else if cl.is_empty() {
            Framing::Done
        } else {
            let first = cl[0];
            match first.parse::<u64>() {
                Ok(n)
                    if cl.iter().all(|c| *c == first)
                        && first.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    if n == 0 {
                        Framing::Done
                    } else {
                        Framing::Length(n)
                    }
                }
                _ => {
                    let mut r = Response::text(400, "bad Content-Length");
                    let _ = write_response(&stream, &mut r, false, false);
                    linger_close(&stream, &mut reader);
                    return;
                }
            }
        };
        let connection = get("connection").join(",").to_ascii_lowercase();
        let mut keep_alive = if head.version == "HTTP/1.0" {
            connection.contains("keep-alive")
        } else {
            !connection.contains("close")
        };
        let must_continue = get("expect")
            .iter()
            .any(|v| v.eq_ignore_ascii_case("100-continue"));
        let (path, query) = match head.target.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (head.target.clone(), String::new()),
        };
        let length = match framing {
            Framing::Length(n) => Some(n),
            Framing::Done => Some(0),
            _ => None,
        };
        let mut req = Request {
            method: head.method.clone(),
            path: percent_decode(&path),
            query,
            headers: head.headers,
            peer,
            body: Body {
                reader: &mut reader,
                writer: &stream,
                framing,
                must_continue: must_continue && framing != Framing::Done,
                length,
                read: 0,
                broken: false,
            },
        };
        let mut resp =
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&mut req))) {
                Ok(r) => r,
                Err(_) => Response::text(500, "internal error (the handler panicked)"),
            };
        // An unread body: drain a small one (unless the client still waits for 100-continue,
        // then it sends nothing), else close after the response.
        if !req.body.finished() {
            let small = matches!(req.body.framing, Framing::Length(n) if n <= DRAIN_MAX);
            let drained = !req.body.broken
                && !req.body.must_continue
                && small
                && io::copy(&mut (&mut req.body).take(DRAIN_MAX), &mut io::sink()).is_ok()
                && req.body.finished();
            if !drained {
                keep_alive = false;
            }
        }
        let head_only = req.method == "HEAD";
        drop(req);
        let on_sent = resp.on_sent.take();
        let ok = write_response(&stream, &mut resp, head_only, keep_alive).is_ok();
        if ok && let Some(f) = on_sent {
            f();
        }
        if !ok {
            return;
        }
        if !keep_alive {
            linger_close(&stream, &mut reader);
            return;
        }
    }
}

/// Close after a response without losing it: stop writing, then read (and drop) what the
/// client still sends for a short while, so the kernel does not answer it with a reset that
/// could destroy the response before the client read it.
fn linger_close(stream: &TcpStream, reader: &mut BufReader<TcpStream>) {
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + Duration::from_secs(2);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = [0u8; 16 * 1024];
    let mut drained = 0u64;
    while Instant::now() < deadline && drained < 64 * 1024 * 1024 {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => drained += n as u64,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                continue;
            }
            Err(_) => break,
        }
    }
}

/// [`run`] on a thread of its own, which says `error: SERVER: ...` if it fails.
pub fn run_in_background(
    listener: TcpListener,
    handler: Arc<Handler>,
    stop: Arc<AtomicBool>,
    server: &'static str,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        if let Err(e) = run(&listener, handler, stop, 64) {
            eprintln!("error: {server}: {e}");
        }
    })
}

/// Accept connections until `stop` is set: a thread per connection, at most `max_connections`
/// at once (others get a 503).
pub fn run(
    listener: &TcpListener,
    handler: Arc<Handler>,
    stop: Arc<AtomicBool>,
    max_connections: usize,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let active = Arc::new(AtomicUsize::new(0));
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                if active.load(Ordering::SeqCst) >= max_connections {
                    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
                    let mut r = Response::text(503, "too many connections; try again");
                    let _ = write_response(&stream, &mut r, false, false);
                    let _ = stream.shutdown(Shutdown::Both);
                    continue;
                }
                active.fetch_add(1, Ordering::SeqCst);
                let (handler, stop, mine) = (handler.clone(), stop.clone(), active.clone());
                let spawned = std::thread::Builder::new()
                    .name("http".into())
                    .spawn(move || {
                        serve_connection(stream, &*handler, &stop);
                        mine.fetch_sub(1, Ordering::SeqCst);
                    });
                if spawned.is_err() {
                    // The closure (and its counter decrement) never ran.
                    active.fetch_sub(1, Ordering::SeqCst);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(25));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of file descriptors and the like: wait, then go on.
                eprintln!("warning: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    Ok(())
}

/// Bind with a clear message when the port is taken.
pub fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!(
                "port {} is busy on {}: another program listens there (find it with `ss -ltnp \
                 'sport = :{}'`); stop it or choose another port",
                addr.port(),
                addr.ip(),
                addr.port()
            )
        } else {
            anyhow::anyhow!("cannot listen on {addr}: {e}")
        }
    })
}

/// Whether a `Host` header names this machine's loopback: `127.x.y.z`, `localhost` or `[::1]`,
/// with any port.
pub fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        assert!(loopback_host("127.0.0.1:8080") && loopback_host("localhost"));
        assert!(loopback_host("[::1]:80") && loopback_host("LOCALHOST:1"));
        assert!(!loopback_host("evil.example:8080") && !loopback_host("10.0.0.1"));
    }

    #[test]
    fn percent_coding() {
        assert_eq!(percent_decode("a%20b%2Fc"), "a b/c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(
            percent_encode("my trace@1.pftrace"),
            "my%20trace%401.pftrace"
        );
        assert_eq!(
            query_param("name=a+b.sqlite&types=kernel%2Cnvtx", "types").as_deref(),
            Some("kernel,nvtx")
        );
        assert_eq!(
            query_param("name=a+b.sqlite", "name").as_deref(),
            Some("a b.sqlite")
        );
        assert_eq!(query_param("x", "x").as_deref(), Some(""));
        assert_eq!(query_param("", "x"), None);
    }
}
