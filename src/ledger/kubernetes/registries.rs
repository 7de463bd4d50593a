//! The registry facts on Kubernetes: a list in the daemon-wide entry of
//! [`ROLLOUT_WATCH`](crate::ledger::ROLLOUT_WATCH), one row per registry host.

use super::KubeLedger;
use crate::ledger::{LedgerError, ROLLOUT_WATCH, RegistryFacts, RegistryRecord};

impl RegistryFacts for KubeLedger {
    async fn record_registry(&self, record: RegistryRecord) -> Result<(), LedgerError> {
        self.modify(ROLLOUT_WATCH, |doc| {
            match doc.registries.iter_mut().find(|r| r.host == record.host) {
                Some(row) => *row = record.clone(),
                None => {
                    doc.registries.push(record.clone());
                    doc.registries.sort_by(|a, b| a.host.cmp(&b.host));
                }
            }
            Ok(())
        })
        .await
    }

    async fn registries(&self) -> Result<Vec<RegistryRecord>, LedgerError> {
        Ok(self.read(ROLLOUT_WATCH).await?.map(|(_, d)| d.registries).unwrap_or_default())
    }
}
