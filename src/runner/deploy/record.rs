//! What the runner records around deploys: the deploy that follows an action which moved an app
//! tag, and `deploy.started`, once per deploy.

use super::super::Runner;
use super::super::attempt::Digests;
use crate::ledger::{ClaimedAction, NewAction};
use builder_monitor_core::event::{self, EventType};
use builder_monitor_core::plan::{ActionKind, ActionTarget};
use builder_monitor_core::reference::ImageRef;

impl Runner {
    /// The deploy that follows an action which moved the app tag to a new digest, when the image
    /// deploys: of that digest, in the action's wave, with the tag's digest before for an undo.
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
        let rollout = &self.config.rollout;
        let deploy = builder_monitor_core::deploy::DeployTarget {
            digest: after.clone(),
            reference,
            workloads: image.deploy.clone(),
            undo: image.undo(rollout),
            tag_before: digests.before.clone(),
        };
        let mut t = target.clone();
        t.why = format!("the {} moved {} to {after}", action.kind.as_str(), target.image);
        t.deploy = Some(deploy);
        let key = builder_monitor_core::deploy::action_key(&action.change_id, &action.image);
        vec![
            NewAction::new(key, action.change_id.clone(), action.image.clone(), ActionKind::Deploy, t)
                .gated(image.wave, image.needs_approval(ActionKind::Deploy, rollout)),
        ]
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
            info.workloads = progress.workloads.clone();
            info.digest = target.deploy.as_ref().map(|d| d.digest.clone());
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
