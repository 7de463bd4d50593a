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
