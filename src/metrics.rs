//! Prometheus metrics: one explicit registry (no globals) that the registry client, the monitor
//! and the alert worker record into, encoded as OpenMetrics text for `GET /metrics`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct CheckLabels {
    pub builder: String,
    pub result: String,
    /// Why a check failed (`RegistryError::reason`, the reason the check records). A successful
    /// check's series has no `reason` label, which PromQL reads as `reason=""`.
    pub reason: Option<&'static str>,
}

impl CheckLabels {
    /// The labels of a check of `builder` that succeeded (`failed` is `None`) or failed for `failed`.
    pub fn new(builder: &str, failed: Option<&'static str>) -> Self {
        CheckLabels {
            builder: builder.to_string(),
            result: if failed.is_some() { "error" } else { "ok" }.into(),
            reason: failed,
        }
    }
}

impl EncodeLabelSet for CheckLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        let mut labels = vec![("builder", self.builder.as_str()), ("result", self.result.as_str())];
        labels.extend(self.reason.map(|r| ("reason", r)));
        labels.encode(encoder)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub registry: String,
    pub method: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistryLabels {
    pub registry: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChangeLabels {
    pub builder: String,
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuilderLabels {
    pub builder: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PinLabels {
    pub builder: String,
    pub digest: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    pub alert: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionStateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabels {
    pub source: String,
    pub result: String,
}

pub struct Metrics {
    registry: Registry,
    pub checks: Family<CheckLabels, Counter>,
    pub check_duration: Histogram,
    pub registry_requests: Family<RequestLabels, Counter>,
    pub rate_limited: Family<RegistryLabels, Counter>,
    pub rate_limit_wait: Family<RegistryLabels, Counter<f64, AtomicU64>>,
    pub token_fetches: Family<RegistryLabels, Counter>,
    pub changes: Family<ChangeLabels, Counter>,
    pub last_success: Family<BuilderLabels, Gauge<f64, AtomicU64>>,
    pub pinned: Family<PinLabels, Gauge>,
    pub deliveries: Family<DeliveryLabels, Counter>,
    pub hooks: Family<HookLabels, Counter>,
    /// 1 while this replica holds the lease (or runs without leader election), else 0.
    pub leader: Gauge,
    /// ClusterBuilder writes, by result (ok, error).
    pub publishes: Family<ResultLabels, Counter>,
    /// Open actions by state, sampled from the ledger while this replica acts.
    pub actions: Family<ActionStateLabels, Gauge>,
    /// Watches whose last check failed, per registry.
    pub watches_failing: Family<RegistryLabels, Gauge>,
    /// The digest each builder's `pinned_info` series names, to retire the old series on a move.
    pinned_now: Mutex<std::collections::HashMap<String, String>>,
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::with_prefix("builder_monitor");
        let checks = Family::default();
        registry.register(
            "checks",
            "Checks of watched tags, by result (ok, error) and a failure's reason",
            checks.clone(),
        );
        let check_duration = Histogram::new(exponential_buckets(0.001, 2.0, 16));
        registry.register(
            "check_duration_seconds",
            "Time a check took, registry waits included",
            check_duration.clone(),
        );
        let registry_requests = Family::default();
        registry.register(
            "registry_requests",
            "Requests sent to registries (token fetches included), by method and HTTP status",
            registry_requests.clone(),
        );
        let rate_limited = Family::default();
        registry.register("registry_rate_limited", "HTTP 429 answers from registries", rate_limited.clone());
        let rate_limit_wait = Family::default();
        registry.register(
            "rate_limit_wait_seconds",
            "Time requests waited for a registry's limiter or Retry-After pause",
            rate_limit_wait.clone(),
        );
        let token_fetches = Family::default();
        registry.register(
            "token_fetches",
            "Bearer tokens fetched from registries' token services",
            token_fetches.clone(),
        );
        let changes = Family::default();
        registry.register("changes", "Recorded moves, by kind (rebase, rebuild, unknown, none)", changes.clone());
        let last_success = Family::default();
        registry.register(
            "last_successful_check_timestamp_seconds",
            "Unix time of the last successful check",
            last_success.clone(),
        );
        let pinned = Family::default();
        registry.register("pinned_info", "The digest each watched tag is pinned to (value 1)", pinned.clone());
        let deliveries = Family::default();
        registry.register(
            "alert_deliveries",
            "Alert delivery attempts, by outcome (sent, retry, dead)",
            deliveries.clone(),
        );
        let hooks = Family::default();
        registry.register("hooks", "Registry push hooks received, by source and result", hooks.clone());
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica is the one acting (holds the lease, or runs without leader election)",
            leader.clone(),
        );
        let publishes = Family::default();
        registry.register(
            "cluster_builder_writes",
            "ClusterBuilder spec and status writes, by result",
            publishes.clone(),
        );
        let actions = Family::default();
        registry.register(
            "actions",
            "Rebuilds and rebases not finished yet, by state (pending, waiting, running, held, awaiting_approval)",
            actions.clone(),
        );
        let watches_failing = Family::default();
        registry.register(
            "watches_failing",
            "Watches (builders and run images) whose last check failed, per registry",
            watches_failing.clone(),
        );
        Arc::new(Metrics {
            registry,
            checks,
            check_duration,
            registry_requests,
            rate_limited,
            rate_limit_wait,
            token_fetches,
            changes,
            last_success,
            pinned,
            deliveries,
            hooks,
            leader,
            publishes,
            actions,
            watches_failing,
            pinned_now: Mutex::new(Default::default()),
        })
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Points `pinned_info{builder}` at `digest`, retiring the series of the previous digest.
    pub fn set_pinned(&self, builder: &str, digest: &str) {
        let mut now = self.pinned_now.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = now.insert(builder.to_string(), digest.to_string())
            && old != digest
        {
            self.pinned.remove(&PinLabels { builder: builder.to_string(), digest: old });
        }
        self.pinned.get_or_create(&PinLabels { builder: builder.to_string(), digest: digest.to_string() }).set(1);
    }

    /// Sets `actions{state}` from the states of the ledger's open actions; a state with none left
    /// reads 0.
    pub fn set_open_actions<'a>(&self, open_states: impl IntoIterator<Item = &'a str>) {
        let open: Vec<&str> = open_states.into_iter().collect();
        for state in ["pending", "waiting", "running", "held", "awaiting_approval"] {
            let count = open.iter().filter(|s| **s == state).count();
            self.actions.get_or_create(&ActionStateLabels { state: state.to_string() }).set(count as i64);
        }
    }

    pub fn registry_labels(registry: &str) -> RegistryLabels {
        RegistryLabels { registry: registry.to_string() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_actions_are_counted_by_state_and_read_zero_when_gone() {
        let metrics = Metrics::new();
        metrics.set_open_actions(["pending", "running", "pending"]);
        let text = metrics.encode();
        assert!(text.contains("builder_monitor_actions{state=\"pending\"} 2\n"), "{text}");
        assert!(text.contains("builder_monitor_actions{state=\"running\"} 1\n"), "{text}");
        metrics.set_open_actions([]);
        let text = metrics.encode();
        assert!(text.contains("builder_monitor_actions{state=\"pending\"} 0\n"), "{text}");
    }
}
