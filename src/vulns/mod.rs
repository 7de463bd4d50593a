//! The OSV mirror the daemon reads (`[vulnerabilities] osv`): loaded into the core's
//! [`Index`] (vulns::load: a directory or a `.tar.gz`, within bounds), downloaded and refreshed
//! when it is a URL (vulns::fetch), and shared with the rest of the daemon as a [`Vulns`]: a
//! `watch` of the current [`Snapshot`], swapped whole, never half-loaded.

pub mod fetch;
pub mod load;
mod zip_end;
mod zip_walk;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use builder_monitor_core::vulns::{DataSource, Index, Release};
use chrono::{DateTime, Utc};

use crate::config::{Config, OsvSource};
use crate::metrics::Metrics;
pub use fetch::{Downloading, FetchError, Refresher, downloading};
pub use load::{LoadError, Loaded, Skip};

/// The data in force: the index, how many records it keeps, and how current it is.
#[derive(Debug)]
pub struct Snapshot {
    pub index: Arc<Index>,
    /// Records kept (those of the releases the index keeps).
    pub records: usize,
    /// When the data was last known current: loaded from a local mirror, downloaded, or
    /// confirmed by a `304 Not Modified`. `None`: nothing loaded yet.
    pub current_at: Option<DateTime<Utc>>,
    /// Why the last refresh failed (the data above is kept); `None` when it succeeded.
    pub refresh_failed: Option<String>,
}

impl Snapshot {
    fn empty() -> Self {
        Snapshot { index: Arc::new(Index::only([])), records: 0, current_at: None, refresh_failed: None }
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

    /// The releases the index keeps, as their versions' ecosystems (`Ubuntu:22.04:LTS`).
    pub fn releases(&self) -> Vec<String> {
        self.index.releases().map(|r| r.iter().map(|r| r.0.clone()).collect()).unwrap_or_default()
    }
}

/// The loaded index, shared: cheap to clone, [`Vulns::current`] is the snapshot in force.
///
/// Only the releases some image needs are kept (a mirror holds every release's records, a fleet
/// is on one or two): those `[vulnerabilities] releases` names and the pinned images' at start,
/// and any other the first time a move of an image of it is matched ([`Vulns::index_for`]). Of
/// their records, only the binaries the images carry are held (a big mirror's records would cost
/// hundreds of MiB): the pinned images' names at start, and the names of both images of each move
/// matched, the mirror read again when a move brings a name not kept yet.
#[derive(Clone)]
pub struct Vulns {
    rx: tokio::sync::watch::Receiver<Arc<Snapshot>>,
    publish: Publish,
}

impl std::fmt::Debug for Vulns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vulns").field("current", &self.current()).finish_non_exhaustive()
    }
}

impl Vulns {
    pub fn current(&self) -> Arc<Snapshot> {
        self.rx.borrow().clone()
    }

    /// The download of a URL mirror under way, if any (since when, bytes so far, whether it is the
    /// first): a stalled one shows on `/readyz` and in `status`.
    pub fn downloading(&self) -> Option<Downloading> {
        match &*self.publish.source {
            Source::Download(path) => downloading(path.parent()?),
            Source::Local(_) => None,
        }
    }

    /// A receiver that sees each new snapshot (`changed()`), for whoever reacts to new data.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Arc<Snapshot>> {
        self.rx.clone()
    }

    /// The index in force once it keeps every one of `releases` and every binary of `names` (the
    /// package names of both images of a move): read again with them added when it does not (one
    /// load at a time; a move waits for it, once per new release or new names). A source that
    /// does not read now leaves the index as it was, which then says of a move of such a release
    /// that its data is not loaded (of new names: what it knew, without them); the failure is
    /// logged.
    pub async fn index_for(
        &self,
        releases: impl IntoIterator<Item = &Release>,
        names: &BTreeSet<String>,
    ) -> Arc<Index> {
        let wanted: Vec<Release> = releases.into_iter().cloned().collect();
        let covered =
            |index: &Index| wanted.iter().all(|r| index.keeps(r)) && index.covers(names.iter().map(String::as_str));
        let index = self.current().index.clone();
        if covered(&index) {
            return index;
        }
        let _one = self.publish.loading.lock().await;
        let index = self.current().index.clone();
        if covered(&index) {
            return index;
        }
        let added = self.publish.want(wanted.clone());
        let new_names = self.publish.want_names(names);
        if !added.is_empty() {
            tracing::info!(releases = ?added, "loading the vulnerability data of a newly watched release");
        } else if new_names > 0 {
            tracing::info!(
                names = new_names,
                "reading the vulnerability data again for package names no pinned image had"
            );
        } else {
            // Wanted before, still not read (no download yet, or its read failed): tried again.
            tracing::debug!(releases = ?wanted, "reading the vulnerability data of a watched release again");
        }
        if let Err(error) = self.publish.reload().await {
            tracing::warn!(error = %error, releases = ?added, "cannot load the vulnerability data of a newly watched release");
        }
        self.current().index.clone()
    }
}

/// Where new snapshots are published (the loader and the refresher hold it), the releases wanted,
/// and the one lock every load takes, so a refresh and a new release's load never race.
#[derive(Clone)]
pub(crate) struct Publish {
    tx: Arc<tokio::sync::watch::Sender<Arc<Snapshot>>>,
    metrics: Arc<Metrics>,
    source: Arc<Source>,
    wanted: Arc<std::sync::Mutex<BTreeSet<Release>>>,
    /// The binary names whose records are kept (the pinned images' and the moves' so far).
    names: Arc<std::sync::Mutex<BTreeSet<String>>>,
    loading: Arc<tokio::sync::Mutex<()>>,
}

/// What a load reads: a local mirror, or a URL's kept download.
#[derive(Debug)]
enum Source {
    Local(OsvSource),
    Download(PathBuf),
}

impl Publish {
    /// An empty index of the releases and names wanted now, for a load to fill.
    fn fresh_index(&self) -> Index {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Index::only(self.wanted.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned()).with_names(names)
    }

    /// `names` added to those kept; how many were not yet.
    fn want_names(&self, names: &BTreeSet<String>) -> usize {
        let mut kept = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names.iter().filter(|name| kept.insert((*name).clone())).count()
    }

    /// `releases` added to those wanted; the ones that were not yet.
    fn want(&self, releases: Vec<Release>) -> Vec<Release> {
        let mut wanted = self.wanted.lock().unwrap_or_else(|e| e.into_inner());
        releases.into_iter().filter(|r| wanted.insert(r.clone())).collect()
    }

    /// The source read again into an index of the releases wanted, put in force as current as
    /// the data was (the same data, more of it kept). Called with `loading` held.
    async fn reload(&self) -> Result<(), VulnsError> {
        let index = self.fresh_index();
        let (loaded, at) = match &*self.source {
            Source::Local(source) => {
                let source = source.clone();
                (tokio::task::spawn_blocking(move || read(&source, index)).await??, Some(Utc::now()))
            }
            Source::Download(path) if path.is_file() => {
                // The kept download read again: its source is the download's, as recorded.
                let (path, kept) = (path.clone(), self.current().index.source().cloned());
                let mut loaded = tokio::task::spawn_blocking(move || load::archive(&path, index)).await??;
                if let Some(kept) = kept {
                    loaded.index.set_source(kept);
                }
                (loaded, self.current().current_at)
            }
            // Nothing downloaded yet: the first download reads the releases wanted.
            Source::Download(_) => return Ok(()),
        };
        let at = at.or_else(|| self.current().current_at).unwrap_or_else(Utc::now);
        self.loaded(loaded, &describe_source(&self.source), at);
        Ok(())
    }

    fn current(&self) -> Arc<Snapshot> {
        self.tx.borrow().clone()
    }

    /// A load's index in force; its skips counted.
    fn loaded(&self, loaded: Loaded, source: &str, at: DateTime<Utc>) {
        loaded.log_skips(source);
        for (why, (count, _)) in &loaded.skipped {
            self.metrics
                .osv_skipped
                .get_or_create(&crate::metrics::ReasonLabels { reason: why.as_str().into() })
                .inc_by(*count);
        }
        let (records, held) = (loaded.index.len(), loaded.index.held());
        self.metrics.osv_records.set(records as i64);
        let releases: Vec<&str> = loaded.index.releases().unwrap_or_default().iter().map(|r| r.0.as_str()).collect();
        tracing::info!(source, records, held, read = loaded.read, ?releases, "vulnerability data loaded");
        let refresh_failed = self.current().refresh_failed.clone();
        let snapshot = Snapshot { index: Arc::new(loaded.index), records, current_at: Some(at), refresh_failed };
        self.tx.send_replace(Arc::new(snapshot));
    }

    /// A fresh download in force: current now, its refresh no longer failing.
    fn downloaded(&self, loaded: Loaded, source: &str, at: DateTime<Utc>) {
        self.loaded(loaded, source, at);
        self.touched(None, None);
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

/// Why the vulnerability data could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum VulnsError {
    #[error("[vulnerabilities] osv: {0}")]
    Load(#[from] LoadError),
    #[error("[vulnerabilities] osv: {0}")]
    Fetch(#[from] FetchError),
    #[error("[vulnerabilities] osv: the load stopped: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Reads a local mirror or archive into `index` (blocking), its source recorded on the index: the
/// path and the digest. A local source the operator configured is trusted as read (see
/// docs/vulnerabilities.md, "Letting security patches go faster").
fn read(source: &OsvSource, index: Index) -> Result<Loaded, LoadError> {
    let mut loaded = match source {
        OsvSource::Dir(path) => load::directory(path, index)?,
        OsvSource::Archive(path) => {
            let mut loaded = load::archive(path, index)?;
            loaded.sha256 = Some(load::file_sha256(path)?);
            loaded
        }
        OsvSource::Url(_) => return Ok(load::Loaded::empty(index)),
    };
    let url = describe(source);
    let sha256 = loaded.sha256.clone();
    loaded.index.set_source(DataSource { url, etag: None, sha256, unverified: None, as_of: None });
    Ok(loaded)
}

/// Reads a local mirror whole, counting the records of every release but Pro's without holding
/// them (`check`: does it read, and what; one record in memory at a time).
pub async fn load_local(source: &OsvSource) -> Result<Loaded, VulnsError> {
    let source = source.clone();
    Ok(tokio::task::spawn_blocking(move || read(&source, Index::counting(Vec::new()))).await??)
}

/// What the pinned images need of the vulnerability data: their releases and their package names.
#[derive(Debug, Clone, Default)]
pub struct Pinned {
    pub releases: BTreeSet<Release>,
    pub names: BTreeSet<String>,
}

/// The daemon's vulnerability data for `config` (`None` without `[vulnerabilities]`), keeping
/// the releases the config names and `pinned`'s, and the binaries `pinned` names: a local mirror
/// read now (an unreadable one is an error) unless there is no release to keep yet, a URL's kept
/// download read now, and for a URL the [`Refresher`] to run on a worker loop.
pub async fn start(
    config: &Config,
    metrics: Arc<Metrics>,
    pinned: Pinned,
) -> Result<Option<(Vulns, Option<Refresher>)>, VulnsError> {
    let Some(settings) = &config.vulnerabilities else { return Ok(None) };
    let (tx, rx) = tokio::sync::watch::channel(Arc::new(Snapshot::empty()));
    let mut wanted = pinned.releases;
    wanted.extend(settings.releases.iter().cloned());
    let source = match &settings.osv {
        OsvSource::Url(_) => Source::Download(fetch::kept_path(&config.work_dir().join("osv"))),
        local => Source::Local(local.clone()),
    };
    let publish = Publish {
        tx: Arc::new(tx),
        metrics,
        source: Arc::new(source),
        wanted: Arc::new(std::sync::Mutex::new(wanted)),
        names: Arc::new(std::sync::Mutex::new(pinned.names)),
        loading: Default::default(),
    };
    let vulns = Vulns { rx, publish: publish.clone() };
    match &settings.osv {
        OsvSource::Url(url) => {
            let refresher = Refresher::new(url, settings.refresh, config.work_dir().join("osv"), publish)?;
            refresher.load_kept().await;
            Ok(Some((vulns, Some(refresher))))
        }
        local => {
            if publish.wanted.lock().unwrap_or_else(|e| e.into_inner()).is_empty() {
                // Nothing pinned yet: the first move of an image reads its release's records.
                tracing::info!(source = %describe(local), "vulnerability data: read when the first move of a pinned image needs it");
                return Ok(Some((vulns, None)));
            }
            let _one = publish.loading.lock().await;
            publish.reload().await?;
            drop(_one);
            Ok(Some((vulns, None)))
        }
    }
}

fn describe_source(source: &Source) -> String {
    match source {
        Source::Local(local) => describe(local),
        Source::Download(path) => path.display().to_string(),
    }
}

fn describe(source: &OsvSource) -> String {
    match source {
        OsvSource::Dir(p) | OsvSource::Archive(p) => p.display().to_string(),
        OsvSource::Url(u) => u.clone(),
    }
}
