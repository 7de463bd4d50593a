//! The ConfigMap ledger on the real control plane (issue 62 item 2): writers racing on one
//! ConfigMap (two daemons' ledgers, each with its own client and connections) meet the server's
//! 409 on a stale resourceVersion and retry from the fresh object, so nothing either wrote is
//! lost; a ledger opened afresh (a restart) reads back exactly what was written.

use crate::support;

use std::collections::BTreeSet;

use builder_monitor::ledger::{DeliveryKey, Ledger};
use builder_monitor_core::event::{Event, EventType, Subject};
use chrono::Utc;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use support::control_plane::control_plane;

/// Events each of the two writers records, each write on its own task.
const PER_WRITER: usize = 20;

fn event(id: &str) -> Event {
    Event::new(
        id.into(),
        EventType::BuildStarted,
        "2026-12-07T12:00:00Z".into(),
        Subject { name: "b".into(), image: "x".into() },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_on_one_configmap_lose_nothing_and_a_restart_reads_back_all() {
    let ns = control_plane().namespace("ledger").await;
    let writers = [
        Ledger::kubernetes(control_plane().client().await, &ns.name, Utc::now()),
        Ledger::kubernetes(control_plane().client().await, &ns.name, Utc::now()),
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for (w, ledger) in writers.iter().enumerate() {
        for i in 0..PER_WRITER {
            let ledger = ledger.clone();
            tasks.spawn(async move {
                let id = format!("w{w}-e{i}");
                let delivery = DeliveryKey::new(&id, "hook");
                ledger.record_events("b", vec![event(&id)], vec![delivery], 1000, Utc::now()).await
            });
        }
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap().expect("every write lands, retried past the conflicts");
    }

    // One ConfigMap holds the watch's entry; every write made a new resourceVersion of it.
    let configmaps: Api<ConfigMap> = Api::namespaced(ns.client.clone(), &ns.name);
    let entries = configmaps.list(&kube::api::ListParams::default().labels("buildermonitor.dev/ledger=watch")).await;
    assert_eq!(entries.unwrap().items.len(), 1);

    let wanted: BTreeSet<String> = (0..2).flat_map(|w| (0..PER_WRITER).map(move |i| format!("w{w}-e{i}"))).collect();
    let restarted = Ledger::kubernetes(control_plane().client().await, &ns.name, Utc::now());
    for ledger in writers.iter().chain([&restarted]) {
        let events: BTreeSet<String> =
            ledger.events_after(0, 1000).await.unwrap().into_iter().map(|e| e.event.id.clone()).collect();
        assert_eq!(events, wanted);
        let pending: BTreeSet<String> =
            ledger.pending_deliveries().await.unwrap().into_iter().map(|d| d.event.clone()).collect();
        assert_eq!(pending, wanted);
    }
    // The sequence numbers order the events without a repeat.
    let seqs: Vec<i64> = restarted.events_after(0, 1000).await.unwrap().into_iter().map(|e| e.seq).collect();
    assert_eq!(seqs.iter().collect::<BTreeSet<_>>().len(), seqs.len(), "{seqs:?}");
}

/// A watch whose history would pass the server's 1 MiB limit on a ConfigMap's data: each write
/// still lands (the server refuses a larger object with 422), the entry drops its oldest events and
/// says how many in its `trimmed` note, and an old event whose delivery is still pending is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_past_one_mebibyte_is_trimmed_oldest_first_keeping_pending_deliveries() {
    let ns = control_plane().namespace("ledger-limit").await;
    let ledger = Ledger::kubernetes(control_plane().client().await, &ns.name, Utc::now());
    // Kept by its history setting (every event), so only the size limit trims.
    let history = 1_000_000;
    let pending = DeliveryKey::new("pending-0", "hook");
    ledger.record_events("b", vec![event("pending-0")], vec![pending], history, Utc::now()).await.unwrap();
    // 2 KiB events: 100 a write, 800 in all, about 1.8 MB.
    let big = |id: String| {
        let mut e = event(&id);
        e.builder.image = "x".repeat(2048);
        e
    };
    let configmaps: Api<ConfigMap> = Api::namespaced(ns.client.clone(), &ns.name);
    for batch in 0..8 {
        let events = (0..100).map(|i| big(format!("e{batch}-{i:03}"))).collect();
        ledger.record_events("b", events, vec![], history, Utc::now()).await.expect("each write fits the limit");
        let entry =
            configmaps.get(&format!("bm-ledger-{}", &builder_monitor_core::event::stable_id(&["b"])[..20])).await;
        let data = entry.unwrap().data.unwrap();
        let bytes: usize = data.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(bytes <= 1 << 20, "batch {batch}: {bytes} bytes");
    }

    let ids: Vec<String> = ledger.events_after(0, 10_000).await.unwrap().into_iter().map(|e| e.event.id).collect();
    assert!(ids.contains(&"pending-0".to_string()), "the event a delivery waits for is kept");
    let pending: Vec<String> = ledger.pending_deliveries().await.unwrap().into_iter().map(|d| d.event).collect();
    assert_eq!(pending, ["pending-0"]);
    // The newest are all there; the oldest went first.
    assert!((0..100).all(|i| ids.contains(&format!("e7-{i:03}"))), "{ids:?}");
    assert!(!ids.contains(&"e0-000".to_string()), "{ids:?}");
    assert!(ids.len() < 801, "{} events", ids.len());
    let entries = configmaps.list(&kube::api::ListParams::default().labels("buildermonitor.dev/ledger=watch")).await;
    let entry: serde_json::Value =
        serde_json::from_str(&entries.unwrap().items[0].data.as_ref().unwrap()["ledger.json"]).unwrap();
    let dropped = entry["trimmed"]["events"].as_u64().unwrap_or(0);
    assert_eq!(dropped as usize, 801 - ids.len(), "the note counts what was dropped: {}", entry["trimmed"]);
}
