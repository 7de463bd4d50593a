//! The `ClusterBuilder` resource (`buildermonitor.dev/v1alpha1`, cluster-scoped): a watched
//! builder tag and, in its status, the immutable reference it is pinned to — shaped like kpack's
//! builder status where the meaning is the same, so the same tools read it.
//!
//! The CRD is written by hand (`clusterbuilders.yaml`) rather than derived: kube's derive and
//! schemars cost a first build about a minute for one small schema, and this module's tests hold
//! the schema to these types field by field.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::ClusterResourceScope;
use serde::{Deserialize, Serialize};

const GROUP: &str = "buildermonitor.dev";
const VERSION: &str = "v1alpha1";
/// `GROUP/VERSION`, for the JSON written (kube derives the same from the two; a test compares).
pub const API_VERSION: &str = "buildermonitor.dev/v1alpha1";
pub const KIND: &str = "ClusterBuilder";
const PLURAL: &str = "clusterbuilders";

/// The CRD (`builder-monitor crd`; the Helm chart ships the same text).
pub const CRD_YAML: &str = include_str!("clusterbuilders.yaml");

/// One `ClusterBuilder` object as the API server returns it.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
pub struct ClusterBuilder {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: ClusterBuilderSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ClusterBuilderStatus>,
}

impl ClusterBuilder {
    pub fn status(&self) -> Option<&ClusterBuilderStatus> {
        self.status.as_ref()
    }
}

impl kube::Resource for ClusterBuilder {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[derive(Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterBuilderSpec {
    /// The floating tag watched, e.g. `docker.io/paketobuildpacks/builder-jammy-base:latest`.
    pub image: String,
    /// Time between checks (e.g. `10m`), when no cron schedule is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Cron schedule, seconds first (e.g. `0 */15 * * * *`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// Platforms watched (`os/arch[/variant]`); empty means every platform.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub platforms: Vec<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterBuilderStatus {
    /// The immutable reference the tag points at: `repo@sha256:…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack: Option<BuilderStack>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<BuilderLifecycle>,
    /// The buildpacks of the pinned builder.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub builder_metadata: Vec<BuildpackMetadata>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (the last check succeeded) and `UpToDate` (the pin is the tag's current digest).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_check_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change: Option<LastChange>,
    /// The last pinned digests, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEntry>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BuilderStack {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The run image, immutable when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_image: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BuilderLifecycle {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BuildpackMetadata {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub homepage: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastChange {
    pub id: String,
    /// `rebase`, `rebuild`, `unknown` or `none`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// The OS packages the base or run image moved, briefly (`openssl 3.0.2-0ubuntu1.15 →
    /// 3.0.2-0ubuntu1.16, libssl3 …; 2 more`), when both sides listed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub packages: Option<String>,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    pub digest: String,
    pub first_seen: String,
}

#[cfg(test)]
mod tests;
