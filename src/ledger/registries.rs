//! What the daemon learned about the registries it writes to (whether each serves the OCI 1.1
//! referrers API), kept so `status` and the page, which read only the ledger, can show it; and
//! the contract both backends keep for it ([`RegistryFacts`]).

use std::future::Future;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::LedgerError;

/// One registry's answers, as the daemon last asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryRecord {
    /// The registry host as the images name it (`registry.example.com:5000`).
    pub host: String,
    /// Whether it serves `GET /v2/<name>/referrers/<digest>` (no: bundles are listed under the
    /// referrers tag schema's `sha256-<hex>` index).
    pub referrers: bool,
    /// When the daemon asked.
    #[serde(with = "super::time::seconds")]
    pub probed: DateTime<Utc>,
}

/// The registry facts contract.
pub trait RegistryFacts {
    /// Records `record`, replacing what the ledger held for its host.
    fn record_registry(&self, record: RegistryRecord) -> impl Future<Output = Result<(), LedgerError>> + Send;

    /// Every registry recorded, by host.
    fn registries(&self) -> impl Future<Output = Result<Vec<RegistryRecord>, LedgerError>> + Send;
}

impl super::Ledger {
    /// Records what `registry` learned about the registries' referrers API and has not seen
    /// recorded yet (asked once per registry by a process's first signature there), so `status` and
    /// the page show it: the daemon after each action's attempt, a command after its writes. A
    /// failed write is logged, and tried again the next time.
    pub async fn record_referrers_answers(&self, registry: &crate::registry::Registry, now: DateTime<Utc>) {
        for (host, referrers) in registry.referrers_answers_unrecorded() {
            let record = RegistryRecord { host: host.clone(), referrers, probed: now };
            match self.record_registry(record).await {
                Ok(()) => registry.mark_referrers_recorded(&host),
                Err(err) => tracing::warn!(registry = %host, error = %err, "cannot record what the registry answered"),
            }
        }
    }
}
