//! The layers, checked on the sources: no two modules import each other, directly or through
//! others, and no module imports one of a higher layer (`docs/design.md` draws them).
//!
//! The compiler already refuses imports between the layers' crates that go upward
//! (`crates/model` below `crates/read` and `crates/write`, the app in `src/` above them all);
//! this check covers what it cannot see: circles inside a crate, and the layers that share a
//! crate (base and model; writers and layout; one conversion and the workflows).
//!
//! Modules are named by their crate's name: `crates/read/src/gpu.rs` is
//! `nsys_perfetto_read::gpu`, `crates/model/src/model.rs` is `nsys_perfetto_model::model`,
//! `src/workflow/stats/render.rs` is `nsys_perfetto::workflow::stats::render`, and a crate's `lib.rs` is the crate itself;
//! an inline `mod` belongs to its file. An edge is any path in non-test code that names
//! something of another module: `use` lines and paths in code that start with `crate`, a crate
//! of the workspace, `super`, `self`, a child module or a name a `use` bound, resolved to the
//! module that defines the item (a `pub use` re-export is seen through; it is an edge of the
//! re-exporting module only where that module uses the name itself). Comments, strings and
//! `#[cfg(test)]` items are left out.
//!
//! A module holds its child modules: an import of `a::b` by a module outside `a` is also an
//! import of `a`, so that `a` importing a module that imports `a::b` is a circle (`a` and its
//! parts cannot be read apart from what it imports), and a module importing its parent (or
//! anything the parent holds, from outside the child itself) while the parent imports it is
//! one too.
//!
//! This file uses nothing but `std`, so that it can be checked on its own while the code is
//! being rearranged: `CARGO_MANIFEST_DIR=$PWD rustc --edition 2024 --test tests/all/layers.rs`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

/// The layers, lowest first: a module's layer is that of the longest unit here that holds it
/// (the unit itself or one of its modules).
const LAYERS: &[(&str, &[&str])] = &[
    (
        "base",
        &[
            "nsys_perfetto_model::errors",
            "nsys_perfetto_model::term",
            "nsys_perfetto_model::progress",
            "nsys_perfetto_model::cleanup",
            "nsys_perfetto_model::parallel",
            "nsys_perfetto_write::proto",
        ],
    ),
    (
        "model",
        &[
            "nsys_perfetto_model::category",
            "nsys_perfetto_model::model",
            "nsys_perfetto_model::select",
            "nsys_perfetto_model::summary",
        ],
    ),
    ("sources", &["nsys_perfetto_read"]),
    // The writers below layout: layout's router drives a writer through `output::Writer`, and
    // no writer knows of tracks' placement.
    ("writers", &["nsys_perfetto_write::output"]),
    ("layout", &["nsys_perfetto_write::layout"]),
    (
        "conversion",
        &[
            "nsys_perfetto::convert",
            "nsys_perfetto::format",
            "nsys_perfetto::provenance",
            "nsys_perfetto::report",
            "nsys_perfetto::input",
            "nsys_perfetto::hints",
            "nsys_perfetto::about",
            "nsys_perfetto::pictures",
        ],
    ),
    (
        "workflows and CLI",
        &[
            "nsys_perfetto::workflow",
            "nsys_perfetto::batch",
            "nsys_perfetto::merge",
            "nsys_perfetto::open",
            "nsys_perfetto::serve",
            "nsys_perfetto::commands",
            "nsys_perfetto::cli",
            "nsys_perfetto::args",
            "nsys_perfetto::outcome",
            "nsys_perfetto::main",
        ],
    ),
];

/// Imports forbidden beyond the layer order: (from, to) by unit of [`LAYERS`]. The crates make
/// these impossible to compile; the check still names them should files move between crates.
const FORBIDDEN: &[(&str, &str)] = &[
    ("nsys_perfetto_write::output", "nsys_perfetto_read"),
    ("nsys_perfetto_read", "nsys_perfetto_write::layout"),
    ("nsys_perfetto_read", "nsys_perfetto_write::output"),
    ("nsys_perfetto::workflow", "nsys_perfetto::cli"),
    ("nsys_perfetto::workflow", "nsys_perfetto::args"),
    ("nsys_perfetto::workflow", "nsys_perfetto::commands"),
];

/// The workspace's crates: each one's name and its `src/`.
const CRATES: &[(&str, &str)] = &[
    ("nsys_perfetto", "src/"),
    ("nsys_perfetto_model", "crates/model/src/"),
    ("nsys_perfetto_read", "crates/read/src/"),
    ("nsys_perfetto_write", "crates/write/src/"),
];

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Open(char),
    Close(char),
    Semi,
    Other(char),
}

/// The tokens of a Rust source with their line numbers: comments, strings, chars and lifetimes
/// go; `$crate` is `crate`.
fn lex(src: &str) -> Vec<(Tok, usize)> {
    let c: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    let is_id = |ch: char| ch == '_' || ch.is_alphanumeric();
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied().unwrap_or('\0');
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && next == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && next == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
        } else if ch == '"' || ((ch == 'b' || ch == 'c') && next == '"') {
            i += if ch == '"' { 1 } else { 2 };
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                if c.get(i) == Some(&'\n') {
                    line += 1;
                }
                i += 1;
            }
            i += 1;
        } else if (ch == 'r' && (next == '"' || next == '#'))
            || ((ch == 'b' || ch == 'c') && next == 'r' && matches!(c.get(i + 2), Some('"' | '#')))
        {
            // A raw string r#"..."#, or a raw identifier r#name.
            let mut j = if ch == 'r' { i + 1 } else { i + 2 };
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                // r#ident: the identifier without its prefix.
                let start = j;
                while j < c.len() && is_id(c[j]) {
                    j += 1;
                }
                out.push((Tok::Ident(c[start..j].iter().collect()), line));
                i = j;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '\n' {
                    line += 1;
                }
                if c[j] == '"' && (0..hashes).all(|k| c.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if ch == '\'' || (ch == 'b' && next == '\'') {
            let j = if ch == 'b' { i + 1 } else { i };
            if c.get(j + 1) == Some(&'\\') {
                // An escaped char literal.
                let mut k = j + 2;
                while k < c.len() && c[k] != '\'' {
                    k += 1;
                }
                i = k + 1;
            } else if c.get(j + 2) == Some(&'\'') {
                i = j + 3;
            } else {
                // A lifetime or label.
                i = j + 1;
                while i < c.len() && is_id(c[i]) {
                    i += 1;
                }
            }
        } else if ch == '$' && c[i + 1..].starts_with(&['c', 'r', 'a', 't', 'e']) {
            out.push((Tok::Ident("crate".into()), line));
            i += 6;
        } else if ch.is_ascii_digit() {
            while i < c.len() && is_id(c[i]) {
                i += 1;
            }
        } else if is_id(ch) {
            let start = i;
            while i < c.len() && is_id(c[i]) {
                i += 1;
            }
            out.push((Tok::Ident(c[start..i].iter().collect()), line));
        } else if ch == ':' && next == ':' {
            out.push((Tok::PathSep, line));
            i += 2;
        } else {
            out.push((
                match ch {
                    '{' | '(' | '[' => Tok::Open(ch),
                    '}' | ')' | ']' => Tok::Close(ch),
                    ';' => Tok::Semi,
                    _ => Tok::Other(ch),
                },
                line,
            ));
            i += 1;
        }
    }
    out
}

/// One name a `use` binds: `name` for `path` (relative as written, from `scope`).
#[derive(Debug, Clone)]
struct Binding {
    name: String,
    path: Vec<String>,
    scope: Vec<String>,
    public: bool,
    glob: bool,
    line: usize,
}

/// What one file says: its bindings, the paths in its code, and how often each identifier
/// appears outside `use` lines.
#[derive(Debug, Default)]
struct FileRefs {
    bindings: Vec<Binding>,
    paths: Vec<(Vec<String>, Vec<String>, usize)>, // (path, scope, line)
    idents: BTreeMap<String, usize>,
}

fn ident(t: Option<&(Tok, usize)>) -> Option<&str> {
    match t {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

/// The index past the item starting at `i`: its attributes, then up to a `;` outside brackets
/// or past its first `{...}` block.
fn skip_item(t: &[(Tok, usize)], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < t.len() {
        match &t[i].0 {
            Tok::Open('{') if depth == 0 => {
                let mut d = 0usize;
                while i < t.len() {
                    match t[i].0 {
                        Tok::Open(_) => d += 1,
                        Tok::Close(_) => {
                            d -= 1;
                            if d == 0 {
                                // `const X: T = S { .. };` ends at its `;`.
                                if matches!(t.get(i + 1), Some((Tok::Semi, _))) {
                                    i += 1;
                                }
                                return i + 1;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                return i;
            }
            Tok::Open(_) => depth += 1,
            Tok::Close(_) => depth = depth.saturating_sub(1),
            Tok::Semi if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// Parses a use tree at `i` (after `use`), under `prefix`, into `out`; returns the index past it.
fn use_tree(
    t: &[(Tok, usize)],
    mut i: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<(String, Vec<String>, bool, usize)>,
) -> usize {
    let base = prefix.len();
    // `use ::std::x` has a leading separator.
    if matches!(t.get(i), Some((Tok::PathSep, _))) {
        i += 1;
    }
    loop {
        match t.get(i) {
            Some((Tok::Ident(s), line)) => {
                let line = *line;
                prefix.push(s.clone());
                i += 1;
                if matches!(t.get(i), Some((Tok::PathSep, _))) {
                    i += 1;
                    continue;
                }
                let mut name = s.clone();
                if ident(t.get(i)) == Some("as") {
                    name = ident(t.get(i + 1)).unwrap_or("_").to_string();
                    i += 2;
                }
                if name == "self" {
                    // `use a::b::{self}` binds `b`.
                    prefix.pop();
                    name = prefix.last().cloned().unwrap_or_default();
                    out.push((name, prefix.clone(), false, line));
                } else {
                    out.push((name, prefix.clone(), false, line));
                }
                break;
            }
            Some((Tok::Other('*'), line)) => {
                out.push(("*".into(), prefix.clone(), true, *line));
                i += 1;
                break;
            }
            Some((Tok::Open('{'), _)) => {
                i += 1;
                loop {
                    match t.get(i) {
                        Some((Tok::Close('}'), _)) => {
                            i += 1;
                            break;
                        }
                        Some((Tok::Other(','), _)) => i += 1,
                        None => break,
                        _ => i = use_tree(t, i, prefix, out),
                    }
                }
                break;
            }
            _ => break,
        }
    }
    prefix.truncate(base);
    i
}

fn scan(src: &str) -> FileRefs {
    let t = lex(src);
    let mut r = FileRefs::default();
    // Inline modules: (name, brace depth at which it closes).
    let mut scope: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    let at = |i: usize| -> Option<&Tok> { t.get(i).map(|x| &x.0) };
    while i < t.len() {
        let cur_scope: Vec<String> = scope.iter().map(|s| s.0.clone()).collect();
        match &t[i].0 {
            Tok::Other('#') => {
                // #[cfg(test)] leaves its item out.
                let cfg_test = at(i + 1) == Some(&Tok::Open('['))
                    && ident(t.get(i + 2)) == Some("cfg")
                    && at(i + 3) == Some(&Tok::Open('('))
                    && ident(t.get(i + 4)) == Some("test")
                    && at(i + 5) == Some(&Tok::Close(')'))
                    && at(i + 6) == Some(&Tok::Close(']'));
                if cfg_test {
                    let mut j = i + 7;
                    // Further attributes of the same item.
                    while at(j) == Some(&Tok::Other('#')) && at(j + 1) == Some(&Tok::Open('[')) {
                        let mut d = 0;
                        j += 1;
                        loop {
                            match at(j) {
                                Some(Tok::Open(_)) => d += 1,
                                Some(Tok::Close(_)) => {
                                    d -= 1;
                                    if d == 0 {
                                        j += 1;
                                        break;
                                    }
                                }
                                None => break,
                                _ => {}
                            }
                            j += 1;
                        }
                    }
                    i = skip_item(&t, j);
                    continue;
                }
                i += 1;
            }
            Tok::Ident(kw) if kw == "use" => {
                let public = i > 0 && {
                    // `pub use`, `pub(crate) use`, `pub(super) use`.
                    let mut k = i - 1;
                    if at(k) == Some(&Tok::Close(')')) {
                        while k > 0 && at(k) != Some(&Tok::Open('(')) {
                            k -= 1;
                        }
                        k = k.saturating_sub(1);
                    }
                    ident(t.get(k)) == Some("pub")
                };
                let mut leaves = Vec::new();
                let end = use_tree(&t, i + 1, &mut Vec::new(), &mut leaves);
                for (name, path, glob, line) in leaves {
                    r.bindings.push(Binding {
                        name,
                        path,
                        scope: cur_scope.clone(),
                        public,
                        glob,
                        line,
                    });
                }
                i = end;
            }
            Tok::Ident(kw)
                if kw == "mod"
                    && ident(t.get(i + 1)).is_some()
                    && at(i + 2) == Some(&Tok::Open('{')) =>
            {
                scope.push((ident(t.get(i + 1)).unwrap().to_string(), depth));
                depth += 1;
                i += 3;
            }
            Tok::Ident(s) => {
                *r.idents.entry(s.clone()).or_default() += 1;
                let starts = i == 0 || at(i - 1) != Some(&Tok::PathSep);
                if starts && at(i + 1) == Some(&Tok::PathSep) {
                    let line = t[i].1;
                    let mut path = vec![s.clone()];
                    let mut j = i + 1;
                    while at(j) == Some(&Tok::PathSep) {
                        match ident(t.get(j + 1)) {
                            Some(n) => {
                                path.push(n.to_string());
                                j += 2;
                            }
                            None => break,
                        }
                    }
                    for n in &path[1..] {
                        *r.idents.entry(n.clone()).or_default() += 1;
                    }
                    r.paths.push((path, cur_scope, line));
                    i = j;
                } else {
                    i += 1;
                }
            }
            Tok::Open('{') => {
                depth += 1;
                i += 1;
            }
            Tok::Close('}') => {
                depth = depth.saturating_sub(1);
                if scope.last().is_some_and(|s| s.1 == depth) {
                    scope.pop();
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    r
}

/// One import of `to` by `from`, where the source says it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub file: String,
    pub line: usize,
}

pub struct Graph {
    pub modules: BTreeSet<String>,
    /// (from, to) -> the first place it is written.
    pub edges: BTreeMap<(String, String), Edge>,
}

fn module_name(m: &[String]) -> String {
    m.join("::")
}

/// The module a workspace crate's name stands for (`None`: not one of ours).
fn crate_root(name: &str) -> Option<Vec<String>> {
    CRATES
        .iter()
        .any(|(c, _)| *c == name)
        .then(|| vec![name.to_string()])
}

/// A file's crate root and its path in the tree of modules (`nsys_perfetto_read/gpu.rs` for
/// `crates/read/src/gpu.rs`, `nsys_perfetto_read/mod.rs` for that crate's `lib.rs`).
fn place_of(file: &str) -> (Vec<String>, String) {
    for (name, src) in CRATES {
        if let Some(rest) = file.strip_prefix(src) {
            let rest = if rest == "lib.rs" { "mod.rs" } else { rest };
            return (vec![name.to_string()], format!("{name}/{rest}"));
        }
    }
    panic!("{file}: not in a crate of the workspace");
}

/// The module path of a file (`nsys_perfetto::workflow::stats::render` for
/// `src/workflow/stats/render.rs`).
fn module_of(file: &str) -> Vec<String> {
    let (_, tree_path) = place_of(file);
    let f = tree_path.strip_suffix(".rs").unwrap_or(&tree_path);
    let mut parts: Vec<String> = f.split('/').map(String::from).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

struct Resolver<'a> {
    modules: BTreeSet<Vec<String>>,
    /// Each module's crate root (`[nsys_perfetto_read]` for the reading crate's modules).
    roots: BTreeMap<Vec<String>, Vec<String>>,
    /// Each module's bindings, crate roots included.
    bindings: BTreeMap<Vec<String>, &'a [Binding]>,
}

impl Resolver<'_> {
    /// A path as written in `module` (inside its inline modules `scope`) made absolute; `None`
    /// for another crate's.
    fn absolute(
        &self,
        module: &[String],
        scope: &[String],
        path: &[String],
        hops: usize,
    ) -> Option<Vec<String>> {
        if hops > 16 {
            panic!(
                "{}: {} does not resolve",
                module_name(module),
                path.join("::")
            );
        }
        let mut here: Vec<String> = module.iter().chain(scope).cloned().collect();
        let first = path.first()?.as_str();
        let mut rest = &path[1..];
        match first {
            "crate" => {
                let mut abs = self.roots.get(module).cloned().unwrap_or_default();
                abs.extend_from_slice(rest);
                return Some(abs);
            }
            name if crate_root(name).is_some() => {
                let mut abs = crate_root(name).unwrap_or_default();
                abs.extend_from_slice(rest);
                return Some(abs);
            }
            "self" => {}
            "super" => {
                here.pop();
                while rest.first().is_some_and(|s| s == "super") {
                    here.pop();
                    rest = &rest[1..];
                }
            }
            _ => {
                let mut child = here.clone();
                child.push(first.to_string());
                if self.modules.contains(&child) {
                    child.extend_from_slice(rest);
                    return Some(child);
                }
                // A name a `use` of this file bound.
                // (`use anyhow::{anyhow, Result}` binds `anyhow` by a path that starts with it:
                // another crate's.)
                let b = self.bindings.get(module)?.iter().find(|b| {
                    !b.glob && b.name == first && b.path.first().is_some_and(|p| p != first)
                })?;
                let mut abs = self.absolute(module, &b.scope, &b.path, hops + 1)?;
                abs.extend_from_slice(rest);
                return Some(abs);
            }
        }
        here.extend_from_slice(rest);
        Some(here)
    }

    /// The module that defines what an absolute path names, seen through re-exports.
    fn defining(&self, abs: &[String], hops: usize) -> Vec<String> {
        let mut n = abs.len();
        while n > 0 && !self.modules.contains(&abs[..n]) {
            n -= 1;
        }
        let module = abs[..n].to_vec();
        if n < abs.len()
            && hops < 16
            && let Some(b) = self
                .bindings
                .get(&module)
                .and_then(|bs| bs.iter().find(|b| !b.glob && b.name == abs[n]))
            && let Some(mut target) = self.absolute(&module, &b.scope, &b.path, 0)
        {
            target.extend_from_slice(&abs[n + 1..]);
            return self.defining(&target, hops + 1);
        }
        module
    }
}

/// The import graph of the sources given as (path from the repository's top, text).
pub fn graph(files: &[(String, String)]) -> Graph {
    let scanned: Vec<(Vec<String>, &String, FileRefs)> = files
        .iter()
        .map(|(f, text)| (module_of(f), f, scan(text)))
        .collect();
    let modules: BTreeSet<Vec<String>> = scanned.iter().map(|(m, _, _)| m.clone()).collect();
    let mut bindings = BTreeMap::new();
    let mut roots = BTreeMap::new();
    for (m, file, refs) in &scanned {
        bindings.insert(m.clone(), &refs.bindings[..]);
        roots.insert(m.clone(), place_of(file).0);
    }
    let res = Resolver {
        modules,
        roots,
        bindings,
    };
    let mut edges: BTreeMap<(String, String), Edge> = BTreeMap::new();
    for (m, file, refs) in &scanned {
        let mut add = |abs: Option<Vec<String>>, line: usize| {
            let Some(abs) = abs else { return };
            let to = res.defining(&abs, 0);
            // The module imported, and the modules that hold it and not the importer (an
            // import of `a::b` from outside `a` is an import of `a` too); crate roots only
            // declare modules.
            if to.is_empty() || &to == m {
                return;
            }
            for n in (1..=to.len()).rev() {
                let holder = n < to.len();
                let to = &to[..n];
                if holder && (n == 1 || m.starts_with(to)) {
                    break;
                }
                let key = (module_name(m), module_name(to));
                let e = Edge {
                    from: key.0.clone(),
                    to: key.1.clone(),
                    file: file.to_string(),
                    line,
                };
                edges
                    .entry(key)
                    .and_modify(|old| *old = old.clone().min(e.clone()))
                    .or_insert(e);
            }
        };
        for b in &refs.bindings {
            // A re-export is an import of its own module only where that module uses the name.
            if b.public && !b.glob && refs.idents.get(&b.name).copied().unwrap_or(0) == 0 {
                continue;
            }
            add(res.absolute(m, &b.scope, &b.path, 0), b.line);
        }
        for (path, scope, line) in &refs.paths {
            add(res.absolute(m, scope, path, 0), *line);
        }
    }
    Graph {
        modules: res
            .modules
            .iter()
            .filter(|m| m.len() > 1)
            .map(|m| module_name(m))
            .collect(),
        edges,
    }
}

/// The unit of [`LAYERS`] that holds `module` (the longest), and its layer.
fn unit_of(module: &str) -> Option<(&'static str, usize)> {
    let holds = |unit: &str| {
        module
            .strip_prefix(unit)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    };
    LAYERS
        .iter()
        .enumerate()
        .flat_map(|(layer, (_, units))| units.iter().map(move |u| (*u, layer)))
        .filter(|(u, _)| holds(u))
        .max_by_key(|(u, _)| u.len())
}

fn layer_of(module: &str) -> Option<usize> {
    unit_of(module).map(|(_, layer)| layer)
}

/// The strongly connected components of more than one module (Tarjan's, iteratively).
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    let names: Vec<&String> = g.modules.iter().collect();
    let index_of: BTreeMap<&String, usize> =
        names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut adj = vec![Vec::new(); names.len()];
    for (from, to) in g.edges.keys() {
        if let (Some(&a), Some(&b)) = (index_of.get(from), index_of.get(to)) {
            adj[a].push(b);
        }
    }
    let n = names.len();
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut next, mut out) = (Vec::new(), 0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut k)) = work.last_mut() {
            if *k == 0 {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on[v] = true;
            }
            if *k < adj[v].len() {
                let w = adj[v][*k];
                *k += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut comp = Vec::new();
                loop {
                    let w = stack.pop().unwrap();
                    on[w] = false;
                    comp.push(names[w].clone());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    out.push(comp);
                }
            }
        }
    }
    out.sort();
    out
}

/// A shortest cycle through `start` inside `comp`, as its edges.
fn cycle_through(g: &Graph, comp: &[String], start: &str) -> Vec<Edge> {
    let inside: BTreeSet<&str> = comp.iter().map(String::as_str).collect();
    let mut prev: BTreeMap<&str, &Edge> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for e in g
            .edges
            .values()
            .filter(|e| e.from == v && inside.contains(e.to.as_str()))
        {
            if e.to == start {
                let mut path = vec![e.clone()];
                let mut at = v;
                while at != start {
                    let p = prev[at];
                    path.push(p.clone());
                    at = &p.from;
                }
                path.reverse();
                return path;
            }
            if !prev.contains_key(e.to.as_str()) {
                prev.insert(&e.to, e);
                queue.push_back(&e.to);
            }
        }
    }
    Vec::new()
}

/// Every breach of the rules, one paragraph each; empty when the graph keeps them.
pub fn problems(g: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for m in &g.modules {
        if layer_of(m).is_none() {
            out.push(format!("module {m} has no layer: add it to LAYERS in tests/all/layers.rs and docs/design.md"));
        }
    }
    for comp in cycles(g) {
        let mut text = format!(
            "import circle of {} modules: {}",
            comp.len(),
            comp.join(", ")
        );
        // Each module's shortest way back to itself, the pairs first.
        let mut shown = BTreeSet::new();
        for m in &comp {
            let cycle = cycle_through(g, &comp, m);
            let key: BTreeSet<String> = cycle.iter().map(|e| e.from.clone()).collect();
            if cycle.is_empty() || !shown.insert(key) {
                continue;
            }
            text.push_str("\n    ");
            text.push_str(
                &cycle
                    .iter()
                    .map(|e| format!("{} -> {} ({}:{})", e.from, e.to, e.file, e.line))
                    .collect::<Vec<_>>()
                    .join(", "),
            );
        }
        out.push(text);
    }
    for e in g.edges.values() {
        let (Some(a), Some(b)) = (layer_of(&e.from), layer_of(&e.to)) else {
            continue;
        };
        let unit = |m: &str| unit_of(m).map_or("", |(u, _)| u);
        if b > a {
            out.push(format!(
                "upward import: {} ({}) imports {} ({}) at {}:{}",
                e.from, LAYERS[a].0, e.to, LAYERS[b].0, e.file, e.line
            ));
        } else if FORBIDDEN.contains(&(unit(&e.from), unit(&e.to))) {
            out.push(format!(
                "forbidden import: {} imports {} at {}:{}",
                e.from, e.to, e.file, e.line
            ));
        }
    }
    out
}

fn sources(dir: &Path, under: &str, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let rel = if under.is_empty() {
            name.clone()
        } else {
            format!("{under}/{name}")
        };
        if p.is_dir() {
            sources(&p, &rel, out);
        } else if name.ends_with(".rs") {
            out.push((rel, std::fs::read_to_string(&p).unwrap()));
        }
    }
}

#[test]
fn src_has_no_import_circle_and_no_upward_import() {
    let mut files = Vec::new();
    for (_, src) in CRATES {
        let src = src.trim_end_matches('/');
        sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join(src),
            src,
            &mut files,
        );
    }
    // A string or char read wrongly would shift every bracket after it, and the `#[cfg(test)]`
    // item skipped from there could swallow the rest of the file's imports.
    for (file, text) in &files {
        let mut open = Vec::new();
        for (t, line) in lex(text) {
            match t {
                Tok::Open(c) => open.push(c),
                Tok::Close(c) => {
                    let want = match c {
                        ')' => '(',
                        ']' => '[',
                        _ => '{',
                    };
                    assert_eq!(
                        open.pop(),
                        Some(want),
                        "{file}:{line}: brackets read unbalanced"
                    );
                }
                _ => {}
            }
        }
        assert!(
            open.is_empty(),
            "{file}: brackets read unbalanced at its end"
        );
    }
    let g = graph(&files);
    if std::env::var_os("LAYERS_PRINT").is_some() {
        for e in g.edges.values() {
            eprintln!("{} -> {}  {}:{}", e.from, e.to, e.file, e.line);
        }
    }
    assert!(
        g.modules.len() > 50,
        "only {} modules found in the crates",
        g.modules.len()
    );
    assert!(
        g.edges.len() > 100,
        "only {} imports found in the crates",
        g.edges.len()
    );
    let p = problems(&g);
    assert!(
        p.is_empty(),
        "{} breaches of the layers (docs/design.md):\n{}",
        p.len(),
        p.join("\n")
    );
}

/// The workflows know nothing of the command line's parser: `commands` converts clap's types to
/// the workflows' options.
#[test]
fn workflows_do_not_name_clap() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src/workflow"),
        "src/workflow",
        &mut files,
    );
    assert!(!files.is_empty(), "no files under src/workflow");
    for (file, text) in &files {
        for (t, line) in lex(text) {
            assert!(
                t != Tok::Ident("clap".into()),
                "{file}:{line}: a workflow names clap; take an option struct instead"
            );
        }
    }
}

#[test]
fn a_planted_circle_and_upward_import_are_reported() {
    let files: Vec<(String, String)> = [
        ("src/lib.rs", "pub mod convert; pub mod cli;"),
        (
            "src/convert.rs",
            "use nsys_perfetto_model::select::{self, f as g};\npub fn run() { select::h(); }",
        ),
        (
            "crates/model/src/lib.rs",
            "pub mod errors; pub mod model; pub mod select; pub mod summary;",
        ),
        (
            "crates/model/src/select.rs",
            "//! crate::output::x in a comment is no import\nuse crate::errors;\n\
             pub fn f() -> u32 { let s = \"crate::cli::main\"; nsys_perfetto::convert::run(s) }\n\
             #[cfg(test)]\nmod tests { use crate::serve::x; }",
        ),
        ("crates/model/src/errors.rs", "pub struct E;"),
        // A circle through a module's child: summary imports a part of model, which imports
        // summary.
        (
            "crates/model/src/model.rs",
            "pub mod category;\npub fn finish() -> crate::summary::Summary { todo!() }",
        ),
        ("crates/model/src/model/category.rs", "pub struct Category;"),
        (
            "crates/model/src/summary.rs",
            "use crate::model::category::Category;\npub struct Summary(Category);",
        ),
        (
            "crates/read/src/lib.rs",
            "pub mod gpu; pub mod api;\npub use gpu::Row;",
        ),
        (
            "crates/read/src/gpu.rs",
            "pub struct Row; fn x() { super::api::read(); }",
        ),
        (
            "crates/read/src/api.rs",
            "use crate::Row as R;\nuse nsys_perfetto_write::output::json;",
        ),
        ("crates/write/src/lib.rs", "pub mod output;"),
        ("crates/write/src/output/mod.rs", "pub mod json;"),
        (
            "crates/write/src/output/json.rs",
            "fn w() { nsys_perfetto_read::gpu::Row::new(); let r#type = 'a'; let c = '{'; }",
        ),
    ]
    .iter()
    .map(|(f, t)| (f.to_string(), t.to_string()))
    .collect();
    let g = graph(&files);
    let edges: Vec<String> = g.edges.keys().map(|(a, b)| format!("{a}->{b}")).collect();
    assert_eq!(
        edges,
        [
            "nsys_perfetto::convert->nsys_perfetto_model::select",
            "nsys_perfetto_model::model->nsys_perfetto_model::summary",
            "nsys_perfetto_model::select->nsys_perfetto::convert",
            "nsys_perfetto_model::select->nsys_perfetto_model::errors",
            "nsys_perfetto_model::summary->nsys_perfetto_model::model",
            "nsys_perfetto_model::summary->nsys_perfetto_model::model::category",
            "nsys_perfetto_read::api->nsys_perfetto_read::gpu",
            "nsys_perfetto_read::api->nsys_perfetto_write::output",
            "nsys_perfetto_read::api->nsys_perfetto_write::output::json",
            "nsys_perfetto_read::gpu->nsys_perfetto_read::api",
            "nsys_perfetto_write::output::json->nsys_perfetto_read::gpu",
        ]
    );
    let p = problems(&g).join("\n");
    for want in [
        "import circle of 2 modules: nsys_perfetto::convert, nsys_perfetto_model::select",
        "nsys_perfetto_model::select -> nsys_perfetto::convert (crates/model/src/select.rs:3)",
        "import circle of 2 modules: nsys_perfetto_model::model, nsys_perfetto_model::summary",
        "nsys_perfetto_model::model -> nsys_perfetto_model::summary (crates/model/src/model.rs:2), nsys_perfetto_model::summary -> nsys_perfetto_model::model (crates/model/src/summary.rs:1)",
        "import circle of 3 modules: nsys_perfetto_read::api, nsys_perfetto_read::gpu, nsys_perfetto_write::output::json",
        "nsys_perfetto_read::api -> nsys_perfetto_read::gpu (crates/read/src/api.rs:1), nsys_perfetto_read::gpu -> nsys_perfetto_read::api (crates/read/src/gpu.rs:1)",
        "upward import: nsys_perfetto_model::select (model) imports nsys_perfetto::convert (conversion) at crates/model/src/select.rs:3",
        "upward import: nsys_perfetto_read::api (sources) imports nsys_perfetto_write::output::json (writers) at crates/read/src/api.rs:2",
        // The module that holds json, imported with it.
        "upward import: nsys_perfetto_read::api (sources) imports nsys_perfetto_write::output (writers) at crates/read/src/api.rs:2",
        "forbidden import: nsys_perfetto_write::output::json imports nsys_perfetto_read::gpu at crates/write/src/output/json.rs:1",
    ] {
        assert!(p.contains(want), "{want:?} not in:\n{p}");
    }
    assert_eq!(p.matches("upward").count(), 3, "{p}");
}

#[test]
fn a_workflow_importing_the_command_line_is_reported() {
    let files: Vec<(String, String)> = [
        ("src/lib.rs", "pub mod args; pub mod workflow;"),
        ("src/args.rs", "pub struct StatsArgs;"),
        (
            "src/workflow/mod.rs",
            "use crate::args::StatsArgs;\npub fn run(_: &StatsArgs) {}",
        ),
    ]
    .iter()
    .map(|(f, t)| (f.to_string(), t.to_string()))
    .collect();
    let p = problems(&graph(&files)).join("\n");
    assert!(
        p.contains("forbidden import: nsys_perfetto::workflow imports nsys_perfetto::args at src/workflow/mod.rs:1"),
        "{p}"
    );
}
