//! An unchanged check of a steady watch stays in memory: it reads no ledger entry. Shown by making
//! the entry unreadable behind the daemon's back: a check that reads it fails with the ledger's
//! error, one that stays in memory does not.

use super::*;

/// Makes watch `b`'s entry unreadable (its platform map no longer JSON), or readable again.
fn spoil_entry(setup: &Setup, spoiled: bool) {
    let conn = rusqlite::Connection::open(setup._dir.path().join("state.db")).unwrap();
    let sql = if spoiled {
        "UPDATE watches SET platforms = 'not json' WHERE name = 'b'"
    } else {
        "UPDATE watches SET platforms = '{}' WHERE name = 'b'"
    };
    conn.execute(sql, []).unwrap();
}

#[tokio::test]
async fn a_steady_pin_is_checked_in_memory_and_a_move_or_a_failure_reads_the_ledger() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    let image = Image::new("amd64");
    let v1 = pusher.push_image("demo/app", Some("latest"), &image, Format::Oci).await;
    let setup = Setup::new(&builder_config(&registry.host, "demo/app", ""));
    assert!(matches!(setup.check("b").await, CheckOutcome::Pinned { .. }));

    spoil_entry(&setup, true);
    assert!(setup.ledger.watch("b").await.is_err(), "the entry no longer reads");
    for _ in 0..3 {
        assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged), "kept in memory, written through");
    }
    // A move is decided against the entry, so it reads it.
    pusher.push_image("demo/app", Some("latest"), &image.clone().salt("v2"), Format::Oci).await;
    assert!(setup.monitor.check_builder("b").await.unwrap().is_err(), "a move reads the spoiled entry");

    // Readable again, the move is recorded; its new pin is steady and in memory at once.
    spoil_entry(&setup, false);
    assert!(matches!(setup.check("b").await, CheckOutcome::Changed { .. }));
    spoil_entry(&setup, true);
    assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));

    // A failing watch is not steady: its recovery reads the entry (and records `check.recovered`).
    spoil_entry(&setup, false);
    let v2 = setup.ledger.watch("b").await.unwrap().unwrap().pin.unwrap().digest;
    assert_ne!(v2, v1.digest);
    pusher.delete("demo/app", &v2).await;
    assert!(matches!(setup.check("b").await, CheckOutcome::Failed(_)));
    pusher.push_image("demo/app", Some("latest"), &image.clone().salt("v2"), Format::Oci).await;
    spoil_entry(&setup, true);
    assert!(setup.monitor.check_builder("b").await.unwrap().is_err(), "a recovery reads the entry");
    spoil_entry(&setup, false);
    assert!(matches!(setup.check("b").await, CheckOutcome::Unchanged));
    assert!(setup.event_types().await.ends_with(&["check.failed".to_string(), "check.recovered".to_string()]));
}

/// Start-up reads every pin in one query that decodes nothing: a restarted monitor's first check of
/// a steady watch already stays in memory.
#[tokio::test]
async fn a_restarted_monitor_knows_its_steady_pins_from_the_start() {
    let registry = TestRegistry::start();
    let pusher = Pusher::new(&registry.host);
    pusher.push_image("demo/app", Some("latest"), &Image::new("amd64"), Format::Oci).await;
    let text = builder_config(&registry.host, "demo/app", "");
    let setup = Setup::new(&text);
    assert!(setup.monitor.run_once().await);
    setup.ledger.flush_touches().await.unwrap();
    spoil_entry(&setup, true);

    let config = Config::parse(&setup._dir.path().join("config.toml"), &text).unwrap();
    let restarted = Parts::new(Arc::new(config), setup.ledger.clone(), setup.clock.clone(), None).unwrap().monitor;
    assert!(restarted.run_once().await, "every check of the restarted monitor stayed in memory");
    assert!(restarted.check_builder("b").await.unwrap().is_ok());
}
