//! Ledgers written by an older build still read: `tests/fixtures/ledger-0.1.0.*` hold a SQLite
//! ledger and the Kubernetes ledger's ConfigMaps with one action of every kind in several states,
//! with progress (a build placed in a pool, a deploy's workloads, a gitops commit), as the ledger
//! code of 0.1.0 wrote them; `ledger-0.1.0.expected.json` is every action as it was written. The
//! generator was `tests/ledger/fixture_writer.rs` at 2dd8a5b (see `git log -- tests/fixtures/ledger-0.1.0.db`).

use super::*;
use builder_monitor::ledger::{ActionRecord, LatestAction};
use serde_json::Value;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ledger-0.1.0");

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURE}.expected.json")).unwrap()).unwrap()
}

/// Every action as read back: its kind, image, state, target and progress (as JSON, so what is
/// compared is what the ledger holds, whatever the types that read it).
async fn read_back(ledger: &Ledger) -> Value {
    let records: Vec<ActionRecord> = ledger.actions(100).await.unwrap();
    let mut out = serde_json::Map::new();
    for kind in ActionKind::ALL {
        for LatestAction { record, target } in ledger.latest_actions(kind).await.unwrap() {
            let full = records.iter().find(|r| r.key == record.key).unwrap();
            assert_eq!(full, &record);
            out.insert(
                record.key.clone(),
                json!({
                    "kind": record.action, "image": record.image, "state": record.state, "wave": record.wave,
                    "holds": record.holds, "target": target, "progress": record.progress,
                }),
            );
        }
    }
    assert_eq!(out.len(), records.len(), "every action is its image's newest of its kind");
    let running: Vec<Value> = ledger
        .running_actions()
        .await
        .unwrap()
        .into_iter()
        .map(|a| json!({ "key": a.key, "target": a.target.ok(), "progress": a.progress }))
        .collect();
    json!({ "actions": out, "running": running })
}

#[tokio::test]
async fn a_sqlite_ledger_of_0_1_0_reads_every_action_back() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    std::fs::copy(format!("{FIXTURE}.db"), &db).unwrap();
    let ledger = Ledger::open(&db).unwrap();
    assert_eq!(read_back(&ledger).await, expected());
}

#[tokio::test]
async fn a_kubernetes_ledger_of_0_1_0_reads_every_action_back() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let double = KubeDouble::start().await;
    double.create_namespace("bm");
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(double.client(), "bm");
    let objects: Vec<ConfigMap> =
        serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURE}.kube.json")).unwrap()).unwrap();
    assert!(!objects.is_empty(), "the builder's entry");
    for object in objects {
        api.create(&Default::default(), &object).await.unwrap();
    }
    let ledger = Ledger::kubernetes(double.client(), "bm", at("2026-12-01T00:00:00Z"));
    assert_eq!(read_back(&ledger).await, expected());
}
