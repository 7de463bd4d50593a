//! Both ledgers for one scenario: embedded SQLite and ConfigMaps on the Kubernetes API double.

use builder_monitor::ledger::Ledger;
use chrono::Utc;

use super::kube::KubeDouble;

/// Runs `scenario` against a fresh SQLite ledger and a fresh Kubernetes ledger.
pub async fn both<F, Fut>(scenario: F)
where
    F: Fn(Ledger) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    scenario(Ledger::open(&dir.path().join("ledger.db")).unwrap()).await;
    let double = KubeDouble::start().await;
    double.create_namespace("bm");
    scenario(Ledger::kubernetes(double.client(), "bm", Utc::now())).await;
}
