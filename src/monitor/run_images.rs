//! Run images: the set of run image watches in force and the builders naming each; which watch a
//! builder uses is decided by `config::run_image_watch` (shared with `status` and the publisher).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OnceCell, mpsc};
use tokio_util::sync::CancellationToken;

use super::Watch;
use crate::config::{BuilderSettings, Config, run_image_watch_named};
use crate::registry::{Registry, RegistryError};
use builder_monitor_core::cnb::{PinnedMetadata, run_watch_name};
use builder_monitor_core::event::Subject;
use builder_monitor_core::reference::ImageRef;

/// How long one HEAD of a run image tag answers for every builder pinned meanwhile that names it
/// (before the run image's own watch has pinned it, which then answers instead).
pub const RUN_IMAGE_HEAD_SHARED: Duration = Duration::from_secs(10);

type SharedHead = Arc<OnceCell<Result<String, Arc<RegistryError>>>>;

/// The digests run image tags resolved to, one HEAD per tag shared by every builder pinned
/// within `RUN_IMAGE_HEAD_SHARED` (those pinned while it is in flight wait for it): pinning a
/// thousand builders of one run image costs one HEAD of it, not a thousand.
#[derive(Default)]
pub(super) struct RunImageHeads {
    heads: Mutex<HashMap<String, (Instant, SharedHead)>>,
}

impl RunImageHeads {
    /// The digest `image` (a tag) names, from a HEAD made at most `RUN_IMAGE_HEAD_SHARED` ago.
    pub(super) async fn head(&self, registry: &Registry, image: &ImageRef) -> Result<String, Arc<RegistryError>> {
        let key = image.to_string();
        let cell = {
            let mut heads = self.heads.lock().unwrap_or_else(|e| e.into_inner());
            let now = Instant::now();
            heads.retain(|_, (at, _)| now.duration_since(*at) < RUN_IMAGE_HEAD_SHARED);
            heads.entry(key.clone()).or_insert_with(|| (now, SharedHead::default())).1.clone()
        };
        let answer = cell
            .get_or_init(|| async { registry.head_manifest(image).await.map(|h| h.digest).map_err(Arc::new) })
            .await
            .clone();
        if answer.is_err() {
            // Those waiting share the failure; the next builder asks again.
            let mut heads = self.heads.lock().unwrap_or_else(|e| e.into_inner());
            if heads.get(&key).is_some_and(|(_, c)| Arc::ptr_eq(c, &cell)) {
                heads.remove(&key);
            }
        }
        answer
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
        self.note_named(builder, metadata.and_then(|m| m.preferred()?.run_image()));
    }

    /// [`RunImages::note`] given the run image name the pinned metadata holds.
    pub(super) fn note_named(&mut self, builder: &BuilderSettings, run_image: Option<&str>) {
        let image = run_image_watch_named(builder, run_image).unwrap_or_else(|(name, err)| {
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
