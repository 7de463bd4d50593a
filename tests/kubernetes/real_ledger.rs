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
