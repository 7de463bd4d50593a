//! One attempt of an action, whichever carries it out: an earlier attempt's tag write settled
//! first, a rebuild that would go back to an older builder refused, then the backend's work with
//! the tag's digests around it.

use super::*;
use builder_monitor_core::rebase::order::{self, KnownPin};

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

    /// Carries out one attempt of `action` and says how it went.
    pub(super) async fn attempt(&self, action: &ClaimedAction, target: &ActionTarget) -> Attempt {
        if self.in_daemon(action.kind) {
            match self.open_intent(action).await {
                Ok(Some(intent)) => {
                    if let Some(settled) = self.settle_rebase(&intent).await {
                        return settled;
                    }
                }
                Ok(None) => {}
                Err(err) => {
                    let mut attempt =
                        Attempt::failed(format!("cannot read the action's open tag write: {err}"), Next::Retry);
                    attempt.keep_intent = true;
                    return attempt;
                }
            }
            return self.rebase_in_registry(action, target).await;
        }
        if action.kind == ActionKind::Rebuild
            && let Some(refusal) = self.older_builder(action, target).await
        {
            return Attempt::failed(refusal, Next::Final);
        }
        let before = self.announce_push(action, target).await;
        let (outcome, retryable) = self.carry_out(action, target).await;
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
        let last_builder = last.get("builder")?.as_str()?.to_string();
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
