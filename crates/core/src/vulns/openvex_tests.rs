//! The OpenVEX document of a move, in memory: statuses, purls, the data's source and age, what
//! is not claimed (never `fixed`), and the same bytes for the same facts. The cut and
//! partial-platform cases from the decision's own matching are in `cnb::fixes`' tests.

use chrono::{DateTime, TimeZone, Utc};

use super::*;
use crate::vulns::{FixedPackage, Priority};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const PRODUCT: Product<'static> = Product { repository: "registry.example/apps/web", digest: DIGEST };
const IMAGE_PURL: &str = "pkg:oci/web@sha256%3A0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\
                          ?repository_url=registry.example/apps/web";

fn planned() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 7, 12, 0, 0).unwrap()
}

fn authored() -> Authored<'static> {
    Authored { timestamp: planned(), version: "1.2.3" }
}

fn source() -> DataSource {
    DataSource {
        url: "https://mirror.example/…".into(),
        etag: Some("\"v1\"".into()),
        sha256: Some("ab".repeat(32)),
        unverified: None,
        as_of: Some(Utc.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap()),
    }
}

fn fix(id: &str, cves: &[&str], packages: &[(&str, &str, &str)]) -> Fix {
    Fix {
        id: id.into(),
        cves: cves.iter().map(|c| c.to_string()).collect(),
        priority: Some(Priority::High),
        packages: packages
            .iter()
            .map(|(name, from, to)| FixedPackage { name: (*name).into(), from: (*from).into(), to: (*to).into() })
            .collect(),
        modified: Some("2026-12-01T00:00:00Z".into()),
        ..Fix::default()
    }
}

fn facts(fixes: Vec<Fix>, unknown: Vec<UnknownFix>) -> VexFacts {
    VexFacts::of("c1", &fixes, &unknown, Some(&source()), Some("Ubuntu:22.04:LTS")).expect("a fix is claimed")
}

/// `(name, status)` pairs, owned.
fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

fn statuses(doc: &Value) -> Vec<(String, String)> {
    doc["statements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["vulnerability"]["name"].as_str().unwrap().into(), s["status"].as_str().unwrap().into()))
        .collect()
}

#[test]
fn a_claimed_fix_is_one_fixed_statement_per_cve_with_the_digest_and_its_packages() {
    let usn =
        fix("USN-7000-1", &["CVE-2026-1111", "CVE-2026-1112"], &[("libssl3", "3.0.2-0ubuntu1.9", "3.0.2-0ubuntu1.10")]);
    let doc = document(&facts(vec![usn], vec![]), PRODUCT, authored()).unwrap();
    assert_eq!(doc["@context"], "https://openvex.dev/ns/v0.2.0");
    assert_eq!(
        doc["@id"],
        "urn:builder-monitor:openvex:c1:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    assert_eq!((doc["author"].as_str(), doc["version"].as_u64()), (Some("builder-monitor"), Some(1)));
    assert_eq!(doc["timestamp"], "2026-12-07T12:00:00Z", "the action's planning time, no clock");
    assert_eq!(doc["tooling"], "builder-monitor 1.2.3");
    assert_eq!(statuses(&doc), pairs(&[("CVE-2026-1111", "fixed"), ("CVE-2026-1112", "fixed")]));
    let first = &doc["statements"][0];
    assert_eq!(first["vulnerability"]["aliases"], serde_json::json!(["USN-7000-1"]));
    assert_eq!(first["products"][0]["@id"], IMAGE_PURL);
    assert_eq!(
        first["products"][0]["subcomponents"][0]["@id"],
        "pkg:deb/ubuntu/libssl3@3.0.2-0ubuntu1.10?distro=ubuntu-22.04"
    );
    let notes = first["status_notes"].as_str().unwrap();
    for part in [
        "libssl3 3.0.2-0ubuntu1.9 → 3.0.2-0ubuntu1.10",
        "USN-7000-1 (record modified 2026-12-01T00:00:00Z)",
        "vulnerability data: https://mirror.example/…",
        "ETag \"v1\"",
        "current as of 2026-12-07T09:00:00Z, 3 h before this document",
    ] {
        assert!(notes.contains(part), "{part:?} in {notes}");
    }
}

#[test]
fn a_cve_record_and_a_usn_naming_it_make_one_statement() {
    let pkgs = [("openssl", "3.0.2-0ubuntu1.15", "3.0.2-0ubuntu1.16")];
    let fixes = vec![fix("CVE-2026-7001", &["CVE-2026-7001"], &pkgs), fix("USN-7001-1", &["CVE-2026-7001"], &pkgs)];
    let doc = document(&facts(fixes, vec![]), PRODUCT, authored()).unwrap();
    assert_eq!(statuses(&doc), pairs(&[("CVE-2026-7001", "fixed")]));
    assert_eq!(doc["statements"][0]["vulnerability"]["aliases"], serde_json::json!(["USN-7001-1"]));
    assert_eq!(doc["statements"][0]["products"][0]["subcomponents"].as_array().unwrap().len(), 1);
}

#[test]
fn a_notice_without_cves_stands_for_itself() {
    let doc = document(&facts(vec![fix("USN-7002-1", &[], &[])], vec![]), PRODUCT, authored()).unwrap();
    assert_eq!(statuses(&doc), pairs(&[("USN-7002-1", "fixed")]));
    assert!(doc["statements"][0]["vulnerability"].get("aliases").is_none());
    assert!(doc["statements"][0]["products"][0].get("subcomponents").is_none());
}

#[test]
fn what_a_platform_does_not_show_fixed_is_under_investigation_never_fixed() {
    let claimed = fix("CVE-2026-1", &["CVE-2026-1"], &[("openssl", "1", "2")]);
    let unknown = UnknownFix {
        id: "CVE-2026-2".into(),
        priority: Some(Priority::High),
        reason: "linux/arm64 is not shown fixed by the move".into(),
    };
    let doc = document(&facts(vec![claimed], vec![unknown]), PRODUCT, authored()).unwrap();
    assert_eq!(statuses(&doc), pairs(&[("CVE-2026-1", "fixed"), ("CVE-2026-2", "under_investigation")]));
    let notes = doc["statements"][1]["status_notes"].as_str().unwrap();
    assert!(notes.starts_with("not claimed fixed: linux/arm64 is not shown fixed by the move"), "{notes}");
    // An id some record claims but another platform's verdict doubts is not claimed either.
    let doubted = UnknownFix { id: "CVE-2026-1".into(), priority: None, reason: "a list was cut".into() };
    let claimed = fix("CVE-2026-1", &["CVE-2026-1"], &[]);
    let also = fix("CVE-2026-3", &["CVE-2026-3"], &[]);
    let doc = document(&facts(vec![claimed, also], vec![doubted]), PRODUCT, authored()).unwrap();
    assert_eq!(statuses(&doc), pairs(&[("CVE-2026-1", "under_investigation"), ("CVE-2026-3", "fixed")]));
}

#[test]
fn nothing_is_attested_without_a_claimed_fix() {
    assert_eq!(VexFacts::of("c1", &[], &[], Some(&source()), None), None, "no fixes: no facts");
    let only = fix("CVE-2026-1", &["CVE-2026-1"], &[]);
    let doubted = UnknownFix { id: "CVE-2026-1".into(), priority: None, reason: "a list was cut".into() };
    assert_eq!(document(&facts(vec![only], vec![doubted]), PRODUCT, authored()), None, "nothing fixed: no document");
    let bad = Product { repository: "registry.example/apps/web", digest: "sha512:00" };
    assert_eq!(document(&facts(vec![fix("CVE-2026-1", &[], &[])], vec![]), bad, authored()), None);
}

#[test]
fn the_same_facts_give_the_same_bytes() {
    let make = || {
        let fixes = vec![
            fix("USN-2-1", &["CVE-2026-9", "CVE-2026-3"], &[("libc6", "2.35-0ubuntu3.7", "2.35-0ubuntu3.8")]),
            fix("CVE-2026-3", &["CVE-2026-3"], &[("libc-bin", "2.35-0ubuntu3.7", "2.35-0ubuntu3.8")]),
        ];
        serde_json::to_vec(&document(&facts(fixes, vec![]), PRODUCT, authored()).unwrap()).unwrap()
    };
    assert_eq!(make(), make());
    // Through the ledger's JSON and back: the same document.
    let f = facts(vec![fix("CVE-2026-1", &["CVE-2026-1"], &[("zlib1g", "1:1.2.11", "1:1.2.13+dfsg-1")])], vec![]);
    let kept: VexFacts = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
    assert_eq!(document(&kept, PRODUCT, authored()), document(&f, PRODUCT, authored()));
}

#[test]
fn purls_encode_as_trivy_writes_them() {
    assert_eq!(
        deb_purl("zlib1g", "1:1.2.13+dfsg-1", Some("Ubuntu:24.04:LTS")),
        "pkg:deb/ubuntu/zlib1g@1.2.13%2Bdfsg-1?distro=ubuntu-24.04&epoch=1"
    );
    assert_eq!(
        deb_purl("libstdc++6", "12.3.0-1ubuntu1~22.04", None),
        "pkg:deb/ubuntu/libstdc%2B%2B6@12.3.0-1ubuntu1~22.04"
    );
    assert_eq!(
        deb_purl("a", "1", Some("Ubuntu:Pro:22.04:LTS")),
        "pkg:deb/ubuntu/a@1",
        "Pro's ecosystem names no distro"
    );
    let product = Product { repository: "127.0.0.1:5000/Apps/Web", digest: DIGEST };
    assert!(oci_purl(product).unwrap().starts_with("pkg:oci/web@sha256%3A0123"), "the name lowercased");
    assert_eq!(oci_purl(Product { repository: "r/a", digest: "sha256:abc" }), None);
}

#[test]
fn an_unverified_or_unrecorded_source_says_so() {
    let mut f = facts(vec![fix("CVE-2026-1", &[], &[])], vec![]);
    f.source.as_mut().unwrap().unverified = Some("the kept download came from another URL".into());
    f.source.as_mut().unwrap().as_of = None;
    let doc = document(&f, PRODUCT, authored()).unwrap();
    let notes = doc["statements"][0]["status_notes"].as_str().unwrap();
    assert!(notes.contains("age not recorded") && notes.contains("not verified: the kept download"), "{notes}");
    f.source = None;
    let doc = document(&f, PRODUCT, authored()).unwrap();
    assert!(
        doc["statements"][0]["status_notes"].as_str().unwrap().ends_with("vulnerability data: source not recorded")
    );
}
