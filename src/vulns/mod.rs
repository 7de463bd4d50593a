//! The OSV mirror the daemon reads (`[vulnerabilities] osv`): loaded into the core's
//! [`Index`] (vulns::load: a directory or a `.tar.gz`, within bounds), downloaded and refreshed
//! when it is a URL (vulns::fetch), and shared with the rest of the daemon as a [`Vulns`]: a
//! `watch` of the current [`Snapshot`], swapped whole, never half-loaded.

pub mod fetch;
pub mod load;

use std::sync::Arc;
use std::time::Duration;

use builder_monitor_core::vulns::Index;
use chrono::{DateTime, Utc};

use crate::config::{Config, OsvSource};
use crate::metrics::Metrics;
pub use fetch::{FetchError, Refresher};
pub use load::{LoadError, Loaded, Skip};

/// The data in force: the index, how many records it keeps, and how current it is.
#[derive(Debug)]
pub struct Snapshot {
    pub index: Arc<Index>,
    /// Records kept (those of the watched releases).
    pub records: usize,
    /// When the data was last known current: loaded from a local mirror, downloaded, or
    /// confirmed by a `304 Not Modified`. `None`: nothing loaded yet.
    pub current_at: Option<DateTime<Utc>>,
    /// Why the last refresh failed (the data above is kept); `None` when it succeeded.
    pub refresh_failed: Option<String>,
}

impl Snapshot {
    fn empty() -> Self {
        Snapshot { index: Arc::new(Index::new(Vec::new())), records: 0, current_at: None, refresh_failed: None }
    }

    /// How old the data is, as of `now`.
    pub fn age(&self, now: DateTime<Utc>) -> Option<Duration> {
        self.current_at.map(|at| (now - at).to_std().unwrap_or_default())
    }

    /// `vulnerability data: N h old` while refreshes fail (or none has succeeded); `None` while
    /// the data is current.
    pub fn stale_note(&self, now: DateTime<Utc>) -> Option<String> {
        self.refresh_failed.as_ref()?;
        Some(match self.age(now) {
            Some(age) => format!("vulnerability data: {} h old", age.as_secs() / 3600),
            None => "vulnerability data: none loaded yet".to_string(),
        })
    }
}

/// The loaded index, shared: cheap to clone, [`Vulns::current`] is the snapshot in force.
#[derive(Debug, Clone)]
pub struct Vulns {
    rx: tokio::sync::watch::Receiver<Arc<Snapshot>>,
}

impl Vulns {
    pub fn current(&self) -> Arc<Snapshot> {
        self.rx.borrow().clone()
    }

    /// A receiver that sees each new snapshot (`changed()`), for whoever reacts to new data.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Arc<Snapshot>> {
        self.rx.clone()
    }
}

/// Where new snapshots are published (the loader and the refresher hold it).
#[derive(Clone)]
pub(crate) struct Publish {
    tx: Arc<tokio::sync::watch::Sender<Arc<Snapshot>>>,
    metrics: Arc<Metrics>,
}

impl Publish {
    /// A load's index in force; its skips counted.
    fn loaded(&self, loaded: Loaded, source: &str, at: DateTime<Utc>) {
        loaded.log_skips(source);
        for (why, (count, _)) in &loaded.skipped {
            self.metrics
                .osv_skipped
                .get_or_create(&crate::metrics::ReasonLabels { reason: why.as_str().into() })
                .inc_by(*count);
        }
        let records = loaded.index.len();
        self.metrics.osv_records.set(records as i64);
        tracing::info!(source, records, read = loaded.read, "vulnerability data loaded");
        let snapshot = Snapshot { index: Arc::new(loaded.index), records, current_at: Some(at), refresh_failed: None };
        self.tx.send_replace(Arc::new(snapshot));
    }

    /// The data in force stays; only how current it is changes.
    fn touched(&self, at: Option<DateTime<Utc>>, failed: Option<String>) {
        self.tx.send_modify(|s| {
            let mut next = Snapshot {
                index: s.index.clone(),
                records: s.records,
                current_at: s.current_at,
                refresh_failed: failed,
            };
            if at.is_some() {
                next.current_at = at;
            }
            *s = Arc::new(next);
        });
    }
}

/// Why the vulnerability data could not be loaded at start.
#[derive(Debug, thiserror::Error)]
pub enum VulnsError {
    #[error("[vulnerabilities] osv: {0}")]
    Load(#[from] LoadError),
    #[error("[vulnerabilities] osv: {0}")]
    Fetch(#[from] FetchError),
    #[error("[vulnerabilities] osv: the load stopped: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// The index every load fills: every Ubuntu release but Pro's. (The watched run images' releases
/// are known only once their pins are read; keeping them all costs little, see
/// docs/performance.md.)
fn empty_index() -> Index {
    Index::new(Vec::new())
}

/// Reads a local mirror (blocking, off the runtime's threads).
pub async fn load_local(source: &OsvSource) -> Result<Loaded, VulnsError> {
    let source = source.clone();
    let loaded = tokio::task::spawn_blocking(move || match source {
        OsvSource::Dir(path) => load::directory(&path, empty_index()),
        OsvSource::Archive(path) => load::archive(&path, empty_index()),
        OsvSource::Url(_) => Ok(Loaded { index: empty_index(), read: 0, skipped: Default::default() }),
    })
    .await??;
    Ok(loaded)
}

/// The daemon's vulnerability data for `config` (`None` without `[vulnerabilities]`): a local
/// mirror read now (an unreadable one is an error), a URL's kept download read now, and for a
/// URL the [`Refresher`] to run on a worker loop.
pub async fn start(config: &Config, metrics: Arc<Metrics>) -> Result<Option<(Vulns, Option<Refresher>)>, VulnsError> {
    let Some(settings) = &config.vulnerabilities else { return Ok(None) };
    let (tx, rx) = tokio::sync::watch::channel(Arc::new(Snapshot::empty()));
    let publish = Publish { tx: Arc::new(tx), metrics };
    let vulns = Vulns { rx };
    match &settings.osv {
        OsvSource::Url(url) => {
            let refresher = Refresher::new(url, settings.refresh, config.work_dir().join("osv"), publish)?;
            refresher.load_kept().await;
            Ok(Some((vulns, Some(refresher))))
        }
        local => {
            let loaded = load_local(local).await?;
            publish.loaded(loaded, &describe(local), Utc::now());
            Ok(Some((vulns, None)))
        }
    }
}

fn describe(source: &OsvSource) -> String {
    match source {
        OsvSource::Dir(p) | OsvSource::Archive(p) => p.display().to_string(),
        OsvSource::Url(u) => u.clone(),
    }
}
