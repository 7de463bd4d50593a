//! OSV records as Ubuntu publishes them (the CVE shape: binaries as one `{binary: version}` map with
//! `ubuntu_priority`), written into a mirror directory, and the package-list label of a run image
//! that moves `openssl`: what a test needs for a base-image move that fixes a notice.

use std::path::Path;

use serde_json::{Value, json};

/// A jammy CVE record of `priority` for the `openssl` binary, fixed at `fixed`.
pub fn cve(id: &str, priority: &str, fixed: &str) -> String {
    json!({
        "schema_version": "1.6.3", "id": id, "details": "openssl",
        "affected": [{
            "package": {"ecosystem": "Ubuntu:22.04:LTS", "name": "openssl"},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fixed}]}],
            "ecosystem_specific": {"binaries": [{"openssl": fixed}], "ubuntu_priority": priority}
        }]
    })
    .to_string()
}

/// Writes `(id, priority, fixed)` CVE records under `root/osv/cve/2026/`.
pub fn write_mirror(root: &Path, records: &[(&str, &str, &str)]) {
    let dir = root.join("osv/cve/2026");
    std::fs::create_dir_all(&dir).unwrap();
    for (id, priority, fixed) in records {
        std::fs::write(dir.join(format!("{id}.json")), cve(id, priority, fixed)).unwrap();
    }
}

/// The `io.paketo.stack.packages` label's value: `openssl` at `version`.
pub fn openssl_packages(version: &str) -> String {
    let list: Vec<Value> = vec![
        json!({"name": "openssl", "version": version, "arch": "amd64", "source": {"name": "openssl", "version": version}}),
    ];
    serde_json::to_string(&list).unwrap()
}

/// The labels of a jammy run image listing `openssl` at `version` (the release from the distro).
pub fn jammy_labels(version: &str) -> [(&'static str, String); 4] {
    [
        ("io.buildpacks.stack.id", "io.buildpacks.stacks.jammy".into()),
        ("io.buildpacks.base.distro.name", "ubuntu".into()),
        ("io.buildpacks.base.distro.version", "22.04".into()),
        ("io.paketo.stack.packages", openssl_packages(version)),
    ]
}
