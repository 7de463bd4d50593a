//! `scripts/image`: the daemon's image made from this machine's Debian packages, pushed with skopeo
//! to the real registry, pulled back, unpacked, and its binaries run from its own root filesystem
//! with its own dynamic loader and libraries.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::registry::TestRegistry;

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn blob(layout: &Path, digest: &serde_json::Value) -> PathBuf {
    layout.join("blobs/sha256").join(digest.as_str().unwrap().trim_start_matches("sha256:"))
}

/// Runs `program` (a path inside `root`) with the root's loader and libraries only.
fn run_inside(root: &Path, program: &str, arg: &str) -> String {
    let libs = root.join("usr/lib/x86_64-linux-gnu");
    let out = Command::new(libs.join("ld-linux-x86-64.so.2"))
        .arg("--inhibit-cache")
        .arg("--library-path")
        .arg(&libs)
        .arg(root.join(program.trim_start_matches('/')))
        .arg(arg)
        .env_clear()
        .output()
        .unwrap();
    assert!(out.status.success(), "{program} {arg}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_image_is_pushed_pulled_back_and_its_daemon_runs_from_its_own_root() {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return; // the loader path below is x86_64 Debian's
    }
    let registry = TestRegistry::start();
    let work = tempfile::tempdir().unwrap();
    let reference = format!("{}/builder-monitor:test", registry.host);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/image");
    let pushed = Command::new(&script)
        .args(["--binary", env!("CARGO_BIN_EXE_builder-monitor"), "--insecure", &reference])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&pushed.stdout);
    assert!(pushed.status.success(), "{said}{}", String::from_utf8_lossy(&pushed.stderr));
    assert!(said.starts_with(&format!("pushed {reference} (builder-monitor ")), "{said}");
    // The digest printed is one the registry has: the image is pulled back by it, not by the tag.
    let pin = said.lines().find_map(|l| l.strip_prefix("pin it as ")).unwrap_or_else(|| panic!("no pin: {said}"));
    let repository = format!("{}/builder-monitor", registry.host);
    let digest = pin.strip_prefix(&format!("{repository}@")).unwrap_or_else(|| panic!("{pin}"));
    assert!(builder_monitor_core::reference::is_sha256_digest(digest), "{pin}");
    assert!(said.lines().next().unwrap().ends_with(&format!(", {digest})")), "{said}");

    let layout = work.path().join("pulled");
    let pulled = Command::new("skopeo")
        .args(["copy", "--quiet", "--src-tls-verify=false"])
        .arg(format!("docker://{pin}"))
        .arg(format!("oci:{}:test", layout.display()))
        .output()
        .unwrap();
    assert!(pulled.status.success(), "pulling {pin}: {}", String::from_utf8_lossy(&pulled.stderr));

    let index = json(&layout.join("index.json"));
    assert_eq!(index["manifests"][0]["digest"], digest, "the manifest pulled is the one printed");
    let manifest = json(&blob(&layout, &index["manifests"][0]["digest"]));
    let config = json(&blob(&layout, &manifest["config"]["digest"]));
    let run = &config["config"];
    assert_eq!(run["User"], "65532:65532");
    assert_eq!(run["WorkingDir"], "/var/lib/builder-monitor");
    assert_eq!(run["Entrypoint"], serde_json::json!(["/usr/local/bin/builder-monitor"]));
    assert_eq!(run["Cmd"][0], "run");
    assert_eq!(config["os"], "linux");

    let root = work.path().join("rootfs");
    std::fs::create_dir(&root).unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    let untar = Command::new("tar").arg("-xf").arg(blob(&layout, &layers[0]["digest"])).arg("-C").arg(&root).output();
    assert!(untar.unwrap().status.success());

    let version = run_inside(&root, "/usr/local/bin/builder-monitor", "--version");
    assert_eq!(version.trim(), format!("builder-monitor {}", env!("CARGO_PKG_VERSION")));
    // The Git write-back runs git; TLS needs the CA bundle.
    assert!(run_inside(&root, "/usr/bin/git", "--version").starts_with("git version "));
    assert!(root.join("etc/ssl/certs/ca-certificates.crt").metadata().unwrap().len() > 100_000);
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(passwd.contains(":65532:65532:"), "{passwd}");
}
