//! Carrying out one claimed action: its attempt by the backend of its kind, then its end recorded
//! in one write (state, events, tag move, the holds a failure puts on the change and the image, the
//! deploy that follows a success).

use super::*;

impl Context {
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
                    path: Some(self.rebase_path.as_str().into()),
                    ..Default::default()
                }),
                kind => ActionResult::empty(kind),
            },
            signature: None,
        });
        e
    }
}

impl Runner {
    /// Writes to the ledger what registries answered during the attempt (the referrers API, asked
    /// once per registry by this process), so `status` and the page show it. A failed write is
    /// tried again after the next attempt.
    async fn record_registry_answers(&self) {
        self.ctx.ledger.record_referrers_answers(&self.ctx.registry, self.ctx.clock.now()).await;
    }

    /// Carries out one claimed action, holding its slot (`_permit`) until its end is recorded:
    /// its start told, one attempt, its outcome judged, its events made, its end recorded in one
    /// write, then logged.
    pub(super) async fn execute(self: Arc<Self>, action: ClaimedAction, _permit: OwnedSemaphorePermit) {
        let target: ActionTarget = match action.target.clone() {
            Ok(t) => t,
            Err(err) => return self.unreadable(&action, &err.to_string()).await,
        };
        self.started(&action, &target).await;
        let attempt = self.scrubbed_attempt(&action, &target).await;
        let (state, event_type) = self.judge(&action, &attempt);
        let events = self.end_events(&action, &target, &attempt, &state, event_type);
        let Some(state) = self.finish(&action, &target, &attempt, state, events).await else { return };
        if action.kind == ActionKind::Deploy && !matches!(state, ActionOutcome::Retry { .. }) {
            let workloads = attempt.deploy().map(|d| d.workloads.clone()).unwrap_or_default();
            self.ctx.deploy_ended(&action, state == ActionOutcome::Succeeded, &workloads);
        }
        log_end(&action, &state, &attempt.outcome.detail);
    }

    /// An action whose target cannot be read: failed for good, nothing run.
    async fn unreadable(&self, action: &ClaimedAction, err: &str) {
        tracing::error!(action = %action.key, error = %err, "unreadable action target");
        let end = ActionEnd {
            key: &action.key,
            outcome: ActionOutcome::Failed,
            detail: format!("unreadable target: {err}"),
            output_tail: String::new(),
            watch: "",
            events: vec![],
            deliveries: vec![],
            history: 1,
            now: self.ctx.clock.now(),
            tag_move: None,
            hold: None,
            keep_intent: false,
            follow: Vec::new(),
            hold_image: false,
        };
        let _ = self.ctx.ledger.finish_action(end).await;
    }

    /// A rebuild's `build.started`, recorded before it runs.
    async fn started(&self, action: &ClaimedAction, target: &ActionTarget) {
        if action.kind != ActionKind::Rebuild {
            return;
        }
        let history = self.ctx.config.monitor.history;
        let started = vec![self.ctx.event(action, target, EventType::BuildStarted, None, None, &Digests::default())];
        let record = |deliveries| {
            self.ctx.ledger.record_events(
                &target.builder_name,
                started.clone(),
                deliveries,
                history,
                self.ctx.clock.now(),
            )
        };
        if let Err(err) = crate::alert::emit(&self.ctx.config.alerts, &started, record).await {
            tracing::error!(action = %action.key, error = %err, "cannot record build.started");
        }
    }

    /// One attempt, the registries' answers recorded after it and every secret scrubbed from
    /// what it says; a failure counted.
    async fn scrubbed_attempt(&self, action: &ClaimedAction, target: &ActionTarget) -> Attempt {
        tracing::info!(action = %action.key, image = %action.image, kind = action.kind.as_str(), attempt = action.attempt, "running action");
        if action.kind == ActionKind::Deploy {
            self.ctx.unguard(&action.image);
        }
        let mut attempt = self.attempt(action, target).await;
        self.record_registry_answers().await;
        attempt.outcome.detail = self.ctx.secrets.scrub(&attempt.outcome.detail);
        attempt.outcome.output_tail = self.ctx.secrets.scrub(&attempt.outcome.output_tail);
        if !attempt.outcome.success {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        attempt
    }

    /// What the attempt makes of the action (its next attempt's time, when it retries), and the
    /// event that tells it, if any.
    fn judge(&self, action: &ClaimedAction, attempt: &Attempt) -> (ActionOutcome, Option<EventType>) {
        let runner = &self.ctx.config.runner;
        match &attempt.next {
            _ if attempt.outcome.success && attempt.skipped() => (ActionOutcome::Skipped, None),
            _ if attempt.outcome.success => (ActionOutcome::Succeeded, Some(EventType::succeeded(action.kind))),
            Next::Superseded { by } => (ActionOutcome::Superseded { by: by.clone() }, None),
            Next::Refused => (ActionOutcome::Failed, Some(EventType::ActionRefused)),
            Next::Retry if self.backends.backend(action.kind).retries() && action.attempt < runner.max_attempts => {
                let wait = runner
                    .backoff
                    .saturating_mul(1u32 << (action.attempt - 1).min(16))
                    .min(crate::config::MAX_DURATION);
                let next = self.ctx.clock.now() + chrono::Duration::from_std(wait).unwrap_or_default();
                (ActionOutcome::Retry { next_attempt: next }, None)
            }
            _ => (ActionOutcome::Failed, Some(EventType::failed(action.kind))),
        }
    }

    /// The events of the action's end: the one `event_type` names, the signatures replaced, and a
    /// failed deploy's override or roll-back.
    fn end_events(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        attempt: &Attempt,
        state: &ActionOutcome,
        event_type: Option<EventType>,
    ) -> Vec<Event> {
        let (outcome, digests) = (&attempt.outcome, &attempt.digests);
        let mut events: Vec<Event> = event_type
            .map(|t| {
                let (detail, tail) = (Some(outcome.detail.clone()), Some(outcome.output_tail.clone()));
                let mut e = self.ctx.event(action, target, t, detail, tail, digests);
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
            events.push(self.ctx.event(action, target, EventType::SignatureReplaced, Some(detail), None, digests));
        }
        let deploy = attempt.deploy().cloned().unwrap_or_default();
        let failed = matches!(state, ActionOutcome::Failed);
        let mut deploy_event = |event_type, detail| {
            let mut e = self.ctx.event(action, target, event_type, Some(detail), None, digests);
            if let Some(info) = e.action.as_mut() {
                info.result = ActionResult::Deploy(deploy.workloads.clone());
            }
            events.push(e);
        };
        if let Some(detail) = deploy.overridden.clone().filter(|_| failed) {
            deploy_event(EventType::DeployOverridden, detail);
        }
        if deploy.rolled_back && failed {
            deploy_event(EventType::DeployRolledBack, outcome.detail.clone());
        }
        events
    }

    /// Records the action's end in one write (state, `events`, tag move, the holds a failure puts
    /// on the change and the image, the deploy that follows a success); the state recorded, or
    /// `None` when it could not be.
    async fn finish(
        &self,
        action: &ClaimedAction,
        target: &ActionTarget,
        attempt: &Attempt,
        state: ActionOutcome,
        mut events: Vec<Event>,
    ) -> Option<ActionOutcome> {
        let ctx = &self.ctx;
        let follow = match state {
            ActionOutcome::Succeeded => ctx.follow(action, target, &attempt.digests),
            _ => Vec::new(),
        };
        let failed = matches!(state, ActionOutcome::Failed);
        let hold_image = failed && attempt.deploy().is_some_and(|d| d.hold_image);
        let hold = if failed { self.hold(action, target).await } else { None };
        let hold = hold.map(|(hold, event)| {
            events.push(event);
            hold
        });
        let finish = |deliveries| {
            ctx.ledger.finish_action(ActionEnd {
                key: &action.key,
                outcome: state.clone(),
                detail: attempt.outcome.detail.clone(),
                output_tail: attempt.outcome.output_tail.clone(),
                watch: &target.builder_name,
                events: events.clone(),
                deliveries,
                history: ctx.config.monitor.history,
                now: ctx.clock.now(),
                tag_move: tag_move(action, target, attempt, ctx.clock.now()),
                hold,
                keep_intent: attempt.keep_intent,
                follow: follow.clone(),
                hold_image,
            })
        };
        match crate::alert::emit(&ctx.config.alerts, &events, finish).await {
            Ok(Some(ActionState::Superseded)) if matches!(state, ActionOutcome::Retry { .. }) => {
                Some(ActionOutcome::Superseded { by: "a newer change".into() })
            }
            Ok(_) => Some(state),
            Err(err) => {
                tracing::error!(action = %action.key, error = %err, "cannot record the action's outcome");
                None
            }
        }
    }

    /// The later waves of the action's change that its failure holds, and their `action.held`.
    pub(super) async fn hold(&self, action: &ClaimedAction, target: &ActionTarget) -> Option<(Hold, Event)> {
        let actions = match self.ctx.ledger.change_actions(&action.change_id).await {
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
        let builder_image =
            self.ctx.config.builder(&target.builder_name).map(|b| b.image.to_string()).unwrap_or_default();
        let subject = Subject { name: target.builder_name.clone(), image: builder_image };
        let event = crate::rollout::held_event(&action.change_id, &subject, &held, &reason, self.ctx.clock.now());
        for a in &held {
            tracing::warn!(action = %a.key, image = %a.image, change = %action.change_id, reason = %reason, "held: run `builder-monitor release {}` to let it go", action.change_id);
        }
        let keys = held.into_iter().map(|a| a.key).collect();
        Some((Hold { keys, detail: format!("held: {reason}") }, event))
    }
}

/// The log line of an action's end, as recorded.
fn log_end(action: &ClaimedAction, state: &ActionOutcome, detail: &str) {
    let (key, image) = (&action.key, &action.image);
    match state {
        ActionOutcome::Succeeded => {
            tracing::info!(action = %key, image = %image, kind = action.kind.as_str(), "action succeeded")
        }
        ActionOutcome::Retry { next_attempt } => {
            tracing::warn!(action = %key, image = %image, detail = %detail, attempt = action.attempt, next_attempt = %timestamp_millis(*next_attempt), "action failed; will retry")
        }
        ActionOutcome::Failed => {
            tracing::error!(action = %key, image = %image, detail = %detail, attempts = action.attempt, "action failed for good")
        }
        ActionOutcome::Superseded { by } => {
            tracing::warn!(action = %key, image = %image, change = %by, detail = %detail, "action superseded by a newer change; it wrote nothing")
        }
        ActionOutcome::Skipped => {
            tracing::info!(action = %key, image = %image, detail = %detail, "action skipped")
        }
    }
}
