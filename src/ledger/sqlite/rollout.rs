//! The roll-out record in SQLite: the freeze in force and the number of roll-out state changes
//! (freezes and their ends) so far, which names each change's events.

use rusqlite::{Connection, params};

use super::outbox::insert_events;
use super::{SqliteLedger, Time, exec, first, row};
use crate::ledger::{FreezeChange, FreezeEvents, LedgerError, ROLLOUT_WATCH, RolloutControl, rules};
use builder_monitor_core::rollout::Freeze;
use builder_monitor_core::schedule::timestamp;
use chrono::{DateTime, Utc};

impl RolloutControl for SqliteLedger {
    async fn set_freeze(
        &self,
        freeze: Option<Freeze>,
        events: FreezeEvents,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<FreezeChange, LedgerError> {
        self.with(move |conn| {
            let tx = conn.transaction()?;
            let before = read_freeze(&tx)?;
            let flip = rules::freeze(before.as_ref(), freeze.as_ref());
            match (&before, &flip.after) {
                // A second freeze: the first one's time and author stay as stored.
                (Some(_), Some(f)) => exec(&tx, "UPDATE rollout SET reason = ?1 WHERE id = 1", params![f.reason])?,
                (None, Some(f)) => exec(
                    &tx,
                    "INSERT INTO rollout (id, frozen_since, reason, frozen_by) VALUES (1, ?1, ?2, ?3)
                     ON CONFLICT (id) DO UPDATE SET frozen_since = excluded.frozen_since, reason = excluded.reason,
                         frozen_by = excluded.frozen_by",
                    params![timestamp(f.since), f.reason, f.by],
                )?,
                // The row stays: it keeps the count.
                (_, None) => exec(
                    &tx,
                    "UPDATE rollout SET frozen_since = NULL, reason = NULL, frozen_by = NULL WHERE id = 1",
                    [],
                )?,
            };
            let mut recorded = Vec::new();
            if flip.flips {
                exec(&tx, "UPDATE rollout SET changes = changes + 1 WHERE id = 1", [])?;
                let sequence: i64 = row(&tx, "SELECT changes FROM rollout WHERE id = 1", [], |r| r.get("changes"))?;
                let (made, deliveries) = events(sequence.max(0) as u64, before.as_ref());
                insert_events(&tx, ROLLOUT_WATCH, now, &made, None, &deliveries, history)?;
                recorded = made;
            }
            tx.commit()?;
            Ok(FreezeChange { before, events: recorded })
        })
        .await
    }

    async fn freeze_state(&self) -> Result<Option<Freeze>, LedgerError> {
        self.with(|conn| read_freeze(conn)).await
    }
}

/// The freeze in force: the roll-out row while it names one (an unfrozen row keeps only the count).
pub(super) fn read_freeze(conn: &Connection) -> Result<Option<Freeze>, LedgerError> {
    first(
        conn,
        "SELECT frozen_since, reason, frozen_by FROM rollout WHERE id = 1 AND frozen_since IS NOT NULL",
        [],
        |r| {
            Ok(Freeze { since: r.get::<_, Time>("frozen_since")?.0, reason: r.get("reason")?, by: r.get("frozen_by")? })
        },
    )
}
