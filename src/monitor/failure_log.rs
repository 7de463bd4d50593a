//! What failed checks and recoveries log, so that an operator reads a registry outage as one line
//! when it starts and one when it ends, and a watch failing alone as one WARN and one INFO:
//!
//! - A failure whose reason concerns the whole registry ([`registry_wide`]: it does not answer,
//!   answers 5xx, or rate-limits) makes the watch part of its registry's outage. The first such
//!   failure opens the outage with one WARN (`registry unavailable; …`, naming the watch, the error
//!   and the next check that made it known); each watch's own failures and recoveries in it are
//!   DEBUG. Once no watch of the registry fails for such a reason any more, one INFO ends it.
//! - Any other failure (a missing tag, 401/403, a manifest the monitor cannot use) is the watch's
//!   own: one WARN at its first failure (again only when the reason changes), DEBUG for the
//!   repeats, one INFO when it recovers.
//!
//! Independent of `[[alerts]]` (`alert::outage` decides, from the ledger, who gets which message).
//! Kept in memory: after a restart a failing watch's WARN, or an outage's, is logged once more.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};

use super::decide::Found;
use super::{Monitor, Watch};
use crate::ledger::WatchRecord;
use crate::schedule::after_failure;
use builder_monitor_core::schedule::{next_check, timestamp};

/// Whether a failure says the registry as a whole is unwell rather than one tag or repository:
/// it does not answer or answers 5xx (`registry_unavailable`; its circuit is open too), or it
/// rate-limits (`rate_limited`; the pause holds back every request to it). A 401/403, a missing
/// tag, a bad manifest or a configuration error is one watch's problem, logged as the watch's.
pub fn registry_wide(reason: &str) -> bool {
    matches!(reason, "registry_unavailable" | "rate_limited")
}

/// The level of a watch's own line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warn,
}

/// What one check logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lines {
    /// The watch's own line (`check failed; pin kept`, `check recovered`), at this level; none for
    /// a success after successes.
    pub watch: Option<Level>,
    /// This failure opens its registry's outage (its WARN).
    pub outage_started: bool,
    /// The registry's outage ended with this check (its INFO).
    pub outage_ended: Option<Ended>,
}

/// An outage over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub since: DateTime<Utc>,
    /// The watches that failed during it.
    pub watches: usize,
}

/// One registry's outage, while it lasts.
#[derive(Debug)]
struct Outage {
    since: DateTime<Utc>,
    /// Its watches failing now for a registry-wide reason.
    failing: BTreeSet<String>,
    /// Every watch that failed during it.
    watches: BTreeSet<String>,
}

/// The log's memory: registries in an outage, and the failing watches.
#[derive(Debug, Default)]
pub struct FailureLog {
    outages: HashMap<String, Outage>,
    /// Failing watches, each with the reason its WARN named (None: it has not logged one; its
    /// failures so far were part of an outage).
    failing: HashMap<String, Option<String>>,
}

impl FailureLog {
    /// A failed check of `watch`, of `registry`, for `reason`, at `now`.
    pub fn failed(&mut self, registry: &str, watch: &str, reason: &str, now: DateTime<Utc>) -> Lines {
        let warned = self.failing.entry(watch.to_string()).or_default();
        if registry_wide(reason) {
            let outage = self.outages.entry(registry.to_string());
            let started = matches!(outage, std::collections::hash_map::Entry::Vacant(_));
            let outage =
                outage.or_insert_with(|| Outage { since: now, failing: BTreeSet::new(), watches: BTreeSet::new() });
            outage.failing.insert(watch.to_string());
            outage.watches.insert(watch.to_string());
            return Lines { watch: Some(Level::Debug), outage_started: started, outage_ended: None };
        }
        let level = if warned.as_deref() == Some(reason) { Level::Debug } else { Level::Warn };
        *warned = Some(reason.to_string());
        // It fails on its own now: the registry answered it.
        let outage_ended = self.leave(registry, watch, &|_| true);
        Lines { watch: Some(level), outage_started: false, outage_ended }
    }

    /// A check of `watch` that did not fail. `recorded` is the reason of the failure the ledger
    /// had it failing with (None when it was not failing), which decides its line when this
    /// process does not know the watch (it started since). `known` says whether a watch is still
    /// watched: one that no longer is cannot keep an outage open.
    pub fn succeeded(
        &mut self,
        registry: &str,
        watch: &str,
        recorded: Option<&str>,
        known: &dyn Fn(&str) -> bool,
    ) -> Lines {
        let level = match self.failing.remove(watch) {
            Some(Some(_)) => Some(Level::Info),
            Some(None) => Some(Level::Debug),
            None => recorded.map(|r| if registry_wide(r) { Level::Debug } else { Level::Info }),
        };
        let outage_ended = self.leave(registry, watch, known);
        Lines { watch: level, outage_started: false, outage_ended }
    }

    /// `watch` no longer fails for a registry-wide reason: the registry's outage is over when no
    /// watch (still watched) does.
    fn leave(&mut self, registry: &str, watch: &str, known: &dyn Fn(&str) -> bool) -> Option<Ended> {
        let outage = self.outages.get_mut(registry)?;
        outage.failing.remove(watch);
        outage.failing.retain(|w| known(w));
        if !outage.failing.is_empty() {
            return None;
        }
        let outage = self.outages.remove(registry)?;
        Some(Ended { since: outage.since, watches: outage.watches.len() })
    }
}

/// A tracing event at a level chosen at run time.
macro_rules! log_at {
    ($level:expr, $($arg:tt)+) => {
        match $level {
            Level::Warn => tracing::warn!($($arg)+),
            Level::Info => tracing::info!($($arg)+),
            Level::Debug => tracing::debug!($($arg)+),
        }
    };
}

impl Monitor {
    /// The lines of a check's failure or recovery, and of its registry's outage starting or ending.
    ///
    /// A failure names the next attempt. Under the scheduler (`retries`) that is the retry it
    /// returns, decided here from the ledger's count of failures in a row, which the scheduler
    /// then keeps, so the log names the attempt that happens; a single run (`run --once`, a check
    /// asked for) names the schedule's next check, as `status` does.
    pub(super) fn log_failure(
        &self,
        watch: &Watch,
        record: Option<&WatchRecord>,
        found: &Found,
        now: DateTime<Utc>,
        retries: bool,
    ) -> Option<DateTime<Utc>> {
        let registry = watch.image.registry();
        let failures = record.map_or(0, |r| r.consecutive_failures);
        let mut log = self.failure_log.lock().unwrap_or_else(|e| e.into_inner());
        let Found::Failed(err) = found else {
            let recorded = record.filter(|r| r.consecutive_failures > 0).map(|r| r.last_error_reason.as_deref());
            let known = |name: &str| self.handle.config.builder(name).is_some() || self.run_image_known(name);
            let lines = log.succeeded(registry, &watch.name, recorded.map(Option::unwrap_or_default), &known);
            drop(log);
            if let Some(level) = lines.watch {
                log_at!(level, watch = %watch.name, after_failures = failures, "check recovered");
            }
            log_ended(registry, lines.outage_ended, now);
            return None;
        };
        let lines = log.failed(registry, &watch.name, err.reason(), now);
        drop(log);
        let failures = failures + 1;
        let (retry, next_check, jitter) = if retries {
            let retry = retry_at(failures, watch, now);
            (retry, retry.map(timestamp), Duration::ZERO)
        } else {
            // From the recorded check time, so the log and `status` name the same moment.
            (None, next_check(&watch.schedule, now.trunc_subsecs(0)), watch.jitter)
        };
        let next_check = next_check.as_deref().unwrap_or("when woken");
        let jitter = humantime::format_duration(jitter);
        if lines.outage_started {
            tracing::warn!(registry, watch = %watch.name, image = %watch.image, reason = err.reason(), error = %err, consecutive_failures = failures, next_check, %jitter, "registry unavailable; its watches' failed checks are logged at debug until it answers again");
        }
        if let Some(level) = lines.watch {
            log_at!(level, watch = %watch.name, image = %watch.image, reason = err.reason(), error = %err, consecutive_failures = failures, next_check, %jitter, "check failed; pin kept");
        }
        log_ended(registry, lines.outage_ended, now);
        retry
    }

    /// Whether `name` is a run image watch in force.
    fn run_image_known(&self, name: &str) -> bool {
        self.handle.run_images.lock().unwrap_or_else(|e| e.into_inner()).entries.contains_key(name)
    }
}

/// When the scheduler tries a watch again after its `failures`-th failure in a row at `now`
/// ([`after_failure`]), on a whole second, so the logged time (whole seconds) is the attempt's.
fn retry_at(failures: u32, watch: &Watch, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let delay = after_failure(failures, &watch.schedule, watch.jitter, now)?;
    let at = now + chrono::Duration::from_std(delay).ok()?;
    let whole = at.trunc_subsecs(0);
    Some(if whole < at { whole + chrono::Duration::seconds(1) } else { whole })
}

/// The INFO ending an outage.
fn log_ended(registry: &str, ended: Option<Ended>, now: DateTime<Utc>) {
    if let Some(Ended { since, watches }) = ended {
        let lasted = (now - since).to_std().unwrap_or_default();
        let lasted = humantime::format_duration(Duration::from_secs(lasted.as_secs()));
        tracing::info!(registry, since = %timestamp(since), %lasted, watches, "registry recovered; its watches' checks succeed again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    const ALL: &dyn Fn(&str) -> bool = &|_| true;

    fn levels(lines: &[Lines]) -> Vec<Option<Level>> {
        lines.iter().map(|l| l.watch).collect()
    }

    #[test]
    fn a_watch_failing_alone_warns_once_and_recovers_once() {
        let mut log = FailureLog::default();
        let lines: Vec<Lines> = (0..4).map(|i| log.failed("r", "a", "tag_missing", at(i))).collect();
        assert_eq!(levels(&lines), [Some(Level::Warn), Some(Level::Debug), Some(Level::Debug), Some(Level::Debug)]);
        assert!(lines.iter().all(|l| !l.outage_started && l.outage_ended.is_none()));
        // Another reason is another problem: a WARN again.
        assert_eq!(log.failed("r", "a", "unauthorized", at(5)).watch, Some(Level::Warn));
        assert_eq!(log.succeeded("r", "a", Some("unauthorized"), ALL).watch, Some(Level::Info));
        assert_eq!(log.succeeded("r", "a", None, ALL).watch, None, "a success after successes logs nothing");
        assert_eq!(log.failed("r", "a", "tag_missing", at(9)).watch, Some(Level::Warn), "a new run warns again");
    }

    #[test]
    fn an_outage_is_one_start_and_one_end_whatever_the_number_of_watches() {
        let mut log = FailureLog::default();
        let watches: Vec<String> = (0..51).map(|i| format!("b{i}")).collect();
        let mut started = 0;
        for round in 0..3 {
            for w in &watches {
                let lines = log.failed("r", w, "registry_unavailable", at(round));
                assert_eq!(lines.watch, Some(Level::Debug));
                started += usize::from(lines.outage_started);
            }
        }
        assert_eq!(started, 1);
        // Another registry's outage is its own.
        assert!(log.failed("q", "other", "rate_limited", at(1)).outage_started);
        let mut ended = Vec::new();
        for w in &watches {
            let lines = log.succeeded("r", w, Some("registry_unavailable"), ALL);
            assert_eq!(lines.watch, Some(Level::Debug));
            ended.extend(lines.outage_ended);
        }
        assert_eq!(ended, [Ended { since: at(0), watches: 51 }], "over when the last watch recovers");
    }

    #[test]
    fn a_watch_warned_on_its_own_still_recovers_at_info_after_an_outage() {
        let mut log = FailureLog::default();
        assert_eq!(log.failed("r", "a", "tag_missing", at(0)).watch, Some(Level::Warn));
        assert!(log.failed("r", "a", "registry_unavailable", at(1)).outage_started);
        let lines = log.succeeded("r", "a", Some("registry_unavailable"), ALL);
        assert_eq!(lines.watch, Some(Level::Info));
        assert!(lines.outage_ended.is_some());
    }

    #[test]
    fn a_watch_of_an_outage_failing_on_its_own_warns_and_may_end_the_outage() {
        let mut log = FailureLog::default();
        assert!(log.failed("r", "a", "registry_unavailable", at(0)).outage_started);
        // The registry answers a's check now, with a 404: a's own problem, and the outage is over.
        let lines = log.failed("r", "a", "tag_missing", at(1));
        assert_eq!(lines.watch, Some(Level::Warn));
        assert_eq!(lines.outage_ended, Some(Ended { since: at(0), watches: 1 }));
        assert_eq!(log.succeeded("r", "a", Some("tag_missing"), ALL).watch, Some(Level::Info));
    }

    #[test]
    fn a_watch_no_longer_watched_does_not_hold_an_outage_open() {
        let mut log = FailureLog::default();
        log.failed("r", "a", "registry_unavailable", at(0));
        log.failed("r", "run:gone", "registry_unavailable", at(0));
        let lines = log.succeeded("r", "a", Some("registry_unavailable"), &|w| w != "run:gone");
        assert!(lines.outage_ended.is_some());
    }

    #[test]
    fn after_a_restart_the_ledger_decides_a_recovery_line() {
        let mut log = FailureLog::default();
        assert_eq!(log.succeeded("r", "a", Some("tag_missing"), ALL).watch, Some(Level::Info));
        assert_eq!(log.succeeded("r", "b", Some("registry_unavailable"), ALL).watch, Some(Level::Debug));
        assert_eq!(log.succeeded("r", "c", Some(""), ALL).watch, Some(Level::Info));
    }
}
