//! The pure decisions of `require_signed` and `status`'s `signed`.

use super::seen::*;

fn verified(digest: &str, verdict: &str, key_id: Option<&str>) -> SignatureInfo {
    SignatureInfo {
        verified: Some(Verification {
            digest: digest.into(),
            verdict: verdict.into(),
            key_id: key_id.map(Into::into),
            keys: vec!["kpack.pub".into(), "own key".into()],
            why: None,
        }),
        ..Default::default()
    }
}

#[test]
fn an_images_own_require_signed_overrides_the_global_one() {
    assert!(!required(false, None));
    assert!(required(true, None));
    assert!(required(false, Some(true)));
    assert!(!required(true, Some(false)));
}

/// After a crash whose tag write landed, the tag holds the new digest: the check is of the digest
/// the action started from (its open intent's), never of what it wrote.
#[test]
fn the_checked_digest_is_the_one_the_action_starts_from() {
    assert_eq!(checked_digest(None, None, Some("sha256:now")), Some("sha256:now"));
    assert_eq!(checked_digest(None, Some(Some("sha256:before")), Some("sha256:new")), Some("sha256:before"));
    assert_eq!(checked_digest(None, Some(None), Some("sha256:new")), None, "the tag held nothing before");
    assert_eq!(
        checked_digest(Some("sha256:deployed"), Some(Some("sha256:x")), Some("sha256:y")),
        Some("sha256:deployed")
    );
}

#[test]
fn a_refusal_names_its_reason_digest_and_keys() {
    let info = verified("sha256:a", UNSIGNED, None);
    let text = info.verified.as_ref().unwrap().refusal().unwrap();
    assert!(text.starts_with("unsigned: refused to act on sha256:a"), "{text}");
    assert!(text.contains("tried: kpack.pub, own key"), "{text}");
    assert_eq!(verified("sha256:a", Verification::SIGNED, Some("k1")).verified.unwrap().refusal(), None);
}

#[test]
fn signed_by_follows_the_newest_record_of_the_current_digest() {
    let ours = SignatureInfo {
        digest: Some("sha256:new".into()),
        key_id: Some("ours".into()),
        signature: Some("sha256:sig".into()),
        ..verified("sha256:old", Verification::SIGNED, Some("kpack"))
    };
    let seen = [ours.clone()];
    assert_eq!(signed_by(Some("sha256:new"), &seen), Some(Some("ours".into())), "we signed what we wrote");
    assert_eq!(signed_by(Some("sha256:old"), &seen), Some(Some("kpack".into())), "a check that passed");
    assert_eq!(signed_by(Some("sha256:other"), &seen), None, "nothing known of it");
    let refused = [verified("sha256:old", SIGNATURE_INVALID, None), ours];
    assert_eq!(signed_by(Some("sha256:old"), &refused), Some(None), "the newest record wins");
    assert_eq!(signed_by(None, &refused), Some(None), "no current digest: the newest record");
    assert_eq!(signed_by(None, &[]), None);
}

/// Events from before carry no `signature`; one that does reads back byte for byte.
#[test]
fn signature_info_round_trips_without_empty_fields() {
    let info = SignatureInfo { digest: Some("sha256:n".into()), key_id: Some("k".into()), ..Default::default() };
    let text = serde_json::to_string(&info).unwrap();
    assert_eq!(text, r#"{"digest":"sha256:n","key_id":"k"}"#);
    assert_eq!(serde_json::from_str::<SignatureInfo>(&text).unwrap(), info);
}
