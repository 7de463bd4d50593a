//! One attempt of an action, whichever backend carries it out, and what the runner records of it;
//! for a backend that pushes the app tag itself, a rebuild that would go back to an older builder
//! refused, then its work with the tag's digests around it.

use super::*;
use builder_monitor_core::deploy::WorkloadProgress;
use builder_monitor_core::event::{ActionResult, BuildInfo, CommitInfo};
use builder_monitor_core::rebase::order::{self, KnownPin};
use builder_monitor_core::signing::SignatureInfo;

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
    /// Refused before anything was written (`require_signed`): failed for good, `action.refused`.
    Refused,
}

/// One attempt as the runner records it.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub outcome: Outcome,
    pub next: Next,
    pub digests: Digests,
    /// Whether the tag was written (recorded as a move even when the attempt failed: `tag_race`).
    pub moved: bool,
    /// The write's outcome is unknown (the tag could not be read): its intent stays for the next
    /// attempt to settle.
    pub keep_intent: bool,
    /// What its kind alone found or did.
    pub result: KindResult,
    /// What it verified before acting and signed after (`action.signature`).
    pub signature: Option<SignatureInfo>,
    /// The `.sig`/`.att` manifests it replaced because they could not take our signature, each
    /// described (`signature.replaced`).
    pub replaced_signatures: Vec<String>,
}

/// What an attempt found or did that only its kind has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KindResult {
    /// A rebuild or a rebase: the pool it ran in, the digest another writer put on the tag right
    /// behind ours (`path` is the event's, not the attempt's).
    Build(BuildInfo),
    Deploy(DeployResult),
    Gitops(GitopsResult),
}

impl Default for KindResult {
    fn default() -> Self {
        KindResult::Build(BuildInfo::default())
    }
}

/// What a deploy's attempt found or did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeployResult {
    /// It found nothing to write (its workloads are GitOps-owned): it ends `skipped`.
    pub skipped: bool,
    /// It failed and holds its image.
    pub hold_image: bool,
    /// It failed and put its workloads back.
    pub rolled_back: bool,
    /// It failed and found containers someone else changed (left as they set them): the detail of
    /// its `deploy.overridden`.
    pub overridden: Option<String>,
    /// Its record of its workloads, for its events.
    pub workloads: Vec<WorkloadProgress>,
}

/// What a gitops action's attempt found or did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitopsResult {
    /// Nothing to commit: the files hold the digests already.
    pub skipped: bool,
    /// What it committed (or, failing, would have).
    pub commit: Option<CommitInfo>,
}

impl KindResult {
    /// What the events of an action of `kind` say of it; `path` is where a rebase ran, as the
    /// event says already.
    pub fn event_result(&self, kind: ActionKind, path: Option<String>) -> ActionResult {
        match (kind, self) {
            (ActionKind::Rebase | ActionKind::Rebuild, KindResult::Build(b)) => {
                ActionResult::Build(BuildInfo { path, ..b.clone() })
            }
            (ActionKind::Rebase | ActionKind::Rebuild, _) => {
                ActionResult::Build(BuildInfo { path, ..Default::default() })
            }
            (ActionKind::Deploy, KindResult::Deploy(d)) => ActionResult::Deploy(d.workloads.clone()),
            (ActionKind::Deploy, _) => ActionResult::Deploy(Vec::new()),
            (ActionKind::Gitops, KindResult::Gitops(g)) => ActionResult::Gitops(g.commit.clone()),
            (ActionKind::Gitops, _) => ActionResult::Gitops(None),
        }
    }
}

impl Attempt {
    pub fn new(outcome: Outcome, next: Next, digests: Digests) -> Self {
        let moved = outcome.success;
        Attempt {
            outcome,
            next,
            digests,
            moved,
            keep_intent: false,
            result: KindResult::default(),
            signature: None,
            replaced_signatures: Vec::new(),
        }
    }

    pub fn failed(detail: String, next: Next) -> Self {
        Attempt::new(Outcome { success: false, detail, output_tail: String::new() }, next, Digests::default())
    }

    /// A rebuild's or a rebase's result, to fill in.
    pub fn build_mut(&mut self) -> &mut BuildInfo {
        if !matches!(self.result, KindResult::Build(_)) {
            self.result = KindResult::Build(BuildInfo::default());
        }
        match &mut self.result {
            KindResult::Build(b) => b,
            _ => unreachable!("set above"),
        }
    }

    /// A deploy's result, to fill in.
    pub fn deploy_mut(&mut self) -> &mut DeployResult {
        if !matches!(self.result, KindResult::Deploy(_)) {
            self.result = KindResult::Deploy(DeployResult::default());
        }
        match &mut self.result {
            KindResult::Deploy(d) => d,
            _ => unreachable!("set above"),
        }
    }

    pub fn deploy(&self) -> Option<&DeployResult> {
        match &self.result {
            KindResult::Deploy(d) => Some(d),
            _ => None,
        }
    }

    /// It found nothing to do (a deploy to GitOps-owned workloads, a commit of nothing new).
    pub fn skipped(&self) -> bool {
        match &self.result {
            KindResult::Deploy(d) => d.skipped,
            KindResult::Gitops(g) => g.skipped,
            KindResult::Build(_) => false,
        }
    }
}

impl Context {
    /// Settles the rollbacks a crash interrupted (their writes were recorded before they were
    /// made): a tag that holds the rollback's digest is recorded as moved. A registry that cannot
    /// be read leaves the intent for the next start or `rollback`.
    pub(super) async fn settle_rollbacks(&self) -> Result<(), RunnerError> {
        for intent in self.ledger.tag_intents().await?.into_iter().filter(|i| i.action.is_none()) {
            let Some(image) = self.config.image(&intent.image) else {
                tracing::warn!(image = %intent.image, "an interrupted rollback of an image no longer configured is left as it is");
                continue;
            };
            let now = self.clock.now();
            match crate::rollback::settle(&self.config, &self.ledger, &self.registry, image, &intent, now).await {
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
    /// An attempt by something that pushes the app tag itself (a command, a Job, a Build): a
    /// rebuild that would go back to an older builder refused, the tag's digest recorded before
    /// `work` and read after it. `work` says the outcome and whether trying again could help.
    /// With a `verified` starting digest, `work` runs only while the tag still holds it.
    pub(super) async fn pushed(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        verified: Option<&str>,
        work: impl Future<Output = (Outcome, bool)>,
    ) -> Attempt {
        if action.kind == ActionKind::Rebuild
            && let Some(refusal) = self.older_builder(action, target).await
        {
            return Attempt::failed(refusal, Next::Final);
        }
        let before = self.announce_push(action, target).await;
        if let Some(verified) = verified
            && before.as_deref() != Some(verified)
        {
            // The builder would start from what the tag holds now, which nobody checked.
            let now = before.as_deref().unwrap_or("nothing (or could not be read)");
            let detail = format!(
                "{} moved from {verified}, whose signature was checked, to {now}, whose was not: nothing was run; \
                 the next attempt checks what the tag holds then",
                target.image
            );
            tracing::warn!(action = %action.key, verified, now, "the app tag moved after its signature was checked; not acting on it");
            return Attempt::failed(detail, Next::Retry);
        }
        let (mut outcome, retryable) = work.await;
        let after = if outcome.success { self.app_digest(&target.image).await } else { None };
        let mut next = if retryable { Next::Retry } else { Next::Final };
        let moved = outcome.success;
        let (mut signature, mut replaced) = (None, Vec::new());
        if let Some(digest) = &after {
            match self.sign_build(action, target, digest).await {
                Ok(None) => {}
                Ok(Some((signed, key_id))) => {
                    outcome.detail.push_str(&format!("; signed {digest} ({})", signed.signature));
                    signature = Some(signed.info(&key_id));
                    replaced = signed.replaced.iter().map(ToString::to_string).collect();
                }
                // The tag moved already: another attempt would build again, not sign.
                Err(why) => {
                    outcome.success = false;
                    outcome.detail = format!("{}; but {digest} could not be signed: {why}", outcome.detail);
                    next = Next::Final;
                }
            }
        }
        let mut attempt = Attempt::new(outcome, next, Digests { before, after });
        attempt.moved = moved;
        attempt.signature = signature;
        attempt.replaced_signatures = replaced;
        attempt
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
            vex: None,
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
