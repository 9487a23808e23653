//! Converting many inputs in one run: files, directories and glob patterns, each converted on its
//! own (one failure does not stop the rest), outputs that are up to date skipped, a line per file
//! and a total.
//!
//! * A directory stands for the profiles directly in it: `*.sqlite`, `*.nsys-rep`, `*.qdrep`
//!   (not hidden files, not subdirectories).
//! * A pattern with `*`, `?` or `[...]` that names no existing file is expanded here, for shells
//!   that do not (`*` and `?` do not match a leading `.` or a `/`).
//! * When one folder holds both `X.sqlite` and `X.nsys-rep` (or `X.qdrep`), which all give
//!   `X.pftrace`, only one is converted: an export this tool made when it records the report's
//!   present content, else the report; a user's own export unless it is older than the report
//!   (then the report, exported into the cache). A line says which.
//! * Reuse: with more than one input, or a directory or pattern, an input whose output was made
//!   by this version from the same input content with the same options (the record the output
//!   carries, see [`crate::provenance`]) is not converted again; `force` converts it anyway. An
//!   output without such a record, or made otherwise, is converted again and a line says why. A
//!   single file named on the command line is always converted.
//! * Reports go through [`crate::input::prepare`] first.

use crate::convert::{self, Options};
use crate::input;
use crate::report::{self, export::ExportOptions};
use anyhow::{Result, anyhow, bail};
use nsys_perfetto_read::inputs::{Input, classify};
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// How [`run`] converts.
#[derive(Debug, Clone, Default)]
pub struct BatchOptions {
    /// `-o`: the output file (one input), or an existing directory for all outputs.
    pub output: Option<PathBuf>,
    /// Convert even when the output is up to date.
    pub force: bool,
    /// Print only errors.
    pub quiet: bool,
    /// How reports are exported.
    pub export: ExportOptions,
    /// Files exported and converted at the same time (`-j`); 0: one per core.
    pub jobs: usize,
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub converted: usize,
    pub up_to_date: usize,
    pub failed: usize,
    /// Inputs not converted because another file gives the same output (`X.nsys-rep` beside
    /// `X.sqlite`).
    pub superseded: usize,
}

impl Totals {
    pub fn ok(&self) -> bool {
        self.failed == 0
    }
}

/// The command line's inputs, expanded.
#[derive(Debug, Default)]
pub struct Expanded {
    /// Files to convert, in order, without duplicates.
    pub files: Vec<PathBuf>,
    /// (input, why it is not converted): superseded pair members.
    pub superseded: Vec<(PathBuf, String)>,
    /// (argument, error): missing files, patterns matching nothing, unreadable directories.
    pub errors: Vec<(String, String)>,
    /// Whether a directory or a pattern was expanded.
    pub expanded_any: bool,
    /// Perfetto traces among several inputs (`*` matches earlier outputs): not converted.
    pub traces: Vec<PathBuf>,
}

fn has_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Expand files, directories and patterns.
pub fn expand(inputs: &[PathBuf]) -> Expanded {
    let mut ex = Expanded::default();
    let mut files: Vec<PathBuf> = Vec::new();
    for input in inputs {
        let shown = input.display().to_string();
        if input.is_dir() && !classify(input).is_columnar() {
            ex.expanded_any = true;
            match fs::read_dir(input) {
                Ok(rd) => {
                    let mut found: Vec<PathBuf> = rd
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| {
                            let kind = classify(p);
                            (p.is_file() || kind.is_columnar())
                                && kind.is_profile()
                                && !p
                                    .file_name()
                                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                        })
                        .collect();
                    found.sort();
                    if found.is_empty() {
                        ex.errors.push((
                            shown,
                            format!(
                                "no {} in this directory",
                                nsys_perfetto_read::inputs::INPUTS
                            ),
                        ));
                    }
                    files.extend(found);
                }
                Err(e) => ex
                    .errors
                    .push((shown, format!("cannot read directory: {e}"))),
            }
        } else if input.exists() {
            files.push(input.clone());
        } else if has_glob(&input.to_string_lossy()) {
            ex.expanded_any = true;
            match glob(input) {
                Ok(found) if found.is_empty() => ex.errors.push((shown, "no files match".into())),
                Ok(found) => {
                    let n = found.len();
                    let profiles: Vec<PathBuf> =
                        found.into_iter().filter(|p| p.is_file()).collect();
                    if profiles.is_empty() {
                        ex.errors
                            .push((shown, format!("{n} matches, none of them a file")));
                    }
                    files.extend(profiles);
                }
                Err(e) => ex
                    .errors
                    .push((shown, nsys_perfetto_model::errors::error_line(&e))),
            }
        } else {
            ex.errors.push((shown, "no such file or directory".into()));
        }
    }
    // Duplicates (the same file twice) go; pairs giving the same output keep one member.
    let mut seen = HashSet::new();
    files.retain(|f| seen.insert(fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    // A trace among several inputs is an earlier output, not a profile (a trace named alone is
    // kept, for the error that points to `open`).
    if files.len() > 1 {
        let (traces, profiles) = files
            .into_iter()
            .partition(|f| crate::hints::already_a_trace(f).is_some());
        ex.traces = traces;
        files = profiles;
    }
    let mut groups: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        let output = crate::convert::default_output(
            f,
            nsys_perfetto_write::output::formats::OutputFormat::Protobuf,
        );
        groups.entry(output.with_extension("")).or_default().push(i);
    }
    let mut drop = HashSet::new();
    for members in groups.values().filter(|m| m.len() > 1) {
        let (keep, why) = pick_one(&files, members);
        for &i in members.iter().filter(|&&i| i != keep) {
            drop.insert(i);
            ex.superseded.push((
                files[i].clone(),
                format!("{} gives the same output: {why}", files[keep].display()),
            ));
        }
    }
    ex.files = files
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !drop.contains(i))
        .map(|(_, f)| f)
        .collect();
    ex
}

/// Of files that give the same output, the one to convert (an index into `files`) and why: the
/// SQLite export unless a report is newer than it; among reports, the newest.
fn pick_one(files: &[PathBuf], members: &[usize]) -> (usize, &'static str) {
    let newest = |pred: &dyn Fn(&Path) -> bool| {
        members
            .iter()
            .copied()
            .filter(|&i| pred(&files[i]))
            .max_by_key(|&i| mtime(&files[i]))
    };
    let export = newest(&|p: &Path| classify(p) != Input::Report);
    let rep = newest(&|p: &Path| classify(p) == Input::Report);
    match (export, rep) {
        // An export this tool made records its report: its times do not matter.
        (Some(e), Some(r)) if report::export::export_is_of(&files[e], &files[r]) == Some(false) => {
            (
                r,
                "converting the report, which the export was not made from (its export is redone)",
            )
        }
        (Some(e), Some(r)) if report::export::export_is_of(&files[e], &files[r]) == Some(true) => {
            (e, "converting the SQLite export, made from this report")
        }
        (Some(e), Some(r)) if mtime(&files[e]) < mtime(&files[r]) => (
            r,
            "converting the report, newer than the export (its export is redone)",
        ),
        (Some(e), Some(_)) => (e, "converting the export, which needs no nsys"),
        (Some(e), None) => (e, "converting the newest"),
        (None, Some(r)) => (r, "converting the newest report"),
        (None, None) => (members[0], "converting the first"),
    }
}

fn mtime(p: &Path) -> Option<SystemTime> {
    fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// Expand `pattern` (`*`, `?`, `[abc]`, `[a-z]`, `[!a]` in any path component).
pub fn glob(pattern: &Path) -> Result<Vec<PathBuf>> {
    use std::path::Component;
    let mut bases: Vec<PathBuf> = vec![PathBuf::new()];
    let comps: Vec<Component> = pattern.components().collect();
    for (n, c) in comps.iter().enumerate() {
        let last = n + 1 == comps.len();
        match c {
            Component::Normal(s) if has_glob(&s.to_string_lossy()) => {
                let pat: Vec<char> = s.to_string_lossy().chars().collect();
                let mut next = Vec::new();
                for b in &bases {
                    let dir = if b.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        b.as_path()
                    };
                    let Ok(rd) = fs::read_dir(dir) else { continue };
                    let mut names: Vec<String> = rd
                        .flatten()
                        .filter(|e| last || e.path().is_dir())
                        .map(|e| e.file_name().to_string_lossy().to_string())
                        .filter(|name| wildcard(&pat, &name.chars().collect::<Vec<_>>()))
                        .collect();
                    names.sort();
                    next.extend(names.into_iter().map(|name| b.join(name)));
                }
                bases = next;
            }
            other => {
                for b in &mut bases {
                    b.push(other.as_os_str());
                }
                if !last {
                    bases.retain(|b| b.is_dir());
                }
            }
        }
        if bases.is_empty() {
            break;
        }
    }
    bases.retain(|b| b.exists());
    if pattern.components().count() == 0 {
        bail!("empty pattern");
    }
    Ok(bases)
}

/// One element of a component pattern: each matches one character, except `Star`.
#[derive(Debug)]
enum Token {
    Star,
    Any,
    Char(char),
    /// `[...]`: its members (single characters and `a-z` ranges), negated by a leading `!`/`^`.
    Class {
        negate: bool,
        set: Vec<char>,
    },
}

impl Token {
    fn matches(&self, c: char) -> bool {
        match self {
            Token::Star | Token::Any => true,
            Token::Char(p) => *p == c,
            Token::Class { negate, set } => {
                let mut hit = false;
                let mut i = 0;
                while i < set.len() {
                    if i + 2 < set.len() && set[i + 1] == '-' {
                        hit |= set[i] <= c && c <= set[i + 2];
                        i += 3;
                    } else {
                        hit |= set[i] == c;
                        i += 1;
                    }
                }
                hit != *negate
            }
        }
    }
}

/// A component pattern as tokens. A `[` without a `]` after its first member is a literal `[`.
fn tokens(p: &[char]) -> Vec<Token> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            '*' => out.push(Token::Star),
            '?' => out.push(Token::Any),
            '[' => {
                if let Some(close) = p[i..]
                    .iter()
                    .skip(2)
                    .position(|&c| c == ']')
                    .map(|k| i + k + 2)
                {
                    let (negate, set) = match p[i + 1] {
                        '!' | '^' => (true, &p[i + 2..close]),
                        _ => (false, &p[i + 1..close]),
                    };
                    out.push(Token::Class {
                        negate,
                        set: set.to_vec(),
                    });
                    i = close + 1;
                    continue;
                }
                out.push(Token::Char('['));
            }
            c => out.push(Token::Char(c)),
        }
        i += 1;
    }
    out
}

/// Shell-style match of one path component. `*` and `?` do not match a leading `.`.
///
/// Every token but `*` matches exactly one character, so the usual two-pointer match is exact:
/// on a mismatch only the last `*` seen takes one more character (earlier stars never need to,
/// since the last one can absorb whatever they would). At most `p.len() * s.len()` steps: a
/// pattern like `*a*a*a*b` against a long name stays fast.
fn wildcard(p: &[char], s: &[char]) -> bool {
    if s.first() == Some(&'.') && p.first() != Some(&'.') {
        return false;
    }
    let p = tokens(p);
    let (mut pi, mut si) = (0, 0);
    // The last `*`: the token after it, and where in `s` its match ends so far.
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match p.get(pi) {
            Some(Token::Star) => {
                star = Some((pi + 1, si));
                pi += 1;
            }
            Some(t) if t.matches(s[si]) => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((after, end)) => {
                    star = Some((after, end + 1));
                    pi = after;
                    si = end + 1;
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|t| matches!(t, Token::Star))
}

/// Where `input`'s output goes.
fn output_for(input: &Path, opts: &BatchOptions, conv: &Options, many: bool) -> Result<PathBuf> {
    let default = convert::default_output(input, conv.format);
    match &opts.output {
        None => {
            let dir = match default.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            if report::export::read_only_dir(dir) {
                bail!(
                    "{} is read-only, so the output cannot go beside the input: pass -o OUT (a \
                     file, or a directory for several inputs)",
                    dir.display()
                );
            }
            Ok(default)
        }
        Some(o) if convert::file::is_stdout(o) && many => Err(anyhow!(
            "-o - (standard output) takes one input, there are several"
        )),
        Some(o) if convert::file::is_stdout(o) => Ok(o.clone()),
        Some(o) if o.is_dir() => Ok(o.join(default.file_name().unwrap_or_default())),
        Some(_) if many => Err(anyhow!(
            "-o names one file but there are several inputs: give an existing directory"
        )),
        Some(o) => Ok(o.clone()),
    }
}

/// Convert one input (exporting it first when it is a report); the lines to print on success.
fn convert_one(input: &Path, output: &Path, opts: &BatchOptions, conv: &Options) -> Result<String> {
    let mut text = String::new();
    if classify(input) == Input::Report {
        let sibling = report::export::sibling_export(input);
        if output == sibling || convert::file::same_file(output, &sibling) {
            bail!(
                "-o {} is where this report's SQLite export goes: choose another output name",
                output.display()
            );
        }
    }
    let profile = input::prepare(input, &opts.export)?;
    if profile.exported.is_some() && convert::file::same_file(output, profile.export()) {
        bail!(
            "-o {} is the SQLite export this report is converted from: choose another \
             output name",
            output.display()
        );
    }
    let summary = convert::convert_export_from(profile.export(), input, output, conv)?;
    if let Some(line) = profile.describe() {
        text.push_str(&format!("  {line}\n"));
    }
    Ok(format!("{}{text}", summary.render()))
}

/// Convert every input; print a line per file (stderr) and a total when there are several.
pub fn run(inputs: &[PathBuf], opts: &BatchOptions, conv: &Options) -> Totals {
    let ex = expand(inputs);
    let mut t = Totals::default();
    for (arg, e) in &ex.errors {
        nsys_perfetto_model::say!("error: {arg}: {e}");
        t.failed += 1;
    }
    let many = ex.files.len() > 1;
    let batch = many || ex.expanded_any;
    if !opts.quiet {
        for (f, why) in &ex.superseded {
            nsys_perfetto_model::say!("{}: not converted, {why}", f.display());
        }
        for f in &ex.traces {
            nsys_perfetto_model::say!(
                "not converted: {}",
                crate::hints::already_a_trace(f).unwrap_or_default()
            );
        }
    }
    t.superseded = ex.superseded.len();
    let n = ex.files.len();
    // (tag, input, output, why it is converted again) of every file to convert, in order.
    let mut todo: Vec<(String, &PathBuf, PathBuf, String)> = Vec::new();
    for (i, input) in ex.files.iter().enumerate() {
        let tag = if many {
            format!("[{}/{n}] ", i + 1)
        } else {
            String::new()
        };
        if let Some(msg) = crate::hints::already_a_trace(input) {
            nsys_perfetto_model::say!("error: {tag}{msg}");
            t.failed += 1;
            continue;
        }
        let output = match output_for(input, opts, conv, many) {
            Ok(o) => o,
            Err(e) => {
                nsys_perfetto_model::say!(
                    "error: {tag}{}: {}",
                    input.display(),
                    nsys_perfetto_model::errors::error_line(&e)
                );
                t.failed += 1;
                continue;
            }
        };
        if let Some(other) = ex
            .files
            .iter()
            .find(|f| convert::file::same_file(f, &output))
        {
            nsys_perfetto_model::say!(
                "error: {tag}{}: -o {} is {}: choose another output name",
                input.display(),
                output.display(),
                if convert::file::same_file(other, input) {
                    "the input itself".to_string()
                } else {
                    format!("an input of this run ({})", other.display())
                }
            );
            t.failed += 1;
            continue;
        }
        let mut why = String::new();
        if batch && !opts.force && !convert::file::is_stdout(&output) {
            match crate::provenance::check(&output, input, &conv.content_text()) {
                crate::provenance::Reuse::Same => {
                    if !opts.quiet {
                        nsys_perfetto_model::say!(
                            "{tag}{}: reused {}: same input and options (--force to convert again)",
                            input.display(),
                            output.display()
                        );
                    }
                    t.up_to_date += 1;
                    continue;
                }
                crate::provenance::Reuse::Differs(d) => {
                    why = format!("  converting again: {d}\n");
                }
                crate::provenance::Reuse::Missing => {}
            }
        }
        todo.push((tag, input, output, why));
    }
    let jobs = nsys_perfetto_model::parallel::default_jobs(Some(opts.jobs)).min(todo.len().max(1));
    // Several at a time: one progress display (files done) for the run, not one per file.
    let files_progress = nsys_perfetto_model::progress::Progress::default();
    files_progress
        .total
        .store(todo.len() as u64, std::sync::atomic::Ordering::Relaxed);
    let conv_one = Options {
        progress: conv.progress && jobs == 1,
        ..conv.clone()
    };
    // Each file's lines are printed whole, in input order, as soon as the files before it are done.
    let printed = std::sync::Mutex::new((0usize, Vec::<Option<(bool, String)>>::new()));
    let report = |i: usize, ok: bool, text: String| {
        let mut guard = printed.lock().unwrap();
        let (next, slots) = &mut *guard;
        slots.resize_with(todo.len(), || None);
        slots[i] = Some((ok, text));
        while *next < todo.len() {
            let Some((ok, text)) = slots[*next].take() else {
                break;
            };
            if !ok || !opts.quiet {
                if jobs > 1 && conv.progress {
                    nsys_perfetto_model::progress::clear_line();
                }
                nsys_perfetto_model::say_part!("{text}");
            }
            *next += 1;
        }
    };
    let results = std::thread::scope(|s| {
        if jobs > 1 && conv.progress && !opts.quiet {
            s.spawn(|| files_progress.draw_until_finished_in("converting", "files"));
        }
        let r = nsys_perfetto_model::parallel::parallel_map(
            &todo,
            jobs,
            |i, (tag, input, output, why)| {
                let ok = match convert_one(input, output, opts, &conv_one) {
                    Ok(text) => {
                        report(
                            i,
                            true,
                            format!(
                                "{tag}{} -> {}\n{why}{text}",
                                input.display(),
                                if convert::file::is_stdout(output) {
                                    "standard output".to_string()
                                } else {
                                    output.display().to_string()
                                }
                            ),
                        );
                        true
                    }
                    Err(e) => {
                        report(
                            i,
                            false,
                            format!(
                                "error: {tag}{}: {}\n",
                                input.display(),
                                nsys_perfetto_model::errors::error_line(&e)
                            ),
                        );
                        false
                    }
                };
                files_progress.add(1);
                ok
            },
        );
        files_progress.finish();
        r
    });
    for ok in results {
        if ok {
            t.converted += 1;
        } else {
            t.failed += 1;
        }
    }
    // A total only says something when more than one file was at stake.
    if !opts.quiet && ((batch && n > 0) || n + ex.errors.len() > 1) {
        let mut parts = vec![format!("{} converted", t.converted)];
        if t.up_to_date > 0 {
            parts.push(format!("{} reused", t.up_to_date));
        }
        if t.superseded > 0 {
            parts.push(format!("{} superseded", t.superseded));
        }
        parts.push(format!("{} failed", t.failed));
        nsys_perfetto_model::say!("total: {}", parts.join(", "));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        wildcard(
            &p.chars().collect::<Vec<_>>(),
            &s.chars().collect::<Vec<_>>(),
        )
    }

    /// The former recursive matcher, exponential on patterns with many stars, as an oracle.
    fn oracle(p: &[char], s: &[char]) -> bool {
        if s.first() == Some(&'.') && p.first() != Some(&'.') {
            return false;
        }
        fn go(p: &[char], s: &[char]) -> bool {
            match p.first() {
                None => s.is_empty(),
                Some('*') => (0..=s.len()).any(|k| go(&p[1..], &s[k..])),
                Some('?') => !s.is_empty() && go(&p[1..], &s[1..]),
                Some('[') => {
                    let Some(close) = p.iter().skip(2).position(|&c| c == ']').map(|i| i + 2)
                    else {
                        return s.first() == Some(&'[') && go(&p[1..], &s[1..]);
                    };
                    let Some(&c) = s.first() else { return false };
                    let (negate, set) = match p[1] {
                        '!' | '^' => (true, &p[2..close]),
                        _ => (false, &p[1..close]),
                    };
                    let class = Token::Class {
                        negate,
                        set: set.to_vec(),
                    };
                    class.matches(c) && go(&p[close + 1..], &s[1..])
                }
                Some(&c) => s.first() == Some(&c) && go(&p[1..], &s[1..]),
            }
        }
        go(p, s)
    }

    /// Every string of up to `n` of `atoms`.
    fn strings(atoms: &[&str], n: usize) -> Vec<String> {
        let mut all = vec![String::new()];
        let mut level = vec![String::new()];
        for _ in 0..n {
            level = level
                .iter()
                .flat_map(|p| atoms.iter().map(move |a| format!("{p}{a}")))
                .collect();
            all.extend(level.iter().cloned());
        }
        all
    }

    /// Every pattern of up to 3 symbols (stars, `?`, classes, literals, a lone `[` or `]`)
    /// against every name of up to 4 characters: the same answer as the oracle.
    #[test]
    fn same_results_as_the_recursive_matcher() {
        let atoms = [
            "*", "?", "a", "b", ".", "[", "]", "[ab]", "[!a]", "[a-b]", "[]]",
        ];
        let patterns = strings(&atoms, 3);
        let names = strings(&["a", "b", "c", ".", "[", "]"], 4);
        for p in &patterns {
            let pc: Vec<char> = p.chars().collect();
            for n in &names {
                let nc: Vec<char> = n.chars().collect();
                assert_eq!(wildcard(&pc, &nc), oracle(&pc, &nc), "{p:?} against {n:?}");
            }
        }
        assert!(patterns.len() * names.len() > 2_000_000);
    }

    /// A pattern that made the recursive matcher try every way to place its stars
    /// (`C(60, 12)` ways) answers at once.
    #[test]
    fn many_stars_against_a_long_name_is_fast() {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let name = "a".repeat(60);
            let _ = tx.send((
                m(&format!("{}b", "*a".repeat(12)), &name),
                m(&format!("{}*", "*a".repeat(12)), &name),
            ));
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the match did not finish within 10 s");
        assert_eq!(got, (false, true));
    }

    #[test]
    fn wildcards() {
        assert!(m("*.sqlite", "a.sqlite"));
        assert!(!m("*.sqlite", "a.sqlite.part"));
        assert!(!m("*.sqlite", ".a.sqlite"));
        assert!(m(".*", ".a"));
        assert!(m("r?p*", "report1.qdrep"));
        assert!(m("[a-c]x", "bx") && !m("[a-c]x", "dx"));
        assert!(m("[!a]x", "bx") && !m("[!a]x", "ax"));
        assert!(m("[ml]*", "lock") && !m("[ml]*", "quasi"));
        assert!(m("a[", "a["));
        assert!(m("*", "") && !m("?", ""));
    }

    #[test]
    fn glob_dirs_and_files() {
        let t = tempfile::tempdir().unwrap();
        for d in ["r1", "r2", "x"] {
            fs::create_dir(t.path().join(d)).unwrap();
            fs::write(t.path().join(d).join("a.sqlite"), "").unwrap();
        }
        let found = glob(&t.path().join("r?/*.sqlite")).unwrap();
        assert_eq!(
            found,
            vec![t.path().join("r1/a.sqlite"), t.path().join("r2/a.sqlite")]
        );
        assert!(glob(&t.path().join("q*/a.sqlite")).unwrap().is_empty());
    }
}
