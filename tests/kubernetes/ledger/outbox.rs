//! The outbox's order, on both ledgers: deliveries to one alert about one subject go out in the
//! order their events were recorded, a failing one holding back only its own subject's; and roll-out
//! state changes made within one instant are each recorded, with ids of their own.

use builder_monitor::config::Config;
use builder_monitor::ledger::{DeliveryUpdate, Ledger};
use builder_monitor_core::event::EventType;

use super::{at, both, event, key, record};

/// The (event, alert) pairs due at `now`, in the order the ledger answers them.
async fn due(ledger: &Ledger, now: &str) -> Vec<(String, String)> {
    let due = ledger.due_deliveries(at(now), 100).await.unwrap();
    due.into_iter().map(|d| (d.event.id, d.alert)).collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(e, a)| (e.to_string(), a.to_string())).collect()
}

const NOW: &str = "2026-11-30T12:10:00.000Z";
const LATER: &str = "2026-11-30T13:00:00.000Z";

#[tokio::test]
async fn a_failing_delivery_holds_back_later_ones_of_its_subject_only() {
    both(|ledger| async move {
        // Builder b: changed, then failing, then recovered; builder c: changed in between. The
        // alert `hook` gets them all, `chat` only b's failure and recovery.
        let mut r = record("b", "2026-11-30T12:00:00Z");
        r.events = vec![event("b1", EventType::BuilderChanged, "b"), event("b2", EventType::CheckFailed, "b")];
        r.deliveries = vec![key("b1", "hook"), key("b2", "hook"), key("b2", "chat")];
        ledger.commit(r).await.unwrap();
        let mut r = record("c", "2026-11-30T12:01:00Z");
        r.events = vec![event("c1", EventType::BuilderChanged, "c")];
        r.deliveries = vec![key("c1", "hook")];
        ledger.commit(r).await.unwrap();
        let mut r = record("b", "2026-11-30T12:02:00Z");
        r.events = vec![event("b3", EventType::CheckRecovered, "b")];
        r.deliveries = vec![key("b3", "hook"), key("b3", "chat")];
        ledger.commit(r).await.unwrap();

        // Only the oldest of each (alert, subject), oldest event first.
        assert_eq!(due(&ledger, NOW).await, pairs(&[("b1", "hook"), ("b2", "chat"), ("c1", "hook")]));

        // b1 fails at hook: b's later events wait for it, c's and chat's do not.
        let retry = DeliveryUpdate::Retry { next_attempt: at(LATER), status: "HTTP 503".into() };
        ledger.update_delivery("b1", "hook", retry, at(NOW)).await.unwrap();
        assert_eq!(due(&ledger, NOW).await, pairs(&[("b2", "chat"), ("c1", "hook")]));
        let sent = || DeliveryUpdate::Sent { status: "HTTP 200".into() };
        ledger.update_delivery("c1", "hook", sent(), at(NOW)).await.unwrap();
        ledger.update_delivery("b2", "chat", sent(), at(NOW)).await.unwrap();
        assert_eq!(due(&ledger, NOW).await, pairs(&[("b3", "chat")]));
        ledger.update_delivery("b3", "chat", sent(), at(NOW)).await.unwrap();
        assert!(due(&ledger, NOW).await.is_empty(), "b2 and b3 wait at hook behind b1");
        // The next due is b1's retry; with b1 in flight, b's lane has nothing due at all.
        assert_eq!(ledger.next_delivery_at(&[]).await.unwrap(), Some(at(LATER)));
        assert_eq!(ledger.next_delivery_at(&[key("b1", "hook")]).await.unwrap(), None);

        // Due again, b1 is the one answered; once it is dead, b2 and then b3 follow in order.
        assert_eq!(due(&ledger, LATER).await, pairs(&[("b1", "hook")]));
        ledger
            .update_delivery("b1", "hook", DeliveryUpdate::Dead { status: "HTTP 400".into() }, at(LATER))
            .await
            .unwrap();
        assert_eq!(due(&ledger, LATER).await, pairs(&[("b2", "hook")]));
        ledger.update_delivery("b2", "hook", sent(), at(LATER)).await.unwrap();
        assert_eq!(due(&ledger, LATER).await, pairs(&[("b3", "hook")]));
        ledger.update_delivery("b3", "hook", sent(), at(LATER)).await.unwrap();
        assert!(due(&ledger, LATER).await.is_empty());
        assert_eq!(ledger.next_delivery_at(&[]).await.unwrap(), None);
    })
    .await;
}

#[tokio::test]
async fn roll_out_changes_within_one_instant_are_each_recorded_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[[builders]]\nname = \"jammy\"\nimage = \"docker.io/paketobuildpacks/builder-jammy-base:latest\"\n\n\
                [[alerts]]\nname = \"hook\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:9/hook\"\nevents = [\"rollout.*\"]\n";
    let config = Config::parse(&dir.path().join("config.toml"), text).unwrap();
    let config = &config;
    both(|ledger| async move {
        // One instant, as requests within one clock tick see it.
        let now = at("2026-11-30T12:00:00.250Z");
        let steps = [Some("incident"), None, Some("second incident"), None];
        for (n, step) in steps.into_iter().enumerate() {
            let changed = match step {
                Some(reason) => {
                    builder_monitor::rollout::freeze(config, &ledger, Some(reason.into()), "dan", now).await
                }
                None => builder_monitor::rollout::unfreeze(config, &ledger, "dan", now).await,
            };
            assert!(changed.unwrap().changed, "step {n}");
        }
        let events = ledger.events_after(0, 100).await.unwrap();
        let recorded: Vec<(&str, Option<&str>)> = events
            .iter()
            .map(|e| (e.event.event_type.as_str(), e.event.rollout.as_ref().and_then(|r| r.reason.as_deref())))
            .collect();
        assert_eq!(
            recorded,
            [
                ("rollout.frozen", Some("incident")),
                ("rollout.unfrozen", Some("incident")),
                ("rollout.frozen", Some("second incident")),
                ("rollout.unfrozen", Some("second incident")),
            ]
        );
        let ids: std::collections::BTreeSet<&str> = events.iter().map(|e| e.event.id.as_str()).collect();
        assert_eq!(ids.len(), 4, "four changes, four ids");

        // Delivered one by one, in that order.
        let mut sent = Vec::new();
        while let [head] = ledger.due_deliveries(now, 100).await.unwrap().as_slice() {
            sent.push(head.event.id.clone());
            let update = DeliveryUpdate::Sent { status: "HTTP 200".into() };
            ledger.update_delivery(&head.event.id, "hook", update, now).await.unwrap();
        }
        assert_eq!(sent, events.iter().map(|e| e.event.id.clone()).collect::<Vec<_>>());
    })
    .await;
}

/// Two writers of one Kubernetes ledger whose counters started apart — a daemon running for an
/// hour, a command line started now — keep an entry's events in the order they were written, so
/// the outbox sends them in that order.
#[tokio::test]
async fn kubernetes_writers_started_apart_keep_the_order_they_wrote_in() {
    let double = super::support::kube::KubeDouble::start().await;
    double.create_namespace("bm");
    let daemon = Ledger::kubernetes(double.client(), "bm", at("2026-11-30T11:00:00Z"));
    let cli = Ledger::kubernetes(double.client(), "bm", at("2026-11-30T12:00:00Z"));
    let now = at("2026-11-30T12:00:00Z");
    let write = |ledger: Ledger, id: &'static str, t: EventType| async move {
        ledger.record_events("b", vec![event(id, t, "b")], vec![key(id, "hook")], 10, now).await.unwrap();
    };
    write(cli.clone(), "first", EventType::BuilderChanged).await;
    write(daemon.clone(), "second", EventType::CheckFailed).await;
    write(cli, "third", EventType::CheckRecovered).await;
    let events = daemon.events_after(0, 10).await.unwrap();
    assert_eq!(events.iter().map(|e| e.event.id.as_str()).collect::<Vec<_>>(), ["first", "second", "third"]);
    assert_eq!(due(&daemon, LATER).await, pairs(&[("first", "hook")]));
}
