//! Registry writes for rebases: blob HEAD, cross-repository mounts, streamed digest-verified copies
//! between registries, small uploads (configs) and manifest PUTs, all with push-scoped tokens.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::Frame;
use reqwest::header::{CONTENT_LENGTH, LOCATION};
use reqwest::{Method, Response, StatusCode, Url};
use sha2::{Digest, Sha256};

use builder_monitor_core::reference::{ImageRef, is_sha256_digest};

use super::written::Holder;
use super::{Call, Endpoint, Fetch, Lane, Payload, Registry, RegistryError, header_str, pull_scope, sha256_digest};

/// How a blob came to be in the target repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobTransfer {
    /// Already there: nothing sent.
    Present,
    /// Linked from the source repository by the registry: no bytes sent.
    Mounted,
    /// Uploaded: `bytes` went over the wire (streamed from the source for a layer).
    Copied { bytes: u64 },
}

/// Largest layer a copy streams: a manifest's `size` is a registry's word, not a promise.
pub const MAX_LAYER_BYTES: u64 = 16 << 30;
/// Slowest rate a layer copy is given time for, on top of the registry's `timeout`.
const MIN_COPY_RATE: u64 = 256 << 10;
/// Most of an error body we read to say why a write was refused.
const MAX_ERROR_BODY: usize = 64 << 10;

/// `repository:NAME:pull,push`, the token scope of writes.
fn push_scope(repository: &str) -> String {
    format!("repository:{repository}:pull,push")
}

impl Registry {
    /// Whether `digest` is a blob of `image`'s repository (HEAD, read scope).
    pub async fn blob_exists(&self, image: &ImageRef, digest: &str) -> Result<bool, RegistryError> {
        let endpoint = self.endpoint(image)?;
        endpoint.check_digest(digest)?;
        let present = endpoint.blob_present(image.repository(), &pull_scope(image.repository()), digest).await?;
        if !present {
            self.shared.written.forget(image.registry(), image.repository(), digest).await;
        }
        Ok(present)
    }

    /// Makes `digest` (of `size` bytes) a blob of `target`'s repository. Within one registry host:
    /// a mount from `source`'s repository first, with no HEAD before it (a `201` answers both
    /// "mounted" and "was there already", so both count as [`BlobTransfer::Mounted`]); a mount the
    /// registry refuses (`202`, with an upload session) or denies (401/403) falls back to a HEAD
    /// and a copy. Across registries: a HEAD, then a copy. A copy streams the blob from `source`,
    /// digest and size verified on the way, never held whole.
    ///
    /// One writer per blob and repository: while another task of this process makes the same blob
    /// a blob of the same repository, this waits for it; once that succeeded (this fleet), the blob
    /// is [`BlobTransfer::Present`] with no request at all.
    pub async fn ensure_blob(
        &self,
        target: &ImageRef,
        source: &ImageRef,
        digest: &str,
        size: u64,
    ) -> Result<BlobTransfer, RegistryError> {
        let transfer = self.transfer_blob(target, source, digest, size);
        let made = self.shared.written.once(target.registry(), target.repository(), digest, transfer).await?;
        Ok(made.unwrap_or(BlobTransfer::Present))
    }

    /// The registry said (or may have said) that `digest` is not in `image`'s repository: the next
    /// write of it is made again.
    pub async fn forget_written(&self, image: &ImageRef, digest: &str) {
        self.shared.written.forget(image.registry(), image.repository(), digest).await;
    }

    /// [`Registry::ensure_blob`]'s requests.
    async fn transfer_blob(
        &self,
        target: &ImageRef,
        source: &ImageRef,
        digest: &str,
        size: u64,
    ) -> Result<BlobTransfer, RegistryError> {
        let endpoint = self.endpoint(target)?;
        endpoint.check_digest(digest)?;
        if size > MAX_LAYER_BYTES {
            return Err(endpoint.invalid(format!(
                "blob {digest} is said to be {size} bytes, over the {MAX_LAYER_BYTES}-byte limit of a copy"
            )));
        }
        let repository = target.repository();
        let scope = push_scope(repository);
        let mut session = None;
        if target.registry() == source.registry() {
            match endpoint.mount(repository, &scope, source.repository(), digest).await {
                Ok(Mount::Mounted) => return Ok(BlobTransfer::Mounted),
                Ok(Mount::Refused(upload)) => session = upload,
                // Some registries deny mounts outright (Harbor has answered 401): copy instead; an
                // upload we may not make fails on its own with the same error.
                Err(RegistryError::Unauthorized { detail, .. }) => {
                    tracing::debug!(registry = %endpoint.settings.host, %detail, "mount denied, copying instead");
                }
                Err(e) => return Err(e),
            }
        }
        // Only now, before bytes would go over the wire: the target may have it already. (A
        // refused mount's session is left to the registry to expire.)
        if endpoint.blob_present(repository, &scope, digest).await? {
            return Ok(BlobTransfer::Present);
        }
        let session = match session {
            Some(url) => url,
            None => endpoint.start_upload(repository, &scope).await?,
        };
        let source_endpoint = self.endpoint(source)?;
        let timeout = endpoint.settings.timeout + Duration::from_secs(size / MIN_COPY_RATE);
        let path = format!("{}/blobs/{digest}", source.repository());
        let source_scope = pull_scope(source.repository());
        let call = Call {
            repository: source.repository(),
            scope: &source_scope,
            fetch: Fetch::Blob,
            payload: Payload::Empty,
            timeout: Some(timeout),
        };
        let response =
            source_endpoint.send_to(Method::GET, source_endpoint.api_url(&Method::GET, &path)?, call).await?;
        match response.status() {
            s if s.is_success() => {}
            StatusCode::NOT_FOUND => {
                return Err(RegistryError::NotFound {
                    reference: format!("{}/{}@{digest}", source.registry(), source.repository()),
                });
            }
            s => return Err(source_endpoint.invalid(format!("GET blob {digest} answered HTTP {s}"))),
        }
        let announced = response.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let Some(length) = announced.filter(|l| *l != size) {
            return Err(source_endpoint.invalid(format!("blob {digest} is {length} bytes, its manifest says {size}")));
        }
        let outcome = Arc::new(Mutex::new(None));
        let body = Verified {
            inner: reqwest::Body::from(response),
            hasher: Sha256::new(),
            seen: 0,
            size,
            digest: digest.to_string(),
            outcome: outcome.clone(),
        };
        let call = Call {
            repository,
            scope: &scope,
            fetch: Fetch::Write,
            payload: Payload::Stream(Mutex::new(Some(reqwest::Body::wrap(body)))),
            timeout: Some(timeout),
        };
        let sent = endpoint.send_to(Method::PATCH, session, call).await;
        // What the bytes were says more than how the upload then failed.
        let verified = outcome.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(Err(problem)) = verified {
            return Err(source_endpoint.invalid(problem));
        }
        let response = sent?;
        if response.status() != StatusCode::ACCEPTED && !response.status().is_success() {
            return Err(endpoint.refused(&format!("PATCH upload of {digest}"), response).await);
        }
        let Some(Ok(bytes)) = verified else {
            return Err(endpoint.invalid(format!("the upload of {digest} ended before the whole blob was read")));
        };
        let next = endpoint.upload_location(&response)?;
        endpoint.finish_upload(repository, &scope, next, digest, Payload::Empty).await?;
        Ok(BlobTransfer::Copied { bytes })
    }

    /// Uploads a small blob (an image config) in one POST and one PUT, with no HEAD before: a
    /// rebased config is new content but after a failed attempt, and uploading a blob the
    /// repository has again is harmless (the same bytes under the same digest). One writer per
    /// blob and repository, as for [`Registry::ensure_blob`]: the same config (apps tagged several
    /// times) is uploaded once.
    pub async fn put_blob(&self, image: &ImageRef, bytes: Bytes) -> Result<BlobTransfer, RegistryError> {
        let endpoint = self.endpoint(image)?;
        let digest = sha256_digest(&bytes);
        let repository = image.repository();
        let upload = async {
            let scope = push_scope(repository);
            endpoint.upload_small(repository, &scope, None, &digest, bytes).await
        };
        let made = self.shared.written.once(image.registry(), repository, &digest, upload).await?;
        Ok(made.unwrap_or(BlobTransfer::Present))
    }

    /// [`Registry::put_blob`] for a small blob many repositories take alike (the OCI empty config
    /// of every bundle referrer): uploaded into one repository of the registry, mounted from there
    /// into the others (one request instead of two). While the first upload is under way, the
    /// others wait for it. A mount the registry refuses falls back to an upload (into the session
    /// it opened, if it did), and the next repository uploads again.
    pub async fn put_shared_blob(&self, image: &ImageRef, bytes: Bytes) -> Result<BlobTransfer, RegistryError> {
        let endpoint = self.endpoint(image)?;
        let digest = sha256_digest(&bytes);
        let (registry, repository) = (image.registry(), image.repository());
        let write = async {
            let scope = push_scope(repository);
            let tried = std::sync::atomic::AtomicBool::new(false);
            let here = async {
                tried.store(true, std::sync::atomic::Ordering::Relaxed);
                endpoint.upload_small(repository, &scope, None, &digest, bytes.clone()).await?;
                Ok(repository.to_string())
            };
            let from = match Box::pin(self.shared.written.holder(registry, &digest, here)).await {
                Ok(Holder::Uploaded) => return Ok(BlobTransfer::Copied { bytes: bytes.len() as u64 }),
                Ok(Holder::In(from)) if from != repository => from,
                // Ours earlier but no longer known to be there, or another repository's upload
                // failed (it may not be ours to fail): uploaded here.
                Ok(Holder::In(_)) => return endpoint.upload_small(repository, &scope, None, &digest, bytes).await,
                Err(err) if tried.load(std::sync::atomic::Ordering::Relaxed) => return Err(err),
                Err(_) => return endpoint.upload_small(repository, &scope, None, &digest, bytes).await,
            };
            let session = match endpoint.mount(repository, &scope, &from, &digest).await {
                Ok(Mount::Mounted) => return Ok(BlobTransfer::Mounted),
                Ok(Mount::Refused(session)) => session,
                Err(RegistryError::Unauthorized { detail, .. }) => {
                    tracing::debug!(registry = %endpoint.settings.host, %detail, "mount denied, uploading instead");
                    None
                }
                Err(e) => return Err(e),
            };
            self.shared.written.forget_holder(registry, &digest).await;
            endpoint.upload_small(repository, &scope, session, &digest, bytes).await
        };
        let made = self.shared.written.once(registry, repository, &digest, write).await?;
        Ok(made.unwrap_or(BlobTransfer::Present))
    }

    /// PUTs a manifest under `reference` (a digest or a tag); returns its digest, the sha256 of
    /// `bytes`, checked against the registry's `Docker-Content-Digest` when it sends one. By
    /// digest, one writer per manifest and repository, as for [`Registry::ensure_blob`]: identical
    /// manifests (one app under several tags, rebased alike) are PUT once; a tag is PUT every time.
    pub async fn put_manifest(
        &self,
        image: &ImageRef,
        reference: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<String, RegistryError> {
        let endpoint = self.endpoint(image)?;
        let digest = sha256_digest(&bytes);
        if reference.starts_with("sha256:") && reference != digest {
            return Err(endpoint.invalid(format!("a manifest hashing to {digest} cannot be put under {reference}")));
        }
        if reference == digest {
            let put = self.send_manifest(&endpoint, image, reference, media_type, bytes, &digest);
            self.shared.written.once(image.registry(), image.repository(), &digest, put).await?;
        } else {
            self.send_manifest(&endpoint, image, reference, media_type, bytes, &digest).await?;
        }
        Ok(digest)
    }

    /// [`Registry::put_manifest`]'s request.
    async fn send_manifest(
        &self,
        endpoint: &Lane,
        image: &ImageRef,
        reference: &str,
        media_type: &str,
        bytes: Bytes,
        digest: &str,
    ) -> Result<(), RegistryError> {
        let repository = image.repository();
        let scope = push_scope(repository);
        let path = format!("{repository}/manifests/{reference}");
        let call = Call {
            repository,
            scope: &scope,
            fetch: Fetch::Write,
            payload: Payload::Bytes { bytes, content_type: media_type.to_string() },
            timeout: None,
        };
        let response = endpoint.send_to(Method::PUT, endpoint.api_url(&Method::PUT, &path)?, call).await?;
        if !response.status().is_success() {
            return Err(endpoint.refused(&format!("PUT manifest {repository}:{reference}"), response).await);
        }
        endpoint.check_answered_digest(&response, digest, "manifest")?;
        Ok(())
    }
}

/// What a mount request got.
enum Mount {
    Mounted,
    /// The registry opened an ordinary upload instead (when it said where).
    Refused(Option<Url>),
}

impl Lane {
    async fn blob_present(&self, repository: &str, scope: &str, digest: &str) -> Result<bool, RegistryError> {
        let url = self.api_url(&Method::HEAD, &format!("{repository}/blobs/{digest}"))?;
        let call = Call { repository, scope, fetch: Fetch::Probe, payload: Payload::Empty, timeout: None };
        let response = self.send_to(Method::HEAD, url, call).await?;
        match response.status() {
            s if s.is_success() || super::is_redirect(s) => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            s => Err(self.invalid(format!("HEAD blob {digest} answered HTTP {s}"))),
        }
    }

    /// `POST …/blobs/uploads/?mount=DIGEST&from=SOURCE`, with read access to the source asked too.
    async fn mount(&self, repository: &str, scope: &str, from: &str, digest: &str) -> Result<Mount, RegistryError> {
        let mut url = self.api_url(&Method::POST, &format!("{repository}/blobs/uploads/"))?;
        url.query_pairs_mut().append_pair("mount", digest).append_pair("from", from);
        let scope = format!("{scope} {}", pull_scope(from));
        let call = Call { repository, scope: &scope, fetch: Fetch::Write, payload: Payload::Empty, timeout: None };
        let response = self.send_to(Method::POST, url, call).await?;
        match response.status() {
            StatusCode::CREATED => {
                self.check_answered_digest(&response, digest, "mounted blob")?;
                Ok(Mount::Mounted)
            }
            StatusCode::ACCEPTED => {
                let upload = response.headers().contains_key(LOCATION).then(|| self.upload_location(&response));
                Ok(Mount::Refused(upload.transpose()?))
            }
            // Registries that do not mount at all (Harbor has answered 401/403) make this an
            // ordinary upload; `send` turned those into errors, the rest falls back here.
            s if s.is_client_error() => {
                tracing::debug!(registry = %self.settings.host, status = %s, "mount refused, copying instead");
                Ok(Mount::Refused(None))
            }
            _ => Err(self.refused(&format!("mount of {digest} from {from}"), response).await),
        }
    }

    /// Uploads `bytes` (hashing to `digest`) whole: into `session` when one is open, else into a
    /// new one (`POST`), completed by one `PUT`.
    async fn upload_small(
        &self,
        repository: &str,
        scope: &str,
        session: Option<Url>,
        digest: &str,
        bytes: Bytes,
    ) -> Result<BlobTransfer, RegistryError> {
        let session = match session {
            Some(url) => url,
            None => self.start_upload(repository, scope).await?,
        };
        let length = bytes.len() as u64;
        let payload = Payload::Bytes { bytes, content_type: "application/octet-stream".to_string() };
        self.finish_upload(repository, scope, session, digest, payload).await?;
        Ok(BlobTransfer::Copied { bytes: length })
    }

    /// `POST …/blobs/uploads/`: the URL of a new upload session.
    async fn start_upload(&self, repository: &str, scope: &str) -> Result<Url, RegistryError> {
        let url = self.api_url(&Method::POST, &format!("{repository}/blobs/uploads/"))?;
        let call = Call { repository, scope, fetch: Fetch::Write, payload: Payload::Empty, timeout: None };
        let response = self.send_to(Method::POST, url, call).await?;
        if response.status() != StatusCode::ACCEPTED {
            return Err(self.refused(&format!("starting an upload to {repository}"), response).await);
        }
        self.upload_location(&response)
    }

    /// Completes an upload: `PUT <session>&digest=DIGEST` with the (last) bytes.
    async fn finish_upload(
        &self,
        repository: &str,
        scope: &str,
        mut session: Url,
        digest: &str,
        payload: Payload,
    ) -> Result<(), RegistryError> {
        session.query_pairs_mut().append_pair("digest", digest);
        let call = Call { repository, scope, fetch: Fetch::Write, payload, timeout: None };
        let response = self.send_to(Method::PUT, session, call).await?;
        if !response.status().is_success() {
            return Err(self.refused(&format!("completing the upload of {digest}"), response).await);
        }
        self.check_answered_digest(&response, digest, "uploaded blob")
    }
}

impl Endpoint {
    fn check_digest(&self, digest: &str) -> Result<(), RegistryError> {
        if is_sha256_digest(digest) {
            Ok(())
        } else {
            Err(self.invalid(format!("blob digest \"{digest}\" is not a sha256 digest")))
        }
    }

    /// An upload's `Location`: relative (`/v2/…/uploads/<uuid>?_state=…`) or absolute, its query
    /// kept. Only on this registry's origin: our credentials go with it.
    fn upload_location(&self, response: &Response) -> Result<Url, RegistryError> {
        let status = response.status();
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| self.invalid(format!("an upload answered HTTP {status} without a Location")))?;
        let url = response
            .url()
            .join(location)
            .map_err(|e| self.invalid(format!("an upload's Location is not a URL: {e}")))?;
        if url.origin() != self.base.origin() {
            return Err(self.invalid(format!(
                "an upload's Location is on {}, not on the registry's {}; credentials are not sent there",
                super::origin_of(&url),
                super::origin_of(&self.base)
            )));
        }
        Ok(url)
    }

    fn check_answered_digest(&self, response: &Response, digest: &str, what: &str) -> Result<(), RegistryError> {
        match header_str(response.headers(), "docker-content-digest") {
            Some(answered) if answered != digest => Err(self.invalid(format!(
                "the registry stored the {what} as {}, not {digest}",
                builder_monitor_core::text::escape(&answered)
            ))),
            _ => Ok(()),
        }
    }

    /// The error for a write the registry answered with `response` (not a success): a 4xx is a
    /// refusal with the registry's error code and message.
    pub(super) async fn refused(&self, what: &str, response: Response) -> RegistryError {
        let status = response.status();
        let body = self.read_body(response, MAX_ERROR_BODY, "error body").await.unwrap_or_default();
        let reason = error_reason(&body).map(|r| format!(" ({r})")).unwrap_or_default();
        let detail = format!("{what} answered HTTP {status}{reason}");
        if status.is_client_error() {
            RegistryError::Rejected { registry: self.settings.host.clone(), detail, code: error_code(&body) }
        } else {
            self.invalid(detail)
        }
    }
}

/// The code of the first error of a Distribution error body (`DIGEST_INVALID`), when it is one.
fn error_code(body: &[u8]) -> Option<Box<str>> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let code = value.get("errors")?.as_array()?.first()?.get("code")?.as_str()?;
    let plain = !code.is_empty() && code.len() <= 64 && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_');
    plain.then(|| code.into())
}

/// What a manifest PUT's refusal says when a registry answers it while blobs it names are being
/// written (by us, a moment before, or by another writer): worth another try within the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManifestRefusal {
    /// `DIGEST_INVALID`: Distribution read a link file of a blob while it was rewritten.
    DigestInvalid,
    /// `BLOB_UNKNOWN`, `MANIFEST_BLOB_UNKNOWN`, `MANIFEST_UNKNOWN`: a blob (or a child manifest)
    /// is not there, whatever this process thought: it must be written again.
    BlobUnknown,
}

impl RegistryError {
    /// The transient kind of a refused manifest PUT; `None` for any other error.
    pub fn manifest_refusal(&self) -> Option<ManifestRefusal> {
        let RegistryError::Rejected { code: Some(code), .. } = self else {
            return None;
        };
        match &**code {
            "DIGEST_INVALID" => Some(ManifestRefusal::DigestInvalid),
            "BLOB_UNKNOWN" | "MANIFEST_BLOB_UNKNOWN" | "MANIFEST_UNKNOWN" => Some(ManifestRefusal::BlobUnknown),
            _ => None,
        }
    }
}

/// `CODE: message` of the first error of a Distribution error body.
fn error_reason(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let first = value.get("errors")?.as_array()?.first()?;
    let code = first.get("code").and_then(|c| c.as_str()).unwrap_or("UNKNOWN");
    let message = first.get("message").and_then(|m| m.as_str()).unwrap_or_default();
    let text = format!("{code}: {message}");
    Some(builder_monitor_core::text::escape(&builder_monitor_core::text::clip(&text, 300)).to_string())
}

/// A layer on its way from one registry to another: hashed and counted as it passes. More bytes
/// than announced, fewer, or another digest fail the stream, and with it the upload, which is then
/// never completed.
struct Verified {
    inner: reqwest::Body,
    hasher: Sha256,
    seen: u64,
    size: u64,
    digest: String,
    /// The bytes copied, or why the copy failed; read after the upload.
    outcome: Arc<Mutex<Option<Result<u64, String>>>>,
}

type StreamError = Box<dyn std::error::Error + Send + Sync>;

impl Verified {
    fn fail(&self, problem: String) -> Poll<Option<Result<Frame<Bytes>, StreamError>>> {
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(Err(problem.clone()));
        Poll::Ready(Some(Err(problem.into())))
    }
}

impl http_body::Body for Verified {
    type Data = Bytes;
    type Error = StreamError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, StreamError>>> {
        let this = self.get_mut();
        match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    this.seen += data.len() as u64;
                    if this.seen > this.size {
                        return this.fail(format!(
                            "blob {} is longer than the {} bytes its manifest says",
                            this.digest, this.size
                        ));
                    }
                    this.hasher.update(data);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => this.fail(format!("reading blob {}: {}", this.digest, super::describe(&e))),
            None => {
                let actual = format!("sha256:{}", hex::encode(std::mem::take(&mut this.hasher).finalize()));
                if this.seen != this.size {
                    return this
                        .fail(format!("blob {} is {} bytes, its manifest says {}", this.digest, this.seen, this.size));
                }
                if actual != this.digest {
                    return this.fail(format!("blob body hashes to {actual}, not {}", this.digest));
                }
                *this.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some(Ok(this.seen));
                Poll::Ready(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;

    /// Drains a verified body as hyper would: the outcome, or the error that ends the stream.
    async fn drain(bytes: &'static [u8], digest: &str, size: u64) -> (Result<u64, String>, Option<String>) {
        let outcome = Arc::new(Mutex::new(None));
        let mut body = Verified {
            inner: reqwest::Body::from(bytes),
            hasher: Sha256::new(),
            seen: 0,
            size,
            digest: digest.to_string(),
            outcome: outcome.clone(),
        };
        let mut failure = None;
        loop {
            match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    failure = Some(e.to_string());
                    break;
                }
                None => break,
            }
        }
        let outcome = outcome.lock().unwrap().take().expect("an outcome is recorded");
        (outcome, failure)
    }

    #[tokio::test]
    async fn a_copied_blob_must_hash_to_its_digest_and_have_its_size() {
        let data = b"layer bytes";
        let digest = sha256_digest(data);
        assert_eq!(drain(data, &digest, data.len() as u64).await, (Ok(data.len() as u64), None));

        let other = sha256_digest(b"other bytes");
        let (outcome, failure) = drain(data, &other, data.len() as u64).await;
        let problem = outcome.unwrap_err();
        assert!(problem.contains(&format!("hashes to {digest}, not {other}")), "{problem}");
        assert_eq!(failure.as_deref(), Some(problem.as_str()), "the stream fails, so the upload never completes");

        let (outcome, _) = drain(data, &digest, 4).await;
        assert!(outcome.unwrap_err().contains("longer than the 4 bytes"));
        let (outcome, _) = drain(data, &digest, 100).await;
        assert!(outcome.unwrap_err().contains("is 11 bytes, its manifest says 100"));
    }

    #[test]
    fn error_bodies_give_code_and_message() {
        let body = br#"{"errors":[{"code":"MANIFEST_BLOB_UNKNOWN","message":"blob unknown to registry","detail":"sha256:1"}]}"#;
        assert_eq!(error_reason(body).as_deref(), Some("MANIFEST_BLOB_UNKNOWN: blob unknown to registry"));
        assert_eq!(error_reason(b"<html>bad gateway</html>"), None);
        assert_eq!(error_reason(br#"{"errors":[]}"#), None);
        assert_eq!(error_code(body).as_deref(), Some("MANIFEST_BLOB_UNKNOWN"));
        assert_eq!(error_code(br#"{"errors":[{"code":"digest invalid\n"}]}"#), None, "only plain codes");
        assert_eq!(error_code(b"<html>bad gateway</html>"), None);
    }

    #[test]
    fn manifest_refusals_worth_another_try() {
        let refused = |code: Option<&str>| RegistryError::Rejected {
            registry: "r".into(),
            detail: "PUT manifest".into(),
            code: code.map(Into::into),
        };
        assert_eq!(refused(Some("DIGEST_INVALID")).manifest_refusal(), Some(ManifestRefusal::DigestInvalid));
        for code in ["BLOB_UNKNOWN", "MANIFEST_BLOB_UNKNOWN", "MANIFEST_UNKNOWN"] {
            assert_eq!(refused(Some(code)).manifest_refusal(), Some(ManifestRefusal::BlobUnknown), "{code}");
        }
        assert_eq!(refused(Some("MANIFEST_INVALID")).manifest_refusal(), None);
        assert_eq!(refused(None).manifest_refusal(), None);
        let down = RegistryError::Unavailable { registry: "r".into(), detail: "HTTP 503".into() };
        assert_eq!(down.manifest_refusal(), None);
    }
}
