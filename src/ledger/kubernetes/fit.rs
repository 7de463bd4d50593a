//! Keeps a watch's entry under the server's 1 MiB limit on a ConfigMap's data: when a write would
//! pass [`ENTRY_LIMIT`], the entry drops its oldest history first — events no delivery still
//! waits for, then finished actions — and counts what it dropped in a note (`trimmed`), which the
//! daemon logs. What is still to be done is never dropped: pending deliveries and their events,
//! open actions (pending, running, held, awaiting approval, holding their image) and every action
//! of a change that still has one open, the newest action of each image and kind (what
//! `status` and the next rebase read), tag intents, the pin and its history. An entry that holds
//! more than the limit of these alone is not written: the write fails naming the watch and its
//! size, and the ledger keeps what it had.

use std::collections::{BTreeMap, HashSet};

use builder_monitor_core::plan::ActionKind;
use builder_monitor_core::rollout::ActionState;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::WatchDoc;
use crate::ledger::DeliveryState;

/// The most JSON one entry holds: the server refuses a ConfigMap whose data passes 1,048,576
/// bytes; the rest is room for the key and the encoding's escapes.
pub(super) const ENTRY_LIMIT: usize = 1_000_000;

/// What trimming has dropped from an entry so far, and when it last did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Trimmed {
    pub(super) events: u64,
    pub(super) actions: u64,
    #[serde(with = "crate::ledger::time::millis")]
    pub(super) last: DateTime<Utc>,
}

/// When an action was created and updated, and its key: the largest is the newest of its image and kind.
type Newest = (DateTime<Utc>, DateTime<Utc>, String);

fn size<T: Serialize>(row: &T) -> usize {
    // Its text and the comma before it.
    serde_json::to_string(row).map_or(0, |t| t.len() + 1)
}

impl WatchDoc {
    /// Drops the oldest history until the entry's JSON, `len` bytes now, fits `limit`; returns what
    /// this call dropped (events, actions), or `None` when what must be kept alone passes it.
    pub(super) fn fit(&mut self, len: usize, limit: usize, now: DateTime<Utc>) -> Option<(u64, u64)> {
        let mut excess = len.saturating_sub(limit);
        if excess == 0 {
            return Some((0, 0));
        }
        let pending: HashSet<String> =
            self.deliveries.iter().filter(|d| d.state == DeliveryState::Pending).map(|d| d.event.clone()).collect();
        // Events, oldest first, that no delivery waits for.
        self.events.sort_by_key(|e| e.seq);
        let mut dropped_events = HashSet::new();
        for e in self.events.iter().filter(|e| !pending.contains(&e.event.id)) {
            if excess == 0 {
                break;
            }
            let freed = size(e) + self.deliveries.iter().filter(|d| d.event == e.event.id).map(size).sum::<usize>();
            excess = excess.saturating_sub(freed);
            dropped_events.insert(e.event.id.clone());
        }
        self.events.retain(|e| !dropped_events.contains(&e.event.id));
        self.deliveries.retain(|d| !dropped_events.contains(&d.event));

        let dropped_actions = self.drop_finished_actions(&mut excess);
        if excess > 0 {
            return None;
        }
        let (events, actions) = (dropped_events.len() as u64, dropped_actions);
        let note = self.trimmed.get_or_insert_with(Default::default);
        note.events += events;
        note.actions += actions;
        note.last = now;
        Some((events, actions))
    }

    /// Drops finished actions, least recently updated first, until `excess` bytes are freed.
    fn drop_finished_actions(&mut self, excess: &mut usize) -> u64 {
        let open = |a: &super::actions::ActionRow| {
            a.holds
                || matches!(
                    a.state,
                    ActionState::Pending | ActionState::Running | ActionState::Held | ActionState::AwaitingApproval
                )
        };
        let busy: HashSet<String> = self.actions.iter().filter(|a| open(a)).map(|a| a.change_id.clone()).collect();
        let mut newest: BTreeMap<(String, ActionKind), Newest> = BTreeMap::new();
        for a in &self.actions {
            let at = (a.created, a.updated, a.key.clone());
            let slot = newest.entry((a.image.clone(), a.kind)).or_insert_with(|| at.clone());
            if at > *slot {
                *slot = at;
            }
        }
        let newest: HashSet<String> = newest.into_values().map(|(_, _, key)| key).collect();
        let mut candidates: Vec<(DateTime<Utc>, String, usize)> = self
            .actions
            .iter()
            .filter(|a| !open(a) && !busy.contains(&a.change_id) && !newest.contains(&a.key))
            .map(|a| (a.updated, a.key.clone(), size(a)))
            .collect();
        candidates.sort();
        let mut dropped = HashSet::new();
        for (_, key, freed) in candidates {
            if *excess == 0 {
                break;
            }
            *excess = excess.saturating_sub(freed);
            dropped.insert(key);
        }
        self.actions.retain(|a| !dropped.contains(&a.key));
        dropped.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn action(key: &str, change: &str, image: &str, state: &str, updated: &str) -> serde_json::Value {
        json!({ "key": key, "change_id": change, "image": image, "kind": "rebase", "state": state, "attempts": 1,
                "next_attempt": "2026-12-07T12:00:00.000Z", "target": {"pad": "x".repeat(1000)}, "detail": null,
                "output_tail": null, "created": updated, "updated": updated })
    }

    #[test]
    fn trimming_drops_old_finished_actions_and_keeps_open_ones_and_the_newest() {
        let t = |m: u32| format!("2026-12-07T12:{m:02}:00.000Z");
        let mut doc: WatchDoc = serde_json::from_value(json!({ "watch": null, "actions": [
            action("old-done", "c1", "a", "succeeded", &t(1)),
            action("running", "c2", "b", "running", &t(2)),
            action("open-change-done", "c2", "c", "succeeded", &t(3)),
            action("newest-a", "c3", "a", "succeeded", &t(4)),
        ]}))
        .unwrap();
        let len = serde_json::to_string(&doc).unwrap().len();
        assert_eq!(doc.fit(len, len - 10, Utc::now()), Some((0, 1)));
        let keys: Vec<&str> = doc.actions.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["running", "open-change-done", "newest-a"]);
        // Only what must be kept is left: it does not fit, and nothing more is dropped.
        assert_eq!(doc.fit(len, 100, Utc::now()), None);
        assert_eq!(doc.actions.len(), 3);
        assert_eq!(doc.trimmed.as_ref().map(|t| t.actions), Some(1));
    }
}
