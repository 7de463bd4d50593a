//! One check of one watch, as named steps: `observe` (the ledger's entry, and the registry: one
//! HEAD when nothing moved), `decide::found` and `decide::decide` (pure: what that means, and the
//! record to commit with its events whole), `react` (the actions a move plans, between the two),
//! `outages` (the failure bookkeeping of `alert::outage`), `commit` (one ledger write; events
//! routed, and logged once recorded) and `after_commit` (metrics, run images).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, SubsecRound, Utc};

use super::decide::{self, Decided, Found, Observed};
use super::outages::Outages;
use super::{CheckOutcome, Monitor, Watch};
use crate::inspect;
use crate::ledger::{CheckRecord, DeliveryKey, LedgerError, WatchKind, WatchRecord};
use crate::metrics::ChangeLabels;
use crate::reaction::{Moved, Planned};
use crate::registry::{ManifestHead, RegistryError};
use builder_monitor_core::cnb::{self, PinnedMetadata, RunImagePin, run_watch_name};
use builder_monitor_core::event::{Event, Subject};
use builder_monitor_core::reference::ImageRef;
use builder_monitor_core::schedule::timestamp;

impl Monitor {
    /// A check whose ledger failure is logged rather than returned. `retries`: the scheduler runs
    /// it and tries a failed watch again; the next attempt it then returns (a failure's only) is
    /// the one its log line named ([`Monitor::log_failure`]).
    pub(super) async fn check_logged(
        &self,
        watch: &Watch,
        retries: bool,
    ) -> Option<(CheckOutcome, Option<DateTime<Utc>>)> {
        match self.check_for(watch, retries).await {
            Ok(checked) => Some(checked),
            Err(err) => {
                tracing::error!(watch = %watch.name, error = %err, "cannot record check");
                None
            }
        }
    }

    /// Checks a builder by name (tests, API).
    pub async fn check_builder(&self, name: &str) -> Option<Result<CheckOutcome, LedgerError>> {
        let builder = self.handle.config.builder(name)?;
        Some(self.check(&Watch::builder(builder)).await)
    }

    /// One check of one watch, committed to the ledger, in its steps. A steady watch whose tag
    /// still names its pin is done in memory (`unchanged`).
    pub async fn check(&self, watch: &Watch) -> Result<CheckOutcome, LedgerError> {
        self.check_for(watch, false).await.map(|(outcome, _)| outcome)
    }

    /// A check, and when it failed under the scheduler (`retries`), its next attempt.
    async fn check_for(
        &self,
        watch: &Watch,
        retries: bool,
    ) -> Result<(CheckOutcome, Option<DateTime<Utc>>), LedgerError> {
        let started = Instant::now();
        let head = self.registry.head_manifest(&watch.image).await;
        if let Ok(head) = &head
            && let Some(image) = self.pins.unchanged(watch, &head.digest)
            && self.registry_quiet(watch.image.registry())
        {
            return Ok((self.unchanged(watch, image, &head.digest, started), None));
        }
        // Boxed: the full check's future is ~14 KiB, which every check's task would otherwise
        // carry and copy (at spawn and at completion) for the few that need it.
        Box::pin(self.check_fully(watch, head, started, retries)).await
    }

    /// The rest of a check that `unchanged` did not settle: observe, decide, react, commit.
    async fn check_fully(
        &self,
        watch: &Watch,
        head: Result<ManifestHead, RegistryError>,
        started: Instant,
        retries: bool,
    ) -> Result<(CheckOutcome, Option<DateTime<Utc>>), LedgerError> {
        let (record, observed) = self.observe(watch, head).await?;
        let record = record.as_ref();
        let now = self.handle.clock.now();
        let found = decide::found(watch, record, observed);
        let vulns = self.vulns_for(&found, record).await;
        let mut found = decide::with_fixes(found, record, vulns.as_deref());
        // How current the data was at the match: an OpenVEX document states its age.
        if let (Found::Moved(moved), Some(v)) = (&mut found, self.vulns.get())
            && let Some(source) = moved.change.fixes_source.as_mut()
        {
            source.as_of = v.current().current_at.map(|at| at.trunc_subsecs(0));
        }
        let retry = self.log_found(watch, record, &found, now, retries);
        let subjects = self.subjects(watch);
        let planned = self.react(watch, &subjects, &found, now).await?;
        let history = self.handle.config.monitor.history;
        let Decided { mut commit, outcome, metadata } =
            decide::decide(watch, &subjects, record, found, planned, now, history);
        let outages = self.outages(watch, record, &outcome, &mut commit).await?;
        let steady = steady_pin(&commit, record);
        let image = commit.image.clone();
        let committed = self.commit(commit, record, outages).await;
        self.pins.committed(watch, &image, steady.as_deref().filter(|_| committed.is_ok()));
        committed?;
        self.after_commit(watch, record, &outcome, metadata.as_deref(), started);
        Ok((outcome, retry))
    }

    /// The vulnerability data for a move: the index once it keeps the new image's releases and
    /// the package names of both images (read first when one is new: the check waits for it).
    /// `None` without a move or without `[vulnerabilities]`.
    async fn vulns_for(
        &self,
        found: &Found,
        record: Option<&WatchRecord>,
    ) -> Option<std::sync::Arc<builder_monitor_core::vulns::Index>> {
        use builder_monitor_core::cnb::{package_names, releases_of};
        let vulns = self.vulns.get()?;
        let Found::Moved(moved) = found else { return None };
        let releases = moved.metadata.as_deref().map(releases_of).unwrap_or_default();
        let mut names = moved.metadata.as_deref().map(package_names).unwrap_or_default();
        if let Some(before) = record.and_then(WatchRecord::pinned_metadata) {
            names.extend(package_names(&before));
        }
        Some(vulns.index_for(releases.values(), &names).await)
    }

    /// An unchanged check of a steady watch, in memory: the ledger keeps its time with the next
    /// batch, as it would have kept the full check's ([`CheckRecord::only_moves_time`]).
    fn unchanged(&self, watch: &Watch, image: Arc<str>, digest: &str, started: Instant) -> CheckOutcome {
        let now = self.handle.clock.now();
        // What the full check would log of a success: the end of a registry's outage, say.
        self.log_found(watch, None, &Found::Unchanged, now, false);
        self.ledger.note_unchanged(&watch.name, image, now.trunc_subsecs(0));
        let outcome = CheckOutcome::Unchanged;
        self.record_metrics(watch, &outcome, started.elapsed(), Some(digest), None);
        tracing::debug!(watch = %watch.name, elapsed = ?started.elapsed(), outcome = ?outcome, "check done");
        outcome
    }

    /// Observe: the ledger's entry for the watch (for its configured image: a watch whose image
    /// changed starts over with a new pin, not a change) and what the registry shows now (the
    /// tag's `head`, already asked).
    async fn observe(
        &self,
        watch: &Watch,
        head: Result<ManifestHead, RegistryError>,
    ) -> Result<(Option<WatchRecord>, Result<Observed, RegistryError>), LedgerError> {
        let image = watch.image.to_string();
        let record = self.ledger.watch(&watch.name).await?.filter(|r| r.image == image);
        let mut observed = match head {
            Ok(head) => self.observe_registry(watch, record.as_ref(), head).await,
            Err(err) => Err(err),
        };
        let pin = record.as_ref().and_then(|r| r.pin.as_ref());
        if let Ok(Observed::Moved { observation, rollback, .. }) = &mut observed
            && pin.is_some()
            && !decide::platforms_unchanged(watch, pin, observation)
        {
            *rollback = self.ledger.has_pinned(&watch.name, &observation.digest).await?;
        }
        Ok((record, observed))
    }

    /// React: the actions a move's app images get (`crate::reaction`); nothing for anything else.
    async fn react(
        &self,
        watch: &Watch,
        subjects: &[Subject],
        found: &Found,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Planned, LedgerError> {
        let mv = match found {
            Found::Moved(mv) => mv,
            // A builder's pin without a change still goes to the files that mark the builder.
            Found::Pinned { observation, .. } | Found::PlatformsUnchanged { observation, .. }
                if watch.kind == WatchKind::Builder =>
            {
                let reference = watch.image.pinned(&observation.digest);
                let actions = self.reaction().pin_gitops_actions(&watch.name, &reference, &observation.digest);
                return Ok(Planned { actions, ..Default::default() });
            }
            _ => return Ok(Planned::default()),
        };
        let builders: Vec<String> = subjects.iter().map(|s| s.name.clone()).collect();
        let moved = Moved {
            watch: &watch.name,
            kind: watch.kind,
            builders: &builders,
            change_id: &mv.id,
            change: &mv.change,
            current: &mv.current,
            metadata: mv.metadata.as_deref().filter(|_| watch.kind == WatchKind::Builder),
            now,
        };
        let planned = self.reaction().plan_actions(&moved).await?;
        for d in &planned.decisions {
            tracing::debug!(watch = %watch.name, image = %d.image, action = d.action.map_or("none", |a| a.as_str()), why = %d.why, "planned");
        }
        Ok(planned)
    }

    /// Commit: one ledger write of the check, its new events routed and logged once recorded;
    /// then the registry's outage state as committed.
    async fn commit(
        &self,
        mut commit: CheckRecord,
        record: Option<&WatchRecord>,
        outages: Outages,
    ) -> Result<(), LedgerError> {
        let events: Vec<Event> = commit.events.iter().filter(|e| !outages.repeated.contains(&e.id)).cloned().collect();
        let write = |routed: Vec<DeliveryKey>| {
            // The routed deliveries first, then those `alert::outage` asked for.
            commit.deliveries.splice(0..0, routed);
            // An unchanged check is only noted (the ledger writes such times in batches).
            self.ledger.commit_over(commit, record)
        };
        crate::alert::emit(&self.handle.config.alerts, &events, write).await?;
        self.committed(outages);
        Ok(())
    }

    /// After the commit: the check's metrics and readiness, the run image a builder names now.
    fn after_commit(
        &self,
        watch: &Watch,
        record: Option<&WatchRecord>,
        outcome: &CheckOutcome,
        metadata: Option<&PinnedMetadata>,
        started: Instant,
    ) {
        let (pinned, change) = match outcome {
            CheckOutcome::Pinned { digest } | CheckOutcome::PlatformsUnchanged { digest } => (Some(digest), None),
            CheckOutcome::Changed { current, change, .. } => (Some(current), Some(change.kind)),
            CheckOutcome::Unchanged | CheckOutcome::Held { .. } => {
                (record.and_then(|r| r.pin.as_ref()).map(|p| &p.digest), None)
            }
            CheckOutcome::Failed(_) => (None, None),
        };
        self.record_metrics(watch, outcome, started.elapsed(), pinned.map(String::as_str), change);
        if watch.kind == WatchKind::Builder
            && let Some(metadata) = metadata
            && let Some(builder) = self.handle.config.builder(&watch.name)
        {
            self.handle.run_images.lock().unwrap_or_else(|e| e.into_inner()).note(builder, Some(metadata));
        }
        tracing::debug!(watch = %watch.name, elapsed = ?started.elapsed(), outcome = ?outcome, "check done");
    }

    /// The log line of what a check found (its events are logged once committed): a failure or
    /// recovery as `failure_log` decides, which for a failure under the scheduler (`retries`)
    /// is the next attempt's time, returned.
    fn log_found(
        &self,
        watch: &Watch,
        record: Option<&WatchRecord>,
        found: &Found,
        now: DateTime<Utc>,
        retries: bool,
    ) -> Option<DateTime<Utc>> {
        let retry = self.log_failure(watch, record, found, now, retries);
        match found {
            Found::Failed(_) => {}
            Found::Held { digest } => {
                let since = record.and_then(|r| r.pending.as_ref()).filter(|p| p.digest == *digest).map(|p| p.since);
                let since = timestamp(since.unwrap_or(now));
                tracing::info!(watch = %watch.name, digest = %digest, since = %since, "new digest held back until it settles");
            }
            Found::PlatformsUnchanged { observation, .. } => {
                let digest = &observation.digest;
                tracing::info!(watch = %watch.name, digest = %digest, "index moved but no watched platform did; pin advanced without a change");
            }
            Found::Moved(mv) => {
                // The recorded event's line says it at INFO, with the actions planned.
                tracing::debug!(watch = %watch.name, change = %mv.change.summary(), "moved");
            }
            Found::Unchanged | Found::Pinned { .. } => {}
        }
        retry
    }

    /// The check's metrics; it also counts for readiness and the heartbeat.
    fn record_metrics(
        &self,
        watch: &Watch,
        outcome: &CheckOutcome,
        elapsed: Duration,
        pinned: Option<&str>,
        change: Option<cnb::ChangeKind>,
    ) {
        let failed = match outcome {
            CheckOutcome::Failed(err) => Some(err.reason()),
            _ => None,
        };
        let now = self.handle.clock.now();
        let seconds = now.timestamp() as f64 + f64::from(now.timestamp_subsec_millis()) / 1000.0;
        let metrics = &self.handle.metrics;
        metrics.record_check(&watch.name, failed, seconds);
        metrics.check_duration.observe(elapsed.as_secs_f64());
        if let Some(digest) = pinned {
            metrics.set_pinned(&watch.name, digest);
        }
        if let Some(kind) = change {
            let labels = ChangeLabels { builder: watch.name.clone(), kind: kind.as_str().into() };
            metrics.changes.get_or_create(&labels).inc();
        }
        let mut unchecked = self.handle.unchecked.lock().unwrap_or_else(|e| e.into_inner());
        if unchecked.remove(&watch.name) && unchecked.is_empty() {
            self.handle.first_cycle.send_replace(true);
            // DEBUG: a start is not news at INFO (one INFO line per move; `/readyz` says ready).
            tracing::debug!(target: "builder_monitor::ready", builders = self.handle.config.builders.len(), "every builder checked once: ready");
        }
        drop(unchecked);
        self.handle.beat();
    }

    /// Registry side of `observe`: the HEAD, and what a new digest is when it is needed (not while
    /// the settle rule holds it, not the CNB metadata when no watched platform moved).
    async fn observe_registry(
        &self,
        watch: &Watch,
        record: Option<&WatchRecord>,
        head: ManifestHead,
    ) -> Result<Observed, RegistryError> {
        let pin = record.and_then(|r| r.pin.as_ref());
        if pin.is_some_and(|p| p.digest == head.digest) {
            return Ok(Observed::Unchanged);
        }
        if decide::holds(watch, record, &head.digest, self.handle.clock.now()) {
            return Ok(Observed::Head { digest: head.digest });
        }
        // By digest, not tag: what we fetch is exactly what the HEAD saw, even if the tag moves again.
        let max_platforms = self.handle.config.monitor.max_platforms;
        let observation = inspect::observe(&self.registry, &watch.image, &head.digest, max_platforms)
            .await
            .map_err(|e| not_served(watch, e))?;
        if decide::platforms_unchanged(watch, pin, &observation) {
            return Ok(Observed::Moved { observation, metadata: None, rollback: false });
        }
        let metadata = match watch.kind {
            // Kept with the pin so the next move diffs (and compares releases) against it without
            // refetching.
            WatchKind::RunImage => {
                let metadata =
                    inspect::run_image_packages(&self.registry, &watch.image, &observation, watch.platforms.as_deref())
                        .await;
                Some(metadata).filter(|m| !m.packages.is_empty() || !m.releases.is_empty() || !m.notes.is_empty())
            }
            WatchKind::Builder => {
                let mut metadata =
                    inspect::pin_metadata(&self.registry, &watch.image, &observation, watch.platforms.as_deref())
                        .await
                        .map_err(|e| not_served(watch, e))?;
                metadata.run_image = self.resolve_run_image(watch, &metadata).await;
                metadata.note_cut_lists(&watch.image.pinned(&observation.digest));
                // The run image's lists come from its own pin: cut them too if the whole is over.
                metadata.fit(cnb::MAX_PINNED_BYTES);
                Some(metadata)
            }
        };
        // `rollback` is read from the ledger by `observe`, whose errors are the ledger's.
        Ok(Observed::Moved { observation, metadata: metadata.map(Box::new), rollback: false })
    }

    /// The immutable reference of the run image a builder names, as of now: the run image watch's
    /// pin when there is one, else one HEAD.
    async fn resolve_run_image(&self, watch: &Watch, metadata: &PinnedMetadata) -> Option<RunImagePin> {
        let name = metadata.preferred()?.run_image()?.to_string();
        let mut packages = Default::default();
        let reference = match ImageRef::parse(&name) {
            Err(_) => None,
            Ok(image) => match image.digest() {
                Some(digest) => Some(image.pinned(digest)),
                None => {
                    let pinned = match self.ledger.watch(&run_watch_name(&image)).await {
                        Ok(Some(r)) if r.image == image.to_string() => {
                            // The run image watch's lists describe exactly its pin.
                            packages = r.pinned_metadata().map(|m| m.packages).unwrap_or_default();
                            r.pin.map(|p| p.reference)
                        }
                        _ => None,
                    };
                    match pinned {
                        Some(reference) => Some(reference),
                        None => match self.run_image_heads.head(&self.registry, &image).await {
                            Ok(digest) => Some(image.pinned(&digest)),
                            Err(err) => {
                                tracing::warn!(watch = %watch.name, run_image = %image, error = %err, "cannot resolve the run image; comparing by name only");
                                None
                            }
                        },
                    }
                }
            },
        };
        Some(RunImagePin { image: name, reference, packages })
    }
}

/// The pin a watch's entry holds once `commit` is written over `record`, when that entry is then
/// steady ([`WatchRecord::is_steady`]): a success that holds no digest back.
fn steady_pin(commit: &CheckRecord, record: Option<&WatchRecord>) -> Option<String> {
    if commit.outcome.is_err() || commit.pending.is_some() {
        return None;
    }
    match &commit.pin {
        Some(pin) => Some(pin.digest.clone()),
        None => record.and_then(|r| r.pin.as_ref()).map(|p| p.digest.clone()),
    }
}

/// A 404 once the HEAD found the tag: the registry names content it does not serve (a bogus
/// digest header, a manifest without its blobs). The tag is there, so this is not `tag_missing`.
fn not_served(watch: &Watch, err: RegistryError) -> RegistryError {
    match err {
        RegistryError::NotFound { reference } => RegistryError::InvalidResponse {
            registry: watch.image.registry().to_string(),
            detail: format!("the tag {} names {reference}, which the registry does not serve", watch.image),
        },
        other => other,
    }
}
