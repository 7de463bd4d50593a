//! The import graph of a crate, read from its sources: a small lexer (comments, strings and chars
//! dropped), the paths a file names (`crate::`, `super::`, `self::`, a child module; groups, globs
//! and `as` read), and where each leads once the `use`s and re-exports on the way are followed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

// ---- reading Rust: tokens and paths ------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

/// The identifiers, `::` and punctuation of a source; comments, strings, chars and numbers dropped
/// (a brace in a string must not open a scope).
fn lex(text: &str) -> Vec<Tok> {
    let c: Vec<char> = text.chars().collect();
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let (mut toks, mut i) = (Vec::new(), 0);
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && at(i + 1) == '*' {
            let (mut depth, mut j) = (1, i + 2);
            while j < c.len() && depth > 0 {
                if c[j] == '/' && at(j + 1) == '*' {
                    (depth, j) = (depth + 1, j + 2);
                } else if c[j] == '*' && at(j + 1) == '/' {
                    (depth, j) = (depth - 1, j + 2);
                } else {
                    j += 1;
                }
            }
            i = j;
        } else if ch == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if ch == '\'' {
            // A char literal ('x', '\n', '\u{7b}') or a lifetime ('a).
            if at(i + 1) == '\\' {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if ch.is_ascii_digit() {
            while i < c.len() && is_ident(c[i]) {
                i += 1;
            }
        } else if is_ident(ch) {
            let start = i;
            while i < c.len() && is_ident(c[i]) {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let raw_string = matches!(word.as_str(), "r" | "br" | "cr") && matches!(at(i), '"' | '#');
            if raw_string && !(at(i) == '#' && is_ident(at(i + 1))) {
                let hashes = c[i..].iter().take_while(|&&h| h == '#').count();
                i += hashes + 1;
                while i < c.len()
                    && !(c[i] == '"' && c[i + 1..].iter().take(hashes).filter(|&&h| h == '#').count() == hashes)
                {
                    i += 1;
                }
                i += hashes + 1;
            } else if word == "r" && at(i) == '#' {
                i += 1; // r#ident: the identifier follows
            } else {
                toks.push(Tok::Ident(word));
            }
        } else if ch == ':' && at(i + 1) == ':' {
            toks.push(Tok::Sep);
            i += 2;
        } else {
            toks.push(Tok::Punct(ch));
            i += 1;
        }
    }
    toks
}

/// One path a source names: its segments as written, the name it binds (`use … as x`), a glob.
#[derive(Debug, Clone)]
struct Written {
    segs: Vec<String>,
    alias: Option<String>,
    glob: bool,
}

/// Reads the path starting at `toks[*i]`, groups (`a::{b, c::d}`) expanded, into `out`.
fn read_path(toks: &[Tok], i: &mut usize, mut segs: Vec<String>, out: &mut Vec<Written>) {
    loop {
        match toks.get(*i) {
            Some(Tok::Ident(s)) => {
                segs.push(s.clone());
                *i += 1;
                match toks.get(*i) {
                    Some(Tok::Sep) => *i += 1,
                    Some(Tok::Ident(a)) if a == "as" => {
                        let alias = match toks.get(*i + 1) {
                            Some(Tok::Ident(n)) => Some(n.clone()),
                            _ => None,
                        };
                        *i += 2;
                        return out.push(Written { segs, alias, glob: false });
                    }
                    _ => return out.push(Written { segs, alias: None, glob: false }),
                }
            }
            Some(Tok::Punct('*')) => {
                *i += 1;
                return out.push(Written { segs, alias: None, glob: true });
            }
            Some(Tok::Punct('{')) => {
                *i += 1;
                while *i < toks.len() && toks[*i] != Tok::Punct('}') {
                    let before = *i;
                    read_path(toks, i, segs.clone(), out);
                    if toks.get(*i) == Some(&Tok::Punct(',')) || *i == before {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            _ => return out.push(Written { segs, alias: None, glob: false }),
        }
    }
}

/// The top-level modules a source names through `crate::` (`use crate::{a::x, b}` groups too).
pub fn imports(text: &str) -> BTreeSet<String> {
    let toks = lex(text);
    let mut found = BTreeSet::new();
    for (i, tok) in toks.iter().enumerate() {
        let starts = *tok == Tok::Ident("crate".into()) && (i == 0 || toks[i - 1] != Tok::Sep);
        if starts && toks.get(i + 1) == Some(&Tok::Sep) {
            let (mut j, mut out) = (i + 2, Vec::new());
            read_path(&toks, &mut j, Vec::new(), &mut out);
            found.extend(out.into_iter().filter_map(|w| w.segs.into_iter().next()));
        }
    }
    found
}

// ---- a crate's modules and what they import ----------------------------------------------------

pub type ModPath = Vec<String>;

/// One crate's modules as read from its files. A folder's own file (`mod.rs` or `folder.rs`) is its
/// face: what it defines is shared by the folder's files, what it imports or re-exports from one
/// of them stands for that file.
#[derive(Default)]
pub struct Tree {
    /// A file-backed module → (its file, its tokens).
    files: BTreeMap<ModPath, (String, Vec<Tok>)>,
    /// Every module, file-backed or inline (`mod tests { … }`).
    modules: BTreeSet<ModPath>,
    /// A module → the names its `use` declarations bind → the paths they stand for.
    uses: BTreeMap<ModPath, BTreeMap<String, ModPath>>,
    /// A module → the modules it glob-imports (`use super::*`).
    globs: BTreeMap<ModPath, Vec<ModPath>>,
    /// A file-backed module → the items its file defines (`fn x`, `struct X`, `macro_rules! x`…).
    defined: BTreeMap<ModPath, BTreeSet<String>>,
    /// The modules under `#[cfg(test)]`.
    tests: BTreeSet<ModPath>,
    /// (the file-backed module whose file names it, the absolute path named, a glob, in test code).
    refs: Vec<(ModPath, ModPath, bool, bool)>,
    /// (a file-backed module, test code or not) → the names that code starts a path with (a glob
    /// may have brought them in), and whether a `::` follows.
    names: BTreeMap<(ModPath, bool), BTreeSet<(String, bool)>>,
    /// (a file-backed module, test code or not) → every module that code imports something from.
    targets: BTreeMap<(ModPath, bool), BTreeSet<ModPath>>,
}

/// Whether the `mod` at `toks[at]` is under `#[cfg(test)]` (a visibility in between).
fn cfg_test(toks: &[Tok], at: usize) -> bool {
    let visibility = ["pub", "crate", "super", "self", "in", "(", ")"];
    let shown = |t: &Tok| match t {
        Tok::Ident(s) => s.clone(),
        Tok::Punct(c) => c.to_string(),
        Tok::Sep => "::".into(),
    };
    let mut start = at;
    while start > 0 && visibility.contains(&shown(&toks[start - 1]).as_str()) {
        start -= 1;
    }
    let attribute: Vec<String> = toks[start.saturating_sub(7)..start].iter().map(shown).collect();
    attribute == ["#", "[", "cfg", "(", "test", ")", "]"]
}

/// `runner/exec.rs` → `[runner, exec]`; `ledger/mod.rs` → `[ledger]`; `lib.rs`, `main.rs` → `[]`.
fn module_path(relative: &str) -> ModPath {
    let mut segs: Vec<String> = relative.trim_end_matches(".rs").split('/').map(str::to_string).collect();
    if segs.last().is_some_and(|s| s == "mod") || (segs.len() == 1 && (segs[0] == "lib" || segs[0] == "main")) {
        segs.pop();
    }
    segs
}

impl Tree {
    /// `files`: (path shown in messages, path relative to the crate's `src`, text).
    pub fn new(files: &[(String, String, String)]) -> Tree {
        let mut tree = Tree::default();
        for (shown, relative, text) in files {
            // lib.rs and main.rs are both the root: their two crates share `src`, so one tree.
            let entry = tree.files.entry(module_path(relative)).or_insert_with(|| (shown.clone(), Vec::new()));
            entry.1.extend(lex(text));
        }
        tree.modules = tree.files.keys().cloned().collect();
        const ITEMS: &[&str] = &["fn", "struct", "enum", "union", "trait", "type", "const", "static"];
        for (module, (_, toks)) in &tree.files {
            let names = toks.windows(3).filter_map(|w| match w {
                [Tok::Ident(kw), Tok::Ident(n), _] if ITEMS.contains(&kw.as_str()) => Some(n.clone()),
                [Tok::Ident(kw), Tok::Punct('!'), Tok::Ident(n)] if kw == "macro_rules" => Some(n.clone()),
                _ => None,
            });
            tree.defined.insert(module.clone(), names.collect());
        }
        for module in tree.files.keys().cloned().collect::<Vec<_>>() {
            tree.scan(&module, false);
        }
        for module in tree.files.keys().cloned().collect::<Vec<_>>() {
            tree.scan(&module, true);
        }
        tree.targets = tree.imported_modules();
        tree
    }

    /// Every `.rs` file under `src`, each shown as `shown_prefix` and its path there.
    pub fn read(src: &Path, shown_prefix: &str) -> Tree {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        let files: Vec<(String, String, String)> = paths
            .iter()
            .map(|p| {
                let relative = p.strip_prefix(src).unwrap().to_string_lossy().replace('\\', "/");
                (format!("{shown_prefix}{relative}"), relative, std::fs::read_to_string(p).unwrap())
            })
            .collect();
        Tree::new(&files)
    }

    /// Walks a file with its inline modules: the first pass finds them, the second what is named.
    fn scan(&mut self, file: &ModPath, second: bool) {
        let toks = self.files[file].1.clone();
        // The module of each open brace, so `super::` inside `mod tests { … }` means the file.
        let mut scopes: Vec<ModPath> = vec![file.clone()];
        let mut i = 0;
        while i < toks.len() {
            let here = scopes.last().unwrap().clone();
            if toks[i] == Tok::Ident("mod".into())
                && let Some(Tok::Ident(name)) = toks.get(i + 1)
                && cfg_test(&toks, i)
            {
                self.tests.insert([here.clone(), vec![name.clone()]].concat());
            }
            match &toks[i] {
                Tok::Punct('{') => {
                    let inline = match (i.checked_sub(2).map(|k| &toks[k]), i.checked_sub(1).map(|k| &toks[k])) {
                        (Some(Tok::Ident(m)), Some(Tok::Ident(name))) if m == "mod" => Some(name.clone()),
                        _ => None,
                    };
                    let mut scope = here.clone();
                    scope.extend(inline);
                    self.modules.insert(scope.clone());
                    scopes.push(scope);
                }
                Tok::Punct('}') if scopes.len() > 1 => {
                    scopes.pop();
                }
                Tok::Ident(word) if second && (i == 0 || toks[i - 1] != Tok::Sep) => {
                    let is_use = word == "use";
                    let mut j = if is_use { i + 1 } else { i };
                    let mut written = Vec::new();
                    read_path(&toks, &mut j, Vec::new(), &mut written);
                    let in_test = (0..=here.len()).any(|n| self.tests.contains(&here[..n]));
                    if i == 0 || toks[i - 1] != Tok::Punct('.') {
                        let head = toks.get(i + 1) == Some(&Tok::Sep);
                        self.names.entry((file.clone(), in_test)).or_default().insert((word.clone(), head));
                    }
                    for w in written {
                        let Some(path) = self.absolute(&here, &w.segs) else { continue };
                        if is_use {
                            self.bind(&here, &w, path.clone());
                        }
                        self.refs.push((file.clone(), path, w.glob, in_test));
                    }
                    i = j.max(i + 1);
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }

    /// A path as written in module `here`, from the crate root; `None` when it leaves the crate or
    /// starts at a local name.
    fn absolute(&self, here: &ModPath, segs: &[String]) -> Option<ModPath> {
        let first = segs.first()?;
        let (mut path, rest) = match first.as_str() {
            "crate" => (Vec::new(), &segs[1..]),
            "self" => (here.clone(), &segs[1..]),
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                (here[..here.len().checked_sub(ups)?].to_vec(), &segs[ups..])
            }
            name => {
                let mut child = here.clone();
                child.push(name.to_string());
                if !self.modules.contains(&child) {
                    return None;
                }
                (here.clone(), segs)
            }
        };
        path.extend(rest.iter().filter(|s| *s != "self").cloned());
        Some(path)
    }

    /// What a `use` in `here` binds: a name for `resolve` to follow, or a glob.
    fn bind(&mut self, here: &ModPath, written: &Written, path: ModPath) {
        if written.glob {
            return self.globs.entry(here.clone()).or_default().push(path);
        }
        let name = written.alias.clone().or_else(|| path.last().cloned());
        if let Some(name) = name.filter(|n| n != "_") {
            self.uses.entry(here.clone()).or_default().insert(name, path);
        }
    }

    /// Whether `module`'s own file defines an item `name`.
    fn defines(&self, module: &ModPath, name: &str) -> bool {
        self.defined.get(module).is_some_and(|names| names.contains(name))
    }

    /// The module whose file holds what `path` names: modules walked down, names a module imports
    /// or re-exports followed to where they come from.
    fn resolve(&self, path: &[String], depth: usize) -> ModPath {
        let mut module: ModPath = Vec::new();
        for (k, seg) in path.iter().enumerate() {
            let mut child = module.clone();
            child.push(seg.clone());
            if self.modules.contains(&child) {
                module = child;
                continue;
            }
            if depth > 8 || self.defines(&module, seg) {
                return module;
            }
            if let Some(source) = self.uses.get(&module).and_then(|u| u.get(seg)) {
                let mut target = source.clone();
                target.extend(path[k + 1..].iter().cloned());
                return self.resolve(&target, depth + 1);
            }
            for glob in self.globs.get(&module).into_iter().flatten() {
                let from = self.resolve(glob, depth + 1);
                let mut target = from.clone();
                target.push(seg.clone());
                let named = self.resolve(&target, depth + 1);
                if named != from || self.defines(&from, seg) {
                    target.extend(path[k + 1..].iter().cloned());
                    return self.resolve(&target, depth + 1);
                }
            }
            return module;
        }
        module
    }

    /// Every module each file-backed module's file (its test code apart) imports something from.
    fn imported_modules(&self) -> BTreeMap<(ModPath, bool), BTreeSet<ModPath>> {
        let mut out: BTreeMap<(ModPath, bool), BTreeSet<ModPath>> = BTreeMap::new();
        for (file, path, glob, in_test) in &self.refs {
            let found = out.entry((file.clone(), *in_test)).or_default();
            if !glob {
                found.insert(self.resolve(path, 0));
                continue;
            }
            // A glob brings in names; the file depends on where those it uses come from (a module
            // by a path starting at it, an item by its name, not a field, method or path segment).
            let from = self.resolve(path, 0);
            for (name, head) in self.names.get(&(file.clone(), *in_test)).into_iter().flatten() {
                let mut target = from.clone();
                target.push(name.clone());
                if *head || !self.modules.contains(&target) {
                    found.insert(self.resolve(&target, 0));
                }
            }
        }
        out
    }

    /// The modules with child files: the folders whose files may not import each other in a circle.
    pub fn folders(&self) -> BTreeSet<ModPath> {
        self.files.keys().filter_map(|m| m.split_last().map(|(_, parent)| parent.to_vec())).collect()
    }

    /// The files of `folder` (named by their child module) → those of its files each imports.
    /// Below a crate's top level, test code is left out: a test module is a leaf nobody imports, and
    /// a test borrowing a sibling's helper ties no files together. (At the top level it counts, so a
    /// test may not reach up the layers either.)
    pub fn graph(&self, folder: &ModPath) -> BTreeMap<String, BTreeSet<String>> {
        let n = folder.len();
        let node = |m: &ModPath| (m.len() > n && m.starts_with(folder)).then(|| m[n].clone());
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for module in self.files.keys() {
            if let Some(name) = node(module) {
                graph.entry(name).or_default();
            }
        }
        for ((file, in_test), targets) in &self.targets {
            let Some(from) = node(file).filter(|_| folder.is_empty() || !in_test) else { continue };
            let deps = graph.entry(from.clone()).or_default();
            deps.extend(targets.iter().filter_map(node).filter(|to| *to != from));
        }
        graph
    }

    /// The file a folder's node stands for.
    fn shown(&self, folder: &ModPath, name: &str) -> String {
        let mut module = folder.clone();
        module.push(name.to_string());
        self.files.get(&module).map_or_else(|| format!("{} (inline)", module.join("::")), |(f, _)| f.clone())
    }

    /// Every circle in every folder, as its files (sorted), with the arrows between them.
    pub fn circles(&self) -> BTreeMap<Vec<String>, String> {
        let mut found = BTreeMap::new();
        for folder in self.folders() {
            let graph = self.graph(&folder);
            for circle in circles(&graph) {
                let files: BTreeSet<String> = circle.iter().map(|n| self.shown(&folder, n)).collect();
                let edges: Vec<String> = circle
                    .iter()
                    .flat_map(|a| graph[a].iter().filter(|b| circle.contains(*b)).map(move |b| format!("  {a} -> {b}")))
                    .collect();
                found.insert(files.into_iter().collect(), edges.join("\n"));
            }
        }
        found
    }
}

/// The strongly connected parts of more than one node: each a set of nodes that reach each other.
pub fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |start: &String| {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![start]);
        while let Some(n) = todo.pop() {
            for next in graph.get(n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|n| (n, reach(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (node, from_it) in &reached {
        if !from_it.contains(*node) || out.iter().any(|c| c.contains(*node)) {
            continue;
        }
        out.push(from_it.iter().filter(|other| reached[other].contains(*node)).cloned().collect());
    }
    out
}
