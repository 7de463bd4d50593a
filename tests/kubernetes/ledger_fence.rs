//! The daemon's ConfigMap ledger is fenced by leadership (issue 62 item 1), on the API double: a
//! replica that no longer leads writes nothing — the write is refused naming why and the entry
//! stays as it was — and writes again once it leads.

use crate::support;

use builder_monitor::ledger::{Ledger, LedgerError};
use chrono::Utc;
use support::kube::KubeDouble;

use crate::ledger::{pin, record};

#[tokio::test]
async fn a_replica_that_no_longer_leads_writes_nothing_to_the_ledger() {
    let double = KubeDouble::start().await;
    double.create_namespace("bm");
    let ledger = Ledger::kubernetes(double.client(), "bm", Utc::now());
    let (leading, receiver) = tokio::sync::watch::channel(true);
    ledger.serve_daemon(Some(receiver));
    let mut first = record("b", "2026-11-30T12:00:00Z");
    first.pin = Some(pin("sha256:a"));
    ledger.commit(first).await.unwrap();

    leading.send_replace(false);
    assert!(!ledger.may_write());
    let mut second = record("b", "2026-11-30T12:01:00Z");
    second.pin = Some(pin("sha256:b"));
    let refused = ledger.commit(second.clone()).await.expect_err("a replica not leading does not write");
    assert!(matches!(refused, LedgerError::NotLeading), "{refused}");
    assert!(refused.to_string().contains("this replica no longer leads"), "{refused}");
    let kept = ledger.watch("b").await.unwrap().unwrap();
    assert_eq!(kept.pin.unwrap().digest, "sha256:a", "the entry as it was");

    leading.send_replace(true);
    ledger.commit(second).await.unwrap();
    assert_eq!(ledger.watch("b").await.unwrap().unwrap().pin.unwrap().digest, "sha256:b");
}
