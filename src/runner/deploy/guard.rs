//! The override guard: watches the deployed workloads and holds an image (`deploy.overridden`)
//! when a workload its newest succeeded deploy wrote no longer runs what was written — a person's
//! rollback, or another tool's write — so nothing rolls it forward again until a newer change or
//! `release`. What each deploy wrote is kept in memory ([`OverrideIndex`]): rebuilt from the
//! ledger at start, updated as deploys start and end, so an event reads no ledger.

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};

use super::super::Runner;
use super::super::attempt::Digests;
use super::super::context::Context;
use super::resource;
use crate::ledger::{ActionState, ClaimedAction, LatestAction, LedgerError};
use builder_monitor_core::deploy::{self as core, DeployProgress, Guarded, Override, OverrideIndex, WorkloadProgress};
use builder_monitor_core::event::EventType;
use builder_monitor_core::plan::{ActionKind, ActionTarget};
use builder_monitor_core::progress::Progress;

/// Watches the deployed workloads until `stop` (see the module docs). A deploy still running is
/// its own business: its image is out of the index until it ends.
pub async fn guard(runner: std::sync::Arc<Runner>, client: kube::Client, stop: tokio_util::sync::CancellationToken) {
    let mut scopes: std::collections::BTreeSet<(core::WorkloadKind, String)> = Default::default();
    for image in &runner.ctx.config.images {
        for w in &image.deploy {
            scopes.insert((w.kind, w.namespace.clone()));
        }
    }
    let streams = scopes.into_iter().map(|(kind, namespace)| {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource(kind));
        watcher(api, crate::runner::watch::settings()).default_backoff().map(move |e| (kind, e)).boxed()
    });
    let mut events = futures::stream::select_all(streams);
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return,
            e = events.next() => e,
        };
        let (kind, object) = match event {
            Some((kind, Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)))) => (kind, o),
            Some((_, Ok(_))) => continue,
            Some((_, Err(err))) => {
                tracing::debug!(error = %err, "watch of deployed workloads failed; retrying");
                continue;
            }
            None => return,
        };
        let (Some(namespace), Some(name)) = (object.metadata.namespace.as_deref(), object.metadata.name.as_deref())
        else {
            continue;
        };
        for found in runner.ctx.overrides(kind, namespace, name, &object) {
            let workload = format!("{kind} {namespace}/{name}");
            if let Err(err) = runner.ctx.hold_overridden(&workload, found).await {
                tracing::warn!(workload = %workload, error = %err, "cannot hold the image of an overridden workload");
            }
        }
    }
}

/// The guard's index from each image's newest deploy (`Ledger::latest_actions`): those that
/// succeeded and hold nothing.
pub fn guard_index(latest: Vec<LatestAction>) -> OverrideIndex {
    let mut index = OverrideIndex::default();
    for latest in latest {
        let r = latest.record;
        if r.state != ActionState::Succeeded || r.holds {
            continue;
        }
        let Some(progress) = r.progress.as_ref().and_then(Progress::deploy).cloned() else {
            continue;
        };
        index.insert(Guarded { image: r.image, key: r.key, change: r.change, attempt: r.attempts, progress });
    }
    index
}

impl Context {
    /// The guard's check of one workload event: the guarded deploys whose writes `object` no
    /// longer runs. A lookup in memory; its cost does not grow with the ledger.
    pub fn overrides(
        &self,
        kind: core::WorkloadKind,
        namespace: &str,
        name: &str,
        object: &DynamicObject,
    ) -> Vec<Override> {
        self.guarded.lock().unwrap_or_else(|e| e.into_inner()).check(kind, namespace, name, &object.data)
    }

    /// Fills the guard's index from the ledger ([`guard_index`]). Called before any action
    /// starts, so a deploy that starts later takes its image out again.
    pub(in crate::runner) async fn rebuild_guard(&self) -> Result<usize, LedgerError> {
        let index = guard_index(self.ledger.latest_actions(ActionKind::Deploy).await?);
        let n = index.len();
        *self.guarded.lock().unwrap_or_else(|e| e.into_inner()) = index;
        Ok(n)
    }

    /// `image` is not guarded any more: a deploy of it starts (its writes are its own business
    /// until it ends), or it is held.
    pub(in crate::runner) fn unguard(&self, image: &str) {
        self.guarded.lock().unwrap_or_else(|e| e.into_inner()).remove(image);
    }

    /// A deploy ended: guarded from now on when it succeeded.
    pub(in crate::runner) fn deploy_ended(
        &self,
        action: &ClaimedAction,
        succeeded: bool,
        workloads: &[WorkloadProgress],
    ) {
        let mut index = self.guarded.lock().unwrap_or_else(|e| e.into_inner());
        if !succeeded {
            index.remove(&action.image);
            return;
        }
        index.insert(Guarded {
            image: action.image.clone(),
            key: action.key.clone(),
            change: action.change_id.clone(),
            attempt: action.attempt,
            progress: DeployProgress { workloads: workloads.to_vec(), started: true },
        });
    }

    /// Holds the image of an overridden deploy, with `deploy.overridden` in the same write; the
    /// image leaves the index (held, nothing more to guard).
    async fn hold_overridden(&self, workload: &str, found: Override) -> Result<(), LedgerError> {
        let deploy = &found.deploy;
        let Some(image) = self.config.image(&deploy.image) else { return Ok(()) };
        let changed: Vec<String> = found.changed.iter().map(ToString::to_string).collect();
        let detail = format!(
            "held: workload {} changed by someone else ({}); run `builder-monitor release {}` to let deploys go again",
            workload.split_once(' ').map_or(workload, |(_, w)| w),
            changed.join(", "),
            deploy.change
        );
        let claimed = ClaimedAction {
            key: deploy.key.clone(),
            change_id: deploy.change.clone(),
            image: deploy.image.clone(),
            kind: ActionKind::Deploy,
            attempt: deploy.attempt,
            target: Err(crate::ledger::Unreadable(String::new())),
            process: None,
            progress: None,
            created: self.clock.now(),
            expedited: Default::default(),
        };
        let target = ActionTarget {
            image: image.image.to_string(),
            builder_name: image.builder.clone(),
            builder: String::new(),
            run_image: None,
            source: None,
            env: Default::default(),
            why: String::new(),
            user_id: None,
            group_id: None,
            platform_apis: Vec::new(),
            stack_id: None,
            app_reference: None,
            reasons: Vec::new(),
            scheduling: Default::default(),
            vex: None,
            plan: Default::default(),
        };
        let mut event =
            self.event(&claimed, &target, EventType::DeployOverridden, Some(detail.clone()), None, &Digests::default());
        if let Some(info) = event.action.as_mut() {
            info.result = builder_monitor_core::event::ActionResult::Deploy(deploy.progress.workloads.clone());
        }
        let events = vec![event];
        let history = self.config.monitor.history;
        let record = |deliveries| {
            self.ledger.hold_image(crate::ledger::ImageHold {
                key: &deploy.key,
                detail: detail.clone(),
                watch: &image.builder,
                events: events.clone(),
                deliveries,
                history,
                now: self.clock.now(),
            })
        };
        let held = crate::alert::emit(&self.config.alerts, &events, record).await?;
        self.unguard(&deploy.image);
        if held {
            tracing::warn!(image = %image.name, change = %deploy.change, "{detail}");
        }
        Ok(())
    }
}
