//! What the runner records around deploys: the deploy that follows an action which moved an app
//! tag, and `deploy.started`, once per deploy.

use super::super::attempt::Digests;
use super::super::context::Context;
use crate::config::{Config, ImageSettings};
use crate::ledger::{ClaimedAction, NewAction};
use builder_monitor_core::deploy::{DeployTarget, Undo, action_key};
use builder_monitor_core::event::{self, EventType};
use builder_monitor_core::plan::{ActionKind, ActionPlan, ActionTarget};
use builder_monitor_core::reference::ImageRef;

/// Where a deploy's digest comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// An action moved the app tag to it; `tag_before` is what the tag held before (what an undo
    /// puts back), none when the tag did not exist.
    Moved { tag_before: Option<String> },
    /// A person asked for it (`deploy`): the tag was not moved by it, so there is no tag to put
    /// back.
    ByHand,
}

/// The deploy of `digest` (`reference`, pinned) to `image`'s workloads, recorded in `change` on
/// `target`: the one place a deploy action is built, for the deploy that follows an action which
/// moved the tag and for `deploy` by hand. In the image's wave, waiting for a person when the
/// roll-out says its deploys do.
pub fn deploy_action(
    config: &Config,
    image: &ImageSettings,
    change: &str,
    mut target: ActionTarget,
    digest: String,
    reference: String,
    origin: Origin,
) -> NewAction {
    let rollout = &config.rollout;
    let (undo, tag_before) = match origin {
        Origin::Moved { tag_before } => (image.undo(rollout), tag_before),
        Origin::ByHand => match image.undo(rollout) {
            Undo::WorkloadAndTag => (Undo::Workload, None),
            other => (other, None),
        },
    };
    target.plan =
        ActionPlan::Deploy(DeployTarget { digest, reference, workloads: image.deploy.clone(), undo, tag_before });
    NewAction::new(action_key(change, &image.name), change.to_string(), image.name.clone(), ActionKind::Deploy, target)
        .gated(image.wave, image.needs_approval(ActionKind::Deploy, rollout))
}

impl Context {
    /// The deploy that follows an action which moved the app tag to a new digest, when the image
    /// deploys: of that digest, in the action's wave, with the tag's digest before for an undo,
    /// expedited by what expedited the action (`[rollout] expedite`: the change's fix skips the
    /// windows and the soak for its deploy too, never the freeze, approvals or health gates).
    pub(in crate::runner) fn follow(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        digests: &Digests,
    ) -> Vec<NewAction> {
        let Some(image) = self.config.image(&action.image) else { return Vec::new() };
        if !action.kind.moves_tag() || !self.config.deploys_image(image) {
            return Vec::new();
        }
        let Some(after) = digests.after.clone() else {
            tracing::warn!(action = %action.key, image = %action.image, "the app tag's digest after the action is not known; no deploy (run `builder-monitor deploy`)");
            return Vec::new();
        };
        if digests.before.as_deref() == Some(after.as_str()) {
            return Vec::new();
        }
        let reference = match ImageRef::parse(&target.image) {
            Ok(r) => r.pinned(&after),
            Err(_) => return Vec::new(),
        };
        let mut t = target.clone();
        t.why = format!("the {} moved {} to {after}", action.kind.as_str(), target.image);
        let origin = Origin::Moved { tag_before: digests.before.clone() };
        let deploy = deploy_action(&self.config, image, &action.change_id, t, after, reference, origin);
        vec![deploy.expedited(action.expedited.clone())]
    }

    /// Records `deploy.started`: the deploy wrote its workloads. Its id is the action's, whatever
    /// the attempt: a restart that records it again adds nothing. Answers whether it is recorded.
    pub(in crate::runner) async fn deploy_started(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        progress: &builder_monitor_core::deploy::DeployProgress,
    ) -> bool {
        let mut e = self.event(action, target, EventType::DeployStarted, None, None, &Digests::default());
        e.id = event::stable_id(&[&action.key, EventType::DeployStarted.as_str()]);
        if let Some(info) = e.action.as_mut() {
            info.result = event::ActionResult::Deploy(progress.workloads.clone());
            info.digest = target.plan.deploy().map(|d| d.digest.clone());
        }
        let events = vec![e];
        let history = self.config.monitor.history;
        let record = |deliveries| {
            self.ledger.record_events(&target.builder_name, events.clone(), deliveries, history, self.clock.now())
        };
        match crate::alert::emit(&self.config.alerts, &events, record).await {
            Ok(()) => true,
            Err(err) => {
                tracing::error!(action = %action.key, error = %err, "cannot record deploy.started");
                false
            }
        }
    }
}
