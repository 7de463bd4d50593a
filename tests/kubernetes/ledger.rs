//! One suite, both ledgers: embedded SQLite and ConfigMaps on the Kubernetes API double keep the
//! same records under the same operations, and the Kubernetes one loses no concurrent write.

#[path = "ledger/deploy_reads.rs"]
mod deploy_reads;
#[path = "ledger/deploys.rs"]
mod deploys;
#[path = "ledger/fixture.rs"]
mod fixture;
#[path = "ledger/outbox.rs"]
mod outbox;
#[path = "ledger/rollout.rs"]
mod rollout;
#[path = "ledger/touches.rs"]
mod touches;

use crate::support;

use std::collections::BTreeMap;

use builder_monitor::ledger::{
    ActionEnd, ActionOutcome, ActionState, ChangeRecord, CheckFailure, CheckRecord, DeliveryKey, DeliveryUpdate,
    HeldDigest, Ledger, NewAction, PinSummary, PinUpdate, TagMove, TagMoveKind, WatchKind, WatchRecord,
};
use builder_monitor_core::cnb::{Change, PinnedMetadata};
use builder_monitor_core::event::{Event, EventType, Subject, change_id};
use builder_monitor_core::packages::{Package, Packages, Source};
use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::progress::Progress;
use builder_monitor_core::schedule::{parse_timestamp, timestamp};
use chrono::{DateTime, Utc};
use serde_json::json;
use support::kube::KubeDouble;
use support::ledgers::both;

/// The caller's clock, as the ledger is given it.
fn at(text: &str) -> DateTime<Utc> {
    parse_timestamp(text).unwrap()
}

pub fn record(watch: &str, time: &str) -> CheckRecord {
    CheckRecord {
        watch: watch.into(),
        kind: WatchKind::Builder,
        image: format!("docker.io/x/{watch}:latest"),
        time: at(time),
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

pub fn pin(d: &str) -> PinUpdate {
    PinUpdate {
        digest: d.into(),
        reference: format!("docker.io/x/y@{d}"),
        media_type: "application/vnd.oci.image.index.v1+json".into(),
        platforms: [("linux/amd64".to_string(), format!("{d}-amd64"))].into(),
        metadata: Some(PinnedMetadata::default().into()),
    }
}

fn change(watch: &str, seq: u64, prev: &str, cur: &str) -> ChangeRecord {
    ChangeRecord {
        id: change_id(watch, seq, prev, cur),
        watch: watch.into(),
        seq,
        previous: prev.into(),
        current: cur.into(),
        previous_reference: format!("docker.io/x/y@{prev}"),
        current_reference: format!("docker.io/x/y@{cur}"),
        change: Change::unknown("test"),
        rollback: false,
        detected: at(&format!("2026-11-30T12:1{seq}:00Z")),
    }
}

fn failed(reason: &str, message: &str) -> Result<(), CheckFailure> {
    Err(CheckFailure { reason: reason.into(), message: message.into() })
}

fn key(event: &str, alert: &str) -> DeliveryKey {
    DeliveryKey::new(event, alert)
}

fn event(id: &str, t: EventType, watch: &str) -> Event {
    Event::new(id.into(), t, "2026-11-30T12:00:00Z".into(), Subject { name: watch.into(), image: "x".into() })
}

#[tokio::test]
async fn pins_failures_moves_and_history() {
    both(|ledger| async move {
        assert!(ledger.watch("b").await.unwrap().is_none());
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.pin = Some(pin("sha256:a"));
        r.events.push(event("e1", EventType::BuilderPinned, "b"));
        ledger.commit(r).await.unwrap();
        let w = ledger.watch("b").await.unwrap().unwrap();
        assert_eq!(w.pin.as_ref().unwrap().digest, "sha256:a");
        assert_eq!(w.pin.as_ref().unwrap().platforms["linux/amd64"], "sha256:a-amd64");
        assert_eq!(serde_json::to_value(&w.metadata).unwrap(), json!({ "platforms": {} }));

        for t in ["2026-11-30T12:01:00Z", "2026-11-30T12:02:00Z"] {
            let mut r = record("b", t);
            r.outcome = failed("tag_missing", "gone");
            ledger.commit(r).await.unwrap();
        }
        let w = ledger.watch("b").await.unwrap().unwrap();
        assert_eq!(
            (w.consecutive_failures, w.failing_since.map(timestamp).as_deref(), w.last_ok),
            (2, Some("2026-11-30T12:01:00Z"), Some(false))
        );
        assert_eq!(w.last_error_reason.as_deref(), Some("tag_missing"));

        let moves = [("sha256:a", "sha256:b"), ("sha256:b", "sha256:c"), ("sha256:c", "sha256:d")];
        for (i, (prev, cur)) in moves.iter().enumerate() {
            let mut r = record("b", &format!("2026-11-30T12:1{i}:00Z"));
            r.pin = Some(pin(cur));
            r.change = Some(change("b", i as u64 + 1, prev, cur));
            ledger.commit(r).await.unwrap();
        }
        let w = ledger.watch("b").await.unwrap().unwrap();
        assert_eq!((w.moves, w.consecutive_failures, w.failing_since), (3, 0, None));
        let changes = ledger.changes(Some("b"), 10).await.unwrap();
        assert_eq!(changes.iter().map(|c| c.seq).collect::<Vec<_>>(), [3, 2], "history = 2 changes");
        assert!(!ledger.has_pinned("b", "sha256:a").await.unwrap(), "history + 1 digests kept");
        assert!(ledger.has_pinned("b", "sha256:b").await.unwrap());
        let history = ledger.history("b", 10).await.unwrap();
        assert_eq!(history.iter().map(|h| h.digest.as_str()).collect::<Vec<_>>(), ["sha256:d", "sha256:c", "sha256:b"]);

        // The same change again changes nothing; held digests are kept and cleared.
        let mut r = record("b", "2026-11-30T12:20:00Z");
        r.change = Some(change("b", 3, "sha256:c", "sha256:d"));
        r.pending = Some(HeldDigest { digest: "sha256:e".into(), since: at("2026-11-30T12:20:00Z") });
        ledger.commit(r).await.unwrap();
        assert_eq!(ledger.changes(None, 10).await.unwrap().len(), 2);
        assert_eq!(ledger.watch("b").await.unwrap().unwrap().pending.unwrap().digest, "sha256:e");
        assert_eq!(ledger.watches().await.unwrap().len(), 1);
        let events = ledger.events_after(0, 10).await.unwrap();
        assert_eq!(events.iter().map(|e| e.event.id.as_str()).collect::<Vec<_>>(), ["e1"]);
        assert!(ledger.events_after(events[0].seq, 10).await.unwrap().is_empty());
        ledger.ping().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn the_outbox_moves_deliveries_forward_only() {
    both(|ledger| async move {
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.pin = Some(pin("sha256:a"));
        // e2 is about another builder: one alert's deliveries about one subject go one at a time
        // (`outbox`), and this is about each delivery's own moves.
        r.events = vec![event("e1", EventType::BuilderChanged, "b"), event("e2", EventType::CheckFailed, "c")];
        r.deliveries = vec![key("e1", "hook"), key("e1", "chat"), key("e2", "hook")];
        ledger.commit(r).await.unwrap();
        let far = at("2099-01-01T00:00:00.000Z");
        let due = ledger.due_deliveries(far, 10).await.unwrap();
        assert_eq!(due.len(), 3);
        assert!(ledger.due_deliveries(at("2000-01-01T00:00:00.000Z"), 10).await.unwrap().is_empty());

        let now = at("2026-11-30T12:01:00Z");
        ledger.update_delivery("e1", "hook", DeliveryUpdate::Sent { status: "HTTP 200".into() }, now).await.unwrap();
        ledger
            .update_delivery(
                "e1",
                "chat",
                DeliveryUpdate::Retry { next_attempt: at("2098-01-01T00:00:00.000Z"), status: "HTTP 503".into() },
                now,
            )
            .await
            .unwrap();
        ledger.update_delivery("e2", "hook", DeliveryUpdate::Dead { status: "HTTP 400".into() }, now).await.unwrap();
        // A sent delivery is never moved back.
        ledger.update_delivery("e1", "hook", DeliveryUpdate::Dead { status: "late".into() }, now).await.unwrap();

        let pending = ledger.pending_deliveries().await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!((pending[0].event.as_str(), pending[0].alert.as_str(), pending[0].attempts), ("e1", "chat", 1));
        assert_eq!(pending[0].event_type, "builder.changed");
        assert_eq!(pending[0].last_status.as_deref(), Some("HTTP 503"));
        let dead = ledger.dead_letters().await.unwrap();
        assert_eq!(
            (dead.len(), dead[0].event_type.as_str(), dead[0].last_status.as_deref()),
            (1, "check.failed", Some("HTTP 400"))
        );
        assert_eq!(ledger.next_delivery_at(&[]).await.unwrap(), Some(at("2098-01-01T00:00:00.000Z")));
        assert_eq!(ledger.next_delivery_at(&[key("e1", "chat")]).await.unwrap(), None);
        assert_eq!(ledger.due_deliveries(far, 10).await.unwrap().len(), 1);

        // Events recorded outside a check land in the outbox too.
        ledger
            .record_events(
                "b",
                vec![event("e3", EventType::BuildStarted, "b")],
                vec![key("e3", "hook")],
                2,
                at("2026-11-30T12:02:00Z"),
            )
            .await
            .unwrap();
        assert_eq!(ledger.pending_deliveries().await.unwrap().len(), 2);
    })
    .await;
}

fn action(change: &str, image: &str) -> NewAction {
    NewAction {
        key: builder_monitor::reaction::action_key(change, image),
        change_id: change.into(),
        image: image.into(),
        kind: ActionKind::Rebuild,
        target: serde_json::from_value(json!({ "image": format!("r/{image}"), "builder_name": "b", "builder": "r/b@sha256:x", "run_image": null, "source": null, "why": "test" })).unwrap(),
        wave: 1,
        needs_approval: false,
        expedited: Default::default(),
        batch: None,
    }
}

/// The deploy that follows an expedited rebase takes the rebase's record of what expedited it
/// from its claim (`Runner::follow`): each ledger hands it back as it was recorded — the records
/// (id, priority, file) and the data's source (URL, ETag, SHA-256) — and `status` shows it.
#[tokio::test]
async fn a_claimed_action_carries_what_expedited_it() {
    use builder_monitor_core::rollout::{Expedited, ExpeditedRecord};
    use builder_monitor_core::vulns::{DataSource, Priority};
    both(|ledger| async move {
        let expedited = Expedited {
            records: vec![ExpeditedRecord {
                id: "CVE-2026-9001".into(),
                priority: Some(Priority::Critical),
                file: Some("osv/cve/2026/CVE-2026-9001.json".into()),
            }],
            source: Some(DataSource {
                url: "https://mirror.example/…".into(),
                etag: Some("\"v1\"".into()),
                sha256: Some("ab".repeat(32)),
                unverified: None,
                as_of: None,
            }),
        };
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.change = Some(change("b", 1, "sha256:a", "sha256:b"));
        r.actions = vec![action("c1", "app").expedited(expedited.clone()), action("c1", "api")];
        ledger.commit(r).await.unwrap();
        let shown = ledger.actions(10).await.unwrap();
        let app = shown.iter().find(|a| a.image == "app").unwrap();
        assert_eq!(app.expedited, expedited);
        let json = serde_json::to_value(app).unwrap();
        assert_eq!(json["expedited"]["records"][0]["priority"], "critical", "{json:#}");
        assert_eq!(json["expedited"]["source"]["etag"], "\"v1\"", "{json:#}");
        let claimed = ledger.claim_actions(at("2099-01-01T00:00:00.000Z"), 10).await.unwrap();
        let of = |image: &str| claimed.iter().find(|a| a.image == image).unwrap().expedited.clone();
        assert_eq!(of("app"), expedited);
        assert!(of("api").is_empty());
    })
    .await;
}

#[tokio::test]
async fn actions_are_claimed_finished_requeued_and_superseded() {
    both(|ledger| async move {
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.change = Some(change("b", 1, "sha256:a", "sha256:b"));
        r.actions = vec![action("c1", "app"), action("c1", "api")];
        ledger.commit(r).await.unwrap();
        assert_eq!(ledger.open_actions().await.unwrap().len(), 2);
        let far = at("2099-01-01T00:00:00.000Z");
        let claimed = ledger.claim_actions(far, 1).await.unwrap();
        assert_eq!((claimed.len(), claimed[0].attempt), (1, 1));
        assert_eq!(ledger.running_actions().await.unwrap().len(), 1);
        // A crash: the running one goes back to pending, its attempt counted.
        assert_eq!(ledger.requeue_running().await.unwrap(), [claimed[0].key.clone()]);
        let again = ledger.claim_actions(far, 10).await.unwrap();
        assert_eq!(again.len(), 2);
        assert_eq!(again.iter().find(|a| a.key == claimed[0].key).unwrap().attempt, 2);
        let first = again.iter().find(|a| a.image == "app").unwrap().clone();
        let other = again.iter().find(|a| a.image == "api").unwrap().clone();

        let done = event("done", EventType::BuildSucceeded, "b");
        ledger
            .finish_action(ActionEnd {
                key: &first.key,
                outcome: ActionOutcome::Succeeded,
                detail: "exit status 0".into(),
                output_tail: "ok".into(),
                watch: "b",
                events: vec![done],
                deliveries: vec![key("done", "hook")],
                history: 2,
                now: at("2026-11-30T12:05:00Z"),
                tag_move: None,
                hold: None,
                keep_intent: false,
                follow: vec![],
                hold_image: false,
            })
            .await
            .unwrap();
        ledger
            .finish_action(ActionEnd {
                key: &other.key,
                outcome: ActionOutcome::Retry { next_attempt: at("2098-01-01T00:00:00.000Z") },
                detail: "exit status 1".into(),
                output_tail: "no".into(),
                watch: "b",
                events: vec![],
                deliveries: vec![],
                history: 2,
                now: at("2026-11-30T12:06:00Z"),
                tag_move: None,
                hold: None,
                keep_intent: false,
                follow: vec![],
                hold_image: false,
            })
            .await
            .unwrap();
        assert_eq!(
            ledger.next_action_at(at("2097-01-01T00:00:00Z")).await.unwrap(),
            Some(at("2098-01-01T00:00:00.000Z"))
        );
        // An attempt's end is recorded at the time its caller gives, not the ledger's own clock.
        let finished = ledger.actions(10).await.unwrap().into_iter().find(|a| a.key == first.key).unwrap();
        assert_eq!((finished.state, finished.updated), (ActionState::Succeeded, at("2026-11-30T12:05:00.000Z")));
        let actions = ledger.actions(10).await.unwrap();
        let by_key: BTreeMap<&str, ActionState> = actions.iter().map(|a| (a.key.as_str(), a.state)).collect();
        assert_eq!(by_key[first.key.as_str()], ActionState::Succeeded);
        assert_eq!(by_key[other.key.as_str()], ActionState::Pending);
        assert_eq!(ledger.pending_deliveries().await.unwrap().len(), 1, "the outcome's event is in the outbox");

        // A newer change for `api` supersedes its pending action; only the newest is left.
        let mut r = record("b", "2026-11-30T12:05:00Z");
        r.change = Some(change("b", 2, "sha256:b", "sha256:c"));
        r.actions = vec![action("c2", "api")];
        ledger.commit(r).await.unwrap();
        let open = ledger.open_actions().await.unwrap();
        assert_eq!(open.len(), 1, "{open:#?} {:#?}", ledger.actions(10).await.unwrap());
        assert_eq!(open[0].change, "c2");
        let superseded = ledger.actions(10).await.unwrap().into_iter().find(|a| a.key == other.key).unwrap();
        assert_eq!(superseded.state, ActionState::Superseded);
    })
    .await;
}

/// A change's first actions, recorded ahead of its commit (planning in batches): a newer change's
/// action for one of its images, recorded in between, stays the newest when the commit records the
/// planned actions again; nothing is recorded twice, and the rest are added.
#[tokio::test]
async fn actions_recorded_ahead_of_their_commit_are_kept_and_never_outrank_a_newer_change() {
    both(|ledger| async move {
        ledger.commit(record("b", "2026-11-30T12:00:00Z")).await.unwrap();
        ledger.commit(record("r", "2026-11-30T12:00:00Z")).await.unwrap();
        let planned = vec![action("c1", "app"), action("c1", "api")];
        ledger.record_planned("r", planned, at("2026-11-30T12:01:00Z")).await.unwrap();
        // The builder moves meanwhile: its change's action for `app` supersedes c1's.
        let mut newer = record("b", "2026-11-30T12:02:00Z");
        newer.change = Some(change("b", 1, "sha256:a", "sha256:b"));
        newer.actions = vec![action("c2", "app")];
        ledger.commit(newer).await.unwrap();
        // c1's check commits, with every action it planned.
        let mut c1 = record("r", "2026-11-30T12:01:00Z");
        c1.change = Some(change("r", 1, "sha256:r1", "sha256:r2"));
        c1.actions = vec![action("c1", "app"), action("c1", "api"), action("c1", "web")];
        ledger.commit(c1).await.unwrap();

        let actions = ledger.actions(10).await.unwrap();
        let states: BTreeMap<(&str, &str), ActionState> =
            actions.iter().map(|a| ((a.change.as_str(), a.image.as_str()), a.state)).collect();
        assert_eq!(actions.len(), 4, "{actions:#?}");
        assert_eq!(
            states,
            BTreeMap::from([
                (("c1", "api"), ActionState::Pending),
                (("c1", "app"), ActionState::Superseded),
                (("c1", "web"), ActionState::Pending),
                (("c2", "app"), ActionState::Pending),
            ])
        );
    })
    .await;
}

fn tag_move(image: &str, kind: TagMoveKind, action: Option<&str>, digests: (&str, &str), time: &str) -> TagMove {
    TagMove {
        image: image.into(),
        reference: format!("r/{image}:latest"),
        kind,
        action: action.map(str::to_string),
        before: Some(digests.0.into()),
        after: Some(digests.1.into()),
        time: at(time),
        by: None,
        run_image: None,
    }
}

/// Every move of an app tag keeps the digests before and after: with the action's end (same
/// write), or on its own (a rollback), newest first, per image, pruned to the history.
#[tokio::test]
async fn tag_moves_keep_the_digests_before_and_after() {
    both(|ledger| async move {
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.change = Some(change("b", 1, "sha256:a", "sha256:b"));
        r.actions = vec![action("c1", "app"), action("c1", "api")];
        ledger.commit(r).await.unwrap();
        assert!(ledger.tag_moves(None, 10).await.unwrap().is_empty());
        let claimed = ledger.claim_actions(at("2099-01-01T00:00:00Z"), 10).await.unwrap();
        let app = claimed.iter().find(|a| a.image == "app").unwrap();
        let rebased =
            tag_move("app", TagMoveKind::Rebase, Some(&app.key), ("sha256:1", "sha256:2"), "2026-11-30T12:01:00.5Z");
        ledger
            .finish_action(ActionEnd {
                key: &app.key,
                outcome: ActionOutcome::Succeeded,
                detail: "rebased".into(),
                output_tail: String::new(),
                watch: "b",
                events: vec![],
                deliveries: vec![],
                history: 2,
                now: at("2026-11-30T12:01:00.5Z"),
                tag_move: Some(rebased.clone()),
                hold: None,
                keep_intent: false,
                follow: vec![],
                hold_image: false,
            })
            .await
            .unwrap();
        assert_eq!(ledger.tag_moves(Some("app"), 10).await.unwrap(), std::slice::from_ref(&rebased));
        assert!(ledger.tag_moves(Some("api"), 10).await.unwrap().is_empty());

        let back = TagMove {
            action: None,
            ..tag_move("app", TagMoveKind::Rollback, None, ("sha256:2", "sha256:1"), "2026-11-30T12:02:00Z")
        };
        ledger.record_tag_move("b", back.clone(), 2).await.unwrap();
        let other = tag_move("api", TagMoveKind::Rebuild, Some("k"), ("sha256:7", "sha256:8"), "2026-11-30T12:03:00Z");
        ledger.record_tag_move("b", other.clone(), 2).await.unwrap();
        assert_eq!(ledger.tag_moves(Some("app"), 10).await.unwrap(), [back.clone(), rebased.clone()]);
        assert_eq!(ledger.tag_moves(None, 2).await.unwrap(), [other.clone(), back.clone()]);

        // A third move of `app` with history 2 drops its oldest; `api` keeps its own.
        let again = tag_move("app", TagMoveKind::Rebase, Some("k2"), ("sha256:1", "sha256:3"), "2026-11-30T12:04:00Z");
        ledger.record_tag_move("b", again.clone(), 2).await.unwrap();
        assert_eq!(ledger.tag_moves(Some("app"), 10).await.unwrap(), [again, back]);
        assert_eq!(ledger.tag_moves(Some("api"), 10).await.unwrap(), [other]);
    })
    .await;
}

#[tokio::test]
async fn concurrent_writers_to_one_kubernetes_entry_lose_nothing() {
    let double = KubeDouble::start().await;
    double.create_namespace("bm");
    let a = Ledger::kubernetes(double.client(), "bm", Utc::now());
    let b = Ledger::kubernetes(double.client(), "bm", Utc::now());
    let mut tasks = Vec::new();
    for (n, ledger) in [a.clone(), b.clone()].into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for i in 0..15 {
                let mut r = record("b", &format!("2026-11-30T1{n}:{i:02}:00Z"));
                r.outcome = failed("registry_unavailable", "down");
                r.events.push(event(&format!("e{n}-{i}"), EventType::CheckFailed, "b"));
                ledger.commit(r).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let w = a.watch("b").await.unwrap().unwrap();
    assert_eq!(w.consecutive_failures, 30, "every write counted: none overwrote another");
    assert_eq!(b.events_after(0, 100).await.unwrap().len(), 4, "history * 2 newest events kept");
}

#[tokio::test]
async fn pins_within_one_second_keep_their_order_in_the_history() {
    both(|ledger| async move {
        for d in ["sha256:x", "sha256:y"] {
            let mut r = record("fast", "2026-11-30T12:00:00Z");
            r.pin = Some(pin(d));
            ledger.commit(r).await.unwrap();
        }
        let history = ledger.history("fast", 10).await.unwrap();
        assert_eq!(history.iter().map(|h| h.digest.as_str()).collect::<Vec<_>>(), ["sha256:y", "sha256:x"]);
    })
    .await;
}

#[tokio::test]
async fn deliveries_and_latest_events_are_read_back_for_outage_decisions() {
    both(|ledger| async move {
        let mut r = record("a", "2026-11-30T12:00:00Z");
        r.outcome = failed("registry_unavailable", "HTTP 503");
        r.events = vec![event("f1", EventType::CheckFailed, "a")];
        ledger.commit(r).await.unwrap();
        // A later check delivers the event recorded earlier (a threshold reached), and announces an outage.
        let mut r = record("a", "2026-11-30T12:01:00Z");
        r.outcome = failed("registry_unavailable", "HTTP 503");
        r.events = vec![event("f1", EventType::CheckFailed, "a"), event("u1", EventType::RegistryUnavailable, "a")];
        r.deliveries = vec![key("f1", "pager"), key("u1", "ops"), key("u1", "chat")];
        ledger.commit(r).await.unwrap();
        let mut r = record("b", "2026-11-30T12:02:00Z");
        r.events = vec![event("r1", EventType::RegistryRecovered, "b")];
        ledger.commit(r).await.unwrap();

        let mut got = ledger.deliveries_of(vec!["u1".into(), "f1".into(), "nothing".into()]).await.unwrap();
        got.sort();
        assert_eq!(got, [key("f1", "pager"), key("u1", "chat"), key("u1", "ops")]);
        let types = vec!["registry.unavailable".to_string(), "registry.recovered".to_string()];
        let latest = ledger.latest_events(types.clone(), 10).await.unwrap();
        let ids: Vec<&str> = latest.iter().map(|e| e.event.id.as_str()).collect();
        assert_eq!(ids, ["r1", "u1"], "newest first, other types left out");
        assert_eq!(ledger.latest_events(types, 1).await.unwrap().len(), 1);
        let events = ledger.events_after(0, 100).await.unwrap();
        assert_eq!(events.iter().filter(|e| e.event.id == "f1").count(), 1, "a repeated event is recorded once");
    })
    .await;
}

/// Writes that add work signal it, so the workers wake with the write; a write without any does not.
#[tokio::test]
async fn writes_that_add_deliveries_or_actions_signal_them() {
    use std::time::Duration;
    both(|ledger| async move {
        let (deliveries, actions) = (ledger.new_deliveries(), ledger.new_actions());
        let signalled = |n: std::sync::Arc<tokio::sync::Notify>| async move {
            tokio::time::timeout(Duration::from_millis(50), n.notified()).await.is_ok()
        };
        ledger.commit(record("b", "2026-11-30T12:00:00Z")).await.unwrap();
        assert!(!signalled(deliveries.clone()).await && !signalled(actions.clone()).await);

        let mut r = record("b", "2026-11-30T12:01:00Z");
        r.pin = Some(pin("sha256:a"));
        r.events = vec![event("e1", EventType::BuilderPinned, "b")];
        r.deliveries = vec![key("e1", "hook")];
        ledger.commit(r).await.unwrap();
        assert!(signalled(deliveries.clone()).await, "a commit with deliveries");
        assert!(!signalled(actions.clone()).await);

        let mut r = record("b", "2026-11-30T12:02:00Z");
        r.change = Some(change("b", 1, "sha256:a", "sha256:b"));
        r.actions = vec![action("c1", "app")];
        ledger.commit(r).await.unwrap();
        assert!(signalled(actions.clone()).await, "a commit with actions");

        let clone = ledger.clone();
        clone
            .record_events(
                "b",
                vec![event("e2", EventType::BuildStarted, "b")],
                vec![key("e2", "hook")],
                2,
                at("2026-11-30T12:03:00Z"),
            )
            .await
            .unwrap();
        assert!(signalled(deliveries.clone()).await, "recorded events with deliveries, through a clone");
    })
    .await;
}

/// Every committed check is announced by its watch's name, in commit order, to each subscriber
/// (the publisher follows these); other writes are not checks and announce nothing.
#[tokio::test]
async fn each_committed_check_is_announced_to_every_subscriber() {
    both(|ledger| async move {
        let (mut first, mut second) = (ledger.commits(), ledger.clone().commits());
        ledger.commit(record("b", "2026-11-30T12:00:00Z")).await.unwrap();
        let mut run = record("run:docker.io/x/run:latest", "2026-11-30T12:00:01Z");
        run.kind = WatchKind::RunImage;
        ledger.clone().commit(run).await.unwrap();
        for receiver in [&mut first, &mut second] {
            assert_eq!(receiver.try_recv().unwrap(), "b");
            assert_eq!(receiver.try_recv().unwrap(), "run:docker.io/x/run:latest");
        }
        ledger
            .record_events("b", vec![event("e1", EventType::BuildStarted, "b")], vec![], 2, at("2026-11-30T12:01:00Z"))
            .await
            .unwrap();
        assert!(first.try_recv().is_err(), "recorded events are no check");
    })
    .await;
}

/// A run image pin keeping two platforms' package lists of a full build image's size (700 each).
fn pin_with_packages() -> (PinUpdate, BTreeMap<String, Packages>) {
    let list = |arch: &str| Packages::Listed {
        source: Source::PaketoLabel,
        packages: (0..700)
            .map(|i| Package {
                name: format!("lib{i:03}-package"),
                arch: Some(arch.into()),
                version: format!("2.35-0ubuntu3.{i}"),
            })
            .collect(),
        cut_at: None,
    };
    let packages: BTreeMap<String, Packages> =
        [("linux/amd64".to_string(), list("amd64")), ("linux/arm64".to_string(), list("arm64"))].into();
    let metadata = PinnedMetadata { packages: packages.clone(), ..PinnedMetadata::default() };
    (PinUpdate { metadata: Some(metadata.into()), ..pin("sha256:a") }, packages)
}

#[tokio::test]
async fn package_lists_are_kept_with_the_pin_in_both_ledgers_at_a_sane_size() {
    let (pinned, packages) = pin_with_packages();
    let check = |ledger: Ledger| {
        let (pinned, packages) = (pinned.clone(), packages.clone());
        async move {
            let mut r = record("run:docker.io/x/run:latest", "2026-11-30T12:00:00Z");
            r.kind = WatchKind::RunImage;
            r.pin = Some(pinned);
            ledger.commit(r).await.unwrap();
            let w = ledger.watch("run:docker.io/x/run:latest").await.unwrap().unwrap();
            assert_eq!(w.pinned_metadata().unwrap().packages, packages);
        }
    };
    both(check).await;
    // The Kubernetes entry is one ConfigMap (1 MiB at most): 1,400 packages take a small part of it.
    let double = KubeDouble::start().await;
    double.create_namespace("bm");
    check(Ledger::kubernetes(double.client(), "bm", Utc::now())).await;
    let maps = double.list("configmaps");
    let size: usize = maps.iter().map(|m| m["data"]["ledger.json"].as_str().unwrap_or_default().len()).sum();
    assert!(size > 1400 * 40 && size < 128 << 10, "{size} bytes");
}

/// A gitops action of change `change` for target `fleet`, fixing `fix`, batched over an hour.
fn batched(change: &str, fix: &str) -> NewAction {
    let mut target: builder_monitor_core::plan::ActionTarget = serde_json::from_value(
        json!({ "image": "file:///repo", "builder_name": "b", "builder": "r/b@sha256:x", "why": "test" }),
    )
    .unwrap();
    let fix = json!({ "id": fix, "cves": [], "priority": "high", "packages": [] });
    target.plan = builder_monitor_core::plan::ActionPlan::Gitops(builder_monitor_core::plan::GitopsPlan {
        target: "fleet".into(),
        summary: format!("run: {change}"),
        fixes: vec![serde_json::from_value(fix).unwrap()],
        batch: Vec::new(),
    });
    NewAction::new(format!("k-{change}"), change.into(), "gitops:fleet".into(), ActionKind::Gitops, target)
        .batched(Some(std::time::Duration::from_secs(3600)))
}

/// `[[gitops]] batch`: a second change within the window supersedes the first's action and takes
/// its change and fixes along, in the same write; it waits for the first one's deadline, not its own.
#[tokio::test]
async fn a_batched_gitops_action_takes_the_earlier_ones_along_and_waits_for_the_first_deadline() {
    both(|ledger| async move {
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.actions = vec![batched("c1", "USN-1")];
        ledger.commit(r).await.unwrap();
        let mut r = record("b", "2026-11-30T12:10:00Z");
        r.actions = vec![batched("c2", "USN-2")];
        ledger.commit(r).await.unwrap();
        assert!(ledger.claim_actions(at("2026-11-30T12:59:59Z"), 10).await.unwrap().is_empty());
        let claimed = ledger.claim_actions(at("2026-11-30T13:00:00Z"), 10).await.unwrap();
        assert_eq!(claimed.len(), 1, "one action for both changes");
        assert_eq!(claimed[0].change_id, "c2");
        let target = claimed[0].target.as_ref().unwrap();
        let plan = target.plan.gitops().unwrap();
        let taken: Vec<(&str, &str)> =
            plan.batch.iter().map(|c| (c.change_id.as_str(), c.fixes[0].id.as_str())).collect();
        assert_eq!(taken, [("c1", "USN-1")]);
        let states: BTreeMap<String, ActionState> =
            ledger.actions(10).await.unwrap().into_iter().map(|a| (a.change, a.state)).collect();
        assert_eq!(states["c1"], ActionState::Superseded);
    })
    .await;
}
