//! Checks and pins on Kubernetes: each entry's watch record, its pinned digests (newest pin
//! first) and its changes.

use std::sync::atomic::AtomicI64;

use chrono::SubsecRound;
use serde::{Deserialize, Serialize};

use super::{KubeLedger, WatchDoc};
use crate::ledger::time;
use crate::ledger::{
    ChangeRecord, CheckFailure, CheckRecord, Checks, LedgerError, PinRecord, PinSummary, PinnedDigest, Touch,
    WatchRecord,
};
use chrono::{DateTime, Utc};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Digest {
    digest: String,
    #[serde(with = "time::seconds")]
    first_seen: DateTime<Utc>,
    #[serde(with = "time::seconds")]
    last_pinned: DateTime<Utc>,
    /// Its platform manifests' digests (none for a single manifest, or a pin written before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    platforms: Vec<String>,
}

impl WatchDoc {
    /// [`Checks::commit`] on one document (its actions' supersessions in other entries aside).
    /// Answers the `(image, change)` of each action it added (`WatchDoc::add_actions`).
    fn commit(&mut self, r: &CheckRecord, next_seq: &AtomicI64) -> Result<Vec<(String, String)>, LedgerError> {
        // Times kept to the second (`time`) or the millisecond (`now`), as they are written.
        let time = r.time.trunc_subsecs(0);
        let now = r.time.trunc_subsecs(3);
        let watch = self.watch.get_or_insert_with(|| WatchRecord {
            name: r.watch.clone(),
            kind: r.kind,
            image: r.image.clone(),
            pin: None,
            metadata: None,
            first_seen: time,
            last_check: None,
            last_ok: None,
            last_error_reason: None,
            last_error: None,
            last_change: None,
            consecutive_failures: 0,
            failing_since: None,
            pending: None,
            moves: 0,
            failure_runs: 0,
        });
        // Failure runs are counted per image, as the check counts them (`decide`).
        let failed = r.outcome.is_err();
        if watch.image != r.image {
            watch.failure_runs = u64::from(failed);
        } else if failed && watch.consecutive_failures == 0 {
            watch.failure_runs += 1;
        }
        watch.kind = r.kind;
        watch.image = r.image.clone();
        watch.last_check = Some(time);
        match &r.outcome {
            Ok(()) => {
                watch.last_ok = Some(true);
                watch.last_error_reason = None;
                watch.last_error = None;
                watch.consecutive_failures = 0;
                watch.failing_since = None;
            }
            Err(CheckFailure { reason, message }) => {
                watch.last_ok = Some(false);
                watch.last_error_reason = Some(reason.clone());
                watch.last_error = Some(message.clone());
                watch.consecutive_failures += 1;
                watch.failing_since.get_or_insert(time);
            }
        }
        watch.pending = r.pending.clone();
        if let Some(pin) = &r.pin {
            watch.pin = Some(PinRecord {
                digest: pin.digest.clone(),
                reference: pin.reference.clone(),
                media_type: pin.media_type.clone(),
                platforms: pin.platforms.clone(),
                since: time,
            });
            watch.metadata = pin.metadata.clone();
            // Newest pin first, by pin order: two pins within one second must not tie.
            let first_seen = match self.digests.iter().position(|d| d.digest == pin.digest) {
                Some(i) => self.digests.remove(i).first_seen,
                None => time,
            };
            let mut platforms: Vec<String> = pin.platforms.values().cloned().collect();
            platforms.sort();
            platforms.dedup();
            self.digests.insert(0, Digest { digest: pin.digest.clone(), first_seen, last_pinned: time, platforms });
            self.digests.truncate(r.history + 1);
        }
        if let Some(c) = &r.change {
            if !self.changes.iter().any(|x| x.id == c.id) {
                self.changes.push(c.clone());
            }
            let watch = self.watch.as_mut().expect("created above");
            watch.moves = watch.moves.max(c.seq);
            watch.last_change = Some(c.detected);
            let floor = c.seq as i64 - r.history as i64;
            self.changes.retain(|x| x.seq as i64 > floor);
            self.changes.sort_by_key(|x| x.seq);
        }
        let added = self.add_actions(&r.actions, now)?;
        self.add_events(&r.events, &r.deliveries, now, r.history, next_seq);
        Ok(added)
    }
}

impl Checks for KubeLedger {
    async fn watch(&self, name: &str) -> Result<Option<WatchRecord>, LedgerError> {
        Ok(self.read(name).await?.and_then(|(_, d)| d.watch))
    }

    async fn watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        let mut out: Vec<WatchRecord> = self.all().await?.into_iter().filter_map(|(_, d)| d.watch).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn failing_watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        Ok(self.watches().await?.into_iter().filter(|w| w.consecutive_failures > 0).collect())
    }

    /// Every entry is an object read whole here, metadata and all.
    async fn pins(&self) -> Result<Vec<PinSummary>, LedgerError> {
        Ok(self.watches().await?.iter().map(WatchRecord::summary).collect())
    }

    async fn has_pinned(&self, watch: &str, digest: &str) -> Result<bool, LedgerError> {
        Ok(self.read(watch).await?.is_some_and(|(_, d)| d.digests.iter().any(|x| x.digest == digest)))
    }

    async fn history(&self, watch: &str, limit: usize) -> Result<Vec<PinnedDigest>, LedgerError> {
        let digests = self.read(watch).await?.map(|(_, d)| d.digests).unwrap_or_default();
        Ok(digests
            .into_iter()
            .take(limit)
            .map(|d| PinnedDigest { digest: d.digest, first_seen: d.first_seen, platforms: d.platforms })
            .collect())
    }

    async fn touch(&self, touches: &[Touch]) -> Result<(), LedgerError> {
        for t in touches {
            let time = t.time.trunc_subsecs(0);
            self.modify(&t.watch, |doc| {
                // The rule of `Checks::touch`.
                if let Some(w) = doc.watch.as_mut()
                    && *w.image == *t.image
                    && w.last_ok == Some(true)
                    && w.last_check.is_none_or(|c| c < time)
                {
                    w.last_check = Some(time);
                }
                Ok(())
            })
            .await?;
        }
        Ok(())
    }

    async fn commit(&self, record: CheckRecord, touches: &[Touch]) -> Result<(), LedgerError> {
        let seq = self.seq.clone();
        let added = self.modify(&record.watch.clone(), |doc| doc.commit(&record, &seq)).await?;
        self.supersede_elsewhere(&record.watch, &added, record.time.trunc_subsecs(3)).await?;
        self.touch(touches).await
    }

    async fn changes(&self, watch: Option<&str>, limit: usize) -> Result<Vec<ChangeRecord>, LedgerError> {
        let docs = match watch {
            Some(w) => self.read(w).await?.map(|(_, d)| vec![d]).unwrap_or_default(),
            None => self.all().await?.into_iter().map(|(_, d)| d).collect(),
        };
        let mut changes: Vec<ChangeRecord> = docs.into_iter().flat_map(|d| d.changes).collect();
        changes.sort_by(|a, b| b.detected.cmp(&a.detected).then(b.seq.cmp(&a.seq)));
        changes.truncate(limit);
        Ok(changes)
    }
}
