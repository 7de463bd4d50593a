//! The ledger on Kubernetes: one ConfigMap per watch holds its whole entry (pin, history, changes,
//! events, deliveries, actions), so a check outcome is one write; every write carries the
//! resourceVersion it read, so two writers can never both win, and a conflict is re-read and
//! retried.

mod freeze;
mod outbox;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use serde::{Deserialize, Serialize};

mod intents;

use super::*;
use builder_monitor_core::event::stable_id;
use chrono::SubsecRound;

const LABEL: &str = "buildermonitor.dev/ledger";
const KEY: &str = "ledger.json";
/// Conflicting writes tolerated before a write gives up (the next check or attempt tries again);
/// between tries a random pause that doubles, so contending writers fall out of step.
const ATTEMPTS: u32 = 12;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Digest {
    digest: String,
    #[serde(with = "time::seconds")]
    first_seen: DateTime<Utc>,
    #[serde(with = "time::seconds")]
    last_pinned: DateTime<Utc>,
    /// Its platform manifests' digests (none for a single manifest, or a pin written before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    platforms: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct EventRow {
    seq: i64,
    event: Event,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct DeliveryRow {
    event: String,
    alert: String,
    state: DeliveryState,
    attempts: u32,
    #[serde(with = "time::millis")]
    next_attempt: DateTime<Utc>,
    last_status: Option<String>,
    #[serde(with = "time::millis")]
    created: DateTime<Utc>,
    #[serde(with = "time::millis")]
    updated: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ActionRow {
    key: String,
    change_id: String,
    image: String,
    kind: ActionKind,
    state: ActionState,
    attempts: u32,
    #[serde(with = "time::millis")]
    next_attempt: DateTime<Utc>,
    target: serde_json::Value,
    detail: Option<String>,
    output_tail: Option<String>,
    /// The local command's process group while `running` (exec runner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    process: Option<ProcessGroup>,
    #[serde(with = "time::millis")]
    created: DateTime<Utc>,
    #[serde(with = "time::millis")]
    updated: DateTime<Utc>,
    #[serde(default = "first_wave", skip_serializing_if = "is_first_wave")]
    wave: u32,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    needs_approval: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    released: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decided_by: Option<String>,
    #[serde(default, with = "time::seconds_opt", skip_serializing_if = "Option::is_none")]
    decided_at: Option<DateTime<Utc>>,
}

/// The wave of an action written before waves existed.
fn first_wave() -> u32 {
    1
}

fn is_first_wave(wave: &u32) -> bool {
    *wave == 1
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct TagMoveRow {
    seq: i64,
    #[serde(flatten)]
    tag_move: TagMove,
}

/// One watch's entry of the ledger.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct WatchDoc {
    watch: Option<WatchRecord>,
    #[serde(default)]
    digests: Vec<Digest>,
    #[serde(default)]
    changes: Vec<ChangeRecord>,
    #[serde(default)]
    events: Vec<EventRow>,
    #[serde(default)]
    deliveries: Vec<DeliveryRow>,
    #[serde(default)]
    actions: Vec<ActionRow>,
    /// Moves of app image tags by this entry's actions (or, for a builder, by `rollback`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tag_moves: Vec<TagMoveRow>,
    /// Tag writes announced and not yet recorded as done (see `intents`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tag_intents: Vec<TagIntent>,
    /// The freeze in force (the entry of [`ROLLOUT_WATCH`] only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    freeze: Option<Freeze>,
    /// Roll-out state changes (freezes and their ends) so far: the last one's sequence number,
    /// which names its events (the entry of [`ROLLOUT_WATCH`] only).
    #[serde(default, skip_serializing_if = "is_zero")]
    rollout_changes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl WatchDoc {
    /// The type of the recorded event `id` (empty when it was pruned).
    fn event_type(&self, id: &str) -> String {
        self.events.iter().find(|e| e.event.id == id).map(|e| e.event.event_type.to_string()).unwrap_or_default()
    }

    /// The same rules as the SQLite ledger's `commit_check`, on one document.
    fn commit(&mut self, r: &CheckRecord, next_seq: &AtomicI64) {
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
        for a in &r.actions {
            for old in self.actions.iter_mut().filter(|o| o.image == a.image && supersedable(o, &a.change_id)) {
                old.state = ActionState::Superseded;
                old.detail = Some(format!("superseded by change {}", a.change_id));
                old.updated = now;
            }
            if !self.actions.iter().any(|o| o.change_id == a.change_id && o.image == a.image) {
                self.actions.push(ActionRow {
                    key: a.key.clone(),
                    change_id: a.change_id.clone(),
                    image: a.image.clone(),
                    kind: a.kind,
                    state: if a.needs_approval { ActionState::AwaitingApproval } else { ActionState::Pending },
                    attempts: 0,
                    next_attempt: now,
                    target: a.target.clone(),
                    detail: None,
                    output_tail: None,
                    process: None,
                    created: now,
                    updated: now,
                    wave: a.wave,
                    needs_approval: a.needs_approval,
                    released: false,
                    decided_by: None,
                    decided_at: None,
                });
            }
        }
        self.add_events(&r.events, &r.deliveries, now, r.history, next_seq);
    }

    /// The same rules as the SQLite ledger's `insert_tag_move`.
    fn add_tag_move(&mut self, m: &TagMove, history: usize, next_seq: &AtomicI64) {
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

    /// The sequence number of an event added to this entry now: after every row the entry holds,
    /// whichever process wrote them (each seeds its counter from its own start), and not before
    /// `now`'s microsecond, so the alert outbox sends one subject's events in the order written.
    fn next_event_seq(&self, counter: &AtomicI64, now: DateTime<Utc>) -> i64 {
        let held = self.events.iter().map(|e| e.seq).chain(self.tag_moves.iter().map(|m| m.seq)).max();
        let floor = held.map_or(i64::MIN, |s| s + 1).max(now.timestamp_micros());
        let before = counter.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| Some(c.max(floor) + 1));
        before.unwrap_or_else(|c| c).max(floor)
    }

    fn add_events(
        &mut self,
        events: &[Event],
        deliveries: &[DeliveryKey],
        now: DateTime<Utc>,
        history: usize,
        next_seq: &AtomicI64,
    ) {
        for e in events {
            if !self.events.iter().any(|x| x.event.id == e.id) {
                let seq = self.next_event_seq(next_seq, now);
                self.events.push(EventRow { seq, event: e.clone() });
            }
        }
        let now = now.trunc_subsecs(3);
        for DeliveryKey { event, alert } in deliveries {
            if !self.deliveries.iter().any(|d| &d.event == event && &d.alert == alert) {
                self.deliveries.push(DeliveryRow {
                    event: event.clone(),
                    alert: alert.clone(),
                    state: DeliveryState::Pending,
                    attempts: 0,
                    next_attempt: now,
                    last_status: None,
                    created: now,
                    updated: now,
                });
            }
        }
        if !events.is_empty() {
            // Keep the newest events, and any that still has a delivery to make.
            let pending: HashSet<String> =
                self.deliveries.iter().filter(|d| d.state == DeliveryState::Pending).map(|d| d.event.clone()).collect();
            self.events.sort_by_key(|e| e.seq);
            let keep_from = self.events.len().saturating_sub(history * 2);
            let mut n = 0;
            self.events.retain(|e| {
                n += 1;
                n > keep_from || pending.contains(&e.event.id)
            });
            let kept: HashSet<String> = self.events.iter().map(|e| e.event.id.clone()).collect();
            self.deliveries.retain(|d| kept.contains(&d.event));
        }
    }
}

/// The ledger in ConfigMaps of one namespace.
#[derive(Clone)]
pub struct KubeLedger {
    api: Api<ConfigMap>,
    namespace: String,
    seq: std::sync::Arc<AtomicI64>,
}

fn api_error(e: kube::Error) -> LedgerError {
    LedgerError::Kubernetes(e)
}

fn corrupt(name: &str, e: impl std::fmt::Display) -> LedgerError {
    LedgerError::Corrupt { what: "ConfigMap", detail: format!("{name}: {e}") }
}

/// An action of another change that a newer one for the same image replaces: one not started yet.
fn supersedable(action: &ActionRow, newer_change: &str) -> bool {
    matches!(action.state, ActionState::Pending | ActionState::Held | ActionState::AwaitingApproval)
        && action.change_id != newer_change
}

fn object_name(watch: &str) -> String {
    format!("bm-ledger-{}", &stable_id(&[watch])[..20])
}

impl KubeLedger {
    pub fn new(client: kube::Client, namespace: &str, now: DateTime<Utc>) -> Self {
        // Sequence numbers order events across writers well enough: microseconds since the epoch.
        let start = now.timestamp_micros();
        KubeLedger {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            seq: std::sync::Arc::new(AtomicI64::new(start)),
        }
    }

    pub fn location(&self) -> String {
        format!("ConfigMaps in namespace {}", self.namespace)
    }

    fn parse(cm: &ConfigMap) -> Result<WatchDoc, LedgerError> {
        let name = cm.metadata.name.clone().unwrap_or_default();
        match cm.data.as_ref().and_then(|d| d.get(KEY)) {
            Some(text) => serde_json::from_str(text).map_err(|e| corrupt(&name, e)),
            None => Ok(WatchDoc::default()),
        }
    }

    async fn read(&self, watch: &str) -> Result<Option<(ConfigMap, WatchDoc)>, LedgerError> {
        match self.api.get_opt(&object_name(watch)).await.map_err(api_error)? {
            Some(cm) => {
                let doc = Self::parse(&cm)?;
                Ok(Some((cm, doc)))
            }
            None => Ok(None),
        }
    }

    async fn all(&self) -> Result<Vec<(ConfigMap, WatchDoc)>, LedgerError> {
        let list = self.api.list(&ListParams::default().labels(&format!("{LABEL}=watch"))).await.map_err(api_error)?;
        list.items.into_iter().map(|cm| Self::parse(&cm).map(|d| (cm, d))).collect()
    }

    /// Reads, changes and writes one watch's entry, re-reading on a conflicting write.
    async fn modify<T>(
        &self,
        watch: &str,
        mut change: impl FnMut(&mut WatchDoc) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let name = object_name(watch);
        for attempt in 0..ATTEMPTS {
            let existing = self.api.get_opt(&name).await.map_err(api_error)?;
            let mut doc = match &existing {
                Some(cm) => Self::parse(cm)?,
                None => WatchDoc::default(),
            };
            let result = change(&mut doc)?;
            let text = serde_json::to_string(&doc).map_err(|e| corrupt(&name, e))?;
            // Nothing changed (a touch older than the entry's check, or of an entry that is not
            // there, a repeated commit): no write.
            let unchanged = match &existing {
                Some(cm) => cm.data.as_ref().and_then(|d| d.get(KEY)) == Some(&text),
                None => serde_json::to_string(&WatchDoc::default()).is_ok_and(|empty| empty == text),
            };
            if unchanged {
                return Ok(result);
            }
            let written = match existing {
                Some(mut cm) => {
                    cm.data = Some([(KEY.to_string(), text)].into());
                    self.api.replace(&name, &PostParams::default(), &cm).await
                }
                None => {
                    let cm = ConfigMap {
                        metadata: ObjectMeta {
                            name: Some(name.clone()),
                            labels: Some(
                                [
                                    (LABEL.to_string(), "watch".to_string()),
                                    ("app.kubernetes.io/managed-by".to_string(), "builder-monitor".to_string()),
                                ]
                                .into(),
                            ),
                            annotations: Some([("buildermonitor.dev/watch".to_string(), watch.to_string())].into()),
                            ..Default::default()
                        },
                        data: Some([(KEY.to_string(), text)].into()),
                        ..Default::default()
                    };
                    self.api.create(&PostParams::default(), &cm).await
                }
            };
            match written {
                Ok(_) => return Ok(result),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    let ceiling = 10u64 << attempt.min(6);
                    tokio::time::sleep(std::time::Duration::from_millis(rand::random_range(1..=ceiling))).await;
                    continue;
                }
                Err(e) => return Err(api_error(e)),
            }
        }
        Err(LedgerError::Contended(name, ATTEMPTS))
    }

    /// The watch whose entry holds a row matching `find`.
    async fn holder(&self, find: impl Fn(&WatchDoc) -> bool) -> Result<Option<String>, LedgerError> {
        Ok(self.all().await?.into_iter().find(|(_, d)| find(d)).and_then(|(cm, d)| {
            d.watch
                .map(|w| w.name)
                .or_else(|| cm.metadata.annotations.and_then(|a| a.get("buildermonitor.dev/watch").cloned()))
        }))
    }

    pub async fn ping(&self) -> Result<(), LedgerError> {
        self.api.list(&ListParams::default().limit(1)).await.map(|_| ()).map_err(api_error)
    }

    pub async fn watch(&self, name: &str) -> Result<Option<WatchRecord>, LedgerError> {
        Ok(self.read(name).await?.and_then(|(_, d)| d.watch))
    }

    pub async fn watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        let mut out: Vec<WatchRecord> = self.all().await?.into_iter().filter_map(|(_, d)| d.watch).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    pub async fn failing_watches(&self) -> Result<Vec<WatchRecord>, LedgerError> {
        Ok(self.watches().await?.into_iter().filter(|w| w.consecutive_failures > 0).collect())
    }

    pub async fn has_pinned(&self, watch: &str, digest: &str) -> Result<bool, LedgerError> {
        Ok(self.read(watch).await?.is_some_and(|(_, d)| d.digests.iter().any(|x| x.digest == digest)))
    }

    pub async fn history(&self, watch: &str, limit: usize) -> Result<Vec<PinnedDigest>, LedgerError> {
        let digests = self.read(watch).await?.map(|(_, d)| d.digests).unwrap_or_default();
        Ok(digests
            .into_iter()
            .take(limit)
            .map(|d| PinnedDigest { digest: d.digest, first_seen: d.first_seen, platforms: d.platforms })
            .collect())
    }

    /// Writes the times of unchanged checks: one write per watch, as every entry is its own object.
    pub async fn touch(&self, touches: &[Touch]) -> Result<(), LedgerError> {
        for t in touches {
            let time = t.time.trunc_subsecs(0);
            self.modify(&t.watch, |doc| {
                // The same rule as the SQLite ledger's `touch_checks`.
                if let Some(w) = doc.watch.as_mut()
                    && w.image == t.image
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

    /// [`KubeLedger::commit`], then the `touches` kept until now.
    pub async fn commit_touching(&self, record: CheckRecord, touches: &[Touch]) -> Result<(), LedgerError> {
        self.commit(record).await?;
        self.touch(touches).await
    }

    pub async fn commit(&self, record: CheckRecord) -> Result<(), LedgerError> {
        let seq = self.seq.clone();
        self.modify(&record.watch.clone(), |doc| {
            doc.commit(&record, &seq);
            Ok(())
        })
        .await?;
        // Actions for an image may sit in another watch's entry (a rebuild from the builder, a
        // rebase from its run image): supersede those too. A crash between the writes leaves an
        // older action pending; it runs before the newer one, which still runs last.
        for a in &record.actions {
            for (_, doc) in self.all().await? {
                let Some(w) = doc.watch.as_ref().map(|w| w.name.clone()).filter(|n| n != &record.watch) else {
                    continue;
                };
                if doc.actions.iter().any(|o| o.image == a.image && supersedable(o, &a.change_id)) {
                    let (image, change) = (a.image.clone(), a.change_id.clone());
                    self.modify(&w, |d| {
                        let now = record.time.trunc_subsecs(3);
                        for old in d.actions.iter_mut().filter(|o| o.image == image && supersedable(o, &change)) {
                            old.state = ActionState::Superseded;
                            old.detail = Some(format!("superseded by change {change}"));
                            old.updated = now;
                        }
                        Ok(())
                    })
                    .await?;
                }
            }
        }
        Ok(())
    }

    pub async fn changes(&self, watch: Option<&str>, limit: usize) -> Result<Vec<ChangeRecord>, LedgerError> {
        let docs = match watch {
            Some(w) => self.read(w).await?.map(|(_, d)| vec![d]).unwrap_or_default(),
            None => self.all().await?.into_iter().map(|(_, d)| d).collect(),
        };
        let mut changes: Vec<ChangeRecord> = docs.into_iter().flat_map(|d| d.changes).collect();
        changes.sort_by(|a, b| b.detected.cmp(&a.detected).then(b.seq.cmp(&a.seq)));
        changes.truncate(limit);
        Ok(changes)
    }

    pub async fn events_after(&self, after_seq: i64, limit: usize) -> Result<Vec<StoredEvent>, LedgerError> {
        let mut events: Vec<StoredEvent> = self
            .all()
            .await?
            .into_iter()
            .flat_map(|(_, d)| d.events)
            .filter(|e| e.seq > after_seq)
            .map(|e| StoredEvent { seq: e.seq, event: e.event })
            .collect();
        events.sort_by_key(|e| e.seq);
        events.truncate(limit);
        Ok(events)
    }

    pub async fn deliveries_of(&self, events: Vec<String>) -> Result<Vec<DeliveryKey>, LedgerError> {
        let wanted: HashSet<String> = events.into_iter().collect();
        let mut out: Vec<DeliveryKey> = self
            .all()
            .await?
            .into_iter()
            .flat_map(|(_, d)| d.deliveries)
            .filter(|d| wanted.contains(&d.event))
            .map(|d| DeliveryKey { event: d.event, alert: d.alert })
            .collect();
        out.sort();
        Ok(out)
    }

    pub async fn latest_events(&self, types: Vec<String>, limit: usize) -> Result<Vec<StoredEvent>, LedgerError> {
        let mut events: Vec<StoredEvent> = self
            .all()
            .await?
            .into_iter()
            .flat_map(|(_, d)| d.events)
            .filter(|e| types.iter().any(|t| t == e.event.event_type.as_str()))
            .map(|e| StoredEvent { seq: e.seq, event: e.event })
            .collect();
        events.sort_by_key(|e| std::cmp::Reverse(e.seq));
        events.truncate(limit);
        Ok(events)
    }

    pub async fn record_events(
        &self,
        watch: &str,
        events: Vec<Event>,
        deliveries: Vec<DeliveryKey>,
        history: usize,
        now: DateTime<Utc>,
    ) -> Result<(), LedgerError> {
        let seq = self.seq.clone();
        self.modify(watch, |doc| {
            doc.add_events(&events, &deliveries, now, history, &seq);
            Ok(())
        })
        .await
    }

    pub async fn claim_actions(
        &self,
        now: DateTime<Utc>,
        limit: usize,
        kind: Option<ActionKind>,
        rollout: &Rollout,
    ) -> Result<Vec<ClaimedAction>, LedgerError> {
        let now = now.trunc_subsecs(3);
        let docs = self.all().await?;
        let freeze = docs.iter().find_map(|(_, d)| d.freeze.clone());
        let mut holders = BTreeMap::new();
        let mut rows = Vec::new();
        for (_, doc) in docs {
            let Some(watch) = doc.watch.as_ref().map(|w| w.name.clone()) else { continue };
            for a in doc.actions {
                holders.insert(a.key.clone(), watch.clone());
                rows.push(record(a));
            }
        }
        let running = running_images(&rows);
        let due: Vec<String> = gate_rows(&rows, kind, rollout, freeze.as_ref(), now, &running)
            .into_iter()
            .filter(|g| g.verdict.is_ok() && g.due <= now)
            .take(limit)
            .map(|g| g.key)
            .collect();
        let mut claimed = Vec::new();
        for key in due {
            let Some(watch) = holders.get(&key) else { continue };
            let taken = self
                .modify(watch, |doc| {
                    // The gates again, on the entry as written now (its change's rows all live here).
                    let Some(change) = doc.actions.iter().find(|a| a.key == key).map(|a| a.change_id.clone()) else {
                        return Ok(None);
                    };
                    let view: Vec<ActionRecord> =
                        doc.actions.iter().filter(|a| a.change_id == change).cloned().map(record).collect();
                    let open = gate_rows(&view, kind, rollout, freeze.as_ref(), now, &running)
                        .into_iter()
                        .any(|g| g.key == key && g.verdict.is_ok());
                    Ok(doc.actions.iter_mut().find(|a| open && a.key == key && a.state == ActionState::Pending).map(
                        |a| {
                            a.state = ActionState::Running;
                            a.attempts += 1;
                            a.updated = now;
                            a.process = None;
                            ClaimedAction {
                                key: a.key.clone(),
                                change_id: a.change_id.clone(),
                                image: a.image.clone(),
                                kind: a.kind,
                                attempt: a.attempts,
                                target: a.target.clone(),
                                process: None,
                            }
                        },
                    ))
                })
                .await?;
            claimed.extend(taken);
        }
        Ok(claimed)
    }

    pub async fn record_process(&self, key: &str, group: ProcessGroup) -> Result<(), LedgerError> {
        let Some(holder) = self.holder(|d| d.actions.iter().any(|a| a.key == key)).await? else {
            return Ok(());
        };
        self.modify(&holder, |doc| {
            if let Some(a) = doc.actions.iter_mut().find(|a| a.key == key && a.state == ActionState::Running) {
                a.process = Some(group);
            }
            Ok(())
        })
        .await
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn finish_action(&self, end: ActionEnd<'_>) -> Result<Option<ActionState>, LedgerError> {
        let ActionEnd {
            key,
            outcome,
            detail,
            output_tail,
            watch,
            events,
            deliveries,
            history,
            now: at,
            tag_move,
            hold,
            keep_intent,
        } = end;
        let holder = self.holder(|d| d.actions.iter().any(|a| a.key == key)).await?;
        let newer = match &outcome {
            ActionOutcome::Retry { .. } => self.newer_change(key).await?,
            _ => None,
        };
        let now = at.trunc_subsecs(3);
        let seq = self.seq.clone();
        let same = holder.as_deref() == Some(watch) || holder.is_none();
        let mut ended = None;
        if let Some(holder) = &holder {
            ended = self
                .modify(holder, |doc| {
                    let mut ended = None;
                    if !keep_intent {
                        doc.tag_intents.retain(|i| i.action.as_deref() != Some(key));
                    }
                    if let Some(a) = doc.actions.iter_mut().find(|a| a.key == key && a.state == ActionState::Running) {
                        a.detail = Some(detail.clone());
                        // A retry re-checks first (see the SQLite ledger's `finish_action`).
                        let superseded = match &outcome {
                            ActionOutcome::Retry { .. } => newer.clone(),
                            ActionOutcome::Superseded { by } => Some(by.clone()),
                            _ => None,
                        };
                        match (&outcome, superseded) {
                            (_, Some(by)) => {
                                a.state = ActionState::Superseded;
                                a.detail = Some(format!("superseded by change {by}: {detail}"));
                            }
                            (ActionOutcome::Succeeded, None) => a.state = ActionState::Succeeded,
                            (ActionOutcome::Retry { next_attempt }, None) => {
                                a.state = ActionState::Pending;
                                a.next_attempt = next_attempt.trunc_subsecs(3);
                            }
                            (_, None) => a.state = ActionState::Failed,
                        }
                        a.output_tail = Some(output_tail.clone());
                        a.updated = now;
                        ended = Some(a.state);
                    }
                    for held in hold.iter().flat_map(|h| h.keys.iter().map(move |k| (k, &h.detail))) {
                        // The change's rows all live in this entry.
                        if let Some(a) = doc.actions.iter_mut().find(|a| {
                            &a.key == held.0 && matches!(a.state, ActionState::Pending | ActionState::AwaitingApproval)
                        }) {
                            a.state = ActionState::Held;
                            a.detail = Some(held.1.clone());
                            a.updated = now;
                        }
                    }
                    if same {
                        doc.add_events(&events, &deliveries, now, history, &seq);
                    }
                    if let Some(m) = &tag_move {
                        doc.add_tag_move(m, history, &seq);
                    }
                    Ok(ended)
                })
                .await?;
        }
        if !same {
            self.record_events(watch, events, deliveries, history, at).await?;
        }
        if let (None, Some(m)) = (&holder, tag_move) {
            self.record_tag_move(watch, m, history).await?;
        }
        Ok(ended)
    }

    pub async fn record_tag_move(&self, watch: &str, tag_move: TagMove, history: usize) -> Result<(), LedgerError> {
        let seq = self.seq.clone();
        self.modify(watch, |doc| {
            doc.add_tag_move(&tag_move, history, &seq);
            doc.tag_intents.retain(|i| i.image != tag_move.image || i.action.is_some());
            Ok(())
        })
        .await
    }

    pub async fn tag_moves(&self, image: Option<&str>, limit: usize) -> Result<Vec<TagMove>, LedgerError> {
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

    pub async fn next_action_at(
        &self,
        kind: Option<ActionKind>,
        rollout: &Rollout,
        now: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>, LedgerError> {
        let docs = self.all().await?;
        let freeze = docs.iter().find_map(|(_, d)| d.freeze.clone());
        let rows: Vec<ActionRecord> = docs.into_iter().flat_map(|(_, d)| d.actions).map(record).collect();
        let running = running_images(&rows);
        Ok(next_start(gate_rows(&rows, kind, rollout, freeze.as_ref(), now, &running), rollout, freeze.as_ref(), now))
    }

    pub async fn running_actions(&self) -> Result<Vec<ClaimedAction>, LedgerError> {
        let mut out = Vec::new();
        for (_, doc) in self.all().await? {
            for a in doc.actions.into_iter().filter(|a| a.state == ActionState::Running) {
                out.push(ClaimedAction {
                    key: a.key,
                    change_id: a.change_id,
                    image: a.image,
                    kind: a.kind,
                    attempt: a.attempts,
                    target: a.target,
                    process: a.process,
                });
            }
        }
        Ok(out)
    }

    pub async fn requeue_running(&self) -> Result<Vec<String>, LedgerError> {
        let mut keys = Vec::new();
        for (_, doc) in self.all().await? {
            let Some(watch) = doc.watch.as_ref().map(|w| w.name.clone()) else { continue };
            if doc.actions.iter().any(|a| a.state == ActionState::Running) {
                let requeued = self
                    .modify(&watch, |d| {
                        let mut keys = Vec::new();
                        for a in d.actions.iter_mut().filter(|a| a.state == ActionState::Running) {
                            a.state = ActionState::Pending;
                            keys.push(a.key.clone());
                        }
                        Ok(keys)
                    })
                    .await?;
                keys.extend(requeued);
            }
        }
        Ok(keys)
    }

    pub async fn requeue_actions(&self, keys: Vec<String>) -> Result<(), LedgerError> {
        for (_, doc) in self.all().await? {
            let Some(watch) = doc.watch.as_ref().map(|w| w.name.clone()) else { continue };
            if doc.actions.iter().any(|a| a.state == ActionState::Running && keys.contains(&a.key)) {
                self.modify(&watch, |d| {
                    for a in d.actions.iter_mut().filter(|a| a.state == ActionState::Running && keys.contains(&a.key)) {
                        a.state = ActionState::Pending;
                    }
                    Ok(())
                })
                .await?;
            }
        }
        Ok(())
    }

    pub async fn actions(&self, limit: usize) -> Result<Vec<ActionRecord>, LedgerError> {
        let mut out: Vec<ActionRecord> =
            self.all().await?.into_iter().flat_map(|(_, d)| d.actions).map(record).collect();
        out.sort_by(|a, b| b.updated.cmp(&a.updated).then(a.key.cmp(&b.key)));
        out.truncate(limit);
        Ok(out)
    }

    pub async fn open_actions(&self) -> Result<Vec<OpenAction>, LedgerError> {
        let mut rows: Vec<ActionRow> =
            self.all().await?.into_iter().flat_map(|(_, d)| d.actions).filter(|a| a.state.is_open()).collect();
        rows.sort_by(|a, b| (a.created, a.wave, a.key.as_str()).cmp(&(b.created, b.wave, b.key.as_str())));
        Ok(rows
            .into_iter()
            .map(|a| OpenAction {
                key: a.key,
                change: a.change_id,
                image: a.image,
                action: a.kind.as_str().into(),
                state: a.state,
                attempts: a.attempts,
                next_attempt: a.next_attempt,
                wave: a.wave,
                detail: if a.state == ActionState::Held { a.detail } else { None },
                waiting_for: None,
                gate: None,
            })
            .collect())
    }

    pub async fn change_actions(&self, change_id: &str) -> Result<Vec<ActionRecord>, LedgerError> {
        let mut rows: Vec<ActionRecord> = self
            .all()
            .await?
            .into_iter()
            .flat_map(|(_, d)| d.actions)
            .filter(|a| a.change_id == change_id)
            .map(record)
            .collect();
        rows.sort_by(|a, b| (a.wave, a.created, &a.key).cmp(&(b.wave, b.created, &b.key)));
        Ok(rows)
    }

    pub async fn decide(
        &self,
        change_id: &str,
        image: Option<&str>,
        verdict: Verdict,
        by: &str,
        now: DateTime<Utc>,
    ) -> Result<Vec<Decided>, LedgerError> {
        let Some(holder) = self.holder(|d| d.actions.iter().any(|a| a.change_id == change_id)).await? else {
            return Ok(Vec::new());
        };
        let now = now.trunc_subsecs(3);
        self.modify(&holder, |doc| {
            let mut out = Vec::new();
            for a in doc.actions.iter_mut().filter(|a| a.change_id == change_id) {
                if verdict == Verdict::Release {
                    a.released = true;
                }
                if image.is_some_and(|i| a.image != i) {
                    continue;
                }
                let Some(state) = verdict.next_state(&record(a.clone())) else { continue };
                a.state = state;
                a.updated = now;
                if matches!(verdict, Verdict::Approve | Verdict::Reject) {
                    a.decided_by = Some(by.to_string());
                    a.decided_at = Some(now.trunc_subsecs(0));
                }
                out.push(Decided { key: a.key.clone(), image: a.image.clone(), kind: a.kind, state });
            }
            Ok(out)
        })
        .await
    }
}

fn record(a: ActionRow) -> ActionRecord {
    ActionRecord {
        key: a.key,
        change: a.change_id,
        image: a.image,
        action: a.kind.as_str().into(),
        state: a.state,
        attempts: a.attempts,
        next_attempt: a.next_attempt,
        detail: a.detail,
        output_tail: a.output_tail,
        updated: a.updated,
        wave: a.wave,
        needs_approval: a.needs_approval,
        released: a.released,
        decided_by: a.decided_by,
        decided_at: a.decided_at,
        created: a.created,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use builder_monitor_core::cnb::Change;

    /// An entry as the ledger has always written it: typed fields read it and write it back
    /// byte for byte (times to the second or to the millisecond as stored, states as names).
    #[test]
    fn a_stored_entry_is_written_back_unchanged() {
        let change = serde_json::to_string(&Change::unknown("test")).unwrap();
        let text = format!(
            concat!(
                r#"{{"watch":{{"name":"b","kind":"builder","image":"r/b:latest","pin":{{"digest":"sha256:d","#,
                r#""reference":"r/b@sha256:d","media_type":"m","platforms":{{"linux/amd64":"sha256:p"}},"#,
                r#""since":"2026-11-30T12:10:00Z"}},"metadata":null,"first_seen":"2026-11-30T12:00:00Z","#,
                r#""last_check":"2026-11-30T12:20:00Z","last_ok":false,"last_error_reason":"tag_missing","#,
                r#""last_error":"gone","last_change":"2026-11-30T12:10:00Z","consecutive_failures":1,"#,
                r#""failing_since":"2026-11-30T12:20:00Z","pending":["sha256:e","2026-11-30T12:15:00Z"],"moves":1}},"#,
                r#""digests":[{{"digest":"sha256:d","first_seen":"2026-11-30T12:10:00Z","last_pinned":"2026-11-30T12:10:00Z"}}],"#,
                r#""changes":[{{"id":"c1","watch":"b","seq":1,"previous":"sha256:c","current":"sha256:d","#,
                r#""previous_reference":"r/b@sha256:c","current_reference":"r/b@sha256:d","change":{change},"#,
                r#""rollback":false,"detected":"2026-11-30T12:10:00Z"}}],"events":[],"#,
                r#""deliveries":[{{"event":"e1","alert":"hook","state":"dead","attempts":2,"#,
                r#""next_attempt":"2026-11-30T12:10:00.000Z","last_status":"HTTP 400","#,
                r#""created":"2026-11-30T12:10:00.000Z","updated":"2026-11-30T12:11:02.345Z"}}],"#,
                r#""actions":[{{"key":"k1","change_id":"c1","image":"app","kind":"rebuild","state":"running","#,
                r#""attempts":1,"next_attempt":"2026-11-30T12:10:00.000Z","target":{{"image":"r/app"}},"#,
                r#""detail":null,"output_tail":null,"process":{{"id":42,"started":7}},"#,
                r#""created":"2026-11-30T12:10:00.000Z","updated":"2026-11-30T12:10:01.500Z"}},"#,
                r#"{{"key":"k0","change_id":"c0","image":"app","kind":"rebase","state":"superseded","#,
                r#""attempts":0,"next_attempt":"2026-11-30T12:00:00.000Z","target":{{}},"#,
                r#""detail":"superseded by change c1","output_tail":null,"#,
                r#""created":"2026-11-30T12:00:00.000Z","updated":"2026-11-30T12:10:00.000Z"}}]}}"#
            ),
            change = change
        );
        let doc: WatchDoc = serde_json::from_str(&text).unwrap();
        let watch = doc.watch.as_ref().unwrap();
        assert_eq!(watch.pending.as_ref().unwrap().since.timestamp() % 3600, 15 * 60);
        assert_eq!(doc.actions[0].state, ActionState::Running);
        assert_eq!(doc.deliveries[0].state, DeliveryState::Dead);
        assert_eq!(serde_json::to_string(&doc).unwrap(), text);
    }

    #[test]
    fn an_unreadable_time_is_refused_not_guessed() {
        let text = r#"{"watch":null,"digests":[{"digest":"sha256:d","first_seen":"yesterday","last_pinned":"2026-11-30T12:10:00Z"}]}"#;
        let err = serde_json::from_str::<WatchDoc>(text).unwrap_err();
        assert!(err.to_string().contains("not an RFC 3339 time: \"yesterday\""), "{err}");
    }
}
