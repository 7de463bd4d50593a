//! Package lists from each source, and their diff, on documents shaped like the real ones.

use serde_json::json;

use super::*;

fn pkg(name: &str, arch: Option<&str>, version: &str) -> Package {
    Package { name: name.into(), arch: arch.map(str::to_string), version: version.into() }
}

/// A Paketo label as `jam create-stack` writes it.
fn paketo(entries: &[(&str, &str)]) -> String {
    let list: Vec<_> = entries
        .iter()
        .map(|(name, version)| {
            json!({"name": name, "version": version, "arch": "amd64",
                   "source": {"name": name, "version": version, "upstreamVersion": version.split('-').next()},
                   "summary": format!("the {name} package")})
        })
        .collect();
    serde_json::to_string(&list).unwrap()
}

/// The names a change gives the two sides of a move.
const NAMES: (&str, &str) = ("r.example.com/run@sha256:01", "r.example.com/run@sha256:02");

fn listed(source: Source, packages: Vec<Package>) -> Packages {
    Packages::Listed { source, packages, cut_at: None }
}

const V1: &[(&str, &str)] = &[
    ("openssl", "3.0.2-0ubuntu1.15"),
    ("libssl3", "3.0.2-0ubuntu1.15"),
    ("tzdata", "2024a-0ubuntu0.22.04"),
    ("libgone1", "1.0"),
];
const V2: &[(&str, &str)] = &[
    ("openssl", "3.0.2-0ubuntu1.16"),
    ("libssl3", "3.0.2-0ubuntu1.15"),
    ("tzdata", "2024a-0ubuntu0.22.04"),
    ("libnew2", "2.1"),
];

#[test]
fn the_paketo_label_reads_name_version_and_arch() {
    let list = parse_paketo_label(&paketo(V1)).unwrap().packages;
    assert_eq!(list.len(), 4);
    assert_eq!(list[0], pkg("libgone1", Some("amd64"), "1.0"));
    assert_eq!(list[2], pkg("openssl", Some("amd64"), "3.0.2-0ubuntu1.15"));
    // Sorted by name.
    assert!(list.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn malformed_labels_and_documents_are_notes_not_panics() {
    for bad in ["", "{", "{}", "[1,2]", r#"[{"version":"1"}]"#, "null", r#"[{"name": 7}]"#] {
        let err = parse_paketo_label(bad).unwrap_err();
        assert!(err.contains("io.paketo.stack.packages is malformed"), "{bad}: {err}");
    }
    for source in Source::SBOM {
        assert!(parse_sbom(source, b"not json").unwrap_err().contains("malformed"));
        assert!(parse_sbom(source, b"{}").unwrap_err().contains("has no"));
        assert!(parse_sbom(source, b"[]").is_err());
    }
    assert!(parse_sbom(Source::PaketoLabel, b"{}").is_err());
}

#[test]
fn a_list_past_the_cap_keeps_its_first_entries_marked_cut() {
    let many = |n: usize| {
        let list: Vec<_> = (0..n).map(|i| json!({"name": format!("p{i:05}"), "version": "1"})).collect();
        serde_json::to_string(&list).unwrap()
    };
    let full = parse_paketo_label(&many(MAX_PACKAGES)).unwrap();
    assert_eq!((full.packages.len(), full.cut_at), (MAX_PACKAGES, None), "a list at the cap is whole");
    let cut = parse_paketo_label(&many(MAX_PACKAGES + 1)).unwrap();
    assert_eq!((cut.packages.len(), cut.cut_at), (MAX_PACKAGES, Some(MAX_PACKAGES)));
    assert_eq!(cut.packages.last().unwrap().name, "p04999", "the first 5,000 entries, not the last");
    // Cut, even when the rest would not parse: it is never read.
    let broken = format!("{}, this is not JSON", many(MAX_PACKAGES + 1).trim_end_matches(']'));
    assert_eq!(parse_paketo_label(&broken).unwrap().cut_at, Some(MAX_PACKAGES));
    let list = Packages::from_result(Source::PaketoLabel, Ok(cut));
    assert_eq!(list.cut_at(), Some(MAX_PACKAGES));
    let text = serde_json::to_value(&list).unwrap();
    assert_eq!(text["cut_at"], 5000, "a pin keeps the cut");
    assert_eq!(serde_json::from_value::<Packages>(text).unwrap(), list);
    assert_eq!(
        cut_note("r.example.com/run@sha256:02", 5000),
        "the package list of r.example.com/run@sha256:02 was cut at 5000 entries (the most read of a list): packages beyond them are not compared"
    );
}

#[test]
fn a_diff_from_a_cut_list_says_so_and_calls_nothing_beyond_the_cut_added_or_removed() {
    let cut = |entries: &[(&str, &str)]| match from_label(entries) {
        Packages::Listed { source, packages, .. } => Packages::Listed { source, packages, cut_at: Some(MAX_PACKAGES) },
        other => other,
    };
    let one = |p: Packages| BTreeMap::from([("linux/amd64".to_string(), p)]);
    // The new list is cut: libgone1 may lie beyond the cut, so it is not removed; the upgrade and
    // the addition within the read entries are real.
    let (d, note) = diff_platforms(&one(from_label(V1)), &one(cut(V2)), NAMES);
    let d = d.unwrap();
    assert_eq!(d.lines(), ["openssl 3.0.2-0ubuntu1.15 → 3.0.2-0ubuntu1.16", "libnew2 2.1 added"]);
    assert_eq!(note.as_deref(), Some(cut_note(NAMES.1, MAX_PACKAGES).as_str()));
    // The old list is cut: libnew2 may have been beyond it, so it is not added.
    let (d, note) = diff_platforms(&one(cut(V1)), &one(from_label(V2)), NAMES);
    assert_eq!(d.unwrap().lines(), ["openssl 3.0.2-0ubuntu1.15 → 3.0.2-0ubuntu1.16", "libgone1 1.0 removed"]);
    assert_eq!(note.as_deref(), Some(cut_note(NAMES.0, MAX_PACKAGES).as_str()));
    // Both cut, on two platforms: each side of each platform is named.
    let two = |p: Packages| BTreeMap::from([("linux/amd64".to_string(), p.clone()), ("linux/arm64".to_string(), p)]);
    let (_, note) = diff_platforms(&two(cut(V1)), &two(cut(V1)), NAMES);
    let note = note.unwrap();
    assert_eq!(note.matches("was cut at 5000 entries").count(), 4, "{note}");
    assert!(note.starts_with(&format!("linux/amd64: {}", cut_note(NAMES.0, MAX_PACKAGES))), "{note}");
}

#[test]
fn each_sbom_format_reads_its_list_and_purl_arch() {
    let cdx = json!({"bomFormat": "CycloneDX", "specVersion": "1.4", "components": [
        {"type": "library", "name": "openssl", "version": "3.0.2-0ubuntu1.16",
         "purl": "pkg:deb/ubuntu/openssl@3.0.2-0ubuntu1.16?arch=amd64&distro=ubuntu-22.04"},
        {"type": "operating-system", "name": "ubuntu", "version": "22.04"},
        {"type": "library", "version": "no name"}]});
    let list = parse_sbom(Source::CycloneDx, cdx.to_string().as_bytes()).unwrap().packages;
    assert_eq!(list, vec![pkg("openssl", Some("amd64"), "3.0.2-0ubuntu1.16"), pkg("ubuntu", None, "22.04")]);

    let spdx = json!({"spdxVersion": "SPDX-2.3", "packages": [
        {"name": "openssl", "versionInfo": "3.0.2-0ubuntu1.16", "externalRefs": [
            {"referenceCategory": "SECURITY", "referenceType": "cpe23Type", "referenceLocator": "cpe:2.3:a:openssl"},
            {"referenceCategory": "PACKAGE-MANAGER", "referenceType": "purl",
             "referenceLocator": "pkg:deb/ubuntu/openssl@3.0.2-0ubuntu1.16?arch=arm64"}]},
        {"name": "tzdata", "versionInfo": "2024a"}]});
    let list = parse_sbom(Source::Spdx, spdx.to_string().as_bytes()).unwrap().packages;
    assert_eq!(list, vec![pkg("openssl", Some("arm64"), "3.0.2-0ubuntu1.16"), pkg("tzdata", None, "2024a")]);

    let syft = json!({"artifacts": [
        {"id": "1", "name": "libc6", "version": "2.35-0ubuntu3.8", "type": "deb",
         "purl": "pkg:deb/ubuntu/libc6@2.35-0ubuntu3.8?arch=amd64#frag"}],
        "distro": {"name": "ubuntu"}});
    let list = parse_sbom(Source::Syft, syft.to_string().as_bytes()).unwrap().packages;
    assert_eq!(list, vec![pkg("libc6", Some("amd64"), "2.35-0ubuntu3.8")]);
}

#[test]
fn a_name_listed_twice_keeps_both_versions() {
    let syft = json!({"artifacts": [{"name": "six", "version": "1.16"}, {"name": "six", "version": "1.15"},
                                    {"name": "six", "version": "1.16"}]});
    assert_eq!(
        parse_sbom(Source::Syft, syft.to_string().as_bytes()).unwrap().packages,
        vec![pkg("six", None, "1.15, 1.16")]
    );
}

#[test]
fn sbom_paths_name_their_format() {
    assert_eq!(Source::of_sbom_path("cnb/sbom/bom.cdx.json"), Some(Source::CycloneDx));
    assert_eq!(Source::of_sbom_path("/cnb/sbom/bom.spdx.json"), Some(Source::Spdx));
    assert_eq!(Source::of_sbom_path("./cnb/sbom/bom.syft.json"), Some(Source::Syft));
    assert_eq!(Source::of_sbom_path("cnb/sbom/bom.json"), None);
    assert_eq!(Source::of_sbom_path("layers/sbom/launch/bom.cdx.json"), None);
}

fn config(labels: serde_json::Value, diff_ids: &[&str]) -> Vec<u8> {
    json!({"architecture": "amd64", "os": "linux", "config": {"Labels": labels},
           "rootfs": {"type": "layers", "diff_ids": diff_ids}})
    .to_string()
    .into_bytes()
}

#[test]
fn lookup_prefers_the_label_then_the_sbom_layer() {
    let (a, b) = ("sha256:aaaa", "sha256:bbbb");
    let both = config(json!({PAKETO_PACKAGES: paketo(V1), BASE_SBOM: b}), &[a, b]);
    assert!(matches!(lookup(&both), Lookup::Found(Packages::Listed { source: Source::PaketoLabel, .. })));
    let sbom = config(json!({BASE_SBOM: b}), &[a, b]);
    assert_eq!(lookup(&sbom), Lookup::SbomLayer { diff_id: b.into(), position: 1 });
    let missing = config(json!({BASE_SBOM: "sha256:cccc"}), &[a, b]);
    let Lookup::Found(Packages::Unreadable { note }) = lookup(&missing) else { panic!() };
    assert!(note.contains("sha256:cccc, which is not a layer"), "{note}");
    assert_eq!(lookup(&config(json!({"other": "x"}), &[a])), Lookup::Absent);
    assert_eq!(lookup(&config(json!(null), &[a])), Lookup::Absent);
    let Lookup::Found(Packages::Unreadable { note }) = lookup(&config(json!({PAKETO_PACKAGES: "[{"}), &[a])) else {
        panic!()
    };
    assert!(note.contains("malformed"));
    let Lookup::Found(Packages::Unreadable { note }) = lookup(&config(json!({PAKETO_PACKAGES: 5}), &[a])) else {
        panic!()
    };
    assert!(note.contains("not a string"));
    assert!(matches!(lookup(b"\x00garbage"), Lookup::Found(Packages::Unreadable { .. })));
}

fn from_label(entries: &[(&str, &str)]) -> Packages {
    Packages::from_result(Source::PaketoLabel, parse_paketo_label(&paketo(entries)))
}

#[test]
fn the_diff_names_upgrades_additions_and_removals_sorted() {
    let d = diff(&from_label(V1), &from_label(V2)).unwrap();
    assert_eq!(
        serde_json::to_value(&d).unwrap(),
        json!({"source": "io.paketo.stack.packages",
               "changed": [{"name": "openssl", "from": "3.0.2-0ubuntu1.15", "to": "3.0.2-0ubuntu1.16"}],
               "added": [{"name": "libnew2", "version": "2.1"}],
               "removed": [{"name": "libgone1", "version": "1.0"}]})
    );
    assert_eq!(d.brief(3), "openssl 3.0.2-0ubuntu1.15 → 3.0.2-0ubuntu1.16, libnew2 2.1 added, libgone1 1.0 removed");
    assert_eq!(d.brief(1), "openssl 3.0.2-0ubuntu1.15 → 3.0.2-0ubuntu1.16; 2 more");
    assert_eq!(d.names().into_iter().collect::<Vec<_>>(), ["libgone1", "libnew2", "openssl"]);
    assert_eq!(
        d.table(2),
        "package  from               to\n\
         openssl  3.0.2-0ubuntu1.15  3.0.2-0ubuntu1.16\n\
         libnew2  –                  2.1\n\
         … 1 more"
    );
    let same = diff(&from_label(V1), &from_label(V1)).unwrap();
    assert!(same.is_empty());
    assert_eq!(same.brief(3), "no OS package changed");
    assert_eq!(same.table(3), "no OS package changed");
}

#[test]
fn a_name_under_two_arches_keeps_its_arch() {
    let before = listed(Source::PaketoLabel, vec![pkg("libc6", Some("amd64"), "1"), pkg("libc6", Some("i386"), "1")]);
    let after = listed(Source::PaketoLabel, vec![pkg("libc6", Some("amd64"), "2"), pkg("libc6", Some("i386"), "1")]);
    let d = diff(&before, &after).unwrap();
    assert_eq!(
        d.changed,
        vec![PackageChange { name: "libc6".into(), arch: Some("amd64".into()), from: "1".into(), to: "2".into() }]
    );
    assert_eq!(d.brief(3), "libc6:amd64 1 → 2");
}

#[test]
fn no_diff_across_sources_or_from_an_unreadable_side() {
    let sbom = listed(Source::CycloneDx, vec![pkg("openssl", None, "1")]);
    assert!(diff(&from_label(V1), &sbom).unwrap_err().contains("different sources"));
    let bad = Packages::unreadable("label io.paketo.stack.packages is malformed: EOF");
    assert!(diff(&bad, &from_label(V1)).unwrap_err().starts_with("previous image: label"));
    assert!(diff(&from_label(V1), &bad).unwrap_err().starts_with("new image: label"));
    assert_eq!(
        diff(&bad, &Packages::unreadable("y")).unwrap_err(),
        format!(
            "previous image: {}; new image: y",
            match &bad {
                Packages::Unreadable { note } => note.as_str(),
                _ => unreachable!(),
            }
        )
    );
}

#[test]
fn platforms_merge_when_their_diffs_are_equal() {
    let amd = |e: &[(&str, &str)]| from_label(e);
    // The same move on arm64: other arch values, the same diff.
    let arm = |e: &[(&str, &str)]| match from_label(e) {
        Packages::Listed { source, packages, .. } => {
            listed(source, packages.into_iter().map(|p| Package { arch: Some("arm64".into()), ..p }).collect())
        }
        other => other,
    };
    let two =
        |a: Packages, b: Packages| BTreeMap::from([("linux/amd64".to_string(), a), ("linux/arm64".to_string(), b)]);
    let (merged, note) = diff_platforms(&two(amd(V1), arm(V1)), &two(amd(V2), arm(V2)), NAMES);
    let merged = merged.unwrap();
    assert!(merged.platforms.is_empty() && note.is_none());
    assert_eq!(merged.changed.len(), 1);

    // arm64 did not move: each platform's diff, the top level amd64's.
    let (split, _) = diff_platforms(&two(amd(V1), arm(V1)), &two(amd(V2), arm(V1)), NAMES);
    let split = split.unwrap();
    assert_eq!(split.changed[0].name, "openssl");
    assert_eq!(split.platforms.len(), 2);
    assert!(split.platforms["linux/arm64"].is_empty());

    // One platform unreadable: the other's diff, and a note naming the platform.
    let bad = Packages::unreadable("label io.paketo.stack.packages is malformed: EOF");
    let (partial, note) = diff_platforms(&two(amd(V1), arm(V1)), &two(amd(V2), bad), NAMES);
    assert_eq!(partial.unwrap().changed.len(), 1);
    assert!(note.unwrap().starts_with("linux/arm64: new image: label"));

    // Nothing known on either side: nothing said.
    assert_eq!(diff_platforms(&BTreeMap::new(), &BTreeMap::new(), NAMES), (None, None));
    // A previous pin without lists (recorded before lists were kept): no diff, a note.
    let one = BTreeMap::from([("linux/amd64".to_string(), amd(V2))]);
    let (none, note) = diff_platforms(&BTreeMap::new(), &one, NAMES);
    assert!(none.is_none());
    assert_eq!(note.unwrap(), "no package list was recorded for the previous image");
}

#[test]
fn kept_lists_round_trip_through_json() {
    let p = from_label(V1);
    let text = serde_json::to_string(&p).unwrap();
    assert!(text.starts_with(r#"{"status":"listed","source":"io.paketo.stack.packages","packages":["#), "{text}");
    assert_eq!(serde_json::from_str::<Packages>(&text).unwrap(), p);
    let bad = Packages::unreadable("x");
    assert_eq!(serde_json::to_value(&bad).unwrap(), json!({"status": "unreadable", "note": "x"}));
}

/// A CycloneDX document of `entries` empty components, generated as it is read (never held
/// whole), counting the bytes handed out.
struct EmptyComponents {
    entries: usize,
    written: usize,
    served: std::rc::Rc<std::cell::Cell<usize>>,
    pending: Vec<u8>,
}

impl EmptyComponents {
    fn new(entries: usize) -> (Self, std::rc::Rc<std::cell::Cell<usize>>) {
        let served = std::rc::Rc::new(std::cell::Cell::new(0));
        let doc =
            EmptyComponents { entries, written: 0, served: served.clone(), pending: br#"{"components":["#.to_vec() };
        (doc, served)
    }
}

impl std::io::Read for EmptyComponents {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pending.len() < buf.len() && self.written <= self.entries {
            self.pending.extend_from_slice(match self.written {
                n if n == self.entries => b"]}",
                0 => b"{}",
                _ => b",{}",
            });
            self.written += 1;
        }
        let n = buf.len().min(self.pending.len());
        buf[..n].copy_from_slice(&self.pending[..n]);
        self.pending.drain(..n);
        self.served.set(self.served.get() + n);
        Ok(n)
    }
}

#[test]
fn empty_components_count_as_entries_up_to_the_cap() {
    let (at_cap, _) = EmptyComponents::new(MAX_PACKAGES);
    let whole = PackageList { packages: Vec::new(), cut_at: None };
    assert_eq!(parse_sbom_from(Source::CycloneDx, at_cap), Ok(whole), "unnamed entries list no package");
    let (over, _) = EmptyComponents::new(MAX_PACKAGES + 1);
    let cut = PackageList { packages: Vec::new(), cut_at: Some(MAX_PACKAGES) };
    assert_eq!(parse_sbom_from(Source::CycloneDx, over), Ok(cut), "an empty entry counts: the list is cut");
}

#[test]
fn a_huge_list_is_cut_after_reading_only_past_the_cap() {
    // 20 million entries (60 MB of JSON): the read stops just after entry 5,001, so it has read
    // about 15 KB (plus one buffer), and never holds more than 5,000 entries.
    let (doc, served) = EmptyComponents::new(20_000_000);
    assert_eq!(parse_sbom_from(Source::CycloneDx, doc).unwrap().cut_at, Some(MAX_PACKAGES));
    assert!(served.get() < 64 << 10, "read {} bytes of a 60 MB document", served.get());
    // The same cap on the label, and on the other formats' lists.
    let entries = format!("[{}]", vec![r#"{"name":"p"}"#; MAX_PACKAGES + 1].join(","));
    assert_eq!(parse_paketo_label(&entries).unwrap().cut_at, Some(MAX_PACKAGES));
    for (source, field) in [(Source::Spdx, "packages"), (Source::Syft, "artifacts")] {
        let doc = format!(r#"{{"{field}": [{}]}}"#, vec!["{}"; MAX_PACKAGES + 1].join(","));
        assert_eq!(parse_sbom(source, doc.as_bytes()).unwrap().cut_at, Some(MAX_PACKAGES), "{source:?}");
    }
}

#[test]
fn long_fields_are_refused_and_unused_ones_never_kept() {
    let long = "x".repeat(MAX_FIELD_BYTES + 1);
    let doc = json!({"components": [{"name": long, "version": "1"}]}).to_string();
    let err = parse_sbom(Source::CycloneDx, doc.as_bytes()).unwrap_err();
    assert_eq!(err, format!("sbom:cyclonedx document has a package field of {} bytes, over the 1024 kept", long.len()));
    // A long purl is read for its arch only; nested lists, unknown fields and every external
    // reference after the first purl are skipped.
    let purl = format!("pkg:deb/ubuntu/openssl@3?arch=arm64&x={long}");
    let refs: Vec<_> = (0..10_000)
        .map(|i| json!({"referenceType": if i == 0 { "cpe23Type" } else { "purl" }, "referenceLocator": format!("pkg:deb/x@1?arch=a{i}")}))
        .collect();
    let doc = json!({"components": [{"name": "openssl", "version": "3", "purl": purl, "components": [{}, {}],
                                     "properties": [{"name": long}]}],
                     "packages": [{"name": "tzdata", "versionInfo": "1", "externalRefs": refs}]});
    let cdx = parse_sbom(Source::CycloneDx, doc.to_string().as_bytes()).unwrap().packages;
    assert_eq!(cdx, vec![pkg("openssl", Some("arm64"), "3")]);
    let spdx = parse_sbom(Source::Spdx, doc.to_string().as_bytes()).unwrap().packages;
    assert_eq!(spdx, vec![pkg("tzdata", Some("a1"), "1")]);
}

#[test]
fn lookup_skips_other_labels_whatever_their_shape() {
    let a = "sha256:aaaa";
    let junk = json!({"a": [1, [2, {"b": null}]], "c": {"d": "e"}, "f": 1.5, BASE_SBOM: a});
    assert_eq!(lookup(&config(junk, &[a])), Lookup::SbomLayer { diff_id: a.into(), position: 0 });
    let Lookup::Found(Packages::Unreadable { note }) = lookup(&config(json!({BASE_SBOM: [a]}), &[a])) else { panic!() };
    assert_eq!(note, format!("label {BASE_SBOM} is not a string"));
}
