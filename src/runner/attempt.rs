//! One attempt of an action, whichever backend carries it out, and what the runner records of it;
//! for a backend that pushes the app tag itself, a rebuild that would go back to an older builder
//! refused, then its work with the tag's digests around it.

use super::*;
use builder_monitor_core::rebase::order::{self, KnownPin};

/// The app tag's digests around an attempt, as far as they are known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Digests {
    pub before: Option<String>,
    pub after: Option<String>,
}

/// What follows an attempt that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Trying again could help.
    Retry,
    /// It cannot (a refusal, a command that cannot start, a tag someone else holds).
    Final,
    /// A newer change has an action for the image: end without writing.
    Superseded { by: String },
}

/// One attempt as the runner records it.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub outcome: Outcome,
    pub next: Next,
    pub digests: Digests,
    /// Whether the tag was written (recorded as a move even when the attempt failed: `tag_race`).
    pub moved: bool,
    /// The digest another writer put on the tag right behind ours.
    pub tag_race: Option<String>,
    /// The write's outcome is unknown (the tag could not be read): its intent stays for the next
    /// attempt to settle.
    pub keep_intent: bool,
    /// A deploy found nothing to write (its workloads are GitOps-owned): it ends `skipped`.
    pub skipped: bool,
    /// A failed deploy holds its image.
    pub hold_image: bool,
    /// A failed deploy put its workloads back.
    pub rolled_back: bool,
    /// A failed deploy found containers someone else changed (left as they set them): the
    /// detail of its `deploy.overridden`.
    pub overridden: Option<String>,
    /// A deploy's record of its workloads, for its events.
    pub workloads: Vec<builder_monitor_core::deploy::WorkloadProgress>,
    /// The pool a build ran in.
    pub pool: Option<String>,
    /// A gitops action's commit.
    pub commit: Option<builder_monitor_core::event::CommitInfo>,
}

impl Attempt {
    pub fn new(outcome: Outcome, next: Next, digests: Digests) -> Self {
        let moved = outcome.success;
        Attempt {
            outcome,
            next,
            digests,
            moved,
            tag_race: None,
            keep_intent: false,
            skipped: false,
            hold_image: false,
            rolled_back: false,
            overridden: None,
            workloads: Vec::new(),
            pool: None,
            commit: None,
        }
    }

    pub fn failed(detail: String, next: Next) -> Self {
        Attempt::new(Outcome { success: false, detail, output_tail: String::new() }, next, Digests::default())
    }
}

impl Runner {
    /// Settles the rollbacks a crash interrupted (their writes were recorded before they were
    /// made): a tag that holds the rollback's digest is recorded as moved. A registry that cannot
    /// be read leaves the intent for the next start or `rollback`.
    pub(super) async fn settle_rollbacks(&self) -> Result<(), RunnerError> {
        let history = self.config.monitor.history;
        for intent in self.ledger.tag_intents().await?.into_iter().filter(|i| i.action.is_none()) {
            let Some(watch) = self.config.image(&intent.image).map(|i| i.builder.clone()) else {
                tracing::warn!(image = %intent.image, "an interrupted rollback of an image no longer configured is left as it is");
                continue;
            };
            match crate::rollback::settle(&self.ledger, &self.registry, &watch, &intent, history, self.clock.now())
                .await
            {
                Ok(true) => {
                    tracing::warn!(image = %intent.image, reference = %intent.reference, "an interrupted rollback had moved the tag; recorded now")
                }
                Ok(false) => tracing::info!(image = %intent.image, "an interrupted rollback had not written the tag"),
                Err(err) => {
                    tracing::error!(image = %intent.image, error = %err, "cannot settle an interrupted rollback")
                }
            }
        }
        Ok(())
    }

    /// Carries out one attempt of `action` by its backend and says how it went.
    pub(super) async fn attempt(&self, action: &ClaimedAction, target: &ActionTarget) -> Attempt {
        self.backends.carrier(action.kind).attempt(self, action, target).await
    }

    /// An attempt by something that pushes the app tag itself (a command, a Job, a Build): a
    /// rebuild that would go back to an older builder refused, the tag's digest recorded before
    /// `work` and read after it. `work` says the outcome and whether trying again could help.
    pub(super) async fn pushed(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        work: impl Future<Output = (Outcome, bool)>,
    ) -> Attempt {
        if action.kind == ActionKind::Rebuild
            && let Some(refusal) = self.older_builder(action, target).await
        {
            return Attempt::failed(refusal, Next::Final);
        }
        let before = self.announce_push(action, target).await;
        let (outcome, retryable) = work.await;
        let after = if outcome.success { self.app_digest(&target.image).await } else { None };
        Attempt::new(outcome, if retryable { Next::Retry } else { Next::Final }, Digests { before, after })
    }

    /// Why a rebuild must not run: the app's last rebuild used a builder its watch pinned after
    /// this one (a rollback, not a rebuild, moves an app back).
    async fn older_builder(&self, action: &ClaimedAction, target: &ActionTarget) -> Option<String> {
        let last = match self.ledger.last_succeeded_target(&action.image, ActionKind::Rebuild).await {
            Ok(last) => last?,
            Err(err) => {
                tracing::warn!(action = %action.key, error = %err, "cannot read the app's last rebuild");
                return None;
            }
        };
        let last_builder = last.builder;
        let digest = |reference: &str| reference.rsplit_once('@').map(|(_, d)| d.to_string());
        let (on, wanted) = (digest(&last_builder)?, digest(&target.builder)?);
        let pins = self.ledger.history(&target.builder_name, self.config.monitor.history.max(1) + 1).await.ok()?;
        let history: Vec<KnownPin> =
            pins.into_iter().map(|p| KnownPin { digest: p.digest, platforms: p.platforms }).collect();
        order::not_older(&[history], &on, &wanted).err().map(|_| {
            format!(
                "refused: {} was last built with builder {last_builder}, pinned after {}: a rebuild never goes back to an older builder (`rollback` moves the tag back)",
                action.image, target.builder
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ledger::{ActionState, CheckRecord, NewAction, PinUpdate, WatchKind};
    use crate::schedule::Clock;

    fn check(digest: &str, actions: Vec<NewAction>, minute: u32) -> CheckRecord {
        CheckRecord {
            watch: "jammy".into(),
            kind: WatchKind::Builder,
            image: "127.0.0.1:1/cnb/builder:latest".into(),
            time: chrono::DateTime::parse_from_rfc3339(&format!("2026-11-30T12:{minute:02}:00Z")).unwrap().into(),
            outcome: Ok(()),
            pin: Some(PinUpdate {
                digest: digest.into(),
                reference: format!("127.0.0.1:1/cnb/builder@{digest}"),
                media_type: "application/vnd.oci.image.index.v1+json".into(),
                platforms: Default::default(),
                metadata: None,
            }),
            pending: None,
            change: None,
            events: vec![],
            deliveries: vec![],
            actions,
            history: 10,
        }
    }

    fn rebuild(change: &str, builder_digest: &str) -> NewAction {
        let target = ActionTarget {
            image: "127.0.0.1:1/apps/app:latest".into(),
            builder_name: "jammy".into(),
            builder: format!("127.0.0.1:1/cnb/builder@{builder_digest}"),
            run_image: None,
            source: Some(builder_monitor_core::plan::Source {
                git: "https://git.example.com/app".into(),
                revision: "main".into(),
                sub_path: None,
            }),
            env: BTreeMap::new(),
            why: "test".into(),
            user_id: None,
            group_id: None,
            platform_apis: vec![],
            stack_id: None,
            app_reference: None,
            reasons: vec![],
            scheduling: Default::default(),
            plan: Default::default(),
        };
        NewAction::new(format!("k-{change}"), change.into(), "app".into(), ActionKind::Rebuild, target)
    }

    /// A rebuild whose builder the watch pinned before the one the app was last built with is
    /// refused, for good, and its command never runs.
    #[tokio::test]
    async fn a_rebuild_never_goes_back_to_an_older_builder() {
        crate::install_crypto_provider();
        // The app tag is read around the command: on a closed loopback port, so it answers at once.
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let text = format!(
            "[[builders]]\nname = \"jammy\"\nimage = \"127.0.0.1:1/cnb/builder:latest\"\n\
             [runner]\ntype = \"exec\"\nmax_attempts = 1\n[runner.exec]\n\
             rebuild = [\"sh\", \"-c\", \"echo {{change_id}} >> {}\"]\nrebase = [\"true\"]\n",
            marker.display()
        );
        let config = Arc::new(Config::parse(std::path::Path::new("/config.toml"), &text).unwrap());
        let ledger = Ledger::open(&dir.path().join("ledger.db")).unwrap();
        let backends = Backends::for_config(&config, Clusters::default(), CancellationToken::new()).unwrap();
        let runner = Arc::new(Runner::new(config, ledger.clone(), Clock::System, backends));

        ledger.commit(check("sha256:b1", vec![], 0)).await.unwrap();
        ledger.commit(check("sha256:b2", vec![rebuild("c2", "sha256:b2")], 1)).await.unwrap();
        assert_eq!(runner.run_due_once().await, 1);
        // An action for the older builder (as a stale or replayed change would carry).
        ledger.commit(check("sha256:b2", vec![rebuild("c1", "sha256:b1")], 2)).await.unwrap();
        assert_eq!(runner.run_due_once().await, 1);

        let actions = ledger.actions(10).await.unwrap();
        let of = |change: &str| actions.iter().find(|a| a.change == change).unwrap().clone();
        assert_eq!(of("c2").state, ActionState::Succeeded);
        assert_eq!(of("c1").state, ActionState::Failed);
        let detail = of("c1").detail.unwrap();
        assert!(detail.contains("never goes back to an older builder"), "{detail}");
        assert_eq!(std::fs::read_to_string(&marker).unwrap(), "c2\n", "only the newer builder's command ran");
    }
}
