//! Quiet outages: which alerts hear of a failing watch, and when — after `failure_threshold` failed
//! checks in a row, and as one `registry.unavailable` when several watches of a registry fail together.
//!
//! Pure decisions over what is known about one registry's failing watches; the monitor records
//! the events they ask for, with their deliveries, in the failing watch's own commit.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};

use builder_monitor_core::event::{self, EventType};

/// A watch that started failing at most this long before another fails together with it; one
/// that started failing earlier is an older, separate problem.
pub const TOGETHER: TimeDelta = TimeDelta::seconds(60);

/// Whether a failure says something about the registry rather than about one tag: a missing tag
/// is that tag's own problem and is never folded into an outage.
pub fn shared(reason: &str) -> bool {
    reason != "tag_missing"
}

/// What one alert wants to hear about one watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audience {
    pub alert: String,
    /// Failed checks in a row before this alert hears of them.
    pub threshold: u32,
    pub check_failed: bool,
    pub check_recovered: bool,
    pub registry_unavailable: bool,
    pub registry_recovered: bool,
}

/// A failing watch of the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    /// When its current run of failures started.
    pub since: DateTime<Utc>,
    pub failures: u32,
    pub reason: String,
    pub message: String,
    /// Alerts its own `check.failed` was sent to (they get its `check.recovered`).
    pub told: BTreeSet<String>,
    /// The run's number (the ledger counts a watch's runs of failures): an outage's id names its
    /// watches' runs, so two outages of the same watches within one second are two.
    pub run: u64,
}

/// An outage announced to some alerts with `registry.unavailable` and not yet declared over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outage {
    /// The `registry.unavailable` event's id.
    pub id: String,
    pub since: DateTime<Utc>,
    /// The watches failing together when it was announced.
    pub watches: Vec<String>,
    pub reason: String,
    pub message: String,
    /// The alerts told of it.
    pub alerts: BTreeSet<String>,
}

impl Outage {
    /// The id of the `registry.recovered` event that ends it.
    pub fn recovered_id(&self) -> String {
        recovered_id(&self.id)
    }
}

/// The id of the `registry.recovered` event ending the outage announced by event `unavailable`.
pub fn recovered_id(unavailable: &str) -> String {
    event::stable_id(&[EventType::RegistryRecovered.as_str(), unavailable])
}

/// What is known about one registry: its failing watches and the outages alerts were told of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryState {
    pub failing: BTreeMap<String, Failing>,
    /// By `registry.unavailable` event id.
    pub open: BTreeMap<String, Outage>,
}

/// How one check of a watch went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `run`: the number of its run of failures (see [`Failing::run`]).
    Failed {
        failures: u32,
        since: DateTime<Utc>,
        reason: String,
        message: String,
        run: u64,
    },
    Succeeded,
}

/// Who is to be told what after one check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Notices {
    /// Alerts to send the watch's own `check.failed` to.
    pub failed: Vec<String>,
    /// Alerts to send the watch's own `check.recovered` to.
    pub recovered: Vec<String>,
    /// Outages to announce (`registry.unavailable`), each to the alerts named.
    pub unavailable: Vec<(Outage, Vec<String>)>,
    /// Outages over (`registry.recovered`), each to the alerts named.
    pub ended: Vec<(Outage, Vec<String>)>,
}

impl Notices {
    pub fn is_empty(&self) -> bool {
        self.failed.is_empty() && self.recovered.is_empty() && self.unavailable.is_empty() && self.ended.is_empty()
    }
}

impl RegistryState {
    /// The alerts to tell about `watch`'s check, and the state once that is recorded.
    ///
    /// An alert hears of a failing watch once `threshold` checks in a row failed: alone, with
    /// `check.failed`, or — when other watches of the registry fail with it and the alert asked
    /// for `registry.unavailable` — with one `registry.unavailable` listing them all, after which
    /// further failing watches of the registry are covered by it. `check.recovered` follows only a
    /// `check.failed` that alert got; `registry.recovered` comes once none of the watches an
    /// outage covers fails any more.
    pub fn decide(
        &self,
        registry: &str,
        watch: &str,
        outcome: &Outcome,
        audience: &dyn Fn(&str) -> Vec<Audience>,
    ) -> (Notices, RegistryState) {
        let mut next = self.clone();
        let mut notices = Notices::default();
        match outcome {
            Outcome::Failed { failures, since, reason, message, run } => {
                // A first failure starts a new run, whatever an older one left behind.
                let earlier = next.failing.remove(watch).filter(|_| *failures > 1);
                let mut entry = earlier.unwrap_or_else(|| Failing {
                    since: *since,
                    failures: 0,
                    reason: reason.clone(),
                    message: message.clone(),
                    told: BTreeSet::new(),
                    run: *run,
                });
                entry.failures = *failures;
                entry.run = *run;
                entry.reason = reason.clone();
                entry.message = message.clone();
                for a in audience(watch) {
                    next.tell_failure(registry, watch, &mut entry, &a, audience, &mut notices);
                }
                next.failing.insert(watch.to_string(), entry);
            }
            Outcome::Succeeded => {
                if let Some(f) = next.failing.remove(watch) {
                    let audience = audience(watch);
                    notices.recovered = f
                        .told
                        .into_iter()
                        .filter(|alert| audience.iter().any(|a| &a.alert == alert && a.check_recovered))
                        .collect();
                }
            }
        }
        // Alerts told of an outage in this very decision see it in the notice; keep theirs current.
        for (outage, _) in notices.unavailable.iter_mut() {
            if let Some(o) = next.open.get(&outage.id) {
                *outage = o.clone();
            }
        }
        next.end_outages(audience, &mut notices);
        (notices, next)
    }

    /// What alert `a` hears of the failing watch `entry`: nothing yet (below its threshold, told
    /// already, or covered by an open outage it heard of), the registry's outage when other
    /// watches fail with it and `a` asked for that, else `check.failed`.
    fn tell_failure(
        &mut self,
        registry: &str,
        watch: &str,
        entry: &mut Failing,
        a: &Audience,
        audience: &dyn Fn(&str) -> Vec<Audience>,
        notices: &mut Notices,
    ) {
        if entry.told.contains(&a.alert) {
            return;
        }
        let groups = a.registry_unavailable && shared(&entry.reason);
        if groups && self.open.values().any(|o| o.alerts.contains(&a.alert)) {
            return;
        }
        if entry.failures < a.threshold {
            return;
        }
        if groups && self.open_outage(registry, watch, entry, a, audience, notices) {
            return;
        }
        if a.check_failed {
            entry.told.insert(a.alert.clone());
            notices.failed.push(a.alert.clone());
        }
    }

    /// Opens (or joins `a` to) the registry's outage over `watch` and the watches failing with it
    /// (for a shared reason, starting within `TOGETHER`, heard of by `a` as an outage). Answers
    /// whether there was one: no other such watch, no outage.
    fn open_outage(
        &mut self,
        registry: &str,
        watch: &str,
        entry: &Failing,
        a: &Audience,
        audience: &dyn Fn(&str) -> Vec<Audience>,
        notices: &mut Notices,
    ) -> bool {
        let companions: Vec<(&String, &Failing)> = self
            .failing
            .iter()
            .filter(|(name, f)| {
                shared(&f.reason)
                    && f.since + TOGETHER >= entry.since
                    && audience(name).iter().any(|b| b.alert == a.alert && b.registry_unavailable)
            })
            .collect();
        if companions.is_empty() {
            return false;
        }
        let since = companions.iter().map(|(_, f)| f.since).chain([entry.since]).min().unwrap_or(entry.since);
        let mut runs: Vec<(String, u64)> =
            companions.iter().map(|(n, f)| (n.to_string(), f.run)).chain([(watch.to_string(), entry.run)]).collect();
        runs.sort();
        let id = unavailable_id(registry, since, &runs);
        let watches: Vec<String> = runs.into_iter().map(|(name, _)| name).collect();
        let outage = self.open.entry(id.clone()).or_insert_with(|| Outage {
            id: id.clone(),
            since,
            watches,
            reason: entry.reason.clone(),
            message: entry.message.clone(),
            alerts: BTreeSet::new(),
        });
        outage.alerts.insert(a.alert.clone());
        match notices.unavailable.iter_mut().find(|(o, _)| o.id == id) {
            Some((_, alerts)) => alerts.push(a.alert.clone()),
            None => notices.unavailable.push((outage.clone(), vec![a.alert.clone()])),
        }
        true
    }

    /// Closes the outages no failing watch stands for any more: `registry.recovered` to the alerts
    /// that heard of each and asked for it.
    fn end_outages(&mut self, audience: &dyn Fn(&str) -> Vec<Audience>, notices: &mut Notices) {
        let ended: Vec<String> = self
            .open
            .values()
            .filter(|o| !self.failing.iter().any(|(n, f)| covers(o, n, f, audience)))
            .map(|o| o.id.clone())
            .collect();
        for id in ended {
            let Some(outage) = self.open.remove(&id) else { continue };
            let alerts = outage
                .alerts
                .iter()
                .filter(|x| {
                    outage.watches.iter().any(|w| audience(w).iter().any(|a| &&a.alert == x && a.registry_recovered))
                })
                .cloned()
                .collect();
            notices.ended.push((outage, alerts));
        }
    }

    /// Failing watches, for metrics and readiness.
    pub fn failing_count(&self) -> usize {
        self.failing.len()
    }
}

/// Whether `outage` still stands for the failing watch `name`: the watch fails for a reason that
/// concerns the registry, and some alert told of the outage did not hear of the watch on its own.
fn covers(outage: &Outage, name: &str, f: &Failing, audience: &dyn Fn(&str) -> Vec<Audience>) -> bool {
    if !shared(&f.reason) {
        return false;
    }
    let audience = audience(name);
    outage
        .alerts
        .iter()
        .any(|x| !f.told.contains(x) && audience.iter().any(|a| &a.alert == x && a.registry_unavailable))
}

/// The id of a `registry.unavailable`: the same for the same registry, start, watches and their
/// runs of failures (a run counted before runs were, 0, adds nothing to the id).
pub fn unavailable_id(registry: &str, since: DateTime<Utc>, watches: &[(String, u64)]) -> String {
    let since = builder_monitor_core::schedule::timestamp_millis(since);
    let runs: Vec<String> = watches.iter().map(|(_, run)| format!("run {run}")).collect();
    let mut parts = vec![EventType::RegistryUnavailable.as_str(), registry, since.as_str()];
    for ((name, run), text) in watches.iter().zip(&runs) {
        parts.push(name);
        if *run > 0 {
            parts.push(text);
        }
    }
    event::stable_id(&parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn audience(alert: &str, threshold: u32, events: &[&str]) -> Audience {
        let wants = |t: &str| events.contains(&t) || events.contains(&"*");
        Audience {
            alert: alert.into(),
            threshold,
            check_failed: wants("check.failed"),
            check_recovered: wants("check.recovered"),
            registry_unavailable: wants("registry.unavailable"),
            registry_recovered: wants("registry.recovered"),
        }
    }

    /// Every watch has the same audience.
    fn everyone(alerts: Vec<Audience>) -> impl Fn(&str) -> Vec<Audience> {
        move |_| alerts.clone()
    }

    fn failed(failures: u32, since: i64) -> Outcome {
        Outcome::Failed {
            failures,
            since: at(since),
            reason: "registry_unavailable".into(),
            message: "HTTP 503".into(),
            run: 0,
        }
    }

    fn missing(failures: u32, since: i64) -> Outcome {
        Outcome::Failed { failures, since: at(since), reason: "tag_missing".into(), message: "gone".into(), run: 0 }
    }

    /// Applies outcomes in order, collecting every notice.
    fn run(
        mut state: RegistryState,
        steps: &[(&str, Outcome)],
        audience: &dyn Fn(&str) -> Vec<Audience>,
    ) -> (Vec<Notices>, RegistryState) {
        let mut out = Vec::new();
        for (watch, outcome) in steps {
            let (notices, next) = state.decide("r.example", watch, outcome, audience);
            out.push(notices);
            state = next;
        }
        (out, state)
    }

    fn alerts_of(notices: &[Notices], pick: impl Fn(&Notices) -> Vec<String>) -> Vec<String> {
        notices.iter().flat_map(pick).collect()
    }

    #[test]
    fn check_failed_waits_for_the_threshold_and_recovered_follows_only_a_sent_failure() {
        let who = everyone(vec![audience("ops", 3, &["check.failed", "check.recovered"])]);
        // Two failures, then success: below the threshold, nobody hears anything.
        let (n, state) =
            run(RegistryState::default(), &[("a", failed(1, 0)), ("a", failed(2, 0)), ("a", Outcome::Succeeded)], &who);
        assert!(n.iter().all(Notices::is_empty), "{n:?}");
        assert!(state.failing.is_empty());
        // Three failures: check.failed once, at the third; more failures add nothing; then recovered.
        let steps = [
            ("a", failed(1, 0)),
            ("a", failed(2, 0)),
            ("a", failed(3, 0)),
            ("a", failed(4, 0)),
            ("a", Outcome::Succeeded),
        ];
        let (n, state) = run(RegistryState::default(), &steps, &who);
        assert_eq!(n.iter().map(|n| n.failed.len()).collect::<Vec<_>>(), [0, 0, 1, 0, 0]);
        assert_eq!(n[4].recovered, ["ops"]);
        assert_eq!(alerts_of(&n, |n| n.recovered.clone()), ["ops"]);
        assert_eq!(state, RegistryState::default());
    }

    #[test]
    fn each_alert_has_its_own_threshold() {
        let who = everyone(vec![
            audience("pager", 1, &["check.failed", "check.recovered"]),
            audience("chat", 3, &["check.failed", "check.recovered"]),
        ]);
        let (n, _) =
            run(RegistryState::default(), &[("a", failed(1, 0)), ("a", failed(2, 0)), ("a", Outcome::Succeeded)], &who);
        assert_eq!(n[0].failed, ["pager"]);
        assert!(n[1].is_empty());
        // Only the alert that got check.failed gets check.recovered.
        assert_eq!(n[2].recovered, ["pager"]);
    }

    #[test]
    fn an_alert_not_asking_for_recovered_gets_none() {
        let who = everyone(vec![audience("ops", 1, &["check.failed"])]);
        let (n, _) = run(RegistryState::default(), &[("a", failed(1, 0)), ("a", Outcome::Succeeded)], &who);
        assert_eq!(n[0].failed, ["ops"]);
        assert!(n[1].recovered.is_empty());
    }

    #[test]
    fn watches_failing_together_make_one_outage_message_and_one_recovery() {
        let who = everyone(vec![audience("ops", 3, &["*"])]);
        let mut steps = Vec::new();
        for round in 1..=4 {
            for w in ["a", "b", "c", "d"] {
                steps.push((w, failed(round, i64::from(w.as_bytes()[0] - b'a'))));
            }
        }
        for w in ["a", "b", "c", "d"] {
            steps.push((w, Outcome::Succeeded));
        }
        let (n, state) = run(RegistryState::default(), &steps, &who);
        assert!(alerts_of(&n, |n| n.failed.clone()).is_empty(), "no per-watch check.failed: {n:?}");
        assert!(alerts_of(&n, |n| n.recovered.clone()).is_empty());
        let announced: Vec<&(Outage, Vec<String>)> = n.iter().flat_map(|n| &n.unavailable).collect();
        assert_eq!(announced.len(), 1, "{announced:?}");
        let (outage, alerts) = announced[0];
        assert_eq!(alerts, &["ops"]);
        assert_eq!(outage.watches, ["a", "b", "c", "d"]);
        assert_eq!(outage.since, at(0));
        // Announced at a's third failure, when the others had failed twice.
        assert_eq!(n.iter().position(|n| !n.unavailable.is_empty()), Some(8));
        let ended: Vec<&(Outage, Vec<String>)> = n.iter().flat_map(|n| &n.ended).collect();
        assert_eq!(ended.len(), 1);
        assert_eq!(ended[0].0.id, outage.id);
        assert_eq!(ended[0].1, ["ops"]);
        // Ended when the last covered watch recovered, not before.
        assert!(!n[steps.len() - 1].ended.is_empty());
        assert_eq!(state, RegistryState::default());
    }

    #[test]
    fn a_watch_failing_alone_is_its_own_message() {
        let who = everyone(vec![audience("ops", 2, &["*"])]);
        let (n, _) = run(RegistryState::default(), &[("a", failed(1, 0)), ("a", failed(2, 0))], &who);
        assert_eq!(n[1].failed, ["ops"]);
        assert!(n[1].unavailable.is_empty());
    }

    #[test]
    fn an_older_failure_is_not_a_companion_but_a_later_one_is() {
        let who = everyone(vec![audience("ops", 1, &["*"])]);
        // b has been failing for an hour; a starts failing now: a is alone.
        let (n, state) = run(RegistryState::default(), &[("b", missing(1, 0))], &who);
        assert_eq!(n[0].failed, ["ops"], "a missing tag is reported on its own");
        let mut state = state;
        state.failing.get_mut("b").unwrap().reason = "registry_unavailable".into();
        state.failing.get_mut("b").unwrap().told.clear();
        let (n, _) = state.decide("r.example", "a", &failed(1, 3600), &who);
        assert_eq!(n.failed, ["ops"], "{n:?}");
        // c started failing 30 s after a: together.
        let (n, _) = run(RegistryState::default(), &[("a", failed(1, 0)), ("c", failed(1, 30))], &who);
        assert_eq!(n[0].failed, ["ops"]);
        assert_eq!(n[1].unavailable.len(), 1);
        assert_eq!(n[1].unavailable[0].0.watches, ["a", "c"]);
    }

    #[test]
    fn a_missing_tag_is_never_folded_into_an_outage() {
        let who = everyone(vec![audience("ops", 1, &["*"])]);
        let (n, _) = run(RegistryState::default(), &[("a", failed(1, 0)), ("b", missing(1, 0))], &who);
        assert_eq!(n[0].failed, ["ops"]);
        assert_eq!(n[1].failed, ["ops"]);
        assert!(n.iter().all(|n| n.unavailable.is_empty()));
    }

    #[test]
    fn watches_failing_after_the_announcement_are_covered_silently() {
        let who = everyone(vec![audience("ops", 1, &["*"])]);
        let steps = [
            ("a", failed(1, 0)),
            ("b", failed(1, 0)),
            ("c", failed(1, 600)),
            ("a", Outcome::Succeeded),
            ("b", Outcome::Succeeded),
            ("c", failed(2, 600)),
            ("c", Outcome::Succeeded),
        ];
        let (n, _) = run(RegistryState::default(), &steps, &who);
        assert_eq!(n[0].failed, ["ops"], "a alone at first");
        assert_eq!(n[1].unavailable.len(), 1);
        assert!(n[2].is_empty(), "c is covered: {:?}", n[2]);
        assert_eq!(n[3].recovered, ["ops"], "a's own check.failed gets its recovery");
        assert!(n[3].ended.is_empty() && n[4].ended.is_empty() && n[5].is_empty(), "{n:?}");
        assert_eq!(n[6].ended.len(), 1, "over when c, the last covered watch, recovers");
        assert!(n[6].recovered.is_empty());
    }

    #[test]
    fn a_covered_watch_whose_tag_turns_out_missing_ends_the_outage_and_is_reported_alone() {
        let who = everyone(vec![audience("ops", 1, &["*"])]);
        let steps = [("a", failed(1, 0)), ("b", failed(1, 0)), ("a", Outcome::Succeeded), ("b", missing(2, 0))];
        let (n, _) = run(RegistryState::default(), &steps, &who);
        assert_eq!(n[1].unavailable.len(), 1);
        assert_eq!(n[3].ended.len(), 1, "{:?}", n[3]);
        assert_eq!(n[3].failed, ["ops"]);
    }

    #[test]
    fn alerts_not_asking_for_registry_events_keep_per_watch_messages() {
        let who = everyone(vec![
            audience("legacy", 1, &["check.failed", "check.recovered"]),
            audience("grouped", 1, &["check.failed", "check.recovered", "registry.unavailable"]),
        ]);
        let steps = [("a", failed(1, 0)), ("b", failed(1, 0)), ("a", Outcome::Succeeded), ("b", Outcome::Succeeded)];
        let (n, _) = run(RegistryState::default(), &steps, &who);
        assert_eq!(n[0].failed, ["legacy", "grouped"]);
        assert_eq!(n[1].failed, ["legacy"]);
        assert_eq!(n[1].unavailable[0].1, ["grouped"]);
        assert_eq!(n[2].recovered, ["grouped", "legacy"]);
        assert_eq!(n[3].recovered, ["legacy"]);
        // "grouped" asked for no registry.recovered: the outage ends silently for it.
        assert_eq!(n[3].ended.len(), 1);
        assert!(n[3].ended[0].1.is_empty());
    }

    #[test]
    fn builder_filters_decide_who_is_a_companion() {
        let who = |w: &str| {
            if w == "b" { vec![audience("ops", 1, &["check.failed"])] } else { vec![audience("ops", 1, &["*"])] }
        };
        let (n, _) = run(RegistryState::default(), &[("a", failed(1, 0)), ("b", failed(1, 0))], &who);
        assert_eq!(n[0].failed, ["ops"]);
        assert_eq!(n[1].failed, ["ops"], "b is not grouped for ops: {n:?}");
        assert!(n[1].unavailable.is_empty());
    }

    /// An outage over, and the same watches failing again within the same second: another outage,
    /// with its own id (their runs of failures are new).
    #[test]
    fn an_outage_again_within_one_second_is_another_outage() {
        let who = everyone(vec![audience("ops", 1, &["*"])]);
        let fail = |run| Outcome::Failed {
            failures: 1,
            since: at(0),
            reason: "registry_unavailable".into(),
            message: "HTTP 503".into(),
            run,
        };
        let steps = [
            ("a", fail(1)),
            ("b", fail(1)),
            ("a", Outcome::Succeeded),
            ("b", Outcome::Succeeded),
            ("a", fail(2)),
            ("b", fail(2)),
        ];
        let (n, _) = run(RegistryState::default(), &steps, &who);
        let (first, again) = (&n[1].unavailable[0].0, &n[5].unavailable[0].0);
        assert_eq!(n[3].ended[0].0.id, first.id, "the first is over");
        assert_eq!((first.since, &first.watches), (again.since, &again.watches));
        assert_ne!(first.id, again.id);
    }

    #[test]
    fn ids_are_stable_and_the_decision_is_repeatable() {
        let who = everyone(vec![audience("ops", 1, &["*"])]);
        let (n1, s1) = run(RegistryState::default(), &[("a", failed(1, 0)), ("b", failed(1, 5))], &who);
        let (n2, s2) = run(RegistryState::default(), &[("a", failed(1, 0)), ("b", failed(1, 5))], &who);
        assert_eq!((n1.clone(), s1.clone()), (n2, s2));
        let id = &n1[1].unavailable[0].0.id;
        let watches = [("a".to_string(), 0), ("b".to_string(), 0)];
        assert_eq!(id, &unavailable_id("r.example", at(0), &watches));
        assert_ne!(id, &unavailable_id("r.example", at(1), &watches));
        // Deciding the same check again on the old state (a retried commit) asks for the same event.
        let (_, after_a) = run(RegistryState::default(), &[("a", failed(1, 0))], &who);
        let (again, _) = after_a.decide("r.example", "b", &failed(1, 5), &who);
        assert_eq!(again.unavailable[0].0.id, *id);
        assert_eq!(s1.open[id].recovered_id(), recovered_id(id));
    }
}
