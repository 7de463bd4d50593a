//! Events: the JSON documents the daemon records in the ledger and hands to alert sinks, with ids
//! that stay the same across retries and restarts.

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::cnb::Change;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "builder.pinned")]
    BuilderPinned,
    #[serde(rename = "builder.changed")]
    BuilderChanged,
    #[serde(rename = "run_image.changed")]
    RunImageChanged,
    #[serde(rename = "check.failed")]
    CheckFailed,
    #[serde(rename = "check.recovered")]
    CheckRecovered,
    #[serde(rename = "build.started")]
    BuildStarted,
    #[serde(rename = "build.succeeded")]
    BuildSucceeded,
    #[serde(rename = "build.failed")]
    BuildFailed,
    #[serde(rename = "rebase.succeeded")]
    RebaseSucceeded,
    #[serde(rename = "rebase.failed")]
    RebaseFailed,
    /// Several watches of one registry failing together, in one message instead of one per watch.
    #[serde(rename = "registry.unavailable")]
    RegistryUnavailable,
    /// The end of an outage a `registry.unavailable` announced.
    #[serde(rename = "registry.recovered")]
    RegistryRecovered,
    /// Actions of a change that wait for a person's approval (`approve` / `reject`).
    #[serde(rename = "action.awaiting_approval")]
    ActionAwaitingApproval,
    /// A failure in a lower wave holds a change's later waves (until `release`).
    #[serde(rename = "action.held")]
    ActionHeld,
    /// No action starts until `unfreeze`.
    #[serde(rename = "rollout.frozen")]
    RolloutFrozen,
    #[serde(rename = "rollout.unfrozen")]
    RolloutUnfrozen,
    /// A deploy wrote a new digest into its workloads.
    #[serde(rename = "deploy.started")]
    DeployStarted,
    /// Its workloads became healthy.
    #[serde(rename = "deploy.succeeded")]
    DeploySucceeded,
    /// Its workloads failed (the deadline, a condition, a pod's waiting reason).
    #[serde(rename = "deploy.failed")]
    DeployFailed,
    /// A failed deploy's workloads (and, with `undo = "workload-and-tag"`, the app tag) put back.
    #[serde(rename = "deploy.rolled_back")]
    DeployRolledBack,
    /// Someone else changed a deployed workload's image: the image is held.
    #[serde(rename = "deploy.overridden")]
    DeployOverridden,
    /// A change's digests committed and pushed to a `[[gitops]]` repository.
    #[serde(rename = "gitops.committed")]
    GitopsCommitted,
    /// A gitops action failed for good (a push rejected five times, a file it cannot edit).
    #[serde(rename = "gitops.failed")]
    GitopsFailed,
    /// Someone put another digest into a file builder-monitor writes: the image is held.
    #[serde(rename = "gitops.overridden")]
    GitopsOverridden,
    /// Sent by `alert test` only.
    #[serde(rename = "alert.test")]
    AlertTest,
}

impl EventType {
    /// Every type an alert can ask for (`alert.test` is sent to one alert on request only).
    pub const ALL: [EventType; 24] = [
        EventType::BuilderPinned,
        EventType::BuilderChanged,
        EventType::RunImageChanged,
        EventType::CheckFailed,
        EventType::CheckRecovered,
        EventType::BuildStarted,
        EventType::BuildSucceeded,
        EventType::BuildFailed,
        EventType::RebaseSucceeded,
        EventType::RebaseFailed,
        EventType::RegistryUnavailable,
        EventType::RegistryRecovered,
        EventType::ActionAwaitingApproval,
        EventType::ActionHeld,
        EventType::RolloutFrozen,
        EventType::RolloutUnfrozen,
        EventType::DeployStarted,
        EventType::DeploySucceeded,
        EventType::DeployFailed,
        EventType::DeployRolledBack,
        EventType::DeployOverridden,
        EventType::GitopsCommitted,
        EventType::GitopsFailed,
        EventType::GitopsOverridden,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::BuilderPinned => "builder.pinned",
            EventType::BuilderChanged => "builder.changed",
            EventType::RunImageChanged => "run_image.changed",
            EventType::CheckFailed => "check.failed",
            EventType::CheckRecovered => "check.recovered",
            EventType::BuildStarted => "build.started",
            EventType::BuildSucceeded => "build.succeeded",
            EventType::BuildFailed => "build.failed",
            EventType::RebaseSucceeded => "rebase.succeeded",
            EventType::RebaseFailed => "rebase.failed",
            EventType::RegistryUnavailable => "registry.unavailable",
            EventType::RegistryRecovered => "registry.recovered",
            EventType::ActionAwaitingApproval => "action.awaiting_approval",
            EventType::ActionHeld => "action.held",
            EventType::RolloutFrozen => "rollout.frozen",
            EventType::RolloutUnfrozen => "rollout.unfrozen",
            EventType::DeployStarted => "deploy.started",
            EventType::DeploySucceeded => "deploy.succeeded",
            EventType::DeployFailed => "deploy.failed",
            EventType::DeployRolledBack => "deploy.rolled_back",
            EventType::DeployOverridden => "deploy.overridden",
            EventType::GitopsCommitted => "gitops.committed",
            EventType::GitopsFailed => "gitops.failed",
            EventType::GitopsOverridden => "gitops.overridden",
            EventType::AlertTest => "alert.test",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The watched thing an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    pub name: String,
    /// The floating tag, normalised.
    pub image: String,
}

/// An immutable reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub digest: String,
    pub reference: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub platforms: BTreeMap<String, String>,
}

/// Why a check failed (`check.failed`), or what it recovered from (`check.recovered`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckError {
    /// `tag_missing`, `unauthorized`, `rate_limited`, `registry_unavailable`, `invalid_response`.
    pub reason: String,
    pub message: String,
    pub consecutive_failures: u32,
    pub since: String,
}

/// A registry outage: the watches of one registry failing together (`registry.unavailable`,
/// `registry.recovered`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outage {
    /// The registry host, as in image references (`docker.io`).
    pub registry: String,
    /// When the first of its watches started failing.
    pub since: String,
    /// The failing watches: builder names, `run:` + reference for run images.
    pub watches: Vec<String>,
    /// The failure that made the outage known (`registry_unavailable`, `rate_limited`, …).
    pub reason: String,
    pub message: String,
}

/// The rebase or rebuild a `build.*` / `rebase.*` event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionInfo {
    /// The action's idempotency key (also the name of runner objects).
    pub key: String,
    /// The `[[images]]` name.
    pub image: String,
    /// The app image tag.
    pub reference: String,
    pub kind: String,
    /// The change it reacts to.
    pub change: String,
    pub attempt: u32,
    pub max_attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tail: Option<String>,
    /// The app image's digest before the action, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    /// The app image's digest after it, when known (equal to `previous`: nothing needed writing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Where a rebase ran: `registry` (in the daemon) or `runner`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `tag_race`: the digest another writer put on the tag right behind this action's write
    /// (found by the HEAD after the PUT); the action failed and the tag holds that digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag_race: Option<String>,
    /// A deploy's workloads: each one's containers, the images before and written, its state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<crate::deploy::WorkloadProgress>,
    /// The pool a build ran in (the `kubernetes` and `kpack` runners).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// A gitops action's commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<CommitInfo>,
}

/// What a gitops action committed (or, failing, would have): where, and which files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    /// The `[[gitops]]` name.
    pub target: String,
    /// The commit id; `None` when nothing was pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The branch pushed to.
    pub branch: String,
    /// The files written, relative to the repository.
    #[serde(default)]
    pub files: Vec<String>,
}

/// What a roll-out event is about: the actions of one change that wait (`action.*`), or the
/// freeze (`rollout.*`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RolloutInfo {
    /// The change whose actions wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<WaitingAction>,
    /// Why: the failure that holds them (`canary petclinic failed`), or the freeze's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who froze or unfroze.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When the freeze began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// One action a roll-out event names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingAction {
    pub key: String,
    /// The `[[images]]` name.
    pub image: String,
    pub kind: String,
    pub wave: u32,
}

/// What will happen to an app image built from the builder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageAction {
    pub name: String,
    pub action: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub id: String,
    #[serde(rename = "type")]
    pub event_type: EventType,
    pub time: String,
    /// The builder the event is about; for a run image, the first builder using it.
    pub builder: Subject,
    /// Every builder a run image event concerns.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub builders: Vec<Subject>,
    /// The run image tag, for events about a run image watch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Pin>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<Pin>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<Change>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<ImageAction>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CheckError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outage: Option<Outage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutInfo>,
}

impl Event {
    /// A bare event of `event_type` about `subject`; callers fill the parts their type carries.
    pub fn new(id: String, event_type: EventType, time: String, subject: Subject) -> Self {
        Event {
            id,
            event_type,
            time,
            builder: subject,
            builders: Vec::new(),
            run_image: None,
            previous: None,
            current: None,
            change: None,
            rollback: None,
            images: None,
            error: None,
            action: None,
            outage: None,
            rollout: None,
        }
    }
}

/// The longest free text (an error message, an action's detail) a summary line quotes.
const SUMMARY_TEXT_MAX: usize = 160;

/// The first line of `text`, cut after a whole word (`crate::text::clip`); ` …` marks what is left out.
fn clipped(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    match crate::text::clip(line, SUMMARY_TEXT_MAX) {
        std::borrow::Cow::Owned(cut) => cut,
        std::borrow::Cow::Borrowed(line) if line.len() < text.trim().len() => format!("{line} …"),
        std::borrow::Cow::Borrowed(line) => line.to_string(),
    }
}

/// App images a summary names before it counts the rest.
const SUMMARY_IMAGES_MAX: usize = 5;

/// `; planned: rebuild petclinic, rebase shop, and 3 more`: the actions a move planned, or nothing
/// when it planned none.
fn planned_actions(images: &[ImageAction]) -> String {
    if images.is_empty() {
        return String::new();
    }
    let named: Vec<String> =
        images.iter().take(SUMMARY_IMAGES_MAX).map(|i| format!("{} {}", i.action, i.name)).collect();
    let mut out = format!("; planned: {}", named.join(", "));
    if images.len() > SUMMARY_IMAGES_MAX {
        let _ = write!(out, ", and {} more", images.len() - SUMMARY_IMAGES_MAX);
    }
    out
}

/// `sha256:0123456789ab`, enough to tell pins apart in a log line.
fn short_digest(digest: &str) -> &str {
    let end = digest.find(':').map_or(0, |i| i + 1) + 12;
    digest.get(..end).unwrap_or(digest)
}

impl Event {
    /// One line for people: `builder.changed paketo-jammy-base: rebuild — paketo-buildpacks/java
    /// 18.1.0 → 18.2.0`.
    pub fn summary(&self) -> String {
        let mut out = format!("{} {}", self.event_type, self.builder.name);
        if let Some(run_image) = &self.run_image {
            let _ = write!(out, " (run image {run_image})");
        }
        let detail = match self.event_type {
            EventType::BuilderChanged | EventType::RunImageChanged => self.change.as_ref().map(|c| {
                let rollback = if self.rollback == Some(true) { " (rollback)" } else { "" };
                let planned = self.images.as_deref().map(planned_actions).unwrap_or_default();
                format!("{} — {}{rollback}{planned}", c.kind.as_str(), c.details())
            }),
            EventType::BuilderPinned => self.current.as_ref().map(|p| format!("pinned to {}", short_digest(&p.digest))),
            EventType::CheckFailed => self
                .error
                .as_ref()
                .map(|e| format!("{} — {} ({} in a row)", e.reason, clipped(&e.message), e.consecutive_failures)),
            EventType::CheckRecovered => self
                .error
                .as_ref()
                .map(|e| format!("recovered after {} failed checks ({})", e.consecutive_failures, e.reason)),
            EventType::BuildStarted
            | EventType::BuildSucceeded
            | EventType::BuildFailed
            | EventType::RebaseSucceeded
            | EventType::RebaseFailed
            | EventType::DeployStarted
            | EventType::DeploySucceeded
            | EventType::DeployFailed
            | EventType::DeployRolledBack
            | EventType::DeployOverridden
            | EventType::GitopsCommitted
            | EventType::GitopsFailed
            | EventType::GitopsOverridden => self.action.as_ref().map(|a| {
                let mut text = format!("{} of {}, attempt {}/{}", a.kind, a.image, a.attempt, a.max_attempts);
                if let Some(detail) = &a.detail {
                    let _ = write!(text, " — {}", clipped(detail));
                }
                text
            }),
            EventType::RegistryUnavailable => self
                .outage
                .as_ref()
                .map(|o| format!("{} — {} watches failing ({})", o.registry, o.watches.len(), clipped(&o.message))),
            EventType::RegistryRecovered => {
                self.outage.as_ref().map(|o| format!("{} — {} watches answer again", o.registry, o.watches.len()))
            }
            EventType::ActionAwaitingApproval | EventType::ActionHeld => self.rollout.as_ref().map(|r| {
                let images: Vec<String> = r.actions.iter().map(|a| format!("{} of {}", a.kind, a.image)).collect();
                let mut text = format!("change {}: {}", r.change.as_deref().unwrap_or("?"), images.join(", "));
                if let Some(reason) = &r.reason {
                    let _ = write!(text, " — {}", clipped(reason));
                }
                text
            }),
            EventType::RolloutFrozen | EventType::RolloutUnfrozen => self.rollout.as_ref().map(|r| {
                let mut text = format!("by {}", r.by.as_deref().unwrap_or("?"));
                if let Some(reason) = &r.reason {
                    let _ = write!(text, " — {}", clipped(reason));
                }
                text
            }),
            EventType::AlertTest => None,
        };
        if let Some(detail) = detail {
            let _ = write!(out, ": {detail}");
        }
        out
    }
}

/// A short stable id: the first 128 bits of sha256 over the parts, hex.
pub fn stable_id(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hex::encode(&hasher.finalize()[..16])
}

/// The id of a move: the same when it is re-detected, different for A→B after B→A.
pub fn change_id(watch: &str, sequence: u64, previous: &str, current: &str) -> String {
    stable_id(&[watch, &sequence.to_string(), previous, current])
}

/// The id of a roll-out state change's event (`rollout.frozen`, `rollout.unfrozen`): from the
/// change's sequence number in the ledger's roll-out record (1 for the first freeze), so two
/// requests within one clock tick get two ids, and the same change recorded again keeps its id.
/// `since` (the freeze's start) keeps ids apart should a ledger ever be started afresh.
pub fn rollout_event_id(event_type: EventType, sequence: u64, since: &str) -> String {
    stable_id(&[ROLLOUT_SUBJECT, event_type.as_str(), &sequence.to_string(), since])
}

/// The id of a watch's `check.failed` or `check.recovered`: of its failure run number `run` (the
/// ledger counts a watch's runs of failed checks), which started at `since`. Two runs that start
/// within one second are told apart; run 0 is one recorded before runs were counted, whose events
/// keep the ids they were recorded with.
pub fn failure_event_id(watch: &str, event_type: EventType, since: &str, run: u64) -> String {
    match run {
        0 => stable_id(&[watch, event_type.as_str(), since]),
        run => stable_id(&[watch, event_type.as_str(), since, &format!("run {run}")]),
    }
}

/// The subject of the roll-out's own events.
pub const ROLLOUT_SUBJECT: &str = "rollout";

/// What an event is about, as the alert outbox orders it: deliveries to one alert about one
/// subject go out in the order their events were recorded. Keys of different kinds never meet:
/// builder names have no `:`, and every other key but `rollout` has a prefix.
/// - a watch's own events (`builder.*`, `run_image.changed`, `check.*`): `builder:NAME`, or the
///   run image watch's name (`run:` + the normalised run image);
/// - an action's (`build.*`, `rebase.*`, `deploy.*`) and the roll-out's waits (`action.*`): `image:NAME`, the
///   `[[images]]` name (of its first action, for an `action.*` naming several);
/// - a registry outage (`registry.*`): `registry:HOST`;
/// - a freeze (`rollout.*`): `rollout`.
///
/// An event missing the part its type names (never recorded so) falls back to its builder.
pub fn subject_key(event: &Event) -> String {
    let builder = || format!("builder:{}", event.builder.name);
    match event.event_type {
        EventType::BuilderPinned
        | EventType::BuilderChanged
        | EventType::RunImageChanged
        | EventType::CheckFailed
        | EventType::CheckRecovered => match &event.run_image {
            Some(run_image) => format!("run:{run_image}"),
            None => builder(),
        },
        EventType::BuildStarted
        | EventType::BuildSucceeded
        | EventType::BuildFailed
        | EventType::RebaseSucceeded
        | EventType::RebaseFailed
        | EventType::DeployStarted
        | EventType::DeploySucceeded
        | EventType::DeployFailed
        | EventType::DeployRolledBack
        | EventType::DeployOverridden
        | EventType::GitopsCommitted
        | EventType::GitopsFailed
        | EventType::GitopsOverridden => event.action.as_ref().map_or_else(builder, |a| format!("image:{}", a.image)),
        EventType::ActionAwaitingApproval | EventType::ActionHeld => event
            .rollout
            .as_ref()
            .and_then(|r| r.actions.first())
            .map_or_else(builder, |a| format!("image:{}", a.image)),
        EventType::RegistryUnavailable | EventType::RegistryRecovered => {
            event.outage.as_ref().map_or_else(builder, |o| format!("registry:{}", o.registry))
        }
        EventType::RolloutFrozen | EventType::RolloutUnfrozen => ROLLOUT_SUBJECT.to_string(),
        EventType::AlertTest => "test".to_string(),
    }
}

/// A typical `builder.changed` event (a buildpack bump planning one rebuild), for tests here
/// and in the daemon crate (feature `fixtures`).
#[cfg(any(test, feature = "fixtures"))]
pub fn example_builder_changed() -> Event {
    let mut e = Event::new(
        "0123456789abcdef0123456789abcdef".into(),
        EventType::BuilderChanged,
        "2026-11-30T12:00:00Z".into(),
        Subject {
            name: "paketo-jammy-base".into(),
            image: "docker.io/paketobuildpacks/builder-jammy-base:latest".into(),
        },
    );
    let mut change = Change::unknown("x");
    change.kind = crate::cnb::ChangeKind::Rebuild;
    change.note = None;
    change.reasons = vec![crate::cnb::Reason::Buildpack];
    change.buildpacks = vec![crate::cnb::BuildpackChange {
        id: "paketo-buildpacks/java".into(),
        from: Some("18.1.0".into()),
        to: Some("18.2.0".into()),
        republished: false,
    }];
    e.change = Some(change);
    let pin = |d: &str| Pin { digest: d.into(), reference: format!("docker.io/x@{d}"), platforms: BTreeMap::new() };
    e.previous = Some(pin(&format!("sha256:{}", "a".repeat(64))));
    e.current = Some(pin(&format!("sha256:{}", "b".repeat(64))));
    e.images = Some(vec![ImageAction { name: "petclinic".into(), action: "rebuild".into() }]);
    e
}

#[cfg(test)]
mod tests {
    use super::example_builder_changed as changed;
    use super::*;

    #[test]
    fn change_ids_are_stable_and_distinct() {
        let ab = change_id("b", 1, "sha256:a", "sha256:b");
        assert_eq!(ab, change_id("b", 1, "sha256:a", "sha256:b"));
        assert_eq!(ab.len(), 32);
        let ba = change_id("b", 2, "sha256:b", "sha256:a");
        let ab_again = change_id("b", 3, "sha256:a", "sha256:b");
        assert!(ab != ba && ab != ab_again && ba != ab_again);
        assert_ne!(change_id("b", 1, "sha256:a", "sha256:b"), change_id("c", 1, "sha256:a", "sha256:b"));
        // Parts are delimited: shifting text between them changes the id.
        assert_ne!(stable_id(&["ab", "c"]), stable_id(&["a", "bc"]));
    }

    #[test]
    fn rollout_event_ids_come_from_the_sequence_not_the_clock() {
        let since = "2026-11-30T12:00:00Z";
        let first = rollout_event_id(EventType::RolloutFrozen, 1, since);
        assert_eq!(first, rollout_event_id(EventType::RolloutFrozen, 1, since), "recorded again: the same id");
        // freeze, unfreeze, freeze, unfreeze within one second: four ids.
        let ids: std::collections::BTreeSet<String> = [
            (EventType::RolloutFrozen, 1),
            (EventType::RolloutUnfrozen, 2),
            (EventType::RolloutFrozen, 3),
            (EventType::RolloutUnfrozen, 4),
        ]
        .into_iter()
        .map(|(t, n)| rollout_event_id(t, n, since))
        .collect();
        assert_eq!(ids.len(), 4);
        assert_ne!(first, rollout_event_id(EventType::RolloutFrozen, 1, "2026-12-01T00:00:00Z"));
    }

    #[test]
    fn failure_runs_within_one_second_get_their_own_ids() {
        let since = "2026-11-30T12:00:00Z";
        let legacy = stable_id(&["jammy", "check.failed", since]);
        assert_eq!(failure_event_id("jammy", EventType::CheckFailed, since, 0), legacy, "ids recorded before runs");
        let first = failure_event_id("jammy", EventType::CheckFailed, since, 1);
        let second = failure_event_id("jammy", EventType::CheckFailed, since, 2);
        assert!(first != second && first != legacy);
        assert_eq!(first, failure_event_id("jammy", EventType::CheckFailed, since, 1), "repeated: the same id");
        assert_ne!(first, failure_event_id("jammy", EventType::CheckRecovered, since, 1));
    }

    /// A rebuild of the app image `image`.
    fn action_on(image: &str) -> ActionInfo {
        ActionInfo {
            key: "bm-1".into(),
            image: image.into(),
            reference: format!("r/{image}:latest"),
            kind: "rebuild".into(),
            change: "c".into(),
            attempt: 1,
            max_attempts: 3,
            detail: None,
            output_tail: None,
            previous: None,
            digest: None,
            path: None,
            tag_race: None,
            workloads: Vec::new(),
            pool: None,
            commit: None,
        }
    }

    fn subject_of(t: EventType, fill: impl FnOnce(&mut Event)) -> String {
        let mut e = Event::new("id".into(), t, "t".into(), Subject { name: "jammy".into(), image: "x".into() });
        fill(&mut e);
        subject_key(&e)
    }

    #[test]
    fn each_event_type_has_the_subject_its_shape_names() {
        for t in
            [EventType::BuilderPinned, EventType::BuilderChanged, EventType::CheckFailed, EventType::CheckRecovered]
        {
            assert_eq!(subject_of(t, |_| {}), "builder:jammy", "{t}");
        }
        // A run image watch's events: the run image, whichever builder is named first.
        let run = |e: &mut Event| e.run_image = Some("docker.io/paketobuildpacks/run-jammy-base:latest".into());
        for t in [EventType::RunImageChanged, EventType::CheckFailed, EventType::CheckRecovered] {
            assert_eq!(subject_of(t, run), "run:docker.io/paketobuildpacks/run-jammy-base:latest", "{t}");
        }
        let action = |e: &mut Event| e.action = Some(action_on("petclinic"));
        for t in [
            EventType::BuildStarted,
            EventType::BuildSucceeded,
            EventType::BuildFailed,
            EventType::RebaseSucceeded,
            EventType::RebaseFailed,
        ] {
            assert_eq!(subject_of(t, action), "image:petclinic", "{t}");
        }
        let waiting = |e: &mut Event| {
            let a = |image: &str, wave| WaitingAction {
                key: "k".into(),
                image: image.into(),
                kind: "rebuild".into(),
                wave,
            };
            e.rollout = Some(RolloutInfo { actions: vec![a("web", 1), a("api", 1)], ..Default::default() })
        };
        for t in [EventType::ActionAwaitingApproval, EventType::ActionHeld] {
            assert_eq!(subject_of(t, waiting), "image:web", "{t}");
        }
        let outage = |e: &mut Event| {
            e.outage = Some(Outage {
                registry: "docker.io".into(),
                since: "t".into(),
                watches: vec!["jammy".into()],
                reason: "registry_unavailable".into(),
                message: "503".into(),
            })
        };
        for t in [EventType::RegistryUnavailable, EventType::RegistryRecovered] {
            assert_eq!(subject_of(t, outage), "registry:docker.io", "{t}");
        }
        for t in [EventType::RolloutFrozen, EventType::RolloutUnfrozen] {
            let by_name = |e: &mut Event| e.builder.name = "rollout".into();
            assert_eq!(subject_of(t, by_name), "rollout", "{t}");
        }
        // Without the part its type names, the builder.
        assert_eq!(subject_of(EventType::BuildFailed, |_| {}), "builder:jammy");
        assert_eq!(subject_of(EventType::RegistryUnavailable, |_| {}), "builder:jammy");
    }

    #[test]
    fn subjects_of_different_kinds_never_meet() {
        // A builder may be named `rollout` or like an app image; its key still differs.
        assert_ne!(subject_of(EventType::BuilderChanged, |e| e.builder.name = "rollout".into()), "rollout");
        let image = subject_of(EventType::BuildStarted, |e| e.action = Some(action_on("jammy")));
        assert_ne!(image, subject_of(EventType::BuilderChanged, |_| {}));
    }

    #[test]
    fn event_json_has_the_documented_shape() {
        let mut e = Event::new(
            "id1".into(),
            EventType::BuilderChanged,
            "2026-11-30T12:00:00Z".into(),
            Subject { name: "b".into(), image: "docker.io/x/y:latest".into() },
        );
        e.previous = Some(Pin {
            digest: "sha256:a".into(),
            reference: "docker.io/x/y@sha256:a".into(),
            platforms: BTreeMap::new(),
        });
        e.change = Some(Change::unknown("test"));
        e.images = Some(vec![]);
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "builder.changed");
        assert_eq!(v["builder"]["image"], "docker.io/x/y:latest");
        assert_eq!(v["previous"]["reference"], "docker.io/x/y@sha256:a");
        assert_eq!(v["change"]["kind"], "unknown");
        assert!(v["change"]["lifecycle"].is_null());
        assert!(v.get("builders").is_none() && v.get("run_image").is_none());
        assert!(v.get("current").is_none());
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn summaries_are_one_short_line() {
        let e = changed();
        assert_eq!(
            e.summary(),
            "builder.changed paketo-jammy-base: rebuild — paketo-buildpacks/java 18.1.0 → 18.2.0; planned: rebuild petclinic"
        );
        let mut many = e.clone();
        many.images = Some(
            (1..=7)
                .map(|n| ImageAction {
                    name: format!("app-{n}"),
                    action: if n == 3 { "rebase" } else { "rebuild" }.into(),
                })
                .collect(),
        );
        assert!(
            many.summary().ends_with(
                "; planned: rebuild app-1, rebuild app-2, rebase app-3, rebuild app-4, rebuild app-5, and 2 more"
            ),
            "{}",
            many.summary()
        );
        many.images = Some(vec![]);
        assert!(!many.summary().contains("planned"), "{}", many.summary());
        let mut failed = Event::new("id".into(), EventType::CheckFailed, "t".into(), e.builder.clone());
        failed.error = Some(CheckError {
            reason: "registry_unavailable".into(),
            message: format!("connection refused\n{}", "detail ".repeat(100)),
            consecutive_failures: 3,
            since: "t".into(),
        });
        assert_eq!(
            failed.summary(),
            "check.failed paketo-jammy-base: registry_unavailable — connection refused … (3 in a row)"
        );
        let mut pinned = Event::new("id".into(), EventType::BuilderPinned, "t".into(), e.builder.clone());
        pinned.current = e.current.clone();
        assert_eq!(pinned.summary(), "builder.pinned paketo-jammy-base: pinned to sha256:bbbbbbbbbbbb");
        let long = "x".repeat(1000);
        failed.error.as_mut().unwrap().message = long;
        assert!(failed.summary().chars().count() < 250, "{}", failed.summary());
        // A long error is cut after a whole word.
        let words = "manifest unknown to the registry, which answered with a body that goes on ".repeat(5);
        failed.error.as_mut().unwrap().message = words.clone();
        let summary = failed.summary();
        let quoted = summary.split(" — ").nth(1).unwrap().strip_suffix(" (3 in a row)").unwrap();
        let kept = quoted.strip_suffix(" …").expect("marked as cut");
        assert!(words.starts_with(kept) && words[kept.len()..].starts_with(' '), "{summary}");
    }
}
