//! What a runner needs to carry out an action, recorded with it: the fields every kind shares,
//! and what its kind alone carries ([`ActionPlan`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Scheduling, Source};
use crate::deploy::DeployTarget;
pub use crate::gitops::BatchedChange;

/// What a runner needs to carry out an action, recorded with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionTarget {
    /// The app image tag to build or rebase.
    pub image: String,
    pub builder_name: String,
    /// The pinned builder, `repo@sha256:…`.
    pub builder: String,
    /// The run image, immutable: the one to rebase onto, or the builder's for a rebuild.
    pub run_image: Option<String>,
    pub source: Option<Source>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub why: String,
    /// From the builder's metadata: the CNB user and group its build steps run as, the platform
    /// APIs its lifecycle supports, and its stack id (kpack's rebase check).
    #[serde(default)]
    pub user_id: Option<u32>,
    #[serde(default)]
    pub group_id: Option<u32>,
    #[serde(default)]
    pub platform_apis: Vec<String>,
    #[serde(default)]
    pub stack_id: Option<String>,
    /// The app image as it is now, `repo@sha256:…` (kpack's `lastBuild.image`).
    #[serde(default)]
    pub app_reference: Option<String>,
    /// The reasons of the change, for annotations.
    #[serde(default)]
    pub reasons: Vec<String>,
    /// Per-image placement for the Kubernetes runners.
    #[serde(default)]
    pub scheduling: Scheduling,
    /// What the move fixes, attested as OpenVEX beside the provenance of what the action writes
    /// (`[signing] attest`, a move that claims a fix); none otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vex: Option<crate::vulns::openvex::VexFacts>,
    /// What its kind alone carries (a deploy's digest and workloads, a gitops action's target).
    #[serde(flatten)]
    pub plan: ActionPlan,
}

/// What an action's kind alone carries. Stored as the target's optional `deploy` or `gitops` key
/// (neither for a rebuild or a rebase), as targets have always been, so every stored row reads.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(from = "PlanFields", into = "PlanFields")]
pub enum ActionPlan {
    /// A rebuild or a rebase of the app image: the shared fields say all it needs.
    #[default]
    Build,
    /// A deploy: the digest and the workloads it goes to.
    Deploy(DeployTarget),
    /// A gitops action: the `[[gitops]]` target and the change's one-line summary.
    Gitops(GitopsPlan),
}

impl ActionPlan {
    pub fn deploy(&self) -> Option<&DeployTarget> {
        match self {
            ActionPlan::Deploy(d) => Some(d),
            _ => None,
        }
    }

    pub fn deploy_mut(&mut self) -> Option<&mut DeployTarget> {
        match self {
            ActionPlan::Deploy(d) => Some(d),
            _ => None,
        }
    }

    pub fn gitops(&self) -> Option<&GitopsPlan> {
        match self {
            ActionPlan::Gitops(g) => Some(g),
            _ => None,
        }
    }
}

/// [`ActionPlan`] as stored: one optional key per kind that carries something.
#[derive(Serialize, Deserialize)]
struct PlanFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deploy: Option<DeployTarget>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    gitops: Option<GitopsPlan>,
}

impl From<PlanFields> for ActionPlan {
    fn from(fields: PlanFields) -> Self {
        match fields {
            PlanFields { deploy: Some(d), .. } => ActionPlan::Deploy(d),
            PlanFields { gitops: Some(g), .. } => ActionPlan::Gitops(g),
            PlanFields { deploy: None, gitops: None } => ActionPlan::Build,
        }
    }
}

impl From<ActionPlan> for PlanFields {
    fn from(plan: ActionPlan) -> Self {
        match plan {
            ActionPlan::Build => PlanFields { deploy: None, gitops: None },
            ActionPlan::Deploy(d) => PlanFields { deploy: Some(d), gitops: None },
            ActionPlan::Gitops(g) => PlanFields { deploy: None, gitops: Some(g) },
        }
    }
}

/// What a gitops action commits for its change: every app image's newest digest and the builder's
/// pin, into the target's files, with the change's summary as the commit's first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitopsPlan {
    /// The `[[gitops]]` name.
    pub target: String,
    pub summary: String,
    /// What the change fixes (`change.fixes`), for the commit's body and its
    /// `Builder-Monitor-Fixes` trailer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fixes: Vec<crate::vulns::Fix>,
    /// The earlier changes whose actions of the same target this one superseded within
    /// `[[gitops]] batch`, oldest first: its one commit lists them and their fixes too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch: Vec<BatchedChange>,
}

impl GitopsPlan {
    /// This plan (of change `own`) takes along `older`'s (of change `older_change`, which it
    /// supersedes) and what `older` had taken along (`[[gitops]] batch`).
    pub fn absorb(&mut self, own: &str, older_change: &str, older: &GitopsPlan) {
        let taken = BatchedChange {
            change_id: older_change.to_string(),
            summary: older.summary.clone(),
            fixes: older.fixes.clone(),
        };
        crate::gitops::absorb(&mut self.batch, own, taken, &older.batch);
    }
}
