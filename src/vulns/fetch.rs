//! An OSV mirror at a URL: a `.tar.gz` downloaded to the state directory with a conditional GET
//! (the kept ETag and Last-Modified; `304` keeps the data without reading it again), written to a
//! temporary file, read whole, and only then renamed over the kept copy and put in force. A
//! failed refresh keeps the data in force, is logged once until one succeeds again, and shows as
//! its age ([`super::Snapshot::stale_note`]). [`Refresher`] is the worker-loop [`Work`] that
//! refreshes every `refresh`.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use reqwest::header::{ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED, LOCATION};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;

use builder_monitor_core::vulns::DataSource;
use sha2::{Digest, Sha256};

use super::{Publish, load};
use crate::worker::Work;

/// How long one download may take, whole.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// How soon a failed refresh is tried again (at most: never later than `refresh`).
const RETRY: Duration = Duration::from_secs(300);
/// Redirects followed for one download, at most (each to the configured URL's own origin).
const MAX_REDIRECTS: usize = 5;

const DATA: &str = "osv.tar.gz";

/// Where the last good download is kept in `dir`.
pub(super) fn kept_path(dir: &std::path::Path) -> PathBuf {
    dir.join(DATA)
}
const PART: &str = "osv.tar.gz.part";
/// Written when a download starts, removed when it ends: when it started (its bytes so far are
/// the size of [`PART`]), for `/readyz` and `status` to show a download that stalls.
const DOWNLOADING: &str = "osv.downloading.json";

/// A download under way: since when, how many bytes so far, and whether it is the first (no data
/// kept yet: until it ends, moves are matched without vulnerability data).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Downloading {
    pub since: DateTime<Utc>,
    pub bytes: u64,
    pub first: bool,
}

impl Downloading {
    /// `vulnerability data: first download under way since …, N bytes so far`.
    pub fn note(&self) -> String {
        let which = if self.first { "first download" } else { "download" };
        let since = self.since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        format!("vulnerability data: {which} under way since {since}, {} bytes so far", self.bytes)
    }
}

/// The download under way in the state directory `dir` (`<state>/osv`), if any: read from the
/// files a download leaves there, so the daemon and the `status` command see the same.
pub fn downloading(dir: &std::path::Path) -> Option<Downloading> {
    let marker: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join(DOWNLOADING)).ok()?).ok()?;
    let since = marker["since"].as_str().and_then(|s| DateTime::parse_from_rfc3339(s).ok())?.with_timezone(&Utc);
    let bytes = std::fs::metadata(dir.join(PART)).map(|m| m.len()).unwrap_or(0);
    Some(Downloading { since, bytes, first: !dir.join(DATA).is_file() })
}
const VALIDATORS: &str = "osv.json";

/// Why a refresh failed; none holds the URL's path or query (they may carry a token).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
    #[error("{url}: {detail}")]
    Http { url: String, detail: String },
    #[error("{url}: answered {status}")]
    Status { url: String, status: StatusCode },
    /// A redirect the download does not follow: to another origin (the archive would come from a
    /// host nobody configured), or to plain HTTP off loopback. `to` is that URL's origin only.
    #[error("{url}: redirects to {to}, {why}: not followed (set `osv` to the URL that serves the archive)")]
    Redirect { url: String, to: String, why: &'static str },
    #[error("{url}: more than {MAX_REDIRECTS} redirects: not followed further")]
    TooManyRedirects { url: String },
    #[error("{url}: the download is over {} GiB", load::MAX_ARCHIVE >> 30)]
    TooLarge { url: String },
    #[error("cannot keep the download in {}: {error}", dir.display())]
    Keep { dir: PathBuf, error: std::io::Error },
    #[error("{url}: {error}")]
    Load { url: String, error: load::LoadError },
}

/// What was kept with the last good download.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Validators {
    etag: Option<String>,
    last_modified: Option<String>,
    /// When it was last downloaded or confirmed current.
    current_at: Option<DateTime<Utc>>,
    /// The download's SHA-256 (recorded with what its data allows).
    #[serde(default)]
    sha256: Option<String>,
    /// The SHA-256 of the configured URL it came from (not the URL: it may carry a token), so a
    /// copy kept from another URL is known.
    #[serde(default)]
    url_sha256: Option<String>,
}

/// What one refresh did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    Loaded,
    NotModified,
}

/// Downloads and refreshes one URL's mirror.
pub struct Refresher {
    url: String,
    /// The URL without path or query, for logs and errors.
    shown: String,
    every: Duration,
    dir: PathBuf,
    http: reqwest::Client,
    publish: Publish,
    /// When the next refresh is due.
    due: tokio::time::Instant,
    /// Whether the failing streak was logged already.
    failing: bool,
}

impl Refresher {
    pub(super) fn new(url: &str, every: Duration, dir: PathBuf, publish: Publish) -> Result<Self, FetchError> {
        crate::install_crypto_provider();
        // Redirects are followed by hand (`Refresher::get`), each hop checked; no `Referer` ever
        // (it would carry the configured URL, query token included, to wherever a hop points).
        let http = reqwest::Client::builder()
            .user_agent(crate::USER_AGENT)
            .timeout(DOWNLOAD_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .referer(false)
            .build()
            .map_err(|e| FetchError::Client(e.to_string()))?;
        let shown = crate::config::redact_url(url);
        let due = tokio::time::Instant::now();
        Ok(Refresher { url: url.to_string(), shown, every, dir, http, publish, due, failing: false })
    }

    fn validators(&self) -> Validators {
        std::fs::read(self.dir.join(VALIDATORS)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    /// The SHA-256 of the configured URL, as [`Validators::url_sha256`] keeps it.
    fn url_sha256(&self) -> String {
        hex::encode(Sha256::digest(self.url.as_bytes()))
    }

    /// Where data of the kept download came from, and whether it may expedite: only a copy
    /// downloaded from the configured URL by a version that recorded so.
    fn kept_source(&self, v: &Validators) -> DataSource {
        let unverified = match &v.url_sha256 {
            Some(hash) if *hash == self.url_sha256() => None,
            Some(_) => Some("the kept download came from another URL than the configured one".to_string()),
            None => Some("the kept download has no record of its source (the next download records it)".to_string()),
        };
        DataSource { url: self.shown.clone(), etag: v.etag.clone(), sha256: v.sha256.clone(), unverified, as_of: None }
    }

    fn keep_validators(&self, v: &Validators) -> Result<(), FetchError> {
        let keep = |error| FetchError::Keep { dir: self.dir.clone(), error };
        let tmp = self.dir.join(format!("{VALIDATORS}.part"));
        std::fs::write(&tmp, serde_json::to_vec(v).unwrap_or_default()).map_err(keep)?;
        std::fs::rename(&tmp, self.dir.join(VALIDATORS)).map_err(keep)
    }

    /// The copy kept by an earlier run, put in force (as old as it is) so the daemon has data
    /// before the first download answers. Nothing kept, or a kept copy that does not read: no data.
    pub async fn load_kept(&self) {
        let validators = self.validators();
        let (Some(at), path) = (validators.current_at, self.dir.join(DATA)) else { return };
        if !path.is_file() {
            return;
        }
        let _one = self.publish.loading.lock().await;
        let index = self.publish.fresh_index();
        if index.releases().is_some_and(<[_]>::is_empty) {
            // No release wanted yet: read when a move needs one (the copy is known to parse).
            self.publish.touched(Some(at), None);
            return;
        }
        match tokio::task::spawn_blocking(move || load::archive(&path, index)).await {
            Ok(Ok(mut loaded)) => {
                loaded.index.set_source(self.kept_source(&validators));
                self.publish.loaded(loaded, &self.shown, at)
            }
            Ok(Err(error)) => {
                tracing::warn!(error = %error, "the kept OSV download does not read; downloading it again")
            }
            Err(error) => tracing::warn!(error = %error, "reading the kept OSV download stopped"),
        }
    }

    /// The conditional GET of the configured URL, following at most [`MAX_REDIRECTS`] redirects,
    /// each only to the configured URL's own origin (same scheme, host and port; so plain HTTP
    /// stays on loopback, as the config requires of the URL itself). Any other hop is refused,
    /// nothing is asked of it.
    async fn get(&self, validators: &Validators) -> Result<reqwest::Response, FetchError> {
        let url = || self.shown.clone();
        let http = |e: reqwest::Error| FetchError::Http { url: url(), detail: e.without_url().to_string() };
        let configured =
            reqwest::Url::parse(&self.url).map_err(|e| FetchError::Http { url: url(), detail: e.to_string() })?;
        let mut at = configured.clone();
        for _ in 0..=MAX_REDIRECTS {
            let mut request = self.http.get(at.clone());
            if let Some(etag) = &validators.etag {
                request = request.header(IF_NONE_MATCH, etag);
            }
            if let Some(modified) = &validators.last_modified {
                request = request.header(IF_MODIFIED_SINCE, modified);
            }
            let response = request.send().await.map_err(http)?;
            if !response.status().is_redirection() || response.status() == StatusCode::NOT_MODIFIED {
                return Ok(response);
            }
            let location = response.headers().get(LOCATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
            let next = at.join(location).map_err(|e| FetchError::Http {
                url: url(),
                detail: format!("answered {} with an unreadable Location: {e}", response.status()),
            })?;
            if let Some(why) = refused_hop(&configured, &next) {
                let to = crate::config::redact_url(next.as_str());
                return Err(FetchError::Redirect { url: url(), to, why });
            }
            at = next;
        }
        Err(FetchError::TooManyRedirects { url: url() })
    }

    /// The body of `response` written to the part file, its SHA-256 put in `fresh`; the part
    /// file's path. Over [`load::MAX_ARCHIVE`] bytes: removed, refused.
    async fn download(&self, mut response: reqwest::Response, fresh: &mut Validators) -> Result<PathBuf, FetchError> {
        let url = || self.shown.clone();
        let http = |e: reqwest::Error| FetchError::Http { url: url(), detail: e.without_url().to_string() };
        let keep = |error| FetchError::Keep { dir: self.dir.clone(), error };
        let mut hasher = Sha256::new();
        let part = self.dir.join(PART);
        let mut file = tokio::fs::File::create(&part).await.map_err(keep)?;
        let mut written = 0u64;
        while let Some(chunk) = response.chunk().await.map_err(http)? {
            written += chunk.len() as u64;
            if written > load::MAX_ARCHIVE {
                drop(file);
                let _ = tokio::fs::remove_file(&part).await;
                return Err(FetchError::TooLarge { url: url() });
            }
            hasher.update(&chunk);
            file.write_all(&chunk).await.map_err(keep)?;
        }
        file.flush().await.map_err(keep)?;
        fresh.sha256 = Some(hex::encode(hasher.finalize()));
        drop(file);
        Ok(part)
    }

    /// One conditional GET, and on new data its load and swap.
    pub async fn refresh(&self) -> Result<Refreshed, FetchError> {
        let url = || self.shown.clone();
        let keep = |error| FetchError::Keep { dir: self.dir.clone(), error };
        // A kept copy without the record of its source (an older version's, another URL's) is
        // downloaded again, not confirmed: its data must say where it came from.
        let kept = Some(self.validators()).filter(|v| v.sha256.is_some() && v.url_sha256 == Some(self.url_sha256()));
        let data_kept = self.dir.join(DATA).is_file() && kept.is_some();
        let mut validators = if data_kept { kept.unwrap_or_default() } else { Validators::default() };
        let response = self.get(&validators).await?;
        if response.status() == StatusCode::NOT_MODIFIED && data_kept {
            validators.current_at = Some(Utc::now());
            self.keep_validators(&validators)?;
            self.publish.touched(validators.current_at, None);
            return Ok(Refreshed::NotModified);
        }
        if !response.status().is_success() {
            return Err(FetchError::Status { url: url(), status: response.status() });
        }
        let header = |name| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
        let mut fresh = Validators {
            etag: header(ETAG),
            last_modified: header(LAST_MODIFIED),
            current_at: Some(Utc::now()),
            sha256: None,
            url_sha256: Some(self.url_sha256()),
        };
        tokio::fs::create_dir_all(&self.dir).await.map_err(keep)?;
        let marker = self.dir.join(DOWNLOADING);
        let since = serde_json::json!({ "since": Utc::now().to_rfc3339() }).to_string();
        tokio::fs::write(&marker, since).await.map_err(keep)?;
        let downloaded = self.download(response, &mut fresh).await;
        let _ = tokio::fs::remove_file(&marker).await;
        let part = downloaded?;
        // Read with the releases wanted, under the one load lock: a new release's load waits.
        let _one = self.publish.loading.lock().await;
        let (reading, index) = (part.clone(), self.publish.fresh_index());
        let loaded = tokio::task::spawn_blocking(move || load::archive(&reading, index))
            .await
            .map_err(|e| FetchError::Http { url: url(), detail: e.to_string() })?;
        let mut loaded = match loaded {
            Ok(loaded) => loaded,
            Err(error) => {
                let _ = tokio::fs::remove_file(&part).await;
                return Err(FetchError::Load { url: url(), error });
            }
        };
        // Over HTTPS (or plain HTTP to loopback, as the config allows) from the configured URL's
        // own origin, every redirect checked: the data may expedite.
        let source = DataSource {
            url: self.shown.clone(),
            etag: fresh.etag.clone(),
            sha256: fresh.sha256.clone(),
            unverified: None,
            as_of: None,
        };
        loaded.index.set_source(source);
        tokio::fs::rename(&part, self.dir.join(DATA)).await.map_err(keep)?;
        self.keep_validators(&fresh)?;
        self.publish.downloaded(loaded, &self.shown, Utc::now());
        Ok(Refreshed::Loaded)
    }

    /// One refresh with its logging: a failure once per failing streak (then at debug), the
    /// data in force kept and marked stale.
    pub async fn refresh_logged(&mut self) -> bool {
        match self.refresh().await {
            Ok(done) => {
                if std::mem::take(&mut self.failing) {
                    tracing::info!(url = %self.shown, "the OSV mirror refreshes again");
                }
                tracing::debug!(url = %self.shown, outcome = ?done, "OSV mirror refreshed");
                true
            }
            Err(error) => {
                if std::mem::replace(&mut self.failing, true) {
                    tracing::debug!(error = %error, "the OSV mirror's refresh still fails");
                } else {
                    tracing::warn!(error = %error, "the OSV mirror's refresh failed; the data in force is kept (its age shows on /readyz and the page)");
                }
                self.publish.touched(None, Some(error.to_string()));
                false
            }
        }
    }
}

/// Why a redirect from `configured` to `next` is not followed; `None`: it is (same origin).
/// Plain HTTP is checked first and on its own, so the rule of the config (plain HTTP only to
/// loopback) holds for every hop whatever the origin rule becomes.
fn refused_hop(configured: &reqwest::Url, next: &reqwest::Url) -> Option<&'static str> {
    let host = next.host_str().unwrap_or_default();
    match next.scheme() {
        "https" => {}
        "http" if crate::config::is_loopback_host(host) => {}
        "http" => return Some("plain HTTP off loopback"),
        _ => return Some("not an http(s) URL"),
    }
    (next.origin() != configured.origin()).then_some("another origin than the configured URL's")
}

impl Work for Refresher {
    async fn start_due(&mut self, _tasks: &mut JoinSet<()>) -> Option<Duration> {
        let now = tokio::time::Instant::now();
        if now >= self.due {
            let ok = self.refresh_logged().await;
            self.due = tokio::time::Instant::now() + if ok { self.every } else { RETRY.min(self.every) };
        }
        Some(self.due.saturating_duration_since(tokio::time::Instant::now()))
    }

    async fn woken(&mut self) {
        std::future::pending().await
    }
}
