//! D5: an OSV `.zip` whose central directory holds 2,000,000 entries (118 MB of directory, written
//! here entry by entry, each a distinct name pointing at one empty local file) is refused from its
//! end record, before the directory is parsed: `check` says so and peaks under the daemon's memory
//! goal (parsing the directory first cost hundreds of MiB).

use super::*;

/// Entries in the generated zip: twice the entry cap.
const ENTRIES: u64 = 2_000_000;

/// Writes the zip to `path`: one empty stored `a.json`, `ENTRIES` directory entries naming it, and
/// the ZIP64 end records (the count does not fit the plain record's 16 bits).
fn write_huge_zip(path: &Path) {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let name = b"a.json";
    // The local file header: version, flags, stored, time, date, crc, sizes, name length.
    out.write_all(b"PK\x03\x04").unwrap();
    out.write_all(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    out.write_all(&[0; 12]).unwrap();
    out.write_all(&(name.len() as u16).to_le_bytes()).unwrap();
    out.write_all(&0u16.to_le_bytes()).unwrap();
    out.write_all(name).unwrap();
    let directory_at = 30 + name.len() as u64;
    let mut size = 0u64;
    for i in 0..ENTRIES {
        let name = format!("{i:08}.json");
        let mut entry = Vec::with_capacity(64);
        entry.extend(b"PK\x01\x02");
        entry.extend([20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        entry.extend([0; 12]);
        entry.extend((name.len() as u16).to_le_bytes());
        entry.extend([0; 12]);
        entry.extend(0u32.to_le_bytes());
        entry.extend(name.as_bytes());
        out.write_all(&entry).unwrap();
        size += entry.len() as u64;
    }
    let zip64_at = directory_at + size;
    out.write_all(b"PK\x06\x06").unwrap();
    out.write_all(&44u64.to_le_bytes()).unwrap();
    out.write_all(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    for v in [ENTRIES, ENTRIES, size, directory_at] {
        out.write_all(&v.to_le_bytes()).unwrap();
    }
    out.write_all(b"PK\x06\x07").unwrap();
    out.write_all(&0u32.to_le_bytes()).unwrap();
    out.write_all(&zip64_at.to_le_bytes()).unwrap();
    out.write_all(&1u32.to_le_bytes()).unwrap();
    out.write_all(b"PK\x05\x06\0\0\0\0\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\0\0").unwrap();
    out.flush().unwrap();
}

#[tokio::test]
async fn an_osv_zip_of_two_million_entries_is_refused_from_its_end_record() {
    let ws = Workspace::new();
    write_huge_zip(&ws.path("huge.zip"));
    let config = ws.config(
        "[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:latest\"\n\n[vulnerabilities]\nosv = \"huge.zip\"\n",
    );
    let (out, peak) = measured(&["check", "--config", config.to_str().unwrap()], ws.dir.path()).await;
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(said.contains("huge.zip has over 1000000 entries: refused"), "{said}");
    assert!(peak < PEAK_RSS_KIB, "check peaked at {peak} KiB refusing it");
}
