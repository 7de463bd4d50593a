//! Events: the JSON documents the daemon records in the ledger and hands to alert sinks, with ids
//! that stay the same across retries and restarts.

mod action;
mod ids;
mod rollout;
mod summary;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::cnb::Change;
pub use crate::id::stable_id;
pub use action::{ActionInfo, ActionResult, BuildInfo, CommitInfo};
pub use ids::{ROLLOUT_SUBJECT, change_id, failure_event_id, rollout_event_id, subject_key};
pub use rollout::{ImageRollback, RolloutInfo, WaitingAction};

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
    /// An action refused before it wrote anything: the digest it starts from carries no valid
    /// signature by a trusted key (`require_signed`).
    #[serde(rename = "action.refused")]
    ActionRefused,
    /// A `.sig` or `.att` manifest that could not take our signature (an index, a Docker v2
    /// manifest, too many layers, too big, missing blobs: possibly planted) was replaced by a fresh
    /// one; `detail` names each.
    #[serde(rename = "signature.replaced")]
    SignatureReplaced,
    /// A change's actions skip the soak and the windows (`[rollout] expedite`): the records that
    /// allowed it and the data's source are in `rollout.expedited`.
    #[serde(rename = "action.expedited")]
    ActionExpedited,
    /// A person moved an app image's tag back (`rollback`): who, from where, to where.
    #[serde(rename = "image.rolled_back")]
    ImageRolledBack,
    /// Sent by `alert test` only.
    #[serde(rename = "alert.test")]
    AlertTest,
}

impl EventType {
    /// The event an action of `kind`'s success is told by.
    pub fn succeeded(kind: crate::kind::ActionKind) -> Self {
        use crate::kind::ActionKind;
        match kind {
            ActionKind::Rebase => EventType::RebaseSucceeded,
            ActionKind::Rebuild => EventType::BuildSucceeded,
            ActionKind::Deploy => EventType::DeploySucceeded,
            ActionKind::Gitops => EventType::GitopsCommitted,
        }
    }

    /// The event an action of `kind`'s (final) failure is told by.
    pub fn failed(kind: crate::kind::ActionKind) -> Self {
        use crate::kind::ActionKind;
        match kind {
            ActionKind::Rebase => EventType::RebaseFailed,
            ActionKind::Rebuild => EventType::BuildFailed,
            ActionKind::Deploy => EventType::DeployFailed,
            ActionKind::Gitops => EventType::GitopsFailed,
        }
    }

    /// Every type an alert can ask for (`alert.test` is sent to one alert on request only).
    pub const ALL: [EventType; 28] = [
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
        EventType::ActionRefused,
        EventType::SignatureReplaced,
        EventType::ActionExpedited,
        EventType::ImageRolledBack,
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
            EventType::ActionRefused => "action.refused",
            EventType::SignatureReplaced => "signature.replaced",
            EventType::ActionExpedited => "action.expedited",
            EventType::ImageRolledBack => "image.rolled_back",
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
    /// What an `image.rolled_back` undid (its digests are `previous` and `current`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<ImageRollback>,
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
            rolled_back: None,
        }
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
