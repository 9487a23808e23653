//! nsys' Arrow export (`nsys export --type arrowdir`, a directory `REPORT_arwdir` of one `.arrow`
//! file a table) as an input, against the SQLite export of the same report:
//! - exactness: corpus reports exported both ways by nsys 2023.4.4 at test time convert to traces
//!   of the same trace_processor content (`bench/content.py`: per category count, sums of ts and
//!   dur, names, args, flows, counters, samples, sched), and the Arrow one passes `tpcheck
//!   --strict`;
//! - workflows: `stats`, `analyze`, `extract` print the same from both, `--types`,
//!   `--time-range` and `--pid` select the same trace, two arrowdirs merge as their SQLite twins;
//! - bad input: a truncated table, a table of garbage bytes, an empty `x_arwdir`: one line naming
//!   the file, exit 1, no output; a missing table converts without its events; a batch folder
//!   holding an arrowdir beside other inputs;
//! - the shipped fixture (`tests/fixtures/arrow/`, see its `gen.sh`), converted without nsys,
//!   against its SQLite twin;
//! - the single-file export (`--type arrow`, `REPORT.arrows`) against the SQLite export and
//!   the arrowdir, and cut short.

use crate::common::{self, skip};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");

/// The reports of the exactness check: GPU kernels with NVTX (AI-Profiler), GPU metrics
/// (als244), an MPI rank of a multi-GPU job in a `.qdrep`, CPU samples with OSRT call chains
/// (lawrencium), NVTX ranges projected onto the GPU (AI-Profiler's NVTX baseline).
const EXACT: &[&str] = &[
    "openhackathons-org__AI-Profiler__firstOptimization.nsys-rep",
    "als244__ResourceEstimation__reports_report2.nsys-rep",
    "openhackathons-org__gpubootcamp__mpi_report1.qdrep",
    "hypdeb__lawrencium__report1.nsys-rep",
    "openhackathons-org__AI-Profiler__baseline_nvtx.nsys-rep",
];

/// nsys 2023.4 or newer (the first with `--type arrowdir`), when installed.
pub(crate) fn nsys_2023() -> Option<PathBuf> {
    let candidates = nsys_perfetto::report::finding::nsys_candidates(None).unwrap_or_default();
    let fixed = PathBuf::from("/opt/nvidia/nsight-systems/2023.4.4/bin/nsys");
    let found = candidates
        .into_iter()
        .map(|(p, _)| p)
        .chain(fixed.is_file().then_some(fixed))
        .find(|p| {
            Command::new(p).arg("--version").output().is_ok_and(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .any(|w| {
                        let mut parts = w.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
                        matches!((parts.next(), parts.next()),
                            (Some(y), Some(m)) if y > 2023 || y == 2023 && m >= 4)
                    })
            })
        });
    if found.is_none() {
        skip("nsys", "nsys 2023.4 or newer (Arrow export) not found");
    }
    found
}

fn corpus() -> Option<PathBuf> {
    let dir = common::corpus_dir();
    if dir.is_none() {
        skip("corpus", "../shared/corpus is absent");
    }
    dir
}

/// Export a copy of `report` (in `dir`) as SQLite and as an arrowdir, as nsys names them:
/// (`dir/STEM.sqlite`, `dir/STEM_arwdir`).
fn export_twins(nsys: &Path, report: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    (
        nsys_export(nsys, report, dir, "sqlite", ".sqlite"),
        nsys_export(nsys, report, dir, "arrowdir", "_arwdir"),
    )
}

/// `nsys export --type KIND` of a copy of `report` (in `dir`) into `dir/STEM{suffix}`.
pub(crate) fn nsys_export(
    nsys: &Path,
    report: &Path,
    dir: &Path,
    kind: &str,
    suffix: &str,
) -> PathBuf {
    let name = report.file_name().unwrap().to_str().unwrap();
    let stem = Path::new(name).file_stem().unwrap().to_str().unwrap();
    let copy = dir.join(name);
    std::fs::copy(report, &copy).unwrap();
    let out = dir.join(format!("{stem}{suffix}"));
    let o = Command::new(nsys)
        .current_dir(dir)
        .args(["export", "--type", kind, "-o"])
        .arg(&out)
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        o.status.success() && out.exists(),
        "nsys export --type {kind} {name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::remove_file(&copy).unwrap();
    out
}

fn cli<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(BIN)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run nsys-perfetto")
}

/// Run the CLI and return its standard output, failing on a non-zero exit.
fn cli_ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    let o = cli(&args);
    assert!(
        o.status.success(),
        "nsys-perfetto {args:?}: exit {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Convert `input` into `out` with `extra` options.
fn convert(input: &Path, out: &Path, extra: &[&str]) {
    let mut args: Vec<&OsStr> = vec![input.as_os_str(), OsStr::new("-q"), OsStr::new("-o")];
    args.push(out.as_os_str());
    args.extend(extra.iter().map(OsStr::new));
    cli_ok(args);
    assert!(out.is_file(), "{} was not written", out.display());
}

/// The digest's lines of one kind (`slices`, `counters`, ...).
fn facts<'a>(digest: &'a [String], kind: &str) -> Vec<&'a str> {
    let prefix = format!("{kind}\t");
    digest
        .iter()
        .filter_map(|l| l.strip_prefix(&prefix))
        .collect()
}

/// The first number of a digest line of `kind` (its count), 0 when absent.
fn count(digest: &[String], kind: &str) -> u64 {
    facts(digest, kind)
        .first()
        .and_then(|l| l.split('\t').next()?.parse().ok())
        .unwrap_or(0)
}

/// Events per slice category, from a digest's `slices` lines.
fn per_category(digest: &[String]) -> BTreeMap<String, u64> {
    facts(digest, "slices")
        .into_iter()
        .map(|l| {
            let mut f = l.split('\t');
            let cat = f.next().unwrap().to_string();
            (cat, f.next().unwrap().parse().unwrap())
        })
        .collect()
}

/// Assert two traces hold the same content, and return the digest.
fn assert_same_content(sqlite_trace: &Path, arrow_trace: &Path, what: &str) -> Option<Vec<String>> {
    let from_sqlite = common::content_digest(sqlite_trace)?;
    let from_arrow = common::content_digest(arrow_trace)?;
    if from_sqlite != from_arrow {
        let mut diff = String::new();
        for l in from_sqlite.iter().filter(|l| !from_arrow.contains(l)) {
            diff += &format!("  sqlite only: {l}\n");
        }
        for l in from_arrow.iter().filter(|l| !from_sqlite.contains(l)) {
            diff += &format!("  arrow only:  {l}\n");
        }
        panic!("{what}: the Arrow export's trace differs from the SQLite export's:\n{diff}");
    }
    Some(from_arrow)
}

fn tpcheck_clean(trace: &Path) {
    if let Some(Err(report)) = common::tpcheck(trace) {
        panic!("tpcheck --strict {}: {report}", trace.display());
    }
}

#[test]
fn corpus_reports_convert_to_the_same_content_as_from_sqlite() {
    let (Some(nsys), Some(corpus)) = (nsys_2023(), corpus()) else {
        return;
    };
    common::par_map(EXACT, |name| {
        let dir = tempfile::tempdir().unwrap();
        let (sqlite, arrow) = export_twins(&nsys, &corpus.join(name), dir.path());
        let (a, s) = (dir.path().join("a.pftrace"), dir.path().join("s.pftrace"));
        convert(&sqlite, &s, &[]);
        convert(&arrow, &a, &[]);
        common::validate_file(&a);
        let Some(digest) = assert_same_content(&s, &a, name) else {
            return;
        };
        tpcheck_clean(&a);
        // What each report is in the sample for is in both traces, not absent from both.
        let cats = per_category(&digest);
        assert!(cats.values().sum::<u64>() > 0, "{name}: no slices");
        match *name {
            n if n.starts_with("als244") => {
                assert!(count(&digest, "counters") > 0, "{name}: GPU metrics")
            }
            n if n.starts_with("hypdeb") => {
                assert!(count(&digest, "samples") > 0, "{name}: CPU samples");
                // Samples and their frames out of id order convert as in order: the readers
                // read such tables in order through SQL rather than as they lie.
                for table in ["COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS"] {
                    rewrite_halves_swapped(&arrow, table);
                }
                let b = dir.path().join("b.pftrace");
                convert(&arrow, &b, &[]);
                assert_same_content(&s, &b, &format!("{name}, samples out of order"));
            }
            n if n.contains("mpi_report") => {
                assert!(count(&digest, "flows") > 0, "{name}: launch flows")
            }
            _ => assert!(
                cats.keys().any(|c| c.contains("nvtx")),
                "{name}: NVTX ranges, in {cats:?}"
            ),
        }
        if name.ends_with("baseline_nvtx.nsys-rep") {
            // NVTX ranges projected onto the GPU, by SQL over the virtual tables.
            let (a, s) = (dir.path().join("ga.pftrace"), dir.path().join("gs.pftrace"));
            convert(&sqlite, &s, &["--types", "nvtx-gpu"]);
            convert(&arrow, &a, &["--types", "nvtx-gpu"]);
            let Some(digest) = assert_same_content(&s, &a, "--types nvtx-gpu") else {
                return;
            };
            assert!(
                per_category(&digest).values().sum::<u64>() > 0,
                "{name}: NVTX projected on the GPU"
            );
        }
    });
}

/// `stats`, `analyze` and `extract` print the same from both exports but for the file's name.
#[test]
fn workflows_print_the_same_from_both() {
    let (Some(nsys), Some(corpus)) = (nsys_2023(), corpus()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (sqlite, arrow) = export_twins(
        &nsys,
        &corpus.join("openhackathons-org__AI-Profiler__firstOptimization.nsys-rep"),
        dir.path(),
    );
    let sqlite_name = sqlite.file_name().unwrap().to_str().unwrap().to_string();
    let arrow_name = arrow.file_name().unwrap().to_str().unwrap().to_string();
    let same = |args: &[&str]| {
        let from = |input: &Path| {
            let mut a: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
            a.push(input.as_os_str());
            cli_ok(a)
        };
        let s = from(&sqlite).replace(&sqlite_name, "EXPORT");
        let a = from(&arrow).replace(&arrow_name, "EXPORT");
        assert_eq!(
            s, a,
            "nsys-perfetto {args:?}: SQLite (left) and Arrow (right)"
        );
        assert!(
            s.lines().count() > 2,
            "{args:?} printed next to nothing:\n{s}"
        );
        s
    };
    let stats = same(&["stats", "--csv"]);
    for report in ["cuda_api_sum", "cuda_gpu_kern_sum", "nvtx_sum"] {
        assert!(stats.contains(report), "stats has {report}:\n{stats}");
    }
    same(&["stats", "--csv", "--nvtx-gpu", "-r", "nvtx_gpu_proj_sum"]);
    same(&["analyze", "--csv"]);
    same(&["extract", "--csv", "-e", "cudaMemcpy", "-e", "re:.*"]);
}

/// Selections run SQL over the virtual tables: `--types` and `--time-range` (on a report with
/// CPU samples, OSRT calls and scheduling) and `--pid` (on a report of 4 processes) select the
/// same trace from both exports.
#[test]
fn selections_select_the_same_from_both() {
    let (Some(nsys), Some(corpus)) = (nsys_2023(), corpus()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let samples = export_twins(
        &nsys,
        &corpus.join("hypdeb__lawrencium__report1.nsys-rep"),
        dir.path(),
    );
    let processes = export_twins(
        &nsys,
        &corpus.join("quasiben__nvtx-examples__multiprocessing.qdrep"),
        dir.path(),
    );
    // A process with NVTX ranges, of several.
    let pid: i64 = rusqlite::Connection::open(&processes.0)
        .unwrap()
        .query_row(
            "SELECT globalTid / 0x1000000 % 0x1000000 FROM NVTX_EVENTS \
             WHERE globalTid IS NOT NULL ORDER BY start LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let pid = pid.to_string();
    let selections: [(&(PathBuf, PathBuf), &[&str]); 4] = [
        (&samples, &["--types", "kernel,cuda-api,cpu-samples"]),
        (&samples, &["--types=-osrt,-sched"]),
        (&samples, &["--time-range", "1s..1.5s"]),
        (&processes, &["--pid", &pid]),
    ];
    for (i, ((sqlite, arrow), sel)) in selections.into_iter().enumerate() {
        let (a, s, w) = (
            dir.path().join(format!("a{i}.pftrace")),
            dir.path().join(format!("s{i}.pftrace")),
            dir.path().join(format!("w{i}.pftrace")),
        );
        convert(sqlite, &s, sel);
        convert(arrow, &a, sel);
        convert(sqlite, &w, &[]);
        let Some(digest) = assert_same_content(&s, &a, &format!("{sel:?}")) else {
            return;
        };
        let Some(whole) = common::content_digest(&w) else {
            return;
        };
        // The selection kept something and left something out.
        let kept: u64 = per_category(&digest).values().sum();
        let all: u64 = per_category(&whole).values().sum();
        assert!(kept > 0 && kept < all, "{sel:?}: {kept} of {all} slices");
    }
}

/// Two MPI ranks' arrowdirs merge into the trace their SQLite exports merge into.
#[test]
fn merge_of_two_arrowdirs_equals_that_of_their_sqlite_twins() {
    let (Some(nsys), Some(corpus)) = (nsys_2023(), corpus()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut sqlites = Vec::new();
    let mut arrows = Vec::new();
    for r in ["mpi_report1", "mpi_report2"] {
        let report = corpus.join(format!("openhackathons-org__gpubootcamp__{r}.qdrep"));
        let (s, a) = export_twins(&nsys, &report, dir.path());
        sqlites.push(s);
        arrows.push(a);
    }
    let merged = |inputs: &[PathBuf], out: &Path| {
        let mut args: Vec<&OsStr> = vec![OsStr::new("merge"), OsStr::new("-q")];
        args.extend([OsStr::new("-o"), out.as_os_str()]);
        args.extend(inputs.iter().map(|p| p.as_os_str()));
        cli_ok(args);
    };
    let (a, s) = (dir.path().join("a.pftrace"), dir.path().join("s.pftrace"));
    merged(&sqlites, &s);
    merged(&arrows, &a);
    common::validate_file(&a);
    let Some(digest) = assert_same_content(&s, &a, "merge") else {
        return;
    };
    assert!(
        facts(&digest, "processes").first().is_some_and(|l| l
            .split('\t')
            .nth(1)
            .is_some_and(|pids| pids.parse::<u32>().unwrap() >= 2)),
        "both ranks' processes: {:?}",
        facts(&digest, "processes")
    );
    tpcheck_clean(&a);
}

/// The shipped fixture (`tests/fixtures/arrow/kmeans_arwdir`), copied into `dir`.
fn fixture_copy(dir: &Path) -> PathBuf {
    let to = dir.join("kmeans_arwdir");
    std::fs::create_dir(&to).unwrap();
    for e in std::fs::read_dir(common::fixture("arrow/kmeans_arwdir")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    to
}

/// Events per category as the converter counted them, and as the validator decoded them.
fn counts(input: &Path, dir: &Path) -> BTreeMap<String, u64> {
    let out = dir.join(format!(
        "{}.pftrace",
        input.file_name().unwrap().to_str().unwrap()
    ));
    let summary = nsys_perfetto::convert::convert_export(
        input,
        &out,
        &nsys_perfetto::convert::Options::default(),
    )
    .unwrap_or_else(|e| panic!("converting {}: {e:#}", input.display()));
    let decoded = common::validate_file(&out).count_by_category();
    let written: u64 = summary.events.iter().sum();
    assert_eq!(
        written,
        decoded.values().sum::<u64>(),
        "{}: events the summary counts and the trace holds",
        input.display()
    );
    decoded
}

/// The shipped arrowdir converts with no nsys, to the events its SQLite twin converts to: the
/// twin exported now where nsys 2023.4 and the corpus are here, else the shipped one.
#[test]
fn shipped_fixture_converts_as_its_sqlite_twin() {
    let dir = tempfile::tempdir().unwrap();
    let arrow = fixture_copy(dir.path());
    let from_arrow = counts(&arrow, dir.path());
    let shipped_twin = dir.path().join("kmeans.sqlite");
    std::fs::copy(common::fixture("arrow/kmeans.sqlite"), &shipped_twin).unwrap();
    let from_shipped = counts(&shipped_twin, dir.path());
    assert_eq!(
        from_arrow, from_shipped,
        "arrowdir (left), shipped twin (right)"
    );
    for cat in ["cuda.kernel", "cuda.memcpy", "cuda.api", "cuda.sync"] {
        assert!(
            from_arrow.get(cat).is_some_and(|&n| n > 0),
            "{cat} in {from_arrow:?}"
        );
    }
    let fresh = common::corpus_dir()
        .map(|c| c.join("martisu1631998__kmeans-parallel__report2.qdrep"))
        .filter(|r| r.is_file());
    match (fresh, nsys_2023()) {
        (Some(report), Some(nsys)) => {
            let now = dir.path().join("now");
            std::fs::create_dir(&now).unwrap();
            let (sqlite, fresh_arrow) = export_twins(&nsys, &report, &now);
            assert_eq!(
                from_arrow,
                counts(&sqlite, &now),
                "shipped arrowdir (left), SQLite exported now (right)"
            );
            assert_eq!(
                from_arrow,
                counts(&fresh_arrow, &now),
                "shipped arrowdir (left), arrowdir exported now (right): remake with gen.sh"
            );
        }
        (None, _) => skip(
            "corpus",
            "the fixture's report is absent: compared with the shipped twin only",
        ),
        (_, None) => {}
    }
}

/// Rewrite the `.arrow` file of `table` in `dir` with its rows' second half before its first.
fn rewrite_halves_swapped(dir: &Path, table: &str) {
    let path = dir.join(format!("{table}.arrow"));
    let reader =
        arrow_ipc::reader::StreamReader::try_new(std::fs::File::open(&path).unwrap(), None)
            .unwrap();
    let schema = reader.schema();
    let batches: Vec<_> = reader.map(Result::unwrap).collect();
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert!(total >= 2, "{table}: {total} rows");
    let (mut first, mut second) = (Vec::new(), Vec::new());
    let mut row = 0;
    for b in &batches {
        let n = b.num_rows();
        let cut = (total / 2).clamp(row, row + n) - row;
        first.push(b.slice(0, cut));
        second.push(b.slice(cut, n - cut));
        row += n;
    }
    let mut w =
        arrow_ipc::writer::StreamWriter::try_new(std::fs::File::create(&path).unwrap(), &schema)
            .unwrap();
    for b in second.iter().chain(&first).filter(|b| b.num_rows() > 0) {
        w.write(b).unwrap();
    }
    w.finish().unwrap();
}

/// The progress bar's total: an Arrow export's tables give their last rowid without a scan,
/// and it equals what SQLite's `max(rowid)` says of the twin.
#[test]
fn estimated_rows_equal_the_sqlite_twins() {
    use nsys_perfetto_read::source::Export;
    let dir = tempfile::tempdir().unwrap();
    let arrow = fixture_copy(dir.path());
    let twin = dir.path().join("kmeans.sqlite");
    std::fs::copy(common::fixture("arrow/kmeans.sqlite"), &twin).unwrap();
    let from_arrow = Export::open(&arrow).unwrap().estimated_rows();
    let from_sqlite = Export::open(&twin).unwrap().estimated_rows();
    assert_eq!(from_arrow, from_sqlite);
    assert!(from_arrow > 1000, "{from_arrow}");
}

/// Convert `input` with the CLI into `out_dir/out.pftrace` and expect one line on stderr naming
/// `names` and saying one of `reasons`, exit 1, and nothing written.
fn expect_failure(input: &Path, out_dir: &Path, names: &str, reasons: &[&str]) {
    let output = out_dir.join("out.pftrace");
    let before = listing(out_dir);
    let o = cli([input.as_os_str(), OsStr::new("-o"), output.as_os_str()]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let ctx = format!("{}: exit {:?}\n{stderr}", input.display(), o.status.code());
    assert!(!stderr.contains("panicked"), "a panic: {ctx}");
    assert_eq!(o.status.code(), Some(1), "exit 1: {ctx}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {ctx}");
    assert!(lines[0].contains(names), "names {names}: {ctx}");
    let lower = lines[0].to_lowercase();
    assert!(
        reasons.iter().any(|r| lower.contains(r)),
        "says one of {reasons:?}: {ctx}"
    );
    assert_eq!(listing(out_dir), before, "nothing written: {ctx}");
    // The workflows read it with the same checks.
    for cmd in ["stats", "analyze"] {
        let o = cli([OsStr::new(cmd), input.as_os_str()]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(
            o.status.code() == Some(1) && lines.len() == 1 && lines[0].contains(names),
            "{cmd} {}: exit {:?}, want one line naming {names}:\n{stderr}",
            input.display(),
            o.status.code()
        );
    }
    assert_eq!(listing(out_dir), before, "nothing written: {ctx}");
}

fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn truncated_table_is_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let arrow = fixture_copy(dir.path());
    let table = arrow.join("CUPTI_ACTIVITY_KIND_RUNTIME.arrow");
    let len = std::fs::metadata(&table).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&table)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    expect_failure(
        &arrow,
        dir.path(),
        "CUPTI_ACTIVITY_KIND_RUNTIME.arrow",
        &["truncated", "damaged"],
    );
}

/// Where the first non-empty buffer of the first record batch of an Arrow IPC stream records
/// its offset in the message body.
fn first_buffer_offset_field(bytes: &[u8]) -> usize {
    let word = |at: usize| i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let mut pos = 0;
    loop {
        let mut len = word(pos);
        pos += 4;
        if len == -1 {
            len = word(pos);
            pos += 4;
        }
        assert!(len > 0, "no record batch with a buffer");
        let meta = &bytes[pos..pos + len as usize];
        let message = arrow_ipc::root_as_message(meta).unwrap();
        if let Some(buffers) = message.header_as_record_batch().and_then(|b| b.buffers())
            && let Some(b) = buffers.iter().find(|b| b.length() > 0)
        {
            return b as *const _ as usize - bytes.as_ptr() as usize;
        }
        pos += len as usize + message.bodyLength() as usize;
    }
}

/// A damaged file whose record batch puts a buffer outside its message (Arrow's decoder
/// trusts the offset, and panicked inside SQLite's call, an abort): one line, as any damage.
#[test]
fn buffer_outside_its_message_is_one_line_naming_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let arrow = fixture_copy(dir.path());
    let table = arrow.join("CUPTI_ACTIVITY_KIND_KERNEL.arrow");
    let mut bytes = std::fs::read(&table).unwrap();
    let at = first_buffer_offset_field(&bytes);
    bytes[at..at + 8].copy_from_slice(&(1i64 << 28).to_le_bytes());
    std::fs::write(&table, bytes).unwrap();
    expect_failure(
        &arrow,
        dir.path(),
        "CUPTI_ACTIVITY_KIND_KERNEL.arrow",
        &["damaged"],
    );
}

/// The metadata (the flatbuffer header: batch length, field nodes, buffers) of the first record
/// batch of an Arrow IPC stream, as a byte range of the file.
fn first_batch_header(bytes: &[u8]) -> Option<std::ops::Range<usize>> {
    let word = |at: usize| Some(i32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let mut pos = 0;
    loop {
        let mut len = word(pos)?;
        pos += 4;
        if len == -1 {
            len = word(pos)?;
            pos += 4;
        }
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        let message = arrow_ipc::root_as_message(bytes.get(pos..pos + len)?).ok()?;
        if message.header_as_record_batch().is_some() {
            return Some(pos..pos + len);
        }
        pos += len + usize::try_from(message.bodyLength()).ok()?;
    }
}

/// A fixed sequence of numbers (xorshift64*), so that a failure repeats.
struct Seeded(u64);

impl Seeded {
    /// The next number below `n`.
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
    }

    /// Damage `bytes` one of three ways: bits flipped inside `flips`, a cut anywhere, or 64
    /// bytes zeroed anywhere; says which.
    fn damage(&mut self, bytes: &mut Vec<u8>, flips: std::ops::Range<usize>) -> &'static str {
        match self.below(3) {
            0 => {
                for _ in 0..1 + self.below(4) {
                    let at = flips.start + self.below(flips.len());
                    bytes[at] ^= 1 << self.below(8);
                }
                "bits flipped"
            }
            1 => {
                bytes.truncate(self.below(bytes.len()));
                "cut"
            }
            _ => {
                let at = self.below(bytes.len());
                let end = (at + 64).min(bytes.len());
                bytes[at..end].fill(0);
                "64 bytes zeroed"
            }
        }
    }
}

/// Convert the damaged `input` into `out`, and print its `stats`: each succeeds, or fails with
/// exit 1 and one line naming `name`, never a panic, and a failed conversion writes nothing.
fn survives_damage(input: &Path, out: &Path, name: &str, what: &str) {
    for convert in [true, false] {
        let o = if convert {
            cli([
                input.as_os_str(),
                OsStr::new("-q"),
                OsStr::new("-o"),
                out.as_os_str(),
            ])
        } else {
            cli([OsStr::new("stats"), input.as_os_str()])
        };
        let stderr = String::from_utf8_lossy(&o.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        let ctx = format!(
            "{what}, {}: exit {:?}\n{stderr}",
            if convert { "convert" } else { "stats" },
            o.status.code()
        );
        assert!(!stderr.contains("panicked"), "a panic: {ctx}");
        match o.status.code() {
            Some(0) => {}
            Some(1) => {
                assert!(lines.len() == 1 && lines[0].contains(name), "{ctx}");
                assert!(!convert || !out.exists(), "output left behind: {ctx}");
            }
            _ => panic!("{ctx}"),
        }
    }
    let _ = std::fs::remove_file(out);
}

/// Seeded damage to the fixture's tables where Arrow's decoder trusts what it reads (bits
/// flipped in a record batch's header, the stream cut anywhere, runs of zeros): every run of
/// the conversion and of `stats` either succeeds or fails with exit 1 and one line naming the
/// table, never a panic, and a failed conversion writes nothing.
#[test]
fn seeded_damage_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let arrow = fixture_copy(dir.path());
    let tables: Vec<PathBuf> = listing(&arrow)
        .into_iter()
        .filter(|p| std::fs::metadata(p).unwrap().len() > 2000)
        .collect();
    let mut seeded = Seeded(0x9e37_79b9_7f4a_7c15);
    let out = dir.path().join("out.pftrace");
    for case in 0..60 {
        let table = &tables[seeded.below(tables.len())];
        let original = std::fs::read(table).unwrap();
        let mut bytes = original.clone();
        let header = first_batch_header(&bytes).expect("a record batch");
        let how = seeded.damage(&mut bytes, header);
        std::fs::write(table, &bytes).unwrap();
        let name = table.file_name().unwrap().to_str().unwrap();
        survives_damage(&arrow, &out, name, &format!("case {case}, {name}: {how}"));
        std::fs::write(table, original).unwrap();
    }
}

#[test]
fn garbage_table_is_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let arrow = fixture_copy(dir.path());
    let garbage: Vec<u8> = (0..40_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    std::fs::write(arrow.join("CUPTI_ACTIVITY_KIND_KERNEL.arrow"), garbage).unwrap();
    expect_failure(
        &arrow,
        dir.path(),
        "CUPTI_ACTIVITY_KIND_KERNEL.arrow",
        &["damaged", "not an arrow", "arrow"],
    );
}

#[test]
fn empty_arwdir_is_not_an_export() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("x_arwdir");
    std::fs::create_dir(&empty).unwrap();
    expect_failure(&empty, dir.path(), "x_arwdir", &["not an", "no ", "empty"]);
}

/// A table nsys did not write converts as a report without those events.
#[test]
fn missing_table_converts_without_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let arrow = fixture_copy(dir.path());
    let whole = counts(&arrow, dir.path());
    std::fs::remove_file(arrow.join("CUPTI_ACTIVITY_KIND_KERNEL.arrow")).unwrap();
    let less = counts(&arrow, dir.path());
    let mut want = whole.clone();
    assert!(want.remove("cuda.kernel").is_some_and(|n| n > 0));
    assert_eq!(less, want, "all but the kernels");
}

/// NVTX_EVENTS deleted from a real arrowdir with NVTX: converts, without the NVTX ranges.
#[test]
fn missing_nvtx_table_converts_without_nvtx() {
    let (Some(nsys), Some(corpus)) = (nsys_2023(), corpus()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_, arrow) = export_twins(
        &nsys,
        &corpus.join("quasiben__nvtx-examples__multiprocessing.qdrep"),
        dir.path(),
    );
    let whole = counts(&arrow, dir.path());
    std::fs::remove_file(arrow.join("NVTX_EVENTS.arrow")).unwrap();
    let less = counts(&arrow, dir.path());
    assert!(
        whole.keys().any(|c| c.starts_with("nvtx")) && !less.keys().any(|c| c.starts_with("nvtx")),
        "NVTX before {whole:?}, none after {less:?}"
    );
    assert!(
        less.values().sum::<u64>() > 0,
        "the rest converts: {less:?}"
    );
}

/// A folder holding an arrowdir and another export converts both, the arrowdir to
/// `REPORT.pftrace` beside it; an arrowdir beside the SQLite export of the same report converts
/// once.
#[test]
fn batch_folder_with_an_arrowdir() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("runs");
    std::fs::create_dir(&folder).unwrap();
    let arrow = fixture_copy(&folder);
    std::fs::copy(
        common::fixture("nvtx_workload.sqlite"),
        folder.join("nvtx_workload.sqlite"),
    )
    .unwrap();
    cli_ok([folder.as_os_str(), OsStr::new("-q")]);
    let out = folder.join("kmeans.pftrace");
    let want = counts(&arrow, dir.path());
    assert_eq!(common::validate_file(&out).count_by_category(), want);
    assert!(folder.join("nvtx_workload.pftrace").is_file());
    assert!(
        !arrow.join("kmeans_arwdir.pftrace").exists() && listing(&arrow).len() > 60,
        "nothing written inside the arrowdir"
    );
    // With the SQLite twin beside it: one trace of the report.
    std::fs::remove_file(&out).unwrap();
    std::fs::remove_file(folder.join("nvtx_workload.pftrace")).unwrap();
    std::fs::copy(
        common::fixture("arrow/kmeans.sqlite"),
        folder.join("kmeans.sqlite"),
    )
    .unwrap();
    let o = cli([folder.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(common::validate_file(&out).count_by_category(), want);
    let pftraces: Vec<PathBuf> = listing(&folder)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "pftrace"))
        .collect();
    assert_eq!(pftraces.len(), 2, "{pftraces:?}");
}

/// Export the corpus report `name` with nsys into `dir` as SQLite and as `kind` (named
/// `STEM{suffix}`), convert the SQLite export and the other one (to its default output,
/// `STEM.pftrace`, named after the report), and check that the two traces hold the same
/// content, with slices, and that the other one passes `tpcheck --strict`. The two exports;
/// `None` where content cannot be compared here.
fn converts_as_its_sqlite_twin(
    nsys: &Path,
    corpus: &Path,
    name: &str,
    dir: &Path,
    kind: &str,
    suffix: &str,
) -> Option<(PathBuf, PathBuf)> {
    let report = corpus.join(name);
    let sqlite = nsys_export(nsys, &report, dir, "sqlite", ".sqlite");
    let export = nsys_export(nsys, &report, dir, kind, suffix);
    let s = dir.join("s.pftrace");
    convert(&sqlite, &s, &[]);
    cli_ok([export.as_os_str(), OsStr::new("-q")]);
    let stem = Path::new(name).file_stem().unwrap().to_str().unwrap();
    let e = dir.join(format!("{stem}.pftrace"));
    assert!(e.is_file(), "{name}: no {}", e.display());
    let digest = assert_same_content(&s, &e, name)?;
    assert!(
        per_category(&digest).values().sum::<u64>() > 0,
        "{name}: no slices"
    );
    tpcheck_clean(&e);
    Some((sqlite, export))
}

/// nsys' single-file Arrow export (`--type arrow`, `REPORT.arrows`: every table's stream one
/// after another) converts to the content of the SQLite export of the same report, names its
/// trace after the report, and its workflows print the same.
#[test]
fn arrows_files_convert_as_their_sqlite_twins() {
    let (Some(nsys), Some(corpus)) = (nsys_2023(), corpus()) else {
        return;
    };
    for name in [EXACT[0], EXACT[3]] {
        let dir = tempfile::tempdir().unwrap();
        let Some((sqlite, arrows)) =
            converts_as_its_sqlite_twin(&nsys, &corpus, name, dir.path(), "arrow", ".arrows")
        else {
            return;
        };
        let stem = Path::new(name).file_stem().unwrap().to_str().unwrap();
        let (sqlite_name, arrows_name) = (format!("{stem}.sqlite"), format!("{stem}.arrows"));
        for args in [&["stats", "--csv"][..], &["analyze", "--csv"]] {
            let from = |input: &Path, own: &str| {
                let mut a: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
                a.push(input.as_os_str());
                cli_ok(a).replace(own, "EXPORT")
            };
            assert_eq!(
                from(&sqlite, &sqlite_name),
                from(&arrows, &arrows_name),
                "{name}: {args:?}, SQLite (left) and .arrows (right)"
            );
        }
    }
}

/// The shipped `.arrows` file converts with no nsys to the events of the shipped arrowdir of
/// the same report, in a batch folder too.
#[test]
fn shipped_arrows_file_converts_as_the_arrowdir() {
    let dir = tempfile::tempdir().unwrap();
    let from_dir = counts(&fixture_copy(dir.path()), dir.path());
    let arrows = dir.path().join("kmeans.arrows");
    std::fs::copy(common::fixture("arrow/kmeans.arrows"), &arrows).unwrap();
    assert_eq!(
        counts(&arrows, dir.path()),
        from_dir,
        ".arrows (left), arrowdir (right)"
    );
    assert!(from_dir.get("cuda.kernel").is_some_and(|&n| n > 0));
    // A folder's .arrows file is one of its inputs, converted beside it.
    let folder = dir.path().join("batch");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(&arrows, folder.join("kmeans.arrows")).unwrap();
    cli_ok([folder.as_os_str(), OsStr::new("-q")]);
    assert!(folder.join("kmeans.pftrace").is_file());
}

/// A truncated `.arrows` file, or one cut inside a table's stream, is refused in one line
/// naming the file (and the table whose stream is cut), with nothing written.
#[test]
fn truncated_arrows_file_is_one_line_naming_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let arrows = dir.path().join("kmeans.arrows");
    let whole = std::fs::read(common::fixture("arrow/kmeans.arrows")).unwrap();
    // Cut inside the kernels' record batch (the schema before it, with every column's
    // description, takes about 5 kB).
    let name = b"CUPTI_ACTIVITY_KIND_KERNEL";
    let at = whole
        .windows(name.len())
        .position(|w| w == name)
        .expect("the kernels' stream");
    std::fs::write(&arrows, &whole[..at + 10_000]).unwrap();
    expect_failure(
        &arrows,
        dir.path(),
        "kmeans.arrows: table CUPTI_ACTIVITY_KIND_KERNEL: ",
        &["truncated", "damaged"],
    );
    // Cut anywhere: one line naming the file.
    std::fs::write(&arrows, &whole[..whole.len() / 2]).unwrap();
    expect_failure(
        &arrows,
        dir.path(),
        "kmeans.arrows",
        &["truncated", "damaged"],
    );
    std::fs::write(&arrows, b"").unwrap();
    expect_failure(&arrows, dir.path(), "kmeans.arrows", &["empty"]);
}

/// Damage anywhere in an `.arrows` file (bits flipped, a cut, a run of zeros, at seeded places)
/// never panics: the conversion and `stats` succeed or fail in one line naming the file.
#[test]
fn seeded_damage_to_an_arrows_file_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let arrows = dir.path().join("kmeans.arrows");
    let original = std::fs::read(common::fixture("arrow/kmeans.arrows")).unwrap();
    let mut seeded = Seeded(0x2545_f491_4f6c_dd1d);
    let out = dir.path().join("out.pftrace");
    for case in 0..40 {
        let mut bytes = original.clone();
        let how = seeded.damage(&mut bytes, 0..original.len());
        std::fs::write(&arrows, &bytes).unwrap();
        survives_damage(
            &arrows,
            &out,
            "kmeans.arrows",
            &format!("case {case}: {how}"),
        );
    }
}

/// nsys' Parquet export converts to the content of the SQLite export of the same report, names
/// its trace after the report, and its workflows print the same.
#[test]
fn parquet_exports_convert_as_their_sqlite_twins() {
    let (Some(nsys), Some(corpus)) = (nsys_2023(), corpus()) else {
        return;
    };
    common::par_map(&[EXACT[0], EXACT[1], EXACT[3]], |name| {
        let dir = tempfile::tempdir().unwrap();
        let Some((sqlite, parquet)) =
            converts_as_its_sqlite_twin(&nsys, &corpus, name, dir.path(), "parquetdir", "_pqtdir")
        else {
            return;
        };
        let csv =
            |input: &Path| cli_ok([OsStr::new("stats"), OsStr::new("--csv"), input.as_os_str()]);
        assert_eq!(csv(&sqlite), csv(&parquet), "{name}: stats --csv");
    });
}

/// nsys' Parquet export of the first of [`EXACT`], in `dir`.
fn first_report_as_parquet(nsys: &Path, corpus: &Path, dir: &Path) -> PathBuf {
    nsys_export(nsys, &corpus.join(EXACT[0]), dir, "parquetdir", "_pqtdir")
}

/// A Parquet export is read from its own files: the conversion writes nothing into `$TMPDIR`
/// (an empty folder, looked at while it runs and after) and writes its trace; `stats`, whose
/// NVTX projection has a scratch folder there, writes no Arrow table there.
#[test]
fn parquet_exports_are_read_without_a_temporary_folder() {
    let (Some(nsys), Some(corpus)) = (nsys_2023(), corpus()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let parquet = first_report_as_parquet(&nsys, &corpus, dir.path());
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let trace = dir.path().join("x.pftrace");
    // Every path under `dir`, folders included.
    fn under(dir: &Path, out: &mut std::collections::BTreeSet<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                under(&path, out);
            }
            out.insert(path);
        }
    }
    let convert: [&OsStr; 3] = [parquet.as_os_str(), OsStr::new("-o"), trace.as_os_str()];
    let stats: [&OsStr; 2] = [OsStr::new("stats"), parquet.as_os_str()];
    for args in [&convert[..], &stats[..]] {
        let mut child = Command::new(BIN)
            .args(args)
            .env("TMPDIR", &tmp)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut seen = std::collections::BTreeSet::new();
        let status = loop {
            under(&tmp, &mut seen);
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            std::thread::sleep(std::time::Duration::from_micros(500));
        };
        under(&tmp, &mut seen);
        assert!(status.success(), "{args:?}: {status}");
        if args == &convert[..] {
            assert!(seen.is_empty(), "{args:?} wrote into TMPDIR: {seen:?}");
        }
        let arrow: Vec<_> = seen
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "arrow"))
            .collect();
        assert!(arrow.is_empty(), "{args:?} wrote Arrow tables: {arrow:?}");
    }
    assert!(std::fs::metadata(&trace).unwrap().len() > 0, "the trace");
}

#[test]
fn truncated_parquet_table_is_one_line_naming_it() {
    let (Some(nsys), Some(corpus)) = (nsys_2023(), corpus()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let parquet = first_report_as_parquet(&nsys, &corpus, dir.path());
    let table = parquet.join("CUPTI_ACTIVITY_KIND_KERNEL.parquet");
    let len = std::fs::metadata(&table).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&table)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    expect_failure(
        &parquet,
        dir.path(),
        "CUPTI_ACTIVITY_KIND_KERNEL.parquet",
        &["truncated", "damaged"],
    );
}

/// Cut `file` to `len` bytes in place, as a writer truncating it would.
fn cut(file: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// A table truncated after the export was opened (its tables mapped and checked) and its rows
/// began to be read: reading on, by a direct scan or through SQL, is an error naming the file
/// (reading a page the file lost raised SIGBUS, which killed the process), and so are a scan
/// opened after and the check a conversion makes at its end; in an arrowdir and an `.arrows`
/// file alike.
#[test]
fn table_truncated_while_read_is_an_error_naming_it() {
    use nsys_perfetto_model::errors::error_line;
    use nsys_perfetto_read::scan::Scan;
    use nsys_perfetto_read::schema::open_schema;
    let dir = tempfile::tempdir().unwrap();
    let arrow = fixture_copy(dir.path());
    let arrows = dir.path().join("kmeans.arrows");
    std::fs::copy(common::fixture("arrow/kmeans.arrows"), &arrows).unwrap();
    let table = "CUPTI_ACTIVITY_KIND_RUNTIME";
    // A table of an arrowdir is named by its file; the change of an `.arrows` file is the
    // whole file's (the caller names it).
    for (export, file, named) in [
        (
            &arrow,
            arrow.join(format!("{table}.arrow")),
            format!("{table}.arrow: "),
        ),
        (&arrows, arrows.clone(), String::new()),
    ] {
        let (conn, schema) = open_schema(export).unwrap();
        let scan = || {
            Scan::new(&schema, table)
                .cols(&schema, &["start", "end", "nameId"])
                .open(&conn, &schema)
        };
        let mut direct = scan().unwrap();
        let mut stmt = conn
            .prepare(&format!("SELECT start, nameId FROM {table}"))
            .unwrap();
        let mut sql = stmt.query([]).unwrap();
        assert!(direct.next().unwrap().is_some());
        assert!(sql.next().unwrap().is_some());
        // Cut to its first page: every other page of its mapping is lost.
        cut(&file, 4096);
        let want = format!("{named}changed while it was read: truncated");
        let mut read = 1;
        let e = loop {
            match direct.next() {
                Ok(Some(_)) => read += 1,
                Ok(None) => panic!("{}: read to its end ({read} rows)", file.display()),
                Err(e) => break e,
            }
        };
        assert!(error_line(&e).contains(&want), "{e:#}");
        assert!(
            read <= 256,
            "{read} rows read before the error (a chunk at most)"
        );
        let e = loop {
            match sql.next() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("{}: read to its end through SQL", file.display()),
                Err(e) => break e,
            }
        };
        assert!(e.to_string().contains(&want), "{e}");
        let e = scan().err().expect("a scan of the cut table");
        assert!(error_line(&e).contains(&want), "{e:#}");
        let end = error_line(&schema.unchanged().unwrap_err());
        assert!(end.starts_with(&want), "{end}");
    }
}

/// Lookups and `Scan::only` read an Arrow export's typed columns (no SQLite) and find what the
/// same reads find in its SQLite twin: every `StringIds` id and ids it lacks, and the memcpys of
/// two kinds, in the same order.
#[test]
fn lookups_and_only_read_as_from_the_sqlite_twin() {
    use nsys_perfetto_read::cells::{int_at, text_at};
    use nsys_perfetto_read::scan::{Lookup, Scan};
    use nsys_perfetto_read::schema::open_schema;
    let dir = tempfile::tempdir().unwrap();
    let arrow = fixture_copy(dir.path());
    let twin = dir.path().join("kmeans.sqlite");
    std::fs::copy(common::fixture("arrow/kmeans.sqlite"), &twin).unwrap();
    let (aconn, aschema) = open_schema(&arrow).unwrap();
    let (sconn, sschema) = open_schema(&twin).unwrap();
    let ids: Vec<i64> = sconn
        .prepare("SELECT id FROM StringIds")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(ids.len() > 100, "{}", ids.len());
    let lookup = |conn, schema| {
        Scan::new(schema, "StringIds")
            .col(schema, "value")
            .lookup(conn, schema, "id")
            .unwrap()
    };
    let (mut from_arrow, mut from_sqlite) = (lookup(&aconn, &aschema), lookup(&sconn, &sschema));
    assert!(
        matches!(from_arrow, Lookup::Arrow(_)),
        "not a direct lookup"
    );
    let max = *ids.iter().max().unwrap();
    for id in ids.iter().copied().chain([-1, max + 1, i64::MIN, i64::MAX]) {
        let values = |l: &mut Lookup<'_>| {
            let mut v = Vec::new();
            l.each(id, |r| v.push(text_at(r, 0).map(|t| t.into_owned())))
                .unwrap();
            v
        };
        let want = values(&mut from_sqlite);
        assert_eq!(values(&mut from_arrow), want, "id {id}");
        assert_eq!(want.len(), usize::from(id <= max && id >= 0), "id {id}");
    }
    let table = "CUPTI_ACTIVITY_KIND_MEMCPY";
    let rows = |conn, schema| {
        let mut rows = Scan::new(schema, table)
            .cols(schema, &["start", "copyKind", "bytes"])
            .only("copyKind", &[1, 2])
            .open(conn, schema)
            .unwrap();
        let mut out = Vec::new();
        while let Some(r) = rows.next().unwrap() {
            out.push([0, 1, 2].map(|i| int_at(&r, i)));
        }
        out
    };
    let want = rows(&sconn, &sschema);
    assert!(!want.is_empty());
    assert!(want.iter().all(|r| matches!(r[1], Some(1 | 2))));
    assert_eq!(rows(&aconn, &aschema), want);
}
