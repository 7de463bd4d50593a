//! The scheduler loop: one task times every watch (`Timetable`), runs up to `CHECK_CONCURRENCY`
//! checks at once within each registry's share (`Slots`), takes wakes and new run image watches,
//! and beats the liveness heartbeat.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{CHECK_CONCURRENCY, CheckOutcome, HEARTBEAT, Monitor, SHUTDOWN_GRACE, Watch};
use crate::schedule::{Slots, Timetable};

/// A watch in the daemon's timetable: a builder by its place in the config, its `Watch` made for
/// each check (so a fleet's settings are not held a second time: ~350 bytes a builder), or a run
/// image watch.
#[derive(Clone)]
enum Scheduled {
    Builder(usize),
    RunImage {
        watch: Arc<Watch>,
        /// Cancelled when no builder names the run image any more.
        stop: CancellationToken,
    },
}

impl Monitor {
    fn watch_of(&self, scheduled: &Scheduled) -> Arc<Watch> {
        match scheduled {
            Scheduled::Builder(index) => Arc::new(Watch::builder(&self.handle.config.builders[*index])),
            Scheduled::RunImage { watch, .. } => watch.clone(),
        }
    }

    fn registry_of<'s>(&'s self, scheduled: &'s Scheduled) -> &'s str {
        match scheduled {
            Scheduled::Builder(index) => self.handle.config.builders[*index].image.registry(),
            Scheduled::RunImage { watch, .. } => watch.image.registry(),
        }
    }
}

impl Monitor {
    /// Checks every builder once, then every run image they name. True when every check succeeded.
    pub async fn run_once(self: &Arc<Self>) -> bool {
        self.load_pins().await;
        let builders: Vec<Watch> = self.handle.config.builders.iter().map(Watch::builder).collect();
        let mut all_ok = self.check_all(builders).await;
        let run_images: Vec<Watch> = self.run_image_watches().into_iter().map(|(w, _)| w).collect();
        all_ok &= self.check_all(run_images).await;
        self.flush_touches().await;
        all_ok
    }

    /// Writes the times of unchanged checks kept in memory; a failure is logged (they stay kept,
    /// for the next flush).
    async fn flush_touches(&self) {
        match self.ledger.flush_touches().await {
            Ok(n) => tracing::debug!(checks = n, "wrote the times of unchanged checks"),
            Err(err) => {
                tracing::error!(error = %err, "cannot write the times of unchanged checks; kept for the next try")
            }
        }
    }

    async fn check_all(self: &Arc<Self>, watches: Vec<Watch>) -> bool {
        let mut slots = Slots::new(CHECK_CONCURRENCY);
        for watch in &watches {
            slots.register(watch.image.registry());
        }
        let mut pending = watches.into_iter();
        let mut tasks = JoinSet::new();
        let mut registries: HashMap<tokio::task::Id, String> = HashMap::new();
        let mut all_ok = true;
        loop {
            while slots.has_room() {
                let watch = match slots.next_waiting() {
                    Some(watch) => watch,
                    None => match pending.next() {
                        Some(watch) => {
                            let registry = watch.image.registry().to_string();
                            match slots.admit(&registry, watch) {
                                Some(watch) => watch,
                                None => continue,
                            }
                        }
                        None => break,
                    },
                };
                let registry = watch.image.registry().to_string();
                let monitor = self.clone();
                let task = tasks.spawn(async move {
                    matches!(monitor.check_logged(&watch, false).await, Some((o, _)) if !matches!(o, CheckOutcome::Failed(_)))
                });
                registries.insert(task.id(), registry);
            }
            let Some(done) = tasks.join_next_with_id().await else { break };
            let (task, ok) = match done {
                Ok((task, ok)) => (task, ok),
                Err(err) => (err.id(), false),
            };
            all_ok &= ok;
            if let Some(registry) = registries.remove(&task) {
                slots.finished(&registry);
            }
        }
        all_ok
    }

    /// Runs every watch on its schedule until `shutdown`, then gives running checks a grace period.
    ///
    /// One task times all watches (`Timetable`) and runs up to `CHECK_CONCURRENCY` checks at once,
    /// earliest due first, each registry within its share (`Slots`): a due check of a registry
    /// that used its share waits for that registry, not for everyone.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        self.load_pins().await;
        let Some(mut wakes) = self.wake_receiver.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            tracing::error!("the monitor is running already");
            return;
        };
        let (spawner, mut spawns) = mpsc::unbounded_channel();
        {
            let mut run_images = self.handle.run_images.lock().unwrap_or_else(|e| e.into_inner());
            for name in run_images.entries.keys() {
                let _ = spawner.send(name.clone());
            }
            run_images.spawner = Some(spawner);
        }
        let mut checks = Checks::new(&self);
        let mut running: JoinSet<CheckEnd> = JoinSet::new();
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        // Beside the loop, so a slow write (one per watch on Kubernetes) never delays a check.
        let flushing = CancellationToken::new();
        let flusher = tokio::spawn({
            let (monitor, stop) = (self.clone(), flushing.clone());
            async move {
                let mut every = tokio::time::interval(monitor.ledger.touch_flush());
                every.tick().await;
                while stop.run_until_cancelled(every.tick()).await.is_some() {
                    monitor.flush_touches().await;
                }
            }
        });
        loop {
            checks.start_due(&self, &mut running);
            let next = if checks.slots.has_room() { checks.table.next_due() } else { None };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some(done) = running.join_next_with_id(), if !running.is_empty() => checks.ended(&self, done),
                Some(name) = wakes.recv() => {
                    match checks.table.id(&name) {
                        Some(id) => checks.table.wake(id, tokio::time::Instant::now()),
                        None => self.handle.hooks.forget(&name),
                    }
                }
                Some(name) = spawns.recv() => checks.add_run_image(&self, name),
                _ = heartbeat.tick() => self.handle.beat(),
                _ = async { match next { Some(due) => tokio::time::sleep_until(due).await, None => std::future::pending().await } } => {}
            }
        }
        self.handle.run_images.lock().unwrap_or_else(|e| e.into_inner()).spawner = None;
        *self.wake_receiver.lock().unwrap_or_else(|e| e.into_inner()) = Some(wakes);
        let drained =
            tokio::time::timeout(SHUTDOWN_GRACE, async { while running.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "checks still running after the grace period; aborting them (a check writes its change last, so the next one finds the move again)");
            running.abort_all();
        }
        flushing.cancel();
        let _ = flusher.await;
        self.flush_touches().await;
    }
}

/// A check's task answers whether it failed, and then when it tries again (a failed check comes
/// back sooner, when its log line said).
type CheckEnd = Option<Option<DateTime<Utc>>>;

/// The scheduler's state: every watch's next time, each registry's share of the checks, and which
/// watch each running check is for.
struct Checks {
    table: Timetable<Scheduled>,
    slots: Slots<usize>,
    /// The watch each running check was made for, so its end needs no second copy.
    running_ids: HashMap<tokio::task::Id, (usize, Arc<Watch>)>,
}

impl Checks {
    /// Every builder watch, due after its jitter.
    fn new(monitor: &Monitor) -> Self {
        let mut table: Timetable<Scheduled> = Timetable::default();
        let mut slots: Slots<usize> = Slots::new(CHECK_CONCURRENCY);
        let now = tokio::time::Instant::now();
        for (index, builder) in monitor.handle.config.builders.iter().enumerate() {
            slots.register(builder.image.registry());
            table.add(&builder.name, Scheduled::Builder(index), builder.jitter, now);
        }
        Checks { table, slots, running_ids: HashMap::new() }
    }

    /// Starts the due checks while there is room: those waiting for their registry's share
    /// first, then the earliest due.
    fn start_due(&mut self, monitor: &Arc<Monitor>, running: &mut JoinSet<CheckEnd>) {
        let now = tokio::time::Instant::now();
        while self.slots.has_room() {
            let id = match self.slots.next_waiting() {
                Some(id) => id,
                None => match self.table.pop_due(now) {
                    Some(id) => match self.slots.admit(monitor.registry_of(self.table.item(id)), id) {
                        Some(id) => id,
                        None => continue,
                    },
                    None => break,
                },
            };
            let watch = monitor.watch_of(self.table.item(id));
            if matches!(self.table.item(id), Scheduled::RunImage { stop, .. } if stop.is_cancelled()) {
                self.slots.finished(watch.image.registry());
                self.table.remove(id);
                monitor.handle.hooks.forget(&watch.name);
                continue;
            }
            let hooked = monitor.handle.hooks.starts(&watch.name);
            let monitor = monitor.clone();
            let checked = watch.clone();
            let task = running.spawn(async move {
                let checked = monitor.check_logged(&watch, true).await;
                let (outcome, retry) = checked.map_or((None, None), |(o, r)| (Some(o), r));
                if hooked {
                    monitor.handle.hooks.done(&watch.name, outcome.as_ref(), &monitor.handle.wakes);
                }
                matches!(outcome, Some(CheckOutcome::Failed(_))).then_some(retry)
            });
            self.running_ids.insert(task.id(), (id, checked));
        }
    }

    /// A check ended: its registry's share freed, its next time set (sooner after a failure).
    fn ended(&mut self, monitor: &Monitor, done: Result<(tokio::task::Id, CheckEnd), tokio::task::JoinError>) {
        let (task, failed) = match &done {
            Ok((task, failed)) => (*task, *failed),
            Err(err) => (err.id(), None),
        };
        let Some((id, watch)) = self.running_ids.remove(&task) else { return };
        self.slots.finished(watch.image.registry());
        if let Err(err) = done {
            monitor.handle.hooks.forget(&watch.name);
            tracing::error!(watch = %watch.name, error = %err, "check failed unexpectedly; it runs again on schedule");
        }
        let now = tokio::time::Instant::now();
        let wall = monitor.handle.clock.now();
        let next = if let Some(retry) = failed {
            // Until the time the check logged, counted on this clock.
            let delay = retry.map(|at| (at - wall).to_std().unwrap_or_default());
            self.table.failed(id, delay, now)
        } else {
            self.table.finished(id, &watch.schedule, watch.jitter, now, wall)
        };
        if !next {
            tracing::warn!(watch = %watch.name, schedule = %watch.schedule, "schedule has no future firing; checked only when woken");
        }
    }

    /// A run image watch named (or named again): scheduled after its jitter, with a stop of its own.
    fn add_run_image(&mut self, monitor: &Monitor, name: String) {
        let stop = CancellationToken::new();
        let watch = {
            let mut run_images = monitor.handle.run_images.lock().unwrap_or_else(|e| e.into_inner());
            run_images.entries.get_mut(&name).map(|entry| {
                entry.stop = Some(stop.clone());
                entry.watch.clone()
            })
        };
        let Some(watch) = watch else { return };
        self.slots.register(watch.image.registry());
        // A run image dropped and named again: the old entry's stop is cancelled.
        if let Some(old) = self.table.id(&name) {
            self.table.remove(old);
        }
        let jitter = watch.jitter;
        let scheduled = Scheduled::RunImage { watch: Arc::new(watch), stop };
        self.table.add(&name, scheduled, jitter, tokio::time::Instant::now());
    }
}
