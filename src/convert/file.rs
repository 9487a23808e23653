//! The output file: a temporary beside it renamed into place on success (or a device, or
//! standard output), and the thread that writes the readers' chunks into it.

use anyhow::{Context, Result, anyhow, bail};
use nsys_perfetto_model::errors::{os_error, write_error};
use nsys_perfetto_model::model::Description;
use nsys_perfetto_write::output::{Chunk, Format, Placed, WellKnown};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Receiver;

/// What the file writer receives: a source's description before its chunks, then its chunks.
pub(super) enum ToFile {
    Source(usize, Arc<Description>),
    Chunk(Chunk),
}

/// Whether two paths name the same file (device and inode), however spelled or linked.
pub fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// `-o -`: the trace goes to standard output.
pub fn is_stdout(output: &Path) -> bool {
    output.as_os_str() == "-"
}

/// Where a conversion writes.
pub(super) enum Target {
    /// A temporary beside the output, renamed into place on success (removed otherwise).
    Temp(Option<tempfile::NamedTempFile>),
    /// A device node, FIFO or socket (`-o /dev/null`): written through, never replaced.
    Direct(std::fs::File),
    Stdout,
}

impl Target {
    pub(super) fn open(output: &Path, inputs: &[&Path]) -> Result<Target> {
        if is_stdout(output) {
            return Ok(Target::Stdout);
        }
        if inputs.iter().any(|input| same_file(output, input)) {
            bail!(
                "-o {} is the input itself: choose another output name",
                output.display()
            );
        }
        match std::fs::metadata(output) {
            Ok(m) if m.is_dir() => bail!("-o {} is a directory", output.display()),
            Ok(m) if !m.is_file() => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(output)
                    .map_err(|e| anyhow!("cannot write {}: {}", output.display(), os_error(&e)))?;
                return Ok(Target::Direct(f));
            }
            _ => {}
        }
        let out_dir = match output.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        match std::fs::metadata(&out_dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => bail!(
                "cannot write {}: {} is not a folder",
                output.display(),
                out_dir.display()
            ),
            Err(_) => bail!(
                "cannot write {}: the folder {} does not exist",
                output.display(),
                out_dir.display()
            ),
        }
        // What runs killed with SIGKILL left here.
        nsys_perfetto_model::cleanup::remove_dead(&out_dir, TEMP_BASE, ".part");
        let tmp = nsys_perfetto_model::cleanup::create(
            || {
                tempfile::Builder::new()
                    .prefix(&nsys_perfetto_model::cleanup::prefix(TEMP_BASE))
                    .suffix(".part")
                    .tempfile_in(&out_dir)
            },
            |t| t.path().to_path_buf(),
        )
        .map_err(|e| write_error(&out_dir, &e))?;
        Ok(Target::Temp(Some(tmp)))
    }

    /// Any format can be gzipped whole: Perfetto and chrome://tracing read .gz files.
    pub(super) fn gzip(&self, output: &Path) -> bool {
        matches!(self, Target::Temp(_)) && output.extension().is_some_and(|e| e == "gz")
    }

    pub(super) fn writer(&self) -> Result<Box<dyn Write + Send>> {
        Ok(match self {
            Target::Temp(t) => Box::new(t.as_ref().expect("open").as_file().try_clone()?),
            Target::Direct(f) => Box::new(f.try_clone()?),
            Target::Stdout => Box::new(std::io::stdout()),
        })
    }

    /// Put the output in place; the size on disk when it is a file.
    pub(super) fn finish(mut self, output: &Path) -> Result<Option<u64>> {
        let Target::Temp(tmp) = &mut self else {
            return Ok(None);
        };
        let tmp = tmp.take().expect("open");
        // Temporary files are private (0600); the trace is an ordinary file, readable like any
        // other.
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = tmp
                .as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644));
        }
        let path = tmp.path().to_path_buf();
        let done = tmp
            .persist(output)
            .map_err(|e| anyhow!("cannot create {}: {}", output.display(), os_error(&e.error)));
        nsys_perfetto_model::cleanup::forget(&path);
        done?;
        Ok(std::fs::metadata(output).ok().map(|m| m.len()))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Target::Temp(Some(t)) = self {
            nsys_perfetto_model::cleanup::forget(t.path());
        }
    }
}

/// The name start of output temporaries: `.nsys-perfetto-<pid>-XXXXXX.part`.
const TEMP_BASE: &str = ".nsys-perfetto-";

/// Write the file, gzip-compressed when asked. Returns the bytes written before compression.
pub(super) fn write_file<F: Format>(
    file: Box<dyn Write + Send>,
    rx: Receiver<ToFile>,
    format: &F,
    placed: &[Placed],
    record: Option<&str>,
    gzip: bool,
) -> Result<u64> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let bytes = if gzip {
        let mut gz = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
        let bytes = write_chunks(&mut gz, rx, format, placed, record)?;
        gz.finish().context("cannot write output")?;
        bytes
    } else {
        write_chunks(&mut out, rx, format, placed, record)?
    };
    out.flush().context("cannot write output")?;
    Ok(bytes)
}

fn write_chunks<F: Format, W: Write>(
    out: &mut W,
    rx: Receiver<ToFile>,
    format: &F,
    placed: &[Placed],
    record: Option<&str>,
) -> Result<u64> {
    let mut described: HashSet<WellKnown> = HashSet::new();
    // The description of each source whose chunks may still come (one at a time, in order).
    let mut sources: Vec<Option<Arc<Description>>> = Vec::new();
    let mut bytes = 0u64;
    let mut put = |out: &mut W, data: &[u8]| -> Result<()> {
        out.write_all(data).context("cannot write output")?;
        bytes += data.len() as u64;
        Ok(())
    };
    put(out, &format.header())?;
    // Formats whose records are separated (JSON's commas) write each record with a leading
    // separator; the very first record after the header drops it.
    let mut first = true;
    let mut put_record = |out: &mut W, data: &[u8]| -> Result<()> {
        let mut data = data;
        if first && !data.is_empty() {
            if let Some(sep) = format.record_separator() {
                data = data.strip_prefix(sep).unwrap_or(data);
            }
            first = false;
        }
        put(out, data)
    };
    put_record(out, &format.preamble(placed))?;
    for msg in rx {
        let chunk = match msg {
            ToFile::Source(i, desc) => {
                // Sources come in order; the previous one has sent all its chunks.
                sources.iter_mut().for_each(|s| *s = None);
                sources.resize(sources.len().max(i + 1), None);
                sources[i] = Some(desc);
                continue;
            }
            ToFile::Chunk(c) => c,
        };
        for wk in chunk.requires {
            if described.insert(wk)
                && let Some(Some(desc)) = sources.get(wk.source())
            {
                put_record(out, &format.describe_well_known(wk, desc))?;
            }
        }
        put_record(out, &chunk.data)?;
        nsys_perfetto_write::output::recycle(chunk.data);
    }
    put(out, &format.footer(placed, record))?;
    Ok(bytes)
}
