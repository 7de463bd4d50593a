//! The registry facts in SQLite: one row per registry host.

use rusqlite::params;

use super::{SqliteLedger, Time, all, exec};
use crate::ledger::{LedgerError, RegistryFacts, RegistryRecord};
use builder_monitor_core::schedule::timestamp;

/// 14: what each registry answered (whether it serves the referrers API) and when.
pub(super) const MIGRATION: &str = r#"
    CREATE TABLE registries (
        host TEXT PRIMARY KEY,
        referrers INTEGER NOT NULL,
        probed TEXT NOT NULL
    );
"#;

impl RegistryFacts for SqliteLedger {
    async fn record_registry(&self, record: RegistryRecord) -> Result<(), LedgerError> {
        self.with(move |conn| {
            exec(
                conn,
                "INSERT INTO registries (host, referrers, probed) VALUES (?1, ?2, ?3)
                 ON CONFLICT (host) DO UPDATE SET referrers = excluded.referrers, probed = excluded.probed",
                params![record.host, record.referrers, timestamp(record.probed)],
            )?;
            Ok(())
        })
        .await
    }

    async fn registries(&self) -> Result<Vec<RegistryRecord>, LedgerError> {
        self.with(|conn| {
            all(conn, "SELECT host, referrers, probed FROM registries ORDER BY host", [], |r| {
                Ok(RegistryRecord {
                    host: r.get("host")?,
                    referrers: r.get("referrers")?,
                    probed: r.get::<_, Time>("probed")?.0,
                })
            })
        })
        .await
    }
}
