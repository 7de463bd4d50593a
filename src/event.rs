//! Events: the JSON documents the daemon records in the ledger and hands to alert sinks, with ids
//! that stay the same across retries and restarts.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::builder::Change;

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
    /// Sent by `alert test` only.
    #[serde(rename = "alert.test")]
    AlertTest,
}

impl EventType {
    /// Every type an alert can ask for (`alert.test` is sent to one alert on request only).
    pub const ALL: [EventType; 12] = [
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
        }
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

#[cfg(test)]
mod tests {
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
}
