//! Reading records of both of Ubuntu's shapes, and the fixes of a move, case by case, on records
//! shaped like the real ones (`osv/usn/*.json` and `osv/cve/<year>/*.json`).

use serde_json::{Value, json};

use super::*;
use crate::packages::Package;

/// `(ecosystem, source, fixed, binaries)` of one `affected[]` entry.
type Entry<'a, B> = (&'a str, &'a str, Option<&'a str>, &'a [B]);

const JAMMY: &str = "Ubuntu:22.04:LTS";
const NOBLE: &str = "Ubuntu:24.04:LTS";

fn jammy() -> Release {
    Release(JAMMY.into())
}

fn pkg(name: &str, version: &str) -> Package {
    Package { name: name.into(), arch: Some("amd64".into()), version: version.into() }
}

/// A USN record: one `affected[]` entry per `(ecosystem, source, fixed, binaries)`.
fn usn(id: &str, cves: &[&str], entries: &[Entry<(&str, &str)>]) -> Value {
    let affected: Vec<Value> = entries
        .iter()
        .map(|(ecosystem, source, fixed, binaries)| {
            let mut events = vec![json!({"introduced": "0"})];
            events.extend(fixed.map(|fixed| json!({"fixed": fixed})));
            json!({
                "package": {"ecosystem": ecosystem, "name": source, "purl": format!("pkg:deb/ubuntu/{source}?arch=source")},
                "ranges": [{"type": "ECOSYSTEM", "events": events}],
                "versions": ["1.0-1"],
                "ecosystem_specific": {
                    "binaries": binaries.iter().map(|(n, v)| json!({"binary_name": n, "binary_version": v})).collect::<Vec<_>>(),
                    "availability": "No subscription required"
                }
            })
        })
        .collect();
    json!({
        "schema_version": "1.7.0", "id": id, "summary": "a summary", "details": "details",
        "aliases": [], "related": [],
        "upstream": cves.iter().map(|c| format!("UBUNTU-{c}")).collect::<Vec<_>>(),
        "published": "2026-01-01T00:00:00Z", "modified": "2026-01-01T00:00:00Z",
        "affected": affected
    })
}

/// A CVE record: `binaries` as a list of one map, `ubuntu_priority` per entry.
fn cve(id: &str, priority: &str, entries: &[Entry<(&str, Option<&str>)>]) -> Value {
    let affected: Vec<Value> = entries
        .iter()
        .map(|(ecosystem, source, fixed, binaries)| {
            let mut events = vec![json!({"introduced": "0"})];
            events.extend(fixed.map(|fixed| json!({"fixed": fixed})));
            let map: serde_json::Map<String, Value> = binaries.iter().map(|(n, v)| (n.to_string(), json!(v))).collect();
            json!({
                "package": {"ecosystem": ecosystem, "name": source},
                "ranges": [{"type": "ECOSYSTEM", "events": events}],
                "versions": [],
                "ecosystem_specific": {"binaries": [map], "availability": "No subscription required",
                                       "ubuntu_priority": priority, "priority_reason": "why"}
            })
        })
        .collect();
    json!({
        "schema_version": "1.6.3", "id": id, "details": "d", "aliases": [], "related": [],
        "severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N"}],
        "published": "2026-01-01T00:00:00Z", "modified": "2026-01-01T00:00:00Z",
        "affected": affected
    })
}

fn record(value: &Value) -> Record {
    parse_record(value.to_string().as_bytes()).unwrap()
}

fn index(records: &[Value]) -> Index {
    let mut index = Index::new(vec![jammy()]);
    for value in records {
        index.insert(record(value));
    }
    index
}

fn ids(fixes: &[Fix]) -> Vec<&str> {
    fixes.iter().map(|fix| fix.id.as_str()).collect()
}

const CURL_OLD: &str = "7.81.0-1ubuntu1.15";
const CURL_NEW: &str = "7.81.0-1ubuntu1.16";

fn curl_usn() -> Value {
    usn(
        "USN-7000-1",
        &["CVE-2026-1111", "CVE-2026-1112"],
        &[
            (JAMMY, "curl", Some(CURL_NEW), &[("curl", CURL_NEW), ("libcurl4", CURL_NEW)]),
            (
                NOBLE,
                "curl",
                Some("8.5.0-2ubuntu10.5"),
                &[("curl", "8.5.0-2ubuntu10.5"), ("libcurl4t64", "8.5.0-2ubuntu10.5")],
            ),
        ],
    )
}

#[test]
fn a_usn_record_reads_with_its_cves_and_binaries() {
    let read = record(&curl_usn());
    assert_eq!(read.id, "USN-7000-1");
    assert_eq!(read.cves, ["CVE-2026-1111", "CVE-2026-1112"]);
    assert_eq!(read.priority, None);
    assert_eq!(read.affected.len(), 2);
    assert_eq!(
        read.affected[0],
        Affected {
            ecosystem: JAMMY.into(),
            source: "curl".into(),
            fixed: Some(CURL_NEW.into()),
            binaries: vec![("curl".into(), CURL_NEW.into()), ("libcurl4".into(), CURL_NEW.into())],
        }
    );
}

#[test]
fn a_cve_record_reads_with_its_priority_and_binary_map() {
    let value = cve(
        "CVE-2026-1111",
        "high",
        &[
            (JAMMY, "curl", Some(CURL_NEW), &[("curl", Some(CURL_NEW)), ("libcurl4", None)]),
            ("Ubuntu:Pro:18.04:LTS", "curl", None, &[]),
        ],
    );
    let read = record(&value);
    assert_eq!(read.cves, ["CVE-2026-1111"]);
    assert_eq!(read.priority, Some(Priority::High));
    assert_eq!(
        read.affected[0].binaries,
        [("curl".to_string(), CURL_NEW.to_string()), ("libcurl4".into(), String::new())]
    );
    assert_eq!(read.affected[1].fixed, None);
}

#[test]
fn bad_records_are_clear_errors() {
    for (bad, says) in [
        (&b"not json"[..], "expected"),
        (b"[]", "expected struct"),
        (b"{}", "missing field `id`"),
        (br#"{"id": " "}"#, "`id` is empty"),
        (br#"{"id": "USN-1-1", "affected": [{"package": {"name": "x"}}]}"#, "missing field `ecosystem`"),
        (br#"{"id": "USN-1-1", "affected": [{"package": {"ecosystem": "e", "name": "x"}, "ecosystem_specific": {"binaries": [7]}}]}"#, "binary_name"),
    ] {
        let error = parse_record(bad).unwrap_err().to_string();
        assert!(error.starts_with("not an OSV record: ") && error.contains(says), "{error}");
    }
}

#[test]
fn long_lists_are_cut_at_their_bounds() {
    let binaries: Vec<(String, String)> =
        (0..MAX_BINARIES + 5).map(|n| (format!("lib{n}"), "1.0-1".to_string())).collect();
    let borrowed: Vec<(&str, &str)> = binaries.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    let mut entries = vec![(JAMMY, "big", Some("1.0-1"), borrowed.as_slice())];
    entries.extend(std::iter::repeat_n((NOBLE, "other", Some("1.0-1"), &borrowed[..1]), MAX_AFFECTED + 2));
    let read = record(&usn("USN-9-1", &["CVE-2026-9"], &entries));
    assert_eq!(read.affected.len(), MAX_AFFECTED);
    assert_eq!(read.affected[0].binaries.len(), MAX_BINARIES);
    assert_eq!(read.affected[0].binaries.last().unwrap().0, format!("lib{}", MAX_BINARIES - 1));
    let map: Vec<(&str, Option<&str>)> = borrowed.iter().map(|(n, v)| (*n, Some(*v))).collect();
    let read = record(&cve("CVE-2026-9", "low", &[(JAMMY, "big", Some("1.0-1"), map.as_slice())]));
    assert_eq!(read.affected[0].binaries.len(), MAX_BINARIES);
}

#[test]
fn a_move_that_fixes_one_notice() {
    let index = index(&[curl_usn()]);
    let before = [pkg("bash", "5.1-6ubuntu1"), pkg("curl", CURL_OLD), pkg("libcurl4", CURL_OLD)];
    let after = [pkg("bash", "5.1-6ubuntu1.1"), pkg("curl", CURL_NEW), pkg("libcurl4", CURL_NEW)];
    let fixes = index.fixes(&jammy(), &before, &after);
    assert_eq!(
        fixes,
        [Fix {
            id: "USN-7000-1".into(),
            cves: vec!["CVE-2026-1111".into(), "CVE-2026-1112".into()],
            priority: None,
            packages: vec![
                FixedPackage { name: "curl".into(), from: CURL_OLD.into(), to: CURL_NEW.into() },
                FixedPackage { name: "libcurl4".into(), from: CURL_OLD.into(), to: CURL_NEW.into() },
            ],
            modified: Some("2026-01-01T00:00:00Z".into()),
            ..Fix::default()
        }]
    );
    // Nothing moved: nothing fixed; and the fix is not reported backwards.
    assert!(index.fixes(&jammy(), &before, &before).is_empty());
    assert!(index.fixes(&jammy(), &after, &before).is_empty());
}

#[test]
fn a_fix_reached_only_partly_is_not_a_fix() {
    let index = index(&[curl_usn()]);
    let before = [pkg("curl", CURL_OLD), pkg("libcurl4", CURL_OLD)];
    let after = [pkg("curl", CURL_OLD), pkg("libcurl4", CURL_NEW)];
    assert!(index.fixes(&jammy(), &before, &after).is_empty());
}

#[test]
fn other_releases_pro_and_unfixed_records_are_never_listed() {
    let fixed = Some(CURL_NEW);
    let both: &[(&str, &str)] = &[("curl", CURL_NEW)];
    let records = [
        usn("USN-7001-1", &[], &[(NOBLE, "curl", fixed, both)]),
        usn("USN-7002-1", &[], &[("Ubuntu:Pro:22.04:LTS", "curl", fixed, both)]),
        usn("USN-7003-1", &[], &[(JAMMY, "curl", None, both)]),
        cve("CVE-2026-3333", "critical", &[(JAMMY, "curl", fixed, &[("curl", None)])]),
    ];
    let mut index = Index::new(vec![jammy()]);
    for value in &records {
        assert!(!index.insert(record(value)), "{value}");
    }
    assert!(index.is_empty());
    let (before, after) = ([pkg("curl", CURL_OLD)], [pkg("curl", CURL_NEW)]);
    assert!(index.fixes(&jammy(), &before, &after).is_empty());
    assert!(index.fixes(&Release(NOBLE.into()), &before, &after).is_empty());

    // With no releases given every Ubuntu release is kept, Pro still never.
    let mut all = Index::new(Vec::new());
    let kept: Vec<bool> = records.iter().map(|value| all.insert(record(value))).collect();
    assert_eq!(kept, [true, false, false, false]);
    assert_eq!(ids(&all.fixes(&Release(NOBLE.into()), &before, &after)), ["USN-7001-1"]);
    assert!(all.fixes(&jammy(), &before, &after).is_empty());
}

/// `check`'s counting index says "kept" of exactly the records a real one keeps (every release but
/// Pro's, unfixed ones not, copies of one id each), and holds none of them.
#[test]
fn a_counting_index_counts_what_an_index_keeps_and_holds_nothing() {
    let fixed = Some(CURL_NEW);
    let both: &[(&str, &str)] = &[("curl", CURL_NEW)];
    let records = [
        usn("USN-7001-1", &[], &[(NOBLE, "curl", fixed, both)]),
        usn("USN-7001-1", &[], &[(JAMMY, "curl", fixed, both)]),
        usn("USN-7002-1", &[], &[("Ubuntu:Pro:22.04:LTS", "curl", fixed, both)]),
        usn("USN-7003-1", &[], &[(JAMMY, "curl", None, both)]),
        cve("CVE-2026-3333", "critical", &[(JAMMY, "curl", fixed, &[("curl", None)])]),
        curl_usn(),
    ];
    let (mut all, mut counting) = (Index::new(Vec::new()), Index::counting(Vec::new()));
    for value in &records {
        assert_eq!(all.insert(record(value)), counting.insert(record(value)), "{value}");
    }
    assert_eq!((all.len(), counting.len()), (3, 3));
    assert!(!all.fixes(&jammy(), &[pkg("curl", CURL_OLD)], &[pkg("curl", CURL_NEW)]).is_empty());
    assert!(counting.fixes(&jammy(), &[pkg("curl", CURL_OLD)], &[pkg("curl", CURL_NEW)]).is_empty());
    assert!(counting.holds_nothing());
}

#[test]
fn an_index_of_exactly_some_releases_keeps_those_and_says_so() {
    let fixed = Some(CURL_NEW);
    let both: &[(&str, &str)] = &[("curl", CURL_NEW)];
    let records = [
        usn("USN-7001-1", &[], &[(NOBLE, "curl", fixed, both)]),
        usn("USN-7004-1", &[], &[(JAMMY, "curl", fixed, both)]),
    ];
    let (before, after) = ([pkg("curl", CURL_OLD)], [pkg("curl", CURL_NEW)]);
    // None at all: nothing kept, no release kept (unlike `new(vec![])`, which keeps every one).
    let mut none = Index::only([]);
    assert!(records.iter().all(|value| !none.insert(record(value))));
    assert_eq!(none.releases(), Some(&[][..]));
    assert!(!none.keeps(&jammy()));
    let noble = Release(NOBLE.into());
    let mut one = Index::only([noble.clone(), noble.clone()]);
    let kept: Vec<bool> = records.iter().map(|value| one.insert(record(value))).collect();
    assert_eq!(kept, [true, false]);
    assert_eq!(one.releases(), Some(&[noble.clone()][..]));
    assert!(one.keeps(&noble) && !one.keeps(&jammy()));
    assert_eq!(ids(&one.fixes(&noble, &before, &after)), ["USN-7001-1"]);
    let all = Index::new(Vec::new());
    assert_eq!(all.releases(), None);
    assert!(all.keeps(&jammy()) && !all.keeps(&Release("Ubuntu:Pro:22.04:LTS".into())));
}

#[test]
fn an_unfixed_binary_of_the_record_blocks_the_fix() {
    // The CVE record lists libcurl4 with no version: still vulnerable, whatever curl did.
    let value = cve(
        "CVE-2026-4444",
        "medium",
        &[(JAMMY, "curl", Some(CURL_NEW), &[("curl", Some(CURL_NEW)), ("libcurl4", None)])],
    );
    let index = index(&[value]);
    let before = [pkg("curl", CURL_OLD), pkg("libcurl4", CURL_OLD)];
    let after = [pkg("curl", CURL_NEW), pkg("libcurl4", CURL_NEW)];
    assert!(index.fixes(&jammy(), &before, &after).is_empty());
    // An image without libcurl4 gets the fix.
    assert_eq!(ids(&index.fixes(&jammy(), &before[..1], &after[..1])), ["CVE-2026-4444"]);
}

#[test]
fn epochs_and_tildes_decide_it() {
    let zlib = usn(
        "USN-7100-1",
        &["CVE-2026-2000"],
        &[(JAMMY, "zlib", Some("1:1.2.11.dfsg-2ubuntu9.2"), &[("zlib1g", "1:1.2.11.dfsg-2ubuntu9.2")])],
    );
    let backport = usn(
        "USN-7101-1",
        &[],
        &[(JAMMY, "curl", Some("7.81.0-1ubuntu1.16~22.04.1"), &[("curl", "7.81.0-1ubuntu1.16~22.04.1")])],
    );
    let index = index(&[zlib, backport]);
    // 1.2.13 without an epoch is below 1:1.2.11…: still unfixed.
    let (old, new_no_epoch, new) =
        (pkg("zlib1g", "1:1.2.11.dfsg-2ubuntu9.1"), pkg("zlib1g", "1.2.13"), pkg("zlib1g", "1:1.2.11.dfsg-2ubuntu9.2"));
    assert!(index.fixes(&jammy(), std::slice::from_ref(&old), &[new_no_epoch]).is_empty());
    assert_eq!(ids(&index.fixes(&jammy(), &[old], &[new])), ["USN-7100-1"]);
    // The backport's fixed version sorts below the plain one: reaching the plain one fixes it, a
    // `~22.04` before the fix's does not.
    let at = |v: &str| [pkg("curl", v)];
    assert_eq!(ids(&index.fixes(&jammy(), &at(CURL_OLD), &at(CURL_NEW))), ["USN-7101-1"]);
    assert!(index.fixes(&jammy(), &at(CURL_OLD), &at("7.81.0-1ubuntu1.16~22.04.0")).is_empty());
    assert!(index.fixes(&jammy(), &at("7.81.0-1ubuntu1.16~22.04.1"), &at(CURL_NEW)).is_empty());
}

#[test]
fn an_added_binary_is_not_below_and_a_removed_one_does_not_block() {
    let index = index(&[curl_usn()]);
    // curl is new in the image: libcurl4 moving fixes it; curl at the fixed version agrees.
    let fixes =
        index.fixes(&jammy(), &[pkg("libcurl4", CURL_OLD)], &[pkg("curl", CURL_NEW), pkg("libcurl4", CURL_NEW)]);
    assert_eq!(ids(&fixes), ["USN-7000-1"]);
    assert_eq!(fixes[0].packages.len(), 1, "only what moved: {:?}", fixes[0].packages);
    // Only an added binary at the fixed version: nothing was below before.
    assert!(index.fixes(&jammy(), &[], &[pkg("curl", CURL_NEW)]).is_empty());
    // An added binary below the fix blocks it.
    assert!(
        index
            .fixes(&jammy(), &[pkg("libcurl4", CURL_OLD)], &[pkg("curl", CURL_OLD), pkg("libcurl4", CURL_NEW)])
            .is_empty()
    );
    // curl removed by the move: libcurl4 still decides.
    let fixes =
        index.fixes(&jammy(), &[pkg("curl", CURL_OLD), pkg("libcurl4", CURL_OLD)], &[pkg("libcurl4", CURL_NEW)]);
    assert_eq!(ids(&fixes), ["USN-7000-1"]);
    // Removing every binary is not a fix: nothing was updated.
    assert!(index.fixes(&jammy(), &[pkg("curl", CURL_OLD)], &[]).is_empty());
}

#[test]
fn a_package_of_several_architectures_is_listed_once_and_judged_by_its_lowest() {
    let index = index(&[curl_usn()]);
    let i386 = |v: &str| Package { name: "libcurl4".into(), arch: Some("i386".into()), version: v.into() };
    let before = [pkg("libcurl4", CURL_OLD), i386(CURL_OLD)];
    let fixes = index.fixes(&jammy(), &before, &[pkg("libcurl4", CURL_NEW), i386(CURL_NEW)]);
    assert_eq!(
        fixes[0].packages,
        [FixedPackage { name: "libcurl4".into(), from: CURL_OLD.into(), to: CURL_NEW.into() }]
    );
    assert!(index.fixes(&jammy(), &before, &[pkg("libcurl4", CURL_NEW), i386(CURL_OLD)]).is_empty());
}

#[test]
fn fixes_sort_by_priority_then_id_and_a_usn_takes_its_cves_priority() {
    let bin = |name: &'static str| -> [(&'static str, &'static str); 1] { [(name, "2.0-1")] };
    let (a, b, c, d) = (bin("a"), bin("b"), bin("c"), bin("d"));
    let records = [
        usn("USN-2-1", &["CVE-2026-1"], &[(JAMMY, "a", Some("2.0-1"), &a)]),
        usn("USN-1-1", &["CVE-2026-9"], &[(JAMMY, "b", Some("2.0-1"), &b)]),
        usn("USN-3-1", &["CVE-2026-1", "CVE-2026-2"], &[(JAMMY, "c", Some("2.0-1"), &c)]),
        cve("CVE-2026-1", "low", &[(JAMMY, "a", Some("2.0-1"), &[("a", Some("2.0-1"))])]),
        cve("CVE-2026-2", "high", &[(JAMMY, "d", Some("2.0-1"), &[("d", Some("2.0-1"))])]),
        usn("USN-4-1", &[], &[(JAMMY, "d", Some("2.0-1"), &d)]),
    ];
    let index = index(&records);
    let before: Vec<Package> = ["a", "b", "c", "d"].iter().map(|n| pkg(n, "1.0-1")).collect();
    let after: Vec<Package> = ["a", "b", "c", "d"].iter().map(|n| pkg(n, "2.0-1")).collect();
    let fixes = index.fixes(&jammy(), &before, &after);
    let got: Vec<(&str, Option<Priority>)> = fixes.iter().map(|f| (f.id.as_str(), f.priority)).collect();
    assert_eq!(
        got,
        [
            ("CVE-2026-2", Some(Priority::High)),
            ("USN-3-1", Some(Priority::High)),
            ("CVE-2026-1", Some(Priority::Low)),
            ("USN-2-1", Some(Priority::Low)),
            ("USN-1-1", None),
            ("USN-4-1", None),
        ]
    );
}

#[test]
fn a_record_inserted_twice_is_listed_once() {
    let index = index(&[curl_usn(), curl_usn()]);
    let fixes = index.fixes(&jammy(), &[pkg("curl", CURL_OLD)], &[pkg("curl", CURL_NEW)]);
    assert_eq!(ids(&fixes), ["USN-7000-1"]);
}

#[test]
fn invalid_versions_never_prove_a_fix() {
    let index = index(&[curl_usn(), usn("USN-7200-1", &[], &[(JAMMY, "bad", Some("x:1"), &[("bad", "x:1")])])]);
    assert_eq!(index.len(), 1, "a record whose only fixed version dpkg refuses is dropped");
    assert!(index.fixes(&jammy(), &[pkg("curl", CURL_OLD)], &[pkg("curl", "")]).is_empty());
    assert!(index.fixes(&jammy(), &[pkg("curl", "")], &[pkg("curl", CURL_NEW)]).is_empty());
}

#[test]
fn a_sealed_index_answers_as_before() {
    let openssl = cve("CVE-2026-1111", "high", &[(JAMMY, "curl", Some(CURL_NEW), &[("curl", Some(CURL_NEW))])]);
    let mut index = index(&[curl_usn(), openssl]);
    let before = [pkg("curl", CURL_OLD), pkg("libcurl4", CURL_OLD)];
    let after = [pkg("curl", CURL_NEW), pkg("libcurl4", CURL_NEW)];
    let open = index.fixes(&jammy(), &before, &after);
    assert_eq!(ids(&open), ["CVE-2026-1111", "USN-7000-1"]);
    assert_eq!(open[1].priority, Some(Priority::High), "the USN takes its CVE's priority");
    index.seal();
    assert_eq!(index.fixes(&jammy(), &before, &after), open);
    assert_eq!(index.len(), 2);
}

/// `value` with its `modified` set to `at`.
fn modified(mut value: Value, at: &str) -> Value {
    value["modified"] = json!(at);
    value
}

#[test]
fn a_record_the_move_does_not_fix_lends_no_priority() {
    // A crafted critical record of curl's CVE, fixed past any version the move reaches.
    let crafted = cve("CVE-2026-1111", "critical", &[(JAMMY, "curl", Some("9.0-1"), &[("curl", Some("9.0-1"))])]);
    let index = index(&[curl_usn(), crafted]);
    let fixes = index.fixes(&jammy(), &[pkg("curl", CURL_OLD)], &[pkg("curl", CURL_NEW)]);
    assert_eq!(ids(&fixes), ["USN-7000-1"]);
    assert_eq!((fixes[0].priority, fixes[0].priority_from.len()), (None, 0), "{fixes:?}");

    // The same CVE's record fixed by the move lends its own priority, and says so.
    let real = cve("CVE-2026-1112", "medium", &[(JAMMY, "curl", Some(CURL_NEW), &[("curl", Some(CURL_NEW))])]);
    let crafted = cve("CVE-2026-1111", "critical", &[(JAMMY, "curl", Some("9.0-1"), &[("curl", Some("9.0-1"))])]);
    let index = super::tests::index(&[curl_usn(), crafted, real]);
    let fixes = index.fixes(&jammy(), &[pkg("curl", CURL_OLD)], &[pkg("curl", CURL_NEW)]);
    let got: Vec<(&str, Option<Priority>, Vec<String>)> =
        fixes.iter().map(|f| (f.id.as_str(), f.priority, f.priority_from.clone())).collect();
    assert_eq!(
        got,
        [
            ("CVE-2026-1112", Some(Priority::Medium), vec![]),
            ("USN-7000-1", Some(Priority::Medium), vec!["CVE-2026-1112".to_string()]),
        ]
    );
}

#[test]
fn of_two_records_with_one_id_the_newest_modified_is_used_and_the_other_named() {
    let stale =
        usn("USN-7000-1", &[], &[(JAMMY, "curl", Some("7.81.0-1ubuntu1.15"), &[("curl", "7.81.0-1ubuntu1.15")])]);
    let current = usn("USN-7000-1", &[], &[(JAMMY, "curl", Some(CURL_NEW), &[("curl", CURL_NEW)])]);
    let stale = record(&modified(stale, "2026-01-01T00:00:00Z"));
    let current = record(&modified(current, "2026-02-01T00:00:00Z"));
    // A move to .15 only: the stale copy (fixed at .15) would say it fixes the notice.
    let (before, after) = ([pkg("curl", "7.81.0-1ubuntu1.14")], [pkg("curl", "7.81.0-1ubuntu1.15")]);
    for order in [[&stale, &current], [&current, &stale]] {
        let mut index = Index::new(vec![jammy()]);
        let files = |r: &Record| if r == &stale { "old/USN-7000-1.json" } else { "usn/USN-7000-1.json" };
        for r in order {
            index.insert_from(r.clone(), files(r));
        }
        index.seal();
        assert!(index.fixes(&jammy(), &before, &after).is_empty(), "the stale copy is not used");
        let fixes = index.fixes(&jammy(), &before, &[pkg("curl", CURL_NEW)]);
        assert_eq!(fixes.len(), 1);
        assert_eq!(fixes[0].file.as_deref(), Some("usn/USN-7000-1.json"));
        assert_eq!(fixes[0].modified.as_deref(), Some("2026-02-01T00:00:00Z"));
        let ignored =
            [RecordCopy { file: "old/USN-7000-1.json".into(), modified: Some("2026-01-01T00:00:00Z".into()) }];
        assert_eq!(fixes[0].ignored, ignored);
    }
}

/// D6: an index keeping only the watched images' names holds only the records that name one of
/// them, and judges every move between images of those names as an index of every name does.
#[test]
fn an_index_of_some_names_holds_only_their_records_and_judges_their_moves_alike() {
    let zlib = cve("CVE-2026-2000", "low", &[(JAMMY, "zlib", Some("1.3-2"), &[("zlib1g", Some("1.3-2"))])]);
    let records: Vec<Value> = (0..1_000)
        .map(|n| {
            let (name, fixed) = (format!("bin{n}"), format!("1.0-{n}"));
            cve(&format!("CVE-2026-9{n:03}"), "high", &[(JAMMY, "src", Some(&fixed), &[(&name, Some(&fixed))])])
        })
        .chain([curl_usn(), zlib])
        .collect();
    let all = index(&records);
    let names = ["curl", "libcurl4", "zlib1g"].map(String::from);
    let mut some = Index::new(vec![jammy()]).with_names(names.clone());
    for value in &records {
        some.insert(record(value));
    }
    some.seal();
    assert_eq!((all.held(), some.held()), (1_002, 2), "only the records of the names are held");
    assert_eq!(some.len(), all.len(), "every record of the release is counted");
    assert!(some.covers(["curl", "zlib1g"].into_iter()) && !some.covers(["bin7"].into_iter()));
    let before = [pkg("curl", CURL_OLD), pkg("libcurl4", CURL_OLD), pkg("zlib1g", "1.3-1")];
    let moves = [
        [pkg("curl", CURL_NEW), pkg("libcurl4", CURL_NEW), pkg("zlib1g", "1.3-2")],
        [pkg("curl", CURL_NEW), pkg("libcurl4", CURL_OLD), pkg("zlib1g", "1.3-1")],
    ];
    for after in &moves {
        assert_eq!(some.fixes(&jammy(), &before, after), all.fixes(&jammy(), &before, after));
    }
    assert_eq!(ids(&some.fixes(&jammy(), &before, &moves[0])), ["CVE-2026-2000", "USN-7000-1"]);
    assert!(some.ids_read_again().is_empty(), "no record has a copy");
}

/// A copy of a kept record dropped for its names (it names no watched binary) is found when done
/// reading, in either order, so the mirror is read again with that id kept whole: the newer copy
/// still wins, as in an index of every name.
#[test]
fn a_kept_record_with_a_copy_dropped_for_its_names_is_read_again_whole() {
    let kept = record(&modified(
        usn("USN-7000-1", &[], &[(JAMMY, "curl", Some(CURL_NEW), &[("curl", CURL_NEW)])]),
        "2026-01-01T00:00:00Z",
    ));
    // The newer copy names another binary only: with curl's names alone it is dropped.
    let newer = record(&modified(
        usn("USN-7000-1", &[], &[(JAMMY, "curl", Some("9.0-1"), &[("curl-other", "9.0-1")])]),
        "2026-02-01T00:00:00Z",
    ));
    let (before, after) = ([pkg("curl", CURL_OLD)], [pkg("curl", CURL_NEW)]);
    let mut all = Index::new(vec![jammy()]);
    all.insert_from(kept.clone(), "a.json");
    all.insert_from(newer.clone(), "b.json");
    assert!(all.fixes(&jammy(), &before, &after).is_empty(), "the newer copy is used: no fix");
    for order in [[&kept, &newer], [&newer, &kept]] {
        let read = |index: &mut Index| {
            for r in order {
                index.insert_from(r.clone(), if r == &kept { "a.json" } else { "b.json" });
            }
            index.seal();
        };
        let mut first = Index::new(vec![jammy()]).with_names(["curl".to_string()]);
        read(&mut first);
        assert_eq!(first.ids_read_again(), ["USN-7000-1"]);
        let mut again =
            Index::new(vec![jammy()]).with_names(["curl".to_string()]).with_whole_ids(["USN-7000-1".into()]);
        read(&mut again);
        assert!(again.ids_read_again().is_empty());
        assert!(again.fixes(&jammy(), &before, &after).is_empty(), "the newer copy is used: no fix");
    }
}
