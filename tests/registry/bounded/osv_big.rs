//! D6: big but legal OSV mirrors, read by `check` within the daemon's memory goal: 999,000 tiny
//! records (each its own binary), and 200 records of ~1 MiB each listing 20,000 binaries (two
//! entries of 10,000, every name distinct). Both are written here as `.tar.gz` archives, entry by
//! entry, never whole in memory, the tiny one as a `.zip` too (its central directory is 73 MiB).
//! Holding every record of every release cost hundreds of MiB: `check` only counts what `run`
//! would keep, and `run --once` keeps only the binaries its images carry.

use super::*;

/// Writes a `.tar.gz` at `path` of `count` entries, the `n`th named `name(n)` holding `record(n)`.
fn write_tar_gz(path: &Path, count: usize, record: impl Fn(usize) -> String) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for n in 0..count {
        let body = record(n);
        let mut header = tar::Header::new_gnu();
        header.set_path(format!("osv/cve/{}/CVE-2026-{n}.json", n % 100)).unwrap();
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        tar.append(&header, body.as_bytes()).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap().flush().unwrap();
}

/// One CVE record with an entry per `(ecosystem, binaries)`, each binary fixed at `1.0-{n}`.
fn record(n: usize, entries: &[(&str, Vec<String>)]) -> String {
    let affected: Vec<Value> = entries
        .iter()
        .map(|(ecosystem, binaries)| {
            let fixed = format!("1.0-{n}");
            let map: serde_json::Map<String, Value> =
                binaries.iter().map(|b| (b.clone(), Value::String(fixed.clone()))).collect();
            json!({
                "package": {"ecosystem": ecosystem, "name": format!("src{n}")},
                "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fixed}]}],
                "ecosystem_specific": {"binaries": [map], "ubuntu_priority": "medium"}
            })
        })
        .collect();
    json!({"id": format!("CVE-2026-{n}"), "modified": "2026-12-01T00:00:00Z", "affected": affected}).to_string()
}

/// `check` of a config whose `[vulnerabilities] osv` is `mirror`: its output and peak (KiB).
async fn check_mirror(ws: &Workspace, mirror: &str) -> (Output, u64) {
    let config = ws.config(&format!(
        "[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:latest\"\n\n[vulnerabilities]\nosv = \"{mirror}\"\n"
    ));
    measured(&["check", "--config", config.to_str().unwrap()], ws.dir.path()).await
}

/// `run --once` of a daemon keeping release 22.04 of `mirror` (its builder's address refuses):
/// the line it logs of the load, and its peak (KiB).
async fn run_once_with(ws: &Workspace, mirror: &str) -> (String, u64) {
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:latest\"\n\n\
         [vulnerabilities]\nosv = \"{mirror}\"\nreleases = [\"22.04\"]\n"
    ));
    let (out, peak) = measured(&["run", "--once", "--config", config.to_str().unwrap()], ws.dir.path()).await;
    let said = format!("{}{}", out.stdout, out.stderr);
    let loaded = said.lines().find(|l| l.contains("vulnerability data loaded")).map(str::to_string);
    (loaded.unwrap_or_else(|| panic!("no load logged: {said}")), peak)
}

/// Writes a `.zip` of `count` stored entries at `path`, named and filled as [`write_tar_gz`]'s,
/// streamed (only each entry's offset and CRC kept until the directory is written).
fn write_zip(path: &Path, count: usize, record: impl Fn(usize) -> String) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let name = |n: usize| format!("osv/cve/{}/CVE-2026-{n}.json", n % 100);
    let (mut at, mut entries) = (0u64, Vec::with_capacity(count));
    for n in 0..count {
        let (name, body) = (name(n), record(n));
        let mut crc = flate2::Crc::new();
        crc.update(body.as_bytes());
        let mut header = b"PK\x03\x04\x14\0\0\0\0\0\0\0\0\0".to_vec();
        header.extend(crc.sum().to_le_bytes());
        header.extend((body.len() as u32).to_le_bytes());
        header.extend((body.len() as u32).to_le_bytes());
        header.extend((name.len() as u16).to_le_bytes());
        header.extend(0u16.to_le_bytes());
        out.write_all(&header).unwrap();
        out.write_all(name.as_bytes()).unwrap();
        out.write_all(body.as_bytes()).unwrap();
        entries.push((at, crc.sum(), body.len() as u32));
        at += (header.len() + name.len() + body.len()) as u64;
    }
    let directory_at = at;
    for (n, (offset, crc, size)) in entries.into_iter().enumerate() {
        let name = name(n);
        let mut entry = b"PK\x01\x02\x14\x03\x14\0\0\0\0\0\0\0\0\0".to_vec();
        entry.extend(crc.to_le_bytes());
        entry.extend(size.to_le_bytes());
        entry.extend(size.to_le_bytes());
        entry.extend((name.len() as u16).to_le_bytes());
        entry.extend([0; 8]);
        entry.extend((0o100644u32 << 16).to_le_bytes());
        entry.extend((offset as u32).to_le_bytes());
        out.write_all(&entry).unwrap();
        out.write_all(name.as_bytes()).unwrap();
        at += (entry.len() + name.len()) as u64;
    }
    let size = at - directory_at;
    // ZIP64 end records: the count does not fit the plain record's 16 bits.
    out.write_all(b"PK\x06\x06").unwrap();
    out.write_all(&44u64.to_le_bytes()).unwrap();
    out.write_all(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    for v in [count as u64, count as u64, size, directory_at] {
        out.write_all(&v.to_le_bytes()).unwrap();
    }
    out.write_all(b"PK\x06\x07\0\0\0\0").unwrap();
    out.write_all(&at.to_le_bytes()).unwrap();
    out.write_all(&1u32.to_le_bytes()).unwrap();
    out.write_all(b"PK\x05\x06\0\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\0\0").unwrap();
    out.flush().unwrap();
}

#[tokio::test]
async fn an_osv_mirror_of_999000_tiny_records_is_checked_within_the_memory_goal() {
    let ws = Workspace::new();
    let path = ws.path("tiny.tar.gz");
    write_tar_gz(&path, 999_000, |n| record(n, &[("Ubuntu:22.04:LTS", vec![format!("bin{n}")])]));
    let (out, peak) = check_mirror(&ws, "tiny.tar.gz").await;
    eprintln!("999,000 tiny records: check peaked at {peak} KiB");
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("vulnerability data: 999000 records kept of 999000 read"), "{}", out.stdout);
    assert!(peak < PEAK_RSS_KIB, "check peaked at {peak} KiB reading 999,000 records");

    // The daemon keeps the release's records of the binaries its images carry: none pinned, none held.
    let (loaded, peak) = run_once_with(&ws, "tiny.tar.gz").await;
    eprintln!("999,000 tiny records: run --once peaked at {peak} KiB");
    assert!(loaded.contains("records=999000") && loaded.contains("held=0"), "{loaded}");
    assert!(peak < PEAK_RSS_KIB, "run --once peaked at {peak} KiB reading 999,000 records");
}

#[tokio::test]
async fn an_osv_zip_of_999000_tiny_records_is_read_within_the_memory_goal() {
    let ws = Workspace::new();
    write_zip(&ws.path("tiny.zip"), 999_000, |n| record(n, &[("Ubuntu:22.04:LTS", vec![format!("bin{n}")])]));
    let (out, peak) = check_mirror(&ws, "tiny.zip").await;
    eprintln!("999,000 tiny records as a .zip: check peaked at {peak} KiB");
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("vulnerability data: 999000 records kept of 999000 read"), "{}", out.stdout);
    assert!(peak < PEAK_RSS_KIB, "check peaked at {peak} KiB reading a .zip of 999,000 records");
}

#[tokio::test]
async fn an_osv_mirror_of_200_records_of_20000_binaries_is_checked_within_the_memory_goal() {
    let ws = Workspace::new();
    let path = ws.path("wide.tar.gz");
    write_tar_gz(&path, 200, |n| {
        // Two entries of 10,000 binaries (the most read per entry), names padded to ~1 MiB a record.
        let names = |release: usize| {
            (0..10_000).map(|i| format!("bin-{n:03}-{release}-{i:05}-xxxxxxxxxxxxxxxxxxxxx")).collect()
        };
        let body = record(n, &[("Ubuntu:22.04:LTS", names(0)), ("Ubuntu:24.04:LTS", names(1))]);
        assert!(body.len() > 900 << 10 && body.len() <= 1 << 20, "a record of {} bytes", body.len());
        body
    });
    let (out, peak) = check_mirror(&ws, "wide.tar.gz").await;
    eprintln!("200 records of 20,000 binaries: check peaked at {peak} KiB");
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("vulnerability data: 200 records kept of 200 read"), "{}", out.stdout);
    assert!(peak < PEAK_RSS_KIB, "check peaked at {peak} KiB reading 200 records of 20,000 binaries");

    let (loaded, peak) = run_once_with(&ws, "wide.tar.gz").await;
    eprintln!("200 records of 20,000 binaries: run --once peaked at {peak} KiB");
    assert!(loaded.contains("records=200") && loaded.contains("held=0"), "{loaded}");
    assert!(peak < PEAK_RSS_KIB, "run --once peaked at {peak} KiB reading 200 records of 20,000 binaries");
}
