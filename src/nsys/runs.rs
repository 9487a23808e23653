//! An external sort for small fixed-size integer records, with bounded memory: records are
//! sorted in chunks of [`RUN_RECORDS`]; a chunk that fills is written to a scratch file as a
//! sorted run, and reading merges the runs. Inputs that fit one chunk never touch the disk.
//!
//! Used where a join of two large tables would otherwise build SQLite b-trees (the flow links:
//! sorting nearly sorted integer keys costs far less than inserting them into an index).

use anyhow::{Context, Result};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

/// Records per in-memory chunk: 64 Ki records of at most 5 integers is 2.5 MB.
pub const RUN_RECORDS: usize = 1 << 16;

/// The chunk size: [`RUN_RECORDS`], or `NSYS_PERFETTO_RUN_RECORDS` (at least 16) so that tests
/// reach the spilling paths with small inputs.
fn run_records() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("NSYS_PERFETTO_RUN_RECORDS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(RUN_RECORDS, |n| n.max(16))
    })
}

/// Where runs are written: a scratch directory created on the first spill and removed (also on
/// interrupt) when the last user is dropped.
#[derive(Default)]
pub struct Spill {
    dir: Option<tempfile::TempDir>,
    next: usize,
}

impl Spill {
    fn file(&mut self) -> Result<(PathBuf, File)> {
        if self.dir.is_none() {
            self.dir = Some(crate::nsys::scratch_dir("nsys-perfetto-")?);
        }
        let dir = self.dir.as_ref().expect("created above");
        self.next += 1;
        let path = dir.path().join(format!("run{}", self.next));
        let file = File::create(&path)
            .with_context(|| format!("cannot write scratch file {}", path.display()))?;
        Ok((path, file))
    }
}

/// Collects records; [`Sorter::finish`] sorts them.
pub struct Sorter<const N: usize> {
    chunk: Vec<[i64; N]>,
    runs: Vec<PathBuf>,
}

impl<const N: usize> Default for Sorter<N> {
    fn default() -> Self {
        Sorter {
            chunk: Vec::new(),
            runs: Vec::new(),
        }
    }
}

impl<const N: usize> Sorter<N> {
    pub fn push(&mut self, rec: [i64; N], spill: &mut Spill) -> Result<()> {
        self.chunk.push(rec);
        if self.chunk.len() >= run_records() {
            self.write_run(spill)?;
        }
        Ok(())
    }

    fn write_run(&mut self, spill: &mut Spill) -> Result<()> {
        self.chunk.sort_unstable();
        let (path, file) = spill.file()?;
        let mut w = BufWriter::with_capacity(1 << 16, file);
        for rec in &self.chunk {
            for v in rec {
                w.write_all(&v.to_le_bytes())?;
            }
        }
        w.flush()
            .with_context(|| format!("cannot write scratch file {}", path.display()))?;
        self.chunk.clear();
        self.runs.push(path);
        Ok(())
    }

    pub fn finish(mut self, spill: &mut Spill) -> Result<Sorted<N>> {
        if self.runs.is_empty() {
            self.chunk.sort_unstable();
            self.chunk.shrink_to_fit();
            return Ok(Sorted {
                memory: self.chunk,
                runs: Vec::new(),
            });
        }
        if !self.chunk.is_empty() {
            self.write_run(spill)?;
        }
        Ok(Sorted {
            memory: Vec::new(),
            runs: std::mem::take(&mut self.runs),
        })
    }
}

/// Sorted records, in memory or as runs on disk; read them in order with [`Sorted::iter`] (any
/// number of times, from any thread).
pub struct Sorted<const N: usize> {
    memory: Vec<[i64; N]>,
    runs: Vec<PathBuf>,
}

impl<const N: usize> Sorted<N> {
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty() && self.runs.is_empty()
    }

    pub fn iter(&self) -> Result<Merge<'_, N>> {
        let mut readers = Vec::with_capacity(self.runs.len());
        for p in &self.runs {
            let f = File::open(p)
                .with_context(|| format!("cannot read scratch file {}", p.display()))?;
            readers.push(BufReader::with_capacity(1 << 15, f));
        }
        let mut m = Merge {
            memory: self.memory.iter(),
            readers,
            heap: BinaryHeap::new(),
        };
        for i in 0..m.readers.len() {
            if let Some(rec) = m.read(i)? {
                m.heap.push(Reverse((rec, i)));
            }
        }
        Ok(m)
    }
}

impl<const N: usize> Drop for Sorted<N> {
    fn drop(&mut self) {
        // Runs are not needed past their last reader; the directory goes with its `Spill`.
        for p in &self.runs {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Records of a [`Sorted`] in order.
pub struct Merge<'a, const N: usize> {
    memory: std::slice::Iter<'a, [i64; N]>,
    readers: Vec<BufReader<File>>,
    heap: BinaryHeap<Reverse<([i64; N], usize)>>,
}

impl<const N: usize> Merge<'_, N> {
    fn read(&mut self, i: usize) -> Result<Option<[i64; N]>> {
        let mut rec = [0i64; N];
        let mut b = [0u8; 8];
        for (k, v) in rec.iter_mut().enumerate() {
            match self.readers[i].read_exact(&mut b) {
                Ok(()) => *v = i64::from_le_bytes(b),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && k == 0 => {
                    return Ok(None);
                }
                Err(e) => return Err(e).context("cannot read a scratch file back"),
            }
        }
        Ok(Some(rec))
    }

    pub fn next_record(&mut self) -> Result<Option<[i64; N]>> {
        if self.readers.is_empty() {
            return Ok(self.memory.next().copied());
        }
        let Some(Reverse((rec, i))) = self.heap.pop() else {
            return Ok(None);
        };
        if let Some(n) = self.read(i)? {
            self.heap.push(Reverse((n, i)));
        }
        Ok(Some(rec))
    }
}

/// A sorted stream read beside a scan in the same key order (a table's rowids): for each key in
/// turn, the records whose first field is that key.
pub struct Lookup<'a, const N: usize> {
    merge: Merge<'a, N>,
    /// The next record not yet consumed.
    pending: Option<[i64; N]>,
}

impl<'a, const N: usize> Lookup<'a, N> {
    pub fn new(merge: Merge<'a, N>) -> Self {
        Lookup {
            merge,
            pending: None,
        }
    }

    /// Call `f` on each record whose first field is `key`, passing over those before it. Keys
    /// must come in increasing order.
    pub fn matching(&mut self, key: i64, mut f: impl FnMut([i64; N])) -> Result<()> {
        loop {
            if self.pending.is_none() {
                self.pending = self.merge.next_record()?;
            }
            match self.pending {
                Some(r) if r[0] == key => {
                    f(r);
                    self.pending = None;
                }
                Some(r) if r[0] < key => self.pending = None,
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted_of(recs: &[[i64; 2]]) -> Vec<[i64; 2]> {
        let mut spill = Spill::default();
        let mut s = Sorter::<2>::default();
        for r in recs {
            s.push(*r, &mut spill).unwrap();
        }
        let sorted = s.finish(&mut spill).unwrap();
        let mut out = Vec::new();
        let mut it = sorted.iter().unwrap();
        while let Some(r) = it.next_record().unwrap() {
            out.push(r);
        }
        // Twice: reading does not consume.
        let mut again = 0;
        let mut it = sorted.iter().unwrap();
        while it.next_record().unwrap().is_some() {
            again += 1;
        }
        assert_eq!(again, out.len());
        out
    }

    #[test]
    fn sorts_in_memory_and_across_runs() {
        for n in [0usize, 1, 1000, RUN_RECORDS, 3 * RUN_RECORDS + 17] {
            // A reversed, interleaved order with repeats.
            let recs: Vec<[i64; 2]> = (0..n as i64)
                .rev()
                .map(|i| [(i * 7919) % 1009, -i])
                .collect();
            let mut want = recs.clone();
            want.sort_unstable();
            assert_eq!(sorted_of(&recs), want, "{n} records");
        }
    }
}
