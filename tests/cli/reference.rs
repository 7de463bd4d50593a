//! The configuration reference covers the whole schema: every key each table accepts (as the
//! parser itself lists them when it refuses an unknown one) has a row in the docs' key tables.

use crate::support;

use support::daemon::Workspace;

/// A table (as its rows name it) and a config whose only problem is an unknown key in it.
const PROBES: &[(&str, &str)] = &[
    ("top level", "zzz = 1\n"),
    ("[monitor]", "[monitor]\nzzz = 1\n"),
    ("[server]", "[server]\nzzz = 1\n"),
    ("[registries.\"HOST\"]", "[registries.\"r.example\"]\nzzz = 1\n"),
    ("[[builders]]", "[[builders]]\nzzz = 1\n"),
    ("[[images]]", "[[images]]\nzzz = 1\n"),
    ("[[images]] deploy", "[[images]]\ndeploy = [{ zzz = 1 }]\n"),
    ("[[images]] scheduling", "[[images]]\nscheduling = { zzz = 1 }\n"),
    ("[runner]", "[runner]\nzzz = 1\n"),
    ("[runner.exec]", "[runner.exec]\nzzz = 1\n"),
    ("[runner.kubernetes]", "[runner.kubernetes]\nzzz = 1\n"),
    ("[[runner.pools]]", "[runner]\ntype = \"kubernetes\"\n[[runner.pools]]\nname = \"a\"\nzzz = 1\n"),
    ("[kubernetes]", "[kubernetes]\nzzz = 1\n"),
    ("[[gitops]]", "[[gitops]]\nzzz = 1\n"),
    ("[[gitops]] files", "[[gitops]]\nname = \"g\"\nrepo = \"file:///r\"\nfiles = [{ zzz = 1 }]\n"),
    ("[[alerts]]", "[[alerts]]\nzzz = 1\n"),
    ("[rollout]", "[rollout]\nzzz = 1\n"),
    ("[signing]", "[signing]\nzzz = 1\n"),
    ("[vulnerabilities]", "[vulnerabilities]\nzzz = 1\n"),
    ("[rollout] windows", "[rollout]\nwindows = [{ zzz = 1 }]\n"),
];

/// The keys an "unknown field" error lists as expected.
fn expected(message: &str) -> Vec<String> {
    let Some(at) = message.find("expected ") else { return Vec::new() };
    let rest = &message[at..];
    let line = rest.lines().next().unwrap_or_default();
    line.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The first cells of every table row in the README and docs/*.md.
fn key_cells() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut cells = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            // `\|` inside a cell (`url` \| `url_env`) is text, not a cell's end.
            if let Some(rest) = line.strip_prefix('|') {
                let rest = rest.replace("\\|", " ");
                cells.push(rest.split('|').next().unwrap_or_default().to_string());
            }
        }
    }
    cells
}

fn documented(cells: &[String], key: &str) -> bool {
    cells.iter().any(|cell| cell.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).any(|word| word == key))
}

#[test]
fn every_key_of_every_table_has_a_row_in_the_reference() {
    let ws = Workspace::new();
    let cells = key_cells();
    let mut missing = Vec::new();
    for (table, probe) in PROBES {
        let path = ws.config(probe);
        let out = ws.run(&["check", "--config", path.to_str().unwrap()]);
        let keys = expected(&out.stderr);
        assert!(!keys.is_empty(), "{table}: the parser listed no keys:\n{}", out.stderr);
        for key in keys {
            if !documented(&cells, &key) {
                missing.push(format!("{table} {key}"));
            }
        }
    }
    assert!(missing.is_empty(), "keys without a row in the reference tables: {missing:?}");
}
