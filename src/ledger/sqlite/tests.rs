//! The SQLite ledger's own tests: what it stores, as text, and its schema versions.

use rusqlite::Connection;

use super::*;
use crate::ledger::{
    ActionEnd, ActionOutcome, ChangeRecord, CheckFailure, CheckRecord, Checks, DeliveryKey, DeliveryUpdate, HeldDigest,
    LedgerError, NewAction, Outbox, PinUpdate, WatchKind,
};
use crate::ledger::{Actions, Kinds};
use builder_monitor_core::cnb::Change;
use builder_monitor_core::event::{Event, EventType, Subject};
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::schedule::timestamp;

fn temp_ledger() -> (SqliteLedger, PathBuf) {
    let dir = std::env::temp_dir().join(format!("bm-ledger-{}-{}", std::process::id(), rand::random::<u64>()));
    let path = dir.join("state").join("ledger.db");
    (SqliteLedger::open(&path).unwrap(), dir)
}

fn record(time: &str) -> CheckRecord {
    CheckRecord {
        watch: "b".into(),
        kind: WatchKind::Builder,
        image: "docker.io/x/y:latest".into(),
        time: parse_timestamp(time).unwrap(),
        outcome: Ok(()),
        pin: None,
        pending: None,
        change: None,
        events: vec![],
        deliveries: vec![],
        actions: vec![],
        history: 2,
    }
}

fn pin(d: &str) -> PinUpdate {
    PinUpdate {
        digest: d.into(),
        reference: format!("docker.io/x/y@{d}"),
        media_type: "m".into(),
        platforms: [("linux/amd64".to_string(), format!("{d}-amd64"))].into(),
        metadata: None,
    }
}

fn change(seq: u64, prev: &str, cur: &str) -> ChangeRecord {
    ChangeRecord {
        id: builder_monitor_core::event::change_id("b", seq, prev, cur),
        watch: "b".into(),
        seq,
        previous: prev.into(),
        current: cur.into(),
        previous_reference: format!("docker.io/x/y@{prev}"),
        current_reference: format!("docker.io/x/y@{cur}"),
        change: Change::unknown("test"),
        rollback: false,
        detected: parse_timestamp(&format!("2026-11-30T12:0{seq}:00Z")).unwrap(),
    }
}

#[tokio::test]
async fn pins_moves_failures_and_history() {
    let (ledger, dir) = temp_ledger();
    assert!(ledger.watch("b").await.unwrap().is_none());

    let mut r = record("2026-11-30T12:00:00Z");
    r.pin = Some(pin("sha256:a"));
    r.events.push(Event::new(
        "e1".into(),
        EventType::BuilderPinned,
        builder_monitor_core::schedule::timestamp(r.time),
        Subject { name: "b".into(), image: r.image.clone() },
    ));
    ledger.commit(r, &[]).await.unwrap();
    let w = ledger.watch("b").await.unwrap().unwrap();
    assert_eq!(w.pin.as_ref().unwrap().digest, "sha256:a");
    assert_eq!(w.pin.as_ref().unwrap().platforms["linux/amd64"], "sha256:a-amd64");
    assert_eq!(w.moves, 0);
    assert!(ledger.has_pinned("b", "sha256:a").await.unwrap());

    // Two failures count up and keep the pin; the first failure's time is kept.
    for t in ["2026-11-30T12:01:00Z", "2026-11-30T12:02:00Z"] {
        let mut r = record(t);
        r.outcome = Err(CheckFailure { reason: "tag_missing".into(), message: "gone".into() });
        ledger.commit(r, &[]).await.unwrap();
    }
    let w = ledger.watch("b").await.unwrap().unwrap();
    assert_eq!(w.consecutive_failures, 2);
    assert_eq!(w.failing_since.map(timestamp).as_deref(), Some("2026-11-30T12:01:00Z"));
    assert_eq!(w.last_ok, Some(false));
    assert_eq!(w.pin.as_ref().unwrap().digest, "sha256:a");

    // Three moves with history = 2: the oldest change is pruned, ids are kept.
    let moves = [("sha256:a", "sha256:b"), ("sha256:b", "sha256:c"), ("sha256:c", "sha256:d")];
    for (i, (prev, cur)) in moves.iter().enumerate() {
        let mut r = record(&format!("2026-11-30T12:1{i}:00Z"));
        r.pin = Some(pin(cur));
        r.change = Some(change(i as u64 + 1, prev, cur));
        ledger.commit(r, &[]).await.unwrap();
    }
    let w = ledger.watch("b").await.unwrap().unwrap();
    assert_eq!((w.moves, w.consecutive_failures, w.failing_since), (3, 0, None));
    let changes = ledger.changes(Some("b"), 10).await.unwrap();
    assert_eq!(changes.iter().map(|c| c.seq).collect::<Vec<_>>(), [3, 2]);
    assert_eq!(changes[0], change(3, "sha256:c", "sha256:d"));
    // Digest history keeps history + 1 pins.
    assert!(!ledger.has_pinned("b", "sha256:a").await.unwrap());
    assert!(ledger.has_pinned("b", "sha256:b").await.unwrap());

    // Recording the same change again changes nothing.
    let mut r = record("2026-11-30T12:20:00Z");
    r.change = Some(change(3, "sha256:c", "sha256:d"));
    ledger.commit(r, &[]).await.unwrap();
    assert_eq!(ledger.changes(None, 10).await.unwrap().len(), 2);

    let events = ledger.events_after(0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event.id, "e1");
    drop(ledger);
    std::fs::remove_dir_all(dir).unwrap();
}

/// The text each time column holds is the text the ledger has always stored: whole seconds for
/// what people read, milliseconds for what orders work.
#[tokio::test]
async fn times_are_stored_as_they_always_were() {
    let (ledger, dir) = temp_ledger();
    let mut r = record("2026-11-30T12:00:00Z");
    r.pin = Some(pin("sha256:a"));
    ledger.commit(r, &[]).await.unwrap();
    let mut r = record("2026-11-30T12:10:00Z");
    r.pin = Some(pin("sha256:b"));
    r.change = Some(change(1, "sha256:a", "sha256:b"));
    r.outcome = Err(CheckFailure { reason: "tag_missing".into(), message: "gone".into() });
    r.pending = Some(HeldDigest { digest: "sha256:c".into(), since: parse_timestamp("2026-11-30T12:05:00Z").unwrap() });
    r.events.push(Event::new(
        "e1".into(),
        builder_monitor_core::event::EventType::BuilderChanged,
        "2026-11-30T12:10:00Z".into(),
        builder_monitor_core::event::Subject { name: "b".into(), image: r.image.clone() },
    ));
    r.deliveries.push(DeliveryKey::new("e1", "hook"));
    r.actions.push(NewAction {
        key: "k1".into(),
        change_id: "c1".into(),
        image: "app".into(),
        kind: ActionKind::Rebuild,
        target: serde_json::from_value(serde_json::json!({
            "image": "r/app", "builder_name": "b", "builder": "r/b@sha256:x", "why": "test"
        }))
        .unwrap(),
        wave: 1,
        needs_approval: false,
        expedited: Default::default(),
        batch: None,
    });
    ledger.commit(r, &[]).await.unwrap();
    let at = |t: &str| parse_timestamp(t).unwrap();
    ledger.claim_actions(at("2026-11-30T12:10:01.5009Z"), 1, Kinds::ALL, &Default::default()).await.unwrap();
    ledger
        .finish_action(ActionEnd {
            key: "k1",
            outcome: ActionOutcome::Retry { next_attempt: at("2026-11-30T12:15:00.1239Z") },
            detail: "exit status 1".into(),
            output_tail: String::new(),
            watch: "b",
            events: vec![],
            deliveries: vec![],
            history: 2,
            now: at("2026-11-30T12:10:02Z"),
            tag_move: None,
            hold: None,
            keep_intent: false,
            follow: vec![],
            hold_image: false,
        })
        .await
        .unwrap();
    let retry = DeliveryUpdate::Retry { next_attempt: at("2026-11-30T12:20:00Z"), status: "HTTP 503".into() };
    ledger.update_delivery("e1", "hook", retry, at("2026-11-30T12:11:00.25Z")).await.unwrap();
    let path = ledger.path().to_path_buf();
    drop(ledger);

    let conn = Connection::open(&path).unwrap();
    let text = |sql: &str| -> Vec<Option<String>> {
        conn.query_row(sql, [], |r| (0..r.as_ref().column_count()).map(|i| r.get(i)).collect()).unwrap()
    };
    let some = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    assert_eq!(
        text(
            "SELECT pinned_since, first_seen, last_check, last_change, failing_since, pending_digest, pending_since FROM watches"
        ),
        some(&[
            "2026-11-30T12:10:00Z",
            "2026-11-30T12:00:00Z",
            "2026-11-30T12:10:00Z",
            "2026-11-30T12:01:00Z",
            "2026-11-30T12:10:00Z",
            "sha256:c",
            "2026-11-30T12:05:00Z"
        ])
    );
    assert_eq!(
        text("SELECT first_seen, last_pinned FROM digests WHERE digest = 'sha256:b'"),
        some(&["2026-11-30T12:10:00Z", "2026-11-30T12:10:00Z"])
    );
    assert_eq!(text("SELECT detected FROM changes"), some(&["2026-11-30T12:01:00Z"]));
    assert_eq!(
        text("SELECT state, next_attempt, created, updated FROM actions"),
        some(&["pending", "2026-11-30T12:15:00.123Z", "2026-11-30T12:10:00.000Z", "2026-11-30T12:10:02.000Z"])
    );
    assert_eq!(
        text("SELECT state, next_attempt, created, updated FROM deliveries"),
        some(&["pending", "2026-11-30T12:20:00.000Z", "2026-11-30T12:10:00.000Z", "2026-11-30T12:11:00.250Z"])
    );
    drop(conn);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn reopening_keeps_state_and_refuses_newer_schemas() {
    let (ledger, dir) = temp_ledger();
    let path = ledger.path().to_path_buf();
    let mut r = record("2026-11-30T12:00:00Z");
    r.pin = Some(pin("sha256:a"));
    ledger.commit(r, &[]).await.unwrap();
    drop(ledger);
    let again = SqliteLedger::open(&path).unwrap();
    assert_eq!(again.watch("b").await.unwrap().unwrap().pin.unwrap().digest, "sha256:a");
    drop(again);
    let conn = Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let err = SqliteLedger::open(&path).err().unwrap();
    assert!(err.to_string().contains("schema version 99"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

fn new_action(key: &str, change: &str) -> NewAction {
    let target = serde_json::json!({"image": "r/app", "builder_name": "b", "builder": "r/b@sha256:x", "why": "test"});
    NewAction::new(
        key.into(),
        change.into(),
        "app".into(),
        ActionKind::Rebuild,
        serde_json::from_value(target).unwrap(),
    )
}

/// A stored target that is JSON but no target is taken on with its error as its target (the
/// runner fails it, as it always has); one that is not JSON is corrupt, and so is the last
/// succeeded target when it does not read.
#[tokio::test]
async fn an_unreadable_target_is_claimed_with_its_error() {
    let (ledger, dir) = temp_ledger();
    let mut r = record("2026-11-30T12:00:00Z");
    r.actions.push(new_action("k1", "c1"));
    ledger.commit(r, &[]).await.unwrap();
    let conn = Connection::open(ledger.path()).unwrap();
    conn.execute("UPDATE actions SET target = '{\"image\": 1}' WHERE key = 'k1'", []).unwrap();
    let far = parse_timestamp("2099-01-01T00:00:00Z").unwrap();
    let claimed = ledger.claim_actions(far, 1, Kinds::ALL, &Default::default()).await.unwrap();
    let err = claimed[0].target.clone().unwrap_err();
    assert!(err.to_string().starts_with("invalid type: integer `1`, expected a string"), "{err}");
    assert_eq!(ledger.running_actions().await.unwrap()[0].target, Err(err));

    conn.execute("UPDATE actions SET state = 'succeeded' WHERE key = 'k1'", []).unwrap();
    let err = ledger.last_succeeded_target("app", ActionKind::Rebuild).await.unwrap_err();
    assert!(matches!(err, LedgerError::Corrupt { what: "action target", .. }), "{err}");
    conn.execute("UPDATE actions SET target = 'not json', state = 'pending' WHERE key = 'k1'", []).unwrap();
    let err = ledger.claim_actions(far, 1, Kinds::ALL, &Default::default()).await.unwrap_err();
    assert!(matches!(err, LedgerError::Corrupt { what: "action target", .. }), "{err}");
    drop((conn, ledger));
    std::fs::remove_dir_all(dir).unwrap();
}

/// Pin metadata is stored as the ledger has always written it (a JSON object, keys sorted), read
/// back without being decoded, and written back unchanged when a pin keeps it.
#[tokio::test]
async fn pin_metadata_is_stored_as_always_and_kept_as_stored() {
    let (ledger, dir) = temp_ledger();
    let metadata = builder_monitor_core::cnb::PinnedMetadata {
        notes: vec!["cut".into()],
        ..serde_json::from_value(serde_json::json!({"platforms": {"linux/amd64": {"status": "not_builder"}}})).unwrap()
    };
    let mut r = record("2026-11-30T12:00:00Z");
    r.pin = Some(PinUpdate { metadata: Some(metadata.clone().into()), ..pin("sha256:a") });
    ledger.commit(r, &[]).await.unwrap();
    let conn = Connection::open(ledger.path()).unwrap();
    let stored = || -> String { conn.query_row("SELECT metadata FROM watches", [], |r| r.get(0)).unwrap() };
    let text = stored();
    assert_eq!(text, serde_json::to_value(&metadata).unwrap().to_string());
    assert_eq!(text, r#"{"notes":["cut"],"platforms":{"linux/amd64":{"status":"not_builder"}}}"#);

    let w = ledger.watch("b").await.unwrap().unwrap();
    assert_eq!(w.pinned_metadata(), Some(metadata));
    assert_eq!(w.metadata.as_ref().unwrap().notes(), ["cut"]);
    // Re-pinned with the metadata it holds (a move whose platforms are unchanged): the same text.
    let mut r = record("2026-11-30T12:01:00Z");
    r.pin = Some(PinUpdate { metadata: w.metadata.clone(), ..pin("sha256:b") });
    ledger.commit(r, &[]).await.unwrap();
    assert_eq!(stored(), text);

    // Text that is not JSON is corrupt; JSON of another shape reads as no metadata.
    conn.execute("UPDATE watches SET metadata = '{\"platforms\": 1, \"notes\": [\"kept\", 2]}'", []).unwrap();
    let w = ledger.watch("b").await.unwrap().unwrap();
    assert_eq!(w.pinned_metadata(), None);
    assert_eq!(w.metadata.as_ref().unwrap().notes(), ["kept"]);
    conn.execute("UPDATE watches SET metadata = '{'", []).unwrap();
    let err = ledger.watch("b").await.unwrap_err();
    assert!(matches!(err, LedgerError::Corrupt { what: "metadata", .. }), "{err}");
    drop((conn, ledger));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn columns_are_found_by_name_in_a_select_list() {
    let list = "key, change_id,
         image";
    assert_eq!([column(list, "key"), column(list, "change_id"), column(list, "image")], [0, 1, 2]);
}

/// Start-up's one query reads an index alone, never a row, and its read of the failing watches
/// reads their rows only: each row's columns after its metadata sit behind its overflow pages.
#[test]
fn pins_are_read_from_an_index_alone() {
    let (_ledger, dir) = temp_ledger();
    let conn = Connection::open(dir.join("state").join("ledger.db")).unwrap();
    let plan: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", checks::PINS_SQL))
        .unwrap()
        .query_map([], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(plan, ["SCAN watches USING COVERING INDEX watches_pins"]);
    let plan: String =
        conn.query_row(&format!("EXPLAIN QUERY PLAN SELECT * {}", checks::FAILING), [], |r| r.get(3)).unwrap();
    assert_eq!(plan, "SCAN watches USING INDEX watches_failing", "the failing watches' rows only");
    let _ = std::fs::remove_dir_all(dir);
}

/// A ledger from before the run image column: opening it fills the column in from each entry's
/// metadata, so the first start-up after the upgrade already reads no metadata.
#[tokio::test]
async fn a_ledger_from_before_the_run_image_column_gets_it_filled_in() {
    use builder_monitor_core::cnb::{BuilderMetadata, PinnedMetadata, PlatformMetadata, RunImage};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let builder = BuilderMetadata {
        run_images: vec![RunImage { image: "reg.test/run:1".into(), mirrors: vec![] }],
        ..Default::default()
    };
    let metadata = PinnedMetadata {
        platforms: [("linux/amd64".to_string(), PlatformMetadata::Builder(Box::new(builder)))].into(),
        ..Default::default()
    };
    {
        let conn = Connection::open(&path).unwrap();
        for sql in &MIGRATIONS[..RUN_IMAGES - 1] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", RUN_IMAGES as i64 - 1).unwrap();
        for (name, metadata) in [
            ("named", Some(serde_json::to_string(&metadata).unwrap())),
            ("unreadable", Some("{\"platforms\": 7}".to_string())),
            ("none", None),
        ] {
            conn.execute(
                "INSERT INTO watches (name, kind, image, digest, reference, metadata, first_seen, last_check, last_result)
                 VALUES (?1, 'builder', 'reg.test/b:1', 'sha256:a', 'reg.test/b@sha256:a', ?2, '2026-11-30T12:00:00Z',
                         '2026-11-30T12:00:00Z', 'ok')",
                rusqlite::params![name, metadata],
            )
            .unwrap();
        }
    }
    let ledger = SqliteLedger::open(&path).unwrap();
    let pins = ledger.pins().await.unwrap();
    let seen: Vec<(&str, Option<&str>, bool)> =
        pins.iter().map(|p| (p.name.as_str(), p.run_image.as_deref(), p.steady)).collect();
    assert_eq!(seen, [("named", Some("reg.test/run:1"), true), ("none", None, true), ("unreadable", None, true)]);
}
