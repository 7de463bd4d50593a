//! The Kubernetes ledger's own tests: the stored entry, as text.

use super::*;
use crate::ledger::{ActionState, DeliveryState};
use builder_monitor_core::cnb::Change;

/// An entry as the ledger has always written it: typed fields read it and write it back
/// byte for byte (times to the second or to the millisecond as stored, states as names).
#[test]
fn a_stored_entry_is_written_back_unchanged() {
    let change = serde_json::to_string(&Change::unknown("test")).unwrap();
    let text = format!(
        concat!(
            r#"{{"watch":{{"name":"b","kind":"builder","image":"r/b:latest","pin":{{"digest":"sha256:d","#,
            r#""reference":"r/b@sha256:d","media_type":"m","platforms":{{"linux/amd64":"sha256:p"}},"#,
            r#""since":"2026-11-30T12:10:00Z"}},"metadata":null,"first_seen":"2026-11-30T12:00:00Z","#,
            r#""last_check":"2026-11-30T12:20:00Z","last_ok":false,"last_error_reason":"tag_missing","#,
            r#""last_error":"gone","last_change":"2026-11-30T12:10:00Z","consecutive_failures":1,"#,
            r#""failing_since":"2026-11-30T12:20:00Z","pending":["sha256:e","2026-11-30T12:15:00Z"],"moves":1}},"#,
            r#""digests":[{{"digest":"sha256:d","first_seen":"2026-11-30T12:10:00Z","last_pinned":"2026-11-30T12:10:00Z"}}],"#,
            r#""changes":[{{"id":"c1","watch":"b","seq":1,"previous":"sha256:c","current":"sha256:d","#,
            r#""previous_reference":"r/b@sha256:c","current_reference":"r/b@sha256:d","change":{change},"#,
            r#""rollback":false,"detected":"2026-11-30T12:10:00Z"}}],"events":[],"#,
            r#""deliveries":[{{"event":"e1","alert":"hook","state":"dead","attempts":2,"#,
            r#""next_attempt":"2026-11-30T12:10:00.000Z","last_status":"HTTP 400","#,
            r#""created":"2026-11-30T12:10:00.000Z","updated":"2026-11-30T12:11:02.345Z"}}],"#,
            r#""actions":[{{"key":"k1","change_id":"c1","image":"app","kind":"rebuild","state":"running","#,
            r#""attempts":1,"next_attempt":"2026-11-30T12:10:00.000Z","target":{{"image":"r/app"}},"#,
            r#""detail":null,"output_tail":null,"process":{{"id":42,"started":7}},"#,
            r#""created":"2026-11-30T12:10:00.000Z","updated":"2026-11-30T12:10:01.500Z"}},"#,
            r#"{{"key":"k0","change_id":"c0","image":"app","kind":"rebase","state":"superseded","#,
            r#""attempts":0,"next_attempt":"2026-11-30T12:00:00.000Z","target":{{}},"#,
            r#""detail":"superseded by change c1","output_tail":null,"#,
            r#""created":"2026-11-30T12:00:00.000Z","updated":"2026-11-30T12:10:00.000Z"}}]}}"#
        ),
        change = change
    );
    let doc: WatchDoc = serde_json::from_str(&text).unwrap();
    let watch = doc.watch.as_ref().unwrap();
    assert_eq!(watch.pending.as_ref().unwrap().since.timestamp() % 3600, 15 * 60);
    assert_eq!(doc.actions[0].state, ActionState::Running);
    assert_eq!(doc.deliveries[0].state, DeliveryState::Dead);
    assert_eq!(serde_json::to_string(&doc).unwrap(), text);
}

#[test]
fn an_unreadable_time_is_refused_not_guessed() {
    let text = r#"{"watch":null,"digests":[{"digest":"sha256:d","first_seen":"yesterday","last_pinned":"2026-11-30T12:10:00Z"}]}"#;
    let err = serde_json::from_str::<WatchDoc>(text).unwrap_err();
    assert!(err.to_string().contains("not an RFC 3339 time: \"yesterday\""), "{err}");
}

/// A watch's metadata is kept in its entry as the text it was written as, not decoded on read;
/// new metadata is written with its keys sorted, as it always was.
#[test]
fn pin_metadata_is_kept_in_the_entry_as_written() {
    let text = concat!(
        r#"{"watch":{"name":"b","kind":"builder","image":"r/b:latest","pin":null,"#,
        r#""metadata":{"notes":["cut"],"platforms":{"linux/amd64":{"status":"not_builder"}},"zz":[1,2]},"#,
        r#""first_seen":"2026-11-30T12:00:00Z","last_check":null,"last_ok":null,"last_error_reason":null,"#,
        r#""last_error":null,"last_change":null,"consecutive_failures":0,"failing_since":null,"pending":null,"#,
        r#""moves":0},"digests":[],"changes":[],"events":[],"deliveries":[],"actions":[]}"#
    );
    let mut doc: WatchDoc = serde_json::from_str(text).unwrap();
    assert_eq!(serde_json::to_string(&doc).unwrap(), text, "an unknown field is kept too");
    let watch = doc.watch.as_mut().unwrap();
    let metadata = watch.pinned_metadata().unwrap();
    assert_eq!(metadata.notes, ["cut"]);
    watch.metadata = Some(metadata.into());
    assert_eq!(serde_json::to_string(&doc).unwrap(), text.replace(r#","zz":[1,2]"#, ""));
}
