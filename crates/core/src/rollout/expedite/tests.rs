use super::*;

fn fix(id: &str, priority: Option<Priority>) -> Fix {
    Fix { id: id.into(), priority, file: Some(format!("osv/{id}.json")), ..Fix::default() }
}

fn verified() -> DataSource {
    DataSource {
        url: "https://m.example/…".into(),
        etag: Some("\"v1\"".into()),
        sha256: None,
        unverified: None,
        as_of: None,
    }
}

fn ids(e: Expedite) -> Vec<String> {
    match e {
        Expedite::Yes(e) => e.ids(),
        other => panic!("not expedited: {other:?}"),
    }
}

#[test]
fn only_fixes_at_or_above_the_priority_allow_it() {
    let fixes = [
        fix("USN-1-1", Some(Priority::Critical)),
        fix("USN-2-1", Some(Priority::High)),
        fix("USN-3-1", Some(Priority::Medium)),
        fix("USN-4-1", None),
    ];
    let source = verified();
    assert_eq!(ids(expedite(Some(Priority::High), Some(&fixes), Some(&source))), ["USN-1-1", "USN-2-1"]);
    assert_eq!(ids(expedite(Some(Priority::Critical), Some(&fixes), Some(&source))), ["USN-1-1"]);
    assert_eq!(ids(expedite(Some(Priority::Negligible), Some(&fixes), Some(&source))).len(), 3, "unknown never");
    assert_eq!(expedite(Some(Priority::Critical), Some(&fixes[1..]), Some(&source)), Expedite::No);
}

#[test]
fn the_record_names_each_record_its_priority_file_and_the_source() {
    let fixes = [fix("CVE-2026-1", Some(Priority::High))];
    let Expedite::Yes(e) = expedite(Some(Priority::High), Some(&fixes), Some(&verified())) else { panic!() };
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "records": [{"id": "CVE-2026-1", "priority": "high", "file": "osv/CVE-2026-1.json"}],
            "source": {"url": "https://m.example/…", "etag": "\"v1\""}
        })
    );
    let back: Expedited = serde_json::from_value(json).unwrap();
    assert_eq!(back, e);
    // As actions recorded it before: a list of ids.
    let old: Expedited = serde_json::from_str(r#"["USN-7000-1"]"#).unwrap();
    assert_eq!((old.ids(), old.source), (vec!["USN-7000-1".to_string()], None));
}

#[test]
fn unverified_or_unrecorded_data_never_expedites() {
    let fixes = [fix("USN-1-1", Some(Priority::Critical))];
    let mut source = verified();
    source.unverified = Some("the kept download is not from the configured URL".into());
    let refused = expedite(Some(Priority::High), Some(&fixes), Some(&source));
    assert_eq!(
        refused,
        Expedite::Refused {
            ids: vec!["USN-1-1".into()],
            why: "the kept download is not from the configured URL".into()
        }
    );
    assert!(matches!(expedite(Some(Priority::High), Some(&fixes), None), Expedite::Refused { .. }));
}

#[test]
fn off_or_without_fixes_nothing_is_expedited() {
    let fixes = [fix("USN-1-1", Some(Priority::Critical))];
    let source = verified();
    assert_eq!(expedite(None, Some(&fixes), Some(&source)), Expedite::No);
    assert_eq!(expedite(Some(Priority::Low), None, Some(&source)), Expedite::No);
    assert_eq!(expedite(Some(Priority::Low), Some(&[]), Some(&source)), Expedite::No);
}
