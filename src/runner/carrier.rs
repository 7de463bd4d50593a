//! What every backend is: the [`Backend`] a kind of runner (and each backend beside the runner:
//! registry rebases, deploys, Git write-back) implements — its answers read from its constant
//! table ([`Facts`], beside its config section), what it would create (`build-spec`), and what
//! starting it gives: a [`Carrier`] of attempts. Each backend's file names only this one; which
//! backend takes which action is `backend`'s.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::attempt::Attempt;
pub use super::context::Context;
use super::{PreviewError, RunnerError};
use crate::config::{AfterRestart, Config, Facts, RebasePath, Rule};
use crate::ledger::ClaimedAction;
use builder_monitor_core::plan::{ActionKind, ActionTarget};

/// What names and describes an action in the objects made for it.
#[derive(Debug, Clone)]
pub struct ActionRef<'a> {
    pub key: &'a str,
    pub change_id: &'a str,
    pub image: &'a str,
    pub kind: ActionKind,
}

/// A backend: its answers come from its table, its behaviour from its own file.
pub trait Backend: Send + Sync {
    /// Its answers (`crate::config::Facts`).
    fn facts(&self) -> &'static Facts;
    /// What it would create for `action` now (`build-spec`).
    fn preview(&self, config: &Config, action: &ActionRef<'_>, target: &ActionTarget) -> Result<Value, PreviewError>;
    /// Started for `config`: what carries out its actions. A Kubernetes backend needs the
    /// clients of its `clusters` and watches until `stop`.
    fn start(
        &self,
        config: &Config,
        clusters: &Clusters,
        stop: CancellationToken,
    ) -> Result<Arc<dyn Carrier>, RunnerError>;

    /// Its name in logs and errors.
    fn name(&self) -> &'static str {
        self.facts().name
    }
    /// The setting that puts it in force.
    fn setting(&self) -> &'static str {
        self.facts().setting
    }
    /// The permissions its objects need in the build namespace.
    fn permissions(&self) -> &'static [Rule] {
        self.facts().permissions
    }
    fn takes(&self, kind: ActionKind) -> bool {
        self.facts().takes(kind)
    }
    fn retries(&self) -> bool {
        self.facts().retries
    }
    fn after_restart(&self) -> AfterRestart {
        self.facts().after_restart
    }
    fn needs_app_digest(&self) -> bool {
        self.facts().needs_app_digest
    }
    fn path(&self) -> RebasePath {
        self.facts().path
    }
}

/// The Kubernetes clients the daemon has: `[kubernetes]`'s, and one per pool with a cluster of
/// its own (by pool name).
#[derive(Clone, Default)]
pub struct Clusters {
    pub default: Option<kube::Client>,
    pub pools: std::collections::BTreeMap<String, kube::Client>,
    /// Why the actions on `[kubernetes]`'s cluster wait: it could not be configured (`default` is
    /// then none) or did not answer at start.
    pub waiting: Option<String>,
}

impl Clusters {
    /// The client of `pool`'s cluster.
    pub fn of(&self, pool: &crate::config::Pool) -> Option<kube::Client> {
        match &pool.cluster {
            Some(_) => self.pools.get(&pool.name).cloned(),
            None => self.default.clone(),
        }
    }
}

impl From<Option<kube::Client>> for Clusters {
    fn from(default: Option<kube::Client>) -> Self {
        Clusters { default, pools: Default::default(), waiting: None }
    }
}

/// A started backend: carries out one attempt of an action and says how it went. `verified` is
/// the digest `require_signed`'s gate found signed (none when no check was asked): the only
/// digest of the app an attempt may start from; a tag that moved away from it fails the attempt
/// (the next one checks what the tag holds then), it is never acted on unverified.
pub trait Carrier: Send + Sync {
    fn attempt<'a>(
        &'a self,
        ctx: &'a Context,
        action: &'a ClaimedAction,
        target: &'a ActionTarget,
        verified: Option<&'a str>,
    ) -> BoxFuture<'a, Attempt>;
}
