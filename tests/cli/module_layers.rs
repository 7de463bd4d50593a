//! The module map holds: no import circle anywhere (between the binary crate's modules, the core
//! crate's modules, or the files of one folder), the layers of both crates import only what they
//! may, and the core crate has no I/O dependency. Reads the sources.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

#[path = "module_layers/graph.rs"]
mod graph;

use graph::{Tree, circles, imports};

/// Every module of the binary crate, lowest first, as the README's architecture section lists
/// them: each may import only modules listed before it. (The core crate sits below them all.)
const LAYERS: &[&str] = &[
    "memory",
    "log_stream",
    "config",
    "metrics",
    "schedule",
    "worker",
    "vulns",
    "event_log",
    "registry",
    "signing",
    "rights",
    "ledger",
    "inspect",
    "rebase",
    "alert",
    "rollback",
    "rollout",
    "cluster",
    "runner",
    "reaction",
    "deploy",
    "status",
    "page",
    "monitor",
    "server",
    "daemon",
    "cli",
    "commands",
];

/// Every module of the core crate (crates/core/src), lowest first: each may import only modules
/// listed before it.
const CORE_LAYERS: &[&str] = &[
    "text",
    "id",
    "reference",
    "signing",
    "schedule",
    "pace",
    "template",
    "packages",
    "vulns",
    "cnb",
    "rebase",
    "pool",
    "deploy",
    "gitops",
    "kind",
    "event",
    "plan",
    "progress",
    "rollout",
];

/// Crates that do I/O: the core depends on none of them.
const IO_CRATES: &[&str] = &["tokio", "reqwest", "rusqlite", "kube", "axum", "hyper", "hyper-util", "mio", "rustls"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every circle found, as one message each; none is allowed.
fn check_circles(found: &BTreeMap<Vec<String>, String>) -> Result<(), String> {
    let problems: Vec<String> =
        found.iter().map(|(files, edges)| format!("import circle between {files:?}:\n{edges}")).collect();
    if problems.is_empty() { Ok(()) } else { Err(problems.join("\n")) }
}

/// The edges of `graph` that point up `layers` (or leave it), as messages.
fn layer_violations(graph: &BTreeMap<String, BTreeSet<String>>, layers: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let unlisted: Vec<&String> = graph.keys().filter(|m| !layers.contains(&m.as_str())).collect();
    if !unlisted.is_empty() {
        out.push(format!("modules missing from the layer list: {unlisted:?}"));
    }
    for (level, module) in layers.iter().enumerate() {
        let Some(deps) = graph.get(*module) else {
            out.push(format!("no module {module}"));
            continue;
        };
        let above: Vec<&String> = deps.iter().filter(|d| !layers[..level].contains(&d.as_str())).collect();
        if !above.is_empty() {
            out.push(format!("{module} imports {above:?}, listed after it: an arrow may only point down the layers"));
        }
    }
    out
}

fn binary_crate() -> Tree {
    Tree::read(&root().join("src"), "src/")
}

fn core_crate() -> Tree {
    Tree::read(&root().join("crates/core/src"), "crates/core/src/")
}

/// Top-level module → the crate's other top-level modules it imports.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    binary_crate().graph(&Vec::new())
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
    let found = circles(&graph);
    assert!(found.is_empty(), "import cycle between {found:?}\n{}", describe(&graph));
}

#[test]
fn no_files_import_each_other_in_a_circle_in_either_crate() {
    let (binary, core) = (binary_crate(), core_crate());
    assert!(binary.folders().contains(&vec!["runner".to_string()]), "{:?}", binary.folders());
    assert!(core.graph(&Vec::new()).contains_key("rebase"));
    let mut found = binary.circles();
    found.extend(core.circles());
    if let Err(problems) = check_circles(&found) {
        panic!("{problems}");
    }
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let graph = module_graph();
    let problems = layer_violations(&graph, LAYERS);
    assert!(
        problems.is_empty(),
        "{}\n(LAYERS is the README's architecture section)\n{}",
        problems.join("\n"),
        describe(&graph)
    );
}

#[test]
fn every_core_module_imports_only_the_core_layers_below_it() {
    let graph = core_crate().graph(&Vec::new());
    let problems = layer_violations(&graph, CORE_LAYERS);
    assert!(problems.is_empty(), "{}\n(CORE_LAYERS)\n{}", problems.join("\n"), describe(&graph));
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

/// A crate from (file under `src`, text) pairs, each file shown by that name.
fn planted(files: &[(&str, &str)]) -> Tree {
    let files: Vec<(String, String, String)> =
        files.iter().map(|(f, text)| (f.to_string(), f.to_string(), text.to_string())).collect();
    Tree::new(&files)
}

fn names(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[test]
fn a_circle_between_the_files_of_a_folder_is_refused() {
    // x.rs takes `Thing` through the folder's re-export of y.rs; y.rs names x.rs by a full path.
    let tree = planted(&[
        ("lib.rs", "pub mod runner;"),
        ("runner/mod.rs", "mod x; mod y; mod z; pub use y::Thing; pub struct Shared;\n#[cfg(test)]\nmod tests;"),
        (
            "runner/x.rs",
            "use super::{Shared, Thing};\npub fn other() {}\n#[cfg(test)]\nmod t { use super::super::z::g; }",
        ),
        ("runner/y.rs", "pub struct Thing;\nfn f() { let s = \"}\"; crate::runner::x::other() }"),
        ("runner/z.rs", "use super::*;\npub fn g(_: Thing, _: Shared) {} // crate::runner::x"),
        ("runner/tests.rs", "use super::z::g;\nuse crate::runner::x::other;"),
    ]);
    let graph = tree.graph(&vec!["runner".to_string()]);
    // The glob leads to y.rs (`Shared` is the folder's own); test code ties nothing.
    assert_eq!(graph["z"], names(&["y"]), "{graph:?}");
    assert_eq!((graph["x"].clone(), graph["tests"].clone()), (names(&["y"]), names(&[])), "{graph:?}");
    let found = tree.circles();
    assert_eq!(found.keys().collect::<Vec<_>>(), [&vec!["runner/x.rs".to_string(), "runner/y.rs".to_string()]]);
    let refused = check_circles(&found).unwrap_err();
    assert!(refused.contains(r#"import circle between ["runner/x.rs", "runner/y.rs"]"#), "{refused}");
    assert!(refused.contains("x -> y") && refused.contains("y -> x"), "{refused}");
}

#[test]
fn a_circle_between_modules_is_refused_and_its_untangling_accepted() {
    let tangled = planted(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::X;\npub struct Y;"),
        ("b.rs", "pub struct X;\nfn f() -> super::a::Y { todo!() }"),
    ]);
    assert_eq!(circles(&tangled.graph(&Vec::new())), [names(&["a", "b"])]);
    assert!(check_circles(&tangled.circles()).is_err());
    let untangled = planted(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::X;\npub struct Y;"),
        ("b.rs", "pub struct X; // crate::a::Y\nconst S: &str = \"crate::a::Y\";"),
    ]);
    assert!(untangled.circles().is_empty());
    check_circles(&untangled.circles()).unwrap();
}

#[test]
fn an_arrow_up_the_layers_is_refused() {
    let graph = BTreeMap::from([("low".to_string(), names(&["high"])), ("high".to_string(), names(&[]))]);
    let refused = layer_violations(&graph, &["low", "high"]);
    assert_eq!(refused, [r#"low imports ["high"], listed after it: an arrow may only point down the layers"#]);
    assert!(layer_violations(&graph, &["high", "low"]).is_empty());
    assert_eq!(layer_violations(&graph, &["high"]), [r#"modules missing from the layer list: ["low"]"#]);
}
