//! A seeded, bounded robustness suite (issue 8): the binary against structured mutations of
//! real exports (the bundled capture and small corpus exports), byte-level corruption and
//! truncation, interrupts, a full disk, read-only targets and concurrent runs.
//!
//! Every run must: not panic (exit 101, "panicked"), not hang (60 s limit), leave no partial or
//! stray file (output folder and a private `$TMPDIR` checked), leave its input untouched
//! (hashed before and after), and either fail cleanly (one `error:` line, non-zero exit) or
//! write a trace that passes the repository's validator (`tests/common`), with exact
//! accounting for inputs whose rows are readable: per event table, rows = slices written +
//! rows counted as skipped (+ NVTX naming rows). A few outputs also go through Perfetto's
//! `tpcheck --strict` when it is installed. Structured mutations are valid SQLite: they must
//! convert, not fail.
//!
//! Randomness is a xorshift PRNG with a fixed seed (`ROBUSTNESS_SEED` overrides it,
//! `ROBUSTNESS_CASES` scales the structured cases), so a failure replays. The figures are
//! printed at the end (`cargo test --release --test robustness -- --nocapture`).
//!
//! nsys' Arrow and Parquet exports (issue 43): seeded byte damage (flip, truncate, zero, delete,
//! swap, append) to one file of an arrowdir, an `.arrows` file and a parquetdir, through the
//! conversion, `stats` and `analyze`; and every kind of export truncated, replaced or removed
//! while a run reads it, through the conversion and each workflow. Each run: no signal, no
//! panic, no hang, nothing left behind, the input untouched, and an error is exactly one line
//! naming the file once.

use crate::common;

use rusqlite::Connection;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nsys-perfetto");
const LIMIT: Duration = Duration::from_secs(60);

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// What went wrong, by class; every class must stay at 0.
#[derive(Default)]
struct Figures {
    cases: u64,
    converted: u64,
    clean_errors: u64,
    interrupted: u64,
    tpchecked: u64,
    defects: BTreeMap<&'static str, Vec<String>>,
}

impl Figures {
    fn defect(&mut self, class: &'static str, what: String) {
        self.defects.entry(class).or_default().push(what);
    }
}

const CLASSES: [&str; 9] = [
    "panic",
    "hang",
    "stray file",
    "input modified",
    "invalid output",
    "accounting",
    "unclean error",
    "valid input refused",
    "tpcheck",
];

fn hash_file(p: &Path) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::fs::read(p).unwrap_or_default().hash(&mut h);
    h.finish()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A fresh case directory: `in/` (the input), `out/` (the output), `tmp/` ($TMPDIR).
struct Case {
    root: tempfile::TempDir,
    input: PathBuf,
}

impl Case {
    fn new(src: &Path) -> Case {
        let root = tempfile::tempdir().unwrap();
        for d in ["in", "out", "tmp"] {
            std::fs::create_dir(root.path().join(d)).unwrap();
        }
        let input = root.path().join("in/case.sqlite");
        std::fs::copy(src, &input).unwrap();
        Case { root, input }
    }
    /// A case whose input is a copy of `src` (a file, or a folder of files) named `name`.
    fn with_input(src: &Path, name: &str) -> Case {
        let root = tempfile::tempdir().unwrap();
        for d in ["in", "out", "tmp"] {
            std::fs::create_dir(root.path().join(d)).unwrap();
        }
        let input = root.path().join("in").join(name);
        if src.is_dir() {
            std::fs::create_dir(&input).unwrap();
            for e in std::fs::read_dir(src).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), input.join(e.file_name())).unwrap();
            }
        } else {
            std::fs::copy(src, &input).unwrap();
        }
        Case { root, input }
    }
    fn out(&self) -> PathBuf {
        self.root.path().join("out")
    }
    fn tmp(&self) -> PathBuf {
        self.root.path().join("tmp")
    }
}

struct Ran {
    code: Option<i32>,
    /// The signal that ended the process, if one did.
    signal: Option<i32>,
    stderr: String,
    hung: bool,
}

/// The binary on `args`, its temporary files and caches in `tmp`, its stderr piped.
fn command(args: &[&std::ffi::OsStr], tmp: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("TMPDIR", tmp)
        .env("RUST_BACKTRACE", "0")
        .env("XDG_CACHE_HOME", tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Run the binary with a time limit; `signal_after` sends SIGINT that long after the start.
fn run(
    args: &[&std::ffi::OsStr],
    tmp: &Path,
    signal_after: Option<Duration>,
    pre: Option<fn() -> std::io::Result<()>>,
) -> Ran {
    let mut cmd = command(args, tmp);
    if let Some(f) = pre {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure only calls async-signal-safe functions (setrlimit, signal).
        unsafe { cmd.pre_exec(f) };
    }
    let mut child = cmd.spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut s);
        s
    });
    let started = Instant::now();
    let mut signalled = false;
    let mut hung = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if let Some(after) = signal_after
            && !signalled
            && started.elapsed() >= after
        {
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            signalled = true;
        }
        if started.elapsed() > LIMIT {
            hung = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let stderr = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    Ran {
        code: status.code(),
        signal: std::os::unix::process::ExitStatusExt::signal(&status),
        stderr,
        hung,
    }
}

fn limit_file_size() -> std::io::Result<()> {
    // A 16 kB file size limit, with SIGXFSZ ignored so writes fail with EFBIG ("disk full"
    // for a non-root user).
    let lim = libc::rlimit {
        rlim_cur: 16 << 10,
        rlim_max: 16 << 10,
    };
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
        if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Rows per event table and the slices they become (category names), for the accounting.
const ACCOUNTED: [(&str, &[&str]); 7] = [
    ("CUPTI_ACTIVITY_KIND_KERNEL", &["cuda.kernel"]),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", &["cuda.memcpy"]),
    ("CUPTI_ACTIVITY_KIND_MEMSET", &["cuda.memset"]),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", &["cuda.api"]),
    ("CUPTI_ACTIVITY_KIND_DRIVER", &["cuda.api"]),
    ("NVTX_EVENTS", &["nvtx", "nvtx.mark"]),
    // OS runtime rows that are profiler markers become `nsys.marker` instants.
    ("OSRT_API", &["osrt", "nsys.marker"]),
];

/// Skipped rows per table from the summary (`    N in TABLE: reason`) and NVTX naming rows.
fn parse_summary(stderr: &str) -> (BTreeMap<String, u64>, u64) {
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    let mut naming = 0;
    for line in stderr.lines() {
        let t = line.trim_start();
        if line.starts_with("    ")
            && let Some((n, rest)) = t.split_once(" in ")
            && let Ok(n) = n.parse::<u64>()
            && let Some((table, _)) = rest.split_once(": ")
        {
            *skipped.entry(table.to_string()).or_default() += n;
        }
        if let Some(rest) = t.strip_prefix("naming rows: ")
            && let Some((n, _)) = rest.split_once(' ')
        {
            naming += n.parse::<u64>().unwrap_or(0);
        }
    }
    (skipped, naming)
}

fn table_rows(p: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(c) = Connection::open_with_flags(p, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY) else {
        return out;
    };
    for (t, _) in ACCOUNTED {
        if let Ok(n) = c.query_row(&format!("SELECT count(*) FROM \"{t}\""), [], |r| {
            r.get::<_, i64>(0)
        }) {
            out.insert(t.to_string(), n as u64);
        }
    }
    out
}

#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// Valid SQLite: must convert, with exact accounting.
    Convert,
    /// Damaged or hostile: converts (valid output) or fails cleanly.
    ConvertOrFail,
    /// Interrupted: converts, or exits 130 leaving nothing.
    Interrupt,
}

/// Run one case and check everything; `label` names it in defect reports.
#[allow(clippy::too_many_arguments)]
fn check_case(
    f: &mut Figures,
    case: &Case,
    label: &str,
    expect: Expect,
    extra: &[&str],
    signal_after: Option<Duration>,
    pre: Option<fn() -> std::io::Result<()>>,
    tpcheck: bool,
) {
    f.cases += 1;
    let before = hash_file(&case.input);
    let rows = table_rows(&case.input);
    let out = case.out().join("case.pftrace");
    let mut args: Vec<&std::ffi::OsStr> =
        vec![case.input.as_os_str(), "-o".as_ref(), out.as_os_str()];
    args.extend(extra.iter().map(|s| std::ffi::OsStr::new(*s)));
    let r = run(&args, &case.tmp(), signal_after, pre);
    let ctx = || format!("{label}: exit {:?}: {}", r.code, r.stderr.trim());
    if r.hung {
        f.defect("hang", ctx());
        return;
    }
    if r.code == Some(101) || r.stderr.contains("panicked") {
        f.defect("panic", ctx());
    }
    if hash_file(&case.input) != before {
        f.defect("input modified", ctx());
    }
    let in_dir = names(case.input.parent().unwrap());
    if in_dir != vec!["case.sqlite".to_string()] {
        f.defect(
            "stray file",
            format!("{} (input folder: {in_dir:?})", ctx()),
        );
    }
    if !names(&case.tmp()).is_empty() {
        f.defect(
            "stray file",
            format!("{} ($TMPDIR: {:?})", ctx(), names(&case.tmp())),
        );
    }
    let outs = names(&case.out());
    match r.code {
        Some(0) => {
            f.converted += 1;
            if outs != vec!["case.pftrace".to_string()] {
                f.defect("stray file", format!("{} (output folder: {outs:?})", ctx()));
            }
            let bytes = std::fs::read(&out).unwrap_or_default();
            let trace = match common::validate(&bytes) {
                Ok(t) => t,
                Err(v) => {
                    let kept = keep(&case.input, label);
                    f.defect(
                        "invalid output",
                        format!("{label} (input kept: {kept}): {v}"),
                    );
                    return;
                }
            };
            if expect == Expect::Convert {
                let by_cat = trace.count_by_category();
                let (skipped, naming) = parse_summary(&r.stderr);
                let mut api = (0u64, 0u64);
                for (t, cats) in ACCOUNTED {
                    let Some(&n) = rows.get(t) else { continue };
                    let sk = skipped.get(t).copied().unwrap_or(0);
                    if cats == ["cuda.api"] {
                        api.0 += n;
                        api.1 += sk;
                        continue;
                    }
                    let got: u64 = cats
                        .iter()
                        .map(|c| by_cat.get(*c).copied().unwrap_or(0))
                        .sum();
                    let nm = if t == "NVTX_EVENTS" { naming } else { 0 };
                    if got + sk + nm != n {
                        f.defect(
                            "accounting",
                            format!(
                                "{label}: {t}: {n} rows, {got} slices + {sk} skipped + {nm} naming"
                            ),
                        );
                    }
                }
                let got = by_cat.get("cuda.api").copied().unwrap_or(0);
                if got + api.1 != api.0 {
                    f.defect(
                        "accounting",
                        format!(
                            "{label}: API tables: {} rows, {got} slices + {} skipped",
                            api.0, api.1
                        ),
                    );
                }
            }
            if tpcheck {
                match common::tpcheck(&out) {
                    Some(Err(report)) => f.defect("tpcheck", format!("{label}: {report}")),
                    Some(Ok(_)) => f.tpchecked += 1,
                    None => {}
                }
            }
        }
        // 130: stopped by the handler; None: killed by SIGINT before it was installed.
        Some(130) | None if expect == Expect::Interrupt => {
            f.interrupted += 1;
            // The signal may come after the output was renamed into place: then it must be the
            // complete trace. Anything else is litter.
            if outs == vec!["case.pftrace".to_string()] {
                if let Err(v) = common::validate(&std::fs::read(&out).unwrap_or_default()) {
                    f.defect("invalid output", format!("{label} (after SIGINT): {v}"));
                }
            } else if !outs.is_empty() {
                f.defect("stray file", format!("{} (after SIGINT: {outs:?})", ctx()));
            }
        }
        code => {
            f.clean_errors += 1;
            if !outs.is_empty() {
                f.defect(
                    "stray file",
                    format!("{} (after a failure: {outs:?})", ctx()),
                );
            }
            let errors: Vec<&str> = r
                .stderr
                .lines()
                .filter(|l| l.starts_with("error:"))
                .collect();
            if code.is_none() || errors.len() != 1 {
                f.defect("unclean error", ctx());
            }
            if expect == Expect::Convert {
                f.defect("valid input refused", ctx());
            }
        }
    }
}

/// Keep a failing case's input (before the conversion it is untouched) for replay, under
/// cargo's target temporary folder.
fn keep(input: &Path, label: &str) -> String {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("robustness-failures");
    let _ = std::fs::create_dir_all(&dir);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    label.hash(&mut h);
    let to = dir.join(format!("{:016x}.sqlite", h.finish()));
    let _ = std::fs::copy(input, &to);
    to.display().to_string()
}

/// Columns of a table.
fn columns(c: &Connection, t: &str) -> Vec<String> {
    c.prepare(&format!("SELECT name FROM pragma_table_info('{t}')"))
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn tables(c: &Connection) -> Vec<String> {
    c.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

const VALUES: [&str; 11] = [
    "NULL",
    "-1 - abs(coalesce(typeof(0), 0))",
    "9223372036854775807",
    "-9223372036854775808",
    "'text'",
    "X'00FF10'",
    "CAST(X'C328FFFE' AS TEXT)",
    "hex(zeroblob(50000))",
    "1.5e300",
    "3.7",
    "-12345",
];

const ID_COLUMNS: [&str; 10] = [
    "nameId",
    "textId",
    "globalTid",
    "globalPid",
    "correlationId",
    "domainId",
    "shortName",
    "demangledName",
    "id",
    "callchainId",
];

/// Apply one structured mutation; returns its description, or None when SQLite refused it
/// (e.g. dropping an indexed column).
fn mutate(c: &Connection, rng: &mut Rng) -> Option<String> {
    let all = tables(c);
    let events: Vec<String> = all
        .iter()
        .filter(|t| {
            ACCOUNTED.iter().any(|(a, _)| a == t)
                || t.as_str() == "SCHED_EVENTS"
                || t.as_str() == "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
        })
        .cloned()
        .collect();
    let t = if !events.is_empty() && rng.below(10) < 7 {
        rng.pick(&events).clone()
    } else {
        rng.pick(&all).clone()
    };
    let cols = columns(c, &t);
    if cols.is_empty() {
        return None;
    }
    let col = rng.pick(&cols).clone();
    let (a, b, m) = (1 + rng.below(97), rng.below(13), 2 + rng.below(9));
    let some = format!("(rowid * {a} + {b}) % {m} = 0");
    let kind = rng.below(18);
    let has = |n: &str| cols.iter().any(|c| c == n);
    let sql = match kind {
        0..=7 => {
            let v = rng.pick(&VALUES);
            format!("UPDATE \"{t}\" SET \"{col}\" = {v} WHERE {some}")
        }
        8 => format!("ALTER TABLE \"{t}\" DROP COLUMN \"{col}\""),
        9 => format!("DROP TABLE \"{t}\""),
        10 => format!("INSERT OR IGNORE INTO \"{t}\" SELECT * FROM \"{t}\" WHERE {some}"),
        11 => {
            let ids: Vec<&&str> = ID_COLUMNS.iter().filter(|c| has(c)).collect();
            if ids.is_empty() {
                return None;
            }
            let id = rng.pick(&ids);
            format!("UPDATE OR IGNORE \"{t}\" SET \"{id}\" = 1000000000000 + rowid WHERE {some}")
        }
        12 if has("start") && has("end") => {
            format!("UPDATE \"{t}\" SET \"end\" = start - 1 - rowid % 1000 WHERE {some}")
        }
        13 if has("start") => {
            let end = if has("end") { ", \"end\" = m.s" } else { "" };
            format!(
                "UPDATE \"{t}\" SET start = m.s{end} FROM (SELECT min(start) AS s FROM \"{t}\") m \
                 WHERE {some}"
            )
        }
        14 => format!(
            "CREATE TABLE rev_copy AS SELECT * FROM \"{t}\" ORDER BY rowid DESC; \
             DROP TABLE \"{t}\"; ALTER TABLE rev_copy RENAME TO \"{t}\""
        ),
        15 if has("start") && has("end") => {
            format!("UPDATE \"{t}\" SET start = \"end\", \"end\" = start WHERE {some}")
        }
        16 => format!("UPDATE \"{t}\" SET \"{col}\" = NULL"),
        _ => {
            let v = rng.pick(&VALUES);
            format!("UPDATE \"{t}\" SET \"{col}\" = {v}")
        }
    };
    c.execute_batch(&sql).ok().map(|_| sql)
}

/// The bundled capture and small corpus exports with CUDA activity, when present.
fn inputs() -> Vec<PathBuf> {
    let mut v = vec![common::fixture("nvtx_workload.sqlite")];
    match common::corpus_dir() {
        Some(d) => {
            for n in [
                "martisu1631998__kmeans-parallel__report2.sqlite",
                "lockfuehrer__beast_ressoruces__report1@381153b.sqlite",
            ] {
                let p = d.join(n);
                if p.is_file() {
                    v.push(p);
                } else {
                    eprintln!("robustness: {} absent, not used", p.display());
                }
            }
        }
        None => eprintln!("robustness: ../shared/corpus absent: the bundled capture only"),
    }
    v
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn robustness() {
    let seed = env_u64("ROBUSTNESS_SEED", 0x8_1550_u64);
    let structured = env_u64("ROBUSTNESS_CASES", 60) as usize;
    let mut rng = Rng(seed | 1);
    let mut f = Figures::default();
    let sources = inputs();
    let started = Instant::now();

    // The unmutated inputs: the baseline must hold, and goes through tpcheck.
    for src in &sources {
        let case = Case::new(src);
        let label = format!("baseline {}", src.file_name().unwrap().to_string_lossy());
        check_case(
            &mut f,
            &case,
            &label,
            Expect::Convert,
            &[],
            None,
            None,
            true,
        );
    }

    // Structured mutations: valid SQLite, unusual content. They must convert.
    let mut sampled = 0;
    for i in 0..structured * sources.len() {
        let src = &sources[i % sources.len()];
        let case = Case::new(src);
        let mut applied = Vec::new();
        {
            let c = Connection::open(&case.input).unwrap();
            for _ in 0..1 + rng.below(3) {
                if let Some(m) = mutate(&c, &mut rng) {
                    applied.push(m);
                }
            }
        }
        let label = format!(
            "structured #{i} on {}: {}",
            src.file_name().unwrap().to_string_lossy(),
            applied.join("; ")
        );
        // A few outputs through Perfetto's own importer (slow).
        let tp = i % 37 == 5 && sampled < 3;
        sampled += usize::from(tp);
        // Some with JSON and with the NVTX projection, to cover those paths too.
        let extra: &[&str] = match i % 5 {
            3 => &["--nvtx-gpu"],
            _ => &[],
        };
        check_case(
            &mut f,
            &case,
            &label,
            Expect::Convert,
            extra,
            None,
            None,
            tp,
        );
    }

    // Byte-level corruption and truncation: convert or fail cleanly.
    for i in 0..12 * sources.len() {
        let src = &sources[i % sources.len()];
        let case = Case::new(src);
        let mut bytes = std::fs::read(&case.input).unwrap();
        let what = if i % 3 == 2 {
            let at = rng.below(bytes.len());
            bytes.truncate(at);
            format!("truncated at {at}")
        } else {
            let n = 1 + rng.below(64);
            // Mostly past the header and schema page; sometimes anywhere.
            let from = if rng.below(4) == 0 { 0 } else { 4096 };
            for _ in 0..n {
                let at = from + rng.below(bytes.len() - from);
                bytes[at] ^= 1 << rng.below(8);
            }
            format!("{n} bit flips from byte {from}")
        };
        std::fs::write(&case.input, &bytes).unwrap();
        let label = format!(
            "bytes #{i} on {}: {what}",
            src.file_name().unwrap().to_string_lossy()
        );
        check_case(
            &mut f,
            &case,
            &label,
            Expect::ConvertOrFail,
            &[],
            None,
            None,
            false,
        );
    }

    // Interrupts at random moments.
    for i in 0..4 * sources.len() {
        let src = &sources[i % sources.len()];
        let case = Case::new(src);
        let after = Duration::from_millis(rng.below(30) as u64);
        let label = format!(
            "SIGINT after {after:?} on {}",
            src.file_name().unwrap().to_string_lossy()
        );
        check_case(
            &mut f,
            &case,
            &label,
            Expect::Interrupt,
            &["--nvtx-gpu"],
            Some(after),
            None,
            false,
        );
    }

    // A full disk: a 64 kB tmpfs for the output (root), else a 16 kB file size limit.
    let big = sources.last().unwrap();
    {
        let case = Case::new(big);
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(case.out())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        let label = if mounted {
            "full disk (64 kB tmpfs), JSON output"
        } else {
            "file size limit 16 kB, JSON output"
        };
        let pre = if mounted {
            None
        } else {
            Some(limit_file_size as fn() -> _)
        };
        let json = case.out().join("case.json");
        let before = hash_file(&case.input);
        let r = run(
            &[case.input.as_os_str(), "-o".as_ref(), json.as_os_str()],
            &case.tmp(),
            None,
            pre,
        );
        f.cases += 1;
        let left = names(&case.out());
        if mounted {
            let _ = Command::new("umount").arg(case.out()).status();
        }
        if r.code == Some(0) {
            f.converted += 1;
        } else {
            f.clean_errors += 1;
            if r.code == Some(101) || r.stderr.contains("panicked") {
                f.defect("panic", format!("{label}: {}", r.stderr));
            }
            if r.stderr.lines().filter(|l| l.starts_with("error:")).count() != 1 {
                f.defect("unclean error", format!("{label}: {}", r.stderr));
            }
            if !left.is_empty() {
                f.defect("stray file", format!("{label}: {left:?}"));
            }
        }
        if hash_file(&case.input) != before {
            f.defect("input modified", label.to_string());
        }
        eprintln!(
            "robustness: {label}: exit {:?}: {}",
            r.code,
            r.stderr.trim()
        );
    }
    // A full $TMPDIR (root only: a 64 kB tmpfs) while flow links are computed.
    {
        let case = Case::new(big);
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(case.tmp())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if mounted {
            let out = case.out().join("case.pftrace");
            let r = run(
                &[
                    case.input.as_os_str(),
                    "--nvtx-gpu".as_ref(),
                    "-o".as_ref(),
                    out.as_os_str(),
                ],
                &case.tmp(),
                None,
                None,
            );
            f.cases += 1;
            let left = (names(&case.out()), names(&case.tmp()));
            let _ = Command::new("umount").arg(case.tmp()).status();
            match r.code {
                Some(0) => f.converted += 1,
                _ => {
                    f.clean_errors += 1;
                    if !r.stderr.contains(&case.tmp().display().to_string()) {
                        f.defect(
                            "unclean error",
                            format!("full TMPDIR not named: {}", r.stderr),
                        );
                    }
                    if !left.0.is_empty() || !left.1.is_empty() {
                        f.defect("stray file", format!("full TMPDIR: {left:?}"));
                    }
                }
            }
            eprintln!(
                "robustness: full TMPDIR: exit {:?}: {}",
                r.code,
                r.stderr.trim()
            );
        } else {
            eprintln!("robustness: full TMPDIR case skipped (cannot mount a tmpfs: not root)");
        }
    }

    // Read-only targets: a read-only output folder (fails cleanly as non-root; root may write),
    // and a read-only previous output (replaced: the folder is writable).
    {
        use std::os::unix::fs::PermissionsExt;
        let case = Case::new(&sources[0]);
        std::fs::set_permissions(case.out(), std::fs::Permissions::from_mode(0o555)).unwrap();
        check_case(
            &mut f,
            &case,
            "read-only output folder",
            Expect::ConvertOrFail,
            &[],
            None,
            None,
            false,
        );
        std::fs::set_permissions(case.out(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let case = Case::new(&sources[0]);
        let prev = case.out().join("case.pftrace");
        std::fs::write(&prev, b"old").unwrap();
        std::fs::set_permissions(&prev, std::fs::Permissions::from_mode(0o444)).unwrap();
        check_case(
            &mut f,
            &case,
            "read-only previous output",
            Expect::Convert,
            &[],
            None,
            None,
            false,
        );
    }

    // Concurrent runs into the same output: every run succeeds, one complete trace remains.
    {
        let case = Case::new(big);
        let out = case.out().join("case.pftrace");
        let before = hash_file(&case.input);
        let children: Vec<_> = (0..4)
            .map(|_| {
                Command::new(BIN)
                    .arg(&case.input)
                    .arg("-o")
                    .arg(&out)
                    .env("TMPDIR", case.tmp())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for c in children {
            f.cases += 1;
            let o = c.wait_with_output().unwrap();
            if o.status.success() {
                f.converted += 1;
            } else {
                f.defect(
                    "valid input refused",
                    format!("concurrent run: {}", String::from_utf8_lossy(&o.stderr)),
                );
            }
        }
        if names(&case.out()) != vec!["case.pftrace".to_string()] || !names(&case.tmp()).is_empty()
        {
            f.defect(
                "stray file",
                format!("concurrent runs: {:?}", names(&case.out())),
            );
        }
        if let Err(v) = common::validate(&std::fs::read(&out).unwrap_or_default()) {
            f.defect("invalid output", format!("concurrent runs: {v}"));
        }
        if hash_file(&case.input) != before {
            f.defect("input modified", "concurrent runs".into());
        }
    }

    eprintln!(
        "robustness: seed {seed:#x}: {} cases in {:.0} s: {} converted, {} clean errors, {} \
         interrupted, {} tpcheck --strict passes",
        f.cases,
        started.elapsed().as_secs_f64(),
        f.converted,
        f.clean_errors,
        f.interrupted,
        f.tpchecked
    );
    let mut total = 0;
    for class in CLASSES {
        let found = f.defects.get(class).map_or(0, Vec::len);
        total += found;
        eprintln!("robustness: defects: {class}: {found}");
        for d in f.defects.get(class).into_iter().flatten().take(5) {
            eprintln!("    {d}");
        }
    }
    assert_eq!(total, 0, "robustness defects (see above)");
}

/// Damage `bytes` one of six ways at seeded places, and say how: bits flipped, truncated, a run
/// zeroed, a run deleted, two runs swapped, bytes appended.
fn damage(bytes: &mut Vec<u8>, rng: &mut Rng) -> String {
    let len = bytes.len().max(1);
    let run = |rng: &mut Rng| 1 + rng.below(256);
    match rng.below(6) {
        0 => {
            let n = 1 + rng.below(8);
            for _ in 0..n {
                let at = rng.below(len);
                if let Some(b) = bytes.get_mut(at) {
                    *b ^= 1 << rng.below(8);
                }
            }
            format!("{n} bits flipped")
        }
        1 => {
            let at = rng.below(len);
            bytes.truncate(at);
            format!("truncated at {at}")
        }
        2 => {
            let (at, n) = (rng.below(len), run(rng));
            let end = (at + n).min(bytes.len());
            bytes[at.min(end)..end].fill(0);
            format!("{n} bytes zeroed at {at}")
        }
        3 => {
            let (at, n) = (rng.below(len), run(rng));
            let end = (at + n).min(bytes.len());
            bytes.drain(at.min(end)..end);
            format!("{n} bytes deleted at {at}")
        }
        4 => {
            let n = run(rng).min(bytes.len() / 2);
            let (a, b) = (rng.below(len - n), rng.below(len - n));
            let (a, b) = (a.min(b), a.max(b));
            if b >= a + n {
                let (left, right) = bytes.split_at_mut(b);
                left[a..a + n].swap_with_slice(&mut right[..n]);
            }
            format!("{n} bytes at {a} swapped with those at {b}")
        }
        _ => {
            let n = run(rng);
            bytes.extend((0..n).map(|_| rng.next() as u8));
            format!("{n} bytes appended")
        }
    }
}

/// Every file under `path` (a file, or a folder's files), hashed, by name.
fn hash_tree(path: &Path) -> BTreeMap<String, u64> {
    if path.is_file() {
        return BTreeMap::from([(String::new(), hash_file(path))]);
    }
    names(path)
        .into_iter()
        .map(|n| {
            let h = hash_file(&path.join(&n));
            (n, h)
        })
        .collect()
}

/// One run of the binary on `case`'s input: `args` with `{in}` and `{out}` (the output file in
/// `out/`) filled in; `during` changes the input while the run reads it (see [`run_changing`]).
/// `file` names the file the run must name on failure (in the input, or the input itself) and
/// `reasons` what its line may say (anything where empty). Counts the defects: a signal, a
/// panic, a hang, a changed input (unless `during` changed it), a file left behind, an exit but
/// 0 or 1, an error of more than one line, or one that does not name the input and the file
/// once each. Returns the exit code.
#[allow(clippy::too_many_arguments)]
fn check_arrow_run(
    f: &mut Figures,
    case: &Case,
    file: &str,
    args: &[&str],
    label: &str,
    during: Option<(&Path, bool, &dyn Fn())>,
    reasons: &[&str],
) -> Option<i32> {
    f.cases += 1;
    let input = &case.input;
    let out = case.out().join("case.pftrace");
    let before = hash_tree(input);
    let in_dir = names(case.input.parent().unwrap());
    let args: Vec<std::ffi::OsString> = args
        .iter()
        .map(|a| match *a {
            "{in}" => input.as_os_str().to_owned(),
            "{out}" => out.as_os_str().to_owned(),
            a => a.into(),
        })
        .collect();
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    let r = match during {
        None => run(&args, &case.tmp(), None, None),
        Some((file, mapped, change)) => run_changing(&args, &case.tmp(), file, mapped, change),
    };
    let ctx = || format!("{label}: exit {:?}: {}", r.code, r.stderr.trim());
    if r.hung {
        f.defect("hang", ctx());
        return None;
    }
    if let Some(sig) = r.signal {
        f.defect("signal", format!("{} (signal {sig})", ctx()));
    }
    if r.code == Some(101) || r.stderr.contains("panicked") {
        f.defect("panic", ctx());
    }
    if during.is_none() && hash_tree(input) != before {
        f.defect("input modified", ctx());
    }
    if during.is_none() && names(case.input.parent().unwrap()) != in_dir {
        f.defect("stray file", format!("{} (input folder)", ctx()));
    }
    if !names(&case.tmp()).is_empty() {
        f.defect(
            "stray file",
            format!("{} ($TMPDIR: {:?})", ctx(), names(&case.tmp())),
        );
    }
    let written = names(&case.out());
    let _ = std::fs::remove_file(&out);
    match r.code {
        Some(0) => {
            f.converted += 1;
            if !written.iter().all(|n| n == "case.pftrace") {
                f.defect(
                    "stray file",
                    format!("{} (output folder: {written:?})", ctx()),
                );
            }
        }
        Some(1) => {
            f.clean_errors += 1;
            if !written.is_empty() {
                f.defect(
                    "stray file",
                    format!("{} (output folder: {written:?})", ctx()),
                );
            }
            let lines: Vec<&str> = r.stderr.lines().filter(|l| !l.trim().is_empty()).collect();
            let shown = input.display().to_string();
            if lines.len() != 1 || !lines[0].starts_with("error: ") {
                f.defect("multi-line error", ctx());
            } else if lines[0].matches(&shown).count() != 1 || lines[0].matches(file).count() != 1 {
                f.defect("file not named once", ctx());
            } else if !reasons.is_empty() && !reasons.iter().any(|w| lines[0].contains(w)) {
                f.defect(
                    "unclean error",
                    format!("{} (want one of {reasons:?})", ctx()),
                );
            }
        }
        _ => f.defect("unclean error", ctx()),
    }
    r.code
}

/// [`run`], with `change()` called once the process has opened `file` (`mapped`: mapped it),
/// while it is stopped (SIGSTOP): the change falls after the run opened the file and before
/// it finished reading it.
fn run_changing(
    args: &[&std::ffi::OsStr],
    tmp: &Path,
    file: &Path,
    mapped: bool,
    change: &dyn Fn(),
) -> Ran {
    let mut cmd = command(args, tmp);
    let mut child = cmd.spawn().unwrap();
    let pid = child.id();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut s);
        s
    });
    let sqlite = file.extension().is_some_and(|e| e == "sqlite");
    let opened = || match mapped {
        true => std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap_or_default()
            .lines()
            .any(|l| l.ends_with(&*file.to_string_lossy())),
        // SQLite's own open (O_NOFOLLOW), not a probe of the file's first bytes before it: the
        // run stamps the export just before SQLite opens it, and a change before the stamp is
        // an export read as it then is, not one changed while read.
        false => std::fs::read_dir(format!("/proc/{pid}/fd"))
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == file))
            .any(|e| !sqlite || opened_nofollow(pid, &e.file_name())),
    };
    let started = Instant::now();
    let mut changed = false;
    let mut hung = false;
    let status = loop {
        if !changed && opened() {
            // SAFETY: plain kill(2) calls on our child.
            unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
            change();
            unsafe { libc::kill(pid as i32, libc::SIGCONT) };
            changed = true;
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > LIMIT {
            hung = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    let mut stderr = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    if !changed {
        stderr.push_str("\n(the run ended before it opened its input: not changed)");
    }
    Ran {
        code: status.code(),
        signal: std::os::unix::process::ExitStatusExt::signal(&status),
        stderr,
        hung,
    }
}

/// Whether the child's descriptor `fd` was opened with `O_NOFOLLOW` (`/proc/PID/fdinfo`'s
/// flags, in octal).
fn opened_nofollow(pid: u32, fd: &std::ffi::OsStr) -> bool {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.to_string_lossy()))
        .unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| i64::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|f| f & libc::O_NOFOLLOW as i64 != 0)
}

/// Print the figures and fail on any defect.
fn report_figures(what: &str, f: &Figures, started: Instant) {
    eprintln!(
        "{what}: {} runs ({} succeeded, {} clean errors) in {:.1} s",
        f.cases,
        f.converted,
        f.clean_errors,
        started.elapsed().as_secs_f64()
    );
    for class in ["signal", "panic", "hang", "stray file", "input modified"]
        .iter()
        .chain(&["multi-line error", "file not named once", "unclean error"])
    {
        let n = f.defects.get(class).map_or(0, Vec::len);
        eprintln!("  {class}: {n}");
    }
    let all: Vec<&String> = f.defects.values().flatten().collect();
    assert!(all.is_empty(), "{} defects:\n{all:#?}", all.len());
}

/// Seeded damage (see [`damage`]) to one file of nsys' Arrow exports (the shipped arrowdir and
/// `.arrows` fixture) and, where nsys 2023.4 is installed, of its Parquet export of the same
/// report, through the conversion, `stats` and `analyze`.
#[test]
fn arrow_and_parquet_exports_survive_seeded_damage() {
    let seed = env_u64("ROBUSTNESS_SEED", 0x0043_a770_u64);
    let per_kind = env_u64("ROBUSTNESS_ARROW_CASES", 40) as usize;
    let mut rng = Rng(seed | 1);
    let mut f = Figures::default();
    let started = Instant::now();
    let parquet_dir = tempfile::tempdir().unwrap();
    let mut kinds = vec![
        (
            "arrowdir",
            common::fixture("arrow/kmeans_arwdir"),
            "kmeans_arwdir",
        ),
        (
            "arrows",
            common::fixture("arrow/kmeans.arrows"),
            "kmeans.arrows",
        ),
    ];
    if let (Some(nsys), Some(corpus)) = (crate::arrow::nsys_2023(), common::corpus_dir()) {
        let report = corpus.join("martisu1631998__kmeans-parallel__report2.qdrep");
        let pq =
            crate::arrow::nsys_export(&nsys, &report, parquet_dir.path(), "parquetdir", "_pqtdir");
        kinds.push(("parquetdir", pq, "kmeans_pqtdir"));
    }
    let commands: [&[&str]; 3] = [
        &["{in}", "-q", "-o", "{out}"],
        &["stats", "{in}"],
        &["analyze", "{in}"],
    ];
    for (kind, src, name) in &kinds {
        for i in 0..per_kind {
            let case = Case::with_input(src, name);
            let input = case.input.clone();
            // Damage one file of a folder, one of its larger ones mostly (the tables read).
            let target = if input.is_dir() {
                let mut files = names(&input);
                files.sort_by_key(|n| {
                    std::cmp::Reverse(std::fs::metadata(input.join(n)).unwrap().len())
                });
                files.truncate(if rng.below(3) == 0 { files.len() } else { 12 });
                input.join(rng.pick(&files))
            } else {
                input.clone()
            };
            let mut bytes = std::fs::read(&target).unwrap();
            let how = damage(&mut bytes, &mut rng);
            std::fs::write(&target, &bytes).unwrap();
            let file = target.file_name().unwrap().to_string_lossy().into_owned();
            let args = commands[i % commands.len()];
            let label = format!("{kind} #{i}, {file}: {how}, {}", args.join(" "));
            check_arrow_run(&mut f, &case, &file, args, &label, None, &[]);
        }
    }
    report_figures("seeded damage to Arrow and Parquet exports", &f, started);
}

/// nsys 2023.4's four exports of a report with GPU metrics (SQLite, arrowdir, `.arrows`,
/// parquetdir) each truncated, replaced or removed once a run has opened it (see
/// [`run_changing`]): the conversion and `stats`, `analyze`, `extract` and `merge` each exit 1
/// with one line naming the file and saying it changed while it was read, no signal, no
/// output and nothing left behind; a change may land only after the run's last read (exit 0,
/// from the file as it was), which most runs must not.
/// (A SIGBUS from a truncated Arrow table killed the process.)
#[test]
fn exports_changed_while_read_are_one_line_naming_the_file() {
    let (Some(nsys), Some(corpus)) = (crate::arrow::nsys_2023(), common::corpus_dir()) else {
        return;
    };
    let started = Instant::now();
    let mut f = Figures::default();
    let exports = tempfile::tempdir().unwrap();
    let report = corpus.join("als244__ResourceEstimation__reports_report2.nsys-rep");
    let export =
        |kind, suffix| crate::arrow::nsys_export(&nsys, &report, exports.path(), kind, suffix);
    // Each export, and the file of it changed: a table holding GPU metrics where there are several.
    // Each export, the file of it changed (a table holding GPU metrics where there are
    // several), and whether the run maps it (Arrow) or reads it (SQLite, Parquet).
    let kinds = [
        (export("sqlite", ".sqlite"), "x.sqlite", None, false),
        (
            export("arrowdir", "_arwdir"),
            "x_arwdir",
            Some("GPU_METRICS.arrow"),
            true,
        ),
        (export("arrow", ".arrows"), "x.arrows", None, true),
        (
            export("parquetdir", "_pqtdir"),
            "x_pqtdir",
            Some("GPU_METRICS.parquet"),
            false,
        ),
    ];
    let other = common::fixture("arrow/kmeans.sqlite");
    let other = other.to_str().unwrap();
    let commands: [&[&str]; 5] = [
        &["{in}", "-q", "-o", "{out}"],
        &["stats", "{in}"],
        &["analyze", "{in}"],
        &["extract", "-e", "a", "{in}"],
        &["merge", "-q", "{in}", other, "-o", "{out}"],
    ];
    let changes = ["truncated", "replaced", "removed"];
    let (mut told, mut late) = (0, Vec::new());
    for (src, name, table, mapped) in &kinds {
        for (c, args) in commands.iter().enumerate() {
            // Every change through the conversion; truncation through each workflow.
            for how in changes.iter().take(if c == 0 { 3 } else { 1 }) {
                let case = Case::with_input(src, name);
                let file = table.map_or(case.input.clone(), |t| case.input.join(t));
                let change = || match *how {
                    "truncated" => {
                        let len = std::fs::metadata(&file).unwrap().len();
                        std::fs::OpenOptions::new()
                            .write(true)
                            .open(&file)
                            .unwrap()
                            .set_len(len / 2)
                            .unwrap();
                    }
                    "replaced" => {
                        let new = file.with_extension("new");
                        std::fs::copy(&file, &new).unwrap();
                        std::fs::rename(&new, &file).unwrap();
                    }
                    _ => std::fs::remove_file(&file).unwrap(),
                };
                let named = file.file_name().unwrap().to_str().unwrap();
                let label = format!("{name}: {named} {how} while read by {}", args.join(" "));
                let want = format!("changed while it was read: {how}");
                // A merge opens a report twice (its clock, then its events): a table truncated
                // between the two is one the second opening finds damaged.
                let damaged = "a damaged or truncated file";
                let code = check_arrow_run(
                    &mut f,
                    &case,
                    named,
                    args,
                    &label,
                    Some((&file, *mapped, &change)),
                    &[&want[..], damaged],
                );
                match code {
                    // The change can land after the run's last read and its end-of-run check
                    // (a loaded machine sees the descriptor or mapping late): what the run
                    // printed came from the file as it was.
                    Some(0) => late.push(label),
                    _ => told += 1,
                }
            }
        }
    }
    if !late.is_empty() {
        eprintln!("changed after the run's last read (exit 0): {late:#?}");
    }
    // The check keeps its teeth: nearly every change lands while the file is read.
    assert!(
        told >= 20,
        "only {told} runs told the change; late: {late:#?}"
    );
    report_figures("exports changed while read", &f, started);
}

/// SQLite reads an export through its own reads (`PRAGMA mmap_size` 0), not a mapping: a file
/// truncated under it is an I/O error, never SIGBUS (see the test above for what is told).
#[test]
fn sqlite_exports_are_read_without_mapping() {
    let conn =
        nsys_perfetto_read::connection::open_readonly(&common::fixture("arrow/kmeans.sqlite"))
            .unwrap();
    let mapped: i64 = conn
        .query_row("PRAGMA mmap_size", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mapped, 0);
}
