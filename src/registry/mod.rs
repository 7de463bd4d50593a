//! Polite registry access: one fixed Accept list, HEAD for checks and digest-verified GETs, bearer
//! tokens reused per scope, a rate limiter per registry, and retries that honour `Retry-After`.
//!
//! References are parsed by the core (`builder_monitor_core::reference`); the requests are our own
//! (reqwest), because oci-client hides `Retry-After`/`RateLimit-*` and silently GETs after a failed
//! HEAD (a pull on Docker Hub).
//!
//! Redirects are followed by hand: manifest and token requests only within their own origin
//! (scheme, host, port), so a digest is only ever taken from the configured registry; blob GETs
//! also to storage on other hosts (S3-signed URLs, CDNs), without credentials.

mod auth;
mod circuit;
mod endpoint;
pub mod helper;
mod kept;
mod listing;
mod write;
mod written;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::CONTENT_TYPE;
use reqwest::{Method, StatusCode};
use sha2::{Digest, Sha256};

pub use auth::{Challenge, Token, TokenResponseError, parse_challenge, parse_token_response};
pub use circuit::THRESHOLD as CIRCUIT_THRESHOLD;
use endpoint::*;
pub use endpoint::{Endpoint, rate_limiter};
use helper::CredentialHelper;
pub use listing::{MAX_TAGS, Referrers};
pub use write::{BlobTransfer, MAX_LAYER_BYTES, ManifestRefusal};

use builder_monitor_core::reference::{ImageRef, is_sha256_digest};

use crate::config::RegistrySettings;
use crate::metrics::Metrics;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const DOCKER_MANIFEST_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// The one Accept list of every manifest request. Without the OCI types Distribution answers 404 for
/// OCI manifests; without any, it converts Docker manifests to schema1 under another digest.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

pub const MAX_MANIFEST_BYTES: usize = 4 << 20;
pub const MAX_CONFIG_BYTES: usize = 8 << 20;

/// Longest pause a request waits for inside a check; beyond it the check fails fast as rate limited
/// and the pause still holds back the next checks.
const MAX_INLINE_WAIT: Duration = Duration::from_secs(120);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Redirect hops one request may take (distribution registries use one, to blob storage).
const MAX_REDIRECTS: usize = 5;

use crate::USER_AGENT;

#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    #[error("{reference}: manifest unknown (tag or repository does not exist)")]
    NotFound { reference: String },
    #[error("{registry}: unauthorized: {detail}")]
    Unauthorized { registry: String, detail: String },
    #[error("{registry}: rate limited: {detail}")]
    RateLimited { registry: String, detail: String },
    #[error("{registry}: unavailable: {detail}")]
    Unavailable { registry: String, detail: String },
    #[error("{registry}: invalid response: {detail}")]
    InvalidResponse { registry: String, detail: String },
    #[error("{registry}: {detail}")]
    Setup { registry: String, detail: String },
    /// A write the registry refused (a 4xx to an upload or a manifest PUT); `code` is the error
    /// code of its body (`DIGEST_INVALID`), boxed to keep every error that carries this one small.
    #[error("{registry}: refused: {detail}")]
    Rejected { registry: String, detail: String, code: Option<Box<str>> },
}

impl RegistryError {
    /// Stable machine-readable reason, used in `check.failed` events and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            RegistryError::NotFound { .. } => "tag_missing",
            RegistryError::Unauthorized { .. } => "unauthorized",
            RegistryError::RateLimited { .. } => "rate_limited",
            RegistryError::Unavailable { .. } => "registry_unavailable",
            RegistryError::InvalidResponse { .. } => "invalid_response",
            RegistryError::Setup { .. } => "configuration",
            RegistryError::Rejected { .. } => "rejected",
        }
    }
}

impl RegistryError {
    /// The error of the last of `attempts` tries, saying how many there were.
    fn after_attempts(self, attempts: u32) -> Self {
        match self {
            RegistryError::Unavailable { registry, detail } if attempts > 1 => {
                RegistryError::Unavailable { registry, detail: format!("{detail} (gave up after {attempts} attempts)") }
            }
            other => other,
        }
    }
}

/// Whether a TLS failure is a plain-HTTP answer to the TLS handshake: rustls reads the HTTP
/// response's first bytes as a TLS record of an unknown content type.
fn speaks_plain_http(detail: &str) -> bool {
    detail.contains("InvalidContentType")
}

/// What a HEAD said about a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestHead {
    pub digest: String,
    pub media_type: Option<String>,
}

/// A manifest body whose sha256 was checked.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub digest: String,
    pub media_type: String,
    pub bytes: bytes::Bytes,
}

/// All registries, each with its own client, limiters, token cache and pause; and the class of
/// the requests made through this view of them.
pub struct Registry {
    shared: Arc<Shared>,
    class: RequestClass,
    /// Whether this view keeps the manifests and blobs it reads, and answers reads by digest from
    /// what was kept ([`Registry::keeping`]).
    keep: bool,
}

/// What every view of the registries shares: one endpoint per host (its connections, tokens,
/// circuit, pauses and both paces) and what this process wrote.
struct Shared {
    configured: HashMap<String, RegistrySettings>,
    endpoints: Mutex<HashMap<String, Arc<Endpoint>>>,
    metrics: Arc<Metrics>,
    /// The contents this process wrote into repositories (one writer per blob and repository).
    written: written::Written,
    /// App documents planning read, for the rebases after it.
    kept: kept::Kept,
}

/// Whose requests a [`Registry`] view makes, which decides what paces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestClass {
    /// Checks and inspects: held to the registry's `requests_per_second`.
    Watch,
    /// An action's reads and writes (a rebase, a signature, the runner's tag reads): paced by the
    /// registry's own answers (AIMD), or by `write_requests_per_second` when set.
    Action,
}

impl Registry {
    /// The watching's view: every request held to the registry's `requests_per_second`.
    pub fn new(configured: impl IntoIterator<Item = RegistrySettings>, metrics: Arc<Metrics>) -> Self {
        let shared = Shared {
            configured: configured.into_iter().map(|s| (s.host.clone(), s)).collect(),
            endpoints: Mutex::new(HashMap::new()),
            metrics,
            written: written::Written::default(),
            kept: kept::Kept::default(),
        };
        Self { shared: Arc::new(shared), class: RequestClass::Watch, keep: false }
    }

    /// The actions' view of the same registries (the same connections, tokens, circuit and
    /// pauses): requests through it are an action's, paced by what the registry says rather than
    /// by the watching's `requests_per_second`.
    pub fn actions(&self) -> Registry {
        Registry { shared: self.shared.clone(), class: RequestClass::Action, keep: self.keep }
    }

    /// This view, keeping the manifests and blobs it reads (small ones, by digest, in memory shared
    /// by every view) and answering its reads by digest from them first. Planning reads app images
    /// through it and a registry rebase reads them back, so a fleet's app is read once.
    pub fn keeping(&self) -> Registry {
        Registry { shared: self.shared.clone(), class: self.class, keep: true }
    }

    /// The manifest `digest` of `image`'s repository, when a keeping view read it: no request.
    pub async fn kept_manifest(&self, image: &ImageRef, digest: &str) -> Option<Manifest> {
        let kept = self.shared.kept.get(image.registry(), image.repository(), digest).await?;
        (!kept.media_type.is_empty()).then_some(kept)
    }

    /// Whose requests this view makes.
    pub fn class(&self) -> RequestClass {
        self.class
    }

    /// The action pace's requests per second for `host` now; `None` when unpaced (or the host was
    /// never asked).
    pub fn action_rate(&self, host: &str) -> Option<f64> {
        let endpoints = self.shared.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        endpoints.get(host).and_then(|e| e.action_rate())
    }

    /// How many manifest `HEAD`s went to `host` on the direct client (`endpoint::direct`) rather
    /// than reqwest; `None` when that registry was never asked or a proxy keeps it on reqwest.
    pub fn direct_heads(&self, host: &str) -> Option<u64> {
        let endpoints = self.shared.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        let direct = endpoints.get(host)?.direct.as_ref()?;
        Some(direct.sent())
    }

    fn endpoint(&self, image: &ImageRef) -> Result<Lane, RegistryError> {
        let host = image.registry();
        let mut endpoints = self.shared.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = endpoints.get(host) {
            return Ok(Lane { endpoint: e.clone(), class: self.class });
        }
        let configured = self.shared.configured.get(host).cloned();
        let settings = configured.unwrap_or_else(|| RegistrySettings::defaults_for(host));
        let endpoint = Arc::new(Endpoint::new(settings, image.api_host(), self.shared.metrics.clone())?);
        endpoints.insert(host.to_string(), endpoint.clone());
        Ok(Lane { endpoint, class: self.class })
    }

    /// The digest a tag points at now: one HEAD request at steady state.
    pub async fn head_manifest(&self, image: &ImageRef) -> Result<ManifestHead, RegistryError> {
        let endpoint = self.endpoint(image)?;
        let path = format!("{}/manifests/{}", image.repository(), image.manifest_reference());
        let response = endpoint.send(Method::HEAD, &path, image.repository(), Fetch::Manifest).await?;
        match response.status() {
            s if s.is_success() => {
                let media_type = header_str(response.headers(), CONTENT_TYPE.as_str());
                match header_str(response.headers(), "docker-content-digest") {
                    Some(digest) if is_sha256_digest(&digest) => Ok(ManifestHead { digest, media_type }),
                    Some(other) => {
                        Err(endpoint.invalid(format!("Docker-Content-Digest \"{other}\" is not a sha256 digest")))
                    }
                    // Rare, but then only the body can tell the digest.
                    None => {
                        tracing::debug!(registry = %endpoint.settings.host, "HEAD without Docker-Content-Digest, falling back to GET");
                        let m = self.get_manifest(image, image.manifest_reference()).await?;
                        Ok(ManifestHead { digest: m.digest, media_type: Some(m.media_type) })
                    }
                }
            }
            StatusCode::NOT_FOUND => Err(RegistryError::NotFound { reference: image.to_string() }),
            s => Err(endpoint.invalid(format!("HEAD manifest answered HTTP {s}"))),
        }
    }

    /// A manifest by tag or digest, its sha256 verified, at most 4 MiB.
    pub async fn get_manifest(&self, image: &ImageRef, reference: &str) -> Result<Manifest, RegistryError> {
        self.get_manifest_within(image, reference, MAX_MANIFEST_BYTES).await
    }

    /// [`Registry::get_manifest`] with a smaller bound, for manifests that must stay small (a
    /// referrers index): a larger body is refused without being read on.
    pub async fn get_manifest_within(
        &self,
        image: &ImageRef,
        reference: &str,
        limit: usize,
    ) -> Result<Manifest, RegistryError> {
        let limit = limit.min(MAX_MANIFEST_BYTES);
        if self.keep
            && is_sha256_digest(reference)
            && let Some(kept) = self.kept_manifest(image, reference).await
            && kept.bytes.len() <= limit
        {
            return Ok(kept);
        }
        let endpoint = self.endpoint(image)?;
        let path = format!("{}/manifests/{}", image.repository(), reference);
        let response = endpoint.send(Method::GET, &path, image.repository(), Fetch::Manifest).await?;
        match response.status() {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND => {
                self.shared.written.forget(image.registry(), image.repository(), reference).await;
                return Err(RegistryError::NotFound {
                    reference: format!("{}/{}:{reference}", image.registry(), image.repository()),
                });
            }
            s => return Err(endpoint.invalid(format!("GET manifest answered HTTP {s}"))),
        }
        let header_digest = header_str(response.headers(), "docker-content-digest");
        let content_type = header_str(response.headers(), CONTENT_TYPE.as_str());
        let bytes = endpoint.read_body(response, limit, "manifest").await?;
        let digest = sha256_digest(&bytes);
        if is_sha256_digest(reference) && reference != digest {
            return Err(endpoint.invalid(format!("manifest body hashes to {digest}, not the requested {reference}")));
        }
        if let Some(h) = header_digest.filter(|h| h.starts_with("sha256:"))
            && h != digest
        {
            return Err(
                endpoint.invalid(format!("manifest body hashes to {digest}, not its Docker-Content-Digest {h}"))
            );
        }
        // Some artifacts carry no top-level mediaType; the Content-Type header is authoritative.
        let media_type = content_type
            .filter(|t| !t.is_empty() && t != "application/json" && t != "application/octet-stream")
            .or_else(|| {
                serde_json::from_slice::<serde_json::Value>(&bytes)
                    .ok()
                    .and_then(|v| v.get("mediaType").and_then(|m| m.as_str()).map(str::to_string))
            })
            .unwrap_or_else(|| OCI_MANIFEST.to_string());
        let manifest = Manifest { digest, media_type, bytes };
        if self.keep {
            self.shared.kept.keep(image.registry(), image.repository(), &manifest).await;
        }
        Ok(manifest)
    }

    /// Whether the registry has the OCI 1.1 referrers API (`GET /v2/<repo>/referrers/<digest>`
    /// answers 200; 404 or 400 means it has none, so referrers are listed under the referrers tag
    /// schema's `sha256-<hex>` index instead). Its answer, an index, is not read. Asked once per
    /// registry by this process: the answer is remembered ([`Registry::referrers_api`]). A 404
    /// `NAME_UNKNOWN` (go-containerregistry's registry, for a repository it does not know yet) says
    /// nothing about the API: answered as none, not remembered.
    pub async fn has_referrers_api(&self, image: &ImageRef, digest: &str) -> Result<bool, RegistryError> {
        use std::sync::atomic::Ordering;
        let endpoint = self.endpoint(image)?;
        if !is_sha256_digest(digest) {
            return Err(endpoint.invalid(format!("subject digest \"{digest}\" is not a sha256 digest")));
        }
        if let Some(known) = ReferrersApi::from_byte(endpoint.referrers_api.load(Ordering::Relaxed)) {
            return Ok(known == ReferrersApi::Served);
        }
        let path = format!("{}/referrers/{digest}", image.repository());
        let response = endpoint.send(Method::GET, &path, image.repository(), Fetch::Manifest).await?;
        let answer = match response.status() {
            s if s.is_success() => ReferrersApi::Served,
            StatusCode::NOT_FOUND => {
                let body = endpoint.read_body(response, 64 * 1024, "referrers answer").await.unwrap_or_default();
                if String::from_utf8_lossy(&body).contains("NAME_UNKNOWN") {
                    return Ok(false);
                }
                ReferrersApi::Absent
            }
            // 400: registries that route /referrers/ to nothing valid (go-containerregistry treats it so).
            StatusCode::BAD_REQUEST => ReferrersApi::Absent,
            s => return Err(endpoint.invalid(format!("GET referrers answered HTTP {s}"))),
        };
        endpoint.referrers_api.store(answer as u8, Ordering::Relaxed);
        Ok(answer == ReferrersApi::Served)
    }

    /// What `host` answered when asked for the referrers API: `None` when it was not asked yet by
    /// this process.
    pub fn referrers_api(&self, host: &str) -> Option<bool> {
        use std::sync::atomic::Ordering;
        let endpoints = self.shared.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        let known = ReferrersApi::from_byte(endpoints.get(host)?.referrers_api.load(Ordering::Relaxed))?;
        Some(known == ReferrersApi::Served)
    }

    /// The referrers API answers this process learned and has not yet seen recorded (by
    /// [`Registry::mark_referrers_recorded`]), by host: what the daemon writes to the ledger,
    /// which `status` and the page read.
    pub fn referrers_answers_unrecorded(&self) -> Vec<(String, bool)> {
        use std::sync::atomic::Ordering;
        let endpoints = self.shared.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        let mut answers: Vec<(String, bool)> = endpoints
            .iter()
            .filter(|(_, e)| !e.referrers_recorded.load(Ordering::Relaxed))
            .filter_map(|(host, e)| {
                let known = ReferrersApi::from_byte(e.referrers_api.load(Ordering::Relaxed))?;
                Some((host.clone(), known == ReferrersApi::Served))
            })
            .collect();
        answers.sort();
        answers
    }

    /// `host`'s referrers API answer is in the ledger: not handed out again.
    pub fn mark_referrers_recorded(&self, host: &str) {
        use std::sync::atomic::Ordering;
        let endpoints = self.shared.endpoints.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = endpoints.get(host) {
            e.referrers_recorded.store(true, Ordering::Relaxed);
        }
    }

    /// A blob by digest (image configs), verified, at most `limit` bytes.
    pub async fn get_blob(&self, image: &ImageRef, digest: &str, limit: usize) -> Result<bytes::Bytes, RegistryError> {
        let endpoint = self.endpoint(image)?;
        if !is_sha256_digest(digest) {
            return Err(endpoint.invalid(format!("blob digest \"{digest}\" is not a sha256 digest")));
        }
        // Kept blobs carry no media type (manifests always do).
        if self.keep
            && let Some(kept) = self.shared.kept.get(image.registry(), image.repository(), digest).await
            && kept.media_type.is_empty()
            && kept.bytes.len() <= limit
        {
            return Ok(kept.bytes);
        }
        let path = format!("{}/blobs/{}", image.repository(), digest);
        let response = endpoint.send(Method::GET, &path, image.repository(), Fetch::Blob).await?;
        match response.status() {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND => {
                self.shared.written.forget(image.registry(), image.repository(), digest).await;
                return Err(RegistryError::NotFound {
                    reference: format!("{}/{}@{digest}", image.registry(), image.repository()),
                });
            }
            s => return Err(endpoint.invalid(format!("GET blob answered HTTP {s}"))),
        }
        let bytes = endpoint.read_body(response, limit, "blob").await?;
        let actual = sha256_digest(&bytes);
        if actual != digest {
            return Err(endpoint.invalid(format!("blob body hashes to {actual}, not {digest}")));
        }
        if self.keep {
            let blob = Manifest { digest: actual, media_type: String::new(), bytes: bytes.clone() };
            self.shared.kept.keep(image.registry(), image.repository(), &blob).await;
        }
        Ok(bytes)
    }
}

pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A duration for people: whole seconds, rounded up so a wait never reads as zero.
pub fn whole_seconds(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0)))
}

/// A registry's answer about the OCI 1.1 referrers API, kept as a byte per endpoint (0: not asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum ReferrersApi {
    Served = 1,
    Absent = 2,
}

impl ReferrersApi {
    fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::Served),
            2 => Some(Self::Absent),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
    use tokio::time::Instant;

    #[test]
    fn quota_headers() {
        let mut h = HeaderMap::new();
        h.insert("ratelimit-remaining", HeaderValue::from_static("76;w=21600"));
        h.insert("ratelimit-limit", HeaderValue::from_static("100;w=21600"));
        let q = parse_quota(&h).unwrap();
        assert_eq!((q.remaining, q.limit, q.window), (76, Some(100), Some(Duration::from_secs(21600))));
        let mut h = HeaderMap::new();
        h.insert("ratelimit-remaining", HeaderValue::from_static("0"));
        let q = parse_quota(&h).unwrap();
        assert_eq!((q.remaining, q.limit, q.window), (0, None, None));
        assert!(parse_quota(&HeaderMap::new()).is_none());
    }

    #[test]
    fn waits_read_in_whole_seconds() {
        assert_eq!(whole_seconds(Duration::from_nanos(86_399_999_994_051)).to_string(), "1day");
        assert_eq!(whole_seconds(Duration::from_millis(1200)).to_string(), "2s");
        assert_eq!(whole_seconds(Duration::from_secs(600)).to_string(), "10m");
        assert_eq!(whole_seconds(Duration::ZERO).to_string(), "0s");
    }

    #[test]
    fn pauses_are_capped_even_for_a_far_future_date() {
        let mut s = RegistrySettings::defaults_for("example.com");
        s.max_retry_after = Duration::from_secs(60);
        crate::install_crypto_provider();
        let e = Endpoint::new(s, "example.com", Metrics::new()).unwrap();
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("Fri, 31 Dec 9999 23:59:59 GMT"));
        e.pause(retry_after(&h).unwrap());
        let until = e.paused_until.lock().unwrap().unwrap();
        assert!(until <= Instant::now() + Duration::from_secs(60));
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let later = (chrono::Utc::now() + chrono::Duration::seconds(100)).to_rfc2822();
        h.insert(RETRY_AFTER, HeaderValue::from_str(&later).unwrap());
        let d = retry_after(&h).unwrap();
        assert!(d > Duration::from_secs(95) && d <= Duration::from_secs(100), "{d:?}");
        h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn backoff_grows_with_jitter_and_caps() {
        let mut s = RegistrySettings::defaults_for("example.com");
        s.backoff = Duration::from_millis(100);
        crate::install_crypto_provider();
        let e = Endpoint::new(s, "example.com", Metrics::new()).unwrap();
        for _ in 0..100 {
            let d0 = e.backoff(0);
            assert!(d0 >= Duration::from_millis(50) && d0 <= Duration::from_millis(100), "{d0:?}");
            let d3 = e.backoff(3);
            assert!(d3 >= Duration::from_millis(400) && d3 <= Duration::from_millis(800), "{d3:?}");
            assert!(e.backoff(30) <= MAX_BACKOFF);
        }
    }

    #[test]
    fn digest_of_bytes() {
        assert_eq!(sha256_digest(b""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }
}
