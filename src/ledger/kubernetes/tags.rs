//! Tag writes in the Kubernetes ledger: tag moves, numbered with the entry's events, and
//! write-ahead intents, which live in the entry that holds their action (a rollback's in its
//! image's builder entry), beside the tag moves they become.
//!
//! The supersession check reads every entry and then writes one, so it is not one transaction as
//! in SQLite: a newer change recorded between the two lets this write go ahead. Order still holds,
//! because the newer action cannot start while this one runs (one action per image), and it
//! writes after it.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

use super::actions::ActionRow;
use super::{KubeLedger, WatchDoc};
use crate::ledger::rules;
use crate::ledger::{ActionState, DeliveryKey, LedgerError, TagIntent, TagMove, TagWrites, WriteGrant};
use builder_monitor_core::event::Event;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct TagMoveRow {
    pub(super) seq: i64,
    #[serde(flatten)]
    pub(super) tag_move: TagMove,
}

impl WatchDoc {
    /// Adds a tag move, keeping the image's newest `history` (at least one).
    pub(super) fn add_tag_move(&mut self, m: &TagMove, history: usize, next_seq: &AtomicI64) {
        let mut tag_move = m.clone();
        tag_move.time = tag_move.time.trunc_subsecs(3);
        self.tag_moves.push(TagMoveRow { seq: next_seq.fetch_add(1, Ordering::Relaxed), tag_move });
        let mut kept = 0;
        for i in (0..self.tag_moves.len()).rev() {
            if self.tag_moves[i].tag_move.image == m.image {
                kept += 1;
                if kept > history.max(1) {
                    self.tag_moves.remove(i);
                }
            }
        }
    }
}

impl KubeLedger {
    /// The change of the newest action recorded for the same image after action `key`, if any.
    pub(super) async fn newer_change(&self, key: &str) -> Result<Option<String>, LedgerError> {
        let rows: Vec<ActionRow> = self.all().await?.into_iter().flat_map(|(_, d)| d.actions).collect();
        Ok(rules::newer_change(&rows, key))
    }
}

impl TagWrites for KubeLedger {
    async fn begin_tag_write(&self, watch: &str, intent: TagIntent) -> Result<WriteGrant, LedgerError> {
        let holder = match &intent.action {
            Some(key) => {
                let docs = self.all().await?;
                let rows: Vec<ActionRow> = docs.iter().flat_map(|(_, d)| d.actions.iter().cloned()).collect();
                if !rows.iter().any(|a| &a.key == key && a.state == ActionState::Running) {
                    return Ok(WriteGrant::NotRunning);
                }
                if let Some(by) = rules::newer_change(&rows, key) {
                    return Ok(WriteGrant::Superseded { by });
                }
                match self.holder(|d| d.actions.iter().any(|a| &a.key == key)).await? {
                    Some(holder) => holder,
                    None => return Ok(WriteGrant::NotRunning),
                }
            }
            None => watch.to_string(),
        };
        self.modify(&holder, |doc| {
            if let Some(key) = &intent.action
                && !doc.actions.iter().any(|a| &a.key == key && a.state == ActionState::Running)
            {
                return Ok(WriteGrant::NotRunning);
            }
            let mut intent = intent.clone();
            intent.time = intent.time.trunc_subsecs(3);
            doc.tag_intents.retain(|i| i.image != intent.image);
            doc.tag_intents.push(intent);
            Ok(WriteGrant::Granted)
        })
        .await
    }

    async fn tag_intents(&self) -> Result<Vec<TagIntent>, LedgerError> {
        let mut out: Vec<TagIntent> = self.all().await?.into_iter().flat_map(|(_, d)| d.tag_intents).collect();
        out.sort_by(|a, b| a.image.cmp(&b.image));
        Ok(out)
    }

    async fn end_tag_write(&self, image: &str, action: Option<&str>) -> Result<(), LedgerError> {
        let matches = |i: &TagIntent| i.image == image && i.action.as_deref() == action;
        for (_, doc) in self.all().await? {
            let Some(watch) = doc.watch.as_ref().map(|w| w.name.clone()) else { continue };
            if doc.tag_intents.iter().any(matches) {
                self.modify(&watch, |d| {
                    d.tag_intents.retain(|i| !matches(i));
                    Ok(())
                })
                .await?;
            }
        }
        Ok(())
    }

    async fn record_tag_move(&self, watch: &str, tag_move: TagMove, history: usize) -> Result<(), LedgerError> {
        let seq = self.seq.clone();
        self.modify(watch, |doc| {
            doc.add_tag_move(&tag_move, history, &seq);
            doc.tag_intents.retain(|i| i.image != tag_move.image || i.action.is_some());
            Ok(())
        })
        .await
    }

    async fn record_rollback(
        &self,
        watch: &str,
        tag_move: TagMove,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let seq = self.seq.clone();
        self.modify(watch, |doc| {
            doc.add_tag_move(&tag_move, history, &seq);
            doc.tag_intents.retain(|i| i.image != tag_move.image || i.action.is_some());
            doc.add_events(&events, &deliveries, now, history, &seq);
            Ok(())
        })
        .await
    }

    async fn tag_moves(&self, image: Option<&str>, limit: usize) -> Result<Vec<TagMove>, LedgerError> {
        let mut rows: Vec<TagMoveRow> = self
            .all()
            .await?
            .into_iter()
            .flat_map(|(_, d)| d.tag_moves)
            .filter(|m| image.is_none_or(|i| m.tag_move.image == i))
            .collect();
        rows.sort_by_key(|m| std::cmp::Reverse((m.tag_move.time, m.seq)));
        Ok(rows.into_iter().take(limit).map(|m| m.tag_move).collect())
    }
}
