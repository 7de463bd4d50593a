//! Carrying out one claimed action: its attempt by the backend of its kind, then its end recorded
//! in one write (state, events, tag move, the holds a failure puts on the change and the image, the
//! deploy that follows a success).

use super::*;

impl Runner {
    pub(super) fn event(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        event_type: EventType,
        detail: Option<String>,
        tail: Option<String>,
        digests: &Digests,
    ) -> Event {
        let builder_image = self
            .config
            .builder(&target.builder_name)
            .map(|b| b.image.to_string())
            .unwrap_or_else(|| target.builder.clone());
        let id = event::stable_id(&[&action.key, event_type.as_str(), &action.attempt.to_string()]);
        let mut e = Event::new(
            id,
            event_type,
            timestamp(self.clock.now()),
            Subject { name: target.builder_name.clone(), image: builder_image },
        );
        e.action = Some(ActionInfo {
            key: action.key.clone(),
            image: action.image.clone(),
            reference: target.image.clone(),
            kind: action.kind,
            change: action.change_id.clone(),
            attempt: action.attempt,
            max_attempts: self.config.runner.max_attempts,
            detail,
            output_tail: tail,
            previous: digests.before.clone(),
            digest: digests.after.clone(),
            result: match action.kind {
                ActionKind::Rebase => ActionResult::Build(BuildInfo {
                    path: Some(self.backends.backend(action.kind).path().as_str().into()),
                    ..Default::default()
                }),
                kind => ActionResult::empty(kind),
            },
            signature: None,
        });
        e
    }

    /// Writes to the ledger what registries answered during the attempt (the referrers API, asked
    /// once per registry by this process), so `status` and the page show it. A failed write is
    /// tried again after the next attempt.
    async fn record_registry_answers(&self) {
        self.ledger.record_referrers_answers(&self.registry, self.clock.now()).await;
    }

    pub(super) async fn execute(self: Arc<Self>, action: ClaimedAction, _permit: OwnedSemaphorePermit) {
        let target: ActionTarget = match action.target.clone() {
            Ok(t) => t,
            Err(err) => {
                tracing::error!(action = %action.key, error = %err, "unreadable action target");
                let _ = self
                    .ledger
                    .finish_action(ActionEnd {
                        key: &action.key,
                        outcome: ActionOutcome::Failed,
                        detail: format!("unreadable target: {err}"),
                        output_tail: String::new(),
                        watch: "",
                        events: vec![],
                        deliveries: vec![],
                        history: 1,
                        now: self.clock.now(),
                        tag_move: None,
                        hold: None,
                        keep_intent: false,
                        follow: Vec::new(),
                        hold_image: false,
                    })
                    .await;
                return;
            }
        };
        let history = self.config.monitor.history;
        if action.kind == ActionKind::Rebuild {
            let started = vec![self.event(&action, &target, EventType::BuildStarted, None, None, &Digests::default())];
            let record = |deliveries| {
                self.ledger.record_events(&target.builder_name, started.clone(), deliveries, history, self.clock.now())
            };
            if let Err(err) = crate::alert::emit(&self.config.alerts, &started, record).await {
                tracing::error!(action = %action.key, error = %err, "cannot record build.started");
            }
        }
        tracing::info!(action = %action.key, image = %action.image, kind = action.kind.as_str(), attempt = action.attempt, "running action");
        if action.kind == ActionKind::Deploy {
            self.unguard(&action.image);
        }
        let mut attempt = self.attempt(&action, &target).await;
        self.record_registry_answers().await;
        attempt.outcome.detail = self.secrets.scrub(&attempt.outcome.detail);
        attempt.outcome.output_tail = self.secrets.scrub(&attempt.outcome.output_tail);
        let outcome = attempt.outcome.clone();
        let digests = attempt.digests.clone();
        if !outcome.success {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        let (succeeded_event, failed_event) = (EventType::succeeded(action.kind), EventType::failed(action.kind));
        let failed_event = || failed_event;
        let (state, event_type) = match &attempt.next {
            _ if outcome.success && attempt.skipped() => (ActionOutcome::Skipped, None),
            _ if outcome.success => (ActionOutcome::Succeeded, Some(succeeded_event)),
            Next::Superseded { by } => (ActionOutcome::Superseded { by: by.clone() }, None),
            Next::Refused => (ActionOutcome::Failed, Some(EventType::ActionRefused)),
            Next::Retry
                if self.backends.backend(action.kind).retries() && action.attempt < self.config.runner.max_attempts =>
            {
                let wait = self
                    .config
                    .runner
                    .backoff
                    .saturating_mul(1u32 << (action.attempt - 1).min(16))
                    .min(crate::config::MAX_DURATION);
                let next = self.clock.now() + chrono::Duration::from_std(wait).unwrap_or_default();
                (ActionOutcome::Retry { next_attempt: next }, None)
            }
            _ => (ActionOutcome::Failed, Some(failed_event())),
        };
        let mut events: Vec<Event> = event_type
            .map(|t| {
                let mut e = self.event(
                    &action,
                    &target,
                    t,
                    Some(outcome.detail.clone()),
                    Some(outcome.output_tail.clone()),
                    &digests,
                );
                if let Some(info) = e.action.as_mut() {
                    let path = info.result.build().and_then(|b| b.path.clone());
                    info.result = attempt.result.event_result(action.kind, path);
                    info.signature = attempt.signature.clone();
                }
                e
            })
            .into_iter()
            .collect();
        if !attempt.replaced_signatures.is_empty() {
            let detail = attempt.replaced_signatures.join("; ");
            events.push(self.event(&action, &target, EventType::SignatureReplaced, Some(detail), None, &digests));
        }
        let deploy = attempt.deploy().cloned().unwrap_or_default();
        if let Some(detail) = deploy.overridden.clone().filter(|_| matches!(state, ActionOutcome::Failed)) {
            let mut e = self.event(&action, &target, EventType::DeployOverridden, Some(detail), None, &digests);
            if let Some(info) = e.action.as_mut() {
                info.result = ActionResult::Deploy(deploy.workloads.clone());
            }
            events.push(e);
        }
        if deploy.rolled_back && matches!(state, ActionOutcome::Failed) {
            let mut e =
                self.event(&action, &target, EventType::DeployRolledBack, Some(outcome.detail.clone()), None, &digests);
            if let Some(info) = e.action.as_mut() {
                info.result = ActionResult::Deploy(deploy.workloads.clone());
            }
            events.push(e);
        }
        let follow = match state {
            ActionOutcome::Succeeded => self.follow(&action, &target, &digests),
            _ => Vec::new(),
        };
        let hold_image = deploy.hold_image && matches!(state, ActionOutcome::Failed);
        let hold = match state {
            ActionOutcome::Failed => self.hold(&action, &target).await,
            _ => None,
        };
        let hold = hold.map(|(hold, event)| {
            events.push(event);
            hold
        });
        let finish = |deliveries| {
            self.ledger.finish_action(ActionEnd {
                key: &action.key,
                outcome: state.clone(),
                detail: outcome.detail.clone(),
                output_tail: outcome.output_tail.clone(),
                watch: &target.builder_name,
                events: events.clone(),
                deliveries,
                history,
                now: self.clock.now(),
                tag_move: tag_move(&action, &target, &attempt, self.clock.now()),
                hold,
                keep_intent: attempt.keep_intent,
                follow: follow.clone(),
                hold_image,
            })
        };
        let result = crate::alert::emit(&self.config.alerts, &events, finish).await;
        let state = match result {
            Ok(Some(ActionState::Superseded)) if matches!(state, ActionOutcome::Retry { .. }) => {
                ActionOutcome::Superseded { by: "a newer change".into() }
            }
            Ok(_) => state,
            Err(err) => {
                tracing::error!(action = %action.key, error = %err, "cannot record the action's outcome");
                return;
            }
        };
        if action.kind == ActionKind::Deploy && !matches!(state, ActionOutcome::Retry { .. }) {
            self.deploy_ended(&action, state == ActionOutcome::Succeeded, &deploy.workloads);
        }
        match state {
            ActionOutcome::Succeeded => {
                tracing::info!(action = %action.key, image = %action.image, kind = action.kind.as_str(), "action succeeded")
            }
            ActionOutcome::Retry { next_attempt } => {
                tracing::warn!(action = %action.key, image = %action.image, detail = %outcome.detail, attempt = action.attempt, next_attempt = %timestamp_millis(next_attempt), "action failed; will retry")
            }
            ActionOutcome::Failed => {
                tracing::error!(action = %action.key, image = %action.image, detail = %outcome.detail, attempts = action.attempt, "action failed for good")
            }
            ActionOutcome::Superseded { by } => {
                tracing::warn!(action = %action.key, image = %action.image, change = %by, detail = %outcome.detail, "action superseded by a newer change; it wrote nothing")
            }
            ActionOutcome::Skipped => {
                tracing::info!(action = %action.key, image = %action.image, detail = %outcome.detail, "action skipped")
            }
        }
    }

    /// The later waves of the action's change that its failure holds, and their `action.held`.
    pub(super) async fn hold(&self, action: &ClaimedAction, target: &ActionTarget) -> Option<(Hold, Event)> {
        let actions = match self.ledger.change_actions(&action.change_id).await {
            Ok(actions) => actions,
            Err(err) => {
                tracing::error!(action = %action.key, error = %err, "cannot read the change's actions; its later waves are not held");
                return None;
            }
        };
        let failed = actions.iter().find(|a| a.key == action.key)?;
        let (held, reason) = crate::rollout::held_by(&actions, failed);
        if held.is_empty() {
            return None;
        }
        let builder_image = self.config.builder(&target.builder_name).map(|b| b.image.to_string()).unwrap_or_default();
        let subject = Subject { name: target.builder_name.clone(), image: builder_image };
        let event = crate::rollout::held_event(&action.change_id, &subject, &held, &reason, self.clock.now());
        for a in &held {
            tracing::warn!(action = %a.key, image = %a.image, change = %action.change_id, reason = %reason, "held: run `builder-monitor release {}` to let it go", action.change_id);
        }
        let keys = held.into_iter().map(|a| a.key).collect();
        Some((Hold { keys, detail: format!("held: {reason}") }, event))
    }
}
