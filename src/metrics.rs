//! Prometheus metrics: one explicit registry (no globals) that the registry client, the monitor
//! and the alert worker record into, plus a compact per-watch table, served as OpenMetrics text.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Bound;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use builder_monitor_core::reference::Sha256Digest;

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
pub struct LimiterLabels {
    pub limiter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

/// A request to a Kubernetes API server (`cluster::requests`): its verb and resource.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeRequestLabels {
    pub verb: String,
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HookLabels {
    pub source: String,
    pub result: String,
}

/// The series of every watch in one table (~150 bytes a watch, where a family per metric held a
/// label set, a series object and copies of the name for each: ~0.5 KiB a watch, ~5 MiB at 10,000
/// builders), sorted by name, and written out a slice at a time (see [`Exposition`]). The lines
/// are written here, not by prometheus-client: its encoder renders a whole registry into one
/// string, which is what serving in pieces avoids; the unit tests pin the format it would write.
#[derive(Debug, Default)]
struct WatchSeries {
    table: Mutex<BTreeMap<Box<str>, Series>>,
}

/// One watch's series. Kept small, one a watch for the daemon's life: 72 bytes.
#[derive(Debug)]
struct Series {
    ok: u64,
    /// Failed checks by reason (a watch rarely fails for more than one or two, so a new reason
    /// reallocates rather than a `Vec` keeping its capacity's 8 bytes).
    failed: Box<[(&'static str, u64)]>,
    /// Unix time of the last successful check; NaN before one (an `Option` takes 16 bytes).
    last_success: f64,
    pinned: Option<Pinned>,
}

impl Default for Series {
    fn default() -> Self {
        Series { ok: 0, failed: Box::default(), last_success: f64::NAN, pinned: None }
    }
}

/// A watch's pinned digest: its 32 bytes when it is a `sha256:` one (every registry's), where its
/// text took an allocation of 71 bytes a watch; else that text.
#[derive(Debug, PartialEq, Eq)]
enum Pinned {
    Sha256(Sha256Digest),
    Other(Box<str>),
}

impl Pinned {
    fn new(digest: &str) -> Self {
        Sha256Digest::parse(digest).map_or_else(|| Pinned::Other(digest.into()), Pinned::Sha256)
    }

    fn is(&self, digest: &str) -> bool {
        match self {
            Pinned::Sha256(sha256) => sha256.is(digest),
            Pinned::Other(text) => &**text == digest,
        }
    }
}

impl WatchSeries {
    fn update(&self, watch: &str, change: impl FnOnce(&mut Series)) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        match table.get_mut(watch) {
            Some(series) => change(series),
            None => change(table.entry(watch.into()).or_default()),
        }
    }
}

/// Writes one watch's lines of a family.
type WatchLines = fn(&mut String, &str, &Series);

/// The per-watch families: name, type, help, and how one watch's lines are written.
const WATCH_FAMILIES: [(&str, &str, &str, WatchLines); 3] = [
    (
        "checks",
        "counter",
        "Checks of watched tags, by result (ok, error) and a failure's reason.",
        |out, name, series| {
            if series.ok > 0 {
                let _ = writeln!(
                    out,
                    "builder_monitor_checks_total{{builder=\"{}\",result=\"ok\"}} {}",
                    escape(name),
                    series.ok
                );
            }
            for (reason, count) in &series.failed {
                let _ = writeln!(
                    out,
                    "builder_monitor_checks_total{{builder=\"{}\",result=\"error\",reason=\"{reason}\"}} {count}",
                    escape(name)
                );
            }
        },
    ),
    (
        "last_successful_check_timestamp_seconds",
        "gauge",
        "Unix time of the last successful check.",
        |out, name, series| {
            let at = series.last_success;
            if !at.is_nan() {
                // `{:?}` keeps the `.0` of a whole number, as the OpenMetrics encoder writes floats.
                let _ = writeln!(
                    out,
                    "builder_monitor_last_successful_check_timestamp_seconds{{builder=\"{}\"}} {at:?}",
                    escape(name)
                );
            }
        },
    ),
    ("pinned_info", "gauge", "The digest each watched tag is pinned to (value 1).", |out, name, series| {
        let line = |out: &mut String, digest: &dyn std::fmt::Display| {
            let _ = writeln!(out, "builder_monitor_pinned_info{{builder=\"{}\",digest=\"{digest}\"}} 1", escape(name));
        };
        match &series.pinned {
            // Hex digits: nothing to escape.
            Some(Pinned::Sha256(digest)) => line(out, digest),
            Some(Pinned::Other(digest)) => line(out, &escape(digest)),
            None => {}
        }
    }),
];

/// Watches written per piece of the exposition (~80 KiB of text).
const WATCHES_PER_PIECE: usize = 512;

/// An OpenMetrics label value: backslash, quote and newline escaped.
fn escape(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains(['\\', '"', '\n']) {
        value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").into()
    } else {
        value.into()
    }
}

/// The exposition in pieces: the registry's families, then each per-watch family
/// [`WATCHES_PER_PIECE`] watches at a time, then `# EOF`. At 10,000 builders the whole text is
/// ~4 MiB; served piece by piece, a scrape holds ~80 KiB of it.
pub struct Exposition {
    metrics: Arc<Metrics>,
    step: Step,
    /// The last watch written of the current family.
    after: Option<Box<str>>,
}

enum Step {
    Registry,
    Family(usize),
    Eof,
    Done,
}

impl Iterator for Exposition {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let mut out = String::new();
        match self.step {
            Step::Registry => {
                let _ = prometheus_client::encoding::text::encode_registry(&mut out, &self.metrics.registry);
                self.step = Step::Family(0);
            }
            Step::Family(family) => {
                let (name, kind, help, write) = WATCH_FAMILIES[family];
                if self.after.is_none() {
                    let _ = write!(out, "# HELP builder_monitor_{name} {help}\n# TYPE builder_monitor_{name} {kind}\n");
                }
                let table = self.metrics.watches.table.lock().unwrap_or_else(|e| e.into_inner());
                let after = match &self.after {
                    Some(after) => Bound::Excluded(&**after),
                    None => Bound::Unbounded,
                };
                let mut written = 0;
                let mut last = None;
                for (watch, series) in table.range::<str, _>((after, Bound::Unbounded)).take(WATCHES_PER_PIECE) {
                    write(&mut out, watch, series);
                    written += 1;
                    last = Some(watch);
                }
                if written < WATCHES_PER_PIECE {
                    self.after = None;
                    self.step = if family + 1 < WATCH_FAMILIES.len() { Step::Family(family + 1) } else { Step::Eof };
                } else {
                    self.after = last.cloned();
                }
            }
            Step::Eof => {
                out.push_str("# EOF\n");
                self.step = Step::Done;
            }
            Step::Done => return None,
        }
        Some(out)
    }
}

pub struct Metrics {
    registry: Registry,
    /// `checks`, `last_successful_check_timestamp_seconds` and `pinned_info`: the series per watch.
    watches: WatchSeries,
    pub check_duration: Histogram,
    pub registry_requests: Family<RequestLabels, Counter>,
    pub rate_limited: Family<RegistryLabels, Counter>,
    pub rate_limit_wait: Family<RegistryLabels, Counter<f64, AtomicU64>>,
    /// Time actions' requests waited for a registry's pause or their pace (not the watching's limiter).
    pub action_pace_wait: Family<RegistryLabels, Counter<f64, AtomicU64>>,
    /// Actions' requests per second to a registry as its answers set it (AIMD); 0: unpaced.
    pub action_rate: Family<RegistryLabels, Gauge<f64, AtomicU64>>,
    pub token_fetches: Family<RegistryLabels, Counter>,
    pub changes: Family<ChangeLabels, Counter>,
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
    /// Client addresses each of the HTTP server's per-client limiters remembers.
    pub http_clients_tracked: Family<LimiterLabels, Gauge>,
    /// OSV mirror files not read as records, by reason (vulns::load::Skip).
    pub osv_skipped: Family<ReasonLabels, Counter>,
    /// OSV records kept in the index in force.
    pub osv_records: Gauge,
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Self::with_log_drops(Counter::default(), Family::default(), true)
    }

    /// With `log_lines_dropped` counting into `dropped`: the process's log stream keeps that
    /// counter (logging is process-wide), the daemon's registry serves it. The OSV families are
    /// served only with `vulnerabilities` (a `[vulnerabilities]` section): without one, a
    /// `osv_records 0` would read as an empty mirror. `kube_requests` counts the requests of the
    /// process's Kubernetes clients (`cluster::requests`), process-wide for the same reason.
    pub fn with_log_drops(
        dropped: Counter,
        kube_requests: Family<KubeRequestLabels, Counter>,
        vulnerabilities: bool,
    ) -> Arc<Self> {
        let mut registry = Registry::with_prefix("builder_monitor");
        let watches = WatchSeries::default();
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
        let action_pace_wait = Family::default();
        registry.register(
            "action_pace_wait_seconds",
            "Time actions' requests waited for a registry's Retry-After pause or their pace",
            action_pace_wait.clone(),
        );
        let action_rate = Family::default();
        registry.register(
            "registry_action_rate",
            "Actions' requests per second to a registry as its answers set it (0: unpaced)",
            action_rate.clone(),
        );
        let token_fetches = Family::default();
        registry.register(
            "token_fetches",
            "Bearer tokens fetched from registries' token services",
            token_fetches.clone(),
        );
        let changes = Family::default();
        registry.register("changes", "Recorded moves, by kind (rebase, rebuild, unknown, none)", changes.clone());
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
            "Rebuilds and rebases not finished yet, by state (pending, waiting, queued, running, held, awaiting_approval)",
            actions.clone(),
        );
        let watches_failing = Family::default();
        registry.register(
            "watches_failing",
            "Watches (builders and run images) whose last check failed, per registry",
            watches_failing.clone(),
        );
        let http_clients_tracked = Family::default();
        registry.register(
            "http_clients_tracked",
            "Client addresses the HTTP server's per-client limiters remember (hooks, refusal_log), at most 10,000 each",
            http_clients_tracked.clone(),
        );
        let (osv_skipped, osv_records) = (Family::default(), Gauge::default());
        if vulnerabilities {
            registry.register(
                "osv_skipped",
                "OSV mirror files skipped, by reason (too_large, not_json, refused, symlink, path_traversal, unreadable)",
                osv_skipped.clone(),
            );
            registry.register(
                "osv_records",
                "OSV records kept in the vulnerability index in force",
                osv_records.clone(),
            );
        }
        registry.register(
            "log_lines_dropped",
            "Log lines dropped because stderr was closed, failing or not read fast enough",
            dropped,
        );
        registry.register(
            "kube_requests",
            "Requests sent to Kubernetes API servers, by verb and resource (watches counted as they start)",
            kube_requests,
        );
        Arc::new(Metrics {
            registry,
            watches,
            check_duration,
            registry_requests,
            rate_limited,
            rate_limit_wait,
            action_pace_wait,
            action_rate,
            token_fetches,
            changes,
            deliveries,
            hooks,
            leader,
            publishes,
            actions,
            watches_failing,
            http_clients_tracked,
            osv_skipped,
            osv_records,
        })
    }

    /// The OpenMetrics text exposition, whole.
    pub fn encode(self: &Arc<Self>) -> String {
        self.exposition().collect()
    }

    /// The OpenMetrics text exposition, piece by piece (what `GET /metrics` serves).
    pub fn exposition(self: &Arc<Self>) -> Exposition {
        Exposition { metrics: self.clone(), step: Step::Registry, after: None }
    }

    /// Counts a check of `watch` that succeeded (`failed` is `None`, `at` its Unix time) or failed
    /// for the reason `failed`.
    pub fn record_check(&self, watch: &str, failed: Option<&'static str>, at: f64) {
        self.watches.update(watch, |series| match failed {
            None => {
                series.ok += 1;
                series.last_success = at;
            }
            Some(reason) => match series.failed.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, count)) => *count += 1,
                None => {
                    let mut failed = std::mem::take(&mut series.failed).into_vec();
                    failed.push((reason, 1));
                    series.failed = failed.into_boxed_slice();
                }
            },
        });
    }

    /// Points `pinned_info{builder}` at `digest` (the previous digest's series goes).
    pub fn set_pinned(&self, watch: &str, digest: &str) {
        self.watches.update(watch, |series| {
            if !series.pinned.as_ref().is_some_and(|pinned| pinned.is(digest)) {
                series.pinned = Some(Pinned::new(digest));
            }
        });
    }

    /// Checks of `watch` counted so far: successful ones, or failed ones for `failed`.
    pub fn checks_of(&self, watch: &str, failed: Option<&'static str>) -> u64 {
        let table = self.watches.table.lock().unwrap_or_else(|e| e.into_inner());
        table.get(watch).map_or(0, |series| match failed {
            None => series.ok,
            Some(reason) => series.failed.iter().find(|(r, _)| *r == reason).map_or(0, |(_, n)| *n),
        })
    }

    /// Sets `actions{state}` from the states of the ledger's open actions; a state with none left
    /// reads 0.
    pub fn set_open_actions<'a>(&self, open_states: impl IntoIterator<Item = &'a str>) {
        let open: Vec<&str> = open_states.into_iter().collect();
        for state in ["pending", "waiting", "queued", "running", "held", "awaiting_approval"] {
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
    fn watch_series_count_checks_keep_one_pin_and_come_sorted() {
        let metrics = Metrics::new();
        metrics.record_check("zeta", None, 10.5);
        metrics.record_check("alpha", Some("tag_missing"), 11.0);
        metrics.record_check("alpha", Some("tag_missing"), 12.0);
        metrics.record_check("alpha", None, 13.25);
        metrics.set_pinned("alpha", "sha256:aa");
        metrics.set_pinned("alpha", "sha256:bb");
        let text = metrics.encode();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("alpha") || l.contains("zeta")).collect();
        assert_eq!(
            lines,
            [
                "builder_monitor_checks_total{builder=\"alpha\",result=\"ok\"} 1",
                "builder_monitor_checks_total{builder=\"alpha\",result=\"error\",reason=\"tag_missing\"} 2",
                "builder_monitor_checks_total{builder=\"zeta\",result=\"ok\"} 1",
                "builder_monitor_last_successful_check_timestamp_seconds{builder=\"alpha\"} 13.25",
                "builder_monitor_last_successful_check_timestamp_seconds{builder=\"zeta\"} 10.5",
                "builder_monitor_pinned_info{builder=\"alpha\",digest=\"sha256:bb\"} 1",
            ]
        );
        assert!(text.contains("# TYPE builder_monitor_checks counter\n"), "{text}");
        assert!(text.contains("# TYPE builder_monitor_pinned_info gauge\n"), "{text}");
        assert!(text.ends_with("# EOF\n"));
        assert_eq!((metrics.checks_of("alpha", None), metrics.checks_of("alpha", Some("tag_missing"))), (1, 2));
    }

    /// Every family served is documented in docs/http-api.md under the name it is served as
    /// (counters with `_total`), and `actions{state}` with every state; the OSV families only
    /// with `[vulnerabilities]`.
    #[test]
    fn every_family_served_is_documented_and_osv_ones_only_with_vulnerabilities() {
        let doc = include_str!("../docs/http-api.md");
        let text = Metrics::new().encode();
        // The families registered (a family without series is not in the text yet), and the
        // per-watch ones the exposition writes itself.
        let source = include_str!("metrics.rs");
        let registered = source.split("registry.register(").skip(1).filter_map(|rest| {
            let rest = rest.trim_start().strip_prefix('"')?;
            let name = &rest[..rest.find('"')?];
            name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_').then(|| name.to_string())
        });
        let written = text.lines().filter_map(|l| l.strip_prefix("# TYPE builder_monitor_")?.split(' ').next());
        let mut families: Vec<String> = registered.chain(written.map(str::to_string)).collect();
        families.sort();
        families.dedup();
        assert!(families.len() > 15, "{families:?}");
        for family in &families {
            let named = ["`", "{", "_total`", "_total{"].map(|end| format!("`{family}{end}"));
            assert!(named.iter().any(|n| doc.contains(n.as_str())), "docs/http-api.md does not name {family}");
        }
        for state in ["pending", "waiting", "queued", "running", "held", "awaiting_approval"] {
            let start = doc.find("`actions{state}`").expect("actions{state} documented");
            assert!(
                doc[start..start + 300].contains(&format!("`{state}`")),
                "actions{{state}}: no `{state}` in the docs"
            );
        }
        let plain = Metrics::with_log_drops(Counter::default(), Family::default(), false).encode();
        assert!(!plain.contains("osv_"), "{plain}");
        assert!(text.contains("# TYPE builder_monitor_osv_records gauge"), "{text}");
    }

    #[test]
    fn the_exposition_comes_in_bounded_pieces_each_family_whole_and_once() {
        let metrics = Metrics::new();
        let n = 2 * WATCHES_PER_PIECE + 7;
        for i in 0..n {
            metrics.record_check(&format!("b{i:05}"), None, 100.0 + i as f64);
            metrics.set_pinned(&format!("b{i:05}"), "sha256:aa");
        }
        metrics.record_check("b00003", Some("registry_unavailable"), 1.0);
        let pieces: Vec<String> = metrics.exposition().collect();
        // The registry, three pieces for each of the three families, # EOF.
        assert_eq!(pieces.len(), 1 + 3 * 3 + 1);
        assert!(
            pieces.iter().all(|p| p.lines().count() <= WATCHES_PER_PIECE + 3),
            "a piece holds at most its watches' lines"
        );
        let text = pieces.concat();
        assert_eq!(text, metrics.encode());
        for (family, per_watch) in
            [("checks_total", n + 1), ("last_successful_check_timestamp_seconds", n), ("pinned_info", n)]
        {
            let lines: Vec<&str> =
                text.lines().filter(|l| l.starts_with(&format!("builder_monitor_{family}{{"))).collect();
            assert_eq!(lines.len(), per_watch, "{family}");
            let first = text.lines().position(|l| l == lines[0]).unwrap();
            assert_eq!(text.lines().skip(first).take(lines.len()).collect::<Vec<_>>(), lines, "{family}: contiguous");
        }
        assert!(text.contains("builder_monitor_last_successful_check_timestamp_seconds{builder=\"b00000\"} 100.0\n"));
        assert!(text.contains(
            "# HELP builder_monitor_checks Checks of watched tags, by result (ok, error) and a failure's reason.\n"
        ));
        assert_eq!(text.matches("# TYPE builder_monitor_pinned_info gauge\n").count(), 1);
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn a_pinned_digest_shows_as_it_was_given_whether_kept_as_bytes_or_text() {
        let metrics = Metrics::new();
        let a = format!("sha256:{}", "0a".repeat(32));
        let b = format!("sha256:{}", "f1".repeat(32));
        let pinned = |metrics: &Arc<Metrics>| -> Vec<String> {
            let text = metrics.encode();
            text.lines().filter(|l| l.starts_with("builder_monitor_pinned_info{")).map(str::to_string).collect()
        };
        metrics.set_pinned("x", &a);
        metrics.set_pinned("y", "sha256:A\"B");
        let line = |name: &str, digest: &str| {
            format!("builder_monitor_pinned_info{{builder=\"{name}\",digest=\"{digest}\"}} 1")
        };
        assert_eq!(pinned(&metrics), [line("x", &a), line("y", "sha256:A\\\"B")]);
        assert!(matches!(metrics.watches.table.lock().unwrap()["x"].pinned, Some(Pinned::Sha256(_))));
        assert_eq!(std::mem::size_of::<Series>(), 72);
        metrics.set_pinned("x", &b);
        metrics.set_pinned("y", &a);
        assert_eq!(pinned(&metrics), [line("x", &b), line("y", &a)]);
        metrics.set_pinned("x", &b.to_uppercase());
        assert_eq!(
            pinned(&metrics)[0],
            line("x", &b.to_uppercase()),
            "not a sha256 digest as registries write one: kept as text"
        );
        for reason in ["tag_missing", "unauthorized", "tag_missing"] {
            metrics.record_check("x", Some(reason), 1.0);
        }
        assert_eq!((metrics.checks_of("x", Some("tag_missing")), metrics.checks_of("x", Some("unauthorized"))), (2, 1));
        assert!(!metrics.encode().contains("timestamp_seconds{builder=\"x\"}"), "no success yet");
        metrics.record_check("x", None, 0.0);
        assert!(metrics.encode().contains("timestamp_seconds{builder=\"x\"} 0.0\n"));
    }

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
