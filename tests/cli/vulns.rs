//! `[vulnerabilities] osv`: an OSV mirror read through the binary — a directory (`check`), and a
//! `.tar.gz` served by a loopback HTTP listener written here (`run --once`, the daemon's
//! `/readyz`, `/metrics` and page): records of both of Ubuntu's shapes kept and counted, bad
//! files skipped and counted by reason, a conditional refresh, a failed one keeping the data.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::support;
use support::daemon::{Daemon, Workspace};
use support::images::{Format, Image, Pusher};
use support::registry::TestRegistry;

/// A USN record (schema 1.7.0: binaries as `[{binary_name, binary_version}]`).
fn usn(id: &str, ecosystem: &str) -> String {
    json!({
        "schema_version": "1.7.0", "id": id, "summary": "curl vulnerabilities",
        "upstream": ["UBUNTU-CVE-2026-1111", "UBUNTU-CVE-2026-1112"],
        "published": "2026-01-01T00:00:00Z", "modified": "2026-01-01T00:00:00Z",
        "affected": [{
            "package": { "ecosystem": ecosystem, "name": "curl", "purl": "pkg:deb/ubuntu/curl@7.81.0-1ubuntu1.16?arch=source" },
            "ranges": [{ "type": "ECOSYSTEM", "events": [{ "introduced": "0" }, { "fixed": "7.81.0-1ubuntu1.16" }] }],
            "versions": ["7.81.0-1ubuntu1.15"],
            "ecosystem_specific": {
                "binaries": [{ "binary_name": "curl", "binary_version": "7.81.0-1ubuntu1.16" },
                             { "binary_name": "libcurl4", "binary_version": "7.81.0-1ubuntu1.16" }],
                "availability": "No subscription required"
            }
        }]
    })
    .to_string()
}

/// A CVE record (schema 1.6.3: binaries as one `{name: version}` map, with `ubuntu_priority`).
fn cve(id: &str, ecosystem: &str) -> String {
    json!({
        "schema_version": "1.6.3", "id": id, "details": "openssl",
        "severity": [{ "type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H" }],
        "affected": [{
            "package": { "ecosystem": ecosystem, "name": "openssl", "purl": "pkg:deb/ubuntu/openssl@3.0.13-0ubuntu3.5?arch=source" },
            "ranges": [{ "type": "ECOSYSTEM", "events": [{ "introduced": "0" }, { "fixed": "3.0.13-0ubuntu3.5" }] }],
            "ecosystem_specific": {
                "binaries": [{ "libssl3t64": "3.0.13-0ubuntu3.5", "openssl": "3.0.13-0ubuntu3.5" }],
                "ubuntu_priority": "high", "priority_reason": "remote"
            }
        }]
    })
    .to_string()
}

/// The good records: a USN for 22.04 and a CVE for 24.04 (kept), and a Pro-only USN (read, not kept).
fn good_records() -> Vec<(String, String)> {
    vec![
        ("osv/usn/USN-7000-1.json".into(), usn("USN-7000-1", "Ubuntu:22.04:LTS")),
        ("osv/cve/2026/CVE-2026-2222.json".into(), cve("CVE-2026-2222", "Ubuntu:24.04:LTS")),
        ("osv/usn/USN-7001-1.json".into(), usn("USN-7001-1", "Ubuntu:Pro:22.04:LTS")),
    ]
}

/// The files every bound skips: one over 1 MiB, one not JSON, one JSON but not a record.
fn bad_records() -> Vec<(String, Vec<u8>)> {
    let mut huge = usn("USN-9999-1", "Ubuntu:22.04:LTS").into_bytes();
    huge.truncate(huge.len() - 1);
    huge.extend(format!(",\"details\":\"{}\"}}", "x".repeat(1024 * 1024)).into_bytes());
    vec![
        ("osv/usn/USN-9999-1.json".into(), huge),
        ("osv/usn/garbage.json".into(), b"<html>not json</html>".to_vec()),
        ("osv/usn/other.json".into(), br#"{"hello": "world"}"#.to_vec()),
    ]
}

fn check(ws: &Workspace, osv: &str) -> support::daemon::Output {
    let text = format!(
        "[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:latest\"\n\n[vulnerabilities]\nosv = \"{osv}\"\n"
    );
    let config = ws.config(&text);
    ws.run(&["check", "--config", config.to_str().unwrap()])
}

#[test]
fn check_reads_a_directory_mirror_and_skips_each_bad_file_once_by_reason() {
    let ws = Workspace::new();
    for (path, text) in good_records() {
        std::fs::create_dir_all(ws.path(&path).parent().unwrap()).unwrap();
        std::fs::write(ws.path(&path), text).unwrap();
    }
    for (path, bytes) in bad_records() {
        std::fs::write(ws.path(&path), bytes).unwrap();
    }
    // A link out of the mirror is not followed, even to a good record; one inside is.
    let outside = ws.path("outside.json");
    std::fs::write(&outside, usn("USN-8000-1", "Ubuntu:22.04:LTS")).unwrap();
    std::os::unix::fs::symlink(&outside, ws.path("osv/usn/USN-8000-1.json")).unwrap();
    std::fs::create_dir_all(ws.path("osv/kept")).unwrap();
    std::fs::write(ws.path("osv/kept/USN-7002-1.record"), usn("USN-7002-1", "Ubuntu:24.04:LTS")).unwrap();
    std::os::unix::fs::symlink(ws.path("osv/kept/USN-7002-1.record"), ws.path("osv/usn/USN-7002-1.json")).unwrap();

    let out = check(&ws, "osv");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains(
            "vulnerability data: 3 records kept of 4 read, skipped: too_large 1, not_json 1, refused 1, symlink 1"
        ),
        "{}",
        out.stdout
    );
    for reason in ["too_large", "not_json", "refused", "symlink"] {
        let lines = out.stderr.lines().filter(|l| l.contains("OSV files skipped") && l.contains(reason)).count();
        assert_eq!(lines, 1, "one line for {reason}:\n{}", out.stderr);
    }

    // A mirror that is not there is the config's error, at its line and column.
    let out = check(&ws, "nowhere");
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    let wanted = format!("config.toml:6:7: osv {}: No such file", ws.path("nowhere").display());
    assert!(out.stderr.contains(&wanted), "{wanted}\n{}", out.stderr);
}

/// A `.zip` (OSV.dev's export form) of the good records, one entry whose path leaves the mirror,
/// and a zip bomb: an entry of 64 MiB of spaces, deflated to a few KiB, claiming to be a record.
#[test]
fn check_reads_a_zip_mirror_within_bounds() {
    let ws = Workspace::new();
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let deflated = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (path, text) in good_records() {
        zip.start_file(path.rsplit('/').next().unwrap(), deflated).unwrap();
        zip.write_all(text.as_bytes()).unwrap();
    }
    zip.start_file("../escape.json", deflated).unwrap();
    zip.write_all(usn("USN-8001-1", "Ubuntu:22.04:LTS").as_bytes()).unwrap();
    zip.start_file("bomb.json", deflated).unwrap();
    let spaces = vec![b' '; 1 << 20];
    for _ in 0..64 {
        zip.write_all(&spaces).unwrap();
    }
    std::fs::write(ws.path("all.zip"), zip.finish().unwrap().into_inner()).unwrap();
    assert!(std::fs::metadata(ws.path("all.zip")).unwrap().len() < 1 << 20, "the bomb is small on disk");

    let out = check(&ws, "all.zip");
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("vulnerability data: 2 records kept of 3 read, skipped: too_large 1, path_traversal 1"),
        "{}",
        out.stdout
    );
}

/// A `.tar.gz` of the good and bad records, plus an entry whose path leaves the mirror.
fn archive() -> Vec<u8> {
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    let mut add = |name: &str, bytes: &[u8]| {
        let mut header = tar::Header::new_gnu();
        // Written raw: `set_path` refuses `..`, which is the point of one entry.
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        tar.append(&header, bytes).unwrap();
    };
    for (path, text) in good_records() {
        add(&path, text.as_bytes());
    }
    for (path, bytes) in bad_records() {
        add(&path, &bytes);
    }
    add("../USN-8000-1.json", usn("USN-8000-1", "Ubuntu:22.04:LTS").as_bytes());
    tar.into_inner().unwrap().finish().unwrap()
}

/// What the listener answers.
#[derive(Clone)]
enum Answer {
    /// The archive with this ETag; `304` to a request that names it.
    Archive(Vec<u8>, &'static str),
    Corrupt,
    Error,
    /// `302 Found` to this `Location` for the mirror's own path; any other path gets the archive.
    Redirect(String, Vec<u8>),
    /// The archive's first 10 bytes, then nothing until the flag is set (a stalled download).
    Stalled(Vec<u8>, Arc<(Mutex<bool>, std::sync::Condvar)>),
}

/// A loopback HTTP listener serving the mirror as `answer` says, keeping each request's head.
struct Mirror {
    url: String,
    answer: Arc<Mutex<Answer>>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Mirror {
    fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/osv/ubuntu.tar.gz", listener.local_addr().unwrap());
        let answer = Arc::new(Mutex::new(answer));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (a, r) = (answer.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_lowercase();
                r.lock().unwrap().push(head.clone());
                let own_path = head.starts_with("get /osv/ubuntu.tar.gz");
                let (status, etag, body) = match a.lock().unwrap().clone() {
                    Answer::Redirect(to, _) if own_path => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        );
                        continue;
                    }
                    Answer::Redirect(_, bytes) => ("200 OK", "\"moved\"", bytes),
                    Answer::Stalled(bytes, release) => {
                        let _ = write!(
                            stream,
                            "HTTP/1.1 200 OK\r\nETag: \"slow\"\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            bytes.len()
                        );
                        let _ = stream.write_all(&bytes[..10]);
                        let _ = stream.flush();
                        let (flag, signal) = &*release;
                        let mut released = flag.lock().unwrap();
                        while !*released {
                            released = signal.wait(released).unwrap();
                        }
                        let _ = stream.write_all(&bytes[10..]);
                        continue;
                    }
                    Answer::Archive(_, etag) if head.contains(&format!("if-none-match: {etag}")) => {
                        ("304 Not Modified", etag, Vec::new())
                    }
                    Answer::Archive(bytes, etag) => ("200 OK", etag, bytes),
                    Answer::Corrupt => ("200 OK", "\"corrupt\"", b"\x1f\x8b\x08\x00 not really gzip".to_vec()),
                    Answer::Error => ("500 Internal Server Error", "\"none\"", b"down".to_vec()),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nETag: {etag}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            }
        });
        Mirror { url, answer, requests }
    }

    fn answer(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }
}

/// `run --once --log-format json`'s log lines.
fn run_once(ws: &Workspace, config: &std::path::Path) -> Vec<Value> {
    let out = ws.run(&["run", "--once", "--log-format", "json", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    out.stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn with_message<'a>(lines: &'a [Value], message: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["message"].as_str().is_some_and(|m| m.starts_with(message))).collect()
}

#[path = "vulns/redirects.rs"]
mod redirects;
#[path = "vulns/stalled.rs"]
mod stalled;

#[tokio::test]
async fn a_url_mirror_is_kept_refreshed_conditionally_and_a_failed_refresh_keeps_it_and_shows_its_age() {
    let registry = TestRegistry::start();
    Pusher::new(&registry.host).push_image("demo/b", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let mirror = Mirror::start(Answer::Archive(archive(), "\"v1\""));
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\njitter = \"0s\"\nstate = \"state/ledger.db\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n\n\
         [[builders]]\nname = \"b\"\nimage = \"{}/demo/b:latest\"\n\n[vulnerabilities]\nosv = \"{}\"\nrefresh = \"1h\"\nreleases = [\"24.04\", \"22.04\"]\n",
        registry.host, mirror.url
    ));

    // Downloaded, read whole, kept under the state directory.
    let lines = run_once(&ws, &config);
    let loaded = with_message(&lines, "vulnerability data loaded");
    assert_eq!(loaded.len(), 1, "{lines:#?}");
    assert_eq!((&loaded[0]["records"], &loaded[0]["read"]), (&json!(2), &json!(3)), "{lines:#?}");
    let skips: Vec<(&str, u64)> = with_message(&lines, "OSV files skipped")
        .iter()
        .map(|l| (l["reason"].as_str().unwrap(), l["count"].as_u64().unwrap()))
        .collect();
    let wanted = [("too_large", 1), ("not_json", 1), ("refused", 1), ("path_traversal", 1)];
    assert_eq!(skips, wanted, "one line per reason: {lines:#?}");
    assert!(ws.path("state/osv/osv.tar.gz").is_file());

    // The next refresh asks with the ETag; a 304 keeps the data, not read again.
    let lines = run_once(&ws, &config);
    assert!(mirror.requests.lock().unwrap().last().unwrap().contains("if-none-match: \"v1\""));
    assert_eq!(with_message(&lines, "vulnerability data loaded").len(), 1, "the kept copy only: {lines:#?}");
    assert!(with_message(&lines, "the OSV mirror's refresh failed").is_empty(), "{lines:#?}");

    // A corrupt download is not swapped in: logged once, the kept copy stays.
    mirror.answer(Answer::Corrupt);
    let lines = run_once(&ws, &config);
    assert_eq!(with_message(&lines, "the OSV mirror's refresh failed").len(), 1, "{lines:#?}");
    assert_eq!(with_message(&lines, "vulnerability data loaded").len(), 1, "{lines:#?}");
    assert!(!ws.path("state/osv/osv.tar.gz.part").exists());

    // Five hours later the mirror answers 500: the daemon serves the kept data and says how old.
    let validators = ws.path("state/osv/osv.json");
    let mut kept: Value = serde_json::from_slice(&std::fs::read(&validators).unwrap()).unwrap();
    kept["current_at"] = json!((chrono::Utc::now() - chrono::Duration::hours(5)).to_rfc3339());
    std::fs::write(&validators, kept.to_string()).unwrap();
    mirror.answer(Answer::Error);
    let mut daemon = Daemon::start(&config);
    let base = format!("http://{}", daemon.server_addr());
    let failed = |l: &Value| l["message"].as_str().is_some_and(|m| m.starts_with("the OSV mirror's refresh failed"));
    if !daemon.log.iter().any(|l| serde_json::from_str(l).is_ok_and(|l| failed(&l))) {
        daemon.wait_for("the failed refresh", failed);
    }
    let ready: Value = support::http().get(format!("{base}/readyz")).send().await.unwrap().json().await.unwrap();
    let data = &ready["vulnerability_data"];
    assert_eq!((&data["records"], &data["note"]), (&json!(2), &json!("vulnerability data: 5 h old")), "{ready}");
    assert_eq!(data["releases"], json!(["Ubuntu:22.04:LTS", "Ubuntu:24.04:LTS"]), "{ready}");
    assert!(data["refresh_failed"].as_str().unwrap().contains("500"), "{ready}");
    let page = support::http().get(format!("{base}/")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("vulnerability data: 5 h old"), "{page}");
    let metrics = support::http().get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("builder_monitor_osv_records 2\n"), "{metrics}");
    assert!(metrics.contains("builder_monitor_osv_skipped_total{reason=\"path_traversal\"} 1\n"), "{metrics}");
    daemon.kill();
}
