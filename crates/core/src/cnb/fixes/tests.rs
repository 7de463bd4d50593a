use std::collections::BTreeMap;

use super::*;
use crate::cnb::{fix_line, fixes_brief};
use crate::packages::Source;
use crate::vulns::openvex::{self, VexFacts};
use crate::vulns::{Affected, Record, UnknownFix};

const JAMMY: &str = "Ubuntu:22.04:LTS";

fn list(entries: &[(&str, &str)]) -> Packages {
    let packages = entries.iter().map(|(n, v)| Package { name: n.to_string(), arch: None, version: v.to_string() });
    Packages::Listed { source: Source::PaketoLabel, packages: packages.collect(), cut_at: None }
}

fn one(platform: &str, p: Packages) -> BTreeMap<String, Packages> {
    BTreeMap::from([(platform.to_string(), p)])
}

fn jammy(platform: &str) -> BTreeMap<String, Release> {
    BTreeMap::from([(platform.to_string(), Release(JAMMY.into()))])
}

fn index() -> Index {
    let mut index = Index::new(vec![Release(JAMMY.into())]);
    index.insert(Record {
        id: "USN-7000-1".into(),
        cves: vec!["CVE-2026-1111".into()],
        priority: Some(Priority::High),
        affected: vec![Affected {
            ecosystem: JAMMY.into(),
            source: "openssl".into(),
            fixed: Some("3.0.2-0ubuntu1.19".into()),
            binaries: vec![("libssl3".into(), "3.0.2-0ubuntu1.19".into())],
        }],
        modified: None,
    });
    index
}

fn change() -> Change {
    Change::run_image_moved("run@sha256:a".into(), "run@sha256:b".into())
}

#[test]
fn without_vulnerability_data_there_is_no_fixes_field() {
    let before = one("linux/amd64", list(&[("libssl3", "3.0.2-0ubuntu1.18")]));
    let after = one("linux/amd64", list(&[("libssl3", "3.0.2-0ubuntu1.19")]));
    let c = change().with_fixes(None, &before, &after, &jammy("linux/amd64"));
    assert!(c.fixes.is_none() && c.fixes_note.is_none());
    let json = serde_json::to_string(&c).unwrap();
    assert!(!json.contains("fixes"), "{json}");
}

#[test]
fn names_only_lists_and_missing_sides_say_why() {
    let idx = Index::new(vec![Release(JAMMY.into())]);
    let names = one("linux/amd64", list(&[("libssl3", ""), ("bash", "")]));
    let c = change().with_fixes(Some(&idx), &names, &names, &jammy("linux/amd64"));
    assert_eq!(c.fixes, None);
    assert_eq!(c.fixes_note.as_deref(), Some("the previous image's package list has names only, no versions"));

    let c = change().with_fixes(Some(&idx), &BTreeMap::new(), &names, &jammy("linux/amd64"));
    assert_eq!(c.fixes_note.as_deref(), Some("the previous image has no package list"));

    let c = change().with_fixes(Some(&idx), &BTreeMap::new(), &BTreeMap::new(), &jammy("linux/amd64"));
    assert_eq!(c.fixes_note.as_deref(), Some("neither image has a package list"));

    let versioned = one("linux/amd64", list(&[("libssl3", "1")]));
    let c = change().with_fixes(Some(&idx), &versioned, &versioned, &BTreeMap::new());
    assert_eq!(c.fixes_note.as_deref(), Some("the image names no Ubuntu release (distro labels or stack id)"));
}

#[test]
fn a_move_that_fixes_a_notice_lists_it_and_one_that_fixes_none_says_empty() {
    let before = one("linux/amd64", list(&[("libssl3", "3.0.2-0ubuntu1.18")]));
    let after = one("linux/amd64", list(&[("libssl3", "3.0.2-0ubuntu1.19")]));
    let c = change().with_fixes(Some(&index()), &before, &after, &jammy("linux/amd64"));
    let fixes = c.fixes.clone().unwrap();
    assert_eq!(fixes.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(), ["USN-7000-1"]);
    assert_eq!(c.fixes_at_least(Priority::High), ["USN-7000-1"]);
    assert!(c.fixes_at_least(Priority::Critical).is_empty());
    assert!(c.summary().ends_with("; fixes USN-7000-1 (high)"), "{}", c.summary());
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["fixes"][0]["id"], "USN-7000-1");
    assert_eq!(json["fixes"][0]["cves"][0], "CVE-2026-1111");

    let c = change().with_fixes(Some(&index()), &before, &before, &jammy("linux/amd64"));
    assert_eq!(c.fixes, Some(vec![]));
    assert_eq!(serde_json::to_value(&c).unwrap()["fixes"], serde_json::json!([]));
}

#[test]
fn a_fix_is_claimed_only_when_every_platform_shows_it() {
    let platforms = |amd64: &str, arm64: &str| {
        BTreeMap::from([
            ("linux/amd64".to_string(), list(&[("libssl3", amd64)])),
            ("linux/arm64".to_string(), list(&[("libssl3", arm64)])),
        ])
    };
    let releases = BTreeMap::from([("linux/arm64".to_string(), Release(JAMMY.into()))]);
    let (old, new) = ("3.0.2-0ubuntu1.18", "3.0.2-0ubuntu1.19");
    // One release for the image stands for every platform; both moved: claimed.
    let c = change().with_fixes(Some(&index()), &platforms(old, old), &platforms(new, new), &releases);
    assert_eq!(c.fixes.unwrap().len(), 1);
    assert!(c.fixes_unknown.is_empty());

    // arm64 left vulnerable: not claimed, unknown with why.
    let c = change().with_fixes(Some(&index()), &platforms(old, old), &platforms(new, old), &releases);
    assert_eq!(c.fixes, Some(vec![]));
    let unknown = [UnknownFix {
        id: "USN-7000-1".into(),
        priority: Some(Priority::High),
        reason: "linux/arm64 is not shown fixed by the move".into(),
    }];
    assert_eq!(c.fixes_unknown, unknown);
    assert!(c.summary().ends_with("fixes no known notice; 1 fix unknown"), "{}", c.summary());
    assert_eq!(serde_json::to_value(&c).unwrap()["fixes_unknown"][0]["reason"], unknown[0].reason);

    // A platform that cannot be matched (no list) leaves the others' fixes unknown too.
    let mut after = platforms(new, new);
    after.insert("linux/s390x".into(), Packages::Unreadable { note: "bad".into() });
    let c = change().with_fixes(Some(&index()), &platforms(old, old), &after, &releases);
    assert_eq!(c.fixes, Some(vec![]));
    assert_eq!(c.fixes_unknown[0].reason, "linux/s390x could not be matched: the previous image has no package list");
}

#[test]
fn a_new_list_cut_at_its_cap_claims_nothing() {
    let before = one("linux/amd64", list(&[("libssl3", "3.0.2-0ubuntu1.18")]));
    // The vulnerable binary's entry may be past the cut: the visible part proves nothing.
    let Packages::Listed { source, packages, .. } = list(&[("libssl3", "3.0.2-0ubuntu1.19")]) else { unreachable!() };
    let after = one("linux/amd64", Packages::Listed { source, packages, cut_at: Some(5000) });
    let c = change().with_fixes(Some(&index()), &before, &after, &jammy("linux/amd64"));
    assert_eq!(c.fixes, Some(vec![]));
    assert_eq!(c.fixes_unknown.len(), 1);
    assert_eq!(
        c.fixes_unknown[0].reason,
        "the new image's package list was cut at 5000 entries: a binary past the cut may still be vulnerable"
    );
}

#[test]
fn the_brief_names_the_first_fix_and_counts_the_rest() {
    let fix = |id: &str, p| Fix {
        id: id.into(),
        cves: vec!["CVE-1".into()],
        priority: p,
        packages: vec![],
        ..Fix::default()
    };
    let fixes = [fix("USN-7000-1", Some(Priority::High)), fix("USN-7001-1", None), fix("USN-7002-1", None)];
    assert_eq!(fixes_brief(Some(&fixes)).unwrap(), "fixes USN-7000-1 (high), 2 more");
    assert_eq!(fixes_brief(Some(&fixes[1..2])).unwrap(), "fixes USN-7001-1");
    assert_eq!(fixes_brief(Some(&[])).unwrap(), "fixes no known notice");
    assert_eq!(fixes_brief(None), None);
    assert_eq!(fix_line(&fixes[0]), "USN-7000-1 (high): CVE-1");
}

#[test]
fn a_release_whose_data_is_not_loaded_says_so_rather_than_fixes_none() {
    let before = one("linux/amd64", list(&[("libssl3", "3.0.2-0ubuntu1.18")]));
    let after = one("linux/amd64", list(&[("libssl3", "3.0.2-0ubuntu1.19")]));
    let noble = BTreeMap::from([("linux/amd64".to_string(), Release("Ubuntu:24.04:LTS".into()))]);
    let c = change().with_fixes(Some(&index()), &before, &after, &noble);
    assert_eq!(c.fixes, None);
    assert_eq!(c.fixes_note.as_deref(), Some("no vulnerability data of Ubuntu:24.04:LTS is loaded"));
}

#[test]
fn the_origin_line_names_the_file_used_and_the_copies_not_used() {
    use crate::cnb::{fix_origin_line, unknown_fix_line};
    use crate::vulns::RecordCopy;
    let fix = Fix {
        id: "USN-7000-1".into(),
        file: Some("usn/USN-7000-1.json".into()),
        modified: Some("2026-02-01T00:00:00Z".into()),
        priority_from: vec!["CVE-2026-1111".into()],
        ignored: vec![RecordCopy { file: "old/USN-7000-1.json".into(), modified: Some("2026-01-01T00:00:00Z".into()) }],
        ..Fix::default()
    };
    assert_eq!(
        fix_origin_line(&fix),
        "USN-7000-1 from usn/USN-7000-1.json (modified 2026-02-01T00:00:00Z), priority from CVE-2026-1111; \
         not used: old/USN-7000-1.json (modified 2026-01-01T00:00:00Z)"
    );
    let unknown = UnknownFix {
        id: "USN-1-1".into(),
        priority: None,
        reason: "linux/arm64 is not shown fixed by the move".into(),
    };
    assert_eq!(unknown_fix_line(&unknown), "USN-1-1 unknown: linux/arm64 is not shown fixed by the move");
}

/// The OpenVEX facts a change carries to the signing of what its actions write.
fn vex_of(c: &Change) -> Option<VexFacts> {
    let fixes = c.fixes.as_deref().unwrap_or_default();
    VexFacts::of("c1", fixes, &c.fixes_unknown, c.fixes_source.as_ref(), c.fixes_release.as_deref())
}

/// The statuses of the OpenVEX document of `c` about one digest.
fn vex_statuses(c: &Change) -> Option<Vec<(String, String)>> {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let product = openvex::Product { repository: "registry.example/apps/web", digest: &digest };
    let authored = openvex::Authored { timestamp: chrono::DateTime::from_timestamp(0, 0).unwrap(), version: "0" };
    let doc = openvex::document(&vex_of(c)?, product, authored)?;
    let statements = doc["statements"].as_array().cloned().unwrap_or_default();
    let status = |s: &serde_json::Value| {
        (
            s["vulnerability"]["name"].as_str().unwrap_or_default().to_string(),
            s["status"].as_str().unwrap_or_default().to_string(),
        )
    };
    Some(statements.iter().map(status).collect())
}

#[test]
fn openvex_claims_a_fix_only_where_the_decision_does() {
    let idx = index();
    let (fixed, old) = ("3.0.2-0ubuntu1.19", "3.0.2-0ubuntu1.18");
    let before = one("linux/amd64", list(&[("libssl3", old)]));
    let whole = change().with_fixes(
        Some(&idx),
        &before,
        &one("linux/amd64", list(&[("libssl3", fixed)])),
        &jammy("linux/amd64"),
    );
    assert_eq!(whole.fixes_release.as_deref(), Some(JAMMY));
    assert_eq!(vex_statuses(&whole), Some(vec![("CVE-2026-1111".into(), "fixed".into())]));

    // The new list cut at its cap: a binary past the cut may still be vulnerable.
    let package = Package { name: "libssl3".into(), arch: None, version: fixed.into() };
    let cut = Packages::Listed { source: Source::PaketoLabel, packages: vec![package], cut_at: Some(5000) };
    let c = change().with_fixes(Some(&idx), &before, &one("linux/amd64", cut), &jammy("linux/amd64"));
    assert!(c.fixes.as_deref().is_some_and(<[_]>::is_empty) && !c.fixes_unknown.is_empty(), "{c:?}");
    assert_eq!((vex_of(&c), c.fixes_release), (None, None), "nothing claimed: no document");

    // An index fixed on amd64 only.
    let platforms = ["linux/amd64", "linux/arm64"];
    let before: BTreeMap<String, Packages> =
        platforms.iter().map(|p| (p.to_string(), list(&[("libssl3", old)]))).collect();
    let mut after = before.clone();
    after.insert("linux/amd64".into(), list(&[("libssl3", fixed)]));
    let releases: BTreeMap<String, Release> =
        platforms.iter().map(|p| (p.to_string(), Release(JAMMY.into()))).collect();
    let c = change().with_fixes(Some(&idx), &before, &after, &releases);
    assert!(c.fixes.as_deref().is_some_and(<[_]>::is_empty) && !c.fixes_unknown.is_empty(), "{c:?}");
    assert_eq!(vex_of(&c), None, "nothing claimed: no document");
}
