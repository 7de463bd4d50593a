//! The roll-out record on Kubernetes: the freeze in force and the number of roll-out state
//! changes so far, in the entry of [`ROLLOUT_WATCH`].

use super::KubeLedger;
use crate::ledger::{FreezeChange, FreezeEvents, LedgerError, ROLLOUT_WATCH, RolloutControl, rules};
use builder_monitor_core::rollout::Freeze;
use chrono::{DateTime, Utc};

impl RolloutControl for KubeLedger {
    // One write of the roll-out entry: the flip's count and its events are written together, so a
    // conflicting writer makes this one count again from what it wrote.
    async fn set_freeze(
        &self,
        freeze: Option<Freeze>,
        events: FreezeEvents,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<FreezeChange, LedgerError> {
        let seq = self.seq.clone();
        self.modify(ROLLOUT_WATCH, |doc| {
            let before = doc.freeze.clone();
            let flip = rules::freeze(before.as_ref(), freeze.as_ref());
            doc.freeze = flip.after;
            let mut recorded = Vec::new();
            if flip.flips {
                doc.rollout_changes += 1;
                let (made, deliveries) = events(doc.rollout_changes, before.as_ref());
                doc.add_events(&made, &deliveries, now, history, &seq);
                recorded = made;
            }
            Ok(FreezeChange { before, events: recorded })
        })
        .await
    }

    async fn freeze_state(&self) -> Result<Option<Freeze>, LedgerError> {
        Ok(self.read(ROLLOUT_WATCH).await?.and_then(|(_, d)| d.freeze))
    }
}
