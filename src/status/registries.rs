//! The registries the app images live on, with what each answered when the daemon asked
//! (whether it serves the OCI 1.1 referrers API), as the ledger recorded it.

use serde::Serialize;

use crate::config::Config;
use crate::ledger::{Ledger, LedgerError};
use builder_monitor_core::schedule::timestamp;

/// One registry of the app images.
#[derive(Debug, Clone, Serialize)]
pub struct RegistryStatus {
    pub host: String,
    /// Whether it serves the referrers API (no: signature and attestation bundles are listed under
    /// the referrers tag schema's `sha256-<hex>` index); `null` until the daemon asked, at the
    /// first signature it wrote there.
    pub referrers: Option<bool>,
    /// When the daemon asked.
    pub probed: Option<String>,
}

/// Each registry of `config`'s app images, once, by host.
pub async fn collect(config: &Config, ledger: &Ledger) -> Result<Vec<RegistryStatus>, LedgerError> {
    let mut hosts: Vec<&str> = config.images.iter().map(|i| i.image.registry()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    if hosts.is_empty() {
        return Ok(Vec::new());
    }
    let recorded = ledger.registries().await?;
    Ok(hosts
        .into_iter()
        .map(|host| {
            let record = recorded.iter().find(|r| r.host == host);
            RegistryStatus {
                host: host.to_string(),
                referrers: record.map(|r| r.referrers),
                probed: record.map(|r| timestamp(r.probed)),
            }
        })
        .collect())
}
