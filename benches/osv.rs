//! The OSV mirror benchmark (docs/performance.md, "OSV mirror"): `cargo bench --bench osv`.
//!
//! Writes `BENCH_OSV_RECORDS` (default 200,000) Ubuntu OSV records of both shapes and realistic
//! sizes (one in five a USN record, the rest CVE records in `osv/cve/<year>/`; three LTS releases
//! and a Pro entry each, one to six binaries) to a temporary directory, then measures:
//!
//! 1. the loader in process (`vulns::load::directory`): wall time, records read and kept;
//! 2. the daemon (`run`, `[server]` on, one builder watch at an address that refuses): its
//!    `VmRSS` and `VmHWM` once it serves, without `[vulnerabilities]`, with `osv` = the directory
//!    and one, two or three `releases` kept, and with nothing pinned (nothing read until a move),
//!    and how long it took to serve in each case.
//!
//! Prints the figures and writes them to `$CARGO_TARGET_DIR/bench/osv.json` (`./target` without it).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use builder_monitor::vulns::load;
use builder_monitor_core::vulns::Index;
use serde_json::{Value, json};

const BINARY: &str = env!("CARGO_BIN_EXE_builder-monitor");
const RELEASES: [&str; 3] = ["Ubuntu:20.04:LTS", "Ubuntu:22.04:LTS", "Ubuntu:24.04:LTS"];

fn version(i: usize, release: usize) -> String {
    format!("{}.{}.{}-{}ubuntu{}.{}", i % 7 + 1, i % 13, i % 31, i % 3 + 1, release + 1, i % 40)
}

fn binaries(i: usize, source: &str) -> Vec<String> {
    let n = i % 6 + 1;
    (0..n).map(|b| if b == 0 { source.to_string() } else { format!("lib{source}{b}") }).collect()
}

fn affected(i: usize, usn: bool) -> Vec<Value> {
    let source = format!("pkg{}", i % 2_000);
    let mut out = Vec::new();
    for (r, ecosystem) in RELEASES.iter().chain(["Ubuntu:Pro:18.04:LTS"].iter()).enumerate() {
        let fixed = version(i, r);
        let fixed_here = usn || !(i + r).is_multiple_of(3);
        let events = if fixed_here {
            json!([{ "introduced": "0" }, { "fixed": fixed }])
        } else {
            json!([{ "introduced": "0" }])
        };
        let names = binaries(i, &source);
        let bins = if usn {
            json!(names.iter().map(|b| json!({ "binary_name": b, "binary_version": fixed })).collect::<Vec<_>>())
        } else {
            json!([names.iter().map(|b| (b.clone(), json!(fixed))).collect::<serde_json::Map<_, _>>()])
        };
        let mut specific = json!({ "binaries": bins });
        if usn {
            specific["availability"] = json!("No subscription required");
        } else {
            specific["ubuntu_priority"] = json!(["negligible", "low", "medium", "high", "critical"][i % 5]);
            specific["priority_reason"] =
                json!("An attacker could possibly use this issue to cause a denial of service.");
        }
        out.push(json!({
            "package": { "ecosystem": ecosystem, "name": source, "purl": format!("pkg:deb/ubuntu/{source}@{fixed}?arch=source&distro={ecosystem}") },
            "ranges": [{ "type": "ECOSYSTEM", "events": events }],
            "versions": [version(i, r).replace("ubuntu", "build"), version(i + 1, r)],
            "ecosystem_specific": specific,
        }));
    }
    out
}

fn record(i: usize) -> (PathBuf, Vec<u8>) {
    let usn = i.is_multiple_of(5);
    let details = "It was discovered that the package incorrectly handled certain inputs. A remote attacker could use this issue to cause the package to crash, resulting in a denial of service, or possibly execute arbitrary code. ".repeat(2);
    if usn {
        let id = format!("USN-{}-{}", 4000 + i / 5, i % 3 + 1);
        let value = json!({
            "schema_version": "1.7.0", "id": id, "summary": "package vulnerabilities", "details": details,
            "aliases": [], "related": [format!("UBUNTU-CVE-2026-{:05}", i), format!("UBUNTU-CVE-2025-{:05}", i)],
            "upstream": [format!("UBUNTU-CVE-2026-{:05}", i), format!("UBUNTU-CVE-2025-{:05}", i)],
            "published": "2026-01-01T00:00:00Z", "modified": "2026-01-02T00:00:00Z",
            "affected": affected(i, true),
            "references": [{ "type": "ADVISORY", "url": format!("https://ubuntu.com/security/notices/{id}") }],
        });
        (PathBuf::from(format!("osv/usn/{id}.json")), serde_json::to_vec_pretty(&value).unwrap())
    } else {
        let year = 2015 + i % 12;
        let id = format!("CVE-{year}-{:05}", i);
        let value = json!({
            "schema_version": "1.6.3", "id": id, "details": details, "aliases": [], "related": [],
            "published": "2026-01-01T00:00:00Z", "modified": "2026-01-02T00:00:00Z",
            "severity": [{ "type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H" }],
            "affected": affected(i, false),
            "references": [{ "type": "REPORT", "url": format!("https://ubuntu.com/security/{id}") }],
        });
        (PathBuf::from(format!("osv/cve/{year}/{id}.json")), serde_json::to_vec_pretty(&value).unwrap())
    }
}

fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix(key)?.trim().strip_suffix("kB")?.trim().parse().ok())
}

/// The daemon started with `extra` in its config: (seconds until it served, VmRSS KiB, VmHWM KiB).
fn daemon(dir: &Path, name: &str, extra: &str) -> (f64, u64, u64) {
    let config = dir.join(format!("{name}.toml"));
    let text = format!(
        "[monitor]\ninterval = \"1h\"\nstate = \"{name}.db\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n\n\
         [[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:latest\"\n{extra}"
    );
    std::fs::write(&config, text).unwrap();
    let started = Instant::now();
    let mut child = Command::new(BINARY)
        .args(["run", "--log-format", "json", "--config"])
        .arg(&config)
        .env("BUILDER_MONITOR_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the daemon");
    let stderr = BufReader::new(child.stderr.take().unwrap());
    for line in stderr.lines().map_while(Result::ok) {
        if line.contains("serving health, metrics, API and hooks") {
            break;
        }
    }
    let served = started.elapsed().as_secs_f64();
    let (rss, hwm) = (proc_status(child.id(), "VmRSS:").unwrap_or(0), proc_status(child.id(), "VmHWM:").unwrap_or(0));
    let _ = child.kill();
    let _ = child.wait();
    (served, rss, hwm)
}

fn main() {
    let n: usize = std::env::var("BENCH_OSV_RECORDS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let dir = tempfile::tempdir().unwrap();
    let writing = Instant::now();
    let mut bytes = 0u64;
    for i in 0..n {
        let (path, body) = record(i);
        let path = dir.path().join(path);
        if i < 30 || path.parent().is_some_and(|p| !p.exists()) {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        }
        bytes += body.len() as u64;
        std::fs::write(path, body).unwrap();
    }
    eprintln!("wrote {n} records, {} MiB, in {:.1} s", bytes >> 20, writing.elapsed().as_secs_f64());

    let loading = Instant::now();
    let loaded = load::directory(&dir.path().join("osv"), Index::new(Vec::new())).unwrap();
    let load_seconds = loading.elapsed().as_secs_f64();
    eprintln!("loader: {} read, {} kept, in {load_seconds:.2} s", loaded.read, loaded.index.len());
    let kept = loaded.index.len();
    drop(loaded);

    let (base_served, base_rss, base_hwm) = daemon(dir.path(), "without", "");
    let osv = format!("\n[vulnerabilities]\nosv = \"{}\"\n", dir.path().join("osv").display());
    // The daemon keeps the releases its images are on: one (a fleet on jammy), two, or all three
    // the generator writes, named by `releases` since the benchmark's builder is never pinned.
    let mut runs = serde_json::Map::new();
    for (name, releases) in [
        ("one_release", r#"["22.04"]"#),
        ("two_releases", r#"["22.04", "24.04"]"#),
        ("three_releases", r#"["20.04", "22.04", "24.04"]"#),
    ] {
        let (served, rss, hwm) = daemon(dir.path(), name, &format!("{osv}releases = {releases}\n"));
        eprintln!(
            "{name}: +{:.1} MiB RSS, +{:.1} MiB HWM, served after {served:.2} s",
            (rss as f64 - base_rss as f64) / 1024.0,
            (hwm as f64 - base_hwm as f64) / 1024.0
        );
        runs.insert(
            name.into(),
            json!({
                "releases": releases, "served_after_s": served, "rss_kib": rss, "hwm_kib": hwm,
                "rss_more_mib": (rss as f64 - base_rss as f64) / 1024.0,
                "hwm_more_mib": (hwm as f64 - base_hwm as f64) / 1024.0,
            }),
        );
    }
    let (lazy_served, lazy_rss, _) = daemon(dir.path(), "nothing_pinned", &osv);
    let report = json!({
        "records": n, "bytes": bytes, "kept": kept, "loader_seconds": load_seconds,
        "daemon": {
            "without": { "served_after_s": base_served, "rss_kib": base_rss, "hwm_kib": base_hwm },
            "nothing_pinned": { "served_after_s": lazy_served, "rss_kib": lazy_rss },
            "with": runs,
        },
        "load_average": std::fs::read_to_string("/proc/loadavg").ok().map(|l| l.trim().to_string()),
    });
    let text = serde_json::to_string_pretty(&report).unwrap();
    println!("{text}");
    let out = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from).join("bench");
    let _ = std::fs::create_dir_all(&out);
    let _ = std::fs::write(out.join("osv.json"), text);
}
