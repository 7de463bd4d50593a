//! Unchanged checks kept in memory and written in batches, as another process sees them; the
//! failing watches read without the others.

use super::*;

/// What another process sees of a ledger: a reader of its own (none of the first ledger's
/// memory), and a mark of the store that moves whenever something is written to it.
struct Beside {
    other: Ledger,
    mark: Box<dyn Fn() -> u64>,
}

/// Runs `scenario` against both ledgers, each with what another process sees of it: SQLite's
/// `PRAGMA data_version` on a second connection, the API double's count of writes.
async fn both_beside<F, Fut>(scenario: F)
where
    F: Fn(Ledger, Beside) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = Ledger::open(&path).unwrap();
    let connection = rusqlite::Connection::open(&path).unwrap();
    let mark =
        Box::new(move || connection.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0)).unwrap() as u64);
    scenario(ledger, Beside { other: Ledger::open_read_only(&path).unwrap(), mark }).await;

    let double = std::sync::Arc::new(KubeDouble::start().await);
    double.create_namespace("bm");
    let counted = double.clone();
    let other = Ledger::kubernetes(double.client(), "bm", Utc::now());
    scenario(
        Ledger::kubernetes(double.client(), "bm", Utc::now()),
        Beside { other, mark: Box::new(move || counted.writes()) },
    )
    .await;
}

async fn last_check(ledger: &Ledger, watch: &str) -> Option<String> {
    ledger.watch(watch).await.unwrap().unwrap().last_check.map(timestamp)
}

#[tokio::test]
async fn unchanged_checks_are_written_in_batches_not_one_by_one() {
    both_beside(|ledger, beside| async move {
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.pin = Some(pin("sha256:a"));
        ledger.commit(r).await.unwrap();
        let before = (beside.mark)();
        for minute in 1..=5 {
            ledger.commit(record("b", &format!("2026-11-30T12:0{minute}:00Z"))).await.unwrap();
        }
        assert_eq!((beside.mark)(), before, "five unchanged checks, no write");
        assert_eq!(last_check(&ledger, "b").await.as_deref(), Some("2026-11-30T12:05:00Z"), "the daemon's own reads");
        assert_eq!(
            ledger.watches().await.unwrap()[0].last_check.map(timestamp).as_deref(),
            Some("2026-11-30T12:05:00Z")
        );
        assert_eq!(last_check(&beside.other, "b").await.as_deref(), Some("2026-11-30T12:00:00Z"), "another process");

        assert_eq!(ledger.flush_touches().await.unwrap(), 1);
        assert_ne!((beside.mark)(), before, "the flush writes");
        assert_eq!(last_check(&beside.other, "b").await.as_deref(), Some("2026-11-30T12:05:00Z"), "the newest time");
        let flushed = (beside.mark)();
        assert_eq!(ledger.flush_touches().await.unwrap(), 0);
        assert_eq!((beside.mark)(), flushed, "nothing left to write");

        // A late touch never moves a written time back.
        ledger.commit(record("b", "2026-11-30T12:07:00Z")).await.unwrap();
        let mut r = record("b", "2026-11-30T12:08:00Z");
        r.outcome = failed("tag_missing", "gone");
        ledger.commit(r).await.unwrap();
        assert_eq!(ledger.flush_touches().await.unwrap(), 0, "the failure wrote the touch");
        let w = beside.other.watch("b").await.unwrap().unwrap();
        assert_eq!((w.last_check.map(timestamp).as_deref(), w.last_ok), (Some("2026-11-30T12:08:00Z"), Some(false)));
    })
    .await;
}

#[tokio::test]
async fn failing_watches_are_read_without_the_others() {
    both_beside(|ledger, _| async move {
        for w in ["a", "b", "c"] {
            let mut r = record(w, "2026-11-30T12:00:00Z");
            r.pin = Some(pin("sha256:a"));
            ledger.commit(r).await.unwrap();
        }
        for (w, at) in [("b", "12:01"), ("b", "12:02"), ("c", "12:01")] {
            let mut r = record(w, &format!("2026-11-30T{at}:00Z"));
            r.outcome = failed("tag_missing", "gone");
            ledger.commit(r).await.unwrap();
        }
        ledger.commit(record("c", "2026-11-30T12:03:00Z")).await.unwrap();
        let failing = ledger.failing_watches().await.unwrap();
        let seen: Vec<(&str, u32)> = failing.iter().map(|w| (w.name.as_str(), w.consecutive_failures)).collect();
        assert_eq!(seen, [("b", 2)], "c recovered, a never failed");
    })
    .await;
}

#[tokio::test]
async fn a_fleet_of_kept_times_is_written_in_batches_of_touch_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = Ledger::open(&path).unwrap();
    let n = 2 * builder_monitor::ledger::TOUCH_BATCH + 345;
    for i in 0..n {
        let mut r = record(&format!("b{i:05}"), "2026-11-30T12:00:00Z");
        r.pin = Some(pin("sha256:a"));
        ledger.commit(r).await.unwrap();
    }
    // Unchanged checks: kept in memory (a real commit would write the kept ones with it).
    for i in 0..n {
        ledger.commit(record(&format!("b{i:05}"), "2026-11-30T12:01:00Z")).await.unwrap();
    }
    // Three batches: a flush that stopped after one would answer TOUCH_BATCH and leave the rest.
    assert_eq!(ledger.flush_touches().await.unwrap(), n, "every kept time");
    let other = Ledger::open_read_only(&path).unwrap();
    let written = other.watches().await.unwrap();
    assert_eq!(written.len(), n);
    assert!(written.iter().all(|w| w.last_check.map(timestamp).as_deref() == Some("2026-11-30T12:01:00Z")));
    assert_eq!(ledger.flush_touches().await.unwrap(), 0, "none left");
}

#[tokio::test]
async fn a_real_change_is_written_at_once_with_the_kept_times() {
    both_beside(|ledger, beside| async move {
        for w in ["a", "b"] {
            let mut r = record(w, "2026-11-30T12:00:00Z");
            r.pin = Some(pin("sha256:a"));
            ledger.commit(r).await.unwrap();
        }
        ledger.commit(record("a", "2026-11-30T12:01:00Z")).await.unwrap();
        ledger.commit(record("b", "2026-11-30T12:01:00Z")).await.unwrap();
        let before = (beside.mark)();

        // A failure is written at once, and a's kept time with it.
        let mut r = record("b", "2026-11-30T12:02:00Z");
        r.outcome = failed("tag_missing", "gone");
        ledger.commit(r).await.unwrap();
        assert_ne!((beside.mark)(), before);
        assert_eq!(last_check(&beside.other, "a").await.as_deref(), Some("2026-11-30T12:01:00Z"));
        let w = beside.other.watch("b").await.unwrap().unwrap();
        assert_eq!(
            (w.consecutive_failures, w.failing_since.map(timestamp).as_deref(), w.last_ok),
            (1, Some("2026-11-30T12:02:00Z"), Some(false))
        );

        // Failures are counted exactly; the recovery is a change too.
        let mut r = record("b", "2026-11-30T12:03:00Z");
        r.outcome = failed("tag_missing", "gone");
        ledger.commit(r).await.unwrap();
        assert_eq!(beside.other.watch("b").await.unwrap().unwrap().consecutive_failures, 2);
        ledger.commit(record("b", "2026-11-30T12:04:00Z")).await.unwrap();
        let w = beside.other.watch("b").await.unwrap().unwrap();
        assert_eq!(
            (w.consecutive_failures, w.failing_since, w.last_ok, w.last_check.map(timestamp).as_deref()),
            (0, None, Some(true), Some("2026-11-30T12:04:00Z"))
        );

        // Once recovered, unchanged again: kept.
        let recovered = (beside.mark)();
        ledger.commit(record("b", "2026-11-30T12:05:00Z")).await.unwrap();
        assert_eq!((beside.mark)(), recovered);

        // A digest held back, a new pin, an event: each written at once, with b's kept time.
        let mut r = record("a", "2026-11-30T12:06:00Z");
        r.pending = Some(HeldDigest { digest: "sha256:b".into(), since: at("2026-11-30T12:06:00Z") });
        ledger.commit(r).await.unwrap();
        assert_eq!(beside.other.watch("a").await.unwrap().unwrap().pending.unwrap().digest, "sha256:b");
        assert_eq!(last_check(&beside.other, "b").await.as_deref(), Some("2026-11-30T12:05:00Z"));
        let mut r = record("a", "2026-11-30T12:07:00Z");
        r.pin = Some(pin("sha256:b"));
        ledger.commit(r).await.unwrap();
        assert_eq!(beside.other.watch("a").await.unwrap().unwrap().pin.unwrap().digest, "sha256:b");
        let mut r = record("a", "2026-11-30T12:08:00Z");
        r.events.push(event("e-a", EventType::BuilderPinned, "a"));
        ledger.commit(r).await.unwrap();
        assert_eq!(beside.other.events_after(0, 10).await.unwrap().len(), 1);
        assert_eq!(ledger.flush_touches().await.unwrap(), 0, "nothing was left kept");
    })
    .await;
}

/// Start-up's one read of every pin: the digest, whether the entry is steady (what the daemon
/// keeps in memory), and the run image the metadata names, without the metadata. It agrees with
/// the entries read whole.
#[tokio::test]
async fn pins_are_read_with_their_run_image_and_whether_they_are_steady() {
    use builder_monitor_core::cnb::{BuilderMetadata, PlatformMetadata, RunImage};
    both_beside(|ledger, _| async move {
        let builder = |run: &str| BuilderMetadata {
            run_images: vec![RunImage { image: run.into(), mirrors: vec![] }],
            ..Default::default()
        };
        let metadata = PinnedMetadata {
            platforms: [
                ("linux/amd64".to_string(), PlatformMetadata::Builder(Box::new(builder("reg.test/run:amd")))),
                ("linux/arm64".to_string(), PlatformMetadata::Builder(Box::new(builder("reg.test/run:arm")))),
            ]
            .into(),
            ..Default::default()
        };
        for w in ["steady", "failing", "held", "bare"] {
            let mut r = record(w, "2026-11-30T12:00:00Z");
            r.pin = Some(PinUpdate { metadata: Some(metadata.clone().into()), ..pin("sha256:a") });
            if w == "bare" {
                r.pin = Some(PinUpdate { metadata: None, ..pin("sha256:b") });
            }
            ledger.commit(r).await.unwrap();
        }
        let mut r = record("failing", "2026-11-30T12:01:00Z");
        r.outcome = failed("tag_missing", "gone");
        ledger.commit(r).await.unwrap();
        let mut r = record("held", "2026-11-30T12:01:00Z");
        r.pending = Some(HeldDigest { digest: "sha256:c".into(), since: at("2026-11-30T12:01:00Z") });
        ledger.commit(r).await.unwrap();
        let mut r = record("never", "2026-11-30T12:01:00Z");
        r.outcome = failed("tag_missing", "gone");
        ledger.commit(r).await.unwrap();

        let pins = ledger.pins().await.unwrap();
        let seen: Vec<(&str, Option<&str>, bool, Option<&str>)> =
            pins.iter().map(|p| (p.name.as_str(), p.digest.as_deref(), p.steady, p.run_image.as_deref())).collect();
        assert_eq!(
            seen,
            [
                ("bare", Some("sha256:b"), true, None),
                ("failing", Some("sha256:a"), false, Some("reg.test/run:amd")),
                ("held", Some("sha256:a"), false, Some("reg.test/run:amd")),
                ("never", None, false, None),
                ("steady", Some("sha256:a"), true, Some("reg.test/run:amd")),
            ]
        );
        let whole: Vec<PinSummary> = ledger.watches().await.unwrap().iter().map(WatchRecord::summary).collect();
        assert_eq!(pins, whole, "the one read says what the entries say");
    })
    .await;
}
