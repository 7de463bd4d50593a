//! The ledger on Kubernetes: one ConfigMap per watch holds its whole entry (pin, history, changes,
//! events, deliveries, actions), so a check outcome is one write; every write carries the
//! resourceVersion it read, so two writers can never both win, and a conflict is re-read and
//! retried. Each record family's rows and operations are in the file of its name.
//!
//! The daemon's ledger ([`KubeLedger::serve_daemon`]) is fenced and waits for its rights:
//! - with leader election, a write is made only while this replica leads: checked before each
//!   write, so a leader that has lost the Lease (to a conflicting write, or by not renewing)
//!   writes nothing more, whatever of its work is still in flight ([`LedgerError::NotLeading`]);
//! - a write the cluster refuses for a right RBAC does not grant waits for it
//!   (`rights::when_granted`): a check's commit or an action's end is not lost, and is
//!   made once the right is back; a read so refused fails (the caller retries, or a reader of
//!   `status` or the API gets an error instead of a hang), the right listed as missing either way.
//!
//! The command line's ledger (approvals, freezes, `status`) does neither: it is not the leader's,
//! and a refused right is an error to show, not to wait for.

mod actions;
mod checks;
mod fit;
mod outbox;
mod progress;
mod registries;
mod rollout;
mod start_list;
mod tags;
#[cfg(test)]
mod tests;

use std::sync::atomic::AtomicI64;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use serde::{Deserialize, Serialize};

use super::checks::is_zero;
use super::{ChangeRecord, LedgerBackend, LedgerError, RegistryRecord, TagIntent, WatchRecord};
use actions::ActionRow;
use builder_monitor_core::event::stable_id;
use builder_monitor_core::rollout::Freeze;
use checks::Digest;
use outbox::{DeliveryRow, EventRow};
use tags::TagMoveRow;

const LABEL: &str = "buildermonitor.dev/ledger";
const KEY: &str = "ledger.json";
/// Conflicting writes tolerated before a write gives up (the next check or attempt tries again);
/// between tries a random pause that doubles, so contending writers fall out of step.
const ATTEMPTS: u32 = 12;

/// One watch's entry of the ledger: its rows of every family.
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
    /// Tag writes announced and not yet recorded as done (see `tags`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tag_intents: Vec<TagIntent>,
    /// The freeze in force (the entry of [`ROLLOUT_WATCH`](crate::ledger::ROLLOUT_WATCH) only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    freeze: Option<Freeze>,
    /// Roll-out state changes (freezes and their ends) so far: the last one's sequence number,
    /// which names its events (the entry of [`ROLLOUT_WATCH`](crate::ledger::ROLLOUT_WATCH) only).
    #[serde(default, skip_serializing_if = "is_zero")]
    rollout_changes: u64,
    /// What each registry answered when asked (the entry of
    /// [`ROLLOUT_WATCH`](crate::ledger::ROLLOUT_WATCH) only), by host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    registries: Vec<RegistryRecord>,
    /// What was dropped to keep the entry under a ConfigMap's 1 MiB (see `fit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trimmed: Option<fit::Trimmed>,
}

/// The ledger in ConfigMaps of one namespace.
#[derive(Clone)]
pub struct KubeLedger {
    api: Api<ConfigMap>,
    client: kube::Client,
    namespace: String,
    seq: std::sync::Arc<AtomicI64>,
    /// Set when this is the daemon's ledger ([`KubeLedger::serve_daemon`]).
    daemon: std::sync::Arc<std::sync::OnceLock<Daemon>>,
    /// The LIST the reads of a daemon's start share (see `start_list`).
    start_list: std::sync::Arc<start_list::StartList>,
}

/// How the daemon's ledger writes.
struct Daemon {
    /// Whether this replica leads (with leader election): writes are made only then.
    leading: Option<tokio::sync::watch::Receiver<bool>>,
}

fn api_error(e: kube::Error) -> LedgerError {
    LedgerError::Kubernetes(e)
}

fn corrupt(name: &str, e: impl std::fmt::Display) -> LedgerError {
    LedgerError::Corrupt { what: "ConfigMap", detail: format!("{name}: {e}") }
}

fn object_name(watch: &str) -> String {
    format!("bm-ledger-{}", &stable_id(&[watch])[..20])
}

impl KubeLedger {
    pub fn new(client: kube::Client, namespace: &str, now: DateTime<Utc>) -> Self {
        // Sequence numbers order events across writers well enough: microseconds since the epoch.
        let start = now.timestamp_micros();
        KubeLedger {
            api: Api::namespaced(client.clone(), namespace),
            client,
            namespace: namespace.to_string(),
            seq: std::sync::Arc::new(AtomicI64::new(start)),
            daemon: Default::default(),
            start_list: Default::default(),
        }
    }

    /// Makes this (and every clone) the daemon's ledger: writes wait for a missing right, and,
    /// with `leading` (leader election), are made only while it says this replica leads.
    pub fn serve_daemon(&self, leading: Option<tokio::sync::watch::Receiver<bool>>) {
        let _ = self.daemon.set(Daemon { leading });
    }

    /// Whether a write may be made now: not by a replica that does not lead.
    pub fn may_write(&self) -> bool {
        self.daemon.get().and_then(|d| d.leading.as_ref()).is_none_or(|l| *l.borrow())
    }

    /// `call`, waiting for a missing right in the daemon's ledger (see the module doc); a read
    /// (`write` false) refused for one fails with the right listed.
    async fn call<T, Fut>(&self, write: bool, call: impl FnMut() -> Fut) -> Result<T, LedgerError>
    where
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let what = if write { "the ledger's writes" } else { "the ledger's reads" };
        if self.daemon.get().is_none() {
            let mut call = call;
            return call().await.map_err(api_error);
        }
        if write {
            return crate::rights::when_granted(&self.client, what, call).await.map_err(api_error);
        }
        let mut call = call;
        match call().await {
            Ok(answer) => Ok(answer),
            Err(error) => {
                crate::rights::noted(&self.client, &error, what).await;
                Err(api_error(error))
            }
        }
    }

    fn parse(cm: &ConfigMap) -> Result<WatchDoc, LedgerError> {
        let name = cm.metadata.name.clone().unwrap_or_default();
        match cm.data.as_ref().and_then(|d| d.get(KEY)) {
            Some(text) => serde_json::from_str(text).map_err(|e| corrupt(&name, e)),
            None => Ok(WatchDoc::default()),
        }
    }

    async fn read(&self, watch: &str) -> Result<Option<(ConfigMap, WatchDoc)>, LedgerError> {
        let name = object_name(watch);
        match self.call(false, || self.api.get_opt(&name)).await? {
            Some(cm) => {
                let doc = Self::parse(&cm)?;
                Ok(Some((cm, doc)))
            }
            None => Ok(None),
        }
    }

    /// Every entry of the ledger (the start's shared LIST while there is one: `start_list`).
    async fn all(&self) -> Result<start_list::Entries, LedgerError> {
        self.entries().await
    }

    /// Every entry of the ledger, listed now.
    async fn list(&self) -> Result<start_list::Entries, LedgerError> {
        let params = ListParams::default().labels(&format!("{LABEL}=watch"));
        let list = self.call(false, || self.api.list(&params)).await?;
        // The entry read, its text and the server's field bookkeeping are dropped: no reader of
        // a list wants them (`holder` reads the annotations), and a start's shared list is cloned
        // for each of its reads.
        list.items
            .into_iter()
            .map(|mut cm| {
                let doc = Self::parse(&cm)?;
                cm.data = None;
                cm.metadata.managed_fields = None;
                Ok((cm, doc))
            })
            .collect()
    }

    /// Reads, changes and writes one watch's entry, re-reading on a conflicting write.
    async fn modify<T>(
        &self,
        watch: &str,
        mut change: impl FnMut(&mut WatchDoc) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        let name = object_name(watch);
        for attempt in 0..ATTEMPTS {
            // Read as a write is: it waits for a missing right, not to lose the change.
            let existing = self.call(true, || self.api.get_opt(&name)).await?;
            let mut doc = match &existing {
                Some(cm) => Self::parse(cm)?,
                None => WatchDoc::default(),
            };
            let result = change(&mut doc)?;
            let text = Self::encode_within(watch, &name, &mut doc)?;
            // Nothing changed (a touch older than the entry's check, or of an entry that is not
            // there, a repeated commit): no write.
            let unchanged = match &existing {
                Some(cm) => cm.data.as_ref().and_then(|d| d.get(KEY)) == Some(&text),
                None => serde_json::to_string(&WatchDoc::default()).is_ok_and(|empty| empty == text),
            };
            if unchanged {
                return Ok(result);
            }
            let params = PostParams::default();
            let written = match existing {
                Some(mut cm) => {
                    cm.data = Some([(KEY.to_string(), text)].into());
                    self.write(|| self.api.replace(&name, &params, &cm)).await?
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
                    self.write(|| self.api.create(&params, &cm)).await?
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

    /// One write of `modify`, made only while this replica may write (checked again after a wait
    /// for a right); a conflict (409) is answered, not an error, for `modify` to read again.
    async fn write<Fut>(&self, mut call: impl FnMut() -> Fut) -> Result<Result<ConfigMap, kube::Error>, LedgerError>
    where
        Fut: Future<Output = Result<ConfigMap, kube::Error>>,
    {
        // Every read after this write must see it: none is answered by the start's LIST again.
        self.end_start_list();
        let fenced = || {
            let leads = self.may_write();
            let call = leads.then(&mut call);
            async move {
                match call {
                    None => Ok(None),
                    Some(call) => match call.await {
                        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(Err(kube::Error::Api(e)))),
                        answer => answer.map(|written| Some(Ok(written))),
                    },
                }
            }
        };
        self.call(true, fenced).await?.ok_or(LedgerError::NotLeading)
    }

    /// The entry's JSON, trimmed of its oldest history when it would pass [`fit::ENTRY_LIMIT`].
    fn encode_within(watch: &str, name: &str, doc: &mut WatchDoc) -> Result<String, LedgerError> {
        let mut text = serde_json::to_string(&doc).map_err(|e| corrupt(name, e))?;
        // Each pass frees at least what the estimate of the excess said; two are enough in
        // practice, a few more cover rows whose size the estimate missed.
        for _ in 0..4 {
            if text.len() <= fit::ENTRY_LIMIT {
                return Ok(text);
            }
            let bytes = text.len();
            let Some((events, actions)) = doc.fit(bytes, fit::ENTRY_LIMIT, Utc::now()) else {
                return Err(LedgerError::EntryTooLarge { watch: watch.to_string(), bytes });
            };
            tracing::warn!(
                watch,
                configmap = name,
                bytes,
                events,
                actions,
                "ledger entry near the ConfigMap limit of 1 MiB: dropped its oldest events and finished actions"
            );
            text = serde_json::to_string(&doc).map_err(|e| corrupt(name, e))?;
        }
        if text.len() <= fit::ENTRY_LIMIT {
            return Ok(text);
        }
        Err(LedgerError::EntryTooLarge { watch: watch.to_string(), bytes: text.len() })
    }

    /// The watch whose entry holds a row matching `find`.
    async fn holder(&self, find: impl Fn(&WatchDoc) -> bool) -> Result<Option<String>, LedgerError> {
        Ok(self.all().await?.into_iter().find(|(_, d)| find(d)).and_then(|(cm, d)| {
            d.watch
                .map(|w| w.name)
                .or_else(|| cm.metadata.annotations.and_then(|a| a.get("buildermonitor.dev/watch").cloned()))
        }))
    }
}

impl LedgerBackend for KubeLedger {
    async fn ping(&self) -> Result<(), LedgerError> {
        let params = ListParams::default().limit(1);
        self.call(false, || self.api.list(&params)).await.map(|_| ())
    }

    fn location(&self) -> String {
        format!("ConfigMaps in namespace {}", self.namespace)
    }
}
