//! Publishes each configured builder as a `ClusterBuilder`: the spec by server-side apply, the status
//! (pin, metadata, conditions, history) from the ledger after every check, and an Event per change.
//!
//! The status is computed from the ledger alone, so a publisher that missed writes (crash, API
//! outage) catches up with the next one; Events are named after the change, so re-recording is a 409.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event as KubeEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::broadcast;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::ClusterError;
use super::crd::{
    self, BuilderLifecycle, BuilderStack, BuildpackMetadata, ClusterBuilder, ClusterBuilderSpec, ClusterBuilderStatus,
    Condition, HistoryEntry, LastChange,
};
use crate::config::{BuilderSettings, Config, run_image_watch};
use crate::ledger::{ChangeRecord, Ledger, PinnedDigest, WatchRecord};
use crate::metrics::{Metrics, ResultLabels};
use crate::worker::{self, Work};
use builder_monitor_core::cnb::{PinnedMetadata, run_watch_name};
use builder_monitor_core::schedule::{Schedule, timestamp};

/// The field manager of every write, and the `managed-by` label value.
pub const FIELD_MANAGER: &str = "builder-monitor";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The label naming the namespace of the daemon that publishes a ClusterBuilder: the resource is
/// cluster-scoped, so two installations (each in its own namespace) share it, and each prunes
/// only its own.
pub const OWNER_NAMESPACE: &str = "buildermonitor.dev/namespace";
/// Where the Events about ClusterBuilders are recorded: the API server refuses an Event about a
/// cluster-scoped object in any namespace but `default` and `kube-system`.
pub const EVENTS_NAMESPACE: &str = "default";
/// Pinned digests listed in `status.history`.
pub const HISTORY: usize = 10;
/// How long a failed write waits before it is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// The spec a builder is published with.
pub fn spec_of(builder: &BuilderSettings) -> ClusterBuilderSpec {
    let (interval, schedule) = match &builder.schedule {
        Schedule::Interval(d) => (Some(humantime::format_duration(*d).to_string()), None),
        Schedule::Cron { expression, .. } => (None, Some(expression.clone())),
    };
    ClusterBuilderSpec {
        image: builder.image.to_string(),
        interval,
        schedule,
        platforms: builder.platforms.iter().flatten().map(|p| p.to_string()).collect(),
    }
}

/// `tag_missing` → `TagMissing`: the registry error reasons as condition reasons.
pub fn condition_reason(reason: &str) -> String {
    reason
        .split('_')
        .map(|w| {
            let mut chars = w.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

/// What the status is computed from.
pub struct StatusInput<'a> {
    pub record: Option<&'a WatchRecord>,
    /// Newest first.
    pub history: &'a [PinnedDigest],
    pub last_change: Option<&'a ChangeRecord>,
    /// The newest immutable reference of the builder's run image (its watch's pin, when watched).
    pub run_image: Option<String>,
    pub generation: Option<i64>,
    /// The status as published before, for conditions' transition times.
    pub previous: Option<&'a ClusterBuilderStatus>,
    pub now: &'a str,
}

/// The ClusterBuilder status for a builder's ledger entry (pure: unit-tested without a cluster).
pub fn status_of(input: &StatusInput) -> ClusterBuilderStatus {
    let record = input.record;
    let metadata: Option<PinnedMetadata> = record.and_then(WatchRecord::pinned_metadata);
    let builder = metadata.as_ref().and_then(|m| m.preferred());
    let run_image = input
        .run_image
        .clone()
        .or_else(|| metadata.as_ref().and_then(|m| m.run_image.as_ref()).and_then(|r| r.reference.clone()))
        .or_else(|| builder.and_then(|b| b.run_image()).map(str::to_string));
    let stack = (builder.and_then(|b| b.stack_id.clone()).is_some() || run_image.is_some())
        .then(|| BuilderStack { id: builder.and_then(|b| b.stack_id.clone()), run_image });
    let ready = match record {
        None => condition("Ready", "Unknown", "NotChecked", "not checked yet"),
        Some(r) if r.last_ok == Some(false) => condition(
            "Ready",
            "False",
            &condition_reason(r.last_error_reason.as_deref().unwrap_or("check_failed")),
            r.last_error.as_deref().unwrap_or("the last check failed"),
        ),
        Some(r) if r.pin.is_some() => condition("Ready", "True", "Pinned", "the last check succeeded"),
        Some(_) => condition("Ready", "Unknown", "NotChecked", "not checked yet"),
    };
    let up_to_date = match record {
        Some(r) if r.last_ok == Some(false) => {
            condition("UpToDate", "Unknown", "CheckFailed", "the tag could not be read; the pin is kept")
        }
        Some(WatchRecord { pending: Some(pending), .. }) => condition(
            "UpToDate",
            "False",
            "Settling",
            &format!(
                "the tag moved to {} (seen since {}); waiting for it to settle",
                pending.digest,
                timestamp(pending.since)
            ),
        ),
        Some(r) if r.pin.is_some() => condition("UpToDate", "True", "Current", "latestImage is what the tag points at"),
        _ => condition("UpToDate", "Unknown", "NotChecked", "not checked yet"),
    };
    let conditions = [ready, up_to_date]
        .into_iter()
        .map(|mut c| {
            let before = input.previous.and_then(|p| p.conditions.iter().find(|b| b.type_ == c.type_));
            c.last_transition_time = match before {
                Some(b) if b.status == c.status && b.reason == c.reason => b.last_transition_time.clone(),
                _ => Some(input.now.to_string()),
            };
            c
        })
        .collect();
    ClusterBuilderStatus {
        latest_image: record.and_then(|r| r.pin.as_ref()).map(|p| p.reference.clone()),
        stack,
        lifecycle: builder.map(|b| BuilderLifecycle { version: b.lifecycle.version.clone() }),
        builder_metadata: builder
            .map(|b| {
                b.buildpacks
                    .iter()
                    .map(|bp| BuildpackMetadata {
                        id: bp.id.clone(),
                        version: bp.version.clone(),
                        homepage: bp.homepage.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        observed_generation: input.generation,
        conditions,
        last_check_time: record.and_then(|r| r.last_check).map(timestamp),
        last_change_time: input.last_change.map(|c| timestamp(c.detected)),
        last_change: input.last_change.map(|c| LastChange {
            id: c.id.clone(),
            kind: c.change.kind.as_str().to_string(),
            reasons: c
                .change
                .reasons
                .iter()
                .filter_map(|r| serde_json::to_value(r).ok()?.as_str().map(str::to_string))
                .collect(),
            packages: c.change.packages.as_ref().map(|p| p.brief(LAST_CHANGE_PACKAGES)),
        }),
        history: input
            .history
            .iter()
            .take(HISTORY)
            .map(|h| HistoryEntry { digest: h.digest.clone(), first_seen: timestamp(h.first_seen) })
            .collect(),
    }
}

/// Package moves the last change's `packages` names before `; N more`.
const LAST_CHANGE_PACKAGES: usize = 5;

/// Every ClusterBuilder write: a server-side apply as [`FIELD_MANAGER`], validated strictly. A
/// field the CRD in the cluster does not declare (a CRD older than this daemon) fails the whole
/// write — the server refuses to apply it — and [`WriteError::CrdOutOfDate`](super::WriteError)
/// says how to update the CRD.
fn write_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force().validation_strict()
}

fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_transition_time: None,
    }
}

pub struct Publisher {
    client: kube::Client,
    api: Api<ClusterBuilder>,
    events: Api<KubeEvent>,
    config: Arc<Config>,
    ledger: Ledger,
    metrics: Arc<Metrics>,
    identity: String,
    /// Events known to exist, so each is posted once per process rather than once per check.
    recorded: std::sync::Mutex<HashSet<String>>,
}

impl Publisher {
    pub fn new(client: kube::Client, config: Arc<Config>, ledger: Ledger, metrics: Arc<Metrics>) -> Self {
        Publisher {
            client: client.clone(),
            api: Api::all(client.clone()),
            events: Api::namespaced(client, EVENTS_NAMESPACE),
            identity: config.kubernetes.identity.clone(),
            config,
            ledger,
            metrics,
            recorded: Default::default(),
        }
    }

    /// Logs a failed publication to be retried, unless the cluster refused a right for it, which
    /// is listed instead (`rights::noted`: one log line, `/readyz`, `status`) until it
    /// is granted again; the builder is published on the next retry after that.
    async fn retrying(&self, error: &ClusterError, builder: Option<&str>) {
        let refused = match error.answer() {
            Some(answer) => crate::rights::noted(&self.client, answer, "publishing ClusterBuilders").await,
            None => false,
        };
        match builder {
            _ if refused => {}
            Some(name) => tracing::warn!(cluster_builder = %name, error = %error, "cannot publish status; retrying"),
            None => tracing::warn!(error = %error, "cannot publish ClusterBuilders; retrying"),
        }
    }

    fn count(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.metrics.publishes.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    /// Applies every builder's spec, then deletes the objects this daemon manages that no builder
    /// names (with `prune`): those labelled managed by it and published from its namespace.
    pub async fn publish_specs(&self) -> Result<(), ClusterError> {
        let namespace = &self.config.kubernetes.namespace;
        for builder in &self.config.builders {
            let object = json!({
                "apiVersion": crd::API_VERSION,
                "kind": crd::KIND,
                "metadata": {
                    "name": builder.name,
                    "labels": { MANAGED_BY: FIELD_MANAGER, OWNER_NAMESPACE: namespace },
                },
                "spec": spec_of(builder),
            });
            let result = self.api.patch(&builder.name, &write_params(), &Patch::Apply(&object)).await;
            self.count(result.is_ok());
            result.map_err(|error| ClusterError::Apply { name: builder.name.clone(), error: error.into() })?;
        }
        if self.config.kubernetes.prune {
            let configured: BTreeSet<&str> = self.config.builders.iter().map(|b| b.name.as_str()).collect();
            let selector = format!("{MANAGED_BY}={FIELD_MANAGER},{OWNER_NAMESPACE}={namespace}");
            let managed = self.api.list(&ListParams::default().labels(&selector)).await?;
            for object in managed {
                let Some(name) = object.metadata.name.as_deref() else { continue };
                if !configured.contains(name) {
                    self.api.delete(name, &DeleteParams::default()).await?;
                    tracing::info!(cluster_builder = name, "pruned: no builder of that name is configured");
                }
            }
        }
        Ok(())
    }

    /// Writes one builder's status from the ledger, and records an Event for a change not recorded yet.
    pub async fn publish_status(&self, name: &str) -> Result<(), ClusterError> {
        let builder = self.config.builder(name).ok_or_else(|| ClusterError::UnknownBuilder(name.to_string()))?;
        let record = self.ledger.watch(name).await?.filter(|r| r.image == builder.image.to_string());
        let history = self.ledger.history(name, HISTORY).await?;
        let last_change = self.ledger.changes(Some(name), 1).await?.into_iter().next();
        let metadata = record.as_ref().and_then(WatchRecord::pinned_metadata);
        let run_watch = run_image_watch(builder, metadata.as_ref()).ok().flatten().map(|i| run_watch_name(&i));
        let (run_image, run_change) = match &run_watch {
            Some(watch) => (
                self.ledger.watch(watch).await?.and_then(|r| r.pin).map(|p| p.reference),
                self.ledger.changes(Some(watch), 1).await?.into_iter().next(),
            ),
            None => (None, None),
        };
        let current = self.api.get_opt(name).await?;
        let Some(current) = current else {
            return Err(ClusterError::NotApplied(name.to_string()));
        };
        let now = builder_monitor_core::schedule::timestamp(chrono::Utc::now());
        let status = status_of(&StatusInput {
            record: record.as_ref(),
            history: &history,
            last_change: last_change.as_ref(),
            run_image,
            generation: current.metadata.generation,
            previous: current.status(),
            now: &now,
        });
        let object = json!({
            "apiVersion": crd::API_VERSION,
            "kind": crd::KIND,
            "metadata": { "name": name },
            "status": status,
        });
        let result = self.api.patch_status(name, &write_params(), &Patch::Apply(&object)).await;
        self.count(result.is_ok());
        result.map_err(|error| ClusterError::WriteStatus { name: name.to_string(), error: error.into() })?;
        let uid = current.metadata.uid.clone();
        for change in last_change.iter().chain(run_change.iter()) {
            self.record_event(name, uid.as_deref(), change).await;
        }
        if let Some(r) = record.as_ref().filter(|r| r.last_ok == Some(false) && r.consecutive_failures == 1) {
            self.record_failure(name, uid.as_deref(), r).await;
        }
        Ok(())
    }

    async fn record_event(&self, name: &str, uid: Option<&str>, change: &ChangeRecord) {
        let what = if change.watch.starts_with("run:") { "run image" } else { "builder" };
        let message = format!(
            "{what} moved ({}): now {}{}",
            change.change.summary(),
            change.current_reference,
            if change.rollback { " (a rollback to a digest pinned before)" } else { "" }
        );
        let reason = match change.change.kind.as_str() {
            "rebase" => "RebaseNeeded",
            "rebuild" => "RebuildNeeded",
            "none" => "Moved",
            _ => "MovedUnclassified",
        };
        let id: String = change.id.chars().take(16).collect();
        let time = timestamp(change.detected);
        self.post_event(name, uid, &format!("{name}.{id}"), "Normal", reason, &message, &time).await;
    }

    async fn record_failure(&self, name: &str, uid: Option<&str>, record: &WatchRecord) {
        let since = record.failing_since.map(timestamp).unwrap_or_default();
        let id = builder_monitor_core::event::failure_event_id(
            name,
            builder_monitor_core::event::EventType::CheckFailed,
            &since,
            record.failure_runs,
        );
        let reason = condition_reason(record.last_error_reason.as_deref().unwrap_or("check_failed"));
        let message = record.last_error.clone().unwrap_or_else(|| "the check failed".into());
        let id: String = id.chars().take(16).collect();
        self.post_event(name, uid, &format!("{name}.{id}"), "Warning", &reason, &message, &since).await;
    }

    #[allow(clippy::too_many_arguments)]
    async fn post_event(
        &self,
        name: &str,
        uid: Option<&str>,
        event_name: &str,
        type_: &str,
        reason: &str,
        message: &str,
        time: &str,
    ) {
        if self.recorded.lock().unwrap_or_else(|e| e.into_inner()).contains(event_name) {
            return;
        }
        let time = time.parse::<Timestamp>().unwrap_or_else(|_| Timestamp::now());
        let event = KubeEvent {
            metadata: ObjectMeta {
                name: Some(event_name.to_string()),
                labels: Some([(MANAGED_BY.to_string(), FIELD_MANAGER.to_string())].into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some(crd::API_VERSION.into()),
                kind: Some(crd::KIND.into()),
                name: Some(name.to_string()),
                uid: uid.map(str::to_string),
                ..Default::default()
            },
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            // The API server refuses messages over 1 KiB.
            message: Some(builder_monitor_core::text::clip(message, 1000).into_owned()),
            first_timestamp: Some(Time(time)),
            last_timestamp: Some(Time(time)),
            event_time: Some(MicroTime(time)),
            count: Some(1),
            action: Some("Check".into()),
            source: Some(EventSource { component: Some(FIELD_MANAGER.into()), host: None }),
            reporting_component: Some(FIELD_MANAGER.into()),
            reporting_instance: Some(self.identity.clone()),
            ..Default::default()
        };
        match self.events.create(&PostParams::default(), &event).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(err) => {
                tracing::warn!(cluster_builder = name, event = event_name, error = %err, "cannot record the Kubernetes Event");
                return;
            }
        }
        self.recorded.lock().unwrap_or_else(|e| e.into_inner()).insert(event_name.to_string());
    }

    /// Applies the specs, publishes every status, then the builders each check the ledger commits
    /// concerns, until `stop`; failed writes are retried.
    pub async fn run(self, stop: CancellationToken) {
        // Subscribed before the first publication, so no commit falls between the two.
        let commits = self.ledger.commits();
        let following = Following {
            publisher: self,
            commits,
            committed: BTreeSet::new(),
            everything: true,
            dirty: BTreeSet::new(),
            specs_applied: false,
        };
        worker::run(following, stop, Duration::ZERO).await;
    }

    /// The builders a commit of watch `name` concerns: the builder itself, or the builders whose
    /// pinned metadata names that run image (as `config::run_image_watch` decides).
    async fn builders_of(&self, name: &str) -> Result<Vec<String>, crate::ledger::LedgerError> {
        if self.config.builder(name).is_some() {
            return Ok(vec![name.to_string()]);
        }
        // One read of every record, not one per builder: a run image may serve thousands.
        let records: std::collections::HashMap<String, WatchRecord> =
            self.ledger.watches().await?.into_iter().map(|r| (r.name.clone(), r)).collect();
        let mut users = Vec::new();
        for builder in &self.config.builders {
            let image = builder.image.to_string();
            let record = records.get(&builder.name).filter(|r| r.image == image);
            let metadata = record.and_then(WatchRecord::pinned_metadata);
            if let Ok(Some(run)) = run_image_watch(builder, metadata.as_ref())
                && run_watch_name(&run) == name
            {
                users.push(builder.name.clone());
            }
        }
        Ok(users)
    }
}

/// The publisher following the ledger's commits.
struct Following {
    publisher: Publisher,
    commits: broadcast::Receiver<String>,
    /// Watches committed since the last turn.
    committed: BTreeSet<String>,
    /// Every builder is to be published (at start, and after falling behind the ledger).
    everything: bool,
    /// Builders to publish (those whose last write failed are retried).
    dirty: BTreeSet<String>,
    specs_applied: bool,
}

impl Following {
    /// Names were dropped: which builders they concern is unknown, so all are published.
    fn lagged(&mut self, missed: u64) {
        tracing::debug!(missed, "fell behind the ledger's commits; publishing every builder");
        self.everything = true;
    }
}

impl Work for Following {
    async fn start_due(&mut self, _tasks: &mut JoinSet<()>) -> Option<Duration> {
        loop {
            match self.commits.try_recv() {
                Ok(name) => {
                    self.committed.insert(name);
                }
                Err(broadcast::error::TryRecvError::Lagged(missed)) => self.lagged(missed),
                Err(_) => break,
            }
        }
        let publisher = &self.publisher;
        // A leader that has lost the Lease writes nothing more (what is dirty stays so).
        if !publisher.ledger.may_write() {
            return Some(RETRY);
        }
        if !self.specs_applied {
            match publisher.publish_specs().await {
                Ok(()) => self.specs_applied = true,
                Err(err) => publisher.retrying(&err, None).await,
            }
        }
        if !self.specs_applied {
            return Some(RETRY);
        }
        if std::mem::take(&mut self.everything) {
            self.committed.clear();
            self.dirty.extend(publisher.config.builders.iter().map(|b| b.name.clone()));
        }
        for name in std::mem::take(&mut self.committed) {
            match publisher.builders_of(&name).await {
                Ok(builders) => self.dirty.extend(builders),
                Err(err) => {
                    tracing::warn!(watch = %name, error = %err, "cannot read the ledger; retrying");
                    self.committed.insert(name);
                }
            }
        }
        let mut failed = BTreeSet::new();
        for name in std::mem::take(&mut self.dirty) {
            if let Err(err) = publisher.publish_status(&name).await {
                publisher.retrying(&err, Some(&name)).await;
                failed.insert(name);
            }
        }
        self.dirty = failed;
        (!self.dirty.is_empty() || !self.committed.is_empty()).then_some(RETRY)
    }

    async fn woken(&mut self) {
        match self.commits.recv().await {
            Ok(name) => {
                self.committed.insert(name);
            }
            Err(broadcast::error::RecvError::Lagged(missed)) => self.lagged(missed),
            // The publisher holds the ledger, whose signals hold the sender: never closed here.
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests;
