//! Run images: the one place that decides which run image watch a builder uses (for the monitor,
//! `status`, the publisher and the reaction), and the set of run image watches in force.

use std::collections::{BTreeMap, BTreeSet};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Watch;
use crate::config::{BuilderSettings, Config};
use builder_monitor_core::cnb::PinnedMetadata;
use builder_monitor_core::event::Subject;
use builder_monitor_core::reference::{ImageRef, ReferenceError};

/// The ledger name of a run image watch.
pub fn run_watch_name(image: &ImageRef) -> String {
    format!("run:{image}")
}

/// The run image a builder watches given the metadata of its pin: the run image its preferred
/// platform names, by tag. None when the builder does not watch its run image, the metadata names
/// none, or names it by digest (nothing to watch); an error when the name is not a reference.
pub fn run_image_watch(
    builder: &BuilderSettings,
    metadata: Option<&PinnedMetadata>,
) -> Result<Option<ImageRef>, (String, ReferenceError)> {
    let Some(name) = metadata.filter(|_| builder.watch_run_image).and_then(|m| m.preferred()?.run_image()) else {
        return Ok(None);
    };
    match ImageRef::parse(name) {
        Ok(image) if image.digest().is_none() => Ok(Some(image)),
        Ok(_) => Ok(None),
        Err(err) => Err((name.to_string(), err)),
    }
}

/// A run image watch and the builders that name it.
pub(super) struct RunImageEntry {
    pub(super) watch: Watch,
    pub(super) users: BTreeSet<String>,
    /// Set once it is scheduled; cancelled when no builder names it any more.
    pub(super) stop: Option<CancellationToken>,
}

/// The run image watches in force, and who names each.
#[derive(Default)]
pub(super) struct RunImages {
    pub(super) entries: BTreeMap<String, RunImageEntry>,
    /// While the daemon runs: where to send the names of newly needed run image watches.
    pub(super) spawner: Option<mpsc::UnboundedSender<String>>,
}

impl RunImages {
    /// Records which run image a builder names now (moving it off any other), starting a watch
    /// for a run image no builder named before.
    pub(super) fn note(&mut self, builder: &BuilderSettings, metadata: Option<&PinnedMetadata>) {
        let image = run_image_watch(builder, metadata).unwrap_or_else(|(name, err)| {
            tracing::warn!(builder = %builder.name, run_image = name, error = %err, "run image name is not a reference; not watched");
            None
        });
        let target = image.as_ref().map(run_watch_name);
        self.entries.retain(|name, entry| {
            if Some(name) != target.as_ref() && entry.users.remove(&builder.name) && entry.users.is_empty() {
                if let Some(stop) = &entry.stop {
                    stop.cancel();
                }
                tracing::info!(run_image = %entry.watch.image, "no builder names this run image any more; not watched");
                return false;
            }
            true
        });
        let (Some(image), Some(name)) = (image, target) else { return };
        let spawner = self.spawner.clone();
        let entry = self.entries.entry(name.clone()).or_insert_with(|| {
            tracing::info!(run_image = %image, builder = %builder.name, "watching run image");
            if let Some(spawner) = &spawner {
                let _ = spawner.send(name.clone());
            }
            RunImageEntry { watch: Watch::run_image(image, builder), users: BTreeSet::new(), stop: None }
        });
        entry.users.insert(builder.name.clone());
    }

    /// The builders naming the run image watch `name`.
    pub(super) fn users(&self, name: &str) -> Vec<String> {
        self.entries.get(name).map(|e| e.users.iter().cloned().collect()).unwrap_or_default()
    }

    /// Who an event about a watch concerns: the builder itself, or the builders naming a run image.
    pub(super) fn subjects(&self, config: &Config, watch: &Watch) -> Vec<Subject> {
        match watch.kind {
            crate::ledger::WatchKind::Builder => {
                vec![Subject { name: watch.name.clone(), image: watch.image.to_string() }]
            }
            crate::ledger::WatchKind::RunImage => self
                .users(&watch.name)
                .iter()
                .filter_map(|u| config.builder(u))
                .map(|b| Subject { name: b.name.clone(), image: b.image.to_string() })
                .collect(),
        }
    }
}
