//! The module map holds: the binary crate's modules import each other without a cycle, the lower
//! layers import only what they may, and the core crate has no I/O dependency. Reads the sources.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every module of the binary crate, lowest first, as the README's architecture section lists
/// them: each may import only modules listed before it. (The core crate sits below them all.)
const LAYERS: &[&str] = &[
    "log_stream",
    "config",
    "metrics",
    "schedule",
    "worker",
    "event_log",
    "registry",
    "ledger",
    "inspect",
    "rebase",
    "rollback",
    "alert",
    "rollout",
    "runner",
    "reaction",
    "deploy",
    "cluster",
    "status",
    "page",
    "monitor",
    "server",
    "daemon",
    "cli",
    "commands",
];

/// Crates that do I/O: the core depends on none of them.
const IO_CRATES: &[&str] = &["tokio", "reqwest", "rusqlite", "kube", "axum", "hyper", "hyper-util", "mio", "rustls"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

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

/// The top-level modules a source names through `crate::` (`use crate::{a::x, b}` groups too);
/// line comments are skipped.
fn imports(text: &str) -> BTreeSet<String> {
    let code: String = text.lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n");
    let ident = |s: &str| -> Option<String> {
        let s = s.trim_start();
        let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
        (end > 0).then(|| s[..end].to_string())
    };
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let preceded_by_ident = rest[..at].chars().next_back().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        rest = &rest[at + "crate::".len()..];
        if preceded_by_ident {
            continue;
        }
        if !rest.starts_with('{') {
            found.extend(ident(rest));
            continue;
        }
        // Split the group at its own commas and take each item's first segment.
        let (mut depth, mut item, mut end) = (0, String::new(), rest.len());
        for (i, c) in rest.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                end = i;
                break;
            }
            if depth == 1 && c == ',' {
                found.extend(ident(&item));
                item.clear();
            } else if !(depth == 1 && c == '{') {
                item.push(c);
            }
        }
        found.extend(ident(&item));
        rest = &rest[end..];
    }
    found
}

/// Top-level module → the crate's other top-level modules it imports.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let first = file.strip_prefix(&src).unwrap().components().next().unwrap();
        let module = first.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap();
        let deps = graph.entry(module.clone()).or_default();
        deps.extend(imports(&text).into_iter().filter(|m| *m != module));
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| modules.contains(d));
    }
    graph
}

/// A module path that leads from `start` back to itself, if any.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![start.to_string()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in graph.get(last).into_iter().flatten() {
            if next == start {
                let mut cycle = path.clone();
                cycle.push(start.to_string());
                return Some(cycle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

fn describe(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    graph
        .iter()
        .map(|(m, deps)| format!("{m} -> {}", deps.iter().cloned().collect::<Vec<_>>().join(", ")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_import_parser_reads_paths_and_groups() {
    let text =
        "use crate::{alpha::x, beta::{y, z}, gamma};\nlet v = crate::delta::f(); // crate::omega\nfoo_crate::eps";
    let got: Vec<String> = imports(text).into_iter().collect();
    assert_eq!(got, ["alpha", "beta", "delta", "gamma"]);
}

#[test]
fn modules_import_each_other_without_a_cycle() {
    let graph = module_graph();
    assert!(graph.contains_key("monitor") && graph.contains_key("ledger"), "{graph:?}");
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module) {
            panic!("import cycle {}\n{}", cycle.join(" -> "), describe(&graph));
        }
    }
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let graph = module_graph();
    let unlisted: Vec<&String> = graph.keys().filter(|m| !LAYERS.contains(&m.as_str())).collect();
    assert!(unlisted.is_empty(), "modules missing from LAYERS (and the README's architecture section): {unlisted:?}");
    for (level, module) in LAYERS.iter().enumerate() {
        let deps = graph.get(*module).unwrap_or_else(|| panic!("no module {module}"));
        let above: Vec<&String> = deps.iter().filter(|d| !LAYERS[..level].contains(&d.as_str())).collect();
        assert!(
            above.is_empty(),
            "{module} imports {above:?}, listed after it: an arrow may only point down the layers\n{}",
            describe(&graph)
        );
    }
}

#[test]
fn the_layers_are_the_readme_architecture_section() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme.split("## Architecture").nth(1).expect("an architecture section");
    let block = section.split("```").nth(1).expect("its layer list");
    // A module's line starts with its name; indented lines go on describing the one above.
    let listed: Vec<String> = block
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| !w.starts_with("crates/"))
        .map(|w| w.trim_end_matches('/').trim_end_matches(".rs").to_string())
        .collect();
    let expected: Vec<String> = LAYERS.iter().map(|l| l.to_string()).collect();
    assert_eq!(listed, expected, "the README lists the layers in this order");
}

#[test]
fn the_core_crate_has_no_io_dependency() {
    let manifest = std::fs::read_to_string(root().join("crates/core/Cargo.toml")).unwrap();
    let manifest: toml::Table = manifest.parse().unwrap();
    let deps = manifest["dependencies"].as_table().unwrap();
    assert!(deps.contains_key("serde"), "{deps:?}");
    for name in IO_CRATES {
        assert!(!deps.contains_key(*name), "the core depends on {name}");
    }
}
